"""Which parallel layout fits a job on a node shape, cheapest rung first, or why none does.

The ladder follows the seeds (000: the OOM ladder; 002: DP/TP/PP/ZeRO and when each needs
NVLink; 004: multi-node needs IB >= 200G):

1. plain data parallel when the whole training state fits one GPU (fine on PCIe);
2. ZeRO-1, ZeRO-2, ZeRO-3 over the data-parallel group (FSDP when asked for);
3. tensor parallel, only inside an NVLink node;
4. pipeline parallel across nodes;
5. CPU offload last.

Sharded training across PCIe-only cards (consumer cards have no NVLink and P2P disabled) is
feasible only with a stated scaling penalty; anything across nodes needs InfiniBand/RoCE of at
least 200 Gb/s. Every rejection states the number that failed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import (
    Fabric,
    GpuSpec,
    Interconnect,
    Layout,
    MemoryEstimate,
    ModelSpec,
    RejectReason,
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

# --- scaling priors ------------------------------------------------------------------------------
# Speed-up per doubling of GPUs, (pessimistic, typical, optimistic). Efficiency over n GPUs is
# (f/2) ** log2(n). Sources:
# - seed 000: on PCIe cards, ZeRO-3 / tensor parallel "卡加了一倍、速度只快了三成" (double the
#   cards, ~30 % faster) -> f = 1.3; plain data parallel on PCIe "影响还能忍" (tolerable);
# - gpu-specs.md §1/§5: whole-model training reaches 35-55 % MFU on NVLink/NVSwitch nodes (near
#   linear scaling there); GeForce all-reduce goes through host memory at well under 25 GB/s;
# - seed 004: multi-node efficiency below 70 % means a network bottleneck, so a healthy
#   IB/RoCE cluster keeps >= 70 % per added node.
# LoRA/QLoRA gradients are < 1 % of the parameters, so data parallelism is nearly free.
SPEEDUP_PER_DOUBLING: dict[str, tuple[float, float, float]] = {
    "dp-adapters": (1.90, 1.95, 2.00),
    "dp-nvlink": (1.85, 1.90, 1.95),
    "dp-pcie": (1.70, 1.80, 1.90),
    "dp-consumer": (1.50, 1.70, 1.85),
    "sharded-nvlink": (1.75, 1.85, 1.95),
    "sharded-pcie": (1.20, 1.30, 1.50),
    "tp-nvlink": (1.70, 1.80, 1.90),
    "nodes": (1.40, 1.70, 1.85),
}
# CPU offload: the step waits on the CPU optimizer and PCIe transfers. A wide, uncertain prior
# (ZeRO-Offload, Ren et al. 2021, arXiv:2101.06840, trades speed for model size; measured
# slowdowns vary with CPU and PCIe generation): throughput factor (pessimistic, typical, optimistic).
OFFLOAD_FACTOR: dict[str, tuple[float, float, float]] = {
    "optimizer": (0.40, 0.60, 0.80),
    "all": (0.20, 0.35, 0.50),
}


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


@dataclass(frozen=True)
class Pins:
    """Layout choices the user fixed on the command line; None leaves the rung to the ladder."""

    zero: int | None = None
    fsdp: bool | None = None
    tensor_parallel: int | None = None
    offload: str | None = None


@dataclass
class Fit:
    layout: Layout
    memory: MemoryEstimate


@dataclass
class NoFit:
    constraint: RejectReason
    reason: str
    overshoot: float | None = None  # GPU memory needed / available, for the closest miss


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
        link, gbps = "nvlink", shape.gpu.nvlink_gbps
    else:
        link = "pcie-no-p2p" if cls == "consumer" else "pcie"
        gbps = PCIE_X16_GBPS.get(shape.gpu.pcie_gen or 4)
    fabric = shape.fabric_gbps if shape.nodes > 1 else None
    return {"link": link, "link_gbps": gbps, "fabric_gbps": fabric}


@dataclass(frozen=True)
class _Rung:
    strategy: str
    zero: int = 0
    fsdp: bool = False
    tp: int = 1
    pp: int = 1
    offload: str = "none"

    @property
    def sharded(self) -> bool:
        return self.zero == 3 or self.fsdp

    @property
    def splits_model(self) -> bool:
        return self.sharded or self.tp > 1 or self.pp > 1


def _ladder(model: ModelSpec, setup: TrainingSetup, shape: NodeShape, pins: Pins) -> list[_Rung]:
    n, per_node = shape.total_gpus, shape.gpus_per_node
    rungs: list[_Rung] = []
    if not setup.trains:
        rungs.append(_Rung("single" if n == 1 else "replicas"))
        for tp in _tp_sizes(model, per_node):
            rungs.append(_Rung(f"tp{tp}", tp=tp))
        if n > 1:
            rungs.append(_Rung(f"pp{n}", pp=n))  # layer split (HF device_map="auto")
        return rungs
    rungs.append(_Rung("single" if n == 1 else "ddp"))
    if n > 1:
        rungs += [_Rung("zero1", zero=1), _Rung("zero2", zero=2)]
        rungs.append(_Rung("fsdp", fsdp=True) if pins.fsdp else _Rung("zero3", zero=3))
    for tp in _tp_sizes(model, per_node):
        dp = n // tp
        rungs.append(_Rung(f"tp{tp}" + ("+zero1" if dp > 1 else ""), zero=1 if dp > 1 else 0, tp=tp))
    if shape.nodes > 1:
        tp = per_node if per_node in _tp_sizes(model, per_node) else 1
        rungs.append(_Rung(f"tp{tp}+pp{shape.nodes}" if tp > 1 else f"pp{shape.nodes}", tp=tp, pp=shape.nodes))
    if n == 1:
        rungs.append(_Rung("zero2+offload-optimizer", zero=2, offload="optimizer"))
    rungs.append(_Rung("zero3+offload-optimizer", zero=3, offload="optimizer"))
    rungs.append(_Rung("zero3+offload-all", zero=3, offload="all"))
    return [r for r in rungs if _allowed_by_pins(r, pins)]


def _tp_sizes(model: ModelSpec, per_node: int) -> list[int]:
    return [t for t in (2, 4, 8) if t <= per_node and per_node % t == 0 and model.heads % t == 0]


def _allowed_by_pins(rung: _Rung, pins: Pins) -> bool:
    if pins.zero is not None and rung.zero != pins.zero:
        return False
    if pins.fsdp and not rung.fsdp:
        return False
    if pins.tensor_parallel is not None and rung.tp != pins.tensor_parallel:
        return False
    if pins.offload is not None and rung.offload != pins.offload:
        return False
    return True


def _setup_for(setup: TrainingSetup, rung: _Rung, n: int) -> TrainingSetup:
    return setup.model_copy(update={
        "gpus": n, "zero": rung.zero, "fsdp": rung.fsdp, "tensor_parallel": rung.tp,
        "pipeline_parallel": rung.pp, "offload": rung.offload,
    })


def scaling_prior(rung_kind: str, n: int) -> tuple[float, float, float]:
    """Efficiency (pessimistic, typical, optimistic) of `n` GPUs for a kind of parallelism.

    >>> scaling_prior("sharded-pcie", 2)
    (0.6, 0.65, 0.75)
    >>> scaling_prior("dp-nvlink", 1)
    (1.0, 1.0, 1.0)
    """
    if n <= 1:
        return (1.0, 1.0, 1.0)
    doublings = math.log2(n)
    return tuple((f / 2) ** doublings for f in SPEEDUP_PER_DOUBLING[rung_kind])  # type: ignore[return-value]


def _scaling(setup: TrainingSetup, rung: _Rung, shape: NodeShape) -> tuple[tuple[float, float, float], str | None]:
    """Scaling prior for this rung on this node shape, and the penalty sentence if any."""
    link = link_class(shape)
    per_node = shape.gpus_per_node
    adapters = setup.mode in ("lora", "qlora")
    penalty = None
    if rung.tp > 1:
        kind = "tp-nvlink"
    elif rung.sharded:
        kind = "sharded-nvlink" if link == "nvlink" else "sharded-pcie"
        if link != "nvlink" and shape.total_gpus > 1:
            what = "consumer cards without P2P" if link == "consumer" else "PCIe without NVLink"
            penalty = (f"{rung.strategy} over {what}: every step all-gathers parameters, so doubling GPUs "
                       f"gives only ~1.3x speed (seed 000)")
    elif not setup.trains or adapters:
        kind = "dp-adapters"
    else:
        kind = {"nvlink": "dp-nvlink", "pcie": "dp-pcie", "consumer": "dp-consumer"}[link]
        if link == "consumer" and per_node > 1:
            penalty = "data parallel on consumer cards: gradients are all-reduced through host memory (no P2P)"
    low, mid, high = scaling_prior(kind, per_node)
    if shape.nodes > 1:
        nl, nm, nh = scaling_prior("nodes", shape.nodes)
        low, mid, high = low * nl, mid * nm, high * nh
    if rung.offload != "none":
        ol, om, oh = OFFLOAD_FACTOR[rung.offload]
        low, mid, high = low * ol, mid * om, high * oh
        offload_note = f"CPU offload ({rung.offload}) slows each step to ~{om:.0%} (prior {ol:.0%}-{oh:.0%})"
        penalty = f"{penalty}; {offload_note}" if penalty else offload_note
    if penalty:
        n = shape.total_gpus
        penalty += f"; expected scaling efficiency on {n} GPU{'s' if n > 1 else ''}: {mid:.0%} ({low:.0%}-{high:.0%})"
    return (low, mid, high), penalty


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
                memory_scale: float = 1.0) -> Fit | NoFit:
    """The first rung of the ladder that fits `shape`, or the reason none does.

    `memory_scale` rescales the estimate (set from a measured validation peak: the seeds' step 2).
    """
    if problem := _fabric_problem(shape):
        return NoFit("fabric", problem)
    capacity = usable_gb(shape.gpu, shape.memory_gb)
    n = shape.total_gpus
    closest: tuple[float, _Rung, MemoryEstimate] | None = None
    needs_nvlink: _Rung | None = None
    host_short: tuple[float, _Rung] | None = None
    for rung in _ladder(model, setup, shape, pins):
        trial = _setup_for(setup, rung, n)
        mem = estimate(model, trial)
        required = mem.required_gb_per_gpu * memory_scale
        if required > capacity:
            if closest is None or required < closest[0]:
                closest = (required, rung, mem)
            continue
        if rung.tp > 1 and not shape.nvlink:
            needs_nvlink = needs_nvlink or rung
            continue
        host_needed = mem.cpu_offload_gb * shape.gpus_per_node
        if host_needed and host_needed > _host_ram(shape) * HOST_RAM_USABLE:
            host_short = host_short or (host_needed, rung)
            continue
        (low, mid, high), penalty = _scaling(setup, rung, shape)
        notes = list(mem.assumptions)
        if memory_scale != 1.0:
            notes.append(f"memory scaled x{memory_scale:.2f} to match the measured validation peak")
        if shape.interconnect == "unknown" and n > 1:
            notes.append("interconnect not stated by the provider: treated as PCIe")
        if mem.cpu_offload_gb and shape.host_ram_gb is None:
            notes.append(f"host RAM not stated: assumed {_host_ram(shape):.0f} GB "
                         f"({HOST_RAM_PER_GPU_MEMORY:g}x the node's GPU memory) for the offloaded state")
        layout = Layout(
            gpu=shape.gpu.id, gpus_per_node=shape.gpus_per_node, nodes=shape.nodes,
            strategy=rung.strategy, zero=rung.zero, fsdp=rung.fsdp, tensor_parallel=rung.tp,
            pipeline_parallel=rung.pp, offload=rung.offload, micro_batch=setup.micro_batch,  # type: ignore[arg-type]
            grad_checkpointing=setup.grad_checkpointing, precision=setup.precision,
            attention="flash-attention-2" if setup.flash_attention else "eager", **link_fields(shape),
            required_gb_per_gpu=round(required, 2), gpu_memory_gb=round(capacity, 1),
            scaling_efficiency=mid, scaling_low=low, scaling_high=high, penalty=penalty, notes=notes,
        )
        return Fit(layout, mem)
    if needs_nvlink is not None:
        return NoFit("interconnect",
                     f"fits only with tensor parallel ({needs_nvlink.strategy}), which needs NVLink; "
                     f"{shape.gpu.id} x{shape.gpus_per_node} here talk over PCIe (TP over PCIe can be "
                     f"slower than one card, seed 002)")
    if host_short is not None and closest is None:
        needed, rung = host_short
        return NoFit("memory", f"fits only with {rung.strategy}, which needs {needed:.0f} GB of host RAM "
                               f"for the offloaded state; the node has {_host_ram(shape):.0f} GB")
    if closest is None:
        return NoFit("memory", f"no layout applies to {n} x {shape.gpu.id} with the pinned options")
    required, rung, _ = closest
    where = f"{rung.strategy} over {n} GPUs" if n > 1 else rung.strategy
    extra = ""
    if host_short is not None:
        extra = f"; {host_short[1].strategy} would fit the GPU but needs {host_short[0]:.0f} GB of host RAM"
    return NoFit("memory", f"needs {required:.1f} GB per GPU at best ({where}, incl. {setup.margin:.0%} margin); "
                           f"{shape.gpu.id} has {capacity:.1f} GB{extra}", overshoot=required / capacity)


def classes_that_fit(model: ModelSpec, setup: TrainingSetup, gpus: list[GpuSpec],
                     counts: tuple[int, ...] = (1, 2, 4, 8)) -> dict[int, list[Fit]]:
    """For `rentopt estimate`: which GPUs hold the job on 1, 2, 4 and 8 GPUs of one node.

    Datacenter SXM/OAM parts are assumed NVLinked; everything else talks over PCIe.
    """
    out: dict[int, list[Fit]] = {}
    for n in counts:
        fits = []
        for gpu in gpus:
            if n > gpu.max_gpus_per_node:
                continue
            link: Interconnect = "nvlink" if (gpu.has_nvlink and gpu.form_factor in ("SXM", "OAM")) else "pcie"
            result = find_layout(model, setup, NodeShape(gpu=gpu, gpus_per_node=n, interconnect=link))
            if isinstance(result, Fit):
                fits.append(result)
        out[n] = fits
    return out
