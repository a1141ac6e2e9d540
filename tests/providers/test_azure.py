"""Azure plugin: the Retail Prices walk, the N-series table, the feed's duplicate rows, failures."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from functools import partial
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
import respx
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.providers.azure import (
    DEFAULT_REGIONS,
    SIZES,
    AzureProvider,
    build_filter,
    duplicate_reason,
)
from tests.providers.helpers import fetch, fetch_answering, fetch_recorded, recorded_at, recorded_fixtures
from tools.fixture_routes import FIXTURES

RECORDED = recorded_at("azure")
PRICES_URL = "https://prices.azure.com/api/retail/prices"
PAGE1 = json.loads((FIXTURES / "azure" / "prices_page1.json").read_text())
PAGE2 = json.loads((FIXTURES / "azure" / "prices_page2.json").read_text())

recorded, offers = recorded_fixtures(AzureProvider)
# Every page request answered with the given responses (or errors) in turn.
fetch_with = partial(fetch_answering, AzureProvider, "GET", PRICES_URL)


# -- parsing -----------------------------------------------------------------------------------


def test_offer_count_and_counted_skips(recorded):
    # 15 size/region pairs priced on-demand + 12 of them with a Spot meter; the duplicates
    # (Windows, Win, DevTest, Cloud Services, Low Priority) add nothing.
    assert len(recorded.offers) == 27
    assert sorted(recorded.skipped) == [
        ("Standard_NC40ads_H100_v5/westus3", "no usable price (missing, zero or unknown)"),
        ("Standard_ND128isr_NDR_GB200_v6/eastus",
         "VM size Standard_ND128isr_NDR_GB200_v6 is not in rentopt's N-series table (unknown GPU model and count)"),
        ("Standard_NV6ads_A10_v5/eastus", "fractional GPU: Standard_NV6ads_A10_v5 is 1/6 of an A10"),
    ]


def test_linux_pay_as_you_go_price_ignores_windows_devtest_and_cloud_services(offers):
    h100 = offers["Standard_ND96isr_H100_v5/eastus"]
    hourly = [p for p in h100.price_options if p.unit == "hour"]
    assert [(p.amount, p.label) for p in hourly] == [(Decimal("98.32"), "pay-as-you-go")]
    a100 = offers["Standard_NC24ads_A100_v4/eastus"]
    assert [p.amount for p in a100.price_options if p.unit == "hour"] == [Decimal("3.673")]  # not 3.857
    t4 = offers["Standard_NC4as_T4_v3/eastus"]
    assert [p.amount for p in t4.price_options if p.unit == "hour"] == [Decimal("0.526")]  # not Low Priority 0.1052


def test_reservation_rows_are_term_totals_and_savings_plans_become_commitments(offers):
    h100 = offers["Standard_ND96isr_H100_v5/eastus"]
    terms = {p.label: p for p in h100.price_options if p.unit == "term"}
    assert terms["reserved 1 Year"].amount == Decimal("542680.0") and terms["reserved 1 Year"].term_hours == 8760
    assert terms["reserved 3 Years"].amount == Decimal("1032800.0") and terms["reserved 3 Years"].term_hours == 26280
    # savingsPlan retailPrice is per hour: the commitment is that rate for every hour of the term.
    assert terms["savings plan 1 Year"].amount == Decimal("69.807") * 8760
    assert terms["savings plan 3 Years"].amount == Decimal("43.262") * 26280
    assert not any(p.interruptible for p in h100.price_options)
    assert h100.spot is False


def test_spot_meter_becomes_a_separate_interruptible_offer(offers):
    spot = offers["Standard_ND96isr_H100_v5/eastus/spot"]
    assert spot.spot is True
    assert [(p.unit, p.amount, p.interruptible) for p in spot.price_options] == [("hour", Decimal("39.328"), True)]
    assert spot.gpu == offers["Standard_ND96isr_H100_v5/eastus"].gpu
    assert "Standard_NV72ads_A10_v5/eastus/spot" not in offers  # no Spot meter in the feed


def test_gpu_model_count_and_fabric_come_from_the_size_table(offers):
    h100 = offers["Standard_ND96isr_H100_v5/eastus"]
    assert (h100.gpus, h100.gpu_memory_gb, h100.gpu) == (8, 80, "H100-SXM-80GB")
    assert h100.interconnect == "nvlink" and h100.interconnect_gbps == 900
    assert h100.fabric == "infiniband" and h100.fabric_gbps == 3200
    a100_40 = offers["Standard_ND96asr_v4/southcentralus"]
    assert (a100_40.gpus, a100_40.gpu, a100_40.fabric_gbps) == (8, "A100-SXM4-40GB", 1600)
    nc96 = offers["Standard_NC96ads_A100_v4/eastus"]
    assert (nc96.gpus, nc96.gpu, nc96.interconnect, nc96.fabric) == (4, "A100-PCIe-80GB", "pcie", None)
    nvl = offers["Standard_NC80adis_H100_v5/eastus"]
    assert (nvl.gpus, nvl.gpu_memory_gb, nvl.gpu, nvl.interconnect) == (2, 94, "H100-NVL-94GB", "nvlink")
    mi300x = offers["Standard_ND96isr_MI300X_v5/eastus"]
    assert (mi300x.gpu, mi300x.fabric, mi300x.fabric_gbps) == ("MI300X-192GB", "infiniband", 3200)
    assert offers["Standard_NV36ads_A10_v5/eastus"].gpus == 1
    assert offers["Standard_NC64as_T4_v3/eastus"].gpus == 4


def test_storage_from_the_p30_tier_and_egress_from_the_first_paid_tier(offers):
    east = offers["Standard_ND96amsr_A100_v4/eastus"]
    # 135.17 USD a month for a 1024 GiB P30 disk, kept to a millionth of a dollar.
    assert east.storage_gb_month == Decimal("0.132002")
    assert east.storage_stopped_gb_month is None  # a deallocated VM keeps paying its disk
    assert east.egress_gb == Decimal("0.087")  # the first 100 GB tier is free
    assert east.ingress_gb == Decimal(0)
    assert [t["from_gb"] for t in east.extra["egress_tiers"]][:2] == ["0.0", "100.0"]
    west = offers["Standard_ND96isr_H100_v5/westeurope"]
    assert west.storage_gb_month == Decimal("0.144004")  # 147.46 / 1024
    assert west.extra["product_name"] == "Virtual Machines NDsr H100 v5 Series Linux"


def test_billing_rules_region_and_source(recorded):
    for offer in recorded.offers:
        assert offer.provider == "azure" and offer.currency == "USD"
        assert offer.fetched_at == RECORDED and offer.source == PRICES_URL
        assert offer.billing_granularity_s == 60 and offer.month_hours == 730
        assert offer.region in DEFAULT_REGIONS
        assert offer.extra["series_doc"].startswith("https://learn.microsoft.com/")
        for option in offer.price_options:
            assert isinstance(option.amount, Decimal) and option.amount > 0


def test_every_size_in_the_table_cites_its_docs_page():
    for name, size in SIZES.items():
        assert name.startswith("Standard_N") and size.gpus >= 1
        assert size.family.doc.startswith("https://learn.microsoft.com/en-us/azure/virtual-machines/")


@pytest.mark.parametrize(("product", "sku", "kind", "reason"), [
    ("Virtual Machines NDsr H100 v5 Series Windows", "ND96isr H100 v5", "Consumption", "Windows"),
    ("Virtual Machines NCCadsv5 Srs Win", "NCC40ads H100 v5", "Consumption", "Windows"),
    ("NCasT4_v3 Series CloudServices", "NC4as T4 v3", "Consumption", "Cloud Services"),
    ("Virtual Machines NCasT4_v3 Series Dedicated Host", "NC4as T4 v3", "Consumption", "Dedicated Host"),
    ("Virtual Machines NCasT4_v3 Series", "NC4as T4 v3 Low Priority", "Consumption", "Low Priority"),
    ("Virtual Machines NCasT4_v3 Series", "NC4as T4 v3", "DevTestConsumption", "DevTest"),
    ("Virtual Machines NCasT4_v3 Series", "NC4as T4 v3 Spot", "Consumption", None),
    ("Virtual Machines Wind Series", "W1", "Consumption", None),
])
def test_duplicate_rows_are_recognised(product, sku, kind, reason):
    assert duplicate_reason({"productName": product, "skuName": sku, "meterName": sku, "type": kind}) == reason


# -- the request -------------------------------------------------------------------------------


def test_walk_follows_next_page_link_with_the_filter_and_no_key():
    outcome, routes = fetch_recorded(AzureProvider)
    assert outcome.status == "ok" and outcome.requests == 2
    first = routes["prices_page1.json"].calls.last.request
    query = parse_qs(urlsplit(str(first.url)).query)
    assert query["api-version"] == ["2023-01-01-preview"]
    assert query["$filter"] == [build_filter(DEFAULT_REGIONS)]
    assert "authorization" not in first.headers
    second = routes["prices_page2.json"].calls.last.request
    assert str(second.url) == PAGE1["NextPageLink"].replace(":443", "")  # followed verbatim
    assert routes["prices_page1.json"].call_count == 1


def test_filter_restricts_services_regions_and_gpu_families():
    text = build_filter(("eastus", "westeurope"))
    assert text.startswith("(armRegionName eq 'eastus' or armRegionName eq 'westeurope') and (")
    for part in ("serviceName eq 'Virtual Machines'", "contains(armSkuName, 'Standard_ND')",
                 "skuName eq 'P30 LRS'", "productName eq 'Rtn Preference: MGN'"):
        assert part in text
    assert "armRegionName" not in build_filter(None)


def test_regions_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RENTOPT_AZURE_REGIONS", "swedencentral, eastus2")
    with respx.mock() as router:
        route = router.get(PRICES_URL).respond(200, json={**PAGE2, "Items": PAGE2["Items"][:4]})
        fetch(AzureProvider)
    sent = parse_qs(urlsplit(str(route.calls.last.request.url)).query)["$filter"][0]
    assert sent.startswith("(armRegionName eq 'swedencentral' or armRegionName eq 'eastus2')")


def test_a_bad_region_list_fails_with_the_variable_named(monkeypatch):
    monkeypatch.setenv("RENTOPT_AZURE_REGIONS", "East US")
    with respx.mock(assert_all_called=False) as router:
        route = router.get(PRICES_URL).respond(200, json=PAGE2)
        result = CliRunner().invoke(cli, ["refresh", "--providers", "azure"])
    assert result.exit_code == 2 and not route.called
    assert result.stderr.startswith("rentopt: error: RENTOPT_AZURE_REGIONS='East US': 'East US' is not an Azure region")


def test_pagination_is_bounded(monkeypatch):
    monkeypatch.setattr(AzureProvider, "max_pages", 3)
    looping = {**PAGE1, "NextPageLink": "https://prices.azure.com:443/api/retail/prices?$skip=1000"}
    with respx.mock() as router:
        route = router.get(PRICES_URL).respond(200, json=looping)
        outcome = fetch(AzureProvider)
    assert outcome.status == "failed" and "still paging after 3 pages" in outcome.error
    assert route.call_count == 3


def test_base_url_override_is_honoured_for_every_page(monkeypatch):
    monkeypatch.setenv("RENTOPT_AZURE_BASE_URL", "https://azure-mirror.example/")
    outcome, routes = fetch_recorded(AzureProvider, base_url="https://azure-mirror.example")
    assert outcome.status == "ok" and len(outcome.offers) == 27
    assert routes["prices_page2.json"].call_count == 1  # NextPageLink rebased onto the mirror
    assert {o.source for o in outcome.offers} == {"https://azure-mirror.example/api/retail/prices"}


# -- failure modes -----------------------------------------------------------------------------


def test_a_row_missing_a_required_field_rejects_the_whole_response():
    broken = json.loads(json.dumps(PAGE1))
    broken["NextPageLink"] = None
    del broken["Items"][5]["retailPrice"]
    outcome, _ = fetch_with(httpx.Response(200, json=broken))
    assert outcome.status == "failed" and outcome.offers is None
    assert "retailPrice" in outcome.error


def test_a_bad_page_later_in_the_walk_rejects_everything():
    outcome, _ = fetch_with(httpx.Response(200, json=PAGE1), httpx.Response(200, json={"Items": "nope"}))
    assert outcome.status == "failed" and "'Items' is not a list" in outcome.error


def test_an_error_body_is_rejected_with_what_the_api_said():
    error = {"Error": {"Code": "InvalidFilter", "Message": "Invalid OData parameters supplied"}}
    outcome, _ = fetch_with(httpx.Response(200, json=error))
    assert outcome.status == "failed" and "no 'Items' list" in outcome.error and "InvalidFilter" in outcome.error


def test_an_http_400_fails_cleanly():
    outcome, _ = fetch_with(httpx.Response(400, json={"Error": {"Code": "BadRequest"}}))
    assert outcome.status == "failed" and outcome.error.startswith("HTTP 400 from https://prices.azure.com")


def test_an_empty_item_list_is_not_an_empty_catalog():
    outcome, _ = fetch_with(httpx.Response(200, json={**PAGE1, "Items": [], "NextPageLink": None}))
    assert outcome.status == "failed" and "no offers at all" in outcome.error


def test_prices_in_another_currency_are_rejected():
    outcome, _ = fetch_with(httpx.Response(200, json={**PAGE1, "BillingCurrency": "EUR", "NextPageLink": None}))
    assert outcome.status == "failed" and "prices are in EUR" in outcome.error


def test_401_is_a_clear_failure_and_nothing_secret_is_logged(caplog):
    caplog.set_level(logging.DEBUG)
    outcome, _ = fetch_with(httpx.Response(401, json={"error": "denied"}))
    assert outcome.status == "failed"
    assert outcome.error == "HTTP 401: the API refused the credentials"  # Azure needs no key to name
    assert AzureProvider().skip_reason() is None
