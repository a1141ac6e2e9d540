"""Lambda Cloud on-demand instances: GET /instance-types (an API key is required).

Facts this module relies on (provider-apis.md §3):

- `data` is an object keyed by instance-type name; each value has `instance_type` (name,
  description, `gpu_description` such as "H100 (80 GB SXM5)", `price_cents_per_hour` for the
  whole instance, `specs.gpus`) and `regions_with_capacity_available` (live capacity, often []).
- `price_cents_per_hour` is an integer number of cents in the OpenAPI schema, but the schema's
  own example is a string: both are accepted.
- The price does not depend on the region.
- "RTX 6000 (24 GB)" is the Quadro RTX 6000 (Turing, 24 GB), not the 48 GB RTX 6000 Ada.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_decimal

# Lambda's filesystems: "billed per GiB used per month in one-hour increments", example rate
# $0.20 per GiB per month on a 720-hour month, and "you are not charged for ingress or egress"
# (https://docs.lambda.ai/public-cloud/billing). Converted to $/GB (1 GiB = 1.073741824 GB).
FILESYSTEM_GIB_MONTH = Decimal("0.20")
FILESYSTEM_GB_MONTH = (FILESYSTEM_GIB_MONTH / Decimal("1.073741824")).quantize(Decimal("0.000001"))
TRANSFER_GB = Decimal(0)

CENTS_PER_DOLLAR = Decimal(100)

# "A100 (80 GB SXM4)", "RTX 6000 (24 GB)", "GH200 (96 GB)", "Tesla V100 (16 GB)".
_GPU_DESCRIPTION = re.compile(
    r"^\s*(?P<model>.+?)\s*\(\s*(?P<gb>\d+(?:\.\d+)?)\s*GB(?:\s+(?P<form>[A-Za-z0-9]+))?\s*\)\s*$"
)

# Grace-Hopper/Blackwell superchips (GH200, GB200) have an arm64 host CPU: x86-only wheels and
# images will not run there (gpuhunt providers/lambdalabs.py uses the same ^g[bh]\d+ test).
_ARM_HOST = re.compile(r"^\s*g[bh]\d+", re.IGNORECASE)


class LambdaProvider(Provider):
    name = "lambda"
    currency = "USD"
    api_root = "https://cloud.lambda.ai/api/v1"
    key_env = "LAMBDA_API_KEY"
    key_required = True
    # On-demand instances are billed in one-minute increments; they cannot be stopped, only
    # terminated, so an idle gap keeps only a filesystem (paid per GiB-month, 720-hour month)
    # (https://docs.lambda.ai/public-cloud/billing).
    billing = BillingRules(granularity_s=60, minimum_s=0, stopped_pays="storage", month_hours=720,
                           source="https://docs.lambda.ai/public-cloud/billing")
    docs_url = "https://docs.lambda.ai/public-cloud/cloud-api/"

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        body = await ctx.get_json(ctx.url("instance-types"))
        return [o for name, entry in instance_entries(ctx, body) if (o := parse_entry(ctx, name, entry))]


def instance_entries(ctx: FetchContext, body: Any) -> list[tuple[str, dict[str, Any]]]:
    """(name, entry) pairs from `data`; a missing `data` object or a malformed entry is a schema error."""
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, dict):
        error = body.get("error") if isinstance(body, dict) else None
        detail = f": {error.get('message')}" if isinstance(error, dict) and error.get("message") else ""
        raise ctx.schema_error(f"response has no 'data' object{detail}")
    entries = []
    for name, entry in data.items():
        itype = entry.get("instance_type") if isinstance(entry, dict) else None
        if not isinstance(itype, dict) or "price_cents_per_hour" not in itype or "specs" not in itype:
            raise ctx.schema_error(f"instance type {name!r} has no instance_type/price_cents_per_hour/specs")
        entries.append((str(name), entry))
    return entries


def parse_entry(ctx: FetchContext, name: str, entry: dict[str, Any]) -> Offer | None:
    """One instance type -> one Offer; CPU-only types are left out without counting a skip."""
    itype = entry["instance_type"]
    specs = itype["specs"] if isinstance(itype["specs"], dict) else {}
    gpus = specs.get("gpus")
    if gpus == 0:
        return None  # cpu_4x_general and friends: nothing to train on, not a failure
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        ctx.skip(name, f"specs.gpus {gpus!r} is not a GPU count")
        return None
    description = str(itype.get("gpu_description") or "")
    model, memory_gb, form = parse_gpu_description(description)
    if not model:
        ctx.skip(name, f"cannot read the GPU from gpu_description {description!r}")
        return None
    options = []
    if (dollars := hourly_dollars(itype.get("price_cents_per_hour"))) is not None:
        options.append(PriceOption(unit=PriceUnit.HOUR, amount=dollars, label="on-demand"))
    regions = [r.get("name") for r in entry.get("regions_with_capacity_available") or []
               if isinstance(r, dict) and r.get("name")]
    return ctx.offer(
        offer_id=name,
        # The description itself ("H100 (80 GB SXM5)") names the card best: it carries the memory
        # and the board form, which is how "RTX 6000 (24 GB)" resolves to the Turing Quadro
        # (Lambda's RTX 6000; gpu-specs.md 4) and never to the 48 GB Ada card.
        gpu_raw=description,
        gpu_memory_gb=memory_gb,
        gpus=gpus,
        interconnect=interconnect(form),
        # The price is the same everywhere; the region named is one with capacity right now.
        region=regions[0] if regions else None,
        price_options=options,
        storage_gb_month=FILESYSTEM_GB_MONTH,
        egress_gb=TRANSFER_GB,
        ingress_gb=TRANSFER_GB,
        host_ram_gb=round(float(specs["memory_gib"]) * 2**30 / 1e9, 1) if _is_number(specs.get("memory_gib")) else None,
        source=ctx.url("instance-types"),
        extra={
            "capacity": regions,
            "vcpus": specs.get("vcpus"),
            "memory_gib": specs.get("memory_gib"),
            "storage_gib": specs.get("storage_gib"),
            "cpu_arch": "arm64" if _ARM_HOST.match(description) else "x86_64",
        },
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def parse_gpu_description(description: str) -> tuple[str | None, float | None, str | None]:
    """(model, GB per GPU, form factor) from a `gpu_description`.

    >>> parse_gpu_description("H100 (80 GB SXM5)")
    ('H100', 80.0, 'SXM5')
    >>> parse_gpu_description("RTX 6000 (24 GB)")
    ('RTX 6000', 24.0, None)
    >>> parse_gpu_description("")
    (None, None, None)
    """
    match = _GPU_DESCRIPTION.match(description)
    if not match:
        return (description.strip() or None), None, None
    return match["model"], float(match["gb"]), match["form"]


def interconnect(form: str | None) -> str:
    """SXM boards are NVLink/NVSwitch; PCIe cards are PCIe; no form given -> unknown.

    >>> interconnect("SXM4"), interconnect("PCIe"), interconnect(None)
    ('nvlink', 'pcie', 'unknown')
    """
    if not form:
        return "unknown"
    return "nvlink" if form.upper().startswith("SXM") else "pcie" if form.upper() == "PCIE" else "unknown"


def hourly_dollars(cents: Any) -> Decimal | None:
    """Cents per hour (int or numeric string) -> dollars per hour; 0/null/garbage -> None.

    >>> hourly_dollars(2392), hourly_dollars("440"), hourly_dollars(1000), hourly_dollars(0), hourly_dollars("n/a")
    (Decimal('23.92'), Decimal('4.4'), Decimal('10'), None, None)
    """
    amount = to_decimal(cents)
    if amount is None:
        return None
    dollars = amount / CENTS_PER_DOLLAR
    # Plain notation: 1000 cents is Decimal('10'), not Decimal('1E+1').
    return dollars.quantize(Decimal(1)) if dollars == dollars.to_integral_value() else dollars.normalize()
