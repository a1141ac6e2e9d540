"""Offers equal in every column that prices or constrains a plan, grouped into classes, and the
integer coding of columns that groups them (the planner's node shapes use the same coding)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rentopt.optimizer.offer_table import ARRAY_COLUMNS, LIST_COLUMNS, PRICE_COLUMNS, OfferTable, take_strings


@dataclass
class Ties:
    """Classes of usable offers equal in every column but the offer id (provider, GPU, node,
    every price, disk, transfer and stop rules, limits, currency, price date). The planner plans
    the first of each class in the offers' order; the answer names the others."""

    first: np.ndarray  # per table row: not a later member of a class (the rows to plan)
    klass: np.ndarray  # per table row: its class, for the first member of a class of two or more; else -1
    members: np.ndarray  # table rows, class by class, in the offers' order within each
    starts: np.ndarray  # where each class of two or more begins in `members` (and, last, the end)

    @classmethod
    def none(cls) -> Ties:
        empty = np.zeros(0, dtype=np.int64)
        return cls(np.zeros(0, dtype=bool), empty, empty, np.zeros(1, dtype=np.int64))

    def has_others(self, row: int) -> bool:
        return bool(len(self.klass)) and self.klass[row] >= 0

    def others(self, row: int) -> np.ndarray:
        """The other members of the class `row` is the first of."""
        c = int(self.klass[row])
        return self.members[self.starts[c] + 1:self.starts[c + 1]]

    def others_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """`others(row)` of each of `rows` (each the first of a class of two or more), one after
        the other, and how many each has: ranges of `members` gathered at once (a quote spreads
        a rejection over thousands of classes)."""
        c = self.klass[np.asarray(rows, dtype=np.int64)]
        begin, counts = self.starts[c] + 1, self.starts[c + 1] - self.starts[c] - 1
        ends = np.cumsum(counts)
        at = np.arange(int(ends[-1]) if len(ends) else 0) + np.repeat(begin - (ends - counts), counts)
        return self.members[at], counts

    def words(self, t: OfferTable, row: int, shown: int = 10) -> str:
        """'also at the same price: 6 more offers (z2, z3, ...)', the first `shown` by id."""
        others = self.others(row)
        ids = take_strings(t.offer_id, others[:shown])
        more = f", and {len(others) - shown} more" if len(others) > shown else ""
        return (f"also at the same price: {len(others)} more offer{'s' if len(others) > 1 else ''} "
                f"({', '.join(ids)}{more})")


def tie_classes(t: OfferTable, usable: np.ndarray) -> Ties:
    """The classes of equal offers among the `usable` rows (see `Ties`). An offer with reserved
    terms or a note of its own (a GPU name read as its usual variant) is a class of its own.

    Rows are grouped by a 64-bit hash of their planning columns (one pass per column that is not
    one value throughout, one sort), then every group is checked column by column: a group
    holding two different rows (a hash collision) sends the whole table to the exact coding, a
    sort per column. Classes are therefore exactly the groups of equal rows either way."""
    alone = np.zeros(t.n, dtype=bool)
    alone[[r for _, r in t.terms] + list(t.extra_notes)] = True
    rows = np.flatnonzero(usable & ~alone)
    if len(rows) < 2:
        return Ties.none()
    coded = _coded_columns(t)
    if coded is not None:  # every column as integer codes: rows ordered by them exactly, nothing to check
        words, spans = _packed_codes(t.n, coded)
        if len(rows) < t.n:
            words = [word[rows] for word in words]
        order = words_order(words, spans) if words else np.arange(len(rows))  # no words: every row alike
        new = np.zeros(len(rows), dtype=bool)
        new[0] = True
        for word in words:
            ordered = word[order]
            new[1:] |= ordered[1:] != ordered[:-1]
        return _ties_of_runs(t.n, rows, order, np.flatnonzero(new))
    columns = _planning_columns(t)
    order, starts = _runs(_row_hashes(columns, rows))
    if len(starts) == len(rows):
        return Ties.none()  # every hash differs, so every row differs
    if not _runs_alike(columns, rows, order, starts):
        order, starts = _runs(_row_codes(columns, rows))
    return _ties_of_runs(t.n, rows, order, starts)


def _planning_columns(t: OfferTable) -> list[tuple[np.ndarray, bool]]:
    """Every column but the offer id that is not one value throughout, as (array over the
    table's rows, holds floats): strings as their codes (one per distinct value), whole
    numbers packed several to an integer (exactly: mixed radix), floats as they are."""
    whole: list[np.ndarray] = []
    for name in LIST_COLUMNS:
        if name == "offer_id":
            continue
        codes, values = t.category(name)  # a table's categories are values, each once
        if len(values) > 1:
            whole.append(codes)
    floats: list[np.ndarray] = []
    arrays = [np.asarray(getattr(t, name)) for name in ARRAY_COLUMNS]
    arrays += [getattr(t, name)[k] for name in PRICE_COLUMNS for k in (0, 1)]
    for i, a in enumerate(arrays):
        if not len(a) or a.strides[0] == 0:  # a stride of 0: one value held for every row
            continue
        if any(a is b for b in arrays[:i]):  # one array for two columns (a file's storage price and stopped one)
            continue
        if a.dtype.kind != "f":
            whole.append(a)
        elif not (np.isnan(a[0]) and np.isnan(a).all() or a[0] == a[0] and (a == a[0]).all()):
            floats.append(a)
    out = [(column, False) for column in _packed(whole)]
    return out + [(column, True) for column in floats]


def _coded_columns(t: OfferTable) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """The planning columns of `_planning_columns` as (codes over the table's rows, a table of
    each code's digit, 0 to that many - 1: equal exactly where the column's values are), from
    the table's categories and its reader's float codes (`OfferTable.value_codes`); None where a
    float column that is not one value throughout has no codes (a table built from offers or
    from several sources: its floats are hashed instead).

    A price column's codes stand for both its kinds: a coded line's price is of its own kind
    (`spot`, itself a planning column), the other kind unknown."""
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for name in LIST_COLUMNS:
        if name == "offer_id":
            continue
        codes, values = t.category(name)  # a table's categories are values, each once
        if len(values) > 1:
            out.append((codes, np.arange(len(values), dtype=np.uint64)))
    seen: list[np.ndarray] = []
    for name, dtype in ARRAY_COLUMNS.items():
        a = np.asarray(getattr(t, name))
        if not len(a) or a.strides[0] == 0:  # one value held for every row
            continue
        if dtype is not np.float64:
            low, high = int(a.min()), int(a.max())
            if high > low:
                if high - low >= 1 << 16:
                    return None  # a wide whole number (no offer's figures are): hashed
                codes = a.view(np.uint8) if a.dtype == np.bool_ else a.astype(np.int64) - low if low else a
                out.append((codes, np.arange(high - low + 1, dtype=np.uint64)))
            continue
        coded = t.value_codes.get(name)
        if coded is None:
            return None
        if any(coded.codes is c for c in seen):  # one column for two (a file's storage price and stopped one)
            continue
        seen.append(coded.codes)
        out.append((coded.codes, _value_digits(coded.values)))
    for name in PRICE_COLUMNS:
        pair = getattr(t, name)
        if pair.strides[1] == 0:  # one value held for every row
            continue
        coded = t.value_codes.get(name)
        if coded is None:
            return None
        out.append((coded.codes, _value_digits(coded.values)))
    return [(codes, digits) for codes, digits in out if digits.max(initial=0) > 0]


def _value_digits(values: np.ndarray) -> np.ndarray:
    """Per code, the rank of its value among the distinct values (as `_bits` compares floats:
    -0.0 is 0.0, every NaN one NaN), as uint64."""
    ranks = np.unique(_bits((values, True), np.arange(len(values))), return_inverse=True)[1]
    return ranks.reshape(-1).astype(np.uint64)


def _packed_codes(n: int, columns: list[tuple[np.ndarray, np.ndarray]]) -> tuple[list[np.ndarray], list[int]]:
    """Coded columns (`_coded_columns`) as few uint64 words over the table's `n` rows, each a
    mixed-radix number over several columns (as many as fit in 64 bits), equal exactly where
    all of theirs are; and each word's span (its values lie below it)."""
    words: list[np.ndarray] = []
    spans: list[int] = []
    key, span = None, 1
    placed = np.empty(n, dtype=np.uint64)  # one buffer for every column's digits (no fresh pages each)
    for codes, digits in columns:
        radix = int(digits.max()) + 1
        if key is None or span * radix > 1 << 64:
            if key is not None:
                words.append(key)
                spans.append(span)
            key, span = None, 1
        if key is None:
            key = np.take(digits, codes)
        else:
            np.take(digits * np.uint64(span), codes, out=placed)  # each code's digit in its place
            key += placed
        span *= radix
    if key is not None:
        words.append(key)
        spans.append(span)
    return words, spans


def words_order(words: list[np.ndarray], spans: list[int]) -> np.ndarray:
    """The positions sorted by their words (the first the most significant), positions ascending
    among equal ones. The words, each in as many bits as its span needs, are read as one binary
    number, sorted by stable sorts of its 16-bit digits (numpy counts them), least significant
    first: ceil(all their bits / 16) passes."""
    widths = [max(span - 1, 1).bit_length() for span in spans]
    lows = np.cumsum([0, *widths[::-1]])[::-1][1:].tolist()  # where each word's lowest bit lies
    order = None
    for at in range(0, sum(widths), 16):
        digit = None
        for word, low, width in zip(words, lows, widths):
            if low >= at + 16 or low + width <= at:
                continue  # no bit of this digit in this word
            part = (word >> np.uint64(at - low) if at >= low else word << np.uint64(low - at)).astype(np.uint16)
            digit = part if digit is None else digit | part  # the bits above the digit are cut off
        assert digit is not None
        found = np.argsort(digit if order is None else digit[order], kind="stable")
        order = found if order is None else order[found]
    return np.arange(len(words[0])) if order is None else order


def _packed(columns: list[np.ndarray]) -> list[np.ndarray]:
    """Integer columns as fewer int64 columns, equal exactly where all of theirs are: each
    packed one is a mixed-radix number over several (as many as fit in 62 bits)."""
    out: list[np.ndarray] = []
    key, span = None, 1
    for column in columns:
        low, high = int(column.min()), int(column.max())
        if low == high:
            continue
        radix = high - low + 1
        if radix >= 1 << 62:  # too wide to pack (no offer's figures are): as it is
            out.append(column.astype(np.int64))
            continue
        digit = column.astype(np.int64) - low if low else column.astype(np.int64)
        if key is None or span * radix >= 1 << 62:
            if key is not None:
                out.append(key)
            key, span = digit, radix
        else:
            key, span = key * radix + digit, span * radix
    return out if key is None else [*out, key]


def _bits(column: tuple[np.ndarray, bool], at: np.ndarray) -> np.ndarray:
    """The column's values at rows `at` as 64-bit patterns, equal exactly where the values are
    (for floats: -0.0 as 0.0, every NaN as one NaN)."""
    values, floating = column
    if not floating:
        return np.take(values, at).astype(np.int64, copy=False).view(np.uint64)  # take's copy is enough
    v = np.take(values, at)  # a copy, whatever `at` is: changed in place below, never the table
    v += 0.0  # -0.0 + 0.0 is 0.0
    v[np.isnan(v)] = np.nan
    return v.view(np.uint64)


_MIX = np.uint64(0x9E3779B97F4A7C15)  # an odd 64-bit multiplier (2**64 / golden ratio): spreads bits upward


def _row_hashes(columns: list[tuple[np.ndarray, bool]], rows: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each of `rows` over `columns`: equal rows hash alike."""
    h = np.zeros(len(rows), dtype=np.uint64)
    for column in columns:
        h ^= _bits(column, rows)
        h *= _MIX
        h ^= h >> np.uint64(29)
    return h


def _row_codes(columns: list[tuple[np.ndarray, bool]], rows: np.ndarray) -> np.ndarray:
    """An integer per row of `rows`, equal exactly where the rows are equal in every column
    (mixed radix over each column's rank: a sort per column)."""
    key = np.zeros(len(rows), dtype=np.int64)
    for column in columns:
        part = np.unique(_bits(column, rows), return_inverse=True)[1].astype(np.int64).reshape(-1)
        key = key * (int(part.max()) + 1) + part
        if key.max() >= 1 << 40:  # renumbered before the next digit could overflow
            key = renumbered_codes(key)
    return key


def _runs(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, starts): the positions sorted by key, rows ascending within a key, and where
    each run of one key begins in that order."""
    order = stable_order(keys)
    ordered = keys[order]
    new = np.ones(len(keys), dtype=bool)
    new[1:] = ordered[1:] != ordered[:-1]
    return order, np.flatnonzero(new)


def stable_order(codes: np.ndarray) -> np.ndarray:
    """np.argsort(codes, kind="stable") of integers, in passes numpy sorts by counting (linear
    time) where it can: codes that fit in 16 bits in one; unsigned 64-bit keys (a million row
    hashes) as four stable sorts of 16-bit digits, lowest first (numpy merge-sorts 64-bit
    integers, ~1.7x slower at a million)."""
    if len(codes) and codes.min() >= 0 and codes.max() < 1 << 16:
        return np.argsort(codes.astype(np.uint16), kind="stable")
    if codes.dtype != np.uint64 or len(codes) < 1 << 16:
        return np.argsort(codes, kind="stable")
    order = np.argsort((codes & np.uint64(0xFFFF)).astype(np.uint16), kind="stable")
    for shift in (16, 32, 48):
        digit = (codes[order] >> np.uint64(shift)).astype(np.uint16)  # the bits above are cut off
        order = order[np.argsort(digit, kind="stable")]
    return order


def _runs_alike(columns: list[tuple[np.ndarray, bool]], rows: np.ndarray, order: np.ndarray,
                starts: np.ndarray) -> bool:
    """Whether the rows of each run are equal in every column: each equals the one before it
    (only runs of two or more are looked at)."""
    sizes = np.diff(np.r_[starts, len(order)])
    ordered = rows[order[np.repeat(sizes > 1, sizes)]]  # the rows of runs of two or more, run by run
    sizes = sizes[sizes > 1]
    within = np.ones(len(ordered), dtype=bool)
    within[np.cumsum(sizes) - sizes] = False  # the first of each run
    apart = ~within[1:]  # position i + 1 begins a run: not compared with position i
    for column in columns:
        bits = _bits(column, ordered)
        same = bits[1:] == bits[:-1]
        same |= apart
        if not same.all():
            return False
    return True


def _ties_of_runs(n: int, rows: np.ndarray, order: np.ndarray, starts: np.ndarray) -> Ties:
    """Ties of a table of `n` rows whose classes are the runs (`_runs`) of `rows`."""
    sizes = np.diff(np.r_[starts, len(order)])
    tied = np.flatnonzero(sizes > 1)
    if not len(tied):
        return Ties.none()
    members = rows[order]  # class by class, the offers' order within each
    leads = np.zeros(len(order), dtype=bool)
    leads[starts] = True
    first = np.ones(n, dtype=bool)
    first[members] = leads  # a later member of its run is not first (one scatter, nothing compressed)
    klass = np.full(n, -1, dtype=np.int64)
    klass[members[starts[tied]]] = np.arange(len(tied))
    alone = leads  # a run of one: it leads, and so does the next position (or it is the last)
    alone[:-1] &= leads[1:]
    return Ties(first, klass, members[~alone], np.r_[0, np.cumsum(sizes[tied])])


def dense_codes(codes: np.ndarray) -> np.ndarray:
    """Small non-negative integer codes renumbered 0, 1, ... in ascending order (np.unique's
    inverse, without sorting a million of them).

    >>> dense_codes(np.array([7, 2, 7, 9])).tolist()
    [1, 0, 1, 2]
    """
    codes = codes.astype(np.int64)
    if not len(codes):
        return codes
    present = np.bincount(codes) > 0
    return (np.cumsum(present) - 1)[codes]


def renumbered_codes(codes: np.ndarray) -> np.ndarray:
    """Non-negative integer codes renumbered 0, 1, ... in ascending order: `dense_codes` when they
    are small enough to count, else np.unique's inverse (a sort)."""
    if len(codes) and codes.max() >= 8 * len(codes) + 1024:
        return np.unique(codes, return_inverse=True)[1].astype(np.int64)
    return dense_codes(codes)


def float_codes(values: np.ndarray) -> np.ndarray:
    """A code per distinct value (no NaN). A column of a few distinct values (host RAM steps,
    fabric speeds) is coded in one comparison per value instead of a sort of every row.

    >>> float_codes(np.array([2.0, -1.0, 2.0, 8.0])).tolist()
    [0, 1, 0, 2]
    """
    if not len(values):
        return np.zeros(0, dtype=np.int64)
    # the first value over the whole column, without an index of every row: it is usually
    # nearly every row (an unstated host RAM or fabric), so the rest is a short list
    same = values == values[0]
    codes = np.where(same, 0, -1)
    left = np.flatnonzero(~same)
    for code in range(1, 32):
        if not len(left):
            return codes
        same = values[left] == values[left[0]]
        codes[left[same]] = code
        left = left[~same]
    if len(left):  # many distinct values: rank them
        codes[left] = 32 + np.unique(values[left], return_inverse=True)[1]
    return codes
