"""Mechanism tests for optimizer/memory.py: each published rule, checked on its own numbers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer.memory import (
    NF4_BITS,
    NF4_DQ_BITS,
    adapter_params,
    estimate,
    model_states_gb,
    trainable_params,
)
from rentopt.optimizer.models import ModelSpec, TrainingSetup

LLAMA2_7B = ModelSpec(name="llama-2-7b", layers=32, hidden=4096, heads=32, kv_heads=32,
                      intermediate=11008, vocab=32000, params=6_738_415_616)
LLAMA31_8B = ModelSpec(name="llama-3.1-8b", layers=32, hidden=4096, heads=32, kv_heads=8,
                       intermediate=14336, vocab=128256, params=8_030_261_248)
T5_3B = ModelSpec(name="t5-3b", layers=48, hidden=1024, heads=32, kv_heads=32, intermediate=16384,
                  vocab=32128, mlp_gated=False, tied_embeddings=True, params=2_851_000_000)


def setup(**kw) -> TrainingSetup:
    return TrainingSetup(**{"mode": "full", **kw})


def test_mixed_precision_adamw_is_16_bytes_per_param_plus_activations():
    # 2 (bf16 weight) + 2 (grad) + 4 (fp32 master) + 8 (m, v) = 16 B/param (ZeRO paper).
    e = estimate(LLAMA2_7B, setup(seq_len=128))
    P = LLAMA2_7B.total_params
    assert e.breakdown_gb.weights == pytest.approx(2 * P / 1e9, abs=0.01)
    assert e.breakdown_gb.gradients == pytest.approx(2 * P / 1e9, abs=0.01)
    assert e.breakdown_gb.optimizer == pytest.approx(12 * P / 1e9, abs=0.01)
    states = e.breakdown_gb.weights + e.breakdown_gb.gradients + e.breakdown_gb.optimizer
    assert states == pytest.approx(16 * P / 1e9, rel=1e-3)


def test_pure_bf16_is_8_bytes_and_fp32_is_16():
    P = LLAMA2_7B.total_params
    pure = estimate(LLAMA2_7B, setup(precision="bf16-true", seq_len=128)).breakdown_gb
    assert pure.weights + pure.gradients + pure.optimizer == pytest.approx(8 * P / 1e9, rel=1e-3)
    fp32 = estimate(LLAMA2_7B, setup(precision="fp32", seq_len=128)).breakdown_gb
    assert fp32.weights + fp32.gradients + fp32.optimizer == pytest.approx(16 * P / 1e9, rel=1e-3)


def test_deepspeed_estimator_numbers_are_reproduced():
    # DeepSpeed docs memory.rst, t5-3b on 1 node x 8 GPUs (GiB): ZeRO-3 6.10, ZeRO-3 + full
    # offload 0.12, ZeRO-2 + optimizer offload 5.31.
    gib = 2**30 / 1e9
    z3 = model_states_gb(T5_3B, setup(gpus=8, zero=3, precision="fp16-mixed"))
    assert z3 / gib == pytest.approx(6.10, rel=0.02)
    z3_off = model_states_gb(T5_3B, setup(gpus=8, zero=3, offload="all", precision="fp16-mixed"))
    assert z3_off / gib == pytest.approx(0.12, rel=0.05)
    z2_off = model_states_gb(T5_3B, setup(gpus=8, zero=2, offload="optimizer", precision="fp16-mixed"))
    assert z2_off / gib == pytest.approx(5.31, rel=0.02)


def test_zero_stages_shard_progressively():
    peaks = [estimate(LLAMA2_7B, setup(gpus=8, zero=z)).peak_gb_per_gpu for z in (0, 1, 2, 3)]
    assert peaks[1] < peaks[0] and peaks[2] < peaks[1] and peaks[3] < peaks[2]
    # ZeRO-1 divides only the optimizer state: 12 B/param -> 12/8 plus fp32 grad partitions.
    z1 = estimate(LLAMA2_7B, setup(gpus=8, zero=1)).breakdown_gb
    assert z1.optimizer == pytest.approx(12 * LLAMA2_7B.total_params / 8 / 1e9, abs=0.01)


def test_offload_moves_state_to_host():
    on = estimate(LLAMA2_7B, setup(gpus=8, zero=3))
    off = estimate(LLAMA2_7B, setup(gpus=8, zero=3, offload="optimizer"))
    assert off.breakdown_gb.optimizer == 0
    assert off.cpu_offload_gb > 0 and off.peak_gb_per_gpu < on.peak_gb_per_gpu


def test_gradient_checkpointing_and_flash_attention_cut_activations():
    base = dict(mode="lora", seq_len=8192, micro_batch=2)
    full_acts = estimate(LLAMA2_7B, TrainingSetup(**base, grad_checkpointing=False, flash_attention=False))
    no_flash = estimate(LLAMA2_7B, TrainingSetup(**base, grad_checkpointing=False))
    ckpt = estimate(LLAMA2_7B, TrainingSetup(**base))
    assert full_acts.breakdown_gb.activations > no_flash.breakdown_gb.activations > ckpt.breakdown_gb.activations
    # Korthikanti: without flash the a*s^2 term is 5 bytes per score per layer.
    s, a, L = 8192, 32, 32
    scores_gb = 5 * a * s * s * 2 * L / 1e9
    assert full_acts.breakdown_gb.activations - no_flash.breakdown_gb.activations == pytest.approx(scores_gb, rel=0.02)


def test_activations_grow_linearly_with_sequence_and_batch():
    a1 = estimate(LLAMA2_7B, TrainingSetup(mode="lora", seq_len=1024, grad_checkpointing=False)).breakdown_gb.activations
    a2 = estimate(LLAMA2_7B, TrainingSetup(mode="lora", seq_len=2048, grad_checkpointing=False)).breakdown_gb.activations
    a4 = estimate(LLAMA2_7B, TrainingSetup(mode="lora", seq_len=1024, micro_batch=4, grad_checkpointing=False)).breakdown_gb.activations
    assert a2 == pytest.approx(2 * a1, rel=0.02)
    assert a4 == pytest.approx(4 * a1, rel=0.02)


def test_lora_trains_adapters_only():
    s = TrainingSetup(mode="lora", lora_rank=16)
    A = adapter_params(LLAMA2_7B, s)
    # all-linear: per layer q,k,v,o r(h+h) each + gate,up r(h+f) + down r(f+h)
    h, f, r = 4096, 11008, 16
    assert A == 32 * (4 * r * 2 * h + 3 * r * (h + f))
    assert trainable_params(LLAMA2_7B, s) == A
    e = estimate(LLAMA2_7B, s)
    assert e.trainable_params_b == pytest.approx(A / 1e9, abs=1e-4)
    # frozen bf16 base (2 B/param) + fp32 adapters
    assert e.breakdown_gb.weights == pytest.approx((2 * LLAMA2_7B.total_params + 4 * A) / 1e9, abs=0.01)
    with_head = adapter_params(LLAMA2_7B, TrainingSetup(mode="lora", lora_rank=16, lora_targets="all-linear,lm_head"))
    assert with_head - A == r * (h + 32000)


def test_qlora_nf4_storage_and_double_quant():
    assert NF4_BITS == 4.5
    assert NF4_DQ_BITS == pytest.approx(4.127, abs=0.001)
    dq = estimate(LLAMA2_7B, TrainingSetup(mode="qlora", double_quant=True)).breakdown_gb.weights
    no_dq = estimate(LLAMA2_7B, TrainingSetup(mode="qlora", double_quant=False)).breakdown_gb.weights
    linear = LLAMA2_7B.block_linear_params
    assert no_dq - dq == pytest.approx(linear * (NF4_BITS - NF4_DQ_BITS) / 8 / 1e9, abs=0.01)
    # embeddings and lm_head stay 16-bit: 2 x 32000 x 4096 x 2 B
    lora = estimate(LLAMA2_7B, TrainingSetup(mode="lora")).peak_gb_per_gpu
    assert dq < lora / 2


def test_paged_optimizer_state_is_not_counted_by_the_allocator():
    paged = estimate(LLAMA2_7B, setup(optimizer="paged-adamw", precision="bf16-true"))
    plain = estimate(LLAMA2_7B, setup(precision="bf16-true"))
    assert paged.breakdown_gb.optimizer == 0
    assert plain.peak_gb_per_gpu - paged.peak_gb_per_gpu == pytest.approx(plain.breakdown_gb.optimizer, abs=0.02)
    assert paged.cpu_offload_gb == pytest.approx(plain.breakdown_gb.optimizer, abs=0.02)


def test_8bit_adam_uses_two_bytes_of_moments():
    eight = estimate(LLAMA2_7B, setup(optimizer="adamw-8bit")).breakdown_gb.optimizer
    # fp32 master 4 + two 1-byte moments = 6 B/param (EleutherAI Transformer Math 101)
    assert eight == pytest.approx(6 * LLAMA2_7B.total_params / 1e9, abs=0.01)


def test_optimizer_in_backward_drops_the_gradient_buffer():
    normal = estimate(LLAMA2_7B, setup(precision="bf16-true")).breakdown_gb.gradients
    inbwd = estimate(LLAMA2_7B, setup(precision="bf16-true", optimizer_in_backward=True)).breakdown_gb.gradients
    assert inbwd < normal / 20


def test_kv_cache_matches_the_hf_llama31_table():
    # HF blog llama31.md: 8B fp16 KV = 0.125 GB per 1k tokens (GiB), i.e. 131,072 B per token.
    short = estimate(LLAMA31_8B, TrainingSetup(mode="inference", seq_len=1024))
    longer = estimate(LLAMA31_8B, TrainingSetup(mode="inference", seq_len=1024 + 16384))
    kv_per_token = 2 * 32 * 8 * 128 * 2
    assert kv_per_token == 131_072
    prefill_per_token = (3 * 14336 + 4 * 4096) * 2
    delta = (longer.breakdown_gb.activations - short.breakdown_gb.activations) * 1e9
    assert delta == pytest.approx(16384 * (kv_per_token + prefill_per_token), rel=0.01)


def test_inference_quantisation_shrinks_weights():
    w = {q: estimate(LLAMA2_7B, TrainingSetup(mode="inference", quant=q)).breakdown_gb.weights
         for q in ("none", "int8", "nf4", "int4")}
    assert w["none"] > w["int8"] > w["int4"] >= w["nf4"]


def test_tensor_parallel_divides_weights_and_activations():
    one = estimate(LLAMA2_7B, TrainingSetup(mode="lora", gpus=1))
    tp4 = estimate(LLAMA2_7B, TrainingSetup(mode="lora", gpus=4, tensor_parallel=4))
    assert tp4.breakdown_gb.weights == pytest.approx(one.breakdown_gb.weights / 4, rel=0.01)


def test_views_are_ordered_and_the_margin_applies_only_to_the_uncertain_part():
    e = estimate(LLAMA2_7B, TrainingSetup(mode="lora", margin=0.2))
    assert e.peak_gb_per_gpu < e.reserved_gb_per_gpu < e.device_gb_per_gpu <= e.required_gb_per_gpu
    # Exactly known: the bf16 base (2 B/param) + fp32 adapters with their fp32 gradient and two
    # Adam moments (4 + 4 + 8 B per adapter parameter, PEFT keeps adapters in fp32).
    A = adapter_params(LLAMA2_7B, TrainingSetup(mode="lora"))
    states = (2 * LLAMA2_7B.total_params + 16 * A) / 1e9
    assert e.states_gb_per_gpu == pytest.approx(states, abs=0.02)
    # The margin and the allocator slack are one headroom: the larger counts. The margined
    # allocation (uncertain part x 1.2, plus 0.8 GB of CUDA context) against the device view.
    margined = (e.peak_gb_per_gpu - states) * 1.2 + 0.8
    assert e.required_gb_per_gpu == pytest.approx(states + max(e.device_gb_per_gpu - states, margined), abs=0.02)
    wide = estimate(LLAMA2_7B, TrainingSetup(mode="lora", margin=0.6))  # past the slack: the margin decides
    assert wide.required_gb_per_gpu == pytest.approx(states + (wide.peak_gb_per_gpu - states) * 1.6 + 0.8, abs=0.02)
    assert wide.required_gb_per_gpu > wide.device_gb_per_gpu
    b = e.breakdown_gb
    assert b.weights + b.gradients + b.optimizer + b.activations + b.overhead == pytest.approx(e.device_gb_per_gpu, abs=0.05)


def test_checkpoint_sizes():
    full = estimate(LLAMA2_7B, setup())
    # bf16 weights 2 + fp32 master 4 + Adam 8 = 14 B/param: several times the weights (seed 000).
    assert full.checkpoint_gb == pytest.approx(14 * LLAMA2_7B.total_params / 1e9, abs=0.05)
    assert full.checkpoint_gb > 5 * full.model_files_gb
    lora = estimate(LLAMA2_7B, TrainingSetup(mode="lora"))
    assert lora.checkpoint_gb < 1


def test_invalid_setups_are_rejected():
    with pytest.raises(ValueError, match="qlora"):
        TrainingSetup(mode="qlora", precision="fp32")
    with pytest.raises(ValueError, match="either"):
        TrainingSetup(mode="full", zero=3, fsdp=True)
    with pytest.raises(ValueError, match="multiple"):
        TrainingSetup(mode="full", gpus=3, tensor_parallel=2)
    with pytest.raises(ValueError, match="LoRA target"):
        TrainingSetup(mode="lora", lora_targets="q,bogus")


@settings(max_examples=60, deadline=None)
@given(mode=st.sampled_from(["full", "lora", "qlora"]), gpus=st.sampled_from([1, 2, 4, 8]),
       zero=st.sampled_from([0, 1, 2, 3]), seq=st.integers(128, 16384), mb=st.integers(1, 8))
def test_more_gpus_never_need_more_memory_per_gpu_under_zero3(mode, gpus, zero, seq, mb):
    """Sharded training with more data-parallel GPUs never needs more per GPU; positive views."""
    a = estimate(LLAMA2_7B, TrainingSetup(mode=mode, gpus=gpus, zero=zero, seq_len=seq, micro_batch=mb))
    assert a.peak_gb_per_gpu > 0 and a.required_gb_per_gpu > a.peak_gb_per_gpu
    if zero == 3 and gpus < 8:
        b = estimate(LLAMA2_7B, TrainingSetup(mode=mode, gpus=gpus * 2, zero=3, seq_len=seq, micro_batch=mb))
        assert b.peak_gb_per_gpu <= a.peak_gb_per_gpu + 1e-6
