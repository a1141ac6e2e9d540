"""One reader of GPU names: --gpu, --exclude-gpu, --on, offers files, price sheets and
`rentopt gpus NAME` read a name the same way, case-insensitively (issue 26)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli

SHEET = """
platform = "mysheet"
name = "My platform"
currency = "USD"
source = "https://example.com/prices"
read_on = 2026-11-20

[billing]
granularity_s = 1
stopped_pays = "storage"
month_hours = 730
source = "https://example.com/billing"

[storage]
gb_month = 0.1
source = "https://example.com/disk"

[network]
egress_gb = 0
ingress_gb = 0
source = "https://example.com/network"

[[offers]]
id = "node"
gpu = "{gpu}"
gpus = 8
interconnect = "nvlink"

[[offers.prices]]
unit = "hour"
amount = 2.5
per = "gpu"
"""

CSV = "provider,offer_id,gpu,gpus,price_hour,currency,interconnect\nmycsv,node,{gpu},8,20,USD,nvlink\n"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _sheet_gpu(home: Path, name: str) -> str | None:
    (home / "sheets").mkdir(parents=True, exist_ok=True)
    (home / "sheets" / "mine.toml").write_text(SHEET.format(gpu=name), encoding="utf-8")
    code, out, err = run("offers", "--providers", "mysheet", "--format", "json")
    assert code == 0, err
    offers = json.loads(out)
    if not offers:  # a name that does not say which card: the line is skipped, and the sheet says so
        return None
    [offer] = offers
    return offer["gpu"]


def _csv_gpu(tmp_path: Path, name: str) -> str | None:
    path = tmp_path / "offers.csv"
    path.write_text(CSV.format(gpu=name), encoding="utf-8")
    code, out, err = run("offers", "--offers-file", str(path), "--format", "json")
    if code != 0:
        return None
    [offer] = json.loads(out)
    return offer["gpu"]


def _flag_gpu(name: str) -> str | None:
    from rentopt.optimizer.errors import UnknownGpuError
    from rentopt.optimizer.hardware import resolve_user_gpu

    try:
        return resolve_user_gpu(name).id
    except UnknownGpuError:
        return None


def _gpus_command(name: str) -> str | None:
    code, out, _ = run("gpus", name, "--format", "json")
    assert code == 0
    return json.loads(out)["reads_as"]["gpu"]


# Expected readings worked out from the catalog's own words: a bare H100/H200 is the SXM card
# (SkyPilot's and gpuhunt's reading); A100 has 40 and 80 GB variants, so nothing is guessed.
@pytest.mark.parametrize("name, expected", [
    ("H100", "H100-SXM-80GB"),
    ("h200", "H200-SXM-141GB"),
    ("NVIDIA H100 PCIe", "H100-PCIe-80GB"),
    ("rtx 4090", "RTX-4090-24GB"),
    ("A100 80GB", "A100-SXM4-80GB"),
    ("A100", None),
])
def test_every_place_reads_a_gpu_name_the_same_way(rentopt_home, tmp_path, name, expected):
    readings = {
        "--gpu": _flag_gpu(name),
        "rentopt gpus": _gpus_command(name),
        "offers file": _csv_gpu(tmp_path, name),
        "price sheet": _sheet_gpu(rentopt_home, name),
    }
    assert readings == dict.fromkeys(readings, expected)


def test_a_bare_h100_in_a_price_sheet_is_planned_and_says_how_it_was_read(rentopt_home):
    assert _sheet_gpu(rentopt_home, "H100") == "H100-SXM-80GB"
    code, out, err = run("offers", "--providers", "mysheet", "--format", "json")
    [offer] = json.loads(out)
    assert "H100-SXM-80GB" in offer["extra"]["gpu_note"] and offer["gpu_status"] == "default"
    code, out, err = run("quote", "--model", "7b", "--mode", "lora", "--tokens", "1e8", "--providers", "mysheet",
                         "--format", "json")
    assert code == 0, err
    plan = json.loads(out)["plans"][0]
    assert plan["stages"][0]["gpu"] == "H100-SXM-80GB"
    assert any("read as H100-SXM-80GB" in n for n in plan["notes"])


def test_readme_gpu_h100_8_works_and_says_it_read_sxm(rentopt_home):
    code, out, err = run("quote", "--model", "70b", "--mode", "full", "--tokens", "5B", "--gpu", "H100:8",
                         "--max-nodes", "4", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert any(a.startswith("GPU 'H100' read as H100-SXM-80GB") for a in data["assumptions"])
    assert {s["gpu"] for p in data["plans"] for s in p["stages"]} == {"H100-SXM-80GB"}
    assert all(s["gpus"] in (0, 8, 16, 24, 32) for p in data["plans"] for s in p["stages"])
    code, out, _ = run("quote", "--model", "70b", "--mode", "full", "--tokens", "5B", "--gpu", "H100:8",
                       "--max-nodes", "4")
    assert "Assumed: GPU 'H100' read as H100-SXM-80GB" in out


def test_a_bare_a100_asks_the_user_to_choose(rentopt_home):
    code, out, err = run("quote", "--model", "13b", "--mode", "lora", "--days", "10", "--gpu", "A100:8")
    assert code == 2 and not out
    assert "choose A100-SXM4-80GB, A100-SXM4-40GB, A100-PCIe-80GB or A100-PCIe-40GB" in err


def test_providers_modes_and_gpu_names_are_case_insensitive(rentopt_home):
    lower = run("quote", "--model", "13b", "--mode", "lora", "--days", "10", "--providers", "vast,lambda",
                "--gpu", "h100-sxm-80gb", "--format", "json")
    mixed = run("quote", "--model", "13b", "--mode", "LoRA", "--days", "10", "--providers", "Vast,LAMBDA",
                "--gpu", "H100-SXM-80GB", "--format", "JSON")
    assert lower[0] == mixed[0] == 0, mixed[2]
    assert json.loads(lower[1])["plans"] == json.loads(mixed[1])["plans"]


def test_exclude_gpu_and_on_read_names_the_same_way(rentopt_home):
    code, out, err = run("quote", "--model", "13b", "--mode", "lora", "--days", "10", "--on", "h100",
                         "--exclude-gpu", "H100", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert "H100-SXM-80GB" in data["work"]["basis"]
    assert all(s["gpu"] != "H100-SXM-80GB" for p in data["plans"] for s in p["stages"])
    assert sum(a.startswith("GPU 'H100' read as") or a.startswith("GPU 'h100' read as")
               for a in data["assumptions"]) == 2
