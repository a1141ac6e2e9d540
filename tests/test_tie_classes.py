"""The classes of tied offers (optimizer/ties.py) against the rule worked row by row: two usable
offers are one class exactly when they are equal in every planning column but the offer id
(and neither has reserved terms or a note of its own); the first in the offers' order is the
one planned, the others are named in its answer."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer import ties
from rentopt.optimizer.offer_table import ARRAY_COLUMNS, LIST_COLUMNS, PRICE_COLUMNS, Const, OfferTable

NAN = float("nan")
NAN_2 = float(np.array([0x7FF8000000000001], dtype=np.uint64).view(np.float64)[0])  # another NaN's bits
_DAY = [datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 5, 2, tzinfo=UTC)]
# a few values per column; floats include unknowns (NaNs of two bit patterns, equal here) and
# -0.0 (== 0.0)
_STRINGS = {"provider": ["a", "b"], "gpu": ["H100-SXM-80GB", "A100-SXM-80GB", None], "gpu_raw": ["H100", "h100"],
            "gpu_status": ["exact", "default"], "currency": ["USD", "CNY"], "fetched_at": _DAY,
            "interconnect": ["nvlink", "pcie"], "fabric": [None, "ib"], "stopped_bills": ["storage", "nothing"]}
_FLOATS = [NAN, 0.0, -0.0, 1.5, NAN_2, 2.25, 1e-300]
_INTS = {"gpus": [1, 8], "nodes_available": [1, 2, 2**62], "granularity_s": [1, 60], "minimum_s": [0, 60],
         "month_hours": [730, 720]}


@st.composite
def tables(draw):
    """Rows copied from a few prototypes (so they tie), then a few cells changed (so rows
    differ in one column only)."""
    n = draw(st.integers(0, 30))
    protos = draw(st.integers(1, 4))
    of = [draw(st.integers(0, protos - 1)) for _ in range(n)]

    def column(pool: list) -> list:
        values = [draw(st.sampled_from(pool)) for _ in range(protos)]
        cells = [values[p] for p in of]
        for r in draw(st.lists(st.integers(0, n - 1), max_size=2)) if n else []:
            cells[r] = draw(st.sampled_from(pool))
        return cells

    columns: dict = {"offer_id": [f"o{i}" for i in range(n)]}
    for name in LIST_COLUMNS:
        if name != "offer_id":
            columns[name] = column(_STRINGS[name])
    for name, dtype in ARRAY_COLUMNS.items():
        if draw(st.booleans()) and name not in ("gpus", "gpu_memory_gb"):
            continue  # the Offer default, one value held for every row
        pool = [False, True] if dtype is np.bool_ else _INTS[name] if dtype is np.int64 else _FLOATS
        columns[name] = np.array(column(pool), dtype=dtype)
    prices = {}
    for name in PRICE_COLUMNS:
        if draw(st.booleans()):
            prices[name] = Const(draw(st.sampled_from(_FLOATS)))
        else:
            prices[name] = np.array([column(_FLOATS) for _ in (0, 1)], dtype=np.float64).reshape(2, n)
    rows = st.integers(0, max(n - 1, 0))
    terms = {(draw(st.integers(0, 1)), r): ((24.0, 1.0),) for r in draw(st.lists(rows, max_size=2))} if n else {}
    notes = {r: "read as its usual variant" for r in draw(st.lists(rows, max_size=2))} if n else {}
    table = OfferTable.build(n, columns, prices=prices, terms=terms, extra_notes=notes)
    usable = np.array([draw(st.booleans()) or draw(st.booleans()) for _ in range(n)], dtype=bool)
    return table, usable


def _value(v):
    return "NaN" if isinstance(v, float) and math.isnan(v) else v  # NaN equals NaN here; -0.0 == 0.0 already


def _reference(t: OfferTable, usable: np.ndarray) -> dict[int, list[int]]:
    """Each class's first row -> its other rows, worked out row by row."""
    alone = {r for _, r in t.terms} | set(t.extra_notes)
    names = [n for n in LIST_COLUMNS if n != "offer_id"] + list(ARRAY_COLUMNS)
    classes: dict[tuple, list[int]] = {}
    for r in range(t.n):
        if not usable[r] or r in alone:
            continue
        key = tuple(_value(getattr(t, n)[r]) for n in names)
        key += tuple(_value(float(getattr(t, n)[k][r])) for n in PRICE_COLUMNS for k in (0, 1))
        classes.setdefault(key, []).append(r)
    return {rows[0]: rows[1:] for rows in classes.values()}


def _found(t: OfferTable, usable: np.ndarray) -> dict[int, list[int]]:
    """tie_classes' answer in the reference's form (an offer alone is planned, named by none)."""
    alone = {r for _, r in t.terms} | set(t.extra_notes)
    found = ties.tie_classes(t, usable)
    if not len(found.klass):  # no class of two or more
        return {r: [] for r in range(t.n) if usable[r] and r not in alone}
    assert all(found.first[r] for r in range(t.n) if not usable[r] or r in alone)  # only later members drop
    assert not any(found.has_others(r) for r in alone)
    return {r: found.others(r).tolist() if found.has_others(r) else []
            for r in range(t.n) if usable[r] and found.first[r] and r not in alone}


_HASHED = ties._row_hashes
_HASHES = {
    "hashed": None,
    "every row collides": lambda columns, rows: np.zeros(len(rows), dtype=np.uint64),
    "some rows collide": lambda columns, rows: _HASHED(columns, rows) % np.uint64(3),
}


@settings(max_examples=300, deadline=None, derandomize=True)
@given(tables(), st.sampled_from(sorted(_HASHES)))
def test_tie_classes_are_the_rows_equal_in_every_planning_column(case, hashes):
    """Also when hashes collide (replaced by a constant or a hash mod 3): the exact coding takes
    over and the classes stay the same."""
    table, usable = case
    want = _reference(table, usable)
    if _HASHES[hashes] is None:
        got = _found(table, usable)
    else:
        with mock.patch.object(ties, "_row_hashes", _HASHES[hashes]):
            got = _found(table, usable)
    assert got == want


def test_tie_classes_of_a_hand_worked_table():
    """Rows 0, 2, 3 are equal but for the id (2 has -0.0 storage where 0 has 0.0, NaN egress
    in all three); row 1 differs in its hourly price, row 4 in its egress; row 3 is not usable."""
    t = OfferTable.build(5, {"provider": ["p"] * 5, "offer_id": ["z1", "z2", "z3", "z4", "z5"],
                             "gpu": ["H100-SXM-80GB"] * 5, "gpu_raw": ["H100"] * 5, "currency": ["USD"] * 5,
                             "fetched_at": [_DAY[0]] * 5, "gpus": [8] * 5, "gpu_memory_gb": [80.0] * 5,
                             "storage": [0.0, 0.0, -0.0, 0.0, 0.0], "egress": [NAN, NAN, NAN, NAN, 0.01]},
                         prices={"hourly": np.array([[16.0, 16.5, 16.0, 16.0, 16.0], [NAN] * 5])})
    usable = np.array([True, True, True, False, True])
    found = ties.tie_classes(t, usable)
    assert found.first.tolist() == [True, True, False, True, True]
    assert found.has_others(0) and found.others(0).tolist() == [2]
    assert not found.has_others(1) and not found.has_others(4)
    assert found.words(t, 0) == "also at the same price: 1 more offer (z3)"
    # the hashes of equal rows are checked alike: no collision, so no exact coding (a sort per column)
    with mock.patch.object(ties, "_row_codes", side_effect=AssertionError("exact coding without a collision")):
        assert ties.tie_classes(t, usable).others(0).tolist() == [2]


DIGIT = st.sampled_from([0, 1, 2, 0x7FFF, 0x8000, 0xFFFF])  # values that differ in one 16-bit digit of four


@settings(max_examples=30, deadline=None, derandomize=True)
@given(st.lists(st.one_of(st.integers(0, 2**64 - 1),
                          st.tuples(DIGIT, DIGIT, DIGIT, DIGIT).map(lambda d: sum(x << (16 * i) for i, x in enumerate(d)))),
                min_size=1, max_size=24),
       st.integers(0, 2**32 - 1))
def test_the_row_hashes_order_is_numpys_stable_argsort(pool, seed):
    """The hashes' order by 16-bit digits (past 65,536 rows) is np.argsort's stable order: equal
    hashes keep their rows ascending, so each class lists its offers in the file's order."""
    keys = np.array(pool, dtype=np.uint64)[np.random.default_rng(seed).integers(0, len(pool), 70_000)]
    assert np.array_equal(ties.stable_order(keys), np.argsort(keys, kind="stable"))
