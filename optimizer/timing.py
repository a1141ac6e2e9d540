"""Hours to train on a layout: FLOPs per token, the GPU's dense peak, an MFU prior and scaling.

Every number is a prior with a range; the quote uses the typical value and reports the range.
A validation run (the seeds' step 1) measures the real throughput; `--tokens-per-second`-style
calibration is left to the user's measured numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rentopt.optimizer.models import GpuSpec, Layout, ModelSpec, TrainingSetup

# Training FLOPs: forward 2 FLOPs per parameter per token, backward twice that = 6N (Kaplan et
# al. 2020, arXiv:2001.08361 §2.1); full activation recomputation adds one forward = 8N
# (bigscience math/README.md, competitors.md §6). Attention adds 12*L*s*d_attn per token for
# training (PaLM, Chowdhery et al. 2022, arXiv:2204.02311 Appendix B).
FORWARD_FLOPS_PER_PARAM = 2
# LoRA/QLoRA: the frozen base needs no weight gradients, only activation gradients, so backward
# costs one forward instead of two: ~4N (competitors.md §6, "our analysis"; adapters are <1 %).
BACKWARD_FACTOR = {"full": 2.0, "lora": 1.0, "qlora": 1.0}

# Model FLOPs utilisation priors (pessimistic, typical, optimistic) by GPU class, applied to the
# dense 16-bit peak. gpu-specs.md §1: whole-model training reaches ~35-55 % MFU on NVLink/NVSwitch
# nodes (stas00/ml-engineering); competitors.md §6: calculators assume 30-50 %, PaLM reached 46 %.
# Fine-tuning at small micro-batches sits at the low end, hence the ranges.
MFU_PRIOR: dict[str, tuple[float, float, float]] = {
    "datacenter": (0.25, 0.38, 0.50),
    "workstation": (0.25, 0.35, 0.45),
    "consumer": (0.25, 0.35, 0.45),
}
# AMD Instinct parts reach ~51-60 % of peak in stas00's MAMF matmul benchmark against ~80 % for
# H100 SXM (gpu-specs.md §1), so their achievable MFU is scaled by ~0.7.
VENDOR_FACTOR = {"AMD": 0.7}

# QLoRA dequantises each 4-bit weight for every matmul. LitGPT's resource tables (A100, time per
# 1k iterations, LoRA vs bnb.nf4): phi-1.5 1.62 vs 1.77 min, StableLM-3B 1.24 vs 1.82, Llama-2-7B
# 2.36 vs 3.68, Llama-2-13B 3.19 vs 6.38: throughput x0.5-0.92.
QLORA_SPEED = (0.50, 0.65, 0.90)

# Memory-bound decoding: each new token reads every weight once; a well-tuned server reaches
# ~60 % of peak bandwidth (vLLM/TGI-class kernels; a prior, not a measurement).
DECODE_BANDWIDTH_EFFICIENCY = 0.6


@dataclass(frozen=True)
class TrainingTime:
    hours_low: float
    hours: float
    hours_high: float
    flops_per_token: float
    tokens_per_second: float
    assumptions: list[str] = field(default_factory=list)


def flops_per_token(model: ModelSpec, setup: TrainingSetup) -> float:
    """Training FLOPs per token (forward + backward + recomputation) for the whole model.

    >>> from rentopt.optimizer.models import ModelSpec, TrainingSetup
    >>> m = ModelSpec(name="x", layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008,
    ...               vocab=32000, params=6_738_415_616)
    >>> full = flops_per_token(m, TrainingSetup(mode="full", grad_checkpointing=False, seq_len=2048))
    >>> round(full / m.active_params, 2)  # 6N (embedding lookups excluded) plus attention
    6.36
    """
    matmul_params = model.active_params - model.embedding_params + (
        model.embedding_params if model.tied_embeddings else 0)  # the output projection is a matmul
    forward = FORWARD_FLOPS_PER_PARAM * matmul_params + 4 * model.layers * setup.seq_len * model.q_dim
    if setup.mode == "inference":
        return forward
    passes = 1 + BACKWARD_FACTOR[setup.mode] + (1 if setup.grad_checkpointing else 0)
    return forward * passes


def _peak_tflops(gpu: GpuSpec, setup: TrainingSetup) -> float:
    if setup.precision == "fp32":
        return gpu.fp32_tflops or gpu.fp16_tflops or 0.0
    # fp8: no speed-up is assumed over bf16 (Transformer Engine gains depend on the model);
    # GPUs without bf16 (V100, T4) train in fp16 AMP.
    return gpu.bf16_tflops or gpu.fp16_tflops or 0.0


def training_time(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec,
                  tokens: float) -> TrainingTime:
    """Hours to process `tokens` training tokens on `layout` (all its GPUs)."""
    assumptions: list[str] = []
    fpt = flops_per_token(model, setup)
    peak = _peak_tflops(gpu, setup) * 1e12
    if peak <= 0:
        raise ValueError(f"{gpu.id} has no usable throughput figure for {setup.precision}")
    mfu_low, mfu_mid, mfu_high = MFU_PRIOR[gpu.gpu_class]
    factor = VENDOR_FACTOR.get(gpu.vendor, 1.0)
    if factor != 1.0:
        assumptions.append(f"{gpu.vendor} MFU scaled x{factor} (matmul efficiency vs NVIDIA)")
    q_low, q_mid, q_high = QLORA_SPEED if setup.mode == "qlora" else (1.0, 1.0, 1.0)
    if setup.mode == "qlora":
        assumptions.append(f"QLoRA dequantisation: x{q_mid} throughput ({q_low}-{q_high}, LitGPT tables)")
    if setup.precision == "fp8":
        assumptions.append("fp8: no speed-up over bf16 assumed")
    n = layout.total_gpus

    def rate(mfu: float, scaling: float, q: float) -> float:
        return n * peak * mfu * factor * scaling * q / fpt  # tokens per second

    fast = rate(mfu_high, layout.scaling_high, q_high)
    typical = rate(mfu_mid, layout.scaling_efficiency, q_mid)
    slow = rate(mfu_low, layout.scaling_low, q_low)
    assumptions.append(
        f"{fpt / model.active_params:.1f} FLOPs/param/token, MFU {mfu_mid:.0%} ({mfu_low:.0%}-{mfu_high:.0%}) "
        f"of {peak / 1e12:.0f} TFLOPS x {n}, scaling {layout.scaling_efficiency:.0%}"
    )
    return TrainingTime(
        hours_low=tokens / fast / 3600, hours=tokens / typical / 3600, hours_high=tokens / slow / 3600,
        flops_per_token=fpt, tokens_per_second=typical, assumptions=assumptions,
    )


def decode_time(model: ModelSpec, setup: TrainingSetup, layout: Layout, gpu: GpuSpec,
                tokens: float, weight_bytes: float) -> TrainingTime:
    """Hours to generate `tokens` (inference): memory-bound, one weight read per step per batch."""
    # Replicas each read their own copy; tensor-parallel GPUs each read a slice: either way the
    # aggregate rate is GPUs x bandwidth / model bytes per decoding step of `micro_batch` tokens.
    bandwidth = gpu.memory_bandwidth_gbps * 1e9 * DECODE_BANDWIDTH_EFFICIENCY
    rate = setup.micro_batch * layout.total_gpus * bandwidth / max(weight_bytes, 1.0)
    note = (f"decoding is memory-bound: {weight_bytes / 1e9:.1f} GB of weights read per step at "
            f"{DECODE_BANDWIDTH_EFFICIENCY:.0%} of {gpu.memory_bandwidth_gbps:.0f} GB/s")
    return TrainingTime(hours_low=tokens / (rate * 1.3) / 3600, hours=tokens / rate / 3600,
                        hours_high=tokens / (rate * 0.6) / 3600, flops_per_token=flops_per_token(model, setup),
                        tokens_per_second=rate, assumptions=[note])
