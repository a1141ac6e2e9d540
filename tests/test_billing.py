"""Billing: bills worked out by hand (the arithmetic is in the comments), and the rules billing owns.

Each platform rule has a test that fails when the rule is broken: leases across stages, the stop
rules (what a stopped instance pays, retention), free disk, month boundaries, unknown prices.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from itertools import product

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rentopt.optimizer import billing
from rentopt.optimizer.billing import (
    Block,
    Bounds,
    Choice,
    RentalPricing,
    Terms,
    Use,
    cheapest_cover,
    cover_alternatives,
    cover_in_units,
    cover_notes,
    explain_cover,
    idle_bounds,
    idle_choice,
    lease_bounds,
    lease_refusal,
    offer_terms,
    price_plan,
    rental_pricing,
    round_money,
    storage_line,
    transfer_line,
    use_bounds,
)
from rentopt.optimizer.currency import EcbHistory, FxTable
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit

D = Decimal
DAY, WEEK, MONTH, TERM, HOUR = PriceUnit.DAY, PriceUnit.WEEK, PriceUnit.MONTH, PriceUnit.TERM, PriceUnit.HOUR


def offer(options: list[PriceOption], currency: str = "CNY", **kw) -> Offer:
    fields = dict(
        provider="jygpu", offer_id="8x4090", gpu="RTX-4090-24GB", gpu_raw="RTX 4090", gpus=8, gpu_memory_gb=24,
        price_options=options, currency=currency, fetched_at=datetime(2025, 3, 1, tzinfo=timezone.utc),
        source="seed 004",
    )
    fields.update(kw)
    return Offer(**fields)


@pytest.fixture
def fx() -> FxTable:
    return FxTable.load(overrides={"CNY": D("7.2")})


# The seed 004 node: 8 x RTX 4090 at 9900 CNY/month list, 7920 CNY/month discounted. A daily price
# of 9900 / 30 = 330 CNY is the list month spread over 30 days. JYGPU's month is 30 days = 720 h.
SEED_NODE = [PriceOption(unit=MONTH, amount=D("7920")), PriceOption(unit=DAY, amount=D("330"))]


# --------------------------------------------------------------------------------------------
# (1) and (2): day vs month


def test_ten_days_on_the_seed_node_is_cheaper_by_the_day(fx):
    pricing = rental_pricing(offer(SEED_NODE, month_hours=720), 1, fx, "CNY", interruptible=False)
    cover = cheapest_cover(pricing, D(10 * 24))
    # 10 days x 330 = 3300 CNY < 7920 CNY for the month
    assert cover.blocks == {"day": 10}
    assert cover.cost == D("3300")
    assert cover_alternatives(pricing, D(240))["month"] == D("7920")


def test_45_days_mixes_one_month_and_15_days(fx):
    pricing = rental_pricing(offer(SEED_NODE, month_hours=720), 1, fx, "CNY", interruptible=False)
    cover = cheapest_cover(pricing, D(45 * 24))
    # 45 days = 1080 h = one 720 h month + 360 h = 15 days:
    # mix 7920 + 15 x 330 = 12870; two months 2 x 7920 = 15840; all days 45 x 330 = 14850 -> the mix
    assert cover.blocks == {"month": 1, "day": 15}
    assert cover.cost == D("12870")
    assert explain_cover(pricing, D(1080), "CNY") == (
        "1080 h: 1 x month + 15 x day = 12870.00 CNY (month only: 15840.00; day only: 14850.00)"
    )


def test_45_days_with_a_dear_day_price_is_two_months(fx):
    options = [PriceOption(unit=MONTH, amount=D("7920")), PriceOption(unit=DAY, amount=D("600"))]
    pricing = rental_pricing(offer(options, month_hours=720), 1, fx, "CNY", interruptible=False)
    cover = cheapest_cover(pricing, D(45 * 24))
    # mix: 7920 + 15 x 600 = 16920; two months: 2 x 7920 = 15840 -> two months
    assert cover.blocks == {"month": 2}
    assert cover.cost == D("15840")


def test_month_length_follows_the_provider(fx):
    # 725 h: a 730 h month covers it alone (7920); a 720 h month leaves 5 h, which a day covers
    # (7920 + 330 = 8250 < 2 x 7920). A month of the wrong length fails one of the two.
    long_month = rental_pricing(offer(SEED_NODE, month_hours=730), 1, fx, "CNY", interruptible=False)
    short_month = rental_pricing(offer(SEED_NODE, month_hours=720), 1, fx, "CNY", interruptible=False)
    assert cheapest_cover(long_month, D(725)).blocks == {"month": 1}
    assert cheapest_cover(short_month, D(725)).blocks == {"month": 1, "day": 1}


# --------------------------------------------------------------------------------------------
# (4) granularity and minimum charge


@pytest.mark.parametrize(
    ("granularity", "minimum", "seconds", "expected"),
    [
        (1, 0, 3630, D("2.42")),  # per second: 3630 s x 2.40 / 3600 = 2.42
        (60, 0, 3630, D("2.44")),  # per minute: 61 min = 3660 s -> 3660 x 2.40 / 3600 = 2.44
        (3600, 0, 3630, D("4.80")),  # per hour: 2 h x 2.40 = 4.80
        (1, 60, 10, D("0.04")),  # 60 s minimum: 10 s billed as 60 s -> 60 x 2.40 / 3600 = 0.04
        (60, 300, 90, D("0.20")),  # per minute, 5 min minimum: 90 s -> 300 s -> 0.20
    ],
)
def test_granularity_and_minimum_charge(granularity, minimum, seconds, expected):
    pricing = RentalPricing(D("2.40"), granularity, minimum)
    assert cheapest_cover(pricing, D(seconds) / 3600).cost == expected


def test_per_second_metering_stays_exact():
    # one second of 1.00 per hour is 1/3600: not a terminating decimal, kept exact as a fraction
    cover = cheapest_cover(RentalPricing(D("1.00")), D(1) / 3600)
    assert cover.metered_seconds == 1
    assert cover.cost_exact * 3600 == 1


# --------------------------------------------------------------------------------------------
# (5) reserved term


def test_reserved_term_total(fx):
    options = [PriceOption(unit=HOUR, amount=D("3.00")),
               PriceOption(unit=TERM, amount=D("17520"), term_hours=8760, label="1-year")]
    pricing = rental_pricing(offer(options, currency="USD"), 1, fx, "USD", interruptible=False)
    assert pricing.block("1-year").hours == 8760
    # 6000 h: metered 6000 x 3.00 = 18000 > the term's total 17520 -> the term
    assert cheapest_cover(pricing, D(6000)).blocks == {"1-year": 1}
    # 5000 h: metered 15000 < 17520 -> metered
    assert cheapest_cover(pricing, D(5000)) .cost == D("15000")
    # 9000 h: the term covers 8760 h, 240 h metered at 3.00 = 720 -> 18240 < 9000 x 3 = 27000
    cover = cheapest_cover(pricing, D(9000))
    assert (cover.blocks, cover.metered_seconds, cover.cost) == ({"1-year": 1}, 240 * 3600, D("18240"))


# --------------------------------------------------------------------------------------------
# (6) currency


def test_cny_offer_converted_to_usd_with_the_rate_shown(fx):
    pricing = rental_pricing(offer(SEED_NODE), 1, fx, "USD", interruptible=False)
    # 7920 CNY / 7.2 CNY per USD = 1100 USD; 330 / 7.2 = 45.833333 (quantised to 1e-6)
    assert pricing.block("month").price == D("1100")
    assert pricing.block("day").price == D("45.833333")
    [rate] = fx.rates_used(["CNY", "USD"])
    assert (rate.currency, rate.per_usd, rate.as_of) == ("CNY", D("7.2"), "user override")


def test_cny_offer_with_an_ecb_rate():
    # The ECB's published rates of 2026-10-30: 1.1172 USD and 7.4326 CNY per EUR.
    ecb = EcbHistory.from_csv("Date,USD,CNY,\n2026-10-30,1.1172,7.4326,\n", "ECB test copy")
    fx = FxTable.load(histories=[ecb])
    pricing = rental_pricing(offer(SEED_NODE), 1, fx, "USD", interruptible=False)
    # 7.4326 / 1.1172 = 6.652882... -> 6.65288 CNY per USD; 7920 / 6.65288 = 1190.4618751... -> 1190.461875
    assert pricing.block("month").price == D("1190.461875")
    assert fx.rates_used(["CNY"])[0].as_of == "2026-10-30"


# --------------------------------------------------------------------------------------------
# rental_pricing


def test_rental_pricing_scales_by_nodes_and_keeps_the_cheapest_hourly(fx):
    options = [PriceOption(unit=HOUR, amount=D("2.5")), PriceOption(unit=HOUR, amount=D("2.1"), label="secure"),
               PriceOption(unit=WEEK, amount=D("300")), PriceOption(unit=HOUR, amount=D("0.9"), interruptible=True)]
    o = offer(options, currency="USD", billing_granularity_s=60, billing_minimum_s=300)
    p = rental_pricing(o, 2, fx, "USD", interruptible=False)
    assert p.metered_hourly == D("4.2")  # 2 nodes x 2.10, the spot 0.90 ignored
    assert (p.granularity_s, p.minimum_s) == (60, 300)
    assert [(b.label, b.hours, b.price) for b in p.blocks] == [("week", 168, D("600"))]
    spot = rental_pricing(o, 1, fx, "USD", interruptible=True)
    assert spot.metered_hourly == D("0.9") and spot.blocks == ()


def test_rental_pricing_without_an_option_of_that_kind_says_so(fx):
    with pytest.raises(ValueError, match="no interruptible"):
        rental_pricing(offer(SEED_NODE), 1, fx, "USD", interruptible=True)


def test_duplicate_unit_labels_are_made_unique(fx):
    options = [PriceOption(unit=MONTH, amount=D("7920")), PriceOption(unit=MONTH, amount=D("9900"))]
    p = rental_pricing(offer(options), 1, fx, "CNY", interruptible=False)
    assert [b.label for b in p.blocks] == ["month", "month-2"]


# --------------------------------------------------------------------------------------------
# Disk and transfers: free disk, unknown never 0


def terms(**kw) -> Terms:
    values = dict(provider="p", offer_id="o", currency="USD", on_demand=RentalPricing(D("2.00")), interruptible=None,
                  storage_gb_month=None, stopped_storage_gb_month=None, egress_gb=None, ingress_gb=None,
                  month_hours=730)
    values.update(kw)
    return Terms(**values)


def test_storage_is_prorated_by_the_providers_month():
    # 0.20 per GB-month x 500 GB x 336 h: / 730 h = 46.0274 -> 46.03; / 720 h = 46.6667 -> 46.67
    assert storage_line(terms(storage_gb_month=D("0.20")), D(500), 1, D(336)).cost == D("46.03")
    assert storage_line(terms(storage_gb_month=D("0.20"), month_hours=720), D(500), 1, D(336)).cost == D("46.67")


def test_disk_within_the_free_allowance_costs_nothing_and_only_the_excess_is_billed():
    # AutoDL: 50 GB included, 0.007 CNY/GB/day above it = 0.21 CNY/GB-month on its 720 h month.
    autodl = terms(currency="CNY", storage_gb_month=D("0.21"), month_hours=720, free_disk_gb=D(50))
    inside = storage_line(autodl, D(40), 1, D(240))
    assert inside.cost == 0 and "50 GB" in inside.note
    # 60 GB for 240 h: (60 - 50) x 0.21 x 240 / 720 = 0.70 CNY (not 60 x ... = 4.20)
    assert storage_line(autodl, D(60), 1, D(240)).cost == D("0.70")
    # per node: 2 nodes x 10 GB above the allowance = 1.40
    assert storage_line(autodl, D(60), 2, D(240)).cost == D("1.40")


def test_unknown_prices_stay_unknown_and_free_is_free():
    unknown = storage_line(terms(), D(100), 1, D(24))
    assert unknown.cost is None and unknown.unit_price is None
    assert transfer_line(terms(), D(100), "egress").cost is None
    free = transfer_line(terms(ingress_gb=D(0)), D(100), "ingress")
    assert free.cost == 0 and free.unit_price == 0  # 0 is free, not unknown
    assert transfer_line(terms(), D(0), "egress") is None  # nothing moved, nothing to bill


def test_offer_terms_convert_and_carry_the_stop_rules(fx):
    o = offer(SEED_NODE, storage_gb_month=D("0.72"), egress_gb=D("0.36"), stopped_bills="everything",
              stopped_max_days=15, free_disk_gb=50)
    t = offer_terms(o, fx, "USD")
    # 0.72 CNY / 7.2 = 0.10 USD per GB-month; no stopped price of its own -> the running one
    assert t.storage_gb_month == t.stopped_storage_gb_month == D("0.1")
    assert t.egress_gb == D("0.05") and t.ingress_gb is None
    assert (t.stopped_bills, t.stopped_max_hours, t.free_disk_gb) == ("everything", D(360), D(50))
    assert t.on_demand.block("month").price == D("1100") and t.interruptible is None


def test_transfer_hours():
    from rentopt.optimizer.models import Offer
    from rentopt.optimizer.stage_hours import transfer_hours

    # 500 GB = 4e12 bit at 1000 Mbit/s = 4000 s = 1.1111... h, rounded up
    assert transfer_hours(D(500), Offer.model_construct(net_down_mbps=1000.0), "import") == D("1.111112")
    # an export uploads: at 100 Mbit/s, 40,000 s = 11.1111... h; an unstated or zero speed is 1 Gbit/s
    assert transfer_hours(D(500), Offer.model_construct(net_down_mbps=1000.0, net_up_mbps=100.0), "export") == D("11.111112")
    assert transfer_hours(D(500), Offer.model_construct(net_up_mbps=None), "export") == D("1.111112")
    assert transfer_hours(D(500), Offer.model_construct(net_up_mbps=0.0), "export") == D("1.111112")


def test_round_money_for_display():
    assert round_money(D("2.425"), "USD") == D("2.43")
    assert round_money(D("2.4249999"), "CNY") == D("2.42")
    assert round_money(D("1234.5"), "JPY") == D("1235")


# --------------------------------------------------------------------------------------------
# Leases: one rental across validate -> gap -> train -> export


def use(t: Terms, uid: str, kind: str, hours, *, nodes: int = 1, disk="0", imp="0", out="0", out_hours="0",
        spot: bool = False) -> Use:
    return Use(uid, kind, t, spot, nodes, D(hours), D(disk), D(imp), D(out), D(out_hours))  # type: ignore[arg-type]


JYGPU = dict(provider="jygpu", offer_id="8x-rtx4090", currency="CNY", month_hours=720, stopped_bills="everything",
             on_demand=RentalPricing(None, 3600, 0, (Block("month", MONTH, 720, D("7920")),)))


def test_jygpu_ten_days_is_one_month_not_two():
    # Seed 004: 8 x RTX 4090 at 7,920 CNY per 720 h month, a 4 h validation then 240 h of training
    # on the same instance: 244 h fit in ONE month = 7920 CNY (the old quote bought two).
    node = terms(**JYGPU)
    v, t = use(node, "v", "validate", 4, disk="40", out="11"), use(node, "t", "train", 240, disk="42")
    bill = price_plan(Choice("v", "t", "continue"), {"v": v, "t": t}, D(0))
    assert bill.line_items()["compute"] == D("7920")
    # JYGPU publishes no disk price: the disk is an unknown charge, never 0.00
    assert bill.total == D("7920") and bill.unknown and all("storage" in u for u in bill.unknown)
    destroyed = price_plan(Choice("v", "t", "destroy"), {"v": v, "t": t}, D(0))
    assert destroyed.line_items()["compute"] == D("15840")  # two separate rentals: a month each


def test_a_gap_on_a_platform_that_bills_stopped_instances_in_full():
    # JYGPU bills a stopped node in full: 4 h + a 5-day (120 h) gap + 240 h = 364 h of rental,
    # still within one 720 h month -> 7920 CNY; destroying instead buys two months.
    node = terms(**JYGPU)
    v, t = use(node, "v", "validate", 4), use(node, "t", "train", 240)
    stop = price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, D(120))
    destroy = price_plan(Choice("v", "t", "destroy"), {"v": v, "t": t}, D(120))
    assert stop.total == D("7920") and destroy.total == D("15840")
    # Metered, the billed gap is running time: 2.00/h, 1 h + 10 h gap + 5 h = 16 h = 32.00,
    # where a platform that bills only the disk while stopped charges 1 h + 5 h = 12.00 of compute.
    full = terms(stopped_bills="everything", storage_gb_month=D("0.10"))
    v, t = use(full, "v", "validate", 1, disk="73"), use(full, "t", "train", 5, disk="73")
    bill = price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, D(10))
    assert bill.line_items()["compute"] == D("32.00")
    # and the disk bills at the running rate through the gap: 73 GB x 0.10 x 10 h / 730 h = 0.10
    assert bill.stage("idle").cost == D("20.00") + D("0.10")
    disk_only = terms(stopped_bills="storage", storage_gb_month=D("0.10"), stopped_storage_gb_month=D("0.05"))
    v, t = use(disk_only, "v", "validate", 1, disk="73"), use(disk_only, "t", "train", 5, disk="73")
    bill = price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, D(10))
    assert bill.line_items()["compute"] == D("12.00")
    assert bill.line_items()["storage_stopped"] == D("0.05")  # 73 x 0.05 x 10 / 730 = 0.05


def test_prepaid_time_carries_across_a_gap_when_the_instance_is_stopped():
    # Hourly 20.00 or 7920 per 720 h month; the instance is stopped (disk only) over a 5-day gap.
    # Separately: validation 4 h metered = 80, training 240 h: 240 x 20 = 4800 < 7920 -> 4880.
    # One month bought at validation lasts 4 + 120 + 240 = 364 h < 720 h -> 7920 > 4880: separate.
    # With training of 500 h: separate = 80 + min(500 x 20 = 10000, 7920) = 8000; one month from
    # validation spans 4 + 120 + 500 = 624 h <= 720 -> 7920 < 8000: the window wins.
    p = RentalPricing(D("20.00"), 1, 0, (Block("month", MONTH, 720, D("7920")),))
    node = terms(on_demand=p, currency="CNY", month_hours=720, stopped_bills="storage", stopped_storage_gb_month=D(0))
    short = price_plan(Choice("v", "t", "stop"), {"v": use(node, "v", "validate", 4), "t": use(node, "t", "train", 240)}, D(120))
    assert short.total == D("4880")
    long = price_plan(Choice("v", "t", "stop"), {"v": use(node, "v", "validate", 4), "t": use(node, "t", "train", 500)}, D(120))
    assert long.total == D("7920")
    assert long.stage("validate").lines[0].unit == "month" and long.stage("train").cost == 0


def test_autodl_releases_a_stopped_instance_after_15_days_so_a_20_day_gap_destroys():
    autodl = terms(provider="autodl", currency="CNY", month_hours=720, stopped_max_hours=D(15 * 24),
                   stopped_storage_gb_month=D("0.21"))
    v, t = use(autodl, "v", "validate", 4), use(autodl, "t", "train", 10)
    why = lease_refusal(v, t, D(20 * 24))
    assert why is not None and "15 days" in why and "20 days" in why
    assert lease_bounds(v, t, D(20 * 24)) is None
    with pytest.raises(ValueError, match="15 days"):
        price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, D(20 * 24))
    assert lease_refusal(v, t, D(10 * 24)) is None  # 10 days: stopping is allowed


def test_a_lease_never_outlasts_the_hosts_maximum_rental():
    host = terms(max_hours=D(100))
    v, t = use(host, "v", "validate", 4), use(host, "t", "train", 90)
    assert "at most 100 h" in lease_refusal(v, t, D(10))  # 4 + 10 + 90 = 104 h
    assert lease_refusal(v, t, D(5)) is None  # 99 h


def test_multi_node_training_continues_node_one_and_rents_the_others():
    # 2.00/h per node, 10 GB imported per node at 0.01/GB. Validation 1 h on node 1, then 3 nodes
    # train 10 h: node 1 = 11 h (no re-import), nodes 2-3 = 2 x 10 h + 2 x 10 GB ingress.
    # compute 11 x 2 + 20 x 2 = 62.00; ingress 0.10 (validation) + 0.20 (nodes 2-3) = 0.30
    node = terms(ingress_gb=D("0.01"), egress_gb=D(0), storage_gb_month=D(0))
    v = use(node, "v", "validate", 1, imp="10")
    t = use(node, "t", "train", 10, nodes=3, imp="10")
    bill = price_plan(Choice("v", "t", "continue"), {"v": v, "t": t}, D(0))
    assert bill.line_items()["compute"] == D("62.00")
    assert bill.line_items()["ingress"] == D("0.30")


def test_every_node_of_a_multi_node_run_pays_its_disk_compute_and_import():
    # 2 nodes x 73 h at 2.00/h = 292.00; disk 100 GB per node at 0.10/GB-month:
    # 2 x 100 x 0.10 x 73 / 730 = 2.00; import 30 GB per node at 0.01 = 0.60; export 20 GB once at
    # 0.05 = 1.00 -> 295.60
    node = terms(storage_gb_month=D("0.10"), ingress_gb=D("0.01"), egress_gb=D("0.05"))
    t = use(node, "t", "train", 73, nodes=2, disk="100", imp="30", out="20")
    bill = price_plan(Choice(None, "t", None), {"t": t}, D(0))
    items = bill.line_items()
    assert (items["compute"], items["storage_running"], items["ingress"], items["egress"]) == (
        D("292.00"), D("2.00"), D("0.60"), D("1.00"))
    assert bill.total == D("295.60")


def test_stop_versus_destroy_is_not_decided_on_an_unknown_price():
    # Stop keeps 500 GB for 14 days at 0.20/GB-month: 0.20 x 500 x 336 / 730 = 46.03, all known.
    # Destroy copies 500 GB out at an UNKNOWN egress price: "0.00 + unknown" must not win.
    node = terms(storage_gb_month=D("0.20"), stopped_storage_gb_month=D("0.20"), ingress_gb=D(0))
    v, t = use(node, "v", "validate", 1, disk="500", out="500"), use(node, "t", "train", 10, disk="500", imp="500")
    uses = {"v": v, "t": t}
    keep = price_plan(Choice("v", "t", "stop"), uses, D(336))
    destroy = price_plan(Choice("v", "t", "destroy"), uses, D(336))
    assert destroy.total < keep.total and destroy.unknown and not keep.unknown
    chosen = idle_choice(keep, destroy)
    assert chosen.choice.idle == "stop" and not chosen.unknown
    # and the other option is shown, with the price its unknown line would have to stay under:
    # destroy is cheaper only if 500 GB of egress cost < keep - destroy known totals
    assert chosen.alternative.idle == "destroy" and "egress" in chosen.alternative.unknown[0]
    room = (keep.total - destroy.total) / 500
    assert f"under {room.quantize(D('0.0001'), rounding='ROUND_FLOOR')} USD per GB" in chosen.alternative.break_even


def test_stop_versus_destroy_on_known_prices_takes_the_cheaper():
    # 14-day gap, 500 GB: stop 46.03 (as above); destroy = egress 500 x 0.09 = 45.00 plus ingress.
    node = terms(storage_gb_month=D("0.20"), stopped_storage_gb_month=D("0.20"), egress_gb=D("0.09"),
                 ingress_gb=D("0.01"))
    v, t = use(node, "v", "validate", 1, disk="500", out="500"), use(node, "t", "train", 10, disk="500", imp="500")
    keep = price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, D(336))
    destroy = price_plan(Choice("v", "t", "destroy"), {"v": v, "t": t}, D(336))
    # destroy: + 45.00 egress + 5.00 ingress = 50.00 > 46.03 stopped disk -> stop
    assert destroy.stage("idle").cost == D("45.00") and idle_choice(keep, destroy).choice.idle == "stop"
    free_in = terms(storage_gb_month=D("0.20"), stopped_storage_gb_month=D("0.20"), egress_gb=D("0.09"),
                    ingress_gb=D(0))
    v, t = use(free_in, "v", "validate", 1, disk="500", out="500"), use(free_in, "t", "train", 10, disk="500", imp="500")
    keep = price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, D(336))
    destroy = price_plan(Choice("v", "t", "destroy"), {"v": v, "t": t}, D(336))
    assert idle_choice(keep, destroy).choice.idle == "destroy"  # 45.00 < 46.03


def test_thirty_days_plus_copying_crosses_into_a_second_month():
    # 720 h of training + 0.5 h of export on a monthly-only 720 h offer = 2 months; the plan says
    # what finishing half an hour sooner would save (one month, 7920).
    month = RentalPricing(None, 3600, 0, (Block("month", MONTH, 720, D("7920")),))
    assert cheapest_cover(month, D("720.5")).blocks == {"month": 2}
    [note] = [n for n in cover_notes(month, D("720.5"), "CNY") if "new month" in n]
    assert "0.50 h" in note and "7,920.00 CNY" in note
    # 10 days of a month: the daily price that would beat it is 7920 / 10 = 792 per day
    assert any("a 10-day rental would save 7,920.00 CNY less 10 days at its daily price, so it is cheaper at under "
               "792.00 CNY per day" in n for n in cover_notes(month, D(240), "CNY"))


def test_bills_are_lines_rounded_to_the_minor_unit_and_totals_their_sum():
    # 1/3 of an hour at 1.00 = 0.3333... -> 0.33; a total is the sum of printed lines
    node = terms(on_demand=RentalPricing(D("1.00")), storage_gb_month=D("0.10"))
    t = use(node, "t", "train", D(1) / 3, disk="100")
    bill = price_plan(Choice(None, "t", None), {"t": t}, D(0))
    costs = [ln.cost for s in bill.stages for ln in s.lines]
    assert all(c == c.quantize(D("0.01")) for c in costs)
    assert bill.total == sum(costs) == D("0.33") + D("0.00")


def test_bounds_contain_the_exact_bill():
    p = RentalPricing(D("2.10"), 60, 300, (Block("day", DAY, 24, D("40")), Block("week", WEEK, 168, D("250"))))
    node = terms(on_demand=p, storage_gb_month=D("0.1"), egress_gb=D("0.05"), ingress_gb=D(0))
    for hours in ("0.1", "5", "23.9", "30", "200"):
        t = use(node, "t", "train", hours, disk="80", imp="30", out="20", nodes=2)
        exact = price_plan(Choice(None, "t", None), {"t": t}, D(0)).total
        b = use_bounds(t)
        assert b.lo <= exact <= b.hi, hours
        v = use(node, "v", "validate", "4", disk="60", imp="30", out="12")
        for gap in ("0", "12", "100"):
            lb = lease_bounds(v, t, D(gap))
            idle = "continue" if gap == "0" else "stop"
            lease = price_plan(Choice("v", "t", idle), {"v": v, "t": t}, D(gap)).total
            assert lb.lo <= lease <= lb.hi, (hours, gap)


def _compute_lines_of(bill) -> int:
    return sum(1 for s in bill.stages for ln in s.lines if ln.what == "compute")


# Hourly 2.10 billed by the minute with a 5-minute minimum, a day at 40, a week at 250; hourly
# 1.00 by the second (1/3 h = 0.3333... -> one line of 0.33); a month only.
_TIGHT_PRICINGS = (
    RentalPricing(D("2.10"), 60, 300, (Block("day", DAY, 24, D("40")), Block("week", WEEK, 168, D("250")))),
    RentalPricing(D("1.00")),
    RentalPricing(None, 3600, 0, (Block("month", MONTH, 720, D("7920")),)),
)


def test_bounds_are_the_exact_bill_open_only_by_the_rounding_of_its_compute_lines():
    # A bill's compute lines are each rounded half up to the cent: at most 0.005 each, and the
    # bounds allow 0.01 a line either side; the disk and transfer lines are exact. So the bounds
    # hold the exact bill and are at most 2 x 0.01 x (compute lines) wide -- a lease's metered
    # time may be split over its three sessions, two lines more.
    for pricing, hours, nodes in product(_TIGHT_PRICINGS, ("0.1", "1", "5", "23.9", "30", "200"), (1, 3)):
        node = terms(on_demand=pricing, storage_gb_month=D("0.1"), egress_gb=D("0.05"), ingress_gb=D(0))
        t = use(node, "t", "train", D(hours) / 3 if hours == "1" else hours, disk="80", imp="30", out="20",
                nodes=nodes)
        alone = price_plan(Choice(None, "t", None), {"t": t}, D(0))
        b = use_bounds(t)
        assert b.lo <= alone.total <= b.hi, (pricing, hours)
        assert b.hi - b.lo == D("0.02") * _compute_lines_of(alone), (pricing, hours)
        v = use(node, "v", "validate", "4", disk="60", imp="30", out="12")
        for gap in ("0", "12", "100"):
            lb = lease_bounds(v, t, D(gap))
            lease = price_plan(Choice("v", "t", "continue" if gap == "0" else "stop"), {"v": v, "t": t}, D(gap))
            assert lb.lo <= lease.total <= lb.hi, (pricing, hours, gap)
            assert lb.hi - lb.lo <= D("0.02") * (_compute_lines_of(lease) + 2), (pricing, hours, gap)


def test_one_third_of_an_hour_is_bounded_around_its_rounded_line():
    # 1/3 h at 1.00 by the second: 1200 s = 0.333333... -> the line bills 0.33; the bounds are
    # 0.3333 -/+ 0.01 (one line), which hold 0.33: bounds without the line's rounding would not
    t = use(terms(on_demand=RentalPricing(D("1.00"))), "t", "train", D(1) / 3)
    b = use_bounds(t)
    assert b.lo < D("0.33") < D("0.333333") < b.hi <= D("0.343334")


def test_a_lease_through_a_billed_gap_is_bounded_around_its_three_metered_lines():
    # 0.36/h by the second is 0.0001/s. Validation, a gap billed in full (JYGPU-style) and training
    # of 49 s each: three metered lines of 0.0049 -> 0.00 each, so the compute is 0.00 where
    # 147 s cost 0.0147 unrounded: the bounds allow three lines' rounding, not one
    node = terms(on_demand=RentalPricing(D("0.36")), stopped_bills="everything")
    seconds = D(49) / 3600
    v, t = use(node, "v", "validate", seconds), use(node, "t", "train", seconds)
    lease = price_plan(Choice("v", "t", "stop"), {"v": v, "t": t}, seconds)
    assert [ln.cost for s in lease.stages for ln in s.lines] == [D("0.00")] * 3 and lease.total == 0
    b = lease_bounds(v, t, seconds)
    assert b.lo <= 0 <= b.hi


def test_the_bounds_of_the_idle_choice_take_the_cheaper_option_when_both_are_fully_priced():
    keep, destroy = Bounds(D(10), D(12), False), Bounds(D(11), D(15), False)
    # billing keeps the cheaper of two fully priced options: at most 12, at least 10
    assert idle_bounds(keep, destroy) == Bounds(D(10), D(12), False)
    assert idle_bounds(destroy, keep) == Bounds(D(10), D(12), False)
    # with an unknown charge either may be kept (the fully priced one, even when dearer)
    assert idle_bounds(keep, Bounds(D(11), D(15), True)) == Bounds(D(10), D(15), True)
    assert idle_bounds(Bounds(D(10), D(12), True), destroy) == Bounds(D(10), D(15), True)


def test_the_idle_bounds_hold_the_idle_choice_of_real_bills():
    # keep vs destroy on real bills, with and without an unknown disk price while stopped
    for stopped in (D("0.05"), None):
        node = terms(on_demand=RentalPricing(D("2.10"), 60, 300, (Block("day", DAY, 24, D("40")),)),
                     storage_gb_month=D("0.1"), stopped_storage_gb_month=stopped, egress_gb=D("0.05"),
                     ingress_gb=D(0))
        v = use(node, "v", "validate", "4", disk="60", imp="30", out="12", out_hours="0.5")
        for hours, gap in product(("5", "30", "200"), ("12", "100")):
            t = use(node, "t", "train", hours, disk="80", imp="30", out="20")
            uses = {"v": v, "t": t}
            keep = price_plan(Choice("v", "t", "stop"), uses, D(gap))
            destroy = price_plan(Choice("v", "t", "destroy"), uses, D(gap))
            vb, tb = use_bounds(v), use_bounds(t)
            b = idle_bounds(lease_bounds(v, t, D(gap)), Bounds(vb.lo + tb.lo, vb.hi + tb.hi, vb.unknown or tb.unknown))
            assert b.lo <= idle_choice(keep, destroy).total <= b.hi, (stopped, hours, gap)


def test_a_plan_takes_the_bills_of_its_uses_alone_it_is_given(monkeypatch):
    node = terms(on_demand=RentalPricing(D("2.10"), 60, 300), storage_gb_month=D("0.1"), egress_gb=D("0.05"))
    v = use(node, "v", "validate", "4", disk="60", imp="30", out="12", out_hours="0.5")
    t = use(node, "t", "train", "30", disk="80", out="20")
    uses = {"v": v, "t": t}
    destroy = price_plan(Choice("v", "t", "destroy"), uses, D(12))
    given = {"v": billing.price_alone(v)}
    priced = []
    real = billing.price_alone
    monkeypatch.setattr(billing, "price_alone", lambda u: priced.append(u.id) or real(u))
    assert price_plan(Choice("v", "t", "destroy"), uses, D(12), given) == destroy
    assert priced == ["t"]  # only the use whose bill was not given is priced
    assert price_plan(Choice(None, "t", None), uses, D(0), {"t": real(t)}).total == real(t)[0].cost + \
        real(t)[1].cost
    assert priced == ["t"]


def _brute_window(pricing: RentalPricing, seconds: int, window: int) -> Fraction | None:
    """Cheapest blocks + metered tail with blocks lasting >= window (written independently)."""
    best = None
    ranges = [range(-(-max(seconds, 1) // (b.hours * 3600)) + 2) for b in pricing.blocks]
    for counts in product(*ranges):
        span = sum(n * b.hours * 3600 for n, b in zip(counts, pricing.blocks))
        if span < window:
            continue
        rest = seconds - span
        cost = sum((n * Fraction(b.price) for n, b in zip(counts, pricing.blocks)), Fraction(0))
        if rest > 0:
            if pricing.metered_hourly is None:
                continue
            g = pricing.granularity_s
            cost += Fraction(pricing.metered_hourly) * max(pricing.minimum_s, -(-rest // g) * g) / 3600
        best = cost if best is None else min(best, cost)
    return best


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.data())
def test_a_window_across_a_gap_matches_brute_force(data):
    pricing, hours = data.draw(cover_cases())
    seconds = math.ceil(hours * 3600)
    window = data.draw(st.integers(0, seconds))
    found = cover_in_units(pricing, seconds, window)
    expected = _brute_window(pricing, seconds, window)
    if expected is None:
        assert found is None
    else:
        assert Fraction(found[2], pricing.units.unit) == expected


# --------------------------------------------------------------------------------------------
# cheapest_cover is exact: a brute force over every count agrees


def _brute_cover(pricing: RentalPricing, hours: Decimal) -> Fraction:
    need = math.ceil(hours * 3600)
    best = None
    ranges = [range(math.ceil(need / (b.hours * 3600)) + 1) for b in pricing.blocks]
    for counts in product(*ranges):
        rest = need - sum(n * b.hours * 3600 for n, b in zip(counts, pricing.blocks))
        cost = sum((n * Fraction(b.price) for n, b in zip(counts, pricing.blocks)), Fraction(0))
        if rest > 0:
            if pricing.metered_hourly is None:
                continue
            g = pricing.granularity_s
            billed = max(pricing.minimum_s, -(-rest // g) * g)
            cost += Fraction(pricing.metered_hourly) * billed / 3600
        best = cost if best is None else min(best, cost)
    return best


@st.composite
def cover_cases(draw):
    hourly = draw(st.none() | st.integers(1, 5_000_000).map(lambda n: D(n).scaleb(-6)))
    lengths = draw(
        st.lists(st.sampled_from([2, 3, 5, 7, 24, 30]), min_size=0 if hourly else 1, max_size=3, unique=True)
    )
    def block_price(h: int) -> Decimal:
        if hourly and draw(st.booleans()):
            # close to metering the same hours, where granule rounding decides
            return (hourly * h * draw(st.integers(900, 1600)) / 1000).quantize(D("0.000001")) or D("0.000001")
        return draw(st.integers(1, 200_000_000).map(lambda n: D(n).scaleb(-6)))

    blocks = tuple(Block(f"b{h}", TERM, h, block_price(h)) for h in lengths)
    pricing = RentalPricing(hourly, draw(st.sampled_from([1, 7, 60, 900, 1000, 3600, 5400])),
                            draw(st.sampled_from([0, 59, 600, 3600, 9000])), blocks)
    return pricing, draw(st.integers(1, 9000).map(lambda n: D(n).scaleb(-2)))  # 0.01 .. 90 h


def _one_block(hourly: str, granularity: int, minimum: int, hours: int, price: str) -> RentalPricing:
    return RentalPricing(D(hourly), granularity, minimum, (Block("x", TERM, hours, D(price)),))


# Found by a random search against the brute force: a block priced just above metering its own
# length, with granules that do not divide it, so the best count sits one period from either end.
@example((_one_block("3.736179", 5400, 600, 5, "21.184135"), D("16.75")))
@example((_one_block("2.899946", 5400, 59, 2, "6.519079"), D("47.48")))
@example((_one_block("2.690445", 1000, 59, 2, "5.240987"), D("24.14")))
@example((_one_block("0.202591", 5400, 600, 2, "0.369931"), D("48.57")))
@settings(max_examples=400, deadline=None, derandomize=True)
@given(cover_cases())
def test_cheapest_cover_matches_brute_force(case):
    pricing, hours = case
    cover = cheapest_cover(pricing, hours)
    assert cover.cost_exact == _brute_cover(pricing, hours)
    # and the cover it reports is a real cover at that price
    covered = sum(n * pricing.block(label).hours * 3600 for label, n in cover.blocks.items())
    assert covered + cover.metered_seconds >= math.ceil(hours * 3600)




# --------------------------------------------------------------------------------------------
# The first pass's rough bounds (floats, from raw offer prices) contain the exact bills


@st.composite
def priced_offers(draw) -> Offer:
    cny = draw(st.booleans())
    scale = D(7) if cny else D(1)
    money = lambda lo, hi: draw(st.integers(lo * 100, hi * 100)).__truediv__(100)  # noqa: E731
    hourly = draw(st.none() | st.just(None) | st.integers(5, 900).map(lambda n: D(n) / 100))
    options = [PriceOption(unit=HOUR, amount=hourly * scale)] if hourly is not None else []
    for unit in draw(st.lists(st.sampled_from([DAY, WEEK, MONTH]), unique=True, min_size=0 if options else 1,
                              max_size=3)):
        options.append(PriceOption(unit=unit, amount=D(str(money(3, 3000))) * scale))
    price = lambda: draw(st.none() | st.sampled_from([D(0), D("0.04"), D("0.25")]))  # noqa: E731
    return offer(options, currency="CNY" if cny else "USD", billing_granularity_s=draw(st.sampled_from([1, 60, 3600])),
                 billing_minimum_s=draw(st.sampled_from([0, 0, 600, 3600])), month_hours=draw(st.sampled_from([720, 730])),
                 storage_gb_month=price(), storage_stopped_gb_month=price(), egress_gb=price(), ingress_gb=price(),
                 stopped_bills=draw(st.sampled_from(["storage", "everything", "nothing"])),
                 stopped_max_days=draw(st.sampled_from([None, 1.0, 10.0])),
                 free_disk_gb=draw(st.sampled_from([0.0, 20.0, 50.0])),
                 max_duration_hours=draw(st.sampled_from([None, 200.0])))


hours_of = st.integers(1, 40000).map(lambda n: D(n) / 100)  # 0.01 .. 400 h
gb_of = st.sampled_from([D(0), D(15), D(40), D(300)])


def _rough(o: Offer, fx: FxTable):  # noqa: ANN202
    from rentopt.optimizer.first_pass import PriceColumns
    from rentopt.optimizer.offer_table import OfferTable

    table = OfferTable.from_offers([o])
    factor = np.array([float(fx.convert(D(1), o.currency, "USD", on=o.fetched_at))])
    return PriceColumns(table, 0, factor, "USD")


@settings(max_examples=int(__import__("os").environ.get("ROUGH_EXAMPLES", "300")), deadline=None, derandomize=True)
@given(priced_offers(), st.data())
def test_rough_bounds_contain_the_exact_bills(o, data):
    from rentopt.optimizer.billing import price_alone
    from rentopt.optimizer.first_pass import alone_bounds_arrays, lease_bounds_arrays

    fx7 = FxTable.load(overrides={"CNY": D(7)})
    exact_terms = offer_terms(o, fx7, "USD")
    p = _rough(o, fx7)
    row = np.array([0])
    v_hours, v_disk, v_imp, v_out = data.draw(hours_of), data.draw(gb_of), data.draw(gb_of), data.draw(gb_of)
    v_out_hours = data.draw(st.sampled_from([D(0), D("0.5")]))
    nodes = data.draw(st.sampled_from([1, 2, 3]))
    t_hours, t_disk, t_imp, t_out = data.draw(hours_of), data.draw(gb_of), data.draw(gb_of), data.draw(gb_of)
    ve = Use("v", "validate", exact_terms, False, 1, v_hours, v_disk, v_imp, v_out, v_out_hours)
    te = Use("t", "train", exact_terms, False, nodes, t_hours, t_disk, t_imp, t_out)
    for exact, args in ((ve, ("validate", np.array([1]), np.array([float(v_hours)]), float(v_disk), float(v_imp),
                              float(v_out), np.array([float(v_out_hours)]))),
                        (te, ("train", np.array([nodes]), np.array([float(t_hours)]), float(t_disk), float(t_imp),
                              float(t_out)))):
        total = sum((s.cost for s in price_alone(exact)), D(0))
        lo, hi, _ = alone_bounds_arrays(p, row, *args)
        assert lo[0] <= total <= hi[0], (exact.kind, lo[0], total, hi[0])
    gap = data.draw(st.sampled_from([D(0), D(5), D(48), D(500)]))
    # the lease's quantities are the validation's and the training's (same disk, import, export)
    te = Use("t", "train", exact_terms, False, nodes, t_hours, t_disk, v_imp, t_out)
    refused = lease_refusal(ve, te, gap)
    allowed, lo, hi, _ = lease_bounds_arrays(p, row, np.array([float(v_hours)]), np.array([float(t_hours)]),
                                             np.array([nodes]), float(gap), float(v_disk), float(t_disk),
                                             float(v_imp), float(t_out))
    if not allowed[0]:
        assert refused is not None  # the rough pass only refuses what the exact rules refuse
    if refused is None:
        lease = price_plan(Choice("v", "t", "continue" if gap == 0 else "stop"), {"v": ve, "t": te}, gap).total
        assert allowed[0] and lo[0] <= lease <= hi[0], (lo[0], lease, hi[0])


@settings(max_examples=300, deadline=None, derandomize=True)
@given(priced_offers(), hours_of, st.sampled_from([D(0), D("0.5")]))
def test_the_alone_floor_never_exceeds_the_exact_compute_and_is_it_for_a_metered_offer(o, hours, out_hours):
    """`PriceColumns.alone_floor` (the first pass's bound on a validation on its own) against
    the exact bill of the same run with nothing but compute in it (no disk, no transfers)."""
    from rentopt.optimizer.billing import price_alone

    fx7 = FxTable.load(overrides={"CNY": D(7)})
    p = _rough(o, fx7)
    run = Use("v", "validate", offer_terms(o, fx7, "USD"), False, 1, hours, D(0), D(0), D(0), out_hours)
    exact = sum((s.cost for s in price_alone(run)), D(0))
    floor = p.alone_floor(np.array([0]), np.array([float(hours + out_hours)]))[0]
    assert floor <= float(exact) + 0.01, (floor, exact)  # the bill is rounded to cents
    if all(option.unit == HOUR for option in o.price_options):
        assert abs(floor - float(exact)) <= 0.01, (floor, exact)


def test_the_alone_floor_of_a_short_run_is_its_metered_price_or_one_block_not_a_months_rate():
    """Worked by hand: 1.00/h billed by the hour, 100.00 a month (730 h). 4.1 h alone bills 5 h,
    5.00 (a month is dearer); the cheapest rate, 0.137/h, would say 0.56. With a 3.00 day as well,
    one day covers it: 3.00."""
    fx = FxTable.load()
    month = offer([PriceOption(unit=HOUR, amount=D("1.00")), PriceOption(unit=MONTH, amount=D("100"))],
                  currency="USD", billing_granularity_s=3600, month_hours=730)
    assert math.isclose(_rough(month, fx).alone_floor(np.array([0]), np.array([4.1]))[0], 5.00)
    day = offer([PriceOption(unit=HOUR, amount=D("1.00")), PriceOption(unit=DAY, amount=D("3.00")),
                 PriceOption(unit=MONTH, amount=D("100"))], currency="USD", billing_granularity_s=3600, month_hours=730)
    assert math.isclose(_rough(day, fx).alone_floor(np.array([0]), np.array([4.1]))[0], 3.00)


def test_rough_lease_bounds_allow_a_mixed_cover_below_any_single_option():
    # 2.00/h or a 30.00 day: 4 h + 30 h on one instance = 34 h = a day + 10 h = 50.00, while the
    # best single option alone is 2 days = 60.00. The rough lower bound must not exceed 50.
    from rentopt.optimizer.first_pass import lease_bounds_arrays

    fx = FxTable.load()
    o = offer([PriceOption(unit=HOUR, amount=D("2.00")), PriceOption(unit=DAY, amount=D("30"))], currency="USD")
    t = offer_terms(o, fx, "USD")
    v, tr = use(t, "v", "validate", 4), use(t, "t", "train", 30)
    exact = price_plan(Choice("v", "t", "continue"), {"v": v, "t": tr}, D(0)).total
    assert exact == D("50.00")
    allowed, lo, hi, _ = lease_bounds_arrays(_rough(o, fx), np.array([0]), np.array([4.0]), np.array([30.0]),
                                             np.array([1]), 0.0, 0.0, 0.0, 0.0, 0.0)
    assert allowed[0] and lo[0] <= exact <= hi[0]


def test_rough_bounds_of_a_block_priced_run_are_tight():
    """1.00/h, 20.40 a day, 126.00 a week, 438.00 a month, 240 h (worked by hand): the cheapest
    cover is a week and 3 days, 126.00 + 61.20 = 187.20 (10 days 204.00, 2 weeks 252.00, a week
    and 72 h metered 198.00, a month 438.00). The bounds must hold it closely: upper the cover
    itself, lower within 3 % (a bound that counts every hour at the month's rate, 144.00, keeps
    offers the exact pass then prices for nothing)."""
    from rentopt.optimizer.billing import price_alone
    from rentopt.optimizer.first_pass import alone_bounds_arrays

    fx = FxTable.load()
    o = offer([PriceOption(unit=HOUR, amount=D("1.00")), PriceOption(unit=DAY, amount=D("20.40")),
               PriceOption(unit=WEEK, amount=D("126.00")), PriceOption(unit=MONTH, amount=D("438.00"))],
              currency="USD", storage_gb_month=D(0), egress_gb=D(0), ingress_gb=D(0))
    t = offer_terms(o, fx, "USD")
    exact = sum((s.cost for s in price_alone(use(t, "t", "train", 240))), D(0))
    assert exact == D("187.20")
    lo, hi, _ = alone_bounds_arrays(_rough(o, fx), np.array([0]), "train", np.array([1]), np.array([240.0]),
                                    0.0, 0.0, 0.0)
    assert 187.20 <= hi[0] <= 187.20 + 0.1 and 187.20 * 0.97 <= lo[0] <= 187.20


def test_rough_seconds_are_not_pushed_a_granule_up_by_float_error():
    """0.05 h + 0.5 h of copy-out at 4.82/h by the minute: 33 minutes, 2.65 (1980 s; float
    arithmetic makes it 1980.0000000000002 s, and a ceiling of that bills a 34th minute, 2.73)."""
    from rentopt.optimizer.first_pass import alone_bounds_arrays

    fx = FxTable.load()
    o = offer([PriceOption(unit=HOUR, amount=D("4.82"))], currency="USD", billing_granularity_s=60,
              storage_gb_month=D(0), egress_gb=D(0), ingress_gb=D(0))
    lo, hi, _ = alone_bounds_arrays(_rough(o, fx), np.array([0]), "validate", np.array([1]), np.array([0.05]),
                                    0.0, 0.0, 0.0, np.array([0.5]))
    assert lo[0] <= 2.65 <= hi[0]
