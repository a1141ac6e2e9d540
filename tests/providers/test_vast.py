"""Vast.ai plugin: parsing the recorded search, the request it sends, and every failure mode."""

from __future__ import annotations

import asyncio
import json
import logging
from decimal import Decimal
from functools import partial

import httpx
import pytest
import respx

from rentopt.providers.base import FetchContext
from rentopt.providers.vast import SEARCH_LIMIT, VastProvider
from tests.providers.helpers import FAST, TLS, fetch_answering, fetch_recorded, recorded_at, recorded_fixtures
from tools.fixture_routes import FIXTURES

RECORDED = recorded_at("vast")
SEARCH_URL = "https://console.vast.ai/api/v0/bundles/"
BUNDLES = json.loads((FIXTURES / "vast" / "bundles.json").read_text())

recorded, offers = recorded_fixtures(VastProvider)
# The search answered with the given responses (or errors) in turn.
fetch_with = partial(fetch_answering, VastProvider, "POST", SEARCH_URL)


def row(ask_id: int) -> dict:
    return next(r for r in BUNDLES["offers"] if r["id"] == ask_id)


def by_gpu(offers, gpu_raw: str, gpus: int):
    return next(o for o in offers.values() if o.gpu_raw == gpu_raw and o.gpus == gpus)


# -- parsing -----------------------------------------------------------------------------------


def test_every_priced_ask_becomes_an_offer_and_the_zero_price_one_is_skipped(recorded):
    assert len(BUNDLES["offers"]) == 26
    assert len(recorded.offers) == 25
    zero = next(r for r in BUNDLES["offers"] if r["dph_total"] == 0)
    assert recorded.skipped == [(str(zero["id"]), "no usable price (missing, zero or unknown)")]


def test_recorded_ask_compute_price_excludes_the_priced_disk(offers):
    verbatim = row(11684738)
    offer = offers["11684738"]
    on_demand, bid = offer.price_options
    # dph_total folds in storage_cost * 5 GB / 720 h; what is left is dph_base, to 1e-8 $/h.
    assert on_demand.amount == Decimal("0.24666667")
    assert abs(on_demand.amount - Decimal(str(verbatim["dph_base"]))) < Decimal("1e-8")
    assert on_demand.amount < Decimal(str(verbatim["dph_total"]))
    assert not on_demand.interruptible and on_demand.unit == "hour"
    assert bid.interruptible and bid.amount == Decimal("0.2")
    assert offer.spot is False


def test_whole_node_price_for_a_multi_gpu_ask(offers):
    h100x8 = by_gpu(offers, "H100 SXM", 8)
    assert h100x8.price_options[0].amount == Decimal("13.44")  # dph_base of the whole ask, not per GPU
    assert h100x8.gpus == 8


def test_storage_and_bandwidth_prices_keep_zero_as_free(offers):
    verbatim = offers["11684738"]
    assert verbatim.storage_gb_month == Decimal("0.00133333")
    assert verbatim.storage_stopped_gb_month is None  # stopped pays the same storage rate
    assert verbatim.egress_gb == Decimal(0) and verbatim.ingress_gb == Decimal(0)
    h100 = by_gpu(offers, "H100 SXM", 1)
    assert h100.storage_gb_month == Decimal("0.35")
    assert h100.egress_gb == Decimal("0.02") and h100.ingress_gb == Decimal("0.02")
    assert verbatim.month_hours == 720


def test_memory_interconnect_duration_and_region(offers):
    verbatim = offers["11684738"]
    assert verbatim.gpu_memory_gb == 24  # 24564 MiB-ish per GPU, quoted as the card's 24 GB label
    assert verbatim.interconnect == "pcie" and verbatim.interconnect_gbps is None
    assert verbatim.max_duration_hours == pytest.approx(13356528.565657616 / 3600)
    assert verbatim.region == "Guangxi, CN"
    assert verbatim.net_up_mbps == 77.7 and verbatim.net_down_mbps == 105.9
    h100x8 = by_gpu(offers, "H100 SXM", 8)
    assert h100x8.interconnect == "nvlink" and h100x8.interconnect_gbps == 366.1
    assert h100x8.region is None  # geolocation null is tolerated
    assert by_gpu(offers, "A100 SXM4", 1).gpu_memory_gb == 40
    assert by_gpu(offers, "L40S", 1).gpu_memory_gb == 48  # the driver shows 46068 MiB
    assert by_gpu(offers, "L40S", 1).extra["gpu_ram"] == 46068


def test_nulls_in_optional_fields_are_tolerated(offers):
    rtx3090 = by_gpu(offers, "RTX 3090", 1)  # cpu_cores and min_bid are null
    assert [p.interruptible for p in rtx3090.price_options] == [False]
    assert "cpu_cores" not in rtx3090.extra
    v100 = by_gpu(offers, "Tesla V100", 1)  # external: true, a less reliable host
    assert v100.extra["external"] is True and v100.extra["reliability2"] == 0.91


def test_gpu_frac_is_not_a_fractional_gpu(offers):
    verbatim = offers["11684738"]
    assert verbatim.gpus == 1 and verbatim.extra["gpu_frac"] == 0.25


def test_unknown_and_unresolved_gpu_names_are_kept_not_dropped(recorded, offers):
    unknown = by_gpu(offers, "GTX 1080 Ti", 1)
    assert (unknown.gpu, unknown.gpu_status) == (None, "unknown")
    assert unknown.gpu_memory_gb == 11.0  # nothing to snap to: the reported size stays
    v100 = by_gpu(offers, "Tesla V100", 1)  # SXM2 or PCIe: Vast does not say
    assert (v100.gpu, v100.gpu_status) == (None, "ambiguous")
    assert {"GTX 1080 Ti", "Tesla V100"} <= set(recorded.unknown_gpus)


def test_spellings_resolve_with_memory_and_form_hints(offers):
    assert by_gpu(offers, "RTX 6000Ada", 1).gpu == "RTX-6000-Ada-48GB"
    assert by_gpu(offers, "Q RTX 8000", 1).gpu == "Quadro-RTX-8000-48GB"
    assert by_gpu(offers, "A100 SXM4", 1).gpu == "A100-SXM4-40GB"  # 40960 MiB
    assert by_gpu(offers, "A100 SXM4", 8).gpu == "A100-SXM4-80GB"  # 81920 MiB
    h200 = by_gpu(offers, "H200", 8)  # bare "H200" on Vast is the SXM board
    assert (h200.gpu, h200.gpu_memory_gb) == ("H200-SXM-141GB", 141)


def test_every_price_is_decimal_and_every_offer_is_sourced(recorded):
    for offer in recorded.offers:
        assert offer.provider == "vast" and offer.currency == "USD"
        assert offer.fetched_at == RECORDED
        assert offer.source == SEARCH_URL
        assert offer.billing_granularity_s == 1
        for option in offer.price_options:
            assert isinstance(option.amount, Decimal) and option.amount > 0
        for fee in (offer.storage_gb_month, offer.egress_gb, offer.ingress_gb):
            assert fee is None or isinstance(fee, Decimal)


# -- the request -------------------------------------------------------------------------------


def test_search_request_shape_without_a_key():
    outcome, routes = fetch_recorded(VastProvider)
    assert outcome.status == "ok" and outcome.requests == 1
    request = routes["bundles.json"].calls.last.request
    assert request.method == "POST" and str(request.url) == SEARCH_URL
    body = json.loads(request.content)
    assert body["type"] == "on-demand" and body["limit"] == SEARCH_LIMIT
    assert body["allocated_storage"] == 5.0 and body["rentable"] == {"eq": True}
    assert "authorization" not in request.headers


def test_key_is_sent_as_bearer_only_to_vast(monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", "vast-test-key-123")
    outcome, routes = fetch_recorded(VastProvider)
    assert outcome.status == "ok"
    assert routes["bundles.json"].calls.last.request.headers["authorization"] == "Bearer vast-test-key-123"

    async def elsewhere():
        async with httpx.AsyncClient(verify=TLS) as client:
            ctx = FetchContext(VastProvider(), client, FAST)
            await ctx.request("GET", "https://elsewhere.example/next")

    with respx.mock() as router:
        other = router.get("https://elsewhere.example/next").respond(200, json={})
        asyncio.run(elsewhere())
    assert "authorization" not in other.calls.last.request.headers


def test_base_url_override_is_honoured(monkeypatch):
    monkeypatch.setenv("RENTOPT_VAST_BASE_URL", "https://vast-mirror.example/api/v0/")
    outcome, _ = fetch_recorded(VastProvider, base_url="https://vast-mirror.example")
    assert outcome.status == "ok" and len(outcome.offers) == 25
    assert {o.source for o in outcome.offers} == {"https://vast-mirror.example/api/v0/bundles/"}


# -- failure modes -----------------------------------------------------------------------------


def test_a_row_missing_a_required_field_rejects_the_whole_response():
    broken = json.loads(json.dumps(BUNDLES))
    del broken["offers"][3]["num_gpus"]
    outcome, _ = fetch_with(httpx.Response(200, json=broken))
    assert outcome.status == "failed" and outcome.offers is None
    assert "num_gpus" in outcome.error


def test_an_error_body_with_status_200_is_rejected():
    outcome, _ = fetch_with(httpx.Response(200, json={"success": False, "error": "invalid_args", "msg": "bad query"}))
    assert outcome.status == "failed" and "no 'offers' list" in outcome.error


def test_an_empty_offer_list_is_not_an_empty_catalog():
    outcome, _ = fetch_with(httpx.Response(200, json={"offers": []}))
    assert outcome.status == "failed" and "no offers at all" in outcome.error


def test_401_names_the_variable_and_never_the_key(monkeypatch, caplog):
    monkeypatch.setenv("VAST_API_KEY", "sk-vast-DO-NOT-LEAK")
    caplog.set_level(logging.DEBUG)
    outcome, _ = fetch_with(httpx.Response(401, json={"detail": "invalid key sk-vast-DO-NOT-LEAK"}))
    assert outcome.status == "failed"
    assert "VAST_API_KEY" in outcome.error
    assert "sk-vast-DO-NOT-LEAK" not in outcome.error
    assert "sk-vast-DO-NOT-LEAK" not in caplog.text

