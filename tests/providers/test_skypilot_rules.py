"""The SkyPilot parser's pricing rules, guarded on catalog rows written here (the columns and
values of SkyPilot's v8 vms.csv files); expected prices are added up by hand from those rows.
tools/mutate.py breaks each rule and checks that a test here notices."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from rentopt.providers.base import FetchContext
from rentopt.providers.skypilot import SkyPilotProvider, parse_catalog

D = Decimal
WHEN = datetime(2026, 5, 20, tzinfo=timezone.utc)
GCP_HEADER = "InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice\n"
T4_INFO = "\"{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]}\""
A100_INFO = "\"{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]}\""


def parse(cloud: str, text: str) -> tuple[dict, dict]:
    ctx = FetchContext(SkyPilotProvider(), client=None)  # type: ignore[arg-type]
    offers = parse_catalog(ctx, cloud, text, fetched_at=WHEN, source="test")
    return {o.offer_id: o for o in offers}, dict(ctx.skipped)


def hourly(offer) -> Decimal:
    (option,) = offer.price_options
    return option.amount


def test_a_gcp_gpu_is_priced_with_the_cheapest_host_vm_that_can_carry_it():
    # SkyPilot's pairing (sky/catalog/gcp_catalog.py): one T4 goes on an N1 VM with >= 4 vCPUs and
    # 4 GiB per vCPU (16 GiB). n1-standard-4 has only 15 GiB; n1-highmem-4 (26 GiB, 0.2368) is the
    # cheapest that qualifies, cheaper than n1-standard-8 (0.38). An A100 goes on its own a2 family.
    text = GCP_HEADER + "\n".join([
        "n1-standard-4,4.0,15.0,,,,us-central1,us-central1-a,0.19,0.04",
        "n1-highmem-4,4.0,26.0,,,,us-central1,us-central1-a,0.2368,0.05",
        "n1-standard-8,8.0,30.0,,,,us-central1,us-central1-a,0.38,0.13954",
        "a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.36975",
        f",,,T4,1,{T4_INFO},us-central1,us-central1-a,0.35,0.1654",
        f",,,A100,1,{A100_INFO},us-central1,us-central1-a,2.93391,1.4341",
    ]) + "\n"
    offers, _ = parse("gcp", text)
    t4 = offers["n1-highmem-4+1xT4/us-central1-a"]
    assert hourly(t4) == D("0.35") + D("0.2368") == D("0.5868")
    assert hourly(offers["n1-highmem-4+1xT4/us-central1-a/spot"]) == D("0.1654") + D("0.05")
    assert hourly(offers["a2-highgpu-1g/us-central1-a"]) == D("2.93391") + D("0.73948") == D("3.67339")
    assert hourly(offers["a2-highgpu-1g/us-central1-a/spot"]) == D("1.4341") + D("0.36975")


def test_a_fractional_gpu_row_is_not_planned_as_a_whole_gpu():
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
    whole = "".join(f"gpu_{n}x_a10,A10,{n}.0,30.0,200.0,{n * 1.29:.2f},us-east-1,,\n" for n in (1, 2, 4))
    # (enough whole rows that the file is not taken for a changed format: most rows must be usable)
    text = header + "gpu_half_a10,A10,0.5,15.0,100.0,0.60,us-east-1,,\ngpu_x_a10,A10,1.5,45.0,300.0,1.80,us-east-1,,\n" + whole
    offers, skipped = parse("lambda", text)
    assert sorted(offers) == ["gpu_1x_a10/us-east-1", "gpu_2x_a10/us-east-1", "gpu_4x_a10/us-east-1"]
    assert "fractional GPU" in skipped["gpu_half_a10/us-east-1"]
    assert "fractional GPU" in skipped["gpu_x_a10/us-east-1"]
