"""Offers files read as columns: an OfferTable of 1,000,000 CSV lines without an Offer per line.

`read_offers_table(path)` gives what `offers_io.read_offers_file` gives, as an OfferTable
whose resolver builds the full Offers of the rows a quote keeps by reading their lines again
with offers_io's own line parser. It accepts and refuses exactly what that function does, with
the same messages:

- The file is split into cells by Apache Arrow's CSV reader (pyarrow.csv), whatever its
  dialect: LF or CRLF line ends, quoted cells, a byte-order mark, UTF-8 text, empty cells.
  Every cell is read as text; a line with more or fewer cells than the header is handed to
  `invalid_row_handler`, which says its line number.
- Every cell is worked out once per distinct value (a 1,000,000-line file has a few dozen GPU
  spellings, currencies and counts, a few thousand prices), by the same checks offers_io
  applies to a line. A line whose cells all pass, and whose prices lie clearly inside the
  sane bands (optimizer/sanity.py; float arithmetic, so anything within a part in a billion of
  a band's edge is left to the exact check), goes into the columns as it is.
- Every other line (a bad cell, a price near a band's edge, more or fewer cells than the
  header, a blank line) is read by offers_io's line parser itself, in file order, so the first
  bad line raises exactly the error it raises there; good ones join the columns.
- A file Arrow cannot number line for line (a quoted cell running over several lines, a NUL
  byte, a cell over the csv module's size limit: rare in offers files) is read whole by
  offers_io's reader, the reference, which says what is wrong where.

The lines a quote keeps are read again from the file instead of holding its bytes (a file
changed in between is refused). JSON files are validated as offers_io validates them (one
strict pass) and become a table.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from rentopt.optimizer.errors import OffersFileError
from rentopt.optimizer.models import UNKNOWN_DATE, Offer, hour_price
from rentopt.optimizer.offer_table import (
    Codes, OfferTable, Part, Texts, ValueCodes, constant, merge_parts, take_strings,
)
from rentopt.optimizer import offers_io as io_
from rentopt.optimizer import row_check
from rentopt.optimizer.row_check import _CONTROL, _CONTROL_NOT_SPACE, MAX_FUTURE, provider_name_problem
from rentopt.optimizer.offers_io import (
    FALSE_WORDS, HOURS_PER_DAY, OFFER_LIMITS, PRICE_COLUMNS, STOPPED_BILLS, TRUE_WORDS,
)

_NAN = float("nan")
_UNIT_HOURS = {"price_hour": 1, "price_day": 24, "price_week": 168, "price_month": 730}  # Offer's default month
_TABLE_PRICES = {"price_hour": "hourly", "price_day": "day", "price_week": "week", "price_month": "month"}
_CURRENCY = re.compile(r"[A-Z]{3}")
# Band edges are compared in floats here; a price this close to one is checked exactly instead.
_EDGE = 1e-9
_BAD = object()  # a cell value that sends its line to the exact parser


def read_offers_table(path: Path) -> OfferTable:
    """The offers of an --offers-file as an OfferTable (see the module docstring)."""
    return _read(Path(path), listing=False)[0]


@dataclass
class Listing:
    """An offers file as `rentopt offers` lists it: its table, and per row what a listing filters
    and sorts by that the planner's table leaves out, each as (codes, values) with
    `values[codes[row]]` the row's: `region` (str or None, as the Offer's) and `hour_price`
    (models.hour_price, an exact Decimal or None). Full offers are built only for the rows shown.

    `cells`: the rest of what the Offer of a CSV line holds that the table has only as floats or
    not at all, each as (codes, values), for writing the listing's JSON and CSV from columns
    (offers_writer): see EXACT_COLUMNS. `offers`: where the file was read as full offers (a JSON
    file, a CSV file Arrow cannot number line by line), those offers, row for row; `cells` is
    then empty."""

    table: OfferTable
    region: tuple[np.ndarray, list]
    hour_price: tuple[np.ndarray, list]
    cells: dict[str, tuple[np.ndarray, list]]
    offers: list[Offer] | None = None


# A Listing's `cells`, by the Offer field each gives (values[codes[row]] the row's value):
# - price_hour, price_day, price_week, price_month: the text of the Decimal amount of the line's
#   option of that unit (str(Decimal): "2.10" and "2.1" stay two values), None without one;
# - storage_gb_month, egress_gb, ingress_gb: the text of the Decimal, None when unknown;
# - stopped_max_days: the float, None when not given;
# - source: the Offer's source; fetched_at: (its isoformat, the datetime), so that one instant
#   written with two offsets stays two values;
# - gpu_extra: (note, candidates) of a bare GPU name read as the usual variant, else None.
EXACT_COLUMNS = ("price_hour", "price_day", "price_week", "price_month", "storage_gb_month", "egress_gb",
                 "ingress_gb", "stopped_max_days", "source", "fetched_at", "gpu_extra")


def read_offers_listing(path: Path) -> Listing:
    """The offers of an --offers-file for `rentopt offers` (see Listing): the same checks and
    errors as `read_offers_table`."""
    table, extra = _read(Path(path), listing=True)
    assert extra is not None
    offers = extra.pop("offers", None)
    region, prices = extra.pop("region"), extra.pop("hour_price")
    return Listing(table, region, prices, extra, offers)


def _read(path: Path, *, listing: bool) -> tuple[OfferTable, dict | None]:
    try:
        signature = _signature(path.stat())
    except OSError:
        signature = ()  # read_limited says why it cannot be read
    data = _csv_bytes(path) if path.suffix.lower() == ".csv" else None
    if data is None:
        data = io_.read_limited(path)
        if io_.is_json(path, data):
            offers = io_.parse_offers_json(data, path.name)
            io_.check_nonempty(offers, path.name)
            io_.check_unique(offers, path.name)
            return _of_offers(offers, listing)
    # a spreadsheet's byte-order mark is not part of the header
    skipped = 3 if bytes(memoryview(data)[:3]) == b"\xef\xbb\xbf" else 0
    lines = _Lines(data, skipped)
    del data  # `lines` holds the only copy, let go once Arrow has read it
    return _parse_csv(lines, name=path.name, fetched_at=io_.file_time(path), source=str(path.resolve()),
                      file=(path.resolve(), signature), listing=listing)


def _csv_bytes(path: Path) -> Any | None:
    """The bytes of a CSV file as one Arrow buffer (Arrow's memory pool gives a large block in
    large pages: reading 80 MB costs ~40 ms less than into a bytes object, mostly page faults),
    or None where `io_.read_limited` is to read it and say what is wrong: not a regular file (a
    pipe, a device), larger than MAX_OFFERS_FILE_BYTES, not readable."""
    import stat

    import pyarrow as pa

    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        with pa.OSFile(str(path)) as fp:
            if fp.size() > io_.MAX_OFFERS_FILE_BYTES:
                return None
            data = fp.read_buffer()
    except (OSError, pa.ArrowException):
        return None
    return data if data.size <= io_.MAX_OFFERS_FILE_BYTES else None


def _of_offers(offers: list[Offer], listing: bool) -> tuple[OfferTable, dict | None]:
    """Full offers (a JSON file, a file read line by line) as a table, with their listing columns."""
    return OfferTable.from_offers(offers), {**_listing_of(offers), "offers": offers} if listing else None


def _listing_of(offers: Sequence[Offer], *, exact: bool = False) -> dict:
    """The listing columns of full offers: region and hour_price, and with `exact` the
    EXACT_COLUMNS of offers read from CSV lines (by offers_io's line parser: at most one price
    option per unit, all of the offer's own kind, no reserved term)."""
    from rentopt.optimizer.offer_table import code_values

    found = {"region": code_values([o.region for o in offers]), "hour_price": code_values([hour_price(o) for o in offers])}
    if not exact:
        return found

    def text(amount: Decimal | None) -> str | None:
        return None if amount is None else str(amount)

    for column, unit in PRICE_COLUMNS.items():
        found[column] = code_values([next((text(p.amount) for p in o.price_options if p.unit == unit), None)
                                     for o in offers])
    for column in ("storage_gb_month", "egress_gb", "ingress_gb"):
        found[column] = code_values([text(getattr(o, column)) for o in offers])
    found["stopped_max_days"] = code_values([o.stopped_max_days for o in offers])
    found["source"] = code_values([o.source for o in offers])
    found["fetched_at"] = code_values([(o.fetched_at.isoformat(), o.fetched_at) for o in offers])
    found["gpu_extra"] = code_values([(o.extra["gpu_note"], tuple(o.extra["gpu_candidates"])) if o.extra else None
                                      for o in offers])
    return found


class _Lines:
    """The file's lines (its bytes `data`, a bytes object or an Arrow buffer, after the first `skipped`, a byte-order mark: not
    copied to drop them), and reading a few of them again (the rows a quote keeps): from the
    bytes read, or, once those are let go (`from_file`), from the file itself."""

    def __init__(self, data: Any, skipped: int = 0):
        self.data: Any = data
        self.skipped, self.size = skipped, len(data) - skipped
        # where each line ends, a block of bytes at a time (one comparison of the whole file
        # would hold a flag per byte); a file is at most MAX_OFFERS_FILE_BYTES, so int32 holds it
        view, block = np.frombuffer(data, dtype=np.uint8, offset=skipped), 1 << 22
        self.ends = np.concatenate([np.zeros(0, np.int32)] + [
            np.flatnonzero(view[at:at + block] == 10).astype(np.int32) + np.int32(at) for at in range(0, self.size, block)])
        self.count = len(self.ends) + (0 if bytes(memoryview(data)[-1:]) == b"\n" else 1)  # as the csv module counts lines
        self._file: tuple[Path, tuple] | None = None

    def longest(self) -> int:
        """The length of the longest line in bytes, its line end included."""
        ends = self.ends
        if not len(ends):
            return self.size
        gaps = int(np.diff(ends).max()) if len(ends) > 1 else 0
        return max(int(ends[0]) + 1, gaps, self.size - int(ends[-1]) - 1)

    def holds_nul(self) -> bool:
        """Whether a line holds a NUL byte (the least byte is 0: no flag per byte)."""
        view = np.frombuffer(self.body(), dtype=np.uint8)
        return bool(len(view)) and int(view.min()) == 0

    def body(self) -> memoryview:
        """The bytes of the lines."""
        assert self.data is not None
        return memoryview(self.data)[self.skipped:]

    def from_file(self, path: Path, signature: tuple) -> None:
        """Read lines again from `path` (which had `signature` when read) instead of holding its bytes."""
        self._file, self.data = (path, signature), None

    def texts(self, numbers: Sequence[int]) -> list[str]:
        """Lines `numbers` (1-based), as text."""
        ends = self.ends
        cuts = [(0 if line == 1 else int(ends[line - 2]) + 1, int(ends[line - 1]) + 1 if line - 1 < len(ends)
                 else self.size) for line in numbers]
        skipped = self.skipped
        if self.data is not None:
            data = memoryview(self.data)
            return [bytes(data[skipped + start:skipped + stop]).decode("utf-8") for start, stop in cuts]
        path, signature = self._file  # type: ignore[misc]
        try:
            with path.open("rb") as fp:  # once for all the rows asked for
                changed = _signature(os.fstat(fp.fileno())) != signature
                found = []
                for start, stop in cuts:
                    fp.seek(skipped + start)
                    found.append(fp.read(stop - start))
        except OSError as exc:
            raise OffersFileError(f"cannot read offers file {path} again: {exc.strerror or exc}") from None
        if changed or any(len(line) != stop - start for line, (start, stop) in zip(found, cuts)):
            raise OffersFileError(f"{path.name} changed while it was read; run the quote again")
        return [line.decode("utf-8") for line in found]


def _signature(stat: os.stat_result) -> tuple:
    return (stat.st_ino, stat.st_size, stat.st_mtime_ns)


def _parse_csv(lines: _Lines, *, name: str, fetched_at: datetime, source: str,
               file: tuple[Path, tuple] | None, listing: bool) -> tuple[OfferTable, dict | None]:
    body = lines.body()
    head = bytes(body[:int(lines.ends[0]) + 1] if len(lines.ends) else body)
    try:
        header = _header(head.decode("utf-8"), name)
    except UnicodeDecodeError:
        header = []  # the whole file is checked below, to name the first bad byte
    cells = _ArrowCells.read(lines, len(header), name) if header and not lines.holds_nul() else None
    if cells is None:
        return _of_offers(_read_exactly(bytes(body), name=name, fetched_at=fetched_at, source=source), listing)
    del body  # the file's bytes: let go once the lines a quote keeps are read from the file
    if file is not None:
        lines.from_file(*file)
    reader = _Reader(header, name, fetched_at, source, listing=listing)
    for line, text in cells.invalid:  # more or fewer cells than the header (offers_io says which), blank
        reader.slow.append((line, _dict_row(header, text)))
    # counted before the other columns are coded: its hash table of every id then shares memory
    # with the text columns, not with the table being built
    ids_distinct = cells.ids_distinct(reader.column["offer_id"])
    reader.chunk(cells, cells.line_numbers)
    del cells  # Arrow's columns: the table holds what the quote needs
    import pyarrow as pa

    pa.default_memory_pool().release_unused()  # hand the freed columns back to the system
    return reader.finish(lines, ids_distinct=ids_distinct)


def _read_exactly(data: bytes, *, name: str, fetched_at: datetime, source: str) -> list[Offer]:
    """The file read by offers_io's line reader (the reference), for what Arrow cannot number."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OffersFileError(f"{name} is not UTF-8 text (byte {exc.start}); save it as UTF-8 CSV") from None
    offers = io_.parse_offers_csv(text, name=name, fetched_at=fetched_at, source=source)
    io_.check_nonempty(offers, name)
    io_.check_unique(offers, name)
    return offers


def _header(text: str, name: str) -> list[str]:
    """The header line's column names, checked as offers_io checks them."""
    first = csv.reader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in (next(first, None) or [])]
    except csv.Error as exc:
        raise OffersFileError(f"{name} line 1 is not CSV ({exc})") from None
    io_.check_header(header, name)
    return header


class _ArrowCells:
    """The cells of a CSV file read by pyarrow.csv, every column as text, and the line number
    of each row. Arrow reads any dialect the csv module reads (LF or CRLF, quoted cells with
    commas or doubled quotes, empty cells) in C++.

    Chosen over polars (as fast, measured on large files) because Arrow's reader says the line
    number of each row with too many or too few cells (`invalid_row_handler`), which keeps
    errors row-level without a second tokenizer; its dictionary encoding codes a column
    exactly, without polars' process-wide category ids; and its peak memory was lower."""

    def __init__(self, table: Any, line_numbers: np.ndarray, invalid: list[tuple[int, list[str]]]):
        self.table, self.n = table, table.num_rows
        self.line_numbers, self.invalid = line_numbers, invalid

    @classmethod
    def read(cls, lines: _Lines, width: int, name: str) -> _ArrowCells | None:
        """The cells of the file's `lines`, or None where the rows cannot be numbered line for line (a quoted
        cell over several lines, a cell the csv module refuses as too large, a file Arrow
        refuses): then offers_io's reader takes the whole file."""
        import pyarrow as pa
        from pyarrow import csv as arrow_csv

        names = [f"c{i}" for i in range(width)]  # by position: a repeated header name is csv.DictReader's business
        invalid: list = []

        def handler(row: Any) -> str:
            invalid.append((row.number, row.text))
            return "skip"

        body = pa.py_buffer(lines.body())
        if not _is_utf8(body):
            return None  # offers_io names the first bad byte
        try:
            # on one thread, where Arrow knows each row's line number (several threads cost no
            # less CPU time in a quote and held more memory: measured in the commit)
            table = arrow_csv.read_csv(
                body,
                read_options=arrow_csv.ReadOptions(use_threads=False, skip_rows=1, column_names=names),
                parse_options=arrow_csv.ParseOptions(newlines_in_values=True, ignore_empty_lines=False,
                                                     invalid_row_handler=handler),
                convert_options=arrow_csv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()),
                                                         strings_can_be_null=False, quoted_strings_can_be_null=False,
                                                         check_utf8=False))  # the whole body was checked
        except (pa.ArrowInvalid, OSError):
            return None  # not UTF-8, an empty body, an unterminated quote at the end: offers_io says
        if 1 + table.num_rows + len(invalid) != lines.count:
            return None  # a quoted cell holds a line end: rows are not lines
        limit = csv.field_size_limit()
        # a cell is no longer than its line: only a file with a line of `limit` bytes has its cells measured
        if lines.longest() >= limit and any(_longest_cell(table.column(i)) >= limit for i in range(width)):
            return None  # the csv module refuses such a cell: offers_io says where
        records = []
        for number, text in invalid:
            try:
                records.append((number, next(csv.reader([text]), [])))
            except csv.Error:
                return None
        skipped = np.array([number for number, _ in invalid], dtype=np.int64)
        numbers = np.arange(2, 2 + table.num_rows + len(invalid), dtype=np.int64)
        if len(skipped):
            numbers = numbers[~np.isin(numbers, skipped)]
        return cls(table, numbers, records)

    def distinct(self, j: int) -> tuple[np.ndarray, list[str]]:
        """Column j as (codes, distinct values): `values[codes[i]]` is row i's cell."""
        import pyarrow as pa

        column = self.table.column(j)
        if not pa.types.is_dictionary(column.type):
            # the coded column takes the text's place (the few lines read again by offers_io's
            # parser still find their cells there): a million cells of text freed now, handed
            # back to the system once every column is coded (`release`)
            column = _dictionary_coded(column.combine_chunks())
            self.table = self.table.set_column(j, self.table.schema.field(j).name, column)
        else:
            column = column.chunk(0)
        return _numbers(column.indices), column.dictionary.to_pylist()

    def plain_numbers(self, j: int) -> tuple[np.ndarray, np.ndarray]:
        """Of the distinct cells of column j (coded by `distinct`), those that are plain decimals
        (_PLAIN_DECIMAL) and their floats, by Arrow's pattern match and parser over all of them
        at once: ~1.4 us a cell less than Decimal and float one by one (~12k price cells at
        100k lines)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        values = self.table.column(j).chunk(0).dictionary
        rows = pc.indices_nonzero(pc.match_substring_regex(values, _PLAIN_DECIMAL))
        floats = pc.cast(values.take(rows), pa.float64())
        return _numbers(rows), np.frombuffer(floats.buffers()[1], dtype=np.float64)[floats.offset:floats.offset + len(floats)]

    @staticmethod
    def release() -> None:
        """Hand the memory of the freed text columns back to the system, all at once: done after
        each column, Arrow's allocator took back pages the next column's coding then touched
        afresh (~0.1-0.2 s of page faults at a million lines)."""
        import pyarrow as pa

        pa.default_memory_pool().release_unused()

    def offer_ids(self, j: int) -> tuple[Any, np.ndarray, np.ndarray]:
        """The id cells, stripped as offers_io strips them, which are empty, and the rows whose id
        holds a control character (row_check's `_CONTROL`: the door refuses such an id). The ids
        are one text buffer (`Texts`) where no id has white space at either end, else a list.

        The bytes of the column decide for most cells: str.strip() can only change a cell that
        starts or ends with a byte up to 0x20 or a non-ASCII one, and a control character is a
        byte under 0x20, 0x7f or non-ASCII; only such cells are looked at one by one."""
        column = self.table.column(j).combine_chunks()
        offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset:column.offset + len(column) + 1]
        chars = np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
        bounds = offsets - offsets[0] if offsets[0] else offsets  # int32: cell i is chars[bounds[i]:bounds[i + 1]]
        starts, ends = bounds[:-1], bounds[1:]
        empty = starts == ends
        filled = np.flatnonzero(~empty) if empty.any() else None  # None: every line has an id (no index of each)
        first = chars[starts if filled is None else starts[filled]]
        last = chars[(ends if filled is None else ends[filled]) - 1]
        odd = (first <= 0x20) | (first >= 0x80) | (last <= 0x20) | (last >= 0x80)
        edged = np.flatnonzero(odd) if filled is None else filled[odd]
        if any(v != v.strip() for v in column.take(_arrow_ints(edged)).to_pylist()):
            listed = [v.strip() for v in column.to_pylist()]
            return listed, np.array([not v for v in listed], dtype=bool), self._control_rows(column, chars, ends)
        # joined by NULs when first needed: no id holds a NUL (a file with one is read exactly)
        return Texts.cells(chars, bounds), empty, self._control_rows(column, chars, ends)

    @staticmethod
    def _control_rows(column: Any, chars: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """The rows of `column` (its bytes `chars`, each row ending at `ends`) whose cell,
        stripped, holds a control character: rows holding a byte under 0x20, 0x7f or a
        non-ASCII one, then Arrow's regular expression over those, then Python's pattern."""
        import pyarrow.compute as pc

        if not len(chars) or (chars.min() >= 0x20 and chars.max() < 0x7f):
            return np.zeros(0, dtype=np.int64)  # printable ASCII throughout (two reductions, no per-byte flags)
        odd = np.flatnonzero((chars < 0x20) | (chars >= 0x7f))
        rows = np.unique(np.searchsorted(ends, odd, side="right"))
        if len(rows):
            rows = rows[_numbers(pc.indices_nonzero(pc.match_substring_regex(column.take(_arrow_ints(rows)),
                                                                             _CONTROL_RE2)))]
        return rows[[bool(_CONTROL.search(v.strip())) for v in column.take(_arrow_ints(rows)).to_pylist()]]

    def printable(self, j: int) -> bool:
        """Whether every cell of column j is printable ASCII (bytes 0x20-0x7e), by each chunk's
        least and greatest byte (no flag per byte): then none holds a control character."""
        for chunk in self.table.column(j).chunks:
            buffers = chunk.buffers()
            if buffers[2] is None or not len(chunk):
                continue  # no text at all
            offsets = np.frombuffer(buffers[1], dtype=np.int32)[chunk.offset:chunk.offset + len(chunk) + 1]
            chars = np.frombuffer(buffers[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
            if len(chars) and (chars.min() < 0x20 or chars.max() > 0x7E):
                return False
        return True

    def ids_distinct(self, j: int) -> bool:
        """Whether every id cell differs from every other (stripping only merges ids that differ
        by their white space: the slower check then decides). Ids of up to 16 bytes by
        `_short_texts_distinct`, others by Arrow's hash table of the distinct cells (`unique`;
        its `count_distinct` was slower). The column is left as one chunk (`offer_ids` reads it)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        column = self.table.column(j).combine_chunks()
        self.table = self.table.set_column(j, self.table.schema.field(j).name, pa.chunked_array([column]))
        found = _short_texts_distinct(column)
        return len(pc.unique(column)) == self.n if found is None else found

    def row(self, i: int) -> list[str]:
        return [self.table.column(j)[i].as_py() for j in range(self.table.num_columns)]


# A cell of digits with at most one point between them: no sign, exponent, white space or
# underscore, which Decimal reads and Arrow's parser may not. Arrow's parser (fast_float) rounds
# correctly, as float(Decimal(cell)) does, so both give the same float; with at most 20 digits on
# either side no such cell rounds to 0 or overflows, and it is 0 exactly when all its digits are.
_PLAIN_DECIMAL = r"^[0-9]{1,20}(\.[0-9]{1,20})?$"

# row_check._CONTROL in RE2's syntax (a superset is fine: Python's pattern decides)
_CONTROL_RE2 = r"[\x00-\x1f\x7f-\x{9f}\x{200b}-\x{200f}\x{2028}-\x{202e}\x{2060}-\x{2069}\x{feff}]"


_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], dtype=np.uint64)  # the k lowest bytes of a word


def _short_texts_distinct(column: Any) -> bool | None:
    """Whether the cells of an Arrow text column all differ, for cells of up to 16 bytes (else
    None): each cell is read as two little-endian words, zero-padded (exact: no cell holds a NUL,
    a file with one is read by offers_io), hashed to 32 bits and ordered by two 16-bit passes
    (ties.words_order); cells of equal hashes, a few hundred, are told apart by their words.
    ~70 ms at a million ids against ~90-110 ms for Arrow's hash table of every distinct id."""
    from rentopt.optimizer.ties import words_order

    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[column.offset:column.offset + len(column) + 1]
    lengths = np.diff(offsets)
    if not len(lengths):
        return True
    if int(lengths.max()) > 16:
        return None
    chars = np.zeros(int(offsets[-1] - offsets[0]) + 16, dtype=np.uint8)  # zeros past the last cell
    chars[:len(chars) - 16] = np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    # every 8 bytes from every position, as one word each (a view: nothing copied)
    windows = np.ndarray((len(chars) - 7,), dtype="<u8", buffer=chars, strides=(1,))
    starts = offsets[:-1] - offsets[0]
    low = windows[starts]
    low &= _LOW_BYTES[np.minimum(lengths, 8)]
    high = windows[starts + 8]
    high &= _LOW_BYTES[np.clip(lengths - 8, 0, 8)]
    mixed = low * np.uint64(0x9E3779B97F4A7C15)
    mixed ^= high * np.uint64(0xC2B2AE3D27D4EB4F)
    mixed ^= mixed >> np.uint64(29)
    mixed >>= np.uint64(32)  # 32 bits, two passes: a million ids share a hash in ~100 pairs
    order = words_order([mixed], [1 << 32])
    ordered = mixed[order]
    same = ordered[1:] == ordered[:-1]
    if not same.any():
        return True
    # the cells whose hash another shares (equal cells always do): distinct exactly when their words are
    shared = np.zeros(len(order), dtype=bool)
    shared[1:] = same
    shared[:-1] |= same
    alike = order[shared]
    pairs = list(zip(low[alike].tolist(), high[alike].tolist()))
    return len(set(pairs)) == len(pairs)


def _is_utf8(data: Any) -> bool:
    """Whether bytes (an Arrow buffer) are UTF-8 text, by Arrow's validator over all of them at
    once (~3 ms for 80 MB). Checked so, the CSV cells need no check of their own (~50 ms at a
    million lines): every byte that separates or quotes cells is ASCII, which is never part of
    a multi-byte character, so a bad sequence lies in some cell or line. It also keeps bad bytes
    of a line of the wrong width out of Arrow's error handler, which cannot decode them."""
    import pyarrow as pa

    offsets = pa.py_buffer(np.array([0, data.size], dtype=np.int32))  # a file is at most 256 MiB
    try:
        pa.Array.from_buffers(pa.string(), 1, [None, offsets, data]).validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def _numbers(array: Any) -> np.ndarray:
    """An Arrow integer array without nulls as a numpy view of its buffer (Arrow's own
    to_numpy() imports pandas, which a quote never needs)."""
    import pyarrow as pa

    dtype = np.dtype(f"{'i' if pa.types.is_signed_integer(array.type) else 'u'}{array.type.bit_width // 8}")
    return np.frombuffer(array.buffers()[1], dtype=dtype)[array.offset:array.offset + len(array)]


def _arrow_ints(values: np.ndarray) -> Any:
    """Integers as an Arrow int64 array sharing their memory (pyarrow's own conversion of a
    numpy array imports pandas, which a quote never needs)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


# A column whose first _HEAD cells hold at most _FEW distinct values (GPU counts, currencies, spot
# flags, providers) is coded by looking each cell up among those (Arrow's index_in: ~7 ms at a
# million cells, against ~11 ms for dictionary_encode's growing hash table).
_HEAD, _FEW = 4096, 64


def _dictionary_coded(column: Any) -> Any:
    """A text column dictionary-encoded exactly as Arrow's dictionary_encode codes it: values in
    the order the column first shows them, each once. Where the first cells hold few values and
    every cell is one of them, looked up among them (the first cells show them in that order)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    values = pc.unique(column.slice(0, _HEAD))
    if len(values) <= _FEW:
        found = pc.index_in(column, value_set=values)
        if not found.null_count:  # else some cell holds a value the first ones lack
            return pa.DictionaryArray.from_arrays(found, values)
    return column.dictionary_encode()


def _longest_cell(column: Any) -> int:
    """The longest cell of an Arrow text column, in bytes (at least its length in characters)."""
    import pyarrow.compute as pc

    return int(pc.max(pc.binary_length(column)).as_py() or 0)


class _Reader:
    """Collects the columns of the good lines and reads the others with offers_io's parser."""

    def __init__(self, header: list[str], name: str, fetched_at: datetime, source: str, *, listing: bool = False):
        from rentopt.optimizer.sanity import PriceBands

        self.header, self.name, self.fetched_at, self.source = header, name, fetched_at, source
        self.listing = listing  # also the columns of a Listing (region, exact price per node-hour)
        self.column = {h: i for i, h in enumerate(header)}  # the last of a repeated name, as csv.DictReader
        self.bands = PriceBands()
        self.parts: list[tuple[Part, np.ndarray]] = []  # (columns of good lines, their line numbers)
        self.slow: list[tuple[int, dict]] = []  # (line, cells) read by offers_io
        self.memo: dict[tuple, Any] = {}
        self.texts: dict[str, list[str]] = {}  # a listing's columns: each column's distinct cells

    # -- the cells of many good-looking lines, column by column -------------------------------

    def chunk(self, cells: _ArrowCells, numbers: np.ndarray) -> None:
        """The rows of `cells`, on lines `numbers`."""
        n = len(numbers)
        ok = np.ones(n, dtype=bool)

        def mapped(name: str, fn: Callable[[str], Any], *, default: Any = None,
                   amounts: bool | None = None) -> tuple[np.ndarray, list]:
            """Codes and per-distinct results of a column (results _BAD mark the line). `amounts`:
            `fn` is _number with no limit and positive=amounts; the plain decimal cells are then
            read by Arrow at once (`_ArrowCells.plain_numbers`), the others by `fn`."""
            if name not in self.column:
                self.texts[name] = [""]
                return np.zeros(n, dtype=np.int32), [fn("") if default is None else default]
            codes, distinct = cells.distinct(self.column[name])
            self.texts[name] = distinct
            if amounts is None:
                results = [self._cached(name, v, fn) for v in distinct]
            else:
                results = [_MISSING] * len(distinct)
                rows, floats = cells.plain_numbers(self.column[name])
                for i, number in zip(rows.tolist(), floats.tolist()):
                    results[i] = _BAD if amounts and not number else number  # 0 is no price
                results = [self._cached(name, v, fn) if r is _MISSING else r for v, r in zip(distinct, results)]
            bad = np.array([r is _BAD for r in results], dtype=bool)
            if bad.any():  # most columns have no bad cell: no gather over every line
                ok[bad[codes]] = False
            return codes, results

        p_codes, providers = mapped("provider", _provider)
        # a blank line (every cell empty) is skipped; it has no provider, so only those are looked at
        blank = np.zeros(n, dtype=bool)
        unnamed = np.array([p is _BAD for p in providers], dtype=bool)
        for i in np.flatnonzero(unnamed[p_codes]) if unnamed.any() else ():
            blank[i] = not any(c.strip() for c in cells.row(i))
        ids, no_id, control = cells.offer_ids(self.column["offer_id"])
        ok[no_id] = False
        ok[control] = False  # the door refuses such an id
        if self.listing or "region" not in self.column or not cells.printable(self.column["region"]):
            region_c, regions = mapped("region", _plain_text)
        else:  # a quote reads no region, and printable ASCII holds no control character: no cell is bad
            region_c, regions = np.zeros(0, dtype=np.int32), []
        source_c, sources = mapped("source", _plain_text)
        spot_c, spots = mapped("spot", _boolean)
        gpus_c, gpus = mapped("gpus", _gpus)
        ccy_c, currencies = mapped("currency", _currency)
        link_c, links = mapped("interconnect", _interconnect)
        mem_c, memories = mapped("gpu_memory_gb", lambda v: _number(v, positive=True, limit="gpu_memory_gb"))
        form_c, forms = mapped("form_factor", _form_factor)
        gpu_c, gpu_raws = mapped("gpu", _required_plain_text)
        days_c, max_days = mapped("max_days", _max_hours)
        bills_c, bills = mapped("stopped_bills", _stopped_bills)
        smax_c, smax = mapped("stopped_max_days", lambda v: _number(v, positive=True, limit="stopped_max_days"))
        disk_c, disks = mapped("free_disk_gb", _free_disk)
        when_c, whens = mapped("fetched_at", _timestamp)
        prices = {c: mapped(c, lambda v: _number(v, positive=True), amounts=True) for c in PRICE_COLUMNS}
        others = {c: mapped(c, lambda v: _number(v, positive=False), amounts=False)
                  for c in ("storage_gb_month", "egress_gb", "ingress_gb")}
        cells.release()  # every column but the ids coded: the text's memory goes before the columns below are built

        # the GPU, per distinct (spelling, memory, form factor, interconnect)
        combo = ((gpu_c.astype(np.int64) * (len(memories) + 1) + mem_c) * (len(forms) + 1) + form_c) \
            * (len(links) + 1) + link_c
        inverse, first = _factorize(combo)
        matches = []
        for i in first.tolist():
            key = ("gpu", gpu_raws[gpu_c[i]], memories[mem_c[i]], forms[form_c[i]], links[link_c[i]])
            if key not in self.memo:
                self.memo[key] = _gpu_match(*key[1:])
            matches.append(self.memo[key])
        bad = np.array([m is _BAD for m in matches], dtype=bool)
        if bad.any():
            ok[bad[inverse]] = False
        matches = [None if m is _BAD else m for m in matches]

        # a bad count is 0 here: its line is not kept, whatever its prices divide to
        counts = np.array([0 if g is _BAD or g is None else g for g in gpus], dtype=np.int64)  # per GPU-count cell
        gpus_n = counts[gpus_c]
        spot = np.array([s is True for s in spots], dtype=bool)[spot_c]
        table_prices: dict[str, np.ndarray] = {}
        coded: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # table column -> (codes, values): ValueCodes
        priced: list[tuple[np.ndarray, np.ndarray]] = []  # per price column: (codes, which codes hold a price)
        # each band's ends with their margin, per currency: no million-row product per price column
        band = self._band_ends("gpu_hour", currencies, low_edge=1 + _EDGE, high_edge=1 - _EDGE)
        spotted = bool(spot.any())
        for column, (codes, results) in prices.items():
            values = np.array([_NAN if r is _BAD or r is None else r for r in results], dtype=np.float64)
            if np.isnan(values).all():
                continue  # no line has a price of this unit that can be kept: unknown throughout, held once
            pair = np.empty((2, n))  # on-demand, interruptible: a line's price is of its own kind
            amounts = pair[0]
            np.take(values, codes, out=amounts, mode="clip")  # codes index `values`; "raise" would buffer `out`
            priced.append((codes, ~np.isnan(values)))
            outside = _outside(values, codes, ccy_c, band, low_inclusive=False, unit=_UNIT_HOURS[column],
                               counts=(counts, gpus_c))
            if outside is not None:
                ok[outside] = False
            pair[1] = _NAN
            if spotted:
                np.copyto(pair[1], amounts, where=spot)
                amounts[spot] = _NAN
            table_prices[_TABLE_PRICES[column]] = pair
            coded[_TABLE_PRICES[column]] = (codes, values)  # a line's price is of its own kind (`spot`)
        if not any(known.all() for _, known in priced):  # else every line has a price of that column
            any_price = np.zeros(n, dtype=bool)
            for codes, known in priced:
                any_price |= known[codes]
            ok &= any_price
        floats: dict[str, np.ndarray] = {}
        bands: dict[str, tuple[list, list]] = {}  # egress and ingress share the transfer band
        for column, (codes, results) in others.items():
            amounts = np.array([_NAN if r is _BAD or r is None else r for r in results], dtype=np.float64)
            values = _spread(list(amounts), codes, coded, column.removesuffix("_gb_month").removesuffix("_gb"))
            kind = "storage_gb_month" if column == "storage_gb_month" else "transfer_gb"
            if kind not in bands:
                bands[kind] = self._band_ends(kind, currencies, high_edge=1 - _EDGE)
            outside = _outside(amounts, codes, ccy_c, bands[kind], low_inclusive=True)
            if outside is not None:
                ok[outside] = False
            floats[column] = values
        if blank.any():
            ok &= ~blank
        every = bool(ok.all())  # the common case: no index of the kept lines, no copy of each column
        # lines for offers_io's own parser: every line not known to be good, except blank ones
        for i in () if every else np.flatnonzero(~ok & ~blank) if blank.any() else np.flatnonzero(~ok):
            self.slow.append((int(numbers[i]), dict(zip(self.header, cells.row(i)))))
        keep = None if every else np.flatnonzero(ok)
        kept = n if keep is None else len(keep)
        if not kept:
            return
        k = (lambda a: a) if keep is None else (lambda a: a[keep])  # noqa: E731
        status = [m.status if m else None for m in matches]
        # the memory a line gives, else its GPU's: both are the GPU match's (its key holds the memory cell)
        given = [memories[mem_c[i]] for i in first.tolist()]
        memory = _spread([g if isinstance(g, float) else _NAN if m is None else m.memory
                          for g, m in zip(given, matches)], inverse, coded, "gpu_memory_gb")
        notes_of = [m.note if m is not None and m.status == "default" else None for m in matches]
        match_of = k(inverse)  # each kept line's GPU match
        note_rows = np.flatnonzero(np.array([x is not None for x in notes_of], dtype=bool)[match_of])  # among the kept
        gpu_codes = match_of.astype(np.int32)  # one array for the three columns of the GPU match
        columns = {
            "provider": Codes(k(p_codes), providers),
            "offer_id": ids if every else take_strings(ids, keep),
            "gpu": Codes(gpu_codes, [m.gpu if m else None for m in matches]),
            "gpu_raw": Codes(k(gpu_c), [None if g is _BAD else g for g in gpu_raws]),
            "gpu_status": Codes(gpu_codes, status),
            "currency": Codes(k(ccy_c), [None if c is _BAD else c for c in currencies]),
            "fetched_at": Codes(k(when_c), [self.fetched_at if w is None or w is _BAD else w for w in whens]),
            "interconnect": Codes(k(link_c), [None if x is _BAD else (x or "unknown") for x in links]),
            "stopped_bills": Codes(k(bills_c), [None if b is _BAD else (b or "storage") for b in bills]),
            "gpus": k(gpus_n), "gpu_memory_gb": k(memory),
            "spot": k(spot),
            "max_hours": k(_spread([_NAN if d is _BAD or d is None else d for d in max_days], days_c, coded,
                                   "max_hours")),
            "storage": k(floats["storage_gb_month"]), "stopped_storage": k(floats["storage_gb_month"]),
            "egress": k(floats["egress_gb"]), "ingress": k(floats["ingress_gb"]),
            "stopped_max_hours": k(_spread([_NAN if d is _BAD or d is None else d * 24 for d in smax], smax_c, coded,
                                           "stopped_max_hours")),
            "free_disk_gb": k(_spread([0.0 if d is _BAD or d is None else d for d in disks], disk_c, coded,
                                      "free_disk_gb")),
        }
        if self.listing:
            hour_c, hours = self._hour_prices(n, {c: prices[c][0] for c in PRICE_COLUMNS})
            columns["region"] = Codes(k(region_c), [None if r is _BAD else (r.strip() or None) for r in regions])
            columns["hour_price"] = Codes(k(hour_c), hours)
            # the EXACT_COLUMNS (values of bad cells are never read: their lines are not kept)
            for column, (codes, _) in (*prices.items(), *others.items()):
                amounts = [_decimal(v, positive=column in PRICE_COLUMNS) for v in self.texts[column]]
                columns[column] = Codes(k(codes), [None if a is None or a is _BAD else str(a) for a in amounts])
            columns["stopped_max_days"] = Codes(k(smax_c), [None if d is _BAD else d for d in smax])
            columns["source"] = Codes(k(source_c), [None if s is _BAD else (s.strip() or self.source) for s in sources])
            stamps = [self.fetched_at if w is None or w is _BAD else w for w in whens]
            columns["fetched_at_text"] = Codes(k(when_c), [(w.isoformat(), w) for w in stamps])
            columns["gpu_extra"] = Codes(gpu_codes,
                                         [(m.note, m.candidates) if m is not None and m.status == "default" else None
                                          for m in matches])
        if self.listing or not every:  # a quote's lines all kept: every value coded is some line's
            columns = {name: _used_only(c) if isinstance(c, Codes) else c for name, c in columns.items()}
        noted_as = match_of[note_rows].tolist()  # each noted line's GPU match (one gather, not one per line)
        if "storage" in coded:
            coded["stopped_storage"] = coded["storage"]  # one column for both (a file has no stopped price)
        part = Part(kept, columns, {name: pair if every else pair[:, keep] for name, pair in table_prices.items()},
                    extra_notes=dict(zip(note_rows.tolist(), [notes_of[m] for m in noted_as])),
                    value_codes={name: ValueCodes(_narrow(k(codes), len(values)), values)
                                 for name, (codes, values) in coded.items()})
        self.parts.append((part, k(numbers)))

    def _hour_prices(self, n: int, price_codes: dict[str, np.ndarray]) -> tuple[np.ndarray, list]:
        """Per line, models.hour_price of its offer, exactly, as (codes, values): the price of the
        finest unit the line fills (a CSV line's prices are all of its own kind, none a term), per
        hour of that unit (a month: the Offer's default 730 hours; a CSV line cannot set it).
        `price_codes`: each price column's codes of its distinct cells (`self.texts`)."""
        values: list = []
        chosen = np.full(n, -1, dtype=np.int64)
        for column in PRICE_COLUMNS:  # hour, day, week, month: finest first
            if column not in self.column:
                continue
            codes = price_codes[column]
            amounts = [_decimal(v, positive=True) for v in self.texts[column]]
            per_hour = [None if a is None or a is _BAD else a / _UNIT_HOURS[column] for a in amounts]
            fill = (chosen < 0) & np.array([p is not None for p in per_hour], dtype=bool)[codes]
            chosen[fill] = codes[fill] + len(values)
            values += per_hour
        chosen[chosen < 0] = len(values)
        return chosen.astype(np.int32), [*values, None]

    def _cached(self, name: str, value: str, fn: Callable[[str], Any]) -> Any:
        key = (name, value)
        found = self.memo.get(key, _MISSING)
        if found is _MISSING:
            found = self.memo[key] = fn(value)
        return found

    def _band_ends(self, kind: str, currencies: list, *, low_edge: float = 1.0,
                   high_edge: float = 1.0) -> tuple[list[float], list[float]]:
        """Per currency (a code of the currency column), the band of `kind` in it, its low end
        times `low_edge` and its high end times `high_edge` (NaN, sending the line to the exact
        parser, where the currency has none)."""
        from rentopt.optimizer.sanity import UnknownCurrency

        lows, highs = [], []
        for c in currencies:
            try:
                band = None if c is _BAD else self.bands.band(kind, c)  # type: ignore[arg-type]
            except UnknownCurrency:
                band = None
            lows.append(_NAN if band is None else float(band.low) * low_edge)
            highs.append(_NAN if band is None else float(band.high) * high_edge)
        return lows, highs

    # -- the lines read by offers_io itself, and the table ------------------------------------

    def finish(self, lines: _Lines, *, ids_distinct: bool) -> tuple[OfferTable, dict | None]:
        """The table of the good lines and of those offers_io's parser read (`ids_distinct`:
        no two id cells of the columns are alike), and its listing columns when asked for."""
        slow_offers: list[Offer] = []
        slow_lines: list[int] = []
        for line, cells in sorted(self.slow, key=lambda s: s[0]):
            offer = io_.offer_from_cells(cells, self.name, line, self.fetched_at, self.source, self.bands)
            if offer is not None:
                slow_offers.append(offer)
                slow_lines.append(line)
        parts = [p for p, _ in self.parts]
        numbers = [n for _, n in self.parts]
        if slow_offers:
            slow = OfferTable.from_offers(slow_offers).part()
            if self.listing:
                found = _listing_of(slow_offers, exact=True)
                found["fetched_at_text"] = found.pop("fetched_at")
                slow.columns.update({name: Codes(*codes) for name, codes in found.items()})
            parts.append(slow)
            numbers.append(np.array(slow_lines, dtype=np.int64))
        merged = merge_parts(parts)
        line_of = numbers[0] if len(numbers) == 1 else np.concatenate(numbers) if numbers else np.zeros(0, np.int64)
        name, fetched_at, source, bands = self.name, self.fetched_at, self.source, self.bands
        header = self.header

        def resolve(rows: Sequence[int]) -> list[Offer]:
            out = []
            wanted = [int(line_of[r]) for r in rows]
            for line, text in zip(wanted, lines.texts(wanted)):
                record = next(cells for cells in csv.reader(io.StringIO(text)) if cells)
                offer = io_.offer_from_cells(_dict_row(header, record), name, line, fetched_at, source, bands)
                if offer is None:  # cannot happen: the line was read as an offer before
                    raise OffersFileError(f"{name} line {line} changed while it was read")
                out.append(offer)
            return out

        table = merged.table(resolve)
        listed = {c: (merged.columns[f"{c}_text" if c == "fetched_at" else c].codes,
                      merged.columns[f"{c}_text" if c == "fetched_at" else c].values)
                  for c in ("region", "hour_price", *EXACT_COLUMNS)} if self.listing and parts else \
            {c: (np.zeros(0, np.int32), []) for c in ("region", "hour_price", *EXACT_COLUMNS)} if self.listing else None
        if len(numbers) > 1:  # the slow lines came last: file order
            order = np.argsort(line_of, kind="stable")
            table = table.take(order)
            listed = {c: (codes[order], values) for c, (codes, values) in listed.items()} if listed else None
        io_.check_nonempty(range(table.n), name)
        _check_unique(table, name, ids_distinct and not slow_offers)
        return table, listed


_MISSING = object()


def _used_only(column: Codes) -> Codes:
    """The column with only the values its rows hold. The cells of lines not kept (a blank line,
    a line the exact parser reads) are coded with the others; their values (a blank line's
    refused provider, its currency as None) must not reach the table's categories, which are
    sorted and listed as they are (the providers of `prices:` lines, `rentopt offers --sort`)."""
    used = np.bincount(column.codes, minlength=len(column.values)) > 0
    if used.all():
        return column
    remap = (np.cumsum(used) - 1).astype(np.int32)
    return Codes(remap[column.codes], [v for v, u in zip(column.values, used.tolist()) if u])


def _spread(values: list, codes: np.ndarray, coded: dict | None = None, name: str = "") -> np.ndarray:
    """values[codes[i]] for every line as floats; one value, where every line has it, held once
    (a column a file leaves empty or fills alike). A column of several values is also noted in
    `coded[name]` as (codes, values), for the table's `ValueCodes`."""
    table = np.array(values, dtype=np.float64)
    if len(table) == 1:
        return constant(table[0], len(codes), np.float64)
    if coded is not None:
        coded[name] = (codes, table)
    return table[codes]


def _narrow(codes: np.ndarray, count: int) -> np.ndarray:
    """Codes below `count` in the narrowest unsigned type that holds them (a copy: Arrow's int32
    dictionary indices are let go with its columns), for a table to carry past the read."""
    dtype = np.uint8 if count <= 1 << 8 else np.uint16 if count <= 1 << 16 else np.uint32
    return codes.astype(dtype)


_FEW_CURRENCIES = 4  # compared currency by currency; more are spread to every line


def _inside(values: np.ndarray, codes: np.ndarray, band: tuple[list[float], list[float]], *,
            low_inclusive: bool) -> np.ndarray:
    """Per line, whether `values[i]` lies inside the band of its currency (`codes[i]`, `band` as
    `_Reader._band_ends` gives it): above the low end (or at it, with `low_inclusive`) and below
    the high end; False where the value or an end is NaN. A file of a few currencies is compared
    currency by currency: no band column spread to every line (8 MB of fresh memory each at a
    million lines, whose page faults cost more than the comparisons)."""
    lows, highs = band
    with np.errstate(invalid="ignore"):
        if len(lows) > _FEW_CURRENCIES:
            low, high = _spread(lows, codes), _spread(highs, codes)
            return ((values >= low) if low_inclusive else (values > low)) & (values < high)
        inside = np.zeros(len(codes), dtype=bool)
        for code, (low, high) in enumerate(zip(lows, highs)):
            if math.isnan(low) or math.isnan(high):
                continue  # no band in this currency: nothing compares inside it
            within = (values >= low) if low_inclusive else (values > low)
            within &= values < high
            if len(lows) > 1:
                within &= codes == code
            inside |= within
    return inside


def _outside(values: np.ndarray, codes: np.ndarray, currency: np.ndarray, band: tuple[list[float], list[float]], *,
             low_inclusive: bool, unit: int = 1, counts: tuple[np.ndarray, np.ndarray] | None = None
             ) -> np.ndarray | None:
    """Per line, whether its value is known and not inside the band of its currency (`_inside`),
    or None where no line's is. Line i's value is `values[codes[i]]`, divided by `unit`, then,
    with `counts` = (per count cell, each line's count cell), by its count (a price per GPU-hour).

    The value, hence the answer, depends on the line's cells only: it is worked out once per
    combination of (value cell, count cell, currency) -- a few thousand at a million lines --
    and looked up per line only where some combination is outside, by the same float
    arithmetic. More combinations than lines: worked out per line."""
    per_count, count_of = counts if counts is not None else (np.ones(1), None)
    width, kinds = len(per_count), len(band[0])
    with np.errstate(invalid="ignore", divide="ignore"):
        if len(values) * width * kinds <= max(len(codes), 1 << 12):
            per = values / unit if unit != 1 else values
            if count_of is not None:
                per = (per[:, None] / per_count[None, :]).reshape(-1)  # (value cell, count cell)
            known = np.repeat(~np.isnan(values), width * kinds)
            bad = known & ~_inside(np.repeat(per, kinds), np.tile(np.arange(kinds), len(per)), band,
                                   low_inclusive=low_inclusive)
            if not bad.any():
                return None
            # only lines of a value cell with some combination outside are looked up (usually few)
            lines = np.flatnonzero(bad.reshape(len(values), -1).any(axis=1)[codes])
            key = codes[lines].astype(np.int64)
            if count_of is not None:
                key = key * width + count_of[lines]
            outside = lines[bad[key * kinds + currency[lines]]]
            if not len(outside):
                return None
            found = np.zeros(len(codes), dtype=bool)
            found[outside] = True
            return found
        line = values[codes]
        per = line / unit if unit != 1 else line
        if count_of is not None:
            per = per / per_count[count_of]
        bad = ~np.isnan(line) & ~_inside(per, currency, band, low_inclusive=low_inclusive)
    return bad if bad.any() else None


def _factorize(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(codes, first) of integer keys: equal keys share a code, `first[c]` is code c's first row
    (Arrow's hash-based dictionary encoding: no sort of a million keys)."""
    encoded = _arrow_ints(keys).dictionary_encode()
    codes = _numbers(encoded.indices).astype(np.int64)
    first = np.empty(len(encoded.dictionary), dtype=np.int64)
    first[codes[::-1]] = np.arange(len(codes) - 1, -1, -1)  # the last write wins: the first row
    return codes, first


def _dict_row(header: list[str], record: list[str]) -> dict:
    """A record as csv.DictReader gives it: extra cells under None, missing ones None."""
    row: dict = dict(zip(header, record))
    if len(record) > len(header):
        row[None] = record[len(header):]
    elif len(record) < len(header):
        for key in header[len(record):]:
            row[key] = None
    return row


def _check_unique(table: OfferTable, name: str, ids_distinct: bool) -> None:
    if ids_distinct:
        return  # unique ids: unique (provider, id) keys
    keys = set(zip(table.provider, table.offer_id))
    if len(keys) < table.n:
        seen: set = set()
        for key in zip(table.provider, table.offer_id):
            if key in seen:
                raise OffersFileError(f"{name}: offer {key[0]}/{key[1]} appears twice; offer ids must be unique per provider")
            seen.add(key)


# -- per distinct cell: the value offers_io would read, or _BAD when it would refuse it ------------
# These repeat offers_io's rules only to recognise good cells; anything else is _BAD and its line
# goes to offers_io's parser, which says what is wrong.


def _required(value: str) -> Any:
    return value.strip() or _BAD


def _provider(value: str) -> Any:
    """A provider name the door takes (optimizer/row_check.py), else _BAD (the exact parser says why)."""
    v = value.strip()
    return _BAD if provider_name_problem(v) else v


def _plain_text(value: str) -> Any:
    return _BAD if _CONTROL_NOT_SPACE.search(value) else value


def _required_plain_text(value: str) -> Any:
    return _BAD if _CONTROL_NOT_SPACE.search(value) else _required(value)


def _boolean(value: str) -> Any:
    v = value.strip().lower()
    return True if v in TRUE_WORDS else False if v in FALSE_WORDS else _BAD


def _gpus(value: str) -> Any:
    v = value.strip()
    if not (v.isascii() and v.isdigit()):
        return _BAD
    low, high = OFFER_LIMITS["gpus"]
    return int(v) if low <= int(v) <= high else _BAD


def _currency(value: str) -> Any:
    v = value.strip().upper()
    return v if _CURRENCY.fullmatch(v) else _BAD


def _interconnect(value: str) -> Any:
    v = (value.strip() or "unknown").lower()
    return v if v in ("nvlink", "pcie", "unknown") else _BAD


def _stopped_bills(value: str) -> Any:
    v = (value.strip() or "storage").lower()
    return v if v in STOPPED_BILLS else _BAD


def _form_factor(value: str) -> Any:
    from rentopt.optimizer.hardware import form_factor_of

    v = value.strip()
    if not v:
        return None
    try:
        form_factor_of(v)
    except ValueError:
        return _BAD
    return v


def _decimal(value: str, *, positive: bool) -> Any:
    v = value.strip()
    if not v:
        return None
    try:
        amount = Decimal(v)
    except InvalidOperation:
        return _BAD
    if not amount.is_finite() or amount < 0 or (positive and amount == 0):
        return _BAD
    return amount


def _number(value: str, *, positive: bool, limit: str | None = None) -> Any:
    amount = _decimal(value, positive=positive)
    if amount is None or amount is _BAD:
        return amount
    number = float(amount)
    if limit is not None:
        low, high = OFFER_LIMITS[limit]
        if not (math.isfinite(number) and low <= number <= high):
            return _BAD
    return number


def _max_hours(value: str) -> Any:
    days = _decimal(value, positive=True)
    if days is None or days is _BAD:
        return days
    hours = float(days * HOURS_PER_DAY)
    low, high = OFFER_LIMITS["max_duration_hours"]
    return hours if math.isfinite(hours) and low <= hours <= high else _BAD


def _free_disk(value: str) -> Any:
    amount = _decimal(value, positive=False)
    if amount is None or amount is _BAD:
        return amount
    number = float(amount)
    low, high = OFFER_LIMITS["free_disk_gb"]
    return number if math.isfinite(number) and low <= number <= high else _BAD


def _timestamp(value: str) -> Any:
    v = value.strip()
    if not v:
        return None
    if v.lower() == io_.UNKNOWN_DATE_CELL:
        return UNKNOWN_DATE  # a price nobody dated (offers_io): its Offer is dated_by "unknown"
    try:
        when = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return _BAD
    if when.tzinfo is None or when.utcoffset() is None or when - row_check.clock() > MAX_FUTURE:
        return _BAD  # no time zone, or dated ahead of the clock: the exact parser names the line
    return when


class _Match:
    __slots__ = ("gpu", "status", "memory", "note", "candidates")

    def __init__(self, gpu: str, status: str, memory: float, note: str, candidates: tuple[str, ...]):
        self.gpu, self.status, self.memory, self.note, self.candidates = gpu, status, memory, note, candidates


def _gpu_match(raw: Any, memory: Any, form: Any, link: Any) -> Any:
    """The catalog GPU of a line's cells, as offers_io's _sheet_gpu reads it, or _BAD."""
    from rentopt.optimizer.hardware import get_gpu, read_gpu_name

    if raw is _BAD or memory is _BAD or form is _BAD or link is _BAD:
        return _BAD
    match = read_gpu_name(raw, memory, form_factor=form, interconnect=link)
    if match.gpu is None:
        return _BAD  # unknown or ambiguous: offers_io says which (or keeps it with gpu_memory_gb)
    return _Match(match.gpu, match.status, get_gpu(match.gpu).memory_gb, match.note, tuple(match.candidates))

