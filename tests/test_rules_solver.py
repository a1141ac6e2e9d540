"""The solver's choosing rules, guarded on hand-built instances whose bills are worked out here.

Each test is built so that breaking its rule changes the answer even where pruning would
otherwise hide the break (enumeration is also run without pruning). tools/mutate.py breaks each
rule and checks that a test here notices.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from rentopt.optimizer.solver import PlanInstance, solve
from tests.test_solver import terms, train, validate

D = Decimal


@pytest.mark.parametrize("prune_first", [True, False])
def test_each_group_is_represented_by_its_best_plan_not_its_first(prune_first):
    # group (pa, g): "t1" 10 h x 3.00 = 30.00 listed first, "t2" 10 h x 2.00 = 20.00 after it
    dear, cheap = terms("a1", "3.00", "pa"), terms("a2", "2.00", "pa")
    other = terms("b", "2.50", "pb")  # group (pb, g): 25.00
    inst = PlanInstance((), (train("t1", dear, "10"), train("t2", cheap, "10"), train("t3", other, "10")))
    plans = solve(inst, top_k=2, method="enumeration", prune_first=prune_first).plans
    assert [(p.choice.train, p.total) for p in plans] == [("t2", D("20.00")), ("t3", D("25.00"))]


@pytest.mark.parametrize("method", ["enumeration", "cp-sat"])
def test_a_fully_priced_plan_ranks_before_one_with_unknown_charges_at_the_same_total(method):
    # Every plan: 10 h x 2.00 = 20.00 of compute. The "u*" runs also copy 5 GB out at an unknown
    # egress price, so each costs 20.00 + unknown: the fully priced "z" run must come first, although
    # its id sorts last and four others tie with it on known money.
    unknown = [terms(f"u{i}", "2.00", f"pu{i}", egress_gb=None) for i in range(4)]
    priced = terms("z", "2.00", "pz")
    runs = [train(f"u{i}", t, "10", out="5") for i, t in enumerate(unknown)] + [train("z", priced, "10", out="5")]
    plans = solve(PlanInstance((), tuple(runs)), top_k=1, method=method).plans
    assert [(p.choice.train, p.total, p.unknown) for p in plans] == [("z", D("20.00"), ())]
    # the same for the validation: both run 1 h + 0.1 h of copying out at 1.00/h = 1.10, one of them
    # copies its 5 GB out at an unknown price; training 10 h x 2.00 = 20.00 -> 21.10, fully priced
    unknown_v = validate("vu", terms("vx", "1.00", "pvx", egress_gb=None), out="5", out_hours="0.1")
    priced_v = validate("vp", terms("vy", "1.00", "pvy"), out="5", out_hours="0.1")
    run = train("t", terms("t", "2.00", "pt"), "10")
    for order in ((unknown_v, priced_v), (priced_v, unknown_v)):
        [plan] = solve(PlanInstance(order, (run,)), top_k=1, method=method).plans
        assert (plan.choice.validate, plan.total, plan.unknown) == ("vp", D("21.10"), ())


def test_a_same_instance_pair_keeps_the_instance_when_copying_out_would_miss_the_deadline():
    # One offer x: 1.00/h, disk 100 GB at 10.00 per GB-month running or stopped, free transfers.
    # Validation 1 h (copying out before a destroy takes 5 h more), a 24 h gap, training 10 h.
    x = terms("x", "1.00", "px", storage_gb_month=D(10), stopped_storage_gb_month=D(10))
    v = validate("v", x, hours="1", disk="100", out_hours="5")
    t = train("t", x, "10", disk="100")
    # keep (stop over the gap): v 1.00 + disk 100 x 10 x 1/730 = 1.37; gap disk 100 x 10 x 24/730 = 32.88;
    # t 10.00 + disk 100 x 10 x 10/730 = 13.70 -> 58.95; wall 1 + 24 + 10 = 35 h
    # destroy: v 6 h: 6.00 + 8.22; t 10.00 + 13.70 -> 37.92, cheaper, but wall 1 + 5 + 24 + 10 = 40 h
    inst = PlanInstance((v,), (t,), idle_hours=D(24), deadline_hours=D(36))
    [plan] = solve(inst).plans
    assert plan.choice.idle == "stop" and plan.total == D("58.95") and plan.wall_hours == D(35)
    # without the deadline the cheaper destroy wins
    [free] = solve(PlanInstance((v,), (t,), idle_hours=D(24))).plans
    assert free.choice.idle == "destroy" and free.total == D("37.92")


def test_a_validation_is_not_pruned_by_one_faster_cheaper_validation_that_sits_on_the_training_instance():
    # Training t runs on x. Validation v1 on x itself is the cheapest and fastest, but copying its
    # data out of x costs an unknown egress price, so billing's idle rule keeps x stopped over the
    # 100 h gap (fully priced before unknown) and never offers t the destroy path with v1.
    # Validation v2 on y is dearer, yet destroying it gives t's best plan: it must survive.
    x = terms("x", "1.00", "px", storage_gb_month=D(10), stopped_storage_gb_month=D(10), egress_gb=None)
    y = terms("y", "5.00", "py")
    v1 = validate("v1", x, hours="1", disk="100", out="10", out_hours="0.1")
    v2 = validate("v2", y, hours="1", disk="100", out="10", out_hours="0.1")
    t = train("t", x, "10", disk="100")
    # keep v1 on x: v1 1.00 + disk 1.37; gap disk 100 x 10 x 100/730 = 136.99; t 10.00 + 13.70 -> 163.06
    # destroy v2: 1.1 h x 5.00 = 5.50 (free disk); t alone 10.00 + 13.70 -> 29.20, fully priced
    inst = PlanInstance((v1, v2), (t,), idle_hours=D(100))
    [plan] = solve(inst).plans
    assert (plan.choice.validate, plan.choice.idle, plan.total, plan.unknown) == ("v2", "destroy", D("29.20"), ())


def test_a_partner_validation_is_counted_only_if_the_plan_meets_the_deadline_with_the_gap():
    # Deadline 25 h, a 10 h gap between validation and training. Training "ta" (a: 10 h x 1.00 =
    # 10.00, 10 h at its slow end) and "tb" (b: 10 h x 0.50 = 5.00, 14 h at its slow end).
    # Validation "vf": 1 h x 10.00 = 10.00. Validation "vs": 1 h + 11 h of copying out at 0.05 =
    # 0.60, but destroyed it takes 12 h: 12 + 10 + 10 = 32 h > 25 for "ta" (and 36 h for "tb").
    # Plans: ta + vf = 20.00 (1 + 10 + 10 = 21 h), tb + vf = 15.00 (1 + 10 + 14 = 25 h): tb wins. A
    # bound that forgot the gap would pair ta with vs (12 + 10 = 22 <= 25) at 10.60 and prune tb.
    a, b = terms("a", "1.00", "pa"), terms("b", "0.50", "pb")
    vf = validate("vf", terms("f", "10.00", "pf"), hours="1")
    vs = validate("vs", terms("s", "0.05", "ps"), hours="1", out_hours="11")
    inst = PlanInstance((vf, vs), (train("ta", a, "10", wall="10"), train("tb", b, "10", wall="14")),
                        idle_hours=D(10), deadline_hours=D(25))
    [plan] = solve(inst, top_k=1).plans
    assert (plan.choice.train, plan.choice.validate, plan.total) == ("tb", "vf", D("15.00"))


def test_the_budget_holds_when_every_combination_is_enumerated():
    # 10 h x 2.00 = 20.00 and 10 h x 3.00 = 30.00 with a budget of 25: only the first, pruned or not
    a, b = terms("a", "2.00", "pa"), terms("b", "3.00", "pb")
    inst = PlanInstance((), (train("ta", a, "10"), train("tb", b, "10")), budget=D(25))
    for prune_first in (True, False):
        plans = solve(inst, top_k=2, method="enumeration", prune_first=prune_first).plans
        assert [(p.choice.train, p.total) for p in plans] == [("ta", D("20.00"))]


@pytest.mark.parametrize("prune_first", [True, False])
def test_plans_equal_to_the_cent_are_told_apart_by_their_exact_price(prune_first):
    # One group, 1 h of training each: 1.5759/h and 1.5756/h both bill 1.58 to the cent. The one
    # at 1.5756/h is the cheaper by its exact price and wins, although its id sorts last.
    dear, cheap = terms("a1", "1.5759", "pa"), terms("a2", "1.5756", "pa")
    inst = PlanInstance((), (train("a-dear", dear, "1"), train("z-cheap", cheap, "1")))
    [plan] = solve(inst, top_k=1, method="enumeration", prune_first=prune_first).plans
    assert (plan.choice.train, plan.total) == ("z-cheap", D("1.58"))
