"""first_pass picks each validation key's HEADS cheapest members by floor. With many keys (a
per-provider plan) it picks every key's at once (`_heads_per_key`: two stable sorts); with few,
key by key (`validations_per_key`, then `_cheapest`). Both are checked here against a plain
scan per key, written out below."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer import first_pass
from rentopt.optimizer.first_pass import HEADS, _cheapest, _heads_per_key, _many_keys


def _scan(keys: list[list[int]], cost: list[float], heads: int) -> tuple[set[int], dict[int, list[int]]]:
    """Per key (-1: none) its members, and the union of each key's `heads` cheapest: each key's
    members sorted by cost, then row, and the first `heads` taken."""
    members: dict[int, list[int]] = {}
    for row, pair in enumerate(keys):
        for k in dict.fromkeys(pair):
            if k >= 0:
                members.setdefault(k, []).append(row)
    chosen = set()
    for rows in members.values():
        chosen |= set(sorted(rows, key=lambda r: (cost[r], r))[:heads])
    return chosen, members


def _pairs(n_keys: int):
    # a row's keys: its GPU model's and its architecture's (different), or none (-1)
    key = st.integers(-1, n_keys - 1)
    return st.tuples(key, key).filter(lambda p: p[0] != p[1] or p[0] == -1)


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 12), st.integers(1, 4))
def test_every_keys_cheapest_at_once_are_the_scans(data, n_keys, heads):
    """Distinct costs: exactly the members the scan per key picks."""
    keys = data.draw(st.lists(_pairs(n_keys), min_size=0, max_size=40))
    cost = data.draw(st.lists(st.floats(-5, 100, allow_nan=False) | st.just(float("inf")),
                              min_size=len(keys), max_size=len(keys), unique=True))
    want, _ = _scan([list(p) for p in keys], cost, heads)
    saved = first_pass.HEADS
    first_pass.HEADS = heads
    try:
        got = _heads_per_key(np.array(keys, dtype=np.int64).reshape(-1, 2), np.array(cost, dtype=float))
    finally:
        first_pass.HEADS = saved
    assert set(np.flatnonzero(got).tolist()) == want


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(1, 6))
def test_with_ties_each_key_gets_heads_as_cheap_as_the_scans(data, n_keys):
    """Costs drawn from few values: which tied member is taken may differ, but each key still
    has min(HEADS, its size) chosen members, whose costs are its HEADS lowest; and a chosen row
    is among the HEADS lowest of one of its keys."""
    keys = data.draw(st.lists(_pairs(n_keys), min_size=1, max_size=60))
    cost = data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, float("inf")]), min_size=len(keys), max_size=len(keys)))
    got = set(np.flatnonzero(_heads_per_key(np.array(keys, dtype=np.int64), np.array(cost))).tolist())
    _, members = _scan([list(p) for p in keys], cost, HEADS)
    covered = set()
    for k, rows in members.items():
        lowest = sorted(cost[r] for r in rows)[:HEADS]
        mine = [r for r in rows if r in got and cost[r] <= lowest[-1]]
        assert len(mine) >= len(lowest), k
        covered |= {r for r in rows if cost[r] <= lowest[-1]}
    assert got <= covered


def test_a_key_of_more_than_heads_members_worked_by_hand():
    """Key 0 has ten members at costs 9..0 (row 9 cheapest), key 1 rows 0 and 1, key 2 none
    but row 9's second key: key 0's HEADS cheapest are rows 2..9, key 1 adds rows 0 and 1."""
    keys = np.array([[0, 1], [0, 1]] + [[0, -1]] * 7 + [[0, 2]], dtype=np.int64)
    cost = np.arange(9.0, -1.0, -1.0)
    assert HEADS == 8
    assert np.flatnonzero(_heads_per_key(keys, cost)).tolist() == list(range(10))
    keys[:2, 1] = -1  # without key 1, rows 0 and 1 are the dearest of key 0: no heads
    assert np.flatnonzero(_heads_per_key(keys, cost)).tolist() == list(range(2, 10))


@pytest.mark.parametrize("n_keys", [3, first_pass.FEW_KEYS, first_pass.FEW_KEYS + 1])
def test_many_keys_counts_the_keys_of_the_pieces_with_candidates(n_keys):
    """The choice of form counts the keys named by pieces that have candidates: an empty piece's
    keys and -1 do not count."""
    pieces = np.zeros((n_keys + 1, 5), dtype=np.int64)
    pieces[:n_keys, 3] = np.arange(n_keys)
    pieces[:n_keys, 4] = -1
    pieces[n_keys] = [0, 0, 0, 10**6, 10**6 + 1]  # an empty piece's keys
    starts = np.r_[0, np.arange(1, n_keys + 1), n_keys]
    va = SimpleNamespace(pieces=pieces, starts=starts)
    assert _many_keys(va) == (n_keys > first_pass.FEW_KEYS)
    assert _many_keys(SimpleNamespace(pieces=pieces, starts=None)) == (n_keys + 2 > first_pass.FEW_KEYS)


def test_key_by_key_picks_the_same_members_as_at_once_on_distinct_costs():
    """The two forms narrowed chooses between agree (distinct costs), on keys shared by rows."""
    rng = np.random.default_rng(7)
    keys = np.stack([rng.integers(0, 30, 500), 30 + rng.integers(0, 4, 500)], axis=1)
    cost = rng.permutation(500).astype(float)
    by_key: dict[int, list[int]] = {}
    for row, pair in enumerate(keys.tolist()):
        for k in pair:
            by_key.setdefault(k, []).append(row)
    one_by_one = np.zeros(500, dtype=bool)
    for rows in by_key.values():
        one_by_one[_cheapest(np.array(rows), cost)] = True
    assert _heads_per_key(keys, cost).tolist() == one_by_one.tolist()
