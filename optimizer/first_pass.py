"""The first pass: every stage option of a quote bounded at once, as float arrays over the offer
table, and pruned to the few that can still be among the best plans.

Contract: it keeps every candidate the exact pass would keep, and each bound it computes
contains the exact bill of that candidate (its hours are `stage_hours`' functions, the exact
pass's, applied to arrays). tests/test_first_pass_oracle.py checks both candidate by candidate;
billing.py stays the readable specification of every rule bounded here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

import numpy as np

from rentopt.optimizer.billing import SECONDS_PER_HOUR, rounding_slack
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.solver import (
    Kept,
    LeaseArrays,
    TrainArrays,
    ValidateArrays,
    prune_arrays,
    rows_per_key,
)
from rentopt.optimizer.stage_hours import training_hours
from rentopt.optimizer.ties import stable_order

# Float comparisons here are made permissive by these (hours, quote-currency units): the exact
# pass decides the boundary cases.
DEADLINE_EPS = 1e-6
BUDGET_EPS = 1e-6

# From this many training plus validation candidates on, the prune starts from the HEADS
# cheapest of each group and key (`narrowed`); below it, pruning all at once is faster
# (benchmarks/bench_scale.py measures both; tests/test_solver_property.py narrows every example).
HEADS_FROM = 75_000
HEADS = 8


# --------------------------------------------------------------------------------------------
# Rough bounds: billing's rules (use_bounds, lease_bounds) over many candidates at once, in
# floats from the offers' raw prices, each widened by the rounding of bill lines and float error
# (tests/test_billing.py checks them against the exact pricer).


class _Metered:
    """Metered cost of seconds for some rows: granularity and minimum applied, 0 for none, NaN
    where the row has no metered price."""

    def __init__(self, hourly: np.ndarray, granularity: np.ndarray, minimum: np.ndarray):
        self.hourly, self.granularity, self.minimum = hourly, granularity, minimum

    def __call__(self, s: np.ndarray) -> np.ndarray:
        g = self.granularity
        return np.where(s > 0, self.hourly * np.maximum(self.minimum, np.ceil(s / g) * g) / SECONDS_PER_HOUR, 0.0)

    def at(self, index: np.ndarray) -> _Metered:
        return _Metered(self.hourly[index], self.granularity[index], self.minimum[index])


def _scaled(prices: np.ndarray, factor: np.ndarray) -> np.ndarray:
    """prices * factor; a price no row has (NaN held once for every row) stays one value."""
    if prices.strides[0] == 0 and np.isnan(prices[:1]).all():
        return prices
    return prices * factor


class PriceColumns:
    """One kind of price (on-demand or interruptible) of an OfferTable's rows, in the quote currency.

    `factor[row]` converts the row's currency into the quote currency at the rate of its price's
    day. Used with row-index arrays: every method returns one value per candidate.
    """

    def __init__(self, table: OfferTable, kind: int, factor: np.ndarray, currency: str):
        self.t, self.kind, self.factor = table, kind, factor
        self.hourly, self.day, self.week, self.month = (_scaled(column[kind], factor) for column in (
            table.hourly, table.day, table.week, table.month))
        self.terms = {row: tuple((h, p * factor[row]) for h, p in blocks)
                      for (k, row), blocks in table.terms.items() if k == kind}
        self.slack = float(rounding_slack(currency))
        codes, rules = table.category("stopped_bills")
        # compared once per distinct rule, then spread by code (not a string compare per row)
        self.everything = np.array([r == "everything" for r in rules], dtype=bool)[codes]
        self.nothing = np.array([r == "nothing" for r in rules], dtype=bool)[codes]
        self.metered_only = np.isnan(self.day) & np.isnan(self.week) & np.isnan(self.month)
        for row in self.terms:
            self.metered_only[row] = False
        with np.errstate(invalid="ignore"):
            # fmin(fmin(hourly, day / 24), fmin(week / 168, month / month_hours)), in three arrays, not six
            floor, weekly, monthly = self.day / 24, self.week / 168, self.month / table.month_hours
            np.fmin(self.hourly, floor, out=floor)
            np.fmin(weekly, monthly, out=weekly)
            np.fmin(floor, weekly, out=floor)
            del weekly, monthly
        for row, blocks in self.terms.items():
            floor[row] = np.fmin(floor[row], min(p / h for h, p in blocks))
        self.floor_per_hour = floor

    def _covers(self, rows: np.ndarray, s: np.ndarray, floor: np.ndarray | None
                ) -> tuple[np.ndarray, np.ndarray | None]:
        """(an upper bound, a lower bound or None) on the cheapest cover of `s` seconds, per node.

        Metered-only rows: both are the metered cost. Rows with blocks (`_block_covers`): the
        upper one the cheapest of some whole covers, the lower one valid for every cover.
        """
        t = self.t
        metered = _Metered(self.hourly[rows], t.granularity_s[rows], t.minimum_s[rows])
        hi = metered(s)
        lo = None if floor is None else hi.copy()
        blocky = np.flatnonzero(~self.metered_only[rows])
        if len(blocky):
            sub = rows[blocky]
            blocks = [(self.day[sub], np.full(len(sub), 86400.0)), (self.week[sub], np.full(len(sub), 604800.0)),
                      (self.month[sub], t.month_hours[sub] * 3600.0)]
            b_hi, b_lo = self._block_covers(metered.at(blocky), blocks, s[blocky],
                                            None if floor is None else floor[blocky], self.hourly[sub])
            hi[blocky] = b_hi
            if lo is not None:
                lo[blocky] = b_lo
        if self.terms:
            for i in np.flatnonzero(np.isin(rows, list(self.terms))):
                for hours, price in self.terms[int(rows[i])]:
                    hi[i] = np.fmin(hi[i], np.ceil(s[i] / (hours * 3600)) * price)
                    if lo is not None and floor is not None:  # a cover using this term pays it once at least
                        lo[i] = np.fmin(lo[i], price + floor[i] * max(0.0, s[i] - hours * 3600))
        return hi, lo

    def _block_covers(self, metered: _Metered, blocks: list[tuple[np.ndarray, np.ndarray]], s: np.ndarray,
                      floor: np.ndarray | None, hourly: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Bounds for rows that sell day, week or month blocks (price NaN: that block is not sold).

        Upper: the cheapest of some whole covers -- one option alone; whole copies of one block
        (or of a longer then a shorter one) with the rest paid by one option alone (1 week and 3
        days for 240 h where days alone cost more).
        Lower: a cover meters all the time, or buys exactly one block and meters the rest, or buys
        at least two blocks b1, b2 and pays for the rest at no better than the cheapest rate per
        second among the options an optimal cover can use: a block dearer than the upper bound
        is never in one (a month bought for a 240 h job is dearer than a week and 3 days).
        """
        def single(x: np.ndarray) -> np.ndarray:
            cost = metered(x)
            for price, length in blocks:
                cost = np.fmin(cost, np.ceil(x / length) * price)
            return np.where(x > 0, cost, 0.0)

        hi = single(s)
        for i, (p1, l1) in enumerate(blocks):
            c1 = np.floor(s / l1)
            r1 = s - c1 * l1
            hi = np.fmin(hi, c1 * p1 + single(r1))
            for p2, l2 in blocks[:i]:  # shorter blocks
                c2 = np.floor(r1 / l2)
                hi = np.fmin(hi, c1 * p1 + c2 * p2 + single(r1 - c2 * l2))
        if floor is None:
            return hi, None
        usable = hi * (1 + 1e-9) + self.slack  # a block dearer than this is in no optimal cover
        rate = hourly / SECONDS_PER_HOUR
        for price, length in blocks:
            rate = np.fmin(rate, np.where(price <= usable, price / length, np.nan))
        rate = np.fmax(np.nan_to_num(rate, nan=np.inf), floor)  # never below the cheapest rate of all
        lo = metered(s)
        for i, (p1, l1) in enumerate(blocks):
            lo = np.fmin(lo, p1 + metered(s - l1))
            for p2, l2 in blocks[:i + 1]:
                lo = np.fmin(lo, p1 + p2 + rate * np.maximum(0.0, s - l1 - l2))
        return hi, lo

    def alone_floor(self, rows: np.ndarray, hours: np.ndarray) -> np.ndarray:
        """A lower bound on the compute of one node of each row running `hours` on its own (a
        stage alone on its instance): a cover buys no block and meters all the time (at least
        the metered cost) or buys one at least (at least the cheapest block's or term's price),
        and never pays less than the cheapest rate x hours. Exact for a metered-only row. NaN
        where the row has no price of this kind. No block covers are worked out (`compute_bounds`
        does), so it bounds a million candidates: a 4 h validation on an offer with a cheap
        month is bounded by its hourly price, not by a 730 h block's rate."""
        seconds = _array_seconds(hours).astype(np.float64)
        metered = _Metered(self.hourly[rows], self.t.granularity_s[rows], self.t.minimum_s[rows])(seconds)
        with np.errstate(invalid="ignore"):
            block = np.fmin(np.fmin(self.day[rows], self.week[rows]), self.month[rows])
        if self.terms:
            for i in np.flatnonzero(np.isin(rows, list(self.terms))):
                block[i] = np.fmin(block[i], min(p for _, p in self.terms[int(rows[i])]))
        return np.fmax(self.floor_per_hour[rows] * hours, np.fmin(metered, block))

    def single(self, rows: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """An upper bound on the cheapest cover of `seconds` of running time (per node)."""
        cost, _ = self._covers(rows, seconds.astype(np.float64), None)
        return np.where(seconds > 0, cost, 0.0)

    def compute_bounds(self, rows: np.ndarray, seconds: np.ndarray, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on the cheapest cover of `seconds` per node, times `nodes` (see `_covers`);
        the lower one never below floor x seconds, both exact for metered-only offers."""
        lo, hi = self._cover_bounds(rows, seconds)
        return lo * nodes, hi * nodes

    def _cover_bounds(self, rows: np.ndarray, seconds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = seconds.astype(np.float64)
        floor = self.floor_per_hour[rows] / SECONDS_PER_HOUR
        single, lower = self._covers(rows, s, floor)
        assert lower is not None  # asked for with a floor
        running = seconds > 0
        hi = np.where(running, single, 0.0)
        lo = np.where(running, np.maximum(lower, floor * s), 0.0)
        return np.where(self.metered_only[rows], hi, lo), hi

    def rate(self, column: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """A per-unit price column (disk, transfers) of `rows` in the quote currency."""
        return column[rows] * self.factor[rows]

    def disk(self, rows: np.ndarray, gb: float, nodes: np.ndarray | int, hours: np.ndarray,
             rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(known cost, unknown?) of `gb` per node kept for `hours` at `rate` (already converted)."""
        billable = np.maximum(0.0, gb - self.t.free_disk_gb[rows]) * nodes
        owed = (billable > 0) & (hours > 0)
        cost = np.where(owed & ~np.isnan(rate), np.nan_to_num(rate) * billable * hours / self.t.month_hours[rows], 0.0)
        return cost, owed & np.isnan(rate)

    @staticmethod
    def move(gb: np.ndarray | float, rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        owed = np.asarray(gb) > 0
        return np.where(owed & ~np.isnan(rate), np.nan_to_num(rate) * gb, 0.0), owed & np.isnan(rate)

    def widen(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        pad = self.slack + 1e-9 * np.maximum(1.0, np.abs(hi))
        return lo - pad, hi + pad


def _array_seconds(hours: np.ndarray) -> np.ndarray:
    """`seconds_to_cover` over float hours: whole seconds, rounded up. Float error must not add a
    second (0.05 h + 0.5 h is 1980.0000000000002 s, one granule more at 60 s granularity); exact
    hours lie on a 1e-6 h grid (0.0036 s), so anything within 1e-6 s of a whole second is that second."""
    return np.ceil(hours * SECONDS_PER_HOUR - 1e-6).astype(np.int64)


def alone_bounds_arrays(p: PriceColumns, rows: np.ndarray, kind: str, nodes: np.ndarray, hours: np.ndarray,
                        disk_gb: float, import_gb: float, out_gb: float,
                        out_hours: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`use_bounds` over many candidates: (lo, hi, unknown) of each stage on its own instance."""
    t = p.t
    running = hours + (out_hours if kind == "validate" and out_hours is not None else 0.0)
    seconds = _array_seconds(running)
    lo, hi = p.compute_bounds(rows, seconds, nodes)
    disk, u1 = p.disk(rows, disk_gb, nodes, running, p.rate(t.storage, rows))
    imp, u2 = p.move(import_gb * nodes, p.rate(t.ingress, rows))
    out, u3 = p.move(np.full(len(rows), out_gb), p.rate(t.egress, rows))
    fixed = disk + imp + out
    lo, hi = p.widen(lo + fixed, hi + fixed)
    return lo, hi, u1 | u2 | u3


def lease_bounds_arrays(p: PriceColumns, rows: np.ndarray, v_hours: np.ndarray, t_hours: np.ndarray,
                        nodes: np.ndarray, idle_hours: float, v_disk: float, t_disk: float, import_gb: float,
                        out_gb: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`lease_bounds` over many (validation, training) pairs on their rows' instances.

    Returns (allowed, lo, hi, unknown); `allowed` is False only where the lease is surely refused
    (permissive at the float boundary: the exact pass decides the rest).
    """
    t = p.t
    stopped_max, max_hours = t.stopped_max_hours[rows], t.max_hours[rows]
    allowed = np.ones(len(rows), dtype=bool)
    if idle_hours > 0:
        allowed &= ~(stopped_max + 1e-6 < idle_hours)  # NaN (no retention limit) compares False
    allowed &= ~(max_hours + 1e-6 < v_hours + t_hours + idle_hours)
    sv, st = _array_seconds(v_hours), _array_seconds(t_hours)
    sg = int(math.ceil(idle_hours * SECONDS_PER_HOUR))
    full_gap = p.everything[rows]
    one_session = full_gap | (sg == 0)
    ones = np.ones(len(rows), dtype=np.int64)
    whole = sv + st + np.where(full_gap, sg, 0)
    lo_a, hi_a = p.compute_bounds(rows, whole, ones)
    hi_b = p.single(rows, sv) + p.single(rows, st)
    # Two sessions: blocks may span the gap, so they cover the two runs' time together at best
    # (metered billing is subadditive: one session never bills more than the two); metered-only
    # offers bill each session exactly.
    lo_b = np.where(p.metered_only[rows], hi_b, lo_a)  # `whole` is sv + st where the gap is not billed
    lo, hi = np.where(one_session, lo_a, lo_b), np.where(one_session, hi_a, hi_b)
    others = nodes - 1
    o_lo, o_hi = p.compute_bounds(rows, st, others)
    lo, hi = lo + o_lo, hi + o_hi
    storage, ingress = p.rate(t.storage, rows), p.rate(t.ingress, rows)
    parts = [p.disk(rows, v_disk, ones, v_hours, storage), p.move(import_gb, ingress),
             p.disk(rows, t_disk, nodes, t_hours, storage), p.move(import_gb * others, ingress),
             p.move(np.full(len(rows), out_gb), p.rate(t.egress, rows))]
    if sg:
        nothing = p.nothing[rows]
        gap_rate = np.where(full_gap, storage, p.rate(t.stopped_storage, rows))
        cost, unknown = p.disk(rows, v_disk, ones, np.full(len(rows), idle_hours), gap_rate)
        parts.append((np.where(nothing, 0.0, cost), unknown & ~nothing))
    fixed = sum(c for c, _ in parts)
    unknown = np.zeros(len(rows), dtype=bool)
    for _, u in parts:
        unknown |= u
    lo, hi = p.widen(lo + fixed, hi + fixed)
    return allowed, lo, hi, unknown


# --------------------------------------------------------------------------------------------
# Candidate columns


@dataclass(frozen=True)
class TrainColumns:
    """Training candidates, one per (offer row, node count, price kind) a layout fits there."""

    row: np.ndarray  # offer table row
    nodes: np.ndarray
    kind: np.ndarray  # price kind: 0 on demand, 1 spot
    fit: np.ndarray  # the planner's training fit (layout and speed) it runs
    hours: np.ndarray  # its rental at the typical speed: import + work + export
    wall: np.ndarray  # the same at the slow end of the speed range (what deadlines read)
    low: np.ndarray  # the same at the fast end
    tokens: np.ndarray  # the work done
    group: np.ndarray  # its (provider, GPU) group: top-K plans differ in it
    need: np.ndarray  # the validation key it needs (-1: no validation stage)

    def __len__(self) -> int:
        return len(self.row)

    def subset(self, idx: np.ndarray) -> TrainColumns:
        return TrainColumns(*(getattr(self, f.name)[idx] for f in fields(self)))

    @property
    def instance(self) -> np.ndarray:
        """Each candidate's instance: its offer row and price kind (a lease continues on it)."""
        return instances(self.row, self.kind)


def train_columns(row: np.ndarray, nodes: np.ndarray, kind: np.ndarray, fit: np.ndarray,
                  work_hours: tuple[np.ndarray, np.ndarray, np.ndarray], tokens_per_second: np.ndarray | None,
                  tokens: float | None, import_h: np.ndarray, export_h: np.ndarray,
                  spot_factor: np.ndarray | None) -> TrainColumns:
    """Training candidates from their rows, layouts and hours of work (at the typical, fast and
    slow speed; for a fixed rental, its hours thrice and `tokens_per_second` at the typical
    speed), with `stage_hours.training_hours` per candidate; `spot_factor` per table row."""
    factor = 1.0 if spot_factor is None else np.where(kind == 1, spot_factor[row], 1.0)
    imports, exports = import_h[row], export_h[row]
    run, fast, slow = work_hours
    if tokens is None:
        assert tokens_per_second is not None
        done = tokens_per_second * run * 3600 if spot_factor is None else tokens_per_second * run * 3600 / factor
        factor = 1.0  # a fixed rental lasts its hours; spot's lost work is less work done in them
    else:
        done = np.full(len(row), tokens)
    hours = training_hours(imports, run, factor, exports)
    wall = training_hours(imports, slow, factor, exports)
    low = training_hours(imports, fast, factor, exports)
    none = np.full(len(row), -1, dtype=np.int64)
    return TrainColumns(row, nodes, kind, fit, hours, wall, low, done, none, none)


@dataclass(frozen=True)
class ValidateColumns:
    """Validation candidates, one per (offer row, signature, price kind). Built piece by piece
    (shape, signature, kind), each piece's rows contiguous; only the row and piece are held per
    candidate, the other columns are read through the piece or the row on first use (the
    prune reads only four of them)."""

    row: np.ndarray  # offer table row
    piece: np.ndarray
    pieces: np.ndarray  # per piece: kind, signature, fit, GPU model key, architecture key
    starts: np.ndarray | None  # as built: where each piece's rows begin, and the end; None in a subset
    hours_per_row: np.ndarray  # per table row: the validation's rental (`stage_hours.validation_hours`)
    out_per_row: np.ndarray  # per table row: the copy-out before destroying it
    destroy_per_row: np.ndarray  # per table row: both (the wall clock of a validation destroyed after it)

    def __len__(self) -> int:
        return len(self.row)

    def subset(self, idx: np.ndarray) -> ValidateColumns:
        return ValidateColumns(self.row[idx], self.piece[idx], self.pieces, None, self.hours_per_row, self.out_per_row,
                               self.destroy_per_row)

    @cached_property
    def kind(self) -> np.ndarray:
        return self.pieces[self.piece, 0]

    @cached_property
    def sig(self) -> np.ndarray:
        return self.pieces[self.piece, 1]

    @cached_property
    def fit(self) -> np.ndarray:
        return self.pieces[self.piece, 2]

    @cached_property
    def keys(self) -> np.ndarray:
        """The two validation keys each satisfies (its GPU model's, its architecture's)."""
        return self.pieces[self.piece, 3:5]

    @cached_property
    def hours(self) -> np.ndarray:
        return self.hours_per_row[self.row]

    @property
    def wall(self) -> np.ndarray:
        return self.hours

    @cached_property
    def out(self) -> np.ndarray:
        return self.out_per_row[self.row]

    @cached_property
    def destroy_wall(self) -> np.ndarray:
        """The wall clock when the instance is destroyed after it: the copy-out too."""
        return self.destroy_per_row[self.row]

    @property
    def instance(self) -> np.ndarray:
        return instances(self.row, self.kind)


def validate_columns(row: np.ndarray, counts: np.ndarray, pieces: np.ndarray, hours: np.ndarray,
                     out_h: np.ndarray) -> ValidateColumns:
    """Validation candidates from their pieces (rows of kind, signature, fit, model key, arch key),
    each piece's rows contiguous in `row` (`counts`: each piece's size); `hours`
    (`stage_hours.validation_hours`) and `out_h` per table row."""
    piece = np.repeat(np.arange(len(pieces), dtype=np.int32), counts)
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return ValidateColumns(row, piece, pieces, starts, hours, out_h, hours + out_h)


def instances(row: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """Instance numbers: an offer row and a price kind."""
    return row * 2 + kind


def validations_per_key(va: ValidateColumns) -> dict[int, np.ndarray]:
    """solver.rows_per_key over the validation candidates; as built, from their pieces' ranges
    (no sort of every candidate's two keys)."""
    if va.starts is None:
        return rows_per_key(va.keys, np.ones(len(va), dtype=bool))
    starts = va.starts
    by_key: dict[int, list[int]] = {}
    for p, (model_key, arch_key) in enumerate(va.pieces[:, 3:5].tolist()):
        if starts[p + 1] > starts[p]:
            for key in (model_key, arch_key):
                by_key.setdefault(key, []).append(p)
    return {key: np.concatenate([np.arange(starts[p], starts[p + 1]) for p in by_key[key]]) for key in sorted(by_key)}


# --------------------------------------------------------------------------------------------
# The prune


@dataclass(frozen=True)
class Sizes:
    """What each stage stores and moves, in GB (per node where it is per node)."""

    disk: float  # a training node's disk
    validate_disk: float
    imported: float  # into every fresh instance
    exported: float  # out of the training run
    destroyed: float  # out of a validation destroyed after it


@dataclass(frozen=True)
class Limits:
    """What a plan must meet: hours and money in the quote currency (None: no limit), how many plans."""

    deadline: float | None
    budget: float | None
    top_k: int


class FirstPass:
    """The first pass of one quote over its candidates' columns (`keep` is the entry point)."""

    def __init__(self, prices: dict[int, PriceColumns], sizes: Sizes, idle_hours: float, limits: Limits,
                 per_token: bool):
        """`prices` per price kind; `per_token`: plans are ranked by cost per token (a fixed rental)."""
        self.prices, self.sizes, self.idle_hours, self.limits = prices, sizes, idle_hours, limits
        self.per_token = per_token

    def keep(self, tr: TrainColumns, va: ValidateColumns | None) -> tuple[np.ndarray, np.ndarray]:
        """Masks of the training and validation candidates kept; when none meets the limits, the
        few the diagnosis of that reads instead (`for_diagnosis`)."""
        keep_t, keep_v = self.kept(tr, va, self.limits)
        if not keep_t.any():
            keep_t, keep_v = self.for_diagnosis(tr, va)
        return keep_t, keep_v

    def kept(self, tr: TrainColumns, va: ValidateColumns | None, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
        """Masks of the candidates the prune keeps under `limits`, a large instance narrowed
        from its group heads first."""
        nt, nv = len(tr), 0 if va is None else len(va)
        t_idx, v_idx = np.arange(nt), np.arange(nv)
        if nt + nv > HEADS_FROM:
            t_idx, v_idx = self.narrowed(tr, va, limits)
        kept = self.prune(tr.subset(t_idx), None if va is None else va.subset(v_idx), limits)
        keep_t, keep_v = np.zeros(nt, dtype=bool), np.zeros(nv, dtype=bool)
        keep_t[t_idx[kept.train]] = True
        keep_v[v_idx[kept.validate]] = True
        return keep_t, keep_v

    def for_diagnosis(self, tr: TrainColumns, va: ValidateColumns | None) -> tuple[np.ndarray, np.ndarray]:
        """The candidates `solver.diagnose` reads when no plan meets the limits: the fastest
        plan's (per validation key its quickest validation and training runs, to 1e-5 h), and
        the cheapest plan without the budget and without either (top 1)."""
        nt, nv = len(tr), 0 if va is None else len(va)
        keep_t, keep_v = np.zeros(nt, dtype=bool), np.zeros(nv, dtype=bool)
        if va is None:
            keep_t[_quickest(np.arange(nt), tr.wall)] = True
        else:
            for key, rows in validations_per_key(va).items():
                keep_v[_quickest(rows, va.wall[rows])] = True
                runs = np.flatnonzero(tr.need == key)
                if len(runs):
                    keep_t[_quickest(runs, tr.wall[runs])] = True
        relaxed = [replace(self.limits, budget=None, top_k=1)] if self.limits.budget is not None else []
        if self.limits.deadline is not None:
            relaxed.append(Limits(deadline=None, budget=None, top_k=1))
        for limits in relaxed:
            cheapest_t, cheapest_v = self.kept(tr, va, limits)
            keep_t |= cheapest_t
            keep_v |= cheapest_v
        return keep_t, keep_v

    def train_bounds(self, tr: TrainColumns) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on each training candidate's bill on its own instance (lo, hi)."""
        s = self.sizes
        return self._bounds_per_kind(tr.kind, lambda p, sel: alone_bounds_arrays(
            p, tr.row[sel], "train", tr.nodes[sel], tr.hours[sel], s.disk, s.imported, s.exported))

    def validate_bounds(self, va: ValidateColumns) -> tuple[np.ndarray, np.ndarray]:
        """Bounds on each validation's bill on its own instance, destroyed after it (lo, hi)."""
        s = self.sizes
        return self._bounds_per_kind(va.kind, lambda p, sel: alone_bounds_arrays(
            p, va.row[sel], "validate", np.ones(int(sel.sum()), dtype=np.int64), va.hours[sel], s.validate_disk,
            s.imported, s.destroyed, va.out[sel]))

    def _bounds_per_kind(self, kinds: np.ndarray, bounds_of: Callable[[PriceColumns, np.ndarray], tuple]
                         ) -> tuple[np.ndarray, np.ndarray]:
        """(lo, hi) of each candidate, each priced by its own kind: `bounds_of(kind's columns, mask)`
        gives billing's `alone_bounds_arrays` for the candidates of `mask`."""
        lo, hi = np.empty(len(kinds)), np.empty(len(kinds))
        for k, p in self.prices.items():
            sel = kinds == k
            lo[sel], hi[sel], _ = bounds_of(p, sel)
        return lo, hi

    def leases(self, tr: TrainColumns, va: ValidateColumns | None, deadline: float | None
               ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """(validation, training) pairs on the same instance that run the same job and may be one
        lease within `deadline`, and the bounds of their lease: ((v_idx, t_idx), (lo, hi))."""
        empty = (np.zeros(0, np.int64), np.zeros(0, np.int64)), (np.zeros(0), np.zeros(0))
        if va is None or not len(va) or not len(tr):
            return empty
        s = self.sizes
        t_key = tr.instance
        order = np.argsort(t_key, kind="stable")
        sorted_keys = t_key[order]
        v_key = va.instance
        start = np.searchsorted(sorted_keys, v_key, side="left")
        stop = np.searchsorted(sorted_keys, v_key, side="right")
        counts = stop - start
        v_idx = np.repeat(np.arange(len(v_key)), counts)
        offsets = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
        t_idx = order[np.repeat(start, counts) + offsets]
        same_job = (va.keys[v_idx] == tr.need[t_idx][:, None]).any(axis=1)
        v_idx, t_idx = v_idx[same_job], t_idx[same_job]
        G = self.idle_hours
        lo, hi = np.full(len(v_idx), np.inf), np.full(len(v_idx), np.inf)
        allowed = np.zeros(len(v_idx), dtype=bool)
        for k, p in self.prices.items():
            sel = tr.kind[t_idx] == k
            if not sel.any():
                continue
            a, l, h, _ = lease_bounds_arrays(p, tr.row[t_idx[sel]], va.hours[v_idx[sel]], tr.hours[t_idx[sel]],
                                             tr.nodes[t_idx[sel]], G, s.validate_disk, s.disk, s.imported, s.exported)
            allowed[sel], lo[sel], hi[sel] = a, l, h
        if deadline is not None:
            allowed &= va.wall[v_idx] + G + tr.wall[t_idx] <= deadline + DEADLINE_EPS
        return (v_idx[allowed], t_idx[allowed]), (lo[allowed], hi[allowed])

    def prune(self, tr: TrainColumns, va: ValidateColumns | None, limits: Limits) -> Kept:
        """The solver's pruning routine over these candidates under `limits`: the bounds of each
        alone, of the leases (within the request's deadline), and of a pair's idle choice."""
        deadline = limits.deadline
        bounds_t = self.train_bounds(tr)
        bounds_v = self.validate_bounds(va) if va is not None and len(va) else None
        pairs, lease = self.leases(tr, va, self.limits.deadline)
        if va is not None and bounds_v is not None and len(pairs[0]):
            # a pair's plan is billing's idle choice between keeping and destroying: cover both
            destroy_ok = va.destroy_wall[pairs[0]] + self.idle_hours + tr.wall[pairs[1]] <= (
                np.inf if deadline is None else deadline + DEADLINE_EPS)
            destroy_lo = bounds_t[0][pairs[1]] + bounds_v[0][pairs[0]]
            destroy_hi = bounds_t[1][pairs[1]] + bounds_v[1][pairs[0]]
            lease = (np.where(destroy_ok, np.minimum(lease[0], destroy_lo), lease[0]),
                     np.where(destroy_ok, np.maximum(lease[1], destroy_hi), lease[1]))
        return prune_arrays(
            TrainArrays(bounds_t[0], bounds_t[1], tr.wall, tr.group, tr.need, tr.tokens if self.per_token else None,
                        tr.instance),
            None if va is None or bounds_v is None else ValidateArrays(
                bounds_v[0], bounds_v[1], va.wall, va.destroy_wall, va.keys, va.instance),
            LeaseArrays(pairs[0], pairs[1], lease[0], lease[1]),
            idle_hours=self.idle_hours, top_k=limits.top_k,
            deadline=None if deadline is None else deadline + DEADLINE_EPS,
            budget=None if limits.budget is None else limits.budget + BUDGET_EPS)

    def narrowed(self, tr: TrainColumns, va: ValidateColumns | None, limits: Limits) -> tuple[np.ndarray, np.ndarray]:
        """Indices of the candidates a top-K plan can use, found without bounding every one.

        Every candidate costs at least its compute at its offer's cheapest rate (its floor). The
        HEADS cheapest by floor of each (provider, GPU) group and of each validation key, with the
        validations on their instances, are pruned first: that bounds each group's best plan, the
        K-th best group's, and per key the second-lowest validation bound among those no slower
        than a given wall clock. A training candidate whose floor exceeds its group's bound or
        the K-th's is in no top-K plan; nor is a validation whose floor (or, where that does not
        tell, billing's `alone_floor`) exceeds, for each of its keys, that second-lowest (one of
        two surely cheaper, no slower validations on other instances always serves instead). The
        others join the heads, with the validations on the kept training candidates' instances.
        """
        prices = self.prices
        lb_t = _floor_cost(prices, tr.row, tr.kind, tr.hours, tr.nodes)
        if self.per_token:  # ranked by cost per token (prune_arrays divides likewise)
            lb_t = lb_t / tr.tokens
        head_t = _heads(tr.group, lb_t)
        t_inst = tr.instance
        if va is None:
            first = self.prune(tr.subset(np.flatnonzero(head_t)), None, limits)
            return np.flatnonzero(head_t | _under_group_bounds(tr, lb_t, first)), np.zeros(0, dtype=np.int64)
        lb_v = _floor_cost(prices, va.row, va.kind, va.destroy_wall, None)
        per_key = None  # many keys (a per-provider plan): every key's heads at once, no list per key
        if _many_keys(va):
            head_v = _heads_per_key(va.keys, lb_v)
        else:
            per_key = validations_per_key(va)  # each key's validations, from their pieces (no sort)
            head_v = np.zeros(len(va), dtype=bool)
            for members in per_key.values():
                head_v[_cheapest(members, lb_v)] = True
        v_inst = va.instance
        head_v |= _among(v_inst, t_inst[head_t])
        first = self.prune(tr.subset(np.flatnonzero(head_t)), va.subset(np.flatnonzero(head_v)), limits)
        want_t = head_t | _under_group_bounds(tr, lb_t, first)
        limit_v = _validation_limits(va, per_key, first)
        cheap = lb_v <= limit_v
        # bounded again, closer, where the floor let one through: on its own a 4 h validation pays
        # its metered price or a whole block, not a month's rate per hour
        unsure = np.flatnonzero(cheap & ~head_v)
        if len(unsure):
            hours = va.destroy_wall[unsure]
            alone = _per_kind(prices, va.row[unsure], va.kind[unsure], lambda p, rows, at: p.alone_floor(rows, hours[at]))
            cheap[unsure] = _padded(alone, next(iter(prices.values())).slack) <= limit_v[unsure]
        want_v = head_v | cheap | _among(v_inst, t_inst[want_t])
        return np.flatnonzero(want_t), np.flatnonzero(want_v)


def _quickest(rows: np.ndarray, walls: np.ndarray) -> np.ndarray:
    """The rows within 1e-5 h of the quickest (the exact walls are rounded up to 1e-6 h), a few."""
    return rows[walls <= walls.min() + 1e-5][:4]


def _under_group_bounds(tr: TrainColumns, lb_t: np.ndarray, first: Kept) -> np.ndarray:
    """Training candidates whose floor is within their group's bound and the K-th group's."""
    group_ub = np.full(int(tr.group.max()) + 1, np.inf)
    group_ub[:len(first.group_ub)] = first.group_ub
    return lb_t <= np.minimum(group_ub[tr.group], first.threshold)


def _validation_limits(va: ValidateColumns, per_key: dict[int, np.ndarray] | None, first: Kept) -> np.ndarray:
    """Per validation, the most any of its keys allows: the second-lowest upper bound among the
    heads no slower than it (no partner among the heads: no limit). Few keys (`per_key`, each
    key's validations): a search per key in its partners; many (None; a per-provider plan):
    every validation's keys at once."""
    partners = first.partners
    if per_key is None:
        second = partners.second_no_later(va.keys, va.destroy_wall)  # its GPU model's key, its architecture's
        second[np.isnan(second)] = np.inf  # a key without partners among the heads
        second[va.keys < 0] = -np.inf
        return np.maximum(second[:, 0], second[:, 1])
    limit_v = np.full(len(va), -np.inf)
    for key, mine in per_key.items():
        of_key = partners.of_key(key)
        if of_key is None:
            limit_v[mine] = np.inf
            continue
        walls, second = of_key
        at = np.searchsorted(walls, va.destroy_wall[mine], side="right")
        limit_v[mine] = np.maximum(limit_v[mine], np.where(at > 0, second[np.maximum(at - 1, 0)], np.inf))
    return limit_v


# Up to this many validation keys, the heads of each key are picked and `_validation_limits`
# searches key by key (cheaper than the all-at-once forms, whose cost is per validation: a sort
# of every validation by its floor); measured on the 100k-offer store.
FEW_KEYS = 256


def _many_keys(va: ValidateColumns) -> bool:
    """More than FEW_KEYS validation keys, counted on the pieces (those with candidates, when
    known), not on every candidate."""
    named = va.pieces[:, 3:5] if va.starts is None else va.pieces[np.diff(va.starts) > 0, 3:5]
    return len(np.unique(named[named >= 0])) > FEW_KEYS


def _heads_per_key(keys: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """`_cheapest` of every validation key's members at once, as a mask: a row is a member of
    each key in its row of `keys` (-1: none). One stable sort by cost, then a stable sort by key
    keeps each key's members cheapest first; a member is among its key's first HEADS when the
    HEADS-th before it is of another key (which of members tied at the HEADS-th cost does not
    matter, as in `_heads`)."""
    by_cost = np.argsort(cost, kind="stable")
    flat = keys[by_cost].ravel()
    order = stable_order(flat)
    flat = flat[order]
    rows = by_cost[order // keys.shape[1]]
    head = flat >= 0
    head[HEADS:] &= flat[HEADS:] != flat[:-HEADS]
    mask = np.zeros(len(keys), dtype=bool)
    mask[rows[head]] = True
    return mask

CostOf = Callable[[PriceColumns, np.ndarray, Any], np.ndarray]  # (a kind's prices, rows, positions) -> cost


def _per_kind(prices: dict[int, PriceColumns], rows: np.ndarray, kinds: np.ndarray, cost_of: CostOf) -> np.ndarray:
    """`cost_of(price kind's columns, rows, positions)` of candidates on `rows`, each priced by its own kind."""
    if len(prices) == 1:  # one price kind (no --spot): every candidate is of it
        [p] = prices.values()
        return cost_of(p, rows, slice(None))
    cost = np.zeros(len(rows))
    for k, p in prices.items():
        sel = kinds == k
        cost[sel] = cost_of(p, rows[sel], sel)
    return cost


def _floor_cost(prices: dict[int, PriceColumns], rows: np.ndarray, kinds: np.ndarray, running: np.ndarray,
                nodes: np.ndarray | None) -> np.ndarray:
    """Each candidate's compute at its offer's cheapest rate (rate x hours x nodes; `nodes` None:
    one), less billing's pad: a lower bound on its bill."""
    def rate_x_hours(p: PriceColumns, rows: np.ndarray, at: np.ndarray | slice) -> np.ndarray:
        cost = p.floor_per_hour[rows] * running[at]
        if nodes is not None:
            cost *= nodes[at]
        return cost

    return _padded(_per_kind(prices, rows, kinds, rate_x_hours), next(iter(prices.values())).slack)


def _padded(cost: np.ndarray, slack: float) -> np.ndarray:
    """`cost` less billing's pad (as `PriceColumns.widen` pads every rough bound), in place; an
    offer without a price of a kind (NaN) costs infinity."""
    pad = np.maximum(1.0, cost)
    pad *= 1e-9
    pad += slack
    np.nan_to_num(cost, copy=False, nan=np.inf)
    cost -= pad
    return cost


def _heads(group: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The HEADS cheapest members of each group (group -1: none) by `cost`, as a mask (which of
    members tied at the HEADS-th cost does not matter: heads only bound the others)."""
    mask = np.zeros(len(group), dtype=bool)
    if not len(group):
        return mask
    order = stable_order(group + 1)  # by group (-1 first), rows ascending within
    sorted_group = group[order]
    start = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
    end = np.r_[start[1:], len(order)]
    named = sorted_group[start] >= 0
    start, end = start[named], end[named]
    small = end - start <= HEADS
    at = start[small, None] + np.arange(HEADS)[None, :]  # groups of HEADS or fewer: every member
    mask[order[at[at < end[small, None]]]] = True
    for s, e in zip(start[~small].tolist(), end[~small].tolist()):
        mask[_cheapest(order[s:e], cost)] = True
    return mask


def _cheapest(members: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """The HEADS members of lowest `cost` (all of them when there are no more)."""
    if len(members) <= HEADS:
        return members
    return members[np.argpartition(cost[members], HEADS - 1)[:HEADS]]


def _among(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """np.isin for instance numbers (small non-negative integers), by a table of marks.

    >>> _among(np.array([3, 0, 5, 3]), np.array([3, 9])).tolist()
    [True, False, False, True]
    """
    if not len(values):
        return np.zeros(0, dtype=bool)
    marks = np.zeros(max(int(values.max()), int(wanted.max()) if len(wanted) else 0) + 1, dtype=bool)
    marks[wanted] = True
    return marks[values]


@dataclass(frozen=True)
class Rough:
    """The first pass's view of every candidate, with the ids of the exact candidates they are
    (kept by `plan_instance(first_pass=False)`, for the oracle tests)."""

    first_pass: FirstPass
    train: TrainColumns
    validate: ValidateColumns | None
    train_ids: list[str]
    validate_ids: list[str]
