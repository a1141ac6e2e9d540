"""Offers as columns: what the planner's first pass needs of N offers, without N Offer objects.

A quote over a large catalog ranks offers before it builds anything per offer: feasibility and
speed run once per node shape, billing's rough bounds run as array arithmetic over these
columns, and only the few offers that can still be among the best plans become full `Offer`
objects (`OfferTable.offers(rows)`). Any source can fill a table: a list of offers
(`from_offers`), an offers file's columns, the price store's planning columns.

Conventions: numbers are numpy arrays, NaN where a price or a figure is unknown (never 0: a 0
is free); strings are Python lists. Prices are per node, in the offer's own currency, by kind:
index 0 on-demand, 1 interruptible. Several options of the same unit keep the cheapest (the
dearer one is never part of a cheapest cover); reserved terms, rare, are kept per row in `terms`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from rentopt.optimizer.models import Offer, PriceUnit

KINDS = (False, True)  # on-demand, interruptible
_NAN = float("nan")
_UNIT_COLUMNS = {PriceUnit.HOUR: "hourly", PriceUnit.DAY: "day", PriceUnit.WEEK: "week", PriceUnit.MONTH: "month"}


@dataclass
class OfferTable:
    provider: list[str]
    offer_id: list[str]
    gpu: list[str | None]
    gpu_raw: list[str]
    gpu_status: list[str]
    currency: list[str]
    fetched_at: list[datetime]
    interconnect: list[str]
    fabric: list[str | None]
    stopped_bills: list[str]
    gpus: np.ndarray
    gpu_memory_gb: np.ndarray
    fabric_gbps: np.ndarray
    nodes_available: np.ndarray
    host_ram_gb: np.ndarray
    spot: np.ndarray
    net_up_mbps: np.ndarray
    net_down_mbps: np.ndarray
    granularity_s: np.ndarray
    minimum_s: np.ndarray
    month_hours: np.ndarray
    max_hours: np.ndarray
    storage: np.ndarray
    stopped_storage: np.ndarray  # the offer's stopped-disk price, else its running one
    egress: np.ndarray
    ingress: np.ndarray
    stopped_max_hours: np.ndarray
    free_disk_gb: np.ndarray
    hourly: np.ndarray  # shape (2, n): [kind, row]
    day: np.ndarray
    week: np.ndarray
    month: np.ndarray
    terms: dict[tuple[int, int], tuple[tuple[float, float], ...]] = field(default_factory=dict)  # (kind, row) -> (hours, price)
    extra_notes: dict[int, str] = field(default_factory=dict)  # row -> a note the offer carries (sheet GPU names)
    resolve: Callable[[Sequence[int]], list[Offer]] | None = None
    _codes: dict[str, tuple[np.ndarray, list]] = field(default_factory=dict, repr=False)  # see `category`
    # What is worked out from the columns once and read by several passes (suspect.suspect_rows);
    # not copied by take or dataclasses.replace (init=False): another table has its own.
    _derived: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    # Float columns a reader coded while it read them: name -> (codes, values), see `ValueCodes`.
    # Carried by take, not by dataclasses.replace (init=False): a replaced column would not match.
    value_codes: dict[str, ValueCodes] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def n(self) -> int:
        return len(self.provider)

    def key(self, row: int) -> tuple[str, str]:
        return (self.provider[row], self.offer_id[row])

    def has_kind(self, kind: int) -> np.ndarray:
        """Rows with at least one price option of `kind`."""
        found = ~(np.isnan(self.hourly[kind]) & np.isnan(self.day[kind]) & np.isnan(self.week[kind])
                  & np.isnan(self.month[kind]))
        for k, row in self.terms:
            if k == kind:
                found[row] = True
        return found

    def offers(self, rows: Iterable[int]) -> list[Offer]:
        """The full offers of `rows`, in that order (from the table's source)."""
        rows = list(rows)
        if self.resolve is None:
            raise ValueError("this offer table cannot resolve full offers")
        return self.resolve(rows)

    def category(self, name: str) -> tuple[np.ndarray, list]:
        """A string column as (codes, values): `values[codes[row]] == getattr(self, name)[row]`.

        For grouping rows with array operations (np.unique, bincount) instead of per-row Python.
        Builders that read categorical data (the store, offers files) supply the codes; otherwise
        they are computed once, here.
        """
        found = self._codes.get(name)
        if found is None:
            found = self._codes[name] = code_values(getattr(self, name))
        return found

    def take(self, rows: np.ndarray) -> OfferTable:
        """The table of `rows` only (a boolean mask or row indices), resolving through this one."""
        rows = np.flatnonzero(rows) if rows.dtype == bool else np.asarray(rows, dtype=np.int64)
        if len(rows) == self.n and (rows == np.arange(self.n)).all():
            return self
        position = {int(r): i for i, r in enumerate(rows)}
        columns: dict = {name: take_strings(getattr(self, name), rows) for name in LIST_COLUMNS}
        columns.update({name: _take(getattr(self, name), rows) for name in ARRAY_COLUMNS})
        columns.update({name: getattr(self, name)[:, rows] for name in PRICE_COLUMNS})
        parent = self
        taken = OfferTable(
            **columns,
            terms={(k, position[r]): v for (k, r), v in self.terms.items() if r in position},
            extra_notes={position[r]: v for r, v in self.extra_notes.items() if r in position},
            resolve=lambda wanted: parent.offers(int(rows[w]) for w in wanted),
            _codes={name: (codes[rows], values) for name, (codes, values) in self._codes.items()},
        )
        taken.value_codes = {name: ValueCodes(c.codes[rows], c.values) for name, c in self.value_codes.items()}
        return taken

    def part(self) -> Part:
        """The table's columns as a Part (to merge with others)."""
        columns = {name: getattr(self, name) for name in (*LIST_COLUMNS, *ARRAY_COLUMNS)}
        prices = {name: getattr(self, name) for name in PRICE_COLUMNS}
        return Part(self.n, columns, prices, self.terms, self.extra_notes, dict(self.value_codes))

    @classmethod
    def from_offers(cls, offers: Sequence[Offer]) -> OfferTable:
        """The table of a list of offers (bundled snapshot, sheets, a refresh writing the store)."""
        kept = list(offers)
        n = len(kept)
        prices = {name: [[_NAN] * n, [_NAN] * n] for name in PRICE_COLUMNS}
        terms: dict[tuple[int, int], list[tuple[float, float]]] = {}
        notes: dict[int, str] = {}
        for i, o in enumerate(kept):
            for p in o.price_options:
                kind = int(p.interruptible)
                amount = float(p.amount)
                column = _UNIT_COLUMNS.get(p.unit)
                if column is None:
                    terms.setdefault((kind, i), []).append((float(p.term_hours or 0), amount))
                    continue
                have = prices[column][kind][i]
                if have != have or amount < have:  # NaN: none yet
                    prices[column][kind][i] = amount
            if o.extra and o.extra.get("gpu_note"):
                notes[i] = str(o.extra["gpu_note"])
        rows = [(o.provider, o.offer_id, o.gpu, o.gpu_raw, o.gpu_status, o.currency, o.fetched_at, o.interconnect,
                 o.fabric, o.stopped_bills, o.gpus, o.gpu_memory_gb, o.fabric_gbps, o.nodes_available, o.host_ram_gb,
                 o.spot, o.net_up_mbps, o.net_down_mbps, o.billing_granularity_s, o.billing_minimum_s, o.month_hours,
                 o.max_duration_hours, o.storage_gb_month, o.stopped_storage_price, o.egress_gb, o.ingress_gb,
                 None if o.stopped_max_days is None else o.stopped_max_days * 24, o.free_disk_gb) for o in kept]
        values = list(zip(*rows)) if rows else [()] * len(_OFFER_FIELDS)
        columns = dict(zip(_OFFER_FIELDS, values, strict=True))
        return cls.build(n, columns, prices={k: np.array(v, dtype=np.float64).reshape(2, n) for k, v in prices.items()},
                         terms={k: tuple(v) for k, v in terms.items()}, extra_notes=notes,
                         resolve=lambda rows: [kept[r] for r in rows])

    @classmethod
    def build(cls, n: int, columns: dict, *, prices: dict[str, Any] | None = None, terms: dict | None = None,
              extra_notes: dict | None = None, resolve: Callable[[Sequence[int]], list[Offer]] | None = None,
              value_codes: dict[str, ValueCodes] | None = None) -> OfferTable:
        """A table of `n` rows from columns by field name, each a list, an array, a `Const` (one
        value for every row, held once) or `Codes` (categorical strings); None (unknown) is
        allowed in the numeric ones. A column left out takes the Offer default for every row
        (`LIST_DEFAULTS`, `ARRAY_DEFAULTS`); `prices` maps hourly/day/week/month to (2, n)
        columns or a `Const`; one left out is unknown (NaN). `value_codes`: float columns as
        their reader coded them (`ValueCodes`)."""
        out: dict = {}
        codes: dict[str, tuple[np.ndarray, list]] = {}
        for name in LIST_COLUMNS:
            value = columns.get(name, Const(LIST_DEFAULTS[name]) if name in LIST_DEFAULTS else None)
            if value is None:
                raise ValueError(f"an offer table needs the {name} column")
            if isinstance(value, Codes):
                codes[name] = _distinct_values(value.codes, value.values)
                out[name] = Strings(*codes[name])
            elif isinstance(value, Const):
                codes[name] = (np.zeros(n, dtype=np.int32), [value.value])
                out[name] = Strings(*codes[name])
            elif isinstance(value, Strings):
                codes[name] = _distinct_values(value.codes, value.values)
                out[name] = Strings(*codes[name])
            elif isinstance(value, (Texts, FixedTexts)):
                out[name] = value
            else:
                out[name] = list(value)
        for name, dtype in ARRAY_COLUMNS.items():
            value = columns.get(name, Const(ARRAY_DEFAULTS.get(name)))
            out[name] = as_array(value, n, dtype, name)
        for name in PRICE_COLUMNS:
            value = (prices or {}).get(name, Const(_NAN))
            out[name] = constant(value.value, (2, n), np.float64) if isinstance(value, Const) else value
        table = cls(**out, terms=dict(terms or {}), extra_notes=dict(extra_notes or {}), resolve=resolve, _codes=codes)
        table.value_codes = dict(value_codes or {})
        return table


# The table's columns, by kind; `build` fills the ones a source leaves out with these defaults
# (the Offer model's own: models.Offer).
LIST_COLUMNS = ("provider", "offer_id", "gpu", "gpu_raw", "gpu_status", "currency", "fetched_at", "interconnect",
                "fabric", "stopped_bills")
LIST_DEFAULTS = {"gpu_status": "exact", "interconnect": "unknown", "fabric": None, "stopped_bills": "storage"}
ARRAY_COLUMNS: dict[str, type] = {
    "gpus": np.int64, "gpu_memory_gb": np.float64, "fabric_gbps": np.float64, "nodes_available": np.int64,
    "host_ram_gb": np.float64, "spot": np.bool_, "net_up_mbps": np.float64, "net_down_mbps": np.float64,
    "granularity_s": np.int64, "minimum_s": np.int64, "month_hours": np.int64, "max_hours": np.float64,
    "storage": np.float64, "stopped_storage": np.float64, "egress": np.float64, "ingress": np.float64,
    "stopped_max_hours": np.float64, "free_disk_gb": np.float64,
}
ARRAY_DEFAULTS = {"nodes_available": 1, "spot": False, "granularity_s": 1, "minimum_s": 0, "month_hours": 730,
                  "free_disk_gb": 0.0, **{name: _NAN for name in ("fabric_gbps", "host_ram_gb", "net_up_mbps",
                                                                   "net_down_mbps", "max_hours", "storage",
                                                                   "stopped_storage", "egress", "ingress",
                                                                   "stopped_max_hours")}}  # gpus, gpu_memory_gb: required
PRICE_COLUMNS = ("hourly", "day", "week", "month")
# from_offers's tuple order
_OFFER_FIELDS = (*LIST_COLUMNS, *ARRAY_COLUMNS)


def constant(value: object, shape: int | tuple[int, ...], dtype: type) -> np.ndarray:
    """A read-only array of `shape` holding `value` everywhere, in the memory of one value (a
    column every row of a source shares: a CSV without that column, a provider's billing rule)."""
    return np.broadcast_to(np.array(value, dtype=dtype), shape)


@dataclass(frozen=True)
class Const:
    """A column whose every row holds `value`."""

    value: Any


@dataclass(frozen=True)
class ValueCodes:
    """A float column as a reader coded it: `values[codes[row]]` is the row's value (a code per
    distinct cell; two codes may hold one value: "2.10" and "2.1"). For a price column (hourly,
    day, week, month), the row's price of its own kind (`spot[row]`: interruptible); its price of
    the other kind is unknown (NaN), as on a CSV line. The tie classes group rows by these codes
    instead of hashing a million floats (optimizer/ties.py)."""

    codes: np.ndarray
    values: np.ndarray  # float64


@dataclass(frozen=True)
class Codes:
    """A column of strings (or None) as `values[codes[row]]`."""

    codes: np.ndarray
    values: list


class _LazyList(Sequence):
    """A column read like a list of strings, held more compactly; `_decoded()` gives the whole
    list, built once, only when something walks all of it."""

    _list: list | None = None

    def _decoded(self) -> list:
        raise NotImplementedError

    def tolist(self) -> list:
        if self._list is None:
            self._list = self._decoded()
        return self._list

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.tolist())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and self.tolist() == list(other)

    __hash__ = None  # type: ignore[assignment]  # like a list


class Strings(_LazyList):
    """A string column held as codes (`values[codes[row]]`). A million-row store or file column
    is decoded into a list only when something walks all of it (the planner reads single rows
    and groups by the codes)."""

    def __init__(self, codes: np.ndarray, values: list):
        self.codes, self.values = codes, values

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return self.tolist()[i] if isinstance(i, slice) else self.values[self.codes[i]]

    def _decoded(self) -> list:
        return _decode(self.codes, self.values)

    def take(self, rows: np.ndarray) -> Strings:
        return Strings(self.codes[rows], self.values)


class Texts(_LazyList):
    """Strings held as one UTF-8 buffer, NUL-separated (`data`): offer ids cost their text and
    one offset each instead of a str object each, and the planner decodes only the few it shows
    or keeps. No string may hold a NUL.

    Made of cells (`cells`), the texts are joined only when something reads `data`."""

    _data: bytes | None = None
    _chars: np.ndarray | None = None  # cells not yet joined: their bytes, text i at _bounds[i]:_bounds[i + 1]
    _bounds: np.ndarray | None = None
    _starts: np.ndarray | None = None

    def __init__(self, data: bytes, n: int):
        self._data = data
        ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 0) if n > 1 else np.zeros(0, dtype=np.int64)
        if len(ends) != max(n - 1, 0) or (n == 0 and data):
            raise ValueError(f"{len(ends) + 1 if n else 0} texts for {n} rows")
        self.starts = np.r_[0, ends + 1, len(data) + 1].astype(np.int64) if n else np.zeros(1, dtype=np.int64)

    @classmethod
    def of(cls, values: Sequence[str]) -> Texts:
        return cls("\x00".join(values).encode(), len(values))

    @classmethod
    def joined(cls, data: bytes, bounds: np.ndarray) -> Texts:
        """The texts of `data`, n strings joined by NULs, where string i held bytes
        `bounds[i]:bounds[i + 1]` before they were joined (n + 1 bounds, the first 0): the NULs
        are where the bounds say, so they are not looked for."""
        texts = cls.__new__(cls)
        texts._data = data
        texts.starts = bounds.astype(np.int64) + np.arange(len(bounds), dtype=np.int64)  # each NUL before moves it on
        return texts

    @classmethod
    def cells(cls, chars: np.ndarray, bounds: np.ndarray) -> Texts:
        """The texts `chars[bounds[i]:bounds[i + 1]]` (`chars` a uint8 array, n + 1 bounds, the
        first 0), joined by NULs (`joined`) only when `data` is read: a quote reads a few of a
        file's million ids one by one, which the bounds find (the join costs ~20 ms)."""
        texts = cls.__new__(cls)
        texts._chars, texts._bounds = chars, bounds  # `starts` is worked out when first read
        return texts

    @property
    def starts(self) -> np.ndarray:
        """Where each text begins in `data`, and one past the last NUL (n + 1 positions)."""
        if self._starts is None:
            assert self._bounds is not None
            self._starts = self._bounds.astype(np.int64) + np.arange(len(self._bounds), dtype=np.int64)
        return self._starts

    @starts.setter
    def starts(self, value: np.ndarray) -> None:
        self._starts = value

    @property
    def data(self) -> bytes:
        """The texts joined by NULs."""
        if self._data is None:
            assert self._chars is not None and self._bounds is not None
            self._data = np.insert(self._chars, self._bounds[1:-1], 0).tobytes()
            self._starts = self.starts  # worked out from the bounds before they go
            self._chars = self._bounds = None
        return self._data

    def __len__(self) -> int:
        return len(self.starts if self._bounds is None else self._bounds) - 1

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            return self.tolist()[i]
        if i < 0:
            i += len(self)
        if self._data is None:
            assert self._chars is not None and self._bounds is not None
            return self._chars[self._bounds[i]:self._bounds[i + 1]].tobytes().decode()
        return self._data[self.starts[i]:self.starts[i + 1] - 1].decode()

    def _decoded(self) -> list:
        return self.data.decode().split("\x00") if len(self) else []

    def take(self, rows: np.ndarray) -> list:
        at = np.asarray(rows, dtype=np.int64)
        if self._data is None:
            chars, bounds = self._chars, self._bounds
            assert chars is not None and bounds is not None
            return [chars[b:e].tobytes().decode() for b, e in zip(bounds[at].tolist(), bounds[at + 1].tolist())]
        data = self._data
        return [data[b:e].decode() for b, e in zip(self.starts[at].tolist(), (self.starts[at + 1] - 1).tolist())]


class FixedTexts(_LazyList):
    """Strings held as a numpy array of fixed-width UTF-8 bytes, zero-padded (`array`, dtype
    S<width>): short offer ids cost their width each instead of a str object each, and the
    planner decodes only the few it shows or keeps. No string may hold a NUL
    (numpy drops the padding, and would drop a trailing NUL with it)."""

    def __init__(self, array: np.ndarray):
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        return self.tolist()[i] if isinstance(i, slice) else self.array[i].decode()

    def _decoded(self) -> list:
        return [b.decode() for b in self.array.tolist()]

    def take(self, rows: np.ndarray) -> FixedTexts:
        return FixedTexts(self.array[rows])


def take_strings(values: Sequence, rows: np.ndarray) -> Sequence:
    """A string column's `rows`, held as compactly as the column is (a list for a list)."""
    if isinstance(values, (Strings, Texts, FixedTexts)):
        return values.take(rows)
    return [values[r] for r in np.asarray(rows).tolist()]


def values_at(values: Sequence, rows: np.ndarray) -> list:
    """`values[r]` for each of `rows`, as a list: one gather for a coded or packed column."""
    picked = take_strings(values, rows)
    return picked if isinstance(picked, list) else picked.tolist()  # type: ignore[attr-defined]


def _join_texts(values: Sequence[Any]) -> Texts | list:
    """Offer id columns of several sources, rows one after the other: one Texts when every
    part can be one (no id holds a NUL), else one list."""
    parts = [v if isinstance(v, Texts) else list(v) for v in values]
    if any(isinstance(v, list) and any("\x00" in x for x in v) for v in parts):
        joined: list = []
        for v in parts:
            joined.extend(v)
        return joined
    chunks = [v.data if isinstance(v, Texts) else "\x00".join(v).encode() for v in parts if len(v)]
    return Texts(b"\x00".join(chunks), sum(len(v) for v in parts))


def as_array(value: Any, n: int, dtype: type, name: str = "column") -> np.ndarray:
    """A numeric column (list with None for unknown, array or Const) as an array of `dtype`."""
    if isinstance(value, Const):
        if value.value is None and dtype is not np.float64:
            raise ValueError(f"an offer table needs the {name} column")
        return constant(_NAN if value.value is None else value.value, n, dtype)
    if isinstance(value, np.ndarray):
        return value.astype(dtype, copy=False)
    if dtype is np.float64:
        return np.fromiter((_NAN if v is None else float(v) for v in value), dtype=np.float64, count=n)
    return np.fromiter(value, dtype=dtype, count=n)


def _take(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return values[rows]


def code_values(values: Sequence) -> tuple[np.ndarray, list]:
    """`values` as (codes, distinct values in first-seen order): `distinct[codes[i]] == values[i]`."""
    index = {v: i for i, v in enumerate(dict.fromkeys(values))}
    return np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values)), list(index)


def _decode(codes: np.ndarray, values: list) -> list:
    """values[codes[i]] for every i, as a list (one array gather instead of a Python loop)."""
    if not len(codes):
        return []
    table = np.empty(len(values), dtype=object)
    table[:] = values
    return table[codes].tolist()


@dataclass
class Part:
    """One source's columns before they become a table (see `OfferTable.build`)."""

    n: int
    columns: dict
    prices: dict = field(default_factory=dict)
    terms: dict = field(default_factory=dict)
    extra_notes: dict = field(default_factory=dict)
    value_codes: dict = field(default_factory=dict)  # see `ValueCodes`; dropped by merge_parts

    def table(self, resolve: Callable[[Sequence[int]], list[Offer]] | None = None) -> OfferTable:
        return OfferTable.build(self.n, self.columns, prices=self.prices, terms=self.terms,
                                extra_notes=self.extra_notes, resolve=resolve, value_codes=self.value_codes)


def merge_parts(parts: Sequence[Part]) -> Part:
    """Several sources' columns as one source's, rows one after the other; a column that is
    one value in every part stays a `Const`, strings stay `Codes` (or lists, for offer ids).
    The parts' `value_codes` are dropped (the tie classes then compare the floats)."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return Part(0, {name: [] for name in LIST_COLUMNS} | {"gpus": [], "gpu_memory_gb": []})
    sizes = [p.n for p in parts]
    columns = {name: merge_column(name, [p.columns.get(name) for p in parts], sizes)
               for name in {k for p in parts for k in p.columns}}
    prices = {name: merge_prices([p.prices.get(name, Const(_NAN)) for p in parts], sizes) for name in PRICE_COLUMNS}
    starts = np.cumsum([0] + sizes)
    terms, notes = shifted(parts, starts)
    return Part(int(starts[-1]), columns, prices, terms, notes)


def merge_column(name: str, values: Sequence[Any], sizes: Sequence[int]) -> Any:
    """One column of several sources (`values[i]` of `sizes[i]` rows; None: the source has no
    such column, so the Offer default) as one column, rows one after the other."""
    if len(values) == 1 and values[0] is not None:
        return values[0]
    if all(isinstance(v, Const) for v in values) and len({repr(v.value) for v in values}) == 1:
        return values[0]
    if name in ARRAY_COLUMNS:
        dtype = ARRAY_COLUMNS[name]
        return np.concatenate([as_array(Const(ARRAY_DEFAULTS.get(name)) if v is None else v, n, dtype, name)
                               for v, n in zip(values, sizes)])
    if all(isinstance(v, (list, Texts, FixedTexts)) for v in values):  # offer ids
        if any(isinstance(v, (Texts, FixedTexts)) for v in values):
            return _join_texts(values)
        joined: list = []
        for v in values:
            joined.extend(v)
        return joined
    coded = []  # coded or constant somewhere (a store or file part): code the list parts, decode nothing
    for v, n in zip(values, sizes):
        v = Const(LIST_DEFAULTS[name]) if v is None else v
        coded.append((np.zeros(n, dtype=np.int32), [v.value]) if isinstance(v, Const) else
                     _distinct_values(np.arange(n, dtype=np.int32), v) if isinstance(v, list) else (v.codes, v.values))
    return _merge_codes(coded)


def merge_prices(values: Sequence[Any], sizes: Sequence[int]) -> Any:
    """One price column ((2, n) arrays or `Const`) of several sources, rows one after the other."""
    if len(values) == 1:
        return values[0]
    if all(isinstance(v, Const) for v in values) and len({repr(v.value) for v in values}) == 1:
        return values[0]
    return np.concatenate([constant(v.value, (2, n), np.float64) if isinstance(v, Const) else v
                           for v, n in zip(values, sizes)], axis=1)


def _merge_codes(coded: Iterable[tuple[np.ndarray, list]]) -> Codes:
    """Several sources' (codes, values) of one string column, rows one after the other, as one
    `Codes` (each distinct value once)."""
    index: dict = {}
    merged = []
    for codes, values in coded:
        remap = np.array([index.setdefault(v, len(index)) for v in values], dtype=np.int32)
        merged.append(remap[codes] if len(values) else np.zeros(0, np.int32))
    return Codes(np.concatenate(merged) if merged else np.zeros(0, np.int32), list(index))


def _distinct_values(codes: np.ndarray, values: list) -> tuple[np.ndarray, list]:
    """(codes, values) with each value once. A reader may code spellings, not values (an offers
    file's "H100 SXM" and "H100-SXM-80GB" are two codes of one GPU); a table's categories must
    be values, or one GPU is two groups to whoever groups rows by code (two row groups of one
    node shape, two groups of top-K plans for one provider and GPU)."""
    index: dict = {}
    remap = [index.setdefault(v, len(index)) for v in values]
    if len(index) == len(values):
        return codes, values
    return np.asarray(remap, dtype=np.int32)[codes], list(index)


def shifted(parts: Sequence[Any], starts: np.ndarray) -> tuple[dict, dict]:
    """The parts' terms and notes keyed by the joined rows: the first part's are copied as they
    are (a dict copy, not a rebuild: a million-row part may carry a note per row)."""
    terms, notes = dict(parts[0].terms), dict(parts[0].extra_notes)
    for p, start in zip(parts[1:], starts[1:]):
        terms.update({(k, int(start) + r): v for (k, r), v in p.terms.items()})
        notes.update({int(start) + r: v for r, v in p.extra_notes.items()})
    return terms, notes


def as_list(value: Any, n: int, name: str) -> list:
    if value is None:
        value = Const(LIST_DEFAULTS[name])
    if isinstance(value, Const):
        return [value.value] * n
    if isinstance(value, Codes):
        return _decode(value.codes, value.values)
    return list(value)
