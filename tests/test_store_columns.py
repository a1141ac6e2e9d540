"""The store's planning columns (migration m005): what they hold, what an upgraded store holds,
and the resolver that reads the full offers a quote keeps."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from rentopt.optimizer import store
from rentopt.optimizer.catalog import bundled_snapshot, load_offers
from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import StoreError
from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.offer_table import OfferTable, merge_parts
from rentopt.optimizer.store import open_writable, store_path
from tests.table_checks import assert_same_table

T0 = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def offer(offer_id: str, **fields) -> Offer:
    values = dict(provider="alpha", offer_id=offer_id, gpu="A100-SXM4-80GB", gpu_raw="A100 SXM4 80GB", gpus=4,
                  gpu_memory_gb=80.0, price_options=[PriceOption(unit="hour", amount=Decimal("7.20"))],
                  currency="USD", fetched_at=T0, source="https://alpha.test")
    values.update(fields)
    return Offer(**values)


def stored_table(s) -> OfferTable:
    return s.load_plan_part([p.name for p in s.providers()])[1].table()


def test_the_columns_hold_every_planning_field_exactly(tmp_path):
    offers = [
        offer("a1", price_options=[PriceOption(unit="hour", amount=Decimal("7.20")),
                                   PriceOption(unit="hour", amount=Decimal("6.90")),  # the cheaper one counts
                                   PriceOption(unit="day", amount=Decimal("150")),
                                   PriceOption(unit="term", amount=Decimal("4000"), term_hours=720),
                                   PriceOption(unit="hour", amount=Decimal("2.5"), interruptible=True)],
              storage_gb_month=Decimal("0.10"), storage_stopped_gb_month=Decimal("0.05"), egress_gb=Decimal("0.01"),
              net_up_mbps=800.0, host_ram_gb=512.0, fabric="infiniband", fabric_gbps=400.0, nodes_available=4,
              billing_granularity_s=60, billing_minimum_s=600, month_hours=720, stopped_bills="everything",
              stopped_max_days=14.0, free_disk_gb=50.0, max_duration_hours=2000.0, interconnect="nvlink"),
        offer("a2", gpu="H100-SXM-80GB", gpu_raw="H100", gpu_status="default", gpus=8, spot=True,
              price_options=[PriceOption(unit="hour", amount=Decimal("9.5"), interruptible=True)],
              extra={"gpu_note": "a bare H100 read as the SXM card"}),
        offer("a3", gpu=None, gpu_raw="Mystery", gpu_status="unknown", gpu_memory_gb=24.0, currency="CNY",
              price_options=[PriceOption(unit="month", amount=Decimal("9900"))], fetched_at=T0 - timedelta(hours=3)),
        offer("a\x00odd"),  # an id no text separator can hold
    ]
    with open_writable(tmp_path / "prices.sqlite") as s:
        s.write_snapshot("alpha", offers, fetched_at=T0)
        table = stored_table(s)
    assert_same_table(table, OfferTable.from_offers(sorted(offers, key=lambda o: o.offer_id)))
    assert table.hourly[0, table.offer_id.index("a1")] == 6.90 and table.terms[(0, table.offer_id.index("a1"))] == ((720.0, 4000.0),)


def test_joined_sources_keep_each_ones_terms_and_notes_on_its_own_rows(tmp_path):
    """A second provider's reserved term and GPU note belong to its rows, after the first's,
    whether two stored providers are merged or a store table is joined with other offers."""
    first = [offer("a1"), offer("a2")]
    second = [offer("b1", provider="beta", price_options=[PriceOption(unit="term", amount=Decimal("4000"), term_hours=720)]),
              offer("b2", provider="beta", gpu="H100-SXM-80GB", gpu_raw="H100", gpu_status="default",
                    extra={"gpu_note": "a bare H100 read as the SXM card"})]
    with open_writable(tmp_path / "prices.sqlite") as s:
        s.write_snapshot("alpha", first, fetched_at=T0)
        s.write_snapshot("beta", second, fetched_at=T0)
        merged = stored_table(s)
    want = OfferTable.from_offers(first + second)
    assert_same_table(merged, want)
    assert merged.terms == {(0, 2): ((720.0, 4000.0),)} and merged.extra_notes == {3: "a bare H100 read as the SXM card"}
    assert_same_table(merge_parts([OfferTable.from_offers(first).part(), OfferTable.from_offers(second).part()]).table(),
                      want)


def test_a_store_table_joined_with_other_offers_is_one_table_resolving_both(rentopt_home):
    """The quote's table: every stored provider, then the offers of other sources (here the
    bundled snapshot's providers the store does not hold), read as one merge. Its string
    columns stay coded (a million stored rows are never decoded into lists), and the resolver
    gives each row's full offer from the store or from the others."""
    from rentopt.optimizer.offer_table import Strings

    stored = [offer("a1"), offer("a2", currency="CNY",
                                 price_options=[PriceOption(unit="term", amount=Decimal("300"), term_hours=100)])]
    beta = [offer("b1", provider="beta", gpu="H100-SXM-80GB", gpu_raw="H100", gpu_status="default", gpus=8,
                  extra={"gpu_note": "a bare H100 read as the SXM card"})]
    with open_writable(store_path()) as s:
        s.write_snapshot("alpha", stored, fetched_at=T0)
        s.write_snapshot("beta", beta, fetched_at=T0)
    found = load_offers(lazy=True)
    assert found.offers == []  # a lazy set holds every offer as columns
    others = bundled_snapshot().offers  # the bundled providers: the store holds neither
    assert others and {o.provider for o in others}.isdisjoint({"alpha", "beta"})
    table = found.table()
    assert_same_table(table, OfferTable.from_offers(stored + beta + others))
    assert table.terms[(0, 1)] == ((100.0, 300.0),) and table.extra_notes[2] == "a bare H100 read as the SXM card"
    assert all(isinstance(getattr(table, name), Strings) for name in ("provider", "gpu", "currency", "fetched_at"))
    last = table.n - 1
    assert table.offers([last, 0, 3, 2]) == [others[-1], stored[0], others[0], beta[0]]
    assert table.offers([3])[0] is table.offers([3])[0]  # a bundled offer is validated once
    assert found.columns.n == 3 and found.columns.keys()[:3] == [("alpha", "a1"), ("alpha", "a2"), ("beta", "b1")]
    assert found.columns.keys() == [table.key(r) for r in range(table.n)]


def test_the_other_sources_rows_are_indexed_by_key_once_and_only_when_asked_for(rentopt_home, monkeypatch):
    """A store quote's resolver asks the other sources (the bundled snapshot) for their keys
    among the rows it keeps, often none: no key index is built for none, and one is built once
    for the calls that ask."""
    with open_writable(store_path()) as s:
        s.write_snapshot("alpha", [offer("a1")], fetched_at=T0)
    others = load_offers(lazy=True).columns.others
    listed = []
    keys = type(others).keys
    monkeypatch.setattr(type(others), "keys", lambda self: listed.append(1) or keys(self))
    assert others.load([]) == {} and listed == []
    bundled = bundled_snapshot().offers
    first, last = bundled[0], bundled[-1]
    assert others.load([last.key, ("nobody", "x"), first.key]) == {last.key: last, first.key: first}
    assert others.load([first.key]) == {first.key: first} and listed == [1]


def test_the_store_merges_extra_rows_with_their_own_terms_and_notes(tmp_path):
    """load_plan_part's `extra` rows come after the stored ones, their reserved terms and GPU
    notes moved with them, and a column they leave out takes the Offer default."""
    stored = [offer("a1"), offer("a2", price_options=[PriceOption(unit="term", amount=Decimal("300"), term_hours=100)])]
    extra = [offer("z1", provider="zeta", gpu="H100-SXM-80GB", gpu_raw="H100", gpu_status="default", gpus=8,
                   extra={"gpu_note": "a bare H100 read as the SXM card"},
                   price_options=[PriceOption(unit="term", amount=Decimal("4000"), term_hours=720),
                                  PriceOption(unit="hour", amount=Decimal("2"), interruptible=True)]),
             offer("z2", provider="zeta", currency="EUR", stopped_bills="everything")]
    with open_writable(tmp_path / "prices.sqlite") as s:
        s.write_snapshot("alpha", stored, fetched_at=T0)
        snapshots, part = s.load_plan_part(["alpha"], extra=OfferTable.from_offers(extra).part())
    table = part.table()
    assert_same_table(table, OfferTable.from_offers(stored + extra))
    assert table.terms == {(0, 1): ((100.0, 300.0),), (0, 2): ((720.0, 4000.0),)}
    assert table.extra_notes == {2: "a bare H100 read as the SXM card"} and list(snapshots) == ["alpha"]


def test_strings_read_like_the_list_they_code() -> None:
    import numpy as np

    from rentopt.optimizer.offer_table import Strings

    column = Strings(np.array([1, 0, 1, 2], dtype=np.int32), ["a", "b", None])
    assert column == ["b", "a", "b", None] and ["b", "a", "b", None] == column and column != ["b", "a", "b"]
    assert len(column) == 4 and column[2] == "b" and column[np.int64(3)] is None and column[1:3] == ["a", "b"]
    assert list(column) == ["b", "a", "b", None] and column.index("a") == 1 and "c" not in column
    assert column.take(np.array([3, 0])) == [None, "b"]


def _old_style(db, provider: str, snapshot_id: int, offers: list[Offer]) -> None:
    """What rentopt wrote before m005 for one refresh of `provider` (its write_snapshot, by hand)."""
    ts = store.timestamp(offers[0].fetched_at)
    db.execute("INSERT OR IGNORE INTO providers (name, plugin) VALUES (?, ?)", (provider, provider))
    db.execute("INSERT INTO snapshots (id, provider, plugin, fetched_at, stored_at, source, offers_count, summary)"
               " VALUES (?, ?, ?, ?, ?, ?, ?, '{}')", (snapshot_id, provider, provider, ts, ts, offers[0].source, len(offers)))
    for o in offers:
        row = store._offer_row(o, None, ())
        db.execute("INSERT INTO offers (provider, offer_id, snapshot_id, gpu, gpus, gpu_memory_gb, spot, region,"
                   " currency, hour_price_micros, prices, offer, plan) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (provider, row[0], snapshot_id, *row[1:], store._plan_json(o)))
    db.execute("UPDATE providers SET snapshot_id = ?, offers_count = ?, last_attempt_at = ?, last_success_at = ?"
               " WHERE name = ?", (snapshot_id, len(offers), ts, ts, provider))


def test_an_upgraded_store_quotes_exactly_like_a_fresh_one(tmp_path, monkeypatch):
    sections = [p for p in bundled_snapshot().providers if p.offers]
    old, fresh = tmp_path / "old", tmp_path / "fresh"
    old.mkdir()
    db = sqlite3.connect(old / "prices.sqlite", isolation_level=None)
    store.migrate(db, old / "prices.sqlite", store.MIGRATIONS[:4])  # a store of the rentopt before m005
    for i, section in enumerate(sections, start=1):
        _old_style(db, section.provider, i, section.offers)
    db.close()
    with open_writable(old / "prices.sqlite") as s:  # the upgrade
        upgraded = stored_table(s)
    fresh.mkdir()
    with open_writable(fresh / "prices.sqlite") as s:
        for section in sections:
            s.write_snapshot(section.provider, section.offers, fetched_at=section.fetched_at, source=section.source)
        assert_same_table(upgraded, stored_table(s))
    plans = []
    for home in (old, fresh):
        monkeypatch.setenv("RENTOPT_HOME", str(home))
        result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "lora", "--days", "3", "--format", "json"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.stderr
        quote = json.loads(result.stdout)
        assert {s["origin"] for s in quote["sources"]} == {"store"}
        plans.append(quote["plans"])
    assert plans[0] == plans[1] and plans[0]


def test_the_resolver_refuses_offers_of_a_snapshot_replaced_while_quoting(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("alpha", [offer("a1"), offer("a2")], fetched_at=T0)
    found = load_offers(["alpha"], lazy=True)
    table = found.table()
    assert [o.offer_id for o in table.offers([1, 0])] == ["a2", "a1"]  # full offers, in the order asked
    with open_writable(store_path()) as s:  # a refresh finishes meanwhile: same ids, new prices
        s.write_snapshot("alpha", [offer("a1", price_options=[PriceOption(unit="hour", amount=Decimal("5"))]),
                                   offer("a2")], fetched_at=T0 + timedelta(days=1))
    with pytest.raises(StoreError, match="prices changed while quoting"):
        table.offers([0])
    with pytest.raises(StoreError, match="prices changed while quoting"):
        found.offers_by_key([("alpha", "a1")])


def test_a_stored_offer_that_cannot_be_read_any_more_is_named_not_blamed_on_a_refresh(rentopt_home):
    """The columns hold the row, its stored JSON no longer reads (a damaged store): the error names
    the offer and the way out, and does not claim a refresh happened (none did)."""
    import sqlite3

    with open_writable(store_path()) as s:
        s.write_snapshot("alpha", [offer("a1"), offer("a2")], fetched_at=T0)
    table = load_offers(["alpha"], lazy=True).table()
    db = sqlite3.connect(store_path(), isolation_level=None)
    db.execute("UPDATE offers SET offer = '{\"provider\": 1}' WHERE offer_id = 'a1'")
    db.close()
    with pytest.raises(StoreError) as caught:
        table.offers([0])
    message = str(caught.value)
    assert "alpha/a1" in message and "cannot use" in message and "rentopt refresh" in message
    assert "refresh just finished" not in message
    assert [o.offer_id for o in table.offers([1])] == ["a2"]  # the readable one still reads


def test_a_retired_provider_leaves_no_columns(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("alpha", [offer("a1")], fetched_at=T0)
        s.write_snapshot("beta", [offer("b1", provider="beta")], fetched_at=T0)
        s.retire_provider("alpha")
        snapshots, part = s.load_plan_part(["alpha", "beta"])
        assert list(snapshots) == ["beta"] and part.n == 1


def test_texts_read_like_the_list_they_hold() -> None:
    import numpy as np

    from rentopt.optimizer.offer_table import Texts, merge_column

    ids = ["a1", "", "ünï", "b,2"]
    column = Texts.of(ids)
    assert column == ids and ids == column and len(column) == 4 and column[2] == "ünï" and column[-1] == "b,2"
    assert column[np.int64(1)] == "" and column[1:3] == ["", "ünï"] and column.index("b,2") == 3
    assert column.take(np.array([3, 0])) == ["b,2", "a1"] and list(Texts.of([])) == [] and Texts.of(["x"]) == ["x"]
    with pytest.raises(ValueError, match="2 texts for 3 rows"):
        Texts(b"a\x00b", 3)
    assert column.take(np.array([1, 2, 2, 3])) == ["", "ünï", "ünï", "b,2"] and column.take(np.zeros(0, int)) == []
    joined = merge_column("offer_id", [column, ["c"], Texts.of([]), Texts.of([""])], [4, 1, 0, 1])
    assert isinstance(joined, Texts) and joined == [*ids, "c", ""]
    assert merge_column("offer_id", [column, ["bad\x00id"]], [4, 1]) == [*ids, "bad\x00id"]  # no Texts can hold it


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.booleans(), st.lists(st.text(alphabet="ab,é\n ", max_size=4), max_size=5)), max_size=5))
def test_joined_texts_find_each_text_where_a_fresh_scan_does(parts) -> None:
    """Joining keeps each part's offsets, shifted; every row must read what a scan of the
    joined buffer finds (a part may be a Texts or, from a small source, a list)."""
    from rentopt.optimizer.offer_table import Texts, merge_column

    values = [Texts.of(texts) if as_texts else texts for as_texts, texts in parts]
    want = [x for _, texts in parts for x in texts]
    joined = merge_column("offer_id", [*values, Texts.of(["z"])], [len(v) for v in values] + [1])
    assert [joined[i] for i in range(len(joined))] == [*want, "z"]
    assert joined.starts.tolist() == Texts(joined.data, len(want) + 1).starts.tolist()


@pytest.mark.parametrize("damage, match", [
    ("UPDATE plan_columns SET rows = rows + 1 WHERE name = 'gpus'", "differ in length"),
    ("UPDATE plan_columns SET data = CAST('a1' AS BLOB) WHERE name = 'offer_id'", "1 texts for 2 rows"),
    ("DELETE FROM plan_columns WHERE name = 'hourly.1'", "hourly"),
    ("UPDATE plan_columns SET data = substr(data, 1, 4) WHERE name = 'currency'", "1 values of currency for 2 rows"),
])
def test_damaged_planning_columns_are_refused_with_the_way_out(tmp_path, damage, match):
    """A store whose planning columns do not fit together is one clear StoreError naming what is
    wrong and how to move the file aside; nothing is written to it."""
    path = tmp_path / "prices.sqlite"
    with open_writable(path) as s:
        s.write_snapshot("alpha", [offer("a1"), offer("a2")], fetched_at=T0)
    db = sqlite3.connect(path)
    db.execute(damage)
    db.commit()
    db.close()
    before = path.read_bytes()
    with open_writable(path) as s, pytest.raises(StoreError, match=f"cannot read .*{match}.*mv "):
        s.load_plan_part(["alpha"])
    assert path.read_bytes() == before


def test_values_at_reads_every_kind_of_string_column_as_its_list() -> None:
    import numpy as np

    from rentopt.optimizer.offer_table import FixedTexts, Strings, Texts, values_at

    values = ["h100", "", "ünï", "h100"]
    rows = np.array([3, 0, 2, 2, 1])
    want = ["h100", "h100", "ünï", "ünï", ""]
    columns = [values, Texts.of(values), Strings(np.array([0, 1, 2, 0]), ["h100", "", "ünï"]),
               FixedTexts(np.array([v.encode() for v in values], dtype="S8"))]
    for column in columns:
        assert values_at(column, rows) == want, type(column).__name__
        assert values_at(column, np.zeros(0, dtype=np.int64)) == []


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.text(alphabet=st.sampled_from(["a", "b", ",", " ", "\u00e9", "\u6a21"]), max_size=5), max_size=12))
def test_texts_joined_from_their_bounds_are_the_texts_found_by_their_nuls(values):
    """Texts.joined places each text by the byte bounds it had before the NULs went in; Texts
    finds the NULs: the same texts, the same starts."""
    import numpy as np

    from rentopt.optimizer.offer_table import Texts

    encoded = [v.encode() for v in values]
    bounds = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int32)
    data = b"\x00".join(encoded)
    joined, found = Texts.joined(data, bounds), Texts(data, len(values))
    assert joined.starts.tolist() == found.starts.tolist()
    assert list(joined) == values and len(joined) == len(values)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.text(alphabet=st.sampled_from(["a", "b", ",", " ", "\u00e9", "\u6a21"]), max_size=5), max_size=12),
       st.lists(st.integers(0, 11), max_size=4))
def test_texts_of_cells_read_alike_before_and_after_their_join(values, picked):
    """Texts.cells (a file's id cells, joined by NULs only when `data` is read) gives the same
    texts one by one, taken by rows, listed and joined, as Texts.of the same strings."""
    import numpy as np

    from rentopt.optimizer.offer_table import Texts, merge_column

    encoded = [v.encode() for v in values]
    chars = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    bounds = np.cumsum([0] + [len(e) for e in encoded]).astype(np.int32)
    rows = np.array([r for r in picked if r < len(values)], dtype=np.int64)
    want = Texts.of(values)
    texts = Texts.cells(chars, bounds)
    assert [texts[i] for i in range(len(values))] == values and len(texts) == len(values)
    if len(values):
        assert texts[-1] == values[-1]
    assert texts.take(rows) == [values[r] for r in rows]  # still not joined
    assert texts._data is None and texts._starts is None  # neither joined nor placed
    assert texts.data == want.data and texts.starts.tolist() == want.starts.tolist()
    assert texts.take(rows) == [values[r] for r in rows] and list(texts) == values
    unjoined = Texts.cells(chars, bounds)
    assert merge_column("offer_id", [unjoined, ["z"]], [len(values), 1]) == [*values, "z"]
