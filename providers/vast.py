"""Vast.ai marketplace: every rentable ask from the public offer search.

One POST to `/bundles/` with a JSON query returns `{"offers": [...]}`, one row per ask (a host's
GPUs for rent at the host's price). Facts this module relies on (provider-apis.md §1):

- `dph_total` is $/h for the whole ask *including* the disk we asked to price
  (`allocated_storage`); `storage_total_cost` is that disk's share, so the compute-only hourly
  price is `dph_total - storage_total_cost` (which is `dph_base`).
- `storage_cost` is $/GB-month and is billed while the instance is stopped too; Vast's month is
  720 h (`storage_total_cost = storage_cost * GB / 720`, checked on recorded rows).
- `inet_up_cost` / `inet_down_cost` are $/GB; 0.0 there really means free.
- `gpu_ram` is per GPU in MiB-ish MB; `duration` is the longest rental in seconds;
  `bw_nvlink` is the measured GPU-to-GPU NVLink bandwidth in GB/s (0 = none).
- `min_bid` is the current lowest interruptible bid for the GPUs (no disk), may be null.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from rentopt.optimizer.hardware import get_gpu, memory_matches
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_amount, to_decimal
from rentopt.optimizer.redact import redacted_logger

log = redacted_logger("rentopt.providers")

# Disk size (GB) the search prices each ask with. The CLI's default (vast-ai/vast-python vast.py,
# `search__offers`); it only shifts dph_total, which we undo to get the compute-only price.
ALLOCATED_STORAGE_GB = 5.0

# Rows asked for in one search. Vast has no pagination; gpuhunt asks for 3000
# (dstackai/gpuhunt providers/vastai.py) and SkyPilot for 10000 (sky/catalog/data_fetchers/
# fetch_vast.py). A full answer means the tail (lowest `score`) was cut: logged, not fatal.
SEARCH_LIMIT = 5000

# Only asks a user could rent now, from verified hosts: the CLI's default filter
# (vast-ai/vast-python vast.py `search__offers` default query).
SEARCH_QUERY: dict[str, Any] = {
    "verified": {"eq": True},
    "rentable": {"eq": True},
    "rented": {"eq": False},
    "type": "on-demand",
    "allocated_storage": ALLOCATED_STORAGE_GB,
    "order": [["score", "desc"]],
    "limit": SEARCH_LIMIT,
}

# Bare names Vast uses for one board form only: it spells the NVL cards out ("H200 NVL",
# "H100 NVL"; provider-apis.md 1.5, gpuhunt vastai.py GPU_MAPPING), so a plain "H200" is the SXM part.
FORM_OF_BARE_NAME = {"H200": "SXM"}

# Vast's float prices carry binary noise in the 17th digit; a millionth of a cent per hour is
# far below anything Vast bills.
_PRICE_QUANTUM = Decimal("0.00000001")

# Keys every ask carries. A key missing from a row is schema drift (the whole response is
# rejected); a key present with a null value is one bad row (skipped).
REQUIRED_FIELDS = ("id", "gpu_name", "num_gpus", "dph_total")


class VastProvider(Provider):
    name = "vast"
    currency = "USD"
    api_root = "https://console.vast.ai/api/v0"
    key_env = "VAST_API_KEY"
    key_required = False  # the offer search answers without a key (gpuhunt calls it bare)
    # "Per-second billing" for on-demand; storage is billed in every state, stopped included
    # (transcript of https://vast.ai/pricing in api-evangelist/vast-ai plans/vast-ai-plans-pricing.yml;
    # https://docs.vast.ai/guides/serverless/pricing). Month = 720 h: storage_total_cost is
    # storage_cost * GB / 720 on recorded rows (provider-apis.md §1.3).
    billing = BillingRules(granularity_s=1, minimum_s=0, stopped_pays="storage", month_hours=720,
                           source="https://vast.ai/pricing")
    docs_url = "https://docs.vast.ai/api-reference/search/search-offers"

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        body = await ctx.post_json(ctx.url("bundles/"), json=SEARCH_QUERY)
        rows = offer_rows(ctx, body)
        return [o for row in rows if (o := parse_offer(ctx, row)) is not None]


def offer_rows(ctx: FetchContext, body: Any) -> list[dict[str, Any]]:
    """The `offers` list of a search response; anything else is a schema error."""
    if not isinstance(body, dict) or "offers" not in body:
        raise ctx.schema_error("search response has no 'offers' list")
    rows = body["offers"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ctx.schema_error("'offers' is not a list of objects")
    ctx.require_fields(rows, REQUIRED_FIELDS, "offer", "id")
    if len(rows) >= SEARCH_LIMIT:
        log.warning("vast: the search returned the %d rows asked for; lower-scored asks were cut", len(rows))
    return rows


def parse_offer(ctx: FetchContext, row: dict[str, Any]) -> Offer | None:
    """One ask -> one Offer (or None, with the skip counted)."""
    ask_id = str(row["id"])
    gpu_name = str(row["gpu_name"] or "").strip()
    gpus = row["num_gpus"]
    if not gpu_name:
        ctx.skip(ask_id, "no GPU name")
        return None
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus <= 0:
        ctx.skip(ask_id, f"num_gpus {gpus!r} is not a positive GPU count")
        return None
    options: list[PriceOption] = []
    if (hourly := compute_hourly(row)) is not None:
        options.append(PriceOption(unit=PriceUnit.HOUR, amount=hourly, label="on-demand"))
        # Only meaningful next to an on-demand price; a bid alone is not a rentable offer here.
        if (bid := to_decimal(row.get("min_bid"))) is not None:
            options.append(PriceOption(unit=PriceUnit.HOUR, amount=_clean(bid), interruptible=True,
                                       label="interruptible (current minimum bid)"))
    nvlink_gbps = _positive_float(row.get("bw_nvlink"))
    duration_s = _positive_float(row.get("duration"))
    reported_gb = gpu_memory_gb(row.get("gpu_ram"))
    offer = ctx.offer(
        offer_id=ask_id,
        gpu_raw=gpu_name,
        gpu_memory_gb=reported_gb,
        form_factor_hint=FORM_OF_BARE_NAME.get(gpu_name),
        gpus=gpus,
        interconnect="nvlink" if nvlink_gbps else "pcie",
        interconnect_gbps=nvlink_gbps,
        region=row.get("geolocation") or None,
        price_options=options,
        storage_gb_month=_non_negative(row.get("storage_cost")),
        egress_gb=_non_negative(row.get("inet_up_cost")),
        ingress_gb=_non_negative(row.get("inet_down_cost")),
        net_up_mbps=_positive_float(row.get("inet_up")),
        net_down_mbps=_positive_float(row.get("inet_down")),
        max_duration_hours=duration_s / 3600 if duration_s else None,
        host_ram_gb=host_ram_share_gb(row),
        source=ctx.url("bundles/"),
        extra=_extra(row),
    )
    if offer is not None and offer.gpu and reported_gb:
        # Quote the card's label like every other provider (80, not the 79.6 the driver shows),
        # unless the host reports a size the label does not explain (a modded 48 GB RTX 4090).
        label = get_gpu(offer.gpu).memory_gb
        if memory_matches(label, reported_gb):
            offer.gpu_memory_gb = label
    return offer


def compute_hourly(row: dict[str, Any]) -> Decimal | None:
    """Compute-only $/h for the whole ask: dph_total minus the priced disk, else dph_base.

    >>> compute_hourly({"dph_total": 1.8013888888888889, "storage_total_cost": 0.0013888888888888889})
    Decimal('1.8')
    >>> compute_hourly({"dph_base": 0.5}), compute_hourly({"dph_total": 0.0, "dph_base": 0.0})
    (Decimal('0.5'), None)
    """
    total = to_decimal(row.get("dph_total"))
    if total is not None:
        disk = to_decimal(row.get("storage_total_cost")) or Decimal(0)
        compute = total - disk
        return _clean(compute) if compute > 0 else None
    base = to_decimal(row.get("dph_base"))
    return _clean(base) if base is not None else None


def gpu_memory_gb(gpu_ram_mb: Any) -> float | None:
    """Per-GPU memory on the scale of the vendor's label, from Vast's MiB-ish `gpu_ram`.

    Vast reports what the driver sees (an H100 80GB shows 81559), which is about the label in
    GiB, so /1024 puts Vast on the scale every other provider quotes; `parse_offer` then
    replaces it with the catalog's label when the two agree.

    >>> gpu_memory_gb(24564), gpu_memory_gb(81559), gpu_memory_gb(None), gpu_memory_gb(0)
    (24.0, 79.6, None, None)
    """
    mb = _positive_float(gpu_ram_mb)
    return round(mb / 1024, 1) if mb else None


def host_ram_share_gb(row: dict[str, Any]) -> float | None:
    """The RAM this offer gets: the host's `cpu_ram` (MB) x its share of the CPU cores, the way
    gpuhunt reads it; None when the share is unknown (the whole host's RAM would overstate it).

    >>> host_ram_share_gb({"cpu_ram": 128000, "cpu_cores": 32, "cpu_cores_effective": 8.0})
    32.0
    >>> host_ram_share_gb({"cpu_ram": 128000, "cpu_cores": None}) is None
    True
    """
    ram, cores, mine = (_positive_float(row.get(k)) for k in ("cpu_ram", "cpu_cores", "cpu_cores_effective"))
    if ram is None or cores is None or mine is None:
        return None
    return round(ram / 1000 * min(1.0, mine / cores), 1)


def _extra(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("machine_id", "host_id", "reliability2", "verification", "hosting_type", "external",
            "gpu_frac", "gpu_ram", "cpu_cores", "cpu_cores_effective", "disk_space", "pcie_bw",
            "pci_gen", "cuda_max_good", "compute_cap", "dlperf")
    extra = {k: row[k] for k in keep if row.get(k) is not None}
    if (ram := _positive_float(row.get("cpu_ram"))) is not None:
        extra["cpu_ram_gb"] = round(ram / 1000, 1)  # MB, as the CLI's `cpu_ram` multiplier (x1000) says
    return extra


def _clean(d: Decimal) -> Decimal:
    """Round away float noise and drop trailing zeros (without switching to exponent form)."""
    q = d.quantize(_PRICE_QUANTUM, rounding=ROUND_HALF_EVEN)
    return q.quantize(Decimal(1)) if q == q.to_integral_value() else q.normalize()


def _non_negative(value: Any) -> Decimal | None:
    """A per-unit fee where 0 means free (Vast's bandwidth and storage costs); None if absent.

    >>> _non_negative(0.0), _non_negative("0.02"), _non_negative(None), _non_negative(-1)
    (Decimal('0'), Decimal('0.02'), None, None)
    """
    d = to_amount(value)
    return None if d is None else _clean(d)


def _positive_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if f > 0 and f == f and f != float("inf") else None
