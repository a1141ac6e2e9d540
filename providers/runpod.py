"""RunPod pods: every GPU type from one GraphQL `gpuTypes` query.

Facts this module relies on (provider-apis.md §2):

- Prices are $/h **per GPU**; a pod of N GPUs costs N times as much (SkyPilot fetch_runpod.py,
  gpuhunt providers/runpod.py). Secure Cloud (RunPod's data centres) and Community Cloud (hosts)
  are priced separately, and `secureCloud` / `communityCloud` say which exist: a price of 0 next to
  a false flag means "not sold there", not "unknown".
- `secureSpotPrice` / `communitySpotPrice` are interruptible (spot) prices per GPU-hour.
- `oneWeekPrice` ... `sixMonthPrice` are savings-plan prices per GPU-hour, usually null; RunPod
  sells them as an upfront commitment (https://docs.runpod.io/pods/pricing).
- GraphQL errors arrive with HTTP 200 as `{"errors": [...]}`.

Each GPU type becomes one offer per cloud and GPU count (1, 2, 4, 8 up to the type's maximum),
id `"<gpu type id>/<secure|community>/<count>"`: stable across refreshes, and the gpu type id is
kept verbatim (double spaces included) because it is what RunPod expects on create.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_decimal

# All GPU types in one call, with the fields gpuhunt's and runpod-python's queries use
# (dstackai/gpuhunt providers/runpod.py; runpod/runpod-python runpod/api/queries/gpus.py).
GPU_TYPES_QUERY = """
query GpuTypes {
  gpuTypes {
    id
    displayName
    manufacturer
    memoryInGb
    maxGpuCount
    maxGpuCountSecureCloud
    maxGpuCountCommunityCloud
    minPodGpuCount
    secureCloud
    communityCloud
    securePrice
    communityPrice
    secureSpotPrice
    communitySpotPrice
    oneWeekPrice
    oneMonthPrice
    threeMonthPrice
    sixMonthPrice
    lowestPrice(input: {gpuCount: 1}) {
      minimumBidPrice
      uninterruptablePrice
      stockStatus
    }
  }
}
"""

# GPU counts a pod is offered with; the usual power-of-two node slices up to maxGpuCount.
POD_GPU_COUNTS = (1, 2, 4, 8)

# Storage list prices, not in the API: $0.10/GB-month for container and volume disk while the
# pod runs, $0.20/GB-month for the volume disk of a stopped pod (https://docs.runpod.io/pods/storage).
STORAGE_RUNNING_GB_MONTH = Decimal("0.10")
STORAGE_STOPPED_GB_MONTH = Decimal("0.20")
# "All compute and storage charges are billed per second, with no fees for data transfer."
# (https://docs.runpod.io/accounts-billing/billing)
TRANSFER_GB = Decimal(0)

HOURS_PER_WEEK = 168
# Savings-plan terms in hours, on the provider's 730-hour month (BillingRules.month_hours).
SAVINGS_TERMS = (("oneWeekPrice", PriceUnit.WEEK, None), ("oneMonthPrice", PriceUnit.MONTH, None),
                 ("threeMonthPrice", PriceUnit.TERM, 3), ("sixMonthPrice", PriceUnit.TERM, 6))

REQUIRED_FIELDS = ("id", "memoryInGb", "maxGpuCount", "securePrice", "communityPrice")


class RunpodProvider(Provider):
    name = "runpod"
    currency = "USD"
    api_root = "https://api.runpod.io"
    key_env = "RUNPOD_API_KEY"
    key_required = False  # gpuTypes answers without a key (gpuhunt sends it bare)
    # Per-second billing for compute and storage, storage billed while a pod is stopped
    # (https://docs.runpod.io/pods/pricing, https://docs.runpod.io/pods/storage).
    billing = BillingRules(granularity_s=1, minimum_s=0, stopped_pays="storage", month_hours=730,
                           source="https://docs.runpod.io/pods/pricing")
    docs_url = "https://docs.runpod.io/pods/pricing"

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        body = await ctx.post_json(ctx.url("graphql"), json={"query": GPU_TYPES_QUERY, "variables": {}})
        offers: list[Offer] = []
        for gpu_type in gpu_types(ctx, body):
            offers.extend(parse_gpu_type(ctx, gpu_type))
        return offers


def gpu_types(ctx: FetchContext, body: Any) -> list[dict[str, Any]]:
    """The `data.gpuTypes` list; GraphQL errors and other shapes are schema errors."""
    if not isinstance(body, dict):
        raise ctx.schema_error("GraphQL response is not an object")
    if errors := body.get("errors"):
        first = errors[0].get("message", errors[0]) if isinstance(errors, list) and errors else errors
        raise ctx.schema_error(f"GraphQL error: {first}")
    data = body.get("data")
    types = data.get("gpuTypes") if isinstance(data, dict) else None
    if not isinstance(types, list) or not all(isinstance(t, dict) for t in types):
        raise ctx.schema_error("GraphQL response has no data.gpuTypes list")
    ctx.require_fields(types, REQUIRED_FIELDS, "GPU type", "id")
    return types


def parse_gpu_type(ctx: FetchContext, t: dict[str, Any]) -> list[Offer]:
    """One GPU type -> offers per cloud and GPU count (a type with no usable price is one skip)."""
    type_id = str(t["id"])
    clouds = []
    for cloud in ("secure", "community"):
        if not t.get(f"{cloud}Cloud"):
            continue  # not sold on this cloud: its price field is 0 or null by design
        price = to_decimal(t.get(f"{cloud}Price"))
        if price is None:
            ctx.skip(f"{type_id}/{cloud}", f"sold on {cloud} cloud but its price is missing or zero")
            continue
        clouds.append((cloud, price, to_decimal(t.get(f"{cloud}SpotPrice"))))
    if not clouds:
        if not (t.get("secureCloud") or t.get("communityCloud")):
            ctx.skip(type_id, "listed on neither secure nor community cloud with a usable price")
        return []
    max_any = _count(t.get("maxGpuCount")) or 1
    min_pod = _count(t.get("minPodGpuCount")) or 1  # some types are only rented in multi-GPU pods
    lowest = t.get("lowestPrice") if isinstance(t.get("lowestPrice"), dict) else {}
    gpu_raw = " ".join(type_id.split())  # RunPod's enum has double-space ids ("NVIDIA  RTX A4500")
    offers: list[Offer] = []
    for cloud, price, spot in clouds:
        max_count = _count(t.get(f"maxGpuCount{cloud.capitalize()}Cloud")) or max_any
        for count in (c for c in POD_GPU_COUNTS if min_pod <= c <= max_count):
            options = [PriceOption(unit=PriceUnit.HOUR, amount=price * count, label=f"{cloud} cloud on-demand")]
            if spot is not None:
                options.append(PriceOption(unit=PriceUnit.HOUR, amount=spot * count, interruptible=True,
                                           label=f"{cloud} cloud spot"))
            if cloud == "secure":
                options.extend(savings_plan_options(t, count, ctx.provider.billing.month_hours))
            offer = ctx.offer(
                offer_id=f"{type_id}/{cloud}/{count}",
                gpu_raw=gpu_raw,
                gpu_memory_gb=_positive(t.get("memoryInGb")),
                form_factor_hint=form_factor(t.get("displayName")),
                gpus=count,
                interconnect=interconnect(type_id, t.get("displayName"), t.get("manufacturer")),
                price_options=options,
                storage_gb_month=STORAGE_RUNNING_GB_MONTH,
                storage_stopped_gb_month=STORAGE_STOPPED_GB_MONTH,
                egress_gb=TRANSFER_GB,
                ingress_gb=TRANSFER_GB,
                source=ctx.url("graphql"),
                extra={
                    "cloud": cloud,
                    "gpu_type_id": type_id,
                    "display_name": t.get("displayName"),
                    "manufacturer": t.get("manufacturer"),
                    "stock_status": lowest.get("stockStatus"),
                    "max_gpu_count": max_count,
                },
            )
            if offer is not None:
                offers.append(offer)
    return offers


def savings_plan_options(t: dict[str, Any], count: int, month_hours: int) -> list[PriceOption]:
    """Savings-plan prices (per GPU-hour) as whole-pod totals per week, month or term.

    Attached to Secure Cloud offers only: a plan reserves specific GPUs for its term
    (https://contact.runpod.io/hc/en-us/articles/41328309383571-RunPod-Savings-Plan-Guide-FAQs),
    which RunPod can promise in its own data centres; that it excludes Community Cloud hosts
    is our reading, not a documented rule.

    >>> [(o.unit.value, o.amount, o.term_hours) for o in savings_plan_options(
    ...     {"oneWeekPrice": 2.5, "oneMonthPrice": None, "threeMonthPrice": "2.0"}, 2, 730)]
    [('week', Decimal('840.0'), None), ('term', Decimal('8760.0'), 2190)]
    """
    out = []
    for field, unit, months in SAVINGS_TERMS:
        per_gpu_hour = to_decimal(t.get(field))
        if per_gpu_hour is None:
            continue
        hours = HOURS_PER_WEEK if unit == PriceUnit.WEEK else month_hours * (months or 1)
        out.append(PriceOption(unit=unit, amount=per_gpu_hour * count * hours,
                               term_hours=hours if unit == PriceUnit.TERM else None,
                               label=f"savings plan ({field.removesuffix('Price')})"))
    return out


_SXM = re.compile(r"\bSXM|\bHBM3\b|^NVIDIA (H200|B200|B300)$", re.IGNORECASE)


def interconnect(type_id: str, display_name: Any, manufacturer: Any) -> str:
    """NVLink for SXM-board GPUs (multi-GPU pods on one HGX board share NVSwitch), PCIe otherwise.

    RunPod names the SXM parts by board (`A100-SXM4-80GB`, displayName `H100 SXM`) or by memory
    (`NVIDIA H100 80GB HBM3` is the SXM card; nvidia-smi naming, gpu-specs.md §4); H200/B200 ids
    without a suffix are the SXM parts (the NVL variants say NVL). AMD OAM boards use Infinity
    Fabric, which this model does not call NVLink.

    >>> [interconnect(i, d, "Nvidia") for i, d in [("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ...     ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H200", "H200 SXM")]]
    ['nvlink', 'pcie', 'nvlink']
    >>> interconnect("AMD Instinct MI300X OAM", "MI300X", "AMD")
    'unknown'
    """
    if str(manufacturer or "").lower() == "amd":
        return "unknown"
    names = " ".join(type_id.split()), str(display_name or "")
    return "nvlink" if any(_SXM.search(n) for n in names) else "pcie"


_FORM_WORD = re.compile(r"\b(SXM|PCIe|NVL)\b", re.IGNORECASE)


def form_factor(display_name: Any) -> str | None:
    """The board form RunPod's displayName states, for ids that do not ("NVIDIA H200" is "H200 SXM").

    >>> form_factor("H200 SXM"), form_factor("H100 NVL"), form_factor("RTX 4090")
    ('SXM', 'NVL', None)
    """
    match = _FORM_WORD.search(str(display_name or ""))
    return match.group(1).upper().replace("PCIE", "PCIe") if match else None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _positive(value: Any) -> float | None:
    d = to_decimal(value)
    return float(d) if d is not None else None
