"""Fit the speed model's free constants (optimizer/timing.py SpeedParams) to published runs.

    pip install scipy          # only this script needs it
    python tools/fit_throughput.py            # prints the fitted SpeedParams and the figures

Least squares on log(predicted / measured) tokens/s per GPU over the fit records of
tests/data/throughput-measurements.json (every source except the held-out ones named in
tests/throughput_records.py), plus LitGPT's QLoRA-minus-LoRA time per iteration, which isolates
the dequantisation cost. Each source family weighs about the same (1/sqrt(records) per record)
so that llm-foundry's 216 H100/A100 rows do not drown the consumer-card and LoRA rows. The
low/high range factors are the 3rd and 97th percentiles of the fit residuals. Paste the printed
SpeedParams into optimizer/timing.py (FITTED).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import Counter
from dataclasses import asdict, fields, replace
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rentopt.optimizer.timing import FITTED, SpeedParams, step_time, throughput  # noqa: E402
from tests import throughput_records as tr  # noqa: E402

FREE = ("tokens_half", "hidden_half", "attn_ampere", "attn_hopper", "elem_bytes", "loss_bytes",
        "dequant_bytes", "adapter_bytes", "layer_overhead_s", "overlap")
# The range: these percentiles of log(measured / predicted) over the fit records. 5-95 would
# cover 90 % of the fit by construction; the held-out sources are wider, so we take 3-97.
RANGE_PERCENTILES = (3, 97)
# Physically sensible bounds; the positive ones are searched in log space (overlap linearly). At
# most 90 % of the data-parallel traffic hides behind compute: the last buckets' reduction and the
# first gathers of a step have nothing to overlap with (PyTorch DDP and FSDP design notes).
BOUNDS = {"tokens_half": (1, 4000), "hidden_half": (1, 4000), "attn_ampere": (0.1, 0.9), "attn_hopper": (0.1, 0.9),
          "elem_bytes": (1, 200), "loss_bytes": (1, 100), "dequant_bytes": (0.5, 40), "adapter_bytes": (0.01, 200),
          "layer_overhead_s": (1e-6, 0.02), "overlap": (0, 0.9)}


def family(r: dict) -> str:
    rid = r["id"]
    return r["source_family"] + ("/" + rid.split("-")[1] if rid.startswith(("llmf", "aai")) else "")


def prepared(records: list[dict]) -> list[tuple]:
    out = []
    for r in records:
        if tr.excluded(r):
            continue
        out.append((r, *tr.translate(r)))
    return out


def residuals(params: SpeedParams, rates: list[tuple], diffs: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    res, raw = [], []
    counts = Counter(family(p[0]) for p in rates)
    for r, model, setup, layout, gpu, knobs in rates:
        pred = throughput(model, setup, layout, gpu, params=params, knobs=knobs).tokens_per_second[1] / layout.total_gpus
        e = math.log(pred / r["tokens_per_s_per_gpu"])
        raw.append(e)
        res.append(e / math.sqrt(counts[family(r)]))
    for r, model, setup, layout, gpu, knobs in diffs:
        e = math.log(qlora_extra(model, setup, layout, gpu, params) / r["measured"]["extra_seconds_per_iteration"])
        res.append(e / math.sqrt(len(diffs)))
    return np.array(res), np.array(raw)


def qlora_extra(model, setup, layout, gpu, params: SpeedParams) -> float:
    """Seconds per micro-batch that QLoRA adds over LoRA on the same layout."""
    q = step_time(model, setup, layout, gpu, params).total
    lora = step_time(model, setup.model_copy(update={"mode": "lora"}), layout, gpu, params).total
    return q - lora


def main() -> None:
    records = tr.load_records()
    fit_rates = prepared([r for r in records if r["kind"] == "measured" and not tr.held_out(r)])
    held = prepared([r for r in records if r["kind"] == "measured" and tr.held_out(r)])
    diffs = prepared([r for r in records if r["kind"] == "qlora-minus-lora"])

    def unpack(x: np.ndarray) -> SpeedParams:
        return replace(FITTED, **{k: float(math.exp(v)) if k != "overlap" else float(v) for k, v in zip(FREE, x)})

    x0 = np.array([math.log(getattr(FITTED, k)) if k != "overlap" else FITTED.overlap for k in FREE])
    lo = np.array([math.log(BOUNDS[k][0]) if k != "overlap" else BOUNDS[k][0] for k in FREE])
    hi = np.array([math.log(BOUNDS[k][1]) if k != "overlap" else BOUNDS[k][1] for k in FREE])
    x0 = np.clip(x0, lo + 1e-9, hi - 1e-9)
    fit = least_squares(lambda x: residuals(unpack(x), fit_rates, diffs)[0], x0, bounds=(lo, hi),
                        loss="soft_l1", f_scale=0.25, diff_step=1e-3)
    best = unpack(fit.x)
    _, raw = residuals(best, fit_rates, diffs)
    q_lo, q_hi = np.percentile(-raw, RANGE_PERCENTILES[0]), np.percentile(-raw, RANGE_PERCENTILES[1])
    best = replace(best, range_low=float(math.exp(q_lo)), range_high=float(math.exp(q_hi)))
    print("SpeedParams(")
    for f in fields(SpeedParams):
        print(f"    {f.name}={getattr(best, f.name):.4g},")
    print(")")
    for name, group in (("fit", fit_rates), ("held out", held)):
        errs = []
        for r, model, setup, layout, gpu, knobs in group:
            t = throughput(model, setup, layout, gpu, params=best, knobs=knobs)
            n = layout.total_gpus
            meas = r["tokens_per_s_per_gpu"]
            errs.append((t.tokens_per_second[1] / n / meas - 1,
                         t.tokens_per_second[0] / n <= meas <= t.tokens_per_second[2] / n))
        within = sum(abs(e) <= 0.30 for e, _ in errs) / len(errs)
        cover = sum(c for _, c in errs) / len(errs)
        print(f"{name}: {len(errs)} records, within +-30 % {within:.0%}, range covers {cover:.0%}, "
              f"median |error| {statistics.median(abs(e) for e, _ in errs):.1%}")
    print("params:", asdict(best))


if __name__ == "__main__":
    main()
