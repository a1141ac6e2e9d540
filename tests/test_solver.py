"""The solver on small hand-built instances: every expected plan and total is worked out by hand.

Each rule the solver enforces (deadline, budget, distinct top-K groups, compatible validation,
ranking per token, fully priced before unknown) has a test that fails when the rule is removed.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from rentopt.optimizer.billing import Block, RentalPricing, Terms, Use
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.models import PriceUnit
from rentopt.optimizer.solver import Candidate, PlanInstance, solve

D = Decimal


def terms(offer: str, hourly: str | None, provider: str = "p", blocks=(), **kw) -> Terms:
    values = dict(provider=provider, offer_id=offer, currency="USD",
                  on_demand=RentalPricing(D(hourly) if hourly else None, 1, 0, tuple(blocks)), interruptible=None,
                  storage_gb_month=D(0), stopped_storage_gb_month=D(0), egress_gb=D(0), ingress_gb=D(0),
                  month_hours=730)
    values.update(kw)
    return Terms(**values)


def train(tid: str, t: Terms, hours: str, *, gpu: str = "g", wall: str | None = None, sig="job",
          tokens: str | None = None, **kw) -> Candidate:
    u = Use(tid, "train", t, False, 1, D(hours), D(kw.get("disk", 0)), D(kw.get("imp", 0)), D(kw.get("out", 0)))
    return Candidate(u, group=(t.provider, gpu), wall_hours=D(wall) if wall else None, signature=sig,
                     tokens=D(tokens) if tokens else None)


def validate(vid: str, t: Terms, hours: str = "1", sig=frozenset({"job"}), **kw) -> Candidate:
    u = Use(vid, "validate", t, False, 1, D(hours), D(kw.get("disk", 0)), D(kw.get("imp", 0)), D(kw.get("out", 0)),
            D(kw.get("out_hours", 0)))
    return Candidate(u, signature=sig)


def totals(inst: PlanInstance, k: int = 5, **kw) -> list[tuple[str, Decimal]]:
    return [(p.choice.train, p.total) for p in solve(inst, top_k=k, **kw).plans]


A, B, C = terms("a", "2.00", "pa"), terms("b", "3.00", "pb"), terms("c", "1.00", "pc")


def test_the_cheapest_training_run_wins():
    # a: 10 h x 2 = 20; b: 10 h x 3 = 30; c: 30 h x 1 = 30 -> a, then b and c tie at 30
    inst = PlanInstance((), (train("ta", A, "10"), train("tb", B, "10"), train("tc", C, "30")))
    assert totals(inst) == [("ta", D("20.00")), ("tb", D("30.00")), ("tc", D("30.00"))]


def test_top_k_plans_are_the_best_of_different_groups():
    # Two offers in group (pa, g): 20 and 21; group (pb, g): 30. Top 2 must be 20 (pa) then 30
    # (pb): the second-cheapest candidate of pa's own group is not a plan of its own.
    a2 = terms("a2", "2.10", "pa")
    inst = PlanInstance((), (train("ta", A, "10"), train("ta2", a2, "10"), train("tb", B, "10")))
    assert totals(inst, 2) == [("ta", D("20.00")), ("tb", D("30.00"))]
    assert totals(inst, 1) == [("ta", D("20.00"))]


def test_the_budget_excludes_plans_over_it_and_keeps_the_rest():
    inst = PlanInstance((), (train("ta", A, "10"), train("tb", B, "10")), budget=D("25"))
    assert totals(inst) == [("ta", D("20.00"))]  # tb at 30 > 25 is gone
    at = PlanInstance((), (train("ta", A, "10"),), budget=D("20.00"))
    assert totals(at) == [("ta", D("20.00"))]  # inclusive
    with pytest.raises(NoFeasiblePlan, match=r"budget 19.99 USD is below the cheapest feasible plan 20.00 USD"):
        solve(PlanInstance((), (train("ta", A, "10"),), budget=D("19.99")))


def test_the_deadline_uses_the_slow_end_of_the_time_range():
    # a is cheap but pessimistically 30 h; b costs more and finishes within 12 h at its slow end.
    inst = PlanInstance((), (train("ta", A, "10", wall="30"), train("tb", B, "10", wall="12")), deadline_hours=D(24))
    assert totals(inst) == [("tb", D("30.00"))]
    inclusive = PlanInstance((), (train("ta", A, "10", wall="24"),), deadline_hours=D(24))
    assert totals(inclusive) == [("ta", D("20.00"))]
    with pytest.raises(NoFeasiblePlan, match=r"deadline 1 day; the fastest plan needs 1.3 days"):
        solve(PlanInstance((), (train("ta", A, "10", wall="30"),), deadline_hours=D(24)))


def test_validation_runs_the_same_job():
    # The cheap validation on c validates another signature: it cannot pair with "job".
    other = validate("vc", C, sig=frozenset({"other job"}))
    same = validate("vb", B)  # 1 h x 3 = 3
    inst = PlanInstance((other, same), (train("ta", A, "10"),))
    [plan] = solve(inst).plans
    assert plan.choice.validate == "vb" and plan.total == D("23.00")
    with pytest.raises(NoFeasiblePlan, match="no validation candidate runs the same job"):
        solve(PlanInstance((other,), (train("ta", A, "10"),)))


def test_validation_on_the_training_instance_continues_as_one_rental():
    # Day blocks of 30 and metered 2.00/h on offer m. Validation 4 h + training 18 h:
    # on separate instances 8 (4 h metered) + 30 (a day) = 38; on one instance 22 h < 24 h = 30.
    m = terms("m", "2.00", "pm", blocks=(Block("day", PriceUnit.DAY, 24, D("30")),))
    inst = PlanInstance((validate("vm", m, "4"), validate("vc", C, "4")), (train("tm", m, "18"),))
    [plan] = solve(inst).plans
    assert (plan.choice.validate, plan.choice.idle, plan.total) == ("vm", "continue", D("30.00"))
    # vc would cost 4 x 1 = 4 + 30 = 34 > 30


def test_a_gap_is_priced_both_ways():
    # Same offer, 100 h gap, 730 GB disk at 0.10/GB-month stopped: 730 x 0.10 x 100 / 730 = 10.00.
    # Destroy: copy 730 GB out at 0.02 = 14.60 (+ free re-import) -> stop (10.00 < 14.60).
    s = terms("s", "1.00", "ps", stopped_storage_gb_month=D("0.10"), egress_gb=D("0.02"))
    v = validate("vs", s, "1", disk="730", out="730")
    t = train("ts", s, "10", disk="730", imp="730")
    [plan] = solve(PlanInstance((v,), (t,), idle_hours=D(100))).plans
    assert plan.choice.idle == "stop" and plan.total == D("1.00") + D("10.00") + D("10.00")
    cheap_out = terms("s", "1.00", "ps", stopped_storage_gb_month=D("0.10"), egress_gb=D("0.01"))
    v = validate("vs", cheap_out, "1", disk="730", out="730")
    t = train("ts", cheap_out, "10", disk="730", imp="730")
    [plan] = solve(PlanInstance((v,), (t,), idle_hours=D(100))).plans
    assert plan.choice.idle == "destroy" and plan.total == D("1.00") + D("7.30") + D("10.00")  # 7.30 < 10.00


def test_a_fully_priced_plan_ranks_before_an_unknown_one_at_the_same_known_total():
    known = terms("k", "2.00", "pk")
    unknown = terms("u", "2.00", "pu", egress_gb=None)
    inst = PlanInstance((), (train("tu", unknown, "10", out="5"), train("tk", known, "10", out="5")))
    plans = solve(inst).plans
    assert [p.choice.train for p in plans] == ["tk", "tu"] and plans[1].unknown and not plans[0].unknown


def test_a_fixed_rental_ranks_by_cost_per_token():
    # 10 h each: a costs 20 for 1e9 tokens (20 per B); b costs 30 for 3e9 tokens (10 per B) -> b first
    inst = PlanInstance((), (train("ta", A, "10", tokens="1e9"), train("tb", B, "10", tokens="3e9")),
                        rank_by="per_token")
    assert [p.choice.train for p in solve(inst).plans] == ["tb", "ta"]


def test_enumeration_and_cp_sat_choose_the_same_plans():
    m = terms("m", "2.00", "pm", blocks=(Block("day", PriceUnit.DAY, 24, D("30")),))
    s = terms("s", "1.00", "ps", stopped_storage_gb_month=D("0.10"), egress_gb=D("0.02"))
    vs = (validate("vm", m, "4"), validate("vs", s, "1", disk="730", out="730"), validate("vc", C, "2"))
    ts = (train("tm", m, "18"), train("ts", s, "30", disk="730", imp="730"), train("tc", C, "40", gpu="h"),
          train("ta", A, "12", gpu="h"))
    for gap in ("0", "50"):
        for budget in (None, D("45")):
            inst = PlanInstance(vs, ts, idle_hours=D(gap), budget=budget)
            enum = [(p.choice, p.total) for p in solve(inst, 3, method="enumeration").plans]
            cp = [(p.choice, p.total) for p in solve(inst, 3, method="cp-sat").plans]
            assert enum == cp
    assert solve(PlanInstance(vs, ts), 3, method="cp-sat").method == "cp-sat"


def test_a_faster_dearer_validation_is_kept_for_the_deadline():
    # Validations: slow 10 h x 1.00 = 10.00, fast 2 h x 6.00 = 12.00. Trainings (other groups):
    # cheap-slow 10 h x 1.00 = 10.00, dear-fast 2 h x 20.00 = 40.00. Deadline 13 h.
    # cheap-slow fits only with the fast validation (2 + 10 = 12 h): 22.00; dear-fast takes the
    # slow one (10 + 2 = 12 h): 50.00. The cheaper slow validation must not hide the fast one.
    slow, fast = terms("slow", "1.00", "ps"), terms("fast", "6.00", "pf")
    cheap, dear = terms("cheap", "1.00", "pc"), terms("dear", "20.00", "pd")
    inst = PlanInstance((validate("vslow", slow, "10"), validate("vfast", fast, "2")),
                        (train("tcheap", cheap, "10"), train("tdear", dear, "2")), deadline_hours=D(13))
    plans = solve(inst).plans
    assert [(p.choice.train, p.choice.validate, p.total) for p in plans] == [
        ("tcheap", "vfast", D("22.00")), ("tdear", "vslow", D("50.00"))]


def test_a_validation_whose_bounds_are_loose_does_not_hide_a_cheaper_one():
    # "day": only a 30.00 day block, so 1 h of validation costs 30 exactly, but its lower bound is
    # the day's rate per second (1.25 for the hour). "metered": 1.5 h x 5.00 = 7.50, slower.
    day = terms("day", None, "pd", blocks=(Block("day", PriceUnit.DAY, 24, D("30")),))
    metered = terms("met", "5.00", "pm")
    inst = PlanInstance((validate("vday", day, "1"), validate("vmet", metered, "1.5")), (train("ta", A, "10"),))
    [plan] = solve(inst).plans
    assert (plan.choice.validate, plan.total) == ("vmet", D("27.50"))  # 7.50 + 20.00, not 30 + 20


def test_a_slower_validation_a_little_cheaper_wins_when_time_allows():
    # fast: 2 h x 5.00 = 10.00; slow: 4 h x 2.375 = 9.50 (5 % less). No deadline: the slow one.
    fast, slow = terms("fast", "5.00", "pf"), terms("slow", "2.375", "ps")
    inst = PlanInstance((validate("vfast", fast, "2"), validate("vslow", slow, "4")), (train("ta", A, "10"),))
    [plan] = solve(inst).plans
    assert (plan.choice.validate, plan.total) == ("vslow", D("29.50"))


def test_a_lease_priced_between_its_bounds_is_found():
    # Offer m: 2.00/h or a 30.00 day. Validation 4 h + training 30 h on m as one rental = 34 h =
    # a day + 10 h metered = 50.00 (a single option alone: 2 days = 60). Destroying instead
    # re-imports 100 GB at 0.50 = 50 more. Offer b: 55.00. Top 1 is the lease at 50.
    m = terms("m", "2.00", "pm", blocks=(Block("day", PriceUnit.DAY, 24, D("30")),), ingress_gb=D("0.50"))
    b = terms("b", "5.50", "pb")
    inst = PlanInstance((validate("vm", m, "4"),), (train("tm", m, "30", imp="100"), train("tb", b, "10")))
    [plan] = solve(inst, 1).plans
    assert (plan.choice.train, plan.choice.idle, plan.total) == ("tm", "continue", D("50.00"))


def test_top_k_must_be_positive():
    with pytest.raises(ValueError, match="top_k"):
        solve(PlanInstance((), (train("ta", A, "10"),)), top_k=0)


def test_an_upper_bound_from_a_destroy_the_idle_rule_refuses_does_not_hide_a_cheaper_plan():
    # Offer m: validation 1 h and training 5 h at 1.00/h, a 100 h gap. Keeping the instance pays
    # 730 GB x 0.04 x 100 / 730 = 4.00 of stopped disk: 1 + 4 + 5 = 10.00, fully priced. Destroying
    # copies 730 GB out at an UNKNOWN egress: 6.00 + unknown, so billing keeps the instance (10.00).
    # Offer b (another job's validation, so it cannot validate m's run): validation 1 h + training
    # 8 h at 1.00/h on one rental, stopping free: 9.00.
    # The best plan is b's 9.00; a bound taken from m's destroy option (6.00) must not prune it.
    m = terms("m", "1.00", "pm", stopped_storage_gb_month=D("0.04"), egress_gb=None)
    b = terms("b", "1.00", "pb", stopped_bills="nothing")
    inst = PlanInstance((validate("vm", m, "1", disk="730", out="730"), validate("vb", b, "1", sig=frozenset({"h-job"}))),
                        (train("tm", m, "5", disk="730"), train("tb", b, "8", gpu="h", sig="h-job")), idle_hours=D(100))
    for method in ("enumeration", "cp-sat"):
        plans = solve(inst, 1, method=method).plans
        assert [(p.choice.train, p.total, bool(p.unknown)) for p in plans] == [("tb", D("9.00"), False)], method


@pytest.mark.parametrize("high", [5, 2**16 - 1, 2**16, 2**40])
def test_stable_order_is_a_stable_sort_of_the_codes(high: int) -> None:
    """Small codes take numpy's radix path, large ones the general sort: both must order equal
    codes by position (rows_per_key and the planner's group heads rely on it). Checked against
    Python's own stable sort."""
    import numpy as np

    from rentopt.optimizer.solver import rows_per_key
    from rentopt.optimizer.ties import stable_order

    rng = np.random.default_rng(high)
    codes = np.concatenate([rng.integers(0, 4, 300), rng.integers(high - 3, high + 1, 300)]).astype(np.int64)
    rng.shuffle(codes)
    expected = sorted(range(len(codes)), key=lambda i: codes[i])  # Python's sort is stable
    assert stable_order(codes).tolist() == expected
    keys = np.stack([codes, np.where(codes % 2 == 0, -1, codes + 1)], axis=1)
    found = rows_per_key(keys, np.arange(len(codes)) % 3 != 0)
    for key, rows in found.items():
        assert rows.tolist() == [r for r in range(len(codes)) if r % 3 != 0 and key in keys[r].tolist()]
    assert set(found) == {int(k) for r in range(len(codes)) if r % 3 != 0 for k in keys[r] if k >= 0}


def test_each_use_is_priced_alone_once_and_ties_still_go_to_the_exact_price(monkeypatch):
    """The prune prices its survivors alone, with their bills before rounding; the search reuses
    both rather than pricing them again. tb1 (1.5756/h) and tb2 (1.5759/h) are 15.76 for 10 h,
    equal to the cent: the exact prices still put tb1 first (15.756 < 15.759)."""
    import rentopt.optimizer.solver as solver

    priced: list[str] = []
    price_alone = solver.price_alone
    monkeypatch.setattr(solver, "price_alone", lambda use: priced.append(use.id) or price_alone(use))
    b1, b2 = terms("b1", "1.5759", "pb"), terms("b2", "1.5756", "pb2")
    inst = PlanInstance((validate("vc", C),), (train("ta", A, "10"), train("tb2", b1, "10"), train("tb1", b2, "10")))
    assert totals(inst, 2) == [("tb1", D("16.76")), ("tb2", D("16.76"))]
    assert priced and len(priced) == len(set(priced)), priced
