"""Offers as files and tables: the JSON and CSV formats of `--offers-file` and `rentopt offers`.

JSON is a list of normalised Offer objects, exactly what `rentopt offers --format json` prints.
CSV is a sheet a person can write by hand, one offer per line:

    provider,offer_id,gpu,gpus,price_hour,currency,price_month,region
    mycloud,a100x8,A100-SXM4-80GB,8,11.20,USD,,eu-west
    autodl,4090-week,RTX 4090,1,,CNY,1100,cn-north

Required columns: provider, offer_id, gpu, gpus, price_hour, currency (price_hour may be empty
on a line that gives another price). Optional: price_day, price_week, price_month (per unit for
the whole node), storage_gb_month, egress_gb, ingress_gb, interconnect (nvlink|pcie|unknown),
region, spot (yes/no), max_days, the platform's stop rules (stopped_bills: storage|everything|
nothing, what a stopped instance keeps paying; stopped_max_days, after which a stopped instance
is wiped; free_disk_gb, disk included in the price) and, so that `--format csv` output reads back unchanged,
gpu_memory_gb, fetched_at and source. `gpu` is a catalog id or any name `rentopt gpus` knows;
its memory comes from the catalog unless gpu_memory_gb says otherwise. A bare name several cards
share reads as the usual variant (H100 and H200 as SXM, `rentopt gpus --names`), narrowed first by
gpu_memory_gb, form_factor (SXM|PCIe|NVL|OAM) and interconnect; the offer's extra.gpu_note says so.
fetched_at defaults to the file's modification time and source to the file's path; `unknown`
says nobody knows the date (`--format csv` writes it for such a price; JSON writes null beside
`"dated_by": "unknown"`), and the price then reads as of unknown date, never as the file's time.

Prices follow the project rule (models.py): a compute price of 0 is an error, never "free";
leave the cell empty when unknown. Storage and transfer prices of 0 are taken as written (free),
as Vast.ai's feed means them. Every price must be within the sane bands every provider is held
to (optimizer/sanity.py: 0.001-200 USD per GPU-hour, ...), and the other numbers within sane
limits (`OFFER_LIMITS`); a file is read up to `MAX_OFFERS_FILE_BYTES`. Any of these is an
OffersFileError naming the line (CSV) or the offer and its line (JSON).
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence, Sized
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, TextIO

from pydantic import TypeAdapter, ValidationError

from rentopt.optimizer.errors import OffersFileError
from rentopt.optimizer.models import OFFERS_FILE, UNKNOWN_DATE, GpuMatch, Offer, PriceOption, PriceUnit, hour_price
from rentopt.optimizer.row_check import MAX_TERM_HOURS, OFFER_LIMITS, RowCheck  # noqa: F401 (offers_reader reads them here)
from rentopt.optimizer.sanity import PriceBands, UnknownCurrency

# The CSV format, as explicit field lists (a new Offer field must not silently change it).
REQUIRED_COLUMNS = ("provider", "offer_id", "gpu", "gpus", "price_hour", "currency")
PRICE_COLUMNS = {"price_hour": PriceUnit.HOUR, "price_day": PriceUnit.DAY,
                 "price_week": PriceUnit.WEEK, "price_month": PriceUnit.MONTH}
OPTIONAL_COLUMNS = ("price_day", "price_week", "price_month", "storage_gb_month", "egress_gb", "ingress_gb",
                    "interconnect", "form_factor", "region", "spot", "max_days", "stopped_bills", "stopped_max_days",
                    "free_disk_gb", "gpu_memory_gb", "fetched_at", "source")
CSV_COLUMNS = ("provider", "offer_id", "gpu", "gpus", "price_hour", "price_day", "price_week", "price_month",
               "currency", "storage_gb_month", "egress_gb", "ingress_gb", "interconnect", "region", "spot",
               "max_days", "stopped_bills", "stopped_max_days", "free_disk_gb", "gpu_memory_gb", "fetched_at",
               "source")
# The fetched_at cell of a price whose date nobody knows (an empty cell is the file's time).
UNKNOWN_DATE_CELL = "unknown"
# The CSV columns that hold text from outside (the others are numbers or rentopt's own words).
CSV_TEXT_COLUMNS = frozenset({"provider", "offer_id", "gpu", "currency", "region", "source"})
STOPPED_BILLS = ("storage", "everything", "nothing")
TRUE_WORDS = frozenset({"yes", "y", "true", "1", "spot", "interruptible"})
FALSE_WORDS = frozenset({"no", "n", "false", "0", "", "on-demand", "ondemand"})
HOURS_PER_DAY = 24

_OFFER_LIST = TypeAdapter(list[Offer])

# `rentopt offers --format json` writes about 1.5 KB per offer: 256 MiB holds 100,000 offers
# with room to spare, and stops `--offers-file /dev/zero` (or a wrong, huge file) from filling memory.
MAX_OFFERS_FILE_BYTES = 256 << 20

# The limits on an offer's numbers and terms are the door's (optimizer/row_check.py).


# --------------------------------------------------------------------------------------------
# Reading


def read_offers_file(path: Path) -> list[Offer]:
    """Offers from a JSON list of Offer objects or a hand-written CSV; OffersFileError names the problem."""
    path = Path(path)
    data = read_limited(path)
    if is_json(path, data):
        offers = parse_offers_json(data, path.name)
    else:
        try:
            text = data.decode("utf-8-sig")  # a spreadsheet's byte-order mark is not part of the header
        except UnicodeDecodeError as exc:
            raise OffersFileError(f"{path.name} is not UTF-8 text (byte {exc.start}); save it as UTF-8 CSV") from None
        offers = parse_offers_csv(text, name=path.name, fetched_at=file_time(path), source=str(path.resolve()))
    check_nonempty(offers, path.name)
    check_unique(offers, path.name)
    return offers


def read_limited(path: Path) -> bytes:
    """The file's bytes, refusing one larger than MAX_OFFERS_FILE_BYTES."""
    try:
        with path.open("rb") as fp:
            data = fp.read(MAX_OFFERS_FILE_BYTES + 1)
    except OSError as exc:
        raise OffersFileError(f"cannot read offers file {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_OFFERS_FILE_BYTES:
        raise OffersFileError(f"{path} is larger than {MAX_OFFERS_FILE_BYTES >> 20} MiB, more than any offers file "
                              "holds; check the path")
    return data


def is_json(path: Path, data: bytes) -> bool:
    return path.suffix.lower() == ".json" or (path.suffix.lower() != ".csv" and data.lstrip()[:1] == b"[")


def file_time(path: Path) -> datetime:
    """When the file was written: the fetched_at of lines that do not say."""
    try:
        return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc)
    except (OSError, OverflowError, ValueError):
        return datetime.now(timezone.utc)


def check_nonempty(offers: Sized, name: str) -> None:
    if not len(offers):
        raise OffersFileError(f"{name} holds no offers; add at least one line (see `rentopt offers --help`)")


def parse_offers_json(data: bytes | str, name: str = "offers file") -> list[Offer]:
    """A JSON list of Offer objects; errors name the offer (1-based), its line and the field.

    Validation is strict, so `"gpus": true` or `"gpus": "8"` is an error rather than a 1 or an 8.
    """
    try:
        offers = _OFFER_LIST.validate_json(data, strict=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err.get("loc", ()))
        msg = err.get("msg", "invalid").removeprefix("Value error, ")
        if err.get("type") == "json_invalid":
            raise OffersFileError(f"{name} is not valid JSON ({msg}); expected a list of offers") from None
        if not loc or not isinstance(loc[0], int):
            raise OffersFileError(f"{name}: expected a JSON list of offers ({msg})") from None
        where = ".".join(str(p) for p in loc[1:]) or "the offer"
        raise OffersFileError(f"{_json_where(data, name, loc[0])}, field {where}: {msg}") from None
    if found := RowCheck(bands=PriceBands()).first_problem(offers):
        index, (field, message) = found
        raise OffersFileError(f"{_json_where(data, name, index)}, field {field}: {message}")
    return offers


def _json_where(data: bytes | str, name: str, index: int) -> str:
    """'<file> line N: offer K' for the offer at `index` of a JSON list (line when findable)."""
    line = _json_element_line(data.encode() if isinstance(data, str) else data, index)
    return f"{name} line {line}: offer {index + 1}" if line else f"{name}: offer {index + 1}"


_JSON_SIGNIFICANT = re.compile(rb'["\\\[\]{}]')


def _json_element_line(data: bytes, index: int) -> int | None:
    """The line on which the `index`-th object of a top-level JSON array starts.

    A scan over the brackets and quotes only (skipping string contents), run once per error.

    >>> _json_element_line(b'[\\n  {"a": "}{"},\\n  {"b": 1}\\n]', 1)
    3
    """
    depth, in_string, seen, pos = 0, False, -1, 0
    while (m := _JSON_SIGNIFICANT.search(data, pos)) is not None:
        char, start = m.group(), m.start()
        pos = start + 1
        if in_string:
            if char == b"\\":
                pos = start + 2  # the escaped character, whatever it is
            elif char == b'"':
                in_string = False
            continue
        if char == b'"':
            in_string = True
        elif char in (b"[", b"{"):
            depth += 1
            if depth == 2 and char == b"{":
                seen += 1
                if seen == index:
                    return data.count(b"\n", 0, start) + 1
        else:
            depth -= 1
    return None


def offer_problem(offer: Offer, bands: PriceBands | None = None) -> tuple[str, str] | None:
    """(field, why) for the first rule of the door (optimizer/row_check.py) `offer` breaks, else
    None: a provider name that is not one, a control character in a name, a GPU id the catalog
    does not have, a number outside OFFER_LIMITS, a price outside the sane bands, a currency with
    no exchange rate, a date more than a day ahead. `bands`: a reader's own, so its rates load once."""
    return RowCheck(bands=bands).problem(offer)


def parse_offers_csv(text: str, *, name: str, fetched_at: datetime, source: str) -> list[Offer]:
    """Offers from the hand-writable CSV format; errors name the line and the field."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        header = [h.strip().lower() for h in (reader.fieldnames or [])]
    except csv.Error as exc:
        raise OffersFileError(f"{name} line 1 is not CSV ({exc})") from None
    check_header(header, name)
    reader.fieldnames = header
    offers = []
    bands = PriceBands()
    rows = iter(reader)
    while True:
        try:
            row = next(rows)
        except StopIteration:
            break
        except csv.Error as exc:  # a NUL byte, a cell over the csv module's size limit
            raise OffersFileError(f"{name} line {reader.line_num + 1} is not CSV ({exc})") from None
        offer = offer_from_cells(row, name, reader.line_num, fetched_at, source, bands)
        if offer is not None:
            offers.append(offer)
    return offers


def check_header(header: list[str], name: str) -> None:
    """The header line names the required columns and no unknown one."""
    if not header:
        raise OffersFileError(f"{name} is empty; its first line must name the columns: {', '.join(REQUIRED_COLUMNS)}")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise OffersFileError(f"{name}: missing column {', '.join(missing)} (required: {', '.join(REQUIRED_COLUMNS)})")
    unknown = [c for c in header if c not in REQUIRED_COLUMNS and c not in OPTIONAL_COLUMNS]
    if unknown:
        raise OffersFileError(
            f"{name}: unknown column {', '.join(repr(c) for c in unknown)}; optional columns are {', '.join(OPTIONAL_COLUMNS)}"
        )


def offer_from_cells(row: dict, name: str, line: int, fetched_at: datetime, source: str,
                     bands: PriceBands) -> Offer | None:
    """One CSV line's offer (`row` as csv.DictReader gives it); None for a blank line."""
    if not any((v or "").strip() for v in row.values() if isinstance(v, str)):
        return None  # blank line
    if None in row:  # more cells than header columns
        raise OffersFileError(f"{name} line {line}: more cells than columns in the header")
    return _offer_from_row(_Row(row, name, line), fetched_at, source, bands)


class _Row:
    """One CSV line with field parsers whose errors say '<file> line N, field F: ...'."""

    def __init__(self, cells: dict[str, Any], name: str, line: int):
        self.cells = {k: (v or "").strip() for k, v in cells.items()}
        self.name = name
        self.line = line

    def error(self, column: str, problem: str) -> OffersFileError:
        return OffersFileError(f"{self.name} line {self.line}, field {column}: {problem}")

    def text(self, column: str, *, required: bool = False) -> str | None:
        value = self.cells.get(column, "")
        if not value:
            if required:
                raise self.error(column, "is empty")
            return None
        return value

    def decimal(self, column: str, *, positive: bool) -> Decimal | None:
        value = self.text(column)
        if value is None:
            return None
        try:
            amount = Decimal(value)
        except InvalidOperation:
            raise self.error(column, f"{value!r} is not a number") from None
        if not amount.is_finite() or amount < 0 or (positive and amount == 0):
            hint = " (0 would mean free; leave the cell empty if unknown)" if positive else ""
            raise self.error(column, f"{value!r} must be a {'positive' if positive else 'non-negative'} number{hint}")
        return amount

    def number(self, column: str) -> float | None:
        amount = self.decimal(column, positive=True)
        return float(amount) if amount is not None else None

    def integer(self, column: str) -> int:
        value = self.text(column, required=True) or ""
        if not value.isdigit() or int(value) <= 0:
            raise self.error(column, f"{value!r} must be a whole number of GPUs, at least 1")
        return int(value)

    def boolean(self, column: str) -> bool:
        value = self.cells.get(column, "").lower()
        if value in TRUE_WORDS:
            return True
        if value in FALSE_WORDS:
            return False
        raise self.error(column, f"{value!r} must be yes or no")

    def timestamp(self, column: str) -> datetime | None:
        value = self.text(column)
        if value is None:
            return None
        if value.lower() == UNKNOWN_DATE_CELL:
            return UNKNOWN_DATE  # the Offer is then dated_by "unknown"
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise self.error(column, f"{value!r} is not an ISO 8601 time such as 2026-11-28T06:00:00Z "
                                     f"(or {UNKNOWN_DATE_CELL} when nobody knows it)") from None
        if when.tzinfo is None:
            raise self.error(column, f"{value!r} needs a timezone, e.g. 2026-11-28T06:00:00Z")
        return when


def _offer_from_row(row: _Row, fetched_at: datetime, source: str, bands: PriceBands | None = None) -> Offer:
    from rentopt.optimizer.hardware import get_gpu

    spot = row.boolean("spot")
    options = []
    for column, unit in PRICE_COLUMNS.items():
        amount = row.decimal(column, positive=True)
        if amount is not None:
            options.append(PriceOption(unit=unit, amount=amount, interruptible=spot))
    if not options:
        raise row.error("price_hour", f"no price on this line; fill in at least one of {', '.join(PRICE_COLUMNS)}")
    gpu_raw = row.text("gpu", required=True) or ""
    memory = row.number("gpu_memory_gb")
    match = _sheet_gpu(row, gpu_raw, memory)
    if memory is None:
        if match.gpu is None:
            known = f"could be {', '.join(match.candidates)}" if match.candidates else "no catalog GPU has this name"
            raise row.error("gpu", f"{gpu_raw!r}: {known}; use an id from `rentopt gpus`, or give gpu_memory_gb "
                                   "or form_factor")
        memory = get_gpu(match.gpu).memory_gb
    currency = (row.text("currency", required=True) or "").upper()
    if len(currency) != 3 or not currency.isalpha():
        raise row.error("currency", f"{currency!r} must be a three-letter code such as USD or CNY")
    interconnect = (row.text("interconnect") or "unknown").lower()
    if interconnect not in ("nvlink", "pcie", "unknown"):
        raise row.error("interconnect", f"{interconnect!r} must be nvlink, pcie or unknown")
    max_days = row.decimal("max_days", positive=True)
    stopped_bills = (row.text("stopped_bills") or "storage").lower()
    if stopped_bills not in STOPPED_BILLS:
        raise row.error("stopped_bills", f"{stopped_bills!r} must be one of {', '.join(STOPPED_BILLS)} "
                                         "(what a stopped instance keeps paying for)")
    free_disk = row.decimal("free_disk_gb", positive=False)
    fields: dict[str, Any] = {
        "provider": row.text("provider", required=True),
        "offer_id": row.text("offer_id", required=True),
        "gpu": match.gpu, "gpu_raw": gpu_raw, "gpu_status": match.status,
        "gpus": row.integer("gpus"), "gpu_memory_gb": memory, "interconnect": interconnect,
        "region": row.text("region"), "spot": spot, "price_options": options,
        "storage_gb_month": row.decimal("storage_gb_month", positive=False),
        "egress_gb": row.decimal("egress_gb", positive=False),
        "ingress_gb": row.decimal("ingress_gb", positive=False),
        "max_duration_hours": float(max_days * HOURS_PER_DAY) if max_days is not None else None,
        "stopped_bills": stopped_bills, "stopped_max_days": row.number("stopped_max_days"),
        "free_disk_gb": float(free_disk) if free_disk is not None else 0.0,
        "currency": currency,
        "fetched_at": row.timestamp("fetched_at") or fetched_at,
        "source": row.text("source") or source,
    }
    if match.status == "default":  # a bare name read as the usual variant: the offer says so
        fields["extra"] = {"gpu_note": match.note, "gpu_candidates": list(match.candidates)}
    try:
        offer = Offer(**fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        column = ".".join(str(p) for p in err.get("loc", ())) or "offer"
        raise row.error(column, err.get("msg", "invalid").removeprefix("Value error, ")) from None
    bands = bands or PriceBands()
    columns = [c for c in PRICE_COLUMNS if row.text(c) is not None]
    for column, option in zip(columns, offer.price_options, strict=True):
        try:
            problem = bands.gpu_hour_problem(option, offer.gpus, offer.month_hours, offer.currency)
        except UnknownCurrency as exc:  # said with the file, line and column like any bad cell
            raise row.error("currency", str(exc)) from None
        if problem:
            raise row.error(column, problem)
    if problem := offer_problem(offer, bands):
        column, message = problem
        raise row.error({"storage_stopped_gb_month": "storage_gb_month"}.get(column, column), message)
    return offer


def _sheet_gpu(row: _Row, gpu_raw: str, memory: float | None) -> GpuMatch:
    """A hand-written sheet's GPU: names people copy from a provider's page ("H100", "A100 80GB")
    read as the usual variant (hardware.read_gpu_name, the one reader of people's GPU names),
    narrowed first by the line's memory, form_factor and interconnect cells."""
    from rentopt.optimizer.hardware import form_factor_of, read_gpu_name

    form_factor = row.text("form_factor")
    if form_factor is not None:
        try:
            form_factor_of(form_factor)
        except ValueError:
            raise row.error("form_factor", f"{form_factor!r} must be SXM, PCIe, NVL or OAM") from None
    link = (row.text("interconnect") or "unknown").lower()
    return read_gpu_name(gpu_raw, memory, form_factor=form_factor, interconnect=link)


def check_unique(offers: Iterable[Offer], name: str) -> None:
    seen: set[tuple[str, str]] = set()
    for o in offers:
        if o.key in seen:
            raise OffersFileError(f"{name}: offer {o.provider}/{o.offer_id} appears twice; offer ids must be unique per provider")
        seen.add(o.key)


# --------------------------------------------------------------------------------------------
# Writing


def write_offers_json(offers: Sequence[Offer], fp: TextIO) -> None:
    """The offers as a JSON list of Offer objects (readable by `read_offers_file`); an unknown
    date is null."""
    fp.write(_OFFER_LIST.dump_json(list(offers), indent=2, context={OFFERS_FILE: True}).decode("utf-8"))
    fp.write("\n")


def write_offers_csv(offers: Sequence[Offer], fp: TextIO) -> list[Offer]:
    """The offers in the hand-writable CSV format; returns those it cannot express (left out).

    Per unit, the cheapest option of the offer's own kind is written (interruptible ones for a
    spot offer, on-demand ones otherwise). Reserved terms and `extra` have no column: use JSON
    to keep them. An offer with no hourly/daily/weekly/monthly price of its kind is left out.
    """
    from rentopt.optimizer.text import csv_cell

    writer = csv.writer(fp, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    left_out = []
    for o in offers:
        row = offer_to_csv_row(o)
        if row is None:
            left_out.append(o)
        else:  # text cells inert: no control character, no formula a spreadsheet would run (OWASP)
            writer.writerow([csv_cell(row.get(c, "")) if c in CSV_TEXT_COLUMNS else row.get(c, "") for c in CSV_COLUMNS])
    return left_out


def offer_to_csv_row(offer: Offer) -> dict[str, str] | None:
    prices: dict[str, Decimal] = {}
    for column, unit in PRICE_COLUMNS.items():
        amounts = [p.amount for p in offer.options(interruptible=offer.spot) if p.unit == unit]
        if amounts:
            prices[column] = min(amounts)
    if not prices:
        return None
    row = {
        "provider": offer.provider, "offer_id": offer.offer_id, "gpu": offer.gpu or offer.gpu_raw,
        "gpus": str(offer.gpus), "currency": offer.currency, "interconnect": offer.interconnect,
        "region": offer.region or "", "spot": csv_yes_no(offer.spot),
        "gpu_memory_gb": repr(offer.gpu_memory_gb),
        "fetched_at": csv_date(offer.fetched_at),
        "source": offer.source,
    }
    row.update({k: str(v) for k, v in prices.items()})
    for column in ("storage_gb_month", "egress_gb", "ingress_gb"):
        value = getattr(offer, column)
        row[column] = "" if value is None else str(value)
    row["max_days"] = csv_days(offer.max_duration_hours)
    row["stopped_bills"] = offer.stopped_bills
    row["stopped_max_days"] = csv_number(offer.stopped_max_days)
    row["free_disk_gb"] = csv_number(offer.free_disk_gb or None)
    return row


# One cell each, for offer_to_csv_row and the listing written from columns (offers_writer).


def csv_yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def csv_time(when: datetime) -> str:
    """A time as the CSV writes it: UTC, ISO 8601, 'Z'.

    >>> csv_time(datetime.fromisoformat("2026-11-28T08:00:00+02:00"))
    '2026-11-28T06:00:00Z'
    """
    return when.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def csv_date(when: datetime) -> str:
    """A price's fetched_at cell: `unknown` for UNKNOWN_DATE (an Offer of unknown date holds it,
    and only such an Offer), else csv_time.

    >>> csv_date(UNKNOWN_DATE), csv_date(datetime(2026, 5, 20, tzinfo=timezone.utc))
    ('unknown', '2026-05-20T00:00:00Z')
    """
    return UNKNOWN_DATE_CELL if when == UNKNOWN_DATE else csv_time(when)


def csv_days(hours: float | None) -> str:
    """max_days of a rental limit in hours (empty: none); reads back as the same hours.

    >>> csv_days(2160.0), csv_days(None)
    ('90.0', '')
    """
    return "" if hours is None else str(Decimal(repr(hours)) / HOURS_PER_DAY)


def csv_number(value: float | None) -> str:
    """A float cell, written as Python writes the float (empty: unknown)."""
    return "" if value is None else repr(value)


# --------------------------------------------------------------------------------------------
# The table for people


def age(then: datetime, now: datetime) -> str:
    """How old a price is, in the largest whole unit.

    >>> t = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)
    >>> age(t, datetime(2026, 11, 28, 6, 40, tzinfo=timezone.utc)), age(t, datetime(2026, 12, 1, 7, tzinfo=timezone.utc))
    ('40m', '3d')
    """
    seconds = max(0.0, (now - then).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return "<1m"


def money(amount: Decimal) -> str:
    """A price for reading: at least 2 decimals, at most 4.

    >>> money(Decimal("1.1")), money(Decimal("0.34567")), money(Decimal("18"))
    ('1.10', '0.3457', '18.00')
    """
    text = f"{amount.quantize(Decimal('0.0001')):f}"
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.rstrip('0').ljust(2, '0')}"


OFFER_TABLE_HEADERS = ("provider", "offer", "gpu", "gpus", "GB/gpu", "link", "region", "spot",
                       "price/node-h", "currency", "age")


def offer_table_rows(offers: Iterable[Offer], now: datetime) -> list[list[str]]:
    """One row per offer: price per node-hour in the offer's currency and the price's age; every
    cell one inert line (text.one_line: a newline or escape in a name shows as its escape)."""
    from rentopt.optimizer.text import table_cells

    rows = []
    for o in offers:
        price = hour_price(o)
        gpu = o.gpu or f"{o.gpu_raw} (?)"
        rows.append([o.provider, o.offer_id, gpu, str(o.gpus), f"{o.gpu_memory_gb:g}", o.interconnect,
                     o.region or "", "yes" if o.spot else "no",
                     "?" if price is None else money(price),
                     o.currency, "unknown" if o.dated_by == "unknown" else
                     age(o.fetched_at, now) + (" (file time)" if o.dated_by == "file-time" else "")])
    return table_cells(rows)
