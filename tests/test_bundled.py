"""The bundled snapshot's planning columns (optimizer/bundled.py): the shipped file is the one
the build writes for the shipped snapshot, it reads back as exactly the table and the offers
of the snapshot parsed in full, and a file that is missing, damaged or of another snapshot is
never used (the quote parses the snapshot instead and prices the same plans)."""

from __future__ import annotations

import gzip
import hashlib
import json

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


def test_the_shipped_columns_are_what_the_build_writes_for_the_shipped_snapshot():
    columns, snapshot = shipped()
    assert bundled.encode(snapshot, parse_snapshot(snapshot)) == columns, "run tools/build_snapshot.py: the columns are of another snapshot"
    assert bundled.load() is not None  # and the quote reads them


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

    def no_offer_json(h: dict) -> None:
        h["sections"][0]["columns"] = [c for c in h["sections"][0]["columns"] if c[0] != "offer_json"]

    return [
        ("another snapshot's", rewritten(lambda h: h.update(snapshot_sha256=hashlib.sha256(b"another").hexdigest()))),
        ("a newer format", rewritten(other_format)),
        ("a short column", rewritten(short_column)),
        ("no offers' JSON", rewritten(no_offer_json)),
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


def test_an_offer_the_columns_hold_damaged_is_a_store_error_naming_the_way_out(monkeypatch):
    columns, snapshot = shipped()
    text = gzip.decompress(columns)
    end = text.index(b"\n")
    body = text[end + 1:]
    # the first offer's price amount, in its JSON, made unreadable (same length, so every offset holds)
    spot = body.index(b'"amount":"') + len(b'"amount":"')
    body = body[:spot] + b"x" + body[spot + 1:]
    read = bundled.decode(gzip.compress(text[:end + 1] + body), snapshot)
    part, resolve = read.part([read.sections[0].provider])
    with pytest.raises(StoreError, match="bundled price snapshot's columns are damaged.*reinstall rentopt"):
        resolve([0])


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
