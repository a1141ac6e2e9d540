"""`rentopt offers --format json|csv` of an offers file, written from its columns.

The output is the one `offers_io.write_offers_json` / `write_offers_csv` writes for the same
offers, byte for byte, without an Offer per row: offers_reader.Listing holds, per row, every
value the Offer of a CSV line holds (the table's columns, and its EXACT_COLUMNS: the exact
Decimal prices, the source, the date as written), mostly as codes of a few distinct values.

- JSON: each field's text is what pydantic writes for the value (the field's own serializer,
  called once per distinct value and re-indented to the offer's depth), in Offer's field order;
  the fields a CSV line cannot set are the Offer defaults. Offer ids, one per row, are written by
  pydantic a chunk at a time.
- CSV: each cell as `offers_io.offer_to_csv_row` writes it (its cell functions, text.csv_cell
  for text from outside), once per distinct value; rows go through the same csv.writer.

Rows are written CHUNK at a time, so a listing of a large file never holds its whole text
(JSON takes more than a kilobyte per offer). A file read as full offers (a JSON file, a CSV file Arrow cannot
number line by line: Listing.offers) is written from those offers by offers_io's writers.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import cache
from itertools import repeat
from typing import Any, TextIO

import numpy as np
from pydantic import TypeAdapter
from rentopt.optimizer.models import UNKNOWN_DATE, Offer, PriceOption
from rentopt.optimizer.offers_io import (
    CSV_COLUMNS,
    CSV_TEXT_COLUMNS,
    PRICE_COLUMNS,
    csv_date,
    csv_days,
    csv_number,
    csv_yes_no,
    write_offers_csv,
    write_offers_json,
)
from rentopt.optimizer.offers_reader import Listing

CHUNK = 20_000  # rows per write: few writes, and tens of MB of text at a time at most


@dataclass
class ListedRows:
    """What `rentopt offers` shows of an offers file: `rows` of `listing` in the order shown,
    and `suspect` (row -> the reason its price is suspect) with --suspect."""

    listing: Listing
    rows: np.ndarray
    suspect: dict[int, str] = field(default_factory=dict)
    suspect_only: bool = False  # --suspect: every row shown carries its reason in extra

    def __len__(self) -> int:
        return len(self.rows)

    def offers(self) -> list[Offer]:
        """The shown rows as full offers (a file read as offers: those, with their reasons)."""
        every = self.listing.offers
        found = [every[int(r)] for r in self.rows] if every is not None else self.listing.table.offers(self.rows.tolist())
        if not self.suspect_only:
            return found
        return [o.model_copy(update={"extra": {**o.extra, "suspect": self.suspect[int(r)]}})
                for o, r in zip(found, self.rows)]


def write_listed_json(listed: ListedRows, fp: TextIO) -> None:
    """`write_offers_json(listed.offers(), fp)`, from the columns."""
    if listed.listing.offers is not None:
        write_offers_json(listed.offers(), fp)
        return
    if not len(listed):
        fp.write("[]\n")
        return
    pieces = _json_pieces(listed)
    fp.write("[\n")
    for start in range(0, len(listed), CHUNK):
        rows = listed.rows[start:start + CHUNK]
        if start:
            fp.write(",\n")
        fp.write(",\n".join(map("".join, zip(*(piece(rows) for piece in pieces)))))
    fp.write("\n]\n")


def write_listed_csv(listed: ListedRows, fp: TextIO) -> list[Offer]:
    """`write_offers_csv(listed.offers(), fp)`, from the columns; the offers left out (a CSV
    line's offer always has a price of its own kind: none, unless the file was read as offers)."""
    if listed.listing.offers is not None:
        return write_offers_csv(listed.offers(), fp)
    writer = csv.writer(fp, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    cells = _csv_cells(listed.listing)
    for start in range(0, len(listed), CHUNK):
        rows = listed.rows[start:start + CHUNK]
        writer.writerows(zip(*(cells[c](rows) for c in CSV_COLUMNS)))
    return []


# --------------------------------------------------------------------------------------------
# Columns as text, a chunk of rows at a time: each a function rows -> one str per row.

Piece = Callable[[np.ndarray], Sequence[str]]


def _coded(codes: np.ndarray, values: Sequence[Any], text: Callable[[Any], str]) -> Piece:
    """A column held as `values[codes[row]]`, each distinct value's text worked out once (when
    first shown)."""
    texts = np.empty(len(values), dtype=object)
    done = np.zeros(len(values), dtype=bool)

    def piece(rows: np.ndarray) -> list[str]:
        mine = codes[rows]
        wanted = np.unique(mine[~done[mine]]) if not done.all() else ()
        for v in wanted:
            texts[v] = text(values[v])
            done[v] = True
        return texts[mine].tolist()

    return piece


def _numbers(array: np.ndarray, text: Callable[[Any], str]) -> Piece:
    """A numeric column, each distinct value's text worked out once; floats are told apart by
    their bits (0.0 and -0.0 are written differently), NaN (unknown) is None."""
    floats = array.dtype.kind == "f"
    cache_: dict[int, str] = {}

    def piece(rows: np.ndarray) -> list[str]:
        mine = np.asarray(array[rows])
        keys = mine.view(np.int64) if floats else mine.astype(np.int64)
        distinct, inverse = np.unique(keys, return_inverse=True)
        found = np.empty(len(distinct), dtype=object)
        for i, key in enumerate(distinct.tolist()):
            if key not in cache_:
                value = float(np.int64(key).view(np.float64)) if floats else key
                cache_[key] = text(None if floats and math.isnan(value) else value)
            found[i] = cache_[key]
        return found[inverse.reshape(-1)].tolist()

    return piece


def _category(listing: Listing, name: str, text: Callable[[Any], str]) -> Piece:
    return _coded(*listing.table.category(name), text)


def _cells(listing: Listing, name: str, text: Callable[[Any], str]) -> Piece:
    return _coded(*listing.cells[name], text)


def _constant(text: str) -> Piece:
    return lambda rows: repeat(text, len(rows))  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# JSON

# The fields of a CSV line's Offer and where the columns hold them (offers_io._offer_from_row
# sets these; every other field is the Offer default).
_FROM_COLUMNS = frozenset({
    "provider", "offer_id", "gpu", "gpu_raw", "gpu_status", "gpus", "gpu_memory_gb", "interconnect", "region",
    "spot", "price_options", "storage_gb_month", "egress_gb", "ingress_gb", "max_duration_hours", "stopped_bills",
    "stopped_max_days", "free_disk_gb", "currency", "fetched_at", "source", "dated_by", "extra",
})
_DEPTH = "\n    "  # an offer's fields, inside the list: two levels of two spaces


@cache
def _adapter(name: str) -> TypeAdapter:
    return TypeAdapter(Offer.model_fields[name].annotation)


def _json(name: str) -> Callable[[Any], str]:
    """The text pydantic writes for a value of Offer field `name`, at the depth of an offer's fields."""
    adapter = _adapter(name)
    return lambda value: adapter.dump_json(value, indent=2).decode().replace("\n", _DEPTH)


def _json_pieces(listed: ListedRows) -> list[Piece]:
    """The pieces whose concatenation is each row's JSON object, in Offer's field order."""
    listing, table = listed.listing, listed.listing.table
    varying: dict[str, Piece] = {
        "provider": _category(listing, "provider", _json("provider")),
        "offer_id": _json_ids(table),
        "gpu": _category(listing, "gpu", _json("gpu")),
        "gpu_raw": _category(listing, "gpu_raw", _json("gpu_raw")),
        "gpu_status": _category(listing, "gpu_status", _json("gpu_status")),
        "gpus": _numbers(np.asarray(table.gpus), _json("gpus")),
        "gpu_memory_gb": _numbers(np.asarray(table.gpu_memory_gb), _json("gpu_memory_gb")),
        "interconnect": _category(listing, "interconnect", _json("interconnect")),
        "region": _coded(*listing.region, _json("region")),
        "spot": _numbers(np.asarray(table.spot), lambda v: _json("spot")(bool(v))),
        "price_options": _json_price_options(listing),
        "storage_gb_month": _cells(listing, "storage_gb_month", _decimal_json("storage_gb_month")),
        "egress_gb": _cells(listing, "egress_gb", _decimal_json("egress_gb")),
        "ingress_gb": _cells(listing, "ingress_gb", _decimal_json("ingress_gb")),
        "max_duration_hours": _numbers(np.asarray(table.max_hours), _json("max_duration_hours")),
        "stopped_bills": _category(listing, "stopped_bills", _json("stopped_bills")),
        "stopped_max_days": _cells(listing, "stopped_max_days", _json("stopped_max_days")),
        "free_disk_gb": _numbers(np.asarray(table.free_disk_gb), _json("free_disk_gb")),
        "currency": _category(listing, "currency", _json("currency")),
        # a date nobody knows (UNKNOWN_DATE, only ever an Offer's of dated_by "unknown") is null
        "fetched_at": _cells(listing, "fetched_at", lambda v: "null" if v[1] == UNKNOWN_DATE else _json("fetched_at")(v[1])),
        "source": _cells(listing, "source", _json("source")),
        "dated_by": _cells(listing, "fetched_at", lambda v: _json("dated_by")("unknown" if v[1] == UNKNOWN_DATE
                                                                           else "published")),
        "extra": _json_extra(listed),
    }
    assert set(varying) == _FROM_COLUMNS
    pieces: list[Piece] = []
    text = "  {"  # constant text not yet in a piece
    for position, name in enumerate(Offer.model_fields):
        key = f'{"," if position else ""}{_DEPTH}"{name}": '
        if name in varying:
            # the constant text as a piece of its own: the row's join copies it, no string per cell
            pieces += [_constant(text + key), varying[name]]
            text = ""
        else:
            default = Offer.model_fields[name].get_default(call_default_factory=True)
            text += key + _json(name)(default)
    pieces.append(_constant(text + "\n  }"))
    return pieces


def _decimal_json(name: str) -> Callable[[Any], str]:
    """A Decimal field's text from the Decimal's own text (None: unknown)."""
    write = _json(name)
    return lambda value: write(None if value is None else Decimal(value))


def _json_ids(table: Any) -> Piece:
    """Offer ids, one per row: one pydantic call writes a chunk of them, one per line (JSON
    text never holds a line end), and the lines are the ids' texts."""
    assert Offer.model_fields["offer_id"].annotation is str
    many = TypeAdapter(list[str])

    def piece(rows: np.ndarray) -> list[str]:
        from rentopt.optimizer.offer_table import values_at

        lines = many.dump_json(values_at(table.offer_id, rows), indent=2).decode().split("\n")[1:-1]
        return [line[2:-1] for line in lines[:-1]] + [lines[-1][2:]]  # "  <id>," and, last, "  <id>"

    return piece


def _json_price_options(listing: Listing) -> Piece:
    """price_options: the options of the line's filled price columns, finest unit first, each
    of the offer's own kind (offers_io._offer_from_row), as pydantic writes the list."""
    spot = np.asarray(listing.table.spot)
    write = _json("price_options")
    columns = [(unit, *listing.cells[column]) for column, unit in PRICE_COLUMNS.items()]
    option_text: dict[tuple, str] = {}

    def option(unit: Any, amount: str, interruptible: bool) -> str:
        """One option's text, as the list writes it, without the brackets: '\\n      {...}'."""
        key = (unit, amount, interruptible)
        if key not in option_text:
            whole = write([PriceOption(unit=unit, amount=Decimal(amount), interruptible=interruptible)])
            option_text[key] = whole[1:-len(_DEPTH) - 1]  # "[" ... "\n    ]"
        return option_text[key]

    closing = _DEPTH + "]"

    def piece(rows: np.ndarray) -> list[str]:
        kinds = spot[rows].tolist()
        out = ["["] * len(rows)
        seen = [False] * len(rows)
        for unit, codes, values in columns:
            amounts = [values[c] for c in codes[rows].tolist()]
            for i, (amount, kind) in enumerate(zip(amounts, kinds)):
                if amount is not None:
                    out[i] += ("," if seen[i] else "") + option(unit, amount, kind)
                    seen[i] = True
        return [o + closing for o in out]

    return piece


def _json_extra(listed: ListedRows) -> Piece:
    """extra: a bare GPU name's note and candidates, and with --suspect the reason."""
    codes, values = listed.listing.cells["gpu_extra"]
    write = _json("extra")

    def extra(value: Any) -> dict:
        return {} if value is None else {"gpu_note": value[0], "gpu_candidates": list(value[1])}

    if not listed.suspect_only:
        return _coded(codes, values, lambda v: write(extra(v)))
    reasons = listed.suspect
    texts: dict[tuple, str] = {}

    def piece(rows: np.ndarray) -> list[str]:
        out = []
        for row, code in zip(rows.tolist(), codes[rows].tolist()):
            key = (code, reasons[row])
            if key not in texts:
                texts[key] = write({**extra(values[code]), "suspect": reasons[row]})
            out.append(texts[key])
        return out

    return piece


# --------------------------------------------------------------------------------------------
# CSV


def _csv_cells(listing: Listing) -> dict[str, Piece]:
    """Each CSV column as offers_io.offer_to_csv_row writes it, text from outside inert (csv_cell)."""
    from rentopt.optimizer.offer_table import values_at
    from rentopt.optimizer.text import csv_cell

    table = listing.table

    def text_cell(column: str, fn: Callable[[Any], str]) -> Callable[[Any], str]:
        return (lambda v: csv_cell(fn(v))) if column in CSV_TEXT_COLUMNS else fn

    def plain(v: Any) -> str:
        return "" if v is None else str(v)

    gpu_codes, gpus = table.category("gpu")
    raw_codes, raws = table.category("gpu_raw")

    def gpu_cell(rows: np.ndarray) -> list[str]:  # the catalog id, else the name as written
        pair = gpu_codes[rows].astype(np.int64) * max(len(raws), 1) + raw_codes[rows]
        distinct, inverse = np.unique(pair, return_inverse=True)
        names = np.array([text_cell("gpu", str)(gpus[d // max(len(raws), 1)] or raws[d % max(len(raws), 1)])
                          for d in distinct.tolist()], dtype=object)
        return names[inverse.reshape(-1)].tolist()

    cells: dict[str, Piece] = {
        "provider": _category(listing, "provider", text_cell("provider", str)),
        "offer_id": lambda rows: [text_cell("offer_id", str)(v) for v in values_at(table.offer_id, rows)],
        "gpu": gpu_cell,
        "gpus": _numbers(np.asarray(table.gpus), str),
        "currency": _category(listing, "currency", text_cell("currency", str)),
        "storage_gb_month": _cells(listing, "storage_gb_month", plain),
        "egress_gb": _cells(listing, "egress_gb", plain),
        "ingress_gb": _cells(listing, "ingress_gb", plain),
        "interconnect": _category(listing, "interconnect", str),
        "region": _coded(*listing.region, text_cell("region", lambda v: v or "")),
        "spot": _numbers(np.asarray(table.spot), lambda v: csv_yes_no(bool(v))),
        "max_days": _numbers(np.asarray(table.max_hours), csv_days),
        "stopped_bills": _category(listing, "stopped_bills", str),
        "stopped_max_days": _cells(listing, "stopped_max_days", csv_number),
        "free_disk_gb": _numbers(np.asarray(table.free_disk_gb), lambda v: csv_number(v or None)),
        "gpu_memory_gb": _numbers(np.asarray(table.gpu_memory_gb), csv_number),
        "fetched_at": _cells(listing, "fetched_at", lambda v: csv_date(v[1])),
        "source": _cells(listing, "source", text_cell("source", str)),
    }
    cells.update({column: _cells(listing, column, plain) for column in PRICE_COLUMNS})
    assert set(cells) == set(CSV_COLUMNS)
    return cells
