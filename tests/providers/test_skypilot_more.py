"""The nine clouds of SkyPilot's own catalog repository (skypilot-org/skypilot-catalog,
catalogs/v8/<cloud>/vms.csv) that rentopt reads besides gcp, azure, aws, lambda and vast.

fixtures/skypilot/more/ is a byte-for-byte copy of /work/shared/catalogs/skypilot-v8-more/ (its
SOURCES.md gives each file's commit and sha256), so these tests run in any clone. Expected
values are read by hand from the rows quoted next to each assertion, never from the plugin.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from rentopt.providers.base import FetchContext
from rentopt.providers.skypilot import SkyPilotProvider, parse_catalog

MORE = Path(__file__).resolve().parents[2] / "fixtures" / "skypilot" / "more"
CLOUDS = ("verda", "nebius", "hyperstack", "jarvislabs", "lium", "mithril", "seeweb", "yotta", "hyperbolic")
WHEN = datetime(2026, 5, 20, tzinfo=timezone.utc)
D = Decimal


def parsed(cloud: str):
    ctx = FetchContext(SkyPilotProvider(), client=None)  # type: ignore[arg-type]
    text = (MORE / cloud / "vms.csv").read_text(encoding="utf-8")
    offers = parse_catalog(ctx, cloud, text, fetched_at=WHEN, source=f"test {cloud}")
    return {o.offer_id: o for o in offers}, ctx


def hour(offer) -> Decimal:
    (option,) = offer.price_options
    return option.amount


def test_the_committed_copies_are_the_published_files():
    """SOURCES.md's sha256 of each file: the fixtures are the published bytes, CRLF and all."""
    table = (MORE / "SOURCES.md").read_text(encoding="utf-8")
    for cloud in CLOUDS:
        row = next(line for line in table.splitlines() if line.startswith(f"| {cloud} |"))
        digest = row.strip("| ").split(" | ")[-1]
        assert hashlib.sha256((MORE / cloud / "vms.csv").read_bytes()).hexdigest() == digest, cloud


@pytest.mark.parametrize("cloud", CLOUDS)
def test_every_cloud_is_read(cloud):
    offers, ctx = parsed(cloud)
    assert offers, cloud
    assert {o.provider for o in offers.values()} == {cloud}
    assert all(o.currency == "USD" and hour(o) > 0 for o in offers.values())
    # every GPU row of the file is an offer, a counted skip, or both (spot rows): none vanishes
    text = (MORE / cloud / "vms.csv").read_text(encoding="utf-8")
    gpu_rows = sum(1 for line in text.splitlines()[1:] if line.split(",")[1 if cloud != "verda" else 4] not in ("", "0"))
    on_demand = {k for k, o in offers.items() if not o.spot}
    assert len(on_demand) + sum(1 for row, _ in ctx.skipped if not row.endswith("/spot")) == gpu_rows


def test_mithril_counted_by_hand():
    # 7 GPU rows, each with Price == SpotPrice (e.g. `a100-80gb.sxm.1x,A100,1,26,190,0.01,0.01,...`):
    # 7 on-demand offers and no spot offer, since a "spot" price that is not below on-demand is none
    offers, ctx = parsed("mithril")
    assert len(offers) == 7 and not [o for o in offers.values() if o.spot]
    assert sum(1 for row, why in ctx.skipped if row.endswith("/spot") and "not below the on-demand" in why) == 7
    a100 = offers["a100-80gb.sxm.1x/us-central3-a"]
    assert (hour(a100), a100.gpu, a100.gpus, a100.interconnect) == (D("0.01"), "A100-SXM4-80GB", 1, "nvlink")
    b200 = offers["neb-b200.sxm.8x/us-central5-a"]
    assert (hour(b200), b200.gpu, b200.gpus) == (D("0.08"), "B200-SXM-180GB", 8)


def test_yotta_counted_by_hand_and_its_last_row_read_without_a_final_newline():
    # 8 rows, SpotPrice empty in each, no newline after the last:
    # 8x240v920g_NVIDIA_GeForce_RTX_5090_32G_SECURE,RTX5090,8.0,240.0,920.0,"{...}",us-central-2,,5.2
    raw = (MORE / "yotta" / "vms.csv").read_bytes()
    assert not raw.endswith(b"\n")
    offers, ctx = parsed("yotta")
    assert len(offers) == 8 and not ctx.skipped
    last = offers["8x240v920g_NVIDIA_GeForce_RTX_5090_32G_SECURE/us-central-2"]
    assert (hour(last), last.gpu, last.gpus) == (D("5.2"), "RTX-5090-32GB", 8)
    assert last.host_ram_gb == round(920 * 1.073741824, 1)  # MemoryGiB 920, a real size per row


def test_hyperbolic_counted_by_hand():
    # 1x-H100-75-722 ... 1.29 ; 2x-H100-149-1443 ... 2.58 ; 3x-H100-224-2165 ... 3.87, Region "default"
    offers, _ = parsed("hyperbolic")
    assert {k: hour(o) for k, o in offers.items()} == {
        "1x-H100-75-722/default": D("1.29"), "2x-H100-149-1443/default": D("2.58"), "3x-H100-224-2165/default": D("3.87")}


def test_verda_gpu_info_is_json_and_its_memory_is_the_rows_total():
    # 2B300.60V,...,B300,2.0,"{""Gpus"": [{""Name"": ""B300"", ""Count"": 2, ""MemoryInfo"": {""SizeInMiB"": 537600}}], ...}",FIN-03,9.9,2.48
    offers, _ = parsed("verda")
    b300 = offers["2B300.60V/FIN-03"]
    assert (b300.gpu, b300.gpus, hour(b300)) == ("B300-SXM-288GB", 2, D("9.9"))
    assert hour(offers["2B300.60V/FIN-03/spot"]) == D("2.48")
    # 8V100.48V says 131072 MiB: 8 x 16 GiB (Verda's API: "8x NVidia Tesla V100", 128 GB in all),
    # not eight 128 GiB cards; the V100's board (SXM2 or PCIe) is not in the row, so it stays unknown
    v100 = next(o for k, o in offers.items() if k.startswith("8V100.48V/") and not o.spot)
    assert (v100.gpu, v100.gpu_memory_gb) == (None, 16.0)


# One case per spelling met in the nine files: (cloud, offer id, GPU id, how it was matched).
SPELLINGS = [
    ("hyperbolic", "1x-H100-75-722/default", "H100-SXM-80GB", "exact"),  # GpuInfo Name NVIDIA-H100-80GB-HBM3
    ("hyperstack", "n3-A100x1/CANADA-1", "A100-PCIe-80GB", "exact"),  # A100-80G-PCIe
    ("hyperstack", "n3-H100x1/CANADA-1", "H100-PCIe-80GB", "exact"),  # H100-80G-PCIe
    ("hyperstack", "n3-H100-SXM5x8/CANADA-1", "H100-SXM-80GB", "exact"),  # H100-80G-SXM5
    ("hyperstack", "n3-RTX-A4000x1/NORWAY-1", "RTX-A4000-16GB", "exact"),
    ("hyperstack", "n3-RTX-A6000x1/CANADA-1", "RTX-A6000-48GB", "exact"),
    ("hyperstack", "n3-L40x1/CANADA-1", "L40-48GB", "exact"),
    ("jarvislabs", "1x_L4_28V_124G/IN2", "L4-24GB", "exact"),
    ("jarvislabs", "1x_H100_24V_200G/IN2", "H100-SXM-80GB", "default"),  # bare H100, read as SkyPilot does
    ("jarvislabs", "1x_H200_28V_300G/IN2", "H200-SXM-141GB", "default"),
    ("jarvislabs", "1x_A100-80GB_28V_112G/IN2", "A100-SXM4-80GB", "default"),
    ("jarvislabs", "1x_RTXPRO6000_28V_160G/IN1", None, "ambiguous"),  # Server, Workstation or Max-Q
    ("lium", "H100-SXM_8x/RU", "H100-SXM-80GB", "exact"),
    ("lium", "RTX3090_1x/US", "RTX-3090-24GB", "exact"),
    ("lium", "RTX4090_1x/UA", "RTX-4090-24GB", "exact"),
    ("lium", "RTX5090_1x/US", "RTX-5090-32GB", "exact"),
    ("lium", "RTX6000-Ada_1x/GR", "RTX-6000-Ada-48GB", "exact"),
    ("lium", "RTXPRO6000-WK_1x/RO", None, "unknown"),
    ("lium", "B300_1x/FI", "B300-SXM-288GB", "exact"),
    ("lium", "L40S_2x/US", "L40S-48GB", "exact"),
    ("mithril", "h100-80gb.sxm.8x/us-central2-a", "H100-SXM-80GB", "by_memory"),  # "sxm" in the type
    ("mithril", "h200.8x/us-central2-b", "H200-SXM-141GB", "default"),
    ("nebius", "gpu-h200-sxm_8gpu-128vcpu-1600gb/eu-north1", "H200-SXM-141GB", "by_memory"),
    ("nebius", "gpu-b200-sxm_8gpu-160vcpu-1792gb/us-central1", "B200-SXM-180GB", "exact"),
    ("nebius", "gpu-l40s-a_1gpu-8vcpu-32gb/eu-north1", "L40S-48GB", "exact"),
    ("seeweb", "ECS1GPU/it-fr2", "Quadro-RTX-6000-24GB", "by_memory"),  # RTX6000 with 24576 MiB
    ("seeweb", "ECS1GPU11/it-fr2", "A30-24GB", "exact"),
    ("seeweb", "ECS1GPU2/it-fr2", "RTX-A6000-48GB", "exact"),  # RTXA6000
    ("seeweb", "ECS1GPU12", None, "ambiguous"),  # "RTX PRO 6000 96GB", no region given
    ("verda", "1H100.80S.30V/FIN-03", "H100-SXM-80GB", "by_memory"),  # .80S.: SXM, Verda's own naming
    ("verda", "1A100.40S.22V/FIN-03", "A100-SXM4-40GB", "by_memory"),  # A100-40GB
    ("verda", "2A100.44V/FIN-01", "A100-SXM4-80GB", "by_memory"),  # A100-80GB-160GB: the row's total cut off
    ("verda", "1RTX6000ADA.10V/FIN-01", "RTX-6000-Ada-48GB", "exact"),  # RTX-6000-Ada
    ("verda", "1A6000.10V/FIN-01", "RTX-A6000-48GB", "exact"),  # RTX-A6000
    ("verda", "1RTXPRO6000.30V/FIN-03", None, "ambiguous"),  # RTX-PRO-6000
    ("yotta", "1x14v119g_NVIDIA_GeForce_RTX_5090_32G_SECURE/us-east-2", "RTX-5090-32GB", "exact"),
]


@pytest.mark.parametrize(("cloud", "offer_id", "gpu", "status"), SPELLINGS, ids=[f"{c}:{i}" for c, i, _, _ in SPELLINGS])
def test_each_spelling(cloud, offer_id, gpu, status):
    offers, ctx = parsed(cloud)
    if offer_id not in offers:  # ids carry the row's region: show what there is to fix the case
        pytest.fail(f"{offer_id} not among {sorted(k for k in offers if k.split('/')[0] == offer_id.split('/')[0])}")
    offer = offers[offer_id]
    assert (offer.gpu, offer.gpu_status) == (gpu, status)
    if gpu is None:
        assert offer.gpu_raw in ctx.unknown_gpus


def test_pcie_cards_with_nvlink_bridges_are_pcie_between_pairs():
    # n3-H100x8-NVLink,H100-80G-PCIe-NVLink,8,...: PCIe cards bridged in pairs, not an NVLink switch
    offers, _ = parsed("hyperstack")
    bridged = next(o for k, o in offers.items() if k.startswith("n3-H100x8-NVLink/"))
    assert (bridged.gpu, bridged.interconnect) == ("H100-PCIe-80GB", "pcie")
    assert "pairs" in bridged.extra["nvlink_bridge"]


def test_a_bare_name_read_by_default_keeps_an_unknown_link():
    # jarvislabs 8x_H100_192V_1600G: "H100" says nothing of the board, so nothing of NVLink
    offers, _ = parsed("jarvislabs")
    h100 = next(o for k, o in offers.items() if k.startswith("8x_H100_"))
    assert (h100.gpu_status, h100.interconnect) == ("default", "unknown")


def test_rows_without_a_region_keep_distinct_ids():
    # seeweb: ECS8GPU10,H200,8,255,2048.0,20.8,,"{...}",  -- an empty Region
    offers, _ = parsed("seeweb")
    assert hour(offers["ECS8GPU10"]) == D("20.8") and offers["ECS8GPU10"].region in (None, "")
    assert not [k for k in offers if k.endswith("/")]


def test_the_nine_clouds_say_where_their_prices_come_from():
    offers, _ = parsed("nebius")
    assert re.search(r"storage and traffic prices not published", next(iter(offers.values())).extra["prices_source"])


# --------------------------------------------------------------------------------------------
# `rentopt refresh` over the network: every cloud SkyPilot publishes, from a loopback server


AWS_CSV = (  # SkyPilot's aws columns (v8); p5.48xlarge at 55.04 USD/h: the recorded AWS price list (fixtures/aws, us-east-1)
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone\n"
    "p5.48xlarge,H100,8,192,2048,\"{'Gpus': [{'Name': 'H100', 'Manufacturer': 'NVIDIA', 'Count': 8, "
    "'MemoryInfo': {'SizeInMiB': 81920}}], 'TotalGpuMemoryInMiB': 655360}\",55.04,,us-east-1,us-east-1a\n")
RUNPOD_CSV = (  # SkyPilot's runpod columns; RTX 4090 secure 0.59 USD/h: the recorded RunPod gpuTypes (fixtures/runpod)
    "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,SpotPrice,Price,AvailabilityZone\n"
    "1x_RTX4090_SECURE,RTX4090,1,6,41,\"{'Gpus': [{'Name': 'RTX4090', 'Manufacturer': 'NVIDIA', 'Count': 1, "
    "'MemoryInfo': {'SizeInMiB': 24576}}], 'TotalGpuMemoryInMiB': 24576}\",CA,,0.59,CA-MTL-1\n")


def test_refresh_over_the_network_reads_every_cloud_skypilot_publishes(monkeypatch, rentopt_home):
    import json as _json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from click.testing import CliRunner

    from rentopt.optimizer.cli import cli
    from rentopt.providers import skypilot

    files = {f"/catalogs/v8/{c}/vms.csv": (MORE / c / "vms.csv").read_bytes() for c in CLOUDS}
    files["/catalogs/v8/aws/vms.csv"] = AWS_CSV.encode()
    files["/catalogs/v8/runpod/vms.csv"] = RUNPOD_CSV.encode()
    asked: list[str] = []

    class Catalog(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            asked.append(self.path)
            body = files.get(self.path)
            self.send_response(200 if body is not None else 404)
            if self.path.endswith(("/aws/vms.csv", "/runpod/vms.csv")):
                self.send_header("Last-Modified", "Wed, 20 May 2026 06:00:00 GMT")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Catalog)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("RENTOPT_SKYPILOT_CATALOG", f"http://127.0.0.1:{server.server_address[1]}/catalogs/v8")
        result = CliRunner().invoke(cli, ["refresh", "--providers", "skypilot", "--format", "json"])
    finally:
        server.shutdown()
        server.server_close()
    assert {p.split("/")[3] for p in asked} == set(skypilot.URL_CLOUDS)  # every published cloud asked, once each
    assert len(asked) == len(skypilot.URL_CLOUDS)
    report = _json.loads(result.stdout)
    rows = {r["provider"]: r for r in report["providers"]}
    assert set(rows) == {*CLOUDS, "aws", "runpod"} and {r["status"] for r in rows.values()} == {"ok"}
    assert (rows["aws"]["offers"], rows["runpod"]["offers"]) == (1, 1)
    assert rows["aws"]["dated_by"] == "published" and rows["verda"]["dated_by"] == "unknown"
    # counts per cloud, not the plugin's totals: mithril's 7 spot rows at the on-demand price are
    # its skips; verda's unknown names are its own (RTX-PRO-6000, Tesla-V100: see SPELLINGS)
    assert rows["mithril"]["skipped_rows"] == 7 and rows["yotta"]["skipped_rows"] == 0
    assert rows["verda"]["unknown_gpus"] == ["RTX-PRO-6000", "Tesla-V100"]
    assert rows["yotta"]["unknown_gpus"] == [] and rows["jarvislabs"]["unknown_gpus"] == ["RTXPRO6000"]
    assert {r["counts_are"] for r in rows.values()} == {"provider"}
