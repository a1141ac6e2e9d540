"""`--explain` always explains (issue 26): with no plan it lists the binding constraint with its
numbers, the closest misses and the rejections by reason; `--format json` prints a JSON error
object on stdout as well as exit status 3."""

from __future__ import annotations

import json
import re
from decimal import Decimal

from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from tests.test_quote import A6000, offer, write_offers


def run(*args: str):
    result = CliRunner().invoke(cli, ["quote", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def small_cards(tmp_path):
    # 13B full fine-tune: 16 bytes per parameter of model state alone is ~208 GB; no 16 or 24 GB card holds it
    return write_offers(tmp_path, [offer("t4", gpu="T4-16GB", memory=16, hourly="0.10", gpus=1),
                                   offer("a10", gpu="A10-24GB", memory=24, hourly="0.30", gpus=1),
                                   offer("h100", gpu="H100-SXM-80GB", memory=80, hourly="2.00", gpus=1,
                                         interconnect="nvlink")])


def test_explain_with_no_plan_names_the_binding_constraint_the_closest_misses_and_the_reasons(tmp_path):
    args = ("--model", "13b", "--mode", "full", "--tokens", "1e8", "--offers-file", str(small_cards(tmp_path)),
            "--gpu", "T4-16GB,A10-24GB")
    code, out, err = run(*args)
    assert code == 3 and out == ""  # without --explain: the one line on stderr only
    assert "Run with --explain" in err
    code, out, err = run(*args, "--explain")
    assert code == 3 and "rentopt: error: No feasible plan" in err
    binding = re.search(r"Binding constraint: memory: 2 of 3 offers fail it; the closest: testcloud/a10 \(1 x A10-24GB\): "
                        r"needs ([\d.]+) GB per GPU", " ".join(out.split()))
    assert binding and float(binding.group(1)) > 24  # the number that failed, above the card's memory
    misses = out.split("Closest misses (nearest first):\n")[1].split("\n\n")[0]
    # the A10 (24 GB) misses by less than the T4 (16 GB): it comes first
    assert misses.index("testcloud/a10") < misses.index("testcloud/t4")
    by_reason = out.split("Rejected offers by reason:\n")[1]
    rows = {line.split()[0]: line.split()[1] for line in by_reason.splitlines()[2:4]}
    assert rows == {"memory": "2", "gpu": "1"}  # the H100 was left out by --gpu, the others do not fit
    assert "Every rejected offer (3):" in out


def test_json_with_no_plan_prints_an_error_object_on_stdout(tmp_path):
    code, out, err = run("--model", "13b", "--mode", "full", "--tokens", "1e8", "--offers-file",
                         str(small_cards(tmp_path)), "--gpu", "T4-16GB,A10-24GB", "--format", "json")
    assert code == 3 and "No feasible plan" in err
    data = json.loads(out)
    assert data["plans"] == [] and len(data["rejected"]) == 3
    error = data["error"]
    assert error["kind"] == "no_feasible_plan" and error["exit_code"] == 3
    assert error["binding"].startswith("memory: 2 of 3 offers fail it")
    assert [(e["constraint"], e["offers"]) for e in error["rejections_by_reason"]] == [("memory", 2), ("gpu", 1)]
    assert error["closest_misses"][0].startswith("testcloud/a10 (1 x A10-24GB): needs ")


def test_a_budget_that_binds_is_explained_with_the_nearest_plans(tmp_path):
    # one A6000 at 0.49 USD/h: any plan costs far more than 0.05 USD
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    base = ("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers), "--no-validate")
    code, out, _ = run(*base, "--format", "json")
    assert code == 0
    total = Decimal(json.loads(out)["plans"][0]["total"])
    code, out, err = run(*base, "--budget", "0.05", "--explain")
    assert code == 3
    assert "Binding constraint: budget 0.05 USD is below the cheapest feasible plan" in out
    misses = out.split("Closest misses (nearest first):\n")[1]
    assert f"testcloud/a6000 (1 x RTX-A6000-48GB): {total:,} USD" in misses
    code, out, _ = run(*base, "--budget", "0.05", "--format", "json")
    assert code == 3 and json.loads(out)["error"]["binding"].startswith("budget 0.05 USD")


def test_withdrawn_currencies_are_neither_offered_nor_accepted():
    code, _, err = run("--model", "13b", "--mode", "lora", "--days", "10", "--currency", "XYZ")
    assert code == 2 and "known: AUD," in err and "EUR" in err
    listed = err.split("known: ")[1].split(".")[0].split(", ")
    for gone in ("CYP", "EEK", "HRK", "LTL", "LVL", "MTL", "ROL", "SIT", "SKK", "TRL"):
        assert gone not in listed
    code, _, err = run("--model", "13b", "--mode", "lora", "--days", "10", "--currency", "eek")
    assert code == 2 and "withdrawn from ISO 4217 (replaced by EUR)" in err


def test_snapshot_import_points_at_refresh_from():
    result = CliRunner().invoke(cli, ["snapshot", "import", "team.json.gz"])
    assert result.exit_code == 2 and "rentopt refresh --from FILE|URL" in result.output
