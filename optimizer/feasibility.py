"""Which parallel layout fits a job on a node shape, cheapest rung first, or why none does.

The ladder follows the seeds (000: the OOM ladder; 002: DP/TP/PP/ZeRO and when each needs
NVLink; 004: multi-node needs IB >= 200G):

1. plain data parallel when the whole training state fits one GPU (fine on PCIe);
2. ZeRO-1, ZeRO-2, ZeRO-3 over the data-parallel group (FSDP when asked for);
3. tensor parallel, only inside an NVLink node;
4. pipeline parallel across nodes;
5. CPU offload last.

Sharded training across PCIe-only cards (consumer cards have no NVLink and P2P disabled) is
feasible; what it costs in speed is the speed model's business (timing.py prices the bytes each
layout moves over its link). Anything across nodes needs InfiniBand/RoCE of at least 200 Gb/s.
Every rejection states the number that failed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.hardware import hopper_or_newer
from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import (
    Fabric,
    GpuSpec,
    Interconnect,
    Layout,
    MemoryEstimate,
    ModelSpec,
    RejectReason,
    SoftwareStack,
    TrainingSetup,
)

# Seed 004: "跨机训练时，IB带宽至少200G起步" (across nodes, InfiniBand of at least 200G).
MIN_FABRIC_GBPS = 200.0
FABRICS_FOR_TRAINING = ("infiniband", "roce")

# Host RAM when the offer does not state it: GPU clouds pair GPUs with ~1-4x their memory in RAM
# (AWS g5.12xlarge 4 x A10G with 192 GiB, p4d 8 x A100-40GB with 1152 GiB, p5 8 x H100 with
# 2 TiB: aws.amazon.com/ec2/instance-types). We assume 2x, and keep 20 % of it for the OS,
# data loaders and pinned buffers.
HOST_RAM_PER_GPU_MEMORY = 2.0
HOST_RAM_USABLE = 0.8

# PCIe x16 bandwidth per direction, GB/s, by generation (PCI-SIG: 8/16/32 GT/s per lane with
# 128b/130b encoding -> 15.75 / 31.5 / 63.0 GB/s per direction for 16 lanes).
PCIE_X16_GBPS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}

# Usable memory when only the label is known: nvidia-smi shows 93.7-99.9 % of the label in GiB
# (A10 23,028 MiB with ECC, H100 SXM 81,559 MiB, RTX 4090 24,564 MiB; gpu-specs.md §1).
LABEL_USABLE = 0.95

@dataclass(frozen=True)
class NodeShape:
    """What an offer provides: GPUs per node, how they talk, and how nodes talk."""

    gpu: GpuSpec
    gpus_per_node: int
    nodes: int = 1
    interconnect: Interconnect = "unknown"
    fabric: Fabric | None = None
    fabric_gbps: float | None = None
    memory_gb: float | None = None  # the offer's per-GPU memory when it differs from the catalog
    host_ram_gb: float | None = None  # per node; None: assume HOST_RAM_PER_GPU_MEMORY x GPU memory

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def nvlink(self) -> bool:
        return self.interconnect == "nvlink"




STACKS: tuple[SoftwareStack, ...] = ("cuda", "rocm", "gaudi", "ascend")
STACK_NAMES = {"cuda": "CUDA", "rocm": "ROCm", "gaudi": "Intel Gaudi software", "ascend": "Huawei CANN (torch_npu)"}


@dataclass(frozen=True)
class Capabilities:
    """What a plan may change or use on a card (the policy behind the capability rules).

    precision_pinned: the user gave --precision, so no card that lacks it is planned and no
    variant replaces it. Unpinned, a card without BF16 runs fp16 mixed precision with loss scaling
    and a card without FP8 runs bf16 (memory recomputed for what runs, and the plan says so).
    allowed_stacks: vendor software stacks a plan may use; only CUDA unless the user allows more
    (--allow-stack rocm,gaudi,ascend), since kernels, wheels and recipes differ per stack.
    """

    precision_pinned: bool = False
    allowed_stacks: frozenset[str] = frozenset({"cuda"})

    @staticmethod
    def parse_stacks(text: str | None) -> frozenset[str]:
        """--allow-stack rocm,gaudi -> {"cuda", "rocm", "gaudi"}; CUDA is always allowed.

        >>> sorted(Capabilities.parse_stacks("ROCm, gaudi"))
        ['cuda', 'gaudi', 'rocm']
        """
        names = {n.strip().lower() for n in (text or "").split(",") if n.strip()}
        unknown = sorted(names - set(STACKS))
        if unknown:
            raise InputError(f"unknown software stack {', '.join(unknown)}: --allow-stack takes {', '.join(STACKS[1:])}.")
        return frozenset(names | {"cuda"})


@dataclass(frozen=True)
class Pins:
    """Layout choices the user fixed on the command line; None leaves the rung to the ladder.
    `capabilities` carries the capability policy (pinned precision, allowed stacks) so a quote's
    pins reach every find_layout call; find_layout's own `capabilities` argument wins when given."""

    zero: int | None = None
    fsdp: bool | None = None
    tensor_parallel: int | None = None
    pipeline_parallel: int | None = None
    context_parallel: int | None = None
    offload: str | None = None
    capabilities: Capabilities = Capabilities()


# Precisions and the hardware feature each needs.
_NEEDS_BF16 = ("bf16-mixed", "bf16-true")
# What attention runs when FlashAttention is asked for, by stack, where the card has no
# FlashAttention-2 kernels: PyTorch SDPA's memory-efficient kernel (xformers' cutlass kernel, sm50+)
# also never stores the seq^2 scores, only a log-sum-exp per row, so memory is FlashAttention's
# (torch.nn.functional.scaled_dot_product_attention docs); Gaudi runs Habana's FusedSDPA and Ascend
# torch_npu's npu_fusion_attention, both fused kernels of the same kind.
_FUSED_ATTENTION = {"cuda": "sdpa-mem-efficient", "rocm": "sdpa-mem-efficient", "gaudi": "fused-sdpa",
                    "ascend": "npu-fusion-attention"}
# Inference quantisation through bitsandbytes (LLM.int8 needs compute capability 7.5+, NF4 6.0+:
# bitsandbytes installation guide); GPTQ/AWQ int4 kernels are separate libraries.
_BNB_QUANT = ("nf4", "int8")
LLM_INT8_MIN_CC = 7.5


@dataclass(frozen=True)
class Runtime:
    """What actually runs on a card for a job: the setup after any variant, the attention kernel,
    and the sentences a plan shows about them."""

    setup: TrainingSetup
    attention: str
    notes: tuple[str, ...] = ()


def _hardware(gpu: GpuSpec) -> str:
    cc = f", compute capability {gpu.compute_capability}" if gpu.compute_capability else ""
    return f"{gpu.architecture or gpu.vendor}{cc}"


def runtime_for(setup: TrainingSetup, gpu: GpuSpec, capabilities: Capabilities = Capabilities()) -> Runtime | NoFit:
    """The precision and kernels a job runs on `gpu`, or the capability it lacks.

    >>> from rentopt.optimizer.hardware import get_gpu
    >>> r = runtime_for(TrainingSetup(mode="lora"), get_gpu("T4-16GB"))
    >>> r.setup.precision, r.attention
    ('fp16-mixed', 'sdpa-mem-efficient')
    >>> runtime_for(TrainingSetup(mode="lora"), get_gpu("T4-16GB"), Capabilities(precision_pinned=True)).constraint
    'capability'
    """
    notes: list[str] = []
    if gpu.stack not in capabilities.allowed_stacks:
        return NoFit("capability", f"{gpu.id} needs {STACK_NAMES[gpu.stack]}, not CUDA: recipes, kernels and wheels "
                                   f"differ, so rentopt plans it only when allowed (--allow-stack {gpu.stack})")
    uses_bnb = setup.mode == "qlora" or setup.optimizer in ("adamw-8bit", "paged-adamw", "paged-adamw-8bit") or (
        setup.mode == "inference" and setup.quant in _BNB_QUANT)
    if uses_bnb:
        what = "QLoRA's NF4 base" if setup.mode == "qlora" else (
            f"{setup.quant} quantisation" if setup.mode == "inference" and setup.quant in _BNB_QUANT
            else f"the {setup.optimizer} optimizer")
        if gpu.bitsandbytes == "unsupported":
            return NoFit("capability", f"{gpu.id} lacks bitsandbytes ({STACK_NAMES[gpu.stack]} has no backend), "
                                       f"which {what} needs")
        if gpu.bitsandbytes == "limited":
            notes.append(f"bitsandbytes on {STACK_NAMES[gpu.stack]} is limited ({what}): {gpu.capability_notes}")
        if setup.mode == "inference" and setup.quant == "int8" and gpu.compute_capability \
                and float(gpu.compute_capability) < LLM_INT8_MIN_CC:
            return NoFit("capability", f"{gpu.id} lacks LLM.int8() support ({_hardware(gpu)}; bitsandbytes needs "
                                       f"compute capability {LLM_INT8_MIN_CC}+)")
    precision = setup.precision
    if precision in _NEEDS_BF16 and not gpu.bf16:
        if capabilities.precision_pinned:
            return NoFit("capability", f"{gpu.id} lacks BF16 ({_hardware(gpu)}) and --precision {precision} is pinned")
        precision = "fp16-mixed"
        notes.append(f"fp16 mixed precision with dynamic loss scaling instead of {setup.precision}: {gpu.id} lacks "
                     f"BF16 ({_hardware(gpu)}); memory and speed are for fp16-mixed")
    elif precision == "fp8" and not gpu.fp8:
        if capabilities.precision_pinned:
            return NoFit("capability", f"{gpu.id} lacks FP8 ({_hardware(gpu)}) and --precision fp8 is pinned")
        precision = "bf16-mixed" if gpu.bf16 else "fp16-mixed"
        notes.append(f"{precision} instead of fp8: {gpu.id} lacks FP8 ({_hardware(gpu)}); memory and speed are "
                     f"for {precision}")
    if not setup.flash_attention:
        attention = "eager"
    elif gpu.flash_attention >= 3 and gpu.stack == "cuda":
        # Hopper runs Hopper-native fused attention (FlashAttention-3, cuDNN through PyTorch SDPA,
        # Transformer Engine): the memory of FlashAttention-2, faster
        attention = "flash-attention-3"
    elif gpu.flash_attention >= 2 and gpu.stack == "cuda" and hopper_or_newer(gpu):
        # datacenter Blackwell: cuDNN's fused attention through PyTorch SDPA / Transformer Engine
        # (FlashAttention-3 is Hopper-only)
        attention = "cudnn-fused"
    elif gpu.flash_attention >= 2:
        attention = "flash-attention-2"
    else:
        attention = _FUSED_ATTENTION[gpu.stack]
        if gpu.stack in ("cuda", "rocm"):
            notes.append(f"{attention} attention instead of FlashAttention-2, which needs Ampere or newer "
                         f"({gpu.id}: {_hardware(gpu)}); it also never stores the seq^2 scores, but runs slower")
    if gpu.host_arch != "x86_64":
        notes.append(f"{gpu.id}'s host CPU is {gpu.host_arch}: {gpu.capability_notes}")
    runs = setup if precision == setup.precision else setup.model_copy(update={"precision": precision})
    return Runtime(runs, attention, tuple(notes))


@dataclass
class Fit:
    """A layout that holds the job, with the memory estimate it was judged on."""

    layout: Layout
    memory: MemoryEstimate
    host_ram_matters: bool = True  # False: find_layout gives this for any host RAM (see there)


@dataclass
class NoFit:
    """Why no layout holds the job on a shape: the constraint, in words, and by how much."""

    constraint: RejectReason
    reason: str
    overshoot: float | None = None  # GPU memory needed / available, for the closest miss
    host_ram_matters: bool = True  # as Fit's


def usable_gb(gpu: GpuSpec, offer_memory_gb: float | None = None) -> float:
    """Memory a job can use on one GPU, in GB (1e9 B), the unit of the memory estimate.

    The reported MiB figure when the catalog has it; else the label (GiB) x LABEL_USABLE. An
    offer that states a larger memory than the catalog (a modded 48 GB RTX 4090) wins.

    >>> from rentopt.optimizer.hardware import get_gpu
    >>> round(usable_gb(get_gpu("RTX-4090-24GB")), 1)
    25.8
    """
    if gpu.reported_memory_mib:
        catalog = gpu.reported_memory_mib * 2**20 / 1e9
    else:
        catalog = gpu.memory_gb * 2**30 / 1e9 * LABEL_USABLE
    # A card that the runtime sees as several devices (MI250X: two 64 GB GCDs) gives each
    # process one device's share (gpu-specs.md §6).
    catalog /= gpu.devices_per_card
    if offer_memory_gb and offer_memory_gb > gpu.memory_gb * 1.1:
        return offer_memory_gb * 2**30 / 1e9 * LABEL_USABLE
    return catalog


def _host_ram(shape: NodeShape) -> float:
    if shape.host_ram_gb:
        return shape.host_ram_gb
    return HOST_RAM_PER_GPU_MEMORY * shape.gpu.memory_gb * shape.gpus_per_node


def default_interconnect(gpu: GpuSpec) -> Interconnect:
    """How GPUs of one node talk when the offer does not say: SXM/OAM parts with NVLink sit on an
    NVLink/NVSwitch board; every other card talks over PCIe."""
    return "nvlink" if gpu.form_factor in ("SXM", "OAM") and gpu.has_nvlink else "pcie"


def link_class(shape: NodeShape) -> Literal["nvlink", "pcie", "consumer"]:
    if shape.nvlink:
        return "nvlink"
    if shape.gpu.peer_to_peer_disabled:
        return "consumer"
    return "pcie"


def link_fields(shape: NodeShape) -> dict:
    """The Layout fields that describe how the shape's GPUs talk (see models.Layout.link)."""
    cls = link_class(shape)
    if cls == "nvlink":
        # the board's GPU-to-GPU fabric under its vendor's name: AMD's is Infinity Fabric
        link = "infinity-fabric" if shape.gpu.vendor == "AMD" else "nvlink"
        gbps = shape.gpu.scaleup_link_gbps
    else:
        link = "pcie-no-p2p" if cls == "consumer" else "pcie"
        gbps = PCIE_X16_GBPS.get(shape.gpu.pcie_gen or 4)
    fabric = shape.fabric_gbps if shape.nodes > 1 else None
    return {"link": link, "link_gbps": gbps, "fabric_gbps": fabric}


@dataclass(frozen=True)
class _Rung:
    """One step of the ladder: a sharding/offload/parallelism combination to try."""

    strategy: str
    zero: int = 0
    fsdp: bool = False
    tp: int = 1
    pp: int = 1
    offload: str = "none"
    cp: int = 1

    @property
    def sharded(self) -> bool:
        return self.zero == 3 or self.fsdp

    @property
    def splits_model(self) -> bool:
        return self.sharded or self.tp > 1 or self.pp > 1 or self.cp > 1


# Context parallel is searched (not only pinned) from this sequence length: below it one GPU's
# activations at micro-batch 1 fit with checkpointing on every card the ladder reaches; torchtitan
# and Megatron recipes turn CP on for 32k and longer contexts (arXiv:2410.06511 Table 6; NeMo
# long-context recipes).
CP_SEARCH_MIN_SEQ = 32768


def _split_name(tp: int, pp: int, cp: int, sharding: str) -> str:
    parts = [f"tp{tp}"] * (tp > 1) + [f"pp{pp}"] * (pp > 1) + [f"cp{cp}"] * (cp > 1)
    return "+".join(parts + ([sharding] if sharding else [])) or "ddp"


def _split_rungs(model: ModelSpec, setup: TrainingSetup, n: int, per_node: int, nodes: int,
                 pins: Pins) -> list[_Rung]:
    """Layouts that split the model by tensor, pipeline and context parallel groups (Megatron-LM's
    tp x pp x cp x dp, torchtitan's FSDP2 + TP/SP + PP + CP), each with its data-parallel sharding:
    ZeRO-1 (Megatron's distributed optimizer) and ZeRO-3/FSDP (torchtitan's 2D and 3D layouts).
    TP stays inside a node; pipeline stages may span nodes."""
    tps = [pins.tensor_parallel] if pins.tensor_parallel else [1, *_tp_sizes(model, per_node)]
    if pins.pipeline_parallel:
        pps = [pins.pipeline_parallel]
    else:
        pps = [1] + ([nodes] if nodes > 1 else [])
    if pins.context_parallel:
        cps = [pins.context_parallel]
    elif setup.seq_len >= CP_SEARCH_MIN_SEQ:
        cps = [1, 2, 4, 8]
    else:
        cps = [1]
    sharded = ("fsdp", True, 0) if pins.fsdp else ("zero3", False, 3)
    rungs = []
    for cp in cps:
        for pp in pps:
            for tp in tps:
                if tp > per_node or n % (tp * pp * cp) or setup.seq_len % cp or (tp == pp == cp == 1):
                    continue
                if tp > 1 and tp not in _tp_sizes(model, per_node):
                    continue
                if pp > 1 and model.layers % pp:
                    continue
                dp = n // (tp * pp * cp)
                if dp * cp > 1:
                    rungs.append(_Rung(_split_name(tp, pp, cp, "zero1"), zero=1, tp=tp, pp=pp, cp=cp))
                else:
                    rungs.append(_Rung(_split_name(tp, pp, cp, ""), tp=tp, pp=pp, cp=cp))
                if dp * cp > 1:
                    name, fsdp, zero = sharded
                    rungs.append(_Rung(_split_name(tp, pp, cp, name), zero=zero, fsdp=fsdp, tp=tp, pp=pp, cp=cp))
    return rungs


@lru_cache(maxsize=1024)
def _ladder(model: ModelSpec, setup: TrainingSetup, n: int, per_node: int, nodes: int,
            pins: Pins) -> tuple[_Rung, ...]:
    """The ladder of a node shape: it reads only the shape's GPU counts (a quote's hundreds of
    shapes share a few dozen ladders)."""
    rungs: list[_Rung] = []
    if not setup.trains:
        rungs.append(_Rung("single" if n == 1 else "replicas"))
        for tp in _tp_sizes(model, per_node):
            rungs.append(_Rung(f"tp{tp}", tp=tp))
        if n > 1:
            rungs.append(_Rung(f"pp{n}", pp=n))  # layer split (HF device_map="auto")
        return tuple(r for r in rungs if _allowed_by_pins(r, pins))
    rungs.append(_Rung("single" if n == 1 else "ddp"))
    if n > 1:
        rungs += [_Rung("zero1", zero=1), _Rung("zero2", zero=2)]
        rungs.append(_Rung("fsdp", fsdp=True) if pins.fsdp else _Rung("zero3", zero=3))
    split = _split_rungs(model, setup, n, per_node, nodes, pins)
    if setup.seq_len >= CP_SEARCH_MIN_SEQ:
        # long sequences: the smallest split first, and at equal split the sequence before the
        # weights (CP's ring hides behind attention; TP's all-reduces do not)
        rungs += sorted(split, key=lambda r: (r.pp, r.tp * r.cp, r.sharded, -r.cp))
    else:
        # cheapest first: TP inside a node with ZeRO-1 (no parameter gathers), then the same with
        # sharded states (2D), then pipelines
        rungs += sorted(split, key=lambda r: (r.pp > 1 and r.tp == 1, r.cp, r.pp, r.sharded, r.tp))
    if n == 1:
        rungs.append(_Rung("zero2+offload-optimizer", zero=2, offload="optimizer"))
    if pins.fsdp:
        # FSDP's CPUOffload moves parameters and gradients together and steps the optimizer on the
        # CPU (torch.distributed.fsdp.CPUOffload): there is no optimizer-only FSDP offload.
        rungs.append(_Rung("fsdp+offload-all", fsdp=True, offload="all"))
    rungs.append(_Rung("zero3+offload-optimizer", zero=3, offload="optimizer"))
    rungs.append(_Rung("zero3+offload-all", zero=3, offload="all"))
    return tuple(dict.fromkeys(r for r in rungs if _allowed_by_pins(r, pins)))


def _checkpointing_order(rungs: list[_Rung], setup: TrainingSetup) -> list[tuple[_Rung, bool]]:
    """The ladder with gradient checkpointing (recompute costs about one more forward per step).

    Not given, it is tried off first and turned on only where memory needs it, in the seeds' OOM
    order (000: smaller batch, then checkpointing, then FlashAttention, then more cards +
    ZeRO-3/FSDP): every rung that keeps whole parameters on each GPU (DDP, ZeRO-1, ZeRO-2, which
    cost no extra communication) without recomputation, then the same with it, then each sharding,
    splitting or offload rung without and with it. Given, it is pinned.
    """
    if not setup.trains:
        return [(r, False) for r in rungs]
    if setup.grad_checkpointing is not None:
        return [(r, setup.grad_checkpointing) for r in rungs]
    whole = [r for r in rungs if not r.splits_model and r.offload == "none"]
    rest = [r for r in rungs if r not in whole]
    return [(r, gc) for gc in (False, True) for r in whole] + [(r, gc) for r in rest for gc in (False, True)]


class _Steps:
    """Each (rung, checkpointing) `_climb` tries on a ladder, in order, with the setup it estimates
    and that setup's memory. None of it reads the card, so every shape with these GPU counts
    shares one `_Steps` (`_steps_of`); a step's setup (a pydantic copy) and estimate are made the
    first time a climb reaches it, so rungs no climb reaches cost nothing."""

    __slots__ = ("_made", "activation_scale", "model", "n", "order", "runs")

    def __init__(self, model: ModelSpec, runs: TrainingSetup, rungs: tuple[_Rung, ...], n: int,
                 activation_scale: float):
        self.model, self.runs, self.n, self.activation_scale = model, runs, n, activation_scale
        self.order = _checkpointing_order(list(rungs), runs)
        self._made: list[tuple[TrainingSetup, MemoryEstimate] | None] = [None] * len(self.order)

    def __len__(self) -> int:
        return len(self.order)

    def at(self, i: int) -> tuple[TrainingSetup, MemoryEstimate]:
        made = self._made[i]
        if made is None:
            rung, checkpointing = self.order[i]
            trial = _setup_for(self.runs, rung, self.n, checkpointing)
            made = self._made[i] = (trial, estimate(self.model, trial, activation_scale=self.activation_scale))
        return made


@lru_cache(maxsize=1024)
def _steps_of(model: ModelSpec, runs: TrainingSetup, n: int, per_node: int, nodes: int, pins: Pins,
              activation_scale: float) -> _Steps:
    """The steps of a shape's ladder (`_Steps`): one lookup per climb, however many rungs it tries."""
    return _Steps(model, runs, _ladder(model, runs, n, per_node, nodes, pins), n, activation_scale)


def _tp_sizes(model: ModelSpec, per_node: int) -> list[int]:
    return [t for t in (2, 4, 8) if t <= per_node and per_node % t == 0 and model.heads % t == 0]


def _allowed_by_pins(rung: _Rung, pins: Pins) -> bool:
    if pins.zero is not None and rung.zero != pins.zero:
        return False
    if pins.fsdp and not rung.fsdp:
        return False
    if pins.tensor_parallel is not None and rung.tp != pins.tensor_parallel:
        return False
    if pins.pipeline_parallel is not None and rung.pp != pins.pipeline_parallel:
        return False
    if pins.context_parallel is not None and rung.cp != pins.context_parallel:
        return False
    if pins.offload is not None and rung.offload != pins.offload:
        return False
    return True


def _setup_for(setup: TrainingSetup, rung: _Rung, n: int, grad_checkpointing: bool) -> TrainingSetup:
    return setup.model_copy(update={
        "gpus": n, "zero": rung.zero, "fsdp": rung.fsdp, "tensor_parallel": rung.tp,
        "pipeline_parallel": rung.pp, "context_parallel": rung.cp, "offload": rung.offload,
        "virtual_stages": setup.virtual_stages if rung.pp > 1 else 1,
        "grad_checkpointing": grad_checkpointing if setup.trains else None,
    })


def fused_attention(attention: str) -> bool:
    """Whether an attention kernel is fused (never stores the seq^2 scores): what
    TrainingSetup.flash_attention asks for. Every kernel but eager is (FlashAttention 2/3, SDPA's
    memory-efficient kernel, cuDNN's, Gaudi's and Ascend's fused ones), so a setup rebuilt from a
    layout runs the kernel the layout names."""
    return attention != "eager"


def layout_setup(setup: TrainingSetup, layout: Layout) -> TrainingSetup:
    """The exact TrainingSetup a Layout runs (for the memory of a prescribed layout, e.g. the
    validation run a measured peak came from)."""
    return setup.model_copy(update={
        "gpus": layout.total_gpus, "zero": layout.zero, "fsdp": layout.fsdp,
        "tensor_parallel": layout.tensor_parallel, "pipeline_parallel": layout.pipeline_parallel,
        "context_parallel": layout.context_parallel, "virtual_stages": layout.virtual_stages,
        "sequence_parallel": layout.sequence_parallel or setup.sequence_parallel,
        "recompute": layout.recompute, "activation_offload": layout.activation_offload, "compile": layout.compile,
        "offload": layout.offload, "micro_batch": layout.micro_batch, "precision": layout.precision,
        "grad_checkpointing": layout.grad_checkpointing if setup.trains else None,
        "flash_attention": fused_attention(layout.attention),
    })


def _fabric_problem(shape: NodeShape) -> str | None:
    if shape.nodes <= 1:
        return None
    if shape.fabric not in FABRICS_FOR_TRAINING:
        have = shape.fabric or "no stated fabric"
        return f"training across {shape.nodes} nodes needs InfiniBand/RoCE >= {MIN_FABRIC_GBPS:.0f} Gb/s; the offer has {have}"
    if (shape.fabric_gbps or 0) < MIN_FABRIC_GBPS:
        have = f"{shape.fabric_gbps:.0f} Gb/s" if shape.fabric_gbps else "an unstated speed"
        return f"training across nodes needs >= {MIN_FABRIC_GBPS:.0f} Gb/s of {shape.fabric}; the offer has {have}"
    return None


def find_layout(model: ModelSpec, setup: TrainingSetup, shape: NodeShape, *, pins: Pins = Pins(),
                activation_scale: float = 1.0, capabilities: Capabilities | None = None) -> Fit | NoFit:
    """The first rung of the ladder that fits `shape`, or the reason none does.

    The card's capabilities come first: a stack that is not allowed, a precision or library it
    lacks, is a NoFit("capability") naming what is missing; a cheaper honest variant (fp16 mixed
    precision on a card without BF16, SDPA's memory-efficient attention without FlashAttention-2)
    replaces what was asked unless the precision is pinned, and the memory is computed for what
    runs. `activation_scale` rescales activations and loss transients only (from a measured
    validation peak: the seeds' step 2, memory.activation_scale_for_peak).

    The result's `host_ram_matters` is False when no rung the ladder tried offloads: host RAM
    is read only for an offloaded state, so the same result holds for any host RAM (the planner
    shares it between offers that differ only there).
    """
    runtime = runtime_for(setup, shape.gpu, capabilities or pins.capabilities)
    if isinstance(runtime, NoFit):
        return replace(runtime, host_ram_matters=False)
    if problem := _fabric_problem(shape):
        return NoFit("fabric", problem, host_ram_matters=False)
    offloaded: list[bool] = []  # one entry per rung tried that offloads
    result = _climb(model, setup, runtime, shape, pins, activation_scale, offloaded)
    result.host_ram_matters = bool(offloaded)
    return result


def _climb(model: ModelSpec, setup: TrainingSetup, runtime: Runtime, shape: NodeShape, pins: Pins,
           activation_scale: float, offloaded: list[bool]) -> Fit | NoFit:
    """find_layout's walk up the ladder for what runs (`runtime`; `setup` is what was asked);
    appends to `offloaded` for each rung tried that offloads (the only ones whose fit depends
    on host RAM)."""
    runs = runtime.setup
    capacity = usable_gb(shape.gpu, shape.memory_gb)
    n = shape.total_gpus
    closest: tuple[float, _Rung, MemoryEstimate] | None = None
    needs_nvlink: _Rung | None = None
    host_short: tuple[float, _Rung] | None = None
    steps = _steps_of(model, runs, n, shape.gpus_per_node, shape.nodes, pins, activation_scale)
    for i, (rung, checkpointing) in enumerate(steps.order):
        trial, mem = steps.at(i)
        required = mem.required_gb_per_gpu
        if required > capacity:
            if closest is None or required < closest[0]:
                closest = (required, rung, mem)
            continue
        if rung.tp > 1 and not shape.nvlink:
            needs_nvlink = needs_nvlink or rung
            continue
        host_needed = mem.cpu_offload_gb * shape.gpus_per_node
        if host_needed:
            offloaded.append(True)
        if host_needed and host_needed > _host_ram(shape) * HOST_RAM_USABLE:
            host_short = host_short or (host_needed, rung)
            continue
        plan_notes = list(runtime.notes)  # what a plan on this layout must say
        if runs.trains and runs.grad_checkpointing is None and checkpointing:
            plan_notes.append("gradient checkpointing on: the job does not fit this layout without recomputation")
        if activation_scale != 1.0:
            plan_notes.append(f"activations scaled x{activation_scale:.2f} to match the measured validation peak "
                              "(model states are exact and not scaled)")
        if shape.interconnect == "unknown" and n > 1:
            plan_notes.append("interconnect not stated by the provider: treated as PCIe")
        if mem.cpu_offload_gb and shape.host_ram_gb is None:
            plan_notes.append(f"host RAM not stated: assumed {_host_ram(shape):.0f} GB "
                              f"({HOST_RAM_PER_GPU_MEMORY:g}x the node's GPU memory) for the offloaded state")
        notes = [*plan_notes, *mem.assumptions]
        if runs.trains and runs.grad_checkpointing is None and not checkpointing:
            notes.append("gradient checkpointing off: the job fits without recomputation")
        layout = Layout(
            gpu=shape.gpu.id, gpus_per_node=shape.gpus_per_node, nodes=shape.nodes,
            strategy=rung.strategy, zero=rung.zero, fsdp=rung.fsdp, tensor_parallel=rung.tp,
            pipeline_parallel=rung.pp, context_parallel=rung.cp, virtual_stages=trial.virtual_stages,
            sequence_parallel=rung.tp > 1 and runs.sequence_parallel,
            offload=rung.offload, micro_batch=runs.micro_batch,  # type: ignore[arg-type]
            grad_checkpointing=checkpointing, recompute=runs.recompute,
            activation_offload=runs.activation_offload and runs.trains, compile=runs.compile,
            precision=runs.precision, attention=runtime.attention,
            **link_fields(shape),
            required_gb_per_gpu=round(required, 2), gpu_memory_gb=round(capacity, 1),
            notes=list(dict.fromkeys(notes)), plan_notes=list(dict.fromkeys(plan_notes)),
        )
        return Fit(layout, mem)
    if needs_nvlink is not None:
        return NoFit("interconnect",
                     f"fits only with tensor parallel ({needs_nvlink.strategy}), which needs NVLink; "
                     f"{shape.gpu.id} x{shape.gpus_per_node} here talk over PCIe (TP over PCIe can be "
                     f"slower than one card: Megatron-LM keeps tensor parallelism inside NVLink nodes, Narayanan et al. 2021, "
                     f"arXiv:2104.04473)")
    if host_short is not None and closest is None:
        needed, rung = host_short
        return NoFit("memory", f"fits only with {rung.strategy}, which needs {needed:.0f} GB of host RAM "
                               f"for the offloaded state; the node has {_host_ram(shape):.0f} GB")
    if closest is None:
        if pins.fsdp and pins.offload == "optimizer":
            return NoFit("memory", "FSDP offloads parameters and gradients together (CPUOffload), never the "
                                   "optimizer alone: use --offload all with --fsdp, or --zero 3 --offload optimizer")
        return NoFit("memory", f"no layout applies to {n} x {shape.gpu.id} with the pinned options")
    required, rung, _ = closest
    where = f"{rung.strategy} over {n} GPUs" if n > 1 else rung.strategy
    extra = ""
    if host_short is not None:
        extra = f"; {host_short[1].strategy} would fit the GPU but needs {host_short[0]:.0f} GB of host RAM"
    return NoFit("memory", f"needs {required:.1f} GB per GPU at best ({where}, incl. {setup.margin:.0%} margin "
                           f"on activations and buffers); {shape.gpu.id} has {capacity:.1f} GB{extra}",
                 overshoot=required / capacity)


def classes_that_fit(model: ModelSpec, setup: TrainingSetup, gpus: list[GpuSpec],
                     counts: tuple[int, ...] = (1, 2, 4, 8), *,
                     capabilities: Capabilities = Capabilities()) -> dict[int, list[Fit]]:
    """For `rentopt estimate`: which GPUs hold the job on 1, 2, 4 and 8 GPUs of one node.

    Datacenter SXM/OAM parts are assumed NVLinked; everything else talks over PCIe.
    """
    out: dict[int, list[Fit]] = {}
    for n in counts:
        fits = []
        for gpu in gpus:
            if n > gpu.max_gpus_per_node:
                continue
            result = find_layout(model, setup, NodeShape(gpu=gpu, gpus_per_node=n, interconnect=default_interconnect(gpu)),
                                 capabilities=capabilities)
            if isinstance(result, Fit):
                fits.append(result)
        out[n] = fits
    return out
