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
from decimal import ROUND_CEILING, Decimal
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


# --------------------------------------------------------------------------------------------
# Bills worked out by hand


def test_13b_lora_10_days_takes_one_48gb_card_over_two_24gb_pcie_cards(tmp_path):
    """13B LoRA fits one 48 GB card; two 24 GB PCIe cards need ZeRO-3 and cost more per hour."""
    offers = write_offers(tmp_path, [
        offer("a6000", hourly="0.49", gpus=1, granularity=3600, **A6000),
        offer("dual-4090", hourly="0.68", gpus=2, granularity=3600, **RTX4090),
    ])
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers),
                      "--no-validate", "--keep-checkpoints", "0")
    best = data["plans"][0]
    train = next(s for s in best["stages"] if s["kind"] == "train")
    assert train["offer_id"] == "a6000" and train["gpus"] == 1 and train["layout"] == "single"
    # By hand. Disk: 13B base weights 2 B x 13,015,864,320 = 26.03 GB (to 10 MB) + 10 GB data (no
    # checkpoints kept). Running hours: 240 h of training + moving 36.03 GB in and 0.25 GB of
    # adapters out at 1000 Mbit/s = 36.28 x 8000 / 1000 s = 290.24 s -> 240.080623 h (up to 1e-6 h).
    hours = ceil6(Decimal(240) + Decimal("36.28") * 8000 / 1000 / 3600)
    assert Decimal(train["hours"]) == hours
    # Compute is billed per started hour: 241 h x 0.49 = 118.09 USD.
    assert [(b["unit"], Decimal(b["count"])) for b in train["billing"] if b["what"] == "compute"] == [("hour", 241)]
    compute = Decimal(241) * Decimal("0.49")
    # Disk while running: 36.03 GB x 0.10 USD/GB-month x hours / 730 h per month.
    storage = (Decimal("36.03") * Decimal("0.10") * hours / 730).quantize(Decimal("0.000001"))
    assert Decimal(best["line_items"]["compute"]) == compute
    assert Decimal(best["line_items"]["storage_running"]) == storage
    assert Decimal(best["total"]) == compute + storage
    # The dual-4090 node is the second plan, with the stated PCIe penalty.
    second = next(s for s in data["plans"][1]["stages"] if s["kind"] == "train")
    assert second["offer_id"] == "dual-4090" and second["layout"] == "zero3"
    assert any("1.3x" in n for n in data["plans"][1]["notes"])


def test_7b_full_fine_tune_on_8x24gb_pcie_needs_zero3_and_pays_the_scaling_penalty(tmp_path):
    offers = write_offers(tmp_path, [offer("8x4090", hourly="2.80", gpus=8, **RTX4090)])
    data = quote_json("--model", "7b", "--mode", "full", "--tokens", "1e9", "--offers-file", str(offers),
                      "--no-validate", "--keep-checkpoints", "0")
    plan = data["plans"][0]
    train = next(s for s in plan["stages"] if s["kind"] == "train")
    assert train["layout"] == "zero3" and train["gpus"] == 8
    # By hand: FLOPs per token for Llama-2-7B with checkpointing = 4 passes x (2 x 6,607,343,616
    # matmul params + 4 x 32 layers x 2048 tokens x 4096) = 57,153,716,224. Throughput = 8 GPUs x
    # 165.2 TFLOPS x 35 % MFU (consumer prior) x 0.65^3 scaling (ZeRO-3 over PCIe: 1.3x per
    # doubling, seed 000).
    fpt = Decimal(4) * (2 * Decimal(6_607_343_616) + 4 * 32 * 2048 * 4096)
    rate = Decimal(8) * Decimal("165.2e12") * Decimal("0.35") * Decimal("0.65") ** 3
    train_h = Decimal("1e9") * fpt / rate / 3600
    # Moving 13.48 GB of weights + 10 GB data in and 13.48 GB of final weights out at 1 Gbit/s.
    transfer_h = (Decimal("23.48") + Decimal("13.48")) * 8000 / 1000 / 3600
    assert Decimal(train["hours"]) == pytest.approx(train_h + transfer_h, rel=Decimal("1e-6"))
    assert any("1.3x" in n and "8 GPUs" in n for n in plan["notes"])
    assert Decimal(plan["hours_low"]) < Decimal(train["hours"]) < Decimal(plan["hours_high"])
    # The same job on an NVLink node of 8 x A100-80GB has no such penalty and finishes sooner.
    nv = write_offers(tmp_path, [offer("8xa100", gpu="A100-SXM4-80GB", memory=80, gpus=8, hourly="10",
                                       interconnect="nvlink")])
    nv_plan = quote_json("--model", "7b", "--mode", "full", "--tokens", "1e9", "--offers-file", str(nv),
                         "--no-validate")["plans"][0]
    assert not any("1.3x" in n for n in nv_plan["notes"])


def test_idle_gap_prices_stop_and_destroy_and_picks_the_cheaper(tmp_path):
    """14 idle days: stop keeps ~36 GB of disk; destroy copies data + checkpoint out and back."""
    cheap_disk = offer("box", hourly="0.49", gpus=1, storage="0.10", stopped="0.10", egress="0.09", ingress="0.0",
                       **A6000)
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file",
                      str(write_offers(tmp_path, [cheap_disk])), "--idle-days", "14", "--keep-checkpoints", "0")
    plan = data["plans"][0]
    idle = next(s for s in plan["stages"] if s["kind"] == "idle")
    # Stop: validation disk = 26.03 GB weights + 10 GB data + one 0.75 GB checkpoint = 36.78 GB,
    # x 0.10 USD/GB-month x 336 h / 730 = 1.692888 USD. Destroy: (10 GB data + 0.75 GB checkpoint)
    # x 0.09 USD/GB egress = 0.9675 USD, re-import free: destroy is cheaper.
    stop = (Decimal("36.78") * Decimal("0.10") * 336 / 730).quantize(Decimal("0.000001"))
    destroy = Decimal("10.75") * Decimal("0.09")
    assert plan["idle"] == "destroy" and destroy < stop
    assert Decimal(idle["cost"]) == destroy
    assert any(f"{stop:.2f}" in n and f"{destroy:.2f}" in n for n in plan["notes"])
    # With dear egress the same gap is cheaper stopped.
    dear_egress = cheap_disk.model_copy(update={"egress_gb": Decimal("0.50")})
    plan2 = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file",
                       str(write_offers(tmp_path, [dear_egress])), "--idle-days", "14",
                       "--keep-checkpoints", "0")["plans"][0]
    assert plan2["idle"] == "stop"
    assert Decimal(plan2["line_items"]["storage_stopped"]) == stop


def test_monthly_unit_beats_hourly_for_a_long_job_in_cny(tmp_path):
    """The seeds' JYGPU node: 8 x RTX 4090 at 7920 CNY/month (discounted) vs an hourly rate."""
    month = PriceOption(unit="month", amount=Decimal("7920"), label="discounted month")
    jy = offer("jygpu-8x4090", hourly="15", gpus=8, currency="CNY", provider="jygpu", extra_options=[month],
               month_hours=720, storage=None, egress=None, ingress=None, **RTX4090)
    data = quote_json("--model", "7b", "--mode", "qlora", "--days", "28", "--offers-file",
                      str(write_offers(tmp_path, [jy])), "--currency", "CNY", "--no-validate")
    train = next(s for s in data["plans"][0]["stages"] if s["kind"] == "train")
    # 28 days = 672 h (+ minutes of transfer) < one 720 h month: 7920 CNY beats 673 x 15 = 10095 CNY.
    assert [(b["unit"], Decimal(b["count"])) for b in train["billing"] if b["what"] == "compute"] == [("month", 1)]
    assert Decimal(data["plans"][0]["line_items"]["compute"]) == Decimal("7920")
    assert any("storage price unknown" in n for n in data["plans"][0]["notes"])


# --------------------------------------------------------------------------------------------
# Contract and options


def test_json_contract(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers))
    assert {"currency", "prices_as_of", "plans", "rejected"} <= set(data)
    plan = data["plans"][0]
    assert {"total", "stages", "line_items", "notes"} <= set(plan)
    assert set(plan["line_items"]) == {"compute", "storage_running", "storage_stopped", "egress", "ingress"}
    assert [s["kind"] for s in plan["stages"]] == ["validate", "idle", "train", "export"]
    for s in plan["stages"]:
        assert {"kind", "provider", "offer_id", "gpu", "gpus", "layout", "hours", "billing", "cost"} <= set(s)
        for b in s["billing"]:
            assert {"unit", "count", "unit_price", "cost"} <= set(b)
    total = sum(Decimal(v) for v in plan["line_items"].values())
    assert total == Decimal(plan["total"])
    assert sum(Decimal(s["cost"]) for s in plan["stages"]) == Decimal(plan["total"])
    assert data["prices_as_of"].startswith("2026-11-28")


def test_currency_conversion_uses_the_stated_rate(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    usd = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers))
    cny = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers),
                     "--currency", "CNY", "--fx", "CNY=7")
    assert cny["currency"] == "CNY"
    assert [r["currency"] for r in cny["fx"]] == ["CNY"] and Decimal(cny["fx"][0]["per_usd"]) == 7
    assert Decimal(cny["plans"][0]["total"]) == pytest.approx(Decimal(usd["plans"][0]["total"]) * 7, abs=Decimal("0.001"))


def test_spot_adds_the_expected_lost_work(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", spot_hourly="0.20", gpus=1, **A6000)])
    on_demand = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers))
    spot = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers), "--spot")
    t = next(s for s in spot["plans"][0]["stages"] if s["kind"] == "train")
    t0 = next(s for s in on_demand["plans"][0]["stages"] if s["kind"] == "train")
    assert Decimal(t["hours"]) > Decimal(t0["hours"])  # expected re-run after preemptions
    assert any("preemptions/h" in n for n in spot["plans"][0]["notes"])
    assert Decimal(spot["plans"][0]["total"]) < Decimal(on_demand["plans"][0]["total"])


def test_measured_peak_replans_on_bigger_cards(tmp_path):
    offers = write_offers(tmp_path, [
        offer("a6000", hourly="0.49", gpus=1, **A6000),
        offer("a100", gpu="A100-PCIe-80GB", memory=80, hourly="1.20", gpus=1),
    ])
    base = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers))
    assert base["plans"][0]["stages"][2]["offer_id"] == "a6000"
    measured = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers),
                          "--measured-peak-gb", "47")
    assert measured["plans"][0]["stages"][2]["offer_id"] == "a100"
    assert any("measured validation peak 47" in a for a in measured["assumptions"])


def test_host_max_duration_rejects_short_leases(tmp_path):
    offers = write_offers(tmp_path, [
        offer("short", hourly="0.30", gpus=1, max_hours=72, **A6000),
        offer("long", hourly="0.49", gpus=1, **A6000),
    ])
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers))
    assert data["plans"][0]["stages"][2]["offer_id"] == "long"
    reasons = {r["offer_id"]: r for r in data["rejected"]}
    assert reasons["short"]["constraint"] == "max_duration" and "72.0 h" in reasons["short"]["reason"]


def test_unknown_gpu_offers_are_listed_not_dropped(tmp_path):
    odd = offer("mystery", hourly="0.01", gpus=1, gpu="A6000", memory=48).model_copy(
        update={"gpu": None, "gpu_raw": "Quantum GPU 9000", "gpu_status": "unknown"})
    offers = write_offers(tmp_path, [odd, offer("a6000", hourly="0.49", gpus=1, **A6000)])
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers))
    rej = [r for r in data["rejected"] if r["offer_id"] == "mystery"]
    assert rej and rej[0]["constraint"] == "gpu" and "Quantum GPU 9000" in rej[0]["reason"]


def test_explain_lists_rejections_with_numbers(tmp_path):
    offers = write_offers(tmp_path, [offer("t4", gpu="T4-16GB", memory=16, hourly="0.10", gpus=1),
                                     offer("8xa100", gpu="A100-SXM4-80GB", memory=80, hourly="12", gpus=8,
                                           interconnect="nvlink")])
    code, out, _ = quote("--model", "7b", "--mode", "full", "--days", "1", "--offers-file", str(offers), "--explain")
    assert code == 0
    assert "rejected offers (1)" in out
    line = next(x for x in out.splitlines() if x.startswith("testcloud") and " t4 " in x)
    m = re.search(r"needs ([\d.]+) GB per GPU.*T4-16GB has ([\d.]+) GB", line)
    assert m and float(m.group(1)) > float(m.group(2))
    code, out, _ = quote("--model", "7b", "--mode", "full", "--days", "1", "--offers-file", str(offers))
    assert "1 offers rejected; --explain lists each" in out


def test_markdown_output(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers),
                         "--format", "markdown")
    assert code == 0 and out.startswith("# rentopt quote") and "| **total** |" in out


def test_csv_offers_file(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency\nmine,box1,RTX A6000,1,0.45,USD\n")
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "2", "--offers-file", str(path))
    assert data["plans"][0]["stages"][2]["offer_id"] == "box1"


def test_bundled_snapshot_quote_works_offline_with_an_empty_home():
    code, out, err = quote("--model", "13b", "--mode", "lora", "--days", "10", "--top", "2")
    assert code == 0, err
    assert "BUNDLED SNAPSHOT" in out and "#1" in out and "#2" in out


# --------------------------------------------------------------------------------------------
# Failures: clear line on stderr, documented exit code


@pytest.mark.parametrize("args, code, text", [
    (["--model", "lama-13b", "--mode", "lora", "--days", "10"], 2, "closest presets"),
    (["--model", "13b", "--mode", "lora", "--days", "-3"], 2, "--days"),
    (["--model", "13b", "--mode", "lora", "--days", "0"], 2, "positive"),
    (["--model", "13b", "--mode", "lora"], 2, "exactly one of --days or --tokens"),
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
    code, _, err = quote("--model", "13b", "--mode", "lora", "--days", "10", "--offers-file", str(offers),
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
    plans = quote_json("--model", "13b", "--mode", "lora", "--days", "2", "--offers-file", str(offers),
                       "--no-validate")["plans"]
    groups = [(p["stages"][0]["provider"], p["stages"][0]["gpu"]) for p in plans]
    assert len(groups) == len(set(groups)) == 3
    assert plans[0]["stages"][0]["offer_id"] == "a"


def test_model_resolution_note_is_shown(tmp_path):
    offers = write_offers(tmp_path, [offer("a6000", hourly="0.49", gpus=1, **A6000)])
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--days", "1", "--offers-file", str(offers))
    assert code == 0 and "llama-2-13b" in out
    assert resolve_model("13b").name == "llama-2-13b"
