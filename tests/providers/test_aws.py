"""AWS plugin: the EC2 bulk offer files, Reserved terms, the spot feed, regions and failures."""

from __future__ import annotations

import json
import logging
from decimal import Decimal

import httpx
import respx
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.providers.aws import FAMILIES, AwsProvider, network_gbps
from tests.providers.helpers import fetch, fetch_recorded, recorded_at, recorded_fixtures
from tools.fixture_routes import FIXTURES, install_respx

RECORDED = recorded_at("aws")
ROOT = "https://pricing.us-east-1.amazonaws.com"
EAST_URL = f"{ROOT}/offers/v1.0/aws/AmazonEC2/current/us-east-1/index.json"
WEST_URL = f"{ROOT}/offers/v1.0/aws/AmazonEC2/current/us-west-2/index.json"
SPOT_URL = "https://website.spot.ec2.aws.a2z.com/spot.json"
EAST = json.loads((FIXTURES / "aws" / "us-east-1_index.json").read_text())
WEST = json.loads((FIXTURES / "aws" / "us-west-2_index.json").read_text())
SPOT = json.loads((FIXTURES / "aws" / "spot.json").read_text())

recorded, offers = recorded_fixtures(AwsProvider)


def hourly(offer) -> list[Decimal]:
    return [p.amount for p in offer.price_options if p.unit == "hour"]


# -- parsing -----------------------------------------------------------------------------------


def test_offer_count_and_counted_skips(recorded):
    # 16 GPU types in us-east-1 (p5e has no price) + 4 priced in us-west-2, and 8 spot twins.
    assert len(recorded.offers) == 28
    assert len([o for o in recorded.offers if o.spot]) == 8
    assert recorded.skipped == [
        ("p5e.48xlarge/us-east-1", "no pay-as-you-go Linux price (only Capacity Block, reservation or licensed rows)"),
        ("p4de.24xlarge/us-west-2", "no usable price (missing, zero or unknown)"),
        ("g6e.xlarge/us-east-1/spot", "spot price 'N/A*' is not a price"),
    ]


def test_only_the_linux_shared_used_row_prices_an_instance(offers):
    # Dedicated 60.544, Windows 58.48, RHEL 56.28 and the unused-reservation row all repeat p5.
    assert hourly(offers["p5.48xlarge/us-east-1"]) == [Decimal("55.04")]
    assert hourly(offers["p4d.24xlarge/us-east-1"]) == [Decimal("21.957642")]
    assert hourly(offers["g5.xlarge/us-west-2"]) == [Decimal("1.006")]  # not the Windows 1.519
    assert "m7i.xlarge/us-east-1" not in offers  # no GPU


def test_reserved_terms_are_upfront_plus_hourly_for_the_whole_term(offers):
    terms = {p.label: p for p in offers["p5.48xlarge/us-east-1"].price_options if p.unit == "term"}
    assert set(terms) == {"reserved 1yr No Upfront", "reserved 1yr All Upfront", "reserved 3yr Partial Upfront"}
    assert terms["reserved 1yr No Upfront"].amount == Decimal("36.3264") * 8760
    assert terms["reserved 1yr All Upfront"].amount == Decimal(311342)  # hourly part is a real 0
    assert terms["reserved 3yr Partial Upfront"].amount == Decimal(322000) + Decimal("12.25") * 26280
    assert terms["reserved 3yr Partial Upfront"].term_hours == 26280
    p4d = {p.label: p.amount for p in offers["p4d.24xlarge/us-east-1"].price_options if p.unit == "term"}
    assert p4d == {"reserved 1yr Partial Upfront": Decimal("123003.96"), "reserved 3yr All Upfront": Decimal(242520)}


def test_gpu_table_count_memory_and_fabric(offers):
    p5 = offers["p5.48xlarge/us-east-1"]
    assert (p5.gpu, p5.gpus, p5.gpu_memory_gb) == ("H100-SXM-80GB", 8, 80)
    assert (p5.interconnect, p5.interconnect_gbps, p5.fabric, p5.fabric_gbps) == ("nvlink", 900, "infiniband", 3200)
    assert p5.extra["fabric_name"] == "EFA" and p5.extra["vcpus"] == "192" and p5.extra["ram"] == "2048 GiB"
    assert offers["p4d.24xlarge/us-east-1"].fabric_gbps == 400
    assert offers["p4de.24xlarge/us-east-1"].gpu == "A100-SXM4-80GB"
    assert offers["p3dn.24xlarge/us-east-1"].gpu == "V100-SXM2-32GB"
    assert offers["p5en.48xlarge/us-east-1"].gpu == "H200-SXM-141GB"
    assert offers["p6-b200.48xlarge/us-east-1"].gpu == "B200-SXM-180GB"
    g5 = offers["g5.12xlarge/us-east-1"]
    assert (g5.gpu, g5.gpus, g5.interconnect, g5.fabric, g5.fabric_gbps) == ("A10G-24GB", 4, "pcie", "ethernet", 40)
    assert offers["g6e.xlarge/us-east-1"].gpu == "L40S-48GB" and offers["g4dn.12xlarge/us-east-1"].gpus == 4


def test_storage_egress_and_billing(recorded):
    for offer in recorded.offers:
        assert offer.storage_gb_month == Decimal("0.08")  # EBS gp3 GB-Mo row
        assert offer.storage_stopped_gb_month is None  # a stopped instance keeps paying EBS
        assert offer.egress_gb == Decimal("0.09") and offer.ingress_gb == Decimal(0)
        assert offer.billing_granularity_s == 1 and offer.billing_minimum_s == 60
        assert offer.provider == "aws" and offer.currency == "USD" and offer.fetched_at == RECORDED
        for option in offer.price_options:
            assert isinstance(option.amount, Decimal) and option.amount > 0


def test_spot_twins_are_interruptible_and_sourced_from_the_feed(offers):
    spot = offers["p5.48xlarge/us-west-2/spot"]
    assert spot.spot and [(p.amount, p.interruptible) for p in spot.price_options] == [(Decimal("22.016"), True)]
    assert spot.source == SPOT_URL and spot.region == "us-west-2" and spot.gpus == 8
    assert offers["p5.48xlarge/us-east-1"].source == EAST_URL
    assert "g6e.xlarge/us-east-1/spot" not in offers  # "N/A*" is unknown, not free


def test_network_performance_parsing():
    assert network_gbps("3200 Gigabit") == 3200 and network_gbps("Up to 12500 Megabit") is None
    assert set(FAMILIES) >= {"g4dn", "g5", "g6", "g6e", "p3", "p3dn", "p4d", "p4de", "p5", "p5e", "p5en", "p6-b200"}
    assert all(f.doc.startswith("https://aws.amazon.com/ec2/instance-types/") for f in FAMILIES.values())


# -- the requests ------------------------------------------------------------------------------


def test_one_file_per_default_region_and_the_spot_feed_without_credentials():
    outcome, routes = fetch_recorded(AwsProvider)
    assert outcome.status == "ok" and outcome.requests == 3
    for name in ("us-east-1_index.json", "us-west-2_index.json", "spot.json"):
        request = routes[name].calls.last.request
        assert request.method == "GET" and "authorization" not in request.headers
    assert str(routes["us-east-1_index.json"].calls.last.request.url) == EAST_URL


def test_regions_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("RENTOPT_AWS_REGIONS", "us-west-2")
    outcome, routes = fetch_recorded(AwsProvider, assert_all_called=False)
    assert outcome.status == "ok" and routes["us-east-1_index.json"].call_count == 0
    assert {o.region for o in outcome.offers} == {"us-west-2"} and len(outcome.offers) == 6


def test_a_bad_region_name_fails_before_any_download(monkeypatch):
    monkeypatch.setenv("RENTOPT_AWS_REGIONS", "us-east-1,Virginia")
    with respx.mock(assert_all_called=False) as router:
        routes = install_respx(router, AwsProvider)
        result = CliRunner().invoke(cli, ["refresh", "--providers", "aws"])
    assert result.exit_code == 2 and not any(r.called for r in routes.values())
    assert result.stderr.startswith("rentopt: error: RENTOPT_AWS_REGIONS='us-east-1,Virginia': 'Virginia' is not")


def test_an_unknown_region_names_the_region_and_the_variable(monkeypatch):
    monkeypatch.setenv("RENTOPT_AWS_REGIONS", "us-east-9")
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{ROOT}/offers/v1.0/aws/AmazonEC2/current/us-east-9/index.json").respond(403, text="AccessDenied")
        outcome = fetch(AwsProvider)
    assert outcome.status == "failed"
    assert outcome.error.startswith("price list for us-east-9: HTTP 403") and "RENTOPT_AWS_REGIONS" in outcome.error


def test_spot_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("RENTOPT_AWS_SPOT", "0")
    outcome, routes = fetch_recorded(AwsProvider, assert_all_called=False)
    assert outcome.status == "ok" and routes["spot.json"].call_count == 0
    assert not any(o.spot for o in outcome.offers) and len(outcome.offers) == 20


def test_base_url_override_is_honoured(monkeypatch):
    monkeypatch.setenv("RENTOPT_AWS_BASE_URL", "https://pricing-mirror.example")
    outcome, _ = fetch_recorded(AwsProvider, base_url="https://pricing-mirror.example")
    assert outcome.status == "ok" and len(outcome.offers) == 28
    assert outcome.offers[0].source.startswith("https://pricing-mirror.example/offers/v1.0/aws/AmazonEC2/")


# -- failure modes -----------------------------------------------------------------------------


def fetch_with(*east, spot=None):
    """us-east-1 answers `east` in turn; us-west-2 and the spot feed answer normally."""
    with respx.mock(assert_all_called=False) as router:
        route = router.get(EAST_URL)
        route.side_effect = list(east)
        router.get(WEST_URL).respond(200, json=WEST)
        spot_route = router.get(SPOT_URL)
        spot_route.side_effect = list(spot or [httpx.Response(200, json=SPOT)])
        outcome = fetch(AwsProvider)
    return outcome, route


def test_a_failed_region_file_names_the_region():
    # The retries themselves are tested for every provider in test_http_failures.py.
    outcome, route = fetch_with(*[httpx.Response(500)] * 3)
    assert outcome.status == "failed" and outcome.offers is None
    assert outcome.error == "price list for us-east-1: server error HTTP 500 after 3 attempts"
    assert route.call_count == 3


def test_a_product_without_attributes_rejects_the_whole_file():
    broken = json.loads(json.dumps(EAST))
    del next(iter(broken["products"].values()))["attributes"]
    outcome, _ = fetch_with(httpx.Response(200, json=broken))
    assert outcome.status == "failed" and outcome.offers is None and "no 'attributes' object" in outcome.error


def test_a_file_that_is_not_the_ec2_offer_is_rejected():
    outcome, _ = fetch_with(httpx.Response(200, json={**EAST, "offerCode": "AmazonS3"}))
    assert outcome.status == "failed" and "offerCode 'AmazonS3'" in outcome.error
    outcome, _ = fetch_with(httpx.Response(200, json={"offerCode": "AmazonEC2", "products": []}))
    assert outcome.status == "failed" and "lacks the 'products' or 'terms' object" in outcome.error


def test_empty_offer_files_are_not_an_empty_catalog(monkeypatch):
    monkeypatch.setenv("RENTOPT_AWS_REGIONS", "us-east-1")
    monkeypatch.setenv("RENTOPT_AWS_SPOT", "0")
    outcome, _ = fetch_with(httpx.Response(200, json={**EAST, "products": {}, "terms": {}}))
    assert outcome.status == "failed" and "no offers at all" in outcome.error


def test_a_failed_spot_feed_costs_only_the_spot_offers():
    outcome, _ = fetch_with(httpx.Response(200, json=EAST), spot=[httpx.Response(500)] * 3)
    assert outcome.status == "ok" and len(outcome.offers) == 20 and not any(o.spot for o in outcome.offers)
    assert ("spot.json", "spot prices unavailable (server error HTTP 500 after 3 attempts)") in outcome.skipped


def test_a_malformed_spot_feed_costs_only_the_spot_offers():
    outcome, _ = fetch_with(httpx.Response(200, json=EAST), spot=[httpx.Response(200, json={"vers": 0.01})])
    assert outcome.status == "ok" and len(outcome.offers) == 20
    assert ("spot.json", "spot feed has no config.regions list") in outcome.skipped


def test_403_is_a_clear_failure_and_nothing_secret_is_logged(caplog):
    caplog.set_level(logging.DEBUG)
    outcome, _ = fetch_with(httpx.Response(403, text="AccessDenied"))
    assert outcome.status == "failed"
    assert outcome.error.startswith("price list for us-east-1: HTTP 403: the API refused the credentials")
    assert AwsProvider().skip_reason() is None  # no key is needed, none is ever sent
