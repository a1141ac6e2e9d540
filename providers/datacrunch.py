"""DataCrunch (now Verda): instance types from the public cloud API, after an OAuth2 login.

Facts this module relies on (provider-apis.md §8.1):

- Auth is OAuth2 client credentials: POST `/oauth2/token` with
  `{"grant_type": "client_credentials", "client_id", "client_secret"}` returns an
  `access_token`, sent as a Bearer token (datacrunch-python authentication tests; SkyPilot
  fetch_verda.py).
- GET `/instance-types` returns a bare JSON array. `price_per_hour` and `spot_price` are strings,
  for the whole instance; `gpu_memory.size_in_gigabytes` is the TOTAL over all GPUs (the 8x V100
  16GB entry says 128GB; gpuhunt divides by `number_of_gpus`).
- GET `/volume-types` gives block storage prices in $/GB-month per volume type.
- Prices are the same in every location, so one offer per instance type.
"""

from __future__ import annotations

import os
import re
from decimal import Decimal
from typing import Any

from rentopt.optimizer.errors import ProviderError
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit
from rentopt.providers.base import BillingRules, FetchContext, Provider, to_decimal

CLIENT_ID_ENV = "DATACRUNCH_CLIENT_ID"
CLIENT_SECRET_ENV = "DATACRUNCH_CLIENT_SECRET"

# The volume type an instance's OS and data disks use for training data and checkpoints.
STORAGE_VOLUME_TYPE = "NVMe"

REQUIRED_FIELDS = ("instance_type", "price_per_hour", "gpu", "gpu_memory")

_LINK_GBPS = re.compile(r"(\d+(?:\.\d+)?)\s*GB/s", re.IGNORECASE)
_FORM_WORD = re.compile(r"sxm|pci-?e|nvl|oam", re.IGNORECASE)
_CLIENT_ERROR = re.compile(r"HTTP (4\d\d)\b")
_COUNT_PREFIX = re.compile(r"^\s*\d+\s*x\s+", re.IGNORECASE)


class DataCrunchProvider(Provider):
    name = "datacrunch"
    currency = "USD"
    api_root = "https://api.datacrunch.io/v1"
    # The secret is what must never leak, so it is "the key" base.py scrubs from every message;
    # the id is only ever sent in the token request body.
    key_env = CLIENT_SECRET_ENV
    key_required = True
    credential_envs = (CLIENT_ID_ENV, CLIENT_SECRET_ENV)
    # [U] Granularity: 10-minute increments is our unverified recollection of DataCrunch's
    # pay-as-you-go terms; a third-party FinOps summary (api-evangelist/datacrunch
    # finops/datacrunch-finops.yml) says per second. Neither could be checked against the page
    # below, so the coarser rule is kept: it can only over-estimate a bill. [U] Stopped: a
    # shut-down instance is assumed to keep paying for its volumes (priced per GB-month by
    # /volume-types) and nothing else.
    billing = BillingRules(granularity_s=600, minimum_s=0, stopped_pays="storage", month_hours=730,
                           source="https://docs.verda.com/welcome-to-verda/pricing-and-billing")
    docs_url = "https://api.datacrunch.io/v1/docs"

    def client_id(self) -> str | None:
        return os.environ.get(CLIENT_ID_ENV) or None

    def skip_reason(self) -> str | None:
        missing = [env for env, value in ((CLIENT_ID_ENV, self.client_id()), (CLIENT_SECRET_ENV, self.api_key()))
                   if not value]
        if missing:
            return (f"needs API credentials: set {CLIENT_ID_ENV} and {CLIENT_SECRET_ENV} in the environment "
                    f"(missing: {', '.join(missing)})")
        return None

    def auth_headers(self, key: str) -> dict[str, str]:
        # The client secret is never a header: it goes in the token request body only, and the
        # access token it buys is added per request by `fetch`.
        return {}

    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        token = await access_token(ctx, self.client_id() or "", self.api_key() or "")
        # The token goes only to this provider's own API root (ctx.url), never to another host.
        headers = {"Authorization": f"Bearer {token}"}
        types = await ctx.get_json(ctx.url("instance-types"), headers=headers)
        volumes = await ctx.get_json(ctx.url("volume-types"), headers=headers)
        storage = storage_price(ctx, volumes)
        return [o for row in instance_types(ctx, types) if (o := parse_instance_type(ctx, row, storage))]


async def access_token(ctx: FetchContext, client_id: str, client_secret: str) -> str:
    """Exchange the client credentials for a Bearer token; a refusal names both variables."""
    body = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": client_secret}
    try:
        reply = await ctx.post_json(ctx.url("oauth2/token"), json=body)
    except ProviderError as exc:
        # base.py words every 4xx as "HTTP <status>..."; 5xx and timeouts pass through as they are.
        if status := _CLIENT_ERROR.match(exc.reason):
            raise ctx.error(
                f"the token endpoint refused the client credentials (HTTP {status.group(1)}); "
                f"check {CLIENT_ID_ENV} and {CLIENT_SECRET_ENV}"
            ) from None
        raise
    token = reply.get("access_token") if isinstance(reply, dict) else None
    if not isinstance(token, str) or not token:
        raise ctx.schema_error("the token response has no access_token")
    ctx.add_secret(token)  # scrubbed like the secret, and never sent on to another host
    return token


def instance_types(ctx: FetchContext, body: Any) -> list[dict[str, Any]]:
    """The bare array of instance types; anything else is a schema error."""
    if not isinstance(body, list) or not all(isinstance(r, dict) for r in body):
        raise ctx.schema_error("instance-types is not a JSON array of objects")
    ctx.require_fields(body, REQUIRED_FIELDS, "instance type", "instance_type")
    return body


def storage_price(ctx: FetchContext, body: Any) -> Decimal | None:
    """$/GB-month of NVMe block storage from /volume-types (None if that type is not listed).

    0 is kept as unknown (None), like every other price.
    """
    if not isinstance(body, list):
        raise ctx.schema_error("volume-types is not a JSON array")
    for vt in body:
        if isinstance(vt, dict) and str(vt.get("type", "")).lower() == STORAGE_VOLUME_TYPE.lower():
            price = vt.get("price")
            if not isinstance(price, dict):
                raise ctx.schema_error("a volume type has no price object")
            return to_decimal(price.get("price_per_month_per_gb"))
    return None


def parse_instance_type(ctx: FetchContext, row: dict[str, Any], storage: Decimal | None) -> Offer | None:
    """One instance type -> one Offer; CPU-only types are not GPU offers and are left out silently."""
    itype = str(row["instance_type"])
    gpu = row["gpu"] if isinstance(row["gpu"], dict) else {}
    count = gpu.get("number_of_gpus")
    if count == 0:
        return None  # a CPU node: not a failure, simply not something rentopt rents
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        ctx.skip(itype, f"number_of_gpus {count!r} is not a GPU count")
        return None
    if str(row.get("currency") or "usd").upper() != ctx.provider.currency:
        ctx.skip(itype, f"priced in {row.get('currency')!r}, not {ctx.provider.currency}")
        return None
    options = []
    if (on_demand := to_decimal(row.get("price_per_hour"))) is not None:
        options.append(PriceOption(unit=PriceUnit.HOUR, amount=on_demand, label="on-demand"))
    if (spot := to_decimal(row.get("spot_price"))) is not None:
        options.append(PriceOption(unit=PriceUnit.HOUR, amount=spot, interruptible=True, label="spot"))
    name = gpu_name(row)
    link, link_gbps = interconnect(row.get("p2p"), name)
    return ctx.offer(
        offer_id=itype,
        gpu_raw=name,
        gpu_memory_gb=per_gpu_memory_gb(row.get("gpu_memory"), count),
        # GPUs joined by NVLink on a card whose name gives no form are SXM parts: the V100 PCIe
        # has no NVLink connector (gpu-specs.md), so "Tesla V100 16GB" + NVLink is the SXM2 card.
        form_factor_hint="SXM" if link == "nvlink" and not _FORM_WORD.search(name) else None,
        gpus=count,
        interconnect=link,
        interconnect_gbps=link_gbps,
        spot=on_demand is None and spot is not None,
        price_options=options,
        storage_gb_month=storage,
        host_ram_gb=_host_ram_gb(row),
        source=ctx.url("instance-types"),
        extra=_extra(row),
    )


def _host_ram_gb(row: dict[str, Any]) -> float | None:
    """`memory.size_in_gigabytes`: the instance's RAM (datacrunch-python test fixtures)."""
    part = row.get("memory")
    size = to_decimal(part.get("size_in_gigabytes")) if isinstance(part, dict) else None
    return float(size) if size is not None else None


def gpu_name(row: dict[str, Any]) -> str:
    """The card's name: `name` ("H100 SXM5 80GB"), else the GPU description without its count.

    >>> gpu_name({"name": "Tesla V100 16GB", "gpu": {"description": "8x NVidia Tesla V100"}})
    'Tesla V100 16GB'
    >>> gpu_name({"name": None, "gpu": {"description": "1x H100 SXM5 80GB"}})
    'H100 SXM5 80GB'
    """
    if name := str(row.get("name") or "").strip():
        return name
    description = str((row.get("gpu") or {}).get("description") or "")
    return _COUNT_PREFIX.sub("", description).strip()


def per_gpu_memory_gb(gpu_memory: Any, count: int) -> float | None:
    """`size_in_gigabytes` is the instance total: divide by the GPU count.

    >>> per_gpu_memory_gb({"size_in_gigabytes": 128}, 8), per_gpu_memory_gb({"size_in_gigabytes": 0}, 1)
    (16.0, None)
    """
    total = to_decimal(gpu_memory.get("size_in_gigabytes")) if isinstance(gpu_memory, dict) else None
    return float(total) / count if total is not None and count else None


def interconnect(p2p: Any, name: str) -> tuple[str, float | None]:
    """Interconnect from the `p2p` text ("NVLink up to 900GB/s", "50GB/s", null).

    A bare bandwidth without the word NVLink is not enough to say which link it is. With no
    `p2p` at all, SXM boards are NVLink (every SXM part is on an NVLink/NVSwitch baseboard) and
    everything else is PCIe.

    >>> interconnect("NVLink up to 900GB/s", "H100 SXM5 80GB"), interconnect("50GB/s", "RTX A6000 48GB")
    (('nvlink', 900.0), ('unknown', 50.0))
    >>> interconnect(None, "B200 SXM6 180GB"), interconnect(None, "L40S 48GB")
    (('nvlink', None), ('pcie', None))
    """
    text = str(p2p or "")
    match = _LINK_GBPS.search(text)
    gbps = float(match.group(1)) if match else None
    if "nvlink" in text.lower():
        return "nvlink", gbps
    if text.strip():
        return "unknown", gbps
    return ("nvlink" if "sxm" in name.lower() else "pcie"), None


def _extra(row: dict[str, Any]) -> dict[str, Any]:
    extra: dict[str, Any] = {"instance_type_id": row.get("id"), "p2p": row.get("p2p")}
    for key, field in (("vcpus", "cpu"), ("ram_gb", "memory")):
        part = row.get(field)
        if isinstance(part, dict):
            extra[key] = part.get("number_of_cores") if key == "vcpus" else part.get("size_in_gigabytes")
    storage = row.get("storage")
    if isinstance(storage, dict):
        extra["local_storage"] = storage.get("description")
    if (dynamic := to_decimal(row.get("dynamic_price"))) is not None:
        extra["dynamic_price"] = str(dynamic)
    if row.get("deploy_warning"):
        extra["deploy_warning"] = row["deploy_warning"]
    return {k: v for k, v in extra.items() if v is not None}
