"""solver.prune_arrays bounds every validation key at once (segments of key-sorted arrays). Here
it is checked against the per-key form it replaced, kept below as the reference: a Python loop
over the keys, each key's validations sorted and scanned on their own. Random arrays drawn from
few values, so that walls, bounds and instances tie often; keys shared, missing and padded."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer import first_pass, solver
from rentopt.optimizer.solver import (
    LeaseArrays,
    TrainArrays,
    ValidateArrays,
    _Partners,
    _segmented_best_two,
    prune_arrays,
    rows_per_key,
)

INF = float("inf")


@contextmanager
def segments_at_once(at_once: bool):
    """Either path of the segmented helpers: every key at once (ranks), or one key at a time."""
    saved = solver.FEW_SEGMENTS
    solver.FEW_SEGMENTS = 0 if at_once else 10**9
    try:
        yield
    finally:
        solver.FEW_SEGMENTS = saved


# --------------------------------------------------------------------------------------------
# The reference: one key at a time


def _best_two(values, instances, *, before):
    """Running minimum, second minimum on another instance, and the minimum's instance, by a
    plain scan."""
    best, second, inst = [], [], []
    b, s, bi = INF, INF, -1
    for v, i in zip(values.tolist(), instances.tolist()):
        if before:
            best.append(b), second.append(s), inst.append(bi)
        if v <= b:  # a new minimum (ties: the later one's instance)
            s, b, bi = min(s, b), v, i
        else:
            s = min(s, v)
        if not before:
            best.append(b), second.append(s), inst.append(bi)
    return np.array(best, dtype=float), np.array(second, dtype=float), np.array(inst, dtype=np.int64)


@dataclass
class _Prefix:
    walls: np.ndarray
    lo: np.ndarray
    best: np.ndarray
    second: np.ndarray
    best_instance: np.ndarray
    alive: np.ndarray


def reference_partners(va: ValidateArrays, keep_v: np.ndarray) -> tuple[dict[int, _Prefix], np.ndarray]:
    nv = len(va.lo)
    survive = np.zeros(nv, dtype=bool)
    v_inst = va.instance if va.instance is not None else np.arange(nv)
    partners = {}
    for key, idx in rows_per_key(va.keys, keep_v).items():
        order = idx[np.lexsort((va.hi[idx], va.destroy_wall[idx]))]
        _, second_before, _ = _best_two(va.hi[order], v_inst[order], before=True)
        alive = order[va.lo[order] <= second_before]
        survive[alive] = True
        best, second, best_inst = _best_two(va.hi[alive], v_inst[alive], before=False)
        partners[key] = _Prefix(va.destroy_wall[alive], np.minimum.accumulate(va.lo[alive]), best, second,
                                best_inst, alive)
    return partners, survive


def reference_prune(tr, va, le, *, idle_hours, deadline, budget, top_k):
    """prune_arrays as it was, one key at a time (masks, group bounds, threshold, partners)."""
    nt, nv = len(tr.lo), len(va.lo)
    keep_t, keep_v = np.ones(nt, dtype=bool), np.ones(nv, dtype=bool)
    room_of = lambda walls: np.full(len(walls), INF) if deadline is None else deadline - idle_hours - walls  # noqa: E731
    if deadline is not None:
        fastest = {k: float(va.wall[idx].min()) for k, idx in rows_per_key(va.keys, keep_v).items()}
        need_fast = np.array([fastest.get(int(k), INF) if k >= 0 else INF for k in tr.need])
        keep_t &= need_fast + idle_hours + tr.wall <= deadline
        quickest = tr.wall[keep_t].min() if keep_t.any() else INF
        keep_v &= va.wall + idle_hours + quickest <= deadline
    if not keep_t.any() or not keep_v.any():
        return None
    lease_ok = keep_t[le.t] & keep_v[le.v]
    partners, survive = reference_partners(va, keep_v)
    plan_lo, plan_hi = np.full(nt, INF), np.full(nt, INF)
    rooms = room_of(tr.wall)
    t_inst = tr.instance
    for j in np.flatnonzero(keep_t):
        pp = partners.get(int(tr.need[j]))
        if tr.need[j] < 0 or pp is None:
            continue
        at = int(np.searchsorted(pp.walls, rooms[j], side="right"))
        if at > 0:
            plan_lo[j] = tr.lo[j] + pp.lo[at - 1]
            plan_hi[j] = tr.hi[j] + (pp.best[at - 1] if pp.best_instance[at - 1] != t_inst[j] else pp.second[at - 1])
    for v, t, lo, hi in zip(le.v[lease_ok], le.t[lease_ok], le.lo[lease_ok], le.hi[lease_ok]):
        plan_lo[t], plan_hi[t] = min(plan_lo[t], lo), min(plan_hi[t], hi)
    if budget is not None:
        plan_lo[plan_lo > budget] = INF
        plan_hi[plan_hi > budget] = INF
    plan_lo[~keep_t] = INF
    plan_hi[~keep_t] = INF
    group_ub = np.full(int(tr.group.max()) + 1, INF)
    for g, h in zip(tr.group, plan_hi):
        group_ub[g] = min(group_ub[g], h)
    finite = np.sort(group_ub[np.isfinite(group_ub)])
    threshold = finite[top_k - 1] if len(finite) >= top_k else INF
    kept_t = np.isfinite(plan_lo) & (plan_lo <= np.minimum(group_ub[tr.group], threshold))
    kept_leases = lease_ok & kept_t[le.t]
    kept_v = np.zeros(nv, dtype=bool)
    kept_v[le.v[kept_leases]] = True
    for key, pp in partners.items():
        mine = np.flatnonzero(kept_t & (tr.need == key))
        if len(mine):
            kept_v[pp.alive[:np.searchsorted(pp.walls, rooms[mine].max(), side="right")]] = True
    return kept_t, kept_v, kept_leases, survive, group_ub, threshold, partners


# --------------------------------------------------------------------------------------------
# Random instances with many ties

few = st.sampled_from([0.0, 1.0, 1.5, 2.0, 2.5, 4.0, INF])
walls = st.sampled_from([0.5, 1.0, 2.0, 3.0])


class _Validations:
    """What first_pass._validation_limits reads of its validation columns."""

    def __init__(self, va: ValidateArrays):
        self.keys, self.destroy_wall = va.keys, va.destroy_wall

    def __len__(self) -> int:
        return len(self.keys)


@st.composite
def instances(draw):
    nv, nt, nkeys = draw(st.integers(1, 30)), draw(st.integers(1, 20)), draw(st.integers(1, 6))
    key = st.integers(-1, nkeys - 1)
    v_lo = np.array(draw(st.lists(few, min_size=nv, max_size=nv)))
    v_hi = v_lo + np.array(draw(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=nv, max_size=nv)))
    v_wall = np.array(draw(st.lists(walls, min_size=nv, max_size=nv)))
    v_destroy = v_wall + np.array(draw(st.lists(st.sampled_from([0.0, 0.5]), min_size=nv, max_size=nv)))
    v_keys = np.array(draw(st.lists(st.lists(key, min_size=2, max_size=2), min_size=nv, max_size=nv)), dtype=np.int64)
    v_inst = np.array(draw(st.lists(st.integers(0, 8), min_size=nv, max_size=nv)), dtype=np.int64)
    t_lo = np.array(draw(st.lists(few.filter(lambda x: x < INF), min_size=nt, max_size=nt)))
    t_hi = t_lo + np.array(draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=nt, max_size=nt)))
    t_wall = np.array(draw(st.lists(walls, min_size=nt, max_size=nt)))
    group = np.array(draw(st.lists(st.integers(0, 4), min_size=nt, max_size=nt)), dtype=np.int64)
    need = np.array(draw(st.lists(st.integers(-1, nkeys), min_size=nt, max_size=nt)), dtype=np.int64)
    t_inst = np.array(draw(st.lists(st.integers(0, 8), min_size=nt, max_size=nt)), dtype=np.int64)
    pairs = draw(st.lists(st.tuples(st.integers(0, nv - 1), st.integers(0, nt - 1), few), max_size=6))
    le = LeaseArrays(np.array([p[0] for p in pairs], dtype=np.int64), np.array([p[1] for p in pairs], dtype=np.int64),
                     np.array([p[2] for p in pairs], dtype=float), np.array([p[2] + 0.5 for p in pairs], dtype=float))
    tr = TrainArrays(t_lo, t_hi, t_wall, group, need, None, t_inst)
    va = ValidateArrays(v_lo, v_hi, v_wall, v_destroy, v_keys, v_inst)
    limits = dict(idle_hours=draw(st.sampled_from([0.0, 0.5])), deadline=draw(st.sampled_from([None, 4.0, 6.0])),
                  budget=draw(st.sampled_from([None, 5.0])), top_k=draw(st.integers(1, 3)))
    return tr, va, le, limits


@settings(max_examples=300, deadline=None)
@given(instances(), st.booleans())
def test_segmented_prune_equals_the_per_key_loop(case, at_once):
    tr, va, le, limits = case
    with segments_at_once(at_once):
        kept = prune_arrays(tr, va, le, **limits)
    ref = reference_prune(tr, va, le, **limits)
    if ref is None:
        assert not kept.train.any()
        return
    kept_t, kept_v, kept_leases, survive, group_ub, threshold, partners = ref
    assert kept.train.tolist() == kept_t.tolist()
    assert kept.validate.tolist() == kept_v.tolist()
    assert kept.leases.tolist() == kept_leases.tolist()
    assert kept.group_ub.tolist() == group_ub.tolist()
    assert kept.threshold == threshold
    p = kept.partners
    assert p.keys.tolist() == sorted(partners)
    for n, key in enumerate(p.keys.tolist()):
        seg = slice(p.start[n], p.start[n + 1] if n + 1 < len(p.start) else len(p.walls))
        want = partners[key]
        for name in ("walls", "lo", "best", "second", "best_instance", "alive"):
            assert getattr(p, name)[seg].tolist() == getattr(want, name).tolist(), (key, name)
    assert sorted(set(p.alive.tolist())) == np.flatnonzero(survive).tolist()
    # the limits first_pass reads: per (key, wall) the second at the last partner no slower
    keys = np.array([k for k in range(-1, 8) for _ in range(5)], dtype=np.int64)
    at = np.array([0.0, 0.75, 1.0, 2.5, 9.0] * 9)
    with segments_at_once(at_once):
        got = p.second_no_later(keys, at)
    for k, w, g in zip(keys.tolist(), at.tolist(), got.tolist()):
        if k not in partners:
            assert np.isnan(g)
            continue
        i = int(np.searchsorted(partners[k].walls, w, side="right"))
        assert g == (partners[k].second[i - 1] if i else INF)
    # ... and first_pass's limit per validation from them, key by key and all at once
    want = []
    for keys_of, wall in zip(va.keys.tolist(), va.destroy_wall.tolist()):
        limit = -INF
        for k in keys_of:
            if k >= 0:
                pp = partners.get(k)
                i = 0 if pp is None else int(np.searchsorted(pp.walls, wall, side="right"))
                limit = max(limit, INF if pp is None or not i else pp.second[i - 1])
        want.append(limit)
    per_key = rows_per_key(va.keys, np.ones(len(va.lo), dtype=bool))
    for form in (per_key, None):  # key by key, all at once
        assert first_pass._validation_limits(_Validations(va), form, kept).tolist() == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), few, st.integers(0, 3)), min_size=1, max_size=25), st.booleans(),
       st.booleans())
def test_segmented_best_two_equals_a_scan_per_segment(items, before, at_once):
    items.sort(key=lambda x: x[0])  # segments by label, values in drawn order within
    seg = np.array([i[0] for i in items])
    values = np.array([i[1] for i in items])
    inst = np.array([i[2] for i in items], dtype=np.int64)
    with segments_at_once(at_once):
        got = _segmented_best_two(values, inst, seg, before=before)
    for label in np.unique(seg):
        at = seg == label
        want = _best_two(values[at], inst[at], before=before)
        for g, w in zip(got, want):
            assert g[at].tolist() == w.tolist()


def test_dominance_and_the_partner_on_another_instance_worked_by_hand():
    """Key 0's validations by wall clock: A (lo 0.5, hi 1, instance 7), B (3, 3.5, 8), C (2, 2.5,
    9), D (3, 4, 10). Before each, the second-lowest upper bound: inf, inf, 3.5 (A's 1 and B's
    3.5), 2.5 (1 and C's 2.5). D's lower bound 3 > 2.5: A and C are two no slower validations
    surely cheaper, on different instances, so D goes; A, B and C stay (C: 2 <= 3.5). The
    training run on instance 7 (bounds 10, 10; no deadline) may use any of them: its lower bound
    is 10 + 0.5, its upper bound 10 + the best partner NOT on instance 7 (A is): C's 2.5."""
    va = ValidateArrays(lo=np.array([0.5, 3.0, 2.0, 3.0]), hi=np.array([1.0, 3.5, 2.5, 4.0]),
                        wall=np.array([1.0, 2.0, 3.0, 4.0]), destroy_wall=np.array([1.0, 2.0, 3.0, 4.0]),
                        keys=np.array([[0, -1]] * 4), instance=np.array([7, 8, 9, 10]))
    tr = TrainArrays(lo=np.array([10.0]), hi=np.array([10.0]), wall=np.array([1.0]), group=np.array([0]),
                     need=np.array([0]), instance=np.array([7]))
    kept = prune_arrays(tr, va, LeaseArrays.empty(), idle_hours=0.0, deadline=None, budget=None, top_k=1)
    assert kept.validate.tolist() == [True, True, True, False]
    assert kept.dropped["dominated"] == 1
    assert kept.group_ub.tolist() == [12.5]
    second = kept.partners.second_no_later(np.array([0, 0, 0, 1]), np.array([1.5, 2.0, 9.0, 9.0]))
    assert second[:3].tolist() == [INF, 3.5, 2.5] and np.isnan(second[3])
