"""A measured validation peak rescales only the uncertain part of the estimate (issue 9).

Worked by hand for Llama-2-7B LoRA r8 on q,v, bf16-mixed, seq 2048, micro-batch 1, one GPU,
FlashAttention, no checkpointing, from the published accounting the memory model cites:
- exact states: bf16 base 2 x 6,738,415,616 = 13,476,831,232 B; 4,194,304 fp32 adapters (PEFT) =
  16,777,216 B, their fp32 gradient 16,777,216 B and two fp32 Adam moments 33,554,432 B;
- saved activations per token per layer: norms 4h + q, k, v, attention output 2q + 2kv + gated MLP
  4f = 16,384 + 8,192 + 8,192 + 44,032 = 76,800 elements x 2 B + a 4 B log-sum-exp per head (128 B)
  = 153,728 B; x 2048 tokens x 32 layers = 10,074,718,208 B;
- HF loss path: 2048 x 32,000 x (2 + 12) B = 917,504,000 B;
- allocator slack 20 % of what is re-allocated each step (activations, loss, gradients) and 0.8 GB
  of CUDA context.
So device(s) = K + s x U with K = 13,476,831,232 + 16,777,216 x 2 + 33,554,432 + 0.2 x 16,777,216
+ 800,000,000 = 14,347,295,539 B and U = (10,074,718,208 + 917,504,000) x 1.2 = 13,190,666,650 B.
"""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import InputError
from rentopt.optimizer.feasibility import Fit, NodeShape, NoFit, Pins, find_layout
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.memory import activation_scale_for_peak, estimate
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.workload import resolve_model

LLAMA7 = resolve_model("llama-2-7b")
SETUP = TrainingSetup(mode="lora", lora_rank=8, lora_targets="q,v", grad_checkpointing=False)
K = 14_347_295_539
U = 13_190_666_650
STATES = 13_476_831_232 + 16_777_216 * 2 + 33_554_432


def test_the_scale_is_the_one_worked_by_hand():
    assert estimate(LLAMA7, SETUP).device_gb_per_gpu == pytest.approx((K + U) / 1e9, abs=0.01)
    scale = activation_scale_for_peak(LLAMA7, SETUP, 20.0)
    assert scale == pytest.approx((20e9 - K) / U, rel=1e-4)  # 0.4285
    # The re-estimate shows the measurement, and the states did not move.
    again = estimate(LLAMA7, SETUP, activation_scale=scale)
    assert again.device_gb_per_gpu == pytest.approx(20.0, abs=0.01)
    assert again.states_gb_per_gpu == pytest.approx(STATES / 1e9, abs=0.01)


def test_the_replan_uses_the_scaled_activations_with_the_margin_on_them_only():
    # The margin (15 % of the uncertain allocation) is smaller than the allocator slack already in
    # the device view (20 % of what is re-allocated each step, here nearly all of the uncertain
    # part), so the requirement is the measured device peak itself. 20 GB measured: a 4090
    # (24,564 MiB = 25.8 GB) holds it; 30 GB: it does not, while a 48 GB A6000 (51.5 GB) does.
    for measured, fits_4090 in ((20.0, True), (30.0, False)):
        scale = activation_scale_for_peak(LLAMA7, SETUP, measured)
        expected = measured
        fit = find_layout(LLAMA7, SETUP, NodeShape(gpu=get_gpu("RTX-A6000-48GB"), gpus_per_node=1),
                          activation_scale=scale)
        assert isinstance(fit, Fit) and fit.layout.required_gb_per_gpu == pytest.approx(expected, abs=0.02)
        on_4090 = find_layout(LLAMA7, SETUP, NodeShape(gpu=get_gpu("RTX-4090-24GB"), gpus_per_node=1),
                              activation_scale=scale, pins=Pins(offload="none"))
        assert isinstance(on_4090, Fit) is fits_4090


def test_a_peak_below_the_exact_model_states_is_refused():
    # 7B full fine-tune on one GPU: 16 B/param x 6.74B = 107.8 GB of states. 17 GB cannot have been
    # measured on that layout, so it must not shrink the plan onto one RTX 4090.
    full = TrainingSetup(mode="full")
    with pytest.raises(InputError, match=r"below the 1\d\d\.\d GB .*\(107\.8 GB of weights, gradients and optimizer"):
        activation_scale_for_peak(LLAMA7, full, 17.0)


def test_a_sharded_measurement_never_makes_a_single_small_card_hold_a_full_fine_tune():
    # 21.5 GB measured on ZeRO-3 over 8 GPUs is plausible there (13.5 GB of sharded states, 2 GB of
    # live parameters); the scale it implies cannot bring the exact 107.8 GB onto one 24 GB card.
    z3 = TrainingSetup(mode="full", gpus=8, zero=3)
    scale = activation_scale_for_peak(LLAMA7, z3, 21.5)
    assert 0 <= scale < 1
    nofit = find_layout(LLAMA7, TrainingSetup(mode="full"), NodeShape(gpu=get_gpu("RTX-4090-24GB"), gpus_per_node=1),
                        activation_scale=scale)
    assert isinstance(nofit, NoFit)


@pytest.mark.parametrize("bad", [0.0, -3.0, math.nan, math.inf])
def test_non_finite_or_non_positive_peaks_are_input_errors(bad):
    with pytest.raises(InputError, match="positive number of GB"):
        activation_scale_for_peak(LLAMA7, SETUP, bad)


def test_a_peak_larger_than_the_card_is_refused():
    with pytest.raises(InputError, match="more than RTX-4090-24GB holds"):
        activation_scale_for_peak(LLAMA7, SETUP, 40.0, gpu=get_gpu("RTX-4090-24GB"))


def test_the_quote_refuses_a_17gb_peak_for_a_7b_full_fine_tune(tmp_path):
    # One RTX 4090 cannot hold a 7B full fine-tune's exact states, measured peak or not: no plan.
    sheet = tmp_path / "offers.csv"
    sheet.write_text("provider,offer_id,gpu,gpus,price_hour,currency\nme,4090,RTX 4090,1,0.30,USD\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "full", "--days", "1", "--offers-file",
                                      str(sheet), "--measured-peak-gb", "17"])
    assert result.exit_code == 3, result.output
    assert result.output.startswith("rentopt: error: No feasible plan") and "RTX-4090-24GB has 25.8 GB" in result.output
    # measured on one GPU without offload, 17 GB is below the 108 GB of exact states: refused
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "full", "--days", "1", "--offers-file",
                                      str(sheet), "--measured-peak-gb", "17", "--measured-on", "B200-SXM-180GB"])
    assert result.exit_code == 2, result.output
    assert "rentopt: error: measured peak 17 GB is below" in result.output
