"""The quote: from a workload and a set of offers to ranked, priced whole-job plans.

For every offer this module decides the layout (feasibility), the hours (the requested days,
or tokens through the timing model), the disk, transfer and idle-gap charges (billing), and
hands the solver a fully prepared `PlanInstance`. The solver's decisions come back as Plans with
stages, billing lines and the reasons behind each choice.

Stages (design.md "Billing and the plan"): VALIDATE (the seeds' step 1: run the pipeline end to
end on the cheapest configuration that fits the smallest batch), IDLE (stop and pay for the
disk, or destroy after copying data and checkpoints out), TRAIN, EXPORT (copy the final weights
and kept checkpoints out, then destroy: seed 000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any

from rentopt.optimizer.billing import (
    Candidate,
    Decision,
    PlanCost,
    PlanInstance,
    billed_metered_seconds,
    explain_cover,
    offer_rates,
    plan_cost,
    rental_pricing,
    round_money,
    storage_cost,
    transfer_cost,
    transfer_hours,
)
from rentopt.optimizer.catalog import OfferSet
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.feasibility import Fit, NodeShape, NoFit, Pins, find_layout
from rentopt.optimizer.gc_pause import gc_paused
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import (
    GpuSpec,
    MemoryEstimate,
    ModelSpec,
    Offer,
    Plan,
    PlanRow,
    PlanStage,
    PriceSource,
    Quote,
    Rejection,
    TrainingSetup,
)
from rentopt.optimizer.timing import training_time

HOUR = Decimal(3600)

# A job is planned on at most this many nodes of one offer (larger clusters are negotiated,
# not rented from a catalog).
MAX_NODES = 8

# Transfers at an offer's stated bandwidth; when it states none we assume 1 Gbit/s, a common
# floor for rented GPU hosts (Vast lists inet_up/inet_down per host; many datacenter hosts have
# 10 Gbit/s or more), and say so in the plan.
DEFAULT_MBPS = 1000.0

# Spot/interruptible capacity: expected preemptions per hour. Hyperscalers publish interruption
# frequency buckets per month (AWS Spot Instance Advisor, spot-advisor-data.json: GPU types are
# often in the ">20 %" bucket, i.e. ~3e-4 per hour); marketplace bids (Vast interruptible, RunPod
# spot) are outbid or reclaimed far more often, and no provider publishes a rate, so the
# marketplace figure is a stated prior. Each preemption loses on average half a checkpoint
# interval plus a restart (reload the checkpoint, warm up).
PREEMPTIONS_PER_HOUR = {"hyperscaler": Decimal("0.0005"), "marketplace": Decimal("0.05")}
PROVIDER_CLASS = {"aws": "hyperscaler", "azure": "hyperscaler", "gcp": "hyperscaler"}
RESTART_HOURS = Decimal("0.25")


@dataclass(frozen=True)
class QuoteRequest:
    """What `rentopt quote` was asked. Money amounts are in `currency`."""

    model: ModelSpec
    setup: TrainingSetup
    days: Decimal | None = None
    tokens: float | None = None
    currency: str = "USD"
    validate_hours: Decimal | None = Decimal(4)  # None: no validation stage
    idle_days: Decimal = Decimal(0)
    keep_checkpoints: int = 2  # seed 002: keep the latest and the best
    data_gb: Decimal = Decimal(10)
    deadline_days: Decimal | None = None
    budget: Decimal | None = None
    top: int = 5
    spot: bool = False
    checkpoint_every_hours: Decimal = Decimal(1)  # seed 000: at least hourly if an hour is all you can lose
    measured_peak_gb: float | None = None
    pins: Pins = Pins()

    def __post_init__(self) -> None:
        if (self.days is None) == (self.tokens is None):
            raise ValueError("give exactly one of --days or --tokens")


@dataclass
class _Prepared:
    """Per-quote constants: sizes on disk and the memory scale from a measured peak."""

    train_memory: MemoryEstimate
    validate_setup: TrainingSetup
    memory_scale: float
    disk_gb: Decimal  # base weights + data + kept checkpoints
    validate_disk_gb: Decimal  # base weights + data + one checkpoint
    import_gb: Decimal  # what a fresh instance downloads: base weights + data
    export_gb: Decimal  # final weights + kept checkpoints
    destroy_gb: Decimal  # data + the validation checkpoint, copied out on destroy
    notes: list[str] = field(default_factory=list)


@dataclass
class _Built:
    instance: PlanInstance
    rejected: list[tuple[PlanRow, str, str]]  # (offer, constraint, reason); Rejection objects on demand
    offers: dict[str, Offer]  # by candidate id
    time_ranges: dict[str, tuple[Decimal, Decimal]]
    closest_memory: str | None


def _gb(x: float) -> Decimal:
    return Decimal(str(round(x, 3)))


def _prepare(req: QuoteRequest) -> _Prepared:
    setup = req.setup
    train_mem = estimate(req.model, setup)
    validate_setup = setup.model_copy(update={"micro_batch": 1})
    scale = 1.0
    notes: list[str] = []
    if req.measured_peak_gb is not None:
        # Seeds (000, step 2): size the real run from the peak measured during validation. The
        # validation run is one GPU at micro-batch 1; its estimate is rescaled to the measurement.
        val_est = estimate(req.model, validate_setup.model_copy(update={"gpus": 1, "zero": 0, "fsdp": False,
                                                                        "tensor_parallel": 1, "offload": "none"}))
        scale = req.measured_peak_gb / val_est.device_gb_per_gpu
        notes.append(f"memory sized from the measured validation peak {req.measured_peak_gb:g} GB "
                     f"(estimate was {val_est.device_gb_per_gpu:g} GB; all estimates scaled x{scale:.2f})")
    files = _gb(train_mem.model_files_gb)
    ckpt = _gb(train_mem.checkpoint_gb)
    keep = Decimal(req.keep_checkpoints)
    if setup.mode == "full":
        final = files
    else:  # the adapters (fp32 in PEFT's adapter_model.safetensors)
        final = _gb(train_mem.trainable_params_b * 4)
    return _Prepared(
        train_memory=train_mem, validate_setup=validate_setup, memory_scale=scale,
        disk_gb=files + req.data_gb + keep * ckpt,
        validate_disk_gb=files + req.data_gb + ckpt,
        import_gb=files + req.data_gb,
        export_gb=final + keep * ckpt,
        destroy_gb=req.data_gb + ckpt,
        notes=notes,
    )


def _shape(offer: PlanRow, gpu: GpuSpec, nodes: int, host_ram_gb: float | None) -> NodeShape:
    return NodeShape(gpu=gpu, gpus_per_node=offer.gpus, nodes=nodes, interconnect=offer.interconnect,  # type: ignore[arg-type]
                     fabric=offer.fabric, fabric_gbps=offer.fabric_gbps,  # type: ignore[arg-type]
                     memory_gb=offer.gpu_memory_gb, host_ram_gb=host_ram_gb)


def _hours(x: float | Decimal) -> Decimal:
    """Hours on a 1e-6 grid, rounded up (never under-bill)."""
    return Decimal(str(x)).quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


def _spot_factor(offer: Offer | PlanRow, every: Decimal) -> tuple[Decimal, str]:
    cls = PROVIDER_CLASS.get(offer.provider, "marketplace")
    rate = PREEMPTIONS_PER_HOUR[cls]
    lost = every / 2 + RESTART_HOURS
    factor = 1 + rate * lost
    note = (f"spot: assumed {rate} preemptions/h ({cls}); each loses ~{lost} h (half the {every} h checkpoint "
            f"interval + restart), so +{(factor - 1) * 100:.2f} % expected hours")
    return factor, note


@dataclass(slots=True)
class _Row:
    """One way to use an offer in one stage, priced roughly in floats for the dominance pass."""

    stage: str  # "v" or "t"
    offer: PlanRow
    gpu: GpuSpec
    fit: Fit
    nodes: int
    spot: bool
    hours: float  # running hours to pay for
    cost: float  # standalone cost: compute + running disk + ingress (+ export egress for training)
    destroy: float = 0.0  # validate: egress of data + checkpoint when destroyed
    stop: float = 0.0  # validate: stopped disk over the idle gap
    ingress: float = 0.0
    offload: bool = False
    exact: bool = True  # False when the float cover is only a bound (prepaid blocks)
    low_high: tuple[float, float] | None = None
    t_notes: tuple[str, ...] = ()
    key: tuple[str, str] = ("", "")  # (provider, offer_id)


class _Planner:
    """Builds the PlanInstance for one request.

    Two passes keep 10,000-offer catalogs fast: a float pass prices every (offer, stage, nodes,
    spot) roughly and drops rows that another row beats in every respect (an exact dominance
    argument, below); only the survivors get exact Decimal candidates for the solver.
    """

    def __init__(self, req: QuoteRequest, offers: OfferSet, fx: FxTable):
        self.req, self.offer_set, self.fx = req, offers, fx
        self.prep = _prepare(req)
        self._fits: dict[tuple, Fit | NoFit] = {}
        self._time: dict[tuple, Any] = {}
        self._rate: dict[str, float] = {}
        self.rejected: list[tuple[PlanRow, str, str]] = []
        self.closest: tuple[float, str] | None = None  # the memory rejection that missed by least
        self.row_count = 0

    def layout(self, setup: TrainingSetup, offer: PlanRow, gpu: GpuSpec, nodes: int, key: tuple) -> Fit | NoFit:
        """The layout for a node shape, memoised: a 10,000-offer catalog has a few hundred shapes."""
        found = self._fits.get(key)
        if found is None:
            shape = _shape(offer, gpu, nodes, _ram_key(offer.host_ram_gb))
            found = find_layout(self.req.model, setup, shape, pins=self.req.pins, memory_scale=self.prep.memory_scale)
            self._fits[key] = found
        return found

    def train_hours(self, fit: Fit, gpu: GpuSpec, key: tuple) -> tuple[float, float, float, tuple[str, ...]]:
        req = self.req
        if req.days is not None:
            h = float(req.days) * 24
            return h, h, h, ()
        found = self._time.get(key)
        if found is None:
            t = training_time(req.model, req.setup, fit.layout, gpu, req.tokens or 0)
            found = (t.hours, t.hours_low, t.hours_high, tuple(t.assumptions))
            self._time[key] = found
        return found

    def rate(self, currency: str) -> float:
        """Float factor from `currency` into the quote currency (for the rough pass only)."""
        found = self._rate.get(currency)
        if found is None:
            found = float(self.fx.convert(Decimal(1), currency, self.req.currency))
            self._rate[currency] = found
        return found

    # -- pass 1: rough prices -----------------------------------------------------------------

    def rows(self) -> list[_Row]:
        req, prep = self.req, self.prep
        out: list[_Row] = []
        idle_h = float(req.idle_days) * 24
        import_gb, export_gb, destroy_gb = float(prep.import_gb), float(prep.export_gb), float(prep.destroy_gb)
        disk, vdisk = float(prep.disk_gb), float(prep.validate_disk_gb)
        validate_h = float(req.validate_hours) if req.validate_hours is not None else None
        plan_rows = self.offer_set.plan_rows()
        self.row_count = len(plan_rows)
        for o in plan_rows:
            if o.gpu is None:
                self.rejected.append((o, "gpu", f"GPU {o.gpu_raw!r} is {o.gpu_status} in the catalog: its memory "
                                                "and speed cannot be checked (kept, not guessed)"))
                continue
            hourly = {False: o.hourly, True: o.hourly_spot}
            has_blocks = {False: o.blocks, True: o.blocks_spot}
            kinds = [k for k in ((False, True) if req.spot else (False,)) if hourly[k] is not None or has_blocks[k]]
            if not kinds:
                self.rejected.append((o, "price", "spot-only offer: add --spot to consider interruptible prices"
                                      if o.spot else "no price option of the requested kind"))
                continue
            gpu = get_gpu(o.gpu)
            okey = o.key
            f = self.rate(o.currency)
            storage = (o.storage_gb_month or 0.0) * f / o.month_hours
            stopped = (o.storage_stopped_gb_month or 0.0) * f / o.month_hours
            egress, ingress = (o.egress_gb or 0.0) * f, (o.ingress_gb or 0.0) * f
            import_h = import_gb * 8000 / (o.net_down_mbps or DEFAULT_MBPS) / 3600
            export_h = export_gb * 8000 / (o.net_up_mbps or DEFAULT_MBPS) / 3600
            key = (o.gpu, o.gpus, o.interconnect, o.fabric, o.fabric_gbps, _memory_key(o, gpu), _ram_key(o.host_ram_gb))
            max_h = o.max_duration_hours or math.inf

            if validate_h is not None:
                fit = self.layout(prep.validate_setup, o, gpu, 1, ("v", *key, 1))
                if isinstance(fit, Fit):
                    hours = validate_h + import_h
                    if hours <= max_h:
                        for spot in kinds:
                            compute, exact = _rough_compute(o, hourly[spot], has_blocks[spot], 1, hours, f)
                            out.append(_Row("v", o, gpu, fit, 1, spot, hours,
                                            compute + storage * vdisk * hours + ingress * import_gb,
                                            destroy=egress * destroy_gb, stop=stopped * vdisk * idle_h,
                                            ingress=ingress * import_gb, offload=fit.layout.offload != "none",
                                            exact=exact, key=okey))
            first_miss: NoFit | None = None
            for nodes in range(1, min(o.nodes_available, MAX_NODES) + 1):
                fit = self.layout(req.setup, o, gpu, nodes, ("t", *key, nodes))
                if isinstance(fit, NoFit):
                    first_miss = first_miss or fit
                    continue
                first_miss = None
                mid, low, high, notes = self.train_hours(fit, gpu, (*key, nodes))
                for spot in kinds:
                    factor = float(_spot_factor(o, req.checkpoint_every_hours)[0]) if spot else 1.0
                    hours = mid * factor + import_h + export_h
                    if hours > max_h:
                        self.rejected.append((o, "max_duration", f"needs {hours:.1f} h of rental; the host allows at "
                                                                 f"most {o.max_duration_hours:.1f} h"))
                        continue
                    compute, exact = _rough_compute(o, hourly[spot], has_blocks[spot], nodes, hours, f)
                    out.append(_Row(
                        "t", o, gpu, fit, nodes, spot, hours,
                        compute + storage * disk * nodes * hours + ingress * import_gb * nodes + egress * export_gb,
                        ingress=ingress * import_gb * nodes, offload=fit.layout.offload != "none", exact=exact,
                        low_high=(low * factor + import_h + export_h, high * factor + import_h + export_h)
                        if req.tokens is not None else None, t_notes=notes, key=okey))
                if req.days is not None:
                    break  # a fixed wall-clock: more nodes only add cost
            else:
                if first_miss is not None:
                    self.rejected.append((o, first_miss.constraint, first_miss.reason))
                    if first_miss.overshoot is not None and (
                            self.closest is None or first_miss.overshoot < self.closest[0]):
                        self.closest = (first_miss.overshoot, f"{o.provider}/{o.offer_id} ({o.gpus} x {o.gpu}): "
                                                              f"{first_miss.reason}")
        return out

    # -- dominance ---------------------------------------------------------------------------

    def prune(self, rows: list[_Row]) -> list[_Row]:
        """Drop rows that can never be in a best plan; exact for every plan the solver could build.

        Training row B is dropped when a row A of the same (provider, GPU) group costs at least
        B's coupling saving less and takes no longer: any plan training on B becomes one training
        on A (destroying after validation) that is no dearer and no slower, and stays in the same
        top-K group. B's coupling saving is what training on B's own validation instance could
        save: its re-import plus the validation egress, minus the stopped disk.
        Validation row B is dropped when another offer's row A, with its destroy egress, costs no
        more than B with its destroy egress, nor than B stopped for its own training (B's stop
        minus the largest re-import it saves), and takes no longer. Rows priced only roughly
        (prepaid blocks) are never dropped and never drop others.
        """
        req = self.req
        if req.days is not None:  # offload is the last rung across the catalog (see _offload_last)
            rows = self._offload_last(rows)
        train = [r for r in rows if r.stage == "t"]
        validate = [r for r in rows if r.stage == "v"]
        max_ingress: dict[tuple[str, str], float] = {}
        for r in train:
            max_ingress[r.key] = max(max_ingress.get(r.key, 0.0), r.ingress)
        v_by_offer = {r.key: r for r in validate}
        kept: list[_Row] = []
        groups: dict[tuple[str, str], list[_Row]] = {}
        for r in train:
            groups.setdefault((r.offer.provider, r.gpu.id), []).append(r)
        for group in groups.values():
            def saving(b: _Row) -> float:
                v = v_by_offer.get(b.key) if req.validate_hours is not None else None
                return max(0.0, b.ingress + v.destroy - v.stop) if v else 0.0
            kept += _undominated(group, saving, self._dominated)
        kept_v = _undominated(
            validate,
            lambda b: 0.0,
            self._dominated,
            cost=lambda r: r.cost + r.destroy,
            bound=lambda b: min(b.cost + b.destroy, b.cost + b.stop - max_ingress[b.key])
            if b.key in max_ingress else b.cost + b.destroy,
            same_offer_allowed=False,
        )
        return kept + kept_v

    def _dominated(self, b: _Row, a: _Row) -> None:
        if b.stage == "t":
            self.rejected.append((b.offer, "dominated",
                                  f"{a.offer.provider}/{a.offer.offer_id} ({a.nodes} x {a.offer.gpus} {a.gpu.id}) costs "
                                  f"less for the same job and takes no longer"))

    def _offload_last(self, rows: list[_Row]) -> list[_Row]:
        """CPU offload is the ladder's last rung across the whole catalog, not per offer.

        With a fixed wall-clock (--days) the quote cannot see that an offloaded run does ~35-60 %
        of the work in the same days, so offload layouts stay only when nothing fits without one.
        With --tokens their slowness is priced by the timing model and they compete.
        """
        out: list[_Row] = []
        for stage in ("v", "t"):
            mine = [r for r in rows if r.stage == stage]
            plain = [r for r in mine if not r.offload]
            if plain and len(plain) < len(mine):
                for r in mine:
                    if r.offload and stage == "t":
                        self.rejected.append((r.offer, "dominated",
                                              f"fits only with CPU offload ({r.fit.layout.strategy}); other offers fit "
                                              "without it, and with --days an offloaded run does far less work"))
                mine = plain
            out += mine
        return out

    # -- pass 2: exact candidates --------------------------------------------------------------

    def build(self) -> _Built:
        req, prep, fx, ccy = self.req, self.prep, self.fx, self.req.currency
        rows = self.prune(self.rows())
        full = self.offer_set.offers_by_key({r.key for r in rows})
        validate: list[Candidate] = []
        train: list[Candidate] = []
        offers: dict[str, Offer] = {}
        ranges: dict[str, tuple[Decimal, Decimal]] = {}
        idle_hours = req.idle_days * 24
        rates_cache: dict[tuple[str, str], Any] = {}
        for r in rows:
            o = full[r.key]
            rates = rates_cache.get(o.key)
            if rates is None:
                rates = rates_cache[o.key] = offer_rates(o, fx, ccy)
            c_notes: list[str] = []
            if not o.net_down_mbps or not o.net_up_mbps:
                c_notes.append(f"transfer speed not stated: assumed {DEFAULT_MBPS:g} Mbit/s")
            hours = _hours(r.hours)
            pricing = rental_pricing(o, r.nodes, fx, ccy, r.spot)
            if r.stage == "v":
                run = storage_cost(rates.storage_gb_month, prep.validate_disk_gb, hours, o.month_hours)
                stop = storage_cost(rates.storage_stopped_gb_month, prep.validate_disk_gb, idle_hours,
                                    o.month_hours, "stopped storage")
                ing = transfer_cost(rates.ingress_gb, prep.import_gb, "ingress")
                out = transfer_cost(rates.egress_gb, prep.destroy_gb, "egress")
                c_notes += [c.note for c in (run, stop, ing, out) if c.note]
                cid = f"v:{o.provider}:{o.offer_id}:{int(r.spot)}"
                validate.append(Candidate(
                    id=cid, stage="validate", provider=o.provider, offer_id=o.offer_id, gpu=r.gpu.id, gpus=o.gpus,
                    nodes=1, layout=r.fit.layout.strategy, hours=hours, pricing=pricing, storage_running=run.cost,
                    ingress=ing.cost, destroy_egress=out.cost, stop_storage=stop.cost, notes=tuple(c_notes)))
            else:
                n = Decimal(r.nodes)
                run = storage_cost(rates.storage_gb_month, prep.disk_gb * n, hours, o.month_hours)
                ing = transfer_cost(rates.ingress_gb, prep.import_gb * n, "ingress")
                out = transfer_cost(rates.egress_gb, prep.export_gb, "egress")
                c_notes += [c.note for c in (run, ing, out) if c.note]
                if r.spot:
                    c_notes.append(_spot_factor(o, req.checkpoint_every_hours)[1])
                c_notes += list(r.t_notes)
                if r.fit.layout.penalty:
                    c_notes.append(r.fit.layout.penalty)
                cid = f"t:{o.provider}:{o.offer_id}:{r.nodes}:{int(r.spot)}"
                train.append(Candidate(
                    id=cid, stage="train", provider=o.provider, offer_id=o.offer_id, gpu=r.gpu.id,
                    gpus=o.gpus * r.nodes, nodes=r.nodes, layout=r.fit.layout.strategy, hours=hours,
                    pricing=pricing, storage_running=run.cost, ingress=ing.cost, egress=out.cost,
                    notes=tuple(c_notes)))
                if r.low_high:
                    ranges[cid] = (_hours(r.low_high[0]), _hours(r.low_high[1]))
            offers[cid] = o
        rejected = self.rejected
        instance = PlanInstance(
            validate=validate if req.validate_hours is not None else [],
            train=train, idle_hours=idle_hours,
            deadline_hours=req.deadline_days * 24 if req.deadline_days is not None else None,
            budget=req.budget, currency=ccy,
        )
        return _Built(instance, rejected, offers, ranges, self.closest[1] if self.closest else None)


def _undominated(rows: list[_Row], saving, on_drop, *, cost=lambda r: r.cost, bound=None,
                 same_offer_allowed: bool = True) -> list[_Row]:
    """Rows not dominated within `rows`: B goes when some exact row A has cost(A) <= bound(B)
    (default cost(B) - saving(B)), by a clear float margin, and hours(A) <= hours(B)."""
    bound = bound or (lambda b: cost(b) - saving(b))
    ranked = sorted(rows, key=cost)
    costs: list[float] = []
    best_hours: list[tuple[float, _Row | None]] = []  # prefix minimum of hours among exact rows
    low: tuple[float, _Row | None] = (math.inf, None)
    for r in ranked:
        costs.append(cost(r))
        if r.exact and r.hours < low[0]:
            low = (r.hours, r)
        best_hours.append(low)
    import bisect

    kept = []
    for b in rows:
        if not b.exact:
            kept.append(b)
            continue
        limit = bound(b)
        limit -= 1e-9 * max(1.0, abs(limit))  # only clear wins: float noise never drops a row
        i = bisect.bisect_right(costs, limit) - 1
        a = best_hours[i][1] if i >= 0 else None
        if a is not None and a is not b and best_hours[i][0] <= b.hours and (
                same_offer_allowed or a.key != b.key):
            on_drop(b, a)
            continue
        kept.append(b)
    return kept


def _rough_compute(o: PlanRow, hourly: float | None, blocks: bool, nodes: int, hours: float,
                   f: float) -> tuple[float, bool]:
    """Metered cost of `hours` at the hourly price, in floats. Exact (up to float error) when the
    offer sells only hourly time; with prepaid blocks the row is flagged inexact (never pruned)."""
    if hourly is None:
        return 0.0, False
    billed = billed_metered_seconds(o.billing_granularity_s, o.billing_minimum_s, math.ceil(hours * 3600))
    return hourly * f * nodes * billed / 3600, not blocks


def _memory_key(o: PlanRow, gpu: GpuSpec) -> float | None:
    """The offer's memory only matters when it exceeds the catalog's (a modded card)."""
    return round(o.gpu_memory_gb, 1) if o.gpu_memory_gb > gpu.memory_gb * 1.1 else None


_RAM_STEPS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)


def _ram_key(gb: float | None) -> float | None:
    """Host RAM rounded DOWN to a step, so offers share layouts without overstating memory.

    >>> _ram_key(200), _ram_key(None), _ram_key(7)
    (192, None, 7)
    """
    if gb is None:
        return None
    steps = [s for s in _RAM_STEPS if s <= gb]
    return steps[-1] if steps else gb


def rejections(built: _Built) -> list[Rejection]:
    return [Rejection(provider=o.provider, offer_id=o.offer_id, gpu=o.gpu or o.gpu_raw, constraint=c,  # type: ignore[arg-type]
                      reason=why) for o, c, why in built.rejected]


def _no_candidates(built: _Built, req: QuoteRequest, offer_count: int) -> NoFeasiblePlan:
    counts: dict[str, int] = {}
    for _, constraint, _ in built.rejected:
        counts[constraint] = counts.get(constraint, 0) + 1
    parts = [f"{n} offer{'s' if n > 1 else ''} by {c}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    reasons = [f"all {offer_count} offers were rejected: " + ", ".join(parts)] if parts else ["no offers to plan with"]
    if built.closest_memory:
        reasons.append(f"closest miss: {built.closest_memory}")
    if req.setup.mode == "full":
        reasons.append("try --mode lora/qlora, gradient checkpointing, a shorter --seq-len, or more GPUs")
    message = "No feasible plan: " + "; ".join(reasons) + ". Run with --explain to see every rejection."
    return NoFeasiblePlan(message, reasons)


def build_quote(req: QuoteRequest, offers: OfferSet, fx: FxTable, *, list_rejected: bool = True) -> Quote:
    """Plan the job over `offers`; raises NoFeasiblePlan (exit 3) when nothing fits.

    `list_rejected=False` leaves `Quote.rejected` empty and only counts them in
    `rejected_count` (a table without --explain does not need 10,000 rejection records).
    """
    from rentopt.optimizer.solver import solve  # the only ortools user, imported when needed

    fx.rate(req.currency)  # an unknown quote currency is an input error before any work
    planner = _Planner(req, offers, fx)
    with gc_paused():
        built = planner.build()
    if not built.instance.train:
        raise _no_candidates(built, req, planner.row_count)
    try:
        decisions = solve(built.instance, top_k=req.top)
    except NoFeasiblePlan as exc:
        raise NoFeasiblePlan(str(exc) + " Run with --explain to see rejected offers.", exc.reasons) from None
    decisions = [_prefer_stop(d, built.instance) for d in decisions]
    plans = [_plan(rank, d, built, planner, offers, fx) for rank, d in enumerate(decisions, start=1)]
    used = [built.offers[d.train_id] for d in decisions] + [built.offers[d.validate_id] for d in decisions if d.validate_id]
    currencies = {built.offers[d.train_id].currency for d in decisions} | {
        built.offers[d.validate_id].currency for d in decisions if d.validate_id}
    assumptions = [a for a in planner.prep.train_memory.assumptions[:1]]
    assumptions += planner.prep.notes
    assumptions.append(f"disk {planner.prep.disk_gb} GB = base weights + {req.data_gb} GB data + "
                       f"{req.keep_checkpoints} checkpoints of {_gb(planner.prep.train_memory.checkpoint_gb)} GB")
    if req.days is not None:
        assumptions.append(f"training runs {req.days} days of wall-clock on the chosen layout")
    return Quote(
        currency=req.currency, prices_as_of=min(o.fetched_at for o in used), price_origin=offers.origin,
        fx=fx.rates_used(currencies | {req.currency}), plans=plans,
        rejected=rejections(built) if list_rejected else [], rejected_count=len(built.rejected),
        memory=planner.prep.train_memory, assumptions=assumptions,
    )


def _prefer_stop(d: Decision, inst: PlanInstance) -> Decision:
    """Between equal-cost idle choices on the same offer, keep the instance (no re-import wait)."""
    if d.idle != "destroy" or d.validate_id is None:
        return d
    v, t = inst.by_id[d.validate_id], inst.by_id[d.train_id]
    if v.offer_key == t.offer_key and v.stop_storage <= v.destroy_egress + t.ingress:
        return replace(d, idle="stop")
    return d


def _stage(kind: str, c: Candidate, cost_stage, hours: Decimal, layout: str, gpus: int | None = None) -> PlanStage:
    return PlanStage(kind=kind, provider=c.provider, offer_id=c.offer_id, gpu=c.gpu,  # type: ignore[arg-type]
                     gpus=c.gpus if gpus is None else gpus, nodes=c.nodes, layout=layout, hours=hours,
                     billing=list(cost_stage.lines), cost=cost_stage.cost)


def _plan(rank: int, d: Decision, built: _Built, planner: _Planner, offers: OfferSet, fx: FxTable) -> Plan:
    inst, prep = built.instance, planner.prep
    cost: PlanCost = plan_cost(inst, d)
    t = inst.by_id[d.train_id]
    v = inst.by_id[d.validate_id] if d.validate_id else None
    stages: list[PlanStage] = []
    notes: list[str] = []
    if v is not None:
        stages.append(_stage("validate", v, cost.stage("validate"), v.hours, v.layout))
        stages.append(_stage("idle", v, cost.stage("idle"), inst.idle_hours,
                             "stopped (disk kept)" if d.idle == "stop" else "destroyed", gpus=0))
        notes.append(_idle_reason(d, v, t, inst.currency, inst.idle_hours))
        notes += [f"{v.provider}/{v.offer_id}: {n}" for n in v.notes]
    export_h = transfer_hours(prep.export_gb, built.offers[t.id].net_up_mbps or DEFAULT_MBPS) or Decimal(0)
    stages.append(_stage("train", t, cost.stage("train"), t.hours, t.layout))
    stages.append(_stage("export", t, cost.stage("export"), export_h, "copy out, verify, destroy", gpus=0))
    notes.append(f"train compute: {explain_cover(t.pricing, t.hours, inst.currency)}")
    notes += [f"{t.provider}/{t.offer_id}: {n}" for n in t.notes]
    offer = built.offers[t.id]
    if offer.price_locked:
        notes.append(f"{offer.provider}: the hourly price is locked at order time until destroy")
    if offer.max_duration_hours:
        notes.append(f"host maximum rental: {offer.max_duration_hours:.0f} h")
    if d.status != "OPTIMAL":
        notes.append("the solver hit its time limit: this plan is feasible but not proven cheapest")
    chosen = [built.offers[t.id]] + ([built.offers[v.id]] if v else [])
    prices = []
    for o in {o.key: o for o in chosen}.values():
        prov = offers.provenance.get(o.provider)
        prices.append(PriceSource(provider=o.provider, source=o.source, fetched_at=o.fetched_at,
                                  origin=offers.origin, stale=bool(prov and prov.stale)))
    low_high = built.time_ranges.get(t.id)
    return Plan(
        rank=rank, total=cost.total, currency=inst.currency, stages=stages, line_items=cost.line_items,
        idle=d.idle, hours_low=low_high[0] if low_high else None, hours_high=low_high[1] if low_high else None,
        prices=prices, notes=list(dict.fromkeys(notes)),
    )


def _idle_reason(d: Decision, v: Candidate, t: Candidate, ccy: str, idle_hours: Decimal) -> str:
    same = v.offer_key == t.offer_key
    stop = v.stop_storage
    destroy = v.destroy_egress + t.ingress
    if same and not idle_hours and d.idle == "stop":
        return "no idle gap: training continues on the validation instance (no re-import)"
    if not same:
        return (f"idle: destroy the validation instance (training uses another offer): copy data and checkpoints "
                f"out ({round_money(v.destroy_egress, ccy)} {ccy} egress), re-import on the training instance")
    choice = "stop" if d.idle == "stop" else "destroy"
    return (f"idle: {choice} - stop keeps the disk for {round_money(stop, ccy)} {ccy}; destroy costs "
            f"{round_money(destroy, ccy)} {ccy} (egress + re-import)")
