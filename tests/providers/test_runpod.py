"""RunPod plugin: the gpuTypes query, per-GPU -> per-pod prices, clouds, savings plans, failures."""

from __future__ import annotations

import asyncio
import json
import logging
from decimal import Decimal
from functools import partial

import httpx

from rentopt.optimizer.models import PriceUnit
from rentopt.providers.base import FetchContext
from rentopt.providers.runpod import RunpodProvider, parse_gpu_type
from tests.providers.helpers import FAST, TLS, fetch_answering, fetch_recorded, recorded_at, recorded_fixtures
from tools.fixture_routes import FIXTURES

RECORDED = recorded_at("runpod")
GRAPHQL_URL = "https://api.runpod.io/graphql"
GPU_TYPES = json.loads((FIXTURES / "runpod" / "gpu_types.json").read_text())

# 18 priced types: counts 1/2/4/8 up to each cloud's maximum, secure and community separately
# (108 pods); the all-null V100 type is one skip.
EXPECTED_OFFERS = 108

recorded, offers = recorded_fixtures(RunpodProvider)
# The GraphQL endpoint answered with the given responses (or errors) in turn.
fetch_with = partial(fetch_answering, RunpodProvider, "POST", GRAPHQL_URL)


def options(offer, unit=PriceUnit.HOUR, interruptible=False):
    return [p for p in offer.price_options if p.unit == unit and p.interruptible == interruptible]


# -- parsing -----------------------------------------------------------------------------------


def test_offer_count_and_the_unpriced_type_is_one_skip(recorded):
    assert len(recorded.offers) == EXPECTED_OFFERS
    assert recorded.skipped == [("Tesla V100-SXM2-16GB",
                                 "listed on neither secure nor community cloud with a usable price")]


def test_per_gpu_prices_become_whole_pod_prices(offers):
    pod = offers["NVIDIA H100 80GB HBM3/secure/8"]
    [on_demand] = options(pod)
    [spot] = options(pod, interruptible=True)
    assert on_demand.amount == Decimal("2.69") * 8 == Decimal("21.52")
    assert spot.amount == Decimal("14.00")
    single = offers["NVIDIA H100 80GB HBM3/community/1"]
    assert options(single)[0].amount == Decimal("2.39")
    assert options(single, interruptible=True)[0].amount == Decimal("1.49")
    assert pod.gpus == 8 and single.gpus == 1 and pod.spot is False


def test_savings_plans_become_week_month_and_term_totals(offers):
    pod = offers["NVIDIA H100 80GB HBM3/secure/8"]
    [week] = options(pod, PriceUnit.WEEK)
    [month] = options(pod, PriceUnit.MONTH)
    terms = sorted(options(pod, PriceUnit.TERM), key=lambda p: p.term_hours)
    assert week.amount == Decimal("2.49") * 8 * 168 == Decimal("3346.56")
    assert month.amount == Decimal("2.29") * 8 * 730
    assert [(t.term_hours, t.amount) for t in terms] == [(2190, Decimal("2.19") * 8 * 2190),
                                                         (4380, Decimal("2.09") * 8 * 4380)]
    # Plans reserve secure-cloud capacity: community pods and types without plans get none.
    assert [p.unit for p in offers["NVIDIA H100 80GB HBM3/community/8"].price_options] == ["hour", "hour"]
    assert {p.unit for p in offers["NVIDIA GeForce RTX 4090/secure/1"].price_options} == {"hour"}


def test_clouds_not_sold_produce_no_offers(offers):
    assert not any(k.startswith("NVIDIA GeForce RTX 3090/secure") for k in offers)  # securePrice 0, secureCloud false
    assert [k for k in offers if k.startswith("NVIDIA GeForce RTX 3090/")] == [
        "NVIDIA GeForce RTX 3090/community/1", "NVIDIA GeForce RTX 3090/community/2",
        "NVIDIA GeForce RTX 3090/community/4"]  # maxGpuCount 4: no 8-GPU pod
    assert not any(k.startswith("NVIDIA H100 NVL/community") for k in offers)  # communityPrice null
    assert sorted(k for k in offers if k.startswith("NVIDIA H100 NVL/")) == [
        "NVIDIA H100 NVL/secure/1", "NVIDIA H100 NVL/secure/2"]


def test_double_space_id_is_kept_in_the_offer_id_and_collapsed_for_matching(offers):
    pod = offers["NVIDIA  RTX A4500/community/1"]
    assert pod.gpu_raw == "NVIDIA RTX A4500"
    assert pod.extra["gpu_type_id"] == "NVIDIA  RTX A4500"


def test_interconnect_memory_and_stock(offers):
    assert offers["NVIDIA H100 80GB HBM3/secure/2"].interconnect == "nvlink"
    assert offers["NVIDIA A100-SXM4-80GB/secure/8"].interconnect == "nvlink"
    assert offers["NVIDIA H100 PCIe/secure/2"].interconnect == "pcie"
    assert offers["NVIDIA GeForce RTX 4090/community/8"].interconnect == "pcie"
    assert offers["AMD Instinct MI300X OAM/secure/8"].interconnect == "unknown"
    assert offers["NVIDIA H200/secure/1"].gpu_memory_gb == 141
    out_of_stock = offers["NVIDIA GeForce RTX 4080 SUPER/community/1"]
    assert out_of_stock.extra["stock_status"] is None  # kept: capacity is not price
    assert offers["NVIDIA B200/secure/8"].extra["stock_status"] == "Low"


def test_storage_and_transfer_come_from_the_docs(offers):
    pod = offers["NVIDIA RTX A6000/community/2"]
    assert pod.storage_gb_month == Decimal("0.10")
    assert pod.storage_stopped_gb_month == Decimal("0.20")
    assert pod.egress_gb == Decimal(0) and pod.ingress_gb == Decimal(0)
    assert pod.billing_granularity_s == 1


def test_known_and_unknown_gpus(recorded, offers):
    assert offers["NVIDIA GeForce RTX 4090/secure/1"].gpu == "RTX-4090-24GB"
    assert offers["NVIDIA H100 80GB HBM3/secure/1"].gpu == "H100-SXM-80GB"
    assert offers["NVIDIA  RTX A4500/community/1"].gpu == "RTX-A4500-20GB"
    # "NVIDIA H200" is SXM or NVL by name alone; displayName "H200 SXM" decides.
    assert offers["NVIDIA H200/secure/8"].gpu == "H200-SXM-141GB"
    unknown = offers["NVIDIA RTX 2000 Ada Generation/community/4"]
    assert (unknown.gpu, unknown.gpu_status) == (None, "unknown")
    assert unknown.gpu_memory_gb == 16
    assert recorded.unknown_gpus == ["NVIDIA RTX 2000 Ada Generation"]


def test_every_price_is_decimal_and_every_offer_is_sourced(recorded):
    for offer in recorded.offers:
        assert offer.provider == "runpod" and offer.currency == "USD"
        assert offer.fetched_at == RECORDED and offer.source == GRAPHQL_URL
        assert all(isinstance(p.amount, Decimal) and p.amount > 0 for p in offer.price_options)
        assert offer.offer_id.endswith(f"/{offer.gpus}")


# -- the request -------------------------------------------------------------------------------


def test_one_graphql_post_without_a_key():
    outcome, routes = fetch_recorded(RunpodProvider)
    assert outcome.status == "ok" and outcome.requests == 1
    request = routes["gpu_types.json"].calls.last.request
    assert request.method == "POST" and str(request.url) == GRAPHQL_URL
    query = json.loads(request.content)["query"]
    for field in ("gpuTypes", "securePrice", "communitySpotPrice", "oneMonthPrice", "maxGpuCount", "minPodGpuCount"):
        assert field in query
    assert "authorization" not in request.headers


def test_key_goes_as_bearer(monkeypatch):
    monkeypatch.setenv("RUNPOD_API_KEY", "rp-test-key")
    outcome, routes = fetch_recorded(RunpodProvider)
    assert outcome.status == "ok"
    assert routes["gpu_types.json"].calls.last.request.headers["authorization"] == "Bearer rp-test-key"


def test_base_url_override_is_honoured(monkeypatch):
    monkeypatch.setenv("RENTOPT_RUNPOD_BASE_URL", "https://runpod-proxy.example")
    outcome, _ = fetch_recorded(RunpodProvider, base_url="https://runpod-proxy.example")
    assert outcome.status == "ok" and len(outcome.offers) == EXPECTED_OFFERS
    assert {o.source for o in outcome.offers} == {"https://runpod-proxy.example/graphql"}


# -- failure modes -----------------------------------------------------------------------------


def test_graphql_errors_with_status_200_reject_the_response():
    body = {"errors": [{"message": "Something went wrong. Please try again later or contact support.",
                        "path": ["gpuTypes"]}], "data": {"gpuTypes": None}}
    outcome, _ = fetch_with(httpx.Response(200, json=body))
    assert outcome.status == "failed" and outcome.offers is None
    assert "GraphQL error: Something went wrong" in outcome.error


def test_a_type_missing_a_required_field_rejects_the_whole_response():
    broken = json.loads(json.dumps(GPU_TYPES))
    del broken["data"]["gpuTypes"][2]["communityPrice"]
    outcome, _ = fetch_with(httpx.Response(200, json=broken))
    assert outcome.status == "failed" and "communityPrice" in outcome.error


def test_an_empty_type_list_fails():
    outcome, _ = fetch_with(httpx.Response(200, json={"data": {"gpuTypes": []}}))
    assert outcome.status == "failed" and "no offers at all" in outcome.error


def test_401_names_the_variable_and_never_the_key(monkeypatch, caplog):
    monkeypatch.setenv("RUNPOD_API_KEY", "rp-SECRET-777")
    caplog.set_level(logging.DEBUG)
    outcome, route = fetch_with(httpx.Response(401, json={"errors": [{"message": "Unauthorized rp-SECRET-777"}]}))
    assert outcome.status == "failed" and "RUNPOD_API_KEY" in outcome.error
    assert "rp-SECRET-777" not in outcome.error and "rp-SECRET-777" not in caplog.text
    assert route.calls.last.request.headers["authorization"] == "Bearer rp-SECRET-777"


def test_pod_sizes_respect_the_minimum_and_maximum_gpu_counts():
    gpu_type = next(t for t in GPU_TYPES["data"]["gpuTypes"] if t["id"] == "NVIDIA B200")
    only_big_pods = {**gpu_type, "minPodGpuCount": 2, "maxGpuCountSecureCloud": 4}

    async def go():
        async with httpx.AsyncClient(verify=TLS) as client:
            ctx = FetchContext(RunpodProvider(), client, FAST)
            return parse_gpu_type(ctx, only_big_pods)

    assert [o.offer_id for o in asyncio.run(go())] == ["NVIDIA B200/secure/2", "NVIDIA B200/secure/4"]
