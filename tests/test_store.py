"""The SQLite price store: schema and migrations, snapshots, history, and refusing bad files."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from rentopt.optimizer import store
from rentopt.optimizer.errors import StoreError
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.store import OfferQuery, open_readonly, open_writable
from tests.table_checks import assert_same_table

T0 = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def make_offer(offer_id: str, *, provider: str = "alpha", gpu: str | None = "H100-SXM-80GB", gpus: int = 8,
               price: str = "16.00", unit: PriceUnit = PriceUnit.HOUR, spot: bool = False,
               fetched_at: datetime = T0, **fields) -> Offer:
    values = dict(
        provider=provider, offer_id=offer_id, gpu=gpu, gpu_raw=gpu or "Mystery GPU", gpus=gpus,
        gpu_status="exact" if gpu else "unknown", gpu_memory_gb=80.0, region="us-east",
        price_options=[PriceOption(unit=unit, amount=Decimal(price), interruptible=spot)], spot=spot,
        storage_gb_month=Decimal("0.10"), currency="USD", fetched_at=fetched_at, source="https://api.alpha.test/v1",
    )
    values.update(fields)
    return Offer(**values)


def plan_table(s) -> OfferTable:
    """The store's planning columns of every provider, as one table (rows by provider, offer id)."""
    return s.load_plan_part([p.name for p in s.providers()])[1].table()


def snapshot_bytes(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "prices.sqlite"


# --------------------------------------------------------------------------------------------
# Schema and migrations

EXPECTED_COLUMNS = {
    "_rentopt_migrations": ["name", "applied_at"],
    "providers": ["name", "snapshot_id", "offers_count", "last_attempt_at", "last_success_at", "last_error",
                  "last_error_at", "plugin", "retired"],
    "snapshots": ["id", "provider", "fetched_at", "stored_at", "source", "offers_count", "summary", "plugin"],
    "plugins": ["name", "last_attempt_at", "last_success_at", "last_error", "last_error_at"],
    "offers": ["provider", "offer_id", "snapshot_id", "gpu", "gpus", "gpu_memory_gb", "spot", "region", "currency",
               "hour_price_micros", "prices", "offer", "plan"],
    "price_history": ["snapshot_id", "provider", "fetched_at", "gpu", "gpus", "spot", "currency", "offers",
                      "min_gpu_hour", "median_gpu_hour"],
    "offer_prices": ["provider", "offer_id", "snapshot_id", "fetched_at", "previous_prices", "prices"],
    "fx_rates": ["day", "currency", "per_eur"],
    "fx_fetch": ["id", "fetched_at", "source"],
    "plan_columns": ["provider", "snapshot_id", "name", "encoding", "rows", "data", "meta"],
    "refused_rows": ["provider", "offer_id", "reason", "refused_at"],
}
EXPECTED_INDEXES = {"snapshots_provider", "offers_gpu", "offers_memory", "offers_price", "price_history_gpu",
                    "price_history_gpu_provider"}


def test_blank_database_gets_exactly_the_schema(db_path):
    with open_writable(db_path) as s:
        tables = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == set(EXPECTED_COLUMNS)
        for table, columns in EXPECTED_COLUMNS.items():
            assert [r[1] for r in s.db.execute(f"PRAGMA table_info({table})")] == columns, table
        indexes = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")}
        assert indexes == EXPECTED_INDEXES
        assert s.db.execute("PRAGMA application_id").fetchone()[0] == store.APPLICATION_ID
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == len(store.MIGRATIONS)
        assert s.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store.applied_migrations(s.db) == [m.__name__ for m in store.MIGRATIONS]


def test_reopening_applies_nothing_twice(db_path):
    open_writable(db_path).close()
    with open_writable(db_path) as s:
        assert store.migrate(s.db, db_path) == []
        assert s.db.execute("SELECT count(*) FROM _rentopt_migrations").fetchone()[0] == len(store.MIGRATIONS)


def test_a_failing_migration_rolls_back_and_stays_pending(db_path):
    shipped = [m.__name__ for m in store.MIGRATIONS]

    def m900_add_notes(db):
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('half done')")
        raise RuntimeError("disk on fire")

    with pytest.raises(StoreError, match="m900_add_notes.*disk on fire.*mv "):
        open_writable(db_path, migrations=[*store.MIGRATIONS, m900_add_notes])
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT name FROM sqlite_master WHERE name = 'notes'").fetchone() is None
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(shipped)
    assert store.applied_migrations(db) == shipped
    db.close()

    calls = []

    def m900_add_notes(db):  # noqa: F811 - the fixed version of the same migration
        calls.append(1)
        db.execute("CREATE TABLE notes (text TEXT)")

    with open_writable(db_path, migrations=[*store.MIGRATIONS, m900_add_notes]) as s:
        assert store.applied_migrations(s.db) == [*shipped, "m900_add_notes"]
        assert s.db.execute("PRAGMA user_version").fetchone()[0] == len(shipped) + 1
    open_writable(db_path, migrations=[*store.MIGRATIONS, m900_add_notes]).close()
    assert calls == [1]  # applied exactly once


def test_a_failing_first_migration_leaves_a_blank_file_not_a_foreign_one(db_path):
    def m001_broken(db):
        db.execute("CREATE TABLE half (x)")
        raise RuntimeError("boom")

    with pytest.raises(StoreError, match="m001_broken"):
        open_writable(db_path, migrations=[m001_broken])
    open_writable(db_path).close()  # the real schema still applies cleanly afterwards


def test_upgrade_keeps_data(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("a1"), make_offer("a2", price="20")], fetched_at=T0)

    def m900_offer_notes(db):
        db.execute("ALTER TABLE offers ADD COLUMN note TEXT")

    with open_writable(db_path, migrations=[*store.MIGRATIONS, m900_offer_notes]) as s:
        assert [r[1] for r in s.db.execute("PRAGMA table_info(offers)")][-1] == "note"
        assert [o.offer_id for o in s.load_offers()] == ["a1", "a2"]
        assert s.providers()[0].offers_count == 2
        assert len(s.price_history("H100-SXM-80GB")) == 1


def test_m002_backfills_planning_rows_of_a_version_1_store(db_path):
    """A store written before planning rows existed: the upgrade computes them from the offers."""
    offers = [make_offer("a1"), make_offer("a2", price="20")]
    db = sqlite3.connect(db_path, isolation_level=None)
    store.migrate(db, db_path, [store.m001_initial])
    db.execute("INSERT INTO providers (name) VALUES ('alpha')")
    db.execute("INSERT INTO snapshots (id, provider, fetched_at, stored_at, source, offers_count, summary)"
               " VALUES (1, 'alpha', 't', 't', 's', 2, '{}')")
    for o in offers:
        db.execute("INSERT INTO offers (provider, offer_id, snapshot_id, gpu, gpus, gpu_memory_gb, spot, region,"
                   " currency, hour_price_micros, prices, offer) VALUES (?, ?, 1, ?, ?, ?, 0, NULL, ?, NULL, '', ?)",
                   (o.provider, o.offer_id, o.gpu, o.gpus, o.gpu_memory_gb, o.currency, o.model_dump_json()))
    db.close()
    with pytest.raises(StoreError, match="older rentopt"):
        open_readonly(db_path)
    with open_writable(db_path) as s:
        assert_same_table(plan_table(s), OfferTable.from_offers(offers))
        assert [o.offer_id for o in s.load_offers_by_key([("alpha", "a2")])] == ["a2"]


def test_migration_names_are_unique():
    with pytest.raises(ValueError, match="duplicate"):
        store.migration(store.m001_initial)
    assert store.MIGRATIONS.count(store.m001_initial) == 1


# --------------------------------------------------------------------------------------------
# Files that are not (our) stores: a clear error with the way out, and the file untouched


def _assert_refused(path: Path, match: str, *, sqlite_may_look: bool = False) -> None:
    """Both openers refuse with the way out, and leave the file exactly as it was.

    Unless `sqlite_may_look`, the file is refused from its header alone, so not even SQLite's
    empty -wal/-shm side files appear next to it.
    """
    wal = Path(str(path) + "-wal")
    before = snapshot_bytes(path), wal.exists()
    for opener in (open_readonly, open_writable):
        with pytest.raises(StoreError, match=match) as info:
            opener(path)
        message = str(info.value)
        assert f"mv {path} {path}.bad" in message
        assert "rentopt refresh" in message or "pip install -U rentopt" in message
        assert snapshot_bytes(path) == before[0]
        if sqlite_may_look:
            assert not wal.exists() or wal.stat().st_size == 0
        else:
            assert wal.exists() == before[1]


def test_a_file_that_is_not_sqlite_is_refused(db_path):
    db_path.write_text("provider,offer_id\nvast,1\n" * 20)
    _assert_refused(db_path, "not a rentopt price store")


def test_a_file_shorter_than_an_sqlite_header_is_refused(db_path):
    db_path.write_bytes(store.SQLITE_MAGIC + b"\x10\x00")
    _assert_refused(db_path, "not a rentopt price store")


def test_a_foreign_sqlite_database_is_refused(db_path):
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, path TEXT)")
    db.execute("INSERT INTO photos (path) VALUES ('holiday.jpg')")
    db.commit()
    db.close()
    _assert_refused(db_path, "SQLite database, but not a rentopt price store", sqlite_may_look=True)


def test_another_programs_database_is_refused_from_its_header(db_path):
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA application_id = 1836597052")  # any other application's id
    db.execute("CREATE TABLE things (x)")
    db.close()
    _assert_refused(db_path, "SQLite database, but not a rentopt price store")


def test_a_store_from_a_newer_rentopt_is_refused(db_path):
    open_writable(db_path).close()
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA user_version = 99")
    db.close()
    _assert_refused(db_path, "newer rentopt.*schema version 99")


def test_a_store_with_an_unknown_migration_is_refused(db_path):
    open_writable(db_path).close()
    db = sqlite3.connect(db_path)
    db.execute("INSERT INTO _rentopt_migrations VALUES ('m002_from_the_future', '2027-01-01')")
    db.commit()
    db.close()
    _assert_refused(db_path, "newer rentopt", sqlite_may_look=True)


def test_a_truncated_store_is_refused(db_path):
    offers = [make_offer(f"o{i}", price=str(10 + i)) for i in range(300)]
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", offers, fetched_at=T0)
    open_readonly(db_path).close()  # readers may leave an empty -wal behind; it must not hide the damage
    size = db_path.stat().st_size
    with db_path.open("r+b") as fp:
        fp.truncate(size // 2)
    _assert_refused(db_path, "cut short")


def test_a_damaged_page_is_reported_with_the_way_out(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer(f"o{i}") for i in range(200)], fetched_at=T0)
    data = bytearray(db_path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xff" * (len(data) - page)  # scribble over every page but the first
    db_path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="mv "):
        s = open_readonly(db_path)
        assert s is not None
        s.load_offers()


def test_read_only_open_never_creates_a_store(db_path):
    assert open_readonly(db_path) is None
    assert not db_path.exists()
    assert not db_path.parent.joinpath("prices.sqlite-wal").exists()


def test_an_empty_file_counts_as_no_store_and_refresh_may_initialise_it(db_path):
    db_path.write_bytes(b"")
    assert open_readonly(db_path) is None
    assert db_path.read_bytes() == b""
    with open_writable(db_path) as s:
        assert store.applied_migrations(s.db) == [m.__name__ for m in store.MIGRATIONS]


def test_read_only_open_of_an_older_store_asks_for_a_refresh(db_path):
    open_writable(db_path).close()
    before = snapshot_bytes(db_path)

    def m900_more(db):
        db.execute("CREATE TABLE more (x)")

    with pytest.raises(StoreError, match="older rentopt; run `rentopt refresh`"):
        open_readonly(db_path, migrations=[*store.MIGRATIONS, m900_more])
    assert snapshot_bytes(db_path) == before


def test_a_read_only_store_refuses_writes(db_path):
    open_writable(db_path).close()
    with open_readonly(db_path) as s, pytest.raises(StoreError, match="read-only"):
        s.write_snapshot("alpha", [make_offer("a")], fetched_at=T0)


def test_readers_see_the_last_committed_snapshot_while_a_refresh_holds_the_store(db_path):
    with open_writable(db_path) as writer:
        writer.write_snapshot("alpha", [make_offer("a1")], fetched_at=T0)
        with open_readonly(db_path) as reader:
            assert [o.offer_id for o in reader.load_offers()] == ["a1"]
            writer.write_snapshot("alpha", [make_offer("a2")], fetched_at=T0 + timedelta(days=1))
            assert [o.offer_id for o in reader.load_offers()] == ["a2"]


# --------------------------------------------------------------------------------------------
# Snapshots


def test_a_snapshot_round_trips_every_field(db_path):
    offers = [
        make_offer("a1", extra={"reliability": 0.99, "host": 7}, egress_gb=Decimal("0"), max_duration_hours=720.5,
                   interconnect="nvlink", interconnect_gbps=900.0),
        make_offer("a2", gpu=None, price="3.1", unit=PriceUnit.DAY),
        make_offer("a3", spot=True, price="0.55", region=None),
        make_offer("a4", price_options=[PriceOption(unit=PriceUnit.TERM, amount=Decimal("70000"), term_hours=8760),
                                        PriceOption(unit=PriceUnit.HOUR, amount=Decimal("12.5"))]),
    ]
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", offers, fetched_at=T0)
    with open_readonly(db_path) as s:
        assert s.load_offers() == offers
        assert all(isinstance(p.amount, Decimal) for o in s.load_offers() for p in o.price_options)


def test_second_snapshot_reports_new_changed_and_removed(db_path):
    first = [make_offer("keep"), make_offer("reprice"), make_offer("restorage"), make_offer("gone"),
             make_offer("moved")]
    second = [
        make_offer("keep", fetched_at=T0 + timedelta(days=1)),
        make_offer("reprice", price="15.50"),
        make_offer("restorage", storage_gb_month=Decimal("0.12")),
        make_offer("moved", region="eu-west"),  # not a price: not "changed"
        make_offer("fresh"),
    ]
    with open_writable(db_path) as s:
        d1 = s.write_snapshot("alpha", first, fetched_at=T0)
        assert (sorted(d1.new), d1.changed, d1.removed) == (sorted(o.offer_id for o in first), [], [])
        d2 = s.write_snapshot("alpha", second, fetched_at=T0 + timedelta(days=1))
        assert d2.new == ["fresh"]
        assert sorted(d2.changed) == ["reprice", "restorage"]
        assert d2.removed == ["gone"]
        assert d2.offers == 5
        assert sorted(o.offer_id for o in s.load_offers()) == ["fresh", "keep", "moved", "reprice", "restorage"]
        changes = s.offer_price_changes("alpha", "reprice")
        assert len(changes) == 1 and '"16.00"' in s.db.execute(
            "SELECT previous_prices FROM offer_prices WHERE offer_id = 'reprice'").fetchone()[0]
        assert '"15.50"' in changes[0][1]
        assert s.offer_price_changes("alpha", "keep") == []
        summaries = s.snapshot_summaries("alpha")
        assert [(x["new"], x["changed"], x["removed"]) for x in summaries] == [(5, 0, 0), (1, 2, 1)]


def test_snapshots_of_one_provider_leave_the_others_alone(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("a1")], fetched_at=T0)
        s.write_snapshot("beta", [make_offer("b1", provider="beta")], fetched_at=T0)
        s.write_snapshot("alpha", [make_offer("a2")], fetched_at=T0 + timedelta(hours=1))
        assert sorted(o.key for o in s.load_offers()) == [("alpha", "a2"), ("beta", "b1")]


def test_a_failed_write_changes_nothing(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("a1"), make_offer("a2")], fetched_at=T0)
        with pytest.raises(StoreError):  # duplicate ids break the insert half-way
            s.write_snapshot("alpha", [make_offer("n1"), make_offer("n1", price="9")], fetched_at=T0 + timedelta(days=1))
        assert [o.offer_id for o in s.load_offers()] == ["a1", "a2"]
        assert len(s.snapshot_summaries("alpha")) == 1
        assert s.providers()[0].offers_count == 2


def test_mark_failed_keeps_the_last_good_snapshot_and_marks_it_stale(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("a1")], fetched_at=T0, now=T0)
        s.mark_failed("alpha", "HTTP 500 after 3 attempts", now=T0 + timedelta(days=1))
        (state,) = s.providers()
        assert state.stale and state.has_data
        assert state.last_error == "HTTP 500 after 3 attempts"
        assert state.last_success_at == T0 and state.last_error_at == T0 + timedelta(days=1)
        assert [o.offer_id for o in s.load_offers()] == ["a1"]
        s.write_snapshot("alpha", [make_offer("a1")], fetched_at=T0, now=T0 + timedelta(days=2))
        assert not s.providers()[0].stale


def test_a_provider_that_never_succeeded_has_no_data(db_path):
    with open_writable(db_path) as s:
        s.mark_failed("alpha", "timed out")
        (state,) = s.providers()
        assert state.stale and not state.has_data and state.offers_count == 0


def test_secrets_are_scrubbed_from_everything_stored(db_path):
    key = "sk-test-SECRET-123"
    offer = make_offer("a1", source=f"https://api.alpha.test/v1?api_key={key}", extra={"note": f"key {key}"})
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [offer], fetched_at=T0, source=f"https://api.alpha.test/?k={key}",
                         summary={"echo": key}, secrets=[key])
        s.mark_failed("beta", f"refused key {key}", secrets=[key])
    for name in ("prices.sqlite", "prices.sqlite-wal"):
        path = db_path.with_name(name)
        if path.exists():
            assert key.encode() not in path.read_bytes()


def test_offers_of_another_provider_are_a_programming_error(db_path):
    with open_writable(db_path) as s, pytest.raises(ValueError, match="belongs to 'beta'"):
        s.write_snapshot("alpha", [make_offer("b1", provider="beta")], fetched_at=T0)


def test_price_fingerprint_cut_from_the_json_equals_a_dedicated_dump():
    offers = [make_offer("a"), make_offer("b", storage_gb_month=None, egress_gb=Decimal("0.01")),
              make_offer("c", gpu_raw='odd "price_options": name', extra={"x": ',"net_up_mbps":'})]
    for o in offers:
        assert store.price_fingerprint(o, o.model_dump_json()) == o.model_dump_json(include=set(store.PRICE_FIELDS))


# --------------------------------------------------------------------------------------------
# Queries


@pytest.fixture
def filled(db_path):
    offers = [
        make_offer("h8", price="16"),
        make_offer("h1", gpus=1, price="2.2", region="eu-west"),
        make_offer("spot", gpus=1, price="0.9", spot=True),
        make_offer("a100", gpu="A100-SXM4-40GB", gpu_memory_gb=40.0, gpus=4, price="4.4", region=None),
        make_offer("unknown", gpu=None, gpus=2, price="1.0"),
        make_offer("monthly", gpus=1, price="1460", unit=PriceUnit.MONTH),
        make_offer("b1", provider="beta", gpu="RTX-4090-24GB", gpu_memory_gb=24.0, gpus=1, price="2.5",
                   currency="CNY", region="cn-north"),
    ]
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [o for o in offers if o.provider == "alpha"], fetched_at=T0)
        s.write_snapshot("beta", [o for o in offers if o.provider == "beta"], fetched_at=T0)
    return db_path, offers


QUERIES = [
    OfferQuery(),
    OfferQuery(providers=("beta",)),
    OfferQuery(gpus=("H100-SXM-80GB",)),
    OfferQuery(gpus=("H100-SXM-80GB",), min_gpus=2),
    OfferQuery(min_gpu_memory_gb=41),
    OfferQuery(spot=True),
    OfferQuery(spot=False, region="EU"),
    OfferQuery(currency="CNY"),
    OfferQuery(max_hour_price=Decimal("2.2")),
    OfferQuery(max_hour_price=Decimal("2.0000001")),
    OfferQuery(max_hour_price=Decimal("1.999999")),
    OfferQuery(providers=(), gpus=()),
]


@pytest.mark.parametrize("query", QUERIES, ids=repr)
def test_sql_filtering_agrees_with_the_python_definition(filled, query):
    path, offers = filled
    with open_readonly(path) as s:
        got = sorted(o.key for o in s.load_offers(query))
    assert got == sorted(o.key for o in offers if query.matches(o))


def test_max_price_compares_the_reference_hour_price(filled):
    path, _ = filled
    with open_readonly(path) as s:
        got = {o.offer_id for o in s.load_offers(OfferQuery(providers=("alpha",), max_hour_price=Decimal("2.00")))}
    # "monthly" is 1460 / 730 = 2.00 an hour; "h1" at 2.20 is out; "unknown" and "spot" are in.
    assert got == {"monthly", "spot", "unknown"}


# --------------------------------------------------------------------------------------------
# History


def test_history_keeps_min_and_median_per_gpu_hour(db_path):
    day = timedelta(days=1)
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("x", price="16"), make_offer("y", price="20"), make_offer("z", price="24"),
                                   make_offer("one", gpus=1, price="2.5"), make_offer("u", gpu=None)], fetched_at=T0)
        s.write_snapshot("alpha", [make_offer("x", price="15"), make_offer("y", price="17")], fetched_at=T0 + day)
        s.write_snapshot("beta", [make_offer("b", provider="beta", price="12")], fetched_at=T0 + day)
        points = s.price_history("H100-SXM-80GB", gpus=8)
        assert [(p.provider, p.fetched_at, p.offers, p.min_gpu_hour, p.median_gpu_hour) for p in points] == [
            ("alpha", T0, 3, Decimal("2.000000"), Decimal("2.500000")),
            ("alpha", T0 + day, 2, Decimal("1.875000"), Decimal("2.000000")),
            ("beta", T0 + day, 1, Decimal("1.500000"), Decimal("1.500000")),
        ]
        recent_alpha = s.price_history("H100-SXM-80GB", provider="alpha", since=T0 + timedelta(hours=1))
        assert [(p.gpus, p.min_gpu_hour) for p in recent_alpha] == [(8, Decimal("1.875000"))]
        assert [p.gpus for p in s.price_history("H100-SXM-80GB", provider="alpha")] == [1, 8, 8]
        assert s.db.execute("SELECT count(*) FROM price_history WHERE gpu IS NULL").fetchone()[0] == 0


@pytest.mark.parametrize("group", [store.SQL_VARIABLES, 1])
def test_history_columns_are_the_points_of_several_gpus_read_at_once(db_path, monkeypatch, group):
    monkeypatch.setattr(store, "SQL_VARIABLES", group)  # 1: one query per GPU, the groups joined up
    day = timedelta(days=1)
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("x", price="16"), make_offer("one", gpus=1, price="2.5"),
                                   make_offer("a", gpu="A100-SXM-80GB", price="12", currency="CNY"),
                                   make_offer("l", gpu="L4-24GB", gpus=1, price="0.7")], fetched_at=T0)
        s.write_snapshot("alpha", [make_offer("x", price="15")], fetched_at=T0 + day)
        s.write_snapshot("beta", [make_offer("b", provider="beta", price="12", spot=True)], fetched_at=T0 + day,
                         plugin="sheet")
        wanted = ["H100-SXM-80GB", "A100-SXM-80GB", "H100-SXM-80GB", "B200-192GB"]

        def rows(columns: store.HistoryColumns) -> list[tuple]:
            return list(zip(columns.provider, columns.fetched_at, columns.gpu, columns.gpus, columns.spot,
                            columns.currency, columns.min_gpu_hour, columns.plugin, strict=True))

        # Per GPU-hour: 12 CNY / 8, 2.5 / 1, 16 / 8, 15 / 8, 12 / 8; GPU by GPU, then by time, provider, size
        assert rows(s.price_history_columns(wanted)) == [
            ("alpha", T0, "A100-SXM-80GB", 8, False, "CNY", Decimal("1.5"), "alpha"),
            ("alpha", T0, "H100-SXM-80GB", 1, False, "USD", Decimal("2.5"), "alpha"),
            ("alpha", T0, "H100-SXM-80GB", 8, False, "USD", Decimal("2"), "alpha"),
            ("alpha", T0 + day, "H100-SXM-80GB", 8, False, "USD", Decimal("1.875"), "alpha"),
            ("beta", T0 + day, "H100-SXM-80GB", 8, True, "USD", Decimal("1.5"), "sheet"),
        ]
        # the same points as price_history's, one GPU at a time
        for since in (None, T0 + timedelta(hours=1)):
            one_by_one = [(h.provider, h.fetched_at, h.gpu, h.gpus, h.spot, h.currency, h.min_gpu_hour, h.plugin)
                          for g in ("A100-SXM-80GB", "H100-SXM-80GB") for h in s.price_history(g, since=since)]
            assert rows(s.price_history_columns(wanted, since=since)) == one_by_one
        assert [r[1] for r in rows(s.price_history_columns(wanted, since=T0 + timedelta(hours=1)))] == [T0 + day] * 2
        # plugins: only the providers named, each from its plugin's snapshots
        assert {r[0] for r in rows(s.price_history_columns(wanted, plugins={"alpha": "alpha"}))} == {"alpha"}
        assert rows(s.price_history_columns(wanted, plugins={"beta": "beta", "alpha": "sheet"})) == []
        assert len(s.price_history_columns([])) == 0


@pytest.mark.parametrize("provider, index", [("alpha", "price_history_gpu_provider"), (None, "price_history_gpu")])
def test_history_query_is_one_indexed_lookup(db_path, provider, index):
    with open_writable(db_path) as s:
        s.write_snapshot("alpha", [make_offer("x")], fetched_at=T0)
        sql = "SELECT * FROM price_history WHERE gpu = ? AND fetched_at >= ?"
        args: list = ["H100-SXM-80GB", store.timestamp(T0)]
        if provider:
            sql += " AND provider = ?"
            args.append(provider)
        plan = " ".join(str(r[-1]) for r in s.db.execute("EXPLAIN QUERY PLAN " + sql, args))
    assert f"USING INDEX {index}" in plan and "SCAN" not in plan


def test_store_path_follows_rentopt_home(rentopt_home):
    assert store.store_path() == rentopt_home / "prices.sqlite"


def test_store_path_defaults_to_the_user_data_dir(monkeypatch):
    from platformdirs import user_data_dir

    monkeypatch.delenv("RENTOPT_HOME")
    assert store.store_path() == Path(user_data_dir("rentopt")) / "prices.sqlite"


# --------------------------------------------------------------------------------------------
# m004: plugins apart from providers (the price-sheet plugin's platforms become providers)


def _old_style_snapshot(db, provider: str, snapshot_id: int, offers, when: datetime, source: str) -> None:
    """What a version-2 rentopt wrote for one refresh of `provider` (its write_snapshot, by hand)."""
    ts = store.timestamp(when)
    db.execute("INSERT OR IGNORE INTO providers (name) VALUES (?)", (provider,))
    db.execute("INSERT INTO snapshots (id, provider, fetched_at, stored_at, source, offers_count, summary)"
               " VALUES (?, ?, ?, ?, ?, ?, '{}')", (snapshot_id, provider, ts, ts, source, len(offers)))
    db.execute("DELETE FROM offers WHERE provider = ?", (provider,))
    for o in offers:
        row = store._offer_row(o, o.price_options[0].amount, ())
        db.execute("INSERT INTO offers (provider, offer_id, snapshot_id, gpu, gpus, gpu_memory_gb, spot, region,"
                   " currency, hour_price_micros, prices, offer, plan) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (provider, row[0], snapshot_id, *row[1:], store._plan_json(o)))
    for h in store.history_rows(offers):
        db.execute("INSERT INTO price_history VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (snapshot_id, provider, ts, *h))
    db.execute("UPDATE providers SET snapshot_id = ?, offers_count = ?, last_attempt_at = ?, last_success_at = ?"
               " WHERE name = ?", (snapshot_id, len(offers), ts, ts, provider))


def sheet_offer(platform: str, offer_id: str, gpu: str, gpus: int, price: str) -> Offer:
    """An offer as the version-2 sheet plugin stored it: provider "sheet", id "<platform>/<id>"."""
    return make_offer(f"{platform}/{offer_id}", provider="sheet", gpu=gpu, gpus=gpus, price=price, currency="CNY",
                      source=f"https://{platform}.example", extra={"platform": platform})


def test_m004_splits_the_sheet_plugin_into_its_platforms_and_loses_nothing(db_path):
    night1, night2 = T0, T0 + timedelta(days=1)
    v1 = [sheet_offer("autodl", "rtx4090-1x", "RTX-4090-24GB", 1, "1.88"), sheet_offer("jygpu", "8x-rtx4090", "RTX-4090-24GB", 8, "13.75")]
    v2 = [sheet_offer("autodl", "rtx4090-1x", "RTX-4090-24GB", 1, "1.98"), sheet_offer("jygpu", "8x-rtx4090", "RTX-4090-24GB", 8, "13.75"),
          sheet_offer("autodl", "rtx3090-1x", "RTX-3090-24GB", 1, "1.32")]
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute("PRAGMA foreign_keys = ON")
    store.migrate(db, db_path, [store.m001_initial, store.m002_plan_rows])
    _old_style_snapshot(db, "sheet", 1, v1, night1, "file://rentopt/providers/sheets")
    _old_style_snapshot(db, "sheet", 2, v2, night2, "file://rentopt/providers/sheets")
    db.execute("INSERT INTO offer_prices VALUES ('sheet', 'autodl/rtx4090-1x', 2, ?, 'old', 'new')", (store.timestamp(night2),))
    _old_style_snapshot(db, "vast", 3, [make_offer("v1", provider="vast")], night1, "https://vast.example")
    db.execute("UPDATE providers SET last_error = 'HTTP 500', last_error_at = ? WHERE name = 'vast'", (store.timestamp(night2),))
    history_before = db.execute("SELECT count(*) FROM price_history").fetchone()[0]
    db.close()

    with open_writable(db_path) as s:
        states = {p.name: p for p in s.providers()}
        assert set(states) == {"autodl", "jygpu", "vast"}  # "sheet" is retired, not a provider any more
        assert (states["autodl"].plugin, states["jygpu"].plugin, states["vast"].plugin) == ("sheet", "sheet", "vast")
        assert states["autodl"].fetched_at == night2 and states["autodl"].offers_count == 2
        assert states["vast"].stale and states["vast"].last_error == "HTTP 500"
        offers = {o.key: o for o in s.load_offers()}
        assert set(offers) == {("autodl", "rtx4090-1x"), ("autodl", "rtx3090-1x"), ("jygpu", "8x-rtx4090"), ("vast", "v1")}
        assert offers[("autodl", "rtx4090-1x")].price_options[0].amount == Decimal("1.98")
        table = plan_table(s)
        assert {table.key(r) for r in range(table.n)} == set(offers)
        assert s.offer_price_changes("autodl", "rtx4090-1x") == [(night2, "new")]
        plugins = {p.name: p for p in s.plugins()}
        assert set(plugins) == {"sheet", "vast"} and plugins["vast"].stale
        # history: an RTX 4090 x1 is only sold by autodl and x8 only by jygpu, so both rows move
        assert [h.provider for h in s.price_history("RTX-4090-24GB", gpus=1)] == ["autodl", "autodl"]
        assert [h.provider for h in s.price_history("RTX-4090-24GB", gpus=8)] == ["jygpu", "jygpu"]
        assert s.db.execute("SELECT count(*) FROM price_history").fetchone()[0] == history_before
        # and the next refresh of the platform continues where the old snapshots left off
        diff = s.write_snapshot("autodl", [make_offer("rtx4090-1x", provider="autodl", gpu="RTX-4090-24GB", gpus=1,
                                                      price="1.98", currency="CNY")],
                                fetched_at=night2 + timedelta(days=1), plugin="sheet")
        assert diff.removed == ["rtx3090-1x"] and diff.new == []


def test_a_provider_of_several_plugins_names_the_last_writer_and_plugins_keep_their_own_state(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("gcp", [make_offer("g", provider="gcp")], fetched_at=T0, plugin="skypilot", now=T0)
        s.mark_plugin("skypilot", now=T0)
        s.mark_plugin("skypilot", error="offline", now=T0 + timedelta(hours=1))
        assert {p.name: p.plugin for p in s.providers()} == {"gcp": "skypilot"}
        (plugin,) = s.plugins()
        assert plugin.stale and plugin.last_error == "offline" and plugin.last_success_at == T0


def test_retiring_a_provider_drops_its_offers_but_keeps_its_history(db_path):
    with open_writable(db_path) as s:
        s.write_snapshot("mycloud", [make_offer("m", provider="mycloud")], fetched_at=T0, plugin="sheet")
        assert s.retire_provider("mycloud") == 1
        assert s.providers() == [] and s.load_offers() == []
        assert len(s.price_history("H100-SXM-80GB")) == 1


def test_imported_history_is_stored_once(db_path):
    rows = tuple(store.history_rows([make_offer("a", provider="gcp")]))
    past = [store.HistorySnapshot("gcp", "skypilot", T0 - timedelta(days=d), "catalog", 1, rows) for d in (2, 1)]
    with open_writable(db_path) as s:
        assert s.import_history(past) == 2
        assert s.import_history(past) == 0  # the same file imported twice adds nothing
        assert [h.fetched_at for h in s.price_history("H100-SXM-80GB", "gcp")] == [p.fetched_at for p in past]
        assert s.providers()[0].has_data is False  # history alone is no current offer
        assert [h.rows for h in s.history_snapshots("gcp")] == [rows, rows]
