"""`rentopt quote` end to end: hand-worked bills, the JSON contract, and every way a quote fails.

Offers are pinned with --offers-file (JSON Offer lists written by the tests), so each expected
bill can be worked out by hand in the test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime, timezone
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.workload import resolve_model

FETCHED = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def offer(offer_id: str, gpu: str, gpus: int, hourly: str, *, memory: float, interconnect: str = "pcie",
          provider: str = "testcloud", currency: str = "USD", spot_hourly: str | None = None,
          storage: str | None = "0.10", stopped: str | None = None, egress: str | None = "0",
          ingress: str | None = "0", mbps: float | None = 1000, granularity: int = 1,
          extra_options: list[PriceOption] | None = None, max_hours: float | None = None,
          month_hours: int = 730) -> Offer:
    options = [PriceOption(unit="hour", amount=Decimal(hourly), label="on-demand")]
    if spot_hourly:
        options.append(PriceOption(unit="hour", amount=Decimal(spot_hourly), interruptible=True, label="spot"))
    options += extra_options or []
    return Offer(
        provider=provider, offer_id=offer_id, gpu=gpu, gpu_raw=gpu, gpus=gpus, gpu_memory_gb=memory,
        interconnect=interconnect, price_options=options,
        storage_gb_month=Decimal(storage) if storage is not None else None,
        storage_stopped_gb_month=Decimal(stopped) if stopped is not None else None,
        egress_gb=Decimal(egress) if egress is not None else None,
        ingress_gb=Decimal(ingress) if ingress is not None else None,
        net_up_mbps=mbps, net_down_mbps=mbps, billing_granularity_s=granularity, month_hours=month_hours,
        max_duration_hours=max_hours, currency=currency, fetched_at=FETCHED, source="https://testcloud.example/api",
    )


def write_offers(tmp_path: Path, offers: list[Offer]) -> Path:
    path = tmp_path / "offers.json"
    path.write_text(json.dumps([o.model_dump(mode="json") for o in offers]), encoding="utf-8")
    return path


def quote(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["quote", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def quote_json(*args: str) -> dict:
    code, out, err = quote(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def ceil6(x: Decimal) -> Decimal:
    return x.quantize(Decimal("0.000001"), rounding=ROUND_CEILING)


A6000 = dict(gpu="RTX-A6000-48GB", memory=48)
RTX4090 = dict(gpu="RTX-4090-24GB", memory=24)


def plan_stage(plan: dict, kind: str) -> dict:
    return next(s for s in plan["stages"] if s["kind"] == kind)


H100 = dict(gpu="H100-SXM-80GB", memory=80, interconnect="nvlink")


# --------------------------------------------------------------------------------------------
# Bills worked out by hand (a fixed rental: --rent-days fixes the training hours)


def test_a_fixed_rental_on_one_48gb_card_billed_by_hand(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, granularity=3600, **A6000)])
    data = quote_json("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", str(offers),
                      "--no-validate", "--keep-checkpoints", "0")
    best = data["plans"][0]
    train = plan_stage(best, "train")
    assert train["offer_id"] == "a6000" and train["gpus"] == 1 and train["layout"] == "single"
    # By hand. Disk: 13B base weights 2 B x 13,015,864,320 = 26.03 GB (to 10 MB) + 10 GB data (no
    # checkpoints kept). Running hours: 240 h of training + moving 36.03 GB in and 0.25 GB of
    # adapters out at 1000 Mbit/s = 36.28 x 8000 / 1000 s = 290.24 s -> 240.080623 h (up to 1e-6 h).
    hours = ceil6(Decimal(240) + Decimal("36.28") * 8000 / 1000 / 3600)
    assert Decimal(train["hours"]) == hours
    # Compute is billed per started hour: 241 h x 0.49 = 118.09 USD.
    assert [(b["unit"], Decimal(b["count"])) for b in train["billing"] if b["what"] == "compute"] == [("hour", 241)]
    # Disk while running: 36.03 GB x 0.10 USD/GB-month x 240.080623 h / 730 h = 1.1849... -> 1.18
    assert Decimal(best["line_items"]["compute"]) == Decimal("118.09")
    assert Decimal(best["line_items"]["storage_running"]) == Decimal("1.18")
    assert Decimal(best["total"]) == Decimal("119.27")
    # A fixed rental is ranked by cost per token: the work it does is on the plan
    per_billion = Decimal(best["total"]) / Decimal(best["tokens"]) * 10**9
    assert Decimal(best["cost_per_billion_tokens"]) == per_billion.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def test_the_seed_node_bills_one_month_for_validation_and_training(tmp_path):
    """Seed 004's JYGPU node: 8 x RTX 4090 at 7920 CNY/month; a 4 h validation and 10 days of
    training on it are one rental, one month -- not a month each."""
    month = PriceOption(unit="month", amount=Decimal("7920"), label="discounted")
    jy = offer("8x-rtx4090", hourly="15", gpus=8, currency="CNY", provider="jygpu", extra_options=[month],
               month_hours=720, storage=None, egress=None, ingress=None, **RTX4090)
    jy = jy.model_copy(update={"price_options": [month], "stopped_bills": "everything"})
    data = quote_json("--model", "7b", "--mode", "qlora", "--rent-days", "10", "--offers-file",
                      str(write_offers(tmp_path, [jy])), "--currency", "CNY")
    plan = data["plans"][0]
    assert plan["idle"] == "continue"
    assert Decimal(plan["line_items"]["compute"]) == Decimal("7920")  # 4 h + 240 h < 720 h
    assert [(b["unit"], Decimal(b["count"])) for b in plan_stage(plan, "validate")["billing"]
            if b["what"] == "compute"] == [("discounted", 1)]
    # JYGPU publishes no disk price: unknown, never 0.00
    assert plan["unknown_charges"] and plan["unknown_charges"][0].startswith("storage running: ")
    # 10 days of a 7,920 CNY month: a daily rental wins below 7,920 / 10 = 792... per day of the days used;
    # the stage runs 240 h + validation + copying, so 11 started days: 7,920 / 11 = 720.00
    assert any("cheaper at under 720.00 CNY per day" in n for n in plan["notes"])
    assert any("cheaper at under 720.00 CNY per day" in n for n in plan["key_notes"])


def test_an_idle_gap_prices_stop_and_destroy_and_picks_the_cheaper(tmp_path):
    """14 idle days: stop keeps the disk at the STOPPED rate; destroy copies data + checkpoint out."""
    box = offer("box", hourly="0.49", gpus=1, storage="0.10", stopped="0.05", egress="0.09", ingress="0.0", **A6000)
    data = quote_json("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file",
                      str(write_offers(tmp_path, [box])), "--idle-days", "14", "--keep-checkpoints", "0")
    plan = data["plans"][0]
    # Stop: validation disk = 26.03 GB weights + 10 GB data + one 0.75 GB checkpoint = 36.78 GB at
    # the stopped rate 0.05 USD/GB-month x 336 h / 730 = 0.8464... -> 0.85 USD. Destroy: (10 GB data
    # + 0.75 GB checkpoint) x 0.09 = 0.9675 -> 0.97 USD egress, re-import free: stop is cheaper.
    assert plan["idle"] == "stop"
    assert Decimal(plan_stage(plan, "idle")["cost"]) == Decimal("0.85")
    assert Decimal(plan["line_items"]["storage_stopped"]) == Decimal("0.85")
    # At the running rate (0.10) the stopped disk would cost 1.69 > 0.97 and destroy would win:
    running_rate = box.model_copy(update={"storage_stopped_gb_month": Decimal("0.10")})
    plan2 = quote_json("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file",
                       str(write_offers(tmp_path, [running_rate])), "--idle-days", "14",
                       "--keep-checkpoints", "0")["plans"][0]
    assert plan2["idle"] == "destroy" and Decimal(plan_stage(plan2, "idle")["cost"]) == Decimal("0.97")


# --------------------------------------------------------------------------------------------
# Price the work: every plan does the same tokens


def test_every_plan_does_the_same_work_with_its_time_speed_and_cost_per_token(tmp_path):
    offers = write_offers(tmp_path, [
        offer("a6000", hourly="0.49", gpus=1, **A6000), offer("h100", hourly="2.00", gpus=1, **H100),
        offer("l40s", gpu="L40S-48GB", memory=48, hourly="0.90", gpus=1),
    ])
    # A speed measured on the A6000 pins that plan's typical rate, so its bill can be worked by hand.
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "4e8", "--offers-file", str(offers),
                      "--no-validate", "--measured-tokens-per-second", "1000", "--measured-on", "1xRTX-A6000-48GB")
    assert data["work"]["tokens"] == 4e8 and data["work"]["basis"] == "--tokens"
    plans = {plan_stage(p, "train")["offer_id"]: p for p in data["plans"]}
    assert sorted(plans) == ["a6000", "h100", "l40s"]
    for plan in plans.values():
        assert Decimal(plan["tokens"]) == Decimal("4e8")
        rate = plan["tokens_per_second"]
        assert rate["low"] < rate["typical"] < rate["high"]  # a range, not a value
        assert Decimal(plan["hours_low"]) < Decimal(plan["hours"]) < Decimal(plan["hours_high"])
        assert Decimal(plan["total_low"]) < Decimal(plan["total"]) < Decimal(plan["total_high"])
    # By hand, the A6000 at the measured 1000 tokens/s; each stage piece is rounded up to 1e-6 h:
    #   training 4e8 / 1000 = 400,000 s = 111.1111... h -> 111.111112 h
    #   import 36.03 GB (26.03 GB weights + 10 GB data) x 8000 / 1000 Mbit/s = 288.24 s -> 0.080067 h
    #   export 0.25 GB adapters + 2 x 0.75 GB checkpoints = 1.75 GB -> 14 s -> 0.003889 h
    #   running hours 111.111112 + 0.080067 + 0.003889 = 111.195068 h
    a6000 = plans["a6000"]
    assert a6000["tokens_per_second"]["typical"] == 1000
    assert Decimal(plan_stage(a6000, "train")["hours"]) == Decimal("111.195068")
    # compute billed per second: 111.195068 h x 0.49 = 54.4856 -> 54.49 USD; disk 37.53 GB
    # (36.03 GB + 2 x 0.75 GB checkpoints) x 0.10 USD/GB-month x 111.195068 h / 730 h = 0.5717 -> 0.57
    assert Decimal(a6000["line_items"]["compute"]) == Decimal("54.49")
    assert Decimal(a6000["line_items"]["storage_running"]) == Decimal("0.57")
    assert Decimal(a6000["total"]) == Decimal("55.06")
    assert Decimal(a6000["cost_per_billion_tokens"]) == Decimal("137.65")  # 55.06 USD / 0.4 billion tokens
    # The other two run at their own modelled speeds: their hours are the same tokens at the
    # speed each plan states, plus the same 0.083956 h of moving data (a relation between the
    # plan's own figures; the A6000 above is the check on the values)
    for name in ("h100", "l40s"):
        plan = plans[name]
        hours = 4e8 / plan["tokens_per_second"]["typical"] / 3600 + 0.080067 + 0.003889
        assert float(plan_stage(plan, "train")["hours"]) == pytest.approx(hours, abs=2e-6)
    totals = [Decimal(p["total"]) for p in data["plans"]]
    assert totals == sorted(totals)


def test_days_mean_work_on_the_reference_layout(tmp_path):
    offers = write_offers(tmp_path, [offer("8x4090", hourly="2.80", gpus=8, **RTX4090),
                                     offer("8xh100", hourly="16.00", gpus=8, **H100)])
    data = quote_json("--model", "7b", "--mode", "full", "--days", "10", "--on", "8xRTX-4090", "--offers-file",
                      str(offers))
    assert data["work"]["basis"].startswith("10 days on 8 x RTX-4090-24GB = ")
    by_offer = {plan_stage(p, "train")["offer_id"]: p for p in data["plans"]}
    ref, fast = by_offer["8x4090"], by_offer["8xh100"]
    assert Decimal(ref["tokens"]) == Decimal(fast["tokens"]) == Decimal(str(data["work"]["tokens"]))
    # On the reference itself the run takes the 10 days: 240 h of training + moving data at 1000 Mbit/s,
    # each piece rounded up to 1e-6 h. Llama-2-7B has 6,738,415,616 parameters: weights 2 B each =
    # 13.48 GB, a full checkpoint (bf16 weights, fp32 master and two Adam moments) 14 B each = 94.34 GB.
    # In: 13.48 + 10 GB data = 23.48 GB = 187.84 s -> 0.052178 h; out: 13.48 + 2 x 94.34 = 202.16 GB =
    # 1617.28 s -> 0.449245 h; 240 + 0.052178 + 0.449245 = 240.501423 h
    assert Decimal(plan_stage(ref, "train")["hours"]) == Decimal("240.501423")
    # The faster node does the same tokens in far fewer hours, and the quote says what it costs
    assert float(plan_stage(fast, "train")["hours"]) < 60
    # The reference's ZeRO-3 over 8 consumer cards is flagged: scaling under 70 %
    assert ref["scaling_efficiency"] < 0.7 and any("under 70 %" in n for n in ref["notes"])
    # The deadline defaults to the reference's own finish at the slow end of its range
    assert any("deadline" in a and "slow end" in a for a in data["assumptions"])


def test_the_default_reference_is_the_fewest_a100s_that_hold_the_job(tmp_path):
    offers = write_offers(tmp_path, [offer("h100", hourly="2.00", gpus=1, **H100)])
    lora = quote_json("--model", "7b", "--mode", "lora", "--days", "2", "--offers-file", str(offers))
    assert lora["work"]["basis"].startswith("2 days on 1 x A100-SXM4-80GB")
    big = write_offers(tmp_path, [offer("8xh100", hourly="16", gpus=8, **H100)])
    full = quote_json("--model", "13b", "--mode", "full", "--days", "2", "--offers-file", str(big))
    # 13B full: 16 B/param x 13 B = 208 GB of states; one 80 GB card cannot hold it
    n = int(full["work"]["basis"].split(" on ")[1].split(" x ")[0])
    assert n > 1


def test_epochs_times_dataset_tokens_is_the_job(tmp_path):
    offers = write_offers(tmp_path, [offer("h100", hourly="2.00", gpus=1, **H100)])
    data = quote_json("--model", "7b", "--mode", "qlora", "--epochs", "3", "--dataset-tokens", "150M",
                      "--offers-file", str(offers), "--no-validate")
    assert data["work"]["tokens"] == 4.5e8 and "epochs 3" in data["work"]["basis"]


def test_a_measured_rate_calibrates_every_layout(tmp_path):
    offers = write_offers(tmp_path, [offer("h100", hourly="2.00", gpus=1, **H100)])
    base = quote_json("--model", "7b", "--mode", "lora", "--tokens", "1e9", "--offers-file", str(offers),
                      "--no-validate")["plans"][0]
    modelled = base["tokens_per_second"]["typical"]
    measured = quote_json("--model", "7b", "--mode", "lora", "--tokens", "1e9", "--offers-file", str(offers),
                          "--no-validate", "--measured-tokens-per-second", str(modelled / 2),
                          "--measured-on", "H100-SXM-80GB")
    plan = measured["plans"][0]
    assert plan["tokens_per_second"]["typical"] == pytest.approx(modelled / 2, rel=1e-6)
    assert any("calibrated to the measured" in a for a in measured["assumptions"])


# --------------------------------------------------------------------------------------------
# Only plans that can run: filters and stage fields


def test_gpu_filters_narrow_the_catalog_and_say_why(tmp_path):
    offers = write_offers(tmp_path, [
        offer("a6000", hourly="0.49", gpus=1, provider="p1", **A6000),
        offer("h100", hourly="2.00", gpus=1, provider="p2", **H100),
        offer("2xh100", hourly="4.00", gpus=2, provider="p3", **H100),
    ])
    base = ["--model", "7b", "--mode", "lora", "--tokens", "1e8", "--offers-file", str(offers), "--no-validate"]

    def offer_ids(*extra: str) -> set[str]:
        return {plan_stage(p, "train")["offer_id"] for p in quote_json(*base, *extra)["plans"]}

    assert offer_ids() == {"a6000", "h100", "2xh100"}
    assert offer_ids("--gpu", "H100-SXM-80GB") == {"h100", "2xh100"}
    assert offer_ids("--gpu", "H100-SXM-80GB:2") == {"2xh100"}
    assert offer_ids("--gpu", "RTX-A6000-48GB,H100-SXM-80GB:1") == {"a6000", "h100"}
    assert offer_ids("--exclude-gpu", "H100-SXM-80GB") == {"a6000"}
    assert offer_ids("--min-gpu-memory", "60") == {"h100", "2xh100"}
    assert offer_ids("--gpus", "2") == {"2xh100"}
    rejected = quote_json(*base, "--gpu", "RTX-A6000-48GB")["rejected"]
    reasons = {r["offer_id"]: r["reason"] for r in rejected if r["constraint"] == "gpu"}
    assert set(reasons) == {"h100", "2xh100"} and "--gpu RTX-A6000-48GB" in reasons["h100"]


def test_multi_node_plans_need_a_fabric_and_respect_max_nodes(tmp_path):
    ib = offer("8xh100-ib", hourly="20", gpus=8, **H100).model_copy(
        update={"fabric": "infiniband", "fabric_gbps": 3200.0, "nodes_available": 4})
    offers = write_offers(tmp_path, [ib])
    data = quote_json("--model", "70b", "--mode", "full", "--tokens", "2e9", "--offers-file", str(offers),
                      "--no-validate")
    nodes = plan_stage(data["plans"][0], "train")["nodes"]
    assert nodes > 1  # 70B full needs ~1.1 TB of model states: more than one 8 x 80 GB node
    code, _, err = quote("--model", "70b", "--mode", "full", "--tokens", "2e9", "--offers-file", str(offers),
                         "--no-validate", "--max-nodes", "1")
    assert code == 3 and "memory" in err


def test_the_json_contract(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers))
    assert {"currency", "prices_as_of", "work", "plans", "rejected"} <= set(data)
    assert set(data["work"]) >= {"tokens", "basis"}
    plan = data["plans"][0]
    assert {"total", "stages", "line_items", "notes", "tokens", "tokens_per_second", "cost_per_billion_tokens",
            "hours_low", "hours_high", "total_low", "total_high", "unknown_charges"} <= set(plan)
    assert set(plan["line_items"]) == {"compute", "storage_running", "storage_stopped", "egress", "ingress"}
    assert [s["kind"] for s in plan["stages"]] == ["validate", "idle", "train", "export"]
    for s in plan["stages"]:
        assert {"kind", "provider", "offer_id", "gpu", "gpus", "layout", "hours", "billing", "cost"} <= set(s)
        for b in s["billing"]:
            assert {"unit", "count", "unit_price", "cost"} <= set(b)
            assert Decimal(b["cost"]) == Decimal(b["cost"]).quantize(Decimal("0.01"))  # on the cent grid
    for kind in ("validate", "train"):
        assert plan_stage(plan, kind)["precision"] == "bf16-mixed" and plan_stage(plan, kind)["attention"]
    total = sum(Decimal(v) for v in plan["line_items"].values())
    assert total == Decimal(plan["total"]) == sum(Decimal(s["cost"]) for s in plan["stages"])
    assert data["prices_as_of"].startswith("2026-11-28")


def test_an_unknown_price_is_shown_as_unknown_never_as_zero(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, storage=None, **A6000)])
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers))
    assert code == 0
    assert "Not in the total (no published price): disk." in out
    row = next(line for line in out.splitlines() if line.lstrip().startswith("1  "))
    assert row.rstrip().endswith("disk")  # the plans table's unknowns column
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers), "--details")
    assert "storage running unknown" in out and "unknown (not in the total): storage running: " in out
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers))
    lines = [b for s in data["plans"][0]["stages"] for b in s["billing"] if b["what"] == "storage_running"]
    assert lines and all(b["cost"] is None and b["unit_price"] is None for b in lines)


def test_currency_conversion_uses_the_stated_rate(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    usd = quote_json("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", str(offers))
    cny = quote_json("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", str(offers),
                     "--currency", "CNY", "--fx", "CNY=7")
    assert cny["currency"] == "CNY"
    assert [r["currency"] for r in cny["fx"]] == ["CNY"] and Decimal(cny["fx"][0]["per_usd"]) == 7
    # each line is rounded to the cent in its own currency: the totals agree to a few cents
    assert Decimal(cny["plans"][0]["total"]) == pytest.approx(Decimal(usd["plans"][0]["total"]) * 7, abs=Decimal("0.1"))


def test_spot_adds_the_expected_lost_work(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", spot_hourly="0.20", gpus=1, **A6000)])
    args = ("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers), "--no-validate")
    on_demand = quote_json(*args)
    spot = quote_json(*args, "--spot")
    t, t0 = plan_stage(spot["plans"][0], "train"), plan_stage(on_demand["plans"][0], "train")
    assert Decimal(t["hours"]) > Decimal(t0["hours"])  # expected re-run after preemptions
    assert any("preemptions/h" in n for n in spot["plans"][0]["notes"])
    assert Decimal(spot["plans"][0]["total"]) < Decimal(on_demand["plans"][0]["total"])


def test_measured_peak_replans_on_bigger_cards(tmp_path):
    offers = write_offers(tmp_path, [
        offer("a6000", hourly="0.49", gpus=1, **A6000),
        offer("a100", gpu="A100-PCIe-80GB", memory=80, hourly="1.20", gpus=1),
    ])
    # Checkpointing pinned on: the validation the peak is measured on (the quote's #1 validation,
    # 1 x A6000, micro-batch 1) and the training run both recompute activations.
    args = ("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", str(offers),
            "--grad-checkpointing")
    base = {plan_stage(p, "train")["offer_id"]: p for p in quote_json(*args)["plans"]}
    assert plan_stage(base["a6000"], "train")["layout"] == "single"
    # Worked by hand: Llama-2-13B LoRA r16 on all linear layers has 26.03 GB of bf16 base and
    # 62.6M fp32 adapters x 16 B = 1.00 GB of adapter states: 27.03 GB known exactly, never scaled
    # or margined. A peak measured on the A6000 fits the A6000 (49 GB < its 49,140 MiB = 51.5 GB):
    # the 15 % margin is smaller than the allocator slack already in the measured device view.
    still = quote_json(*args, "--measured-peak-gb", "49")
    assert {plan_stage(p, "train")["offer_id"]: plan_stage(p, "train")["layout"]
            for p in still["plans"]}["a6000"] == "single"
    # With a 50 % margin it does not: 49 GB measured is 44.0 GB allocated (0.8 GB of CUDA context
    # and 20 % slack on 17.0 GB re-allocated each step off), so 27.03 + 16.97 x 1.5 + 0.8 = 53.3 GB.
    args = (*args, "--margin", "0.5")
    base = {plan_stage(p, "train")["offer_id"]: p for p in quote_json(*args)["plans"]}
    measured = quote_json(*args, "--measured-peak-gb", "49")
    by_offer = {plan_stage(p, "train")["offer_id"]: p for p in measured["plans"]}
    # 49 GB measured: the 48 GB card holds the job only with CPU offload, which is slower, so in
    # the same 10 days it does less work; the 80 GB card still runs it on one GPU without offload
    # (with the activations scaled up it may now need checkpointing, so not more work than before).
    assert plan_stage(by_offer["a6000"], "train")["layout"].endswith("offload-all")
    assert Decimal(by_offer["a6000"]["tokens"]) < Decimal(base["a6000"]["tokens"])
    assert plan_stage(by_offer["a100"], "train")["layout"] == "single"
    assert Decimal(by_offer["a100"]["tokens"]) <= Decimal(base["a100"]["tokens"])
    assert any("measured validation peak 49 GB on 1 x RTX-A6000-48GB" in a for a in measured["assumptions"])
    # Measured elsewhere: --measured-on names the layout, and the same peak on an 80 GB card's
    # validation means the same activation scale there.
    elsewhere = quote_json(*args, "--measured-peak-gb", "49", "--measured-on", "A100-PCIe-80GB")
    assert any("on 1 x A100-PCIe-80GB" in a for a in elsewhere["assumptions"])


def test_a_small_measured_peak_never_puts_a_7b_full_fine_tune_on_one_24gb_card(tmp_path):
    # A 7B full fine-tune holds 2 B/param of bf16 weights = 13.5 GB plus (unless offloaded) 2 B of
    # gradients and 12 B of fp32 master weights and Adam moments: 108 GB on one GPU. Model states
    # are exact, so no measured peak can shrink them onto a 24 GB card.
    offers = write_offers(tmp_path, [offer("4090", hourly="0.40", gpus=1, **RTX4090),
                                     offer("8xa100", gpu="A100-SXM4-80GB", memory=80, hourly="12", gpus=8,
                                           interconnect="nvlink")])
    base = ("--model", "7b", "--mode", "full", "--rent-days", "1", "--offers-file", str(offers))
    for extra in ((), ("--measured-on", "H100-SXM-80GB")):
        code, out, err = quote(*base, "--measured-peak-gb", "17", "--format", "json", *extra)
        if code == 0:
            plans = json.loads(out)["plans"]
            assert all(plan_stage(p, "train")["offer_id"] != "4090" for p in plans), extra
        else:
            assert code in (2, 3) and "Traceback" not in err
    # measured on one GPU without offload, 17 GB is below the 108 GB of exact states: refused
    code, _, err = quote(*base, "--measured-peak-gb", "17", "--measured-on", "B200-SXM-180GB")
    assert code == 2 and "17" in err


def test_host_max_duration_rejects_short_leases(tmp_path):
    offers = write_offers(tmp_path, [
        offer("short", hourly="0.30", gpus=1, max_hours=72, **A6000),
        offer("long", hourly="0.49", gpus=1, **A6000),
    ])
    data = quote_json("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", str(offers))
    assert plan_stage(data["plans"][0], "train")["offer_id"] == "long"
    reasons = {r["offer_id"]: r for r in data["rejected"]}
    assert reasons["short"]["constraint"] == "max_duration" and "72.0 h" in reasons["short"]["reason"]


def test_unknown_gpu_offers_are_listed_not_dropped(tmp_path):
    odd = offer("mystery", hourly="0.01", gpus=1, gpu="A6000", memory=48).model_copy(
        update={"gpu": None, "gpu_raw": "Quantum GPU 9000", "gpu_status": "unknown"})
    offers = write_offers(tmp_path, [odd, offer("a6000", hourly="0.49", gpus=1, **A6000)])
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers))
    rej = [r for r in data["rejected"] if r["offer_id"] == "mystery"]
    assert rej and rej[0]["constraint"] == "gpu" and "Quantum GPU 9000" in rej[0]["reason"]


def test_explain_lists_rejections_with_numbers(tmp_path):
    offers = write_offers(tmp_path, [offer("t4", gpu="T4-16GB", memory=16, hourly="0.10", gpus=1),
                                     offer("8xa100", gpu="A100-SXM4-80GB", memory=80, hourly="12", gpus=8,
                                           interconnect="nvlink")])
    args = ("--model", "7b", "--mode", "full", "--tokens", "1e8", "--offers-file", str(offers))
    code, out, _ = quote(*args, "--explain")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("testcloud") and " t4 " in x)
    m = re.search(r"needs ([\d.]+) GB per GPU.*T4-16GB has ([\d.]+) GB", line)
    assert m and float(m.group(1)) > float(m.group(2))
    code, out, _ = quote(*args)
    assert "--explain: the 1 offer rejected and why" in out


def test_markdown_output_names_the_job(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file", str(offers),
                         "--format", "markdown")
    assert code == 0 and out.startswith("# rentopt quote") and "| **total** |" in out
    assert "llama-2-13b, lora" in out and "work: --tokens" in out


def test_markdown_makes_offer_text_inert(tmp_path):
    nasty = offer("<script>x</script>|[a](javascript:b)", hourly="0.49", gpus=1, provider="p-q", **A6000)  # (a provider name with markup is refused at the door: test_hostile_data.py)
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file",
                         str(write_offers(tmp_path, [nasty])), "--format", "markdown")
    assert code == 0
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "[a](javascript:" not in out and "\\[a\\](javascript:b)" in out  # brackets escaped: not a link
    table_rows = [ln for ln in out.splitlines() if ln.startswith("| train")]
    assert table_rows and all(ln.count(" | ") == 7 for ln in table_rows)  # a pipe in offer text is not a cell


def test_a_rate_much_older_than_the_prices_is_flagged(tmp_path, monkeypatch):
    # The shipped ECB history ends 2026-10-30; a CNY price of 2027-03-01 converts at that rate,
    # 122 days older than the price: more than 90, so the quote says so. The clock says it is
    # 2027-03-01 (a price dated after the clock is refused at the door: optimizer/row_check.py).
    from rentopt.optimizer import row_check

    monkeypatch.setattr(row_check, "clock", lambda: datetime(2027, 3, 1, 12, tzinfo=timezone.utc))
    late = offer("cny-box", hourly="3.50", gpus=1, currency="CNY", **A6000).model_copy(
        update={"fetched_at": datetime(2027, 3, 1, tzinfo=timezone.utc)})
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file",
                      str(write_offers(tmp_path, [late])))
    [rate] = [r for r in data["fx"] if r["currency"] == "CNY"]
    assert rate["as_of"] == "2026-10-30" and "ECB" in rate["source"]
    assert any("CNY" in a and "days older" in a for a in data["assumptions"])
    fresh = offer("cny-box", hourly="3.50", gpus=1, currency="CNY", **A6000)  # 2026-11-28: 29 days
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "3e8", "--offers-file",
                      str(write_offers(tmp_path, [fresh])))
    assert not any("days older" in a for a in data["assumptions"])


def test_csv_offers_file(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency\nmine,box1,RTX A6000,1,0.45,USD\n")
    data = quote_json("--model", "13b", "--mode", "lora", "--tokens", "1e8", "--offers-file", str(path))
    assert plan_stage(data["plans"][0], "train")["offer_id"] == "box1"


def test_bundled_snapshot_quote_works_offline_with_an_empty_home():
    code, out, err = quote("--model", "13b", "--mode", "lora", "--days", "10", "--top", "2")
    assert code == 0, err
    assert "BUNDLED SNAPSHOT" in out and "#1" in out


# --------------------------------------------------------------------------------------------
# Failures: clear line on stderr, documented exit code


@pytest.mark.parametrize("args, code, text", [
    (["--model", "lama-13b", "--mode", "lora", "--days", "10"], 2, "closest presets"),
    (["--model", "13b", "--mode", "lora", "--days", "-3"], 2, "--days"),
    (["--model", "13b", "--mode", "lora", "--days", "0"], 2, "positive"),
    (["--model", "13b", "--mode", "lora"], 2, "exactly one of --tokens"),
    (["--model", "13b", "--mode", "lora", "--rent-days", "1", "--days", "1"], 2, "exactly one of --tokens"),
    (["--model", "13b", "--mode", "lora", "--tokens", "1e9", "--on", "A100-SXM-80GB"], 2, "--on names the layout"),
    (["--model", "13b", "--mode", "lora", "--days", "1", "--on", "9xQuantum-GPU"], 2, "unknown GPU"),
    (["--model", "13b", "--mode", "lora", "--epochs", "2"], 2, "--epochs and --dataset-tokens go together"),
    (["--model", "13b", "--mode", "lora", "--days", "1", "--gpu", "H100:x"], 2, "whole number of GPUs"),
    (["--model", "13b", "--mode", "lora", "--days", "1", "--tokens", "1e9"], 2, "exactly one"),
    (["--model", "13b", "--mode", "lora", "--tokens", "lots"], 2, "token count"),
    (["--model", "13b", "--mode", "lora", "--days", "1", "--currency", "XYZ"], 2, "unknown currency"),
    (["--model", "13b", "--mode", "lora", "--days", "1", "--fx", "CNY"], 2, "CODE=RATE"),
    (["--model", "13b", "--mode", "qlora", "--precision", "fp32", "--days", "1"], 2, "qlora"),
])
def test_bad_input_is_one_line_and_exit_2(args, code, text):
    proc = subprocess.run([sys.executable, "-c", "from rentopt.optimizer.cli import main; main()", "quote", *args],
                          capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_no_feasible_plan_names_memory_and_exits_3(tmp_path):
    offers = write_offers(tmp_path, [offer("t4", gpu="T4-16GB", memory=16, hourly="0.10", gpus=1)])
    code, _, err = quote("--model", "70b", "--mode", "full", "--days", "1", "--offers-file", str(offers))
    assert code == 3
    assert "memory" in err and "closest miss" in err and "T4-16GB" in err


def test_budget_binds_and_exits_3(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    code, _, err = quote("--model", "13b", "--mode", "lora", "--rent-days", "10", "--offers-file", str(offers),
                         "--budget", "5")
    assert code == 3 and "budget" in err and "cheapest feasible plan" in err


def test_deadline_binds_and_exits_3(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    code, _, err = quote("--model", "13b", "--mode", "lora", "--tokens", "5e9", "--offers-file", str(offers),
                         "--deadline-days", "1")
    assert code == 3 and "deadline" in err and "fastest plan needs" in err


def test_top_k_plans_differ_in_provider_or_gpu(tmp_path):
    offers = write_offers(tmp_path, [
        offer("a", hourly="0.49", gpus=1, **A6000), offer("b", hourly="0.50", gpus=1, **A6000),
        offer("c", gpu="L40S-48GB", memory=48, hourly="0.80", gpus=1),
        offer("d", hourly="0.55", gpus=1, provider="othercloud", **A6000),
    ])
    plans = quote_json("--model", "13b", "--mode", "lora", "--tokens", "1e8", "--offers-file", str(offers),
                       "--no-validate")["plans"]
    groups = [(p["stages"][0]["provider"], p["stages"][0]["gpu"]) for p in plans]
    assert len(groups) == len(set(groups)) == 3
    totals = [Decimal(p["total"]) for p in plans]
    assert totals == sorted(totals)
    assert {p["stages"][0]["offer_id"] for p in plans} == {"a", "c", "d"}  # b: the same group as a, dearer


def test_model_resolution_note_is_shown(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--tokens", "1e8", "--offers-file", str(offers))
    assert code == 0 and "llama-2-13b" in out
    assert resolve_model("13b").name == "llama-2-13b"


def test_each_provider_says_where_its_prices_come_from(tmp_path):
    """One provider refreshed into the store, the others from the bundled snapshot: every plan and
    the quote's sources name the origin of that provider's prices."""
    from rentopt.optimizer.store import open_writable, store_path

    # cheap enough to rank first, not so cheap as to be suspect (under 1/5 of the other providers' H100: held out)
    mine = offer("box", hourly="0.80", gpus=1, provider="mycloud", **H100)
    with open_writable(store_path()) as s:
        s.write_snapshot("mycloud", [mine], fetched_at=FETCHED)
    data = quote_json("--model", "7b", "--mode", "lora", "--tokens", "3e8", "--top", "3")
    origins = {src["provider"]: src["origin"] for src in data["sources"]}
    assert origins["mycloud"] == "store" and origins["gcp"] == "bundled"
    assert all(src["line"].startswith(src["provider"] + ": ") for src in data["sources"])
    by_provider = {p["prices"][0]["provider"]: p["prices"][0]["origin"] for p in data["plans"]}
    assert by_provider["mycloud"] == "store"
    assert any(origin == "bundled" for provider, origin in by_provider.items() if provider != "mycloud")
    code, out, _ = quote("--model", "7b", "--mode", "lora", "--tokens", "3e8", "--top", "3", "--details")
    assert "where the prices come from (per provider):" in out and "  mycloud: " in out


def test_an_impossible_deadline_or_budget_is_diagnosed_without_pricing_every_offer():
    """300 identical 1 x L40S offers and 13B LoRA: 10 days of work take days, not 0.05 of one,
    and no plan costs 5 USD. The quote must say which limit binds, and get there by pricing the
    fastest and the cheapest plans' candidates, not all 600 (at a million offers that took hours)."""
    from rentopt.optimizer.currency import FxTable
    from rentopt.optimizer.errors import NoFeasiblePlan
    from rentopt.optimizer.models import TrainingSetup
    from rentopt.optimizer.job import QuoteRequest
    from rentopt.optimizer.planner import plan_instance
    from rentopt.optimizer.solver import solve

    catalog = [offer(f"o{i}", "L40S-48GB", 1, f"{0.80 + i / 1000:.3f}", memory=48) for i in range(300)]
    req = QuoteRequest(model=resolve_model("13b"), setup=TrainingSetup(mode="lora"), days=Decimal(10),
                       deadline_days=Decimal("0.05"), budget=Decimal(5))
    planned = plan_instance(req, catalog, FxTable.load())
    assert planned.first_pass["candidates"] == 600 and planned.first_pass["after rough pruning"] <= 60
    with pytest.raises(NoFeasiblePlan) as err:
        solve(planned.instance, top_k=req.top)
    assert "deadline 0.05 days; the fastest plan needs" in str(err.value) and "(extend --deadline-days)" in str(err.value)
    assert "budget 5.00 USD is below the cheapest plan at any speed" in str(err.value)


def _quote_offers_file(tmp_path: Path, csv_text: str, *job: str) -> dict:
    """`rentopt quote --model 13b --mode lora JOB --format json` over an offers file of `csv_text`."""
    path = tmp_path / "offers.csv"
    path.write_text(csv_text)
    result = CliRunner().invoke(cli, ["quote", "--model", "13b", "--mode", "lora", *job, "--offers-file", str(path),
                                      "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_same_offers_in_every_csv_dialect_give_byte_identical_quotes(tmp_path, rentopt_home):
    """One offers file written four ways (LF, CRLF, every cell quoted by the csv module with
    CRLF, and a spreadsheet's byte-order mark): the quote's JSON is the same to the byte. The
    file keeps its path and time, which the quote names (the offers' source and date)."""
    import csv
    import io
    import os

    rows = [["provider", "offer_id", "gpu", "gpus", "price_hour", "price_month", "currency", "interconnect", "region",
             "spot"]]
    for i in range(300):
        rows.append([f"seller{i % 7}", f"o{i}", ("H100-SXM-80GB", "A100 80GB PCIe", "RTX 4090", "L40S")[i % 4],
                     str((1, 2, 8)[i % 3]), f"{1.5 + (i % 13) / 10:.2f}", "" if i % 5 else "2100",
                     "CNY" if i % 7 == 3 else "USD", "nvlink" if i % 3 == 2 else "", f"Zone {i % 4}, EU",
                     "yes" if i % 11 == 0 else "no"])

    def written(line_end: str, quoting: int, bom: bool) -> bytes:
        out = io.StringIO()
        csv.writer(out, lineterminator=line_end, quoting=quoting).writerows(rows)
        return ("\ufeff" if bom else "").encode() + out.getvalue().encode()

    path = tmp_path / "offers.csv"
    answers = []
    for data in (written("\n", csv.QUOTE_MINIMAL, False), written("\r\n", csv.QUOTE_MINIMAL, False),
                 written("\r\n", csv.QUOTE_ALL, False), written("\r\n", csv.QUOTE_ALL, True)):
        path.write_bytes(data)
        os.utime(path, (1_790_000_000, 1_790_000_000))
        result = CliRunner().invoke(cli, ["quote", "--model", "13b", "--mode", "lora", "--days", "3",
                                          "--offers-file", str(path), "--format", "json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        answers.append(result.stdout_bytes)
    assert b'"offer_id"' in answers[0] and b"seller" in answers[0]  # a real quote over these offers
    assert answers[1:] == answers[:1] * 3


def test_a_catalog_of_ties_is_planned_once_and_the_answer_names_every_member(tmp_path, rentopt_home):
    """Seven zones of one seller at one price (every column equal but the id and the region),
    and a dearer offer: the plan names the first zone and says "also at the same price: 6 more
    offers" with the other six ids; a dearer zone of the same seller is not among them."""
    header = "provider,offer_id,gpu,gpus,price_hour,currency,interconnect,region\n"
    zones = "".join(f"alpha,z{i},H100-SXM-80GB,8,20.00,USD,nvlink,zone-{i}\n" for i in range(1, 8))
    quote = _quote_offers_file(tmp_path, header + zones + "alpha,dear,H100-SXM-80GB,8,20.01,USD,nvlink,zone-9\n"
                                                   "beta,b1,H100-SXM-80GB,8,30.00,USD,nvlink,x\n", "--days", "1")
    best = quote["plans"][0]
    assert {s["offer_id"] for s in best["stages"]} == {"z1"}
    assert "alpha/z1: also at the same price: 6 more offers (z2, z3, z4, z5, z6, z7)" in best["notes"]
    assert not any("dear" in n for n in best["notes"])
    # in the JSON too, for scripts: on the stages that run on z1 (validate, train), all six, in file order
    assert {s["kind"]: s["same_price_offers"] for s in best["stages"]} == {
        "validate": ["z2", "z3", "z4", "z5", "z6", "z7"], "idle": [], "train": ["z2", "z3", "z4", "z5", "z6", "z7"],
        "export": []}
    second = {s["kind"]: s for s in quote["plans"][1]["stages"]}
    assert second["train"]["same_price_offers"] == []  # b1 has no twin
    assert second["validate"]["same_price_offers"] == (["z2", "z3", "z4", "z5", "z6", "z7"]
                                                       if second["validate"]["offer_id"] == "z1" else [])
    train = {s["kind"]: s["offer_id"] for s in quote["plans"][1]["stages"]}["train"]
    assert train == "b1"  # the next group trains, not a tied zone
    assert quote["rejected_count"] == 0


def test_two_spellings_of_one_gpu_are_one_node_shape(tmp_path, rentopt_home):
    """An offers file codes cells by spelling: "H100 SXM" and "H100-SXM-80GB" are two codes of
    one card. Both offers must be planned: when the planner grouped rows by those codes, two
    groups had one node shape and the second replaced the first, so the cheaper offer (20.00/h)
    vanished from the quote, neither planned nor rejected, and the plan was the 30.00/h one."""
    quote = _quote_offers_file(tmp_path, "provider,offer_id,gpu,gpus,price_hour,currency,interconnect\n"
                                         "alpha,cheap,H100 SXM,8,20.00,USD,nvlink\n"
                                         "alpha,dear,H100-SXM-80GB,8,30.00,USD,NVLink\n", "--days", "1")
    assert quote["rejected_count"] == 0
    assert {s["offer_id"] for s in quote["plans"][0]["stages"]} == {"cheap"}
    assert len(quote["plans"]) == 1  # one provider and GPU: one group, one plan (top-K plans differ in both)


def test_an_offer_that_may_not_run_long_enough_is_rejected_with_the_hours_it_needs(tmp_path, rentopt_home):
    """A 2-day rental needs at least 48 h (plus its copies in and out); a host allowing 4.8 h
    (max_days 0.2) is rejected for it, naming both, and the other offer trains."""
    quote = _quote_offers_file(tmp_path, "provider,offer_id,gpu,gpus,price_hour,currency,interconnect,max_days\n"
                                         "alpha,short,H100-SXM-80GB,8,20.00,USD,nvlink,0.2\n"
                                         "alpha,open,H100-SXM-80GB,8,30.00,USD,nvlink,\n", "--rent-days", "2")
    (rejected,) = quote["rejected"]
    assert rejected["offer_id"] == "short" and rejected["constraint"] == "max_duration"
    assert list(rejected) == ["provider", "offer_id", "gpu", "constraint", "reason"]  # the JSON contract's keys
    found = re.fullmatch(r"needs (\d+\.\d) h of rental on 1 node\(s\); the host allows at most 4\.8 h", rejected["reason"])
    assert found and 48.0 <= float(found.group(1)) < 52.0, rejected["reason"]
    # it may still hold the short validation run; the training runs on the other one
    assert {s["offer_id"] for s in quote["plans"][0]["stages"] if s["kind"] == "train"} == {"open"}


def test_a_card_sold_with_more_memory_than_the_catalog_is_its_own_node_shape(tmp_path, rentopt_home):
    """Vast lists modified 48 GB RTX 4090s. 13B weights in bf16 are 26 GB, more than a 24 GB
    card holds without offloading, so only the 48 GB offer can train; both are one GPU model, so
    their node shapes differ by memory alone."""
    quote = _quote_offers_file(tmp_path, "provider,offer_id,gpu,gpus,price_hour,currency,gpu_memory_gb\n"
                                         "alpha,stock,RTX 4090,1,0.30,USD,24\n"
                                         "alpha,modded,RTX 4090,1,0.50,USD,48\n", "--rent-days", "1", "--offload", "none")
    assert {s["offer_id"] for s in quote["plans"][0]["stages"] if s["kind"] == "train"} == {"modded"}
    assert [(r["offer_id"], r["constraint"]) for r in quote["rejected"]] == [("stock", "memory")]


def test_offers_that_differ_only_in_host_ram_get_each_their_own_offload_verdict(tmp_path):
    """The planner shares a layout between host RAM steps only where no rung offloads: a 7B full
    fine-tune on one 24 GB card offloads, so the 32 GB host cannot hold the offloaded state and
    the 1 TB host can, whichever of them the planner meets first."""
    small = offer("small-host", gpu="A10G-24GB", memory=24, hourly="0.50", gpus=1).model_copy(update={"host_ram_gb": 32.0})
    large = offer("large-host", gpu="A10G-24GB", memory=24, hourly="0.90", gpus=1).model_copy(update={"host_ram_gb": 1024.0})
    for offers in ([small, large], [large, small]):
        path = write_offers(tmp_path, offers)
        got = quote_json("--model", "7b", "--mode", "full", "--tokens", "2e7", "--offers-file", str(path))
        used = {s["offer_id"] for p in got["plans"] for s in p["stages"]}
        assert used == {"large-host"}
        assert all(s["layout"] and "offload" in s["layout"] for p in got["plans"] for s in p["stages"] if s["kind"] == "train")
        [rejected] = [r for r in got["rejected"] if r["offer_id"] == "small-host"]
        assert "host RAM" in rejected["reason"]


def test_rejections_are_listed_in_the_offers_order_and_a_rows_own_in_the_order_they_came():
    """Worked by hand: rows 3 and 1 rejected for their GPU, then rows 1 and 0 (and 1 again, a
    second node count) for their length, each with its own reason."""
    import numpy as np

    from rentopt.optimizer.candidates import Rejections

    r = Rejections()
    r.add(np.array([3, 1]), "gpu", "unknown card")
    r.add(np.array([1, 0, 1]), "max_duration", lambda i: f"long #{i}")
    assert r.listed() == [(0, "max_duration", "long #1"), (1, "gpu", "unknown card"), (1, "max_duration", "long #0"),
                          (1, "max_duration", "long #2"), (3, "gpu", "unknown card")]
    assert r.counts() == {"gpu": 2, "max_duration": 3} and len(r) == 5
    one = Rejections()
    one.add(7, "price", "no price")
    assert one.listed() == [(7, "price", "no price")]
    assert Rejections().listed() == []
    with pytest.raises(ValueError, match="not a RejectReason"):
        Rejections().add(np.array([0]), "too dear", "a constraint the JSON contract does not name")
