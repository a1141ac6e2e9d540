"""The quote: from a workload and a set of offers to ranked, priced whole-job plans.

`plan_instance` is a pure function: (request, offers, fx) -> (plan instance, rejections). It
owns what the job is and where it can run; it prices nothing (billing.py does) and chooses
nothing (solver.py does). For every offer it decides the layout per node count (feasibility),
the hours the job's tokens take there (timing), the disk, imports and exports, and makes one
billing `Use` per stage option. `build_quote` then asks the solver for the best plans and turns
the priced bills into the `Quote` the CLI renders.

The work. Plans are compared for the same job, in tokens (principle 1: price the work, not the
rental):
- `--tokens T` (or epochs x dataset tokens) is the job;
- `--days D` means "the job takes D days on a reference layout" (`--on`, by default the fewest
  A100-SXM-80GB GPUs that hold it: the field's unit of GPU-days); the speed model turns that
  into tokens, printed as an assumption;
- `--rent-days D` is a fixed rental period: every plan trains D days, does the work its speed
  allows, and plans are ranked by cost per token.

Stages (the seeds' procedure): VALIDATE (run the same job -- mode, precision, attention kernel,
parallel family -- at micro-batch 1, on the cheapest instance of the training GPU model, or one
of its architecture, that holds it), IDLE (the gap before training: keep the instance, or
destroy it after copying out), TRAIN, EXPORT (copy the final weights and kept checkpoints out,
then destroy).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal
from typing import Any, Literal

from rentopt.optimizer.billing import (
    Choice,
    PlanBill,
    RoughPrices,
    RoughUse,
    Terms,
    Use,
    cover_notes,
    explain_cover,
    offer_terms,
    price_plan,
    rough_prices,
    round_money,
    transfer_hours,
)
from rentopt.optimizer.catalog import OfferSet
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.errors import InputError, NoFeasiblePlan
from rentopt.optimizer.feasibility import Fit, NodeShape, NoFit, Pins, find_layout
from rentopt.optimizer.hardware import get_gpu, resolve_user_gpu
from rentopt.optimizer.memory import activation_scale_for_peak, estimate
from rentopt.optimizer.models import (
    BillingLine,
    GpuSpec,
    Layout,
    LineItems,
    MemoryEstimate,
    ModelSpec,
    Offer,
    Plan,
    PlanStage,
    PriceSource,
    Quote,
    Rejection,
    TokenRate,
    TrainingSetup,
    Work,
)
from rentopt.optimizer.timing import throughput

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

# The default reference for --days: NVIDIA DGX A100 nodes, 8 x A100-SXM-80GB on NVLink/NVSwitch
# and 8 x 200 Gb/s HDR InfiniBand per node (NVIDIA DGX A100 datasheet), the unit behind most
# published "GPU-days" of fine-tuning.
REFERENCE_GPU = "A100-SXM4-80GB"
REFERENCE_FABRIC_GBPS = 1600.0
REFERENCE_MAX_NODES = 64

# Seed 004: "多机训练扩展效率低于70%说明网络有瓶颈" -- scaling efficiency under 70 % means the
# network is the bottleneck; every such plan says so.
LOW_SCALING = 0.70

Objective = Literal["total", "per_token"]


@dataclass(frozen=True)
class GpuFilter:
    """Which GPUs a quote may use (`--gpu`, `--exclude-gpu`, `--min-gpu-memory`, `--gpus`, `--max-nodes`).

    `include` maps a catalog id to a GPU count per node that must match (None: any count).
    """

    include: tuple[tuple[str, int | None], ...] = ()
    exclude: tuple[str, ...] = ()
    min_memory_gb: float | None = None
    gpus_per_node: int | None = None
    max_nodes: int = MAX_NODES

    def reason(self, offer: Offer) -> str | None:
        """Why `offer` is filtered out, or None."""
        if self.include and not any(offer.gpu == g and (n is None or offer.gpus == n) for g, n in self.include):
            wanted = ", ".join(g + (f":{n}" if n else "") for g, n in self.include)
            return f"--gpu {wanted}: this offer is {offer.gpus} x {offer.gpu}"
        if offer.gpu in self.exclude:
            return f"--exclude-gpu {offer.gpu}"
        if self.min_memory_gb is not None and offer.gpu_memory_gb < self.min_memory_gb:
            return f"--min-gpu-memory {self.min_memory_gb:g}: {offer.gpu} has {offer.gpu_memory_gb:g} GB"
        if self.gpus_per_node is not None and offer.gpus != self.gpus_per_node:
            return f"--gpus {self.gpus_per_node}: this offer has {offer.gpus} GPUs per node"
        return None


def parse_gpu_filter(items: Sequence[str]) -> tuple[tuple[str, int | None], ...]:
    """`--gpu H100-SXM-80GB,A100:8` -> ((id, None), (id, 8)); names resolve through the catalog."""
    out: list[tuple[str, int | None]] = []
    for item in items:
        for part in item.split(","):
            name, _, count = part.strip().partition(":")
            if not name.strip():
                continue
            n: int | None = None
            if count.strip():
                if not count.strip().isdigit() or int(count) < 1:
                    raise InputError(f"--gpu {part.strip()!r}: the count after ':' must be a whole number of GPUs")
                n = int(count)
            out.append((resolve_user_gpu(name.strip()).id, n))
    return tuple(out)


@dataclass(frozen=True)
class Reference:
    """A layout the job's --days are measured on: `gpus` x `gpu` per node, `nodes` nodes."""

    gpu: str
    gpus: int
    nodes: int = 1

    @property
    def text(self) -> str:
        return f"{self.gpus * self.nodes} x {self.gpu}" + (f" ({self.nodes} nodes)" if self.nodes > 1 else "")


def parse_reference(spec: str) -> Reference:
    """`--on 8xRTX-4090`, `--on A100-SXM-80GB`, `--on 16xH100-SXM-80GB` (two 8-GPU nodes).

    >>> parse_reference("8xRTX-4090")
    Reference(gpu='RTX-4090-24GB', gpus=8, nodes=1)
    >>> parse_reference("16 x A100-SXM-80GB")
    Reference(gpu='A100-SXM4-80GB', gpus=8, nodes=2)
    """
    text = spec.strip()
    count = 1
    head, sep, rest = text.partition("x")
    if sep and head.strip().isdigit():
        count, text = int(head.strip()), rest.strip()
    if count < 1:
        raise InputError(f"--on {spec!r}: the GPU count must be at least 1")
    gpu = resolve_user_gpu(text)
    per_node = min(count, gpu.max_gpus_per_node)
    if count % per_node:
        raise InputError(f"--on {spec!r}: {count} GPUs do not split into nodes of {per_node}")
    return Reference(gpu.id, per_node, count // per_node)


@dataclass(frozen=True)
class QuoteRequest:
    """What `rentopt quote` was asked. Money amounts are in `currency`.

    Exactly one of `tokens`, `days` (of work on `reference`) and `rent_days` sizes the job.
    """

    model: ModelSpec
    setup: TrainingSetup
    tokens: float | None = None
    days: Decimal | None = None
    reference: Reference | None = None  # --on; None: the default (fewest A100-SXM-80GB)
    rent_days: Decimal | None = None
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
    measured_tokens_per_second: float | None = None
    measured_on: Reference | None = None  # where the measurements were taken (default: the reference)
    measured: MeasuredPeak | None = None  # set by build_quote from measured_peak_gb
    pins: Pins = Pins()
    gpu_filter: GpuFilter = GpuFilter()
    tokens_basis: str = "--tokens"

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.tokens, self.days, self.rent_days)) != 1:
            raise InputError("give exactly one of --tokens (or --epochs with --dataset-tokens), --days or --rent-days")
        if self.reference is not None and self.days is None:
            raise InputError("--on names the layout that --days are measured on; it needs --days")


@dataclass
class _Prepared:
    """Per-quote constants: sizes on disk and the memory scale from a measured peak."""

    train_memory: MemoryEstimate
    validate_setup: TrainingSetup
    activation_scale: float
    disk_gb: Decimal  # base weights + data + kept checkpoints
    validate_disk_gb: Decimal  # base weights + data + one checkpoint
    import_gb: Decimal  # what a fresh instance downloads: base weights + data
    export_gb: Decimal  # final weights + kept checkpoints
    destroy_gb: Decimal  # data + the validation checkpoint, copied out on destroy
    notes: list[str] = field(default_factory=list)


def _gb(x: float) -> Decimal:
    return Decimal(str(round(x, 3)))


def _prepare(req: QuoteRequest) -> _Prepared:
    setup = req.setup
    train_mem = estimate(req.model, setup)
    validate_setup = setup.model_copy(update={"micro_batch": 1})
    notes: list[str] = []
    if req.measured is not None:
        notes.append(req.measured.note)
    files = _gb(train_mem.model_files_gb)
    ckpt = _gb(train_mem.checkpoint_gb)
    keep = Decimal(req.keep_checkpoints)
    final = files if setup.mode == "full" else _gb(train_mem.trainable_params_b * 4)  # PEFT adapters in fp32
    return _Prepared(
        train_memory=train_mem, validate_setup=validate_setup,
        activation_scale=req.measured.scale if req.measured is not None else 1.0,
        disk_gb=files + req.data_gb + keep * ckpt,
        validate_disk_gb=files + req.data_gb + ckpt,
        import_gb=files + req.data_gb,
        export_gb=final + keep * ckpt,
        destroy_gb=req.data_gb + ckpt,
        notes=notes,
    )


@dataclass(frozen=True)
class MeasuredPeak:
    """The activation scale a measured validation peak implies, and where it was measured."""

    scale: float
    note: str


def measured_peak(req: QuoteRequest, layout: Layout, gpu: GpuSpec, where: str) -> MeasuredPeak:
    """Seeds (000, step 2): size the real run from the peak measured in validation.

    The peak is compared with the estimate for the exact layout it was measured on; only the
    activations and transients are rescaled (model states are known exactly).
    """
    from rentopt.optimizer.feasibility import layout_setup

    assert req.measured_peak_gb is not None
    setup = layout_setup(req.setup, layout)
    before = estimate(req.model, setup).device_gb_per_gpu
    scale = activation_scale_for_peak(req.model, setup, req.measured_peak_gb, gpu=gpu)
    return MeasuredPeak(scale, f"memory sized from the measured validation peak {req.measured_peak_gb:g} GB on {where} "
                               f"({layout.strategy}, micro-batch {layout.micro_batch}; the estimate there was "
                               f"{before:g} GB): activations scaled x{scale:.2f}, model states exact")


def _hours(x: float | Decimal) -> Decimal:
    """Hours on a 1e-6 grid, rounded up (never under-bill)."""
    return Decimal(str(x)).quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


def _spot_factor(provider: str, every: Decimal) -> tuple[Decimal, str]:
    cls = PROVIDER_CLASS.get(provider, "marketplace")
    rate = PREEMPTIONS_PER_HOUR[cls]
    lost = every / 2 + RESTART_HOURS
    factor = 1 + rate * lost
    note = (f"spot: assumed {rate} preemptions/h ({cls}); each loses ~{lost} h (half the {every} h checkpoint "
            f"interval + restart), so +{(factor - 1) * 100:.2f} % expected hours")
    return factor, note


# --------------------------------------------------------------------------------------------
# Speed


@dataclass(frozen=True)
class Speed:
    """Tokens per second of a whole layout (all GPUs, all nodes), with the speed model's notes."""

    low: float
    typical: float
    high: float
    scaling: float
    notes: tuple[str, ...] = ()

    def scaled(self, factor: float) -> Speed:
        return replace(self, low=self.low * factor, typical=self.typical * factor, high=self.high * factor)


def speed_of(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec) -> Speed:
    """The speed model (timing.py) for one layout, as a tokens/s range."""
    t = throughput(model, setup, layout, gpu)
    low, typical, high = t.tokens_per_second
    return Speed(low, typical, high, t.scaling_efficiency, t.notes)


def _reference_shape(ref: Reference) -> NodeShape:
    gpu = get_gpu(ref.gpu)
    nvlink = gpu.has_nvlink and gpu.form_factor in ("SXM", "OAM")
    return NodeShape(gpu=gpu, gpus_per_node=ref.gpus, nodes=ref.nodes, interconnect="nvlink" if nvlink else "pcie",
                     fabric="infiniband" if ref.nodes > 1 else None,
                     fabric_gbps=REFERENCE_FABRIC_GBPS if ref.nodes > 1 else None)


def default_reference(model: ModelSpec, setup: TrainingSetup, pins: Pins) -> tuple[Reference, Fit]:
    """The fewest A100-SXM-80GB that hold the job: 1, 2, 4, 8 on one NVLink node, then nodes of 8."""
    options = [Reference(REFERENCE_GPU, n) for n in (1, 2, 4, 8)]
    options += [Reference(REFERENCE_GPU, 8, nodes) for nodes in range(2, REFERENCE_MAX_NODES + 1)]
    for ref in options:
        fit = find_layout(model, setup, _reference_shape(ref), pins=pins)
        if isinstance(fit, Fit):
            return ref, fit
    raise InputError(f"the job does not fit on up to {REFERENCE_MAX_NODES} nodes of 8 x {REFERENCE_GPU}, so --days "
                     "has no reference to be measured on; give the job's size with --tokens")


@dataclass(frozen=True)
class WorkPlan:
    """What the quote asks every plan to do, and why."""

    tokens: float | None  # None: a fixed rental period (each plan does what its speed allows)
    basis: str
    rent_hours: Decimal | None = None
    deadline_hours: Decimal | None = None
    calibration: float = 1.0  # measured / modelled tokens per second
    notes: tuple[str, ...] = ()


def work_plan(req: QuoteRequest, prep: _Prepared) -> WorkPlan:
    notes: list[str] = []
    calibration = 1.0
    measured_on = req.measured_on or req.reference
    if req.measured_tokens_per_second is not None:
        if measured_on is None and req.days is None:
            raise InputError("--measured-tokens-per-second needs --measured-on SPEC (where it was measured) "
                             "unless --days gives a reference layout")
        ref, fit = (measured_on, None) if measured_on else default_reference(req.model, req.setup, req.pins)
        if fit is None:
            fit = find_layout(req.model, req.setup, _reference_shape(ref), pins=req.pins)
            if isinstance(fit, NoFit):
                raise InputError(f"--measured-on {ref.text}: the job does not fit there ({fit.reason})")
        modelled = speed_of(req.model, req.setup, fit.layout, get_gpu(ref.gpu)).typical
        calibration = req.measured_tokens_per_second / modelled
        notes.append(f"speeds calibrated to the measured {req.measured_tokens_per_second:g} tokens/s on {ref.text} "
                     f"(the model said {modelled:,.0f}): every layout's rate x{calibration:.2f}")
    deadline = req.deadline_days * 24 if req.deadline_days is not None else None
    if req.tokens is not None:
        return WorkPlan(req.tokens, req.tokens_basis, deadline_hours=deadline, calibration=calibration, notes=tuple(notes))
    if req.rent_days is not None:
        basis = f"a fixed rental of {req.rent_days.normalize():f} days: each plan does the work its speed allows"
        return WorkPlan(None, basis, rent_hours=req.rent_days * 24, deadline_hours=deadline, calibration=calibration,
                        notes=tuple(notes))
    if req.reference is not None:
        ref = req.reference
        fit = find_layout(req.model, req.setup, _reference_shape(ref), pins=req.pins)
        if isinstance(fit, NoFit):
            raise InputError(f"--on {ref.text}: the job does not fit there ({fit.reason}); pick a layout that holds it")
        where = ref.text
    else:
        ref, fit = default_reference(req.model, req.setup, req.pins)
        where = f"{ref.text} (the fewest {REFERENCE_GPU} that hold the job)"
    speed = speed_of(req.model, req.setup, fit.layout, get_gpu(ref.gpu)).scaled(calibration)
    if req.measured_tokens_per_second is not None and measured_on == ref:
        speed = replace(speed, typical=req.measured_tokens_per_second)
    assert req.days is not None
    hours = req.days * 24
    tokens = speed.typical * float(hours) * 3600
    basis = f"{req.days.normalize():f} days on {ref.text} = {_tokens_text(tokens)} tokens"
    notes.append(f"work: {req.days.normalize():f} days on {where} at {speed.typical:,.0f} tokens/s = "
                 f"{_tokens_text(tokens)} tokens; every plan is priced for those tokens")
    if deadline is None:
        # The reference itself must be a valid plan: the deadline is its own pessimistic finish
        # (training at the slow end of its range, validation, the gap, an hour for moving data),
        # rounded up to whole days.
        slow = Decimal(str(tokens / speed.low / 3600)) + (req.validate_hours or 0) + req.idle_days * 24 + 1
        deadline = (slow / 24).to_integral_value(rounding=ROUND_CEILING) * 24
        notes.append(f"deadline: {(deadline / 24).normalize():f} days, the reference's own finish at the slow end of "
                     f"its speed range (set --deadline-days to change it)")
    return WorkPlan(tokens, basis, deadline_hours=deadline, calibration=calibration, notes=tuple(notes))


def _tokens_text(tokens: float) -> str:
    """
    >>> _tokens_text(1.93e9), _tokens_text(4.5e8), _tokens_text(2.0e12)
    ('1.93 B', '450 M', '2,000 B')
    """
    if tokens >= 1e9:
        return f"{tokens / 1e9:,.3g} B" if tokens < 1e12 else f"{tokens / 1e9:,.0f} B"
    return f"{tokens / 1e6:,.3g} M"


# --------------------------------------------------------------------------------------------
# The plan instance


@dataclass(frozen=True)
class Signature:
    """What a run executes: the thing a validation must match to validate the training job."""

    precision: str
    attention: str
    family: str  # data parallel, zero1/2/3, fsdp, tensor parallel, pipeline
    offload: str

    @classmethod
    def of(cls, layout: Layout) -> Signature:
        if layout.tensor_parallel > 1 or layout.pipeline_parallel > 1:
            family = f"tp{layout.tensor_parallel}+pp{layout.pipeline_parallel}"
        elif layout.fsdp:
            family = "fsdp"
        elif layout.zero:
            family = f"zero{layout.zero}"
        else:
            family = "data-parallel"
        return cls(layout.precision, layout.attention, family, layout.offload)

    def pins(self, base: Pins) -> Pins:
        """Layout pins that make a validation run this family (the same code path, smaller)."""
        if self.family.startswith("zero"):
            return replace(base, zero=int(self.family[4:]), fsdp=None, offload=self.offload)
        if self.family == "fsdp":
            return replace(base, fsdp=True, zero=None, offload=self.offload)
        if self.family.startswith("tp"):
            return replace(base, offload=self.offload)
        return replace(base, zero=0, offload=self.offload)


@dataclass
class Candidate:
    """The planner's view of one solver candidate: its billing use and what its plan prints.

    `use` starts as the first pass's RoughUse (floats, no exact terms); `exact(terms)` makes the
    billing Use for the candidates that survive the rough pruning, with the same quantities.
    """

    use: Use | RoughUse
    offer: Offer
    layout: Layout
    gpu: GpuSpec
    speed: Speed | None  # training
    tokens: float | None
    disk_gb: Decimal
    import_gb: Decimal
    out_gb: Decimal
    hours_low: Decimal | None = None
    hours_high: Decimal | None = None
    notes: tuple[str, ...] = ()
    signature: Signature | None = None

    @property
    def id(self) -> str:
        return self.use.id

    def exact(self, terms: Terms) -> Candidate:
        u = self.use
        if isinstance(u, Use):
            return self
        use = Use(id=u.id, kind=u.kind, terms=terms, spot=u.prices.spot, nodes=u.nodes, hours=u.hours,
                  disk_gb=self.disk_gb, import_gb=self.import_gb, out_gb=self.out_gb, out_hours=u.out_hours)
        return replace(self, use=use)


@dataclass
class Planned:
    """plan_instance's result."""

    instance: Any  # solver.PlanInstance
    candidates: dict[str, Candidate]
    rejected: list[tuple[Offer, str, str]]
    work: WorkPlan
    prep: _Prepared
    closest_memory: str | None = None
    first_pass: dict[str, int] = field(default_factory=dict)  # candidates before / after rough pruning


def _shape(offer: Offer, gpu: GpuSpec, nodes: int) -> NodeShape:
    return NodeShape(gpu=gpu, gpus_per_node=offer.gpus, nodes=nodes, interconnect=offer.interconnect,
                     fabric=offer.fabric, fabric_gbps=offer.fabric_gbps, memory_gb=offer.gpu_memory_gb,
                     host_ram_gb=_ram_key(offer.host_ram_gb))


def _shape_key(offer: Offer, gpu: GpuSpec) -> tuple:
    return (offer.gpu, offer.gpus, offer.interconnect, offer.fabric, offer.fabric_gbps, _memory_key(offer, gpu),
            _ram_key(offer.host_ram_gb))


class _Planner:
    def __init__(self, req: QuoteRequest, offers: Sequence[Offer], fx: FxTable, first_pass: bool = True):
        self.req, self.offers, self.fx, self.first_pass = req, offers, fx, first_pass
        self.prep = _prepare(req)
        self.work = work_plan(req, self.prep)
        self._fits: dict[tuple, Fit | NoFit] = {}
        self._speeds: dict[tuple, Speed] = {}
        self.rejected: list[tuple[Offer, str, str]] = []
        self.closest: tuple[float, str] | None = None

    def layout(self, setup: TrainingSetup, offer: Offer, gpu: GpuSpec, nodes: int, pins: Pins, key: tuple) -> Fit | NoFit:
        """The layout for a node shape, memoised: a 10,000-offer catalog has a few hundred shapes."""
        found = self._fits.get(key)
        if found is None:
            found = find_layout(self.req.model, setup, _shape(offer, gpu, nodes), pins=pins,
                                activation_scale=self.prep.activation_scale)
            self._fits[key] = found
        return found

    def speed(self, fit: Fit, gpu: GpuSpec, key: tuple) -> Speed:
        found = self._speeds.get(key)
        if found is None:
            found = speed_of(self.req.model, self.req.setup, fit.layout, gpu).scaled(self.work.calibration)
            self._speeds[key] = found
        return found

    def _miss(self, offer: Offer, miss: NoFit) -> None:
        self.rejected.append((offer, miss.constraint, miss.reason))
        if miss.overshoot is not None and (self.closest is None or miss.overshoot < self.closest[0]):
            self.closest = (miss.overshoot, f"{offer.provider}/{offer.offer_id} ({offer.gpus} x {offer.gpu}): {miss.reason}")

    def build(self) -> Planned:
        """Rough candidates for every offer, rough pruning, exact terms for the survivors."""
        from rentopt.optimizer.solver import prune

        req, work = self.req, self.work
        ccy = req.currency
        kinds_wanted = (False, True) if req.spot else (False,)
        train: list[Candidate] = []
        usable: list[tuple[Offer, GpuSpec, dict[bool, RoughPrices]]] = []
        for o in self.offers:
            if o.gpu is None:
                self.rejected.append((o, "gpu", f"GPU {o.gpu_raw!r} is {o.gpu_status} in the catalog: its memory "
                                                "and speed cannot be checked (kept, not guessed)"))
                continue
            if (why := req.gpu_filter.reason(o)) is not None:
                self.rejected.append((o, "gpu", why))
                continue
            prices = {k: p for k in kinds_wanted if (p := rough_prices(o, self.fx, ccy, k)) is not None}
            if not prices:
                self.rejected.append((o, "price", "spot-only offer: add --spot to consider interruptible prices"
                                      if o.spot else "no price option of the requested kind"))
                continue
            gpu = get_gpu(o.gpu)
            usable.append((o, gpu, prices))
            train += self._train_candidates(o, gpu, prices)
        validate: list[Candidate] = []
        if req.validate_hours is not None and train:
            validate = self._validate_candidates(usable, {c.signature for c in train})  # type: ignore[misc]
        keep = {c.id for c in (*train, *validate)}
        if self.first_pass:
            kept = prune(self._instance(train, validate), req.top)
            if kept.train:  # else nothing meets the deadline or budget: price everything for the diagnosis
                keep = {c.id for c in (*kept.train, *kept.validate)}
        terms: dict[tuple[str, str], Terms] = {}
        exact: dict[str, Candidate] = {}
        for c in (*train, *validate):
            if c.id in keep:
                t = terms.get(c.offer.key)
                if t is None:
                    t = terms[c.offer.key] = offer_terms(c.offer, self.fx, ccy)
                exact[c.id] = c.exact(t)
        ex_train = [c for c in train if c.id in exact]
        ex_validate = [c for c in validate if c.id in exact]
        instance = self._instance([exact[c.id] for c in ex_train], [exact[c.id] for c in ex_validate])
        first = {"candidates": len(train) + len(validate), "after rough pruning": len(exact)}
        return Planned(instance, exact, self.rejected, work, self.prep, self.closest[1] if self.closest else None, first)

    def _instance(self, train: list[Candidate], validate: list[Candidate]):  # type: ignore[no-untyped-def]
        from rentopt.optimizer.solver import Candidate as SolverCandidate
        from rentopt.optimizer.solver import PlanInstance

        req, work = self.req, self.work
        return PlanInstance(
            validate=tuple(SolverCandidate(c.use, wall_hours=c.use.hours, signature=_v_keys(c)) for c in validate),
            train=tuple(self._solver_train(train, validate)), idle_hours=req.idle_days * 24,
            deadline_hours=work.deadline_hours, budget=req.budget, currency=req.currency,
            rank_by="per_token" if work.tokens is None else "total",
        )

    # -- training ------------------------------------------------------------------------------

    def _train_candidates(self, o: Offer, gpu: GpuSpec, prices: dict[bool, RoughPrices]) -> list[Candidate]:
        req, prep, work = self.req, self.prep, self.work
        out: list[Candidate] = []
        import_h = transfer_hours(prep.import_gb, o.net_down_mbps or DEFAULT_MBPS) or Decimal(0)
        export_h = transfer_hours(prep.export_gb, o.net_up_mbps or DEFAULT_MBPS) or Decimal(0)
        shape = _shape_key(o, gpu)
        first_miss: NoFit | None = None
        any_fit = False
        disk, imp, out_gb = float(prep.disk_gb), float(prep.import_gb), float(prep.export_gb)
        for nodes in range(1, min(o.nodes_available, req.gpu_filter.max_nodes, MAX_NODES) + 1):
            fit = self.layout(req.setup, o, gpu, nodes, req.pins, ("t", *shape, nodes))
            if isinstance(fit, NoFit):
                first_miss = first_miss or fit
                continue
            any_fit = True
            speed = self.speed(fit, gpu, (*shape, nodes))
            for spot, price in prices.items():
                factor = _spot_factor(o.provider, req.checkpoint_every_hours)[0] if spot else Decimal(1)
                if work.tokens is not None:
                    run, low, high = (Decimal(str(work.tokens / rate / 3600)) * factor
                                      for rate in (speed.typical, speed.high, speed.low))
                    tokens = work.tokens
                else:
                    run = low = high = work.rent_hours  # type: ignore[assignment]
                    tokens = speed.typical * float(run) * 3600 / float(factor)
                hours = _hours(import_h + run + export_h)
                if o.max_duration_hours is not None and hours > Decimal(str(o.max_duration_hours)):
                    self.rejected.append((o, "max_duration", f"needs {hours:.1f} h of rental on {nodes} node(s); the "
                                                             f"host allows at most {o.max_duration_hours:.1f} h"))
                    continue
                notes = list(speed.notes)
                if spot:
                    notes.append(_spot_factor(o.provider, req.checkpoint_every_hours)[1])
                notes += fit.layout.plan_notes
                if o.extra.get("gpu_note"):
                    notes.append(str(o.extra["gpu_note"]))
                if (nodes > 1 or o.gpus > 1) and speed.scaling < LOW_SCALING:
                    notes.append(f"scaling efficiency {speed.scaling:.0%} over {nodes * o.gpus} GPUs is under 70 %: "
                                 "the interconnect is the bottleneck (a cheaper layout may do the same work)")
                use = RoughUse(f"t:{o.provider}:{o.offer_id}:{nodes}:{int(spot)}", "train", price, nodes, hours,
                               disk, imp, out_gb)
                out.append(Candidate(use, o, fit.layout, gpu, speed, tokens, prep.disk_gb, prep.import_gb,
                                     prep.export_gb, _hours(import_h + low + export_h),
                                     _hours(import_h + high + export_h), tuple(notes), Signature.of(fit.layout)))
        if not any_fit and first_miss is not None:
            self._miss(o, first_miss)
        return out

    # -- validation ----------------------------------------------------------------------------

    def _validate_candidates(self, usable, signatures: set[Signature]) -> list[Candidate]:  # type: ignore[no-untyped-def]
        """For each offer and each training signature: the same job at micro-batch 1 on one node."""
        req, prep = self.req, self.prep
        out: list[Candidate] = []
        disk, imp, out_gb = float(prep.validate_disk_gb), float(prep.import_gb), float(prep.destroy_gb)
        ordered = sorted(signatures, key=repr)
        for o, gpu, prices in usable:
            import_h = transfer_hours(prep.import_gb, o.net_down_mbps or DEFAULT_MBPS) or Decimal(0)
            out_h = transfer_hours(prep.destroy_gb, o.net_up_mbps or DEFAULT_MBPS) or Decimal(0)
            hours = _hours(req.validate_hours + import_h)  # type: ignore[operator]
            if o.max_duration_hours is not None and hours + out_h > Decimal(str(o.max_duration_hours)):
                continue
            for n, sig in enumerate(ordered):
                setup = prep.validate_setup.model_copy(update={
                    "precision": sig.precision, "flash_attention": sig.attention.startswith("flash")})
                key = ("v", *_shape_key(o, gpu), sig)
                fit = self.layout(setup, o, gpu, 1, sig.pins(req.pins), key)
                if isinstance(fit, NoFit) or Signature.of(fit.layout) != sig:
                    continue
                for spot, price in prices.items():
                    use = RoughUse(f"v:{o.provider}:{o.offer_id}:{int(spot)}:{n}", "validate", price, 1, hours, disk,
                                   imp, out_gb, out_h)
                    out.append(Candidate(use, o, fit.layout, gpu, None, None, prep.validate_disk_gb, prep.import_gb,
                                         prep.destroy_gb, signature=sig))
        return out

    def _solver_train(self, train: list[Candidate], validate: list[Candidate]):  # type: ignore[no-untyped-def]
        """Training candidates for the solver, each requiring the validation that fits it best:
        the same GPU model when some offer validates it, else the same architecture."""
        from rentopt.optimizer.solver import Candidate as SolverCandidate

        models = {(c.gpu.id, c.signature) for c in validate}
        out = []
        for c in train:
            sig = (c.gpu.id, c.signature) if (c.gpu.id, c.signature) in models or not validate else \
                ("arch:" + c.gpu.architecture, c.signature)
            out.append(SolverCandidate(c.use, group=(c.offer.provider, c.gpu.id), wall_hours=c.hours_high,
                                       signature=sig, tokens=Decimal(str(c.tokens)) if c.tokens else None))
        return out


def _v_keys(c: Candidate) -> frozenset:
    return frozenset({(c.gpu.id, c.signature), ("arch:" + c.gpu.architecture, c.signature)})


def plan_instance(req: QuoteRequest, offers: Sequence[Offer], fx: FxTable, *, first_pass: bool = True) -> Planned:
    """The solver's instance for `req` over `offers` (full offers: no I/O happens here).

    `first_pass=False` skips the rough pruning and gives every candidate exact terms (for tests
    that check the first pass against everything it could have kept).
    """
    fx.rate(req.currency)  # an unknown quote currency is an input error before any work
    return _Planner(req, offers, fx, first_pass).build()


def _memory_key(o: Offer, gpu: GpuSpec) -> float | None:
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


# --------------------------------------------------------------------------------------------
# The quote


def rejections(planned: Planned) -> list[Rejection]:
    return [Rejection(provider=o.provider, offer_id=o.offer_id, gpu=o.gpu or o.gpu_raw, constraint=c,  # type: ignore[arg-type]
                      reason=why) for o, c, why in planned.rejected]


def _no_candidates(planned: Planned, req: QuoteRequest, offer_count: int) -> NoFeasiblePlan:
    counts: dict[str, int] = {}
    for _, constraint, _ in planned.rejected:
        counts[constraint] = counts.get(constraint, 0) + 1
    parts = [f"{n} offer{'s' if n > 1 else ''} by {c}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    reasons = [f"all {offer_count} offers were rejected: " + ", ".join(parts)] if parts else ["no offers to plan with"]
    if planned.closest_memory:
        reasons.append(f"closest miss: {planned.closest_memory}")
    if req.setup.mode == "full":
        reasons.append("try --mode lora/qlora, gradient checkpointing, a shorter --seq-len, or more GPUs")
    message = "No feasible plan: " + "; ".join(reasons) + ". Run with --explain to see every rejection."
    return NoFeasiblePlan(message, reasons)


def build_quote(req: QuoteRequest, offers: OfferSet, fx: FxTable, *, list_rejected: bool = True) -> Quote:
    """Plan the job over `offers`; raises NoFeasiblePlan (exit 3) when nothing fits.

    `list_rejected=False` leaves `Quote.rejected` empty and only counts them in
    `rejected_count` (a table without --explain does not need 10,000 rejection records).
    """
    from rentopt.optimizer.solver import solve

    all_offers = offers.all_offers()
    if req.measured_peak_gb is not None and req.measured is None:
        req = replace(req, measured=_peak_scale(req, all_offers, fx))
    planned = plan_instance(req, all_offers, fx)
    inst = planned.instance
    if not inst.train:
        raise _no_candidates(planned, req, len(all_offers))
    try:
        solution = solve(inst, top_k=req.top)
    except NoFeasiblePlan as exc:
        raise NoFeasiblePlan(str(exc) + " Run with --explain to see rejected offers.", exc.reasons) from None
    plans = [_plan(rank, bill, planned, offers) for rank, bill in enumerate(solution.plans, start=1)]
    used = [planned.candidates[uid].offer for b in solution.plans for uid in (b.choice.train, b.choice.validate) if uid]
    prep = planned.prep
    assumptions = list(prep.train_memory.assumptions[:1]) + prep.notes + list(planned.work.notes)
    assumptions.append(f"disk {prep.disk_gb} GB = base weights + {req.data_gb} GB data + "
                       f"{req.keep_checkpoints} checkpoints of {_gb(prep.train_memory.checkpoint_gb)} GB")
    dated = [(o.currency, o.fetched_at) for o in used]
    assumptions += fx.old_rate_warnings(dated, req.currency)
    return Quote(
        currency=req.currency, prices_as_of=min(o.fetched_at for o in used), price_origin=offers.origin,
        work=Work(tokens=planned.work.tokens, basis=planned.work.basis,
                  deadline_hours=planned.work.deadline_hours),
        fx=fx.rates_used(dated, to_ccy=req.currency), plans=plans,
        rejected=rejections(planned) if list_rejected else [], rejected_count=len(planned.rejected),
        memory=prep.train_memory, assumptions=assumptions,
        sources=offers.price_sources(), source_notes=list(offers.notes),
    )


def _peak_scale(req: QuoteRequest, offers: Sequence[Offer], fx: FxTable) -> MeasuredPeak:
    """The activation scale of a measured peak: on `--measured-on SPEC` when given, else on the
    validation layout the quote prescribes without the measurement (its #1 plan's validation
    stage, or its training stage when the quote has no validation)."""
    from rentopt.optimizer.solver import solve

    validate_setup = req.setup.model_copy(update={"micro_batch": 1})
    if req.measured_on is not None:
        ref = req.measured_on
        fit = find_layout(req.model, validate_setup, _reference_shape(ref), pins=req.pins)
        if isinstance(fit, NoFit):
            raise InputError(f"--measured-on {ref.text}: the validation job does not fit there ({fit.reason})")
        return measured_peak(req, fit.layout, get_gpu(ref.gpu), ref.text)
    plain = plan_instance(replace(req, measured_peak_gb=None, top=1), offers, fx)
    if not plain.instance.train:
        raise _no_candidates(plain, req, len(offers))
    [bill] = solve(plain.instance, top_k=1).plans
    c = plain.candidates[bill.choice.validate or bill.choice.train]
    where = f"{c.use.nodes * c.offer.gpus} x {c.gpu.id} ({c.offer.provider}/{c.offer.offer_id}, the quote's validation)"
    return measured_peak(req, c.layout, c.gpu, where)


def _money_lines(stage_bill) -> list[BillingLine]:  # type: ignore[no-untyped-def]
    return [BillingLine(unit=ln.unit, count=ln.count, unit_price=ln.unit_price, cost=ln.cost, what=ln.what,
                        note=ln.note) for ln in stage_bill.lines]


def _stage(kind: str, c: Candidate, bill, hours: Decimal, layout: str, gpus: int | None = None,  # type: ignore[no-untyped-def]
           notes: Sequence[str] = ()) -> PlanStage:
    return PlanStage(kind=kind, provider=c.offer.provider, offer_id=c.offer.offer_id, gpu=c.gpu.id,  # type: ignore[arg-type]
                     gpus=c.use.nodes * c.offer.gpus if gpus is None else gpus, nodes=c.use.nodes, layout=layout,
                     hours=hours, billing=_money_lines(bill), cost=bill.cost, unknown_charges=list(bill.unknown),
                     precision=c.layout.precision if gpus is None else None,
                     attention=c.layout.attention if gpus is None else None, notes=list(notes))


def _plan(rank: int, bill: PlanBill, planned: Planned, offers: OfferSet) -> Plan:
    ccy = planned.instance.currency
    inst = planned.instance
    cands = planned.candidates
    t = cands[bill.choice.train]
    v = cands[bill.choice.validate] if bill.choice.validate else None
    stages: list[PlanStage] = []
    notes: list[str] = []
    idle_h = inst.idle_hours
    if v is not None:
        vb = bill.stage("validate")
        ib = bill.stage("idle")
        v_hours = v.use.hours + (v.use.out_hours if bill.choice.idle == "destroy" else 0)
        stages.append(_stage("validate", v, vb, v_hours, v.layout.strategy))
        idle_label = {"continue": "training continues on this instance", "stop": "stopped (instance kept)",
                      "destroy": "copied out and destroyed"}[bill.choice.idle]  # type: ignore[index]
        stages.append(_stage("idle", v, ib, idle_h, idle_label, gpus=0, notes=ib.notes))
        notes.append(_validation_reason(v, t))
        notes.append(_idle_reason(bill, v, t, ccy, idle_h))
        notes += [f"{v.offer.provider}/{v.offer.offer_id}: {n}" for n in v.notes]
    tb, eb = bill.stage("train"), bill.stage("export")
    export_h = transfer_hours(planned.prep.export_gb, t.offer.net_up_mbps or DEFAULT_MBPS) or Decimal(0)
    stages.append(_stage("train", t, tb, t.use.hours, t.layout.strategy))
    stages.append(_stage("export", t, eb, export_h, "copy out, verify, destroy", gpus=0))
    if bill.choice.idle not in ("stop", "continue"):
        notes.append(f"train compute: {explain_cover(t.use.pricing, t.use.hours, ccy)}"
                     + (f" per node, {t.use.nodes} nodes" if t.use.nodes > 1 else ""))
        notes += cover_notes(t.use.pricing, t.use.hours, ccy, t.use.nodes)
    elif v is not None:
        billed_gap = idle_h if t.use.terms.stopped_bills == "everything" else Decimal(0)
        notes += cover_notes(t.use.pricing, v.use.hours + billed_gap + t.use.hours, ccy)
    if not t.offer.net_down_mbps or not t.offer.net_up_mbps:
        notes.append(f"transfer speed not stated: assumed {DEFAULT_MBPS:g} Mbit/s")
    notes += [f"{t.offer.provider}/{t.offer.offer_id}: {n}" for n in t.notes]
    if t.offer.price_locked:
        notes.append(f"{t.offer.provider}: the hourly price is locked at order time until destroy")
    if t.offer.max_duration_hours:
        notes.append(f"host maximum rental: {t.offer.max_duration_hours:.0f} h")
    chosen = [t.offer] + ([v.offer] if v else [])
    prices = []
    for o in {o.key: o for o in chosen}.values():
        prov = offers.provenance.get(o.provider)
        prices.append(PriceSource(provider=o.provider, source=o.source, fetched_at=o.fetched_at,
                                  origin=prov.origin if prov else offers.origin, stale=bool(prov and prov.stale)))
    total_low, total_high = _range_totals(bill, planned, t)
    tokens = Decimal(str(t.tokens)) if t.tokens is not None else None
    speed = t.speed
    li = bill.line_items()
    return Plan(
        rank=rank, total=bill.total, currency=ccy, stages=stages, line_items=LineItems(**li),
        unknown_charges=list(bill.unknown), idle=bill.choice.idle,
        hours=bill.wall_hours, hours_low=_wall(bill, v, t.hours_low, idle_h), hours_high=_wall(bill, v, t.hours_high, idle_h),
        total_low=total_low, total_high=total_high, tokens=tokens,
        tokens_per_second=TokenRate(low=speed.low, typical=speed.typical, high=speed.high) if speed else None,
        cost_per_billion_tokens=round_money(bill.total / tokens * Decimal(10**9), ccy) if tokens else None,
        scaling_efficiency=speed.scaling if speed else None,
        prices=prices, notes=list(dict.fromkeys(n for n in notes if n)),
        idle_alternative=_alternative(bill, ccy),
    )


def _wall(bill: PlanBill, v: Candidate | None, train_hours: Decimal | None, idle_h: Decimal) -> Decimal | None:
    if train_hours is None:
        return None
    if v is None:
        return train_hours
    return v.use.hours + (v.use.out_hours if bill.choice.idle == "destroy" else 0) + idle_h + train_hours


def _range_totals(bill: PlanBill, planned: Planned, t: Candidate) -> tuple[Decimal | None, Decimal | None]:
    """The same plan priced at the fast and the slow end of the training time's range."""
    if t.hours_low is None or t.hours_high is None or t.hours_low == t.hours_high:
        return None, None
    uses = planned.instance.uses
    out = []
    for hours in (t.hours_low, t.hours_high):
        changed = dict(uses)
        changed[t.use.id] = replace(t.use, hours=hours)
        try:
            out.append(price_plan(bill.choice, changed, planned.instance.idle_hours).total)
        except ValueError:  # the slow end no longer fits the host's maximum rental: no figure
            out.append(None)
    return out[0], out[1]


def _alternative(bill: PlanBill, ccy: str) -> str | None:
    alt = bill.alternative
    if alt is None:
        return None
    unknown = f" + unknown {', '.join(alt.unknown)}" if alt.unknown else ""
    tail = f"; {alt.break_even}" if alt.break_even else ""
    return f"{alt.idle}: {round_money(alt.total, ccy)} {ccy}{unknown}{tail}"


def _validation_reason(v: Candidate, t: Candidate) -> str:
    if v.offer.key == t.offer.key:
        where = "on the training instance itself"
    elif v.gpu.id == t.gpu.id:
        where = f"on {v.offer.gpus} x {v.gpu.id}: the training GPU model, the cheapest instance that holds the job"
    else:
        where = (f"on {v.offer.gpus} x {v.gpu.id}: no offer of {t.gpu.id} holds the validation run, so a GPU of the "
                 f"same architecture ({t.gpu.architecture})")
    return (f"validation runs the training job ({t.layout.precision}, {t.layout.attention}, {v.layout.strategy}) at "
            f"micro-batch 1 {where}")


def _idle_reason(bill: PlanBill, v: Candidate, t: Candidate, ccy: str, idle_hours: Decimal) -> str:
    same = v.offer.key == t.offer.key and v.use.spot == t.use.spot
    if bill.choice.idle == "continue":
        return "no idle gap: training continues on the validation instance (one rental, no re-import)"
    if bill.choice.idle == "stop":
        gap = bill.stage("idle")
        cost = f"{round_money(gap.cost, ccy)} {ccy}" if gap else "nothing"
        unknown = " + unknown charges" if gap and gap.unknown else ""
        return f"idle: stop the instance for the gap ({cost}{unknown}), then train on it (one rental, no re-import)"
    if not same:
        return "idle: destroy the validation instance (training uses another offer) after copying data and checkpoints out"
    from rentopt.optimizer.billing import lease_refusal

    why = lease_refusal(v.use, t.use, idle_hours)
    return "idle: destroy after copying out" + (f" ({why})" if why else ": cheaper than keeping the instance stopped")
