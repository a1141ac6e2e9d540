"""The bundled snapshot's planning columns (optimizer/bundled.py): the shipped file holds
published rows as read by hand, it reads back as exactly the table and the offers of the
snapshot parsed in full, and a file that is missing, damaged or of another snapshot is never
used (the quote parses the snapshot instead and prices the same plans)."""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from itertools import accumulate

import numpy as np
import pytest
from click.testing import CliRunner

from rentopt.optimizer import bundled
from rentopt.optimizer.catalog import SNAPSHOT_RESOURCE, bundled_snapshot, load_offers, parse_snapshot
from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import StoreError
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.store import OfferQuery
from tests.conftest import ROOT
from tests.table_checks import assert_same_table

DATA = ROOT / "optimizer" / "data"


def shipped() -> tuple[bytes, bytes]:
    return (DATA / "snapshot-columns.bin.gz").read_bytes(), (DATA / SNAPSHOT_RESOURCE.split("/")[-1]).read_bytes()


def test_the_shipped_columns_hold_published_rows_as_read_by_hand():
    read = bundled.load()
    assert read is not None  # present, and tied to the shipped snapshot by its SHA-256
    part, _ = read.part(["gcp", "lambda", "vast", "jygpu"])
    table = part.table()
    row = {table.key(i): i for i in range(table.n)}
    on_demand, spot = 0, 1  # the price columns' first index

    def cells(provider: str, offer_id: str) -> tuple:
        i = row[(provider, offer_id)]
        return (table.gpu[i], int(table.gpus[i]), float(table.gpu_memory_gb[i]), table.currency[i], bool(table.spot[i]))

    # gcp 2026-05-20 catalog, us-central1-a: a3-highgpu-8g host 9.46006 + 8 x H100 33.60609 = 43.06615 USD/h;
    # spot 3.86318 + 32.0104 = 35.87358, a separate offer
    h100 = row[("gcp", "a3-highgpu-8g/us-central1-a")]
    assert cells("gcp", "a3-highgpu-8g/us-central1-a") == ("H100-SXM-80GB", 8, 80.0, "USD", False)
    assert table.hourly[on_demand, h100] == 43.06615
    assert table.hourly[spot, row[("gcp", "a3-highgpu-8g/us-central1-a/spot")]] == 35.87358
    # lambda: gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,31.92,us-east-1 (no spot price)
    lam = row[("lambda", "gpu_8x_h100_sxm5/us-east-1")]
    assert cells("lambda", "gpu_8x_h100_sxm5/us-east-1") == ("H100-SXM-80GB", 8, 80.0, "USD", False)
    assert table.hourly[on_demand, lam] == 31.92 and np.isnan(table.hourly[spot, lam])
    # vast: 2x-RTX_5090-32-65536,RTX5090,2,...,0.93,0.00,"Taiwan, TW, AS" (0.00 spot: none)
    vast = row[("vast", "2x-RTX_5090-32-65536/Taiwan, TW, AS")]
    assert cells("vast", "2x-RTX_5090-32-65536/Taiwan, TW, AS") == ("RTX-5090-32GB", 2, 32.0, "USD", False)
    assert table.hourly[on_demand, vast] == 0.93 and np.isnan(table.hourly[spot, vast])
    # JYGPU's sheet: the 8 x RTX 4090 node sold only by the month, 9900 list and 7920 discounted
    # CNY (the column keeps the cheaper), a 720 h month; no hourly price
    jy = row[("jygpu", "8x-rtx4090")]
    assert cells("jygpu", "8x-rtx4090") == ("RTX-4090-24GB", 8, 24.0, "CNY", False)
    assert table.month[on_demand, jy] == 7920 and table.month_hours[jy] == 720
    assert np.isnan(table.hourly[on_demand, jy])


def test_the_columns_read_back_as_the_snapshot_parsed_in_full():
    read = bundled.load()
    snapshot = bundled_snapshot()
    assert [(s.provider, s.plugin, s.fetched_at, s.source, s.offers) for s in read.sections] == \
        [(p.provider, p.plugin, p.fetched_at, p.source, len(p.offers)) for p in snapshot.providers]
    names = [s.provider for s in read.sections]
    part, resolve = read.part(names)
    assert_same_table(part.table(), OfferTable.from_offers(snapshot.offers))
    assert resolve(list(range(part.n))) == snapshot.offers  # every offer, field for field
    # some providers, in another order: their rows one section after the other
    part, resolve = read.part(["vast", "autodl"])
    want = [o for name in ("vast", "autodl") for p in snapshot.providers if p.provider == name for o in p.offers]
    assert_same_table(part.table(), OfferTable.from_offers(want))
    assert resolve([part.n - 1, 0]) == [want[-1], want[0]]


@pytest.mark.parametrize("query", [OfferQuery(gpus=("H100-SXM-80GB", "A100-SXM-80GB")), OfferQuery(min_gpus=8),
                                   OfferQuery(min_gpu_memory_gb=48), OfferQuery(spot=True), OfferQuery(currency="CNY"),
                                   OfferQuery(providers=("lambda", "jygpu"), spot=False)])
def test_a_filtered_lazy_read_keeps_the_offers_the_query_matches(rentopt_home, query):
    found = load_offers(query=query, lazy=True)
    table = found.table()
    want = [o for o in bundled_snapshot().offers if query.matches(o)]
    assert want and found.offers == []
    assert_same_table(table, OfferTable.from_offers(want))
    assert table.offers(range(table.n)) == want


def _damaged() -> list[tuple[str, bytes]]:
    columns, snapshot = shipped()
    text = gzip.decompress(columns)
    end = text.index(b"\n")
    body = text[end + 1:]

    def rewritten(change) -> bytes:  # noqa: ANN001
        h = json.loads(text[:end])
        change(h)
        return gzip.compress(json.dumps(h).encode() + b"\n" + body)

    def other_format(h: dict) -> None:
        h["format"] += 1

    def short_column(h: dict) -> None:  # a float column one value short
        column = next(c for c in h["sections"][1]["columns"] if c[1] == "f8")
        column[3] -= 8

    def offers_json_lengths_off(h: dict) -> None:  # chunks that cannot hold the section's offers
        column = next(c for c in h["sections"][0]["columns"] if c[0] == "offer_json")
        column[4] = column[4][:-1]

    def no_offer_json(h: dict) -> None:
        h["sections"][0]["columns"] = [c for c in h["sections"][0]["columns"] if c[0] != "offer_json"]

    return [
        ("another snapshot's", rewritten(lambda h: h.update(snapshot_sha256=hashlib.sha256(b"another").hexdigest()))),
        ("a newer format", rewritten(other_format)),
        ("a short column", rewritten(short_column)),
        ("no offers' JSON", rewritten(no_offer_json)),
        ("offers' JSON chunks of other lengths", rewritten(offers_json_lengths_off)),
        ("truncated", columns[:len(columns) // 2]),
        ("not gzip", b"{}"),
    ]


@pytest.mark.parametrize("what, raw", _damaged(), ids=[w for w, _ in _damaged()])
def test_a_columns_file_that_cannot_be_used_is_not_used_and_the_quote_is_the_same(rentopt_home, monkeypatch, what, raw):
    _, snapshot = shipped()
    decoded = bundled.decode(raw, snapshot)
    if decoded is not None:  # damage found only when the columns are read: the snapshot is read instead
        with pytest.raises((ValueError, TypeError, KeyError)):
            decoded.part([s.provider for s in decoded.sections])
    args = ["quote", "--model", "13b", "--mode", "lora", "--days", "10", "--format", "json"]
    good = CliRunner().invoke(cli, args, catch_exceptions=False)
    monkeypatch.setattr(bundled, "load", lambda: decoded)
    used = load_offers(lazy=True)
    assert used.table().n == len(bundled_snapshot().offers)
    bad = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert good.exit_code == bad.exit_code == 0, bad.stderr
    assert json.loads(good.stdout)["plans"] == json.loads(bad.stdout)["plans"] and json.loads(good.stdout)["plans"]


def _with_offers_json(columns: bytes, change, section: int) -> bytes:  # noqa: ANN001
    """The columns file `columns` with section number `section`'s offers' JSON chunks (zlib,
    OFFER_JSON_ROWS offers each) passed through `change`, every column's offset moved to match."""
    text = gzip.decompress(columns)
    end = text.index(b"\n")
    header, body, out = json.loads(text[:end]), text[end + 1:], bytearray()
    for n, columns_of in enumerate(h["columns"] for h in header["sections"]):
        for column in columns_of:
            name, _, offset, length, lengths = column
            if offset is None:
                continue
            data = body[offset:offset + length]
            if n == section and name == "offer_json":
                starts = list(accumulate(lengths, initial=0))
                chunks = change([data[a:b] for a, b in zip(starts, starts[1:])])
                data, column[4] = b"".join(chunks), [len(c) for c in chunks]
            column[2], column[3] = len(out), len(data)
            out += data
    return gzip.compress(json.dumps(header).encode() + b"\n" + bytes(out))


def _unreadable_amount(chunks: list[bytes]) -> list[bytes]:
    first = zlib.decompress(chunks[0])
    at = first.index(b'"amount":"') + len(b'"amount":"')  # the first offer's price amount
    return [zlib.compress(first[:at] + b"x" + first[at + 1:]), *chunks[1:]]


def _one_offer_short(chunks: list[bytes]) -> list[bytes]:
    first = zlib.decompress(chunks[0])
    return [zlib.compress(first[:first.rindex(b"\x00")]), *chunks[1:]]


@pytest.mark.parametrize("change", [_unreadable_amount, _one_offer_short, lambda chunks: [b"not zlib", *chunks[1:]]],
                         ids=["an unreadable amount", "a chunk one offer short", "a chunk that does not inflate"])
def test_an_offer_the_columns_hold_damaged_is_a_store_error_naming_the_way_out(change):
    columns, snapshot = shipped()
    sizes = [s.offers for s in bundled.decode(columns, snapshot).sections]
    biggest = sizes.index(max(sizes))  # several chunks
    read = bundled.decode(_with_offers_json(columns, change, biggest), snapshot)
    assert read is not None  # the damage is inside a chunk: found only when its offers are read
    part, resolve = read.part([read.sections[biggest].provider])
    with pytest.raises(StoreError, match="bundled price snapshot's columns are damaged.*reinstall rentopt"):
        resolve([0])
    assert resolve([part.n - 1])  # an offer of another chunk still reads


def test_the_offers_json_is_read_in_chunks_of_the_rows_asked_for():
    """A quote keeps a few dozen of the thousands of offers: only their chunks are inflated (the
    JSON is most of the file: inflating it whole took ~6 ms of a quote's start-up)."""
    columns, snapshot = shipped()
    read = bundled.decode(columns, snapshot)
    provider = max(read.sections, key=lambda s: s.offers).provider  # several chunks
    part, resolve = read.part([provider])
    assert part.n > 3 * bundled.OFFER_JSON_ROWS
    inflated = []
    real = zlib.decompress

    def counting(data: bytes) -> bytes:
        inflated.append(len(data))
        return real(data)

    want = [o for p in bundled_snapshot().providers if p.provider == provider for o in p.offers]
    rows = [0, bundled.OFFER_JSON_ROWS - 1, bundled.OFFER_JSON_ROWS, part.n - 1]  # either side of a chunk's end
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(bundled.zlib, "decompress", counting)
        assert resolve(rows) == [want[r] for r in rows]
    assert len(inflated) == 3  # chunks 0, 1 and the last


def test_a_filtered_lazy_set_is_as_old_as_the_offers_it_kept(rentopt_home):
    """"Prices as of" counts only the offers a query keeps, not the dates of those it filtered out."""
    snapshot = bundled_snapshot()
    query = OfferQuery(providers=("autodl",), gpus=("RTX-4090-24GB", "L20-48GB"))  # AutoDL dates its prices per card
    want = min(o.fetched_at for o in snapshot.offers if query.matches(o))
    assert want > min(o.fetched_at for o in snapshot.offers if o.provider == "autodl")  # an older one is filtered out
    assert load_offers(query=query, lazy=True).prices_as_of == want == load_offers(query=query).prices_as_of


def test_an_offers_file_read_for_some_providers_is_as_old_as_their_offers(tmp_path):
    """The same rule for an --offers-file read lazily for some of its providers."""
    from datetime import timedelta

    old, new = [o.model_copy(update={"provider": p, "offer_id": f"{p}-1"}) for p in ("old", "new")
                for o in bundled_snapshot().offers[:1]]
    new = new.model_copy(update={"fetched_at": old.fetched_at + timedelta(days=30)})
    path = tmp_path / "offers.json"
    path.write_text(json.dumps([o.model_dump(mode="json") for o in (old, new)]), encoding="utf-8")
    lazy = load_offers(["new"], offers_file=path, lazy=True)
    assert lazy.columns is not None and lazy.table().n == 1
    assert lazy.prices_as_of == new.fetched_at == load_offers(["new"], offers_file=path).prices_as_of
