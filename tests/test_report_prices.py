"""The report's price cells (cheapest per GPU-hour per GPU x provider, on-demand and spot) found
on columns (`gather_prices_table`: float estimates pick the candidates, their full offers decide)
against the row-by-row definition (`gather_prices` over every full offer).

Random markets mix what makes a float estimate and the exact price disagree: the same price per
GPU-hour reached through different units, node sizes and currencies (72 CNY at 7.2 CNY per USD is
exactly 10 USD, and a few parts in 1e16 off in floats), ties broken by offer id, spot sold as
its own offer or as an option, rates that change by the price's day.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rentopt.optimizer.currency import EcbHistory, FxTable
from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.report import (
    gather_prices,
    gather_prices_table,
    price_candidates,
)

DAY_1 = datetime(2026, 10, 29, 6, tzinfo=timezone.utc)
DAY_2 = datetime(2026, 10, 30, 6, tzinfo=timezone.utc)
# EUR by the day of its price (two ECB days); CNY fixed at 7.2 per USD (as --fx CNY=7.2 sets it).
FX = FxTable.load(overrides={"CNY": Decimal("7.2")}, histories=[EcbHistory.from_csv(
    "Date,USD,CNY,\n2026-10-30,1.1172,7.4326,\n2026-10-29,1.0950,7.4000,\n", "ECB test copy")])
GPUS = {"H100-SXM-80GB": 80, "RTX-A6000-48GB": 48, "NOT-A-CATALOG-GPU": 24, None: 16}


def market_offer(offer_id: str, provider: str, gpu: str | None, gpus: int, currency: str, day: datetime, spot: bool,
                 options: list[tuple[str, str, bool, int]], month_hours: int = 730) -> Offer:
    """An offer of `options` (unit, amount, interruptible, term hours); a spot offer's are all
    interruptible (models.Offer)."""
    return Offer(
        provider=provider, offer_id=offer_id, gpu=gpu, gpu_raw=gpu or "Mystery Card", gpus=gpus,
        gpu_memory_gb=GPUS[gpu], spot=spot, currency=currency, fetched_at=day, month_hours=month_hours,
        source="https://market.example/api",
        price_options=[PriceOption(unit=unit, amount=Decimal(amount), interruptible=interruptible or spot,
                                   term_hours=term if unit == "term" else None)
                       for unit, amount, interruptible, term in options])


# Amounts chosen so that many per-GPU-hour prices meet, some of them only in decimals: 1.00/h =
# 24.00/day = 168.00/week = 730.00/month = 2.00/h on 2 GPUs = 7.20 CNY/h; 1.10/h = 3.30/h on 3
# GPUs (1.0999999999999999 in floats); 0.90 CNY/h on 3 GPUs = 1.00 USD a day...
AMOUNTS = ["0.90", "1.00", "1.10", "2.00", "2.10", "3.30", "6.30", "7.20", "8.00", "24.00", "48.00", "168.00",
           "720.00", "730.00"]
# Or a price per GPU-hour, sold through the unit, node size and currency drawn: 1.10 per GPU-hour
# is 79.20 CNY a day for 3 GPUs. Equal in decimals, a few parts in 1e16 apart in floats.
PER_GPU_HOUR = ["0.30", "1.10"]
UNIT_HOURS = {"hour": 1, "day": 24, "week": 168}
CNY_PER_USD = Decimal("7.2")
option = st.tuples(st.sampled_from(["hour", "day", "week", "month", "term"]),
                   st.one_of(st.sampled_from(AMOUNTS), st.sampled_from(PER_GPU_HOUR).map(lambda a: ("per GPU-hour", a))),
                   st.booleans(), st.sampled_from([720, 8760]))
# the H100 twice: more offers meet in one cell
row = st.tuples(st.sampled_from("ab"), st.sampled_from(["H100-SXM-80GB", *GPUS]), st.sampled_from([1, 2, 3, 8]),
                st.sampled_from(["USD", "CNY", "EUR"]), st.sampled_from([DAY_1, DAY_2]), st.booleans(),
                st.lists(option, min_size=1, max_size=3), st.sampled_from([720, 730]))


def node_amount(amount: str | tuple[str, str], unit: str, term: int, gpus: int, currency: str, month_hours: int) -> str:
    """A drawn amount as it is, or a price per GPU-hour as what the node costs per `unit`."""
    if isinstance(amount, str):
        return amount
    hours = {"month": month_hours, "term": term}.get(unit) or UNIT_HOURS[unit]
    return str(Decimal(amount[1]) * hours * gpus * (CNY_PER_USD if currency == "CNY" else 1))


@st.composite
def markets(draw) -> list[Offer]:
    rows = draw(st.lists(row, min_size=1, max_size=14))
    # ids in no particular order, so the offers' order is not the tie-break's
    ids = draw(st.permutations([f"o{i:02d}" for i in range(len(rows))]))
    return [market_offer(offer_id, p, gpu, gpus, ccy, day, spot,
                         [(unit, node_amount(a, unit, term, gpus, ccy, month), i, term) for unit, a, i, term in options],
                         month)
            for offer_id, (p, gpu, gpus, ccy, day, spot, options, month) in zip(ids, rows)]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markets(), st.sampled_from(["USD", "EUR", "CNY"]))
def test_cells_from_columns_are_the_row_by_row_cells(offers, currency):
    expected = gather_prices(offers, FX, currency)
    assert gather_prices_table(OfferTable.from_offers(offers), FX, currency) == expected


def test_an_exact_tie_across_currencies_goes_to_the_lower_offer_id():
    # 72 CNY/h at 7.2 CNY per USD is exactly 10 USD/h, as is the USD offer: a tie, so the lower
    # offer id ("a-1", the CNY one, listed last) is the cell. In floats 72 / 7.2 is not exactly
    # 10, so the CNY row must be read exactly, not dropped by its estimate.
    usd = market_offer("a-2", "a", "H100-SXM-80GB", 1, "USD", DAY_1, False, [("hour", "10.00", False, 0)])
    cny = market_offer("a-1", "a", "H100-SXM-80GB", 1, "CNY", DAY_1, False, [("hour", "72.00", False, 0)])
    dearer = market_offer("a-0", "a", "H100-SXM-80GB", 8, "USD", DAY_1, False, [("hour", "80.08", False, 0)])
    table = OfferTable.from_offers([usd, dearer, cny])
    rows, unlisted = price_candidates(table, FX, "USD")
    assert rows.tolist() == [0, 2] and unlisted == []  # 80.08 / 8 = 10.01: not a candidate
    (h100,), _ = gather_prices_table(table, FX, "USD")
    cell = h100.on_demand["a"]
    assert (cell.offer_id, cell.per_gpu_hour, cell.native_per_gpu_hour, cell.native_currency) == \
        ("a-1", Decimal("10"), Decimal("72.00"), "CNY")
    assert h100.spot == {}


def test_a_monthly_price_does_not_undercut_an_hourly_one_and_spot_options_count_as_spot():
    # Offer "m", 2 GPUs: 4.00 an hour (2.00 per GPU-hour) and 2000 a month (2000 / 730 / 2 = 1.37
    # per GPU-hour): its hour price is the hourly one (the finest unit sold), so "h" at 1.90 per
    # GPU-hour is the cheaper on-demand cell. "m"'s interruptible
    # option, 0.60/h, is the spot cell: 0.60 / 2 GPUs = 0.30 per GPU-hour.
    m = market_offer("m", "a", "RTX-A6000-48GB", 2, "USD", DAY_1, False,
                     [("hour", "4.00", False, 0), ("month", "2000", False, 0), ("hour", "0.60", True, 0)])
    h = market_offer("h", "a", "RTX-A6000-48GB", 1, "USD", DAY_1, False, [("hour", "1.90", False, 0)])
    (a6000,), _ = gather_prices_table(OfferTable.from_offers([m, h]), FX, "USD")
    assert (a6000.on_demand["a"].offer_id, a6000.on_demand["a"].per_gpu_hour) == ("h", Decimal("1.90"))
    assert (a6000.spot["a"].offer_id, a6000.spot["a"].per_gpu_hour) == ("m", Decimal("0.30"))


def test_a_tie_that_floats_miss_still_goes_to_the_lower_offer_id():
    # 3.30 an hour for 3 GPUs is exactly 1.10 per GPU-hour, as is "c-1"'s 1.10 on 1 GPU: a tie,
    # so the lower id "c-1" is the cell. In floats 3.3 / 3 = 1.0999999999999999 < 1.1: the
    # estimate alone would pick "c-2".
    one = market_offer("c-1", "c", "H100-SXM-80GB", 1, "USD", DAY_1, False, [("hour", "1.10", False, 0)])
    three = market_offer("c-2", "c", "H100-SXM-80GB", 3, "USD", DAY_1, False, [("hour", "3.30", False, 0)])
    (h100,), _ = gather_prices_table(OfferTable.from_offers([three, one]), FX, "USD")
    assert (h100.on_demand["c"].offer_id, h100.on_demand["c"].per_gpu_hour) == ("c-1", Decimal("1.10"))
