"""Memory rules, guarded: what QLoRA quantises, what FSDP keeps, what ZeRO-2 shards.

Parameter counts are worked out here from the model's shape and the bytes per parameter from
the papers the rules cite; the results are compared with `estimate` (its public figures only).
tools/mutate.py breaks each rule and checks that a test here notices.
"""

from __future__ import annotations

import pytest

from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import ModelSpec, TrainingSetup
from rentopt.optimizer.workload import resolve_model

GB = 1e9

# A Llama-3-shaped model with a large vocabulary, so embeddings and lm_head are a large share:
# 4 layers, hidden 4096 (32 heads of 128, 8 KV heads), SwiGLU 14336, vocabulary 128256.
SMALL = ModelSpec(name="llama3-shape-4-layers", layers=4, hidden=4096, heads=32, kv_heads=8, intermediate=14336,
                  vocab=128256)
# per layer: q 4096x4096, k and v 4096x1024 each, o 4096x4096, gate/up/down 3 x 4096x14336
PER_LAYER = 4096 * 4096 + 2 * 4096 * 1024 + 4096 * 4096 + 3 * 4096 * 14336  # 218,103,808
BLOCK_LINEAR = 4 * PER_LAYER  # 872,415,232
EMBEDDINGS_AND_HEAD = 2 * 128256 * 4096  # 1,050,673,152 (untied)
NORMS = 4 * 2 * 4096 + 4096  # 36,864


def test_the_hand_count_matches_the_model():
    assert SMALL.total_params == BLOCK_LINEAR + EMBEDDINGS_AND_HEAD + NORMS == 1_923_125_248


def test_qlora_quantises_only_the_block_linears_not_embeddings_and_lm_head():
    # QLoRA (arXiv:2305.14314 §3): NF4 with double quantisation = 4 + 8/64 + 32/(64 x 256)
    # = 4.126953125 bits per block-linear weight; embeddings, lm_head and norms stay bf16
    # (transformers' bitsandbytes integration skips lm_head). LoRA rank 8 on q and v only:
    # 4 layers x 8 x ((4096 + 4096) + (4096 + 1024)) = 425,984 adapter weights in fp32 (PEFT).
    setup = TrainingSetup(mode="qlora", lora_rank=8, lora_targets="q,v")
    nf4 = BLOCK_LINEAR * 4.126953125 / 8  # 450,052,096 B
    sixteen_bit = (EMBEDDINGS_AND_HEAD + NORMS) * 2  # 2,101,420,032 B
    adapters = 4 * 8 * ((4096 + 4096) + (4096 + 1024)) * 4  # 1,703,936 B
    expected = (nf4 + sixteen_bit + adapters) / GB  # 2.553 GB
    assert estimate(SMALL, setup).breakdown_gb.weights == pytest.approx(expected, abs=0.006)
    # quantising the embeddings and lm_head too would make it ~1.0 GB: far outside that


def test_fsdp_full_fine_tuning_keeps_no_persistent_16_bit_copy_beside_the_fp32_shard():
    # FSDP mixed precision (torch FSDP MixedPrecision param_dtype): each GPU keeps its fp32 shard
    # (the master copy, 4 B) with Adam's two fp32 moments (8 B) and its shard of the 16-bit
    # gradients (2 B): 14 B per parameter / 8 GPUs; the bf16 weights exist only while gathered.
    model = resolve_model("llama-2-7b")  # 6,738,415,616 parameters (its config.json)
    setup = TrainingSetup(mode="full", gpus=8, fsdp=True)
    expected = model.total_params * 14 / 8 / GB  # 11.79 GB
    assert model.total_params == 6_738_415_616
    assert estimate(model, setup).states_gb_per_gpu == pytest.approx(expected, abs=0.006)
    # DeepSpeed ZeRO-3 differs: it keeps 16-bit partitions and fp32 gradient partitions (18 B/param)


def test_lora_with_zero_2_shards_the_adapter_gradients_and_zero_1_does_not():
    # LoRA rank 256 on every linear of Llama-2-7B: per layer 256 x (4 x (4096 + 4096) + 3 x (4096 +
    # 11008)) = 256 x 78,080 = 19,988,480; x 32 layers = 639,631,360 adapter weights, whose
    # gradients PEFT keeps in fp32 (4 B). ZeRO-2 partitions gradients over the 4 GPUs (ZeRO paper
    # §5.2); ZeRO-1 partitions only the optimizer state.
    model = resolve_model("llama-2-7b")
    adapters = 32 * 256 * (4 * (4096 + 4096) + 3 * (4096 + 11008))
    assert adapters == 639_631_360
    zero2 = estimate(model, TrainingSetup(mode="lora", lora_rank=256, gpus=4, zero=2))
    zero1 = estimate(model, TrainingSetup(mode="lora", lora_rank=256, gpus=4, zero=1))
    assert zero2.breakdown_gb.gradients == pytest.approx(adapters * 4 / 4 / GB, abs=0.006)  # 0.64 GB
    assert zero1.breakdown_gb.gradients == pytest.approx(adapters * 4 / GB, abs=0.006)  # 2.56 GB
    # both shard Adam's state (fp32 m and v, 8 B, no separate master for fp32 adapters)
    assert zero1.breakdown_gb.optimizer == pytest.approx(adapters * 8 / 4 / GB, abs=0.006)  # 1.28 GB
