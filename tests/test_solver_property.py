"""The solver against an exhaustive enumerator on small random instances (hypothesis).

The enumerator shares no code with the solver or with `cheapest_cover`: it walks
itertools.product over validation option x training option x idle choice, where each option is a
candidate with every bounded combination of block counts (0..ceil(H / block hours)) and the
metered time that combination leaves, billed here from first principles. Every combination is
scored by the oracle `plan_cost`, which rejects the ones that break a rule. The solver (with and
without pruning) must then find exactly the enumerator's optimum, the same top-K totals over
distinct training (provider, GPU) groups, and report "infeasible" only when the enumerator finds
nothing at all.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from itertools import product

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rentopt.optimizer.billing import (
    Block,
    Candidate,
    Decision,
    InvalidDecision,
    PlanInstance,
    RentalPricing,
    cheapest_cover,
    plan_cost,
)
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.models import PriceUnit
from rentopt.optimizer.solver import prune, solve

TOP_K = 3


def _billed(granularity: int, minimum: int, used: int) -> int:
    """Metered seconds a provider bills for `used` seconds (written independently of billing.py)."""
    if used <= 0:
        return 0
    granules = (used + granularity - 1) // granularity
    return max(minimum, granules * granularity)


def _options(c: Candidate):
    """Every bounded way to pay for one candidate: (block counts, metered seconds)."""
    need = math.ceil(c.hours * 3600)
    p = c.pricing
    ranges = [range(0, math.ceil(need / (b.hours * 3600)) + 1) for b in p.blocks]
    for counts in product(*ranges):
        covered = sum(n * b.hours * 3600 for n, b in zip(counts, p.blocks))
        rest = need - covered
        if rest > 0 and p.metered_hourly is None:
            continue
        yield {b.label: n for n, b in zip(counts, p.blocks) if n}, _billed(p.granularity_s, p.minimum_s, rest)


def enumerate_plans(inst: PlanInstance) -> dict[tuple[str, str], Fraction]:
    """The best total of each training (provider, GPU) group, by exhaustive search."""
    v_opts = [(v.id, b, m) for v in inst.validate for b, m in _options(v)] or [(None, {}, 0)]
    t_opts = [(t.id, b, m) for t in inst.train for b, m in _options(t)]
    idles = ["stop", "destroy"] if inst.validate else [None]
    best: dict[tuple[str, str], Fraction] = {}
    for (vid, vb, vm), (tid, tb, tm), idle in product(v_opts, t_opts, idles):
        blocks = {tid: tb} | ({vid: vb} if vid else {})
        metered = {tid: tm} | ({vid: vm} if vid else {})
        try:
            cost = plan_cost(inst, Decision(vid, tid, idle, blocks, metered)).total_exact
        except InvalidDecision:
            continue
        group = inst.by_id[tid].group
        if group not in best or cost < best[group]:
            best[group] = cost
    return best


# --------------------------------------------------------------------------------------------
# Instances

def _micros(low: str, high: str) -> st.SearchStrategy[Decimal]:
    """Decimals with up to 6 places, drawn as whole micro-units so they spread over the range."""
    return st.integers(int(Decimal(low) * 10**6), int(Decimal(high) * 10**6)).map(lambda n: Decimal(n).scaleb(-6))


money = _micros("0", "60")
price = _micros("0.000001", "40")


@st.composite
def pricings(draw) -> RentalPricing:
    hourly = draw(st.none() | price)
    n_blocks = draw(st.integers(0 if hourly is not None else 1, 2))
    hours = draw(st.lists(st.sampled_from([3, 4, 8, 24]), min_size=n_blocks, max_size=n_blocks, unique=True))
    blocks = tuple(Block(f"b{h}", PriceUnit.TERM, h, draw(_micros("0.5", "300"))) for h in hours)
    return RentalPricing(
        hourly,
        granularity_s=draw(st.sampled_from([1, 7, 60, 900, 3600])),
        minimum_s=draw(st.sampled_from([0, 0, 60, 1000, 3600, 7200])),
        blocks=blocks,
    )


hours_st = st.integers(1, 2000).map(lambda n: Decimal(n).scaleb(-2))  # 0.01 .. 20 h


def _rough_cost(c: Candidate) -> Decimal:
    """A plain upper estimate of one candidate's bill, only to put budgets where they bind."""
    p = c.pricing
    singles = [math.ceil(c.hours / b.hours) * b.price for b in p.blocks]
    if p.metered_hourly is not None:
        singles.append(p.metered_hourly * (c.hours + 2))
    return min(singles) + c.storage_running + c.ingress + c.egress + c.destroy_egress


@st.composite
def instances(draw) -> PlanInstance:
    n_offers = draw(st.integers(1, 4))
    offers = [
        # few (provider, GPU) groups, so several offers often compete inside one group
        (draw(st.sampled_from("ab")), f"o{i}", draw(st.sampled_from(["g1", "g1", "g2"])), draw(pricings()))
        for i in range(n_offers)
    ]
    train = []
    for i, (prov, oid, gpu, pricing) in enumerate(offers):
        for j in range(draw(st.integers(1, 2))):
            train.append(Candidate(
                f"t{i}{j}", "train", prov, oid, gpu, 1, 1, "single", draw(hours_st), pricing,
                storage_running=draw(money), ingress=draw(money), egress=draw(money),
            ))
    validate = []
    if draw(st.booleans()):
        for k in range(draw(st.integers(1, 3))):
            # often on an offer that also trains, so same-offer stop/destroy pairs are common
            prov, oid, gpu, pricing = offers[draw(st.integers(0, n_offers - 1))]
            validate.append(Candidate(
                f"v{k}", "validate", prov, oid, gpu, 1, 1, "single",
                draw(st.integers(25, 400).map(lambda n: Decimal(n).scaleb(-2))), pricing,
                storage_running=draw(money), ingress=draw(money), egress=draw(money),
                destroy_egress=draw(money), stop_storage=draw(money),
            ))
    idle = draw(st.integers(0, 300).map(lambda n: Decimal(n).scaleb(-1)))
    # Deadlines and budgets are drawn around what the plans need, so that they often bind.
    longest = max(t.hours for t in train) + (max(v.hours for v in validate) + idle if validate else 0)
    exact_fit = draw(st.sampled_from(train)).hours + (draw(st.sampled_from(validate)).hours + idle if validate else 0)
    deadline = draw(st.sampled_from([None, exact_fit]) | st.integers(30, 130).map(lambda pct: longest * pct / 100))
    rough = min(_rough_cost(t) for t in train) + min((_rough_cost(v) for v in validate), default=Decimal(0))
    budget = draw(st.none() | st.integers(30, 250).map(lambda pct: (rough * pct / 100).quantize(Decimal("0.01"))))
    return PlanInstance(validate, train, idle, deadline, budget, "USD")


def _check(inst: PlanInstance, prune_first: bool) -> None:
    best = enumerate_plans(inst)
    if not best:
        with pytest.raises(NoFeasiblePlan):
            solve(inst, top_k=TOP_K, prune_first=prune_first)
        return
    decisions = solve(inst, top_k=TOP_K, prune_first=prune_first)
    totals = [plan_cost(inst, d).total_exact for d in decisions]  # raises if a decision breaks a rule
    groups = [inst.by_id[d.train_id].group for d in decisions]
    assert len(set(groups)) == len(groups), "top-K plans must differ in the training provider/GPU"
    assert totals[0] == min(best.values())
    assert totals == sorted(best.values())[:TOP_K]
    for d, total, group in zip(decisions, totals, groups):
        assert best[group] == total  # each plan is its group's optimum
        assert d.status == "OPTIMAL"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(instances())
def test_solver_matches_exhaustive_search(inst):
    _check(inst, prune_first=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(instances())
def test_unpruned_model_matches_exhaustive_search(inst):
    _check(inst, prune_first=False)


def test_enumerator_sees_the_stop_discount():
    """The enumerator itself must be able to fail: a same-offer stop is cheaper than destroy here."""
    p = RentalPricing(Decimal("1"))
    v = Candidate("v", "validate", "a", "o", "g", 1, 1, "single", Decimal(1), p,
                  destroy_egress=Decimal(10), stop_storage=Decimal(2))
    t = Candidate("t", "train", "a", "o", "g", 1, 1, "single", Decimal(2), p, ingress=Decimal(5))
    inst = PlanInstance([v], [t], Decimal(0), None, None, "USD")
    # stop: 1 + 2 (stopped disk) + 2 (train, no ingress) = 5; destroy: 1 + 10 + 2 + 5 = 18
    assert enumerate_plans(inst) == {("a", "g"): Fraction(5)}


# --------------------------------------------------------------------------------------------
# Pruning alone, on larger instances: every top-K total survives it.


def _group_optima(inst: PlanInstance, validate, train) -> list[Fraction]:
    """Best total per training group over the given candidates, each rental paid by its
    cheapest cover and every pair and idle choice priced by the oracle."""
    best: dict[tuple[str, str], Fraction] = {}
    covers = {c.id: cheapest_cover(c.pricing, c.hours) for c in (*validate, *train)}
    v_opts = list(validate) or [None]
    for v, t, idle in product(v_opts, train, ["stop", "destroy"] if inst.validate else [None]):
        ids = [t.id] + ([v.id] if v else [])
        decision = Decision(v.id if v else None, t.id, idle,
                            {i: covers[i].blocks for i in ids}, {i: covers[i].metered_seconds for i in ids})
        try:
            cost = plan_cost(inst, decision).total_exact
        except InvalidDecision:
            continue
        if t.group not in best or cost < best[t.group]:
            best[t.group] = cost
    return sorted(best.values())


@st.composite
def similar_pricings(draw, rate: Decimal) -> RentalPricing:
    """Prices within a few percent of one another, blocks near the metered price of their hours:
    rivals then fall between a block candidate's cheap bounds, where only the exact cover decides."""
    def near(amount: Decimal) -> Decimal:
        return (amount * draw(st.integers(850, 1150)) / 1000).quantize(Decimal("0.000001"))

    hours = draw(st.lists(st.sampled_from([3, 5, 8]), min_size=2, max_size=2, unique=True))  # mixes pay off
    return RentalPricing(
        near(rate) if draw(st.booleans()) else None,
        granularity_s=draw(st.sampled_from([1, 60, 3600])),
        minimum_s=draw(st.sampled_from([0, 600])),
        blocks=tuple(Block(f"b{h}", PriceUnit.TERM, h, near(rate * h)) for h in hours),
    )


@st.composite
def crowded_instances(draw) -> PlanInstance:
    """Many candidates on few offers and groups: dominance and the stop discount both matter."""
    n_offers = draw(st.integers(2, 5))
    pricing_st = similar_pricings(draw(_micros("0.5", "5"))) if draw(st.booleans()) else pricings()
    offers = [(draw(st.sampled_from("ab")), f"o{i}", draw(st.sampled_from(["g1", "g1", "g2"])), draw(pricing_st))
              for i in range(n_offers)]
    def cand(stage, cid, offer, hours):
        prov, oid, gpu, pricing = offer
        extra = dict(destroy_egress=draw(money), stop_storage=draw(money)) if stage == "validate" else {}
        return Candidate(cid, stage, prov, oid, gpu, 1, 1, "single", hours, pricing,
                         storage_running=draw(money), ingress=draw(money), egress=draw(money), **extra)
    n_train = draw(st.integers(2, 14))
    train = [cand("train", f"t{i}", draw(st.sampled_from(offers)), draw(hours_st)) for i in range(n_train)]
    validate = [cand("validate", f"v{i}", draw(st.sampled_from(offers)), draw(hours_st))
                for i in range(draw(st.integers(0, 5)))]
    idle = draw(st.integers(0, 300).map(lambda n: Decimal(n).scaleb(-1)))
    longest = max(t.hours for t in train) + (max(v.hours for v in validate) + idle if validate else 0)
    deadline = draw(st.none() | st.integers(30, 130).map(lambda pct: longest * pct / 100))
    rough = min(_rough_cost(t) for t in train) + min((_rough_cost(v) for v in validate), default=Decimal(0))
    budget = draw(st.none() | st.integers(30, 250).map(lambda pct: (rough * pct / 100).quantize(Decimal("0.01"))))
    return PlanInstance(validate, train, idle, deadline, budget, "USD")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
@given(crowded_instances(), st.integers(1, 4))
def test_pruning_keeps_every_top_k_total(inst, top_k):
    kept = prune(inst, top_k)
    full = _group_optima(inst, inst.validate, inst.train)
    pruned = _group_optima(inst, [x.c for x in kept.validate], [x.c for x in kept.train])
    assert pruned[:top_k] == full[:top_k]
