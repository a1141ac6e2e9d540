"""Where offers come from: an --offers-file, or per provider the newest of the local price
store, the bundled snapshot and the user's own price sheets.

Precedence (`load_offers`):
1. `--offers-file` when given: exactly the offers in it, nothing else.
2. otherwise, PROVIDER BY PROVIDER (gcp, vast, jygpu, ...):
   - a price sheet of that platform in `$RENTOPT_HOME/sheets/`: the user's own prices, read
     now (no refresh needed);
   - else the newer of the price store's current snapshot (its last good one, marked stale
     when the last refresh failed) and the snapshot bundled with rentopt
     (`data/snapshot.json.gz`, built from published catalogs by tools/build_snapshot.py);
     on equal dates the store's.
   One provider's offers always come from one of these, never a mix; `provenance` says which
   for each provider, with its source and date, and every output prints it. A provider that
   was never refreshed keeps its bundled offers, so a refresh that fails offline never hides
   a provider from a quote.

The bundled snapshot and `rentopt snapshot export` share one file format (`SNAPSHOT_FORMAT`):
per provider, the plugin, source and date of its offers, the offers, and its price history.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from decimal import Decimal
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from rentopt.optimizer.bundled import SNAPSHOT_RESOURCE, Section
from rentopt.optimizer.errors import InputError, StoreError
from rentopt.optimizer.models import (UNKNOWN_DATE, DateBasis, Offer, OfferQuery, Origin, PriceOrigin, PriceSource,
                                     age_words, date_rank, date_words, hour_price)
from rentopt.optimizer.paths import no_store_at, store_path


if TYPE_CHECKING:
    from rentopt.optimizer.currency import FxTable
    from rentopt.optimizer.offer_table import OfferTable
    from rentopt.optimizer.store import HistoryColumns, HistorySnapshot, Store

SNAPSHOT_FORMAT = 2
SortKey = Literal["price", "gpu", "provider", "memory"]
# Where one provider's offers in an OfferSet come from.
ProviderOrigin = PriceOrigin


def open_readonly(path: Path) -> Store | None:
    """The price store at `path` opened for reading (store.open_readonly), or None when there is
    none. Where there is certainly none, store.py and sqlite3 are not even imported: a quote of
    the bundled snapshot reads no SQL (tests/test_quote_imports.py)."""
    if no_store_at(path):
        return None
    from rentopt.optimizer.store import open_readonly as open_store

    return open_store(path)


def load_fx(overrides: Mapping[str, Decimal] | None = None, config_path: Path | None = None) -> FxTable:
    """The exchange rates quotes and reports convert with: the ECB rates `rentopt refresh` stored
    (looked for only where there may be a store), then the shipped ECB file (`FxTable.load`:
    config file and --fx overrides win)."""
    from rentopt.optimizer.currency import FxTable, bundled_history

    stored = None
    if not no_store_at(store_path()):
        from rentopt.optimizer.store import stored_fx_history

        stored = stored_fx_history()
    return FxTable.load(overrides, config_path, histories=[h for h in (stored, bundled_history()) if h is not None])


# The snapshot file's models are built (pydantic's schema and validator) when a file is first read
# or written, not at import: a quote from the bundled snapshot's columns or the store reads none.
_BUILT_WHEN_USED = ConfigDict(defer_build=True)


class SnapshotHistory(BaseModel):
    """One past snapshot of a provider: its price-history rows, not its offers."""

    model_config = _BUILT_WHEN_USED

    fetched_at: datetime
    source: str
    offers: int
    rows: list[tuple[str, int, int, str, int, str, str]]  # gpu, gpus, spot, currency, offers, min, median per GPU-hour


class SnapshotProvider(BaseModel):
    """One provider's section: where its offers were published and when, and its history."""

    model_config = _BUILT_WHEN_USED

    provider: str
    plugin: str
    fetched_at: datetime
    source: str  # where the prices were published ("SkyPilot catalog ... (URL)")
    offers: list[Offer]
    history: list[SnapshotHistory] = []
    note: str = ""
    dated_by: DateBasis = "published"  # how fetched_at is known (models.DateBasis)


class SnapshotFile(BaseModel):
    """The file format of data/snapshot.json.gz and of `rentopt snapshot export`."""

    model_config = _BUILT_WHEN_USED

    format: int
    created_at: datetime
    description: str = ""
    providers: list[SnapshotProvider]

    @property
    def offers(self) -> list[Offer]:
        return [o for p in self.providers for o in p.offers]

    def history_snapshots(self, section: SnapshotProvider) -> list[HistorySnapshot]:
        from rentopt.optimizer.store import HistorySnapshot

        return [HistorySnapshot(section.provider, section.plugin, h.fetched_at, h.source, h.offers,
                                tuple(tuple(r) for r in h.rows)) for h in section.history]


@dataclass(frozen=True)
class Provenance:
    """Where one provider's offers in an OfferSet came from, and how fresh they are."""

    provider: str
    fetched_at: datetime | None
    source: str
    offers: int
    stale: bool = False  # the last refresh failed; these are the last good prices
    last_error: str | None = None
    last_error_at: datetime | None = None
    origin: ProviderOrigin = "store"
    plugin: str | None = None
    why: str = ""  # why this origin was chosen over another one holding the same provider
    dated_by: DateBasis = "published"  # "file-time", "unknown": every line says so

    @property
    def known_date(self) -> datetime | None:
        """fetched_at, or None when the date is unknown."""
        return None if self.dated_by == "unknown" else self.fetched_at

    def describe(self, now: datetime | None = None) -> str:
        """One line: "gcp: SkyPilot catalog of 2026-05-20 (bundled snapshot), 195 days old";
        "..., dated by file time, 2 days old"; "...; date unknown"."""
        now = now or datetime.now(timezone.utc)
        where = {"store": "from the price store", "bundled": "from the bundled snapshot",
                 "sheet": "from your price sheet", "offers-file": "from the offers file"}[self.origin]
        when = f"{self.known_date:%Y-%m-%d}" if self.known_date else ""
        source = self.source if when and when in self.source else f"{self.source}, prices of {when}" if when else self.source
        if self.dated_by == "unknown":
            old = "; date unknown" if "date unknown" not in source else ""
        elif self.fetched_at:
            by_file = ", dated by file time" if self.dated_by == "file-time" and "dated by file time" not in source else ""
            old = f"{by_file}, {age_words(self.fetched_at, now)} old"
        else:
            old = ""
        text = f"{self.provider}: {source}; {where}{old}"
        if self.stale:
            text += f"; STALE: the last refresh failed ({self.last_error})"
        if self.why:
            text += f"; {self.why}"
        return text


@dataclass
class LazyRows:
    """Rows of a lazy set as planning columns, with the way to their full offers: the bundled
    snapshot's (validated only for the rows a quote keeps: bundled.py) and the user's sheets'."""

    part: Any  # offer_table.Part
    resolve: Callable[[Sequence[int]], list[Offer]]  # rows of `part` -> their full offers, in that order
    _where: dict[tuple[str, str], int] | None = field(default=None, init=False, repr=False, compare=False)  # key -> row

    @property
    def n(self) -> int:
        return self.part.n

    @classmethod
    def of_offers(cls, offers: Sequence[Offer]) -> LazyRows:
        from rentopt.optimizer.offer_table import OfferTable

        table = OfferTable.from_offers(offers)
        return cls(table.part(), table.offers)

    @classmethod
    def joined(cls, pieces: Sequence[LazyRows]) -> LazyRows:
        """The pieces' rows one after the other."""
        from rentopt.optimizer.offer_table import merge_parts

        if len(pieces) == 1:
            return pieces[0]
        starts = [0]
        for piece in pieces:
            starts.append(starts[-1] + piece.n)

        def resolve(rows: Sequence[int]) -> list[Offer]:
            found: dict[int, Offer] = {}
            for piece, start, end in zip(pieces, starts, starts[1:]):
                mine = sorted({r for r in rows if start <= r < end})
                if mine:
                    found.update(zip(mine, piece.resolve([r - start for r in mine])))
            return [found[r] for r in rows]

        return cls(merge_parts([p.part for p in pieces]), resolve)

    def keys(self) -> list[tuple[str, str]]:
        return _keys(self.part, self.n)

    def load(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Offer]:
        if not keys:  # a store's rows only: no index of these rows' keys is needed
            return {}
        if self._where is None:  # built once: every row's key, a few thousand of them
            self._where = {k: r for r, k in enumerate(self.keys())}
        where = self._where
        return {o.key: o for o in self.resolve([where[k] for k in dict.fromkeys(keys) if k in where])}

    def table(self) -> OfferTable:
        return self.part.table(self.resolve)

    def oldest(self) -> datetime | None:
        return _oldest_in(self.part.columns.get("fetched_at"), self.part.n)


@dataclass
class StoreColumns:
    """A lazy set's offers from the price store, as planning columns: its full offers are read
    only for the rows a quote keeps, and only while the store still holds these snapshots. The
    columns hold the set's other rows (bundled, sheets: `others`) after the stored ones, merged
    as they were read: a million stored rows are copied once, never again to join a few thousand."""

    path: Path
    snapshots: dict[str, int]  # provider -> the snapshot id the columns are of
    part: Any  # offer_table.Part: the `n` stored rows, then those of `others`
    n: int
    others: LazyRows

    def keys(self) -> list[tuple[str, str]]:
        return _keys(self.part, self.part.n)

    def load(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Offer]:
        """The full offers of `keys`, all of them: the stored ones from the snapshots the columns are of."""
        stored = sorted({k for k in keys if k[0] in self.snapshots})
        found = self.others.load([k for k in keys if k[0] not in self.snapshots])
        if not stored:
            return found
        store = open_readonly(self.path)
        if store is None:
            raise StoreError("the price store disappeared while quoting; run the quote again")
        with store:
            loaded = {o.key: o for o in store.load_current_offers(stored, self.snapshots)}
        if len(loaded) != len(stored):  # the snapshots are the same (else load_current_offers refused)
            missing = [f"{p}/{o}" for p, o in stored if (p, o) not in loaded]
            why = store.warnings()[0] if store.warnings() else "they are not in the store"
            raise StoreError(f"{len(missing)} stored offer(s) a plan needs cannot be read ({', '.join(missing[:3])}"
                             f"{', ...' if len(missing) > 3 else ''}): {why}")
        return loaded | found

    def table(self) -> OfferTable:
        """The columns as a table; its resolver reads the stored rows' full offers from the store."""
        n, others = self.n, self.others

        def resolve(rows: Sequence[int]) -> list[Offer]:
            # the keys of the kept rows only (a quote keeps a few hundred of a million)
            loaded = self.load([(table.provider[r], table.offer_id[r]) for r in rows if r < n])
            theirs = dict(zip((r for r in rows if r >= n), others.resolve([r - n for r in rows if r >= n])))
            return [loaded[(table.provider[r], table.offer_id[r])] if r < n else theirs[r] for r in rows]

        table = self.part.table(resolve)
        return table

    def oldest(self) -> datetime | None:
        return _oldest_in(self.part.columns.get("fetched_at"), self.part.n)


def _keys(part: Any, n: int) -> list[tuple[str, str]]:
    from rentopt.optimizer.offer_table import as_list

    return list(zip(as_list(part.columns["provider"], part.n, "provider")[:n], part.columns["offer_id"][:n]))


def _oldest_in(when: Any, n: int) -> datetime | None:
    """The oldest fetched_at among a column's `n` rows. A coded column's values may include some
    no row holds any more (a filtered table keeps its parent's values), so only those in use count."""
    import numpy as np

    from rentopt.optimizer.offer_table import Const

    if isinstance(when, Const):
        return when.value if n else None
    if hasattr(when, "codes"):
        used = np.bincount(when.codes, minlength=len(when.values)) > 0
        return min((v for v, u in zip(when.values, used.tolist()) if u), default=None)
    return min(list(when or []), default=None)


@dataclass
class TableColumns:
    """A lazy set's offers from an offers file, as the table read from it: full offers are built
    only for the rows a quote keeps (offers_reader)."""

    whole: OfferTable

    @property
    def n(self) -> int:
        return self.whole.n

    def keys(self) -> list[tuple[str, str]]:
        return list(zip(self.whole.provider, self.whole.offer_id))

    def load(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Offer]:
        where = {k: r for r, k in enumerate(self.keys())}
        rows = [where[k] for k in keys if k in where]
        return {o.key: o for o in self.whole.offers(rows)}

    def table(self) -> OfferTable:
        return self.whole

    def oldest(self) -> datetime | None:
        return _oldest_in(self.whole.fetched_at, self.whole.n)


@dataclass
class OfferSet:
    """Offers to plan with and where they came from.

    A set loaded with `lazy=True` holds its offers as planning columns (`columns`; `offers` is
    empty): the planner ranks `table()`, and the table reads the few full offers it keeps from
    their source (the store, the bundled snapshot's offers). Every other set holds all its offers.
    """

    offers: list[Offer]
    origin: Origin
    provenance: dict[str, Provenance]
    prices_as_of: datetime | None  # the oldest fetched_at among `offers`
    label: str  # one line for the top of every output
    notes: list[str] = field(default_factory=list)
    # Lines a user must see whatever the output format (stored rows left out: Store.warnings)
    warnings: list[str] = field(default_factory=list)
    columns: StoreColumns | LazyRows | TableColumns | None = None  # lazy sets: every offer, as columns
    # requested providers with no prices anywhere, each with the fix ("runpod: no prices in the
    # store; `rentopt refresh --providers runpod` (RUNPOD_API_KEY), or ...")
    missing: list[str] = field(default_factory=list)
    empty_reason: str = ""  # `rentopt offers` with no rows: why
    # `rentopt offers --offers-file F --format json|csv`: the rows shown, as the file's columns
    # (offers_writer writes them without an Offer per row); `offers` is then empty
    listed: Any = None

    def shown(self) -> int:
        """How many offers `rentopt offers` shows."""
        return len(self.offers) if self.listed is None else len(self.listed)

    def keys(self) -> list[tuple[str, str]]:
        """Every offer's (provider, offer id), the store's first."""
        mine = [o.key for o in self.offers]
        return mine if self.columns is None else self.columns.keys() + mine

    def sources(self, now: datetime | None = None) -> list[str]:
        """Per provider, where its prices come from (one line each, sorted by provider)."""
        return [self.provenance[p].describe(now) for p in sorted(self.provenance)]

    def price_sources(self, now: datetime | None = None) -> list[PriceSource]:
        """The same per provider, as data (the quote's JSON `sources`)."""
        return [PriceSource(provider=p.provider, source=p.source, fetched_at=p.known_date, origin=p.origin,
                            stale=p.stale, dated_by=p.dated_by, line=p.describe(now))
                for p in (self.provenance[name] for name in sorted(self.provenance))]

    def table(self) -> OfferTable:
        """The set as an OfferTable for the planner's first pass (the store's columns first,
        then the other offers); its resolver gives the full offers of the rows the first pass
        keeps, read from the store only for those."""
        from rentopt.optimizer.offer_table import OfferTable

        if self.columns is not None:  # a lazy set's offers are all in its columns
            return self.columns.table()
        return OfferTable.from_offers(self.offers)

    def all_offers(self) -> list[Offer]:
        """Every offer of the set as a full Offer (a lazy set reads them from the store now)."""
        if self.columns is None:
            return self.offers
        keys = self.columns.keys()
        loaded = self.columns.load(keys)
        return [loaded[k] for k in keys] + self.offers

    def offers_by_key(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Offer]:
        """Full offers for (provider, offer id) keys. For a lazy set, the store's are read from
        the store while it still holds the snapshots the set was read from (a refresh in between
        is reported, never mixed in)."""
        wanted = set(keys)
        found = {o.key: o for o in self.offers if o.key in wanted}
        if self.columns is None:
            return found
        from_store = wanted - set(found)
        return found | (self.columns.load(sorted(from_store)) if from_store else {})


def load_offers(providers: list[str] | None = None, offers_file: Path | None = None, *,
                query: OfferQuery | None = None, lazy: bool = False) -> OfferSet:
    """The offers to plan with (see the module docstring for where each provider's come from).

    `providers` narrows to those providers; `query` filters further (in SQL for the store).
    `lazy=True` returns the offers as planning rows (see OfferSet); the quote uses it.
    """
    query = query or OfferQuery()
    if providers is not None:
        query = _with_providers(query, providers)
    requested = list(query.providers) if query.providers is not None else None
    if offers_file is not None:
        if lazy and query.region is None and query.max_hour_price is None:
            return _table_from_offers_file(Path(offers_file), query, requested)
        return _from_offers_file(Path(offers_file), query, requested)
    with ExitStack() as reading:
        # One connection and one read transaction for the providers' states and their offers:
        # a refresh finishing in between must not pair one night's provenance with another's prices.
        store = open_readonly(store_path())
        states = []
        if store is not None:
            reading.enter_context(store)
            reading.enter_context(store.reading())
            states = [s for s in store.providers() if s.has_data]
        offers, columns, chosen, sheet_notes = _gather(store, states, query, requested, lazy)
        warnings = store.warnings() if store is not None else []
        sheet_notes = [*sheet_notes, *warnings]
    oldest = min([o.fetched_at for o in offers] + ([when] if columns and (when := columns.oldest()) else []),
                 default=None)
    if oldest == UNKNOWN_DATE:  # the oldest KNOWN date; providers of unknown date are named in the label
        oldest = min((p.known_date for p in chosen.values() if p.known_date), default=None)
    undated = sorted(p.provider for p in chosen.values() if p.dated_by == "unknown")
    by_file = sorted(p.provider for p in chosen.values() if p.dated_by == "file-time")
    origins = {p.origin for p in chosen.values()}
    # the set's origin says where the quote's prices come from: a set of the user's own sheets
    # alone is neither the store nor the bundled snapshot (and `rentopt refresh` would not help)
    origin: Origin = "store" if "store" in origins else "sheet" if origins == {"sheet"} else "bundled"
    notes = list(sheet_notes)
    for p in chosen.values():
        if p.stale:
            notes.append(f"{p.provider}: the last refresh failed ({p.last_error}); showing its last good prices "
                         f"from {_when(p.fetched_at)}")
    if origins == {"bundled"}:
        day = min((p.known_date for p in chosen.values() if p.known_date), default=None)
        label = f"bundled snapshot of published prices{f' (oldest {day:%Y-%m-%d})' if day else ''} " \
                "(run `rentopt refresh` for current prices)"
    else:
        parts = [f"{k} {sum(1 for p in chosen.values() if p.origin == k)}" for k in ("store", "bundled", "sheet")
                 if any(p.origin == k for p in chosen.values())]
        label = (f"price store {store_path()}" if origins == {"store"} else
                 f"price sheets in {store_path().parent / 'sheets'}" if origins == {"sheet"} else
                 f"providers from {', '.join(parts)}" if parts else
                 "price store and bundled snapshot (none of the requested providers has prices)")
        label += f", prices as of {_when(oldest)}" if oldest else ""
        if any(p.stale for p in chosen.values()):
            label += " (some stale: see notes)"
    if undated:
        label += f"; date unknown: {', '.join(undated)}"
    if by_file:
        label += f"; dated by file time: {', '.join(by_file)}"
    missing = missing_providers(requested, chosen) if requested else []
    return OfferSet(offers, origin, chosen, oldest, label, notes, columns=columns, missing=missing, warnings=warnings)


def missing_providers(requested: Sequence[str], chosen: dict[str, Provenance]) -> list[str]:
    """One line per requested provider that has no prices in the store, the bundled snapshot or
    a sheet, with how to get them: its own plugin (and the key it needs), or SkyPilot's published
    catalog when that carries the cloud. A plugin's name standing for its providers
    (`--providers sheet`) is missing only when none of them has prices."""
    lines = []
    for name in requested:
        if name in chosen or any(p.plugin == name for p in chosen.values()):
            continue
        lines.append(f"{name}: no prices in the store; {refresh_hint(name)}")
    return lines


def refresh_hint(name: str) -> str:
    """How to get a provider's prices: "`rentopt refresh --providers runpod` (RUNPOD_API_KEY), or
    `rentopt refresh` for the published catalog"."""
    from rentopt.providers.base import load_providers
    from rentopt.providers.skypilot import URL_CLOUDS

    plugins = load_providers()[0]
    ways = []
    if name in plugins:
        key = getattr(plugins[name], "key_env", None)
        ways.append(f"`rentopt refresh --providers {name}`" + (f" ({key})" if key else ""))
    if name in URL_CLOUDS:
        ways.append("`rentopt refresh` for the published catalog (SkyPilot's, which carries it)")
    return ", or ".join(ways) if ways else "`rentopt providers` lists what can deliver prices"


def _gather(store: Any, states: list, query: OfferQuery, requested: list[str] | None, lazy: bool
            ) -> tuple[list[Offer], StoreColumns | LazyRows | None, dict[str, Provenance], list[str]]:
    """load_offers' choice of origin per provider and the offers read from each (the store's
    inside the caller's read transaction): full offers, or for a lazy read (no region or price
    filter) planning columns."""
    bundled, sheets, sheet_notes = _other_sources(states)
    _check_known(requested, {s.name for s in states} | set(bundled.sections) | set(sheets),
                 "the price store or the bundled snapshot")
    chosen = _choose(states, bundled.sections, sheets)
    if query.providers is not None:
        # A plugin's name stands for the providers it delivers (`--providers sheet`: autodl, jygpu, ...).
        wanted = {n for n in query.providers if n in chosen}
        wanted |= {p for p, prov in chosen.items() if prov.plugin in query.providers and p not in query.providers
                   and not any(n == p for n in query.providers)}
        chosen = {n: p for n, p in chosen.items() if n in wanted}
        query = replace(query, providers=tuple(sorted(wanted)))
    from_store = sorted(n for n, p in chosen.items() if p.origin == "store")
    # the other providers in name order, runs of one origin (bundled or sheet) together
    runs: list[tuple[str, list[str]]] = []
    for name, prov in sorted(chosen.items()):
        if prov.origin == "store":
            continue
        if runs and runs[-1][0] == prov.origin:
            runs[-1][1].append(name)
        else:
            runs.append((prov.origin, [name]))
    if store is None and from_store:  # cannot happen: a provider comes from the store only when it is open
        raise StoreError("the price store disappeared while reading it; run the command again")
    store_query = replace(query, providers=tuple(from_store))
    if not (lazy and query.region is None and query.max_hour_price is None):
        offers: list[Offer] = []
        for origin, names in runs:
            offers += bundled.offers(names, query) if origin == "bundled" else _sheet_offers(sheets, names, query)
        return (store.load_offers(store_query) if from_store else []) + offers, None, chosen, sheet_notes
    others = LazyRows.joined([bundled.rows(names, query) if origin == "bundled" else
                              LazyRows.of_offers(_sheet_offers(sheets, names, query)) for origin, names in runs]
                             or [LazyRows.of_offers([])])
    columns = _store_columns(store, store_query, others) if from_store else others
    return [], columns, chosen, sheet_notes


def _sheet_offers(sheets: dict[str, list[Offer]], names: Sequence[str], query: OfferQuery) -> list[Offer]:
    return [o for name in names for o in sheets[name] if query.matches(o)]


@dataclass(frozen=True)
class _Bundled:
    """The bundled snapshot as a source: its sections, and its offers read either in full
    (the snapshot file) or as planning columns (bundled.py's columns file, when it is there)."""

    sections: dict[str, Any]  # provider -> bundled.Section
    columns: Any = None  # bundled.BundledColumns

    @staticmethod
    def read(*, store_has_data: bool) -> _Bundled:
        from rentopt.optimizer import bundled

        columns = bundled.load()
        if columns is not None:
            return _Bundled({s.provider: s for s in columns.sections}, columns)
        snapshot = _bundled_or_none(store_has_data=store_has_data)
        return _Bundled({p.provider: _section(p) for p in snapshot.providers} if snapshot else {})

    def offers(self, names: Sequence[str], query: OfferQuery) -> list[Offer]:
        """`names`' offers that `query` keeps, in full."""
        sections = {p.provider: p for p in bundled_snapshot().providers}
        return [o for name in names for o in sections[name].offers if query.matches(o)]

    def rows(self, names: Sequence[str], query: OfferQuery) -> LazyRows:
        """`names`' offers that `query` keeps (it has no region or price filter), as planning
        columns: from the columns file, else (none, or a damaged one) from the snapshot."""
        if self.columns is None:
            return LazyRows.of_offers(self.offers(names, query))
        try:
            part, resolve = self.columns.part(names)
        except (ValueError, TypeError, KeyError):
            return LazyRows.of_offers(self.offers(names, query))
        if not _narrows_rows(query):
            return LazyRows(part, resolve)
        kept = _matching(part.table(resolve), replace(query, providers=None))
        return LazyRows(kept.part(), kept.offers)


def _section(p: SnapshotProvider) -> Section:
    return Section(p.provider, p.plugin, p.fetched_at, p.source, len(p.offers), p.dated_by)


def _other_sources(states: list) -> tuple[_Bundled, dict[str, list[Offer]], list[str]]:
    """The bundled snapshot and the user's sheets (with a note per unusable sheet)."""
    bundled = _Bundled.read(store_has_data=bool(states))
    sheets, sheet_notes = _user_sheets()
    return bundled, sheets, sheet_notes


def load_provenance() -> dict[str, Provenance]:
    """Per provider, where a quote takes its prices from (`load_offers(...).provenance`) without
    reading a single stored offer: what `rentopt providers` and refresh's hints need."""
    store = open_readonly(store_path())
    states = []
    if store is not None:
        with store:
            states = [s for s in store.providers() if s.has_data]
    bundled, sheets, _ = _other_sources(states)
    return _choose(states, bundled.sections, sheets)


def _store_columns(store: Any, query: OfferQuery, others: LazyRows) -> StoreColumns:
    """The store's offers matching `query` (no region or price filter) as planning columns,
    the rows of `others` (other sources') after them."""
    from rentopt.optimizer.offer_table import merge_parts

    extra = others.part
    if _narrows_rows(query):
        snapshots, stored = store.load_plan_part(query.providers or ())
        stored = _filtered(stored, query)
        return StoreColumns(store.path, snapshots, merge_parts([stored, extra]), stored.n, others)
    snapshots, part = store.load_plan_part(query.providers or (), extra=extra)
    return StoreColumns(store.path, snapshots, part, part.n - extra.n, others)


def _narrows_rows(query: OfferQuery) -> bool:
    """Whether `query` drops rows within a provider (what `_matching` checks besides the provider)."""
    return any(v is not None for v in (query.gpus, query.min_gpus, query.min_gpu_memory_gb, query.spot, query.currency))


def _filtered(part: Any, query: OfferQuery) -> Any:
    """The rows of `part` that `query` keeps (see `_matching`)."""
    return _matching(part.table(), replace(query, providers=None)).part()


def _choose(states: Sequence, bundled: dict[str, Any], sheets: dict[str, list[Offer]]) -> dict[str, Provenance]:
    """Per provider, the one origin its offers come from (see the module docstring)."""
    chosen: dict[str, Provenance] = {}
    in_store = {s.name: s for s in states}
    for name in sorted(set(in_store) | set(bundled) | set(sheets)):
        state, section = in_store.get(name), bundled.get(name)
        if name in sheets:
            mine = sheets[name]
            replaced = [w for w, there in (("price store", state), ("bundled snapshot", section)) if there]
            chosen[name] = Provenance(name, max((o.fetched_at for o in mine), default=None),
                                      mine[0].source if mine else "price sheet", len(mine), origin="sheet",
                                      plugin="sheet", why=f"replaces the {' and '.join(replaced)}" if replaced else "")
        elif state is not None and (section is None or date_rank(state.dated_by, state.fetched_at)
                                    >= date_rank(section.dated_by, section.fetched_at)):
            why = f"newer than the bundled snapshot's of {date_words(section.fetched_at, section.dated_by, age=False)}" \
                if section else ""
            chosen[name] = Provenance(name, state.fetched_at, state.source or "", state.offers_count, state.stale,
                                      state.last_error, state.last_error_at, origin="store", plugin=state.plugin, why=why,
                                      dated_by=state.dated_by)  # type: ignore[arg-type]
        elif section is not None:
            why = ""
            if state is not None:
                # a store's prices dated only by file time (or not at all) never replace known dates
                why = (f"newer or better dated than the price store's of "
                       f"{date_words(state.fetched_at, state.dated_by, age=False)}")
            chosen[name] = Provenance(name, section.fetched_at, section.source, section.offers, origin="bundled",
                                      plugin=section.plugin, why=why, dated_by=section.dated_by)
    return chosen


def _user_sheets() -> tuple[dict[str, list[Offer]], list[str]]:
    """The user's own price sheets in $RENTOPT_HOME/sheets/, read now, by platform; and one
    note per sheet that could not be used."""
    from rentopt.optimizer.paths import rentopt_home

    folder = rentopt_home() / "sheets"
    if not folder.is_dir() or not any(folder.iterdir()):
        return {}, []  # the common case: no import of the plugin machinery (httpx) at all
    from rentopt.providers.sheet import read_user_sheets

    return read_user_sheets(folder)


def _bundled_or_none(*, store_has_data: bool) -> SnapshotFile | None:
    try:
        return bundled_snapshot()
    except StoreError:
        if store_has_data:
            return None  # an installation without a bundled snapshot still quotes from its store
        raise


def _with_providers(query: OfferQuery, providers: list[str]) -> OfferQuery:
    names = tuple(dict.fromkeys(p.strip() for p in providers if p.strip()))
    if query.providers is not None:
        names = tuple(n for n in names if n in query.providers)
    return replace(query, providers=names)


def _from_offers_file(path: Path, query: OfferQuery, requested: list[str] | None) -> OfferSet:
    from rentopt.optimizer.offers_io import read_offers_file

    everything = read_offers_file(path)
    _check_known(requested, {o.provider for o in everything}, f"offers file {path}")
    offers = [o for o in everything if query.matches(o)]
    provenance = {}
    for name in sorted({o.provider for o in everything}):
        mine = [o for o in everything if o.provider == name]
        # the provider's weakest dating, and its oldest date (date_rank): one price of unknown
        # date makes the provider's date unknown, as the oldest price dates a dated one
        weakest = min(mine, key=lambda o: date_rank(o.dated_by, o.fetched_at))
        provenance[name] = Provenance(name, weakest.fetched_at, str(path), len(mine), origin="offers-file",
                                      dated_by=weakest.dated_by)
    return _file_set(offers, provenance, _oldest(offers), path)


def _file_set(offers: list[Offer], provenance: dict[str, Provenance], oldest: datetime | None, path: Path,
              **more: Any) -> OfferSet:
    """An offers file's OfferSet: its label names the providers of unknown date or dated by file
    time, and its date is the oldest KNOWN one (as `load_offers` has them)."""
    label = f"offers file {path}"
    for what, basis in (("date unknown", "unknown"), ("dated by file time", "file-time")):
        if names := sorted(p.provider for p in provenance.values() if p.dated_by == basis):
            label += f"; {what}: {', '.join(names)}"
    if oldest == UNKNOWN_DATE:
        oldest = min((p.known_date for p in provenance.values() if p.known_date), default=None)
    return OfferSet(offers, "offers-file", provenance, oldest, label, **more)


def _table_from_offers_file(path: Path, query: OfferQuery, requested: list[str] | None) -> OfferSet:
    """`_from_offers_file` as columns: the quote's way to read a large file (offers_reader)."""
    from rentopt.optimizer.offers_reader import read_offers_table

    whole = read_offers_table(path)
    provenance = _file_provenance(whole, path, requested)
    mine = TableColumns(_matching(whole, query))
    return _file_set([], provenance, mine.oldest(), path, columns=mine)


def _file_provenance(whole: OfferTable, path: Path, requested: list[str] | None) -> dict[str, Provenance]:
    """Per provider of an offers file read as a table, its Provenance (as `_from_offers_file`
    has it: its offers' oldest date, how many; of unknown date when one of its prices is, whose
    date in the table is UNKNOWN_DATE); an unknown requested provider is refused."""
    import numpy as np

    p_codes, names = whole.category("provider")
    _check_known(requested, set(names), f"offers file {path}")
    w_codes, whens = whole.category("fetched_at")
    provenance = {}
    counts = np.bincount(p_codes, minlength=len(names))
    keys = p_codes.astype(np.int64) * (len(whens) + 1) + w_codes
    span = len(names) * (len(whens) + 1)
    # the (provider, date) pairs present, ascending: counted where there can be few (no sort of every row)
    pairs = np.flatnonzero(np.bincount(keys, minlength=span)) if span <= 4 * len(keys) + 1024 else np.unique(keys)
    oldest: dict[str, datetime] = {}
    for pair in pairs:
        name, when = names[int(pair) // (len(whens) + 1)], whens[int(pair) % (len(whens) + 1)]
        oldest[name] = min(when, oldest.get(name, when))
    for i, name in sorted(enumerate(names), key=lambda x: x[1]):
        provenance[name] = Provenance(name, oldest[name], str(path), int(counts[i]), origin="offers-file",
                                      dated_by="unknown" if oldest[name] == UNKNOWN_DATE else "published")
    return provenance


def _matching(table: OfferTable, query: OfferQuery) -> OfferTable:
    """The rows of `table` that `query` keeps (see `_matching_rows`)."""
    keep = _matching_rows(table, query)
    return table if keep.all() else table.take(keep)


def _matching_rows(table: OfferTable, query: OfferQuery) -> Any:
    """Which rows of `table` `query` keeps (a boolean array): its provider, GPU, count, memory,
    spot and currency conditions, as OfferQuery.matches has them (region and price need more
    than the table: offers_reader.Listing has them)."""
    import numpy as np

    keep = np.ones(table.n, dtype=bool)
    for name, wanted in (("provider", query.providers), ("gpu", query.gpus), ("currency", query.currency)):
        if wanted is not None:
            codes, values = table.category(name)
            allowed = {wanted} if isinstance(wanted, str) else set(wanted)
            keep &= np.array([v in allowed for v in values], dtype=bool)[codes] if values else False
    if query.min_gpus is not None:
        keep &= table.gpus >= query.min_gpus
    if query.min_gpu_memory_gb is not None:
        keep &= table.gpu_memory_gb >= query.min_gpu_memory_gb
    if query.spot is not None:
        keep &= table.spot == query.spot
    return keep


def _check_known(requested: list[str] | None, present: set[str], where: str) -> None:
    """A provider name that is neither registered nor in the data is a typo: say so."""
    if not requested:
        return
    from importlib.metadata import entry_points  # only when a provider is named (a slow import)

    registered = {ep.name for ep in entry_points(group="rentopt.providers")}
    unknown = [n for n in requested if n not in registered and n not in present]
    if unknown:
        known = ", ".join(sorted(registered | present))
        raise InputError(f"unknown provider {', '.join(unknown)} (not registered and not in {where}); known providers: {known}")


def _oldest(offers: Sequence[Offer]) -> datetime | None:
    """The oldest KNOWN date among `offers`."""
    return min((o.fetched_at for o in offers if o.dated_by != "unknown"), default=None)


def _when(when: datetime | None) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if when else "never"


# --------------------------------------------------------------------------------------------
# History, from where each provider's offers came


@dataclass
class HistoryView:
    """Price history of an OfferSet's providers, each read from where its offers came: the
    store's snapshots for a store provider, the bundled snapshot's published history for a
    bundled one. Open with `open_history`; close it (or use `with`)."""

    provenance: dict[str, Provenance]
    store: Any = None  # an open read-only Store, when a provider comes from it
    bundled: dict[str, list[SnapshotHistory]] = field(default_factory=dict)  # per bundled provider

    def __enter__(self) -> HistoryView:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.store is not None:
            self.store.close()

    def _origin(self, provider: str) -> str | None:
        p = self.provenance.get(provider)
        return p.origin if p else None

    def snapshot_summaries(self, provider: str) -> list[dict]:
        """Each snapshot of the provider, oldest first: {"fetched_at", "offers", ...}."""
        origin = self._origin(provider)
        if origin == "store" and self.store is not None:
            # Only the current plugin's snapshots: a move between two plugins' data is no move.
            plugin = self.provenance[provider].plugin or provider
            return [s for s in self.store.snapshot_summaries(provider) if s["plugin"] == plugin]
        if origin == "bundled" and provider in self.bundled:
            return [{"fetched_at": h.fetched_at, "offers": h.offers} for h in self.bundled[provider]]
        return []

    def price_history_columns(self, gpus: Sequence[str], since: datetime | None = None) -> HistoryColumns:
        """The price history of each of `gpus` at every provider of the set, as columns
        (store.HistoryColumns): a store provider's points of its current plugin, a bundled one's
        from the bundled snapshot; one GPU's points oldest first, as `Store.price_history` orders
        them."""
        from rentopt.optimizer.store import HistoryColumns

        points = HistoryColumns()
        if self.store is not None:
            # Only the current plugin's snapshots of a store provider (as snapshot_summaries).
            plugins = {name: p.plugin or name for name, p in self.provenance.items() if p.origin == "store"}
            points = self.store.price_history_columns(gpus, since=since, plugins=plugins)
        wanted = set(gpus)
        rows = []
        for name, history in self.bundled.items():
            if self._origin(name) != "bundled":
                continue
            rows += [(g, h.fetched_at, name, n, bool(spot), ccy, lo) for h in history if since is None
                     or h.fetched_at >= since for g, n, spot, ccy, _, lo, _ in h.rows if g in wanted]
        if rows:
            rows.sort(key=lambda r: r[:5])  # stable: by GPU, then as Store.price_history orders one GPU's
            gpu, when, name, count, spot, currency, low = (list(column) for column in zip(*rows))
            points += HistoryColumns(name, when, gpu, count, spot, currency, [Decimal(x) for x in low],
                                     [None] * len(rows))
        return points

    def states(self) -> dict:
        """The store's ProviderStates of the store providers (errors, last success)."""
        if self.store is None:
            return {}
        return {s.name: s for s in self.store.providers() if self._origin(s.name) == "store"}


def open_history(offers: OfferSet) -> HistoryView:
    """The history behind `offers` (see HistoryView); read-only."""
    origins = {p.origin for p in offers.provenance.values()}
    store = open_readonly(store_path()) if "store" in origins else None
    return HistoryView(offers.provenance, store, bundled_history() if "bundled" in origins else {})


class _HistorySection(BaseModel):
    """A snapshot section read for its history only: its offers are skipped, not validated."""

    model_config = _BUILT_WHEN_USED

    provider: str
    history: list[SnapshotHistory] = []


class _HistoryOnly(BaseModel):
    """A snapshot file read for its sections' history only."""

    model_config = _BUILT_WHEN_USED

    format: int
    providers: list[_HistorySection]


_HISTORY_ONLY = TypeAdapter(_HistoryOnly)


def bundled_history() -> dict[str, list[SnapshotHistory]]:
    """Each bundled provider's published history, read from the bundled snapshot without
    validating its offers (history is all a report reads of it: the offers come from the
    columns file). A snapshot this cannot read is read as `bundled_snapshot` reads it, which
    says what is wrong."""
    try:
        raw = resources.files("rentopt.optimizer").joinpath(SNAPSHOT_RESOURCE).read_bytes()
        found: _HistoryOnly | None = _HISTORY_ONLY.validate_json(_decompress(raw))
    except (OSError, InputError, ValidationError):
        found = None
    if found is None or found.format != SNAPSHOT_FORMAT:
        return {p.provider: p.history for p in bundled_snapshot().providers}
    return {p.provider: p.history for p in found.providers}


# --------------------------------------------------------------------------------------------
# The snapshot file (bundled, exported, imported)


@lru_cache(maxsize=1)
def bundled_snapshot() -> SnapshotFile:
    """The snapshot shipped inside the package (read once per process)."""
    try:
        raw = resources.files("rentopt.optimizer").joinpath(SNAPSHOT_RESOURCE).read_bytes()
    except (FileNotFoundError, OSError):
        raise StoreError(
            "this installation of rentopt has no bundled price snapshot and there is no price store yet; "
            "run `rentopt refresh` to fetch prices"
        ) from None
    try:
        return parse_snapshot(raw)
    except InputError as exc:
        raise StoreError(f"the bundled price snapshot is damaged ({exc}); reinstall rentopt or run `rentopt refresh`") from None


_SNAPSHOT = TypeAdapter(SnapshotFile)
_SECTION = TypeAdapter(SnapshotProvider)


def parse_snapshot(raw: bytes) -> SnapshotFile:
    """A snapshot file (gzip or plain JSON) in one validation pass; InputError if it is not one."""
    text = _decompress(raw)
    try:
        snapshot = _SNAPSHOT.validate_json(text)
    except ValidationError as exc:
        version = _format_of(text)
        if version is not None and version != SNAPSHOT_FORMAT:
            raise InputError(f"snapshot format {version}; this rentopt reads format {SNAPSHOT_FORMAT}") from None
        first = exc.errors()[0]
        raise InputError(f"not a rentopt snapshot ({'.'.join(str(p) for p in first['loc'])}: {first['msg']})") from None
    if snapshot.format != SNAPSHOT_FORMAT:
        raise InputError(f"snapshot format {snapshot.format}; this rentopt reads format {SNAPSHOT_FORMAT}")
    return snapshot


@dataclass
class SectionProblem:
    """A provider section of a snapshot file that cannot be imported (`offer_id` None), or one
    row of it refused at the door (optimizer/row_check.py) while the rest of the section stands."""

    provider: str
    error: str
    offer_id: str | None = None
    history: bool = False  # a row of the section's price history, not an offer


_OFFER = TypeAdapter(Offer)


def parse_snapshot_sections(raw: bytes, now: datetime | None = None) -> tuple[SnapshotFile, list[SectionProblem]]:
    """Like `parse_snapshot`, but one provider's bad section only loses that provider, and one
    bad row only that row: the file's other sections and rows are returned, with a problem per
    bad section or row (what `refresh --from` needs). Every row passes the door's checks
    (optimizer/row_check.py) as a plugin's would; so does each price-history row."""
    from rentopt.optimizer.row_check import RowCheck, provider_name_problem

    text = _decompress(raw)
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"not a rentopt snapshot: not valid JSON ({exc})") from None
    except RecursionError:
        raise InputError("not a rentopt snapshot: JSON nested too deeply") from None
    if not isinstance(data, dict) or not isinstance(data.get("providers"), list):
        raise InputError("not a rentopt snapshot: no 'providers' list")
    if data.get("format") != SNAPSHOT_FORMAT:
        raise InputError(f"snapshot format {data.get('format')!r}; this rentopt reads format {SNAPSHOT_FORMAT}")
    door = RowCheck(now=now)
    sections, problems = [], []
    for i, item in enumerate(data["providers"]):
        name = item.get("provider") if isinstance(item, dict) and isinstance(item.get("provider"), str) else f"section {i + 1}"
        rows = item.get("offers") if isinstance(item, dict) else None
        try:
            if not isinstance(rows, list):
                raise InputError("offers: not a list of offers")
            section = _SECTION.validate_python({**item, "offers": []})
            if problem := provider_name_problem(section.provider) or provider_name_problem(section.plugin):
                raise InputError(f"provider: {problem}")
            if problem := door.date_problem(section.fetched_at):
                raise InputError(f"fetched_at: {problem}")
        except ValidationError as exc:
            first = exc.errors()[0]
            problems.append(SectionProblem(name, f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"))
            continue
        except InputError as exc:
            problems.append(SectionProblem(name, str(exc)))
            continue
        seen: set[str] = set()
        for j, row in enumerate(rows):
            offer_id = row.get("offer_id") if isinstance(row, dict) and isinstance(row.get("offer_id"), str) else None
            label = f"offer {j + 1}" if offer_id is None else offer_id
            try:
                offer = _OFFER.validate_python(row)
            except ValidationError as exc:
                first = exc.errors()[0]
                msg = str(first["msg"]).removeprefix("Value error, ")
                problems.append(SectionProblem(section.provider, f"{'.'.join(str(p) for p in first['loc'])}: {msg}", label))
                continue
            if offer.provider != section.provider:
                reason = "provider: the offer belongs to another provider than its section"
            elif offer.offer_id in seen:
                reason = "offer_id: appears twice in the section"
            else:
                reason = door.reason(offer)
            if reason:
                problems.append(SectionProblem(section.provider, reason, label))
                continue
            seen.add(offer.offer_id)
            section.offers.append(offer)
        history = []
        for past in section.history:
            label = f"history {past.fetched_at.isoformat()}"
            if reason := door.date_problem(past.fetched_at):
                problems.append(SectionProblem(section.provider, f"fetched_at: {reason}", label, history=True))
                continue
            kept = []
            for row in past.rows:
                if reason := _history_row_problem(row, door):
                    problems.append(SectionProblem(section.provider, f"{row[0]!r}: {reason}", label, history=True))
                else:
                    kept.append(row)
            history.append(past if len(kept) == len(past.rows) else past.model_copy(update={"rows": kept}))
        section.history = history
        sections.append(section)
    try:
        created = datetime.fromisoformat(str(data.get("created_at")).replace("Z", "+00:00"))
    except ValueError:
        created = datetime.now(timezone.utc)
    if created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    return SnapshotFile(format=SNAPSHOT_FORMAT, created_at=created, description=str(data.get("description", "")),
                        providers=sections), problems


def _history_row_problem(row: tuple, door: Any) -> str | None:
    """Why a price-history row (gpu, gpus, spot, currency, offers, min, median per GPU-hour)
    cannot be kept: a GPU id the catalog lacks, a count below 1, a price that is no number or
    outside the sane band of its currency (or a currency with no exchange rate)."""
    from rentopt.optimizer.row_check import known_gpu
    from rentopt.optimizer.sanity import UnknownCurrency

    from rentopt.optimizer.row_check import OFFER_LIMITS

    gpu, gpus, spot, currency, offers, low, mid = row
    if not known_gpu(gpu) or gpu is None:
        return f"gpu: {gpu!r} is not a GPU id rentopt knows"
    if not OFFER_LIMITS["gpus"][0] <= gpus <= OFFER_LIMITS["gpus"][1] or not 1 <= offers <= 10**9 or spot not in (0, 1):
        return f"a count outside the sane range (gpus {gpus}, offers {offers}, spot {spot})"
    try:
        for amount in (Decimal(low), Decimal(mid)):
            if problem := door.bands.problem("gpu_hour", amount, currency):
                return problem
    except (ArithmeticError, ValueError):
        return f"a price that is not a number ({low!r}, {mid!r})"
    except UnknownCurrency as exc:
        return str(exc)
    return None


def _decompress(raw: bytes) -> bytes:
    """A snapshot's JSON: gzip decompressed as a stream, stopping at the snapshot byte limit
    (optimizer/limits.py: a 4 MB bomb once took 8.3 GB), or plain JSON as it is."""
    from rentopt.optimizer.limits import SNAPSHOT_BYTES, TooLarge, gunzip, limit

    if raw[:2] == b"\x1f\x8b":
        try:
            return gunzip(raw, limit(SNAPSHOT_BYTES), "the snapshot")
        except TooLarge as exc:
            raise InputError(str(exc)) from None
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"not a rentopt snapshot: a damaged gzip file ({exc})") from None
    return raw


def _format_of(text: bytes) -> Any:
    try:
        data = json.loads(text)
    except (UnicodeDecodeError, ValueError):
        return None
    return data.get("format") if isinstance(data, dict) else None


def encode_snapshot(snapshot: SnapshotFile) -> bytes:
    """Deterministic bytes: compact JSON, gzip without a timestamp or file name."""
    text = _SNAPSHOT.dump_json(snapshot, exclude_defaults=False)
    return gzip.compress(text, compresslevel=9, mtime=0)


def snapshot_json(snapshot: SnapshotFile) -> bytes:
    """The snapshot as indented, uncompressed JSON."""
    return _SNAPSHOT.dump_json(snapshot, indent=1)


def export_snapshot(description: str = "", now: datetime | None = None) -> SnapshotFile:
    """The store's current offers of every provider, with their sources, dates and history, in
    the snapshot format (`rentopt snapshot export`)."""
    store = open_readonly(store_path())
    if store is None:
        raise InputError(f"there is no price store at {store_path()} to export; run `rentopt refresh` first")
    sections = []
    with store:
        for state in store.providers():
            if not state.has_data:
                continue
            offers = store.load_offers(OfferQuery(providers=(state.name,)))
            history = [SnapshotHistory(fetched_at=h.fetched_at, source=h.source, offers=h.offers,
                                       rows=[tuple(r) for r in h.rows])  # type: ignore[misc]
                       for h in store.history_snapshots(state.name)]
            sections.append(SnapshotProvider(provider=state.name, plugin=state.plugin or state.name,
                                             fetched_at=state.fetched_at, source=state.source or "",  # type: ignore[arg-type]
                                             offers=offers, history=history, dated_by=state.dated_by,  # type: ignore[arg-type]
                                             note="stale: the last refresh failed" if state.stale else ""))
    return SnapshotFile(format=SNAPSHOT_FORMAT, created_at=now or datetime.now(timezone.utc),
                        description=description or f"exported from {store_path()}", providers=sections)


# --------------------------------------------------------------------------------------------
# Listing offers (`rentopt offers`)


def sort_offers(offers: Sequence[Offer], key: SortKey = "price") -> list[Offer]:
    """Order offers for a listing. Prices compare only within a currency (no conversion here),
    so `price` groups by currency first; unpriced offers come last.
    """
    def price(o: Offer) -> tuple:
        p = hour_price(o)
        return (p is None, o.currency, p if p is not None else 0)

    keys = {
        "price": lambda o: (*price(o), o.provider, o.offer_id),
        "gpu": lambda o: (o.gpu is None, o.gpu or o.gpu_raw, o.gpus, *price(o)),
        "provider": lambda o: (o.provider, *price(o), o.offer_id),
        "memory": lambda o: (-o.gpu_memory_gb, -o.gpus, *price(o)),  # most memory per GPU first
    }
    if key not in keys:
        raise InputError(f"unknown sort key {key!r}; use {', '.join(keys)}")
    return sorted(offers, key=keys[key])


def find_offers(query: OfferQuery, *, offers_file: Path | None = None, sort: SortKey = "price",
                limit: int | None = None, suspect: bool = False, objects: bool = True) -> OfferSet:
    """`rentopt offers`: the matching offers, sorted and cut to `limit`, with their provenance.
    `suspect`: only the suspect prices among them (optimizer/suspect.py), each offer's reason in
    `extra["suspect"]`; suspect is judged against every provider's offers, not the matching ones.
    `objects=False`: an offers file's rows stay columns (`OfferSet.listed`, for offers_writer)."""
    if offers_file is not None:
        return _list_offers_file(Path(offers_file), query, sort, limit, suspect, objects)
    if suspect:
        from rentopt.optimizer.suspect import suspect_offers

        everything = load_offers(offers_file=offers_file)
        found = load_offers(offers_file=offers_file, query=query)
        reasons = suspect_offers(everything.offers)
        found.offers = [o.model_copy(update={"extra": {**o.extra, "suspect": reasons[o.key]}})
                        for o in found.offers if o.key in reasons]
    else:
        found = load_offers(offers_file=offers_file, query=query)
    matched = len(found.offers)
    if not matched:
        found.empty_reason = _why_empty(found, query, suspect)
    found.offers = sort_offers(found.offers, sort)[:limit]
    _say_cut(found, matched)
    return found


def _say_cut(found: OfferSet, matched: int) -> None:
    if len(found.offers) < matched:
        found.notes.append(f"showing {len(found.offers)} of {matched} matching offers; raise --limit to see more")


def _list_offers_file(path: Path, query: OfferQuery, sort: SortKey, limit: int | None, suspect: bool,
                      objects: bool = True) -> OfferSet:
    """`find_offers` of an offers file, on its columns (offers_reader.Listing): filtered, sorted
    and cut there, so that full offers are built only for the rows shown (a 100,000-line file
    listed 50 at a time builds 50, not 100,000), or with `objects=False` none at all. The same
    rows in the same order as `sort_offers` over the file's full offers: prices compare exactly
    (Decimal), never as floats."""
    import numpy as np

    from rentopt.optimizer.offers_reader import read_offers_listing

    if sort not in _SORT_PARTS:
        raise InputError(f"unknown sort key {sort!r}; use {', '.join(_SORT_PARTS)}")
    listing = read_offers_listing(path)
    whole = listing.table
    requested = list(query.providers) if query.providers is not None else None
    provenance = _file_provenance(whole, path, requested)
    keep = _matching_rows(whole, query)
    if query.region is not None:
        codes, values = listing.region
        wanted = query.region.lower()
        keep &= np.array([wanted in (v or "").lower() for v in values], dtype=bool)[codes] if values else False
    price_codes, prices = listing.hour_price
    if query.max_hour_price is not None:
        limit_price = query.max_hour_price
        keep &= np.array([p is not None and p <= limit_price for p in prices], dtype=bool)[price_codes] \
            if prices else False
    reasons: dict[int, str] = {}
    if suspect:
        from rentopt.optimizer.suspect import suspect_rows

        reasons = {r: s.reason(whole.gpu[r] or whole.gpu_raw[r]) for r, s in suspect_rows(whole).items()}
        in_reasons = np.zeros(whole.n, dtype=bool)
        in_reasons[list(reasons)] = True
        keep &= in_reasons
    rows = np.flatnonzero(keep)
    shown = _listing_order(whole, listing.hour_price, rows, sort, limit)
    from rentopt.optimizer.offers_writer import ListedRows

    listed = ListedRows(listing, shown, reasons, suspect_only=suspect)
    if objects:
        offers = listed.offers()
        found = _file_set(offers, provenance, _oldest(offers), path)
    else:
        when_codes, whens = whole.category("fetched_at")
        oldest = min((whens[c] for c in np.unique(when_codes[shown]).tolist()), default=None)
        found = _file_set([], provenance, oldest, path, listed=listed)
    if not len(rows):
        found.empty_reason = _why_empty(found, query, suspect)
    _say_cut(found, len(rows))
    return found


def _ranks(codes: Any, values: list, key: Callable[[Any], Any] = lambda v: v) -> Any:
    """`key(values[c])`'s rank among the values' keys for each of `codes` (equal keys, equal ranks)."""
    import numpy as np

    if not len(values):
        return np.zeros(len(codes), dtype=np.int64)
    keyed = [key(v) for v in values]
    order = sorted(range(len(values)), key=keyed.__getitem__)
    rank = np.zeros(len(values), dtype=np.int64)
    for i, j in zip(order, order[1:]):
        rank[j] = rank[i] + (keyed[j] != keyed[i])
    return rank[codes]


# The parts of each sort key of `sort_offers`, in order: "price" is its three (no price last,
# currency, the price), "offer_id" the last tie-break; the rest are tables' columns.
_SORT_PARTS: dict[str, tuple[str, ...]] = {
    "price": ("price", "provider", "offer_id"),
    "gpu": ("no_gpu", "gpu_name", "gpus", "price"),
    "provider": ("provider", "price", "offer_id"),
    "memory": ("-gpu_memory_gb", "-gpus", "price"),
}


def _listing_order(table: OfferTable, hour_price: tuple[Any, list], rows: Any, sort: SortKey,
                   limit: int | None) -> Any:
    """The first `limit` of `rows` in `sort_offers`' order, computed on columns: every part of the
    key but the offer id is ranked exactly (strings by Python's order, prices as Decimals) and
    sorted with numpy, file order breaking ties as Python's stable sort does; where the key ends
    in the offer id, the rows tied with the last one shown up to it are put in order in Python."""
    import numpy as np

    def ranks(codes: Any, values: list, key: Callable[[Any], Any] = lambda v: v) -> Any:
        """Each row's rank of `values[codes[row]]` by `key` (equal keys, equal ranks)."""
        return _ranks(codes[rows], values, key)

    price_codes, prices = hour_price
    keys: list[Any] = []
    for part in _SORT_PARTS[sort]:
        if part == "price":  # (no price, currency, price) as sort_offers' `price`
            keys += [ranks(price_codes, prices, lambda p: p is None), ranks(*table.category("currency")),
                     ranks(price_codes, prices, lambda p: 0 if p is None else p)]
        elif part == "provider":
            keys.append(ranks(*table.category("provider")))
        elif part == "no_gpu":
            keys.append(ranks(*table.category("gpu"), lambda g: g is None))
        elif part == "gpu_name":  # the catalog id, else the name as written
            gpu_codes, gpus = table.category("gpu")
            raw_codes, raws = table.category("gpu_raw")
            pair = gpu_codes[rows].astype(np.int64) * len(raws) + raw_codes[rows]
            distinct, inverse = np.unique(pair, return_inverse=True)
            names = [gpus[int(d) // len(raws)] or raws[int(d) % len(raws)] for d in distinct.tolist()]
            keys.append(_ranks(inverse, names))
        elif part == "gpus":
            keys.append(np.asarray(table.gpus)[rows])
        elif part == "-gpus":
            keys.append(-np.asarray(table.gpus)[rows])
        elif part == "-gpu_memory_gb":
            keys.append(-np.asarray(table.gpu_memory_gb)[rows])
    order = np.lexsort([np.arange(len(rows)), *reversed(keys)]) if len(rows) else np.zeros(0, dtype=np.int64)
    if _SORT_PARTS[sort][-1] != "offer_id":
        return rows[order[:limit]]
    # the key ends in the offer id: rows equal in every other part are ordered by it
    count = len(order) if limit is None else min(limit, len(order))
    if not count:
        return rows[:0]
    stacked = np.stack(keys)[:, order]
    last = stacked[:, count - 1:count]
    tied_after = np.flatnonzero((stacked[:, count:] != last).any(axis=0))
    end = count + (int(tied_after[0]) if len(tied_after) else stacked.shape[1] - count)
    head = order[:end]
    if end > _TIES_IN_PYTHON:  # many rows (every row of a listing without --limit): ids ranked as columns
        exact = np.lexsort([_id_ranks(table.offer_id)[rows[head]], *reversed(stacked[:, :end])])
        return rows[head[exact[:count]]]
    ids = [table.offer_id[int(r)] for r in rows[head]]
    coarse = stacked[:, :end].T.tolist()
    exact = sorted(range(end), key=lambda i: (coarse[i], ids[i]))
    return rows[head[exact[:count]]]


# Up to this many rows tied up to the offer id are put in order in Python (a key per row, as
# sort_offers); more (a listing of every row), and the ids are ranked by Arrow instead: a key
# object per row of a large file costs more time and memory than the rest of the listing.
_TIES_IN_PYTHON = 10_000


def _id_ranks(ids: Any) -> Any:
    """Each offer id's rank in Python's order of strings (code point by code point), equal ids
    equal ranks: ranked by Arrow as UTF-8 bytes, whose order is the code points' order. Packed
    ids (offer_table.Texts) are ranked in place, each with its NUL separator: NUL, in no id,
    sorts before every other byte, so "a\0" < "ab\0" as "a" < "ab"."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from rentopt.optimizer.offer_table import Texts

    if isinstance(ids, Texts):
        array = pa.Array.from_buffers(pa.large_binary(), len(ids), [
            None, pa.py_buffer(np.ascontiguousarray(ids.starts, dtype=np.int64)), pa.py_buffer(ids.data + b"\x00")])
    else:
        array = pa.array(list(ids), pa.string())
    ranks = pc.rank(array, sort_keys="ascending", tiebreaker="dense")
    return np.frombuffer(ranks.buffers()[1], dtype=np.uint64)[ranks.offset:ranks.offset + len(ranks)]
def _why_empty(found: OfferSet, query: OfferQuery, suspect: bool) -> str:
    """Why `rentopt offers` lists nothing: providers with no prices (and the fix), no suspect
    price, or filters that leave nothing of the offers there are."""
    if found.missing and not found.provenance:
        return "No offers: " + "; ".join(found.missing)
    if suspect:
        return "No suspect price among the matching offers: none is under 1/5 of what the other providers ask."
    held = sum(p.offers for p in found.provenance.values())
    lines = [f"No offer matches these filters among {held} offers of {', '.join(sorted(found.provenance))}; "
             "loosen them (see `rentopt offers --help`)."]
    lines += [f"No offers: {m}" for m in found.missing]
    return "\n".join(lines)
