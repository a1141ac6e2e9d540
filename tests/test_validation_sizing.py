"""Validation sized to the job (issue 26): without --validate-hours the validation run is 10 %
of the training time on the reference, at least 0.5 h, at most 4 h, and the quote says which."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli


def quote(*args: str) -> dict:
    result = CliRunner().invoke(cli, ["quote", "--model", "13b", "--mode", "lora", "--top", "1", "--format", "json",
                                      *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def sizing(data: dict) -> str:
    [line] = [a for a in data["assumptions"] if a.startswith("validation: ")]
    return line


@pytest.mark.parametrize("days, expected", [
    # --days D is D x 24 h of training on the reference: 10 % of 24 h is 2.40 h
    ("1", "validation: 2.40 h, 10 % of the 24.00 h of training on 1 x A100-SXM4-80GB"),
    # 10 % of 240 h would be 24 h: the 4 h cap
    ("10", "validation: 4.00 h, the 4 h cap (10 % of the 240.00 h of training"),
    # 10 % of 2.4 h is 0.24 h: below the 0.5 h floor (loading the model, 100 steps)
    ("0.1", "validation: 0.50 h, the least that loads the model and runs 100 steps"),
])
def test_the_validation_run_is_a_small_share_of_the_training(days, expected):
    assert sizing(quote("--days", days)).startswith(expected)


def test_the_validation_stage_runs_that_long_and_a_given_length_wins():
    data = quote("--days", "1")
    [validate] = [s for s in data["plans"][0]["stages"] if s["kind"] == "validate"]
    assert 2.40 <= float(validate["hours"]) < 2.40 + 0.5  # the run plus copying the model and data in
    given = quote("--days", "1", "--validate-hours", "3")
    assert not [a for a in given["assumptions"] if a.startswith("validation: ")]
    [validate] = [s for s in given["plans"][0]["stages"] if s["kind"] == "validate"]
    assert 3 <= float(validate["hours"]) < 3.5
