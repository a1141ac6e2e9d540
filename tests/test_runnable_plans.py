"""Only plans that can run, over a grid of jobs on the bundled snapshot of published prices.

For 0.5B to 70B models, full, LoRA and QLoRA, sized by --days and by --tokens: no stage runs a
precision or an attention kernel its GPU lacks (the GPU catalog's own capability fields), no
plan puts a non-CUDA card in without --allow-stack, and every validation stage runs the training
job's precision, attention kernel and parallel family (ZeRO stage, FSDP, tensor/pipeline split,
offload) on the training GPU model or one of its architecture.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from rentopt.optimizer.catalog import load_offers
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.job import QuoteRequest
from rentopt.optimizer.candidates import Signature
from rentopt.optimizer.planner import build_quote, plan_instance
from rentopt.optimizer.solver import solve
from rentopt.optimizer.workload import resolve_model

JOBS = [
    ("0.5b", "full", {"days": Decimal(1)}), ("0.5b", "qlora", {"tokens": 5e8}),
    ("7b", "qlora", {"days": Decimal(3)}), ("7b", "lora", {"tokens": 1e9}), ("7b", "full", {"days": Decimal(10)}),
    ("13b", "lora", {"days": Decimal(10)}), ("13b", "full", {"tokens": 2e9}),
    ("70b", "qlora", {"days": Decimal(7)}), ("70b", "lora", {"tokens": 5e8}), ("70b", "full", {"tokens": 2e9}),
]
NEEDS_BF16 = ("bf16-mixed", "bf16-true")
EVERY_CANDIDATE = {("0.5b", "full"), ("7b", "qlora"), ("7b", "full"), ("13b", "lora"), ("70b", "lora")}


@pytest.fixture(scope="module")
def bundled():
    return load_offers().table(), FxTable.load()


def _check_stage_runs(gpu_id: str, precision: str, attention: str) -> None:
    gpu = get_gpu(gpu_id)
    assert gpu.stack == "cuda", f"{gpu_id} is {gpu.stack}: planned without --allow-stack"
    if precision in NEEDS_BF16:
        assert gpu.bf16, f"{gpu_id} lacks BF16 but runs {precision}"
    if precision == "fp8":
        assert gpu.fp8, f"{gpu_id} lacks FP8"
    if attention.startswith("flash-attention-"):
        assert gpu.flash_attention >= int(attention.rsplit("-", 1)[1]), f"{gpu_id} lacks {attention}"


@pytest.mark.parametrize("model, mode, size", JOBS, ids=[f"{m}-{mode}-{next(iter(s))}" for m, mode, s in JOBS])
def test_every_stage_runs_what_its_gpu_can_and_validation_runs_the_training_job(bundled, model, mode, size):
    table, fx = bundled
    req = QuoteRequest(model=resolve_model(model), setup=TrainingSetup(mode=mode), top=5, **size)
    if (model, mode) in EVERY_CANDIDATE:  # every candidate the planner makes, not only the best plans
        for c in plan_instance(req, table, fx, first_pass=False).candidates.values():
            _check_stage_runs(c.gpu.id, c.layout.precision, c.layout.attention)
    planned = plan_instance(req, table, fx)
    try:
        bills = solve(planned.instance, top_k=req.top).plans
    except NoFeasiblePlan as exc:  # every job here runs on the bundled snapshot's A100s and H100s
        pytest.fail(f"no plan on the bundled snapshot for this job: {exc}")
    assert bills
    for bill in bills:
        t = planned.candidates[bill.choice.train]
        _check_stage_runs(t.gpu.id, t.layout.precision, t.layout.attention)
        if bill.choice.validate is None:
            continue
        v = planned.candidates[bill.choice.validate]
        _check_stage_runs(v.gpu.id, v.layout.precision, v.layout.attention)
        assert Signature.of(v.layout) == Signature.of(t.layout), (v.layout.strategy, t.layout.strategy)
        assert v.gpu.id == t.gpu.id or v.gpu.architecture == t.gpu.architecture
        assert v.layout.micro_batch == 1 and v.use.nodes == 1


def test_a_pinned_precision_rules_out_cards_without_it(bundled):
    """--precision bf16 given: no Turing/Volta card (no BF16) appears, not even with fp16 instead."""
    table, fx = bundled
    setup = TrainingSetup(mode="lora", precision="bf16-mixed")
    from rentopt.optimizer.feasibility import Capabilities, Pins

    req = QuoteRequest(model=resolve_model("7b"), setup=setup, tokens=5e8, top=10,
                       pins=Pins(capabilities=Capabilities(precision_pinned=True)))
    planned = plan_instance(req, table, fx, first_pass=False)
    assert all(c.gpu.bf16 for c in planned.candidates.values())
    rejected = {why for _, constraint, why in planned.rejected if constraint == "capability"}
    assert any("lacks BF16" in why for why in rejected)


def test_the_quote_json_says_what_runs_on_each_stage(bundled):
    table, fx = bundled
    offers = load_offers()
    quote = build_quote(QuoteRequest(model=resolve_model("13b"), setup=TrainingSetup(mode="lora"),
                                     days=Decimal(10), top=3), offers, fx)
    for plan in quote.plans:
        for stage in plan.stages:
            if stage.kind in ("validate", "train"):
                assert stage.precision and stage.attention
                _check_stage_runs(stage.gpu, stage.precision, stage.attention)
