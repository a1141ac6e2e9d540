"""Per-card measured rates (issue 22 item 1, data half; item 4): matmul ceilings, power, published
training runs, and the GB200/GB300 NVL72 and B300 records.

Expected values are worked by hand from the published figures the catalog cites, not read back
from the program.
"""

from __future__ import annotations

import math
import statistics

import pytest

from rentopt.optimizer.hardware import (
    DEFAULT_MAMF_EFFICIENCY,
    FP8_EFFICIENCY_RATIO,
    POWER_EXPONENT,
    achievable_memory_bandwidth_gbps,
    all_gpus,
    effective_matmul_tflops,
    get_gpu,
    matmul_ceiling,
    normalise,
    resolve_user_gpu,
    unmeasured_training_note,
)


def test_every_card_states_power_matmul_basis_and_training():
    unpublished_power = {"A10G-24GB", "Ascend-910B3-64GB", "Ascend-910B2-64GB"}  # no vendor figure
    for gpu in all_gpus():
        assert gpu.mamf_source and gpu.training_source, gpu.id
        assert (gpu.power_w is None) == (gpu.id in unpublished_power), gpu.id
        for precision in ("bf16", "fp16", "fp8"):
            ceiling = matmul_ceiling(gpu, precision)
            assert 0 < ceiling.tflops, (gpu.id, precision)
            if ceiling.basis != "measured":  # a derived ceiling never promises more than the spec
                assert ceiling.tflops <= ceiling.spec_tflops + 1e-9, (gpu.id, precision)


def test_measured_ceilings_are_the_published_figures():
    # stas00/ml-engineering MAMF table: H100 SXM 794.5 bf16 / 1402.6 fp8, B200 1745.0, GB200 1822.0,
    # B300 1769.0; zzc0721 torch benchmark: L40S 269.15, RTX A6000 123.34.
    assert effective_matmul_tflops(get_gpu("H100-SXM-80GB"), "bf16-mixed") == 794.5
    assert effective_matmul_tflops(get_gpu("H100-SXM-80GB"), "fp8") == 1402.6
    assert effective_matmul_tflops(get_gpu("B200-SXM-180GB"), "bf16") == 1745.0
    assert effective_matmul_tflops(get_gpu("GB200-NVL72-186GB"), "bf16") == 1822.0
    assert effective_matmul_tflops(get_gpu("B300-SXM-288GB"), "fp8") == 3353.3
    assert matmul_ceiling(get_gpu("L40S-48GB")).basis == "measured"


def test_a_same_die_card_takes_its_relatives_efficiency():
    # H800 SXM is an H100 SXM with cut NVLink: 794.5 / 989.4 x 989.4 = 794.5. GB300 from GB200's
    # fp8: 3615.6 / 5000 x 5000 = 3615.6.
    assert effective_matmul_tflops(get_gpu("H800-SXM-80GB")) == pytest.approx(794.5)
    gb300 = matmul_ceiling(get_gpu("GB300-NVL72-288GB"), "fp8")
    assert gb300.basis == "derived" and gb300.tflops == pytest.approx(3615.6)
    # L40 (half-rate fp32 accumulate, 181.05 spec) at L40S's 269.15 / 362.05 = 0.74341: 134.59.
    assert effective_matmul_tflops(get_gpu("L40-48GB")) == pytest.approx(181.05 * 269.15 / 362.05, abs=0.05)


def test_the_power_rule_worked_by_hand_for_the_rtx_6000_ada():
    # L40S: 350 W for 362.05 TFLOPS = 0.96672 W/TFLOPS, measured 269.2 (269.15 rounded; 74.354 %).
    # RTX 6000 Ada: 300 W for 364.2 TFLOPS = 0.82372 W/TFLOPS. Ratio 0.85207; ^0.24 = exp(0.24 x
    # ln 0.85207) = exp(0.24 x -0.16009) = exp(-0.038421) = 0.96230.
    # Ceiling: 364.2 x 0.74354 x 0.96230 = 260.59 TFLOPS, 28 % under the spec.
    ceiling = matmul_ceiling(get_gpu("RTX-6000-Ada-48GB"), "bf16")
    assert ceiling.basis == "derived"
    assert ceiling.tflops == pytest.approx(260.59, abs=0.05)
    assert "L40S-48GB" in ceiling.how and "power rule" in ceiling.how


def test_the_power_exponent_is_the_a100_pcie_sxm_pair():
    # 252.9 / 271.2 = 0.93252 at 300 / 400 W = 0.75: exponent ln 0.93252 / ln 0.75 = 0.2429.
    assert POWER_EXPONENT == pytest.approx(math.log(252.9 / 271.2) / math.log(300 / 400), abs=0.005)


def test_a_card_with_more_power_per_tflops_keeps_its_relatives_efficiency():
    # RTX A5000: 230 W / 111.1 = 2.07 W/TFLOPS against the A6000's 300 / 154.8 = 1.94: not
    # power-bound, so 111.1 x 123.34 / 154.8 = 88.52.
    assert effective_matmul_tflops(get_gpu("RTX-A5000-24GB")) == pytest.approx(111.1 * 123.34 / 154.8, abs=0.1)


def test_fp8_without_a_measurement_follows_bf16_times_the_h100_ratio():
    # H100 SXM: fp8 70.9 % and bf16 80.3 % of spec in the MAMF table: 0.883.
    assert FP8_EFFICIENCY_RATIO == pytest.approx((1402.6 / 1978.9) / (794.5 / 989.4), abs=0.005)
    # L40S fp8: 733 x 0.74341 x 0.88 = 479.54.
    assert effective_matmul_tflops(get_gpu("L40S-48GB"), "fp8") == pytest.approx(733 * 269.15 / 362.05 * 0.88, abs=0.1)


def test_cards_without_any_measured_relative_use_the_median_of_measured_datacenter_parts():
    # MAMF table efficiencies: A100 SXM 86.9, GH200 83.8, A100 PCIe 81.1, H100 SXM 80.3, B300 78.6,
    # B200 77.6, GB200 72.9: median 80.3 %.
    median = statistics.median([0.869, 0.838, 0.811, 0.803, 0.786, 0.776, 0.729])
    assert DEFAULT_MAMF_EFFICIENCY == pytest.approx(median, abs=0.005)
    v100 = matmul_ceiling(get_gpu("V100-SXM2-32GB"), "bf16-mixed")
    assert (v100.dtype, v100.basis) == ("fp16", "default")  # no bf16 on Volta
    assert v100.tflops == pytest.approx(125 * 0.80)


def test_workstation_and_consumer_cards_sit_below_the_old_flat_efficiency_where_power_bound():
    # The old timing default charged every card 82.2 % of its spec; the 300 W Ada and Blackwell
    # workstation cards measure (or derive) well below that.
    for gpu_id in ("RTX-6000-Ada-48GB", "RTX-PRO-6000-MaxQ-96GB", "L40S-48GB", "L4-24GB"):
        assert matmul_ceiling(get_gpu(gpu_id)).efficiency < 0.75, gpu_id


def test_unmeasured_cards_say_their_range_is_widened():
    assert unmeasured_training_note(get_gpu("H100-SXM-80GB")) is None
    assert unmeasured_training_note(get_gpu("L40S-48GB")) == (
        "no published training run on this card: range widened to x0.5-x1.3")


def test_achievable_bandwidth_is_eighty_percent_of_spec_without_a_measurement():
    assert achievable_memory_bandwidth_gbps(get_gpu("H100-SXM-80GB")) == pytest.approx(3350 * 0.8)


# --------------------------------------------------------------------------------------------
# GB200 / GB300 NVL72 and B300

def test_gb200_and_gb300_are_nvl72_trays_of_four_on_grace():
    for gpu_id, memory, power in (("GB200-NVL72-186GB", 186, 1200), ("GB300-NVL72-288GB", 288, 1400)):
        gpu = get_gpu(gpu_id)
        assert gpu.max_gpus_per_node == 4 and gpu.nvlink_domain_gpus == 72
        assert gpu.host_arch == "aarch64" and gpu.memory_gb == memory and gpu.power_w == power
        assert (gpu.bf16_tflops, gpu.fp8_tflops, gpu.memory_bandwidth_gbps) == (2500, 5000, 8000)
    # The 8-GPU HGX boards keep the node as their NVLink domain.
    assert get_gpu("B200-SXM-180GB").nvlink_domain_gpus is None


@pytest.mark.parametrize("spelling, gpu_id", [
    ("NVIDIA GB200", "GB200-NVL72-186GB"),
    ("GB200 NVL72", "GB200-NVL72-186GB"),
    ("a4x-highgpu-4g", "GB200-NVL72-186GB"),
    ("NVIDIA GB300", "GB300-NVL72-288GB"),
    ("GB300-NVL72", "GB300-NVL72-288GB"),
    ("B300", "B300-SXM-288GB"),
    ("B200", "B200-SXM-180GB"),
])
def test_grace_blackwell_names_never_fall_on_the_hgx_parts(spelling, gpu_id):
    assert normalise(spelling).gpu == gpu_id
    assert resolve_user_gpu(spelling).id == gpu_id


def test_the_h200_ceilings_are_the_best_of_the_projects_own_device_run():
    # tests/data/device/h200-2026-12-04.json: the best bf16 and fp8 GEMM of the shapes tried, and
    # the device-to-device copy's read + write rate.
    import json
    from pathlib import Path

    run = json.loads((Path(__file__).parent / "data" / "device" / "h200-2026-12-04.json").read_text(encoding="utf-8"))
    best = {d: max(m["tflops"] for m in run["matmul"] if m["dtype"].startswith(d)) for d in ("bf16", "fp8")}
    h200 = get_gpu("H200-SXM-141GB")
    assert effective_matmul_tflops(h200, "bf16") == pytest.approx(best["bf16"], abs=0.05)
    assert effective_matmul_tflops(h200, "fp8") == pytest.approx(best["fp8"], abs=0.05)
    assert achievable_memory_bandwidth_gbps(h200) == pytest.approx(run["copy"]["read_plus_write_gb_s"], abs=0.5)
