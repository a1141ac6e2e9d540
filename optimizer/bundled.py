"""The bundled snapshot as planning columns: what a quote reads of it.

`data/snapshot.json.gz` (`SNAPSHOT_RESOURCE`; its format is catalog.py's) is the truth: thousands
of offers of JSON, which every quote would validate in full and turn into columns, while a quote
keeps a few dozen of them. So tools/build_snapshot.py also writes `data/snapshot-columns.bin.gz`: the same
offers per provider as planning columns (in plan_columns' encoding, as the store holds them)
and each offer's JSON, tied to the snapshot file by its SHA-256. A quote reads the columns and
validates only the full offers of the rows it keeps.

A columns file that is missing, damaged or of another snapshot file is not used: `load()`
gives None and the quote parses the snapshot as it did before (tests/test_bundled.py checks the
shipped columns against rows read by hand and against the snapshot parsed in full;
`tools/build_snapshot.py --check` that both files are a fresh build's).

File layout (gzip): one line of JSON, the header, then the columns' bytes one after the other.
The header: {"format", "snapshot_sha256", "sections": [{"provider", "plugin", "fetched_at",
"source", "rows", "columns": [[name, encoding, offset, length, meta], ...]}, ...]}; offset and
length locate a column's bytes after the header line (null for columns that have none). Each
section's rows are its offers in the snapshot's order; its `offer_json` column holds each
offer's JSON in zlib chunks of OFFER_JSON_ROWS offers (encoding "json-chunks", meta: each
chunk's length), NUL-separated inside a chunk. That JSON is most of the file (4.4 of 4.8 MB
unpacked) and a quote reads a few dozen offers of it, so it inflates only their chunks.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from importlib import resources
from itertools import accumulate
from typing import Any

from pydantic import TypeAdapter, ValidationError

from rentopt.optimizer.errors import StoreError
from rentopt.optimizer.models import Offer
from rentopt.optimizer.plan_columns import decode_column, encode_table, merge_encoded, parse_timestamp, timestamp

SNAPSHOT_RESOURCE = "data/snapshot.json.gz"
COLUMNS_RESOURCE = "data/snapshot-columns.bin.gz"
COLUMNS_FORMAT = 2
OFFER_JSON_ROWS = 64  # offers per chunk of their JSON: a chunk of 64 inflates in ~0.05 ms
_OFFERS = TypeAdapter(list[Offer])


@dataclass(frozen=True)
class Section:
    """One provider's section of the snapshot: what provenance needs, without its offers."""

    provider: str
    plugin: str
    fetched_at: datetime
    source: str
    offers: int  # how many
    dated_by: str = "published"  # models.DateBasis


@dataclass
class BundledColumns:
    """The columns file, read: its sections and, per section, its encoded columns."""

    sections: list[Section]
    _columns: dict[str, dict[str, tuple]]  # provider -> column name -> (encoding, data, meta)
    _parsed: dict[tuple[str, int], Offer] = field(default_factory=dict)

    def part(self, providers: Sequence[str]) -> tuple[Any, Any]:
        """(the Part of `providers`' offers, rows section by section in the order given; the
        resolver of its rows' full offers). ValueError, TypeError or KeyError when damaged."""
        sizes = self._sizes
        chosen = list(providers)
        names = sorted({name for p in chosen for name in self._columns[p]} - {"offer_json"})
        part = merge_encoded(self._read(chosen), chosen, [sizes[p] for p in chosen], names)
        texts = {p: _OfferJson(self._columns[p]["offer_json"], sizes[p]) for p in chosen}
        where = [(p, r) for p in chosen for r in range(sizes[p])]  # part row -> (provider, its row)

        def resolve(rows: Sequence[int]) -> list[Offer]:
            return self._offers([where[r] for r in rows], texts)

        return part, resolve

    def _decoded(self, provider: str, name: str) -> Any:
        """One column of one section, decoded; None when the section has no such column."""
        column = self._columns[provider].get(name)
        if column is None:
            return None
        encoding, data, meta = column
        return decode_column(name, encoding, self._sizes[provider], data, meta)

    @property
    def _sizes(self) -> dict[str, int]:
        return {s.provider: s.offers for s in self.sections}

    def _read(self, providers: list[str]):  # noqa: ANN202 - plan_columns.Reader
        def read(*wanted: str) -> dict[str, list]:
            return {name: [self._decoded(p, name) for p in providers] for name in wanted}

        return read

    def _offers(self, wanted: list[tuple[str, int]], texts: dict) -> list[Offer]:
        """The full offers at (provider, row), validated once each (a quote asks for a row in
        its first pass and again for the plans it shows)."""
        todo = sorted({w for w in wanted if w not in self._parsed})
        if todo:
            try:
                text = "[" + ",".join(texts[p][r] for p, r in todo) + "]"
            except (zlib.error, ValueError) as exc:  # a chunk that does not inflate, or of the wrong size
                raise StoreError(f"the bundled price snapshot's columns are damaged (offers' JSON: {exc}); reinstall "
                                 "rentopt or run `rentopt refresh`") from None
            try:
                parsed = _OFFERS.validate_json(text)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise StoreError(f"the bundled price snapshot's columns are damaged ({'.'.join(map(str, first['loc']))}:"
                                 f" {first['msg']}); reinstall rentopt or run `rentopt refresh`") from None
            self._parsed.update(zip(todo, parsed))
        return [self._parsed[w] for w in wanted]


class _OfferJson:
    """One section's `offer_json` column: its offers' JSON by row, each chunk of OFFER_JSON_ROWS
    rows inflated the first time one of its rows is read. ValueError when the chunks cannot be
    this section's (their count or lengths)."""

    def __init__(self, column: tuple, rows: int):
        encoding, data, lengths = column
        if encoding != "json-chunks" or not isinstance(lengths, list) or \
                len(lengths) != -(-rows // OFFER_JSON_ROWS) or sum(lengths) != len(data or b""):
            raise ValueError("the offers' JSON does not match the columns")
        self.rows, self._data = rows, data
        self._starts = list(accumulate(lengths, initial=0))
        self._chunks: dict[int, list[str]] = {}

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, row: int) -> str:
        if not 0 <= row < self.rows:
            raise IndexError(row)
        n, i = divmod(row, OFFER_JSON_ROWS)
        chunk = self._chunks.get(n)
        if chunk is None:
            chunk = zlib.decompress(self._data[self._starts[n]:self._starts[n + 1]]).decode().split("\x00")
            if len(chunk) != min(OFFER_JSON_ROWS, self.rows - n * OFFER_JSON_ROWS):
                raise ValueError(f"chunk {n} holds {len(chunk)} offers")
            self._chunks[n] = chunk
        return chunk[i]


def encode(snapshot_raw: bytes, snapshot: Any) -> bytes:
    """The columns file of the snapshot file `snapshot_raw` (its bytes as shipped), given
    `snapshot`, those bytes as `catalog.parse_snapshot` reads them (the caller parses: catalog
    sits above this module)."""
    from rentopt.optimizer.offer_table import OfferTable

    body = bytearray()
    sections = []
    for section in snapshot.providers:
        table = OfferTable.from_offers(section.offers)
        texts = [o.model_dump_json() for o in section.offers]
        if any("\x00" in t for t in texts):  # JSON escapes control characters; a NUL here is a bug
            raise ValueError(f"{section.provider}: an offer's JSON holds a NUL")
        chunks = [zlib.compress("\x00".join(texts[i:i + OFFER_JSON_ROWS]).encode(), 9)
                  for i in range(0, len(texts), OFFER_JSON_ROWS)]
        encoded = [*encode_table(table), ("offer_json", "json-chunks", b"".join(chunks), [len(c) for c in chunks])]
        columns = []
        for name, encoding, data, meta in encoded:
            columns.append([name, encoding, None if data is None else len(body), None if data is None else len(data), meta])
            body += data or b""
        sections.append({"provider": section.provider, "plugin": section.plugin,
                         "fetched_at": timestamp(section.fetched_at), "source": section.source,
                         "dated_by": section.dated_by, "rows": len(section.offers), "columns": columns})
    header = {"format": COLUMNS_FORMAT, "snapshot_sha256": hashlib.sha256(snapshot_raw).hexdigest(),
              "sections": sections}
    return gzip.compress(json.dumps(header, separators=(",", ":")).encode() + b"\n" + bytes(body), mtime=0)


def decode(raw: bytes, snapshot_raw: bytes) -> BundledColumns | None:
    """The columns file `raw` if it is one and of the snapshot file `snapshot_raw`, else None."""
    try:
        text = gzip.decompress(raw)
        end = text.index(b"\n")
        header = json.loads(text[:end])
        if header.get("format") != COLUMNS_FORMAT or \
                header.get("snapshot_sha256") != hashlib.sha256(snapshot_raw).hexdigest():
            return None
        body = memoryview(text)[end + 1:]
        sections, columns = [], {}
        for s in header["sections"]:
            when = parse_timestamp(s["fetched_at"])
            sections.append(Section(s["provider"], s["plugin"], when, s["source"], int(s["rows"]),
                                    s.get("dated_by", "published")))
            mine = columns[s["provider"]] = {}
            for name, encoding, offset, length, meta in s["columns"]:
                data = None if offset is None else bytes(body[offset:offset + length])
                if data is not None and len(data) != length:
                    return None
                mine[name] = (encoding, data, meta)
            if "offer_json" not in mine:
                return None
        return BundledColumns(sections, columns)
    except (OSError, EOFError, ValueError, TypeError, KeyError, AttributeError):
        return None


@lru_cache(maxsize=1)
def load() -> BundledColumns | None:
    """The shipped columns file, if it is there and of the shipped snapshot (read once per process)."""
    here = resources.files("rentopt.optimizer")
    try:
        raw, snapshot_raw = here.joinpath(COLUMNS_RESOURCE).read_bytes(), here.joinpath(SNAPSHOT_RESOURCE).read_bytes()
    except OSError:
        return None
    return decode(raw, snapshot_raw)
