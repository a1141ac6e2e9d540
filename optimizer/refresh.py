"""`rentopt refresh`: fetch every selected provider at once and store each result on its own.

One refresh at a time per RENTOPT_HOME (a lock file; a second one says who holds it). Each
provider that answers well becomes that provider's current snapshot in one transaction; one
that fails keeps its last good snapshot, marked stale with the error; one skipped for a missing
key is left untouched and reported with the variable to set. Also `rentopt providers`: what
is registered, whether its key is set (never the key), and how fresh its prices are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from pathlib import Path
from typing import IO, Literal

from rentopt.optimizer.errors import StoreError
from rentopt.optimizer.paths import rentopt_home
from rentopt.optimizer.store import open_readonly, open_writable, store_path

LOCK_FILENAME = "refresh.lock"
Progress = Callable[[str], None]


@dataclass
class ProviderResult:
    """One provider's line in the refresh summary."""

    provider: str
    status: Literal["ok", "failed", "skipped"]
    requested: bool  # named explicitly (--providers)
    offers: int = 0
    new: int = 0
    changed: int = 0
    removed: int = 0
    skipped_rows: int = 0
    unknown_gpus: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # failed: why; skipped: which variable to set
    had_prices: bool = False  # a failed provider keeps these earlier prices (stale)


@dataclass
class FxResult:
    """The exchange-rate line of the refresh summary (the ECB reference rates)."""

    status: Literal["ok", "failed"]
    last_day: date | None = None  # the newest ECB day stored (ok), or still in use (failed)
    days: int = 0
    error: str | None = None


@dataclass
class RefreshReport:
    results: list[ProviderResult]
    store_path: Path
    fx: FxResult | None = None  # does not count in the exit code: offers keep their own currency

    @property
    def exit_code(self) -> int:
        """0: every selected provider refreshed (an unrequested one skipped for lack of a key
        does not count against that); 1: some did not (their last good data is kept);
        2: none succeeded."""
        succeeded = [r for r in self.results if r.status == "ok"]
        missed = [r for r in self.results if r.status == "failed" or (r.status == "skipped" and r.requested)]
        if not succeeded:
            return 2
        return 1 if missed else 0


def run_refresh(names: list[str] | None = None, *, progress: Progress | None = None, settings=None,
                transport=None) -> RefreshReport:
    """Refresh `names` (all registered providers when None) into the price store."""
    from rentopt.providers.base import get_providers

    providers = get_providers(names)  # InputError for an unknown name, before any side effect
    requested = set(names or ())
    home = rentopt_home()
    with refresh_lock(home / LOCK_FILENAME), open_writable(store_path()) as store:
        if progress:
            progress(f"refreshing {', '.join(p.name for p in providers)} into {store.path}")
        outcomes, fx_outcome = asyncio.run(_fetch_all(providers, settings, transport, progress))
        results = []
        had_prices = {state.name for state in store.providers() if state.has_data}
        for provider, outcome in zip(providers, outcomes, strict=True):
            secrets = provider_secrets(provider)
            result = ProviderResult(provider.name, outcome.status, provider.name in requested,
                                    skipped_rows=len(outcome.skipped), unknown_gpus=list(outcome.unknown_gpus),
                                    seconds=outcome.seconds, error=outcome.error,
                                    had_prices=provider.name in had_prices)
            if outcome.status == "ok" and outcome.offers is not None:
                try:
                    diff = store.write_snapshot(
                        provider.name, outcome.offers, fetched_at=outcome.fetched_at or datetime.now(timezone.utc),
                        source=provider.base_url(), secrets=secrets,
                        summary={"skipped_rows": len(outcome.skipped), "unknown_gpus": outcome.unknown_gpus,
                                 "requests": outcome.requests, "seconds": round(outcome.seconds, 3)},
                    )
                    result.offers, result.new, result.changed, result.removed = (
                        diff.offers, len(diff.new), len(diff.changed), len(diff.removed))
                except StoreError as exc:
                    result.status, result.error = "failed", f"fetched, but could not be stored: {exc}"
            if result.status == "failed":
                store.mark_failed(provider.name, result.error or "unknown error", secrets=secrets)
            results.append(result)
        return RefreshReport(results, store.path, _store_fx(store, fx_outcome))


async def _fetch_all(providers, settings, transport, progress: Progress | None):
    """providers.base.fetch_all over one shared client, reporting each provider as it finishes,
    and the ECB exchange rates at the same time."""
    from rentopt.providers.base import fetch_all
    from rentopt.providers.ecb import fetch_reference_rates

    on_done = (lambda outcome: progress(describe_outcome(outcome))) if progress else None
    outcomes, fx = await asyncio.gather(fetch_all(providers, settings, transport, on_done=on_done),
                                        fetch_reference_rates(settings, transport))
    return outcomes, fx


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
    """Every credential value the provider could send, to scrub from anything stored."""
    envs = {provider.key_env, *getattr(provider, "credential_envs", ())} - {None}
    return [v for env in sorted(envs) if (v := os.environ.get(env))]


# --------------------------------------------------------------------------------------------
# One refresh at a time


@contextmanager
def refresh_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive, non-blocking lock on `path`; a second holder gets a StoreError naming the first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fp = open(path, "a+", encoding="utf-8")  # noqa: SIM115 - held for the whole refresh
    try:
        if not _try_lock(fp):
            fp.seek(0)
            holder = fp.read().strip() or "unknown"
            raise StoreError(
                f"another `rentopt refresh` (pid {holder}) is already updating {path.parent}; "
                "let it finish, then run again if you still need to"
            )
        fp.seek(0)
        fp.truncate()
        fp.write(str(os.getpid()))
        fp.flush()
        yield
    finally:
        fp.close()  # closing the file releases the lock


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


REPORT_HEADERS = ("provider", "status", "offers", "new", "changed", "removed", "skipped rows", "unknown GPUs", "seconds")


def format_report(report: RefreshReport) -> str:
    from tabulate import tabulate

    rows = []
    for r in report.results:
        counts = [r.offers, r.new, r.changed, r.removed] if r.status == "ok" else ["-"] * 4
        rows.append([r.provider, r.status, *counts, r.skipped_rows, len(r.unknown_gpus), f"{r.seconds:.1f}"])
    lines = [tabulate(rows, headers=REPORT_HEADERS, disable_numparse=True)]
    for r in report.results:
        if r.status == "failed":
            kept = "its last good prices are kept, marked stale" if r.had_prices else "it has no earlier prices"
            lines.append(f"{r.provider}: failed: {r.error} ({kept})")
        elif r.status == "skipped":
            lines.append(f"{r.provider}: skipped: {r.error}")
        if r.unknown_gpus:
            lines.append(f"{r.provider}: GPU names not in the catalog (kept as unknown): {', '.join(r.unknown_gpus)}")
    if report.fx is not None:
        lines.append(describe_fx(report.fx))
    lines.append(f"price store: {report.store_path}")
    return "\n".join(lines)


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
    name: str
    key: str  # "yes", "no", "no (optional)", "not needed"; never the key itself
    key_env: str | None
    registered: bool
    offers: int | None  # in the price store; None when it has none from this provider
    fetched_at: datetime | None
    last_success_at: datetime | None
    stale: bool
    last_error: str | None
    last_error_at: datetime | None


@dataclass
class Overview:
    providers: list[ProviderOverview]
    broken: list  # providers.base.BrokenPlugin
    store_path: Path
    has_store: bool


def provider_overview() -> Overview:
    """Registered providers with their key status and their state in the store (read-only)."""
    from rentopt.providers.base import load_providers

    registry, broken = load_providers()
    store = open_readonly(store_path())
    states = {}
    if store is not None:
        with store:
            states = {s.name: s for s in store.providers()}
    rows = []
    for name in sorted(set(registry) | set(states)):
        cls = registry.get(name)
        state = states.get(name)
        rows.append(ProviderOverview(
            name=name, key=_key_status(cls()) if cls else "-", key_env=cls.key_env if cls else None,
            registered=cls is not None,
            offers=state.offers_count if state and state.has_data else None,
            fetched_at=state.fetched_at if state else None,
            last_success_at=state.last_success_at if state else None,
            stale=state.stale if state else False,
            last_error=state.last_error if state else None,
            last_error_at=state.last_error_at if state else None,
        ))
    return Overview(rows, list(broken), store_path(), store is not None)


def _key_status(provider) -> str:
    if not provider.key_env:
        return "not needed"
    if provider.key_required:
        return "yes" if provider.skip_reason() is None else "no"
    return "yes" if provider.api_key() else "no (optional)"


def format_overview(overview: Overview, now: datetime | None = None) -> str:
    from tabulate import tabulate

    from rentopt.optimizer.offers_io import age

    now = now or datetime.now(timezone.utc)
    rows = []
    for p in overview.providers:
        success = f"{p.last_success_at:%Y-%m-%d %H:%M} ({age(p.last_success_at, now)} ago)" if p.last_success_at else "never"
        error = f"{p.last_error_at:%Y-%m-%d %H:%M}: {p.last_error}" if p.last_error and p.last_error_at else ""
        rows.append([p.name + ("" if p.registered else " (not installed)"), p.key,
                     "-" if p.offers is None else p.offers, success, "yes" if p.stale else "no", error])
    lines = [tabulate(rows, headers=("provider", "key set", "offers", "last success (UTC)", "stale", "last error"),
                      disable_numparse=True)]
    for b in overview.broken:
        lines.append(f"broken plugin {b.name}: {b.error}")
    if not overview.has_store:
        lines.append(f"no price store at {overview.store_path} yet: quotes use the bundled snapshot until `rentopt refresh`")
    return "\n".join(lines)
