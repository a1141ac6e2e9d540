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
from rentopt.optimizer.offer_table import ARRAY_COLUMNS, LIST_COLUMNS, PRICE_COLUMNS, Const, OfferTable, ValueCodes

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


def _raw_codes(values: np.ndarray) -> ValueCodes:
    """A reader's codes of a float column: one per distinct bit pattern (as a reader codes
    distinct cells: -0.0 and 0.0, or two NaNs, are two codes of one value)."""
    bits, codes = np.unique(values.view(np.uint64), return_inverse=True)
    return ValueCodes(codes.reshape(-1).astype(np.uint16), bits.view(np.float64))


@st.composite
def coded_tables(draw):
    """`tables()` as an offers file's reader gives them: every float column with its codes, and
    each row's prices of its own kind only (`spot`), the other kind unknown."""
    table, usable = draw(tables())
    table.nodes_available = np.minimum(table.nodes_available, 3)  # 2**62 nodes: wide whole numbers are hashed
    for name, dtype in ARRAY_COLUMNS.items():
        column = np.asarray(getattr(table, name))
        if dtype is np.float64 and len(column) and column.strides[0]:
            table.value_codes[name] = _raw_codes(column)
    spot = np.asarray(table.spot)
    for name in PRICE_COLUMNS:
        pair = getattr(table, name)
        if pair.strides[1] == 0:
            continue  # one value for every row
        price = pair[0].copy()
        setattr(table, name, np.where([~spot, spot], price, NAN))
        table.value_codes[name] = _raw_codes(price)
    return table, usable


@settings(max_examples=300, deadline=None, derandomize=True)
@given(coded_tables())
def test_tie_classes_of_a_readers_codes_are_the_rows_equal_in_every_planning_column(case):
    """With every float column coded by its reader, rows are grouped by the codes' values (no
    hash, nothing to check); two codes of one value (-0.0 and 0.0, two NaNs) are one value."""
    table, usable = case
    with mock.patch.object(ties, "_row_hashes", side_effect=AssertionError("hashed although coded")):
        got = _found(table, usable)
    assert got == _reference(table, usable)


def test_a_float_column_without_codes_is_hashed():
    """A table whose reader coded some floats but not all (here: no egress codes) hashes its
    floats and checks the classes as before."""
    t = OfferTable.build(3, {"provider": ["p"] * 3, "offer_id": ["a", "b", "c"], "gpu": ["H100-SXM-80GB"] * 3,
                             "gpu_raw": ["H100"] * 3, "currency": ["USD"] * 3, "fetched_at": [_DAY[0]] * 3,
                             "gpus": [8] * 3, "gpu_memory_gb": [80.0] * 3, "egress": [0.01, 0.02, 0.01]},
                         prices={"hourly": np.array([[16.0, 16.0, 16.0], [NAN] * 3])})
    t.value_codes["hourly"] = ValueCodes(np.zeros(3, dtype=np.uint8), np.array([16.0]))
    assert ties._coded_columns(t) is None
    assert ties.tie_classes(t, np.ones(3, dtype=bool)).others(0).tolist() == [2]


WORDS = st.lists(st.tuples(st.integers(1, 2**64), st.integers(0, 2**32 - 1)), min_size=1, max_size=3)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(WORDS, st.integers(1, 400))
def test_the_words_order_is_the_stable_order_of_their_values(spans_seeds, n):
    """Words of any span (their bits read as one number: digits that straddle two words) sort
    as the tuples of their values, positions ascending among equal ones (np.lexsort is stable)."""
    spans = [span for span, _ in spans_seeds]
    words = []
    for span, seed in spans_seeds:
        pool = np.random.default_rng(seed).integers(0, span, size=4, dtype=np.uint64, endpoint=False) \
            if span > 1 else np.zeros(4, dtype=np.uint64)
        pool[0] = span - 1  # the largest value: every bit of the word's width
        words.append(pool[np.random.default_rng(seed + 1).integers(0, 4, n)])
    want = np.lexsort(words[::-1])
    assert np.array_equal(ties.words_order(words, spans), want)


def test_coded_columns_packed_past_64_bits_fill_several_words():
    """Six columns of 70,000 codes (97 bits) pack into two words of three, each below 2**64
    (70,000**4 is 1.3 x 2**64); read back as mixed-radix numbers, the words give every row's
    codes (the largest codes included)."""
    rng = np.random.default_rng(7)
    radix = 70_000
    codes = [rng.integers(0, radix, 50).astype(np.uint32) for _ in range(6)]
    for c in codes:
        c[0] = radix - 1  # a row of the largest code everywhere: the top of every word
    digits = np.arange(radix, dtype=np.uint64)
    words, spans = ties._packed_codes(50, [(c, digits) for c in codes])
    assert len(words) == 2 and all(span <= 2**64 for span in spans)
    per_word = [3, 3]
    for row in range(50):
        read = []
        for word, count in zip(words, per_word):
            value = int(word[row])
            for _ in range(count):  # a word's first column is its least significant digit
                value, digit = divmod(value, radix)
                read.append(digit)
            assert value == 0
        assert read == [int(c[row]) for c in codes]


def test_an_offers_files_reader_codes_its_floats_as_the_table_holds_them(tmp_path):
    """Read from a CSV, every float column that is not one value throughout carries its codes:
    `values[codes]` is the column (a price: of the line's own kind, the other unknown). "2.10"
    and "2.1", "0" and "0.00" are two cells of one value: z1, z3 and z5 tie, found without a hash."""
    from rentopt.optimizer.offers_reader import read_offers_table

    path = tmp_path / "offers.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,price_day,currency,storage_gb_month,spot,max_days\n"
                    "p,z1,H100-SXM-80GB,8,2.10,40,USD,0,no,30\n"
                    "p,z2,H100-SXM-80GB,8,2.10,40,USD,0,yes,30\n"
                    "p,z3,H100-SXM-80GB,8,2.1,40.0,USD,0.00,no,30\n"
                    "p,z4,H100-SXM-80GB,8,2.2,40,USD,0,no,\n"
                    "p,z5,H100-SXM-80GB,8,2.1,40,USD,0,no,30\n")
    t = read_offers_table(path)
    assert {"hourly", "day", "storage", "stopped_storage", "max_hours"} <= set(t.value_codes)
    spot = np.asarray(t.spot)
    for name, coded in t.value_codes.items():
        held = coded.values[coded.codes]
        if name in PRICE_COLUMNS:
            pair = getattr(t, name)
            assert np.array_equal(pair[0], np.where(spot, NAN, held), equal_nan=True)
            assert np.array_equal(pair[1], np.where(spot, held, NAN), equal_nan=True)
        else:
            assert np.array_equal(np.asarray(getattr(t, name)), held, equal_nan=True)
    with mock.patch.object(ties, "_row_hashes", side_effect=AssertionError("hashed although coded")):
        found = ties.tie_classes(t, np.ones(t.n, dtype=bool))
    assert found.first.tolist() == [True, True, False, True, False]
    assert found.others(0).tolist() == [2, 4] and not found.has_others(1) and not found.has_others(3)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(tables(), st.integers(0, 2**32 - 1))
def test_the_others_of_many_classes_are_each_ones_others(case, seed):
    """Ties.others_of (ranges of members gathered at once) gives each row's `others`, one row
    after the other in the order asked, and how many each has."""
    table, usable = case
    found = ties.tie_classes(table, usable)
    firsts = [r for r in range(table.n) if found.has_others(r)]
    rows = np.array(firsts, dtype=np.int64)[np.random.default_rng(seed).permutation(len(firsts))] if firsts else \
        np.zeros(0, dtype=np.int64)
    extra, counts = found.others_of(rows) if len(found.klass) else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    want = [found.others(int(r)).tolist() for r in rows]
    assert counts.tolist() == [len(w) for w in want]
    assert extra.tolist() == [x for w in want for x in w]
