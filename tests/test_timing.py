"""The speed model: FLOPs, hours and communication worked by hand, and the physics it must respect.

Expected numbers are computed here from the architecture and public link speeds, not read back
from timing.py (its fitted constants are checked against published runs in
test_timing_calibration.py).
"""

from __future__ import annotations

import pytest

from rentopt.optimizer.feasibility import Fit, NodeShape, Pins, find_layout
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.models import Layout, TrainingSetup
from rentopt.optimizer.timing import flops_per_token, step_time, throughput, training_time
from rentopt.optimizer.workload import resolve_model

LLAMA7 = resolve_model("llama-2-7b")

# Llama-2-7B by hand (config.json: 32 layers, hidden 4096, MHA, intermediate 11008, vocab 32000):
# per layer q,k,v,o 4 x 4096^2 = 67,108,864 and gate,up,down 3 x 4096 x 11008 = 135,266,304;
# 32 layers = 6,476,005,376; the output head 32000 x 4096 = 131,072,000 -> 6,607,077,376 weights
# a token is multiplied by. Forward: 2 FLOPs each = 13,214,154,752, plus causal attention
# 2 x 32 layers x 2048 x 4096 = 536,870,912 -> 13,751,025,664 per token.
FORWARD_7B_2048 = 13_751_025_664


def layout(gpu: str, n: int = 1, link: str = "pcie", mode: str = "full", micro_batch: int = 1,
           nodes: int = 1, fabric_gbps: float | None = None, zero: int | None = None, **setup_kw):
    setup = TrainingSetup(mode=mode, micro_batch=micro_batch, **setup_kw)
    shape = NodeShape(gpu=get_gpu(gpu), gpus_per_node=n, nodes=nodes, interconnect=link,  # type: ignore[arg-type]
                      fabric="infiniband" if fabric_gbps else None, fabric_gbps=fabric_gbps)
    fit = find_layout(LLAMA7, setup, shape, pins=Pins(zero=zero))
    assert isinstance(fit, Fit), fit
    return setup, fit.layout


def test_flops_per_token_worked_by_hand():
    no_ckpt = dict(grad_checkpointing=False, seq_len=2048)
    full = flops_per_token(LLAMA7, TrainingSetup(mode="full", **no_ckpt))
    lora = flops_per_token(LLAMA7, TrainingSetup(mode="lora", **no_ckpt))
    recompute = flops_per_token(LLAMA7, TrainingSetup(mode="full", grad_checkpointing=True, seq_len=2048))
    assert full == pytest.approx(3 * FORWARD_7B_2048, rel=1e-12)  # forward + 2x backward
    assert lora == pytest.approx(2 * FORWARD_7B_2048, rel=1e-12)  # no weight gradients
    assert recompute == pytest.approx(4 * FORWARD_7B_2048, rel=1e-12)  # one more forward
    assert flops_per_token(LLAMA7, TrainingSetup(mode="full", seq_len=2048), recompute=0.5) == \
        pytest.approx(3.5 * FORWARD_7B_2048, rel=1e-12)


def test_moe_uses_active_parameters():
    mixtral = resolve_model("mixtral-8x7b")
    f = flops_per_token(mixtral, TrainingSetup(mode="full", grad_checkpointing=False, seq_len=128))
    assert f < 7 * mixtral.active_params
    assert mixtral.active_params < 0.35 * mixtral.total_params


def test_hours_mfu_and_rate_agree():
    """Hours = tokens / rate; hours_high (the deadline's) from the pessimistic rate; MFU is model
    FLOPs x rate / (GPUs x peak), the 6N-style count without recompute."""
    setup, lay = layout("H100-SXM-80GB", 8, "nvlink", micro_batch=4)
    gpu = get_gpu("H100-SXM-80GB")
    t = training_time(LLAMA7, setup, lay, gpu, tokens=1e9)
    low, typical, high = t.throughput.tokens_per_second
    assert t.hours == pytest.approx(1e9 / typical / 3600, rel=1e-12)
    assert t.hours_high == pytest.approx(1e9 / low / 3600, rel=1e-12)
    assert t.hours_low == pytest.approx(1e9 / high / 3600, rel=1e-12)
    assert t.hours_low < t.hours < t.hours_high
    assert t.throughput.mfu == pytest.approx(3 * FORWARD_7B_2048 * typical / (8 * 989.4e12), rel=1e-9)
    # an NVLink node at micro-batch 4 x 2048 runs at a sane MFU, far from the 100 % ceiling
    assert 0.25 < t.throughput.mfu < 0.65


def test_fsdp_over_pcie_without_p2p_is_bandwidth_bound():
    """8 x RTX 4090 (no P2P), ZeRO-3 7B full: per micro-batch each GPU receives the bf16 weights
    twice (forward, backward) and reduce-scatters bf16 gradients: 3 x 2 B x 6.74e9 x 7/8 =
    35.4 GB. Even at the full PCIe Gen4 x16 31.5 GB/s and perfect overlap that takes 1.12 s, so
    the 8 GPUs cannot beat 8 x 2048 tokens / 1.12 s = 14.6k tokens/s."""
    setup, lay = layout("RTX-4090-24GB", 8, "pcie")
    assert lay.zero == 3 and lay.link == "pcie-no-p2p"
    t = throughput(LLAMA7, setup, lay, get_gpu("RTX-4090-24GB"))
    bytes_per_gpu = 3 * 2 * LLAMA7.total_params * 7 / 8
    assert bytes_per_gpu == pytest.approx(35.4e9, rel=0.01)
    ceiling = 8 * 2048 / (bytes_per_gpu / 31.5e9)
    assert t.tokens_per_second[2] < ceiling  # even the optimistic end
    assert t.scaling_efficiency < 0.70  # the seed's network-bottleneck flag must fire here


def test_nvlink_keeps_zero3_near_linear():
    setup, lay = layout("A100-SXM4-80GB", 8, "nvlink", micro_batch=4, zero=3)
    assert lay.link == "nvlink" and lay.zero == 3
    t = throughput(LLAMA7, setup, lay, get_gpu("A100-SXM4-80GB"))
    assert t.scaling_efficiency > 0.85


def test_a_slow_fabric_shows_in_the_scaling_efficiency():
    """Two nodes of 8 x H100 training a 7B model with ZeRO-3: 200 Gb/s between nodes moves
    (2 x 2 B + 2 B) x 6.74e9 x 1/2 = 20 GB per node per micro-batch in >= 0.8 s, against
    3200 Gb/s in 1/16 of that."""
    kw = dict(micro_batch=1, zero=3)
    setup, slow = layout("H100-SXM-80GB", 8, "nvlink", nodes=2, fabric_gbps=200, **kw)
    _, fast = layout("H100-SXM-80GB", 8, "nvlink", nodes=2, fabric_gbps=3200, **kw)
    gpu = get_gpu("H100-SXM-80GB")
    assert slow.zero == 3 and slow.fabric_gbps == 200
    t_slow, t_fast = throughput(LLAMA7, setup, slow, gpu), throughput(LLAMA7, setup, fast, gpu)
    assert t_slow.scaling_efficiency < t_fast.scaling_efficiency
    node_bytes = 3 * 2 * LLAMA7.total_params / 2
    assert node_bytes / 25e9 > 0.8  # 200 Gb/s = 25 GB/s
    # the slow fabric caps the rate below 16 x 2048 tokens per 0.8 s, whatever the GPUs do
    assert t_slow.tokens_per_second[1] < 16 * 2048 / (node_bytes / 25e9)


def test_checkpointing_is_priced_not_a_fixed_factor():
    """Recompute costs one more forward of what actually runs: a compute-bound full fine-tune
    slows by less than the FLOP ratio 4/3 (the optimizer and memory-bound work do not repeat
    in full); LoRA, whose backward is only 1x the forward, by more than full does."""
    gpu = get_gpu("A100-SXM4-80GB")
    rates = {}
    for mode in ("full", "lora"):
        for ckpt in (True, False):
            setup, lay = layout("A100-SXM4-80GB", 1, "nvlink", mode=mode, micro_batch=4, grad_checkpointing=ckpt)
            lay = lay.model_copy(update={"grad_checkpointing": ckpt})
            rates[mode, ckpt] = throughput(LLAMA7, setup, lay, gpu).tokens_per_second[1]
    full_cost = rates["full", False] / rates["full", True]
    lora_cost = rates["lora", False] / rates["lora", True]
    assert 1.15 < full_cost <= 4 / 3
    assert lora_cost > full_cost


def test_qlora_dequantisation_is_per_micro_batch():
    """Unpacking the 4-bit weights costs the same per micro-batch whatever its size, so QLoRA's
    gap to LoRA shrinks as the micro-batch grows (Answer.AI: 7B on 2 x 3090, 1,564 s at batch 1
    vs 998 s at batch 4 for QLoRA)."""
    gpu = get_gpu("RTX-4090-24GB")

    def gap(mb: int) -> float:
        setup, lay = layout("RTX-4090-24GB", 1, mode="qlora", micro_batch=mb)
        lora = setup.model_copy(update={"mode": "lora"})
        q = throughput(LLAMA7, setup, lay, gpu).tokens_per_second[1]
        return throughput(LLAMA7, lora, lay, gpu).tokens_per_second[1] / q

    assert gap(1) > gap(8) > 1.0
    setup, lay = layout("RTX-4090-24GB", 1, mode="qlora", micro_batch=1)
    st = step_time(LLAMA7, setup, lay, gpu)
    lora_st = step_time(LLAMA7, setup.model_copy(update={"mode": "lora"}), lay, gpu)
    assert st.memory_bound > lora_st.memory_bound


def test_small_micro_batches_are_slower_per_token():
    gpu = get_gpu("A100-SXM4-80GB")
    rates = []
    for mb in (1, 2, 8):
        setup, lay = layout("A100-SXM4-80GB", 1, "nvlink", mode="lora", micro_batch=mb, seq_len=512)
        rates.append(throughput(LLAMA7, setup, lay, gpu).tokens_per_second[1])
    assert rates[0] < rates[1] < rates[2]


def test_single_gpu_scaling_is_one_and_range_is_ordered():
    setup, lay = layout("RTX-4090-24GB", 1, mode="lora")
    t = throughput(LLAMA7, setup, lay, get_gpu("RTX-4090-24GB"))
    assert t.scaling_efficiency == pytest.approx(1.0)
    low, typical, high = t.tokens_per_second
    assert low < typical < high
    assert t.notes and any("step time" in n for n in t.notes)


def test_no_throughput_figure_is_an_error():
    gpu = get_gpu("T4-16GB").model_copy(update={"bf16_tflops": None, "fp16_tflops": None, "fp32_tflops": None})
    setup, lay = layout("RTX-4090-24GB", mode="qlora")
    with pytest.raises(ValueError, match="throughput"):
        training_time(LLAMA7, setup, lay, gpu, 1e6)


def test_layout_decides_what_runs_not_the_setup():
    """The planner may hand a layout that differs from the setup's wish (checkpointing off where
    memory allows): the layout wins."""
    setup, lay = layout("A100-SXM4-80GB", 1, "nvlink", micro_batch=2)
    gpu = get_gpu("A100-SXM4-80GB")
    on = throughput(LLAMA7, setup, lay.model_copy(update={"grad_checkpointing": True}), gpu)
    off = throughput(LLAMA7, setup, lay.model_copy(update={"grad_checkpointing": False}), gpu)
    assert off.tokens_per_second[1] > on.tokens_per_second[1]
    assert isinstance(lay, Layout)


def test_lora_side_paths_cost_memory_traffic_in_proportion_to_the_adapted_widths():
    """PEFT runs `base(x) + lora_B(lora_A(dropout(x))) * scaling` beside every adapted linear:
    elementwise passes over its input and output, memory-bound, so that time grows with the
    adapted linears' d_in + d_out and nothing else of the step does. Widths of Llama-2-7B by hand
    (per layer, x 32): q,v 2 x 8,192 = 16,384 -> 524,288; q,k,v,o 32,768 -> 1,048,576; every
    linear also gate, up 2 x (4,096 + 11,008) and down 15,104 = 78,080 -> 2,498,560."""
    gpu = get_gpu("H100-SXM-80GB")
    setup, lay = layout("H100-SXM-80GB", 1, mode="lora", micro_batch=2)

    def step(targets: str):  # noqa: ANN202
        return step_time(LLAMA7, setup.model_copy(update={"lora_targets": tuple(targets.split(","))}), lay, gpu)

    qv, qkvo, every = step("q,v"), step("q,k,v,o"), step("q,k,v,o,gate,up,down")
    assert qv.matmul == qkvo.matmul == every.matmul and qv.attention == every.attention
    assert every.memory_bound > qkvo.memory_bound > qv.memory_bound
    ratio = (every.memory_bound - qv.memory_bound) / (qkvo.memory_bound - qv.memory_bound)
    assert ratio == pytest.approx((2_498_560 - 524_288) / (1_048_576 - 524_288), rel=1e-9)  # 3.7656
    # full fine-tuning has no side paths: its targets change nothing
    full, lay_full = layout("H100-SXM-80GB", 8, link="nvlink", mode="full", micro_batch=2)
    assert step_time(LLAMA7, full.model_copy(update={"lora_targets": ("q", "v")}), lay_full, gpu) == \
        step_time(LLAMA7, full, lay_full, gpu)
