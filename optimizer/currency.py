"""Exchange rates and money rounding: convert offer prices into the quote currency.

Rates are "units of the currency per 1 USD". They come from three places, later ones winning:
the dated defaults bundled in `data/fx.toml`, an optional `[fx]` table in
`$RENTOPT_HOME/config.toml`, and `--fx CNY=7.1` overrides. Every rate used in a quote is
reported with its date and source (`rates_used`), so a reader can see what a CNY price was
turned into USD with.

Conversion keeps full Decimal precision; callers that need a fixed grid (billing quantises
prices to 1e-6 so the solver's integers are exact) quantise afterwards. Rounding to a
currency's minor unit happens only for display (`round_money`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from importlib import resources
from pathlib import Path
from typing import Any

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.models import FxRate
from rentopt.optimizer.paths import rentopt_home

BASE = "USD"
_CODE = re.compile(r"^[A-Z]{3}$")
# ISO 4217 gives most currencies two minor digits; data/fx.toml lists the exceptions we know.
_DEFAULT_MINOR_UNITS = 2


def _bundled() -> dict[str, Any]:
    text = resources.files("rentopt.optimizer").joinpath("data/fx.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


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


def _normalise_code(code: str) -> str:
    return code.strip().upper()


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


@dataclass(frozen=True)
class FxTable:
    """Rates per USD by currency code (USD itself is 1), each with its date and source."""

    rates: Mapping[str, FxRate]
    minor_units: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def load(
        cls,
        overrides: Mapping[str, Decimal] | None = None,
        config_path: Path | None = None,
    ) -> FxTable:
        """Bundled defaults, then the config file's `[fx]` table, then `overrides` (from --fx).

        `config_path=None` reads the default location (`default_config_path()`) if it exists.
        """
        data = _bundled()
        rates = {
            code: FxRate(
                currency=code, per_usd=Decimal(entry["per_usd"]), as_of=entry["as_of"], source=entry["source"]
            )
            for code, entry in data["rates"].items()
        }
        path = config_path if config_path is not None else default_config_path()
        for code, rate in _config_rates(path).items():
            rates[code] = FxRate(currency=code, per_usd=rate, as_of="user config", source=f"{path} [fx]")
        for raw_code, value in (overrides or {}).items():
            code = _normalise_code(raw_code)
            rate = _positive_decimal(value)
            if not _CODE.match(code) or code == BASE or rate is None:
                raise InputError(
                    f"--fx {raw_code}={value}: give a currency code (not USD) and a positive rate per USD"
                )
            rates[code] = FxRate(currency=code, per_usd=rate, as_of="user override", source=f"--fx {code}={rate}")
        minor = {str(k): int(v) for k, v in data.get("minor_units", {}).items()}
        return cls(rates=rates, minor_units=minor)

    @property
    def known(self) -> tuple[str, ...]:
        return tuple(sorted(self.rates))

    def rate(self, code: str) -> FxRate:
        """The rate for `code`; an InputError naming the known currencies when there is none."""
        found = self.rates.get(_normalise_code(code))
        if found is None:
            raise InputError(
                f"unknown currency {code!r}; known: {', '.join(self.known)}. "
                f"Add a rate with --fx {_normalise_code(code)}=UNITS_PER_USD"
            )
        return found

    def convert(self, amount: Decimal, from_ccy: str, to_ccy: str) -> Decimal:
        """`amount` in `from_ccy` expressed in `to_ccy`, through USD.

        >>> fx = FxTable.load(overrides={"CNY": Decimal("7.2")})
        >>> fx.convert(Decimal("72"), "CNY", "USD") == 10
        True
        >>> fx.convert(Decimal("10"), "USD", "CNY")
        Decimal('72.0')
        """
        src, dst = self.rate(from_ccy), self.rate(to_ccy)
        if src.currency == dst.currency:
            return amount
        return amount / src.per_usd * dst.per_usd

    def rates_used(self, currencies: Iterable[str]) -> list[FxRate]:
        """The non-USD rates a quote relied on, sorted by code, for the output's `fx` list."""
        codes = sorted({self.rate(c).currency for c in currencies} - {BASE})
        return [self.rates[c] for c in codes]

    def round_money(self, amount: Decimal, currency: str) -> Decimal:
        return round_money(amount, currency, self.minor_units)


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
