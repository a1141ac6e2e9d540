"""Published matmul ceilings (tests/data/gemm-measurements.json): every row is sourced, quoted and
names a card the catalog knows (or says it has none)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rentopt.optimizer.hardware import get_gpu

DATA = Path(__file__).parent / "data" / "gemm-measurements.json"
RECORDS = json.loads(DATA.read_text(encoding="utf-8"))


def test_ids_are_unique():
    ids = [r["id"] for r in RECORDS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r["id"])
def test_record_is_sourced_and_quoted(record):
    assert record["kind"] == "measured"
    assert record["dtype"] in ("bf16", "fp16", "fp8-e4m3")
    assert record["source"] and "@" in record["source"]  # repo:path@commit
    # the measured figure is the one the quoted row prints
    assert re.search(rf"(?<![\d.]){re.escape(str(record['measured_tflops']))}0*(?![\d])", record["quote"])
    if record["spec_tflops"]:
        assert 0 < record["measured_tflops"] <= record["spec_tflops"]
    if record["gpu_catalog_id"]:
        get_gpu(record["gpu_catalog_id"])  # KeyError if the catalog has no such card
