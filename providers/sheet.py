"""Price sheets: platforms without a public price API, written down by hand.

A sheet is one TOML, YAML or JSON file describing one platform: its currency, where the prices
were read and when, its billing rules, storage and traffic prices, and its offers. rentopt ships
sheets in `providers/sheets/` (package data); users add their own in `$RENTOPT_HOME/sheets/`, and a
user sheet whose `platform` matches a bundled one replaces it. See `providers/sheets/jygpu.toml`
for a commented example of every field.

Each platform is its own provider: a sheet's offers have `provider = "<platform>"` (autodl,
jygpu, ...) and `offer_id = "<id>"`, with the platform also in `extra["platform"]`; the plugin
that refreshes them all is "sheet" (`rentopt refresh --providers sheet`). An offer's
`fetched_at` is the sheet's `read_on` date: the day the price was read, never the refresh time.
`rentopt quote` also reads the user's own sheets directly (`read_user_sheets`), no refresh needed.

A broken sheet (bad syntax, a missing or invalid field, a negative, zero, NaN or absurd price,
a currency with no exchange rate) is reported with its file, line and field and contributes no
offers; the other sheets still load. Files are read with size, nesting and YAML-alias limits
(providers/sheet_reader.py), so one hostile file fails alone and fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.models import Interconnect, Offer, PriceOption, PriceUnit
from rentopt.optimizer.paths import rentopt_home
from rentopt.optimizer.sanity import PriceBands, UnknownCurrency
from rentopt.providers.base import BillingRules, FetchContext, Provider
from rentopt.providers.sheet_reader import SheetReadError, field_line, parse_text, read_text

BUNDLED_DIR = Path(__file__).resolve().parent / "sheets"
SHEET_SUFFIXES = (".toml", ".yaml", ".yml", ".json")


class SheetError(InputError):
    """A price sheet that cannot be used; the message names the file and the field."""


# --------------------------------------------------------------------------------------------
# The sheet format


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SheetPrice(_Strict):
    unit: Literal["hour", "day", "week", "month", "term"]
    amount: Decimal = Field(gt=0)
    per: Literal["node", "gpu"] = "node"  # "gpu": multiplied by the offer's GPU count
    term_hours: int | None = Field(None, gt=0)
    interruptible: bool = False
    label: str = ""
    note: str = ""

    @model_validator(mode="after")
    def _term(self) -> SheetPrice:
        if self.unit == "term" and not self.term_hours:
            raise ValueError("a 'term' price needs term_hours")
        return self


class SheetOffer(_Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    gpu: str = Field(min_length=1)
    gpus: int | list[int] = 1  # a list expands into one offer per count ("<id>-<n>x")
    memory_gb: float | None = Field(None, gt=0)  # per GPU; needed when rentopt does not know the GPU
    interconnect: Interconnect = "unknown"
    interconnect_gbps: float | None = Field(None, gt=0)
    region: str | None = None
    max_duration_hours: float | None = Field(None, gt=0)
    prices: list[SheetPrice] = Field(min_length=1)
    source: str | None = None  # where this offer's prices were read, when not the sheet's source
    read_on: date | None = None
    note: str = ""

    @field_validator("gpus")
    @classmethod
    def _counts(cls, v: int | list[int]) -> int | list[int]:
        counts = v if isinstance(v, list) else [v]
        if not counts or any(c <= 0 for c in counts):
            raise ValueError("GPU counts must be whole numbers above 0")
        if len(set(counts)) != len(counts):
            raise ValueError("GPU counts must not repeat")
        return v


class SheetBilling(_Strict):
    granularity_s: int = Field(1, gt=0)  # metering step: 1 = per second, 3600 = per hour
    minimum_s: int = Field(0, ge=0)
    stopped_pays: Literal["storage", "nothing", "everything"] = "storage"
    price_locked_until_destroy: bool = False
    month_hours: int = Field(720, gt=0)  # hours in this platform's month (monthly unit, GB-month)
    source: str = ""


class SheetStorage(_Strict):
    """Disk prices in the sheet's currency. Give per GB-month or per GB-day, not both."""

    gb_month: Decimal | None = Field(None, ge=0)
    gb_day: Decimal | None = Field(None, ge=0)
    stopped_gb_month: Decimal | None = Field(None, ge=0)  # None: same as running
    stopped_gb_day: Decimal | None = Field(None, ge=0)
    free_gb: float | None = Field(None, ge=0)  # disk included in the instance price
    stopped_retention_days: int | None = Field(None, gt=0)  # a stopped instance is released after
    source: str = ""

    @model_validator(mode="after")
    def _one_unit(self) -> SheetStorage:
        if self.gb_month is not None and self.gb_day is not None:
            raise ValueError("give either gb_month or gb_day, not both")
        if self.stopped_gb_month is not None and self.stopped_gb_day is not None:
            raise ValueError("give either stopped_gb_month or stopped_gb_day, not both")
        return self


class SheetNetwork(_Strict):
    egress_gb: Decimal | None = Field(None, ge=0)  # 0 here means free (the sheet says so)
    ingress_gb: Decimal | None = Field(None, ge=0)
    source: str = ""


class PriceSheet(_Strict):
    platform: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]*$")
    name: str = ""
    currency: str = Field(pattern=r"^[A-Z]{3}$")
    source: str = Field(min_length=1)
    read_on: date
    # True while the numbers are not real prices: the sheet loads but yields no offers.
    placeholder_prices: bool = False
    notes: list[str] = []
    billing: SheetBilling = SheetBilling()
    storage: SheetStorage = SheetStorage()
    network: SheetNetwork = SheetNetwork()
    offers: list[SheetOffer] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_ids(self) -> PriceSheet:
        ids = [o.id for o in self.offers]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"offer id {dupes[0]!r} appears more than once")
        return self


# --------------------------------------------------------------------------------------------
# Reading sheets


def _read(path: Path) -> tuple[dict[str, Any], str]:
    """(mapping, text) of a sheet file, read within the size, nesting and alias limits."""
    try:
        text = read_text(path)
    except SheetReadError as exc:
        raise SheetError(f"price sheet {path}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SheetError(f"price sheet {path}: cannot be read ({exc})") from None
    if not text.strip():
        raise SheetError(f"price sheet {path}: the file is empty; write a sheet (README, \"Price sheets\", lists the fields) "
                         "or remove the file")
    try:
        data = parse_text(text, path.suffix)
    except SheetReadError as exc:
        at = f" line {exc.line}" if exc.line else ""
        raise SheetError(f"price sheet {path}{at}: {exc}") from None
    if not isinstance(data, dict):
        raise SheetError(f"price sheet {path}: the top level must be a table of fields, not {type(data).__name__}")
    return data, text


def _field_path(loc: tuple[Any, ...]) -> str:
    """('offers', 2, 'prices', 0, 'amount') -> 'offers[2].prices[0].amount'.

    >>> _field_path(("offers", 2, "prices", 0, "amount"))
    'offers[2].prices[0].amount'
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("int", "list[int]") and not str(part).startswith("function-"):
            out += f".{part}" if out else str(part)
    return out or "(sheet)"


def parse_sheet(data: dict[str, Any], path: Path, text: str | None = None) -> PriceSheet:
    """Validate a sheet's mapping, then its currency and every price against the sane bands
    (optimizer/sanity.py). A SheetError names the file, the line (when `text` is given) and the field."""
    def error(loc: tuple[Any, ...], message: str) -> SheetError:
        line = field_line(text, path.suffix, loc) if text is not None and loc else None
        at = f" line {line}" if line else ""
        return SheetError(f"price sheet {path}{at}: field {_field_path(loc)}: {message}")

    try:
        sheet = PriceSheet.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        more = f" (and {exc.error_count() - 1} more problem(s))" if exc.error_count() > 1 else ""
        raise error(tuple(first.get("loc", ())), message + more) from None
    if (problem := sheet_price_problem(sheet)) is not None:
        raise error(*problem)
    return sheet


def sheet_price_problem(sheet: PriceSheet) -> tuple[tuple[Any, ...], str] | None:
    """(field path, why) of the first price in `sheet` that cannot be real, or None.

    Every price per GPU-hour (for every GPU count a list expands to), the storage and the
    transfer prices, against the same bands the provider plugins use; a currency with no
    exchange rate is refused here too, since no quote could use the sheet's prices.
    """
    bands = PriceBands()
    try:
        bands.band("gpu_hour", sheet.currency)
    except UnknownCurrency as exc:
        return ("currency",), str(exc)
    month_hours = sheet.billing.month_hours
    for i, item in enumerate(sheet.offers):
        counts = item.gpus if isinstance(item.gpus, list) else [item.gpus]
        for j, price in enumerate(item.prices):
            for n in counts:
                option = _options([price], n)[0]
                if problem := bands.gpu_hour_problem(option, n, month_hours, sheet.currency):
                    return ("offers", i, "prices", j, "amount"), problem
    storage, network = sheet.storage, sheet.network
    for name in ("gb_month", "gb_day", "stopped_gb_month", "stopped_gb_day"):
        value = getattr(storage, name)
        if value is not None:
            monthly = value * Decimal(month_hours) / Decimal(24) if name.endswith("gb_day") else value
            if problem := bands.problem("storage_gb_month", monthly, sheet.currency):
                return ("storage", name), problem
    for name in ("egress_gb", "ingress_gb"):
        value = getattr(network, name)
        if value is not None and (problem := bands.problem("transfer_gb", value, sheet.currency)):
            return ("network", name), problem
    return None


def load_sheet(path: Path) -> PriceSheet:
    """Read and validate one sheet. Raises SheetError naming the file, the line and the field."""
    data, text = _read(path)
    return parse_sheet(data, path, text)


def user_sheet_dir() -> Path:
    return rentopt_home() / "sheets"


def sheet_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in SHEET_SUFFIXES)


@dataclass
class LoadedSheet:
    path: Path
    origin: Literal["bundled", "user"]
    sheet: PriceSheet


@dataclass
class SheetProblem:
    path: Path
    message: str


def collect_sheets(bundled_dir: Path | None = None,
                   user_dir: Path | None = None) -> tuple[list[LoadedSheet], list[SheetProblem]]:
    """Every usable sheet (user sheets replacing bundled ones by platform) and every problem."""
    bundled_dir = BUNDLED_DIR if bundled_dir is None else bundled_dir
    user_dir = user_sheet_dir() if user_dir is None else user_dir
    chosen: dict[str, LoadedSheet] = {}
    problems: list[SheetProblem] = []
    for origin, folder in (("bundled", bundled_dir), ("user", user_dir)):
        seen_here: dict[str, Path] = {}
        for path in sheet_files(folder):
            try:
                data, text = _read(path)
            except SheetError as exc:
                problems.append(SheetProblem(path, str(exc)))
                continue
            platform = data.get("platform") if isinstance(data.get("platform"), str) else None
            try:
                sheet = parse_sheet(data, path, text)
            except SheetError as exc:
                problems.append(SheetProblem(path, str(exc)))
                if origin == "user" and platform:
                    # The user meant to replace this platform's prices: do not fall back to
                    # the bundled numbers silently.
                    chosen.pop(platform, None)
                continue
            if sheet.platform in seen_here:
                problems.append(SheetProblem(path, (
                    f"price sheet {path}: platform {sheet.platform!r} is already defined in "
                    f"{seen_here[sheet.platform].name}; keep one file per platform"
                )))
                continue
            seen_here[sheet.platform] = path
            chosen[sheet.platform] = LoadedSheet(path, origin, sheet)  # type: ignore[arg-type]
    return [chosen[k] for k in sorted(chosen)], problems


# --------------------------------------------------------------------------------------------
# Sheets -> offers


def price_date(day: date) -> datetime:
    """A sheet's read_on date as the aware datetime offers carry (midnight UTC)."""
    return datetime.combine(day, time(0), tzinfo=timezone.utc)


def per_month(per_day: Decimal | None, per_month_value: Decimal | None, month_hours: int) -> Decimal | None:
    """A storage price per GB-month, from whichever of per-day / per-month the sheet gives.

    >>> per_month(Decimal("0.007"), None, 720)
    Decimal('0.210')
    """
    if per_month_value is not None:
        return per_month_value
    if per_day is not None:
        return per_day * Decimal(month_hours) / Decimal(24)
    return None


def _options(prices: list[SheetPrice], gpus: int) -> list[PriceOption]:
    out = []
    for p in prices:
        amount = p.amount * gpus if p.per == "gpu" else p.amount
        label = " ".join(x for x in (p.label, f"({p.note})" if p.note else "") if x)
        out.append(PriceOption(unit=PriceUnit(p.unit), amount=amount, term_hours=p.term_hours,
                               interruptible=p.interruptible, label=label))
    return out


def sheet_offers(ctx: FetchContext, loaded: LoadedSheet) -> list[Offer]:
    sheet = loaded.sheet
    billing, storage, network = sheet.billing, sheet.storage, sheet.network
    running = per_month(storage.gb_day, storage.gb_month, billing.month_hours)
    stopped = per_month(storage.stopped_gb_day, storage.stopped_gb_month, billing.month_hours)
    base_extra: dict[str, Any] = {
        "platform": sheet.platform,
        "platform_name": sheet.name or sheet.platform,
        "sheet": loaded.path.name,
        "sheet_origin": loaded.origin,
    }
    if billing.source:
        base_extra["billing_source"] = billing.source
    if storage.source:
        base_extra["storage_source"] = storage.source
    if network.source:
        base_extra["network_source"] = network.source
    if sheet.notes:
        base_extra["notes"] = list(sheet.notes)

    offers: list[Offer] = []
    for item in sheet.offers:
        counts = item.gpus if isinstance(item.gpus, list) else [item.gpus]
        for n in counts:
            suffix = f"-{n}x" if isinstance(item.gpus, list) else ""
            extra = dict(base_extra)
            if item.note:
                extra["offer_note"] = item.note
            offer = ctx.offer(
                provider=sheet.platform,
                offer_id=f"{item.id}{suffix}",
                gpu_raw=item.gpu,
                hand_written=True,
                gpu_memory_gb=item.memory_gb,
                gpus=n,
                interconnect=item.interconnect,
                interconnect_gbps=item.interconnect_gbps,
                region=item.region,
                max_duration_hours=item.max_duration_hours,
                price_options=_options(item.prices, n),
                storage_gb_month=running,
                storage_stopped_gb_month=stopped,
                egress_gb=network.egress_gb,
                ingress_gb=network.ingress_gb,
                billing_granularity_s=billing.granularity_s,
                billing_minimum_s=billing.minimum_s,
                month_hours=billing.month_hours,
                price_locked=billing.price_locked_until_destroy,
                stopped_bills=billing.stopped_pays,
                stopped_max_days=storage.stopped_retention_days,
                free_disk_gb=storage.free_gb or 0.0,
                currency=sheet.currency,
                fetched_at=price_date(item.read_on or sheet.read_on),
                source=item.source or sheet.source,
                extra=extra,
            )
            if offer:
                offers.append(offer)
    return offers


class SheetProvider(Provider):
    """Bundled and user price sheets. Not HTTP: `api_root` only names where sheets live."""

    name = "sheet"
    currency = "CNY"  # the bundled sheets' currency; every offer carries its sheet's currency
    api_root = "file://rentopt/providers/sheets"
    key_env = None
    key_required = False
    docs_url = "https://github.com/rentopt/rentopt/blob/main/providers/sheet.py"
    # Defaults only: every sheet states its own billing rules, which its offers carry.
    billing = BillingRules(granularity_s=3600, minimum_s=0, stopped_pays="storage", month_hours=720,
                           source="each sheet's [billing] table")
    # A skip here is a whole sheet, not a row: one broken file must not fail the good ones,
    # and each one is printed in the refresh summary (file, line, field), not just counted.
    guard_skipped_share = False
    # One provider per platform; a platform whose sheet was deleted leaves the store.
    multi_provider = True
    retires_missing = True
    report_each_skip = True

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        loaded, problems = collect_sheets()
        for problem in problems:
            ctx.skip(problem.path.name, problem.message)
        offers: list[Offer] = []
        for item in loaded:
            if item.sheet.placeholder_prices:
                ctx.skip(item.path.name, (
                    f"{item.path.name} holds placeholder prices for {item.sheet.platform}; copy it to "
                    f"{user_sheet_dir()} with real prices and placeholder_prices = false"
                ))
                continue
            mine = sheet_offers(ctx, item)
            if mine:
                # The platform's prices are dated by the sheet (the day they were read), not the refresh.
                ctx.provider_sources[item.sheet.platform] = (
                    f"{item.sheet.name or item.sheet.platform} price sheet ({item.sheet.source}), read {item.sheet.read_on}"
                    + (" (your sheet)" if item.origin == "user" else ""),
                    max(o.fetched_at for o in mine))
            offers.extend(mine)
        if not offers and problems:
            raise ctx.schema_error(f"no usable price sheet ({len(problems)} could not be read; first: {problems[0].message})")
        return offers



def read_user_sheets(user_dir: Path | None = None) -> tuple[dict[str, list[Offer]], list[str]]:
    """The user's own sheets in `$RENTOPT_HOME/sheets/` as offers by platform, read now (what a
    quote uses without a refresh), and one note per sheet that could not be used."""
    user_dir = user_sheet_dir() if user_dir is None else user_dir
    if not sheet_files(user_dir):
        return {}, []
    loaded, problems = collect_sheets(bundled_dir=_NO_DIR, user_dir=user_dir)
    ctx = FetchContext(SheetProvider(), client=None, fetched_at=datetime.now(timezone.utc))  # type: ignore[arg-type]
    out: dict[str, list[Offer]] = {}
    notes = [p.message for p in problems]
    for item in loaded:
        if item.sheet.placeholder_prices:
            notes.append(f"price sheet {item.path}: placeholder_prices = true, so {item.sheet.platform} has no offers from it")
            continue
        out[item.sheet.platform] = sheet_offers(ctx, item)
    notes += [f"price sheet {row_id}: {reason}" for row_id, reason in ctx.skipped]
    return out, notes


_NO_DIR = Path("/nonexistent-rentopt-bundled-sheets")
