"""Lambda Cloud plugin: instance types keyed by name, cents -> dollars, a required key, failures."""

from __future__ import annotations

import json
import logging
from decimal import Decimal
from functools import partial

import httpx
import pytest
import respx

from rentopt.providers.lambdalabs import LambdaProvider
from tests.providers.helpers import fetch, fetch_answering, fetch_recorded, recorded_at, recorded_fixtures
from tools.fixture_routes import FIXTURES

RECORDED = recorded_at("lambda")
TYPES_URL = "https://cloud.lambda.ai/api/v1/instance-types"
INSTANCE_TYPES = json.loads((FIXTURES / "lambda" / "instance_types.json").read_text())
KEY = "secret_lambda-test-key"


@pytest.fixture
def lambda_key(monkeypatch):
    monkeypatch.setenv("LAMBDA_API_KEY", KEY)
    return KEY


recorded, offers = recorded_fixtures(LambdaProvider, scope="function", needs=("lambda_key",))
# The instance-types endpoint answered with the given responses (or errors) in turn.
fetch_with = partial(fetch_answering, LambdaProvider, "GET", TYPES_URL)


# -- parsing -----------------------------------------------------------------------------------


def test_every_gpu_type_is_an_offer_and_cpu_types_are_left_out_quietly(recorded, offers):
    assert len(INSTANCE_TYPES["data"]) == 18
    assert len(recorded.offers) == 17
    assert "cpu_4x_general" not in offers
    assert recorded.skipped == []  # a CPU type is not a failed row


def test_cents_for_the_whole_instance_become_dollars(offers):
    assert offers["gpu_8x_h100_sxm5"].price_options[0].amount == Decimal("23.92")
    assert offers["gpu_1x_a10"].price_options[0].amount == Decimal("0.75")
    assert offers["gpu_8x_v100"].price_options[0].amount == Decimal("4.40")  # the price arrived as "440"
    assert all(len(o.price_options) == 1 and not o.price_options[0].interruptible for o in offers.values())


def test_gpu_count_memory_and_interconnect(offers):
    h100 = offers["gpu_8x_h100_sxm5"]
    assert (h100.gpus, h100.gpu_memory_gb, h100.interconnect) == (8, 80, "nvlink")
    assert offers["gpu_1x_h100_pcie"].interconnect == "pcie"
    assert offers["gpu_8x_a100_80gb_sxm4"].gpu_memory_gb == 80
    assert offers["gpu_1x_a100"].gpu_memory_gb == 40
    assert offers["gpu_4x_a6000"].interconnect == "unknown"  # no board form in "A6000 (48 GB)"
    assert offers["gpu_1x_gh200"].gpu_memory_gb == 96
    assert offers["gpu_1x_gh200"].extra["cpu_arch"] == "arm64"  # Grace host
    assert offers["gpu_1x_h100_sxm5"].extra["cpu_arch"] == "x86_64"


def test_descriptions_resolve_to_catalog_gpus(offers):
    expected = {"gpu_8x_h100_sxm5": "H100-SXM-80GB", "gpu_1x_h100_pcie": "H100-PCIe-80GB",
                "gpu_8x_a100_80gb_sxm4": "A100-SXM4-80GB", "gpu_1x_a100": "A100-PCIe-40GB",
                "gpu_1x_a10": "A10-24GB", "gpu_1x_gh200": "GH200-96GB", "gpu_8x_b200_sxm6": "B200-SXM-180GB"}
    assert {name: offers[name].gpu for name in expected} == expected
    assert offers["gpu_8x_h100_sxm5"].gpu_raw == "H100 (80 GB SXM5)"  # Lambda's own spelling


def test_rtx6000_is_the_turing_quadro_not_the_ada_card(offers):
    quadro = offers["gpu_1x_rtx6000"]
    assert quadro.gpu == "Quadro-RTX-6000-24GB"
    assert quadro.gpu_raw == "RTX 6000 (24 GB)" and quadro.gpu_memory_gb == 24


def test_an_ambiguous_description_is_kept_with_the_gpu_unresolved(recorded, offers):
    v100 = offers["gpu_8x_v100"]  # "Tesla V100 (16 GB)": SXM2 or PCIe
    assert (v100.gpu, v100.gpu_status) == (None, "ambiguous")
    assert recorded.unknown_gpus == ["Tesla V100 (16 GB)"]


def test_regions_with_capacity(offers):
    h100 = offers["gpu_8x_h100_sxm5"]
    assert h100.region == "us-east-3"
    assert h100.extra["capacity"] == ["us-east-3", "us-south-3", "europe-central-1"]
    empty = offers["gpu_1x_a100"]
    assert empty.region is None and empty.extra["capacity"] == []


def test_billing_storage_and_transfer(offers):
    offer = offers["gpu_1x_a6000"]
    assert offer.billing_granularity_s == 60 and offer.month_hours == 720
    # $0.20 per GiB-month is $0.186265 per GB-month.
    assert offer.storage_gb_month == Decimal("0.186265")
    assert offer.egress_gb == Decimal(0) and offer.ingress_gb == Decimal(0)


def test_every_price_is_decimal_and_every_offer_is_sourced(recorded):
    for offer in recorded.offers:
        assert offer.provider == "lambda" and offer.currency == "USD"
        assert offer.fetched_at == RECORDED and offer.source == TYPES_URL
        assert all(isinstance(p.amount, Decimal) for p in offer.price_options)


# -- the request and the key -------------------------------------------------------------------


def test_without_a_key_the_provider_is_skipped_with_the_variable_named():
    with respx.mock(assert_all_called=False) as router:
        route = router.get(TYPES_URL)
        outcome = fetch(LambdaProvider)
    assert outcome.status == "skipped" and "LAMBDA_API_KEY" in outcome.error
    assert not route.called


def test_get_with_a_bearer_key(lambda_key):
    outcome, routes = fetch_recorded(LambdaProvider)
    assert outcome.status == "ok" and outcome.requests == 1
    request = routes["instance_types.json"].calls.last.request
    assert request.method == "GET" and str(request.url) == TYPES_URL
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_base_url_override_is_honoured(lambda_key, monkeypatch):
    monkeypatch.setenv("RENTOPT_LAMBDA_BASE_URL", "https://cloud.lambdalabs.com/api/v1")
    outcome, routes = fetch_recorded(LambdaProvider, base_url="https://cloud.lambdalabs.com")
    assert outcome.status == "ok" and len(outcome.offers) == 17
    # the override host is now the provider's own host, so the key goes there
    assert routes["instance_types.json"].calls.last.request.headers["authorization"] == f"Bearer {KEY}"


# -- failure modes -----------------------------------------------------------------------------


def test_401_names_the_variable_and_never_the_key(lambda_key, caplog):
    caplog.set_level(logging.DEBUG)
    body = (FIXTURES / "lambda" / "error_invalid_key.json").read_bytes()
    outcome, _ = fetch_with(httpx.Response(401, content=body))
    assert outcome.status == "failed" and "LAMBDA_API_KEY" in outcome.error
    assert KEY not in outcome.error and KEY not in caplog.text


def test_an_error_body_with_status_200_is_rejected(lambda_key):
    body = json.loads((FIXTURES / "lambda" / "error_invalid_key.json").read_text())
    outcome, _ = fetch_with(httpx.Response(200, json=body))
    assert outcome.status == "failed"
    assert "no 'data' object: API key was invalid" in outcome.error


def test_a_type_missing_its_price_field_rejects_the_whole_response(lambda_key):
    broken = json.loads(json.dumps(INSTANCE_TYPES))
    del broken["data"]["gpu_1x_a10"]["instance_type"]["price_cents_per_hour"]
    outcome, _ = fetch_with(httpx.Response(200, json=broken))
    assert outcome.status == "failed" and "gpu_1x_a10" in outcome.error


def test_an_empty_catalog_fails(lambda_key):
    outcome, _ = fetch_with(httpx.Response(200, json={"data": {}}))
    assert outcome.status == "failed" and "no offers at all" in outcome.error


def test_a_zero_price_is_unknown_not_free(lambda_key):
    body = json.loads(json.dumps(INSTANCE_TYPES))
    body["data"]["gpu_1x_a10"]["instance_type"]["price_cents_per_hour"] = 0
    outcome, _ = fetch_with(httpx.Response(200, json=body))
    assert outcome.status == "ok"
    assert "gpu_1x_a10" not in {o.offer_id for o in outcome.offers}
    assert outcome.skipped == [("gpu_1x_a10", "no usable price (missing, zero or unknown)")]
