"""Where offers come from: an --offers-file, the local price store, or the bundled snapshot.

Precedence (`load_offers`):
1. `--offers-file` when given: exactly the offers in it, nothing else.
2. the price store, when it holds current offers of at least one provider;
3. otherwise the snapshot bundled with rentopt (`data/snapshot.json.gz`, built from the
   recorded fixtures by tools/build_snapshot.py), labelled as such in every output.

The store and the bundled snapshot are never mixed. A provider that has never been refreshed
successfully into the store is left out (and named in `notes`) rather than filled in from the
bundled snapshot: a quote that silently compares tonight's prices with a months-old file would
pick a "cheapest" offer that may not exist any more, and `prices_as_of` would lie.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ValidationError

from rentopt.optimizer.errors import InputError, StoreError
from rentopt.optimizer.models import Offer, Origin, PlanRow, plan_row
from rentopt.optimizer.offers_io import hour_price, read_offers_file
from rentopt.optimizer.store import OfferQuery, open_readonly, store_path

SNAPSHOT_RESOURCE = "data/snapshot.json.gz"
SNAPSHOT_FORMAT = 1
SortKey = Literal["price", "gpu", "provider", "memory"]


class SnapshotProvider(BaseModel):
    provider: str
    fetched_at: datetime
    source: str
    offers: int


class BundledSnapshot(BaseModel):
    """The file format of data/snapshot.json.gz (written by tools/build_snapshot.py)."""

    format: int
    providers: list[SnapshotProvider]
    offers: list[Offer]


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


@dataclass
class OfferSet:
    """Offers to plan with and where they came from.

    A set loaded with `lazy=True` from the store holds planning rows instead of offers (`offers`
    is empty): the planner ranks the rows and fetches the few full offers it needs with
    `offers_by_key`. Every other set holds its offers.
    """

    offers: list[Offer]
    origin: Origin
    provenance: dict[str, Provenance]
    prices_as_of: datetime | None  # the oldest fetched_at among `offers`
    label: str  # one line for the top of every output
    notes: list[str] = field(default_factory=list)
    rows: list[PlanRow] | None = None  # lazy sets: the planning rows from the store
    store: Path | None = None  # lazy sets: the store to fetch full offers from

    def plan_rows(self) -> list[PlanRow]:
        return self.rows if self.rows is not None else [plan_row(o) for o in self.offers]

    def all_offers(self) -> list[Offer]:
        """Every offer of the set as a full Offer (a lazy set reads them from the store now)."""
        if self.rows is None:
            return self.offers
        return list(self.offers_by_key(r.key for r in self.rows).values())

    def offers_by_key(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Offer]:
        """Full offers for planning-row keys. For a lazy set, read from the store and checked
        against the rows it ranked (a refresh in between is reported, never mixed in)."""
        wanted = set(keys)
        if self.rows is None:
            return {o.key: o for o in self.offers if o.key in wanted}
        store = open_readonly(self.store)
        if store is None:
            raise StoreError("the price store disappeared while quoting; run the quote again")
        with store:
            found = {o.key: o for o in store.load_offers_by_key(sorted(wanted))}
        ranked = {r.key: r for r in self.rows if r.key in wanted}
        if set(found) != wanted or any(plan_row(o) != ranked[k] for k, o in found.items()):
            raise StoreError("prices changed while quoting (a refresh just finished); run the quote again")
        return found


def load_offers(providers: list[str] | None = None, offers_file: Path | None = None, *,
                query: OfferQuery | None = None, lazy: bool = False) -> OfferSet:
    """The offers to plan with, from the first source that has any (see the module docstring).

    `providers` narrows to those providers; `query` filters further (in SQL for the store).
    `lazy=True` returns a store-backed set as planning rows (see OfferSet); the quote uses it.
    """
    query = query or OfferQuery()
    if providers is not None:
        query = _with_providers(query, providers)
    requested = list(query.providers) if query.providers is not None else None
    if offers_file is not None:
        return _from_offers_file(Path(offers_file), query, requested)
    store = open_readonly(store_path())
    if store is not None:
        with store:
            states = store.providers()
            if any(s.has_data for s in states):
                if lazy and query.region is None and query.max_hour_price is None:
                    rows = store.load_plan_rows(query)
                    found = _from_store(store.path, states, [], query, requested, oldest=_oldest_row(rows))
                    found.rows, found.store = rows, store.path
                    return found
                offers = store.load_offers(query)
                return _from_store(store.path, states, offers, query, requested)
    return _from_bundled(query, requested)


def _with_providers(query: OfferQuery, providers: list[str]) -> OfferQuery:
    names = tuple(dict.fromkeys(p.strip() for p in providers if p.strip()))
    if query.providers is not None:
        names = tuple(n for n in names if n in query.providers)
    return replace(query, providers=names)


def _from_offers_file(path: Path, query: OfferQuery, requested: list[str] | None) -> OfferSet:
    everything = read_offers_file(path)
    _check_known(requested, {o.provider for o in everything}, f"offers file {path}")
    offers = [o for o in everything if query.matches(o)]
    provenance = {}
    for name in sorted({o.provider for o in everything}):
        mine = [o for o in everything if o.provider == name]
        provenance[name] = Provenance(name, min(o.fetched_at for o in mine), str(path), len(mine))
    return OfferSet(offers, "offers-file", provenance, _oldest(offers), f"offers file {path}")


def _from_store(path: Path, states: Sequence, offers: list[Offer], query: OfferQuery,
                requested: list[str] | None, oldest: datetime | None = None) -> OfferSet:
    present = {s.name for s in states if s.has_data}
    bundled_names = _bundled_names()
    _check_known(requested, present | bundled_names, "the price store")
    provenance = {
        s.name: Provenance(s.name, s.fetched_at, s.source or "", s.offers_count, s.stale, s.last_error, s.last_error_at)
        for s in states if s.has_data and (query.providers is None or s.name in query.providers)
    }
    notes = []
    for p in provenance.values():
        if p.stale:
            notes.append(f"{p.provider}: the last refresh failed ({p.last_error}); showing its last good prices "
                         f"from {_when(p.fetched_at)}")
    wanted = set(query.providers) if query.providers is not None else bundled_names | {s.name for s in states}
    if missing := sorted(wanted - present):
        notes.append(f"no prices in the price store yet from {', '.join(missing)}: run `rentopt refresh "
                     f"--providers {','.join(missing)}` (bundled prices are not mixed with refreshed ones)")
    oldest = oldest or _oldest(offers)
    label = f"price store {path}" + (f", prices as of {_when(oldest)}" if oldest else "")
    if any(p.stale for p in provenance.values()):
        label += " (some stale: see notes)"
    return OfferSet(offers, "store", provenance, oldest, label, notes)


def _from_bundled(query: OfferQuery, requested: list[str] | None) -> OfferSet:
    snapshot = bundled_snapshot()
    _check_known(requested, {p.provider for p in snapshot.providers}, "the bundled snapshot")
    offers = [o for o in snapshot.offers if query.matches(o)]
    provenance = {
        p.provider: Provenance(p.provider, p.fetched_at, p.source, p.offers)
        for p in snapshot.providers if query.providers is None or p.provider in query.providers
    }
    dates = [p.fetched_at for p in snapshot.providers]
    day = min(dates).strftime("%Y-%m-%d") if dates else "unknown date"
    label = f"bundled snapshot of {day} (run `rentopt refresh` for current prices)"
    return OfferSet(offers, "bundled", provenance, _oldest(offers), label)


def _bundled_names() -> set[str]:
    try:
        return {p.provider for p in bundled_snapshot().providers}
    except StoreError:  # no bundled snapshot in this installation: nothing to point out
        return set()


def _check_known(requested: list[str] | None, present: set[str], where: str) -> None:
    """A provider name that is neither registered nor in the data is a typo: say so."""
    if not requested:
        return
    from importlib.metadata import entry_points  # only when a provider is named (~20 ms to import)

    registered = {ep.name for ep in entry_points(group="rentopt.providers")}
    unknown = [n for n in requested if n not in registered and n not in present]
    if unknown:
        known = ", ".join(sorted(registered | present))
        raise InputError(f"unknown provider {', '.join(unknown)} (not registered and not in {where}); known providers: {known}")


def _oldest_row(rows: Sequence[PlanRow]) -> datetime | None:
    return datetime.fromisoformat(min(r.fetched_at for r in rows)) if rows else None


def _oldest(offers: Sequence[Offer]) -> datetime | None:
    return min((o.fetched_at for o in offers), default=None)


def _when(when: datetime | None) -> str:
    return when.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if when else "never"


# --------------------------------------------------------------------------------------------
# The bundled snapshot


@lru_cache(maxsize=1)
def bundled_snapshot() -> BundledSnapshot:
    """The snapshot shipped inside the package (read once per process)."""
    try:
        raw = resources.files("rentopt.optimizer").joinpath(SNAPSHOT_RESOURCE).read_bytes()
    except (FileNotFoundError, OSError):
        raise StoreError(
            "this installation of rentopt has no bundled price snapshot and there is no price store yet; "
            "run `rentopt refresh` to fetch prices"
        ) from None
    return parse_snapshot(raw)


def parse_snapshot(raw: bytes) -> BundledSnapshot:
    try:
        snapshot = BundledSnapshot.model_validate_json(gzip.decompress(raw))
    except (OSError, EOFError, ValidationError) as exc:
        raise StoreError(f"the bundled price snapshot is damaged ({type(exc).__name__}); reinstall rentopt or run `rentopt refresh`") from None
    if snapshot.format != SNAPSHOT_FORMAT:
        raise StoreError(f"the bundled price snapshot has format {snapshot.format}, this rentopt reads {SNAPSHOT_FORMAT}; reinstall rentopt")
    return snapshot


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
                limit: int | None = None) -> OfferSet:
    """`rentopt offers`: the matching offers, sorted and cut to `limit`, with their provenance."""
    found = load_offers(offers_file=offers_file, query=query)
    matched = len(found.offers)
    found.offers = sort_offers(found.offers, sort)[:limit]
    if len(found.offers) < matched:
        found.notes.append(f"showing {len(found.offers)} of {matched} matching offers; raise --limit to see more")
    return found
