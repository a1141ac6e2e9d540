"""`rentopt estimate --gpu ID --gpus N [--nodes M --fabric-gbps G]`: the speed model on its own."""

from __future__ import annotations

import json

from click.testing import CliRunner

from rentopt.optimizer.cli import cli


def run(*args: str):
    return CliRunner().invoke(cli, ["estimate", *args])


def test_json_adds_the_throughput_object():
    res = run("--model", "7b", "--mode", "full", "--gpu", "RTX 4090", "--gpus", "8", "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    t = data["throughput"]
    tps = t["tokens_per_second"]
    assert tps["low"] < tps["typical"] < tps["high"]
    assert 0 < t["mfu"] < 1
    assert t["layout"]["gpu"] == "RTX-4090-24GB" and t["layout"]["gpus_per_node"] == 8
    assert t["layout"]["link"] == "pcie-no-p2p"  # GeForce: no peer-to-peer
    # ZeRO-3 of a 7B model over 8 GeForce cards is link-bound: the 70 % flag applies
    assert t["scaling_efficiency"] < 0.70
    assert t["scaling_range"]["low"] <= t["scaling_efficiency"] <= t["scaling_range"]["high"]
    assert data["peak_gb_per_gpu"] > 0  # the memory estimate is still there


def test_table_shows_the_speed_section_and_the_bottleneck_warning():
    res = run("--model", "7b", "--mode", "full", "--gpu", "RTX-4090-24GB", "--gpus", "8")
    assert res.exit_code == 0, res.output
    assert "Speed on 8 x RTX-4090-24GB" in res.output
    assert "below 70 %" in res.output


def test_nodes_need_a_stated_fabric():
    res = run("--model", "70b", "--mode", "full", "--gpu", "H100-SXM-80GB", "--gpus", "16", "--nodes", "2")
    assert res.exit_code == 2
    assert "--fabric-gbps" in res.output and "Traceback" not in res.output
    ok = run("--model", "70b", "--mode", "full", "--gpu", "H100-SXM-80GB", "--gpus", "16", "--nodes", "2",
             "--fabric-gbps", "3200", "--format", "json")
    assert ok.exit_code == 0, ok.output
    t = json.loads(ok.output)["throughput"]
    assert t["layout"]["nodes"] == 2 and t["layout"]["fabric_gbps"] == 3200
    assert any("3200 Gb/s" in a for a in t["assumed"])


def test_bad_node_shapes_are_one_line_errors():
    for args, words in ((("--gpus", "12", "--nodes", "5", "--fabric-gbps", "400"), "spread evenly"),
                        (("--gpus", "16"), "at most 8 per node"),
                        (("--nodes", "2", "--fabric-gbps", "400"), "--gpus 1 cannot")):
        res = run("--model", "7b", "--mode", "lora", "--gpu", "A100-SXM4-80GB", *args)
        assert res.exit_code == 2, (args, res.output)
        assert res.output.startswith("rentopt: error:") and words in res.output
    res = run("--model", "7b", "--mode", "lora", "--nodes", "2")
    assert res.exit_code == 2 and "pass --gpu" in res.output
    res = run("--model", "7b", "--mode", "lora", "--gpu", "NoSuchCard-9000")
    assert res.exit_code == 2 and res.output.startswith("rentopt: error:")


def test_a_job_that_fits_nowhere_reports_why():
    res = run("--model", "70b", "--mode", "full", "--gpu", "RTX-4090-24GB", "--gpus", "1", "--format", "json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["throughput"] is None and "needs" in data["throughput_rejected"]
