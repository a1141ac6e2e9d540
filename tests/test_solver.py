"""The CP-SAT plan solver: one tiny feasible / infeasible / exact-objective case per rule."""

from __future__ import annotations

from decimal import Decimal

import pytest

from rentopt.optimizer.billing import Block, Candidate, PlanInstance, RentalPricing, plan_cost
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.models import PriceUnit
from rentopt.optimizer.solver import prune, solve

D = Decimal


def cand(cid: str, stage: str, hours, *, provider: str = "p", offer: str | None = None, gpu: str = "A100",
         hourly: str | None = "1", blocks: tuple[Block, ...] = (), granularity: int = 1, minimum: int = 0,
         **money) -> Candidate:
    pricing = RentalPricing(D(hourly) if hourly is not None else None, granularity, minimum, blocks)
    return Candidate(
        cid, stage, provider, offer or f"offer-{cid}", gpu, 1, 1, "single", D(hours), pricing,  # type: ignore[arg-type]
        **{k: D(v) for k, v in money.items()},
    )


def train(cid, hours, **kw) -> Candidate:
    return cand(cid, "train", hours, **kw)


def validate(cid, hours, **kw) -> Candidate:
    return cand(cid, "validate", hours, **kw)


def best_total(inst: PlanInstance) -> Decimal:
    return plan_cost(inst, solve(inst, top_k=1)[0]).total


# --------------------------------------------------------------------------------------------
# stage choice and cover


def test_picks_the_cheapest_training_offer():
    inst = PlanInstance([], [train("slow", 10, hourly="2"), train("fast", 4, hourly="4.5")])
    [first] = solve(inst, top_k=2)  # one (provider, GPU) group: one plan
    assert first.train_id == "fast"  # 4 h x 4.50 = 18 < 10 h x 2 = 20
    assert best_total(inst) == D(18)
    assert first.validate_id is None and first.idle is None and first.status == "OPTIMAL"


def test_cover_mixes_a_month_and_days_like_cheapest_cover():
    month = Block("month", PriceUnit.MONTH, 720, D("7920"))
    day = Block("day", PriceUnit.DAY, 24, D("330"))
    inst = PlanInstance([], [train("t", 45 * 24, hourly=None, blocks=(month, day))], currency="CNY")
    [decision] = solve(inst, top_k=1)
    # one month + 15 days = 7920 + 4950 = 12870 < two months 15840
    assert decision.blocks == {"t": {"month": 1, "day": 15}}
    assert best_total(inst) == D(12870)


def test_metered_minimum_charge_is_billed():
    # 10 s of use with a 60 s minimum: billed 60 s at 3.60 / h = 0.06
    inst = PlanInstance([], [train("t", D(10) / 3600, hourly="3.6", minimum=60)])
    [decision] = solve(inst, top_k=1)
    assert decision.metered_seconds == {"t": 60}
    assert best_total(inst) == D("0.06")


def test_a_block_beats_a_metered_minimum():
    # 0.1 h: metered is billed the 1 h minimum = 1.00; a 1 h block at 0.50 is cheaper
    one_hour = Block("hour-pack", PriceUnit.TERM, 1, D("0.5"))
    inst = PlanInstance([], [train("t", D("0.1"), hourly="1", minimum=3600, blocks=(one_hour,))])
    [decision] = solve(inst, top_k=1)
    assert decision.blocks == {"t": {"hour-pack": 1}} and decision.metered_seconds == {"t": 0}
    assert best_total(inst) == D("0.5")


def test_granules_round_up():
    # 1 h 30 s at per-hour granularity is billed 2 h: 2 x 1.50 = 3.00
    inst = PlanInstance([], [train("t", D(3630) / 3600, hourly="1.5", granularity=3600)])
    assert solve(inst, top_k=1)[0].metered_seconds == {"t": 7200}
    assert best_total(inst) == D(3)


# --------------------------------------------------------------------------------------------
# idle gap


def _gap(stop_storage: str, destroy_egress: str, ingress: str, same_offer: bool = True) -> PlanInstance:
    v = validate("v", 1, offer="o1", destroy_egress=destroy_egress, stop_storage=stop_storage)
    t = train("t", 10, offer="o1" if same_offer else "o2", ingress=ingress)
    return PlanInstance([v], [t], idle_hours=D(48))


def test_stop_when_keeping_the_disk_is_cheaper():
    inst = _gap(stop_storage="3", destroy_egress="5", ingress="2")
    decision = solve(inst, top_k=1)[0]
    # stop: 1 + 3 + 10 = 14; destroy: 1 + 5 + 10 + 2 = 18
    assert decision.idle == "stop"
    assert best_total(inst) == D(14)


def test_destroy_when_moving_the_data_is_cheaper():
    inst = _gap(stop_storage="8", destroy_egress="5", ingress="2")
    assert solve(inst, top_k=1)[0].idle == "destroy"
    assert best_total(inst) == D(18)  # 1 + 5 + 10 + 2 < 1 + 8 + 10


def test_different_offers_must_destroy():
    inst = _gap(stop_storage="0", destroy_egress="5", ingress="2", same_offer=False)
    assert solve(inst, top_k=1)[0].idle == "destroy"
    assert best_total(inst) == D(18)  # stop would have been 11, but the disk is on another offer


def test_the_stop_discount_can_make_a_dearer_offer_win():
    # t_far is cheaper on its own (10 + 1 = 11) than t_near (10.5 + 4 = 14.5), but t_near shares
    # the validation's offer: stop 0.5 and no ingress -> 1 + 0.5 + 10.5 = 12 < 1 + 6 + 11 = 18
    v = validate("v", 1, offer="near", destroy_egress="6", stop_storage="0.5")
    t_near = train("t_near", 10, offer="near", hourly="1.05", ingress="4")
    t_far = train("t_far", 10, offer="far", ingress="1")
    inst = PlanInstance([v], [t_near, t_far], idle_hours=D(24))
    kept = prune(inst, top_k=1)
    assert {x.c.id for x in kept.train} >= {"t_near"}
    decision = solve(inst, top_k=1)[0]
    assert (decision.train_id, decision.idle) == ("t_near", "stop")
    assert best_total(inst) == D(12)


def test_a_validation_kept_for_its_stop_discount():
    # v_far is the cheaper validation on the destroy path (1 + 0 = 1 vs 1 + 6 = 7) and no slower,
    # but v_near can stop next to the only training offer: 1 + 0.5 + 10 = 11.5 < 1 + 0 + 10 + 9 = 20
    v_far = validate("v_far", 1, offer="far", destroy_egress="0", stop_storage="0")
    v_near = validate("v_near", 2, offer="near", destroy_egress="6", stop_storage="0.5")
    t = train("t", 10, offer="near", ingress="9")
    inst = PlanInstance([v_far, v_near], [t], idle_hours=D(0))
    assert "v_near" in {x.c.id for x in prune(inst, top_k=1).validate}
    assert solve(inst, top_k=1)[0].validate_id == "v_near"
    assert best_total(inst) == D("12.5")  # 2 + 0.5 + 10


def test_without_validation_there_is_no_idle_and_ingress_is_paid():
    inst = PlanInstance([], [train("t", 10, ingress="2")], idle_hours=D(100))
    decision = solve(inst, top_k=1)[0]
    assert decision.idle is None and decision.validate_id is None
    assert best_total(inst) == D(12)


# --------------------------------------------------------------------------------------------
# deadline


def test_deadline_picks_the_faster_dearer_offer():
    slow, fast = train("slow", 100, hourly="1"), train("fast", 40, hourly="3")
    assert solve(PlanInstance([], [slow, fast]), top_k=1)[0].train_id == "slow"  # 100 < 120
    inst = PlanInstance([], [slow, fast], deadline_hours=D(99))
    assert solve(inst, top_k=1)[0].train_id == "fast"
    assert best_total(inst) == D(120)


def test_deadline_counts_validation_and_idle_and_is_inclusive():
    v = validate("v", 2)
    slow, fast = train("slow", 100, hourly="1"), train("fast", 40, hourly="3")
    # slow needs 2 + 10 + 100 = 112 h: exactly the deadline still fits
    inst = PlanInstance([v], [slow, fast], idle_hours=D(10), deadline_hours=D(112))
    assert solve(inst, top_k=1)[0].train_id == "slow"
    tighter = PlanInstance([v], [slow, fast], idle_hours=D(10), deadline_hours=D("111.99"))
    assert solve(tighter, top_k=1)[0].train_id == "fast"


def test_deadline_pairs_a_slow_validation_only_with_a_fast_training():
    # v_cheap (5 h) fits only with t_fast; v_quick (1 h) fits with t_slow too.
    v_cheap, v_quick = validate("v_cheap", 5, hourly="1"), validate("v_quick", 1, hourly="20")
    t_slow, t_fast = train("t_slow", 20, hourly="1"), train("t_fast", 16, hourly="2")
    inst = PlanInstance([v_cheap, v_quick], [t_slow, t_fast], deadline_hours=D(21))
    # v_cheap + t_fast: 5 + 32 = 37 < v_quick + t_slow: 20 + 20 = 40
    decision = solve(inst, top_k=1)[0]
    assert (decision.validate_id, decision.train_id) == ("v_cheap", "t_fast")
    assert best_total(inst) == D(37)


def test_deadline_nothing_fits():
    inst = PlanInstance([validate("v", 2)], [train("t", 175)], idle_hours=D(0), deadline_hours=D(120))
    with pytest.raises(NoFeasiblePlan) as err:
        solve(inst)
    # the fastest plan needs 2 + 175 = 177 h = 7.375 days, shown rounded up
    assert err.value.reasons == [
        "deadline 5 days; the fastest plan needs 7.4 days (extend --deadline-days)"
    ]
    assert str(err.value).startswith("No plan meets the constraints: deadline 5 days")
    assert err.value.exit_code == 3


# --------------------------------------------------------------------------------------------
# budget


def test_budget_at_the_cheapest_total_is_feasible_and_a_cent_less_is_not():
    inst = PlanInstance([], [train("t", D("812.4"), hourly="1")], budget=D("812.40"))
    assert best_total(inst) == D("812.4")
    with pytest.raises(NoFeasiblePlan) as err:
        solve(PlanInstance([], [train("t", D("812.4"), hourly="1")], budget=D("500")))
    assert err.value.reasons == ["budget 500.00 USD is below the cheapest feasible plan 812.40 USD (raise --budget)"]


def test_budget_excludes_dear_plans_from_the_top_k():
    a, b = train("a", 10, provider="a", hourly="1"), train("b", 10, provider="b", hourly="2")
    assert len(solve(PlanInstance([], [a, b]), top_k=5)) == 2
    decisions = solve(PlanInstance([], [a, b], budget=D(15)), top_k=5)
    assert [d.train_id for d in decisions] == ["a"]


def test_budget_and_deadline_together():
    cheap_slow = train("cheap_slow", 100, provider="a", hourly="1")  # 100
    dear_fast = train("dear_fast", 40, provider="b", hourly="5")  # 200
    inst = PlanInstance([], [cheap_slow, dear_fast], deadline_hours=D(48), budget=D(150))
    with pytest.raises(NoFeasiblePlan) as err:
        solve(inst)
    # within the deadline only dear_fast fits (200 > 150); without the deadline cheap_slow fits (100)
    assert err.value.reasons == [
        "budget 150.00 USD is below the cheapest feasible plan 200.00 USD "
        "(raise --budget, or extend --deadline-days: without it a plan costs 100.00 USD)"
    ]


def test_both_deadline_and_budget_bind():
    inst = PlanInstance([], [train("t", 100, hourly="2")], deadline_hours=D(48), budget=D(150))
    with pytest.raises(NoFeasiblePlan) as err:
        solve(inst)
    assert err.value.reasons == [
        "deadline 2 days; the fastest plan needs 4.2 days (extend --deadline-days)",
        "budget 150.00 USD is below the cheapest plan at any speed 200.00 USD (raise --budget)",
    ]


def test_no_training_candidates():
    with pytest.raises(NoFeasiblePlan, match="no offer is left to train on"):
        solve(PlanInstance([], []))


# --------------------------------------------------------------------------------------------
# top-K


def test_top_k_plans_differ_in_provider_or_gpu():
    cands = [
        train("p-a100-1", 10, provider="p", gpu="A100", hourly="1"),  # 10
        train("p-a100-2", 10, provider="p", gpu="A100", hourly="1.1"),  # 11, same group: never plan 2
        train("p-h100", 5, provider="p", gpu="H100", hourly="2.4"),  # 12
        train("q-a100", 10, provider="q", gpu="A100", hourly="1.3"),  # 13
    ]
    inst = PlanInstance([], cands)
    decisions = solve(inst, top_k=5)
    assert [d.train_id for d in decisions] == ["p-a100-1", "p-h100", "q-a100"]
    assert [plan_cost(inst, d).total for d in decisions] == [D(10), D(12), D(13)]


def test_solving_twice_gives_the_same_plans():
    cands = [
        train(f"t{i}", 10 + i % 3, provider="pq"[i % 2], gpu=f"g{i % 4}", hourly=str(1 + i % 5)) for i in range(12)
    ]
    inst = PlanInstance([validate("v", 1, offer="offer-t0")], cands, idle_hours=D(5))
    assert solve(inst) == solve(inst)


# --------------------------------------------------------------------------------------------
# pruning and input checks


def test_pruning_drops_dominated_and_hopeless_candidates():
    cands = [
        train("best", 10, provider="p", gpu="A100", hourly="1"),
        train("dominated", 12, provider="p", gpu="A100", hourly="1.2"),  # slower and dearer, same group
        train("other", 10, provider="q", gpu="A100", hourly="5"),  # another group: kept for top-2
        train("hopeless", 10, provider="r", gpu="A100", hourly="9"),  # cannot be among the top 2
    ]
    kept = prune(PlanInstance([], cands), top_k=2)
    assert [x.c.id for x in kept.train] == ["best", "other"]
    assert (kept.dropped_dominated, kept.dropped_bounds) == (1, 1)


def test_pruning_weighs_speed_against_price():
    cands = [train("fast", 5, hourly="3"), train("slow", 20, hourly="0.5")]  # same group: 15 vs 10
    # the slower one is cheaper, so it is not dominated; with room for it, the faster one cannot win
    assert {x.c.id for x in prune(PlanInstance([], cands, deadline_hours=D(30)), top_k=1).train} == {"slow"}
    # a 10 h deadline leaves only the faster one
    assert {x.c.id for x in prune(PlanInstance([], cands, deadline_hours=D(10)), top_k=1).train} == {"fast"}


def test_prices_off_the_micro_grid_are_refused():
    t = Candidate("t", "train", "p", "o", "g", 1, 1, "single", D(1), RentalPricing(D("0.0000001")))
    with pytest.raises(ValueError, match="metered_hourly 1E-7 is not a multiple of 1e-6"):
        solve(PlanInstance([], [t]))
    day = Block("day", PriceUnit.DAY, 24, D("330.0000001"))
    with pytest.raises(ValueError, match="block price 330.0000001 is not a multiple of 1e-6"):
        solve(PlanInstance([], [train("t1", 1, blocks=(day,))]))
    t2 = train("t2", 1, ingress="0.0000004")
    with pytest.raises(ValueError, match="ingress .* is not a multiple of 1e-6"):
        solve(PlanInstance([], [t2]))


def test_top_k_must_be_positive():
    with pytest.raises(ValueError, match="top_k"):
        solve(PlanInstance([], [train("t", 1)]), top_k=0)


# --------------------------------------------------------------------------------------------
# block pricing starts from bounds; the exact cover decides


def _mixed_blocks_train(cid: str = "blocks", **kw) -> Candidate:
    # 11 h with an 8 h block at 30 and a 3 h block at 12: exactly 8 h + 3 h = 42.
    # The cheap bounds are 41.25 (11 h at 30/8 per hour) and 48 (4 x the 3 h block).
    eight, three = Block("8h", PriceUnit.TERM, 8, D(30)), Block("3h", PriceUnit.TERM, 3, D(12))
    return train(cid, 11, hourly="100", blocks=(eight, three), **kw)


def test_a_rival_between_the_bounds_does_not_hide_the_exact_cover():
    rival = train("metered", 10, hourly="4.5")  # faster, same group, 45: between 41.25 and 48
    inst = PlanInstance([], [rival, _mixed_blocks_train()])
    decision = solve(inst, top_k=1)[0]
    assert (decision.train_id, decision.blocks) == ("blocks", {"blocks": {"8h": 1, "3h": 1}})
    assert best_total(inst) == D(42)
    assert [x.c.id for x in prune(inst, top_k=1).train] == ["blocks"]


def test_a_budget_between_the_bounds_does_not_hide_the_exact_cover():
    inst = PlanInstance([], [_mixed_blocks_train()], budget=D(45))
    assert best_total(inst) == D(42)


def test_a_time_limit_too_short_to_find_any_plan_says_so():
    inst = PlanInstance([], [train(f"t{i}", 10 + i, provider=f"p{i}", hourly=f"{1 + i / 8}") for i in range(40)])
    with pytest.raises(NoFeasiblePlan, match="no plan within its 1e-09 s time limit; allow it more time"):
        solve(inst, time_limit_s=1e-9, prune_first=False)


def test_totals_beyond_exact_integer_range_are_refused():
    # 10^9 per hour for 3 months: 2.16e12 currency units x 3.6e9 units each overflows int64
    inst = PlanInstance([], [train("t", 2160, hourly="1000000000")])
    with pytest.raises(ValueError, match="too large for exact integer arithmetic"):
        solve(inst)
