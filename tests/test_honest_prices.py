"""What a user is told about prices (issue 23): suspect prices held out, unknown line items null,
missing providers named with the fix, dates the publisher's own.

Offers files keep every case small and self-contained; expected numbers are worked out by hand
in the comments.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal

from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import UNKNOWN_DATE
from tests.test_quote import A6000, H100, offer, quote, quote_json, write_offers


def h100s(*prices: tuple[str, str]):
    """One 1 x H100 offer per (provider, hourly price)."""
    return [offer(f"{p}-h100", gpus=1, hourly=price, provider=p, **H100) for p, price in prices]


# Four sellers of the H100: 2.00, 2.50 and 3.00 USD an hour, and one at 0.30.
# For "cheap": the median of the three others is 2.50; 1/5 of it is 0.50 > 0.30: suspect.
# For "a" (2.00): the others are 2.50, 3.00, 0.30, median 2.50; 2.00 is not under 0.50.
MARKET = [("a", "2.00"), ("b", "2.50"), ("c", "3.00"), ("cheap", "0.30")]
JOB = ("--model", "7b", "--mode", "lora", "--tokens", "3e8", "--no-validate")


def test_a_suspect_price_never_heads_a_plan_and_explain_lists_it(tmp_path):
    path = write_offers(tmp_path, h100s(*MARKET))
    data = quote_json(*JOB, "--offers-file", str(path), "--top", "4")
    assert {p["stages"][0]["provider"] for p in data["plans"]} == {"a", "b", "c"}
    (held,) = [r for r in data["rejected"] if r["constraint"] == "suspect"]
    assert held["provider"] == "cheap"
    assert "0.3 USD per GPU-hour, under 1/5 of the median 2.5 USD of 3 other providers' H100-SXM-80GB" in held["reason"]
    code, out, _ = quote(*JOB, "--offers-file", str(path), "--explain")
    assert code == 0 and "suspect" in out and "cheap-h100" in out


def test_allow_suspect_plans_with_it(tmp_path):
    path = write_offers(tmp_path, h100s(*MARKET))
    data = quote_json(*JOB, "--offers-file", str(path), "--allow-suspect", "--top", "1")
    assert data["plans"][0]["stages"][0]["provider"] == "cheap"


def test_a_price_is_not_suspect_without_enough_sellers_to_compare(tmp_path):
    # two sellers: "cheap" has one other provider, not the two the rule needs
    path = write_offers(tmp_path, h100s(("a", "2.00"), ("cheap", "0.30")))
    data = quote_json(*JOB, "--offers-file", str(path), "--top", "1")
    assert data["plans"][0]["stages"][0]["provider"] == "cheap"
    assert not [r for r in data["rejected"] if r["constraint"] == "suspect"]


def test_offers_suspect_lists_only_suspect_prices_with_their_numbers(tmp_path):
    path = write_offers(tmp_path, h100s(*MARKET))
    result = CliRunner().invoke(cli, ["offers", "--offers-file", str(path), "--suspect", "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [o["provider"] for o in listed] == ["cheap"]
    assert "under 1/5 of the median 2.5 USD" in listed[0]["extra"]["suspect"]
    # none suspect: says so, not an empty table
    fair = write_offers(tmp_path, h100s(("a", "2.00"), ("b", "2.50"), ("c", "3.00")))
    result = CliRunner().invoke(cli, ["offers", "--offers-file", str(fair), "--suspect"])
    assert result.exit_code == 0 and "No suspect price" in result.output


def test_an_unknown_line_item_is_null_in_json_and_unknown_in_the_table(tmp_path):
    # storage and egress have no price: those items are null, never "0"; compute is known.
    # 1 x A6000 at 0.50/h, no validation: compute is the training hours x 0.50, and the total
    # counts compute alone (the unknowns are listed, never added as 0)
    unpriced = offer("box", gpus=1, hourly="0.50", storage=None, egress=None, ingress=None, **A6000)
    path = write_offers(tmp_path, [unpriced])
    data = quote_json(*JOB, "--offers-file", str(path), "--top", "1")
    (plan,) = data["plans"]
    items = plan["line_items"]
    assert items["storage_running"] is None and items["egress"] is None and items["ingress"] is None
    assert items["compute"] is not None and Decimal(items["compute"]) > 0
    assert Decimal(plan["total"]) == sum(Decimal(v) for v in items.values() if v is not None)
    assert plan["unknown_charges"]
    code, out, _ = quote(*JOB, "--offers-file", str(path), "--top", "1", "--details")
    line = next(x for x in out.splitlines() if x.startswith("line items: "))
    assert "storage running unknown" in line and "egress unknown" in line and "ingress unknown" in line


def test_a_fully_priced_plan_has_every_line_item(tmp_path):
    path = write_offers(tmp_path, [offer("box", gpus=1, hourly="0.50", **A6000)])
    (plan,) = quote_json(*JOB, "--offers-file", str(path), "--top", "1")["plans"]
    assert None not in plan["line_items"].values()
    assert sum(Decimal(v) for v in plan["line_items"].values()) == Decimal(plan["total"])


def test_a_requested_provider_with_no_prices_is_named_with_the_fix(rentopt_home):
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--days", "10", "--providers", "runpod,lambda", "--top", "1")
    assert code == 0
    assert ("NO PRICES for runpod: no prices in the store; `rentopt refresh --providers runpod` (RUNPOD_API_KEY), "
            "or `rentopt refresh` for the published catalog") in out
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10", "--providers", "runpod,lambda", "--top", "1")
    assert [m.split(":")[0] for m in data["missing_providers"]] == ["runpod"]
    assert {p["stages"][0]["provider"] for p in data["plans"]} == {"lambda"}


def test_offers_with_no_rows_says_why(rentopt_home):
    result = CliRunner().invoke(cli, ["offers", "--providers", "runpod"])
    assert result.exit_code == 0
    assert "Offers from the providers from" not in result.output
    assert "runpod: no prices in the store; `rentopt refresh --providers runpod` (RUNPOD_API_KEY)" in result.output
    result = CliRunner().invoke(cli, ["offers", "--providers", "lambda", "--min-gpus", "64"])
    assert "No offer matches these filters among" in result.output and "lambda" in result.output


def test_a_quote_names_each_providers_real_date_and_the_unknown_ones(rentopt_home):
    """The mission's command from a fresh install: plans, and each provider's own date (the
    shared catalogs README: gcp's file last changed 2026-04-20, vast's 2026-04-29)."""
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--days", "10")
    assert code == 0 and "#1 stage by stage: " in out
    header = " ".join(out.split("\n\n")[0].split())  # the one screen's header names the undated providers
    assert "dated 2026-04-20" in header and "date unknown: hyperbolic," in header and "verda" in header
    code, out, _ = quote("--model", "13b", "--mode", "lora", "--days", "10", "--details")
    assert code == 0 and "#1  total" in out
    where = out.split("where the prices come from (per provider):\n")[1]
    assert "  gcp: SkyPilot catalog of 2026-04-20 " in where and "  vast: SkyPilot catalog of 2026-04-29 " in where
    assert "  verda: SkyPilot catalog, date unknown " in where
    assert "20792 days" not in out and "1970" not in out  # an unknown date never shows an age
    data = quote_json("--model", "13b", "--mode", "lora", "--days", "10")
    verda = next(s for s in data["sources"] if s["provider"] == "verda")
    assert (verda["fetched_at"], verda["dated_by"]) == (None, "unknown")


def test_an_offer_of_unknown_date_holds_no_date():
    o = offer("x", gpus=1, hourly="1", **A6000).model_copy(update={"dated_by": "unknown"})
    again = type(o).model_validate(o.model_dump())
    assert again.fetched_at == UNKNOWN_DATE and again.fetched_at < datetime(2000, 1, 1, tzinfo=timezone.utc)
