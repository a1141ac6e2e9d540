"""The planner's rules, guarded: node counts, which way each transfer goes, spot's lost work, and
the first pass, whose rough bounds must never prune the plan the exact pass would choose.

Hours and prices are worked out in the comments; the first-pass tests also compare with the
planner run without its first pass (every candidate priced exactly: an independent route to
the same answer). tools/mutate.py breaks each rule and checks that a test here notices.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from decimal import ROUND_CEILING, Decimal

import pytest

import rentopt.optimizer.first_pass as first_pass
import rentopt.optimizer.job as job
from rentopt.optimizer.catalog import OfferSet
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.models import Offer, PriceOption, TrainingSetup
from rentopt.optimizer.job import QuoteRequest
from rentopt.optimizer.planner import build_quote, plan_instance
from rentopt.optimizer.solver import solve
from rentopt.optimizer.workload import resolve_model

D = Decimal
FX = FxTable.load(overrides={"CNY": D(7)})
SMALL = resolve_model("0.5b")
FETCHED = datetime(2026, 11, 28, tzinfo=timezone.utc)


def offer(offer_id: str, hourly: str | None, *, provider: str = "cloud", gpus: int = 1, spot_hourly: str | None = None,
          down: float = 10_000, up: float = 10_000, **kw) -> Offer:
    options = [PriceOption(unit="hour", amount=D(hourly))] if hourly else []
    if spot_hourly:
        options.append(PriceOption(unit="hour", amount=D(spot_hourly), interruptible=True))
    values = dict(provider=provider, offer_id=offer_id, gpu="H100-SXM-80GB", gpu_raw="H100 SXM", gpus=gpus,
                  gpu_memory_gb=80, interconnect="nvlink", price_options=options, storage_gb_month=D(0),
                  egress_gb=D(0), ingress_gb=D(0), net_down_mbps=down, net_up_mbps=up, currency="USD",
                  fetched_at=FETCHED, source="test", spot=bool(spot_hourly) and not hourly)
    values.update(kw)
    return Offer(**values)


def request(**kw) -> QuoteRequest:
    values = dict(model=SMALL, setup=TrainingSetup(mode="lora"), validate_hours=None, keep_checkpoints=0, top=1)
    values.update(kw)
    return QuoteRequest(**values)


def best(req: QuoteRequest, offers: list[Offer], *, first_pass: bool = True) -> tuple[str, Decimal]:
    planned = plan_instance(req, offers, FX, first_pass=first_pass)
    [bill] = solve(planned.instance, top_k=1).plans
    return planned.candidates[bill.choice.train].offer.offer_id, bill.total


def ceil6(x: Decimal) -> Decimal:
    return x.quantize(D("0.000001"), rounding=ROUND_CEILING)


# --------------------------------------------------------------------------------------------
# What an offer can give


def test_a_layout_of_n_nodes_is_offered_only_where_n_nodes_are_available():
    fabric = dict(fabric="infiniband", fabric_gbps=3200.0)
    two = offer("two-nodes", "20", gpus=8, nodes_available=2, **fabric)
    one = offer("one-node", "20", gpus=8, nodes_available=1, **fabric)  # same node shape, one node to rent
    planned = plan_instance(request(tokens=1e9), [two, one], FX, first_pass=False)
    nodes = sorted((c.offer.offer_id, c.use.nodes) for c in planned.candidates.values())
    assert nodes == [("one-node", 1), ("two-nodes", 1), ("two-nodes", 2)]


# --------------------------------------------------------------------------------------------
# Which way each transfer goes


def test_an_export_is_timed_at_the_upload_speed_and_an_import_at_the_download_speed():
    # download 1000 Mbit/s, upload 100: a 10-day rental's train stage is import + 240 h + export
    o = offer("asym", "2.00", down=1000, up=100)
    req = request(rent_days=D(10), data_gb=D(50))
    planned = plan_instance(req, [o], FX, first_pass=False)
    [c] = planned.candidates.values()
    prep = planned.prep
    import_h = prep.import_gb * 8000 / 1000 / 3600  # GB x 8000 Mbit / (Mbit/s) / 3600 s
    export_h = prep.export_gb * 8000 / 100 / 3600
    assert prep.import_gb == D("50.99") and prep.export_gb > 0  # 50 GB data + 0.99 GB weights (above)
    assert c.use.hours == ceil6(ceil6(import_h) + 240 + ceil6(export_h))
    # the quote's export stage says the same
    quote = build_quote(req, OfferSet([o], "offers-file", {}, FETCHED, "test offers"), FX)
    assert next(s for s in quote.plans[0].stages if s.kind == "export").hours == ceil6(export_h)


# --------------------------------------------------------------------------------------------
# Spot: what a preemption costs


def test_spot_hours_count_the_work_lost_and_the_restart_after_each_preemption():
    # A marketplace spot instance: 0.05 preemptions per hour (planner's stated prior); each loses
    # half the 2 h checkpoint interval (1 h) plus a 0.25 h restart, so the run takes
    # 1 + 0.05 x 1.25 = 1.0625 x its hours on an instance that is never preempted.
    o = offer("both", "2.00", spot_hourly="0.80", provider="marketplace-cloud")
    req = request(tokens=2e9, spot=True, checkpoint_every_hours=D(2))
    planned = plan_instance(req, [o], FX, first_pass=False)
    by_kind = {c.use.spot: c for c in planned.candidates.values()}
    # the import and export at 10 Gbit/s: GB x 8000 Mbit / 10,000 Mbit/s / 3600 s, each rounded up to 1e-6 h
    moving = sum(((gb * 8000 / 10_000) / 3600).quantize(D("0.000001"), rounding=ROUND_CEILING)
                 for gb in (planned.prep.import_gb, planned.prep.export_gb))
    on_demand, spot = by_kind[False].use.hours - moving, by_kind[True].use.hours - moving
    assert spot / on_demand == pytest.approx(Decimal("1.0625"), rel=Decimal("1e-6"))
    # a hyperscaler's published interruption rate is 0.0005/h: 1 + 0.0005 x 1.25 = 1.000625
    aws = plan_instance(req, [o.model_copy(update={"provider": "aws"})], FX, first_pass=False)
    by_kind = {c.use.spot: c for c in aws.candidates.values()}
    ratio = (by_kind[True].use.hours - moving) / (by_kind[False].use.hours - moving)
    assert ratio == pytest.approx(Decimal("1.000625"), rel=Decimal("1e-6"))


# --------------------------------------------------------------------------------------------
# The first pass: rough bounds that must never prune the plan the exact pass chooses


def test_a_fixed_rental_narrowed_by_cost_per_token_keeps_the_cheaper_per_token_offer(monkeypatch):
    # --rent-days: every plan rents 10 days; they are ranked by cost per token. Nine 1 x H100
    # offers at 2.00/h and one 8 x H100 NVLink node at 10.00/h (1.25 per GPU-hour) of one
    # (provider, GPU) group: the node is dearer in total but does ~8x the work (a 0.5B LoRA scales
    # well on NVLink), so per token it is the group's best plan. Narrowing (forced here for a
    # small catalog) starts from the 8 cheapest by total, none of them the node: it must compare
    # the node's cost per token with the heads' cost per token, not its total.
    monkeypatch.setattr(first_pass, "HEADS_FROM", 0)
    singles = [offer(f"one-{i}", "2.00") for i in range(9)]
    node = offer("eight", "10.00", gpus=8)
    req = request(rent_days=D(10))
    assert best(req, singles + [node])[0] == "eight"
    assert best(req, singles + [node], first_pass=False)[0] == "eight"


def test_the_first_pass_bounds_a_plan_with_its_import_time():
    # A 10-day rental (240 h) with 100 GB of data. Offer "slow" is 1.00/h but downloads at
    # 10 Mbit/s: importing ~101 GB takes ~22.5 h, so it bills ~262.5 h = ~262.50. Offer "fast" is
    # 1.05/h and imports in minutes: ~240.1 h = ~252.10. "fast" is the better plan; a first pass
    # that left the import out would bound "slow" at 240.00 and prune "fast" before pricing it.
    slow = offer("slow", "1.00", provider="p1", down=10)
    fast = offer("fast", "1.05", provider="p2", down=10_000)
    req = request(rent_days=D(10), data_gb=D(100))
    found = best(req, [slow, fast])
    # By hand: "fast" moves 100 GB data + 0.99 GB weights (2 B x 494,032,768 parameters, to 10 MB)
    # in at 10,000 Mbit/s = 80.792 s -> 0.022442 h and 0.035 GB of adapters out = 0.028 s ->
    # 0.000008 h; billed by the second: (240 + 0.022442 + 0.000008) h x 1.05 = 252.0236 -> 252.02
    assert found == ("fast", D("252.02"))
    assert best(req, [slow, fast], first_pass=False) == found


def test_the_first_pass_bounds_a_spot_plan_with_its_lost_work():
    # --spot, a 10-day rental ranked per token. "spot" at 1.00/h loses 1.0375x its time to
    # preemptions (0.05/h x (0.5 h + 0.25 h)), so it does 1/1.0375 of the work: 240.00 for
    # 0.964 units of tokens = 248.98 per unit. "steady" at 1.02/h on demand: 244.80 per unit, the
    # better plan. A first pass that forgot the lost work would bound "spot" at 240.00 per unit
    # and prune "steady".
    spot = offer("spot", None, spot_hourly="1.00", provider="market")
    steady = offer("steady", "1.02", provider="cloud")
    req = request(rent_days=D(10), spot=True)
    assert best(req, [spot, steady])[0] == "steady"
    assert best(req, [spot, steady], first_pass=False)[0] == "steady"


def test_the_first_pass_checks_the_deadline_at_the_slow_end_of_the_speed_range():
    # Three 1-GPU offers. "a" (H100, 1.00/h) downloads at 5 Mbit/s, so its own validation takes
    # ~5.9 h; "c" (H200, same architecture, 10.00/h) validates in ~1 h; "b" (B200, another
    # architecture) trains and validates on its own. The deadline is a's training at the slow end of
    # its range after c's validation. Continuing on a after its own validation would be a's cheapest
    # plan, but it meets the deadline only at the typical speed, not at the slow end: a's real best
    # is c's validation then a fresh a (dearer). "b" is priced between the two, so it is the best
    # plan; a first pass that checked the deadline at the typical speed would bound a by the lease
    # it cannot have, and prune b.
    a = offer("a", "1.00", provider="pa", down=5)
    c = offer("c", "10.00", provider="pc", gpu="H200-SXM-141GB", gpu_raw="H200", gpu_memory_gb=141)
    b = offer("b", "1.00", provider="pb", gpu="B200-SXM-180GB", gpu_raw="B200", gpu_memory_gb=180)
    req = request(tokens=2e9, validate_hours=D(1))
    hours = {(x.use.kind, x.offer.offer_id): x for x in plan_instance(req, [a, b, c], FX, first_pass=False).candidates.values()}
    ta, va, vc = hours["train", "a"], hours["validate", "a"], hours["validate", "c"]
    deadline = ta.hours_high + vc.use.hours + vc.use.out_hours + D("0.01")
    assert va.use.hours + ta.hours_high > deadline >= va.use.hours + ta.use.hours  # the lease: slow end misses
    lease = va.use.hours + ta.use.hours  # 1.00/h over both stages
    real = 10 * (vc.use.hours + vc.use.out_hours) + ta.use.hours  # c's validation, then a
    b_hours = hours["validate", "b"].use.hours + hours["train", "b"].use.hours
    b_price = ((lease + real) / 2 / b_hours).quantize(D("0.01"))
    b = b.model_copy(update={"price_options": [PriceOption(unit="hour", amount=b_price)]})
    req = request(tokens=2e9, validate_hours=D(1), deadline_days=deadline / 24)
    assert best(req, [a, b, c])[0] == "b"
    assert best(req, [a, b, c]) == best(req, [a, b, c], first_pass=False)


# --------------------------------------------------------------------------------------------
# What a run keeps on disk and copies out


def test_the_disk_holds_the_kept_checkpoints_and_a_full_fine_tune_exports_its_weights():
    # Llama-2-7B: 6,738,415,616 parameters, 2 B each on disk = 13.48 GB (to 10 MB). LoRA rank 16 on
    # every linear: 32 x 16 x (4 x 8192 + 3 x 15104) = 39,976,960 adapter weights; a resumable
    # checkpoint keeps them in fp32 with Adam's two fp32 moments, 12 B each, + 1 MB of trainer
    # state = 0.48 GB; the final adapters are 0.04 B x 4 B = 0.16 GB.
    model = resolve_model("llama-2-7b")
    lora = job.prepare(request(model=model, tokens=1e9, keep_checkpoints=2, data_gb=D(10)))
    assert lora.disk_gb == D("13.48") + 10 + 2 * D("0.48")  # weights + data + the 2 kept checkpoints
    assert lora.import_gb == D("13.48") + 10
    assert lora.export_gb == D("0.16") + 2 * D("0.48")  # adapters + kept checkpoints
    assert lora.destroy_gb == 10 + D("0.48")  # a destroyed validation copies out its data and checkpoint
    # full fine-tuning: the checkpoint is 16-bit weights + fp32 master + 2 fp32 moments = 14 B/param
    # (94.34 GB); the export is the whole model's weights, 13.48 GB, not adapters
    full = job.prepare(request(model=model, setup=TrainingSetup(mode="full"), tokens=1e9, keep_checkpoints=1,
                                    data_gb=D(10)))
    assert full.export_gb == D("13.48") + D("94.34")
    assert full.disk_gb == D("13.48") + 10 + D("94.34")


# --------------------------------------------------------------------------------------------
# --days: the work and the deadline on the reference layout


def test_days_of_work_are_tokens_at_the_typical_speed_and_the_deadline_is_the_references_slow_finish():
    # --days 1 on the reference (the fewest A100-SXM-80GB that hold the job: one, for a 0.5B LoRA):
    # the work is a day at its typical speed; the deadline is the reference's own pessimistic finish
    # (the day at the slow end of its range, the 30 h validation, the 12 h gap and an hour for
    # moving data), rounded up to whole days.
    req = request(days=D(1), validate_hours=D(30), idle_days=D("0.5"))
    ref, fit = job.default_reference(req.model, req.setup, req.pins)
    assert (ref.gpu, ref.gpus, ref.nodes) == ("A100-SXM4-80GB", 1, 1)
    speed = job.speed_of(req.model, req.setup, fit.layout, get_gpu(ref.gpu))  # the speed model's range
    work = job.work_plan(req, job.prepare(req))
    assert work.tokens == pytest.approx(speed.typical * 24 * 3600)
    slow_hours = 24 * speed.typical / speed.low + 30 + 12 + 1
    assert work.deadline_hours == math.ceil(slow_hours / 24) * 24


# --------------------------------------------------------------------------------------------
# The validation runs on the training GPU model when some offer of it holds the job


def test_a_validation_runs_on_the_training_gpu_model_when_an_offer_of_it_holds_the_job():
    # Training on an 8 x H100 node (20.00/h). A 1 x H100 offer (3.00/h) can hold the validation
    # but not the training run (its host rents for 6 h at most); two 1 x H200 offers (Hopper too)
    # are cheaper (1.00/h). The seeds validate on the training GPU model when any offer of it holds
    # the job, so the node's plan validates on the 1 x H100 (4 h x 3.00 = 12.00, then destroyed),
    # not on an H200, and not on the node itself (4 h x 20.00).
    node = offer("node", "20.00", provider="p1", gpus=8)
    one = offer("h100-one", "3.00", provider="p2", max_duration_hours=6)
    h200 = [offer(f"h200-{i}", "1.00", provider=f"p{3 + i}", gpu="H200-SXM-141GB", gpu_raw="H200",
                  gpu_memory_gb=141) for i in range(2)]
    req = request(tokens=5e8, validate_hours=D(4), top=5)
    planned = plan_instance(req, [node, one, *h200], FX)
    plans = solve(planned.instance, top_k=5).plans
    on_node = next(p for p in plans if planned.candidates[p.choice.train].offer.offer_id == "node")
    assert planned.candidates[on_node.choice.validate].offer.offer_id == "h100-one"
    assert on_node.choice.idle == "destroy"


def test_a_validation_runs_on_a_gpu_of_the_training_architecture_when_no_offer_of_its_model_holds_it():
    # A 20 h validation. The 1 x H100 offer rents for 15 h at most: enough for ~8 h of training,
    # not for the validation. No other H100 offer exists, so the run is validated on the H200
    # (Hopper, the same architecture) and destroyed; a rule that insisted on the H100 itself would
    # leave the H100 with no plan at all.
    h100 = offer("h100", "1.00", provider="p1", max_duration_hours=15)
    h200 = offer("h200", "3.00", provider="p2", gpu="H200-SXM-141GB", gpu_raw="H200", gpu_memory_gb=141)
    req = request(tokens=5e8, validate_hours=D(20), top=5)
    planned = plan_instance(req, [h100, h200], FX)
    plans = solve(planned.instance, top_k=5).plans
    on_h100 = [p for p in plans if planned.candidates[p.choice.train].offer.offer_id == "h100"]
    assert len(on_h100) == 1
    assert planned.candidates[on_h100[0].choice.validate].offer.offer_id == "h200"
    assert on_h100[0].choice.idle == "destroy"


def test_a_card_without_flash_attention_2_is_validated_with_the_kernel_it_trains_with():
    # A V100 (Volta) runs SDPA's memory-efficient kernel instead of FlashAttention-2; its
    # validation must run that kernel too (the same job), not eager attention, or the V100 offer,
    # the cheaper one here (1.00/h against 2.00/h), would get no plan at all.
    v100 = offer("v100", "1.00", provider="pv", gpu="V100-SXM2-32GB", gpu_raw="V100", gpu_memory_gb=32)
    a100 = offer("a100", "2.00", provider="pa", gpu="A100-SXM4-80GB", gpu_raw="A100", gpu_memory_gb=80)
    planned = plan_instance(request(tokens=2e8, validate_hours=D(1), top=5), [v100, a100], FX)
    plans = solve(planned.instance, top_k=5).plans
    used = {planned.candidates[p.choice.train].offer.offer_id: planned.candidates[p.choice.validate] for p in plans}
    assert set(used) == {"v100", "a100"}
    assert used["v100"].offer.offer_id == "v100" and used["v100"].layout.attention == "sdpa-mem-efficient"
