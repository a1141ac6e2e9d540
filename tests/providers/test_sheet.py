"""Sheet plugin: the shipped CNY sheets, user sheets overriding them, and malformed sheets."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from decimal import Decimal
from functools import partial
from pathlib import Path

import pytest

from rentopt.providers.sheet import BUNDLED_DIR, SheetError, SheetProvider, collect_sheets, load_sheet
from tests.providers.helpers import fetch as fetch_provider
from tests.providers.helpers import recorded_at
from tools.fixture_routes import FIXTURES

REFRESHED_AT = recorded_at("sheet")  # fetch() dates the refresh with the sheet manifest's recorded_at
fetch = partial(fetch_provider, SheetProvider)


def by_id(outcome) -> dict:
    """Offers by "<platform>/<id>": each platform is its own provider, the id is the sheet's."""
    return {f"{o.provider}/{o.offer_id}": o for o in outcome.offers or []}


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc)


@pytest.fixture
def user_sheets(rentopt_home) -> Path:
    folder = rentopt_home / "sheets"
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def bundled():
    outcome = fetch()
    assert outcome.status == "ok", outcome.error
    return outcome


# -- the shipped sheets ------------------------------------------------------------------------


def test_bundled_sheets_give_jygpu_and_autodl_offers_and_skip_the_nexgpu_placeholders(bundled):
    assert len(bundled.offers) == 21  # JYGPU 1 + AutoDL 5 cards x 4 GPU counts
    assert [name for name, _ in bundled.skipped] == ["nexgpu.toml"]
    reason = bundled.skipped[0][1]
    assert reason.startswith("nexgpu.toml holds placeholder prices for nexgpu; copy it to ")
    assert reason.endswith("sheets with real prices and placeholder_prices = false")
    for offer in bundled.offers:
        assert offer.provider == offer.extra["platform"] in ("jygpu", "autodl") and offer.currency == "CNY"
        assert offer.fetched_at < REFRESHED_AT  # the price date, never the refresh time
        for option in offer.price_options:
            assert isinstance(option.amount, Decimal) and option.amount > 0


def test_jygpu_monthly_list_and_discounted_prices(bundled):
    node = by_id(bundled)["jygpu/8x-rtx4090"]
    assert (node.gpu, node.gpus, node.gpu_memory_gb, node.interconnect) == ("RTX-4090-24GB", 8, 24, "pcie")
    assert [(p.unit, p.amount, p.label) for p in node.price_options] == [
        ("month", Decimal(9900), "list"), ("month", Decimal(7920), "discounted (折后 price on the same page)")]
    assert node.fetched_at == day("2026-09-20") and node.source == "https://www.jygpu.com"
    assert node.month_hours == 720 and node.stopped_bills == "everything"
    assert node.storage_gb_month is None and node.egress_gb is None  # not published: unknown
    assert node.extra["platform"] == "jygpu" and node.extra["sheet"] == "jygpu.toml"


def test_autodl_per_gpu_prices_scale_with_the_gpu_count(bundled):
    offers = by_id(bundled)
    one, eight = offers["autodl/rtx4090-1x"], offers["autodl/rtx4090-8x"]
    assert [(p.unit, p.amount) for p in one.price_options] == [("hour", Decimal("1.88")), ("month", Decimal(1052))]
    assert [(p.unit, p.amount) for p in eight.price_options] == [("hour", Decimal("15.04")), ("month", Decimal(8416))]
    assert eight.gpus == 8 and eight.billing_granularity_s == 1
    assert offers["autodl/a800-80gb-4x"].price_options[0].amount == Decimal("22.36")
    assert offers["autodl/a800-80gb-1x"].gpu == "A800-PCIe-80GB"
    assert offers["autodl/l20-48gb-1x"].gpu == "L20-48GB" and offers["autodl/l20-48gb-1x"].gpu_memory_gb == 48


def test_autodl_storage_rules(bundled):
    offer = by_id(bundled)["autodl/rtx3090-2x"]
    assert offer.storage_gb_month == Decimal("0.210")  # 0.007 CNY/GB/day x 30 days
    assert offer.storage_stopped_gb_month is None  # the paid disk bills whether running or not
    assert offer.free_disk_gb == 50 and offer.stopped_max_days == 15
    assert offer.stopped_bills == "storage"


def test_per_offer_read_on_dates_the_offer(bundled):
    offers = by_id(bundled)
    assert offers["autodl/rtx3090-1x"].fetched_at == day("2026-10-01")
    assert offers["autodl/rtx5090-1x"].fetched_at == day("2026-09-06")
    assert offers["autodl/l20-48gb-8x"].fetched_at == day("2026-09-16")


def test_every_shipped_sheet_validates_and_cites_its_sources():
    for path in sorted(BUNDLED_DIR.glob("*.toml")):
        sheet = load_sheet(path)
        assert sheet.currency == "CNY" and sheet.source and sheet.billing.source
        assert path.stem == sheet.platform
    assert load_sheet(BUNDLED_DIR / "nexgpu.toml").placeholder_prices is True


def test_nexgpu_billing_rules_apply_once_real_prices_are_filled_in(user_sheets):
    text = (BUNDLED_DIR / "nexgpu.toml").read_text(encoding="utf-8")
    (user_sheets / "nexgpu.toml").write_text(
        text.replace("placeholder_prices = true", "placeholder_prices = false"), encoding="utf-8")
    outcome = fetch()
    assert outcome.status == "ok" and outcome.skipped == []
    nex = [o for o in outcome.offers if o.extra["platform"] == "nexgpu"]
    assert len(nex) == 7  # RTX 4090 x {1,2,4,8}, A100 x {1,8}, H100 x 8
    for offer in nex:
        assert offer.price_locked is True and offer.billing_granularity_s == 1 and offer.billing_minimum_s == 0
        assert offer.stopped_bills == "storage" and offer.extra["sheet_origin"] == "user"


# -- user sheets -------------------------------------------------------------------------------


def test_a_user_sheet_replaces_the_bundled_sheet_of_the_same_platform(user_sheets):
    shutil.copy(FIXTURES / "sheet" / "user_autodl.toml", user_sheets / "mine.toml")
    outcome = fetch()
    autodl = {f"{o.provider}/{o.offer_id}": o for o in outcome.offers if o.provider == "autodl"}
    assert set(autodl) == {"autodl/rtx4090-1x", "autodl/rtx4090-8x"}
    eight = autodl["autodl/rtx4090-8x"]
    assert [(p.unit, p.amount) for p in eight.price_options] == [("hour", Decimal("15.84")), ("day", Decimal("340.0"))]
    assert eight.fetched_at == day("2026-11-20") and eight.source.endswith("(read in my console)")
    assert eight.gpu == "RTX-4090-24GB" and eight.gpu_memory_gb == 24  # memory from the GPU catalog
    assert eight.storage_gb_month == Decimal("0.3") and eight.egress_gb == Decimal(0)
    assert eight.extra["sheet_origin"] == "user" and eight.extra["sheet"] == "mine.toml"
    assert "jygpu/8x-rtx4090" in by_id(outcome)  # other bundled sheets still load


def test_user_sheets_may_be_yaml_or_json(user_sheets):
    (user_sheets / "cheap.yaml").write_text(
        "platform: cheapgpu\ncurrency: USD\nsource: https://cheap.example/pricing\nread_on: 2026-11-01\n"
        "offers:\n  - id: a6000\n    gpu: RTX A6000\n    prices:\n      - {unit: hour, amount: 0.39}\n",
        encoding="utf-8")
    (user_sheets / "other.json").write_text(json.dumps({
        "platform": "othergpu", "currency": "EUR", "source": "https://other.example", "read_on": "2026-11-02",
        "offers": [{"id": "l40s", "gpu": "L40S", "gpus": 2, "prices": [{"unit": "week", "amount": 310.5}]}],
    }), encoding="utf-8")
    offers = by_id(fetch())
    a6000 = offers["cheapgpu/a6000"]
    assert a6000.currency == "USD" and a6000.price_options[0].amount == Decimal("0.39")
    assert a6000.fetched_at == day("2026-11-01")
    l40s = offers["othergpu/l40s"]
    assert l40s.currency == "EUR" and l40s.gpus == 2 and l40s.price_options[0].amount == Decimal("310.5")


def test_an_unknown_gpu_is_kept_when_the_sheet_gives_its_memory(user_sheets):
    (user_sheets / "x.toml").write_text(
        'platform = "x"\ncurrency = "CNY"\nsource = "https://x.example"\nread_on = 2026-11-01\n'
        '[[offers]]\nid = "mystery"\ngpu = "Mystery Accelerator 9000"\nmemory_gb = 64\n'
        '[[offers.prices]]\nunit = "hour"\namount = 3\n', encoding="utf-8")
    outcome = fetch()
    offer = by_id(outcome)["x/mystery"]
    assert offer.gpu is None and offer.gpu_status == "unknown" and offer.gpu_memory_gb == 64
    assert "Mystery Accelerator 9000" in outcome.unknown_gpus


# -- malformed sheets --------------------------------------------------------------------------


VALID = ('platform = "good"\ncurrency = "CNY"\nsource = "https://good.example"\nread_on = 2026-11-01\n'
         '[[offers]]\nid = "a"\ngpu = "RTX 4090"\n[[offers.prices]]\nunit = "hour"\namount = 2\n')


@pytest.mark.parametrize(("text", "message"), [
    ('platform = "bad"\ncurrency = CNY\n', "not valid TOML"),
    (VALID.replace('currency = "CNY"\n', ""), "field currency: Field required"),
    (VALID.replace("amount = 2", "amount = -2"), "field offers[0].prices[0].amount: Input should be greater than 0"),
    (VALID.replace("amount = 2", "amount = 0"), "field offers[0].prices[0].amount: Input should be greater than 0"),
    (VALID.replace('unit = "hour"', 'unit = "fortnight"'), "field offers[0].prices[0].unit: Input should be"),
    (VALID.replace('currency = "CNY"', 'currency = "yuan"'), "field currency: String should match pattern"),
    (VALID.replace("read_on = 2026-11-01", 'read_on = "last week"'), "field read_on: Input should be a valid date"),
    (VALID.replace('unit = "hour"', 'unit = "term"'), "field offers[0].prices[0]: a 'term' price needs term_hours"),
    (VALID + "colour = \"red\"\n", "Extra inputs are not permitted"),
], ids=["syntax", "missing", "negative", "zero", "unit", "currency", "date", "term", "unknown-field"])
def test_a_malformed_sheet_is_reported_by_file_and_field_and_the_others_still_load(user_sheets, text, message):
    (user_sheets / "broken.toml").write_text(text, encoding="utf-8")
    (user_sheets / "good.toml").write_text(VALID, encoding="utf-8")
    outcome = fetch()
    assert outcome.status == "ok"
    problems = [reason for name, reason in outcome.skipped if name == "broken.toml"]
    assert len(problems) == 1 and message in problems[0]
    assert problems[0].startswith(f"price sheet {user_sheets / 'broken.toml'}")
    assert "good/a" in by_id(outcome) and "jygpu/8x-rtx4090" in by_id(outcome)


def test_load_sheet_raises_an_input_error_naming_the_file(tmp_path):
    path = tmp_path / "s.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(SheetError, match=r"s\.json: the top level must be a table of fields, not list"):
        load_sheet(path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(SheetError, match=r"not valid JSON .* at line 1\); fix the syntax"):
        load_sheet(path)
    bad_yaml = tmp_path / "s.yaml"
    bad_yaml.write_text("platform: [unclosed\n", encoding="utf-8")
    with pytest.raises(SheetError, match=r"s\.yaml line 2: not valid YAML"):
        load_sheet(bad_yaml)


def test_a_broken_user_override_does_not_fall_back_to_bundled_prices(user_sheets):
    (user_sheets / "autodl.toml").write_text(
        'platform = "autodl"\ncurrency = "CNY"\nsource = "https://www.autodl.com"\nread_on = 2026-11-01\n',
        encoding="utf-8")
    outcome = fetch()
    assert not any(o.extra["platform"] == "autodl" for o in outcome.offers)
    assert any(name == "autodl.toml" and "field offers: Field required" in reason for name, reason in outcome.skipped)


def test_two_user_sheets_for_one_platform_keep_the_first(user_sheets):
    (user_sheets / "a.toml").write_text(VALID, encoding="utf-8")
    (user_sheets / "b.toml").write_text(VALID.replace("amount = 2", "amount = 3"), encoding="utf-8")
    outcome = fetch()
    assert by_id(outcome)["good/a"].price_options[0].amount == Decimal(2)
    assert any(name == "b.toml" and "already defined in a.toml" in reason for name, reason in outcome.skipped)


def test_duplicate_offer_ids_and_bad_gpu_counts_are_rejected(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text(VALID + '[[offers]]\nid = "a"\ngpu = "RTX 3090"\n[[offers.prices]]\nunit = "day"\namount = 40\n',
                    encoding="utf-8")
    with pytest.raises(SheetError, match="offer id 'a' appears more than once"):
        load_sheet(path)
    path.write_text(VALID.replace('gpu = "RTX 4090"', 'gpu = "RTX 4090"\ngpus = [1, 0]'), encoding="utf-8")
    with pytest.raises(SheetError, match=r"field offers\[0\]\.gpus: .*above 0"):
        load_sheet(path)


def test_when_no_sheet_is_usable_the_provider_fails(tmp_path, user_sheets):
    empty = tmp_path / "no-bundled"
    empty.mkdir()
    (user_sheets / "broken.toml").write_text("nonsense = [", encoding="utf-8")
    loaded, problems = collect_sheets(bundled_dir=empty, user_dir=user_sheets)
    assert loaded == [] and len(problems) == 1


def test_all_sheets_broken_fails_the_refresh(monkeypatch, tmp_path, user_sheets):
    empty = tmp_path / "no-bundled"
    empty.mkdir()
    monkeypatch.setattr("rentopt.providers.sheet.BUNDLED_DIR", empty)
    (user_sheets / "broken.toml").write_text("nonsense = [", encoding="utf-8")
    outcome = fetch()
    assert outcome.status == "failed" and outcome.error.startswith("no usable price sheet (1 could not be read; first:")
    assert "broken.toml" in outcome.error
