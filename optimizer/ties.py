"""Offers equal in every column that prices or constrains a plan, grouped into classes, and the
integer coding of columns that groups them (the planner's node shapes use the same coding)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rentopt.optimizer.offer_table import ARRAY_COLUMNS, LIST_COLUMNS, PRICE_COLUMNS, OfferTable, take_strings
from rentopt.optimizer.solver import stable_order


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

    def words(self, t: OfferTable, row: int, shown: int = 10) -> str:
        """'also at the same price: 6 more offers (z2, z3, ...)', the first `shown` by id."""
        others = self.others(row)
        ids = take_strings(t.offer_id, others[:shown])
        more = f", and {len(others) - shown} more" if len(others) > shown else ""
        return (f"also at the same price: {len(others)} more offer{'s' if len(others) > 1 else ''} "
                f"({', '.join(ids)}{more})")


def tie_classes(t: OfferTable, usable: np.ndarray) -> Ties:
    """The classes of equal offers among the `usable` rows (see `Ties`). An offer with reserved
    terms or a note of its own (a GPU name read as its usual variant) is a class of its own."""
    rows = np.flatnonzero(usable)
    if len(rows) < 2:
        return Ties.none()
    parts = [t.category(name)[0][rows] for name in LIST_COLUMNS if name != "offer_id"]
    parts += [float_codes(np.nan_to_num(np.asarray(getattr(t, name), dtype=np.float64)[rows], nan=-1.0))
              for name in ARRAY_COLUMNS]
    parts += [float_codes(np.nan_to_num(getattr(t, name)[k][rows], nan=-1.0)) for name in PRICE_COLUMNS for k in (0, 1)]
    alone = np.zeros(t.n, dtype=bool)
    alone[[r for _, r in t.terms] + list(t.extra_notes)] = True
    parts.append(np.where(alone[rows], np.arange(1, len(rows) + 1), 0))
    key = np.zeros(len(rows), dtype=np.int64)
    for part in parts:  # one integer per class (mixed radix over the coded columns)
        key = key * (int(part.max()) + 1) + part
        if key.max() >= 1 << 40:  # renumbered before the next digit could overflow
            key = renumbered_codes(key)
    key = renumbered_codes(key)
    counts = np.bincount(key)
    if counts.max() < 2:
        return Ties.none()
    order = stable_order(key)  # by class, the offers' order within each
    bounds = np.r_[0, np.cumsum(counts)]
    members = rows[order]
    first = np.ones(t.n, dtype=bool)
    later = np.ones(len(rows), dtype=bool)
    later[bounds[:-1]] = False
    first[members[later]] = False
    tied = np.flatnonzero(counts > 1)
    klass = np.full(t.n, -1, dtype=np.int64)
    klass[members[bounds[tied]]] = np.arange(len(tied))
    in_tied = counts[key[order]] > 1  # the members of classes of two or more, still class by class
    return Ties(first, klass, members[in_tied], np.r_[0, np.cumsum(counts[tied])])


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
