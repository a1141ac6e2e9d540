"""Billing: bills worked out by hand (the arithmetic is in the comments), and the oracle's rules."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from decimal import Decimal
from fractions import Fraction
from itertools import product

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rentopt.optimizer.billing import (
    Block,
    Candidate,
    Decision,
    InvalidDecision,
    PlanInstance,
    RentalPricing,
    cheapest_cover,
    cover_alternatives,
    explain_cover,
    offer_rates,
    plan_cost,
    rental_pricing,
    round_money,
    storage_cost,
    transfer_cost,
    transfer_hours,
)
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.optimizer.solver import solve

D = Decimal
DAY, WEEK, MONTH, TERM, HOUR = PriceUnit.DAY, PriceUnit.WEEK, PriceUnit.MONTH, PriceUnit.TERM, PriceUnit.HOUR


def offer(options: list[PriceOption], currency: str = "CNY", **kw) -> Offer:
    fields = dict(
        provider="jygpu", offer_id="8x4090", gpu="RTX-4090", gpu_raw="RTX 4090", gpus=8, gpu_memory_gb=24,
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
    # With a 730 h month, 31 days = 744 h leave 14 h after one month; a day block covers them:
    # 7920 + 330 = 8250 < 2 x 7920.
    pricing = rental_pricing(offer(SEED_NODE, month_hours=730), 1, fx, "CNY", interruptible=False)
    assert cheapest_cover(pricing, D(31 * 24)).blocks == {"month": 1, "day": 1}


# --------------------------------------------------------------------------------------------
# (3) the idle gap: stop vs destroy


def _gap_instance(ingress_per_gb: Decimal) -> tuple[PlanInstance, Decimal, Decimal]:
    """Validate and train on the same offer with a 14-day gap and 500 GB of checkpoints."""
    gb, gap_hours, month_hours = D(500), D(14 * 24), 730
    stopped = storage_cost(D("0.20"), gb, gap_hours, month_hours).cost  # RunPod's stopped volume rate
    egress = transfer_cost(D("0.09"), gb).cost
    ingress = transfer_cost(ingress_per_gb, gb).cost
    pricing = RentalPricing(D("2.00"))
    v = Candidate("v", "validate", "p", "o1", "A100", 1, 1, "single", D(1), pricing,
                  destroy_egress=egress, stop_storage=stopped)
    t = Candidate("t", "train", "p", "o1", "A100", 1, 1, "single", D(10), pricing, ingress=ingress)
    inst = PlanInstance([v], [t], idle_hours=gap_hours, currency="USD")
    return inst, stopped, egress + ingress


def _gap_decision(idle: str) -> Decision:
    return Decision("v", "t", idle, {}, {"v": 3600, "t": 36000})  # type: ignore[arg-type]


def test_fourteen_day_gap_prices_stop_and_destroy():
    inst, stop, destroy = _gap_instance(D("0.01"))
    # stop: 0.20 $/GB-month x 500 GB x 336 h / 730 h = 33600 / 730 = 46.027397 (to 1e-6)
    assert stop == D("46.027397")
    # destroy: egress 500 x 0.09 = 45.00, ingress 500 x 0.01 = 5.00 -> 50.00
    assert destroy == D("50")
    by_stop = plan_cost(inst, _gap_decision("stop"))
    by_destroy = plan_cost(inst, _gap_decision("destroy"))
    # compute: validate 1 h x 2.00 + train 10 h x 2.00 = 22.00 either way
    assert by_stop.line_items.compute == by_destroy.line_items.compute == D("22")
    assert by_stop.line_items.storage_stopped == D("46.027397") and by_stop.line_items.ingress == 0
    assert by_destroy.line_items.egress == D("45") and by_destroy.line_items.ingress == D("5")
    assert by_stop.total == D("68.027397") and by_destroy.total == D("72")
    assert solve(inst)[0].idle == "stop"  # 46.03 < 50.00


def test_fourteen_day_gap_destroys_when_transfers_are_cheaper():
    inst, stop, destroy = _gap_instance(D(0))  # free ingress: destroy = 45.00 < stop 46.03
    assert destroy == D("45") < stop
    assert solve(inst)[0].idle == "destroy"
    assert plan_cost(inst, _gap_decision("destroy")).total == D("67")  # 22 + 45


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


def test_cny_offer_with_the_bundled_rate():
    fx = FxTable.load()
    pricing = rental_pricing(offer(SEED_NODE), 1, fx, "USD", interruptible=False)
    # 7920 / 7.2790 = 1088.0615469... -> 1088.061547
    assert pricing.block("month").price == D("1088.061547")
    assert fx.rates_used(["CNY"])[0].as_of == "2025-02-28"


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
# storage and transfer


def test_unknown_prices_cost_nothing_but_say_so():
    running = storage_cost(None, D(100), D(24), 730, what="running storage")
    assert running.cost == 0 and running.note == "running storage price unknown: not included in the total"
    assert transfer_cost(None, D(100), "egress").note == "egress price unknown: not included in the total"
    free = transfer_cost(D(0), D(100), "ingress")
    assert free.cost == 0 and free.note is None  # 0 is free, not unknown


def test_offer_rates_convert_and_fall_back_to_the_running_disk_price(fx):
    o = offer(SEED_NODE, storage_gb_month=D("0.72"), egress_gb=D("0.36"))
    rates = offer_rates(o, fx, "USD")
    # 0.72 CNY / 7.2 = 0.10 USD per GB-month; stopped price unknown -> the running one
    assert rates.storage_gb_month == rates.storage_stopped_gb_month == D("0.1")
    assert rates.egress_gb == D("0.05") and rates.ingress_gb is None


def test_transfer_hours():
    # 500 GB = 4e12 bit at 1000 Mbit/s = 4000 s = 1.1111... h, rounded up
    assert transfer_hours(D(500), 1000) == D("1.111112")
    assert transfer_hours(D(500), None) is None and transfer_hours(D(500), 0) is None


def test_round_money_for_display():
    assert round_money(D("2.425"), "USD") == D("2.43")
    assert round_money(D("2.4249999"), "CNY") == D("2.42")
    assert round_money(D("1234.5"), "JPY") == D("1235")


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
# plan_cost rejects what the rules forbid


def _instance(**kw) -> PlanInstance:
    day = Block("day", DAY, 24, D("100"))
    p = RentalPricing(D("5"), 60, 600, (day,))
    v = Candidate("v", "validate", "a", "o1", "g", 1, 1, "single", D(2), p, destroy_egress=D(3), stop_storage=D(1))
    t = Candidate("t", "train", "a", "o1", "g", 1, 1, "single", D(30), p, ingress=D(4), egress=D(6))
    t2 = Candidate("t2", "train", "b", "o2", "g", 1, 1, "single", D(30), p, ingress=D(4))
    return PlanInstance([v], [t, t2], **({"idle_hours": D(10)} | kw))


GOOD = Decision("v", "t", "stop", {"t": {"day": 1}}, {"v": 7200, "t": 6 * 3600})


def test_a_good_decision_is_priced_line_by_line():
    cost = plan_cost(_instance(), GOOD)
    # validate: 2 h x 5 = 10; gap (stop): 1; train: 1 day 100 + 6 h x 5 = 30 -> 130, no ingress; export 6
    assert [(s.kind, s.cost) for s in cost.stages] == [("validate", 10), ("idle", 1), ("train", 130), ("export", 6)]
    assert cost.total == D("147")
    assert cost.line_items.compute == D("140") and cost.line_items.storage_stopped == D("1")
    assert cost.wall_hours == D("42")  # 2 + 10 + 30
    train_units = [(line.unit, line.count, line.cost) for line in cost.stage("train").lines]
    assert train_units == [("day", 1, D("100")), ("hour", 6, D("30"))]


@pytest.mark.parametrize(
    ("decision", "rule"),
    [
        (Decision("v", "nope", "stop", {}, {}), "ids"),
        (Decision(None, "t", None, {"t": {"day": 2}}, {}), "ids"),  # validation was asked for
        (Decision("v", "t", "stop", {"x": {"day": 2}}, {"v": 7200}), "ids"),  # billing for an unchosen id
        (Decision("v", "t2", "stop", {"t2": {"day": 2}}, {"v": 7200}), "idle"),  # stop across offers
        (Decision("v", "t", None, {"t": {"day": 2}}, {"v": 7200}), "idle"),
        (Decision("v", "t", "stop", {"t": {"day": 1}}, {"v": 7200}), "cover"),  # 24 h of 30
        (Decision("v", "t", "stop", {"t": {"week": 1}}, {"v": 7200}), "cover"),  # no such option
        (Decision("v", "t", "stop", {"t": {"day": -1}}, {"v": 7200}), "cover"),
        (Decision("v", "t", "stop", {"t": {"day": 2}}, {"v": 7230}), "cover"),  # not whole minutes
        (Decision("v", "t", "stop", {"t": {"day": 2}}, {"v": 120}), "cover"),  # under the 600 s minimum
    ],
)
def test_decisions_that_break_a_rule_are_rejected(decision, rule):
    with pytest.raises(InvalidDecision) as err:
        plan_cost(_instance(), decision)
    assert err.value.rule == rule


def test_deadline_and_budget_are_enforced_by_the_oracle():
    with pytest.raises(InvalidDecision, match="past the deadline") as err:
        plan_cost(_instance(deadline_hours=D(41)), GOOD)  # needs 42 h
    assert err.value.rule == "deadline"
    assert plan_cost(_instance(deadline_hours=D(42)), GOOD).total == D("147")
    with pytest.raises(InvalidDecision, match="over the budget") as err:
        plan_cost(_instance(budget=D("146.99")), GOOD)
    assert err.value.rule == "budget"
    assert plan_cost(_instance(budget=D(147)), GOOD).total == D("147")


def test_minimum_charge_that_is_not_whole_granules_can_be_billed():
    # 10 min granules, 15 min minimum: 60 s of use is billed as the 900 s minimum
    p = RentalPricing(D("6"), 600, 900)
    t = Candidate("t", "train", "a", "o", "g", 1, 1, "single", D(60) / 3600, p)
    inst = PlanInstance([], [t])
    assert plan_cost(inst, Decision(None, "t", None, {}, {"t": 900})).total == D("1.5")  # 900 x 6 / 3600
    with pytest.raises(InvalidDecision):
        plan_cost(inst, Decision(None, "t", None, {}, {"t": 600}))  # below the minimum


def test_instances_reject_inconsistent_candidates():
    p = RentalPricing(D(1))
    t = Candidate("x", "train", "a", "o", "g", 1, 1, "single", D(1), p)
    with pytest.raises(ValueError, match="unique"):
        PlanInstance([Candidate("x", "validate", "a", "o", "g", 1, 1, "single", D(1), p)], [t])
    with pytest.raises(ValueError, match="train candidate in the validate list"):
        PlanInstance([t], [])
    with pytest.raises(ValueError, match="must not be negative"):
        Candidate("y", "train", "a", "o", "g", 1, 1, "single", D(1), p, ingress=D(-1))
    with pytest.raises(ValueError, match="hourly price or at least one prepaid block"):
        RentalPricing(None)


def test_prices_too_small_for_the_quote_currency_are_refused(fx):
    # 0.0000001 USD a day is 0 at 1e-6 of a USD: it would read as free, so it is refused
    tiny = offer([PriceOption(unit=DAY, amount=D("0.0000001"))], currency="USD")
    with pytest.raises(ValueError, match="every price rounds to 0 USD"):
        rental_pricing(tiny, 1, fx, "USD", interruptible=False)
