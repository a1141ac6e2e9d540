"""The plan solver: CP-SAT over exact integer money. The only module that imports ortools.

Input is a fully prepared `billing.PlanInstance`; output is up to `top_k` `billing.Decision`s,
best first, each differing from the earlier ones in the training stage's (provider, GPU).

Integer scale. Every price in an instance is a multiple of 1e-6 of the quote currency, and the
objective counts `billing.SCALE` = 3600 x 1e6 units per currency unit, so a block price, a fixed
charge and one billed second of an hourly rate (rate x 1e6 units) are all exact integers.

The model (one small function per rule, over a variable container with query methods):
- add_stage_choice: exactly one training candidate; exactly one validation candidate when the
  instance has any;
- add_billing_cover: per candidate, counts of each prepaid block (at most ceil(H / block hours)),
  whole metered granules, a minimum-charge boolean, and cover >= H seconds when chosen;
- add_fixed_charges: running storage, ingress of the validation run, egress;
- add_idle_choice: stop (pay stopped disk; training on the same offer skips its ingress) or
  destroy (pay egress out and the training ingress); stop only links a validation and a
  training candidate on the same offer;
- add_deadline: validation hours + idle + training hours <= deadline;
- add_budget: total <= budget.

Pruning, before the model is built, keeps it small without changing any answer:
1. candidates that cannot meet the deadline with even the fastest partner are dropped;
2. dominance: a training candidate is dropped when an earlier-kept one of its own (provider, GPU)
   group is no slower and no dearer with every validation partner (the same-offer stop discount
   is accounted for); validation candidates likewise, across all offers, since top-K never
   excludes a validation offer;
3. bounds: each training candidate's cheapest deadline-feasible validation partner gives a real
   plan, an upper bound for its group; groups whose lower bound exceeds the K-th best group's
   upper bound cannot be among the top K, and candidates whose lower bound exceeds their group's
   upper bound cannot be its best.
Block pricing enters a first round with cheap bounds on its compute cost (every second at the
cheapest rate; the cheapest single option alone); only the survivors get the exact
`cheapest_cover` search, and a second round prunes again with exact costs. 10,000 candidates
come down to a model of about ten (benchmarks/bench_solver.py).
The property test (tests/test_solver_property.py) checks solve-with-pruning against an
exhaustive enumerator that does not prune.
"""

from __future__ import annotations

import bisect
import logging
import math
import sys
import types
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

from rentopt.optimizer.billing import (
    SCALE,
    SECONDS_PER_HOUR,
    Candidate,
    Decision,
    PlanInstance,
    billed_metered_seconds,
    cover_in_units,
    plan_cost,
    round_money,
    seconds_to_cover,
)
from rentopt.optimizer.errors import NoFeasiblePlan

log = logging.getLogger("rentopt.solver")


def _import_cp_model():  # type: ignore[no-untyped-def]
    """Import ortools' cp_model without importing pandas.

    cp_model imports pandas at module level only for its *_series helpers (pandas types appear in
    annotations and isinstance checks); rentopt never calls them, and pandas costs ~0.2 s of the
    ~1 s a quote may take (measured: 0.42 s -> 0.22 s for the import). When pandas is not loaded
    yet, a placeholder stands in while cp_model is imported and is removed right after, so any
    later `import pandas` in the process gets the real library.
    """
    if "pandas" in sys.modules:
        from ortools.sat.python import cp_model as module

        return module
    placeholder = types.ModuleType("pandas")

    class _NotPandas:  # what `pd.Index` / `pd.Series` resolve to inside cp_model
        pass

    placeholder.Index = placeholder.Series = _NotPandas  # type: ignore[attr-defined]
    sys.modules["pandas"] = placeholder
    try:
        from ortools.sat.python import cp_model as module
    finally:
        if sys.modules.get("pandas") is placeholder:
            del sys.modules["pandas"]
    return module


cp_model = _import_cp_model()

DEFAULT_TIME_LIMIT_S = 10.0
_INT_LIMIT = 2**62  # CP-SAT works in int64; keep every sum well inside it
_INF = float("inf")


# --------------------------------------------------------------------------------------------
# Integer view of the instance


def _micros(amount: Decimal, what: str, cid: str) -> int:
    """`amount` in millionths; a clear error if it is off the 1e-6 grid the model needs."""
    if not amount:
        return 0
    scaled = amount.scaleb(6)
    micros = int(scaled)
    if micros != scaled:
        raise ValueError(
            f"candidate {cid}: {what} {amount} is not a multiple of 1e-6; quantise it with billing.quantize_money"
        )
    return micros


def _scaled(amount: Decimal, what: str, cid: str) -> int:
    """A fixed charge in solver units (SCALE per currency unit)."""
    return _micros(amount, what, cid) * SECONDS_PER_HOUR


@dataclass(slots=True)
class _Cand:
    """A candidate with its money in solver units.

    Its compute cost lies in [compute_lo, compute_hi]; the two are equal (and exact) for metered
    pricing and once `cover_in_units` has run. Block pricing starts with cheap bounds so that only
    the candidates that survive a first round of pruning pay for the exact cover search.
    """

    c: Candidate
    seconds: int  # running seconds to pay for
    compute_lo: int
    compute_hi: int
    storage: int
    ingress: int
    egress: int
    destroy: int  # validate: destroy_egress
    stop: int  # validate: stop_storage

    @property
    def id(self) -> str:
        return self.c.id

    @property
    def hours(self) -> Decimal:
        return self.c.hours

    @property
    def exact(self) -> bool:
        return self.compute_lo == self.compute_hi

    @property
    def fixed(self) -> int:
        """Charges besides compute that the candidate always pays: train before ingress, validate
        before the idle gap."""
        return self.storage + self.egress + (self.ingress if self.c.stage == "validate" else 0)

    @property
    def base_lo(self) -> int:
        return self.compute_lo + self.fixed

    @property
    def base_hi(self) -> int:
        return self.compute_hi + self.fixed

    def make_exact(self) -> None:
        pricing = self.c.pricing
        found = cover_in_units(pricing, self.seconds)
        assert found is not None and pricing.units.k == 6  # prices were checked by _prepare
        self.compute_lo = self.compute_hi = found[2]  # units of pricing.units.unit == SCALE


def _prepare(c: Candidate, exact: bool = False) -> _Cand:
    pricing = c.pricing
    seconds = seconds_to_cover(c.hours)
    rate = _micros(pricing.metered_hourly, "metered_hourly", c.id) if pricing.metered_hourly is not None else None
    if not pricing.blocks:  # metered only: one billed second costs hourly x 1e6 units
        billed = billed_metered_seconds(pricing.granularity_s, pricing.minimum_s, seconds)
        lo = hi = rate * billed  # type: ignore[operator]
    else:
        # hi: the cheapest single option alone; lo: every second at the lowest rate per second
        hi = rate * billed_metered_seconds(pricing.granularity_s, pricing.minimum_s, seconds) if rate else None
        low_cost, low_len = (rate, 1) if rate else (None, 1)
        for b in pricing.blocks:
            price = _micros(b.price, "block price", c.id) * SECONDS_PER_HOUR
            length = b.hours * SECONDS_PER_HOUR
            whole = -(-seconds // length) * price
            hi = whole if hi is None or whole < hi else hi
            if low_cost is None or price * low_len < low_cost * length:
                low_cost, low_len = price, length
        lo = seconds * low_cost // low_len  # type: ignore[operator]
    x = _Cand(
        c=c,
        seconds=seconds,
        compute_lo=lo,
        compute_hi=hi,  # type: ignore[arg-type]
        storage=_scaled(c.storage_running, "storage_running", c.id),
        ingress=_scaled(c.ingress, "ingress", c.id),
        egress=_scaled(c.egress, "egress", c.id),
        destroy=_scaled(c.destroy_egress, "destroy_egress", c.id),
        stop=_scaled(c.stop_storage, "stop_storage", c.id),
    )
    if exact and not x.exact:
        x.make_exact()
    return x


# --------------------------------------------------------------------------------------------
# Pruning
#
# Every rule below drops a candidate only when a true inequality shows it cannot be in any of
# the top-K plans (or that a kept candidate of its own group does at least as well). Costs that
# are only known as [lo, hi] bounds enter on the safe side: "could cost as little as" uses lo,
# "costs at most" uses hi.


@dataclass
class Pruned:
    """The candidates left for the model, and how many each step removed."""

    validate: list[_Cand]
    train: list[_Cand]
    dropped_deadline: int = 0
    dropped_dominated: int = 0
    dropped_bounds: int = 0


def _by_offer(cands: Iterable[_Cand]) -> dict[tuple[str, str], list[_Cand]]:
    out: dict[tuple[str, str], list[_Cand]] = defaultdict(list)
    for x in cands:
        out[x.c.offer_key].append(x)
    return out


def _deadline_filter(
    inst: PlanInstance, vs: Sequence[Candidate], ts: Sequence[Candidate]
) -> tuple[list[Candidate], list[Candidate]]:
    """Drop candidates that miss the deadline even with the fastest partner."""
    if inst.deadline_hours is None or not ts or (inst.validate and not vs):
        return list(vs), list(ts)
    limit = inst.deadline_hours - (inst.idle_hours if inst.validate else 0)
    fastest_v = min((v.hours for v in vs), default=Decimal(0))
    kept_t = [t for t in ts if fastest_v + t.hours <= limit]
    fastest_t = min((t.hours for t in kept_t), default=None)
    kept_v = [v for v in vs if fastest_t is not None and v.hours + fastest_t <= limit]
    return kept_v, kept_t


# (hours, A lo, A hi, C lo, C hi, A_eff lo, offer, linked, candidate)
_Item = tuple[Decimal, int, int, int, int, int, tuple[str, str], bool, _Cand]


def _undominated(items: list[_Item]) -> list[_Cand]:
    """Keep the items that no earlier (no slower) kept item dominates.

    A is the cost on the destroy path (fresh ingress), C the constant of the same-offer stop
    path, and A_eff the most a candidate on another offer may cost on the destroy path and still
    be at least as good with every partner, the stop discount included. An unlinked item (no
    partner on its offer) is dominated by any A at most its own; a linked one by another offer's
    A at most its A_eff, or by its own offer's item with both A and C at most its own. Dominance
    is only claimed by an earlier kept item, so equal candidates never remove each other.
    """
    items.sort(key=lambda it: (it[0], it[2], it[4], it[8].c.id))
    kept: list[_Cand] = []
    best1: tuple[int, tuple[str, str]] | None = None  # lowest A hi kept, and its offer
    best2: int | None = None  # lowest A hi kept on any other offer than best1's
    per_offer: dict[tuple[str, str], tuple[int, int]] = {}  # offer -> (A hi, C hi), lowest kept
    for _hours, a_lo, a_hi, c_lo, c_hi, a_eff_lo, offer, linked, cand in items:
        if best1 is not None:
            if not linked:
                dominated = best1[0] <= a_lo
            else:
                other = best1[0] if best1[1] != offer else best2
                same = per_offer.get(offer)
                dominated = (other is not None and other <= a_eff_lo) or (
                    same is not None and same[0] <= a_lo and same[1] <= c_lo
                )
            if dominated:
                continue
        kept.append(cand)
        if best1 is None or a_hi < best1[0]:
            if best1 is not None and best1[1] != offer:
                best2 = best1[0] if best2 is None else min(best2, best1[0])
            best1 = (a_hi, offer)
        elif offer != best1[1]:
            best2 = a_hi if best2 is None else min(best2, a_hi)
        same = per_offer.get(offer)
        if same is None or (a_hi, c_hi) < same:
            per_offer[offer] = (a_hi, c_hi)
    return kept


def _prune_dominated(vs: list[_Cand], ts: list[_Cand]) -> tuple[list[_Cand], list[_Cand]]:
    """Training candidates within their (provider, GPU) group; validation candidates across all."""
    v_by_offer, t_by_offer = _by_offer(vs), _by_offer(ts)
    t_groups: dict[tuple[str, str], list[_Item]] = defaultdict(list)
    for t in ts:
        lo, hi = t.base_lo, t.base_hi
        partners = v_by_offer.get(t.c.offer_key)
        a_lo = lo + t.ingress
        # stop path with partner v costs base + stop_v - destroy_v more than v's destroy path
        a_eff = min(a_lo, lo + min(v.stop - v.destroy for v in partners)) if partners else a_lo
        t_groups[t.c.group].append((t.hours, a_lo, hi + t.ingress, lo, hi, a_eff, t.c.offer_key, bool(partners), t))
    kept_t = [t for items in t_groups.values() for t in _undominated(items)]
    v_items: list[_Item] = []
    for v in vs:
        lo, hi = v.base_lo, v.base_hi
        partners = t_by_offer.get(v.c.offer_key)
        b_lo = lo + v.destroy
        b_eff = min(b_lo, lo + v.stop - max(t.ingress for t in partners)) if partners else b_lo
        c_lo, c_hi = lo + v.stop, hi + v.stop
        v_items.append((v.hours, b_lo, hi + v.destroy, c_lo, c_hi, b_eff, v.c.offer_key, bool(partners), v))
    return _undominated(v_items), kept_t


class _CheapestPartner:
    """The cheapest destroy-path validation (upper bound) among those no slower than a limit."""

    def __init__(self, vs: Sequence[_Cand]):
        ordered = sorted(vs, key=lambda v: v.hours)
        self.hours = [v.hours for v in ordered]
        self.prefix_min: list[int] = []
        low: int | None = None
        for v in ordered:
            cost = v.base_hi + v.destroy
            low = cost if low is None or cost < low else low
            self.prefix_min.append(low)

    def within(self, limit: Decimal | None) -> float | int:
        if not self.hours:
            return _INF
        if limit is None:
            return self.prefix_min[-1]
        i = bisect.bisect_right(self.hours, limit)
        return self.prefix_min[i - 1] if i else _INF


def _pair_lo(v: _Cand, t: _Cand) -> int:
    """Lower bound of a same-offer pair's cost: the cheaper of stop and destroy."""
    return v.base_lo + t.base_lo + min(v.destroy + t.ingress, v.stop)


def _pair_hi(v: _Cand, t: _Cand) -> int:
    return v.base_hi + t.base_hi + min(v.destroy + t.ingress, v.stop)


def _prune_bounds(
    inst: PlanInstance, vs: list[_Cand], ts: list[_Cand], top_k: int
) -> tuple[list[_Cand], list[_Cand]]:
    """Keep the groups that can be among the top K and, in each, the candidates that can be its best.

    For each training candidate, `upper` is the cost of a real plan (its cheapest validation
    partner that meets the deadline, stop or destroy), or infinity when none meets the deadline
    and budget; `lower` is what any plan with it costs at least.
    """
    has_v = bool(inst.validate)
    if has_v and not vs:
        return [], []
    v_by_offer = _by_offer(vs)
    partner = _CheapestPartner(vs)
    cheapest_b_lo = min((v.base_lo + v.destroy for v in vs), default=0)
    budget = math.floor(inst.budget * SCALE) if inst.budget is not None else _INF
    room = None if inst.deadline_hours is None else inst.deadline_hours - (inst.idle_hours if has_v else 0)

    lower: dict[str, float | int] = {}
    upper: dict[str, float | int] = {}
    for t in ts:
        if not has_v:
            lb: float | int = t.base_lo + t.ingress
            ub: float | int = t.base_hi + t.ingress if room is None or t.hours <= room else _INF
        else:
            same = v_by_offer.get(t.c.offer_key, ())
            limit = None if room is None else room - t.hours
            lb = t.base_lo + t.ingress + cheapest_b_lo
            ub = t.base_hi + t.ingress + partner.within(limit)
            for v in same:
                lb = min(lb, _pair_lo(v, t))
                if limit is None or v.hours <= limit:
                    ub = min(ub, _pair_hi(v, t))
        lower[t.c.id], upper[t.c.id] = lb, (ub if ub <= budget else _INF)

    group_ub: dict[tuple[str, str], float | int] = defaultdict(lambda: _INF)
    for t in ts:
        if upper[t.c.id] < group_ub[t.c.group]:
            group_ub[t.c.group] = upper[t.c.id]
    finite = sorted(u for u in group_ub.values() if u != _INF)
    threshold = finite[top_k - 1] if len(finite) >= top_k else _INF
    # a candidate whose upper bound is infinite may still be its group's best when the bound was
    # loose: only an exact candidate with no deadline/budget-feasible plan is surely out
    kept_t = [
        t for t in ts
        if not (t.exact and upper[t.c.id] == _INF)
        and lower[t.c.id] <= min(group_ub[t.c.group], threshold, budget)
    ]
    if not kept_t or not has_v:
        return [], kept_t

    worst_kept = max(group_ub[t.c.group] for t in kept_t)
    worst_kept = min(worst_kept, budget) if worst_kept != _INF else budget
    fastest_t = min(t.hours for t in kept_t)
    t_by_offer = _by_offer(kept_t)
    cheapest_a_lo = min(t.base_lo + t.ingress for t in kept_t)
    kept_v = []
    for v in vs:
        if room is not None and v.hours + fastest_t > room:
            continue
        lb = v.base_lo + v.destroy + cheapest_a_lo
        for t in t_by_offer.get(v.c.offer_key, ()):
            lb = min(lb, _pair_lo(v, t))
        if lb <= worst_kept:
            kept_v.append(v)
    return kept_v, kept_t


def prune(instance: PlanInstance, top_k: int = 5) -> Pruned:
    """The candidates the model needs for the top `top_k` plans (see the module docstring).

    Two rounds: the first with cheap cost bounds for block pricing, the second after the
    survivors' exact covers are known.
    """
    n = len(instance.validate) + len(instance.train)
    raw_v, raw_t = _deadline_filter(instance, instance.validate, instance.train)
    vs, ts = [_prepare(c) for c in raw_v], [_prepare(c) for c in raw_t]
    stats = Pruned([], [], dropped_deadline=n - len(vs) - len(ts))
    for final in (False, True):
        before = len(vs) + len(ts)
        vs, ts = _prune_dominated(vs, ts)
        middle = len(vs) + len(ts)
        vs, ts = _prune_bounds(instance, vs, ts, top_k)
        stats.dropped_dominated += before - middle
        stats.dropped_bounds += middle - len(vs) - len(ts)
        inexact = [x for x in (*vs, *ts) if not x.exact]
        if final or not inexact:
            break
        for x in inexact:
            x.make_exact()
    stats.validate, stats.train = vs, ts
    return stats


# --------------------------------------------------------------------------------------------
# The model


class _PlanVars:
    """The decision variables, named after the candidate ids, behind query methods."""

    def __init__(self, model: cp_model.CpModel, vs: Sequence[_Cand], ts: Sequence[_Cand]):
        self.model = model
        self.validate = list(vs)
        self.train = list(ts)
        self._use = {x.id: model.new_bool_var(f"use_{x.id}") for x in (*vs, *ts)}
        self._blocks: dict[str, dict[str, cp_model.IntVar]] = {}
        self._metered: dict[str, cp_model.IntVar] = {}
        self._stop = {v.id: model.new_bool_var(f"stop_{v.id}") for v in vs}
        self._on_kept_disk = {t.id: model.new_bool_var(f"on_kept_disk_{t.id}") for t in ts}

    def candidates(self) -> list[_Cand]:
        return [*self.validate, *self.train]

    def uses(self, cid: str) -> cp_model.IntVar:
        return self._use[cid]

    def stops(self, vid: str) -> cp_model.IntVar:
        """Validation `vid` is stopped (disk kept) over the idle gap."""
        return self._stop[vid]

    def on_kept_disk(self, tid: str) -> cp_model.IntVar:
        """Training `tid` starts on the validation's stopped disk: no ingress."""
        return self._on_kept_disk[tid]

    def add_block_count(self, cid: str, label: str, upper: int) -> cp_model.IntVar:
        var = self.model.new_int_var(0, upper, f"blocks_{cid}_{label}")
        self._blocks.setdefault(cid, {})[label] = var
        return var

    def set_metered_seconds(self, cid: str, var: cp_model.IntVar) -> None:
        self._metered[cid] = var

    def extract(self, solver: cp_model.CpSolver, status: str) -> Decision:
        chosen_v = next((v for v in self.validate if solver.boolean_value(self._use[v.id])), None)
        chosen_t = next(t for t in self.train if solver.boolean_value(self._use[t.id]))
        ids = [x.id for x in (chosen_v, chosen_t) if x is not None]
        blocks = {
            cid: {label: n for label, var in self._blocks.get(cid, {}).items() if (n := solver.value(var))}
            for cid in ids
        }
        metered = {cid: solver.value(self._metered[cid]) if cid in self._metered else 0 for cid in ids}
        idle = None
        if chosen_v is not None:
            idle = "stop" if solver.boolean_value(self._stop[chosen_v.id]) else "destroy"
        return Decision(
            validate_id=chosen_v.id if chosen_v else None,
            train_id=chosen_t.id,
            idle=idle,
            blocks={cid: b for cid, b in blocks.items() if b},
            metered_seconds=metered,
            status=status,  # type: ignore[arg-type]
        )


def add_stage_choice(model: cp_model.CpModel, pv: _PlanVars) -> None:
    model.add_exactly_one(pv.uses(t.id) for t in pv.train)
    if pv.validate:
        model.add_exactly_one(pv.uses(v.id) for v in pv.validate)


def add_billing_cover(model: cp_model.CpModel, pv: _PlanVars, x: _Cand) -> cp_model.LinearExprT:
    """Blocks plus metered time cover the candidate's seconds when it is chosen; returns its compute cost."""
    used = pv.uses(x.id)
    ip = x.c.pricing.units
    need = x.seconds
    covered: list[cp_model.LinearExprT] = []
    cost: list[cp_model.LinearExprT] = []
    for label, length, price in ip.blocks:
        count = pv.add_block_count(x.id, label, -(-need // length))
        model.add(count == 0).only_enforce_if(~used)
        covered.append(count * length)
        cost.append(count * price)
    if ip.rate is not None:
        g, minimum = ip.granularity, ip.minimum
        max_granules = -(-need // g)
        granules = model.new_int_var(0, max_granules, f"granules_{x.id}")
        metered_on = model.new_bool_var(f"minimum_charge_{x.id}")  # any metered time: the minimum applies
        billed = model.new_int_var(0, max(max_granules * g, minimum), f"metered_seconds_{x.id}")
        model.add_implication(metered_on, used)
        model.add(granules >= 1).only_enforce_if(metered_on)
        model.add(granules == 0).only_enforce_if(~metered_on)
        model.add_max_equality(billed, [granules * g, metered_on * minimum])
        pv.set_metered_seconds(x.id, billed)
        covered.append(billed)
        cost.append(billed * ip.rate)
    model.add(sum(covered) >= need).only_enforce_if(used)
    return sum(cost)


def add_fixed_charges(model: cp_model.CpModel, pv: _PlanVars) -> cp_model.LinearExprT:
    """Running storage and egress of every chosen candidate, and the validation run's ingress."""
    terms = [pv.uses(x.id) * (x.storage + x.egress) for x in pv.candidates()]
    terms += [pv.uses(v.id) * v.ingress for v in pv.validate]
    return sum(terms)


def add_idle_choice(model: cp_model.CpModel, pv: _PlanVars) -> cp_model.LinearExprT:
    """Stop (same offer only) or destroy across the idle gap; returns the gap's and the ingress cost."""
    if not pv.validate:
        for t in pv.train:
            model.add(pv.on_kept_disk(t.id) == 0)
        return sum(pv.uses(t.id) * t.ingress for t in pv.train)
    for v in pv.validate:
        model.add_implication(pv.stops(v.id), pv.uses(v.id))
    for t in pv.train:
        model.add_implication(pv.on_kept_disk(t.id), pv.uses(t.id))
    v_by_offer, t_by_offer = _by_offer(pv.validate), _by_offer(pv.train)
    for offer in set(v_by_offer) | set(t_by_offer):
        stopped = [pv.stops(v.id) for v in v_by_offer.get(offer, [])]
        kept = [pv.on_kept_disk(t.id) for t in t_by_offer.get(offer, [])]
        model.add(sum(stopped) == sum(kept))  # a stopped disk is picked up by training on that offer
    terms = [pv.uses(v.id) * v.destroy + pv.stops(v.id) * (v.stop - v.destroy) for v in pv.validate]
    terms += [pv.uses(t.id) * t.ingress - pv.on_kept_disk(t.id) * t.ingress for t in pv.train]
    return sum(terms)


def add_deadline(model: cp_model.CpModel, pv: _PlanVars, inst: PlanInstance) -> None:
    """validation hours + idle + training hours <= deadline, exactly, with Decimal hours.

    Training hours are ranked (1 = fastest); each validation allows the ranks whose hours fit in
    what it leaves, so sum(rank x use_t) <= sum(allowed x use_v) is the deadline, in integers.
    """
    if inst.deadline_hours is None:
        return
    if not pv.validate:
        for t in pv.train:
            if t.hours > inst.deadline_hours:
                model.add(pv.uses(t.id) == 0)
        return
    distinct = sorted({t.hours for t in pv.train})
    rank = {h: i + 1 for i, h in enumerate(distinct)}
    room = inst.deadline_hours - inst.idle_hours
    allowed = {v.id: bisect.bisect_right(distinct, room - v.hours) for v in pv.validate}
    train_rank = sum(pv.uses(t.id) * rank[t.hours] for t in pv.train)
    model.add(train_rank <= sum(pv.uses(v.id) * allowed[v.id] for v in pv.validate))


def add_budget(model: cp_model.CpModel, total: cp_model.LinearExprT, inst: PlanInstance) -> None:
    if inst.budget is not None:
        model.add(total <= math.floor(inst.budget * SCALE))


def _largest_total(pv: _PlanVars) -> int:
    """An upper bound on any plan's objective, to check it fits CP-SAT's int64 arithmetic."""
    worst = 0
    for x in pv.candidates():
        ip = x.c.pricing.units
        compute = sum(-(-x.seconds // length) * price for _, length, price in ip.blocks)
        if ip.rate is not None:
            compute += ip.rate * max(-(-x.seconds // ip.granularity) * ip.granularity, ip.minimum)
        worst += compute + x.storage + x.ingress + x.egress + x.destroy + x.stop
    return worst


@dataclass
class _Model:
    model: cp_model.CpModel
    vars: _PlanVars
    total: cp_model.LinearExprT


def build_model(inst: PlanInstance, vs: Sequence[_Cand], ts: Sequence[_Cand]) -> _Model:
    model = cp_model.CpModel()
    pv = _PlanVars(model, vs, ts)
    add_stage_choice(model, pv)
    total = sum(add_billing_cover(model, pv, x) for x in pv.candidates())
    total += add_fixed_charges(model, pv) + add_idle_choice(model, pv)
    add_deadline(model, pv, inst)
    add_budget(model, total, inst)
    if _largest_total(pv) >= _INT_LIMIT:
        raise ValueError("plan totals are too large for exact integer arithmetic; quote in a larger currency unit")
    model.minimize(total)
    return _Model(model, pv, total)


def _solver(time_limit_s: float) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    p = solver.parameters
    p.max_time_in_seconds = time_limit_s
    p.num_workers = 1  # one worker + fixed seed: the same instance always gives the same plans
    p.random_seed = 0
    p.relative_gap_limit = 0.0  # "cheapest" means proven cheapest
    p.absolute_gap_limit = 0.0
    return solver


# --------------------------------------------------------------------------------------------
# Solve


class _TimedOut(Exception):
    """CP-SAT hit its time limit before finding any plan: nothing is proven either way."""


def _solve_core(inst: PlanInstance, top_k: int, time_limit_s: float, do_prune: bool) -> list[Decision]:
    if do_prune:
        pruned = prune(inst, top_k)
        vs, ts = pruned.validate, pruned.train
        log.debug("pruned to %d validation and %d training candidates (deadline %d, dominated %d, bounds %d)",
                  len(vs), len(ts), pruned.dropped_deadline, pruned.dropped_dominated, pruned.dropped_bounds)
    else:
        vs = [_prepare(c, exact=True) for c in inst.validate]
        ts = [_prepare(c, exact=True) for c in inst.train]
    if not ts or (inst.validate and not vs):
        return []
    built = build_model(inst, vs, ts)
    groups: dict[tuple[str, str], list[_Cand]] = defaultdict(list)
    for t in ts:
        groups[t.c.group].append(t)
    decisions: list[Decision] = []
    solver = _solver(time_limit_s)
    while len(decisions) < top_k:
        status = solver.solve(built.model)
        if status == cp_model.INFEASIBLE:
            break
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            log.warning("CP-SAT stopped with status %s after %d plan(s)", solver.status_name(status), len(decisions))
            if not decisions:
                raise _TimedOut()
            break
        decision = built.vars.extract(solver, "OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE")
        log.debug("plan %d: %s, objective %d, bound %d", len(decisions) + 1, solver.status_name(status),
                  solver.objective_value, solver.best_objective_bound)
        decisions.append(decision)
        group = inst.by_id[decision.train_id].group
        built.model.add(sum(built.vars.uses(t.id) for t in groups[group]) == 0)  # plan k+1: another provider/GPU
    return decisions


def solve(
    instance: PlanInstance,
    top_k: int = 5,
    time_limit_s: float = DEFAULT_TIME_LIMIT_S,
    *,
    prune_first: bool = True,
) -> list[Decision]:
    """Up to `top_k` plans, cheapest first, each on a different training (provider, GPU).

    Raises NoFeasiblePlan, naming the binding constraint (budget, deadline or both), when no plan
    meets them. `Decision.status` is OPTIMAL when CP-SAT proved the plan cheapest (gap 0) and
    FEASIBLE when the time limit cut the proof short. One worker and a fixed seed make the result
    the same on every run.
    """
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    try:
        decisions = _solve_core(instance, top_k, time_limit_s, prune_first)
    except _TimedOut:
        raise NoFeasiblePlan(
            f"The solver found no plan within its {time_limit_s:g} s time limit; allow it more time.",
            ["time limit"],
        ) from None
    if not decisions:
        reasons = diagnose(instance, time_limit_s)
        raise NoFeasiblePlan("No plan meets the constraints: " + "; ".join(reasons) + ".", reasons)
    return decisions


# --------------------------------------------------------------------------------------------
# Why nothing is feasible


def _days(hours: Decimal, up: bool = False) -> str:
    """Hours as days for messages: whole days exactly, otherwise one decimal (rounded up if `up`).

    >>> _days(Decimal(120)), _days(Decimal(175), up=True), _days(Decimal(24))
    ('5 days', '7.3 days', '1 day')
    """
    days = hours / 24
    if days == days.to_integral_value():
        text = str(int(days))
    else:
        text = str(days.quantize(Decimal("0.1"), rounding=ROUND_CEILING if up else ROUND_HALF_UP))
    return "1 day" if text == "1" else f"{text} days"


def _money(amount: Decimal, currency: str, up: bool = False) -> str:
    if up:
        places = round_money(Decimal(0), currency).as_tuple().exponent
        amount = amount.quantize(Decimal(1).scaleb(places), rounding=ROUND_CEILING)  # type: ignore[arg-type]
    return f"{round_money(amount, currency)} {currency}"


def _cheapest_total(inst: PlanInstance, time_limit_s: float) -> Decimal | None:
    """The cheapest plan's total for `inst`, or None when it has none."""
    found = _solve_core(inst, 1, time_limit_s, True)
    return plan_cost(inst, found[0]).total if found else None


def diagnose(inst: PlanInstance, time_limit_s: float = DEFAULT_TIME_LIMIT_S) -> list[str]:
    """Why `inst` has no plan: relax the budget and the deadline, and say which one binds."""
    if not inst.train:
        return ["no offer is left to train on (every offer was rejected; --explain lists why)"]
    reasons: list[str] = []
    ccy = inst.currency
    deadline_alone_fails = False
    if inst.deadline_hours is not None:
        fastest = min(t.hours for t in inst.train)
        if inst.validate:
            fastest += min(v.hours for v in inst.validate) + inst.idle_hours
        if fastest > inst.deadline_hours:
            deadline_alone_fails = True
            reasons.append(
                f"deadline {_days(inst.deadline_hours)}; the fastest plan needs {_days(fastest, up=True)}"
                " (extend --deadline-days)"
            )
    if inst.budget is not None:
        within_deadline = None if deadline_alone_fails else _cheapest_total(replace(inst, budget=None), time_limit_s)
        at_any_speed = None
        if inst.deadline_hours is not None:
            at_any_speed = _cheapest_total(replace(inst, budget=None, deadline_hours=None), time_limit_s)
        if within_deadline is not None and within_deadline > inst.budget:
            advice = "raise --budget"
            if at_any_speed is not None and at_any_speed <= inst.budget:
                advice += f", or extend --deadline-days: without it a plan costs {_money(at_any_speed, ccy, up=True)}"
            reasons.append(
                f"budget {_money(inst.budget, ccy)} is below the cheapest feasible plan "
                f"{_money(within_deadline, ccy, up=True)} ({advice})"
            )
        elif deadline_alone_fails and at_any_speed is not None and at_any_speed > inst.budget:
            reasons.append(
                f"budget {_money(inst.budget, ccy)} is below the cheapest plan at any speed "
                f"{_money(at_any_speed, ccy, up=True)} (raise --budget)"
            )
    if not reasons:  # pragma: no cover - every infeasible instance binds on budget or deadline
        reasons.append("no combination of offers meets the budget and the deadline together")
    return reasons
