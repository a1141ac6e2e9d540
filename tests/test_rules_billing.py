"""Billing's currency rule, guarded: every price of an offer is converted at the rate of its own day.

The rates are the ECB's kind (units per EUR), written here by hand; the expected prices are
worked out in the comments. tools/mutate.py breaks the rule and checks that this test notices.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from rentopt.optimizer.billing import in_quote_currency, offer_terms
from rentopt.optimizer.currency import EcbHistory, FxTable
from rentopt.optimizer.models import Offer, PriceOption

D = Decimal
# Two days of ECB rates (per EUR): the price's day, and a later one with a dearer euro. Chosen so
# that the crossing through USD is exact: 1 USD = 0.8 EUR = 6 CNY in March, 0.625 EUR in December.
ECB = EcbHistory.from_csv("Date,USD,CNY,\n2026-12-01,1.6000,9.6000,\n2026-03-02,1.2500,7.5000,\n", "ECB test copy")


def eur_offer(fetched: datetime) -> Offer:
    return Offer(provider="eu", offer_id="a100", gpu="A100-SXM4-80GB", gpu_raw="A100", gpus=1, gpu_memory_gb=80,
                 price_options=[PriceOption(unit="hour", amount=D("2.00")), PriceOption(unit="week", amount=D("300"))],
                 storage_gb_month=D("0.10"), storage_stopped_gb_month=D("0.04"), egress_gb=D("0.05"),
                 ingress_gb=D("0.01"), currency="EUR", fetched_at=fetched, source="test")


def test_every_price_of_an_offer_is_converted_at_the_rate_of_its_own_day():
    fx = FxTable.load(histories=[ECB])
    march = eur_offer(datetime(2026, 3, 2, 9, tzinfo=timezone.utc))
    terms = offer_terms(march, fx, "USD")
    # 2 March's rate: 1 EUR = 1.25 USD (not 1 December's 1.60)
    assert terms.on_demand.metered_hourly == D("2.50")  # 2.00 EUR x 1.25
    assert terms.on_demand.block("week").price == D("375")  # 300 EUR x 1.25
    assert terms.storage_gb_month == D("0.125")  # 0.10 x 1.25
    assert terms.stopped_storage_gb_month == D("0.05")  # 0.04 x 1.25
    assert terms.egress_gb == D("0.0625")  # 0.05 x 1.25
    assert terms.ingress_gb == D("0.0125")  # 0.01 x 1.25
    # the same offer read in December converts at December's rate
    december = offer_terms(eur_offer(datetime(2026, 12, 1, 9, tzinfo=timezone.utc)), fx, "USD")
    assert december.on_demand.metered_hourly == D("3.20") and december.egress_gb == D("0.08")  # x 1.60
    # crossed through the dollar: 2.00 EUR in CNY on 2 March = 2.00 / 0.8 x 6 = 15.00 CNY
    assert in_quote_currency(D("2.00"), "EUR", march.fetched_at, fx, "CNY") == D("15.00")
