"""Planning columns as bytes: one encoding for the price store and the bundled snapshot.

A quote's first pass reads offers as typed columns (offer_table), never as one JSON object per
offer. Two sources hold such columns at rest, in this one encoding: the price store
(`plan_columns` rows, store.py) and the bundled snapshot's columns file (bundled.py). Each
column is (name, encoding, data, meta):

    f8 / i8 / b1  little-endian float64 / int64 / uint8 bytes (NaN: unknown)
    const         every row the same: `meta` is that value as JSON (null: unknown)
    codes         strings: int32 codes into `meta`, a JSON list of the distinct values
    text          strings (offer ids), UTF-8, NUL-separated
    json          `meta` is the column as JSON (reserved terms: [kind, row, hours, price] rows)

Prices are per node in the offer's currency, the cheapest per unit and kind ("hourly.0"
on-demand, "hourly.1" interruptible; day, week, month likewise), as offer_table defines them.
numpy is imported by the functions that need it: the store imports this module on every command.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

Encoded = tuple[str, str, "bytes | None", "str | None"]  # (name, encoding, data, meta)


def timestamp(dt: datetime) -> str:
    """A fixed-width UTC timestamp that sorts as text, the form every time column uses.

    >>> timestamp(datetime(2026, 11, 28, 6, tzinfo=timezone.utc))
    '2026-11-28T06:00:00.000000Z'
    """
    if dt.tzinfo is None:
        raise ValueError("timestamps must carry a timezone")
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_timestamp(text: str | None) -> datetime | None:
    """Inverse of `timestamp`.

    >>> parse_timestamp('2026-11-28T06:00:00.000000Z')
    datetime.datetime(2026, 11, 28, 6, 0, tzinfo=datetime.timezone.utc)
    """
    if text is None:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def encode_table(table: Any) -> list[Encoded]:
    """Every planning column of an OfferTable, encoded (the provider column is left out: each
    holder keys its columns by provider itself)."""
    from rentopt.optimizer.offer_table import ARRAY_COLUMNS, LIST_COLUMNS, PRICE_COLUMNS

    ids = table.offer_id
    out: list[Encoded] = [("offer_id", "text", "\x00".join(ids).encode(), None) if not any("\x00" in i for i in ids)
                          else ("offer_id", "json", None, json.dumps(list(ids)))]
    for name in LIST_COLUMNS:
        if name in ("offer_id", "provider"):
            continue
        codes, values = table.category(name)
        if name == "fetched_at":
            values = [timestamp(v) for v in values]
        out.append((name, "codes", codes.astype("<i4").tobytes(), json.dumps(values)))
    for name in ARRAY_COLUMNS:
        out.append((name, *encode_array(getattr(table, name))))
    for name in PRICE_COLUMNS:
        for kind in (0, 1):
            out.append((f"{name}.{kind}", *encode_array(getattr(table, name)[kind])))
    out.append(("terms", "json", None, json.dumps([[k, r, h, p] for (k, r), blocks in sorted(table.terms.items())
                                                  for h, p in blocks])))
    notes = [None] * table.n
    for r, note in table.extra_notes.items():
        notes[r] = note
    out.append(encode_strings("extra_notes", notes))
    return out


def encode_strings(name: str, values: Sequence[str | None]) -> Encoded:
    """A column of strings (or None) as codes."""
    import numpy as np

    index: dict = {}
    codes = [index.setdefault(v, len(index)) for v in values]
    return name, "codes", np.array(codes, dtype="<i4").tobytes(), json.dumps(list(index))


def encode_array(values) -> tuple[str, bytes | None, str | None]:  # noqa: ANN001 - a numpy array
    import numpy as np

    if len(values):
        first = values[0]
        same = np.isnan(values).all() if values.dtype.kind == "f" and first != first else (values == first).all()
        if same:
            item = first.item()
            return "const", None, json.dumps(None if item != item else item)
    kind = {"f": ("f8", "<f8"), "i": ("i8", "<i8"), "b": ("b1", "u1")}[values.dtype.kind]
    return kind[0], np.ascontiguousarray(values, dtype=kind[1]).tobytes(), None


def decode_column(name: str, encoding: str, rows: int, data: bytes | None, meta: str | None):  # noqa: ANN201
    """One encoded column of `rows` rows as offer_table holds it (an array, `Const`, `Codes`,
    `Texts` or, for `json`, the decoded value). ValueError, TypeError or KeyError when it is
    damaged, a per-row column of another length included."""
    import numpy as np

    from rentopt.optimizer.offer_table import Codes, Const, Texts

    if encoding == "const":
        value = json.loads(meta or "null")
        return Const(float("nan") if value is None else value)
    if encoding in ("f8", "i8", "b1"):
        dtype = {"f8": "<f8", "i8": "<i8", "b1": "u1"}[encoding]
        values = np.frombuffer(data or b"", dtype=dtype)
        _check_rows(name, len(values), rows)
        return values.astype(bool) if encoding == "b1" else values
    if encoding == "codes":
        values = json.loads(meta or "[]")
        if name == "fetched_at":
            values = [parse_timestamp(v) for v in values]
        codes = np.frombuffer(data or b"", dtype="<i4")
        _check_rows(name, len(codes), rows)
        return Codes(codes, values)
    if encoding == "text":
        return Texts(data or b"", rows)
    if encoding == "json":
        return json.loads(meta or "[]")
    raise ValueError(f"unknown column encoding {encoding!r}")


def _check_rows(name: str, found: int, rows: int) -> None:
    if found != rows:
        raise ValueError(f"{found} values of {name} for {rows} rows")


# read(*names) -> {name: [the decoded column of each source, None where a source has none]}
Reader = Callable[..., dict[str, list]]


def merge_encoded(read: Reader, sources: list[str], sizes: list[int], names: Sequence[str], extra: Any = None) -> Any:
    """The Part of several sources' encoded columns (`sources[i]` holds `sizes[i]` rows;
    `names` are the columns they hold), rows one source after the other, then the rows of the
    Part `extra`, if given. Each source's `provider` column is its name. Read and merged column
    by column: a million rows are never held twice (their bytes, then the merged column).
    ValueError, TypeError or KeyError when a column is missing or damaged."""
    import numpy as np

    from rentopt.optimizer.offer_table import PRICE_COLUMNS, Const, Part, merge_column, merge_prices, shifted

    if extra is not None:
        sizes = [*sizes, extra.n]

    def merged(name: str, values: list) -> Any:
        return merge_column(name, values if extra is None else [*values, extra.columns.get(name)], sizes)

    columns: dict = {"provider": merged("provider", [Const(s) for s in sources])}
    for name in names:
        if "." in name or name in ("terms", "extra_notes", "provider"):
            continue
        (values,) = read(name).values()
        if name == "offer_id":
            for source, ids, n in zip(sources, values, sizes):
                if ids is None or len(ids) != n:
                    raise ValueError(f"{source}: {0 if ids is None else len(ids)} offer ids for {n} rows")
        columns[name] = merged(name, values)
    if "offer_id" not in columns:
        raise ValueError("no offer id column")
    if extra is not None:  # a column only the extra rows have (none today: every source holds every column)
        for name in set(extra.columns) - set(columns):
            columns[name] = merged(name, [None] * len(sources))
    prices = {}
    for name in PRICE_COLUMNS:
        pairs = read(f"{name}.0", f"{name}.1")
        per_source: list = []
        for first, second, n in zip(pairs[f"{name}.0"], pairs[f"{name}.1"], sizes):
            if first is None or second is None:
                raise KeyError(f"{name}.0")
            if isinstance(first, Const) and isinstance(second, Const) and repr(first.value) == repr(second.value):
                per_source.append(first)
            else:
                per_source.append(np.stack([np.full(n, v.value, dtype=np.float64) if isinstance(v, Const) else v
                                            for v in (first, second)]))
        if extra is not None:
            per_source.append(extra.prices.get(name, Const(float("nan"))))
        prices[name] = merge_prices(per_source, sizes)
    per_row = read("terms", "extra_notes")
    pieces = []  # each source's terms and notes by its own rows, then the extra rows'
    for n, stored_terms, stored_notes in zip(sizes, per_row["terms"], per_row["extra_notes"]):
        terms: dict = defaultdict(list)
        for k, r, h, p in stored_terms or []:
            terms[(int(k), int(r))].append((float(h), float(p)))
        notes: dict = {}
        if stored_notes is not None and not isinstance(stored_notes, Const) and stored_notes.values:
            named = np.flatnonzero(np.array([v is not None for v in stored_notes.values], dtype=bool)[stored_notes.codes])
            notes = {int(r): stored_notes.values[stored_notes.codes[r]] for r in named}
        pieces.append(Part(n, {}, {}, {key: tuple(v) for key, v in terms.items()}, notes))
    if extra is not None:
        pieces.append(extra)
    terms, notes = shifted(pieces, np.cumsum([0, *sizes]))
    return Part(sum(sizes), columns, prices, terms, notes)
