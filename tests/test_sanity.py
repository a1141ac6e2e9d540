"""The sane price bands: bounds worked out by hand from the published prices in optimizer/sanity.py."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest

from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.sanity import PriceBands, per_gpu_hour


def offer(*options: PriceOption, gpus: int = 8, currency: str = "USD", month_hours: int = 730, **fields) -> Offer:
    return Offer(provider="p", offer_id="o", gpu=None, gpu_raw="x", gpus=gpus, gpu_memory_gb=80,
                 price_options=list(options), currency=currency, month_hours=month_hours,
                 fetched_at=datetime(2026, 11, 28, tzinfo=timezone.utc), source="s", **fields)


def hour(amount: str) -> PriceOption:
    return PriceOption(unit="hour", amount=Decimal(amount))


@pytest.mark.parametrize("node_hour, sane", [
    ("113.93", True),     # AWS p6-b200.48xlarge on-demand: 14.24 per GPU-hour
    ("186.60", True),     # Azure ND96isr H100 v5, the dearest published node: 23.33 per GPU
    ("1600", True),       # 8 x 200: the upper bound itself
    ("1600.08", False),   # 200.01 per GPU-hour
    ("0.008", True),      # 8 x 0.001: the lower bound itself
    ("0.0079", False),
    ("1E+12", False),
])
def test_usd_per_gpu_hour_band(node_hour, sane):
    assert (PriceBands().offer_problem(offer(hour(node_hour))) is None) is sane


def test_monthly_and_term_prices_are_checked_per_gpu_hour():
    # JYGPU's 8 x RTX 4090 node, 9900 CNY a 720-hour month: 1.71875 CNY per GPU-hour.
    month = PriceOption(unit="month", amount=Decimal(9900))
    assert per_gpu_hour(month, 8, 720) == Decimal("1.71875")
    assert PriceBands().offer_problem(offer(month, currency="CNY", month_hours=720)) is None
    # A 3-year term at 1e12 USD is 1e12 / 26280 / 8 = 4.76e6 per GPU-hour.
    term = PriceOption(unit="term", amount=Decimal("1e12"), term_hours=26280)
    problem = PriceBands().offer_problem(offer(term))
    assert problem == "term price 1E+12 USD = 4756468.7976 USD per GPU-hour is above the sane range 0.001-200 USD"


def test_cny_and_other_currencies(rentopt_home):
    rentopt_home.mkdir(parents=True)
    (rentopt_home / "config.toml").write_text("[fx]\nEUR = 0.9\n", encoding="utf-8")  # a fixed rate
    bands = PriceBands()
    assert (bands.band("gpu_hour", "CNY").low, bands.band("gpu_hour", "CNY").high) == (Decimal("0.006"), Decimal(1500))
    eur = bands.band("gpu_hour", "EUR")  # the USD band at 0.9 EUR per USD: 0.0009 to 180
    assert (eur.low, eur.high) == (Decimal("0.0009"), Decimal("180"))
    assert "unknown currency 'XYZ'" in bands.offer_problem(offer(hour("8"), currency="XYZ"))


@pytest.mark.parametrize("field, value, sane", [
    ("storage_gb_month", "0", True), ("storage_gb_month", "0.45", True), ("storage_gb_month", "5", True),
    ("storage_gb_month", "5.01", False), ("storage_stopped_gb_month", "1e10", False),
    ("egress_gb", "0.09", True), ("egress_gb", "1e12", False), ("ingress_gb", "6", False),
])
def test_storage_and_transfer_bands(field, value, sane):
    problem = PriceBands().offer_problem(offer(hour("16"), **{field: Decimal(value)}))
    assert (problem is None) is sane
    if not sane:
        assert problem.startswith(f"{field}: ")
