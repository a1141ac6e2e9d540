"""DataCrunch (Verda) plugin: OAuth2 login, string prices, total -> per-GPU memory, failures."""

from __future__ import annotations

import json
import logging
from decimal import Decimal

import httpx
import pytest
import respx

from rentopt.providers.datacrunch import DataCrunchProvider
from tests.providers.helpers import fetch, fetch_recorded, recorded_at, recorded_fixtures
from tools.fixture_routes import FIXTURES

RECORDED = recorded_at("datacrunch")
ROOT = "https://api.datacrunch.io/v1"
TOKEN = json.loads((FIXTURES / "datacrunch" / "token.json").read_text())["access_token"]
INSTANCE_TYPES = json.loads((FIXTURES / "datacrunch" / "instance_types.json").read_text())
VOLUME_TYPES = json.loads((FIXTURES / "datacrunch" / "volume_types.json").read_text())
CLIENT_ID = "dc-client-id-42"
SECRET = "dc-client-SECRET-do-not-leak"

# 21 types: the CPU node is left out, the "0.00"/"0.00" row is skipped, the rest are offers.
EXPECTED_OFFERS = 19


@pytest.fixture
def credentials(monkeypatch):
    monkeypatch.setenv("DATACRUNCH_CLIENT_ID", CLIENT_ID)
    monkeypatch.setenv("DATACRUNCH_CLIENT_SECRET", SECRET)


recorded, offers = recorded_fixtures(DataCrunchProvider, scope="function", needs=("credentials",))


def requests_sent(routes) -> list[httpx.Request]:
    return [call.request for route in routes.values() for call in route.calls]


# -- parsing -----------------------------------------------------------------------------------


def test_offer_count_and_skips(recorded, offers):
    assert len(INSTANCE_TYPES) == 21
    assert len(recorded.offers) == EXPECTED_OFFERS
    assert "CPU.120V.480G" not in offers
    assert recorded.skipped == [("1A100.40P.16V", "no usable price (missing, zero or unknown)")]


def test_string_prices_for_the_whole_instance(offers):
    v100 = offers["8V100.48M"]  # verbatim datacrunch-python row
    on_demand, spot = v100.price_options
    assert on_demand.amount == Decimal("5.00") and not on_demand.interruptible
    assert spot.amount == Decimal("2.50") and spot.interruptible
    assert offers["8H100.80S.176V"].price_options[0].amount == Decimal("18.32")


def test_gpu_memory_total_is_divided_per_gpu(offers):
    assert offers["8V100.48M"].gpu_memory_gb == 16  # "128GB VRAM" over 8 GPUs
    assert offers["2A6000.20V"].gpu_memory_gb == 48
    assert offers["8H200.141S.176V"].gpu_memory_gb == 141


def test_null_spot_and_spot_only_rows(offers):
    ada = offers["1RTX6000ADA.10V"]
    assert [p.interruptible for p in ada.price_options] == [False] and ada.spot is False
    b300 = offers["2B300.60V"]  # price_per_hour null, spot "2.98"
    assert b300.spot is True
    assert [(p.amount, p.interruptible) for p in b300.price_options] == [(Decimal("2.98"), True)]


def test_interconnect_from_p2p_text(offers):
    assert (offers["8V100.48M"].interconnect, offers["8V100.48M"].interconnect_gbps) == ("nvlink", 50.0)
    assert (offers["8H100.80S.176V"].interconnect, offers["8H100.80S.176V"].interconnect_gbps) == ("nvlink", 900.0)
    assert (offers["2A6000.20V"].interconnect, offers["2A6000.20V"].interconnect_gbps) == ("unknown", 50.0)
    assert offers["1H100.80S.30V"].interconnect == "nvlink"  # SXM5 board, p2p null
    assert offers["1L40S.20V"].interconnect == "pcie"


def test_storage_price_comes_from_volume_types(offers):
    for offer in offers.values():
        assert offer.storage_gb_month == Decimal("0.2")
        assert offer.egress_gb is None  # not published: unknown, not free


def test_gpu_names_resolved_and_unresolved(recorded, offers):
    assert offers["1H100.80S.30V"].gpu == "H100-SXM-80GB"
    assert offers["1RTX6000ADA.10V"].gpu == offers["8RTX6000ADA.80V"].gpu == "RTX-6000-Ada-48GB"
    assert offers["2B300.60V"].gpu == "B300-SXM-288GB"
    # "Tesla V100 16GB" is SXM2 or PCIe; NVLink between the 8 GPUs says SXM2, one GPU says nothing.
    assert offers["8V100.48M"].gpu == "V100-SXM2-16GB"
    assert (offers["1V100.6V"].gpu, offers["1V100.6V"].gpu_status) == (None, "ambiguous")
    pro = offers["1RTXPRO6000.30V"]  # Server, Workstation or Max-Q edition
    assert pro.gpu is None and pro.gpu_raw == "RTX PRO 6000 96GB"
    assert recorded.unknown_gpus == ["RTX PRO 6000 96GB", "Tesla V100 16GB"]


def test_every_price_is_decimal_and_every_offer_is_sourced(recorded):
    for offer in recorded.offers:
        assert offer.provider == "datacrunch" and offer.currency == "USD"
        assert offer.fetched_at == RECORDED and offer.source == f"{ROOT}/instance-types"
        assert offer.billing_granularity_s == 600
        assert all(isinstance(p.amount, Decimal) and p.amount > 0 for p in offer.price_options)


# -- auth and requests -------------------------------------------------------------------------


@pytest.mark.parametrize("present", [(), ("DATACRUNCH_CLIENT_ID",), ("DATACRUNCH_CLIENT_SECRET",)])
def test_missing_credentials_skip_the_provider_naming_both_variables(monkeypatch, present):
    for name in present:
        monkeypatch.setenv(name, "x")
    with respx.mock(assert_all_called=False) as router:
        token = router.post(f"{ROOT}/oauth2/token")
        outcome = fetch(DataCrunchProvider)
    assert outcome.status == "skipped" and not token.called
    assert "DATACRUNCH_CLIENT_ID" in outcome.error and "DATACRUNCH_CLIENT_SECRET" in outcome.error


def test_client_credentials_login_then_bearer_requests(credentials):
    outcome, routes = fetch_recorded(DataCrunchProvider)
    assert outcome.status == "ok" and outcome.requests == 3
    token_request = routes["token.json"].calls.last.request
    assert token_request.method == "POST"
    assert json.loads(token_request.content) == {
        "grant_type": "client_credentials", "client_id": CLIENT_ID, "client_secret": SECRET}
    assert "authorization" not in token_request.headers  # the secret never travels as a header
    for name in ("instance_types.json", "volume_types.json"):
        request = routes[name].calls.last.request
        assert request.method == "GET" and request.headers["authorization"] == f"Bearer {TOKEN}"
    for request in requests_sent(routes):
        assert SECRET not in request.headers.get("authorization", "")
        assert request.url.host == "api.datacrunch.io"  # the token goes nowhere else


def test_base_url_override_is_honoured(credentials, monkeypatch):
    monkeypatch.setenv("RENTOPT_DATACRUNCH_BASE_URL", "https://verda-proxy.example/v1")
    outcome, routes = fetch_recorded(DataCrunchProvider, base_url="https://verda-proxy.example")
    assert outcome.status == "ok" and len(outcome.offers) == EXPECTED_OFFERS
    assert {request.url.host for request in requests_sent(routes)} == {"verda-proxy.example"}


# -- failure modes -----------------------------------------------------------------------------


def fetch_with(token=None, types=None, volumes=None):
    """Replay the login and both GETs, replacing any of them with the given response(s)."""
    with respx.mock(assert_all_called=False) as router:
        routes = {
            "token": router.post(f"{ROOT}/oauth2/token"),
            "types": router.get(f"{ROOT}/instance-types"),
            "volumes": router.get(f"{ROOT}/volume-types"),
        }
        defaults = {"token": httpx.Response(200, json={"access_token": TOKEN, "token_type": "Bearer"}),
                    "types": httpx.Response(200, json=INSTANCE_TYPES),
                    "volumes": httpx.Response(200, json=VOLUME_TYPES)}
        for key, given in (("token", token), ("types", types), ("volumes", volumes)):
            routes[key].side_effect = given if isinstance(given, list) else [given or defaults[key]]
        outcome = fetch(DataCrunchProvider)
    return outcome, routes


@pytest.mark.parametrize("status", [400, 401])
def test_refused_credentials_name_both_variables_and_never_the_secret(credentials, caplog, status):
    caplog.set_level(logging.DEBUG)
    refusal = httpx.Response(status, json={"code": "unauthorized_request", "message": f"bad secret {SECRET}"})
    outcome, routes = fetch_with(token=refusal)
    assert outcome.status == "failed" and not routes["types"].called
    assert f"HTTP {status}" in outcome.error
    assert "DATACRUNCH_CLIENT_ID" in outcome.error and "DATACRUNCH_CLIENT_SECRET" in outcome.error
    assert SECRET not in outcome.error and SECRET not in caplog.text


def test_a_token_reply_without_a_token_is_a_schema_error(credentials):
    outcome, _ = fetch_with(token=httpx.Response(200, json={"code": "ok"}))
    assert outcome.status == "failed" and "no access_token" in outcome.error


def test_a_server_error_after_a_good_login_fails_the_provider(credentials):
    # The shared cases in test_http_failures.py fail every request, so only the login there.
    outcome, routes = fetch_with(types=[httpx.Response(502)] * 3)
    assert outcome.status == "failed" and outcome.offers is None
    assert outcome.error == "server error HTTP 502 after 3 attempts"
    assert routes["token"].call_count == 1 and routes["types"].call_count == 3
    assert not routes["volumes"].called


def test_a_row_missing_a_required_field_rejects_the_whole_response(credentials):
    broken = json.loads(json.dumps(INSTANCE_TYPES))
    del broken[4]["gpu_memory"]
    outcome, _ = fetch_with(types=httpx.Response(200, json=broken))
    assert outcome.status == "failed" and "gpu_memory" in outcome.error


def test_an_object_instead_of_the_bare_array_is_rejected(credentials):
    outcome, _ = fetch_with(types=httpx.Response(200, json={"code": "forbidden", "message": "no"}))
    assert outcome.status == "failed" and "not a JSON array" in outcome.error


def test_an_empty_array_fails(credentials):
    outcome, _ = fetch_with(types=httpx.Response(200, json=[]))
    assert outcome.status == "failed" and "no offers at all" in outcome.error


def test_missing_nvme_volume_type_leaves_storage_unknown(credentials):
    outcome, _ = fetch_with(volumes=httpx.Response(200, json=[VOLUME_TYPES[1]]))
    assert outcome.status == "ok"
    assert {o.storage_gb_month for o in outcome.offers} == {None}
