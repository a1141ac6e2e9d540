"""`rentopt estimate` leads with the answer (issue 26): does the job fit, with which layout, and
how much host RAM CPU offload needs; the JSON carries host RAM and offload bytes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.workload import resolve_model

# ZeRO-Offload keeps the fp32 master weights, both Adam moments and the fp32 gradients on the
# CPU: 4 + 8 + 4 = 16 bytes per trainable parameter (Ren et al., "ZeRO-Offload", USENIX ATC 2021, sec. 4.1).
OFFLOADED_BYTES_PER_PARAM = 16


def run(*args: str):
    result = CliRunner().invoke(cli, ["estimate", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_full_7b_on_four_4090s_answers_first_with_the_host_ram_it_needs():
    out = run("--model", "7b", "--mode", "full", "--gpu", "RTX-4090-24GB", "--gpus", "4")
    first = " ".join(out.splitlines()[1:3])
    assert first.startswith("Fits 4 x RTX-4090-24GB: yes, with ZeRO-3 + optimizer on CPU over PCIe")
    params = resolve_model("7b").total_params
    host_gb = params * OFFLOADED_BYTES_PER_PARAM / 1e9  # 6.74e9 x 16 = 107.8 GB on the node
    assert f"needs ~{host_gb:,.0f} GB of host RAM" in first
    # the answer comes before the breakdown
    assert out.index("Fits 4 x") < out.index("per GPU      GB")
    data = json.loads(run("--model", "7b", "--mode", "full", "--gpu", "RTX-4090-24GB", "--gpus", "4", "--format", "json"))
    answer = data["answer"]
    assert answer["fits"] is True and answer["layout"] == "zero3+offload-optimizer" and answer["gpus"] == 4
    assert answer["host_ram_gb"] == pytest.approx(host_gb, rel=0.01)
    assert answer["offload_bytes"] == pytest.approx(params * OFFLOADED_BYTES_PER_PARAM, rel=0.01)


def test_a_job_that_fits_without_offload_needs_no_host_ram_and_says_no_when_nothing_fits():
    data = json.loads(run("--model", "7b", "--mode", "qlora", "--gpu", "RTX-4090-24GB", "--format", "json"))
    assert data["answer"]["fits"] is True and data["answer"]["host_ram_gb"] == 0
    out = run("--model", "70b", "--mode", "full", "--gpu", "RTX-4090-24GB", "--gpus", "1")
    assert out.splitlines()[1].startswith("Fits: no: ")
