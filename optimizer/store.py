"""The local price store: SQLite in $RENTOPT_HOME/prices.sqlite. The only module that speaks SQL.

What it keeps:
- `providers`: one row per provider ever refreshed: its current snapshot, when it last
  succeeded, and its last error (a provider whose error is newer than its success is *stale*:
  its last good offers are still served, flagged as such).
- `snapshots`: one row per successful refresh of one provider, with a JSON summary
  (new / changed / removed offers, skipped rows, unknown GPU names).
- `offers`: the offers of each provider's CURRENT snapshot: filterable columns plus the full
  normalised Offer as JSON (the JSON is the truth; the columns are an index onto it).
- `price_history`: per snapshot and (gpu, gpus, spot, currency): the min and median price per
  GPU-hour and the number of offers. A few hundred short rows a night, so years fit.
- `offer_prices`: an offer's old and new prices, only when they change between snapshots.
- `fx_rates` / `fx_fetch`: the ECB reference rates `rentopt refresh` last fetched, by day.
- `plugins`: one row per provider plugin ever run (the unit `rentopt refresh --providers`
  names): when it last ran, succeeded or failed. One plugin can deliver several providers
  (the SkyPilot catalog: gcp, azure, lambda, ...; price sheets: autodl, jygpu, ...), so a
  provider's row names the plugin that delivered its current snapshot.

Writes happen only from `rentopt refresh` (`open_writable`), one provider per transaction, so
a failure never leaves a partial snapshot. Everything else opens the file read-only
(`open_readonly`) and never creates or migrates it.

Schema changes are `@migration` functions applied in order, each in one transaction together
with the row that records it; a shipped migration is never edited, a fix is a new one
(pattern from simonw/sqlite-utils sqlite_utils/migrations.py and simonw/llm llm/migrations.py).
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter, ValidationError

from rentopt.optimizer.errors import FileSystemError, StoreError
from rentopt.optimizer.gc_pause import gc_paused
from rentopt.optimizer.models import Offer, OfferQuery, PlanRow, hour_price, plan_row
from rentopt.optimizer.paths import check_home, ensure_home, fs_error, store_path
from rentopt.optimizer.plan_columns import decode_column, encode_table, merge_encoded, parse_timestamp, timestamp
from rentopt.optimizer.redact import redact, redacted_logger
from rentopt.optimizer.row_check import known_gpu

if TYPE_CHECKING:
    from rentopt.optimizer.currency import EcbHistory

# PRAGMA application_id marks the file as a rentopt store: the ASCII bytes "RNTO", chosen by us
# as the pragma intends (https://www.sqlite.org/pragma.html#pragma_application_id).
APPLICATION_ID = 0x524E544F
SQLITE_MAGIC = b"SQLite format 3\x00"  # https://www.sqlite.org/fileformat.html#the_database_header
SQLITE_HEADER_BYTES = 100
# Per-GPU history prices are kept to a millionth of the currency unit, the same grid billing
# uses (optimizer/currency.py docstring) and finer than any hourly price in the recorded feeds.
HISTORY_QUANTUM = Decimal("0.000001")
# The filter/sort column holds the node-hour price in micro-units (an integer, exact for SQL
# comparisons); the Decimal in the offer JSON stays the price of record.
MICROS = Decimal(1_000_000)
BUSY_TIMEOUT_MS = 5000
# Values bound in one statement, under SQLite builds' oldest limit of 999 host parameters
# (SQLITE_MAX_VARIABLE_NUMBER before 3.32.0, https://www.sqlite.org/limits.html#max_variable_number).
SQL_VARIABLES = 900
log = redacted_logger("rentopt.store")


# --------------------------------------------------------------------------------------------
# Small pure helpers


def to_micros(amount: Decimal, rounding: str = ROUND_HALF_UP) -> int:
    """Decimal currency units -> integer micro-units.

    >>> to_micros(Decimal("2.4999995")), to_micros(Decimal("1.0000001"), ROUND_CEILING)
    (2500000, 1000001)
    """
    return int((amount * MICROS).to_integral_value(rounding=rounding))


# Fields whose change makes an offer "changed" in a refresh summary, in Offer's field order.
PRICE_FIELDS = ("price_options", "storage_gb_month", "storage_stopped_gb_month", "egress_gb", "ingress_gb")


def _price_slice_bounds() -> tuple[str, str] | None:
    """The keys around the price fields in Offer's JSON, if those fields are contiguous there."""
    names = list(Offer.model_fields)
    first = names.index(PRICE_FIELDS[0])
    if tuple(names[first:first + len(PRICE_FIELDS)]) != PRICE_FIELDS or first + len(PRICE_FIELDS) >= len(names):
        return None
    return f'"{PRICE_FIELDS[0]}":', f',"{names[first + len(PRICE_FIELDS)]}":'


_PRICE_BOUNDS = _price_slice_bounds()
_OFFER_LIST = TypeAdapter(list[Offer])
_OFFER = TypeAdapter(Offer)


def price_fingerprint(offer: Offer, offer_json: str | None = None) -> str:
    """Canonical JSON of everything priced on the offer; equal strings mean equal prices.

    Given the offer's own `model_dump_json()`, the price fields are cut out of it rather than
    serialised a second time (a third of the cost of writing a big snapshot); the result is
    the same string either way (tests/test_store.py checks it).
    """
    if offer_json is not None and _PRICE_BOUNDS is not None:
        start = offer_json.find(_PRICE_BOUNDS[0])
        end = offer_json.find(_PRICE_BOUNDS[1], start)
        if start > 0 and end > start:
            return "{" + offer_json[start:end] + "}"
    return offer.model_dump_json(include=set(PRICE_FIELDS))


# --------------------------------------------------------------------------------------------
# Queries


def query_where(query: OfferQuery) -> tuple[str, list[object]]:
    """A WHERE clause (possibly empty) and its parameters for `query` (models.OfferQuery);
    `query.matches` is the exact check."""
    where: list[str] = []
    args: list[object] = []
    if query.providers is not None:
        where.append(f"provider IN ({','.join('?' * len(query.providers))})")
        args.extend(query.providers)
    if query.gpus is not None:
        where.append(f"gpu IN ({','.join('?' * len(query.gpus))})")
        args.extend(query.gpus)
    if query.min_gpus is not None:
        where.append("gpus >= ?")
        args.append(query.min_gpus)
    if query.min_gpu_memory_gb is not None:
        where.append("gpu_memory_gb >= ?")
        args.append(query.min_gpu_memory_gb)
    if query.spot is not None:
        where.append("spot = ?")
        args.append(int(query.spot))
    if query.region is not None:
        where.append("instr(lower(coalesce(region, '')), ?) > 0")
        args.append(query.region.lower())
    if query.currency is not None:
        where.append("currency = ?")
        args.append(query.currency)
    if query.max_hour_price is not None:
        # Rounded up so the coarse SQL filter never drops an offer that `matches` keeps.
        where.append("hour_price_micros <= ?")
        args.append(to_micros(query.max_hour_price, ROUND_CEILING))
    return (" WHERE " + " AND ".join(where) if where else ""), args


def _failed_since_success(last_error_at: datetime | None, last_success_at: datetime | None) -> bool:
    """A row is stale when an error came after the last success (or there never was one)."""
    if last_error_at is None:
        return False
    return last_success_at is None or last_error_at > last_success_at


@dataclass(frozen=True)
class ProviderState:
    """A provider's row in the store."""

    name: str
    offers_count: int
    fetched_at: datetime | None  # of the current snapshot
    source: str | None
    last_attempt_at: datetime | None
    last_success_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None
    plugin: str | None = None  # the plugin that delivered the current snapshot
    dated_by: str = "published"  # how the current snapshot's date is known (models.DateBasis)

    @property
    def has_data(self) -> bool:
        return self.fetched_at is not None

    @property
    def stale(self) -> bool:
        """The last attempt failed: the offers served are the last good ones, not current."""
        return _failed_since_success(self.last_error_at, self.last_success_at)


@dataclass(frozen=True)
class PluginState:
    """A plugin's row in the store: its last run as a whole (its providers have their own rows)."""

    name: str
    last_attempt_at: datetime | None
    last_success_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None

    @property
    def stale(self) -> bool:
        """Its last run failed after its last good one."""
        return _failed_since_success(self.last_error_at, self.last_success_at)


@dataclass(frozen=True)
class HistorySnapshot:
    """One past snapshot's price history for one provider, without its offers: what a snapshot
    export carries and `import_history` stores (`rows` are `history_rows` tuples)."""

    provider: str
    plugin: str
    fetched_at: datetime
    source: str
    offers: int
    rows: tuple[tuple, ...]


@dataclass
class SnapshotDiff:
    """What one provider's new snapshot changed relative to its previous one."""

    provider: str
    snapshot_id: int
    offers: int
    new: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # any price option, storage or transfer price
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HistoryPoint:
    """The cheapest GPU-hour, and how many offers, of one (provider, GPU, count, kind, currency) on one refresh."""

    provider: str
    fetched_at: datetime
    gpu: str
    gpus: int
    spot: bool
    currency: str
    offers: int
    min_gpu_hour: Decimal
    median_gpu_hour: Decimal
    plugin: str | None = None  # the plugin whose snapshot this is


@dataclass(frozen=True)
class HistoryColumns:
    """History points as columns, entry i of each list one point: the cheapest GPU-hour of one
    (provider, GPU, count, kind, currency) on one refresh, as `HistoryPoint` has it, for readers
    of thousands of points (a report's price history) that need no object per point."""

    provider: list[str] = field(default_factory=list)
    fetched_at: list[datetime] = field(default_factory=list)
    gpu: list[str] = field(default_factory=list)
    gpus: list[int] = field(default_factory=list)
    spot: list[bool] = field(default_factory=list)
    currency: list[str] = field(default_factory=list)
    min_gpu_hour: list[Decimal] = field(default_factory=list)
    plugin: list[str | None] = field(default_factory=list)  # the plugin whose snapshot it is

    def __len__(self) -> int:
        return len(self.provider)

    def take(self, rows: Iterable[int]) -> HistoryColumns:
        """The points at `rows`, in that order."""
        rows = list(rows)
        return HistoryColumns(*([column[i] for i in rows] for column in self._columns()))

    def __add__(self, other: HistoryColumns) -> HistoryColumns:
        return HistoryColumns(*(a + b for a, b in zip(self._columns(), other._columns(), strict=True)))

    def _columns(self) -> tuple[list, ...]:
        return (self.provider, self.fetched_at, self.gpu, self.gpus, self.spot, self.currency, self.min_gpu_hour,
                self.plugin)


@dataclass(frozen=True)
class FxFetch:
    """The exchange rates of the last fetch: (ECB day, currency, units per EUR) rows."""

    fetched_at: datetime
    source: str
    rows: list[tuple[date, str, Decimal]]


# --------------------------------------------------------------------------------------------
# Migrations

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: list[Migration] = []
MIGRATIONS_TABLE = "_rentopt_migrations"


def migration(fn: Migration) -> Migration:
    """Register `fn` as the next schema migration. Names are the key: never reuse or edit one."""
    if any(m.__name__ == fn.__name__ for m in MIGRATIONS):
        raise ValueError(f"duplicate migration name {fn.__name__}")
    MIGRATIONS.append(fn)
    return fn


@migration
def m001_initial(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE providers (
            name TEXT PRIMARY KEY,
            snapshot_id INTEGER REFERENCES snapshots(id),
            offers_count INTEGER NOT NULL DEFAULT 0,
            last_attempt_at TEXT,
            last_success_at TEXT,
            last_error TEXT,
            last_error_at TEXT
        )"""
    )
    db.execute(
        """CREATE TABLE snapshots (
            id INTEGER PRIMARY KEY,
            provider TEXT NOT NULL REFERENCES providers(name),
            fetched_at TEXT NOT NULL,
            stored_at TEXT NOT NULL,
            source TEXT,
            offers_count INTEGER NOT NULL,
            summary TEXT NOT NULL
        )"""
    )
    db.execute("CREATE INDEX snapshots_provider ON snapshots(provider, fetched_at)")
    db.execute(
        """CREATE TABLE offers (
            provider TEXT NOT NULL REFERENCES providers(name),
            offer_id TEXT NOT NULL,
            snapshot_id INTEGER NOT NULL REFERENCES snapshots(id),
            gpu TEXT,
            gpus INTEGER NOT NULL,
            gpu_memory_gb REAL NOT NULL,
            spot INTEGER NOT NULL,
            region TEXT,
            currency TEXT NOT NULL,
            hour_price_micros INTEGER,
            prices TEXT NOT NULL,
            offer TEXT NOT NULL,
            PRIMARY KEY (provider, offer_id)
        )"""
    )
    db.execute("CREATE INDEX offers_gpu ON offers(gpu, gpus)")
    db.execute("CREATE INDEX offers_memory ON offers(gpu_memory_gb)")
    db.execute("CREATE INDEX offers_price ON offers(hour_price_micros)")
    db.execute(
        """CREATE TABLE price_history (
            snapshot_id INTEGER NOT NULL REFERENCES snapshots(id),
            provider TEXT NOT NULL,
            fetched_at TEXT NOT NULL,
            gpu TEXT NOT NULL,
            gpus INTEGER NOT NULL,
            spot INTEGER NOT NULL,
            currency TEXT NOT NULL,
            offers INTEGER NOT NULL,
            min_gpu_hour TEXT NOT NULL,
            median_gpu_hour TEXT NOT NULL,
            PRIMARY KEY (snapshot_id, gpu, gpus, spot, currency)
        )"""
    )
    db.execute("CREATE INDEX price_history_gpu ON price_history(gpu, fetched_at)")
    db.execute("CREATE INDEX price_history_gpu_provider ON price_history(gpu, provider, fetched_at)")
    db.execute(
        """CREATE TABLE offer_prices (
            provider TEXT NOT NULL,
            offer_id TEXT NOT NULL,
            snapshot_id INTEGER NOT NULL REFERENCES snapshots(id),
            fetched_at TEXT NOT NULL,
            previous_prices TEXT NOT NULL,
            prices TEXT NOT NULL,
            PRIMARY KEY (provider, offer_id, snapshot_id)
        )"""
    )


@migration
def m002_plan_rows(db: sqlite3.Connection) -> None:
    """Each offer's planning row (models.PlanRow), so quotes rank 100k offers without decoding them."""
    db.execute("ALTER TABLE offers ADD COLUMN plan TEXT")
    rows = db.execute("SELECT provider, offer_id, offer FROM offers").fetchall()
    db.executemany(
        "UPDATE offers SET plan = ? WHERE provider = ? AND offer_id = ?",
        [(_plan_json(Offer.model_validate_json(text)), provider, offer_id) for provider, offer_id, text in rows],
    )


@migration
def m003_fx_rates(db: sqlite3.Connection) -> None:
    """ECB euro reference rates as `rentopt refresh` last fetched them (read by currency.py)."""
    db.execute(
        """CREATE TABLE fx_rates (
            day TEXT NOT NULL,
            currency TEXT NOT NULL,
            per_eur TEXT NOT NULL,
            PRIMARY KEY (day, currency)
        )"""
    )
    db.execute(
        """CREATE TABLE fx_fetch (
            id INTEGER PRIMARY KEY CHECK (id = 1),
            fetched_at TEXT NOT NULL,
            source TEXT NOT NULL
        )"""
    )


SHEET_PLUGIN = "sheet"


@migration
def m004_plugins(db: sqlite3.Connection) -> None:
    """Separate the refresh unit (the plugin) from the offer's provider.

    Until now a provider's name was its plugin's, so the price-sheet plugin stored every
    platform as provider "sheet" with offer ids "<platform>/<id>". Here: a `plugins` table with
    each plugin's run state (copied from its provider row), a `plugin` column on providers and
    snapshots, and the sheet plugin's current offers moved to one provider per platform
    (`extra.platform`), with their price changes. History rows of the old combined provider
    move to a platform when exactly one platform sells that (GPU, count, currency); the rest
    stay under "sheet", whose row is kept (snapshots refer to it) but retired, so nothing
    stored is lost.
    """
    db.execute("ALTER TABLE providers ADD COLUMN plugin TEXT")
    db.execute("ALTER TABLE providers ADD COLUMN retired INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE snapshots ADD COLUMN plugin TEXT")
    db.execute(
        """CREATE TABLE plugins (
            name TEXT PRIMARY KEY,
            last_attempt_at TEXT,
            last_success_at TEXT,
            last_error TEXT,
            last_error_at TEXT
        )"""
    )
    db.execute("UPDATE providers SET plugin = name")
    db.execute("UPDATE snapshots SET plugin = provider")
    db.execute("INSERT INTO plugins (name, last_attempt_at, last_success_at, last_error, last_error_at)"
               " SELECT name, last_attempt_at, last_success_at, last_error, last_error_at FROM providers")
    sheet = db.execute("SELECT snapshot_id, last_attempt_at, last_success_at, last_error, last_error_at"
                       " FROM providers WHERE name = ?", (SHEET_PLUGIN,)).fetchone()
    if sheet is None:
        return
    snapshot_id, *run_state = sheet
    by_platform: dict[str, list[tuple[str, Offer]]] = defaultdict(list)
    for offer_id, text in db.execute("SELECT offer_id, offer FROM offers WHERE provider = ?", (SHEET_PLUGIN,)):
        offer = Offer.model_validate_json(text)
        platform = offer.extra.get("platform")
        if isinstance(platform, str) and offer_id.startswith(platform + "/"):
            by_platform[platform].append((offer_id, offer))
    taken = {r[0] for r in db.execute("SELECT name FROM providers")}
    moved: dict[tuple[str, int, str], set[str]] = defaultdict(set)
    snap = db.execute("SELECT fetched_at, stored_at, source FROM snapshots WHERE id = ?", (snapshot_id,)).fetchone()
    for platform, items in sorted(by_platform.items()):
        if platform in taken or snap is None:
            continue  # a provider of that name exists already: these offers stay under "sheet"
        db.execute("INSERT INTO providers (name, plugin, offers_count, last_attempt_at, last_success_at,"
                   " last_error, last_error_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                   (platform, SHEET_PLUGIN, len(items), *run_state))
        new_id = db.execute(
            "INSERT INTO snapshots (provider, plugin, fetched_at, stored_at, source, offers_count, summary)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (platform, SHEET_PLUGIN, *snap, len(items), json.dumps({"migrated_from_snapshot": snapshot_id})),
        ).lastrowid
        db.execute("UPDATE providers SET snapshot_id = ? WHERE name = ?", (new_id, platform))
        for old_id, offer in items:
            renamed = offer.model_copy(update={"provider": platform, "offer_id": old_id[len(platform) + 1:]})
            db.execute("UPDATE offers SET provider = ?, offer_id = ?, snapshot_id = ?, offer = ?, plan = ?"
                       " WHERE provider = ? AND offer_id = ?",
                       (platform, renamed.offer_id, new_id, renamed.model_dump_json(), _plan_json(renamed),
                        SHEET_PLUGIN, old_id))
            if offer.gpu is not None:
                moved[(offer.gpu, offer.gpus, offer.currency)].add(platform)
        db.execute("UPDATE offer_prices SET provider = ?, offer_id = substr(offer_id, ?)"
                   " WHERE provider = ? AND offer_id LIKE ? ESCAPE '\\'",
                   (platform, len(platform) + 2, SHEET_PLUGIN, _like_prefix(platform + "/")))
    for (gpu, gpus, currency), platforms in moved.items():
        if len(platforms) == 1:
            db.execute("UPDATE price_history SET provider = ? WHERE provider = ? AND gpu = ? AND gpus = ? AND currency = ?",
                       (next(iter(platforms)), SHEET_PLUGIN, gpu, gpus, currency))
    left = db.execute("SELECT count(*) FROM offers WHERE provider = ?", (SHEET_PLUGIN,)).fetchone()[0]
    if left == 0:
        db.execute("UPDATE providers SET retired = 1, snapshot_id = NULL, offers_count = 0 WHERE name = ?", (SHEET_PLUGIN,))
    else:
        db.execute("UPDATE providers SET offers_count = ? WHERE name = ?", (left, SHEET_PLUGIN))


@migration
def m005_plan_columns(db: sqlite3.Connection) -> None:
    """Each provider's planning columns, typed (see `plan_columns`): what a quote's first pass
    reads of 1,000,000 offers in a few binary reads instead of decoding a JSON row per offer.
    Backfilled from the stored offers (the JSON stays the truth); the old per-row `plan` JSON
    is left as it was and no longer written or read."""
    db.execute(
        """CREATE TABLE plan_columns (
            provider TEXT NOT NULL REFERENCES providers(name),
            snapshot_id INTEGER NOT NULL REFERENCES snapshots(id),
            name TEXT NOT NULL,
            encoding TEXT NOT NULL,
            rows INTEGER NOT NULL,
            data BLOB,
            meta TEXT,
            PRIMARY KEY (provider, name)
        )"""
    )
    # Every provider with stored offers (whose snapshot is the one its offers name).
    current = db.execute("SELECT provider, max(snapshot_id) FROM offers GROUP BY provider").fetchall()
    for provider, snapshot_id in current:
        texts = [r[0] for r in db.execute("SELECT offer FROM offers WHERE provider = ? ORDER BY offer_id", (provider,))]
        offers = _OFFER_LIST.validate_json("[" + ",".join(texts) + "]") if texts else []
        _write_plan_columns(db, provider, snapshot_id, offers)


@migration
def m006_recheck_rows(db: sqlite3.Connection) -> None:
    """Every stored offer and price-history row through the door's checks once
    (optimizer/row_check.py): rows an older rentopt stored without them (an unknown GPU id, a
    price of 1e12 or 1e-12, a currency with no rate, a date in 2099, a provider named
    `../../etc`) are removed, each recorded in `refused_rows` with its reason, and the
    provider's planning columns rewritten from what is left. Issue 24: such rows survived the
    upgrade and were quoted (a 6.4-trillion-USD plan) or made every quote an internal error."""
    from rentopt.optimizer.row_check import RowCheck, known_gpu, provider_name_problem
    from rentopt.optimizer.sanity import UnknownCurrency

    db.execute("""CREATE TABLE refused_rows (
            provider TEXT NOT NULL,
            offer_id TEXT,
            reason TEXT NOT NULL,
            refused_at TEXT NOT NULL
        )""")
    now = datetime.now(timezone.utc)
    door = RowCheck(now=now)
    refused: list[tuple[str, str | None, str]] = []
    current = db.execute("SELECT provider, max(snapshot_id) FROM offers GROUP BY provider").fetchall()
    for provider, snapshot_id in current:
        texts = db.execute("SELECT offer_id, offer FROM offers WHERE provider = ? ORDER BY offer_id", (provider,)).fetchall()
        kept: list[Offer] = []
        for offer_id, text in texts:
            try:
                offer = _OFFER.validate_json(text)
            except ValidationError as exc:
                reason = f"unreadable ({exc.errors()[0]['msg']})"
            else:
                reason = door.reason(offer) or provider_name_problem(provider)
            if reason:
                refused.append((provider, offer_id, reason))
                db.execute("DELETE FROM offers WHERE provider = ? AND offer_id = ?", (provider, offer_id))
            else:
                kept.append(offer)
        if len(kept) < len(texts):
            _write_plan_columns(db, provider, snapshot_id, kept)
            db.execute("UPDATE providers SET offers_count = ? WHERE name = ?", (len(kept), provider))
    bands = door.bands
    for rowid, provider, gpu, currency, low, mid, when in db.execute(
            "SELECT rowid, provider, gpu, currency, min_gpu_hour, median_gpu_hour, fetched_at FROM price_history").fetchall():
        try:
            reason = None if known_gpu(gpu) and gpu is not None else f"gpu {gpu!r} is not a GPU id rentopt knows"
            for amount in (low, mid):
                reason = reason or bands.problem("gpu_hour", Decimal(amount), currency)
            reason = reason or door.date_problem(parse_timestamp(when))  # type: ignore[arg-type]
        except UnknownCurrency as exc:
            reason = str(exc)
        except (ArithmeticError, ValueError, TypeError) as exc:
            reason = f"unreadable ({type(exc).__name__})"
        if reason:
            refused.append((provider, None, f"price history of {when}: {reason}"))
            db.execute("DELETE FROM price_history WHERE rowid = ?", (rowid,))
    db.executemany("INSERT INTO refused_rows (provider, offer_id, reason, refused_at) VALUES (?, ?, ?, ?)",
                   [(p, o, r, timestamp(now)) for p, o, r in refused])


def _like_prefix(text: str) -> str:
    """A LIKE pattern matching strings that start with `text` literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@lru_cache(maxsize=1)
def _plan_row_adapter() -> TypeAdapter:
    return TypeAdapter(PlanRow)  # built only by the migrations that write the old planning rows


def _plan_json(offer: Offer) -> str:
    # pydantic's serializer writes the row several times faster than json.dumps
    return _plan_row_adapter().dump_json(plan_row(offer)).decode()


# --------------------------------------------------------------------------------------------
# Planning columns: one row of `plan_columns` per provider and column, the column of all the
# provider's current offers (in offer id order) as one typed value, encoded as
# optimizer/plan_columns.py defines.


def _write_plan_columns(db: sqlite3.Connection, provider: str, snapshot_id: int, offers: Sequence[Offer]) -> None:
    from rentopt.optimizer.offer_table import OfferTable

    table = OfferTable.from_offers(sorted(offers, key=lambda o: o.offer_id))
    db.execute("DELETE FROM plan_columns WHERE provider = ?", (provider,))
    db.executemany("INSERT INTO plan_columns (provider, snapshot_id, name, encoding, rows, data, meta)"
                   " VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(provider, snapshot_id, name, e, table.n, d, m) for name, e, d, m in encode_table(table)])


def applied_migrations(db: sqlite3.Connection) -> list[str]:
    exists = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if not exists:
        return []
    return [r[0] for r in db.execute(f"SELECT name FROM {MIGRATIONS_TABLE} ORDER BY rowid")]


def migrate(db: sqlite3.Connection, path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> list[str]:
    """Apply pending migrations in order, each in one transaction with its record; returns their names.

    A failing migration is rolled back (schema, record and version together) and stays pending.
    """
    done = set(applied_migrations(db))
    applied = []
    for version, fn in enumerate(migrations, start=1):
        if fn.__name__ in done:
            continue
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            fn(db)
            db.execute(f"INSERT INTO {MIGRATIONS_TABLE} (name, applied_at) VALUES (?, ?)",
                       (fn.__name__, timestamp(datetime.now(timezone.utc))))
            db.execute(f"PRAGMA user_version = {version}")
            db.execute("COMMIT")
        except Exception as exc:
            _rollback(db)
            if isinstance(exc, sqlite3.Error) and (fault := _file_system_fault(exc, path, "upgrade")):
                raise fault from exc
            raise StoreError(
                f"upgrading the price store {path} failed in migration {fn.__name__} "
                f"({type(exc).__name__}: {exc}); nothing was changed. {way_out(path)}"
            ) from exc
        applied.append(fn.__name__)
    return applied


# --------------------------------------------------------------------------------------------
# Opening


def move_aside(path: Path) -> str:
    """The shell command that keeps a bad store file but gets it out of rentopt's way."""
    return f"mv {shlex.quote(str(path))} {shlex.quote(str(path) + '.bad')}"


def way_out(path: Path) -> str:
    return f"Move it aside: {move_aside(path)}, then run `rentopt refresh`."


def _check_file(path: Path, migrations: Sequence[Migration]) -> bool:
    """Look at the file's header before SQLite does. False: an empty file (nothing to lose).

    Raises StoreError for a file that is not SQLite, is shorter than its header says, or (when
    no write-ahead log is pending, so the header is current) is another program's database or
    a newer rentopt's store: those are refused without SQLite ever opening them.
    """
    if path.is_dir():
        raise FileSystemError(
            f"{path} is a directory, not a price store; move it aside ({move_aside(path)}), "
            "then run `rentopt refresh` to create the store"
        )
    try:
        size = path.stat().st_size
        if size == 0:
            return False
        with path.open("rb") as fp:
            header = fp.read(SQLITE_HEADER_BYTES)
    except OSError as exc:
        raise fs_error(exc, path, "read") from None
    if len(header) < SQLITE_HEADER_BYTES or not header.startswith(SQLITE_MAGIC):
        raise StoreError(f"{path} is not a rentopt price store (not an SQLite database, or cut short). {way_out(path)}")
    if _wal_pending(path):
        return True
    # Header layout (https://www.sqlite.org/fileformat.html#the_database_header): page size at
    # offset 16 (1 means 65536), change counter at 24, page count at 28 (valid only when
    # "version-valid-for" at 92 equals the change counter), user_version at 60, application_id at 68.
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] == header[92:96] and pages and size < pages * page_size:
        raise StoreError(
            f"{path} is damaged: it is {size} bytes but its header says {pages * page_size} "
            f"(the file was cut short). {way_out(path)}"
        )
    version = int.from_bytes(header[60:64], "big")
    app_id = int.from_bytes(header[68:72], "big")
    if app_id not in (0, APPLICATION_ID):
        raise _foreign(path)
    if app_id == APPLICATION_ID and version > len(migrations):
        raise _newer(path, version, migrations)
    return True


def _foreign(path: Path) -> StoreError:
    return StoreError(f"{path} is an SQLite database, but not a rentopt price store. {way_out(path)}")


def _newer(path: Path, version: int, migrations: Sequence[Migration]) -> StoreError:
    return StoreError(
        f"the price store {path} was written by a newer rentopt (schema version {version}; "
        f"this rentopt knows up to {len(migrations)}). Upgrade rentopt (pip install -U rentopt), "
        f"or move it aside: {move_aside(path)}, then run `rentopt refresh`."
    )


def _wal_pending(path: Path) -> bool:
    """A non-empty write-ahead log: pages not yet copied into the main file, which may
    legitimately be shorter than its header says until SQLite checkpoints (or recovers) it."""
    wal = path.with_name(path.name + "-wal")
    return wal.exists() and wal.stat().st_size > 0


def _file_system_fault(exc: sqlite3.Error, path: Path, doing: str) -> FileSystemError | None:
    """The FileSystemError for an SQLite failure caused by the disk or the mount, else None.

    These say what to fix and never to move the store aside: the file itself is fine.
    """
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc)
    if name == "SQLITE_FULL" or "disk is full" in text:
        return FileSystemError(
            f"disk full: cannot {doing} the price store {path} (no space left on its device). The write was "
            "rolled back, so the stored prices are unchanged; free some space, then run `rentopt refresh` again."
        )
    if name.startswith("SQLITE_READONLY") or "readonly database" in text or name == "SQLITE_PERM":
        return FileSystemError(
            f"cannot {doing} the price store {path}: it or its directory is read-only. `rentopt refresh` needs "
            "write access there (fix the permissions or the mount, or point RENTOPT_HOME at a writable "
            "directory); quote, offers, report and providers still read it."
        )
    if name == "SQLITE_CANTOPEN":
        return FileSystemError(
            f"cannot open the price store {path}: its directory is not readable and writable by this user, or is "
            "on a read-only file system; fix the permissions, or point RENTOPT_HOME at another directory"
        )
    if name.startswith("SQLITE_IOERR") and _nearly_full(path):
        return FileSystemError(
            f"disk full: cannot {doing} the price store {path} (its device has no space left for the "
            "store's journal). Nothing stored was changed; free some space, then run the command again."
        )
    if name.startswith("SQLITE_IOERR"):
        return FileSystemError(
            f"disk I/O error on the price store {path} ({text}): the device may be full, removed or failing; "
            "check it (df, dmesg), then run again. The last committed prices are kept."
        )
    return None


@contextmanager
def _sql_errors(path: Path, doing: str = "use") -> Iterator[None]:
    """SQLite failures as StoreError sentences that say how to recover."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        if fault := _file_system_fault(exc, path, doing):
            raise fault from exc
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreError(f"the price store {path} is busy (another rentopt is writing it); try again in a moment") from exc
        raise StoreError(f"cannot use the price store {path}: {exc}. {way_out(path)}") from exc
    except sqlite3.DatabaseError as exc:
        if fault := _file_system_fault(exc, path, doing):
            raise fault from exc
        raise StoreError(f"the price store {path} is damaged ({exc}). {way_out(path)}") from exc


def _nearly_full(path: Path) -> bool:
    """Whether the store's device has (almost) no space left: SQLite reports a journal it could
    not extend as a plain I/O error."""
    import shutil

    try:
        return shutil.disk_usage(path.parent).free < 1 << 20
    except OSError:
        return False


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back if a transaction is still open. SQLite itself rolls back on a full disk (and
    some I/O errors); a ROLLBACK then would fail with "cannot rollback" and hide the real error."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _identify(db: sqlite3.Connection, path: Path, migrations: Sequence[Migration]) -> str:
    """'rentopt' (ours, possibly with pending migrations) or 'blank'; raises for anything else."""
    app_id = db.execute("PRAGMA application_id").fetchone()[0]
    version = db.execute("PRAGMA user_version").fetchone()[0]
    objects = db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
    if app_id == 0 and version == 0 and objects == 0:
        return "blank"
    if app_id != APPLICATION_ID:
        raise _foreign(path)
    known = {m.__name__ for m in migrations}
    unknown = [n for n in applied_migrations(db) if n not in known]
    if version > len(migrations) or unknown:
        raise _newer(path, version, migrations)
    return "rentopt"


def _connect(uri: str, *, uri_mode: bool) -> sqlite3.Connection:
    # isolation_level=None: transactions are explicit (BEGIN ... COMMIT) so each migration and
    # each snapshot is exactly one transaction.
    db = sqlite3.connect(uri, uri=uri_mode, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
    db.execute("PRAGMA foreign_keys = ON")
    return db


def stored_fx_history() -> EcbHistory | None:
    """The ECB rates `rentopt refresh` last stored, or None (no store, none fetched, unreadable)."""
    from rentopt.optimizer.currency import EcbHistory

    try:
        store = open_readonly()
        if store is None:
            return None
        with store:
            fetched = store.fx_rates()
    except StoreError as exc:  # the quote still works from the shipped history
        log.warning("exchange rates from the price store not used: %s", exc)
        return None
    if fetched is None or not fetched.rows:
        return None
    return EcbHistory.from_rows(fetched.rows, f"ECB euro reference rates, crossed via EUR, fetched by `rentopt "
                                              f"refresh` on {fetched.fetched_at:%Y-%m-%d} ({fetched.source})")


def open_readonly(path: Path | None = None, migrations: Sequence[Migration] = MIGRATIONS) -> Store | None:
    """Open the store for reading; None when there is none yet (or it is empty). Never writes it.

    A store on a read-only file system (or in a directory this user cannot write) is opened
    immutable: a store left in WAL mode needs to create its -shm file even to be read, which a
    read-only mount refuses (https://www.sqlite.org/wal.html#readonly), so a plain read-only
    open fails. Immutable is safe only when no write-ahead log holds unmerged pages, which a
    read-only directory cannot gain anyway; with one pending, the error says what to do.
    """
    path = path or store_path()
    check_home(path.parent)
    if not path.exists():
        return None
    if not _check_file(path, migrations):
        return None
    with _sql_errors(path, "read"):
        try:
            db = _open_readonly_connection(path)
        except sqlite3.OperationalError as exc:
            if not _directory_read_only(path) or getattr(exc, "sqlite_errorname", "") not in ("SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_READONLY_RECOVERY", "SQLITE_READONLY_CANTINIT"):
                raise
            if _wal_pending(path):
                raise FileSystemError(
                    f"the price store {path} is on a read-only file system with changes still in its write-ahead log "
                    f"({path.name}-wal), which cannot be read without write access; mount it writable once (any "
                    "rentopt command merges the log), or copy the folder somewhere writable and point RENTOPT_HOME there"
                ) from exc
            db = _connect(path.resolve().as_uri() + "?mode=ro&immutable=1", uri_mode=True)
        try:
            kind = _identify(db, path, migrations)
            if kind == "blank":
                db.close()
                return None
            pending = [m.__name__ for m in migrations if m.__name__ not in set(applied_migrations(db))]
            if pending:
                raise StoreError(
                    f"the price store {path} was written by an older rentopt; run `rentopt refresh` to upgrade it"
                )
        except BaseException:
            db.close()
            raise
    return Store(db, path, readonly=True)


def _open_readonly_connection(path: Path) -> sqlite3.Connection:
    db = _connect(path.resolve().as_uri() + "?mode=ro", uri_mode=True)
    try:
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opening is lazy: this reads
    except BaseException:
        db.close()
        raise
    return db


def _directory_read_only(path: Path) -> bool:
    """Whether SQLite could not create files next to the store (a read-only mount, or no write
    permission on the directory): the case for opening it immutable."""
    return not os.access(path.parent, os.W_OK)


def open_writable(path: Path | None = None, migrations: Sequence[Migration] = MIGRATIONS) -> Store:
    """Open (creating and migrating if needed) the store for `rentopt refresh`."""
    path = path or store_path()
    ensure_home(path.parent)
    if path.exists() or path.is_symlink():
        _check_file(path, migrations)
    with _sql_errors(path, "open"):
        db = _connect(str(path), uri_mode=False)
        try:
            _identify(db, path, migrations)
            db.execute("PRAGMA journal_mode = WAL")  # readers (quote) never wait for a refresh
            # In WAL mode NORMAL cannot corrupt the file; a power cut may lose the last snapshot,
            # which the next refresh rewrites (https://www.sqlite.org/pragma.html#pragma_synchronous).
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            migrate(db, path, migrations)
        except BaseException:
            db.close()
            raise
    return Store(db, path, readonly=False)


# --------------------------------------------------------------------------------------------
# The store


class Store:
    """An open price store. Use `open_readonly` / `open_writable`, and close it (or use `with`)."""

    def __init__(self, db: sqlite3.Connection, path: Path, *, readonly: bool):
        self.db = db
        self.path = path
        self.readonly = readonly
        self.skipped: list[str] = []  # why each stored offer a reader left out did not pass

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    # -- reading ----------------------------------------------------------------------------

    def providers(self) -> list[ProviderState]:
        """Every provider the store holds or has tried (retired ones left out), by name."""
        # how a snapshot's date is known rides in its summary (no schema change): a store written
        # before it was recorded holds dates its plugins read from their sources
        sql = """SELECT p.name, p.offers_count, s.fetched_at, s.source, p.last_attempt_at,
                        p.last_success_at, p.last_error, p.last_error_at, p.plugin,
                        json_extract(s.summary, '$.dated_by')
                 FROM providers p LEFT JOIN snapshots s ON s.id = p.snapshot_id
                 WHERE p.retired = 0 ORDER BY p.name"""
        with _sql_errors(self.path):
            rows = self.db.execute(sql).fetchall()
        return [
            ProviderState(name, count, parse_timestamp(fetched), source, parse_timestamp(attempt),
                          parse_timestamp(success), error, parse_timestamp(error_at), plugin,
                          dated_by if dated_by in ("published", "file-time", "unknown") else "published")
            for name, count, fetched, source, attempt, success, error, error_at, plugin, dated_by in rows
        ]

    def plugins(self) -> list[PluginState]:
        with _sql_errors(self.path):
            rows = self.db.execute("SELECT name, last_attempt_at, last_success_at, last_error, last_error_at"
                                   " FROM plugins ORDER BY name").fetchall()
        return [PluginState(n, parse_timestamp(a), parse_timestamp(s), e, parse_timestamp(t)) for n, a, s, e, t in rows]

    def history_snapshots(self, provider: str) -> list[HistorySnapshot]:
        """Every stored snapshot of `provider` with its price history, oldest first (for export)."""
        with _sql_errors(self.path):
            snaps = self.db.execute(
                "SELECT id, plugin, fetched_at, source, offers_count FROM snapshots WHERE provider = ? ORDER BY fetched_at, id",
                (provider,)).fetchall()
            rows: dict[int, list[tuple]] = defaultdict(list)
            for sid, *row in self.db.execute(
                    "SELECT h.snapshot_id, h.gpu, h.gpus, h.spot, h.currency, h.offers, h.min_gpu_hour, h.median_gpu_hour"
                    " FROM price_history h WHERE h.provider = ? ORDER BY h.snapshot_id, h.gpu, h.gpus, h.spot, h.currency",
                    (provider,)):
                rows[sid].append(tuple(row))
        return [HistorySnapshot(provider, plugin or provider, parse_timestamp(t), source or "", n,  # type: ignore[arg-type]
                                tuple(rows.get(sid, ())))
                for sid, plugin, t, source, n in snaps]

    def has_data(self) -> bool:
        return any(p.has_data for p in self.providers())

    def load_offers(self, query: OfferQuery | None = None) -> list[Offer]:
        """Current offers matching `query`, ordered by provider and offer id."""
        query = query or OfferQuery()
        where, args = query_where(query)
        with _sql_errors(self.path):
            rows = self.db.execute(f"SELECT offer FROM offers{where} ORDER BY provider, offer_id", args).fetchall()
        if not rows:
            return []
        # One validation call over the whole batch is the fastest safe path measured
        # (benchmarks/bench_store.py: faster than model_validate_json per row, and than
        # json.loads + model_construct); rows are re-validated, so a hand-edited store cannot
        # smuggle in a free price.
        offers = self._readable([r[0] for r in rows])
        if query.max_hour_price is None and query.region is None:
            return offers  # every other condition is exact in SQL
        return [o for o in offers if query.matches(o)]

    def load_plan_part(self, providers: Sequence[str], extra: Any = None) -> tuple[dict[str, int], Any]:
        """`providers`' current offers as one offer_table.Part (providers by name, rows in offer
        id order within each; then the rows of the Part `extra`, if given), read in one
        transaction (so from one state of the store), and the snapshot id each provider's
        columns are of. A provider with no current snapshot is left out. Read column by column,
        each merged before the next is read: a million stored offers are never held twice
        (their blobs, then the merged columns)."""
        from rentopt.optimizer.offer_table import merge_parts

        names = sorted(set(providers))
        nothing = merge_parts([] if extra is None else [extra])
        if not names:
            return {}, nothing
        marks = ",".join("?" * len(names))
        try:
            with _sql_errors(self.path), self.reading():
                current = dict(self.db.execute(f"SELECT name, snapshot_id FROM providers WHERE name IN ({marks})", names))
                index = self.db.execute(f"SELECT provider, snapshot_id, name, rows FROM plan_columns"
                                        f" WHERE provider IN ({marks})", names).fetchall()
                snapshots: dict[str, int] = {}
                sizes: dict[str, int] = {}
                for provider, snapshot_id, name, rows in index:
                    if snapshots.setdefault(provider, snapshot_id) != snapshot_id or \
                            current.get(provider) not in (None, snapshot_id):
                        raise ValueError(f"the planning columns of {provider} are not all of its current snapshot")
                    if sizes.setdefault(provider, rows) != rows:
                        raise ValueError(f"the planning columns of {provider} differ in length")
                present = sorted(snapshots)
                if not present:
                    return {}, nothing
                part = _merged_columns(self.db, present, [sizes[p] for p in present], sorted({r[2] for r in index}),
                                       extra)
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(f"the price store {self.path} holds planning columns this rentopt cannot read ({exc}). "
                             f"{way_out(self.path)}") from None
        return snapshots, self._usable_part(part, part.n - (extra.n if extra is not None else 0))

    def _usable_part(self, part: Any, stored: int) -> Any:
        """`part` without the stored rows (its first `stored`) a reader must leave out (see
        `_readable`): their GPU id or currency, checked once per distinct value."""
        import numpy as np

        from rentopt.optimizer.offer_table import Codes, Const, code_values

        bad = np.zeros(part.n, dtype=bool)
        reasons: list[str] = []
        for name in ("gpu", "currency"):
            column = part.columns.get(name)
            if column is None:
                continue
            if isinstance(column, Const):
                codes, values = np.zeros(part.n, dtype=np.int32), [column.value]
            elif isinstance(column, Codes) or hasattr(column, "codes"):
                codes, values = column.codes, list(column.values)
            else:
                codes, values = code_values(column)
            if name == "gpu":
                why = {i: f"GPU id {v!r} is not in this rentopt's catalog" for i, v in enumerate(values) if not known_gpu(v)}
            else:
                unusable = self._unusable_currencies(v for v in values if v is not None)
                why = {i: unusable[v] for i, v in enumerate(values) if v in unusable}
            if why:
                hit = np.isin(codes[:stored], np.array(sorted(why), dtype=codes.dtype))
                bad[:stored] |= hit
                reasons += [why[int(c)] for c in codes[:stored][hit]]
        if not bad.any():
            return part
        for reason in reasons:
            self._skip(reason)
        table = part.table().take(~bad)
        kept = table.part()
        for name in ("gpu", "currency"):  # the left-out values go from the categories too (the planner reads each)
            codes, values = table.category(name)
            used = np.unique(codes)
            remap = np.zeros(len(values), dtype=np.int32)
            remap[used] = np.arange(len(used), dtype=np.int32)
            kept.columns[name] = Codes(remap[codes], [values[int(i)] for i in used])
        return kept

    def load_current_offers(self, keys: Iterable[tuple[str, str]], snapshots: dict[str, int]) -> list[Offer]:
        """`load_offers_by_key`, but only while each provider's current snapshot is still the one
        in `snapshots`: StoreError when a refresh replaced one since (never a mix of two)."""
        with _sql_errors(self.path), self.reading():
            names = sorted(snapshots)
            marks = ",".join("?" * len(names))
            now = dict(self.db.execute(f"SELECT provider, snapshot_id FROM plan_columns WHERE name = 'offer_id'"
                                       f" AND provider IN ({marks})", names))
            if any(now.get(p) != sid for p, sid in snapshots.items()):
                raise StoreError("prices changed while quoting (a refresh just finished); run the quote again")
            return self.load_offers_by_key(keys)

    def load_offers_by_key(self, keys: Iterable[tuple[str, str]]) -> list[Offer]:
        """The full current offers for (provider, offer_id) keys; missing keys are skipped."""
        keys = list(keys)
        texts: list[str] = []
        with _sql_errors(self.path):
            for i in range(0, len(keys), 400):  # SQLite's default limit on bound parameters is 32766
                chunk = keys[i:i + 400]
                marks = " OR ".join(["(provider = ? AND offer_id = ?)"] * len(chunk))
                args = [v for k in chunk for v in k]
                texts += [r[0] for r in self.db.execute(f"SELECT offer FROM offers WHERE {marks}", args)]
        if not texts:
            return []
        return self._readable(texts)

    # -- rows this rentopt cannot use --------------------------------------------------------

    def _readable(self, texts: list[str]) -> list[Offer]:
        """The offers of these stored JSON texts, leaving out (with one warning) each one this
        rentopt cannot use: unreadable, or no longer passing what the door checked when it was
        stored and can change since (a GPU id the catalog lost, a currency whose rate is gone)."""
        try:
            offers = _OFFER_LIST.validate_json("[" + ",".join(texts) + "]")
        except ValidationError:
            offers = []
            for text in texts:
                try:
                    offers.append(_OFFER.validate_json(text))
                except ValidationError as exc:
                    self._skip(f"unreadable ({exc.errors()[0]['msg']})")
        bad_currencies = self._unusable_currencies({o.currency for o in offers})
        usable = []
        for o in offers:
            if not known_gpu(o.gpu):
                self._skip(f"{o.provider}/{o.offer_id}: GPU id {o.gpu!r} is not in this rentopt's catalog")
            elif o.currency in bad_currencies:
                self._skip(f"{o.provider}/{o.offer_id}: {bad_currencies[o.currency]}")
            else:
                usable.append(o)
        return usable

    def _unusable_currencies(self, currencies: Iterable[str]) -> dict[str, str]:
        from rentopt.optimizer.sanity import PriceBands, UnknownCurrency

        bad = {}
        for code in currencies:
            try:
                PriceBands().band("gpu_hour", code)  # type: ignore[arg-type]
            except UnknownCurrency as exc:
                bad[code] = str(exc)
        return bad

    def _skip(self, reason: str) -> None:
        if not self.skipped:
            log.warning("price store %s: leaving out offers this rentopt cannot use (first: %s)", self.path, reason)
        self.skipped.append(reason)

    def warnings(self) -> list[str]:
        """One line when readers left out stored offers (see `_readable`), else none."""
        if not self.skipped:
            return []
        return [f"the price store holds {len(self.skipped)} offer(s) this rentopt cannot use, left out "
                f"(first: {self.skipped[0]}); `rentopt refresh` replaces them"]

    def price_history(self, gpu: str, provider: str | None = None, since: datetime | None = None,
                      *, gpus: int | None = None, spot: bool | None = None) -> list[HistoryPoint]:
        """Min/median price per GPU-hour of `gpu` per snapshot, oldest first: one indexed query."""
        sql = ("SELECT h.provider, h.fetched_at, h.gpu, h.gpus, h.spot, h.currency, h.offers, h.min_gpu_hour,"
               " h.median_gpu_hour, s.plugin FROM price_history h JOIN snapshots s ON s.id = h.snapshot_id WHERE h.gpu = ?")
        args: list[object] = [gpu]
        if provider is not None:
            sql += " AND h.provider = ?"
            args.append(provider)
        if since is not None:
            sql += " AND h.fetched_at >= ?"
            args.append(timestamp(since))
        if gpus is not None:
            sql += " AND h.gpus = ?"
            args.append(gpus)
        if spot is not None:
            sql += " AND h.spot = ?"
            args.append(int(spot))
        sql += " ORDER BY h.fetched_at, h.provider, h.gpus, h.spot"
        with _sql_errors(self.path):
            rows = self.db.execute(sql, args).fetchall()
        return [
            HistoryPoint(p, parse_timestamp(t), g, n, bool(s), c, k, Decimal(lo), Decimal(med), plugin)  # type: ignore[arg-type]
            for p, t, g, n, s, c, k, lo, med, plugin in rows
        ]

    def price_history_columns(self, gpus: Sequence[str], since: datetime | None = None, *,
                              plugins: Mapping[str, str] | None = None) -> HistoryColumns:
        """The min price per GPU-hour of each of `gpus` per snapshot, as columns: one query for
        all the GPUs (in groups of `SQL_VARIABLES`), GPU by GPU, each as `price_history` orders
        it. `plugins`: only these providers' points, each from the snapshots of the plugin named
        (a snapshot without one is its provider's own). Each distinct timestamp is parsed once."""
        out = HistoryColumns()
        wanted = sorted(set(gpus))
        for start in range(0, len(wanted), SQL_VARIABLES):
            group = wanted[start:start + SQL_VARIABLES]
            sql = ("SELECT h.provider, h.fetched_at, h.gpu, h.gpus, h.spot, h.currency, h.min_gpu_hour, s.plugin"
                   " FROM price_history h JOIN snapshots s ON s.id = h.snapshot_id"
                   f" WHERE h.gpu IN ({', '.join('?' * len(group))})")
            args: list[object] = list(group)
            if since is not None:
                sql += " AND h.fetched_at >= ?"
                args.append(timestamp(since))
            sql += " ORDER BY h.gpu, h.fetched_at, h.provider, h.gpus, h.spot"
            with _sql_errors(self.path):
                rows = self.db.execute(sql, args).fetchall()
            if plugins is not None:
                rows = [r for r in rows if plugins.get(r[0]) == (r[7] or r[0])]
            if not rows:
                continue
            provider, when, gpu, count, spot, currency, low, plugin = (list(column) for column in zip(*rows))
            times = {t: parse_timestamp(t) for t in set(when)}
            out += HistoryColumns(provider, [times[t] for t in when], gpu, count, [bool(x) for x in spot], currency,
                                  [Decimal(x) for x in low], plugin)
        return out

    def offer_price_changes(self, provider: str, offer_id: str) -> list[tuple[datetime, str]]:
        """(fetched_at, prices JSON) each time the offer appeared or its prices changed."""
        with _sql_errors(self.path):
            rows = self.db.execute(
                "SELECT fetched_at, prices FROM offer_prices WHERE provider = ? AND offer_id = ? ORDER BY fetched_at",
                (provider, offer_id),
            ).fetchall()
        return [(parse_timestamp(t), prices) for t, prices in rows]  # type: ignore[misc]

    def snapshot_summaries(self, provider: str) -> list[dict]:
        with _sql_errors(self.path):
            rows = self.db.execute(
                "SELECT id, fetched_at, offers_count, summary, plugin FROM snapshots WHERE provider = ? ORDER BY fetched_at, id",
                (provider,)).fetchall()
        return [{"id": i, "fetched_at": parse_timestamp(t), "offers": n, "plugin": plugin or provider, **json.loads(s)}
                for i, t, n, s, plugin in rows]

    # -- writing ----------------------------------------------------------------------------

    def write_snapshot(self, provider: str, offers: Sequence[Offer], *, fetched_at: datetime,
                       source: str | None = None, summary: dict | None = None,
                       secrets: Sequence[str] = (), now: datetime | None = None,
                       plugin: str | None = None) -> SnapshotDiff:
        """Make `offers` the provider's current snapshot, in ONE transaction, and record history.

        `plugin` is the plugin that delivered them (default: the provider's own name).
        `secrets` are scrubbed from every stored text (belt and braces: plugins should never put
        a key in an offer). Raises StoreError (and changes nothing) if anything fails.
        """
        plugin = plugin or provider
        self._require_writable()
        for o in offers:
            if o.provider != provider:
                raise ValueError(f"offer {o.offer_id} belongs to {o.provider!r}, not {provider!r}")
        now_ts = timestamp(now or datetime.now(timezone.utc))
        fetched_ts = timestamp(fetched_at)
        with gc_paused():  # building 50k rows: the cyclic GC would rescan every live offer
            rows, history = _snapshot_rows(provider, offers, secrets)
        source = redact(source if source is not None else (offers[0].source if offers else ""), secrets)
        with _sql_errors(self.path, "write"), self._transaction():
            self.db.execute("INSERT OR IGNORE INTO providers (name) VALUES (?)", (provider,))
            self.db.execute("UPDATE providers SET retired = 0, plugin = ? WHERE name = ?", (plugin, provider))
            previous = dict(self.db.execute("SELECT offer_id, prices FROM offers WHERE provider = ?", (provider,)))
            new, changed = [], []
            for r in rows:
                before = previous.get(r[0])
                if before is None:
                    new.append(r[0])
                elif before != r[_PRICES]:
                    changed.append(r[0])
            current = {r[0] for r in rows}
            removed = sorted(i for i in previous if i not in current)
            record = {"new": len(new), "changed": len(changed), "removed": len(removed),
                      "dated_by": offers[0].dated_by if offers else "published", **(summary or {})}
            snapshot_id = self.db.execute(
                "INSERT INTO snapshots (provider, plugin, fetched_at, stored_at, source, offers_count, summary)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (provider, plugin, fetched_ts, now_ts, source, len(rows), redact(json.dumps(record, default=str), secrets)),
            ).lastrowid
            self.db.execute("DELETE FROM offers WHERE provider = ?", (provider,))
            self.db.executemany(
                "INSERT INTO offers (provider, offer_id, snapshot_id, gpu, gpus, gpu_memory_gb, spot, region,"
                " currency, hour_price_micros, prices, offer) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(provider, r[0], snapshot_id, *r[1:]) for r in rows],
            )
            with gc_paused():
                _write_plan_columns(self.db, provider, int(snapshot_id or 0), offers)
            by_id = {r[0]: r for r in rows}
            self.db.executemany(
                "INSERT INTO offer_prices (provider, offer_id, snapshot_id, fetched_at, previous_prices, prices)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(provider, i, snapshot_id, fetched_ts, previous[i], by_id[i][_PRICES]) for i in changed],
            )
            self.db.executemany(
                "INSERT INTO price_history (snapshot_id, provider, fetched_at, gpu, gpus, spot, currency, offers,"
                " min_gpu_hour, median_gpu_hour) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(snapshot_id, provider, fetched_ts, *h) for h in history],
            )
            self.db.execute(
                "UPDATE providers SET snapshot_id = ?, offers_count = ?, last_attempt_at = ?, last_success_at = ? WHERE name = ?",
                (snapshot_id, len(rows), now_ts, now_ts, provider),
            )
        return SnapshotDiff(provider, int(snapshot_id or 0), len(rows), new, changed, removed)

    def mark_failed(self, provider: str, error: str, *, secrets: Sequence[str] = (),
                    now: datetime | None = None) -> None:
        """Record a failed refresh: the provider's last good snapshot stays current, now stale."""
        self._require_writable()
        now_ts = timestamp(now or datetime.now(timezone.utc))
        with _sql_errors(self.path, "write"), self._transaction():
            self.db.execute("INSERT OR IGNORE INTO providers (name) VALUES (?)", (provider,))
            self.db.execute(
                "UPDATE providers SET last_attempt_at = ?, last_error = ?, last_error_at = ? WHERE name = ?",
                (now_ts, redact(error, secrets), now_ts, provider),
            )

    def mark_plugin(self, plugin: str, *, error: str | None = None, secrets: Sequence[str] = (),
                    now: datetime | None = None) -> None:
        """Record one run of a plugin as a whole: a success (error None) or why it failed."""
        self._require_writable()
        now_ts = timestamp(now or datetime.now(timezone.utc))
        with _sql_errors(self.path), self._transaction():
            self.db.execute("INSERT OR IGNORE INTO plugins (name) VALUES (?)", (plugin,))
            if error is None:
                self.db.execute("UPDATE plugins SET last_attempt_at = ?, last_success_at = ? WHERE name = ?",
                                (now_ts, now_ts, plugin))
            else:
                self.db.execute("UPDATE plugins SET last_attempt_at = ?, last_error = ?, last_error_at = ? WHERE name = ?",
                                (now_ts, redact(error, secrets), now_ts, plugin))

    def retire_provider(self, provider: str) -> int:
        """A provider its plugin no longer delivers (a deleted price sheet): its current offers go,
        its history stays. Returns the number of offers removed."""
        self._require_writable()
        with _sql_errors(self.path), self._transaction():
            gone = self.db.execute("DELETE FROM offers WHERE provider = ?", (provider,)).rowcount
            self.db.execute("DELETE FROM plan_columns WHERE provider = ?", (provider,))
            self.db.execute("UPDATE providers SET retired = 1, snapshot_id = NULL, offers_count = 0 WHERE name = ?",
                            (provider,))
        return gone

    def import_history(self, snapshots: Sequence[HistorySnapshot], *, now: datetime | None = None) -> int:
        """Store past snapshots' price history (no offers) in one transaction; a snapshot of the
        same provider and time already stored is left alone, so importing twice adds nothing.
        Returns how many snapshots were added."""
        self._require_writable()
        now_ts = timestamp(now or datetime.now(timezone.utc))
        added = 0
        with _sql_errors(self.path), self._transaction():
            for snap in snapshots:
                fetched_ts = timestamp(snap.fetched_at)
                if self.db.execute("SELECT 1 FROM snapshots WHERE provider = ? AND fetched_at = ?",
                                   (snap.provider, fetched_ts)).fetchone():
                    continue
                self.db.execute("INSERT OR IGNORE INTO providers (name, plugin) VALUES (?, ?)", (snap.provider, snap.plugin))
                sid = self.db.execute(
                    "INSERT INTO snapshots (provider, plugin, fetched_at, stored_at, source, offers_count, summary)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (snap.provider, snap.plugin, fetched_ts, now_ts, snap.source, snap.offers,
                     json.dumps({"history_only": True})),
                ).lastrowid
                self.db.executemany(
                    "INSERT INTO price_history (snapshot_id, provider, fetched_at, gpu, gpus, spot, currency, offers,"
                    " min_gpu_hour, median_gpu_hour) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(sid, snap.provider, fetched_ts, *row) for row in snap.rows],
                )
                added += 1
        return added

    # -- exchange rates ---------------------------------------------------------------------

    def fx_rates(self) -> FxFetch | None:
        """The ECB rates the last successful fetch stored, or None before the first."""
        with _sql_errors(self.path):
            fetch = self.db.execute("SELECT fetched_at, source FROM fx_fetch WHERE id = 1").fetchone()
            if fetch is None:
                return None
            rows = self.db.execute("SELECT day, currency, per_eur FROM fx_rates ORDER BY day, currency").fetchall()
        return FxFetch(parse_timestamp(fetch[0]), fetch[1],  # type: ignore[arg-type]
                       [(date.fromisoformat(d), c, Decimal(v)) for d, c, v in rows])

    def write_fx_rates(self, rows: Sequence[tuple[date, str, Decimal]], *, fetched_at: datetime, source: str) -> int:
        """Replace the stored ECB rates with `rows`, in one transaction; returns how many."""
        self._require_writable()
        with _sql_errors(self.path), self._transaction():
            self.db.execute("DELETE FROM fx_rates")
            self.db.executemany("INSERT INTO fx_rates (day, currency, per_eur) VALUES (?, ?, ?)",
                                [(d.isoformat(), c, str(v)) for d, c, v in rows])
            self.db.execute("INSERT OR REPLACE INTO fx_fetch (id, fetched_at, source) VALUES (1, ?, ?)",
                            (timestamp(fetched_at), source))
        return len(rows)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """One read transaction: every SELECT in it sees the same committed state (WAL snapshot),
        so what is read of the providers and of their offers belongs to the same refreshes."""
        nested = self.db.in_transaction
        if not nested:
            self.db.execute("BEGIN")
        try:
            yield
        finally:
            if not nested and self.db.in_transaction:
                self.db.execute("COMMIT")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
            self.db.execute("COMMIT")
        except BaseException:
            _rollback(self.db)
            raise

    def _require_writable(self) -> None:
        if self.readonly:
            raise StoreError(f"the price store {self.path} was opened read-only; only `rentopt refresh` writes it")


def _merged_columns(db: sqlite3.Connection, providers: list[str], sizes: list[int], names: list[str],
                    extra: Any = None) -> Any:
    """The Part of `providers`' planning columns merged, rows one provider after the other,
    then `extra`'s (a Part; see `Store.load_plan_part`)."""
    marks = ",".join("?" * len(providers))

    def read(*wanted: str) -> dict[str, list]:
        """Each wanted column's value per provider (None: the provider has none), decoded."""
        found: dict[str, dict[str, object]] = defaultdict(dict)
        for provider, name, encoding, rows, data, meta in db.execute(
                f"SELECT provider, name, encoding, rows, data, meta FROM plan_columns"
                f" WHERE name IN ({','.join('?' * len(wanted))}) AND provider IN ({marks})", [*wanted, *providers]):
            found[name][provider] = decode_column(name, encoding, rows, data, meta)
        return {name: [found[name].get(p) for p in providers] for name in wanted}

    return merge_encoded(read, providers, sizes, names, extra)


_PRICES = 8  # index of the price fingerprint in an offer row
# SQLite INTEGER is a signed 64-bit value (https://www.sqlite.org/datatype3.html).
_SQLITE_INT_MAX = 2**63 - 1


def _snapshot_rows(provider: str, offers: Sequence[Offer], secrets: Sequence[str]) -> tuple[list[tuple], list[tuple]]:
    """The offer rows and history rows of a snapshot; StoreError (nothing written) naming the
    offer when one cannot be held exactly (a price too large or too precise for the columns)."""
    prices = []
    for o in offers:
        try:
            price = hour_price(o)
            if price is not None and abs(to_micros(price)) > _SQLITE_INT_MAX:
                raise OverflowError("its hourly price does not fit the store's integer column")
        except (ArithmeticError, ValueError) as exc:
            raise StoreError(f"{provider} offer {o.offer_id} has a price the store cannot hold ({exc})") from None
        prices.append(price)
    rows = [_offer_row(o, p, secrets) for o, p in zip(offers, prices, strict=True)]
    try:
        history = _history_rows(offers, prices)
    except ArithmeticError as exc:
        raise StoreError(f"{provider}: a price is too large for the price history ({type(exc).__name__})") from None
    return rows, history


def _offer_row(offer: Offer, price: Decimal | None, secrets: Sequence[str]) -> tuple:
    """offer_id, then the filter columns, the price fingerprint and the offer JSON."""
    text = offer.model_dump_json()
    return (
        offer.offer_id, offer.gpu, offer.gpus, offer.gpu_memory_gb, int(offer.spot), offer.region,
        offer.currency, to_micros(price) if price is not None else None,
        redact(price_fingerprint(offer, text), secrets), redact(text, secrets),
    )


def history_rows(offers: Sequence[Offer]) -> list[tuple]:
    """The price-history rows a snapshot of `offers` gets (see `_history_rows`)."""
    return _history_rows(offers, [hour_price(o) for o in offers])


def _history_rows(offers: Sequence[Offer], prices: Sequence[Decimal | None]) -> list[tuple]:
    """(gpu, gpus, spot, currency, count, min, median) per group of priced offers of a known GPU.

    `prices` are the offers' `hour_price`s. Offers whose GPU is unknown are left out: one row
    mixing unrelated cards would mean nothing.
    """
    groups: dict[tuple[str, int, int, str], list[Decimal]] = defaultdict(list)
    for o, price in zip(offers, prices, strict=True):
        if o.gpu is None or price is None:
            continue
        groups[(o.gpu, o.gpus, int(o.spot), o.currency)].append(price / o.gpus)
    rows = []
    for key, per_gpu in sorted(groups.items()):
        low = min(per_gpu).quantize(HISTORY_QUANTUM)
        mid = statistics.median(per_gpu).quantize(HISTORY_QUANTUM)
        rows.append((*key, len(per_gpu), str(low), str(mid)))
    return rows
