"""The first answer fits one screen (issue 26): the mission's quote in at most 40 lines of at
most 160 columns by default, everything else behind --details, the JSON complete; README shows
that screen."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from rentopt.optimizer.cli import cli

MISSION = ["quote", "--model", "13b", "--mode", "lora", "--days", "10"]
README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, [*MISSION, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_the_missions_quote_fits_40_lines_of_160_columns():
    out = run()
    lines = out.rstrip("\n").splitlines()
    assert len(lines) <= 40 and max(len(line) for line in lines) <= 160
    assert lines[0].startswith("Quote for llama-2-13b, lora")
    assert lines[1].startswith("Work: 10 days on 1 x A100-SXM4-80GB = ") and "Amounts in USD." in lines[1]
    assert any(line.startswith("Prices: the BUNDLED SNAPSHOT") for line in lines[:5])
    ranks = [line.split()[0] for line in lines if re.match(r"^\s+\d+\s{2}", line)]
    assert ranks == ["1", "2", "3", "4", "5"]  # one row per plan
    assert sum(line.startswith("#1 stage by stage: ") for line in lines) == 1
    assert sum(line.startswith("note: ") for line in lines) <= 5
    assert lines[-1].startswith("More: --details")


def test_details_and_json_keep_everything_the_screen_leaves_out():
    screen, details = run(), run("--details")
    assert len(details.splitlines()) > len(screen.splitlines())
    assert "where the prices come from (per provider):" in details and "line items: " in details
    assert details == run("-v")
    data = json.loads(run("--format", "json"))
    assert len(data["plans"]) == 5 and data["rejected"]
    for plan in data["plans"]:
        assert plan["notes"] and set(plan["key_notes"]) <= set(plan["notes"])
        offer_ids = {s["offer_id"] for s in plan["stages"]}
        assert all(len(i) > 0 for i in offer_ids)  # whole ids, never shortened


def test_readme_shows_the_default_screen():
    block = README.split("```text\n$ rentopt quote --model 13b --mode lora --days 10\n", 1)[1].split("```", 1)[0]
    def aged(text: str) -> str:  # the snapshot's age changes every day
        return re.sub(r"\d+ days? old", "N days old", text).rstrip("\n")
    assert aged(block) == aged(run()), "paste the new screen into README (rentopt quote --model 13b --mode lora --days 10)"
