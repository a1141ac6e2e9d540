"""The SkyPilot catalog plugin: real catalog rows priced exactly, the catalog's quirks, one
provider per cloud, and failures that lose nothing.

Expected prices are read by hand from the CSV rows quoted next to each assertion (rows of the shared
2026-05-20 catalog committed in tests/data/catalogs/, or the excerpts of it in fixtures/skypilot/),
never from the plugin.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import respx
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.store import OfferQuery, open_readonly, store_path
from rentopt.providers import skypilot
from rentopt.providers.base import FetchContext
from rentopt.providers.skypilot import PUBLISHED_CATALOG, SkyPilotProvider, catalog_date, parse_catalog, read_rows
from tests.providers.helpers import fetch, fetch_recorded

# Rows of the shared 2026-05-20 catalog, committed (tests/data/catalogs/README.md says which)
CATALOG_2026_05_20 = Path(__file__).resolve().parents[1] / "data" / "catalogs" / "skypilot-v8" / "2026-05-20"
D = Decimal


@pytest.fixture(autouse=True)
def no_local_skypilot(monkeypatch, tmp_path):
    """A developer's own ~/.sky/catalogs/v8 must not change what these tests read."""
    monkeypatch.setattr(skypilot, "LOCAL_CATALOG", tmp_path / "no-sky")


def by_key(offers):
    return {(o.provider, o.offer_id): o for o in offers}


def hour(offer) -> Decimal:
    (option,) = offer.price_options
    assert option.unit == "hour"
    return option.amount


# --------------------------------------------------------------------------------------------
# Rows of the shared 2026-05-20 catalog, refreshed through the CLI and compared row by row


def test_refresh_from_a_catalog_directory_stores_its_prices_exactly(monkeypatch):
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(CATALOG_2026_05_20))
    result = CliRunner().invoke(cli, ["refresh", "--providers", "skypilot"])
    assert result.exit_code == 0, result.output
    for cloud in ("gcp", "azure", "lambda", "vast"):
        assert f"skypilot/{cloud}" in result.output
    with open_readonly(store_path()) as store:
        states = {s.name: s for s in store.providers()}
        offers = by_key(store.load_offers(OfferQuery(providers=("gcp", "azure", "lambda", "vast"))))
    for cloud in ("gcp", "azure", "lambda", "vast"):
        assert states[cloud].plugin == "skypilot"
        assert states[cloud].fetched_at == datetime(2026, 5, 20, tzinfo=timezone.utc)  # the catalog's folder date

    # gcp rows (us-central1-a):
    #   a3-highgpu-8g,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,3.86318
    #   ,,,H100,8,{...81920...},us-central1,us-central1-a,33.60609,32.0104
    h100 = offers[("gcp", "a3-highgpu-8g/us-central1-a")]
    assert hour(h100) == D("9.46006") + D("33.60609") == D("43.06615")
    assert hour(offers[("gcp", "a3-highgpu-8g/us-central1-a/spot")]) == D("3.86318") + D("32.0104")
    assert (h100.gpu, h100.gpus, h100.interconnect) == ("H100-SXM-80GB", 8, "nvlink")
    #   a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.36975
    #   ,,,A100,1,{...40960...},us-central1,us-central1-a,2.93391,1.4341
    a100 = offers[("gcp", "a2-highgpu-1g/us-central1-a")]
    assert hour(a100) == D("3.67339") and a100.gpu == "A100-SXM4-40GB"
    assert hour(offers[("gcp", "a2-highgpu-1g/us-central1-a/spot")]) == D("1.80385")
    #   ,,,T4,1,...,us-central1,us-central1-a,0.35,0.1654 on an N1 host with >= 4 vCPUs and
    #   >= 16 GiB: n1-standard-4 has 15 GiB (too little); the cheapest that fits is
    #   n1-highmem-4,4.0,26.0,,,,us-central1,us-central1-a,0.23661,0.08638
    t4 = offers[("gcp", "n1-highmem-4+1xT4/us-central1-a")]
    assert hour(t4) == D("0.58661") and t4.gpu == "T4-16GB"
    assert hour(offers[("gcp", "n1-highmem-4+1xT4/us-central1-a/spot")]) == D("0.25178")

    # azure: Standard_ND96isr_H100_v5,H100,8,96,1900,H100,98.32,18.169536,eastus,V2
    nd = offers[("azure", "Standard_ND96isr_H100_v5/eastus")]
    assert hour(nd) == D("98.32") and hour(offers[("azure", "Standard_ND96isr_H100_v5/eastus/spot")]) == D("18.169536")
    assert (nd.gpu, nd.fabric, nd.fabric_gbps, nd.nodes_available) == ("H100-SXM-80GB", "infiniband", 3200, 8)
    # an 11-field row (Generation V1,V2 unquoted): Standard_NC12s_v3,V100,2,12,224,V100,6.12,1.130976,eastus,V1,V2
    nc = offers[("azure", "Standard_NC12s_v3/eastus")]
    assert (hour(nc), nc.gpus, nc.gpu) == (D("6.12"), 2, "V100-PCIe-16GB")

    # lambda: gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,31.92,us-east-1,{...},  (no spot price)
    lam = offers[("lambda", "gpu_8x_h100_sxm5/us-east-1")]
    assert (hour(lam), lam.gpu, lam.gpus) == (D("31.92"), "H100-SXM-80GB", 8)
    assert ("lambda", "gpu_8x_h100_sxm5/us-east-1/spot") not in offers

    # vast: 1x-RTX_5090-32-65536,RTX5090,1,...,0.44,0.00,"Denmark, DK, EU"  (0.00 spot = none)
    vast = offers[("vast", "1x-RTX_5090-32-65536/Denmark, DK, EU")]
    assert (hour(vast), vast.gpu) == (D("0.44"), "RTX-5090-32GB")
    assert ("vast", "1x-RTX_5090-32-65536/Denmark, DK, EU/spot") not in offers


def test_a_catalog_directory_gives_its_gpu_rows_as_offers_and_no_tpu_or_cpu_rows(monkeypatch):
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(CATALOG_2026_05_20))
    outcome = fetch(SkyPilotProvider)
    assert outcome.status == "ok", outcome.error
    # Counted by hand in the excerpt: gcp's 3 GPU rows (A100 x1, H100 x8, T4 x1; its 6 host rows
    # are priced into them) with a spot price each: 6 offers; azure's 3 GPU rows less the
    # fractional A10, with spot: 4; lambda's 2 GPU rows, no spot: 2; vast's 3 rows, 0.00 spot: 3
    assert len(outcome.offers) == 15
    assert {o.provider for o in outcome.offers} == {"gcp", "azure", "lambda", "vast"}
    assert not [o for o in outcome.offers if o.gpu_raw.lower().startswith(("tpu", "cpu"))]
    assert ("gcp: 2 TPU rows", "TPUs are not GPUs; rentopt plans GPU jobs only") in outcome.skipped  # grep -c ',tpu-'
    assert not [o for o in outcome.offers if o.offer_id.startswith(("cpu_", "Standard_A1_v2"))]


# --------------------------------------------------------------------------------------------
# The recorded excerpts, over HTTP at SkyPilot's published layout


def test_the_published_catalog_is_read_per_cloud_over_http():
    outcome, routes = fetch_recorded(SkyPilotProvider)
    assert outcome.status == "ok", outcome.error
    offers = by_key(outcome.offers)
    assert {o.provider for o in outcome.offers} == {"gcp", "azure", "lambda", "vast"}
    # Last-Modified: Wed, 20 May 2026 06:00:00 GMT dates every cloud's snapshot
    when = datetime(2026, 5, 20, 6, tzinfo=timezone.utc)
    assert outcome.provider_sources["gcp"] == (
        f"SkyPilot catalog of 2026-05-20 (gcp/vms.csv at {PUBLISHED_CATALOG}; dated by its Last-Modified header)", when)
    assert {o.dated_by for o in outcome.offers} == {"published"}
    assert all(o.fetched_at == when for o in outcome.offers)
    # clouds the catalog does not have (404) are neither offers nor failures
    assert outcome.provider_errors == {}
    # a3-megagpu-8g (A3 Mega): 1,800 Gb/s GPUDirect-TCPXO between nodes, capacity a stated assumption
    mega = offers[("gcp", "a3-megagpu-8g/us-central1-a")]
    assert (mega.fabric, mega.fabric_gbps, mega.nodes_available) == ("ethernet", 1800, 8)
    assert "assumed: 8 nodes" in mega.extra["nodes_available_basis"]


def test_catalog_quirks_in_the_recorded_excerpts():
    outcome, _ = fetch_recorded(SkyPilotProvider)
    offers = by_key(outcome.offers)
    skipped = dict(outcome.skipped)
    # TPU rows are counted, not offered; CPU-only rows are neither
    assert "gcp: 3 TPU rows" in skipped  # grep -c ',tpu-' fixtures/skypilot/gcp_vms.csv
    assert not [k for k in offers if "e2-standard" in k[1] or "Standard_D2s_v3" in k[1] or "cpu_" in k[1]]
    # a4-highgpu-8g,224.0,3968.0,,,,us-central1,us-central1-b,0.0,0.0: a zero host price is unknown
    assert "usable price" in skipped["B200x8/us-central1-b"]
    # A100 x16 needs an a2-megagpu-16g host, absent from the zone
    assert "no host VM for 16 x A100" in skipped["A100x16/us-central1-a"]
    # ,,,H100-MEGA,8,...,asia-northeast3-a,35.39149,   but the catalog has no a3-megagpu-8g host
    # in that zone: SkyPilot would not list it either
    assert "no host VM for 8 x H100-MEGA" in skipped["H100-MEGAx8/asia-northeast3-a"]
    # azure: the fractional A10 (0.167) and the MI25 size rentopt has no table entry for
    assert "fractional" in skipped["Standard_NV6ads_A10_v5/eastus"]
    assert "not in rentopt's Azure N-series table" in skipped["Standard_NV4as_v4/eastus"]
    # Standard_NC12s_v3,V100,2,12,224,V100,8.468,,jioindiawest,V1,V2 (11 fields, empty spot)
    nc = offers[("azure", "Standard_NC12s_v3/jioindiawest")]
    assert hour(nc) == D("8.468") and ("azure", "Standard_NC12s_v3/jioindiawest/spot") not in offers
    # lambda: suffixes decide SXM vs PCIe; gpu_1x_a100 is Lambda's "A100 (40 GB PCIe)", gpu_8x_a100 its SXM4
    assert offers[("lambda", "gpu_1x_a100/us-east-1")].gpu == "A100-PCIe-40GB"
    assert offers[("lambda", "gpu_8x_a100/us-east-1")].gpu == "A100-SXM4-40GB"
    assert offers[("lambda", "gpu_1x_h100_pcie/us-east-1")].gpu == "H100-PCIe-80GB"
    assert offers[("lambda", "gpu_1x_rtx6000/us-east-1")].gpu == "Quadro-RTX-6000-24GB"
    # Lambda's 8x V100 does not say SXM2 or PCIe: kept, GPU unknown, never guessed
    v100 = offers[("lambda", "gpu_8x_v100/us-east-1")]
    assert (v100.gpu, v100.gpu_memory_gb) == (None, 16.0)
    # vast: ", CA, NA" has no city; a bare "H200" is the SXM card by the Vast plugin's rule (Vast
    # spells out "H200 NVL"), as the Vast plugin reads it; 4070S Ti is not in the catalog
    assert any(k[1].endswith("/CA, NA") for k in offers if k[0] == "vast")
    h200 = [o for o in outcome.offers if o.gpu_raw == "H200"]
    assert h200 and {o.gpu for o in h200} == {"H200-SXM-141GB"} and {o.interconnect for o in h200 if o.gpus > 1} <= {"nvlink"}
    assert "RTX 4070S Ti" in outcome.unknown_gpus
    # Vast gives the memory of all the row's GPUs: 4x-RTX_4070S_Ti ... 'SizeInMiB': 65504 is 4 x 16 GB,
    # 2x-A100_SXM4 with 163840 MiB two 80 GB cards, with 81920 MiB two 40 GB ones
    ti = next(o for o in outcome.offers if o.gpu_raw == "RTX 4070S Ti")
    assert ti.gpus == 4 and ti.gpu_memory_gb == round(65504 / 4 / 1024, 1) == 16.0
    two = sorted(o.gpu for o in outcome.offers if o.offer_id.startswith("2x-A100_SXM4"))
    assert two == ["A100-SXM4-40GB", "A100-SXM4-80GB"]
    # storage and egress come from each cloud's published pages; the marketplace's stay unknown
    gcp = offers[("gcp", "a2-highgpu-1g/us-central1-a")]
    assert gcp.storage_gb_month == (D("0.100") / D("1.073741824")).quantize(D("0.000001"))
    assert gcp.egress_gb == (D("0.12") / D("1.073741824")).quantize(D("0.000001"))
    vast = next(o for o in outcome.offers if o.provider == "vast")
    assert vast.storage_gb_month is None and vast.egress_gb is None


def ctx() -> FetchContext:
    return FetchContext(SkyPilotProvider(), client=None)  # type: ignore[arg-type]


WHEN = datetime(2026, 5, 20, tzinfo=timezone.utc)
LAMBDA_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"


def test_an_empty_price_is_unknown_not_free():
    text = LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,,us-east-1,,0.5\ngpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-west-1,,\n"
    c = ctx()
    offers = by_key(parse_catalog(c, "lambda", text, fetched_at=WHEN, source="test"))
    assert ("lambda", "gpu_1x_a10/us-east-1") not in offers
    assert hour(offers[("lambda", "gpu_1x_a10/us-east-1/spot")]) == D("0.5")
    assert "unknown, not free" in dict(c.skipped)["gpu_1x_a10/us-east-1"]
    assert hour(offers[("lambda", "gpu_1x_a10/us-west-1")]) == D("1.29")


def test_azure_generation_v1_v2_is_joined_back():
    header, rows, bad = read_rows("a,b,Generation\n1,2,V1,V2\n3,4,V2\n5\n")
    assert header == ["a", "b", "Generation"]
    assert rows == [["1", "2", "V1,V2"], ["3", "4", "V2"]] and bad == 1


def test_a_cloud_file_without_the_v8_columns_fails_only_that_cloud(tmp_path, monkeypatch):
    (tmp_path / "lambda").mkdir()
    (tmp_path / "lambda" / "vms.csv").write_text(LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,\n")
    (tmp_path / "mystery").mkdir()
    (tmp_path / "mystery" / "vms.csv").write_text("Name,Cost\nbox,1\n")
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(tmp_path))
    outcome = fetch(SkyPilotProvider)
    assert outcome.status == "ok"
    assert "not a SkyPilot v8 catalog: it has no InstanceType, AcceleratorName, AcceleratorCount, Price, Region column" \
        in outcome.provider_errors["mystery"]
    assert {o.provider for o in outcome.offers} == {"lambda"}


def test_a_row_cut_short_is_not_read_and_the_complete_rows_are():
    # no final newline (yotta's file has none either) and the last row stops inside its fields
    text = LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,\ngpu_1x_a100,A100,1.0,30.0,200.0,1.2"
    c = ctx()
    offers = by_key(parse_catalog(c, "lambda", text, fetched_at=WHEN, source="test"))
    assert list(offers) == [("lambda", "gpu_1x_a10/us-east-1")]
    assert dict(c.skipped)["lambda: 1 rows"] == "wrong number of fields"


def test_an_unreachable_catalog_fails_the_plugin_as_a_whole():
    with respx.mock(assert_all_called=False) as router:
        router.route(url__startswith=PUBLISHED_CATALOG).mock(side_effect=httpx.ConnectError("offline"))
        outcome = fetch(SkyPilotProvider)
    assert outcome.status == "failed" and "connection failed" in outcome.error


def test_a_missing_directory_is_a_clear_failure(monkeypatch, tmp_path):
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(tmp_path / "nope"))
    outcome = fetch(SkyPilotProvider)
    assert outcome.status == "failed" and "no such directory" in outcome.error


def test_where_the_catalog_is_read_from(monkeypatch, tmp_path):
    assert SkyPilotProvider().base_url() == PUBLISHED_CATALOG
    local = tmp_path / "sky"
    local.mkdir()
    monkeypatch.setattr(skypilot, "LOCAL_CATALOG", local)
    assert SkyPilotProvider().base_url() == str(local)
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", "https://mirror.example/v8/")
    assert SkyPilotProvider().base_url() == "https://mirror.example/v8"


# --------------------------------------------------------------------------------------------
# A price's date is the date its publisher read it: one test per rule, in the order they apply


def _catalog(folder: Path, text: str = "x") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vms.csv").write_text(text)
    return folder / "vms.csv"


def test_dating_rule_1_a_date_named_folder(tmp_path):
    path = _catalog(tmp_path / "2026-04-19" / "gcp")
    os.utime(path, (1e9, 1e9))  # a file time that must not be used
    date = catalog_date(path)
    assert (date.when, date.dated_by, date.how) == (datetime(2026, 4, 19, tzinfo=timezone.utc), "published", "folder name")


def _git(repo: Path, *args: str, when: str | None = None) -> None:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.org"}
    if when:
        env |= {"GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def test_dating_rule_2_the_git_commit_of_the_files_last_change(tmp_path):
    repo = tmp_path / "catalog"
    path = _catalog(repo / "catalogs" / "v8" / "gcp", "first")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "gcp", when="2026-04-20T06:00:00+00:00")
    (repo / "README").write_text("a later commit that leaves gcp alone")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "other", when="2026-05-20T06:00:00+00:00")
    os.utime(path, (2e9, 2e9))  # a copy's file time (2033): not the date
    date = catalog_date(path)
    assert (date.when, date.dated_by) == (datetime(2026, 4, 20, 6, tzinfo=timezone.utc), "published")
    assert date.how.startswith("git commit ") and "last change" in date.how
    # edited since its commit: that commit no longer dates it, its file time does
    path.write_text("edited")
    os.utime(path, (datetime(2026, 6, 1, tzinfo=timezone.utc).timestamp(),) * 2)
    assert catalog_date(path).dated_by == "file-time"


def test_dating_rule_3_the_file_time_said_as_such(tmp_path):
    path = _catalog(tmp_path / "v8" / "gcp")
    stamp = datetime(2026, 3, 1, 12, tzinfo=timezone.utc).timestamp()
    os.utime(path, (stamp, stamp))
    date = catalog_date(path)
    assert (date.when, date.dated_by) == (datetime(2026, 3, 1, 12, tzinfo=timezone.utc), "file-time")
    assert "dated by file time" in skypilot.describe_source("gcp", str(tmp_path), date)


def test_dating_rule_4_no_date_is_unknown_never_today(tmp_path):
    from rentopt.optimizer.models import UNKNOWN_DATE

    # over HTTP with no Last-Modified and no GitHub repository behind it: unknown
    text = LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,\n"
    with respx.mock(assert_all_called=False) as router:
        router.route(url__regex=r"https://mirror\.example/v8/lambda/vms\.csv").mock(
            return_value=httpx.Response(200, text=text))
        router.route(url__startswith="https://mirror.example/").mock(return_value=httpx.Response(404))
        os.environ["RENTOPT_SKYPILOT_CATALOG"] = "https://mirror.example/v8"
        try:
            outcome = fetch(SkyPilotProvider)
        finally:
            del os.environ["RENTOPT_SKYPILOT_CATALOG"]
    assert outcome.status == "ok", outcome.error
    (offer,) = outcome.offers
    assert (offer.dated_by, offer.fetched_at) == ("unknown", UNKNOWN_DATE)
    assert offer.fetched_at.date() != datetime.now(timezone.utc).date()
    assert "date unknown" in offer.source


def test_dating_rule_5_a_file_time_in_the_future_is_no_date(tmp_path):
    path = _catalog(tmp_path / "v8" / "gcp")
    future = datetime(2099, 1, 1, tzinfo=timezone.utc).timestamp()
    os.utime(path, (future, future))
    assert catalog_date(path).dated_by == "unknown"


def test_a_file_in_githubs_repository_is_dated_by_its_last_commit():
    """SkyPilot publishes its catalog from a GitHub repository, whose raw files carry no
    Last-Modified: the date is the commit of the file's last change (GitHub's commits API)."""
    text = LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,\n"
    commits = [{"sha": "4c06102aa1b2c3d4e5f60718293a4b5c6d7e8f90",
                "commit": {"committer": {"name": "GitHub", "date": "2026-05-07T06:12:00Z"}}}]
    with respx.mock(assert_all_called=False) as router:
        router.get(f"{PUBLISHED_CATALOG}/lambda/vms.csv").mock(return_value=httpx.Response(200, text=text))
        api = router.get("https://api.github.com/repos/skypilot-org/skypilot-catalog/commits").mock(
            return_value=httpx.Response(200, json=commits))
        router.route(url__startswith=PUBLISHED_CATALOG).mock(return_value=httpx.Response(404))
        outcome = fetch(SkyPilotProvider)
    assert outcome.status == "ok", outcome.error
    assert dict(api.calls.last.request.url.params) == {"path": "catalogs/v8/lambda/vms.csv", "sha": "master", "per_page": "1"}
    (offer,) = outcome.offers
    assert (offer.fetched_at, offer.dated_by) == (datetime(2026, 5, 7, 6, 12, tzinfo=timezone.utc), "published")
    assert "git commit 4c06102" in offer.source


def test_offers_name_their_cloud_and_refresh_names_the_plugin(monkeypatch, tmp_path):
    (tmp_path / "lambda").mkdir()
    (tmp_path / "lambda" / "vms.csv").write_text(LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,\n")
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(tmp_path))
    result = CliRunner().invoke(cli, ["refresh", "--providers", "skypilot"])
    assert result.exit_code == 0, result.output
    listing = CliRunner().invoke(cli, ["offers", "--provider", "lambda", "--format", "json"])
    assert listing.exit_code == 0, listing.output
    assert '"provider": "lambda"' in listing.stdout and '"offer_id": "gpu_1x_a10/us-east-1"' in listing.stdout


def test_a_host_size_every_row_shares_is_a_placeholder_not_a_measurement():
    # fixtures/skypilot/vast_vms.csv: all 11 rows say vCPUs 32, MemoryGiB 64.0, from 1 to 8 GPUs
    outcome, _ = fetch_recorded(SkyPilotProvider)
    vast = [o for o in outcome.offers if o.provider == "vast"]
    assert vast and all(o.host_ram_gb is None for o in vast)
    assert "placeholder" in vast[0].extra["host_size"]
    # lambda's sizes differ per row: real, kept (gpu_8x_a100,A100,8.0,124.0,1800.0,...: 1800 GiB = 1932.7 GB)
    a100 = [o for o in outcome.offers if o.provider == "lambda" and o.offer_id.startswith("gpu_8x_a100/")]
    assert a100 and {o.host_ram_gb for o in a100} == {1932.7}


def test_a_spot_price_not_below_on_demand_is_no_spot_offer():
    text = LAMBDA_HEADER + ("gpu_8x_h100_sxm5,H100,8.0,208.0,1800.0,30.0,us-east-1,,30.0\n"
                            "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,0.4\n")
    c = ctx()
    offers = by_key(parse_catalog(c, "lambda", text, fetched_at=WHEN, source="test"))
    assert ("lambda", "gpu_8x_h100_sxm5/us-east-1/spot") not in offers
    assert ("lambda", "gpu_8x_h100_sxm5/us-east-1") in offers
    assert "not below the on-demand 30.0" in dict(c.skipped)["gpu_8x_h100_sxm5/us-east-1/spot"]
    assert hour(offers[("lambda", "gpu_1x_a10/us-east-1/spot")]) == D("0.4")


def test_a_copy_dated_only_by_its_file_time_never_replaces_prices_of_a_known_date(monkeypatch, tmp_path):
    """A copy of a catalog in a folder not named by its date is dated by its file time (today,
    for a fresh copy): it must not replace the stored prices whose date the folder gave."""
    dated = _catalog(tmp_path / "2026-05-20" / "lambda", LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,1.29,us-east-1,,\n")
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(dated.parent.parent))
    assert CliRunner().invoke(cli, ["refresh", "--providers", "skypilot"]).exit_code == 0
    copy = _catalog(tmp_path / "copy" / "lambda", LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,0.99,us-east-1,,\n")
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(copy.parent.parent))
    result = CliRunner().invoke(cli, ["refresh", "--providers", "skypilot"])
    assert "skypilot/lambda: not stored: kept the stored prices of 2026-05-20 00:00 UTC" in result.output, result.output
    assert "dated by file time" in result.output and "its date is weaker" in result.output
    with open_readonly(store_path()) as store:
        (state,) = [s for s in store.providers() if s.name == "lambda"]
        (kept,) = store.load_offers(OfferQuery(providers=("lambda",)))
    assert (state.fetched_at, state.dated_by, hour(kept)) == (WHEN, "published", D("1.29"))
    # an older dated catalog does not replace a newer one either
    older = _catalog(tmp_path / "2026-04-01" / "lambda", LAMBDA_HEADER + "gpu_1x_a10,A10,1.0,30.0,200.0,0.5,us-east-1,,\n")
    monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", str(older.parent.parent))
    result = CliRunner().invoke(cli, ["refresh", "--providers", "skypilot"])
    assert "not stored" in result.output and "they are older" in result.output
