"""Azure GPU virtual machines, priced from the public Retail Prices API (no key needed).

One walk over `GET https://prices.azure.com/api/retail/prices` with an OData `$filter` that
asks, for the configured regions, for three kinds of meters at once:

- N-series GPU VM sizes (`serviceName 'Virtual Machines'`): on-demand, Spot, Reservation and
  savings-plan prices;
- one managed-disk tier (`serviceName 'Storage'`, Premium SSD P30) for the storage price;
- internet egress (`serviceName 'Bandwidth'`, "Rtn Preference: MGN" tiers).

The feed says nothing about GPUs, so the VM size name is looked up in `SIZES`, an explicit table
of the N-series sizes rentopt knows, each citing its Azure docs page. Sizes not in the table and
fractional-GPU sizes are skipped with a counted reason. Feed quirks handled here are listed in
provider-apis.md §4 (Windows/Cloud Services/Low Priority/DevTest duplicates, Reservation totals,
zero prices, case-sensitive filter values, `NextPageLink` pagination).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rentopt.optimizer.models import Interconnect, Offer, PriceOption, PriceUnit
from rentopt.optimizer.settings import settings
from rentopt.providers import multinode
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_amount, to_decimal

PRICES_PATH = "/api/retail/prices"
# Savings-plan prices are only returned by the preview version; it also makes filter values
# case-sensitive (https://learn.microsoft.com/en-us/rest/api/cost-management/retail-prices/azure-retail-prices).
API_VERSION = "2023-01-01-preview"

# A handful of regions with the big N-series fleets keeps a refresh to a few pages.
# "all" in RENTOPT_AZURE_REGIONS drops the region filter (tens of pages).
DEFAULT_REGIONS = ("eastus", "southcentralus", "westus3", "westeurope")

# Reservation rows carry the total for the whole term although unitOfMeasure says "1 Hour"
# (provider-apis.md §4.2.1); savings-plan rows carry a per-hour price for the same terms.
TERM_HOURS = {"1 Year": 8760, "3 Years": 26280}

# Managed disks are priced per disk per month by tier, not per GB. P30 (Premium SSD LRS) is a
# 1 TiB disk: https://learn.microsoft.com/en-us/azure/virtual-machines/disks-types#premium-ssd-size
# (tier table; prices at https://azure.microsoft.com/en-us/pricing/details/managed-disks/).
DISK_SKU = "P30 LRS"
DISK_METER = "P30 LRS Disk"
DISK_PRODUCT = "Premium SSD Managed Disks"
DISK_TIER_GIB = Decimal(1024)

EGRESS_PRODUCT = "Rtn Preference: MGN"
EGRESS_METER = "Standard Data Transfer Out"
# Inbound data transfer is free: https://azure.microsoft.com/en-us/pricing/details/bandwidth/
INGRESS_PER_GB = Decimal(0)

# Required on every row; a row without one of these means the feed's format changed.
REQUIRED_FIELDS = ("serviceName", "armRegionName", "retailPrice", "unitOfMeasure", "type",
                   "productName", "skuName", "meterName")


# --------------------------------------------------------------------------------------------
# The N-series table. GPU model, memory and count are not in the price feed.


@dataclass(frozen=True)
class Family:
    """One Azure N-series family: the GPU in it and how its GPUs and nodes are connected."""

    name: str
    gpu_raw: str  # a spelling hardware.normalise knows exactly
    memory_gb: float
    interconnect: Interconnect
    interconnect_gbps: float | None  # NVLink GB/s per GPU (bidirectional)
    fabric_gbps: float | None  # InfiniBand between nodes, Gbit/s per node; used on RDMA ('r') sizes only
    doc: str


@dataclass(frozen=True)
class Size:
    family: Family
    gpus: int
    fraction: str | None = None  # "1/6" for a GPU partition: not a whole GPU


_DOCS = "https://learn.microsoft.com/en-us/azure/virtual-machines/"

NC_A100_V4 = Family("NC A100 v4", "NVIDIA A100 80GB PCIe", 80, "pcie", None, None,
                    _DOCS + "nc-a100-v4-series")
# 8x A100 40GB SXM4, NVLink 3 (600 GB/s per GPU), 8x 200 Gb/s HDR InfiniBand.
ND_A100_V4 = Family("ND A100 v4", "NVIDIA A100-SXM4-40GB", 40, "nvlink", 600, 1600,
                    _DOCS + "nda100-v4-series")
# 8x A100 80GB SXM4, NVLink 3, 8x 200 Gb/s HDR InfiniBand.
NDM_A100_V4 = Family("NDm A100 v4", "NVIDIA A100-SXM4-80GB", 80, "nvlink", 600, 1600,
                     _DOCS + "ndm-a100-v4-series")
# 8x H100 80GB SXM5, NVLink 4 (900 GB/s per GPU), 8x 400 Gb/s NDR InfiniBand = 3.2 Tb/s.
ND_H100_V5 = Family("ND H100 v5", "NVIDIA H100 80GB HBM3", 80, "nvlink", 900, 3200,
                    _DOCS + "nd-h100-v5-series")
# 8x H200 141GB SXM, NVLink 4, 3.2 Tb/s NDR InfiniBand.
ND_H200_V5 = Family("ND H200 v5", "H200 SXM", 141, "nvlink", 900, 3200,
                    _DOCS + "sizes/gpu-accelerated/nd-h200-v5-series")
# H100 NVL 94GB PCIe cards; the 2-GPU size pairs them with an NVLink bridge (600 GB/s).
NC_H100_V5 = Family("NC H100 v5", "NVIDIA H100 NVL", 94, "pcie", None, None,
                    _DOCS + "ncads-h100-v5")
NC_H100_V5_PAIR = Family("NC H100 v5", "NVIDIA H100 NVL", 94, "nvlink", 600, None,
                         _DOCS + "ncads-h100-v5")
NC_T4_V3 = Family("NCasT4_v3", "NVIDIA T4", 16, "pcie", None, None, _DOCS + "nct4-v3-series")
# V100 16GB PCIe; NCv3 was announced for retirement, kept so an old feed still parses.
NC_V3 = Family("NCv3", "Tesla V100-PCIE-16GB", 16, "pcie", None, None, _DOCS + "ncv3-series")
# 8x V100 32GB SXM2 with NVLink (300 GB/s per GPU), 100 Gb/s EDR InfiniBand.
ND_V2 = Family("NDv2", "Tesla V100-SXM2-32GB", 32, "nvlink", 300, 100, _DOCS + "ndv2-series")
NV_A10_V5 = Family("NVadsA10 v5", "NVIDIA A10", 24, "pcie", None, None, _DOCS + "nva10v5-series")
# 8x MI300X 192GB joined by Infinity Fabric (7 x 128 = 896 GB/s per GPU, gpu-specs.json), recorded
# as "nvlink" because the Interconnect type names the class of link, not the vendor; 3.2 Tb/s IB.
ND_MI300X_V5 = Family("ND MI300X v5", "AMD Instinct MI300X", 192, "nvlink", 896, 3200,
                      _DOCS + "sizes/gpu-accelerated/ndmi300xv5-series")

SIZES: dict[str, Size] = {
    "Standard_NC24ads_A100_v4": Size(NC_A100_V4, 1),
    "Standard_NC48ads_A100_v4": Size(NC_A100_V4, 2),
    "Standard_NC96ads_A100_v4": Size(NC_A100_V4, 4),
    "Standard_ND96asr_v4": Size(ND_A100_V4, 8),
    "Standard_ND96amsr_A100_v4": Size(NDM_A100_V4, 8),
    "Standard_ND96isr_H100_v5": Size(ND_H100_V5, 8),
    "Standard_ND96isr_H200_v5": Size(ND_H200_V5, 8),
    "Standard_NC40ads_H100_v5": Size(NC_H100_V5, 1),
    "Standard_NC80adis_H100_v5": Size(NC_H100_V5_PAIR, 2),
    "Standard_NC4as_T4_v3": Size(NC_T4_V3, 1),
    "Standard_NC8as_T4_v3": Size(NC_T4_V3, 1),
    "Standard_NC16as_T4_v3": Size(NC_T4_V3, 1),
    "Standard_NC64as_T4_v3": Size(NC_T4_V3, 4),
    "Standard_NC6s_v3": Size(NC_V3, 1),
    "Standard_NC12s_v3": Size(NC_V3, 2),
    "Standard_NC24s_v3": Size(NC_V3, 4),
    "Standard_NC24rs_v3": Size(NC_V3, 4),  # RDMA-capable; its InfiniBand speed is not modelled
    "Standard_ND40rs_v2": Size(ND_V2, 8),
    # NVadsA10 v5 below a full card are partitions of one A10 (the SKU API still says GPUs=1).
    "Standard_NV6ads_A10_v5": Size(NV_A10_V5, 1, "1/6"),
    "Standard_NV12ads_A10_v5": Size(NV_A10_V5, 1, "1/3"),
    "Standard_NV18ads_A10_v5": Size(NV_A10_V5, 1, "1/2"),
    "Standard_NV36ads_A10_v5": Size(NV_A10_V5, 1),
    "Standard_NV36adms_A10_v5": Size(NV_A10_V5, 1),
    "Standard_NV72ads_A10_v5": Size(NV_A10_V5, 2),
    "Standard_ND96is_MI300X_v5": Size(ND_MI300X_V5, 8),
    "Standard_ND96isr_MI300X_v5": Size(ND_MI300X_V5, 8),
}

# The VM size prefixes of the GPU families, for the server-side filter (values are case-sensitive).
GPU_SIZE_PREFIXES = ("Standard_NC", "Standard_ND", "Standard_NV")


class AzureProvider(Provider):
    name = "azure"
    currency = "USD"
    api_root = "https://prices.azure.com"
    key_env = None
    key_required = False
    docs_url = "https://learn.microsoft.com/en-us/rest/api/cost-management/retail-prices/azure-retail-prices"
    billing = BillingRules(
        # Billed per full minute: "6 minutes 45 seconds is billed as 6 minutes". A Microsoft Q&A
        # answer reports a 5-minute minimum since June 2025 (learn.microsoft.com/en-us/answers/
        # questions/2259765); unverified, so no minimum is modelled.
        granularity_s=60,
        minimum_s=0,
        # A stopped (deallocated) VM pays only for its disks. Shutting down from inside the OS
        # leaves it "Stopped (allocated)", still billed for compute: stop means deallocate.
        stopped_pays="storage",
        # Azure's calculator prices a month as 730 hours.
        month_hours=730,
        source="Azure knowledge centre, 'If my virtual machine ran for 6 minutes and 45 seconds...' "
               "(azure.microsoft.com, quoted in provider-apis.md 4.2.11); deallocated VMs: "
               "https://learn.microsoft.com/en-us/azure/virtual-machines/states-billing",
    )

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        regions = configured_regions(ctx)
        params = {"api-version": API_VERSION, "$filter": build_filter(regions)}
        url: str | None = ctx.url(PRICES_PATH)
        items: list[dict[str, Any]] = []
        pages = 0
        while url:
            if pages >= self.max_pages:
                raise ctx.schema_error(
                    f"still paging after {self.max_pages} pages; the filter matched far more rows than expected"
                )
            body = await ctx.get_json(url, params=params if pages == 0 else None)
            page_items, next_link = read_page(ctx, body)
            items.extend(page_items)
            pages += 1
            if not page_items or not next_link:
                break
            url = rebase_link(next_link, ctx.url(PRICES_PATH))
        return parse_items(ctx, items, source=ctx.url(PRICES_PATH))


# --------------------------------------------------------------------------------------------
# Request building


def configured_regions(ctx: FetchContext) -> tuple[str, ...] | None:
    """Regions from RENTOPT_AZURE_REGIONS (comma list, or "all": None), else the defaults.
    The value is checked by optimizer/settings.py."""
    regions = settings().azure_regions
    if regions == "all":
        return None
    return regions or DEFAULT_REGIONS


def build_filter(regions: tuple[str, ...] | None) -> str:
    """The OData filter for GPU VM meters, the disk tier and internet egress in `regions`.

    >>> build_filter(("eastus",))[:65]
    "armRegionName eq 'eastus' and ((serviceName eq 'Virtual Machines'"
    """
    families = " or ".join(f"contains(armSkuName, '{p}')" for p in GPU_SIZE_PREFIXES)
    services = (
        f"(serviceName eq 'Virtual Machines' and ({families}))"
        f" or (serviceName eq 'Storage' and productName eq '{DISK_PRODUCT}' and skuName eq '{DISK_SKU}')"
        f" or (serviceName eq 'Bandwidth' and productName eq '{EGRESS_PRODUCT}')"
    )
    if regions is None:
        return services
    where = " or ".join(f"armRegionName eq '{r}'" for r in regions)
    if len(regions) > 1:
        where = f"({where})"
    return f"{where} and ({services})"


def rebase_link(link: str, base: str) -> str:
    """Follow a NextPageLink exactly, but on the host we are configured to use.

    The link names the public host (often with :443); a RENTOPT_AZURE_BASE_URL mirror must keep
    serving the following pages. Path and query are kept verbatim: Microsoft's own example link
    misspells `$filter`, so rebuilding the query ourselves would be wrong.

    >>> rebase_link("https://prices.azure.com:443/api/retail/prices?$skip=1000", "http://mirror:8080/api/retail/prices")
    'http://mirror:8080/api/retail/prices?$skip=1000'
    """
    target = urlsplit(link)
    home = urlsplit(base)
    return urlunsplit((home.scheme, home.netloc, target.path, target.query, ""))


# --------------------------------------------------------------------------------------------
# Parsing (pure; no I/O)


def read_page(ctx: FetchContext, body: Any) -> tuple[list[dict[str, Any]], str | None]:
    """Items and NextPageLink of one page; a wrong envelope rejects the whole response."""
    if not isinstance(body, dict):
        raise ctx.schema_error(f"expected a JSON object with 'Items', got {type(body).__name__}")
    if "Items" not in body:
        detail = body.get("Error") or body.get("error")
        hint = f" (the API said: {str(detail)[:200]})" if detail else ""
        raise ctx.schema_error(f"response has no 'Items' list{hint}")
    items = body["Items"]
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise ctx.schema_error("'Items' is not a list of objects")
    currency = body.get("BillingCurrency")
    if currency is not None and currency != ctx.provider.currency:
        raise ctx.schema_error(f"prices are in {currency}, expected {ctx.provider.currency}")
    ctx.require_fields(items, REQUIRED_FIELDS, "price row with meterId", "meterId")
    link = body.get("NextPageLink")
    if link is not None and not isinstance(link, str):
        raise ctx.schema_error("'NextPageLink' is neither a URL nor null")
    return items, link or None


def duplicate_reason(item: dict[str, Any]) -> str | None:
    """Why a row is a duplicate of the Linux pay-as-you-go meter and must be ignored, or None.

    >>> duplicate_reason({"productName": "Virtual Machines NCCadsv5 Srs Win", "skuName": "x", "meterName": "x", "type": "Consumption"})
    'Windows'
    >>> duplicate_reason({"productName": "Virtual Machines NDsr H100 v5 Series Linux", "skuName": "ND96isr H100 v5", "meterName": "ND96isr H100 v5", "type": "Consumption"}) is None
    True
    """
    product = item.get("productName") or ""
    if re.search(r"\bWin(dows)?\b", product):
        return "Windows"
    if "Cloud Services" in product or "CloudServices" in product:
        return "Cloud Services"
    if "Dedicated" in product:
        return "Dedicated Host"
    if "Low Priority" in (item.get("skuName") or "") or "Low Priority" in (item.get("meterName") or ""):
        return "Low Priority"
    if item.get("type") == "DevTestConsumption":
        return "DevTest"
    return None


def is_spot(item: dict[str, Any]) -> bool:
    return (item.get("skuName") or "").endswith(" Spot") or (item.get("meterName") or "").endswith(" Spot")


@dataclass
class _VmPrices:
    hourly: Decimal | None = None
    spot: Decimal | None = None
    terms: dict[str, Decimal] | None = None  # reservation term -> total
    savings: dict[str, Decimal] | None = None  # savings-plan term -> per hour
    location: str = ""
    product: str = ""


def parse_items(ctx: FetchContext, items: list[dict[str, Any]], *, source: str) -> list[Offer]:
    """Turn the walk's rows into offers: one pay-as-you-go (+ reserved) and one Spot per size/region."""
    vms: dict[tuple[str, str], _VmPrices] = defaultdict(_VmPrices)
    disk_month: dict[str, Decimal] = {}
    egress_tiers: dict[str, list[tuple[Decimal, Decimal | None]]] = defaultdict(list)

    for item in items:
        region = item.get("armRegionName") or ""
        if not region or duplicate_reason(item):
            continue
        if item.get("currencyCode", ctx.provider.currency) != ctx.provider.currency:
            ctx.skip(str(item.get("meterId", "?")), f"price in {item.get('currencyCode')}, not {ctx.provider.currency}")
            continue
        service = item["serviceName"]
        if service == "Storage":
            if item["meterName"] == DISK_METER and item["type"] == "Consumption":
                price = to_decimal(item["retailPrice"])
                if price is not None and item["unitOfMeasure"] == "1/Month":
                    disk_month[region] = price
            continue
        if service == "Bandwidth":
            if item["meterName"] == EGRESS_METER and item["type"] == "Consumption" and item["unitOfMeasure"] == "1 GB":
                tier = to_amount(item.get("tierMinimumUnits", 0))
                if tier is None:
                    raise ctx.schema_error(f"egress tier {item.get('tierMinimumUnits')!r} is not a number")
                egress_tiers[region].append((tier, to_decimal(item["retailPrice"])))
            continue
        if service != "Virtual Machines":
            continue
        sku = item.get("armSkuName") or ""
        if not sku:
            continue
        _collect_vm_row(ctx, vms[(sku, region)], item)

    offers: list[Offer] = []
    for (sku, region), prices in sorted(vms.items()):
        size = SIZES.get(sku)
        row_id = f"{sku}/{region}"
        if size is None:
            ctx.skip(row_id, f"VM size {sku} is not in rentopt's N-series table (unknown GPU model and count)")
            continue
        if size.fraction:
            ctx.skip(row_id, f"fractional GPU: {sku} is {size.fraction} of an {size.family.gpu_raw.split()[-1]}")
            continue
        common = _common_fields(size, sku, region, prices, disk_month.get(region), egress_tiers.get(region), source)
        on_demand = _on_demand_options(prices)
        offer = ctx.offer(offer_id=row_id, price_options=on_demand, **common)
        if offer:
            offers.append(offer)
        if prices.spot is not None:
            spot = ctx.offer(
                offer_id=f"{row_id}/spot", spot=True,
                price_options=[PriceOption(unit=PriceUnit.HOUR, amount=prices.spot, interruptible=True, label="spot")],
                **common,
            )
            if spot:
                offers.append(spot)
    return offers


def _collect_vm_row(ctx: FetchContext, prices: _VmPrices, item: dict[str, Any]) -> None:
    if item["unitOfMeasure"] != "1 Hour":
        ctx.skip(str(item.get("meterId", item.get("armSkuName"))), f"unexpected unit {item['unitOfMeasure']!r} for a VM meter")
        return
    prices.location = item.get("location") or prices.location
    price = to_decimal(item["retailPrice"])  # 0 and null mean "unknown", never free
    kind = item["type"]
    if kind == "Reservation":
        term = item.get("reservationTerm")
        if term in TERM_HOURS and price is not None:
            prices.terms = prices.terms or {}
            prices.terms[term] = _lower(prices.terms.get(term), price)
        return
    if kind != "Consumption":
        return
    if is_spot(item):
        if price is not None:
            prices.spot = _lower(prices.spot, price)
        return
    prices.product = item.get("productName") or prices.product
    if price is not None:
        prices.hourly = _lower(prices.hourly, price)
    for plan in item.get("savingsPlan") or []:
        per_hour = to_decimal(plan.get("retailPrice")) if isinstance(plan, dict) else None
        term = plan.get("term") if isinstance(plan, dict) else None
        if per_hour is not None and term in TERM_HOURS:
            prices.savings = prices.savings or {}
            prices.savings[term] = _lower(prices.savings.get(term), per_hour)


def _lower(current: Decimal | None, new: Decimal) -> Decimal:
    # Product-name variants ("... Series" vs "... Series Linux") can repeat a meter; keep the
    # lower price rather than whichever row came last.
    return new if current is None else min(current, new)


def _on_demand_options(prices: _VmPrices) -> list[PriceOption]:
    options: list[PriceOption] = []
    if prices.hourly is not None:
        options.append(PriceOption(unit=PriceUnit.HOUR, amount=prices.hourly, label="pay-as-you-go"))
    for term, total in sorted((prices.terms or {}).items()):
        options.append(PriceOption(unit=PriceUnit.TERM, amount=total, term_hours=TERM_HOURS[term],
                                   label=f"reserved {term}"))
    for term, per_hour in sorted((prices.savings or {}).items()):
        # A savings plan commits to an hourly spend for the whole term: model the commitment.
        hours = TERM_HOURS[term]
        options.append(PriceOption(unit=PriceUnit.TERM, amount=per_hour * hours, term_hours=hours,
                                   label=f"savings plan {term}"))
    return options


def first_paid_tier(tiers: list[tuple[Decimal, Decimal | None]] | None) -> Decimal | None:
    """$/GB of the cheapest-to-reach paid egress tier (the first GBs may be free).

    >>> first_paid_tier([(Decimal(10240), Decimal("0.083")), (Decimal(0), None), (Decimal(100), Decimal("0.087"))])
    Decimal('0.087')
    """
    for _, price in sorted(tiers or [], key=lambda t: t[0]):
        if price is not None:
            return price
    return None


def is_rdma(size_name: str) -> bool:
    """Whether a size has the RDMA ('r') capability letter: its InfiniBand NIC is usable.

    >>> is_rdma("Standard_ND96isr_H100_v5"), is_rdma("Standard_ND96is_MI300X_v5"), is_rdma("Standard_NC80adis_H100_v5")
    (True, False, False)
    """
    m = re.match(r"^Standard_[A-Z]+\d+([a-z]*)", size_name)
    return bool(m and "r" in m.group(1))


def _common_fields(size: Size, sku: str, region: str, prices: _VmPrices, disk_month: Decimal | None,
                   tiers: list[tuple[Decimal, Decimal | None]] | None, source: str) -> dict[str, Any]:
    family = size.family
    fabric_gbps = family.fabric_gbps if is_rdma(sku) else None
    fabric = "infiniband" if fabric_gbps else None
    extra: dict[str, Any] = {
        "instance_type": sku,
        "series": family.name,
        "series_doc": family.doc,
    }
    if prices.location:
        extra["location"] = prices.location
    if prices.product:
        extra["product_name"] = prices.product
    storage = None
    if disk_month is not None:
        # Per GiB of a P30 disk: a GiB is 7 % more than a GB, so this slightly over-states storage.
        storage = (disk_month / DISK_TIER_GIB).quantize(Decimal("0.000001"))
        extra["disk_tier"] = f"{DISK_SKU} ({DISK_TIER_GIB} GiB) {disk_month} USD/month"
    egress = first_paid_tier(tiers)
    if tiers:
        extra["egress_tiers"] = [
            {"from_gb": str(t), "usd_per_gb": str(p) if p is not None else None}
            for t, p in sorted(tiers, key=lambda t: t[0])
        ]
    fields = {
        "gpu_raw": family.gpu_raw,
        "gpu_memory_gb": family.memory_gb,
        "gpus": size.gpus,
        "interconnect": family.interconnect,
        "interconnect_gbps": family.interconnect_gbps,
        "fabric": fabric,
        "fabric_gbps": fabric_gbps,
        "region": region,
        "storage_gb_month": storage,
        "egress_gb": egress,
        "ingress_gb": INGRESS_PER_GB,
        "source": source,
        "extra": extra,
    }
    # InfiniBand sizes ('r') are sold for clusters: a stated, cited node count (providers/multinode.py).
    return multinode.apply(fields, multinode.AZURE_FAMILIES.get(sku) if fabric_gbps else None)
