"""Speed-model rules, guarded through the public result (tokens per second) on hand-built layouts.

These tests do not read the model's internals, so the speed model can be rewritten under them:
they check what a pipeline's bubble costs and what NVLink can physically carry, worked out by
hand from the schedule and the data sheet. tools/mutate.py breaks each rule and checks that a
test here notices.
"""

from __future__ import annotations

import pytest

from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.models import Layout, TrainingSetup
from rentopt.optimizer.timing import Knobs, throughput
from rentopt.optimizer.workload import resolve_model

H100 = get_gpu("H100-SXM-80GB")
LLAMA70 = resolve_model("llama-2-70b")
LLAMA13 = resolve_model("llama-2-13b")


def layout(**kw) -> Layout:
    values = dict(gpu=H100.id, gpus_per_node=8, strategy="hand-built", link="nvlink", link_gbps=900.0,
                  required_gb_per_gpu=1.0, gpu_memory_gb=80.0, grad_checkpointing=False)
    values.update(kw)
    return Layout(**values)


def test_a_pipeline_pays_its_bubble():
    # Two pipeline stages (one 8-GPU node each, tensor parallel 8 inside), one replica: a 1F1B or
    # GPipe schedule of m micro-batches per optimizer step idles each stage for (p - 1) of the
    # m + p - 1 slots, so a step takes (1 + (p - 1) / m) x its work (Narayanan et al. 2021,
    # arXiv:2104.04473 §2.2). With m = 2: 1.5x; with m = 4096 the bubble is negligible. LoRA keeps
    # the optimizer step (the other per-step cost) tiny.
    setup = TrainingSetup(mode="lora", seq_len=2048)
    two_stages = layout(nodes=2, tensor_parallel=8, pipeline_parallel=2, fabric_gbps=3200.0)
    tokens_per_micro_batch = 2048
    rate = {m: throughput(LLAMA70, setup, two_stages, H100,
                          knobs=Knobs(tokens_per_step=m * tokens_per_micro_batch)).tokens_per_second[1]
            for m in (2, 4096)}
    assert rate[4096] / rate[2] == pytest.approx(1.5 / (1 + 1 / 4096), rel=0.03)


def test_nvlink_is_priced_at_its_one_way_bandwidth():
    # H100 SXM: NVLink 4 carries 900 GB/s per GPU in both directions together, 450 GB/s each way
    # (NVIDIA H100 datasheet); a ring all-reduce sends one way, so no layout can move its bytes
    # faster than 450 GB/s per GPU (nccl-tests reach ~340-370 GB/s bus bandwidth on DGX H100).
    # Inference with tensor parallel 8: 2 all-reduces per layer of the activations, b x s x h x 2 B,
    # each moving 2 x (8 - 1) / 8 of it per GPU (ring). The time they add is what the same layout
    # takes with NVLink minus what it takes with an unlimited link.
    setup = TrainingSetup(mode="inference", seq_len=4096)
    seconds_per_micro_batch = {}
    for gbps in (900.0, 1e12):
        rate = throughput(LLAMA13, setup, layout(tensor_parallel=8, link_gbps=gbps), H100).tokens_per_second[1]
        seconds_per_micro_batch[gbps] = 4096 / rate  # one replica, micro-batch 1
    all_reduce_seconds = seconds_per_micro_batch[900.0] - seconds_per_micro_batch[1e12]
    activations = 1 * 4096 * 5120 * 2  # b x s x h x 2 B = 41,943,040 B
    bytes_per_gpu = 40 * 2 * 2 * (8 - 1) / 8 * activations  # 40 layers x 2 all-reduces x ring traffic
    implied_gb_per_s = bytes_per_gpu / all_reduce_seconds / 1e9
    assert 0.5 * 450 <= implied_gb_per_s <= 450
