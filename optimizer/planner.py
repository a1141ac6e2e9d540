"""The quote, in order: request (job.py) -> offers -> layouts -> first pass -> exact pass -> solver -> answer.

`plan_instance` is pure: (request, offers, fx) -> the solver's instance and the rejections. Per
offer it finds the layouts per node count (feasibility) and the stages' hours (timing,
stage_hours), keeps what the first pass keeps, and makes one billing `Use` per surviving stage
option; it prices nothing (billing.py) and chooses nothing (solver.py). `build_quote` solves the
instance and hands the bills to answer.py.

Stages (the seeds' procedure): VALIDATE (run the same job -- mode, precision, attention kernel,
parallel family -- at micro-batch 1, on the cheapest instance of the training GPU model, or one
of its architecture, that holds it), IDLE (the gap before training: keep the instance, or
destroy it after copying out), TRAIN, EXPORT (copy the final weights and kept checkpoints out,
then destroy).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import fields, replace
from decimal import Decimal
from operator import attrgetter
from typing import NamedTuple

import numpy as np

from rentopt.optimizer.answer import CLOSEST_MISSES, explain_no_plan, no_candidates, quote_of
from rentopt.optimizer.billing import Terms, Use, in_quote_currency, offer_terms
from rentopt.optimizer.candidates import Candidate, Planned, Rejections, Signature
from rentopt.optimizer.catalog import OfferSet
from rentopt.optimizer.currency import FxTable, check_quote_currency
from rentopt.optimizer.errors import InputError, NoFeasiblePlan
from rentopt.optimizer.feasibility import Fit, NodeShape, NoFit, Pins, find_layout, fused_attention
from rentopt.optimizer.first_pass import (
    FirstPass,
    Limits,
    PriceColumns,
    Rough,
    Sizes,
    TrainColumns,
    ValidateColumns,
    train_columns,
    validate_columns,
)
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.job import (
    MAX_NODES,
    MeasuredPeak,
    QuoteRequest,
    Speed,
    measured_peak,
    prepare,
    reference_shape,
    sized_validation,
    speed_of,
    with_sized_validation,
    work_plan,
)
from rentopt.optimizer.models import GpuSpec, Layout, Offer, Quote, TrainingSetup
from rentopt.optimizer.offer_table import OfferTable, take_strings
from rentopt.optimizer.solver import Candidate as SolverCandidate
from rentopt.optimizer.solver import PlanInstance, solve
from rentopt.optimizer.stage_hours import (
    rounded_hours,
    spot_factor,
    training_hours,
    transfer_hours,
    transfer_hours_per_row,
    validation_hours,
)
from rentopt.optimizer.ties import Ties, dense_codes, float_codes, renumbered_codes, stable_order, tie_classes

# Seed 004: "多机训练扩展效率低于70%说明网络有瓶颈" -- scaling efficiency under 70 % means the
# network is the bottleneck; every such plan says so.
LOW_SCALING = 0.70


# --------------------------------------------------------------------------------------------
# The plan instance


class ShapeKey(NamedTuple):
    """A node shape as the first pass groups offers by it (`_Planner._shapes`)."""

    gpu: str
    gpus: int
    interconnect: str
    fabric: str | None
    fabric_gbps: float | None
    memory_gb: float | None  # a memory above the catalog's (a modded card), else None
    ram_step: float | None  # host RAM rounded down to a step (`_ram_keys`), None: unstated


class _Planner:
    """One request's instance: a first pass over the offer table's columns (layouts per node shape
    and count, hours and bounds as arrays, first_pass.py's prune), then the exact pass (full
    offers, exact terms, billing Uses) for the candidates it keeps. `per_provider`: every stage of
    a plan at one provider, and plans differ by provider (not by provider and GPU)."""

    def __init__(self, req: QuoteRequest, table: OfferTable, fx: FxTable, first_pass: bool = True,
                 per_provider: bool = False):
        self.req, self.table, self.fx, self.first_pass = req, table, fx, first_pass
        self.per_provider = per_provider
        self.provider_code = table.category("provider")[0].astype(np.int64)
        self.prep = prepare(req)
        self.work = work_plan(req, self.prep)
        self._fits: dict[tuple, dict[float | str | None, Fit | NoFit]] = {}  # per shape but its RAM, per host RAM
        self._speeds: dict[tuple[GpuSpec, tuple], Speed] = {}
        self._splits: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}  # see `_shape_split`
        self.rejected = Rejections()
        self.closest: tuple[float, str] | None = None
        self.misses: dict[str, tuple[float, str]] = {}  # per GPU shape: its nearest memory miss

    # -- memoised layouts and speeds -----------------------------------------------------------

    def layout(self, setup: TrainingSetup, shape: NodeShape, pins: Pins) -> Fit | NoFit:
        """find_layout for this request, memoised by its arguments. A fit no host RAM changes
        (`host_ram_matters` False: no rung tried offloads) serves the shape at every host RAM."""
        by_ram = self._fits.setdefault((setup, pins, _shape_but_ram(shape)), {})
        found = by_ram.get(_ANY_RAM)
        if found is None:
            found = by_ram.get(shape.host_ram_gb)
        if found is None:
            found = find_layout(self.req.model, setup, shape, pins=pins, activation_scale=self.prep.activation_scale)
            by_ram[shape.host_ram_gb] = found
            if not found.host_ram_matters:
                by_ram[_ANY_RAM] = found
        return found

    def speed(self, fit: Fit, gpu: GpuSpec) -> Speed:
        """The speed model of a training fit, memoised by the GPU and every field of the layout the
        speed model reads (`_speed_fields`)."""
        key = (gpu, _speed_fields(fit.layout))
        found = self._speeds.get(key)
        if found is None:
            found = speed_of(self.req.model, self.req.setup, fit.layout, gpu).scaled(self.work.calibration)
            self._speeds[key] = found
        return found

    # -- the first pass --------------------------------------------------------------------------

    def build(self) -> Planned:
        """Both passes over the table: the instance, its candidates and the rejections."""
        req, prep, t = self.req, self.prep, self.table
        kinds = (0, 1) if req.spot else (0,)
        usable = self._usable_rows(kinds)
        self.ties, shapes = self._groups(usable)
        import_h = transfer_hours_per_row(float(prep.import_gb), t, "import")
        tr = self._train_columns(shapes, kinds, import_h)
        va = None
        if req.validate_hours is not None:
            va, need = self._validate_columns(shapes, kinds, import_h, tr)
            tr = replace(tr, need=need)
        provider_code, gpu_code = self.provider_code, t.category("gpu")[0].astype(np.int64)
        if self.per_provider:
            tr = replace(tr, group=dense_codes(provider_code[tr.row]))
        else:
            tr = replace(tr, group=dense_codes(provider_code[tr.row] * (int(gpu_code.max(initial=0)) + 1)
                                               + gpu_code[tr.row]))
        fp = self._first_pass_of(kinds)
        keep_t, keep_v = np.ones(len(tr), dtype=bool), np.ones(0 if va is None else len(va), dtype=bool)
        if self.first_pass and len(tr):
            keep_t, keep_v = fp.keep(tr, va)
        first = {"offers": t.n, "candidates": len(keep_t) + len(keep_v),
                 "after rough pruning": int(keep_t.sum() + keep_v.sum())}
        if len(self.ties.klass):
            self.rejected.spread(self.ties)
        planned = self._exact(tr, va, keep_t, keep_v, first)
        if not self.first_pass:  # every candidate is exact: the oracle tests compare them with these
            planned.rough = Rough(fp, tr, va, [train_id(t.provider[r], t.offer_id[r], n, k) for r, n, k in
                                               zip(tr.row.tolist(), tr.nodes.tolist(), tr.kind.tolist())],
                                  [] if va is None else [validate_id(t.provider[r], t.offer_id[r], k, g) for r, k, g in
                                                         zip(va.row.tolist(), va.kind.tolist(), va.sig.tolist())])
        return planned

    def _groups(self, usable: np.ndarray) -> tuple[Ties, dict[ShapeKey, tuple[GpuSpec, NodeShape, np.ndarray]]]:
        """The tie classes of the usable rows (none without the first pass) and the node shapes of
        the rows planned: one offer per class, the others share its answer.

        Both depend on the table and the usable rows only, so they are kept on the table
        (`OfferTable._derived`, for the last usable rows asked): a report plans one table once
        per job, and its jobs' usable rows are the same."""
        derived = self.table._derived
        found = derived.get("planning_groups") if self.first_pass else None
        if found is not None and np.array_equal(found[0], usable):
            self._splits = found[3]
            return found[1], found[2]
        ties = tie_classes(self.table, usable) if self.first_pass else Ties.none()
        shapes = self._shapes(usable & ties.first if len(ties.klass) else usable)
        self._splits = {}  # the shapes' rows split by provider and kind (`_shape_split`), kept with them
        if self.first_pass:
            derived["planning_groups"] = (usable.copy(), ties, shapes, self._splits)
        return ties, shapes

    def _first_pass_of(self, kinds: tuple[int, ...]) -> FirstPass:
        """The first pass of this request: its prices per kind, sizes and limits in floats."""
        req, prep, work = self.req, self.prep, self.work
        factor = self._fx_factors()
        prices = {k: PriceColumns(self.table, k, factor, req.currency) for k in kinds}
        sizes = Sizes(float(prep.disk_gb), float(prep.validate_disk_gb), float(prep.import_gb), float(prep.export_gb),
                      float(prep.destroy_gb))
        limits = Limits(None if work.deadline_hours is None else float(work.deadline_hours),
                        None if req.budget is None else float(req.budget), req.top)
        return FirstPass(prices, sizes, float(req.idle_days * 24), limits, per_token=work.tokens is None)

    def _usable_rows(self, kinds: tuple[int, ...]) -> np.ndarray:
        """Rows that can be planned at all; the others are rejected with their reason."""
        req, t = self.req, self.table
        has = np.zeros(t.n, dtype=bool)
        for k in kinds:
            has |= t.has_kind(k)
        gpu_code, gpus = t.category("gpu")
        known = np.array([g is not None for g in gpus], dtype=bool)[gpu_code] if t.n else np.zeros(0, bool)
        unknown = np.flatnonzero(~known)
        self.rejected.add(unknown, "gpu", lambda i: f"GPU {t.gpu_raw[unknown[i]]!r} is {t.gpu_status[unknown[i]]} in the "
                                                    "catalog: its memory and speed cannot be checked (kept, not guessed)")
        ok = known.copy()
        f = req.gpu_filter
        if f.include or f.exclude or f.min_memory_gb is not None or f.gpus_per_node is not None:
            combo = gpu_code * 1024 + np.minimum(t.gpus, 1023)
            for c in np.unique(combo[known]):
                rows = np.flatnonzero(known & (combo == c))
                for memory in np.unique(t.gpu_memory_gb[rows]):
                    at = rows[t.gpu_memory_gb[rows] == memory]
                    why = f.reason_for(gpus[int(c) // 1024], int(t.gpus[at[0]]), float(memory))
                    if why is not None:
                        ok[at] = False
                        self.rejected.add(at, "gpu", why)
        if not req.allow_suspect:
            # a price far below every other seller of the GPU is held out (optimizer/suspect.py)
            from rentopt.optimizer.suspect import suspect_rows

            found = {r: s for r, s in suspect_rows(t).items() if ok[r] and s.kind in kinds}
            if found:
                rows = np.array(sorted(found), dtype=np.int64)
                ok[rows] = False
                self.rejected.add(rows, "suspect", lambda i: found[int(rows[i])].reason(t.gpu[int(rows[i])] or "this GPU"))
        unpriced = ok & ~has
        self.rejected.add(np.flatnonzero(unpriced & t.spot), "price",
                          "spot-only offer: add --spot to consider interruptible prices")
        self.rejected.add(np.flatnonzero(unpriced & ~t.spot), "price", "no price option of the requested kind")
        return ok & has

    def _shapes(self, usable: np.ndarray) -> dict[ShapeKey, tuple[GpuSpec, NodeShape, np.ndarray]]:
        """Distinct node shapes among the usable rows: shape key -> (GPU, shape of one node, rows).

        A shape is what feasibility and the speed model depend on: the GPU, GPUs per node, how
        they talk, the fabric, a memory above the catalog's (a modded card), the host RAM step.
        """
        t = self.table
        rows = np.flatnonzero(usable)
        if not len(rows):
            return {}
        gpu_code, gpu_ids = t.category("gpu")
        catalog_memory = np.array([get_gpu(g).memory_gb if g else 0.0 for g in gpu_ids])[gpu_code]
        memory = t.gpu_memory_gb
        modded = np.full(t.n, -1.0)
        over = np.flatnonzero(memory > catalog_memory * 1.1)  # few rows: rounded only there
        modded[over] = np.round(memory[over], 1)
        ram_step = _ram_keys(t.host_ram_gb)
        parts = [gpu_code, t.gpus, t.category("interconnect")[0], t.category("fabric")[0],
                 float_codes(np.nan_to_num(t.fabric_gbps, nan=-1.0)), float_codes(modded),
                 float_codes(np.nan_to_num(ram_step, nan=-1.0))]
        key = np.zeros(t.n, dtype=np.int64)
        for part in parts:  # one integer per shape (mixed radix over the coded columns)
            key = key * (int(part.max()) + 1 if len(part) else 1) + part
            if len(key) and key.max() >= 1 << 16:
                # renumbered in the same order, so the key stays as small as the shapes seen so far
                # are few (a bincount never runs over millions of unused key values)
                key = renumbered_codes(key)
        inverse = renumbered_codes(key[rows])
        order = stable_order(inverse)  # by shape, rows ascending within each
        bounds = np.cumsum(np.bincount(inverse))[:-1]
        out = {}
        for members in np.split(rows[order], bounds):
            r = int(members[0])
            gpu_id = t.gpu[r]
            assert gpu_id is not None  # rows of an unknown GPU were rejected
            spec = get_gpu(gpu_id)
            # the key's values are the coded columns' own (rounded memory as coded), so distinct
            # codes are distinct keys
            shape_key = ShapeKey(spec.id, int(t.gpus[r]), t.interconnect[r], t.fabric[r], _nan_none(t.fabric_gbps[r]),
                                 None if modded[r] < 0 else float(modded[r]), _nan_none(ram_step[r]))
            shape = NodeShape(gpu=spec, gpus_per_node=shape_key[1], nodes=1, interconnect=shape_key[2],  # type: ignore[arg-type]
                              fabric=shape_key[3], fabric_gbps=shape_key[4], memory_gb=shape_key[5] or spec.memory_gb,
                              host_ram_gb=shape_key[6])
            if shape_key in out:  # codes are distinct values (OfferTable.build): one shape, one group
                raise AssertionError(f"two row groups with the node shape {shape_key}")
            out[shape_key] = (spec, shape, members)
        return out

    def _fx_factors(self) -> np.ndarray:
        """Per row, one unit of its currency in the quote currency at the rate of its price's day."""
        t, ccy = self.table, self.req.currency
        if not t.n:
            return np.zeros(0)
        (cur, currencies), (day, days) = t.category("currency"), t.category("fetched_at")
        # one code per row, made in place (in int64 only where int32 could not hold it)
        pair = cur.astype(np.int32 if len(currencies) * len(days) < 1 << 31 else np.int64)
        pair *= len(days)
        pair += day
        rates = np.zeros(int(pair.max()) + 1)
        for p in np.flatnonzero(np.bincount(pair)):  # the (currency, day) pairs present
            rates[p] = float(in_quote_currency(Decimal(1), currencies[int(p) // len(days)], days[int(p) % len(days)], self.fx,
                                               ccy))
        return rates[pair]

    def _train_columns(self, shapes: dict[ShapeKey, tuple[GpuSpec, NodeShape, np.ndarray]], kinds: tuple[int, ...],
                       import_h: np.ndarray) -> TrainColumns:
        """Per offer, each node count and price kind a layout fits: its hours, wall clock and
        tokens. Layouts are found per piece (shape, node count, kind), the columns computed for
        all pieces at once."""
        req, prep, work, t = self.req, self.prep, self.work, self.table
        self.fit_list: list[tuple[Fit, GpuSpec, Speed, ShapeKey]] = []
        spot_factors = None
        if req.spot:  # per provider, not per row
            codes, providers = t.category("provider")
            spot_factors = np.array([float(spot_factor(p, req.checkpoint_every_hours)[0]) for p in providers])[codes]
        has = {k: t.has_kind(k) for k in kinds}
        max_nodes = min(req.gpu_filter.max_nodes, MAX_NODES)
        rows_of: list[np.ndarray] = []
        pieces: list[tuple[int, int, int, float, float, float, float]] = []  # nodes, kind, fit, run/fast/slow h, tok/s
        for key, (gpu, shape, rows) in shapes.items():
            first_miss: NoFit | None = None
            any_fit = False
            for nodes in range(1, min(int(t.nodes_available[rows].max()), max_nodes) + 1):
                fit = self.layout(req.setup, replace(shape, nodes=nodes), req.pins)
                if isinstance(fit, NoFit):
                    first_miss = first_miss or fit
                    continue
                any_fit = True
                speed = self.speed(fit, gpu)
                fit_id = len(self.fit_list)
                self.fit_list.append((fit, gpu, speed, key))
                at = rows[t.nodes_available[rows] >= nodes]
                if work.tokens is not None:
                    hours = (work.tokens / speed.typical / 3600, work.tokens / speed.high / 3600,
                             work.tokens / speed.low / 3600)
                else:
                    assert work.rent_hours is not None
                    hours = (float(work.rent_hours),) * 3
                for kind in kinds:
                    mine = at[has[kind][at]]
                    if len(mine):
                        rows_of.append(mine)
                        pieces.append((nodes, kind, fit_id, *hours, speed.typical))
            if not any_fit and first_miss is not None:
                self.rejected.add(rows, first_miss.constraint, first_miss.reason)
                if first_miss.overshoot is not None and (self.closest is None or first_miss.overshoot < self.closest[0]):
                    r = int(rows[0])
                    self.closest = (first_miss.overshoot, f"{t.provider[r]}/{t.offer_id[r]} ({t.gpus[r]} x {t.gpu[r]}): "
                                                          f"{first_miss.reason}")
                if first_miss.overshoot is not None:
                    r = int(rows[0])
                    shape_name = f"{t.gpus[r]} x {t.gpu[r]}"
                    if shape_name not in self.misses or first_miss.overshoot < self.misses[shape_name][0]:
                        self.misses[shape_name] = (first_miss.overshoot, f"{t.provider[r]}/{t.offer_id[r]} "
                                                                         f"({shape_name}): {first_miss.reason}")
        table = np.array(pieces, dtype=np.float64).reshape(-1, 7)
        row = np.concatenate(rows_of).astype(np.int64) if rows_of else np.zeros(0, dtype=np.int64)
        piece = np.repeat(np.arange(len(pieces)), [len(r) for r in rows_of])
        # per candidate from per piece: a gather each, of the dtype it keeps (no full-size
        # temporaries of another dtype)
        node_col, kind_col, fit_col = (table[:, c].astype(np.int64)[piece] for c in (0, 1, 2))
        export_h = transfer_hours_per_row(float(prep.export_gb), t, "export")
        tr = train_columns(row, node_col, kind_col, fit_col, (table[:, 3][piece], table[:, 4][piece], table[:, 5][piece]),
                           table[:, 6][piece] if work.tokens is None else None, work.tokens, import_h, export_h,
                           spot_factors)
        too_long = tr.hours > t.max_hours[tr.row]  # NaN (no maximum) compares False
        if not too_long.any():
            return tr
        long_rows, long_hours, long_nodes = tr.row[too_long], tr.hours[too_long], tr.nodes[too_long]
        self.rejected.add(long_rows, "max_duration", lambda i: (
            f"needs {long_hours[i]:.1f} h of rental on {long_nodes[i]} node(s); the host allows at most "
            f"{t.max_hours[long_rows[i]]:.1f} h"))
        return tr.subset(np.flatnonzero(~too_long))

    def _validate_columns(self, shapes: dict[ShapeKey, tuple[GpuSpec, NodeShape, np.ndarray]], kinds: tuple[int, ...],
                          import_h: np.ndarray, tr: TrainColumns) -> tuple[ValidateColumns, np.ndarray]:
        """Per offer, the same job at micro-batch 1 on one node, for each signature that training
        runs on a GPU of the offer's architecture (a validation serves only those); and per
        training candidate in `tr`, the validation key it needs (-1: none present).

        Pieces are (shape, signature, provider, kind) in that order (provider: one group of all
        rows unless per provider). A shape's rows are split by provider and kind once; each
        signature that fits the shape repeats that split. Validation keys are numbered in the
        order the pieces first name them (`_ValidationKeys`)."""
        req, prep, t = self.req, self.prep, self.table
        assert req.validate_hours is not None
        by_arch: dict[str, set[Signature]] = {}
        for fit, gpu, _, _ in self.fit_list:
            by_arch.setdefault(gpu.architecture, set()).add(Signature.of(fit.layout))
        self.signatures = sorted({s for sigs in by_arch.values() for s in sigs}, key=repr)
        numbered = {sig: n for n, sig in enumerate(self.signatures)}
        setups = {sig: (prep.validate_setup.model_copy(update={
            "precision": sig.precision, "flash_attention": fused_attention(sig.attention)}), sig.pins(req.pins))
            for sig in self.signatures}
        keys = self.keys = _ValidationKeys(self._provider_count())
        out_h = transfer_hours_per_row(float(prep.destroy_gb), t, "export")
        hours = validation_hours(import_h, float(req.validate_hours))
        in_time = ~(hours + out_h > t.max_hours)  # once over the table, not gathered per shape
        has = [t.has_kind(k) for k in kinds]
        block_rows: list[np.ndarray] = []  # per (shape, signature): its rows, piece by piece
        block_counts: list[np.ndarray] = []  # its pieces' sizes, (provider, kind) by (provider, kind)
        block_groups: list[np.ndarray] = []  # its provider codes (0 when not per provider)
        blocks: list[tuple[int, int, int, int]] = []  # per (shape, signature): signature, fit, model and arch bases
        self.v_fits: list[Fit] = []
        for key, (gpu, shape, rows) in shapes.items():
            sigs = by_arch.get(gpu.architecture)
            if not sigs:
                continue
            timely = in_time[rows]
            if not timely.any():
                continue
            split = None
            for sig in sigs:
                setup, pins = setups[sig]
                fit = self.layout(setup, shape, pins)
                if isinstance(fit, NoFit) or Signature.of(fit.layout) != sig:
                    continue
                if split is None:
                    split = self._shape_split(key, rows, has, kinds) if timely.all() else \
                        self._split_by_provider_and_kind(rows[timely], has)
                fit_id = len(self.v_fits)
                self.v_fits.append(fit)
                block_rows.append(split[0])
                block_counts.append(split[1])
                block_groups.append(split[2])
                model, arch = _validation_keys(gpu, sig)
                blocks.append((numbered[sig], fit_id, keys.base(model), keys.base(arch)))
        return self._validation_pieces(block_rows, block_counts, block_groups, blocks, len(kinds), kinds, hours,
                                       out_h), self._needs(tr)

    def _provider_count(self) -> int:
        """How many provider codes a validation key tells apart: every provider's when plans stay
        at one provider, else one."""
        return len(self.table.category("provider")[1]) if self.per_provider else 1

    def _shape_split(self, key: ShapeKey, rows: np.ndarray, has: list[np.ndarray], kinds: tuple[int, ...]
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`_split_by_provider_and_kind` of every row of the shape `key`, kept with the shapes
        (`_groups`): it depends on the table, the shape's rows and the kinds alone, so the passes
        of a report's jobs over one table split each shape once."""
        memo = (key, kinds, self.per_provider)
        found = self._splits.get(memo)
        if found is None:
            found = self._splits[memo] = self._split_by_provider_and_kind(rows, has)
        return found

    def _split_by_provider_and_kind(self, rows: np.ndarray, has: list[np.ndarray]
                                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`rows` (ascending) as pieces: by provider (ascending code; one group, code 0, when not
        per provider), then by price kind, rows ascending within each: (the rows piece by piece,
        each piece's size, each group's provider code). A group keeps its pieces of a kind none
        of its rows has (size 0)."""
        if self.per_provider:
            codes = self.provider_code[rows]
            order = np.argsort(codes, kind="stable")
            rows, codes = rows[order], codes[order]
            groups, group_of = np.unique(codes, return_inverse=True)
            group_of = group_of.reshape(-1)
        else:
            groups, group_of = np.zeros(1, dtype=np.int64), np.zeros(len(rows), dtype=np.int64)
        nk = len(has)
        if nk == 1:
            at = np.flatnonzero(has[0][rows])
            return rows[at], np.bincount(group_of[at], minlength=len(groups)), groups
        ats = [np.flatnonzero(h[rows]) for h in has]
        piece = np.concatenate([group_of[at] * nk + k for k, at in enumerate(ats)])
        at = np.concatenate(ats)[np.argsort(piece, kind="stable")]
        return rows[at], np.bincount(piece, minlength=len(groups) * nk), groups

    def _validation_pieces(self, block_rows: list[np.ndarray], block_counts: list[np.ndarray],
                           block_groups: list[np.ndarray], blocks: list[tuple[int, int, int, int]], nk: int,
                           kinds: tuple[int, ...], hours: np.ndarray, out_h: np.ndarray) -> ValidateColumns:
        """The validation columns of the (shape, signature) blocks: a piece per (block, provider
        group, kind) with its kind, signature, fit and the numbers of its two keys."""
        keys = self.keys
        groups = np.concatenate(block_groups) if block_groups else np.zeros(0, dtype=np.int64)
        per_block = np.array([len(g) for g in block_groups], dtype=np.int64)
        info = np.array(blocks, dtype=np.int64).reshape(-1, 4)[np.repeat(np.arange(len(blocks)), per_block)]
        model, arch = keys.number(info[:, 2], info[:, 3], groups)
        per_group = np.stack([info[:, 0], info[:, 1], model, arch], axis=1)
        pieces = np.empty((len(groups) * nk, 5), dtype=np.int64)
        pieces[:, 0] = np.tile(np.asarray(kinds, dtype=np.int64), len(groups))
        pieces[:, 1:] = np.repeat(per_group, nk, axis=0)
        counts = np.concatenate(block_counts) if block_counts else np.zeros(0, dtype=np.int64)
        row = np.concatenate(block_rows).astype(np.int64) if block_rows else np.zeros(0, dtype=np.int64)
        return validate_columns(row, counts, pieces, hours, out_h)

    def _needs(self, tr: TrainColumns) -> np.ndarray:
        """Per training candidate, the validation key it needs (`_needed_key` of the keys present;
        -1: none): its GPU model's key at its provider when present, else its architecture's."""
        keys = self.keys
        bases = np.array([[keys.find(model), keys.find(arch)] for model, arch in
                          (_validation_keys(gpu, Signature.of(fit.layout)) for fit, gpu, _, _ in self.fit_list)],
                         dtype=np.int64).reshape(-1, 2)[tr.fit]
        group = self.provider_code[tr.row] if self.per_provider else np.zeros(len(tr), dtype=np.int64)
        model, arch = keys.lookup(bases[:, 0], group), keys.lookup(bases[:, 1], group)
        return np.where(model >= 0, model, arch)

    # -- the second pass: exact candidates for the survivors --------------------------------------

    def _exact(self, tr: TrainColumns, va: ValidateColumns | None, keep_t: np.ndarray, keep_v: np.ndarray,
               first: dict[str, int]) -> Planned:
        """The second pass: exact terms, hours and billing Uses for the kept candidates."""
        req, prep, work, t = self.req, self.prep, self.work, self.table
        rows = sorted({int(r) for r in tr.row[keep_t]} | ({int(r) for r in va.row[keep_v]} if va is not None else set()))
        full, terms = self._resolved(rows)

        def terms_of(r: int) -> Terms:
            if r not in terms:
                terms[r] = offer_terms(full[r], self.fx, req.currency)
            return terms[r]

        train: list[Candidate] = []
        for i in np.flatnonzero(keep_t):
            r, nodes, kind = int(tr.row[i]), int(tr.nodes[i]), int(tr.kind[i])
            o = full[r]
            fit, gpu, speed, _ = self.fit_list[int(tr.fit[i])]
            spot = bool(kind)
            import_h = transfer_hours(prep.import_gb, o, "import")
            export_h = transfer_hours(prep.export_gb, o, "export")
            factor = spot_factor(o.provider, req.checkpoint_every_hours)[0] if spot else Decimal(1)
            if work.tokens is not None:
                run, fast, slow = (Decimal(str(work.tokens / rate / 3600)) for rate in (speed.typical, speed.high, speed.low))
                tokens = work.tokens
            else:
                assert work.rent_hours is not None
                run = fast = slow = work.rent_hours
                tokens = speed.typical * float(run) * 3600 / float(factor)
                factor = Decimal(1)  # a fixed rental lasts its hours; spot's lost work is less work done in them
            notes = list(speed.notes)
            if spot:
                notes.append(spot_factor(o.provider, req.checkpoint_every_hours)[1])
            notes += fit.layout.plan_notes
            if o.extra.get("gpu_note"):
                notes.append(str(o.extra["gpu_note"]))
            if (nodes > 1 or o.gpus > 1) and speed.scaling < LOW_SCALING:
                notes.append(f"scaling efficiency {speed.scaling:.0%} over {nodes * o.gpus} GPUs is under 70 %: "
                             "the interconnect is the bottleneck (a cheaper layout may do the same work)")
            use = Use(id=train_id(o.provider, o.offer_id, nodes, kind), kind="train", terms=terms_of(r), spot=spot,
                      nodes=nodes, hours=rounded_hours(training_hours(import_h, run, factor, export_h)),
                      disk_gb=prep.disk_gb, import_gb=prep.import_gb, out_gb=prep.export_gb)
            train.append(Candidate(use, o, fit.layout, gpu, speed, tokens, prep.disk_gb, prep.import_gb, prep.export_gb,
                                   rounded_hours(training_hours(import_h, fast, factor, export_h)),
                                   rounded_hours(training_hours(import_h, slow, factor, export_h)),
                                   tuple(notes), Signature.of(fit.layout), tuple(notes[len(speed.notes):])))
        validate: list[Candidate] = []
        if va is not None:
            for i in np.flatnonzero(keep_v):
                r, kind, sig = int(va.row[i]), int(va.kind[i]), int(va.sig[i])
                o = full[r]
                fit = self.v_fits[int(va.fit[i])]
                import_h = transfer_hours(prep.import_gb, o, "import")
                out_h = transfer_hours(prep.destroy_gb, o, "export")
                assert req.validate_hours is not None
                use = Use(id=validate_id(o.provider, o.offer_id, kind, sig), kind="validate", terms=terms_of(r),
                          spot=bool(kind), nodes=1, hours=rounded_hours(validation_hours(import_h, req.validate_hours)),
                          disk_gb=prep.validate_disk_gb, import_gb=prep.import_gb, out_gb=prep.destroy_gb,
                          out_hours=out_h)
                assert o.gpu is not None  # rows of an unknown GPU were rejected
                validate.append(Candidate(use, o, fit.layout, get_gpu(o.gpu), None, None, prep.validate_disk_gb,
                                          prep.import_gb, prep.destroy_gb, signature=self.signatures[sig]))
        instance = self._instance(train, validate)
        candidates = {c.id: c for c in (*train, *validate)}
        misses = [text for _, text in sorted(self.misses.values())[:CLOSEST_MISSES]]
        tied = [r for r in rows if self.ties.has_others(r)]
        same_price = {full[r].key: self.ties.words(t, r) for r in tied}
        same_price_ids = {full[r].key: list(take_strings(t.offer_id, self.ties.others(r))) for r in tied}
        return Planned(instance, candidates, self.rejected, work, prep, self.closest[1] if self.closest else None,
                       first, self.table, misses, same_price, same_price_ids)

    def _resolved(self, rows: list[int]) -> tuple[dict[int, Offer], dict[int, Terms]]:
        """The full offers of `rows` (and the rows' terms worked out so far): kept on the table
        (`OfferTable._derived`) with the exchange rates and quote currency the terms are in, so
        the passes of a report's jobs over one table resolve and price a row they share once.
        A table resolves a row to the same offer every time; terms depend on the offer, the
        rates and the currency alone."""
        found = self.table._derived.get("resolved")
        if found is None or found[0] is not self.fx or found[1] != self.req.currency:
            found = self.table._derived["resolved"] = (self.fx, self.req.currency, {}, {})
        full, terms = found[2], found[3]
        missing = [r for r in rows if r not in full]
        full.update(zip(missing, self.table.offers(missing)))
        return full, terms

    def _instance(self, train: list[Candidate], validate: list[Candidate]) -> PlanInstance:
        """The solver's instance of the exact candidates, each training run tied to the validation key it needs."""
        req, work = self.req, self.work
        at: Callable[[Candidate], str | None] = (lambda c: c.offer.provider) if self.per_provider else (lambda c: None)
        present = {key for c in validate for key in _validation_keys(c.gpu, c.signature, at(c))}
        solver_train = []
        for c in train:
            sig = _needed_key(c.gpu, c.signature, present, at(c)) if validate else \
                _validation_keys(c.gpu, c.signature, at(c))[0]
            group = (c.offer.provider, "") if self.per_provider else (c.offer.provider, c.gpu.id)
            solver_train.append(SolverCandidate(c.use, group=group, wall_hours=c.hours_high,
                                                signature=sig, tokens=Decimal(str(c.tokens)) if c.tokens else None))
        return PlanInstance(
            validate=tuple(SolverCandidate(c.use, wall_hours=c.use.hours,
                                           signature=frozenset(_validation_keys(c.gpu, c.signature, at(c))))
                           for c in validate),
            train=tuple(solver_train), idle_hours=req.idle_days * 24, deadline_hours=work.deadline_hours,
            budget=req.budget, currency=req.currency, rank_by="per_token" if work.tokens is None else "total",
        )


class _ValidationKeys:
    """The validation keys of one request as numbers. A key (`_validation_keys`) is a base, (GPU
    model or architecture, signature), at a provider when plans stay at one provider. Each base
    gets a small number here (`base`); a key's code is base * width + the provider's code (0 when
    not per provider). `number` numbers the keys 0, 1, ... in the order the validation pieces
    first name them; `lookup` finds a key's number."""

    def __init__(self, width: int):
        self.width = width
        self._bases: dict[tuple, int] = {}
        self._codes = np.zeros(0, dtype=np.int64)  # the numbered keys' codes, ascending
        self._numbers = np.zeros(0, dtype=np.int64)  # and their numbers

    def __len__(self) -> int:
        return len(self._codes)

    def base(self, key: tuple) -> int:
        return self._bases.setdefault(key, len(self._bases))

    def find(self, key: tuple) -> int:
        """The base's number; -1: no piece names it."""
        return self._bases.get(key, -1)

    def number(self, model: np.ndarray, arch: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per piece group (its model and architecture bases, its provider code), the numbers of
        its two keys: keys numbered by first appearance, each group naming its model's key, then
        its architecture's."""
        codes = np.stack([model * self.width + group, arch * self.width + group], axis=1).reshape(-1)
        self._codes, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        self._numbers = np.empty(len(first), dtype=np.int64)
        self._numbers[np.argsort(first, kind="stable")] = np.arange(len(first))
        numbers = self._numbers[inverse.reshape(-1)].reshape(-1, 2)
        return numbers[:, 0], numbers[:, 1]

    def lookup(self, base: np.ndarray, group: np.ndarray) -> np.ndarray:
        """The numbers of the keys (base, provider code); -1 for a key no piece named (a base of -1
        gives a negative code, never a key's)."""
        if not len(self._codes):
            return np.full(len(base), -1, dtype=np.int64)
        codes = base * self.width + group
        at = np.minimum(np.searchsorted(self._codes, codes), len(self._codes) - 1)
        return np.where(self._codes[at] == codes, self._numbers[at], -1)


# A node shape's fields but its host RAM, as a tuple; and the host RAM a fit no host RAM changes is kept under.
_shape_but_ram = attrgetter(*(f.name for f in fields(NodeShape) if f.name != "host_ram_gb"))
_ANY_RAM = "any"


# Layout fields the speed model (timing.throughput, job.speed_of) never reads: the GPU's name (the
# GpuSpec is its own argument), the strategy's name (made of the fields that say it), the memory
# figures and the notes. Shapes whose layouts differ only there (a provider that does not state
# the interconnect, a host RAM note, a modded card's memory) share one speed.
# tests/test_layout_memo.py checks that changing these fields never changes the speed.
SPEED_IGNORES = frozenset({"gpu", "strategy", "required_gb_per_gpu", "gpu_memory_gb", "notes", "plan_notes"})


def _speed_fields(layout: Layout) -> tuple:
    """The fields of `layout` the speed model reads (pydantic keeps them in its __dict__, in
    declaration order), lists as tuples: a hashable key, equal only for layouts the speed model
    cannot tell apart."""
    return tuple([tuple(v) if isinstance(v, list) else v for k, v in vars(layout).items() if k not in SPEED_IGNORES])


def _nan_none(x: float) -> float | None:
    return None if x != x else float(x)


def train_id(provider: str, offer_id: str, nodes: int, kind: int) -> str:
    """A training candidate's id: its offer, node count and price kind."""
    return f"t:{provider}:{offer_id}:{nodes}:{kind}"


def validate_id(provider: str, offer_id: str, kind: int, signature: int) -> str:
    """A validation candidate's id: its offer, price kind and signature number."""
    return f"v:{provider}:{offer_id}:{kind}:{signature}"


def _validation_keys(gpu: GpuSpec, signature: Signature, provider: str | None = None) -> tuple[tuple, tuple]:
    """The keys a validation of `signature` on `gpu` satisfies: its GPU model's, its architecture's
    (at `provider` only, when given: plans that keep every stage at one provider)."""
    model, arch = (gpu.id, signature), ("arch:" + gpu.architecture, signature)
    return (model, arch) if provider is None else ((provider, *model), (provider, *arch))


def _needed_key(gpu: GpuSpec, signature: Signature, present: Container[tuple], provider: str | None = None) -> tuple:
    """The key a training run of `signature` on `gpu` needs its validation to satisfy: its GPU
    model's when a validation `present` satisfies it, else its architecture's (the seeds' rule;
    the exact pass reads it here; the first pass applies it to key numbers in `_Planner._needs`,
    over every validation piece, and tests/test_validation_pieces.py checks the two agree)."""
    model, arch = _validation_keys(gpu, signature, provider)
    return model if model in present else arch


def plan_instance(req: QuoteRequest, offers: Sequence[Offer] | OfferTable, fx: FxTable, *,
                  first_pass: bool = True, per_provider: bool = False) -> Planned:
    """The solver's instance for `req` over `offers` (offers or an OfferTable; no I/O but the
    table's resolution of its survivors' full offers). `first_pass=False` makes every candidate
    exact and keeps the first pass's columns (`Planned.rough`), for the oracle tests.
    `per_provider`: each plan at one provider, plans of different providers (`best_per_provider`)."""
    check_quote_currency(req.currency)
    fx.rate(req.currency)  # an unknown quote currency is an input error before any work
    req = with_sized_validation(req)
    table = offers if isinstance(offers, OfferTable) else OfferTable.from_offers(list(offers))
    return _Planner(req, table, fx, first_pass, per_provider).build()


_RAM_STEPS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


def _ram_keys(gb: np.ndarray) -> np.ndarray:
    """Host RAM rounded DOWN to a step, so offers share layouts without overstating memory
    (NaN, unstated, stays NaN; below the smallest step stays as it is).

    >>> _ram_keys(np.array([200.0, np.nan, 7.0])).tolist()[0::2]
    [192.0, 7.0]
    """
    steps = np.array(_RAM_STEPS, dtype=np.float64)
    out = gb.copy()  # NaN stays NaN
    known = np.flatnonzero(~np.isnan(gb))  # most offers do not state it: only the others are looked up
    at = np.searchsorted(steps, gb[known], side="right") - 1
    out[known] = np.where(at >= 0, steps[np.clip(at, 0, None)], gb[known])
    return out


# --------------------------------------------------------------------------------------------
# The quote


def build_quote(req: QuoteRequest, offers: OfferSet, fx: FxTable, *, list_rejected: bool = True,
                per_provider: bool = False, ranges: bool = True) -> Quote:
    """Plan the job over `offers`; raises NoFeasiblePlan (exit 3) when nothing fits.

    `list_rejected=False` leaves `Quote.rejected` empty and only counts them in
    `rejected_count` (a table without --explain does not need 10,000 rejection records).
    `per_provider=True`: the best plan of every provider that has one, each with all its stages
    at that provider (what planning each provider's offers alone gives), ranked; `req.top` is
    not read. `ranges=False`: the plans' totals at the ends of the training time's range are not
    priced (None; answer.plan_of).
    """
    table = offers.table()
    if per_provider:
        req = replace(req, top=max(1, len(np.unique(table.category("provider")[0]))))
    validation_note = None
    if req.validate_sized and req.validate_hours is not None:
        hours, validation_note = sized_validation(req)
        req = replace(req, validate_hours=hours, validate_sized=False)
    if req.measured_peak_gb is not None and req.measured is None:
        req = replace(req, measured=_peak_scale(req, table, fx))
    planned = plan_instance(req, table, fx, per_provider=per_provider)
    inst = planned.instance
    if not inst.train:
        raise explain_no_plan(no_candidates(planned, req, table.n), planned, list_rejected)
    try:
        solution = solve(inst, top_k=req.top)
    except NoFeasiblePlan as exc:
        raise explain_no_plan(NoFeasiblePlan(str(exc) + " Run with --explain to see the binding constraint and the "
                                             "rejected offers.", exc.reasons), planned, list_rejected) from None
    return quote_of(req, planned, solution.plans, offers, fx, validation_note, list_rejected, ranges=ranges)


def _peak_scale(req: QuoteRequest, offers: OfferTable, fx: FxTable) -> MeasuredPeak:
    """The activation scale of a measured peak: on `--measured-on SPEC` when given, else on the
    validation layout the quote prescribes without the measurement (its #1 plan's validation
    stage, or its training stage when the quote has no validation)."""
    validate_setup = req.setup.model_copy(update={"micro_batch": 1})
    if req.measured_on is not None:
        ref = req.measured_on
        fit = find_layout(req.model, validate_setup, reference_shape(ref), pins=req.pins)
        if isinstance(fit, NoFit):
            raise InputError(f"--measured-on {ref.text}: the validation job does not fit there ({fit.reason})")
        return measured_peak(req, fit.layout, get_gpu(ref.gpu), ref.text)
    plain = plan_instance(replace(req, measured_peak_gb=None, top=1), offers, fx)
    if not plain.instance.train:
        raise no_candidates(plain, req, offers.n)
    [bill] = solve(plain.instance, top_k=1).plans
    c = plain.candidates[bill.choice.validate or bill.choice.train]
    where = f"{c.use.nodes * c.offer.gpus} x {c.gpu.id} ({c.offer.provider}/{c.offer.offer_id}, the quote's validation)"
    return measured_peak(req, c.layout, c.gpu, where)
