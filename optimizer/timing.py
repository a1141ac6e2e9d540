"""Training throughput: tokens per second for a job on a layout, built from what moves it.

One micro-batch on one GPU costs the sum of what the GPU does:

- matmuls: FLOPs at the GPU's achievable matmul rate (MAMF), lowered for small GEMMs (few tokens
  per micro-batch, narrow hidden size);
- attention: FLOPs at the attention kernel's rate (FlashAttention), or the memory traffic of the
  seq x seq scores without it;
- memory-bound work: norms, activations, residuals, rotary (bytes per token per layer), the
  logits/loss over the vocabulary, LoRA adapter side-paths, QLoRA dequantisation (bytes per
  frozen weight per pass), fp8 casts;
- framework overhead: the time per layer that the GPU idles while Python launches kernels;
- recomputation with gradient checkpointing: one more forward (its matmuls, attention,
  memory-bound work and launches), priced like the first one;

plus what the network adds and compute does not hide: bytes per step of the parallel layout
(DDP / ZeRO / FSDP collectives, tensor-parallel all-reduces, offloaded weights and optimizer)
over the link's achievable bandwidth (NVLink, PCIe with or without peer-to-peer, the node
fabric), a pipeline bubble, and the optimizer step.

The free constants of that model were fitted to published measurements (tests/data/
throughput-measurements.json; tools/fit_throughput.py) and checked on sources held out of the
fit (tests/test_timing_calibration.py). The low-high range is the spread of the fit's residuals,
widened by the uncertainty of the link bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.hardware import (
    UNMEASURED_TRAINING_RANGE,
    achievable_memory_bandwidth_gbps,
    effective_matmul_tflops,
    hopper_or_newer,
    unmeasured_training_note,
)
from rentopt.optimizer.feasibility import (
    MIN_FABRIC_GBPS,
    PCIE_X16_GBPS,
    Fit,
    NodeShape,
    Pins,
    default_interconnect,
    find_layout,
    layout_setup,
)
from rentopt.optimizer.memory import (
    NF4_BITS,
    NF4_DQ_BITS,
    SELECTIVE_KEPT,
    adapted_width,
    offloaded_activation_bytes,
    trainable_params,
)
from rentopt.optimizer.models import GpuSpec, Layout, ModelSpec, TrainingSetup

# --- measured hardware ceilings ----------------------------------------------------------------
# Each card's maximum achievable matmul rate per dtype (hardware.effective_matmul_tflops: published
# GEMM measurements, the project's own H200 run, or a measured relative's efficiency lowered by
# the power rule for power-limited workstation parts) and its achievable memory bandwidth
# (hardware.achievable_memory_bandwidth_gbps) are the card's ceilings here.
# FlashAttention-2 backward does 2.5x the forward's matmul FLOPs (it recomputes the scores:
# 5 matmuls against 2; Dao 2023, arXiv:2307.08691 §3.1.2).
ATTN_BACKWARD_RATIO = 2.5
# FlashAttention's rate grows with sequence length: FA2 paper Fig. 4 (A100, causal, head dim 128,
# fwd+bwd) ~110 TFLOPS at 512 tokens, ~150 at 2k, ~170-190 at 8k-16k: s / (s + 350) fits it.
ATTN_SEQ_HALF = 350.0
# Hopper-native fused attention (cuDNN / FlashAttention-3 class, what PyTorch SDPA and Transformer
# Engine run on Hopper and Blackwell today): own measurement on one H200 (2026-12-04, torch
# 2.11.0+cu130, causal, head dim 128, bf16; tests/data/device/h200-2026-12-04.json): forward +
# backward 305, 415, 501, 508, 532, 551 TFLOP/s at 1k, 2k, 4k, 8k, 16k, 32k tokens, against the
# card's measured 804 TFLOP/s GEMM ceiling: 0.70 x s / (s + 740) fits them within 7 %.
ATTN_NATIVE_RATE = 0.70
ATTN_NATIVE_SEQ_HALF = 740.0
# Eager attention materialises the scores: per head and token, s scores written and read about
# 12 times over forward and backward (QK^T write, softmax read/write, dropout, AV read; backward
# twice that), 2 bytes each.
EAGER_SCORE_PASSES = 12
# Per-link achievable bus bandwidth, as a fraction of the link's one-way figure: nccl-tests
# all_reduce busbw on DGX A100 is ~230 GB/s of NVLink's 300 GB/s one way; PCIe Gen4 x16 with
# peer-to-peer ~22 of 31.5 GB/s; GeForce cards without P2P stage through host memory (NCCL SHM),
# "well under 25 GB/s" (gpu-specs.md §5): ~0.35 of the PCIe figure. IB/RoCE reach ~85 % of
# line rate in nccl-tests.
LINK_EFFICIENCY = {"nvlink": 0.75, "pcie": 0.70, "pcie-no-p2p": 0.35, "fabric": 0.85}
# AMD's Infinity Fabric boards: no RCCL bus-bandwidth measurement in reference/; taken as NVLink's.
LINK_EFFICIENCY["infinity-fabric"] = LINK_EFFICIENCY["nvlink"]
# The link bandwidth really delivered varies with lane width, PCIe switches, NIC sharing and
# topology: the range prices it at 0.6x and 1.4x (a PCIe Gen4 card in an x8 slot gets half).
LINK_RANGE = (0.6, 1.4)
# Optimizer step, bytes moved per trainable parameter (read + write): AdamW fp32 master, two fp32
# moments and the gradient read, written back, plus the bf16 copy and grad clipping/zeroing:
# 4+4+4+4 read, 4+4+4+2 written, ~8 for clip-norm and zeroing = 38. 8-bit states: 1 byte each.
OPTIMIZER_BYTES = {"adamw": 38.0, "paged-adamw": 38.0, "adamw-8bit": 26.0, "paged-adamw-8bit": 26.0, "sgd": 18.0,
                   "none": 0.0}
# CPU optimizer (ZeRO-Offload's CPU-Adam): host DRAM traffic of the same bytes at ~40 GB/s, what
# a dual-socket server's AVX Adam sustains (Ren et al. 2021, arXiv:2101.06840, Fig. 5: ~1 s per
# 10B-parameter step on 2 x 24 cores); a prior.
HOST_OPTIMIZER_GBPS = 40.0
# Gradient bytes on the wire: PyTorch DDP under autocast keeps fp32 parameters, so fp32 grads;
# FSDP/ZeRO mixed precision reduces in bf16 (FSDP MixedPrecision reduce_dtype, DeepSpeed bf16).
GRAD_WIRE_BYTES = {"ddp": 4.0, "sharded": 2.0}
# When the user does not say how many tokens one optimizer step covers: 2^18 (128 sequences of
# 2048), the order of published fine-tuning recipes (Alpaca 128 x 512, torchtune/axolotl 64-128
# x 2048). Only the optimizer step and pipeline bubble depend on it.
DEFAULT_TOKENS_PER_STEP = 2**18
# A pipelined layout is a pretraining-scale run: its recipes step on ~1M tokens and more
# (NeMo/Megatron-Bridge Llama 3 recipes: global batch 128 x 8192 tokens for 8B and 70B, 512 x 8192
# for 405B; Llama 3 pretraining 4M-16M tokens per step, arXiv:2407.21783 §3.4).
DEFAULT_PIPELINE_TOKENS_PER_STEP = 2**20
# Pipeline stages pass each micro-batch's activations (forward) and their gradients (backward)
# point to point: s x b x h 16-bit elements per boundary, split over TP with sequence parallel.
PP_P2P_PASSES = 2
# Context parallel (ring attention): each GPU receives the K and V of the other cp-1 chunks in
# forward, and K, V, dK and dV in backward: 3 x the forward's bytes (Liu et al. 2023, arXiv:
# 2310.01889; Megatron-Core context parallelism docs). The ring overlaps with attention compute.
CP_RING_PASSES = 3.0
# torch.compile fuses the elementwise kernels around the matmuls and cuts launches: torchtitan's
# Llama 3.1 8B on 8 x H100 gains ~16 % tokens/s from compile alone (arXiv:2410.06511 Table 1),
# which this model reproduces with ~half the memory-bound traffic and half the launch overhead.
COMPILE_ELEMENTWISE = 0.5
COMPILE_LAUNCH = 0.5


@dataclass(frozen=True)
class SpeedParams:
    """The fitted constants (tools/fit_throughput.py over the fit sources; see the module doc)."""

    tokens_half: float  # tokens per micro-batch at which GEMMs reach half their ceiling
    hidden_half: float  # GEMM width at which they reach half (narrow models waste tiles)
    attn_ampere: float  # FlashAttention rate / dense peak on Ampere/Ada (and older)
    attn_hopper: float  # ... on Hopper/Blackwell (FA2 does not use their new instructions)
    elem_bytes: float  # memory-bound bytes per token per layer per hidden+intermediate element
    loss_bytes: float  # bytes per token per vocabulary entry (logits, softmax, loss, grad)
    dequant_bytes: float  # QLoRA: bytes moved per frozen 4-bit weight per pass (read, unpack, write)
    adapter_bytes: float  # LoRA: bytes per token per adapted linear's input+output element (side path)
    layer_overhead_s: float  # CPU (framework) time per layer per micro-batch, forward + backward
    overlap: float  # share of data-parallel communication hidden behind compute
    range_low: float  # typical x this = pessimistic end (residual quantile of the fit)
    range_high: float  # typical x this = optimistic end


# Fitted by tools/fit_throughput.py (least squares on log rate over the fit sources named there);
# re-run it after changing the model. Values are rounded to what the data can tell apart.
FITTED = SpeedParams(
    tokens_half=882, hidden_half=590, attn_ampere=0.484, attn_hopper=0.225,
    elem_bytes=52.1, loss_bytes=40.5, dequant_bytes=7.85, adapter_bytes=11.5,
    layer_overhead_s=0.00502, overlap=0.90,
    range_low=0.750, range_high=1.37,
)


@dataclass(frozen=True)
class Knobs:
    """Facts about a run that a Layout does not carry (calibration records state them)."""

    tokens_per_step: float | None = None  # tokens per optimizer step, all GPUs; None: the default
    recompute: float | None = None  # share of the forward recomputed (selective checkpointing)
    tp_overlap: bool = False  # tensor-parallel all-reduces overlapped with GEMMs (Megatron --tp-comm-overlap)
    link_scale: float = 1.0  # multiplies every link bandwidth (the range uses 0.6 / 1.4)
    fused_projections: bool = False  # LoRA on Megatron's fused qkv / fc1 (NeMo, Megatron-Bridge)


@dataclass(frozen=True)
class StepTime:
    """Seconds per micro-batch on one GPU of a replica, by what it is spent on."""

    matmul: float
    attention: float
    memory_bound: float  # elementwise, loss, adapters, dequantisation, fp8 casts
    framework: float
    comm_hidden_or_not: float  # data-parallel traffic per micro-batch (overlappable)
    comm_exposed: float  # tensor-parallel all-reduces and the offloaded optimizer (not hidden)
    optimizer: float  # the optimizer step, per micro-batch
    bubble_factor: float  # pipeline: x (1 + (pp - 1) / micro-batches per step)
    total: float

    @property
    def compute(self) -> float:
        return self.matmul + self.attention + self.memory_bound + self.framework


@dataclass(frozen=True)
class Throughput:
    """The speed model's answer for one layout: tokens/s range, MFU, scaling, why."""

    tokens_per_second: tuple[float, float, float]  # (low, typical, high), whole layout
    mfu: float  # typical model-FLOPs utilisation per GPU (no recompute counted)
    scaling_efficiency: float  # typical rate / (GPUs x the same job's one-GPU rate)
    scaling_range: tuple[float, float]
    flops_per_token: float  # model FLOPs (forward + backward, attention, no recompute)
    notes: tuple[str, ...]
    step: StepTime | None = None  # the typical breakdown (for tests and --explain-style output)


@dataclass(frozen=True)
class TrainingTime:
    """Hours for a token count on one layout, with the range and assumptions behind them."""

    hours_low: float  # optimistic (fastest) end
    hours: float
    hours_high: float  # pessimistic end: what a deadline should use
    flops_per_token: float
    tokens_per_second: float
    assumptions: list[str] = field(default_factory=list)
    throughput: Throughput | None = None


# --- FLOPs --------------------------------------------------------------------------------------


def _active_block_linear(model: ModelSpec) -> int:
    router = model.hidden * model.num_experts if model.num_experts > 1 else 0
    return model.layers * (model.attention_params_per_layer
                           + model.experts_per_token * model.mlp_params_per_expert + router)


@lru_cache(maxsize=256)
def matmul_params(model: ModelSpec) -> int:
    """Weights a token is multiplied by: the active block projections plus the output head
    (a matmul even when tied to the embedding; the embedding lookup is not)."""
    return _active_block_linear(model) + model.vocab * model.hidden


def attention_flops_forward(model: ModelSpec, seq_len: int) -> float:
    """Causal attention FLOPs per token, forward: QK^T and AV over on average s/2 keys:
    2 matmuls x 2 FLOPs x (s/2) x d per layer = 2 s d (PaLM, arXiv:2204.02311 App. B counts the
    non-causal 4 s d)."""
    return 2.0 * model.layers * seq_len * model.q_dim


def _backward_factor(mode: str) -> float:
    # Full: gradients for activations and weights, 2x the forward. LoRA/QLoRA: the frozen base
    # still passes activation gradients back (1x forward) but computes no weight gradients.
    return {"full": 2.0, "lora": 1.0, "qlora": 1.0}.get(mode, 0.0)


def flops_per_token(model: ModelSpec, setup: TrainingSetup, *, recompute: float | None = None) -> float:
    """Training FLOPs per token: forward + backward (+ the recomputed forward when asked).

    `recompute` is the share of the forward run again (1.0 with full activation checkpointing);
    by default it follows `setup.grad_checkpointing`. Model FLOPs (for MFU) use recompute=0.

    >>> from rentopt.optimizer.models import ModelSpec, TrainingSetup
    >>> m = ModelSpec(name="x", layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008,
    ...               vocab=32000, params=6_738_415_616)
    >>> full = flops_per_token(m, TrainingSetup(mode="full", grad_checkpointing=False, seq_len=2048))
    >>> round(full / m.active_params, 2)  # 6N (embedding lookups excluded) plus causal attention
    6.12
    """
    forward = 2.0 * matmul_params(model) + attention_flops_forward(model, setup.seq_len)
    if setup.mode == "inference":
        return forward
    r = (1.0 if setup.grad_checkpointing else 0.0) if recompute is None else recompute
    return forward * (1.0 + _backward_factor(setup.mode) + r)


# --- the step model -----------------------------------------------------------------------------


def _peak(gpu: GpuSpec, precision: str, *, matmul: bool) -> float:
    """Dense tensor FLOP/s for the precision that runs (GpuSpec.dense_tflops: GPUs without bf16,
    V100 and T4, run fp16 AMP). fp8 applies to the linear layers only (Transformer Engine keeps
    attention in bf16)."""
    return gpu.dense_tflops(precision if matmul or precision != "fp8" else "bf16") * 1e12


def _ceiling(gpu: GpuSpec, precision: str, *, matmul: bool) -> float:
    """The card's measured achievable matmul FLOP/s for what runs (fp8 only for the linear layers:
    Transformer Engine keeps attention in bf16)."""
    return effective_matmul_tflops(gpu, precision if matmul or precision != "fp8" else "bf16") * 1e12


def _pcie_gbps(gpu: GpuSpec) -> float:
    return PCIE_X16_GBPS.get(gpu.pcie_gen or 4, 31.5)


def _host_link_gbps(gpu: GpuSpec) -> float:
    """GPU <-> host memory, GB/s per direction: NVLink-C2C on Grace superchips, else the PCIe slot."""
    return gpu.host_link_gbps or _pcie_gbps(gpu)


def _intra_gbps(layout: Layout, gpu: GpuSpec) -> float:
    """Achievable one-way bus bandwidth between GPUs of a node, GB/s."""
    if layout.link in ("nvlink", "infinity-fabric"):
        # link_gbps is bidirectional; 600 GB/s (A100's NVLink 3, NVIDIA A100 datasheet) only for a
        # user's catalog entry that says NVLink without its bandwidth
        nominal = (layout.link_gbps or gpu.scaleup_link_gbps or 600.0) / 2
    else:
        nominal = layout.link_gbps or _pcie_gbps(gpu)
    return nominal * LINK_EFFICIENCY[layout.link]


def _collective_seconds(size: float, factor: float, group: int, per_node: int, nodes: int,
                        layout: Layout, gpu: GpuSpec, link_scale: float) -> float:
    """Hierarchical ring collective moving `factor` x `size` bytes (1: all-gather or
    reduce-scatter, 2: all-reduce) over `group` GPUs, `per_node` of them in each of `nodes`.

    Inside a node each GPU moves factor * size * (g-1)/g over the intra-node link; across nodes
    each node moves factor * size * (k-1)/k over its fabric. The two stages pipeline: the slower
    one sets the time."""
    if group <= 1 or size <= 0:
        return 0.0
    t = 0.0
    if per_node > 1:
        t = factor * size * (per_node - 1) / per_node / (_intra_gbps(layout, gpu) * 1e9 * link_scale)
    if nodes > 1:
        fabric = (layout.fabric_gbps or MIN_FABRIC_GBPS) / 8 * LINK_EFFICIENCY["fabric"]  # Gb/s per node -> GB/s
        t = max(t, factor * size * (nodes - 1) / nodes / (fabric * 1e9 * link_scale))
    return t


def _recompute_share(layout: Layout, knobs: Knobs) -> float:
    """Share of the forward rerun in backward: 1 with full checkpointing, SELECTIVE_KEPT's
    complement with selective, unless the run's own figure is given (knobs.recompute)."""
    if knobs.recompute is not None:
        return knobs.recompute
    if not layout.grad_checkpointing:
        return 0.0
    return 1.0 - SELECTIVE_KEPT if layout.recompute == "selective" else 1.0


def tokens_per_step(setup: TrainingSetup, layout: Layout, knobs: Knobs = Knobs()) -> float:
    """Tokens per optimizer step over all GPUs: the run's (knobs), the user's (setup), else the
    default for the kind of layout."""
    return (knobs.tokens_per_step or setup.tokens_per_step
            or (DEFAULT_PIPELINE_TOKENS_PER_STEP if layout.pipeline_parallel > 1 else DEFAULT_TOKENS_PER_STEP))


def pipeline_bubble(pp: int, virtual_stages: int, micro_batches: float) -> float:
    """Step-time factor of a pipeline's fill and drain: 1 + (p-1)/m for 1F1B with m micro-batches
    per step, 1 + (p-1)/(m v) interleaved over v chunks per GPU (Narayanan et al. 2021,
    arXiv:2104.04473 §2.2.1-2.2.2).

    >>> pipeline_bubble(4, 1, 12)
    1.25
    >>> pipeline_bubble(4, 3, 12)
    1.0833333333333333
    """
    if pp <= 1:
        return 1.0
    return 1.0 + (pp - 1) / (max(1.0, micro_batches) * max(1, virtual_stages))


def step_time(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec,
              params: SpeedParams = FITTED, knobs: Knobs = Knobs(), *, single_gpu: bool = False) -> StepTime:
    """Seconds per micro-batch per replica on `layout` (or on one GPU of it, `single_gpu`).

    A replica is the tp x pp x cp GPUs that together process one micro-batch of b sequences;
    each GPU multiplies its s/cp tokens by its 1/(tp pp) of the weights."""
    mode = setup.mode
    trains = mode in ("full", "lora", "qlora")
    tp = 1 if single_gpu else layout.tensor_parallel
    pp = 1 if single_gpu else layout.pipeline_parallel
    cp = 1 if single_gpu else layout.context_parallel
    dp = 1 if single_gpu else layout.data_parallel
    per_gpu = tp * pp  # weight split
    s, b = setup.seq_len, layout.micro_batch
    m = b * s  # tokens per micro-batch of the replica
    m_gpu = m / cp  # tokens each GPU of the replica multiplies
    r = _recompute_share(layout, knobs) if trains else 0.0
    bwd = _backward_factor(mode) if trains else 0.0
    bw = achievable_memory_bandwidth_gbps(gpu) * 1e9
    L, h = model.layers, model.hidden
    f = model.intermediate * model.experts_per_token

    # matmuls: the GEMMs are (m/cp tokens) x (hidden / tp) wide; the card's measured ceiling,
    # lowered for few tokens or a narrow model
    peak_mm = _ceiling(gpu, layout.precision, matmul=True)
    eff = m_gpu / (m_gpu + params.tokens_half) * (h / tp) / (h / tp + params.hidden_half)
    mm_passes = 1.0 + bwd + r
    weights = matmul_params(model)
    mm_flops = 2.0 * weights * m_gpu * mm_passes / per_gpu
    # Roofline: every pass reads each weight once (2 bytes; 4-bit codes are unpacked to 16 bit
    # first), so a micro-batch of few tokens is bound by weight reads, not FLOPs.
    weight_reads = 2.0 * weights * mm_passes / per_gpu
    t_mm = max(mm_flops / (peak_mm * eff), weight_reads / bw)

    # attention: causal, balanced over the context-parallel ranks (each holds two mirrored chunks)
    attn_fwd = attention_flops_forward(model, s) * m / (per_gpu * cp)
    attn_recompute = r if (layout.recompute != "selective" or knobs.recompute is not None) else 0.0
    passes = 1.0 + (ATTN_BACKWARD_RATIO if trains else 0.0) + attn_recompute
    peak16 = _ceiling(gpu, layout.precision, matmul=False)
    if layout.attention == "eager":
        scores = model.heads * s * 2.0 * EAGER_SCORE_PASSES * L * m / (per_gpu * cp)
        matmuls = 1.0 + (2.0 if trains else 0.0) + attn_recompute  # the two attention matmuls, backward 2x
        t_attn = attn_fwd * matmuls / (peak16 * eff) + scores / bw
    else:
        if layout.attention in ("flash-attention-3", "cudnn-fused") and hopper_or_newer(gpu):
            rate = ATTN_NATIVE_RATE * s / (s + ATTN_NATIVE_SEQ_HALF)
        else:
            rate = (params.attn_hopper if hopper_or_newer(gpu) else params.attn_ampere) * s / (s + ATTN_SEQ_HALF)
        t_attn = attn_fwd * passes / (peak16 * rate)

    # memory-bound work; a forward is ~1/3 of forward + backward traffic
    fwd_share = 1.0 / 3.0 if trains else 1.0
    work = (fwd_share * (1.0 + r) + (1.0 - fwd_share)) if trains else 1.0
    fused = COMPILE_ELEMENTWISE if layout.compile else 1.0
    elem = params.elem_bytes * fused * (h + f) * m_gpu * L * work / per_gpu
    loss = params.loss_bytes * model.vocab * m_gpu * work / tp
    dequant = 0.0
    if mode == "qlora":
        # every pass that multiplies by a frozen 4-bit weight unpacks it first
        dequant = params.dequant_bytes * model.block_linear_params / per_gpu * (1.0 + bwd + r)
    adapters = 0.0
    if mode in ("lora", "qlora"):
        # each adapted linear's side path, `base(x) + lora_B(lora_A(dropout(x))) * scaling`
        # (huggingface/peft src/peft/tuners/lora/layer.py, Linear.forward): elementwise passes
        # over its input and output and two thin matmuls, memory-bound; the forward and again
        # in the backward
        width = adapted_width(model, setup, experts=model.experts_per_token, fused=knobs.fused_projections)
        adapters = params.adapter_bytes * fused * width * m_gpu * work / per_gpu
    casts = 0.0
    if layout.precision == "fp8":
        # Transformer Engine casts each linear's input (forward) and output grad (backward) to
        # fp8 (read 2 B, write 1 B) and each weight once per pass (3 B)
        casts = 3.0 * (h + f) * 3.0 * m_gpu * L / per_gpu + 3.0 * model.block_linear_params / per_gpu * 2
    t_mem = (elem + loss + dequant + adapters + casts) / bw

    # The CPU launches kernels ahead of the GPU; its time per layer (Python, autograd, hooks)
    # only shows when it exceeds the GPU's: small micro-batches of eager code are launch-bound.
    t_gpu = t_mm + t_attn + t_mem
    launch = COMPILE_LAUNCH if layout.compile else 1.0
    t_cpu = L / pp * params.layer_overhead_s * launch * (1.0 + r / 3.0)
    t_fw = max(0.0, t_cpu - t_gpu)

    # data-parallel traffic per micro-batch (overlappable) and per optimizer step; the context-
    # parallel ranks hold the same weights, so states are sharded and gradients reduced over dp x cp
    accum = max(1.0, tokens_per_step(setup, layout, knobs) / (m * dp))  # micro-batches per step per replica
    trainable = trainable_params(model, setup) if trains else 0
    total = model.total_params
    weight_bytes = 2.0
    if mode == "qlora":
        # NF4 codes + constants for the block weights, 16-bit for the rest (QLoRA paper §2)
        bits = NF4_DQ_BITS if setup.double_quant else NF4_BITS
        frozen = model.block_linear_params
        weight_bytes = (frozen * bits / 8 + (total - frozen) * 2.0) / total
    group = dp * cp
    per_node_group = max(1, layout.gpus_per_node // tp) if not single_gpu else 1
    nodes_group = max(1, layout.nodes // pp) if not single_gpu else 1
    sharded = layout.zero == 3 or layout.fsdp
    ls = knobs.link_scale
    comm_mb, comm_step = 0.0, 0.0
    if not single_gpu and trains and group > 1:
        coll = lambda size, factor: _collective_seconds(size, factor, group, per_node_group, nodes_group,  # noqa: E731
                                                        layout, gpu, ls)
        if sharded:
            gather = coll(weight_bytes * total / per_gpu, 1.0)
            comm_mb = 2 * gather + coll(GRAD_WIRE_BYTES["sharded"] * trainable / per_gpu, 1.0)
        elif layout.zero == 2:
            comm_mb = coll(GRAD_WIRE_BYTES["sharded"] * trainable / per_gpu, 1.0)
            comm_step = coll(2.0 * trainable / per_gpu, 1.0)
        else:
            wire = GRAD_WIRE_BYTES["sharded" if layout.zero == 1 else "ddp"]
            comm_step = coll(wire * trainable / per_gpu, 2.0)
    host = _host_link_gbps(gpu) * 1e9 * LINK_EFFICIENCY["pcie"] * ls
    if not single_gpu and layout.offload == "all":
        # parameters stream from host memory for every forward and backward (FSDP CPU offload,
        # ZeRO-3 offload_param); gradients go back
        comm_mb += (2 * weight_bytes * total / per_gpu / group + 2.0 * trainable / per_gpu / group) / host
    if trains and layout.activation_offload:
        # saved activations go to pinned host memory in forward and come back in backward, on
        # copy streams beside the compute
        comm_mb += 2.0 * offloaded_activation_bytes(model, layout_setup(setup, layout)) / host

    # tensor parallel: 2 all-reduces of the layer's activations forward, 2 backward, 2 more
    # per recomputed forward (Megatron-LM, Narayanan et al. 2021 §3; with sequence parallel the
    # same bytes as reduce-scatter + all-gather); not overlapped
    t_tp = 0.0
    if tp > 1:
        act = m_gpu * h * 2.0
        per_layer = (2.0 + (2.0 if trains else 0.0) + 2.0 * r)
        t_tp = L / pp * per_layer * _collective_seconds(act, 2.0, tp, tp, 1, layout, gpu, ls)

    # context parallel: the ring of K/V chunks, hidden behind the attention it feeds
    t_cp = 0.0
    if cp > 1:
        kv_bytes = m * 2 * model.kv_dim * 2.0 / tp * (cp - 1) / cp
        passes_cp = (CP_RING_PASSES + (r if trains else 0.0)) if trains else 1.0
        inside = tp * cp <= layout.gpus_per_node
        bw_cp = (_intra_gbps(layout, gpu) if inside else
                 (layout.fabric_gbps or MIN_FABRIC_GBPS) / 8 * LINK_EFFICIENCY["fabric"] / layout.gpus_per_node)
        ring = L / pp * kv_bytes * passes_cp / (bw_cp * 1e9 * ls)
        t_cp = max(0.0, ring - t_attn)

    # pipeline: point-to-point activations between stages (per chunk boundary when interleaved)
    if pp > 1:
        v = layout.virtual_stages
        p2p = m_gpu * h * 2.0 / (tp if layout.sequence_parallel else 1) * PP_P2P_PASSES * v
        across = layout.nodes > 1
        bw_pp = ((layout.fabric_gbps or MIN_FABRIC_GBPS) / 8 * LINK_EFFICIENCY["fabric"] / layout.gpus_per_node
                 if across else _intra_gbps(layout, gpu))
        comm_mb += p2p / (bw_pp * 1e9 * ls)

    # optimizer step, spread over the micro-batches of a step
    opt_bytes = OPTIMIZER_BYTES.get(setup.optimizer, 38.0) * trainable / per_gpu
    if sharded or layout.zero >= 1:
        opt_bytes /= group
    t_opt = 0.0
    t_offload_opt = 0.0
    if trains:
        if setup.optimizer.startswith("paged-"):
            # paged optimizer states are used because they do not fit: they live in host memory
            # and page in over PCIe for every step (bitsandbytes paged optimizers)
            t_opt = opt_bytes / host / accum
        elif layout.offload in ("optimizer", "all") and not single_gpu:
            shard = trainable / per_gpu / (group if (sharded or layout.zero >= 1) else 1)
            t_offload_opt = (shard * 4.0 / host  # grads down (fp32), params up (bf16)
                             + shard * OPTIMIZER_BYTES["adamw"] / (HOST_OPTIMIZER_GBPS * 1e9)) / accum
        else:
            t_opt = opt_bytes / bw / accum
    comm_mb += comm_step / accum

    compute = t_mm + t_attn + t_mem + t_fw
    if knobs.tp_overlap:
        comm_mb, t_tp = comm_mb + t_tp, 0.0
    hidden = max(compute, comm_mb) + (1.0 - params.overlap) * min(compute, comm_mb)
    bubble = pipeline_bubble(pp, layout.virtual_stages, accum)
    total_t = (hidden + t_tp + t_cp + t_opt + t_offload_opt) * bubble
    return StepTime(matmul=t_mm, attention=t_attn, memory_bound=t_mem, framework=t_fw,
                    comm_hidden_or_not=comm_mb, comm_exposed=t_tp + t_cp + t_offload_opt, optimizer=t_opt,
                    bubble_factor=bubble, total=total_t)


def _rate(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec, params: SpeedParams,
          knobs: Knobs, *, single_gpu: bool = False) -> tuple[float, StepTime]:
    st = step_time(model, setup, layout, gpu, params, knobs, single_gpu=single_gpu)
    dp = 1 if single_gpu else layout.data_parallel
    return dp * layout.micro_batch * setup.seq_len / st.total, st


def throughput(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec, *,
               params: SpeedParams = FITTED, knobs: Knobs = Knobs()) -> Throughput:
    """Tokens per second of the whole layout (low, typical, high), MFU and scaling efficiency.

    What runs is read from the layout (micro-batch, precision, attention kernel, checkpointing,
    ZeRO/FSDP/TP/PP, offload, link); the job (model, mode, sequence length, LoRA targets,
    optimizer) from the setup.
    """
    if _peak(gpu, layout.precision, matmul=True) <= 0:
        raise ValueError(f"{gpu.id} has no usable throughput figure for {layout.precision}")
    typical, st = _rate(model, setup, layout, gpu, params, knobs)
    slow, _ = _rate(model, setup, layout, gpu, params, replace(knobs, link_scale=knobs.link_scale * LINK_RANGE[0]))
    fast, _ = _rate(model, setup, layout, gpu, params, replace(knobs, link_scale=knobs.link_scale * LINK_RANGE[1]))
    low, high = slow * params.range_low, fast * params.range_high
    unmeasured = unmeasured_training_note(gpu)
    if unmeasured:
        # no published run anchors this card's rate: the range opens to what derived ceilings miss by
        low, high = min(low, typical * UNMEASURED_TRAINING_RANGE[0]), max(high, typical * UNMEASURED_TRAINING_RANGE[1])
    n = layout.total_gpus
    if n == 1:  # one GPU scales perfectly by definition; offload, if any, is in its rate
        scaling, scaling_range = 1.0, (1.0, 1.0)
    else:
        one, _ = _rate(model, setup, layout, gpu, params, knobs, single_gpu=True)
        scaling = typical / (n * one)
        scaling_range = (min(scaling, slow / (n * one)), max(scaling, fast / (n * one)))
    model_flops = flops_per_token(model, setup, recompute=0.0)
    mfu = model_flops * typical / n / _peak(gpu, layout.precision, matmul=True)
    notes = _notes(setup, layout, gpu, st, typical, mfu, scaling, params)
    if unmeasured:
        notes.insert(1, unmeasured)
    return Throughput(tokens_per_second=(low, typical, high), mfu=mfu, scaling_efficiency=scaling,
                      scaling_range=scaling_range, flops_per_token=model_flops, notes=tuple(notes), step=st)


def _notes(setup: TrainingSetup, layout: Layout, gpu: GpuSpec, st: StepTime, rate: float, mfu: float,
           scaling: float, params: SpeedParams) -> list[str]:
    out = [f"speed model fitted to published runs (llm-foundry, torchtune, Qwen, Answer.AI, NeMo/Megatron, torchtitan): typical "
           f"{rate:,.0f} tokens/s, MFU {mfu:.0%}; range x{params.range_low:.2f}-x{params.range_high:.2f} "
           "from the fit's spread and the link bandwidth"]
    parts = {"matmuls": st.matmul, "attention": st.attention, "memory-bound work": st.memory_bound,
             "framework overhead": st.framework}
    total = st.total / st.bubble_factor
    comm_shown = st.total - (st.compute + st.optimizer) if st.total > 0 else 0.0
    share = ", ".join(f"{k} {v / total:.0%}" for k, v in parts.items() if v / total >= 0.05)
    if comm_shown / st.total >= 0.05:
        share += f", communication not hidden {comm_shown / st.total:.0%}"
    out.append(f"step time: {share}")
    if layout.grad_checkpointing and setup.mode != "inference":
        out.append("gradient checkpointing recomputes the forward in backward (priced in the step time)")
    if setup.mode == "qlora":
        out.append("QLoRA unpacks each 4-bit weight for every pass (priced per weight per micro-batch)")
    if layout.precision == "fp8":
        out.append("fp8 on the linear layers (Transformer Engine-style), attention in bf16")
    if layout.total_gpus > 1:
        link = {"nvlink": "NVLink", "infinity-fabric": "Infinity Fabric", "pcie": "PCIe",
                "pcie-no-p2p": "PCIe without peer-to-peer"}[layout.link]
        out.append(f"scaling efficiency {scaling:.0%} on {layout.total_gpus} GPUs ({link}"
                   + (f", {layout.fabric_gbps:g} Gb/s between nodes" if layout.nodes > 1 and layout.fabric_gbps else "")
                   + ")")
    return out


def training_time(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec,
                  tokens: float, *, knobs: Knobs = Knobs()) -> TrainingTime:
    """Hours to process `tokens` training tokens on `layout` (all its GPUs).

    hours_low comes from the optimistic rate, hours_high from the pessimistic one.
    """
    tp = throughput(model, setup, layout, gpu, knobs=knobs)
    low, typical, high = tp.tokens_per_second
    return TrainingTime(hours_low=tokens / high / 3600, hours=tokens / typical / 3600,
                        hours_high=tokens / low / 3600, flops_per_token=tp.flops_per_token,
                        tokens_per_second=typical, assumptions=list(tp.notes), throughput=tp)


# --- `rentopt estimate --gpu`: the speed model on its own --------------------------------------


@dataclass(frozen=True)
class LayoutSpeed:
    """What `rentopt estimate --gpu ID --gpus N [--nodes M]` reports: the layout that holds the job
    on that node shape and its throughput, or why none fits; plus what was assumed about links."""

    layout: Layout | None
    throughput: Throughput | None
    rejected: str | None
    assumed: tuple[str, ...]


def layout_speed(model: ModelSpec, setup: TrainingSetup, gpu: GpuSpec, gpus: int, nodes: int = 1,
                 fabric_gbps: float | None = None, pins: Pins | None = None) -> LayoutSpeed:
    """The cheapest layout (feasibility's ladder) of `gpus` x `gpu` over `nodes` nodes and its speed.

    Across nodes an InfiniBand fabric of `fabric_gbps` per node is assumed only when given;
    the caller must ask for it (without it feasibility rejects multi-node training).
    """
    if nodes < 1 or gpus < nodes or gpus % nodes:
        raise InputError(f"--gpus {gpus} cannot be spread evenly over --nodes {nodes}")
    per_node = gpus // nodes
    if per_node > gpu.max_gpus_per_node:
        raise InputError(f"{gpu.id} comes at most {gpu.max_gpus_per_node} per node; "
                         f"use --nodes to spread {gpus} GPUs")
    link = default_interconnect(gpu)
    assumed = [f"{per_node} x {gpu.id} per node talk over "
               + (("Infinity Fabric (OAM board)" if gpu.vendor == "AMD" else "NVLink (SXM/OAM board)") if link == "nvlink" else
                  "PCIe without peer-to-peer (GeForce)" if gpu.peer_to_peer_disabled else "PCIe")]
    if nodes > 1:
        if not fabric_gbps:
            raise InputError("training across nodes needs the fabric's speed: pass --fabric-gbps "
                             "(InfiniBand/RoCE per node, e.g. 3200 for 8 x 400G)")
        assumed.append(f"{nodes} nodes joined by InfiniBand at {fabric_gbps:g} Gb/s per node (--fabric-gbps)")
    shape = NodeShape(gpu=gpu, gpus_per_node=per_node, nodes=nodes, interconnect=link,  # type: ignore[arg-type]
                      fabric="infiniband" if nodes > 1 else None, fabric_gbps=fabric_gbps if nodes > 1 else None)
    found = find_layout(model, setup, shape, pins=pins or Pins())
    if not isinstance(found, Fit):
        return LayoutSpeed(None, None, found.reason, tuple(assumed))
    return LayoutSpeed(found.layout, throughput(model, setup, found.layout, gpu), None, tuple(assumed))
