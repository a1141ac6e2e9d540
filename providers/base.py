"""The provider plugin contract, the registry, and the one place rentopt speaks HTTP.

A provider plugin is a `Provider` subclass registered under the entry-point group
`rentopt.providers` (the built-in ones are registered the same way in pyproject.toml). It
declares who it is, its currency, its API root, its key (if any) and its billing rules, and
implements `async fetch(ctx) -> list[Offer]`.

`fetch` gets a `FetchContext`: HTTP helpers over one shared `httpx.AsyncClient` with a
per-request timeout, bounded concurrency per provider, retries with exponential backoff and
jitter on connection errors and 5xx, and `Retry-After` on 429. The key is attached only to
requests for the provider's own host, and is scrubbed from every error message.

Whole-response rule: if the response does not have the expected shape, the plugin raises
`ProviderSchemaError` and nothing of that provider is stored. Individual rows that cannot be
used (a GPU name we do not know is still kept; a row with no usable price is not) are skipped
with `ctx.skip(row_id, reason)`, which the refresh summary counts.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import random
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib.metadata import entry_points
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from rentopt.optimizer.errors import InputError, ProviderError, ProviderSchemaError
from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.redact import redact

ENTRY_POINT_GROUP = "rentopt.providers"
log = logging.getLogger("rentopt.providers")


class BillingRules(BaseModel):
    """How a provider meters and bills. Every rule carries the page it was read from."""

    model_config = ConfigDict(frozen=True)

    granularity_s: int = 1  # per-second metering = 1, per-minute = 60, per-hour = 3600
    minimum_s: int = 0  # minimum charge per rental
    stopped_pays: Literal["storage", "nothing", "everything"] = "storage"
    price_locked_until_destroy: bool = False
    month_hours: int = 730  # hours in this provider's billing month (GB-month, monthly units)
    source: str = ""


class Provider(ABC):
    """Base class for provider plugins. Subclasses set the class attributes and `fetch`."""

    name: ClassVar[str]
    currency: ClassVar[str] = "USD"
    api_root: ClassVar[str]
    key_env: ClassVar[str | None] = None
    key_required: ClassVar[bool] = False
    billing: ClassVar[BillingRules] = BillingRules()
    max_concurrency: ClassVar[int] = 4
    max_pages: ClassVar[int] = 200
    docs_url: ClassVar[str] = ""
    # check_offers fails a response in which most rows were skipped (schema drift). A plugin
    # whose skips are not rows (the sheet plugin skips whole files) turns this off.
    guard_skipped_share: ClassVar[bool] = True
    # A plugin whose offers belong to several providers (the SkyPilot catalog: one per cloud;
    # price sheets: one per platform) sets this; its offers then name their own provider, and
    # `rentopt refresh --providers NAME` still names the plugin.
    multi_provider: ClassVar[bool] = False

    @classmethod
    def base_url_env(cls) -> str:
        return f"RENTOPT_{cls.name.upper()}_BASE_URL"

    def base_url(self) -> str:
        return (os.environ.get(self.base_url_env()) or self.api_root).rstrip("/")

    def api_key(self) -> str | None:
        if not self.key_env:
            return None
        return os.environ.get(self.key_env) or None

    def skip_reason(self) -> str | None:
        """Why this provider cannot be refreshed right now (a missing key), or None."""
        if self.key_required and not self.api_key():
            return f"needs an API key: set {self.key_env} in the environment (export {self.key_env}=...)"
        return None

    def auth_headers(self, key: str) -> dict[str, str]:
        """Headers that carry the key. Override for providers that want something else."""
        return {"Authorization": f"Bearer {key}"}

    @abstractmethod
    async def fetch(self, ctx: FetchContext) -> list[Offer]:
        """Return every offer the provider sells now. Raise ProviderSchemaError on a bad shape."""


# --------------------------------------------------------------------------------------------
# HTTP


@dataclass
class HttpSettings:
    timeout_s: float = 20.0
    retries: int = 3
    backoff_s: float = 0.5  # first retry waits ~backoff_s, doubling, with full jitter
    max_retry_after_s: float = 60.0  # a longer Retry-After fails the provider instead of stalling cron

    @classmethod
    def from_env(cls) -> HttpSettings:
        s = cls()
        if v := os.environ.get("RENTOPT_HTTP_TIMEOUT"):
            s.timeout_s = float(v)
        if v := os.environ.get("RENTOPT_HTTP_RETRIES"):
            s.retries = int(v)
        return s


def _attempts(n: int) -> str:
    return f"{n} attempt" + ("s" if n != 1 else "")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date).

    >>> parse_retry_after("7")
    7.0
    >>> parse_retry_after("garbage") is None
    True
    """
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def to_decimal(value: Any) -> Decimal | None:
    """A provider price as Decimal; None for missing, zero, negative or non-numeric values.

    0 and null mean "unknown" in provider feeds, never "free" (SkyPilot #3615, AWS p5e #4657).

    >>> to_decimal("3.95"), to_decimal(0), to_decimal(None), to_decimal("N/A*"), to_decimal(float("nan"))
    (Decimal('3.95'), None, None, None, None)
    """
    d = to_amount(value)
    return d if d is not None and d > 0 else None


def to_amount(value: Any) -> Decimal | None:
    """A non-negative amount as Decimal, for fees where 0 really is 0 (Vast's free bandwidth, the
    hourly part of an AWS All Upfront term, Azure's tier starts); None if absent or not a number.

    >>> to_amount(0.0), to_amount("0.02"), to_amount(None), to_amount(-1), to_amount("x"), to_amount(True)
    (Decimal('0.0'), Decimal('0.02'), None, None, None, None)
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        d = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return d if d.is_finite() and d >= 0 else None


@dataclass
class FetchContext:
    """What a plugin's `fetch` gets: HTTP helpers bound to its provider, and skip counters."""

    provider: Provider
    client: httpx.AsyncClient
    settings: HttpSettings = field(default_factory=HttpSettings)
    fetched_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unknown_gpus: set[str] = field(default_factory=set)
    requests: int = 0
    # Multi-provider plugins: per provider, why it failed this time (its old data is kept), and
    # the source and date of the data delivered for it (a catalog's own date, not the fetch time).
    provider_errors: dict[str, str] = field(default_factory=dict)
    provider_sources: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._semaphore = asyncio.Semaphore(self.provider.max_concurrency)
        self._key = self.provider.api_key()
        self._host = urlsplit(self.provider.base_url()).netloc

    # -- errors ---------------------------------------------------------------------------

    def error(self, message: str) -> ProviderError:
        return ProviderError(self.provider.name, self.scrub(message))

    def schema_error(self, message: str) -> ProviderSchemaError:
        return ProviderSchemaError(self.provider.name, self.scrub(message))

    def scrub(self, text: str) -> str:
        return redact(text, [self._key] if self._key else [])

    # -- HTTP -----------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return self.provider.base_url() + "/" + path.lstrip("/")

    async def sleep(self, seconds: float) -> None:
        """Separate so tests can observe waits without sleeping."""
        await asyncio.sleep(seconds)

    async def request(self, method: str, url: str, *, auth: bool = True, **kwargs: Any) -> httpx.Response:
        """One request with retries. Returns a 2xx response or raises ProviderError."""
        headers = dict(kwargs.pop("headers", None) or {})
        # A key goes only to its own provider's host, whatever URL a response points us at.
        if auth and self._key and urlsplit(url).netloc == self._host:
            headers.update(self.provider.auth_headers(self._key))
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._semaphore:
                    self.requests += 1
                    response = await self.client.request(
                        method, url, headers=headers, timeout=self.settings.timeout_s, **kwargs
                    )
            except httpx.TimeoutException as exc:
                if attempt > self.settings.retries:
                    raise self.error(f"timed out after {_attempts(attempt)} ({type(exc).__name__})") from None
                await self.sleep(self._backoff(attempt))
                continue
            except httpx.TransportError as exc:
                if attempt > self.settings.retries:
                    raise self.error(f"connection failed after {_attempts(attempt)}: {exc}") from None
                await self.sleep(self._backoff(attempt))
                continue
            status = response.status_code
            if status == 429:
                wait = parse_retry_after(response.headers.get("Retry-After"))
                if attempt > self.settings.retries:
                    raise self.error(f"rate limited (HTTP 429) after {_attempts(attempt)}")
                if wait is not None and wait > self.settings.max_retry_after_s:
                    raise self.error(f"rate limited (HTTP 429); Retry-After {wait:.0f} s is too long to wait")
                await self.sleep(wait if wait is not None else self._backoff(attempt))
                continue
            if status >= 500:
                if attempt > self.settings.retries:
                    raise self.error(f"server error HTTP {status} after {_attempts(attempt)}")
                await self.sleep(self._backoff(attempt))
                continue
            if status in (401, 403):
                hint = f"; check {self.provider.key_env}" if self.provider.key_env else ""
                raise self.error(f"HTTP {status}: the API refused the credentials{hint}")
            if status >= 400:
                raise self.error(f"HTTP {status} from {self.scrub(str(response.url.copy_with(query=None)))}")
            return response

    def _backoff(self, attempt: int) -> float:
        # Exponential backoff with full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter").
        return random.uniform(0, self.settings.backoff_s * 2 ** (attempt - 1))

    async def get_json(self, url: str, **kwargs: Any) -> Any:
        return self.decode(await self.request("GET", url, **kwargs))

    async def post_json(self, url: str, **kwargs: Any) -> Any:
        return self.decode(await self.request("POST", url, **kwargs))

    def decode(self, response: httpx.Response) -> Any:
        try:
            return json.loads(response.content)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise self.schema_error(
                f"response is not valid JSON ({exc.msg if hasattr(exc, 'msg') else exc}); truncated or not an API reply"
            ) from None

    # -- checking shapes -----------------------------------------------------------------

    def require_fields(self, rows: list[dict[str, Any]], required: Sequence[str], label: str, id_field: str) -> None:
        """Reject the whole response when a row lacks a required field (the API changed shape)."""
        for row in rows:
            if missing := [f for f in required if f not in row]:
                raise self.schema_error(f"{label} {row.get(id_field, '?')!r} has no {', '.join(missing)} field")

    # -- building offers ------------------------------------------------------------------

    def skip(self, row_id: str, reason: str) -> None:
        log.warning("%s: skipping %s: %s", self.provider.name, row_id, reason)
        self.skipped.append((str(row_id), reason))

    def offer(self, *, gpu_raw: str, gpu_memory_gb: float | None = None,
              price_options: list[PriceOption], form_factor_hint: str | None = None,
              **fields: Any) -> Offer | None:
        """Build an Offer with this provider's defaults, normalising the GPU name.

        `form_factor_hint` ("SXM", "PCIe", "NVL") is passed to `normalise` for names that several
        catalog GPUs share (RunPod's "NVIDIA H200" whose displayName says "H200 SXM").
        Returns None (and counts a skip) when the row has no usable price or fails validation.
        An unknown GPU name is kept with its raw spelling and counted, never dropped.
        """
        from rentopt.optimizer.hardware import normalise  # hardware is data, loaded on first use

        row_id = str(fields.get("offer_id", "?"))
        if not price_options:
            self.skip(row_id, "no usable price (missing, zero or unknown)")
            return None
        match = normalise(gpu_raw, gpu_memory_gb, form_factor_hint=form_factor_hint)
        if match.status in ("unknown", "ambiguous"):
            self.unknown_gpus.add(gpu_raw)
        if gpu_memory_gb is None:
            from rentopt.optimizer.hardware import get_gpu

            gpu_memory_gb = get_gpu(match.gpu).memory_gb if match.gpu else None
        if not gpu_memory_gb:
            self.skip(row_id, f"GPU {gpu_raw!r} has no known memory size")
            return None
        rules = self.provider.billing
        values: dict[str, Any] = {
            "provider": self.provider.name,
            "currency": self.provider.currency,
            "fetched_at": self.fetched_at,
            "source": self.provider.base_url(),
            "billing_granularity_s": rules.granularity_s,
            "billing_minimum_s": rules.minimum_s,
            "month_hours": rules.month_hours,
            "price_locked": rules.price_locked_until_destroy,
            "stopped_bills": rules.stopped_pays,
            "gpu": match.gpu,
            "gpu_raw": gpu_raw,
            "gpu_status": match.status,
            "gpu_memory_gb": gpu_memory_gb,
            "price_options": price_options,
        }
        values.update(fields)
        try:
            return Offer(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            self.skip(row_id, f"invalid {where}: {first.get('msg')}")
            return None


# --------------------------------------------------------------------------------------------
# Registry


@dataclass
class BrokenPlugin:
    """An entry point that failed to load; reported by `rentopt providers`, never fatal."""

    name: str
    error: str


# RENTOPT_PLUGINS=builtin loads only the plugins rentopt itself ships (the test suite sets it,
# so a third-party plugin installed in the same environment never changes a test's result);
# the default, "all", also loads every other registered plugin.
PLUGINS_ENV = "RENTOPT_PLUGINS"
BUILTIN_DISTRIBUTION = "rentopt"


def load_providers() -> tuple[dict[str, type[Provider]], tuple[BrokenPlugin, ...]]:
    """All registered provider classes by name, and the entry points that failed to load."""
    mode = os.environ.get(PLUGINS_ENV, "all").strip().lower() or "all"
    if mode not in ("all", "builtin"):
        raise InputError(f"{PLUGINS_ENV}={mode!r}: use 'all' (default) or 'builtin'")
    return _load_providers(mode == "builtin")


def _is_builtin(ep) -> bool:  # type: ignore[no-untyped-def]
    dist = getattr(ep, "dist", None)
    return dist is not None and (dist.metadata["Name"] or "").lower() == BUILTIN_DISTRIBUTION


@cache
def _load_providers(builtin_only: bool) -> tuple[dict[str, type[Provider]], tuple[BrokenPlugin, ...]]:
    found: dict[str, type[Provider]] = {}
    broken: list[BrokenPlugin] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if builtin_only and not _is_builtin(ep):
            continue
        try:
            cls = ep.load()
        except Exception as exc:  # a broken third-party plugin must not break rentopt
            broken.append(BrokenPlugin(ep.name, f"cannot import {ep.value}: {type(exc).__name__}: {exc}"))
            continue
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            broken.append(BrokenPlugin(ep.name, f"{ep.value} is not a rentopt Provider subclass"))
            continue
        if cls.name in found and found[cls.name] is not cls:
            broken.append(BrokenPlugin(ep.name, f"duplicate provider name {cls.name!r} (also {found[cls.name].__module__})"))
            continue
        found[cls.name] = cls
    return found, tuple(broken)


load_providers.cache_clear = _load_providers.cache_clear  # type: ignore[attr-defined]


def provider_names() -> list[str]:
    return sorted(load_providers()[0])


def get_providers(names: list[str] | None = None) -> list[Provider]:
    """Instantiate providers by name (all registered ones when `names` is None).

    `RENTOPT_PROVIDERS=a,b` narrows the default set, like `--providers a,b`.
    """
    registry, _ = load_providers()
    if names is None and (env := os.environ.get("RENTOPT_PROVIDERS")):
        names = [n.strip() for n in env.split(",") if n.strip()]
    if names is None:
        return [registry[n]() for n in sorted(registry)]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise InputError(
            f"unknown provider {', '.join(unknown)}; known providers: {', '.join(sorted(registry))}"
        )
    return [registry[n]() for n in dict.fromkeys(names)]


# --------------------------------------------------------------------------------------------
# Running fetches


@dataclass
class FetchOutcome:
    """What one provider's fetch produced. `offers` is None unless the fetch fully succeeded."""

    provider: str
    status: Literal["ok", "failed", "skipped"]
    offers: list[Offer] | None = None
    error: str | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    unknown_gpus: list[str] = field(default_factory=list)
    seconds: float = 0.0
    requests: int = 0
    fetched_at: datetime | None = None
    provider_errors: dict[str, str] = field(default_factory=dict)
    provider_sources: dict[str, tuple[str, datetime]] = field(default_factory=dict)


# What a multi-provider plugin may call a provider: the names `--providers` takes.
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")

# A response in which most rows cannot be used is schema drift, not a thin catalog.
MAX_SKIPPED_SHARE = 0.5


async def fetch_one(provider: Provider, client: httpx.AsyncClient, settings: HttpSettings,
                    fetched_at: datetime | None = None) -> FetchOutcome:
    start = time.perf_counter()
    if reason := provider.skip_reason():
        return FetchOutcome(provider.name, "skipped", error=reason)
    ctx = FetchContext(provider, client, settings)
    if fetched_at is not None:
        ctx.fetched_at = fetched_at
    try:
        offers = await provider.fetch(ctx)
        check_offers(ctx, offers)
    except ProviderError as exc:
        message = ctx.scrub(exc.reason)
        log.warning("%s: fetch failed: %s", provider.name, message)
        return FetchOutcome(provider.name, "failed", error=message, skipped=ctx.skipped,
                            seconds=time.perf_counter() - start, requests=ctx.requests)
    except Exception as exc:  # a plugin bug fails that provider only
        message = ctx.scrub(f"plugin raised {type(exc).__name__}: {exc}")
        log.warning("%s: fetch failed: %s", provider.name, message)
        return FetchOutcome(provider.name, "failed", error=message, skipped=ctx.skipped,
                            seconds=time.perf_counter() - start, requests=ctx.requests)
    return FetchOutcome(
        provider.name, "ok", offers=offers, skipped=ctx.skipped,
        unknown_gpus=sorted(ctx.unknown_gpus), seconds=time.perf_counter() - start,
        requests=ctx.requests, fetched_at=ctx.fetched_at,
        provider_errors={k: ctx.scrub(v) for k, v in ctx.provider_errors.items()},
        provider_sources=dict(ctx.provider_sources),
    )


def check_offers(ctx: FetchContext, offers: list[Offer]) -> None:
    """Integrity checks run on every batch before it may be stored."""
    name = ctx.provider.name
    if not isinstance(offers, list):
        raise ctx.schema_error("plugin returned something other than a list of offers")
    total = len(offers) + len(ctx.skipped)
    if total == 0 and not (ctx.provider.multi_provider and ctx.provider_errors):
        raise ctx.schema_error("the response held no offers at all")
    if ctx.provider.guard_skipped_share and len(ctx.skipped) > MAX_SKIPPED_SHARE * total:
        raise ctx.schema_error(
            f"{len(ctx.skipped)} of {total} rows could not be used (first: {ctx.skipped[0][1]}); "
            "the API's format has probably changed"
        )
    seen: set[tuple[str, str]] = set()
    for o in offers:
        if o.provider != name and not (ctx.provider.multi_provider and PROVIDER_NAME.fullmatch(o.provider)):
            raise ctx.schema_error(f"offer {o.offer_id} claims provider {o.provider!r}")
        if o.key in seen:
            raise ctx.schema_error(f"duplicate offer id {o.offer_id!r}")
        seen.add(o.key)


async def fetch_all(providers: list[Provider], settings: HttpSettings | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    fetched_at: datetime | None = None,
                    on_done: Callable[[FetchOutcome], None] | None = None) -> list[FetchOutcome]:
    """Fetch every provider concurrently over one shared client; one failure never stops others.

    `transport` and `fetched_at` exist for replaying recorded responses (tests, the bundled
    snapshot build, benchmarks). `on_done` is called with each outcome as soon as it is ready
    (refresh's progress lines); results still come back in the order of `providers`.
    """
    settings = settings or HttpSettings.from_env()
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=32)

    async def one(p: Provider, client: httpx.AsyncClient) -> FetchOutcome:
        outcome = await fetch_one(p, client, settings, fetched_at)
        if on_done is not None:
            on_done(outcome)
        return outcome

    async with httpx.AsyncClient(
        limits=limits, transport=transport, follow_redirects=True,
        headers={"User-Agent": "rentopt (+https://github.com/rentopt/rentopt)"},
    ) as client:
        return list(await asyncio.gather(*(one(p, client) for p in providers)))
