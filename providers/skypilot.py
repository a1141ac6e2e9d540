"""The SkyPilot catalog: published GPU prices for many clouds, one provider per cloud.

SkyPilot (github.com/skypilot-org/skypilot) rebuilds its catalog daily from each cloud's public
price API (sky/catalog/data_fetchers/) and publishes it as one CSV per cloud, schema v8:
`<base>/<cloud>/vms.csv`. Every SkyPilot user has a recent copy in `~/.sky/catalogs/v8/`. This
plugin ("skypilot") reads, in order of preference:

1. `RENTOPT_SKYPILOT_CATALOG`: a directory or a URL base laid out as `<cloud>/vms.csv`;
2. `~/.sky/catalogs/v8`, when it exists;
3. SkyPilot's published catalog, `PUBLISHED_CATALOG` (HTTP, through providers/base.py).

Each cloud found becomes its own provider (gcp, azure, aws, lambda, vast, runpod, ...). Its
snapshot is dated by the catalog, not by the refresh: a `YYYY-MM-DD` directory in the path
(`.../2026-05-20/gcp/vms.csv`), else the file's modification time (SkyPilot rewrites its copy
when it pulls a new one), else the HTTP `Last-Modified` header, else the fetch time.

The catalog's quirks, handled here (each checked on the published files of 2026-04 and -05):

- Columns differ per cloud: read by header. Prices are USD per hour per instance.
- An empty `Price` is unknown, never 0 (and 0 is unknown too: SkyPilot #3615). An empty or
  zero `SpotPrice` means no spot price (Vast writes `0.00`).
- GCP lists GPUs apart from their host VMs. A GPU row has an empty `InstanceType` and the price
  of that many GPUs in one zone; host rows have no accelerator. An instance costs host + GPUs,
  paired by SkyPilot's rule (sky/catalog/gcp_catalog.py, `_ACC_INSTANCE_TYPE_DICTS` and
  `list_accelerators`): A100, A100-80GB, H100, H100-MEGA, H200, B200 and L4 go only on their
  own families (a2-highgpu, a2-ultragpu, a3-highgpu, a3-megagpu, a3-ultragpu, a4-highgpu,
  g2-standard) with the count in the name; other GPUs (T4, V100, P100, P4) attach to an N1 VM
  with at least the vCPUs SkyPilot assigns that count (`_NUM_ACC_TO_NUM_CPU`) and 4 GiB per
  vCPU; the cheapest host priced in the same zone is used, spot with spot. Written anew here.
- Azure: about half the rows have `Generation` = `V1,V2` unquoted, so those lines have one
  field more than the header; the two last fields are joined back. Sizes come from the Azure
  plugin's N-series table (GPU model, NVLink, InfiniBand); fractional-GPU sizes (A10 at 1/6,
  1/3, 1/2) are skipped, as are sizes not in that table.
- TPUs (GCP `tpu-*`) are not GPUs: left out, counted once per cloud.
- Accelerator names are SkyPilot's (`A100-80GB`, `H100`, `RTX4090`, `RTXPRO6000WS`); SXM vs
  PCIe comes from the instance family (GCP a2/a3/a4 are SXM boards, Azure's tables, Lambda's
  `_sxm4`/`_pcie` suffixes, Vast's `H100_SXM`/`A100_PCIE` in the instance name), and the
  per-GPU memory from `GpuInfo` (`'SizeInMiB': ...`, a Python literal, read with a regex;
  Vast's is the total over the row's GPUs).
- Spot prices become separate offers (`<id>/spot`), like the Azure plugin's.
- The catalog has no storage or egress prices: those come from each cloud's published price
  pages (CLOUD_PRICES, each with its page and the date it was read).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from email.utils import parsedate_to_datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rentopt.optimizer.models import UNKNOWN_DATE, DateBasis, Interconnect, Offer, PriceOption, PriceUnit
from rentopt.optimizer.settings import settings
from rentopt.providers import multinode
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_decimal

CATALOG_ENV = "RENTOPT_SKYPILOT_CATALOG"
LOCAL_CATALOG = Path("~/.sky/catalogs/v8")
# SkyPilot's hosted catalog (sky/catalog/common.py, `_CATALOG_URL`-style constant in its code).
PUBLISHED_CATALOG = "https://raw.githubusercontent.com/skypilot-org/skypilot-catalog/master/catalogs/v8"
# Clouds looked for at a URL base (a directory is listed instead): every GPU cloud SkyPilot's v8
# catalog publishes (skypilot-org/skypilot-catalog, catalogs/v8/; azure and a few others kept for
# mirrors of older layouts: a 404 is a cloud the catalog lacks, never a failure).
# lambda first: a small file every v8 catalog has, asked alone to see whether the host answers.
URL_CLOUDS = ("lambda", "aws", "azure", "gcp", "runpod", "vast", "verda", "nebius", "hyperstack", "jarvislabs",
              "lium", "mithril", "seeweb", "yotta", "hyperbolic", "oci", "fluidstack", "cudo", "paperspace", "do",
              "shadeform", "primeintellect", "spheron", "daytona")
_DATE_DIR = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# GpuInfo is a Python literal in most clouds' files ('SizeInMiB') and JSON in verda's
# ("SizeInMiB"), and hyperstack's holds a JSON `null` no Python literal reader takes: read the two
# fields rentopt needs with patterns that accept either quote.
_MIB = re.compile(r"""["']SizeInMiB["']:\s*([\d.]+)""")
_GPU_NAME = re.compile(r"""["']Name["']:\s*["']([^"']+)["']""")
_GIB_PER_GB = Decimal("1.073741824")  # 1 GiB = 1.073741824 GB; per-GiB prices are divided by it

REQUIRED_COLUMNS = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "Region")


# --------------------------------------------------------------------------------------------
# What the catalog does not say: billing rules, storage and traffic prices per cloud


@dataclass(frozen=True)
class CloudPrices:
    """Storage and traffic prices of one cloud, USD, from its price pages, and its billing rules."""

    storage_gb_month: Decimal | None
    egress_gb: Decimal | None
    ingress_gb: Decimal | None
    billing: BillingRules
    source: str  # the pages and when they were read


def _per_gb(per_gib: str) -> Decimal:
    return (Decimal(per_gib) / _GIB_PER_GB).quantize(Decimal("0.000001"))


def _cloud_prices() -> dict[str, CloudPrices]:
    from rentopt.providers.aws import EGRESS_PER_GB as AWS_EGRESS, AwsProvider
    from rentopt.providers.azure import AzureProvider
    from rentopt.providers.lambdalabs import FILESYSTEM_GB_MONTH, TRANSFER_GB as LAMBDA_TRANSFER, LambdaProvider
    from rentopt.providers.runpod import STORAGE_RUNNING_GB_MONTH, TRANSFER_GB as RUNPOD_TRANSFER, RunpodProvider
    from rentopt.providers.vast import VastProvider

    return {
        # pd-balanced $0.100 per GiB-month and Premium Tier internet egress $0.12 per GiB (first
        # TiB, worldwide except China/Australia), US list prices; ingress free. Google bills
        # per GiB. Per-second billing, 1-minute minimum; a stopped VM pays for its disks.
        "gcp": CloudPrices(
            _per_gb("0.100"), _per_gb("0.12"), Decimal(0),
            BillingRules(granularity_s=1, minimum_s=60, stopped_pays="storage", month_hours=730,
                         source="https://cloud.google.com/compute/vm-instance-pricing (per second, 1 minute minimum)"),
            "https://cloud.google.com/compute/disks-image-pricing (pd-balanced, 2026) ; "
            "https://cloud.google.com/vpc/network-pricing (Premium Tier internet egress, 2026)"),
        # Premium SSD P30 (1 TiB) 135.17 USD/month in East US = 0.132 USD per GiB-month; internet
        # egress 0.087 USD/GB after the first 100 GB (Microsoft network, zone 1); ingress free.
        "azure": CloudPrices(
            _per_gb("0.132"), Decimal("0.087"), Decimal(0), AzureProvider.billing,
            "https://azure.microsoft.com/en-us/pricing/details/managed-disks/ (P30 LRS, East US, 2026) ; "
            "https://azure.microsoft.com/en-us/pricing/details/bandwidth/ (2026)"),
        # gp3 0.08 USD per GB-month (us-east-1); egress as the AWS plugin (its page and tier).
        "aws": CloudPrices(
            Decimal("0.08"), AWS_EGRESS, Decimal(0), AwsProvider.billing,
            "https://aws.amazon.com/ebs/pricing/ (gp3, us-east-1, 2026) ; https://aws.amazon.com/ec2/pricing/on-demand/"),
        "lambda": CloudPrices(FILESYSTEM_GB_MONTH, LAMBDA_TRANSFER, LAMBDA_TRANSFER, LambdaProvider.billing,
                              "https://docs.lambda.ai/public-cloud/billing"),
        "runpod": CloudPrices(STORAGE_RUNNING_GB_MONTH, RUNPOD_TRANSFER, RUNPOD_TRANSFER, RunpodProvider.billing,
                              "https://docs.runpod.io/pods/storage ; https://docs.runpod.io/accounts-billing/billing"),
        # A marketplace: every host sets its own disk and bandwidth prices, so there is no one
        # published figure. Unknown (the direct `vast` plugin reads them per offer).
        "vast": CloudPrices(None, None, None, VastProvider.billing, "https://vast.ai/pricing (per host; not in the catalog)"),
    }


UNKNOWN_CLOUD = CloudPrices(None, None, None, BillingRules(source="not published in the SkyPilot catalog"),
                            "storage and traffic prices not published in the catalog")


# --------------------------------------------------------------------------------------------
# Which GPU: per cloud, from SkyPilot's accelerator name and the instance family


@dataclass(frozen=True)
class Gpu:
    raw: str  # a spelling hardware.normalise knows (with `form` and the memory hint)
    form: str | None = None  # "SXM", "PCIe", "NVL"
    interconnect: Interconnect = "unknown"
    interconnect_gbps: float | None = None


# GCP: the accelerator optimised families are HGX boards (SXM, NVLink/NVSwitch); V100 on N1 is the
# SXM2 part with an NVLink ring at 300 GB/s; T4, P4, P100, L4 are PCIe
# (https://cloud.google.com/compute/docs/gpus, "NVIDIA GPU models" table).
GCP_GPUS = {
    "A100": Gpu("A100-SXM4-40GB", "SXM", "nvlink", 600),
    "A100-80GB": Gpu("A100-SXM4-80GB", "SXM", "nvlink", 600),
    "H100": Gpu("H100 SXM", "SXM", "nvlink", 900),
    "H100-MEGA": Gpu("H100 SXM", "SXM", "nvlink", 900),
    "H200": Gpu("H200 SXM", "SXM", "nvlink", 900),
    "B200": Gpu("B200", "SXM", "nvlink", 1800),
    "L4": Gpu("L4", None, "pcie"),
    "T4": Gpu("T4", None, "pcie"),
    "P4": Gpu("P4", None, "pcie"),
    "P100": Gpu("P100", None, "pcie"),
    "V100": Gpu("Tesla V100-SXM2-16GB", "SXM", "nvlink", 300),
}
# SkyPilot's pairing (sky/catalog/gcp_catalog.py `_ACC_INSTANCE_TYPE_DICTS`): GPU -> count -> hosts.
GCP_OWN_HOSTS = {
    "A100": {1: ("a2-highgpu-1g",), 2: ("a2-highgpu-2g",), 4: ("a2-highgpu-4g",), 8: ("a2-highgpu-8g",),
             16: ("a2-megagpu-16g",)},
    "A100-80GB": {1: ("a2-ultragpu-1g",), 2: ("a2-ultragpu-2g",), 4: ("a2-ultragpu-4g",), 8: ("a2-ultragpu-8g",)},
    "L4": {1: ("g2-standard-4", "g2-standard-8", "g2-standard-12", "g2-standard-16", "g2-standard-32"),
           2: ("g2-standard-24",), 4: ("g2-standard-48",), 8: ("g2-standard-96",)},
    "H100": {1: ("a3-highgpu-1g",), 2: ("a3-highgpu-2g",), 4: ("a3-highgpu-4g",), 8: ("a3-highgpu-8g",)},
    "H100-MEGA": {8: ("a3-megagpu-8g",)},
    "H200": {8: ("a3-ultragpu-8g",)},
    "B200": {8: ("a4-highgpu-8g",)},
}
# Other GPUs attach to N1 hosts with at least this many vCPUs (`_NUM_ACC_TO_NUM_CPU`) and 4 GiB
# of memory per vCPU (`_DEFAULT_GPU_MEMORY_CPU_RATIO`).
GCP_N1_FAMILIES = ("n1-standard", "n1-highmem", "n1-highcpu")
GCP_N1_CPUS = {
    "V100": {1: 8, 2: 16, 4: 32, 8: 64},
    "T4": {1: 4, 2: 8, 4: 48},
    "P100": {1: 8, 2: 16, 4: 32, 8: 64},
    "DEFAULT": {1: 8, 2: 16, 4: 32, 8: 64, 16: 128},
}
GCP_MEMORY_PER_CPU = 4

# Lambda: the GPU model token of the instance type, and the form factor when the name has no
# suffix: Lambda's API describes gpu_{1,2,4}x_a100 as "A100 (40 GB PCIe)" and gpu_8x_a100 as
# "8x A100 (40 GB SXM4)"; "RTX 6000 (24 GB)" is the Quadro RTX 6000
# (https://docs.lambda.ai/public-cloud/cloud-api/, instance-types).
LAMBDA_MODELS = {"a10": "A10", "a100": "A100", "a6000": "RTX A6000", "rtx6000": "Quadro RTX 6000",
                 "h100": "H100", "b200": "B200", "gh200": "GH200", "v100": "Tesla V100", "h200": "H200"}
_LAMBDA_TYPE = re.compile(r"^gpu_(?P<n>\d+)x_(?P<model>[a-z0-9]+?)(?:_(?P<gb>\d+)gb)?(?:_(?P<form>sxm\d|pcie))?(?:_.*)?$")


def _lambda_gpu(instance: str) -> Gpu | None:
    m = _LAMBDA_TYPE.match(instance)
    if not m or m["model"] not in LAMBDA_MODELS:
        return None
    form = m["form"]
    if form is None and m["model"] == "a100":
        form = "sxm4" if m["n"] == "8" else "pcie"
    if form is None:
        return Gpu(LAMBDA_MODELS[m["model"]], None, "unknown")
    sxm = form.startswith("sxm")
    return Gpu(LAMBDA_MODELS[m["model"]], "SXM" if sxm else "PCIe", "nvlink" if sxm else "pcie")


def _vast_gpu(instance: str, name: str) -> Gpu:
    """`2x-H100_SXM-32-65536` -> "H100 SXM" (the catalog's instance name carries Vast's GPU name).

    A bare name Vast gives one board form only ("H200": it spells out "H200 NVL") is that form,
    by the Vast plugin's own rule (providers/vast.py FORM_OF_BARE_NAME).
    """
    from rentopt.providers.vast import FORM_OF_BARE_NAME

    parts = instance.split("-")
    raw = parts[1].replace("_", " ") if len(parts) >= 2 and parts[0].endswith("x") else name
    form = "SXM" if "SXM" in raw.upper() else "PCIe" if "PCIE" in raw.upper() else "NVL" if "NVL" in raw.upper() else \
        FORM_OF_BARE_NAME.get(raw)
    return Gpu(raw, form, "nvlink" if form == "SXM" else "pcie" if form else "unknown")


# The clouds of SkyPilot's catalog that write SkyPilot's bare names ("H100", "A100-80GB") with the
# board's form, when given, in the instance type (nebius `gpu-h100-sxm_8gpu-...`, mithril
# `a100-80gb.sxm.8x`, lium `H100-SXM_8x`) or in the name (hyperstack `H100-80G-SXM5`). A bare name
# is read as SkyPilot reads it (hardware.normalise's sheet defaults: "H100" is the SXM card), with
# status "default" and the other candidates named; names several cards share and no default
# settles (RTX PRO 6000: Server, Workstation or Max-Q) stay unknown.
BARE_NAME_CLOUDS = frozenset({"verda", "nebius", "hyperstack", "jarvislabs", "lium", "mithril", "seeweb", "yotta",
                              "hyperbolic", "runpod", "aws", "oci", "fluidstack", "cudo", "paperspace", "do",
                              "shadeform", "primeintellect", "spheron"})
# Clouds whose GpuInfo `SizeInMiB` is the row's GPUs together, not one GPU: Vast (SkyPilot PR
# #10421) and Verda (its API's `gpu_memory.size_in_gigabytes` is the instance total: 8x V100 16GB
# says 128 GB, fixtures/datacrunch/instance_types.json; `2B300.60V` says 537600 MiB).
MEMORY_IS_ROW_TOTAL = frozenset({"vast", "verda"})
_FORM_TOKEN = re.compile(r"(?:^|[-_.\s])(sxm\d?|pcie)(?:$|[-_.\s])", re.IGNORECASE)
# Verda's instance types, as its own API describes them (fixtures/datacrunch/instance_types.json):
# `<n><model>[.<GB><S|P>].<vCPUs>V`, S an SXM board, P a PCIe card: "1H100.80S.30V" is
# "1x H100 SXM5 80GB", "1A100.40P.16V" "1x A100 PCIe 40GB"; with no tag "1A100.22V" is
# "A100 SXM4 80GB", "1B200.30V" "B200 SXM6 180GB", "2B300.60V" "B300 SXM6 268GB".
_VERDA_TYPE = re.compile(r"^(?P<n>\d+)(?P<model>[A-Z0-9]+?)(?:\.(?P<gb>\d+)(?P<form>[SP]))?\.\d+[VM]$")
VERDA_UNTAGGED_FORM = {"A100": "SXM", "B200": "SXM", "B300": "SXM"}
# hyperstack's `-NVLink` cards are PCIe boards with NVLink bridges between PAIRS of cards
# (NVIDIA A100/H100 PCIe datasheets: "NVLink Bridge for up to 2 GPUs"), not an NVSwitch across
# the node: rentopt's "nvlink" means every GPU reaches every other at NVLink speed, so these are
# PCIe between pairs, recorded in the offer's extra.
_BRIDGED = re.compile(r"-NVLink$", re.IGNORECASE)


def _named_gpu(cloud: str, instance: str, accelerator: str, gpu_info: str) -> tuple[Gpu, dict[str, Any]]:
    """The GPU of a row of a cloud that writes bare names (BARE_NAME_CLOUDS), and notes for extra."""
    notes: dict[str, Any] = {}
    raw, form = accelerator, None
    if cloud == "verda" and (m := _VERDA_TYPE.match(instance)):
        form = {"S": "SXM", "P": "PCIe"}.get(m["form"] or "") or VERDA_UNTAGGED_FORM.get(m["model"])
        # "A100-80GB-160GB": SkyPilot's Verda fetcher appends the instance's total memory
        raw = re.sub(r"^(.*?-\d+GB)-\d+GB$", r"\1", accelerator)
    if _BRIDGED.search(raw):
        raw = _BRIDGED.sub("", raw)
        notes["nvlink_bridge"] = "NVLink bridges join pairs of PCIe cards; the node's GPUs talk over PCIe"
    if form is None and (m := _FORM_TOKEN.search(f"{instance} {raw}")):
        form = "SXM" if m.group(1).lower().startswith("sxm") else "PCIe"
    named = _info_name(gpu_info)
    if named and named != raw and _normalised(named, None, form, True)[1] == "exact":
        raw = named  # hyperbolic: 'NVIDIA-H100-80GB-HBM3' (HBM3 is the SXM part) where the column says "H100"
    interconnect: Interconnect = "nvlink" if form == "SXM" else "pcie" if form == "PCIe" else "unknown"
    return Gpu(raw, form, interconnect), notes


# --------------------------------------------------------------------------------------------
# The plugin


class SkyPilotProvider(Provider):
    name = "skypilot"
    currency = "USD"
    api_root = PUBLISHED_CATALOG
    key_env = None
    key_required = False
    docs_url = "https://docs.skypilot.co/en/latest/reference/catalog.html"
    multi_provider = True
    # One GET per cloud, static files on a CDN: all of them at once after the first.
    max_concurrency = 16
    # TPU and CPU rows are most of some clouds' files: the per-cloud check below replaces it.
    guard_skipped_share = False

    def base_url(self) -> str:
        configured = settings()  # RENTOPT_SKYPILOT_CATALOG, RENTOPT_SKYPILOT_BASE_URL (checked there)
        if value := configured.skypilot_catalog or configured.base_url(self.base_url_env()):
            return value.rstrip("/")
        local = LOCAL_CATALOG.expanduser()
        if local.is_dir():
            return str(local)
        return self.api_root

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        location = self.base_url()
        files = await (_fetch_urls(ctx, location) if _is_url(location) else _read_dir(ctx, location))
        if not files and not ctx.provider_errors:
            raise ctx.schema_error(f"no <cloud>/vms.csv found under {location}")
        offers: list[Offer] = []
        # rows skipped per cloud, for the refresh summary's per-provider counts (refresh.py)
        self.skipped_per_provider: dict[str, int] = {}
        for cloud, (text, date, source) in sorted(files.items()):
            before = len(ctx.skipped)
            try:
                mine = parse_catalog(ctx, cloud, text, fetched_at=date.when, source=source, dated_by=date.dated_by)
            except CatalogError as exc:
                ctx.provider_errors[cloud] = str(exc)
                continue
            finally:
                self.skipped_per_provider[cloud] = len(ctx.skipped) - before
            ctx.provider_sources[cloud] = (source, date.when)
            offers += mine
        if files and len(ctx.provider_errors) == len(files):
            # Not one usable file: not a catalog at all (an error page, a wrong URL).
            raise ctx.schema_error(next(iter(ctx.provider_errors.values())))
        return offers


class CatalogError(Exception):
    """One cloud's file cannot be used as a whole (its other clouds still are)."""


def _is_url(location: str) -> bool:
    return location.startswith(("http://", "https://"))


@dataclass(frozen=True)
class CatalogDate:
    """When a cloud's file was read by its publisher, and how that is known (models.DateBasis)."""

    when: datetime  # models.UNKNOWN_DATE when unknown
    dated_by: DateBasis
    how: str  # "folder name", "git commit 5738017 (the file's last change)", "file time", ...


def catalog_date(path: Path) -> CatalogDate:
    """The date of a catalog file, by the first rule that gives one:

    1. a `YYYY-MM-DD` folder above it (`.../2026-05-20/gcp/vms.csv`);
    2. the commit date of the file's last change, when it sits unchanged in a git checkout
       (SkyPilot's catalog repository, or a mirror of it);
    3. the file's modification time, said as such ("dated by file time": a copy resets it);
    4. none: the date is unknown. Never today.
    """
    for part in reversed(path.resolve().parts[:-1]):
        if _DATE_DIR.match(part):
            return CatalogDate(datetime.fromisoformat(part).replace(tzinfo=timezone.utc), "published", "folder name")
    if (committed := _git_date(path)) is not None:
        return committed
    try:
        stamp = path.stat().st_mtime
    except OSError:
        return CatalogDate(UNKNOWN_DATE, "unknown", "no date")
    when = datetime.fromtimestamp(stamp, tz=timezone.utc)
    if when > datetime.now(timezone.utc) or stamp <= 0:
        return CatalogDate(UNKNOWN_DATE, "unknown", f"no date (its file time {when:%Y-%m-%d} cannot be right)")
    return CatalogDate(when, "file-time", "file time")


def _git_date(path: Path) -> CatalogDate | None:
    """The committer date of the last commit that changed `path`, if it is tracked and unchanged
    since (a file edited after its commit is not that commit's content)."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None:
        return None
    folder, name = path.resolve().parent, path.name

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run([git, "-C", str(folder), *args], capture_output=True, text=True, timeout=10,
                                  check=False, env={"GIT_OPTIONAL_LOCKS": "0", "PATH": os.environ.get("PATH", ""),
                                                    "HOME": os.environ.get("HOME", "")})
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if run("status", "--porcelain", "--", name) != "":  # not a checkout (None), or changed since its commit
        return None
    line = run("log", "-1", "--format=%h %cI", "--", name)
    if not line:
        return None  # untracked
    commit, _, stamp = line.partition(" ")
    try:
        when = datetime.fromisoformat(stamp).astimezone(timezone.utc)
    except ValueError:
        return None
    return CatalogDate(when, "published", f"git commit {commit}, the file's last change")


def describe_source(cloud: str, location: str, date: CatalogDate) -> str:
    """ "SkyPilot catalog of 2026-05-20 (gcp/vms.csv at <location>)": every offer's `source`, with
    how its date is known when that is not the folder's name."""
    how = "" if date.how == "folder name" else f"; dated by {date.how}"
    if date.dated_by == "unknown":
        return f"SkyPilot catalog, date unknown ({cloud}/vms.csv at {location}{how.replace('; dated by no date', '')})"
    return f"SkyPilot catalog of {date.when:%Y-%m-%d} ({cloud}/vms.csv at {location}{how})"


async def _read_dir(ctx: FetchContext, location: str) -> dict[str, tuple[str, datetime, str]]:
    root = Path(location).expanduser()
    if not root.is_dir():
        raise ctx.error(f"{CATALOG_ENV}={location}: no such directory")
    found = {}
    for path in sorted(root.glob("*/vms.csv")):
        cloud = path.parent.name.lower()
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            ctx.provider_errors[cloud] = f"cannot read {path}: {exc}"
            continue
        date = catalog_date(path)
        found[cloud] = (text, date, describe_source(cloud, str(root), date))
    return found


async def _fetch_urls(ctx: FetchContext, base: str) -> dict[str, tuple[str, CatalogDate, str]]:
    """Each cloud's file. The first cloud is asked alone: if it cannot be fetched after the
    retries, the host is down or refusing, so the plugin fails as a whole (every provider it
    delivered keeps its last good prices) without hammering it for every cloud. Then the rest at
    once (two round trips, not one per cloud); a 404 is a cloud this catalog does not have, any
    other failure fails that cloud only. Each file is dated by `_url_date`."""
    import asyncio

    from rentopt.optimizer.errors import ProviderError

    async def one(cloud: str) -> tuple[str, Any]:
        try:
            return cloud, await ctx.request("GET", f"{base}/{cloud}/vms.csv")
        except ProviderError as exc:
            return cloud, exc

    first = await one(URL_CLOUDS[0])
    if isinstance(first[1], ProviderError) and first[1].status != 404:
        raise ctx.error(f"{base}: {first[1].reason}")
    fetched = {}
    for cloud, result in [first, *await asyncio.gather(*(one(c) for c in URL_CLOUDS[1:]))]:
        if isinstance(result, ProviderError):
            if result.status != 404:  # a cloud the catalog does not carry is not a failure
                ctx.provider_errors[cloud] = result.reason
            continue
        fetched[cloud] = result
    dates = await asyncio.gather(*(_url_date(ctx, base, cloud, r) for cloud, r in fetched.items()))
    return {cloud: (r.text, date, describe_source(cloud, base, date)) for (cloud, r), date in zip(fetched.items(), dates)}


# GitHub's REST API: the commits that changed a path, newest first
# (https://docs.github.com/en/rest/commits/commits#list-commits, `path`, `sha`, `per_page`).
GITHUB_API = "https://api.github.com"
_RAW_GITHUB = re.compile(r"^https://raw\.githubusercontent\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+)/(?P<ref>[^/]+)/?(?P<dir>.*)$")


async def _url_date(ctx: FetchContext, base: str, cloud: str, response: Any) -> CatalogDate:
    """The date of a fetched file: its `Last-Modified`, else (a file in a GitHub repository,
    as SkyPilot publishes its catalog) the commit date of the file's last change, asked of
    GitHub's API; else unknown. Never the fetch time: the file may be months old."""
    if stamp := response.headers.get("Last-Modified"):
        try:
            return CatalogDate(parsedate_to_datetime(stamp).astimezone(timezone.utc), "published", "its Last-Modified header")
        except (TypeError, ValueError):
            pass
    m = _RAW_GITHUB.match(base)
    header = response.text.split("\n", 1)[0]
    if m is None or not all(c in header for c in REQUIRED_COLUMNS):  # not a catalog file: nothing to date
        return CatalogDate(UNKNOWN_DATE, "unknown", "no date (the server gives none)")
    if m is None:
        return CatalogDate(UNKNOWN_DATE, "unknown", "no date (the server gives none)")
    from rentopt.optimizer.errors import ProviderError

    path = "/".join(p for p in (m["dir"].strip("/"), cloud, "vms.csv") if p)
    url = f"{GITHUB_API}/repos/{m['owner']}/{m['repo']}/commits"
    try:
        commits = ctx.decode(await ctx.request("GET", url, auth=False, params={"path": path, "sha": m["ref"], "per_page": 1}))
        commit = commits[0]
        when = datetime.fromisoformat(str(commit["commit"]["committer"]["date"]).replace("Z", "+00:00"))
        return CatalogDate(when.astimezone(timezone.utc), "published",
                           f"git commit {str(commit['sha'])[:7]}, the file's last change")
    except (ProviderError, LookupError, TypeError, ValueError):
        return CatalogDate(UNKNOWN_DATE, "unknown", "no date (GitHub's API did not give the file's last commit)")
    except Exception:  # noqa: BLE001 - dating is best effort: a failure leaves the date unknown, never the cloud
        return CatalogDate(UNKNOWN_DATE, "unknown", "no date (GitHub's API could not be asked)")


# --------------------------------------------------------------------------------------------
# Parsing one cloud's vms.csv


def read_rows(text: str) -> tuple[list[str], list[list[str]], int]:
    """Header, rows, and how many rows had the wrong number of fields. Azure's unquoted
    `Generation` = `V1,V2` (one field too many) is joined back into the last column."""
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if not header:
        raise CatalogError("the file is empty")
    width = len(header)
    rows, bad = [], 0
    joins_last = header[-1] == "Generation"
    for row in reader:
        if len(row) == width:
            rows.append(row)
        elif len(row) > width and joins_last:
            rows.append(row[:width - 1] + [",".join(row[width - 1:])])
        elif row:
            bad += 1
    return header, rows, bad


def _price(text: str) -> Decimal | None:
    return to_decimal(text) if text and text.strip() else None


def _text(amount: Decimal | None) -> str | None:
    return None if amount is None else str(amount)


def _count(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _memory_gib(gpu_info: str) -> float | None:
    m = _MIB.search(gpu_info or "")
    return float(m.group(1)) / 1024 if m and float(m.group(1)) > 0 else None


def _info_name(gpu_info: str) -> str | None:
    """The GPU's name inside GpuInfo (hyperbolic writes the full board name there)."""
    m = _GPU_NAME.search(gpu_info or "")
    return m.group(1).strip() if m else None


@dataclass
class _Row:
    instance: str
    accelerator: str
    count: float
    price: Decimal | None
    spot: Decimal | None
    region: str
    zone: str | None
    gpu_info: str
    vcpus: float | None
    memory_gib: float | None
    generation: str | None = None


def parse_catalog(ctx: FetchContext, cloud: str, text: str, *, fetched_at: datetime, source: str,
                  dated_by: DateBasis = "published") -> list[Offer]:
    """One cloud's vms.csv -> offers of provider `cloud`, dated `fetched_at` (how that is known:
    `dated_by`). CatalogError when the file is unusable."""
    try:
        header, rows, bad = read_rows(text)
    except CatalogError:
        raise CatalogError(f"{cloud}/vms.csv is empty: not a SkyPilot v8 catalog") from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise CatalogError(f"{cloud}/vms.csv is not a SkyPilot v8 catalog: it has no {', '.join(missing)} column")
    # A file with no final newline is read (yotta's has none: SkyPilot's fetchers write it so); a
    # download cut inside a row leaves a row narrower than the header, which read_rows counts.
    col = {name: i for i, name in enumerate(header)}
    get = {name: col.get(name) for name in ("InstanceType", "AcceleratorName", "AcceleratorCount", "Price", "SpotPrice",
                                            "Region", "AvailabilityZone", "GpuInfo", "vCPUs", "MemoryGiB", "Generation")}

    def field(row: list[str], name: str) -> str:
        i = get[name]
        return row[i] if i is not None else ""

    gpu_rows: list[_Row] = []
    hosts: list[_Row] = []
    tpus = 0
    for row in rows:
        accelerator = field(row, "AcceleratorName")
        if cloud == "gcp" and not accelerator:
            hosts.append(_row(row, field, accelerator))
            continue
        if not accelerator:
            continue  # a CPU-only instance: not a GPU offer, not a skip
        if accelerator.lower().startswith("tpu"):
            tpus += 1
            continue
        gpu_rows.append(_row(row, field, accelerator))
    if tpus:
        ctx.skip(f"{cloud}: {tpus} TPU rows", "TPUs are not GPUs; rentopt plans GPU jobs only")
    if bad:
        ctx.skip(f"{cloud}: {bad} rows", "wrong number of fields")
    prices = _cloud_prices().get(cloud, UNKNOWN_CLOUD)
    build = _Builder(ctx, cloud, prices, fetched_at, source, placeholder_host=_placeholder_host(gpu_rows),
                     dated_by=dated_by)
    if cloud == "gcp":
        offers = _gcp_offers(build, gpu_rows, hosts)
    else:
        offers = [o for r in gpu_rows for o in build.offers_for(r)]
    usable = len({o.offer_id.removesuffix("/spot") for o in offers})
    if gpu_rows and usable * 2 < len(gpu_rows) and cloud not in ("gcp",):
        raise CatalogError(f"{cloud}/vms.csv: only {usable} of {len(gpu_rows)} GPU rows could be used; "
                           "the catalog's format has probably changed")
    return offers


def _placeholder_host(rows: list[_Row]) -> bool:
    """Whether the file gives every GPU row one host size although the rows' GPU counts differ
    (Vast's 64 rows all say 32 vCPU / 64 GiB, from 1 to 8 GPUs): a placeholder, not a measurement."""
    sizes = {(r.vcpus, r.memory_gib) for r in rows}
    return len(rows) >= 3 and len(sizes) == 1 and len({r.count for r in rows}) > 1


def _region(text: str) -> str:
    """Vast writes "City, CC, Continent" and leaves the city empty (", CA, NA"): drop empty parts."""
    return ", ".join(p.strip() for p in text.split(",") if p.strip()) if "," in text else text.strip()


def _row(row: list[str], field, accelerator: str) -> _Row:  # noqa: ANN001 - a local accessor
    return _Row(
        instance=field(row, "InstanceType"), accelerator=accelerator, count=_count(field(row, "AcceleratorCount")) or 0,
        price=_price(field(row, "Price")), spot=_price(field(row, "SpotPrice")), region=_region(field(row, "Region")),
        zone=field(row, "AvailabilityZone") or None, gpu_info=field(row, "GpuInfo"),
        vcpus=_count(field(row, "vCPUs")), memory_gib=_count(field(row, "MemoryGiB")),
        generation=field(row, "Generation") or None,
    )


class _Builder:
    """Offers of one cloud: identifies the GPU and fills in the cloud's prices and rules."""

    def __init__(self, ctx: FetchContext, cloud: str, prices: CloudPrices, fetched_at: datetime, source: str,
                 placeholder_host: bool = False, dated_by: DateBasis = "published"):
        self.ctx, self.cloud, self.prices, self.fetched_at, self.source = ctx, cloud, prices, fetched_at, source
        self.dated_by = dated_by
        self.placeholder_host = placeholder_host
        self.seen: set[str] = set()
        from rentopt.providers.azure import SIZES, is_rdma

        self.azure_sizes, self.is_rdma = SIZES, is_rdma

    def offers_for(self, r: _Row, *, instance: str | None = None, price: Decimal | None = None,
                   spot: Decimal | None = None, host: _Row | None = None) -> list[Offer]:
        instance = instance or r.instance
        price = r.price if price is None and host is None else price
        spot = r.spot if spot is None and host is None else spot
        where = r.zone or r.region
        row_id = f"{instance}/{where}" if where else instance  # seeweb leaves some regions empty
        if row_id in self.seen:
            self.ctx.skip(row_id, "the same instance type and region again in the file; its first row is kept")
            return []
        self.seen.add(row_id)
        if r.count <= 0:
            self.ctx.skip(row_id, f"accelerator count {r.count!r} is not a number of GPUs")
            return []
        if r.count != int(r.count):
            self.ctx.skip(row_id, f"fractional GPU: {r.count:g} of an {r.accelerator}")
            return []
        ident = self._identify(r, instance)
        if isinstance(ident, str):
            self.ctx.skip(row_id, ident)
            return []
        gpu, fields = ident
        if host is not None:
            fields["extra"].update({"host_vm": host.instance, "host_price": _text(host.price),
                                    "host_spot_price": _text(host.spot), "gpu_price": _text(r.price),
                                    "gpu_spot_price": _text(r.spot)})
        sized = host or r
        if self.placeholder_host and host is None:
            # every GPU row of the file gives the same host size, whatever its GPU count: a
            # placeholder (Vast's 32 vCPU / 64 GiB), not the host's RAM
            fields["host_ram_gb"] = None
            fields["extra"]["host_size"] = (f"unknown: every GPU row of {self.cloud}/vms.csv says {sized.vcpus:g} vCPU / "
                                            f"{sized.memory_gib:g} GiB, a placeholder")
        else:
            fields["host_ram_gb"] = round(sized.memory_gib * float(_GIB_PER_GB), 1) if sized.memory_gib else None
        if spot is not None and price is not None and spot >= price:
            # Azure's H200 "spot" rows cost the on-demand price; mithril's too: no interruptible discount
            # is no spot offer, and renting it as one would only add the risk of being stopped
            self.ctx.skip(row_id + "/spot", f"its spot price {spot} is not below the on-demand {price}: not a spot offer")
            spot = None
        out = []
        if price is not None:
            if offer := self._offer(row_id, r, gpu, fields, [PriceOption(unit=PriceUnit.HOUR, amount=price, label="on-demand")]):
                out.append(offer)
        else:
            self.ctx.skip(row_id, "no on-demand price in the catalog (empty Price: unknown, not free)")
        if spot is not None:
            options = [PriceOption(unit=PriceUnit.HOUR, amount=spot, interruptible=True, label="spot")]
            if offer := self._offer(row_id + "/spot", r, gpu, fields, options, spot=True):
                out.append(offer)
        return out

    def _identify(self, r: _Row, instance: str) -> tuple[Gpu, dict[str, Any]] | str:
        fields: dict[str, Any] = {"extra": {"instance_type": instance, "skypilot_accelerator": r.accelerator}}
        if self.cloud == "gcp":
            gpu = GCP_GPUS.get(r.accelerator) or Gpu(r.accelerator)
            family = multinode.GCP_FAMILIES.get(instance.split("+")[0])
            fields = multinode.apply(fields, family)
            return gpu, fields
        if self.cloud == "azure":
            size = self.azure_sizes.get(instance)
            if size is None:
                return f"VM size {instance} is not in rentopt's Azure N-series table (unknown GPU model)"
            if size.fraction:
                return f"fractional GPU: {instance} is {size.fraction} of an {size.family.gpu_raw.split()[-1]}"
            fam = size.family
            gpu = Gpu(fam.gpu_raw, None, fam.interconnect, fam.interconnect_gbps)
            fields["extra"]["series"] = fam.name
            fields["extra"]["series_doc"] = fam.doc
            if self.is_rdma(instance):
                fields = multinode.apply(fields, multinode.AZURE_FAMILIES.get(instance))
            return gpu, fields
        if self.cloud == "lambda":
            gpu = _lambda_gpu(instance)
            return gpu if gpu is not None else Gpu(r.accelerator), fields
        if self.cloud == "vast":
            return _vast_gpu(instance, r.accelerator), fields
        if self.cloud == "aws":
            from rentopt.providers.aws import FAMILIES

            family = FAMILIES.get(instance.split(".")[0])
            if family is not None:
                fields = multinode.apply(fields, multinode.AWS_FAMILIES.get(instance.split(".")[0]))
                return Gpu(family.gpu_raw, None, family.interconnect, family.interconnect_gbps), fields
        if self.cloud in BARE_NAME_CLOUDS:
            gpu, notes = _named_gpu(self.cloud, instance, r.accelerator, r.gpu_info)
            fields["extra"].update(notes)
            return gpu, fields
        return Gpu(r.accelerator), fields

    def _offer(self, row_id: str, r: _Row, gpu: Gpu, fields: dict[str, Any], options: list[PriceOption],
               spot: bool = False) -> Offer | None:
        memory_gib = _memory_gib(r.gpu_info)
        if self.cloud in MEMORY_IS_ROW_TOTAL and memory_gib and r.count > 1:
            # Vast's and Verda's rows give the memory of all the row's GPUs together
            # ("2x-A100_SXM4" with 163840 MiB is two 80 GB cards); other clouds give it per GPU.
            memory_gib /= r.count
        if memory_gib is None and (m := re.search(r"(\d+)\s*GB\b", gpu.raw, re.IGNORECASE)):
            memory_gib = float(m.group(1)) * 1e9 / 2**30  # seeweb: "RTX PRO 6000 96GB" with SizeInMiB 0
        gpu_id, status, memory = _normalised(gpu.raw, memory_gib, gpu.form, self.cloud in BARE_NAME_CLOUDS)
        if gpu_id is None:
            self.ctx.unknown_gpus.add(gpu.raw)
        elif gpu.interconnect == "unknown" and status in ("exact", "by_memory") and self.cloud in BARE_NAME_CLOUDS:
            gpu = _board_link(gpu, gpu_id)
        if not memory:
            self.ctx.skip(row_id, f"GPU {gpu.raw!r} has no known memory size")
            return None
        prices, rules = self.prices, self.prices.billing
        extra = dict(fields.get("extra") or {})
        extra["prices_source"] = prices.source
        if r.zone:
            extra["zone"] = r.zone
        values = {
            **fields,
            "provider": self.cloud, "offer_id": row_id, "gpu": gpu_id, "gpu_raw": gpu.raw, "gpu_status": status,
            "gpus": int(r.count), "gpu_memory_gb": memory, "interconnect": gpu.interconnect,
            "interconnect_gbps": gpu.interconnect_gbps, "region": r.region, "spot": spot, "price_options": options,
            "storage_gb_month": prices.storage_gb_month, "egress_gb": prices.egress_gb, "ingress_gb": prices.ingress_gb,
            "billing_granularity_s": rules.granularity_s, "billing_minimum_s": rules.minimum_s,
            "month_hours": rules.month_hours, "stopped_bills": rules.stopped_pays, "currency": "USD",
            "fetched_at": self.fetched_at, "dated_by": self.dated_by, "source": self.source, "extra": extra,
        }
        try:
            return Offer(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            self.ctx.skip(row_id, f"invalid {'.'.join(str(p) for p in first.get('loc', ()))}: {first.get('msg')}")
            return None


def _board_link(gpu: Gpu, gpu_id: str) -> Gpu:
    """A card the name identifies exactly links as its board does (feasibility's rule: SXM/OAM
    parts with NVLink sit on an NVLink board, every other card talks over PCIe). A card read by a
    default ("H100" taken as the SXM part) keeps an unknown link."""
    from dataclasses import replace as replaced

    from rentopt.optimizer.feasibility import default_interconnect
    from rentopt.optimizer.hardware import get_gpu

    return replaced(gpu, interconnect=default_interconnect(get_gpu(gpu_id)))


@lru_cache(maxsize=512)
def _normalised(raw: str, memory_gib: float | None, form: str | None,
                bare_default: bool = False) -> tuple[str | None, str, float | None]:
    """(catalog id or None, match status, per-GPU memory GB): the catalog's memory for a known
    GPU, else the catalog file's own figure. `bare_default`: a bare name takes the catalog's
    default reading (BARE_NAME_CLOUDS)."""
    from rentopt.optimizer.hardware import get_gpu, normalise

    match = normalise(raw, memory_gib, form_factor_hint=form, sheet_defaults=bare_default)
    if match.gpu is not None:
        return match.gpu, match.status, get_gpu(match.gpu).memory_gb
    return None, match.status, round(memory_gib, 1) if memory_gib else None


def _gcp_offers(build: _Builder, gpu_rows: list[_Row], hosts: list[_Row]) -> list[Offer]:
    """GPU rows priced together with their host VM, by SkyPilot's pairing rule (module docstring)."""
    by_zone: dict[tuple[str, str | None], list[_Row]] = defaultdict(list)
    unpriced: set[tuple[str, str | None, str]] = set()
    for h in hosts:
        if h.price is not None:
            by_zone[(h.region, h.zone)].append(h)
        else:
            unpriced.add((h.region, h.zone, h.instance))
    offers: list[Offer] = []
    for r in gpu_rows:
        count = int(r.count) if r.count == int(r.count) else 0
        host = _gcp_host(r.accelerator, count, by_zone.get((r.region, r.zone), []))
        row_id = f"{r.accelerator}x{r.count:g}/{r.zone or r.region}"
        if host is None:
            names = GCP_OWN_HOSTS.get(r.accelerator, {}).get(count, ())
            why = " (the catalog lists it with no usable price: 0 or empty is unknown)" \
                if any((r.region, r.zone, n) in unpriced for n in names) else ""
            build.ctx.skip(row_id, f"no host VM for {count} x {r.accelerator} priced in {r.zone}{why} "
                                   "(SkyPilot's pairing rule)")
            continue
        instance = host.instance if r.accelerator in GCP_OWN_HOSTS else f"{host.instance}+{count}x{r.accelerator}"
        price = r.price + host.price if r.price is not None and host.price is not None else None
        spot = r.spot + host.spot if r.spot is not None and host.spot is not None else None
        made = build.offers_for(r, instance=instance, price=price, spot=spot, host=host)
        offers += made
    return offers


def _gcp_host(accelerator: str, count: int, zone_hosts: list[_Row]) -> _Row | None:
    if accelerator in GCP_OWN_HOSTS:
        names = GCP_OWN_HOSTS[accelerator].get(count, ())
        candidates = [h for h in zone_hosts if h.instance in names]
    else:
        cpus = GCP_N1_CPUS.get(accelerator, GCP_N1_CPUS["DEFAULT"]).get(count)
        if cpus is None:
            return None
        candidates = [h for h in zone_hosts if h.instance.startswith(GCP_N1_FAMILIES)
                      and (h.vcpus or 0) >= cpus and (h.memory_gib or 0) >= cpus * GCP_MEMORY_PER_CPU]
    return min(candidates, key=lambda h: (h.price, h.instance), default=None)
