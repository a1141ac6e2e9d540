"""The memory estimator against published measurements (tests/data/memory-measurements.json).

Each record states its configuration, its unit (GB or GiB) and what was measured (allocated,
reserved, nvidia-smi, a model-states estimate, a capacity bound). The adapter below translates
the record's configuration into rentopt's inputs with generic keyword rules, and compares like
with like: the estimator's view that matches the record's metric, in the record's unit. No
record is special-cased by id.

Target (issue 2): >= 85 % of records within +-25 %, median absolute error <= 10 %.
Run `pytest tests/test_memory_calibration.py -s` to see the table.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from rentopt.optimizer.memory import estimate, model_states_gb
from rentopt.optimizer.models import ModelSpec, TrainingSetup

DATA = Path(__file__).parent / "data" / "memory-measurements.json"
GIB = 2**30


def load_records() -> list[dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))


def record_model(r: dict) -> ModelSpec:
    """The record's architecture. MLP gating and embedding tying are not stated in the records;
    pick the combination whose parameter count reproduces the published total."""
    base = dict(name=r["model"], layers=r["layers"], hidden=r["hidden"], heads=r["heads"],
                kv_heads=r["kv_heads"], intermediate=r["intermediate"], vocab=r["vocab"])
    target = r["params_b"] * 1e9
    candidates = [ModelSpec(**base, mlp_gated=g, tied_embeddings=t) for g in (True, False) for t in (False, True)]
    best = min(candidates, key=lambda m: abs(m.computed_params - target))
    return best.model_copy(update={"params": int(target)})


def _precision(r: dict) -> str:
    p, opt = r["precision"].lower(), r["optimizer"].lower()
    # "pure" first: "bf16 (pure: ..., no fp32 master copy)" names fp32 only to deny it.
    if "true" in p or "pure" in p or "bf16 states" in opt:
        return "bf16-true"
    if "fp32" in p:
        return "fp32"
    if "fp16" in p and "bf16" not in p:
        return "fp16-mixed"
    return "bf16-mixed"


def _optimizer(r: dict) -> str:
    opt = r["optimizer"].lower()
    if r["mode"] == "inference" or opt == "none":
        return "none"
    if "paged" in opt:
        return "paged-adamw-8bit" if ("8-bit" in opt or "8bit" in opt) else "paged-adamw"
    if "8-bit" in opt or "8bit" in opt:
        return "adamw-8bit"
    if "sgd" in opt:
        return "sgd"
    return "adamw"


def _targets(r: dict) -> str:
    t = (r.get("lora_targets") or "all-linear").lower()
    if "all" in t or ("gate" in t and "down" in t) or ("c_attn" in t and "w1" in t):
        return "all-linear"
    out = []
    if "query_key_value" in t or "c_attn" in t:
        out += ["q", "k", "v"]
    for name in ("q", "k", "v", "o"):
        if name in [x.strip().split(" ")[0] for x in t.replace("(", ",").split(",")]:
            out.append(name)
    return ",".join(dict.fromkeys(out)) or "all-linear"


def _quant(r: dict) -> tuple[str, bool]:
    p = r["precision"].lower()
    dq = "double" in p or "-dq" in p or "dq" in p.split()
    if r["mode"] != "inference":
        return "none", dq
    if "int8" in p:
        return "int8", dq
    if "nf4" in p:
        return "nf4", dq
    if "int4" in p or "gptq" in p:
        return "int4", dq
    return "none", dq


# FSDP LoRA runs published by LitGPT (2023) and torchtune before it moved to FSDP2 (September
# 2024) ran FSDP that left frozen units unsharded through backward (pytorch/pytorch#95805): both
# frameworks' own tables show per-GPU peaks close to one GPU's. A record measured on FSDP2 says so.
_FSDP1_ERA_FRAMEWORKS = ("litgpt", "torchtune")


def _fsdp_without_frozen_reshard(r: dict) -> bool:
    text = f"{r['framework']} {r.get('notes', '')}".lower()
    return (bool(r["fsdp"]) and r["mode"] == "lora" and "fsdp2" not in text
            and any(f in r["framework"].lower() for f in _FSDP1_ERA_FRAMEWORKS))


def record_setup(r: dict) -> TrainingSetup:
    offload = {"none": "none", "optimizer": "optimizer", "optimizer+params": "all"}[r.get("offload") or "none"]
    quant, dq = _quant(r)
    kw = dict(
        mode=r["mode"],
        seq_len=r["seq_len"] or 2048,
        micro_batch=r["micro_batch"] or 1,
        gpus=r["num_gpus"] or 1,
        zero=r["zero_stage"] or 0,
        fsdp=bool(r["fsdp"]),
        offload=offload,
        precision=_precision(r),
        optimizer=_optimizer(r),
        quant=quant,
        double_quant=dq,
    )
    if "chunked ce" in r.get("notes", "").lower():
        kw["chunked_loss"] = True
    if any(w in r.get("notes", "").lower() for w in ("liger", "fused linear cross", "cut cross-entropy")):
        kw["fused_loss"] = True
    stated = f"{r['optimizer']} {r.get('notes', '')}".lower()
    if "optimizer_in_bwd: true" in stated or "stepped in backward" in stated or "optimizer in backward" in stated:
        kw["optimizer_in_backward"] = True
    if _fsdp_without_frozen_reshard(r):
        kw["fsdp_frozen_unsharded"] = True
    notes = r.get("notes", "").lower()
    if "gradient_accumulation_steps=1" in notes or "no gradient accumulation" in notes:
        kw["grad_accumulation"] = False
    if r["grad_checkpointing"] is not None:
        kw["grad_checkpointing"] = r["grad_checkpointing"]
    if r["flash_attention"] is not None:
        kw["flash_attention"] = r["flash_attention"]
    if r["mode"] in ("lora", "qlora"):
        kw["lora_rank"] = r["lora_rank"] or 16
        kw["lora_targets"] = _targets(r)
    return TrainingSetup(**kw)


def view(r: dict) -> str:
    m = r["memory_metric"].lower()
    if "model states" in m:
        return "states"
    if "reserved" in m:
        return "reserved"
    if "allocated" in m or "active" in m:
        return "allocated"
    # nvidia-smi, unknown methods (Qwen's README), rule-of-thumb tables and capacity claims are
    # all about what must fit on the device.
    return "device"


def unit_bytes(r: dict) -> float:
    u = r["unit"]
    return GIB if ("GiB" in u or "MiB" in u or "2**20" in u) else 1e9


def predict(r: dict) -> float:
    """Predicted value in the record's unit and view."""
    model, setup = record_model(r), record_setup(r)
    v = view(r)
    if v == "states":
        gb = model_states_gb(model, setup)
    else:
        est = estimate(model, setup)
        gb = {"allocated": est.peak_gb_per_gpu, "reserved": est.reserved_gb_per_gpu,
              "device": est.device_gb_per_gpu}[v]
    return gb * 1e9 / unit_bytes(r)


def calibration_table() -> list[tuple[str, str, float, float, float]]:
    rows = []
    for r in load_records():
        pred = predict(r)
        meas = r["measured_peak_gb_per_gpu"]
        rows.append((r["id"], view(r), meas, pred, (pred - meas) / meas))
    return rows


def test_calibration_targets(capsys):
    rows = calibration_table()
    errors = [abs(e) for *_, e in rows]
    within = sum(e <= 0.25 for e in errors) / len(errors)
    median = statistics.median(errors)
    with capsys.disabled():
        print(f"\n{'record':44} {'view':9} {'measured':>9} {'predicted':>9} {'error':>7}")
        for rid, v, meas, pred, err in rows:
            flag = "" if abs(err) <= 0.25 else "  <-- outside 25 %"
            print(f"{rid:44} {v:9} {meas:9.2f} {pred:9.2f} {err:+7.1%}{flag}")
        print(f"within +-25 %: {within:.0%} ({sum(e <= 0.25 for e in errors)}/{len(errors)}); "
              f"median absolute error: {median:.1%}")
    assert within >= 0.85
    assert median <= 0.10


@pytest.mark.parametrize("record", load_records(), ids=lambda r: r["id"])
def test_record_translates(record):
    """Every record maps onto valid inputs (catches a record the adapter cannot read)."""
    model, setup = record_model(record), record_setup(record)
    assert abs(model.total_params - record["params_b"] * 1e9) < 1e6
    assert setup.mode == record["mode"]
