"""Choosing plans: which validation, which idle choice, which training run. The only ortools user.

Input is a `PlanInstance` of candidates (billing `Use`s with what combining them needs); output is
up to `top_k` priced plans (`billing.PlanBill`), best first, each training on a different
(provider, GPU). Every cost compared here comes from billing.py: its bounds to prune, its exact
pricer for what survives. Nothing here prices anything.

A plan is a training candidate, plus, when the instance asks for validation, one compatible
validation candidate (it runs the same job: `Candidate.signature`) and the idle choice between
them: on the same instance (a lease: "continue" without a gap, "stop" over it) or destroy. The
deadline holds for the pessimistic wall clock (validation, copy-out when destroyed, the gap and
the training run's `wall_hours`); the budget for the known total.

Pruning (exact: it never removes a plan that could be among the top K):
1. candidates that miss the deadline even with the fastest compatible partner go;
2. validation candidate B goes when a compatible A of the same signature, no slower, costs
   surely less (A's upper bound < B's lower bound) -- unless B can lease with some training
   candidate (its own instance);
3. each training candidate's best plan is bounded below and above; a (provider, GPU) group whose
   lower bound exceeds the K-th best group's upper bound (or the budget) cannot be in the top K,
   and a candidate whose lower bound exceeds its group's upper bound cannot be its group's best.
Then the survivors are priced exactly. A small instance is settled by enumerating every
(validation, training, idle) combination; a large one by a CP-SAT model over the exact costs
(`ENUMERATION_LIMIT`). Ranking is by known total, a fully priced plan before one with unknown
charges at the same total; with `rank_by="per_token"` (a fixed rental period, where plans do
different amounts of work) by cost per token. The property test (tests/test_solver_property.py)
checks all of this against an exhaustive search written independently.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Literal

import numpy as np

from rentopt.optimizer.billing import (
    Bounds,
    Choice,
    PlanBill,
    StageBill,
    Use,
    idle_bounds,
    idle_choice,
    lease_bounds,
    lease_refusal,
    price_alone,
    price_plan,
    round_money,
    use_bounds,
)
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.redact import redacted_logger
from rentopt.optimizer.ties import stable_order

log = redacted_logger("rentopt.solver")

# Pairs (validation x training) up to which the pruned instance is enumerated; above, CP-SAT.
ENUMERATION_LIMIT = 4000
DEFAULT_TIME_LIMIT_S = 10.0
_INF = Decimal("Infinity")


@dataclass(frozen=True)
class Candidate:
    """A billing `Use` and what the solver needs to combine it.

    `wall_hours`: the pessimistic running hours for the deadline (training: the slow end of the
    timing range, with import and export; validation: import and run, without the copy-out that
    only destroying needs, which is `use.out_hours`). `signature`: for training, the key a
    validation must satisfy to validate the same job; for validation, the keys it satisfies.
    `tokens`: the work a training candidate does (ranked per token with `rank_by="per_token"`).
    """

    use: Use
    group: tuple[str, str] = ("", "")
    wall_hours: Decimal | None = None
    signature: Hashable | frozenset = None
    tokens: Decimal | None = None

    @property
    def id(self) -> str:
        return self.use.id

    @property
    def wall(self) -> Decimal:
        return self.wall_hours if self.wall_hours is not None else self.use.hours


@dataclass(frozen=True)
class PlanInstance:
    """The solver's input: candidate validation and training runs, with the job's limits."""

    validate: tuple[Candidate, ...]
    train: tuple[Candidate, ...]
    idle_hours: Decimal = Decimal(0)
    deadline_hours: Decimal | None = None
    budget: Decimal | None = None
    currency: str = "USD"
    rank_by: Literal["total", "per_token"] = "total"

    def __post_init__(self) -> None:
        object.__setattr__(self, "validate", tuple(self.validate))
        object.__setattr__(self, "train", tuple(self.train))
        ids = [c.id for c in (*self.validate, *self.train)]
        if len(set(ids)) != len(ids):
            raise ValueError("candidate ids must be unique")
        for c in self.validate:
            if c.use.kind != "validate":
                raise ValueError(f"{c.id} is a {c.use.kind} use in the validation list")
        for c in self.train:
            if c.use.kind != "train":
                raise ValueError(f"{c.id} is a {c.use.kind} use in the training list")
            if self.rank_by == "per_token" and not (c.tokens and c.tokens > 0):
                raise ValueError(f"{c.id}: ranking per token needs its tokens")
        if self.idle_hours < 0:
            raise ValueError("idle_hours must not be negative")

    @property
    def uses(self) -> dict[str, Use]:
        return {c.id: c.use for c in (*self.validate, *self.train)}


def compatible(v: Candidate, t: Candidate) -> bool:
    """Validation `v` runs the same job as training `t` (see Candidate.signature)."""
    sig = v.signature
    return t.signature in sig if isinstance(sig, frozenset) else t.signature == sig


def _destroy_wall(v: Candidate) -> Decimal:
    return v.wall + v.use.out_hours


def _fits(inst: PlanInstance, wall: Decimal) -> bool:
    return inst.deadline_hours is None or wall <= inst.deadline_hours


@dataclass
class Solution:
    """The chosen plans, best first, and how the instance was settled (for tests and benchmarks)."""

    plans: list[PlanBill]
    method: Literal["enumeration", "cp-sat"] = "enumeration"
    pruned: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Pruning: one routine, over arrays of bounds
#
# The planner's first pass calls `prune_arrays` on billing's rough bounds for every candidate of
# a catalog (no per-candidate objects); `solve` calls it on an instance's exact bounds. It only
# drops what a true inequality shows cannot be among the top-K plans; ties are kept.

_INF_F = float("inf")
# Up to this many validation keys, their prefix bounds and searches run one key at a time (each a
# long numpy call); above, all keys at once through ranks (a sort), which many short keys need.
FEW_SEGMENTS = 32


@dataclass
class TrainArrays:
    """The training candidates as arrays, one element each, for pruning."""

    lo: np.ndarray  # bounds of the candidate's own bill (known part)
    hi: np.ndarray
    wall: np.ndarray  # pessimistic hours (the deadline's)
    group: np.ndarray  # int: the (provider, GPU) group top-K plans differ in
    need: np.ndarray  # int: the validation key it requires (-1: none)
    tokens: np.ndarray | None = None  # per-token ranking: the work each does
    instance: np.ndarray | None = None  # int: the instance a lease continues on (offer and kind)


@dataclass
class ValidateArrays:
    """The validation candidates as arrays, one element each, for pruning."""

    lo: np.ndarray  # bounds of the validation on its own instance, destroyed after (copy-out included)
    hi: np.ndarray
    wall: np.ndarray  # running hours kept (a lease)
    destroy_wall: np.ndarray  # running hours when destroyed (copy-out included)
    keys: np.ndarray  # int, shape (n, k): the validation keys it satisfies (-1 padding)
    instance: np.ndarray | None = None  # int: as TrainArrays.instance (one validation per key and instance)


@dataclass
class LeaseArrays:
    """Validation-then-training pairs on one instance (a kept lease), as arrays."""

    v: np.ndarray  # index into the validation arrays
    t: np.ndarray  # index into the training arrays
    lo: np.ndarray  # bounds of the plan this pair gives: billing's idle choice between keeping the
    hi: np.ndarray  # instance and destroying it, so they must cover both unless the choice is known

    @classmethod
    def empty(cls) -> LeaseArrays:
        z = np.zeros(0)
        return cls(z.astype(np.int64), z.astype(np.int64), z, z)


@dataclass
class Kept:
    """What pruning kept (masks over the arrays), what it dropped and why, and what it compared with."""

    train: np.ndarray  # bool masks
    validate: np.ndarray
    leases: np.ndarray
    dropped: dict[str, int] = field(default_factory=dict)
    # What the bounds step compared with, for a caller that pruned a subset first: an upper bound
    # on each group's best plan (by TrainArrays.group; inf: none), the K-th best group's, and per
    # validation key its destroy-path partners by wall clock (`_Partners.second_no_later` gives the
    # second-lowest upper bound on distinct instances among those no slower than a wall).
    group_ub: np.ndarray = field(default_factory=lambda: np.zeros(0))
    threshold: float = _INF_F
    partners: _Partners = field(default_factory=lambda: _Partners.none())


def prune_arrays(tr: TrainArrays, va: ValidateArrays | None, le: LeaseArrays, *, idle_hours: float,
                 deadline: float | None, budget: float | None, top_k: int) -> Kept:
    """Which candidates can still be among the top `top_k` plans (see the module docstring)."""
    nt = len(tr.lo)
    nv = 0 if va is None else len(va.lo)
    keep_t = np.ones(nt, dtype=bool)
    keep_v = np.ones(nv, dtype=bool)
    room_of = lambda walls: (np.full(len(walls), _INF_F) if deadline is None  # noqa: E731
                             else deadline - idle_hours - walls)
    dropped = {"deadline": 0, "dominated": 0, "bounds": 0}
    # 1. the deadline, with the fastest compatible partner
    if deadline is not None:
        if va is None:
            keep_t &= tr.wall <= deadline
        else:
            # per key, its fastest validation
            lookup = np.full(int(max(va.keys.max(initial=-1), tr.need.max(initial=-1))) + 2, _INF_F)
            rows = np.repeat(np.arange(nv), va.keys.shape[1])
            flat = va.keys.ravel()
            ok = keep_v[rows] & (flat >= 0)
            np.minimum.at(lookup, flat[ok], va.wall[rows[ok]])
            need_fast = lookup[tr.need]  # need -1 reads the last slot: infinity
            keep_t &= need_fast + idle_hours + tr.wall <= deadline
            quickest = tr.wall[keep_t].min() if keep_t.any() else _INF_F
            keep_v &= va.wall + idle_hours + quickest <= deadline
        dropped["deadline"] = nt - int(keep_t.sum()) + nv - int(keep_v.sum())
    if not keep_t.any() or (va is not None and not keep_v.any()):
        return Kept(np.zeros(nt, bool), np.zeros(nv, bool), np.zeros(len(le.v), bool), dropped)
    lease_ok = keep_t[le.t] & (keep_v[le.v] if va is not None else False)
    # 2. validation dominance per key, as a destroy-path partner: a slower one survives only if
    #    it could be cheaper than every faster one (a leasing validation stays in its lease pairs)
    #    Billing's idle rule may refuse the destroy option of a validation on a training run's
    #    own instance, so a validation is dominated only by two faster, cheaper ones on different
    #    instances, and a run's destroy-path upper bound comes from a partner on another instance.
    #    Every key at once: its validations are one segment of arrays sorted by key.
    partners = _Partners.none()
    if va is not None:
        survive = np.zeros(nv, dtype=bool)
        v_inst = va.instance if va.instance is not None else np.arange(nv)
        order, key_of = _by_key_and_wall(va, keep_v)
        best_before, second_before, _ = _segmented_best_two(va.hi[order], v_inst[order], key_of, before=True)
        survives = va.lo[order] <= second_before
        survive[order[survives]] = True
        partners = _Partners.of(order[survives], key_of[survives], va, v_inst)
        dropped["dominated"] = int(keep_v.sum()) - int(survive.sum())
    # 3. each training candidate's best plan, bounded
    if va is None:
        plan_lo, plan_hi = tr.lo.copy(), tr.hi.copy()
    else:
        plan_lo, plan_hi = np.full(nt, _INF_F), np.full(nt, _INF_F)
        rooms = room_of(tr.wall)
        t_inst = tr.instance if tr.instance is not None else np.full(nt, -1)
        mine = np.flatnonzero(keep_t & (tr.need >= 0))
        cut = partners.last_no_later(tr.need[mine], rooms[mine])  # its latest partner that leaves it room
        mine, cut = mine[cut >= 0], cut[cut >= 0]
        plan_lo[mine] = tr.lo[mine] + partners.lo[cut]
        usable = np.where(partners.best_instance[cut] != t_inst[mine], partners.best[cut], partners.second[cut])
        plan_hi[mine] = tr.hi[mine] + usable
        if lease_ok.any():
            np.minimum.at(plan_lo, le.t[lease_ok], le.lo[lease_ok])
            np.minimum.at(plan_hi, le.t[lease_ok], le.hi[lease_ok])
    if budget is not None:
        plan_lo[plan_lo > budget] = _INF_F
        plan_hi[plan_hi > budget] = _INF_F
    if tr.tokens is not None:
        plan_lo, plan_hi = plan_lo / tr.tokens, plan_hi / tr.tokens
    plan_lo[~keep_t] = _INF_F
    plan_hi[~keep_t] = _INF_F
    groups = int(tr.group.max()) + 1 if nt else 0
    group_ub = np.full(groups, _INF_F)
    np.minimum.at(group_ub, tr.group, plan_hi)
    finite = np.sort(group_ub[np.isfinite(group_ub)])
    threshold = finite[top_k - 1] if len(finite) >= top_k else _INF_F
    kept_t = np.isfinite(plan_lo) & (plan_lo <= np.minimum(group_ub[tr.group], threshold))
    dropped["bounds"] = int(keep_t.sum()) - int(kept_t.sum())
    kept_leases = lease_ok & kept_t[le.t]
    kept_v = np.zeros(nv, dtype=bool)
    if va is not None:
        kept_v[le.v[kept_leases]] = True
        kept_v[partners.no_later(tr.need[kept_t], room_of(tr.wall)[kept_t])] = True
    return Kept(kept_t, kept_v, kept_leases, dropped, group_ub, float(threshold), partners)


def rows_per_key(keys: np.ndarray, alive: np.ndarray) -> dict[int, np.ndarray]:
    """For each key, the alive rows that satisfy it (one sort, no per-key scan of all rows)."""
    rows = np.repeat(np.arange(len(keys)), keys.shape[1])
    flat = keys.ravel()
    ok = alive[rows] & (flat >= 0)
    rows, flat = rows[ok], flat[ok]
    order = stable_order(flat)  # rows stay ascending within a key: they are ascending already
    rows, flat = rows[order], flat[order]
    cut = np.flatnonzero(np.diff(flat)) + 1
    # rows are ascending within a key, and a row lists each key once
    return {int(group_keys[0]): group_rows
            for group_keys, group_rows in zip(np.split(flat, cut), np.split(rows, cut)) if len(group_keys)}


def _by_key_and_wall(va: ValidateArrays, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The alive validations once per key they satisfy, by key, then destroy wall, then upper
    bound, then row (a stable sort): (rows, their key)."""
    rows = np.repeat(np.arange(len(va.keys)), va.keys.shape[1])  # row-major: rows ascending per key
    flat = va.keys.ravel()
    ok = alive[rows] & (flat >= 0)
    rows, flat = rows[ok], flat[ok]
    order = np.lexsort((va.hi[rows], va.destroy_wall[rows], flat))
    return rows[order], flat[order]


def _segment_starts(seg: np.ndarray) -> np.ndarray:
    """Mask of the first element of each run of equal, sorted segment labels."""
    first = np.ones(len(seg), dtype=bool)
    first[1:] = seg[1:] != seg[:-1]
    return first


def _ranks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values ascending, each value's rank 1..n among them; NaN: rank 0)."""
    distinct, rank = np.unique(values, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64) + 1
    rank[np.isnan(values)] = 0
    return distinct, rank


def _segmented_min_accumulate(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """np.minimum.accumulate within each run of equal, sorted labels `seg` (NaN spreads as there).

    Few runs: one accumulate each. Many: exact in one pass, as values become their ranks and each
    earlier run is lifted above every later one, so one integer running minimum never reaches
    back past a run's start.

    >>> _segmented_min_accumulate(np.array([3.0, 1.0, 2.0, 5.0, np.nan, 4.0]), np.array([0, 0, 0, 1, 1, 2])).tolist()
    [3.0, 1.0, 1.0, 5.0, nan, 4.0]
    """
    values = values.astype(float)
    first = _segment_starts(seg)
    if not len(values) or first.sum() <= FEW_SEGMENTS:
        out = np.empty_like(values)
        bounds = np.r_[np.flatnonzero(first), len(values)]
        for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            np.minimum.accumulate(values[start:stop], out=out[start:stop])
        return out
    distinct, rank = _ranks(values)
    number = np.cumsum(first) - 1
    lift = (number[-1] - number) * (len(distinct) + 1)
    least = np.minimum.accumulate(lift + rank) - lift
    return np.r_[np.nan, distinct][least]


def _segmented_best_two(values: np.ndarray, instances: np.ndarray, seg: np.ndarray, *, before: bool
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Within each run of equal, sorted labels `seg`: the running minimum, the running second
    minimum and the minimum's instance (values on distinct instances); `before=True` gives them
    over the elements of the run strictly before each position (inf, inf, -1 at its start).

    The second minimum of a prefix is min over it of max(x_k, the minimum before k).

    >>> b, s, i = _segmented_best_two(np.array([5.0, 3.0, 4.0, 1.0, 2.0, 6.0]), np.arange(6),
    ...                               np.array([0, 0, 0, 0, 1, 1]), before=False)
    >>> b.tolist(), s.tolist(), i.tolist()
    ([5.0, 3.0, 3.0, 1.0, 2.0, 2.0], [inf, 5.0, 4.0, 3.0, inf, 6.0], [0, 1, 1, 3, 4, 4])
    """
    first = _segment_starts(seg)
    best = _segmented_min_accumulate(values, seg)
    best_before = _shifted(best, first, _INF_F)
    second = _segmented_min_accumulate(np.maximum(values, best_before), seg)
    positions = np.arange(len(values))
    at_best = np.maximum.accumulate(np.where((values <= best_before) | first, positions, 0)) if len(values) \
        else positions
    best_instance = instances[at_best]
    if before:
        return best_before, _shifted(second, first, _INF_F), _shifted(best_instance, first, -1)
    return best, second, best_instance


def _shifted(values: np.ndarray, first: np.ndarray, fill: float) -> np.ndarray:
    """Each element's predecessor within its segment (`fill` at a segment's start)."""
    out = np.empty_like(values)
    out[1:] = values[:-1]
    out[first] = fill
    return out


@dataclass
class _Partners:
    """The destroy-path partners of every validation key: one segment per key (keys ascending),
    by wall clock within it, with prefix bounds over the segment."""

    keys: np.ndarray  # the keys with partners, ascending
    start: np.ndarray  # each key's segment in the arrays below
    seg: np.ndarray  # per partner: the number of its key's segment
    walls: np.ndarray  # destroy walls, ascending within a segment
    lo: np.ndarray  # lowest lower bound so far
    best: np.ndarray  # lowest upper bound so far ...
    second: np.ndarray  # ... and the lowest on an instance other than the best's
    best_instance: np.ndarray
    alive: np.ndarray  # their indices in the validation arrays

    @classmethod
    def none(cls) -> _Partners:
        z, i = np.zeros(0), np.zeros(0, dtype=np.int64)
        return cls(i, i, i, z, z, z, z, i, i)

    @classmethod
    def of(cls, rows: np.ndarray, keys: np.ndarray, va: ValidateArrays, instances: np.ndarray) -> _Partners:
        """From the surviving validations `rows`, sorted by key (`keys`) and destroy wall."""
        first = _segment_starts(keys)
        best, second, best_instance = _segmented_best_two(va.hi[rows], instances[rows], keys, before=False)
        return cls(keys[first], np.flatnonzero(first), np.cumsum(first) - 1, va.destroy_wall[rows],
                   _segmented_min_accumulate(va.lo[rows], keys), best, second, best_instance, rows)

    def _segment(self, keys: np.ndarray) -> np.ndarray:
        """The segment of each key (-1: a key without partners)."""
        # keys are small non-negative numbers: a table of them, one slot past the largest for the rest
        top = int(self.keys[-1]) + 1 if len(self.keys) else 0
        table = np.full(top + 1, -1, dtype=np.int64)
        table[self.keys] = np.arange(len(self.keys))
        return table[np.where((keys >= 0) & (keys < top), keys, top)]

    def last_no_later(self, keys: np.ndarray, walls: np.ndarray) -> np.ndarray:
        """Per (key, wall): the index of the key's last partner whose wall is <= it (as
        searchsorted(side="right") within the key's segment, less one); -1: none. `keys` may
        have a column per key of a row, `walls` one per row."""
        return self._cut(self._segment(keys), walls)

    def _cut(self, seg: np.ndarray, walls: np.ndarray) -> np.ndarray:
        if not len(self.keys):
            return np.full(seg.shape, -1, dtype=np.int64)
        # one searchsorted over (segment, rank of wall) numbers; a wall's rank is how many distinct
        # partner walls are <= it, so the numbers keep searchsorted's order (NaN last) exactly.
        # Segment -1 (no partners) gives numbers below every partner's: none found.
        distinct = np.unique(self.walls)
        width = len(distinct) + 1
        mine = self.seg * width + np.searchsorted(distinct, self.walls, side="right")
        rank = np.searchsorted(distinct, walls, side="right")
        at = np.searchsorted(mine, seg * width + (rank[:, None] if seg.ndim == 2 else rank), side="right")
        start = np.append(self.start, np.iinfo(np.int64).max)[seg]
        return np.where(at > start, at - 1, -1)

    def no_later(self, keys: np.ndarray, walls: np.ndarray) -> np.ndarray:
        """The partners (validation indices) of every key in `keys` whose wall is <= the
        largest of that key's `walls`."""
        seg = self._segment(keys)
        known = seg >= 0
        if not known.any():
            return np.zeros(0, dtype=np.int64)
        latest = np.full(len(self.keys), -np.inf)
        np.maximum.at(latest, seg[known], walls[known])
        wanted = np.unique(seg[known])
        last = self.last_no_later(self.keys[wanted], latest[wanted])
        wanted, last = wanted[last >= 0], last[last >= 0]
        marks = np.zeros(len(self.walls) + 1, dtype=np.int64)  # +1 at a range's start, -1 past its end
        np.add.at(marks, self.start[wanted], 1)
        np.add.at(marks, last + 1, -1)
        return self.alive[np.cumsum(marks[:-1]) > 0]

    def of_key(self, key: int) -> tuple[np.ndarray, np.ndarray] | None:
        """One key's partners' walls (ascending) and, at each, the second-lowest upper bound on
        distinct instances among those no slower; None: the key has none."""
        seg = int(self._segment(np.array([key]))[0])
        if seg < 0:
            return None
        stop = self.start[seg + 1] if seg + 1 < len(self.start) else len(self.walls)
        return self.walls[self.start[seg]:stop], self.second[self.start[seg]:stop]

    def second_no_later(self, keys: np.ndarray, walls: np.ndarray) -> np.ndarray:
        """Per (key, wall): the second-lowest upper bound on distinct instances among the key's
        partners no slower than the wall (inf: none); NaN where the key has no partners. `keys`
        and the result: as in `last_no_later`."""
        seg = self._segment(keys)
        out = np.append(self.second, _INF_F)[self._cut(seg, walls)]  # -1 reads the inf
        out[seg < 0] = np.nan
        return out


@dataclass
class _Pruned:
    """The pruned instance, with the exact prices worked out on the way."""

    validate: list[Candidate]
    train: list[Candidate]
    leases: dict[tuple[str, str], Bounds]  # (validate id, train id) -> bounds
    dropped: dict[str, int]
    # exact prices already worked out while pruning, for the search to reuse
    alone: dict[str, tuple[Decimal, bool]] = field(default_factory=dict)  # use id -> (known total, unknown?)
    bills: dict[tuple[str, str], PlanBill] = field(default_factory=dict)  # same-instance pair -> its plan
    unrounded: dict[str, Decimal] = field(default_factory=dict)  # use id -> its bill before rounding to the cent
    stages: dict[str, tuple[StageBill, ...]] = field(default_factory=dict)  # use id -> its bill alone (price_alone)


def _score(inst: PlanInstance, total: Decimal, t: Candidate) -> Decimal:
    return total / t.tokens if inst.rank_by == "per_token" else total  # type: ignore[operator]


def _widened(b: Bounds) -> tuple[float, float]:
    """Exact Decimal bounds as floats that still contain them."""
    lo, hi = float(b.lo), float(b.hi)
    return lo - 1e-9 * max(1.0, abs(lo)), hi + 1e-9 * max(1.0, abs(hi))


def prune(inst: PlanInstance, top_k: int) -> _Pruned:
    """The candidates of an instance that can still be in the top `top_k` plans.

    Two rounds of `prune_arrays`: first with billing's bounds (the exact covers, open by the
    rounding of the bill's lines; a pair's idle choice bounded by `idle_bounds`), then with the
    exact totals of the survivors, whose bills alone are kept for the plans that destroy.
    """
    G = inst.idle_hours
    ts, vs = list(inst.train), list(inst.validate)
    if not ts or (inst.validate and not vs):
        return _Pruned([], [], {}, {})
    pairs: list[tuple[int, int]] = []
    by_key: dict[tuple, list[int]] = defaultdict(list)
    for j, t in enumerate(ts):
        by_key[t.use.key].append(j)
    for i, v in enumerate(vs):
        for j in by_key.get(v.use.key, ()):
            if compatible(v, ts[j]) and _fits(inst, v.wall + G + ts[j].wall) and \
                    lease_refusal(v.use, ts[j].use, G) is None:
                pairs.append((i, j))
    t_exact = [use_bounds(t.use) for t in ts]
    v_exact = [use_bounds(v.use) for v in vs]
    t_b, v_b = [_widened(b) for b in t_exact], [_widened(b) for b in v_exact]
    l_b = []
    for i, j in pairs:  # the pair's plan is keep or destroy, as billing's idle rule decides
        found = lease_bounds(vs[i].use, ts[j].use, G)
        assert found is not None  # a pair is a lease billing allows
        if _fits(inst, _destroy_wall(vs[i]) + G + ts[j].wall):
            t, v = t_exact[j], v_exact[i]
            found = idle_bounds(found, Bounds(t.lo + v.lo, t.hi + v.hi, t.unknown or v.unknown))
        l_b.append(_widened(found))
    kept = _prune_round(inst, ts, vs, pairs, t_b, v_b, l_b, top_k)
    dropped = dict(kept.dropped)
    # round two: the exact totals of what survived
    t_idx, v_idx = np.flatnonzero(kept.train), np.flatnonzero(kept.validate)
    p_idx = np.flatnonzero(kept.leases)
    alone: dict[str, tuple[Decimal, bool]] = {}
    unrounded: dict[str, Decimal] = {}  # kept for the search's tie-break: each use is priced once
    bills: dict[tuple[str, str], PlanBill] = {}
    stages: dict[str, tuple[StageBill, ...]] = {}  # each survivor's bill alone, for the destroy plans
    _alone_totals([ts[j].use for j in t_idx] + [vs[i].use for i in v_idx], alone, unrounded, stages)
    t_exact = {int(j): _exact(alone[ts[j].id][0]) for j in t_idx}
    v_exact = {int(i): _exact(alone[vs[i].id][0]) for i in v_idx}
    l_exact = {int(k): _exact(_lease_bill(inst, vs[pairs[k][0]], ts[pairs[k][1]], bills, stages).total)
               for k in p_idx}
    ts2, vs2 = [ts[j] for j in t_idx], [vs[i] for i in v_idx]
    t_pos = {int(j): n for n, j in enumerate(t_idx)}
    v_pos = {int(i): n for n, i in enumerate(v_idx)}
    pairs2 = [(v_pos[pairs[k][0]], t_pos[pairs[k][1]]) for k in p_idx
              if pairs[k][0] in v_pos and pairs[k][1] in t_pos]
    l_exact2 = [l_exact[int(k)] for k in p_idx if pairs[k][0] in v_pos and pairs[k][1] in t_pos]
    if not ts2:
        return _Pruned([], [], {}, dropped, alone, bills, unrounded, stages)
    kept2 = _prune_round(inst, ts2, vs2, pairs2, [t_exact[int(j)] for j in t_idx], [v_exact[int(i)] for i in v_idx],
                         l_exact2, top_k)
    for k, n in kept2.dropped.items():
        dropped[k] = dropped.get(k, 0) + n
    leases = {(vs2[i].id, ts2[j].id): Bounds(Decimal(b[0]), Decimal(b[1]), False)
              for (i, j), b, ok in zip(pairs2, l_exact2, kept2.leases) if ok}
    return _Pruned([v for v, ok in zip(vs2, kept2.validate) if ok], [t for t, ok in zip(ts2, kept2.train) if ok],
                   leases, dropped, alone, bills, unrounded, stages)


def _lease_bill(inst: PlanInstance, v: Candidate, t: Candidate, bills: dict[tuple[str, str], PlanBill],
                stages: dict[str, tuple[StageBill, ...]]) -> PlanBill:
    """The plan a same-instance pair gives (billing's idle choice, keep or destroy), priced once
    (`stages`: bills of uses alone already worked out)."""
    key = (v.id, t.id)
    if key not in bills:
        bills[key] = _pair_bill(inst, v, t, stages)
    return bills[key]


def _pair_bill(inst: PlanInstance, v: Candidate, t: Candidate, stages: dict[str, tuple[StageBill, ...]]) -> PlanBill:
    uses = {v.id: v.use, t.id: t.use}
    keep = price_plan(Choice(v.id, t.id, "continue" if inst.idle_hours == 0 else "stop"), uses, inst.idle_hours)
    if not _fits(inst, _destroy_wall(v) + inst.idle_hours + t.wall):
        return keep
    return idle_choice(keep, price_plan(Choice(v.id, t.id, "destroy"), uses, inst.idle_hours, stages))


def _exact(total: Decimal) -> tuple[float, float]:
    return _widened(Bounds(total, total, False))


def _prune_round(inst: PlanInstance, ts: list[Candidate], vs: list[Candidate], pairs: list[tuple[int, int]],
                 t_b: list[tuple[float, float]], v_b: list[tuple[float, float]], l_b: list[tuple[float, float]],
                 top_k: int) -> Kept:
    keys: dict[Hashable, int] = {}
    key_id = lambda k: keys.setdefault(k, len(keys))  # noqa: E731
    groups: dict[tuple[str, str], int] = {}
    instances: dict[tuple, int] = {}
    inst_id = lambda c: instances.setdefault(c.use.key, len(instances))  # noqa: E731
    tr = TrainArrays(
        lo=np.array([b[0] for b in t_b]), hi=np.array([b[1] for b in t_b]),
        wall=np.array([float(t.wall) for t in ts]),
        group=np.array([groups.setdefault(t.group, len(groups)) for t in ts], dtype=np.int64),
        need=np.array([key_id(t.signature) if vs else -1 for t in ts], dtype=np.int64),
        tokens=np.array([float(t.tokens) for t in ts]) if inst.rank_by == "per_token" else None,  # type: ignore[arg-type]
        instance=np.array([inst_id(t) for t in ts], dtype=np.int64))
    va = None
    if vs:
        v_keys = [[key_id(k) for k in _keys(v)] for v in vs]
        width = max(len(k) for k in v_keys)
        va = ValidateArrays(
            lo=np.array([b[0] for b in v_b]), hi=np.array([b[1] for b in v_b]),
            wall=np.array([float(v.wall) for v in vs]), destroy_wall=np.array([float(_destroy_wall(v)) for v in vs]),
            keys=np.array([k + [-1] * (width - len(k)) for k in v_keys], dtype=np.int64),
            instance=np.array([inst_id(v) for v in vs], dtype=np.int64))
    le = LeaseArrays(np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64),
                     np.array([b[0] for b in l_b]), np.array([b[1] for b in l_b])) if pairs else LeaseArrays.empty()
    return prune_arrays(tr, va, le, idle_hours=float(inst.idle_hours),
                        deadline=None if inst.deadline_hours is None else float(inst.deadline_hours),
                        budget=None if inst.budget is None else float(inst.budget), top_k=top_k)


def _keys(v: Candidate) -> Iterable[Hashable]:
    return v.signature if isinstance(v.signature, frozenset) else (v.signature,)


# --------------------------------------------------------------------------------------------
# Exact search


@dataclass(frozen=True)
class _Option:
    """One way to run training t: a priced plan (exact), scored for ranking."""

    score: Decimal
    unknown: bool
    choice: Choice
    bill: PlanBill | None = None  # a lease's bill (kept: it carries the idle alternative)
    unrounded: Decimal = Decimal(0)  # the bill before each line is rounded to the cent

    @property
    def key(self) -> tuple[Decimal, bool, Decimal, str]:
        """Ranking: the score, fully priced first, then the exact bill (two plans equal to the
        cent are told apart by their prices, 1.5756/h before 1.5759/h), then the id."""
        return (self.score, self.unknown, self.unrounded, self.choice.train)


def _alone_totals(uses: Iterable[Use], memo: dict[str, tuple[Decimal, bool]],
                  unrounded: dict[str, Decimal] | None = None, bills: dict[str, tuple[StageBill, ...]] | None = None
                  ) -> None:
    """Each use's bill on an instance of its own (known total, unknown charges?), into `memo`
    (and its total before rounding into `unrounded`, the bill into `bills`)."""
    for u in uses:
        if u.id not in memo or (unrounded is not None and u.id not in unrounded):
            stages = price_alone(u)
            if bills is not None:
                bills[u.id] = stages
            memo[u.id] = (sum((s.cost for s in stages), Decimal(0)), any(s.unknown for s in stages))
            if unrounded is not None:
                unrounded[u.id] = _unrounded(stages)


def _unrounded(stages: Iterable[StageBill]) -> Decimal:
    """The known charges of `stages` at their exact prices, before each line is rounded to the cent."""
    return sum((ln.unit_price * ln.count for s in stages for ln in s.lines
                if ln.cost is not None and ln.unit_price is not None), Decimal(0))


def _by_key(validate: Iterable[Candidate]) -> dict[Hashable, list[Candidate]]:
    """The validation candidates that serve each key, in their order."""
    found: dict[Hashable, list[Candidate]] = defaultdict(list)
    for v in validate:
        for key in (v.signature if isinstance(v.signature, frozenset) else (v.signature,)):
            found[key].append(v)
    return found


def _pairs(p: _Pruned, serving: dict[Hashable, list[Candidate]]) -> int:
    """How many (validation, training) combinations the pruned instance has: compatible pairs
    (`serving`: `_by_key` of its validations), or the training candidates alone without validation."""
    if not p.validate:
        return len(p.train)
    return sum(len(serving.get(t.signature, ())) for t in p.train)


def _enumerate(inst: PlanInstance, p: _Pruned, top_k: int,
               serving: dict[Hashable, list[Candidate]] | None = None) -> list[PlanBill]:
    uses = inst.uses
    G = inst.idle_hours
    alone, exact = p.alone, p.unrounded
    _alone_totals((c.use for c in (*p.validate, *p.train)), alone, exact, p.stages)
    budget = inst.budget
    best: dict[tuple[str, str], _Option] = {}
    serving = _by_key(p.validate) if serving is None else serving
    for t in p.train:
        options: list[_Option] = []
        t_cost, t_unk = alone[t.id]
        if not p.validate:
            options.append(_Option(_score(inst, t_cost, t), t_unk, Choice(None, t.id, None), unrounded=exact[t.id]))
        for v in serving.get(t.signature, ()):
            destroy_ok = _fits(inst, _destroy_wall(v) + G + t.wall)
            v_cost, v_unk = alone[v.id]
            if (v.id, t.id) in p.leases:
                chosen = _lease_bill(inst, v, t, p.bills, p.stages)
                options.append(_Option(_score(inst, chosen.total, t), bool(chosen.unknown), chosen.choice, chosen,
                                       _unrounded(chosen.stages)))
            elif destroy_ok:
                options.append(_Option(_score(inst, v_cost + t_cost, t), v_unk or t_unk, Choice(v.id, t.id, "destroy"),
                                       unrounded=exact[v.id] + exact[t.id]))
        options = [o for o in options if budget is None or _total(o, alone) <= budget]
        if options:
            top = min(options, key=lambda o: o.key)
            if t.group not in best or top.key < best[t.group].key:
                best[t.group] = top
    ranked = sorted(best.values(), key=lambda o: o.key)[:top_k]
    return [o.bill or price_plan(o.choice, uses, G, p.stages) for o in ranked]


def _total(o: _Option, alone: dict[str, tuple[Decimal, bool]]) -> Decimal:
    if o.bill is not None:
        return o.bill.total
    return alone[o.choice.train][0] + (alone[o.choice.validate][0] if o.choice.validate else Decimal(0))


def _cp_sat(inst: PlanInstance, p: _Pruned, top_k: int, time_limit_s: float) -> list[PlanBill]:
    """The same choice as `_enumerate`, as a CP-SAT model over billing's exact costs.

    Variables: use_t, use_v, lease_(v,t). Costs are integers in the currency's minor unit,
    doubled, plus 1 when the plan has an unknown charge (so a fully priced plan wins a tie).
    """
    from ortools.sat.python import cp_model  # only here: quotes that never need it never load it

    uses, G = inst.uses, inst.idle_hours
    alone = p.alone
    _alone_totals((c.use for c in (*p.validate, *p.train)), alone, bills=p.stages)
    unit = Decimal(1).scaleb(round_money(Decimal(0), inst.currency).as_tuple().exponent)  # type: ignore[arg-type]

    def cents(x: Decimal) -> int:
        return int(x / unit)

    lease_bills: dict[tuple[str, str], PlanBill] = {}
    forbid_destroy: set[tuple[str, str]] = set()
    v_by_id, t_by_id = {c.id: c for c in p.validate}, {c.id: c for c in p.train}
    for (vid, tid) in p.leases:
        chosen = _lease_bill(inst, v_by_id[vid], t_by_id[tid], p.bills, p.stages)
        if chosen.choice.idle != "destroy":
            lease_bills[(vid, tid)] = chosen
            forbid_destroy.add((vid, tid))

    model = cp_model.CpModel()
    x = {t.id: model.new_bool_var(f"train_{t.id}") for t in p.train}
    y = {v.id: model.new_bool_var(f"validate_{v.id}") for v in p.validate}
    z = {k: model.new_bool_var(f"lease_{k[0]}_{k[1]}") for k in lease_bills}
    u = model.new_bool_var("unknown")
    model.add_exactly_one(x.values())
    if p.validate:
        model.add_exactly_one(y.values())
        for t in p.train:  # the chosen validation validates this job
            model.add(x[t.id] <= sum(y[v.id] for v in p.validate if compatible(v, t)))
        for (vid, tid), var in z.items():
            model.add_implication(var, x[tid])
            model.add_implication(var, y[vid])
        for v in p.validate:  # destroy pairs past the deadline, or where the idle rule keeps the instance
            for t in p.train:
                if compatible(v, t) and (not _fits(inst, _destroy_wall(v) + G + t.wall) or (v.id, t.id) in forbid_destroy):
                    model.add(x[t.id] + y[v.id] - z.get((v.id, t.id), 0) <= 1)
    total = sum(cents(alone[t.id][0]) * x[t.id] for t in p.train)
    total += sum(cents(alone[v.id][0]) * y[v.id] for v in p.validate)
    total += sum((cents(b.total) - cents(alone[vid][0]) - cents(alone[tid][0])) * z[(vid, tid)]
                 for (vid, tid), b in lease_bills.items())
    for t in p.train:
        if alone[t.id][1]:
            model.add(u >= x[t.id] - sum(var for (_, tid), var in z.items() if tid == t.id))
    for v in p.validate:
        if alone[v.id][1]:
            model.add(u >= y[v.id] - sum(var for (vid, _), var in z.items() if vid == v.id))
    for k, b in lease_bills.items():
        if b.unknown:
            model.add(u >= z[k])
    if inst.budget is not None:
        model.add(total <= cents(inst.budget))
    model.minimize(2 * total + u)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.num_workers = 1  # one worker and a fixed seed: the same plans every run
    solver.parameters.random_seed = 0
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for t in p.train:
        groups[t.group].append(t.id)
    out: list[PlanBill] = []
    while len(out) < top_k:
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            break
        tid = next(k for k, var in x.items() if solver.boolean_value(var))
        vid = next((k for k, var in y.items() if solver.boolean_value(var)), None)
        leased = vid is not None and (vid, tid) in z and solver.boolean_value(z[(vid, tid)])
        bill = lease_bills[(vid, tid)] if leased else price_plan(  # type: ignore[index]
            Choice(vid, tid, None if vid is None else "destroy"), uses, G, p.stages)
        out.append(bill)
        group = next(t.group for t in p.train if t.id == tid)
        model.add(sum(x[i] for i in groups[group]) == 0)  # the next plan: another provider or GPU
    return out


def solve(inst: PlanInstance, top_k: int = 5, *, time_limit_s: float = DEFAULT_TIME_LIMIT_S,
          method: Literal["auto", "enumeration", "cp-sat"] = "auto", prune_first: bool = True) -> Solution:
    """Up to `top_k` plans, best first, each training on a different (provider, GPU).

    Raises NoFeasiblePlan naming the binding constraint (deadline, budget) when there is none.
    `method` and `prune_first` exist for tests and benchmarks: every combination gives the same plans.
    """
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    if inst.rank_by == "per_token" and method == "cp-sat":
        raise ValueError("ranking per token is settled by enumeration only")
    if prune_first:
        p = prune(inst, top_k)
    else:
        p = _unpruned(inst)
    serving = _by_key(p.validate)  # the compatible pairs: counted here, walked by the enumeration
    pairs = _pairs(p, serving)
    use_cp = method == "cp-sat" or (method == "auto" and inst.rank_by == "total" and pairs > ENUMERATION_LIMIT)
    log.debug("pruned to %d validation and %d training candidates (%s); %s",
              len(p.validate), len(p.train), p.dropped, "cp-sat" if use_cp else "enumeration")
    plans = _cp_sat(inst, p, top_k, time_limit_s) if use_cp else _enumerate(inst, p, top_k, serving)
    if not plans:
        reasons = diagnose(inst)
        raise NoFeasiblePlan("No plan meets the constraints: " + "; ".join(reasons) + ".", reasons)
    return Solution(plans, "cp-sat" if use_cp else "enumeration", p.dropped)


def _unpruned(inst: PlanInstance) -> _Pruned:
    leases = {}
    for v in inst.validate:
        for t in inst.train:
            if compatible(v, t) and _fits(inst, v.wall + inst.idle_hours + t.wall):
                found = lease_bounds(v.use, t.use, inst.idle_hours)
                if found is not None:
                    leases[(v.id, t.id)] = found
    ts = [t for t in inst.train if not inst.validate or any(compatible(v, t) for v in inst.validate)]
    return _Pruned(list(inst.validate), ts, leases, {})


# --------------------------------------------------------------------------------------------
# Why nothing is feasible


def _days(hours: Decimal, up: bool = False) -> str:
    """Hours as days for messages: whole days exactly, a limit the user gave in up to 3 decimals
    as given (`--deadline-days 0.05`), otherwise one decimal (rounded up if `up`).

    >>> _days(Decimal(120)), _days(Decimal(175), up=True), _days(Decimal(24)), _days(Decimal("1.2"))
    ('5 days', '7.3 days', '1 day', '0.05 days')
    """
    days = hours / 24
    if days == days.to_integral_value():
        text = str(int(days))
    elif not up and days == days.quantize(Decimal("0.001")):
        text = f"{days.normalize():f}"
    else:
        text = str(days.quantize(Decimal("0.1"), rounding=ROUND_CEILING if up else ROUND_HALF_UP))
    return "1 day" if text == "1" else f"{text} days"


def _money(amount: Decimal, currency: str, up: bool = False) -> str:
    if up:
        places = round_money(Decimal(0), currency).as_tuple().exponent
        amount = amount.quantize(Decimal(1).scaleb(places), rounding=ROUND_CEILING)  # type: ignore[arg-type]
    return f"{round_money(amount, currency)} {currency}"


def _cheapest(inst: PlanInstance) -> PlanBill | None:
    p = prune(inst, 1)
    plans = _enumerate(inst, p, 1) if p.train else []
    return plans[0] if plans else None


def _fastest_wall(inst: PlanInstance) -> Decimal | None:
    if not inst.train:
        return None
    if not inst.validate:
        return min(t.wall for t in inst.train)
    # per signature, the quickest validation that runs it plus the quickest run that needs it
    # (linear: a diagnosis over thousands of candidates must not try every pair)
    quickest: dict[Hashable, Decimal] = {}
    for v in inst.validate:
        for sig in (v.signature if isinstance(v.signature, frozenset) else (v.signature,)):
            quickest[sig] = min(quickest.get(sig, v.wall), v.wall)
    walls = [quickest[t.signature] + inst.idle_hours + t.wall for t in inst.train if t.signature in quickest]
    return min(walls, default=None)


def diagnose(inst: PlanInstance) -> list[str]:
    """Why `inst` has no plan: relax the budget and the deadline, and say which one binds."""
    if not inst.train:
        return ["no offer is left to train on (every offer was rejected; --explain lists why)"]
    fastest = _fastest_wall(inst)
    if fastest is None:
        return ["no validation candidate runs the same job as any training candidate"]
    reasons: list[str] = []
    ccy = inst.currency
    deadline_alone_fails = inst.deadline_hours is not None and fastest > inst.deadline_hours
    if deadline_alone_fails:
        reasons.append(f"deadline {_days(inst.deadline_hours)}; the fastest plan needs {_days(fastest, up=True)} "  # type: ignore[arg-type]
                       "at the slow end of its time range (extend --deadline-days)")
    if inst.budget is not None:
        within = None if deadline_alone_fails else _cheapest(replace(inst, budget=None))
        any_speed = _cheapest(replace(inst, budget=None, deadline_hours=None)) if inst.deadline_hours else None
        if within is not None and within.total > inst.budget:
            advice = "raise --budget"
            if any_speed is not None and any_speed.total <= inst.budget:
                advice += f", or extend --deadline-days: without it a plan costs {_money(any_speed.total, ccy, up=True)}"
            reasons.append(f"budget {_money(inst.budget, ccy)} is below the cheapest feasible plan "
                           f"{_money(within.total, ccy, up=True)} ({advice})")
        elif deadline_alone_fails and any_speed is not None and any_speed.total > inst.budget:
            reasons.append(f"budget {_money(inst.budget, ccy)} is below the cheapest plan at any speed "
                           f"{_money(any_speed.total, ccy, up=True)} (raise --budget)")
    if not reasons:
        reasons.append("no combination of offers meets the budget and the deadline together")
    return reasons
