"""AWS EC2 GPU instances, priced from the public bulk price list (no key) and the spot feed.

Per region, `GET https://pricing.us-east-1.amazonaws.com/offers/v1.0/aws/AmazonEC2/current/
{region}/index.json` returns every EC2 product and its terms. The file is big: small regions are
tens of MB, us-east-1 several hundred MB, and it is read whole into memory (streaming it is out
of scope), so only a few regions are fetched: RENTOPT_AWS_REGIONS (comma list), default
us-east-1 and us-west-2. Expect tens of seconds to minutes per region on a good connection.

From each file rentopt keeps the Linux, shared-tenancy, pay-as-you-go product of each GPU
instance type in `FAMILIES` (Windows, RHEL, Dedicated, unused capacity reservations and Capacity
Block rows repeat the same instance type and are ignored), its on-demand hourly price and its
standard Reserved terms (upfront fee + hourly x term hours = one TERM price), and the EBS gp3
price per GB-month. Spot prices come from the undocumented public feed behind the spot pricing
page (`https://website.spot.ec2.aws.a2z.com/spot.json`); set RENTOPT_AWS_SPOT=0 to skip it. Its
"N/A*" entries mean unknown, and a failed spot download only costs the spot offers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from rentopt.optimizer.errors import ProviderError, ProviderSchemaError
from rentopt.optimizer.limits import AWS_PRICE_LIST_BYTES
from rentopt.optimizer.models import Interconnect, Offer, PriceOption, PriceUnit
from rentopt.optimizer.settings import settings
from rentopt.providers import multinode
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_amount, to_decimal

OFFER_PATH = "/offers/v1.0/aws/AmazonEC2/current/{region}/index.json"
SPOT_URL = "https://website.spot.ec2.aws.a2z.com/spot.json"
REGIONS_ENV = "RENTOPT_AWS_REGIONS"
# The two regions with the widest P-instance fleets; each extra region is another big download.
DEFAULT_REGIONS = ("us-east-1", "us-west-2")

ON_DEMAND_TERM = "JRTCKXETXF"  # the OnDemand offerTermCode in every AWS offer file
TERM_HOURS = {"1yr": 8760, "3yr": 26280}

# Internet egress, first paid tier ("next 9.999 TB / month", after 100 GB free per month across
# AWS): https://aws.amazon.com/ec2/pricing/on-demand/ ("Data Transfer"). Inbound is free there too.
EGRESS_PER_GB = Decimal("0.09")
INGRESS_PER_GB = Decimal(0)

# Old spot.js region keys; the current feed uses API names, but accept both.
SPOT_REGION_ALIASES = {
    "us-east": "us-east-1", "us-west": "us-west-1", "eu-ireland": "eu-west-1",
    "apac-sin": "ap-southeast-1", "apac-syd": "ap-southeast-2", "apac-tokyo": "ap-northeast-1",
}


@dataclass(frozen=True)
class Family:
    """One EC2 GPU family. The price list has a GPU count but not the GPU model."""

    gpu_raw: str  # a spelling hardware.normalise knows exactly
    memory_gb: float
    interconnect: Interconnect
    interconnect_gbps: float | None  # NVLink GB/s per GPU (bidirectional)
    efa: bool  # Elastic Fabric Adapter: OS-bypass RDMA between nodes
    doc: str


_DOCS = "https://aws.amazon.com/ec2/instance-types/"
FAMILIES: dict[str, Family] = {
    "g4dn": Family("NVIDIA T4", 16, "pcie", None, False, _DOCS + "g4/"),
    "g5": Family("NVIDIA A10G", 24, "pcie", None, False, _DOCS + "g5/"),
    "g6": Family("NVIDIA L4", 24, "pcie", None, False, _DOCS + "g6/"),
    "g6e": Family("NVIDIA L40S", 48, "pcie", None, False, _DOCS + "g6e/"),
    # V100 SXM2 with NVLink (300 GB/s per GPU); p3dn has the 32 GB part and 100 Gb/s EFA.
    "p3": Family("Tesla V100-SXM2-16GB", 16, "nvlink", 300, False, _DOCS + "p3/"),
    "p3dn": Family("Tesla V100-SXM2-32GB", 32, "nvlink", 300, True, _DOCS + "p3/"),
    # A100 SXM4, NVLink 3 (600 GB/s per GPU), 400 Gb/s EFA.
    "p4d": Family("NVIDIA A100-SXM4-40GB", 40, "nvlink", 600, True, _DOCS + "p4/"),
    "p4de": Family("NVIDIA A100-SXM4-80GB", 80, "nvlink", 600, True, _DOCS + "p4/"),
    # H100 / H200 SXM, NVLink 4 (900 GB/s per GPU), 3200 Gb/s EFA.
    "p5": Family("NVIDIA H100 80GB HBM3", 80, "nvlink", 900, True, _DOCS + "p5/"),
    "p5e": Family("H200 SXM", 141, "nvlink", 900, True, _DOCS + "p5/"),
    "p5en": Family("H200 SXM", 141, "nvlink", 900, True, _DOCS + "p5/"),
    # B200 (1440 GB HBM3e over 8 GPUs), NVLink 5 (1800 GB/s per GPU), 3200 Gb/s EFAv4.
    "p6-b200": Family("NVIDIA B200", 180, "nvlink", 1800, True, _DOCS + "p6/"),
}

# A product row is the pay-as-you-go Linux price of an instance type only if all of these hold
# (the same filters gpuhunt and SkyPilot apply to the CSV form, provider-apis.md §5.1).
CANONICAL_ATTRIBUTES = {
    "operatingSystem": "Linux",
    "tenancy": "Shared",
    "capacitystatus": "Used",
    "preInstalledSw": "NA",
}


class AwsProvider(Provider):
    name = "aws"
    currency = "USD"
    api_root = "https://pricing.us-east-1.amazonaws.com"
    key_env = None
    key_required = False
    max_concurrency = 2  # each request is a large file
    max_response_bytes = AWS_PRICE_LIST_BYTES  # us-east-1's price list is several hundred MB
    docs_url = "https://docs.aws.amazon.com/awsaccountbilling/latest/aboutv2/using-ppslong.html"
    billing = BillingRules(
        # Linux instances: per-second billing with a 60-second minimum.
        granularity_s=1,
        minimum_s=60,
        # A stopped instance pays for its EBS volumes only.
        stopped_pays="storage",
        # AWS's pricing calculator counts 730 hours in a month.
        month_hours=730,
        source="https://aws.amazon.com/ec2/pricing/on-demand/ (per-second billing, 60 s minimum, Linux)",
    )

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        regions = configured_regions(ctx)
        offers: list[Offer] = []
        for region in regions:
            url = ctx.url(OFFER_PATH.format(region=region))
            try:
                body = await ctx.get_json(url)
            except ProviderError as exc:
                # An unknown region is answered 403/404 by the price-list host: say which one.
                hint = f"; is it a real region? check {REGIONS_ENV}" if exc.status in (403, 404) else ""
                again = ctx.schema_error if isinstance(exc, ProviderSchemaError) else ctx.error
                raise again(f"price list for {region}: {exc.reason}{hint}") from None
            offers.extend(parse_offer_file(ctx, body, region=region, source=url))
        if spot_enabled():
            spot_url = settings().aws_spot_url or SPOT_URL
            try:
                feed = await ctx.get_json(spot_url)
            except ProviderError as exc:
                # The spot feed is optional and undocumented: losing it costs the spot offers only.
                ctx.skip("spot.json", f"spot prices unavailable ({exc.reason})")
            else:
                offers.extend(spot_offers(ctx, feed, offers, source=spot_url))
        return offers


def configured_regions(ctx: FetchContext) -> tuple[str, ...]:
    """RENTOPT_AWS_REGIONS (checked by optimizer/settings.py), else the defaults."""
    return settings().aws_regions or DEFAULT_REGIONS


def spot_enabled() -> bool:
    return settings().aws_spot


# --------------------------------------------------------------------------------------------
# Parsing the offer file (pure; no I/O)


def family_of(instance_type: str) -> str:
    """`p5.48xlarge` -> `p5`, `p6-b200.48xlarge` -> `p6-b200`.

    >>> family_of("p6-b200.48xlarge"), family_of("g4dn.12xlarge")
    ('p6-b200', 'g4dn')
    """
    return instance_type.split(".", 1)[0]


def network_gbps(performance: str | None) -> float | None:
    """Gbit/s from `networkPerformance` ("3200 Gigabit", "Up to 25 Gigabit").

    >>> network_gbps("3200 Gigabit"), network_gbps("Up to 25 Gigabit"), network_gbps("High")
    (3200.0, 25.0, None)
    """
    m = re.search(r"(\d+(?:\.\d+)?)\s*Gigabit", performance or "")
    return float(m.group(1)) if m else None


def _usd(dimension: dict[str, Any]) -> Any:
    return (dimension.get("pricePerUnit") or {}).get("USD")


def parse_offer_file(ctx: FetchContext, body: Any, *, region: str, source: str) -> list[Offer]:
    """Offers for the GPU instance types of one region's EC2 offer file."""
    products, terms = _envelope(ctx, body, region)
    on_demand_terms = terms.get("OnDemand") or {}
    reserved_terms = terms.get("Reserved") or {}

    storage = _gp3_price(products, on_demand_terms, region)
    canonical: dict[str, tuple[str, dict[str, Any]]] = {}
    seen_types: set[str] = set()
    for sku, product in products.items():
        attrs = product.get("attributes") or {}
        instance_type = attrs.get("instanceType") or ""
        if product.get("productFamily") not in ("Compute Instance", "Compute Instance (bare metal)"):
            continue
        if family_of(instance_type) not in FAMILIES or attrs.get("regionCode", region) != region:
            continue
        seen_types.add(instance_type)
        if not _is_canonical(attrs) or instance_type in canonical:
            continue
        canonical[instance_type] = (sku, attrs)

    offers: list[Offer] = []
    for instance_type in sorted(seen_types):
        row_id = f"{instance_type}/{region}"
        if instance_type not in canonical:
            ctx.skip(row_id, "no pay-as-you-go Linux price (only Capacity Block, reservation or licensed rows)")
            continue
        sku, attrs = canonical[instance_type]
        family = FAMILIES[family_of(instance_type)]
        gpus = _gpu_count(attrs)
        if gpus is None:
            ctx.skip(row_id, f"GPU count {attrs.get('gpu')!r} is not a positive whole number")
            continue
        options = _on_demand_options(on_demand_terms.get(sku) or {})
        options += _reserved_options(reserved_terms.get(sku) or {})
        offer = ctx.offer(
            offer_id=row_id, price_options=options, **_common_fields(family, instance_type, gpus, attrs, region,
                                                                     storage, source),
        )
        if offer:
            offers.append(offer)
    return offers


def _envelope(ctx: FetchContext, body: Any, region: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if not isinstance(body, dict):
        raise ctx.schema_error(f"offer file for {region} is not a JSON object")
    if body.get("offerCode") != "AmazonEC2":
        raise ctx.schema_error(f"offer file for {region} has offerCode {body.get('offerCode')!r}, expected 'AmazonEC2'")
    products, terms = body.get("products"), body.get("terms")
    if not isinstance(products, dict) or not isinstance(terms, dict):
        raise ctx.schema_error(f"offer file for {region} lacks the 'products' or 'terms' object")
    for sku, product in products.items():
        if not isinstance(product, dict) or not isinstance(product.get("attributes"), dict):
            raise ctx.schema_error(f"product {sku} in the {region} offer file has no 'attributes' object")
    return products, terms


def _is_canonical(attrs: dict[str, Any]) -> bool:
    if any(attrs.get(k) != v for k, v in CANONICAL_ATTRIBUTES.items()):
        return False
    # Capacity Blocks are a separate market (MarketOption CapacityBlock, operation ...:CB).
    if attrs.get("marketoption", "OnDemand") != "OnDemand":
        return False
    return attrs.get("operation", "RunInstances") == "RunInstances"


def _gpu_count(attrs: dict[str, Any]) -> int | None:
    try:
        count = int(str(attrs.get("gpu", "")).strip())
    except ValueError:
        return None
    return count if count > 0 else None


def _dimensions(term: dict[str, Any]) -> list[dict[str, Any]]:
    dims = term.get("priceDimensions") or {}
    return [d for d in dims.values() if isinstance(d, dict)]


def _on_demand_options(sku_terms: dict[str, Any]) -> list[PriceOption]:
    for code, term in sku_terms.items():
        if not isinstance(term, dict) or term.get("offerTermCode", code.rsplit(".", 1)[-1]) != ON_DEMAND_TERM:
            continue
        for dim in _dimensions(term):
            price = to_decimal(_usd(dim))  # "0.0000000000" means no price, never free
            if dim.get("unit") == "Hrs" and price is not None:
                return [PriceOption(unit=PriceUnit.HOUR, amount=price, label="on-demand")]
    return []


def _reserved_options(sku_terms: dict[str, Any]) -> list[PriceOption]:
    """Standard Reserved Instance terms as TERM prices: upfront fee + hourly x term hours.

    Convertible terms are left out: they cost at least as much as standard ones for the same
    length, and what they add (exchanging instance types) does not matter for one training job.
    """
    options: list[PriceOption] = []
    for term in sku_terms.values():
        if not isinstance(term, dict):
            continue
        attrs = term.get("termAttributes") or {}
        length = attrs.get("LeaseContractLength")
        if attrs.get("OfferingClass") != "standard" or length not in TERM_HOURS:
            continue
        hours = TERM_HOURS[length]
        upfront, hourly, ok = Decimal(0), Decimal(0), True
        for dim in _dimensions(term):
            value = to_amount(_usd(dim))
            if value is None:
                ok = False
            elif dim.get("unit") == "Quantity":
                upfront += value
            elif dim.get("unit") == "Hrs":
                hourly += value
        total = upfront + hourly * hours
        if ok and total > 0:
            options.append(PriceOption(unit=PriceUnit.TERM, amount=total, term_hours=hours,
                                       label=f"reserved {length} {attrs.get('PurchaseOption', '')}".strip()))
    return sorted(options, key=lambda o: (o.term_hours or 0, o.amount))


def _gp3_price(products: dict[str, Any], on_demand_terms: dict[str, Any], region: str) -> Decimal | None:
    """EBS gp3 $/GB-month in this region (what checkpoints on the instance's volume cost)."""
    for sku, product in products.items():
        attrs = product.get("attributes") or {}
        if product.get("productFamily") != "Storage" or attrs.get("volumeApiName") != "gp3":
            continue
        if attrs.get("regionCode", region) != region:
            continue
        for term in (on_demand_terms.get(sku) or {}).values():
            for dim in _dimensions(term) if isinstance(term, dict) else []:
                price = to_decimal(_usd(dim))
                if dim.get("unit") == "GB-Mo" and price is not None:
                    return price
    return None


def memory_gb(text: Any) -> float | None:
    """The price list's instance `memory` ("1152 GiB", "16 GiB") in GB; None if unreadable.

    >>> memory_gb("1152 GiB"), memory_gb("NA")
    (1237.0, None)
    """
    m = re.match(r"^\s*([\d.,]+)\s*GiB\s*$", str(text or ""))
    return round(float(m.group(1).replace(",", "")) * 2**30 / 1e9, 1) if m else None


def _common_fields(family: Family, instance_type: str, gpus: int, attrs: dict[str, Any], region: str,
                   storage: Decimal | None, source: str) -> dict[str, Any]:
    gbps = network_gbps(attrs.get("networkPerformance"))
    extra: dict[str, Any] = {"instance_type": instance_type, "family_doc": family.doc}
    for key, name in (("vcpu", "vcpus"), ("memory", "ram"), ("networkPerformance", "network"),
                      ("storage", "instance_storage"), ("location", "location")):
        if attrs.get(key) not in (None, "", "NA"):
            extra[name] = attrs[key]
    if family.efa:
        extra["fabric_name"] = "EFA"
    return multinode.apply({
        "gpu_raw": family.gpu_raw,
        "gpu_memory_gb": family.memory_gb,
        "host_ram_gb": memory_gb(attrs.get("memory")),
        "gpus": gpus,
        "interconnect": family.interconnect,
        "interconnect_gbps": family.interconnect_gbps,
        # EFA is OS-bypass RDMA: treated like InfiniBand for multi-node training; otherwise TCP.
        "fabric": ("infiniband" if family.efa else "ethernet") if gbps else None,
        "fabric_gbps": gbps,
        "region": region,
        "storage_gb_month": storage,
        "egress_gb": EGRESS_PER_GB,
        "ingress_gb": INGRESS_PER_GB,
        "source": source,
        "extra": extra,
    }, multinode.AWS_FAMILIES.get(instance_type.split(".")[0]), keep_feed_fabric=True)


# --------------------------------------------------------------------------------------------
# Spot feed (pure; no I/O)


def parse_spot_feed(ctx: FetchContext, feed: Any) -> dict[tuple[str, str], Any]:
    """(region, instance type) -> the raw Linux spot price string of the feed."""
    regions = feed.get("config", {}).get("regions") if isinstance(feed, dict) else None
    if not isinstance(regions, list):
        raise ctx.schema_error("spot feed has no config.regions list")
    prices: dict[tuple[str, str], Any] = {}
    for region in regions:
        if not isinstance(region, dict):
            continue
        name = SPOT_REGION_ALIASES.get(region.get("region", ""), region.get("region", ""))
        for group in region.get("instanceTypes") or []:
            for size in (group or {}).get("sizes") or []:
                for column in (size or {}).get("valueColumns") or []:
                    if column.get("name") == "linux":
                        prices[(name, size.get("size", ""))] = (column.get("prices") or {}).get("USD")
    return prices


def spot_offers(ctx: FetchContext, feed: Any, on_demand: list[Offer], *, source: str) -> list[Offer]:
    """A spot twin of each on-demand offer the feed prices; "N/A*" and 0 count as unknown."""
    try:
        prices = parse_spot_feed(ctx, feed)
    except ProviderError as exc:
        ctx.skip("spot.json", exc.reason)
        return []
    offers: list[Offer] = []
    for base in on_demand:
        instance_type = base.extra.get("instance_type", "")
        key = (base.region or "", instance_type)
        if key not in prices:
            continue
        row_id = f"{base.offer_id}/spot"
        price = to_decimal(prices[key])
        if price is None:
            ctx.skip(row_id, f"spot price {prices[key]!r} is not a price")
            continue
        fields = base.model_dump(exclude={"offer_id", "spot", "price_options", "gpu", "gpu_status",
                                          "provider", "currency", "fetched_at"})
        fields.update(source=source, extra={**base.extra, "spot_feed_note": "undocumented feed, no timestamp"})
        offer = ctx.offer(
            offer_id=row_id, spot=True,
            price_options=[PriceOption(unit=PriceUnit.HOUR, amount=price, interruptible=True, label="spot")],
            **fields,
        )
        if offer:
            offers.append(offer)
    return offers
