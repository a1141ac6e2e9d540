"""`rentopt refresh`: fetch every selected provider at once and store each result on its own.

One refresh at a time per RENTOPT_HOME (a lock file; a second one says who holds it). Each
provider that answers well becomes that provider's current snapshot in one transaction; one
that fails keeps its last good snapshot, marked stale with the error; one skipped for a missing
key is left untouched and reported with the variable to set. Also `rentopt providers`: what
is registered, whether its key is set (never the key), and how fresh its prices are.

Exit status, for cron (`RefreshReport.exit_code`): 0 every selected provider refreshed, 1 some
failed (their last good prices are kept), 3 none succeeded; the CLI adds 2 for bad input (a flag,
a RENTOPT_* setting) and 4 when rentopt's own files cannot be used (RENTOPT_HOME read-only or not
a directory, the disk full, the store damaged or held by another refresh).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import IO, Literal

from rentopt.optimizer.errors import FileSystemError, StoreError
from rentopt.optimizer.paths import ensure_home, fs_error, rentopt_home
from rentopt.optimizer.redact import known_secrets, redacted_logger
from rentopt.optimizer.store import open_readonly, open_writable, store_path

LOCK_FILENAME = "refresh.lock"
Progress = Callable[[str], None]
log = redacted_logger("rentopt.refresh")

# Exit statuses of `rentopt refresh` (README "rentopt refresh"); 2 and 4 come from the CLI's
# error handling (InputError, FileSystemError/StoreError).
EXIT_OK, EXIT_SOME_FAILED, EXIT_USAGE, EXIT_NONE_SUCCEEDED, EXIT_LOCAL_FILES = 0, 1, 2, 3, 4
# Plugins that read only local files (the user's and the bundled price sheets), never the network.
LOCAL_PLUGINS = frozenset({"sheet"})

# Rejected rows listed by name in the summary, per plugin run; the rest are counted.
MAX_PROBLEMS_SHOWN = 5


@dataclass
class ProviderResult:
    """One provider's line in the refresh summary (a multi-provider plugin has one per provider)."""

    provider: str
    status: Literal["ok", "failed", "skipped", "kept"]  # kept: another plugin's newer data stays
    requested: bool  # its plugin was named explicitly (--providers)
    offers: int = 0
    new: int = 0
    changed: int = 0
    removed: int = 0
    skipped_rows: int = 0
    rejected_rows: int = 0  # rows of the plugin's run with a price outside the sane bands (optimizer/sanity.py)
    unknown_gpus: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # failed: why; skipped: which variable to set; kept: whose data stays
    had_prices: bool = False  # a failed provider keeps these earlier prices (stale)
    plugin: str | None = None  # the plugin that fetched it, when not the provider itself
    source: str | None = None
    fetched_at: datetime | None = None
    dated_by: str = "published"  # how fetched_at is known (models.DateBasis)
    per_provider: bool = False  # skipped_rows and unknown_gpus are this provider's, not its plugin's run's
    # Lines of the plugin's run the user must see: each rejected price (the first few), each
    # broken price sheet (file, line, field). Shown once per plugin run.
    problems: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.provider if not self.plugin or self.plugin == self.provider else f"{self.plugin}/{self.provider}"


@dataclass
class FxResult:
    """The exchange-rate line of the refresh summary (the ECB reference rates)."""

    status: Literal["ok", "failed"]
    last_day: date | None = None  # the newest ECB day stored (ok), or still in use (failed)
    days: int = 0
    error: str | None = None


@dataclass
class RefreshReport:
    """What one refresh did: each provider's result, the store it wrote, the exchange rates."""

    results: list[ProviderResult]
    store_path: Path
    fx: FxResult | None = None  # does not count in the exit code: offers keep their own currency

    @property
    def exit_code(self) -> int:
        """0: every selected provider refreshed (an unrequested one skipped for lack of a key
        does not count against that); 1: some did not (their last good data is kept);
        3: none succeeded. The price sheets are read from local files: their success says
        nothing about the night's fetching, so with any other plugin selected they do not count
        as one (offline, a refresh of everything exits 3, as README's table says)."""
        fetching = [r for r in self.results if (r.plugin or r.provider) not in LOCAL_PLUGINS
                    and not (r.status == "skipped" and not r.requested)]
        succeeded = [r for r in (fetching or self.results) if r.status in ("ok", "kept")]
        missed = [r for r in self.results if r.status == "failed" or (r.status == "skipped" and r.requested)]
        if not succeeded:
            return EXIT_NONE_SUCCEEDED
        return EXIT_SOME_FAILED if missed else EXIT_OK


def run_refresh(names: list[str] | None = None, *, progress: Progress | None = None, settings=None,
                transport=None) -> RefreshReport:
    """Refresh the plugins `names` (all registered ones when None) into the price store.

    Each provider's result is stored on its own: a row or a provider that cannot be stored fails
    that provider only (its last good snapshot is kept and marked stale). A file-system fault
    (disk full, read-only) stops the refresh with a FileSystemError; what was stored before it
    stays stored.
    """
    from rentopt.providers.base import construct_providers, load_providers

    if names:
        registry, broken = load_providers()
        _point_providers_to_their_plugin(names, set(registry) | {b.name for b in broken})
    # InputError for an unknown name, before any side effect; a plugin that cannot be imported
    # or constructed fails alone, named in the summary
    providers, unusable = construct_providers(names)
    requested = set(names or ())
    home = ensure_home(rentopt_home())
    with refresh_lock(home / LOCK_FILENAME), open_writable(store_path()) as store:
        if progress:
            progress(f"refreshing {', '.join(p.name for p in providers)} into {store.path}")
        outcomes, fx_outcome = asyncio.run(_fetch_all(providers, settings, transport, progress))
        results: list[ProviderResult] = []
        for plugin in unusable:
            error = f"plugin not usable: {plugin.error}"
            store.mark_plugin(plugin.name, error=error)
            results.append(ProviderResult(plugin.name, "failed", plugin.name in requested, error=error))
        for provider, outcome in zip(providers, outcomes, strict=True):
            try:
                results += _store_outcome(store, provider, outcome, provider.name in requested)
            except FileSystemError as exc:
                stored = sorted({r.label for r in results if r.status == "ok"})
                kept = f" Stored before it: {', '.join(stored)}." if stored else ""
                raise FileSystemError(f"{exc}{kept}") from None
        return RefreshReport(results, store.path, _store_fx(store, fx_outcome))


def _point_providers_to_their_plugin(names: list[str], plugins: set[str]) -> None:
    """`refresh --providers gcp`: gcp is a provider the skypilot plugin delivers; say so."""
    from rentopt.optimizer.catalog import load_provenance
    from rentopt.optimizer.errors import InputError

    unknown = [n for n in names if n not in plugins]
    if not unknown:
        return
    try:
        provenance = load_provenance()
    except (StoreError, InputError):
        return
    hints = [f"{n} is refreshed by the {provenance[n].plugin} plugin" for n in unknown
             if n in provenance and provenance[n].plugin in plugins]
    if hints:
        wanted = sorted({provenance[n].plugin for n in unknown if n in provenance and provenance[n].plugin in plugins})
        raise InputError(f"{'; '.join(hints)}: run `rentopt refresh --providers {','.join(wanted)}` "
                         "(refresh names plugins; `rentopt providers` lists them)")


def _store_outcome(store, plugin, outcome, requested: bool) -> list[ProviderResult]:
    """Store one plugin's outcome, provider by provider (each in its own transaction)."""
    secrets = provider_secrets(plugin)
    states = {s.name: s for s in store.providers()}
    mine = sorted(n for n, s in states.items() if (s.plugin or n) == plugin.name)
    base = dict(requested=requested, skipped_rows=len(outcome.skipped), rejected_rows=len(outcome.rejected),
                unknown_gpus=list(outcome.unknown_gpus), seconds=outcome.seconds, problems=_problems(plugin, outcome))
    if outcome.status != "ok" or outcome.offers is None:
        # The plugin failed (or was skipped) as a whole: every provider it delivered keeps its data.
        names = mine if plugin.multi_provider else [plugin.name]
        results = [ProviderResult(n, outcome.status, error=outcome.error, had_prices=n in states and states[n].has_data,
                                  plugin=plugin.name, **base) for n in names or [plugin.name]]
        if outcome.status == "failed":
            for n in names:  # a multi-provider plugin that never delivered has no provider to mark
                store.mark_failed(n, outcome.error or "unknown error", secrets=secrets)
            store.mark_plugin(plugin.name, error=outcome.error or "unknown error", secrets=secrets)
        return results
    groups: dict[str, list] = {}
    for offer in outcome.offers:
        groups.setdefault(offer.provider, []).append(offer)
    if not plugin.multi_provider:
        groups = {plugin.name: groups.get(plugin.name, [])}
    summary = {"skipped_rows": len(outcome.skipped), "rejected_rows": len(outcome.rejected),
               "unknown_gpus": outcome.unknown_gpus, "requests": outcome.requests, "seconds": round(outcome.seconds, 3)}
    results = []
    for name in sorted(set(groups) | set(outcome.provider_errors)):
        state = states.get(name)
        had = bool(state and state.has_data)
        if name in outcome.provider_errors:
            error = outcome.provider_errors[name]
            store.mark_failed(name, error, secrets=secrets)
            results.append(ProviderResult(name, "failed", error=error, had_prices=had, plugin=plugin.name, **base))
            continue
        offers = groups[name]
        source, fetched_at = outcome.provider_sources.get(
            name, (plugin.base_url(), outcome.fetched_at or datetime.now(timezone.utc)))
        dated_by = offers[0].dated_by if offers else "published"
        mine = dict(base)
        if plugin.multi_provider:
            mine["per_provider"] = True
            # per provider, not the plugin's totals repeated on every line: its GPU names the
            # catalog does not know (from its own offers) and the rows of its file skipped
            mine["unknown_gpus"] = sorted({o.gpu_raw for o in offers if o.gpu is None})
            counted = getattr(plugin, "skipped_per_provider", None)
            if counted is not None:
                mine["skipped_rows"] = counted.get(name, 0)
        result = ProviderResult(name, "ok", plugin=plugin.name, had_prices=had, source=source, fetched_at=fetched_at,
                                dated_by=dated_by, **mine)
        if keeper := newer_elsewhere(state, plugin.name, fetched_at, dated_by) or \
                better_dated(state, fetched_at, dated_by, source):
            result.status, result.error = "kept", keeper
        else:
            try:
                diff = store.write_snapshot(name, offers, plugin=plugin.name, fetched_at=fetched_at, source=source,
                                            secrets=secrets, summary=summary)
                result.offers, result.new, result.changed, result.removed = (
                    diff.offers, len(diff.new), len(diff.changed), len(diff.removed))
            except FileSystemError:
                raise
            except StoreError as exc:
                result.status, result.error = "failed", f"fetched, but could not be stored: {exc}"
                store.mark_failed(name, result.error, secrets=secrets)
            except Exception as exc:  # a row the store cannot hold must not stop the providers after it
                log.warning("%s: could not be stored: %s: %s", name, type(exc).__name__, exc)
                result.status = "failed"
                result.error = (f"fetched, but could not be stored ({type(exc).__name__}: {exc}); "
                                "nothing of it was written")
                store.mark_failed(name, result.error, secrets=secrets)
        results.append(result)
    if getattr(plugin, "retires_missing", False):
        # A price sheet the user deleted: its platform's offers go (its history stays).
        for name in mine:
            if name not in groups and name not in outcome.provider_errors:
                gone = store.retire_provider(name)
                results.append(ProviderResult(name, "ok", plugin=plugin.name, removed=gone, error="no longer delivered",
                                              **base))
    store.mark_plugin(plugin.name)
    return results


def _problems(plugin, outcome) -> list[str]:
    """Rows the summary names: each rejected price (up to a few), and every skip of a plugin
    whose skips are files the user wrote (price sheets)."""
    lines = [f"rejected {row}: {reason}" for row, reason in outcome.rejected[:MAX_PROBLEMS_SHOWN]]
    if len(outcome.rejected) > MAX_PROBLEMS_SHOWN:
        lines.append(f"... and {len(outcome.rejected) - MAX_PROBLEMS_SHOWN} more rows rejected for their prices")
    if getattr(plugin, "report_each_skip", False):
        lines += [reason for _, reason in outcome.skipped]
    return lines


def newer_elsewhere(state, plugin: str, fetched_at: datetime, dated_by: str = "published") -> str | None:
    """Why a provider's new data is NOT stored: another plugin's current data for the same
    provider is newer, or better dated (models.DATE_STRENGTH). One provider's offers always come
    from one plugin's snapshot (never a mix); between two plugins the newer data wins, on equal
    dates the provider's own plugin (its direct API: `vast` over SkyPilot's vast rows), and the
    refresh summary says which stayed."""
    from rentopt.optimizer.models import date_rank

    if state is None or not state.has_data or (state.plugin or state.name) == plugin or state.fetched_at is None:
        return None
    mine, theirs = date_rank(dated_by, fetched_at), date_rank(state.dated_by, state.fetched_at)
    if mine > theirs or (mine == theirs and plugin == state.name):
        return None
    return (f"kept {state.plugin or state.name}'s prices of {_stamp(state.fetched_at, state.dated_by)} "
            f"(newer or better dated than {plugin}'s of {_stamp(fetched_at, dated_by)})")


def better_dated(state, fetched_at: datetime, dated_by: str, source: str | None) -> str | None:
    """Why new prices do NOT replace the stored ones of the same plugin: those have a known date
    and the new ones a weaker (file time, unknown) or older one. A catalog copied into a folder
    not named by its date must not pass for new and replace newer prices."""
    from rentopt.optimizer.models import DATE_STRENGTH, date_rank

    if state is None or not state.has_data or state.fetched_at is None or DATE_STRENGTH[state.dated_by] == 0:
        return None
    if date_rank(dated_by, fetched_at) >= date_rank(state.dated_by, state.fetched_at):
        return None
    why = "its date is weaker" if DATE_STRENGTH[dated_by] < DATE_STRENGTH[state.dated_by] else "they are older"
    fix = " (name the catalog's folder YYYY-MM-DD to date it)" if dated_by == "file-time" else ""
    return (f"kept the stored prices of {_stamp(state.fetched_at, state.dated_by)}: the new ones "
            f"({_stamp(fetched_at, dated_by)}) do not replace them, {why}{fix}")


def _stamp(when: datetime, dated_by: str) -> str:
    if dated_by == "unknown":
        return "unknown date"
    return f"{when:%Y-%m-%d %H:%M} UTC" + (" (dated by file time)" if dated_by == "file-time" else "")


def run_import(source: str, *, transport=None, now: datetime | None = None, settings=None) -> RefreshReport:
    """`rentopt refresh --from FILE|URL`: a snapshot file (`rentopt snapshot export`) into the
    store, as a refresh would: provider by provider, each in its own transaction, the newer data
    winning (a provider whose stored prices are as new or newer keeps them), its history added.
    A bad provider section loses only that provider; a file that is not a snapshot changes nothing."""
    from rentopt.optimizer.catalog import parse_snapshot_sections
    from rentopt.optimizer.models import DATE_STRENGTH, date_rank

    started = time.perf_counter()
    raw = _read_source(source, transport, settings)
    snapshot, problems = parse_snapshot_sections(raw, now=now)  # InputError before any side effect
    refused: dict[str, list] = {}  # provider -> its SectionProblems of single rows
    for problem in problems:
        if problem.offer_id is not None:
            refused.setdefault(problem.provider, []).append(problem)
    home = rentopt_home()
    with refresh_lock(home / LOCK_FILENAME), open_writable(store_path()) as store:
        states = {s.name: s for s in store.providers()}
        results = []
        for problem in problems:
            if problem.offer_id is not None:
                continue
            had = problem.provider in states and states[problem.provider].has_data
            results.append(ProviderResult(problem.provider, "failed", True, error=f"in {source}: {problem.error}",
                                          had_prices=had, plugin="import"))
        for section in snapshot.providers:
            state = states.get(section.provider)
            # the weaker of the section's dating and its offers' own: a file exported before
            # sections carried `dated_by` says "published" over offers of unknown date
            dated_by = min((section.dated_by, *{o.dated_by for o in section.offers}), key=DATE_STRENGTH.__getitem__)
            rows = refused.get(section.provider, [])
            result = ProviderResult(section.provider, "ok", True, plugin=section.plugin, source=section.source,
                                    fetched_at=section.fetched_at, had_prices=bool(state and state.has_data),
                                    dated_by=dated_by, rejected_rows=sum(1 for r in rows if not r.history),
                                    problems=_refused_lines(rows))
            if failure := _too_many_refused(section, rows):
                result.status, result.error = "failed", f"in {source}: {failure}"
            elif state is not None and state.has_data and state.fetched_at is not None \
                    and date_rank(state.dated_by, state.fetched_at) >= date_rank(dated_by, section.fetched_at):
                result.status = "kept"
                result.error = (f"kept the stored prices of {_stamp(state.fetched_at, state.dated_by)} "
                                f"({state.plugin or state.name}; as new as or newer or better dated than the file's, "
                                f"{_stamp(section.fetched_at, dated_by)})")
            else:
                try:
                    diff = store.write_snapshot(section.provider, section.offers, plugin=section.plugin,
                                                fetched_at=section.fetched_at, source=section.source, now=now,
                                                summary={"imported_from": source})
                    result.offers, result.new, result.changed, result.removed = (
                        diff.offers, len(diff.new), len(diff.changed), len(diff.removed))
                except StoreError as exc:
                    result.status, result.error = "failed", f"could not be stored: {exc}"
            if result.status != "failed":
                try:
                    store.import_history(snapshot.history_snapshots(section), now=now)
                except StoreError as exc:
                    result.status, result.error = "failed", f"its history could not be stored: {exc}"
            result.seconds = time.perf_counter() - started
            results.append(result)
        return RefreshReport(results, store.path)


def _refused_lines(rows: list) -> list[str]:
    """The summary's lines for rows refused at the door: the first few by name, then a count."""
    lines = [f"refused {row_shown(r.offer_id)}: {r.error}" for r in rows[:MAX_PROBLEMS_SHOWN]]
    if len(rows) > MAX_PROBLEMS_SHOWN:
        lines.append(f"... and {len(rows) - MAX_PROBLEMS_SHOWN} more rows refused")
    return lines


def row_shown(text: str) -> str:
    from rentopt.optimizer.row_check import shown

    return shown(text)


def _too_many_refused(section, rows: list) -> str | None:
    """A section the import fails as a whole (its provider keeps its stored prices), by the rule
    a plugin's response is held to (providers/base.py check_offers): no row left, or more than
    half of them refused (a damaged or foreign file, not a few bad rows)."""
    from rentopt.providers.base import MAX_SKIPPED_SHARE

    offers = [r for r in rows if not r.history]
    total = len(section.offers) + len(offers)
    if offers and not section.offers:
        return f"every row was refused (first: {offers[0].error})"
    if len(offers) > MAX_SKIPPED_SHARE * total:
        return f"{len(offers)} of {total} rows were refused (first: {offers[0].error}); nothing of it was stored"
    return None


def _read_source(source: str, transport, settings=None) -> bytes:
    from rentopt.optimizer.errors import InputError

    if source.startswith(("http://", "https://")):
        from rentopt.providers.team_catalog import ProviderError, fetch_snapshot_bytes

        try:
            return fetch_snapshot_bytes(source, settings, transport=transport)
        except ProviderError as exc:
            raise InputError(f"cannot fetch the snapshot {source}: {exc.reason}") from None
    from rentopt.optimizer.limits import SNAPSHOT_BYTES, TooLarge, limit, read_file

    try:
        return read_file(Path(source).expanduser(), limit(SNAPSHOT_BYTES), f"the snapshot file {source}")
    except TooLarge as exc:
        raise InputError(str(exc)) from None
    except OSError as exc:
        raise InputError(f"cannot read the snapshot file {source}: {exc.strerror or exc}") from None


async def _fetch_all(providers, settings, transport, progress: Progress | None):
    """providers.base.fetch_all over one shared client, reporting each provider as it finishes,
    and the ECB exchange rates at the same time."""
    from rentopt.providers.base import fetch_all
    from rentopt.providers.ecb import fetch_reference_rates

    on_done = (lambda outcome: progress(describe_outcome(outcome))) if progress else None
    outcomes, fx = await asyncio.gather(fetch_all(providers, settings, transport, on_done=on_done),
                                        _bounded_rates(settings, transport, fetch_reference_rates))
    return outcomes, fx


async def _bounded_rates(settings, transport, fetch_reference_rates):
    """The ECB fetch, held to the same time budget as each provider (a dripping or hung rate
    server must not hold the night's refresh open either)."""
    from rentopt.providers.base import HttpSettings
    from rentopt.providers.ecb import FxOutcome

    settings = settings or HttpSettings.from_env()
    try:
        return await asyncio.wait_for(fetch_reference_rates(settings, transport), settings.budget_s)
    except TimeoutError:
        return FxOutcome("failed", error=f"gave up after the {settings.budget_s:g} s time budget")


def _store_fx(store, outcome) -> FxResult:
    """Store fetched ECB rates; on failure say which rates quotes keep using."""
    if outcome.status == "ok":
        try:
            days = len({day for day, _, _ in outcome.rows})
            store.write_fx_rates(outcome.rows, fetched_at=outcome.fetched_at, source=outcome.source)
            return FxResult("ok", outcome.last_day, days)
        except StoreError as exc:
            outcome.error = f"fetched, but could not be stored: {exc}"
    kept = store.fx_rates()
    last = max((day for day, _, _ in kept.rows), default=None) if kept else None
    return FxResult("failed", last, error=outcome.error)


def describe_outcome(outcome) -> str:
    if outcome.status == "ok":
        return f"{outcome.provider}: {len(outcome.offers or []):,} offers in {outcome.seconds:.1f} s"
    return f"{outcome.provider}: {outcome.status}: {outcome.error}"


def provider_secrets(provider) -> list[str]:
    """Every credential value the provider could send (and tokens learnt during the fetch), to
    scrub from anything stored."""
    return sorted({*provider.credentials(), *known_secrets()}, key=len, reverse=True)


# --------------------------------------------------------------------------------------------
# One refresh at a time


@contextmanager
def refresh_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive, non-blocking lock on `path`; a second holder gets a StoreError naming the first.

    A lock that cannot be taken because of the file system (read-only, full, not a directory)
    is a FileSystemError naming the path and the fix.
    """
    ensure_home(path.parent)
    try:
        fp = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole refresh
    except OSError as exc:
        raise fs_error(exc, path, "create the lock file") from None
    try:
        if not _try_lock(fp):
            fp.seek(0)
            holder = fp.read().strip() or "unknown"
            raise StoreError(
                f"another `rentopt refresh` (pid {holder}) is already updating {path.parent}; "
                "let it finish, then run again if you still need to"
            )
        try:
            fp.seek(0)
            fp.truncate()
            fp.write(str(os.getpid()))
            fp.flush()
        except OSError as exc:
            raise fs_error(exc, path, "write the lock file") from None
        yield
    finally:
        try:
            fp.close()  # closing the file releases the lock
        except OSError:
            pass  # the pid could not be flushed (disk full): the lock is released all the same


def _try_lock(fp: IO[str]) -> bool:
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        fp.seek(0)  # msvcrt locks bytes from the current position: always lock the first one
        try:
            msvcrt.locking(fp.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fp.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Rendering


REPORT_HEADERS = ("provider", "status", "offers", "new", "changed", "removed", "skipped rows", "refused rows",
                  "unknown GPUs", "seconds")


def format_report(report: RefreshReport) -> str:
    from tabulate import tabulate

    rows = []
    shown: set[str] = set()
    for r in report.results:
        counts = [r.offers, r.new, r.changed, r.removed] if r.status == "ok" else ["-"] * 4
        # Skipped rows, unknown GPUs and time belong to the plugin's run: shown on its first line only.
        run = [r.skipped_rows, r.rejected_rows, len(r.unknown_gpus), f"{r.seconds:.1f}"] \
            if (r.plugin or r.provider) not in shown else ["", "", "", ""]
        if r.per_provider and (r.plugin or r.provider) in shown:
            run = [r.skipped_rows, "", len(r.unknown_gpus), ""]
        shown.add(r.plugin or r.provider)
        rows.append([r.label, r.status, *counts, *run])
    from rentopt.optimizer.text import one_line, table_cells

    lines = [tabulate(table_cells(rows), headers=REPORT_HEADERS, disable_numparse=True)]
    unknown_said: set[str] = set()
    problems_said: set[str] = set()
    for r in report.results:
        if r.status == "failed":
            kept = "its last good prices are kept, marked stale" if r.had_prices else "it has no earlier prices"
            lines.append(f"{r.label}: failed: {r.error} ({kept})")
        elif r.status == "skipped":
            lines.append(f"{r.label}: skipped: {r.error}")
        elif r.status == "kept":
            lines.append(f"{r.label}: not stored: {r.error}")
        elif r.error:
            lines.append(f"{r.label}: {r.error}")
        if r.status == "ok" and r.fetched_at is not None and r.source and r.plugin and r.plugin != r.provider:
            day = f"{r.fetched_at:%Y-%m-%d}"
            lines.append(f"{r.label}: {r.source}" if day in r.source else f"{r.label}: prices of {day} from {r.source}")
        run_name = r.plugin or r.provider
        if (r.rejected_rows or r.problems) and run_name not in problems_said:
            problems_said.add(run_name)
            if r.rejected_rows:
                lines.append(f"{run_name}: {r.rejected_rows} row(s) rejected: a price outside the sane range, an "
                             "unknown GPU id or currency, a bad name or date (not stored; see `rentopt refresh --help`)")
            lines += [f"{run_name}: {problem}" for problem in r.problems]
        if r.unknown_gpus and (r.per_provider or (r.plugin or r.provider) not in unknown_said):
            unknown_said.add(r.plugin or r.provider)
            lines.append(f"{r.label if r.per_provider else r.plugin or r.provider}: GPU names not in the catalog "
                         f"(kept as unknown): {', '.join(r.unknown_gpus)}")
    if report.fx is not None:
        lines.append(describe_fx(report.fx))
    lines.append(f"price store: {report.store_path}")
    # every line after the table is one inert line: a name or an error may hold a newline or escape
    return "\n".join([lines[0], *(one_line(line) for line in lines[1:])])


def report_json(report: RefreshReport) -> str:
    """The refresh summary as JSON: `exit_code`, `store`, one object per provider, and the
    exchange-rate fetch."""
    providers = [
        {
            "provider": r.provider, "plugin": r.plugin or r.provider, "status": r.status, "requested": r.requested,
            "offers": r.offers if r.status == "ok" else None,
            "new": r.new if r.status == "ok" else None,
            "changed": r.changed if r.status == "ok" else None,
            "removed": r.removed if r.status == "ok" else None,
            "skipped_rows": r.skipped_rows, "rejected_rows": r.rejected_rows,
            "unknown_gpus": r.unknown_gpus, "seconds": round(r.seconds, 3), "error": r.error,
            "counts_are": "provider" if r.per_provider else "plugin run",
            "dated_by": r.dated_by if r.status in ("ok", "kept") else None,
            "kept_earlier_prices": r.had_prices if r.status not in ("ok", "kept") else None,
            "problems": r.problems,
        }
        for r in report.results
    ]
    fx = None
    if report.fx is not None:
        fx = {"status": report.fx.status, "last_day": report.fx.last_day.isoformat() if report.fx.last_day else None,
              "days": report.fx.days, "error": report.fx.error}
    return json.dumps({"exit_code": report.exit_code, "store": str(report.store_path), "providers": providers,
                       "exchange_rates": fx}, indent=2)


def describe_fx(fx: FxResult) -> str:
    if fx.status == "ok":
        return f"exchange rates: ECB reference rates stored up to {fx.last_day:%Y-%m-%d} ({fx.days} business days)"
    kept = (f"quotes keep the stored rates up to {fx.last_day:%Y-%m-%d}" if fx.last_day
            else "quotes use the ECB rates shipped with rentopt")
    return f"exchange rates: not updated: {fx.error} ({kept})"


# --------------------------------------------------------------------------------------------
# `rentopt providers`


@dataclass
class ProviderOverview:
    """One plugin (the unit `refresh --providers` names): key status and its last run."""

    name: str
    key: str  # "yes", "no", "no (optional)", "not needed"; never the key itself
    key_env: str | None
    registered: bool
    offers: int | None  # in the price store, over all its providers; None when it has none
    fetched_at: datetime | None
    last_success_at: datetime | None
    stale: bool
    last_error: str | None
    last_error_at: datetime | None
    delivers: list[str] = field(default_factory=list)  # the providers whose current prices it delivered


@dataclass
class OfferSource:
    """One provider (what plans, --providers and offers name): where its prices come from now."""

    provider: str
    plugin: str | None
    origin: str  # "store", "bundled", "sheet"
    offers: int
    fetched_at: datetime | None
    source: str
    stale: bool
    why: str = ""


@dataclass
class Overview:
    """What `rentopt providers` shows: each plugin, the broken ones, the store and offer sources."""

    providers: list[ProviderOverview]
    broken: list  # providers.base.BrokenPlugin
    store_path: Path
    has_store: bool
    sources: list[OfferSource] = field(default_factory=list)


def provider_overview() -> Overview:
    """Registered plugins with their key status and last run, and per provider where its
    prices come from (the store, the bundled snapshot or a user's sheet). Read-only."""
    from rentopt.optimizer.catalog import load_provenance
    from rentopt.providers.base import load_providers

    registry, broken = load_providers()
    store = open_readonly(store_path())
    states, plugin_states = {}, {}
    if store is not None:
        with store:
            states = {s.name: s for s in store.providers()}
            plugin_states = {p.name: p for p in store.plugins()}
    rows = []
    for name in sorted(set(registry) | set(plugin_states)):
        cls = registry.get(name)
        run = plugin_states.get(name)
        mine = sorted(n for n, s in states.items() if (s.plugin or n) == name and s.has_data)
        own = states.get(name)
        rows.append(ProviderOverview(
            name=name, key=_key_status(cls()) if cls else "-", key_env=cls.key_env if cls else None,
            registered=cls is not None,
            offers=sum(states[n].offers_count for n in mine) if mine else None,
            fetched_at=max((states[n].fetched_at for n in mine if states[n].fetched_at), default=None),
            last_success_at=run.last_success_at if run else (own.last_success_at if own else None),
            stale=run.stale if run else (own.stale if own else False),
            last_error=run.last_error if run else (own.last_error if own else None),
            last_error_at=run.last_error_at if run else (own.last_error_at if own else None),
            delivers=mine,
        ))
    try:
        sources = [OfferSource(p.provider, p.plugin, p.origin, p.offers, p.fetched_at, p.source, p.stale, p.why)
                   for p in sorted(load_provenance().values(), key=lambda p: p.provider)]
    except StoreError:
        sources = []
    return Overview(rows, list(broken), store_path(), store is not None, sources)


def _key_status(provider) -> str:
    if not provider.key_env:
        return "not needed"
    if provider.key_required:
        return "yes" if provider.skip_reason() is None else "no"
    return "yes" if provider.api_key() else "no (optional)"


def _when(dt: datetime | None) -> str | None:
    return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if dt else None


def overview_json(overview: Overview) -> str:
    """`rentopt providers --format json`: each plugin (key status, never the key; its last run),
    each provider's source, broken plugins and the store."""
    return json.dumps({
        "store": str(overview.store_path),
        "has_store": overview.has_store,
        "providers": [
            {"provider": p.name, "registered": p.registered, "key": p.key, "key_env": p.key_env,
             "offers": p.offers, "fetched_at": _when(p.fetched_at), "last_success_at": _when(p.last_success_at),
             "stale": p.stale, "last_error": p.last_error, "last_error_at": _when(p.last_error_at),
             "delivers": p.delivers}
            for p in overview.providers
        ],
        "sources": [
            {"provider": s.provider, "plugin": s.plugin, "origin": s.origin, "offers": s.offers,
             "fetched_at": _when(s.fetched_at), "source": s.source, "stale": s.stale, "why": s.why}
            for s in overview.sources
        ],
        "broken_plugins": [{"name": b.name, "error": b.error} for b in overview.broken],
    }, indent=2)


def format_overview(overview: Overview, now: datetime | None = None) -> str:
    from tabulate import tabulate

    from rentopt.optimizer.models import age_words
    from rentopt.optimizer.offers_io import age

    now = now or datetime.now(timezone.utc)
    rows = []
    for p in overview.providers:
        success = f"{p.last_success_at:%Y-%m-%d %H:%M} ({age(p.last_success_at, now)} ago)" if p.last_success_at else "never"
        error = f"{p.last_error_at:%Y-%m-%d %H:%M}: {p.last_error}" if p.last_error and p.last_error_at else ""
        rows.append([p.name + ("" if p.registered else " (not installed)"), p.key,
                     "-" if p.offers is None else p.offers, ", ".join(p.delivers) or "-", success,
                     "yes" if p.stale else "no", error])
    from rentopt.optimizer.text import one_line, table_cells

    lines = ["plugins (what `rentopt refresh --providers` names):",
             tabulate(table_cells(rows), headers=("plugin", "key set", "offers", "delivers", "last success (UTC)",
                                                  "stale", "last error"), disable_numparse=True)]
    if overview.sources:
        where = {"store": "price store", "bundled": "bundled snapshot", "sheet": "your price sheet"}
        table = [[s.provider, s.plugin or "-", where.get(s.origin, s.origin), s.offers,
                  f"{s.fetched_at:%Y-%m-%d}" if s.fetched_at else "-",
                  age_words(s.fetched_at, now) if s.fetched_at else "-", "yes" if s.stale else "no",
                  s.source + (f" ({s.why})" if s.why else "")]
                 for s in overview.sources]
        lines += ["", "providers (what quotes, offers and --providers name) and where their prices come from:",
                  tabulate(table_cells(table), headers=("provider", "plugin", "from", "offers", "prices of", "age",
                                                        "stale", "source"), disable_numparse=True)]
    for b in overview.broken:
        lines.append(one_line(f"broken plugin {b.name}: {b.error}"))
    if not overview.has_store:
        lines.append(f"no price store at {overview.store_path} yet: quotes use the bundled snapshot until `rentopt refresh`")
    return "\n".join(lines)
