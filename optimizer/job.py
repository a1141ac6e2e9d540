"""The job a quote prices: what `rentopt quote` was asked, the job's sizes on disk, and its work.

Plans are compared for the same job, in tokens (principle 1: price the work, not the rental):
- `--tokens T` (or epochs x dataset tokens) is the job;
- `--days D` means "the job takes D days on a reference layout" (`--on`, by default the fewest
  A100-SXM-80GB GPUs that hold it: the field's unit of GPU-days); the speed model turns that
  into tokens, printed as an assumption;
- `--rent-days D` is a fixed rental period: every plan trains D days, does the work its speed
  allows, and plans are ranked by cost per token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from decimal import ROUND_CEILING, Decimal

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.feasibility import Fit, NodeShape, NoFit, Pins, default_interconnect, find_layout, layout_setup
from rentopt.optimizer.hardware import get_gpu, read_user_gpu, resolve_user_gpu
from rentopt.optimizer.memory import activation_scale_for_peak, estimate
from rentopt.optimizer.models import GpuSpec, Layout, MemoryEstimate, ModelSpec, TrainingSetup
from rentopt.optimizer.timing import throughput

# A job is planned on at most this many nodes of one offer (larger clusters are negotiated,
# not rented from a catalog).
MAX_NODES = 8

# The default reference for --days: NVIDIA DGX A100 nodes, 8 x A100-SXM-80GB on NVLink/NVSwitch
# and 8 x 200 Gb/s HDR InfiniBand per node (NVIDIA DGX A100 datasheet), the unit behind most
# published "GPU-days" of fine-tuning.
REFERENCE_GPU = "A100-SXM4-80GB"
REFERENCE_FABRIC_GBPS = 1600.0
REFERENCE_MAX_NODES = 64


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

    def reason_for(self, gpu: str, gpus: int, memory_gb: float) -> str | None:
        """Why an offer of `gpus` x `gpu` with `memory_gb` per GPU is filtered out, or None."""
        if self.include and not any(gpu == g and (n is None or gpus == n) for g, n in self.include):
            wanted = ", ".join(g + (f":{n}" if n else "") for g, n in self.include)
            return f"--gpu {wanted}: this offer is {gpus} x {gpu}"
        if gpu in self.exclude:
            return f"--exclude-gpu {gpu}"
        if self.min_memory_gb is not None and memory_gb < self.min_memory_gb:
            return f"--min-gpu-memory {self.min_memory_gb:g}: {gpu} has {memory_gb:g} GB"
        if self.gpus_per_node is not None and gpus != self.gpus_per_node:
            return f"--gpus {self.gpus_per_node}: this offer has {gpus} GPUs per node"
        return None


def _gpu_filter_names(items: Sequence[str]) -> list[str]:
    return [part.strip().partition(":")[0].strip() for item in items for part in item.split(",")
            if part.strip().partition(":")[0].strip()]


def _reference_name(spec: str) -> str:
    head, sep, rest = spec.strip().partition("x")
    return rest.strip() if sep and head.strip().isdigit() else spec.strip()


def gpu_name_notes(filters: Sequence[str], references: Sequence[str | None]) -> list[str]:
    """The assumption lines of the GPU names a quote was given (--gpu and --exclude-gpu lists,
    --on and --measured-on specs): how each bare name was read (hardware.read_user_gpu)."""
    names = _gpu_filter_names(filters) + [_reference_name(r) for r in references if r]
    notes = [read_user_gpu(name)[1] for name in dict.fromkeys(names)]
    return list(dict.fromkeys(n for n in notes if n))


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
    allow_suspect: bool = False  # plan with suspect prices too (optimizer/suspect.py)
    checkpoint_every_hours: Decimal = Decimal(1)  # seed 000: at least hourly if an hour is all you can lose
    measured_peak_gb: float | None = None
    measured_tokens_per_second: float | None = None
    measured_on: Reference | None = None  # where the measurements were taken (default: the reference)
    measured: MeasuredPeak | None = None  # set by build_quote from measured_peak_gb
    pins: Pins = Pins()
    gpu_filter: GpuFilter = GpuFilter()
    tokens_basis: str = "--tokens"
    # True: `validate_hours` is worked out from the job (sized_validation), not given by the user
    validate_sized: bool = False
    assumptions: tuple[str, ...] = ()  # how the request was read (a bare GPU name's variant), for the quote

    def __post_init__(self) -> None:
        if sum(x is not None for x in (self.tokens, self.days, self.rent_days)) != 1:
            raise InputError("give exactly one of --tokens (or --epochs with --dataset-tokens), --days or --rent-days")
        if self.reference is not None and self.days is None:
            raise InputError("--on names the layout that --days are measured on; it needs --days")


@dataclass
class Prepared:
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


def rounded_gb(x: float) -> Decimal:
    """A size in GB as the quote states it: a Decimal to the MB."""
    return Decimal(str(round(x, 3)))


def prepare(req: QuoteRequest) -> Prepared:
    """The job's memory estimate, validation setup and sizes on disk and on the wire."""
    setup = req.setup
    train_mem = estimate(req.model, setup)
    validate_setup = setup.model_copy(update={"micro_batch": 1})
    notes: list[str] = []
    if req.measured is not None:
        notes.append(req.measured.note)
    files = rounded_gb(train_mem.model_files_gb)
    ckpt = rounded_gb(train_mem.checkpoint_gb)
    keep = Decimal(req.keep_checkpoints)
    final = files if setup.mode == "full" else rounded_gb(train_mem.trainable_params_b * 4)  # PEFT adapters in fp32
    return Prepared(
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
    assert req.measured_peak_gb is not None
    setup = layout_setup(req.setup, layout)
    before = estimate(req.model, setup).device_gb_per_gpu
    scale = activation_scale_for_peak(req.model, setup, req.measured_peak_gb, gpu=gpu)
    return MeasuredPeak(scale, f"memory sized from the measured validation peak {req.measured_peak_gb:g} GB on {where} "
                               f"({layout.strategy}, micro-batch {layout.micro_batch}; the estimate there was "
                               f"{before:g} GB): activations scaled x{scale:.2f}, model states exact")


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


def reference_shape(ref: Reference) -> NodeShape:
    """One node of `ref`: its GPUs on their usual interconnect, nodes joined by the reference fabric."""
    gpu = get_gpu(ref.gpu)
    return NodeShape(gpu=gpu, gpus_per_node=ref.gpus, nodes=ref.nodes, interconnect=default_interconnect(gpu),
                     fabric="infiniband" if ref.nodes > 1 else None,
                     fabric_gbps=REFERENCE_FABRIC_GBPS if ref.nodes > 1 else None)


def default_reference(model: ModelSpec, setup: TrainingSetup, pins: Pins) -> tuple[Reference, Fit]:
    """The fewest A100-SXM-80GB that hold the job: 1, 2, 4, 8 on one NVLink node, then nodes of 8."""
    options = [Reference(REFERENCE_GPU, n) for n in (1, 2, 4, 8)]
    options += [Reference(REFERENCE_GPU, 8, nodes) for nodes in range(2, REFERENCE_MAX_NODES + 1)]
    for ref in options:
        fit = find_layout(model, setup, reference_shape(ref), pins=pins)
        if isinstance(fit, Fit):
            return ref, fit
    raise InputError(f"the job does not fit on up to {REFERENCE_MAX_NODES} nodes of 8 x {REFERENCE_GPU}, so --days "
                     "has no reference to be measured on; give the job's size with --tokens")


# Validation sized to the job (`--validate-hours` not given): a share of the training time,
# never less than what loading the model and reaching steady memory and speed take, never more
# than the long-standing 4 h default. Memory peaks by the first optimizer step and throughput
# settles after the warm-up steps (CUDA graph/cuDNN autotuning, the data loader filling its
# queue); 100 steps at micro-batch 1 covers both with room, and loading a 70B checkpoint from
# local disk takes minutes, so the floor is half an hour.
VALIDATE_SHARE = Decimal("0.10")
VALIDATE_MIN_STEPS = 100
VALIDATE_MIN_HOURS = Decimal("0.5")
VALIDATE_MAX_HOURS = Decimal(4)


def sized_validation(req: QuoteRequest) -> tuple[Decimal, str]:
    """The validation run's length when the user did not give one, and the sentence that says why.

    The share is of the training time on the --days reference (for --tokens: on the default
    reference, the fewest A100-SXM-80GB that hold the job; for --rent-days: the rental).
    """
    if req.rent_days is not None:
        train_hours, where = req.rent_days * 24, "the rental"
        step_rate: float | None = None
    else:
        if req.reference is not None:
            ref = req.reference
            fit = find_layout(req.model, req.setup, reference_shape(ref), pins=req.pins)
            if isinstance(fit, NoFit):
                raise InputError(f"--on {ref.text}: the job does not fit there ({fit.reason}); pick a layout that holds it")
        else:
            ref, fit = default_reference(req.model, req.setup, req.pins)
        rate = speed_of(req.model, req.setup, fit.layout, get_gpu(ref.gpu)).typical
        if req.tokens is not None:
            tokens = req.tokens
        else:
            assert req.days is not None  # QuoteRequest holds exactly one of tokens, days and rent_days
            tokens = rate * float(req.days * 24) * 3600
        train_hours = Decimal(str(tokens / rate / 3600))
        where = f"training on {ref.text}"
        # one micro-batch-1 step per GPU of the reference moves seq_len tokens on each
        step_rate = rate / (ref.gpus * ref.nodes)
    steps_hours = (Decimal(str(VALIDATE_MIN_STEPS * req.setup.seq_len / step_rate / 3600))
                   if step_rate else Decimal(0))
    floor = max(VALIDATE_MIN_HOURS, steps_hours)
    share = train_hours * VALIDATE_SHARE
    hours = min(VALIDATE_MAX_HOURS, max(floor, share)).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
    if share >= VALIDATE_MAX_HOURS:
        why = f"the {VALIDATE_MAX_HOURS} h cap (10 % of the {_hours_text(train_hours)} h of {where} would be more)"
    elif share >= floor:
        why = f"10 % of the {_hours_text(train_hours)} h of {where}"
    else:
        why = (f"the least that loads the model and runs {VALIDATE_MIN_STEPS} steps to steady memory and speed "
               f"(10 % of the {_hours_text(train_hours)} h of {where} would be less)")
    return hours, f"validation: {_hours_text(hours)} h, {why}; --validate-hours sets it, --no-validate skips it"


def _hours_text(hours: Decimal) -> str:
    """
    >>> _hours_text(Decimal("0.5")), _hours_text(Decimal("240.0833"))
    ('0.50', '240.08')
    """
    return f"{hours.quantize(Decimal('0.01')):,}"


@dataclass(frozen=True)
class WorkPlan:
    """What the quote asks every plan to do, and why."""

    tokens: float | None  # None: a fixed rental period (each plan does what its speed allows)
    basis: str
    rent_hours: Decimal | None = None
    deadline_hours: Decimal | None = None
    calibration: float = 1.0  # measured / modelled tokens per second
    notes: tuple[str, ...] = ()


def work_plan(req: QuoteRequest, prep: Prepared) -> WorkPlan:
    """The work every plan is priced for (tokens or a rental period), its deadline and the speed calibration."""
    notes: list[str] = []
    calibration = 1.0
    measured_on = req.measured_on or req.reference
    if req.measured_tokens_per_second is not None:
        if measured_on is None and req.days is None:
            raise InputError("--measured-tokens-per-second needs --measured-on SPEC (where it was measured) "
                             "unless --days gives a reference layout")
        ref, fit = (measured_on, None) if measured_on else default_reference(req.model, req.setup, req.pins)
        if fit is None:
            fit = find_layout(req.model, req.setup, reference_shape(ref), pins=req.pins)
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
        fit = find_layout(req.model, req.setup, reference_shape(ref), pins=req.pins)
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
    days = f"{req.days.normalize():f} day{'' if req.days == 1 else 's'}"
    basis = f"{days} on {ref.text} = {_tokens_text(tokens)} tokens"
    notes.append(f"work: {days} on {where} at {speed.typical:,.0f} tokens/s = "
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


def with_sized_validation(req: QuoteRequest) -> QuoteRequest:
    """`req` with its validation length worked out (once) when the user did not give one."""
    if not req.validate_sized or req.validate_hours is None:
        return req
    hours, _ = sized_validation(req)
    return replace(req, validate_hours=hours, validate_sized=False)
