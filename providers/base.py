"""The provider plugin contract, the registry, and the one place rentopt speaks HTTP.

A provider plugin is a `Provider` subclass registered under the entry-point group
`rentopt.providers` (the built-in ones are registered the same way in pyproject.toml). It
declares who it is, its currency, its API root, its key (if any) and its billing rules, and
implements `async fetch(ctx) -> list[Offer]`.

`fetch` gets a `FetchContext`: HTTP helpers over one shared `httpx.AsyncClient` with a
per-request timeout, bounded concurrency per provider, retries with exponential backoff and
jitter on connection errors and 5xx (each retry logged), and `Retry-After` on 429. The whole
fetch runs under a time budget (`HttpSettings.budget_s`), so a server that drips a byte a second
or never answers fails that provider like any other fault. The key is attached only to requests
for the provider's own host and is scrubbed from every error message. Redirects are followed
here, not by httpx: a request that carries a credential (a key header, a token, a secret in its
body or query) is never sent on to another host; such a redirect fails the provider instead.

Every offer passes the door's checks (optimizer/row_check.py: the sane price bands of
optimizer/sanity.py, a catalog GPU id, a plain provider name, a date not in the future): a row
that fails one is rejected and counted, never stored, and never fails the provider by itself.

Whole-response rule: if the response does not have the expected shape, the plugin raises
`ProviderSchemaError` and nothing of that provider is stored. Individual rows that cannot be
used (a GPU name we do not know is still kept; a row with no usable price is not) are skipped
with `ctx.skip(row_id, reason)`, which the refresh summary counts.
"""

from __future__ import annotations

import asyncio
import email.utils
import ipaddress
import json
import os
import random
import re
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from functools import cache
from importlib.metadata import distributions
from typing import Any, ClassVar, Literal
from urllib.parse import urljoin, urlsplit

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

from rentopt.optimizer.errors import InputError, ProviderError, ProviderSchemaError
from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.redact import (
    install_logger_filters,
    redact,
    redacted_logger,
    remember_secret,
    scrub_url_secrets,
)
from rentopt.optimizer.limits import API_RESPONSE_BYTES, limit, too_large
from rentopt.optimizer.row_check import RowCheck
from rentopt.optimizer.sanity import PriceBands
from rentopt.optimizer.settings import settings as current_settings

ENTRY_POINT_GROUP = "rentopt.providers"
log = redacted_logger("rentopt.providers")


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
    # The refresh summary prints every skip of a provider whose skips are whole files the
    # user wrote (the sheet plugin), rather than only counting them.
    report_each_skip: ClassVar[bool] = False
    # The most bytes one response may have, on the wire and decompressed (optimizer/limits.py;
    # RENTOPT_MAX_DOWNLOAD_MB replaces it). A plugin whose source is larger says so here.
    max_response_bytes: ClassVar[int] = API_RESPONSE_BYTES

    @classmethod
    def base_url_env(cls) -> str:
        return f"RENTOPT_{cls.name.upper()}_BASE_URL"

    def base_url(self) -> str:
        return (current_settings().base_url(self.base_url_env()) or self.api_root).rstrip("/")

    def api_key(self) -> str | None:
        if not self.key_env:
            return None
        return os.environ.get(self.key_env) or None

    def credentials(self) -> list[str]:
        """Every credential value this provider could send (key, client id and secret)."""
        envs = {self.key_env, *getattr(self, "credential_envs", ())} - {None}
        return [v for env in sorted(envs) if (v := os.environ.get(env))]  # type: ignore[arg-type]

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
    timeout_s: float = 20.0  # per request (connect, and each read)
    retries: int = 3
    backoff_s: float = 0.5  # first retry waits ~backoff_s, doubling, with full jitter
    max_retry_after_s: float = 60.0  # a longer Retry-After fails the provider instead of stalling cron
    budget_s: float = 300.0  # per provider, its whole fetch: every request, retry and wait
    # Redirects followed per request. httpx allows 20; an API that needs more than a handful is
    # misconfigured, and each hop is another chance to be sent somewhere unexpected.
    max_redirects: int = 5
    max_bytes: int | None = None  # per response; None: the provider's own limit (Provider.max_response_bytes)

    @classmethod
    def from_env(cls) -> HttpSettings:
        """From RENTOPT_HTTP_TIMEOUT, RENTOPT_HTTP_RETRIES and RENTOPT_REFRESH_BUDGET (settings.py)."""
        s = current_settings()
        return cls(timeout_s=s.http_timeout_s, retries=s.http_retries, budget_s=s.refresh_budget_s)


# What a socket says when the machine has no network at all (glibc getaddrinfo's EAI_NONAME /
# EAI_AGAIN texts, and ENETUNREACH), as httpx passes them on in its ConnectError.
_NO_NETWORK_WORDS = ("name or service not known", "temporary failure in name resolution",
                     "nodename nor servname provided", "no address associated with hostname",
                     "network is unreachable")


def no_network(exc: BaseException) -> bool:
    """Whether a transport error means there is no network (not a server that failed for a moment).

    >>> no_network(httpx.ConnectError("[Errno -3] Temporary failure in name resolution"))
    True
    >>> no_network(httpx.ConnectError("[Errno 111] Connection refused"))
    False
    """
    seen: BaseException | None = exc
    while seen is not None:
        if any(w in str(seen).lower() for w in _NO_NETWORK_WORDS):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


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


# Statuses httpx calls redirects (Response.is_redirect); 300 and 304 are not followed.
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
# Request headers that carry credentials in the APIs rentopt and its plugins speak.
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def _strings(value: Any) -> list[str]:
    """Every text inside a request part (nested dicts, lists, bytes), keys and values both."""
    if value is None:
        return []
    if isinstance(value, (bytes, bytearray)):
        return [bytes(value).decode("utf-8", "replace")]
    if isinstance(value, dict):
        return [text for k, v in value.items() for text in (*_strings(k), *_strings(v))]
    if isinstance(value, (list, tuple, set)):
        return [text for item in value for text in _strings(item)]
    return [str(value)]


def _internal_host(url: str) -> bool:
    """Whether `url` names this machine or a private network by its address: loopback
    (127.0.0.0/8, ::1, `localhost`), link-local (169.254.0.0/16, where clouds serve instance
    metadata and credentials; fe80::/10), private (10/8, 172.16/12, 192.168/16, fc00::/7),
    unspecified or reserved. Names are not resolved here: a public name that resolves to such an
    address is not caught (README: Reliability).

    >>> [_internal_host(u) for u in ("http://169.254.169.254/latest", "http://127.0.0.1:8080/x", "http://[::1]/",
    ...                               "http://localhost:9/", "https://raw.githubusercontent.com/a", "http://10.1.2.3/")]
    [True, True, True, True, False, True]
    """
    host = (urlsplit(url).hostname or "").rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return (address.is_loopback or address.is_link_local or address.is_private or address.is_unspecified
            or address.is_reserved or address.is_multicast)


def _where(url: str) -> str:
    """A URL without its query or user:password, for messages and sources (either may hold a key)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


@dataclass
class FetchContext:
    """What a plugin's `fetch` gets: HTTP helpers bound to its provider, and skip counters."""

    provider: Provider
    client: httpx.AsyncClient
    settings: HttpSettings = field(default_factory=HttpSettings)
    fetched_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    skipped: list[tuple[str, str]] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # rows with a price outside the sane bands
    unknown_gpus: set[str] = field(default_factory=set)
    requests: int = 0
    # Multi-provider plugins: per provider, why it failed this time (its old data is kept), and
    # the source and date of the data delivered for it (a catalog's own date, not the fetch time).
    provider_errors: dict[str, str] = field(default_factory=dict)
    provider_sources: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._semaphore = asyncio.Semaphore(self.provider.max_concurrency)
        self._key = self.provider.api_key()
        self._base_url = self.provider.base_url()
        self._host = urlsplit(self._base_url).netloc
        self._secrets = list(self.provider.credentials())
        for secret in self._secrets:
            remember_secret(secret)
        self._door = RowCheck(bands=PriceBands())
        install_logger_filters()  # httpx logs each full URL, for a library caller's handlers too

    # -- errors ---------------------------------------------------------------------------

    def error(self, message: str, status: int | None = None) -> ProviderError:
        return ProviderError(self.provider.name, self.scrub(message), status)

    def schema_error(self, message: str) -> ProviderSchemaError:
        return ProviderSchemaError(self.provider.name, self.scrub(message))

    def scrub(self, text: str) -> str:
        return scrub_url_secrets(redact(text, self._secrets))

    def add_secret(self, value: str) -> None:
        """A credential obtained during the fetch (an OAuth access token): scrubbed like the key,
        and a request carrying it is never redirected to another host."""
        if value and value not in self._secrets:
            self._secrets.append(value)
            remember_secret(value)

    # -- HTTP -----------------------------------------------------------------------------

    def url(self, path: str) -> str:
        return self._base_url + "/" + path.lstrip("/")

    async def sleep(self, seconds: float) -> None:
        """Separate so tests can observe waits without sleeping."""
        await asyncio.sleep(seconds)

    async def request(self, method: str, url: str, *, auth: bool = True, **kwargs: Any) -> httpx.Response:
        """One request with retries and redirects. Returns a 2xx response or raises ProviderError.

        A redirect to another host (or from https down to http) is followed only when the
        request carries no credential: not the provider's key, no header the caller set, and no
        credential in its body or query. Otherwise it fails, naming both hosts; the credential
        is never sent on. 301/302/303 continue as GET without a body, 307/308 as they were.
        """
        headers = dict(kwargs.pop("headers", None) or {})
        # A key goes only to its own provider's host, whatever URL a response points us at.
        if auth and self._key and urlsplit(url).netloc == self._host:
            headers.update(self.provider.auth_headers(self._key))
        credentialed = self._carries_credentials(url, headers, kwargs)
        visited = [url]
        while True:
            response = await self._send(method, url, headers, kwargs)
            if response.status_code not in REDIRECT_STATUSES:
                return response
            location = response.headers.get("Location")
            if not location:
                raise self.error(f"HTTP {response.status_code} redirect from {_where(url)} without a Location header")
            target = urljoin(url, location)
            if target in visited:
                raise self.error(f"redirect loop: {_where(url)} redirects (HTTP {response.status_code}) back to "
                                 f"{_where(target)}; the API or a proxy in between is misconfigured")
            if len(visited) > self.settings.max_redirects:
                raise self.error(f"too many redirects (more than {self.settings.max_redirects}) from {_where(visited[0])}, "
                                 f"the last to {_where(target)}")
            if _internal_host(target) and not _internal_host(visited[0]):
                raise self.error(
                    f"refused a redirect (HTTP {response.status_code}) from {_where(url)} to {_where(target)}: an "
                    "address on this machine or its private network (loopback, link-local such as a cloud's "
                    "metadata service, or private), which a public source has no reason to send rentopt to")
            (scheme, netloc), (new_scheme, new_netloc) = _origin(url), _origin(target)
            leaves_host = new_netloc != netloc or (scheme == "https" and new_scheme != "https")
            if leaves_host and credentialed:
                raise self.error(
                    f"refused a redirect (HTTP {response.status_code}) from {netloc} to another host, {new_netloc}: "
                    "the request carries credentials, which rentopt never sends on to another host; if the "
                    f"API moved, set {self.provider.base_url_env()} to its new address"
                )
            log.info("%s: following HTTP %d redirect from %s to %s", self.provider.name, response.status_code,
                     _where(url), _where(target))
            if response.status_code in (301, 302, 303) and method != "HEAD":
                method = "GET"  # what browsers and httpx do: the body is not sent again
                kwargs = {k: v for k, v in kwargs.items() if k not in ("json", "content", "data", "files")}
            if leaves_host:
                headers = {}
            # The Location is the whole next URL: the first request's query is not added again.
            kwargs = {k: v for k, v in kwargs.items() if k != "params"}
            visited.append(target)
            url = target

    def _carries_credentials(self, url: str, headers: dict[str, str], kwargs: dict[str, Any]) -> bool:
        if any(k.lower() in CREDENTIAL_HEADERS for k in headers):
            return True
        if not self._secrets:
            return False
        # Every part a request can carry a value in: a POST may send a JSON body and a query both.
        texts = [url, *headers.values()]
        for part in ("json", "content", "data", "params", "files"):
            texts.extend(_strings(kwargs.get(part)))
        return any(secret in text for text in texts for secret in self._secrets)

    async def _send(self, method: str, url: str, headers: dict[str, str], kwargs: dict[str, Any]) -> httpx.Response:
        """One hop, with retries: a 2xx or 3xx response, or ProviderError."""
        attempt = 0
        while True:
            attempt += 1
            try:
                async with self._semaphore:
                    self.requests += 1
                    request = self.client.build_request(method, url, headers=headers, timeout=self.settings.timeout_s,
                                                        **kwargs)
                    response = await self._read_bounded(await self.client.send(request, stream=True), url)
            except httpx.TimeoutException as exc:
                if attempt > self.settings.retries:
                    raise self.error(f"timed out after {_attempts(attempt)} ({type(exc).__name__})") from None
                await self._retry(attempt, f"timed out ({type(exc).__name__})", method, url)
                continue
            except httpx.DecodingError as exc:
                # Not retried: the server sent what it meant to, and it is broken.
                raise self.error(
                    f"the response body from {_where(url)} could not be decoded: it is not valid data for its "
                    f"Content-Encoding (gzip, deflate, br) or charset ({exc})"
                ) from None
            except httpx.TransportError as exc:
                if no_network(exc):
                    # No route or no name resolution: this machine is offline (or the name does
                    # not exist). Waiting seconds does not change that, so it is not retried.
                    raise self.error(f"no network: {type(exc).__name__}: {exc} (not retried)") from None
                if attempt > self.settings.retries:
                    raise self.error(f"connection failed after {_attempts(attempt)}: {type(exc).__name__}: {exc}") from None
                await self._retry(attempt, f"connection failed ({type(exc).__name__})", method, url)
                continue
            except httpx.HTTPError as exc:  # anything else httpx raises: name it, in one line
                raise self.error(f"HTTP request to {_where(url)} failed: {type(exc).__name__}: {exc}") from None
            status = response.status_code
            if status == 429:
                wait = parse_retry_after(response.headers.get("Retry-After"))
                if attempt > self.settings.retries:
                    raise self.error(f"rate limited (HTTP 429) after {_attempts(attempt)}")
                if wait is not None and wait > self.settings.max_retry_after_s:
                    raise self.error(f"rate limited (HTTP 429); Retry-After {wait:.0f} s is too long to wait")
                await self._retry(attempt, "rate limited (HTTP 429)", method, url, wait)
                continue
            if status >= 500:
                if attempt > self.settings.retries:
                    raise self.error(f"server error HTTP {status} after {_attempts(attempt)}")
                await self._retry(attempt, f"server error HTTP {status}", method, url)
                continue
            if status in (401, 403):
                hint = f"; check {self.provider.key_env}" if self.provider.key_env else ""
                raise self.error(f"HTTP {status}: the API refused the credentials{hint}", status)
            if status >= 400:
                raise self.error(f"HTTP {status} from {_where(str(response.url))}", status)
            if 300 <= status < 400 and status not in REDIRECT_STATUSES:
                raise self.error(f"unexpected HTTP {status} from {_where(url)}")
            return response

    async def _read_bounded(self, response: httpx.Response, url: str) -> httpx.Response:
        """The streamed response read whole, but never past the provider's byte limit: counted on
        the wire and after decompression (httpx inflates a chunk at a time), so a gzip bomb or an
        endless body fails the provider at the limit instead of filling memory (optimizer/limits.py)."""
        size_limit = self.max_bytes
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > size_limit or response.num_bytes_downloaded > size_limit:
                    raise self.error(too_large(f"the response from {_where(url)}", size_limit,
                                               decompressed=size > size_limit >= response.num_bytes_downloaded))
                chunks.append(chunk)
        finally:
            await response.aclose()
        # A plain response holding the decoded body (its encoding headers no longer apply).
        headers = [(k, v) for k, v in response.headers.multi_items()
                   if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
        return httpx.Response(response.status_code, headers=headers, content=b"".join(chunks),
                              request=response.request, extensions=response.extensions)

    @property
    def max_bytes(self) -> int:
        return self.settings.max_bytes or limit(self.provider.max_response_bytes)

    async def _retry(self, attempt: int, reason: str, method: str, url: str, wait: float | None = None) -> None:
        """Log one line for the retry, then wait: the server's Retry-After, else backoff."""
        seconds = wait if wait is not None else self._backoff(attempt)
        log.info("%s: retry %d of %d in %.1f s: %s (%s %s)", self.provider.name, attempt, self.settings.retries,
                 seconds, reason, method, _where(url))
        await self.sleep(seconds)

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
        except RecursionError:
            raise self.schema_error("response is JSON nested too deeply to be an API reply") from None

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

    def reject(self, row_id: str, reason: str) -> None:
        """A row whose price is outside the sane bands: counted apart from other skips, so the
        refresh summary can say how many prices were refused."""
        log.warning("%s: rejecting %s: %s", self.provider.name, row_id, reason)
        self.rejected.append((str(row_id), reason))

    def price_problem(self, offer: Offer) -> str | None:
        """Why the offer cannot be stored: a rule of the door (optimizer/row_check.py: its
        prices, GPU id, names, date), or None."""
        return self._door.reason(offer)

    def offer(self, *, gpu_raw: str, gpu_memory_gb: float | None = None,
              price_options: list[PriceOption], form_factor_hint: str | None = None,
              hand_written: bool = False, **fields: Any) -> Offer | None:
        """Build an Offer with this provider's defaults, normalising the GPU name.

        `form_factor_hint` ("SXM", "PCIe", "NVL") is passed to `normalise` for names that several
        catalog GPUs share (RunPod's "NVIDIA H200" whose displayName says "H200 SXM").
        Returns None (and counts a skip) when the row has no usable price or fails validation,
        and None (counted as rejected) when a price is outside the sane bands.
        An unknown GPU name is kept with its raw spelling and counted, never dropped.
        `hand_written`: a price sheet a person wrote, whose GPU names are read as every name a
        person writes is (hardware.read_gpu_name: a bare "H100" is the SXM card, said in the
        offer's extra.gpu_note); a provider's feed never guesses.
        """
        from rentopt.optimizer.hardware import normalise, read_gpu_name  # hardware is data, loaded on first use

        row_id = str(fields.get("offer_id", "?"))
        if not price_options:
            self.skip(row_id, "no usable price (missing, zero or unknown)")
            return None
        if hand_written:
            match = read_gpu_name(gpu_raw, gpu_memory_gb, form_factor=form_factor_hint,
                                  interconnect=fields.get("interconnect"))
            if match.status == "default":
                fields["extra"] = {**fields.get("extra", {}), "gpu_note": match.note,
                                   "gpu_candidates": list(match.candidates)}
        else:
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
            "source": self._base_url,
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
            offer = Offer(**values)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            self.skip(row_id, f"invalid {where}: {first.get('msg')}")
            return None
        if problem := self.price_problem(offer):
            self.reject(row_id, problem)
            return None
        return offer


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
BUILTIN_PACKAGE = "rentopt.providers"


def load_providers() -> tuple[dict[str, type[Provider]], tuple[BrokenPlugin, ...]]:
    """All registered provider classes by name, and the entry points that failed to load."""
    return _load_providers(current_settings().plugins == "builtin")


def _builtin_value(ep) -> bool:  # type: ignore[no-untyped-def]
    """Whether the entry point names a class in rentopt's own providers package. Its
    distribution's name is not asked: any package can call itself `rentopt` (issue 24)."""
    return str(getattr(ep, "value", "")).split(":")[0].startswith(BUILTIN_PACKAGE + ".")


def _builtin_class(cls: type) -> bool:
    """Whether `cls` was loaded from a file inside this installation's providers package."""
    import sys
    from pathlib import Path

    module = sys.modules.get(cls.__module__)
    where = getattr(module, "__file__", None)
    if not where or not cls.__module__.startswith(BUILTIN_PACKAGE + "."):
        return False
    return Path(where).resolve().parent == Path(__file__).resolve().parent


@cache
def _load_providers(builtin_only: bool) -> tuple[dict[str, type[Provider]], tuple[BrokenPlugin, ...]]:
    found: dict[str, type[Provider]] = {}
    broken: list[BrokenPlugin] = []
    # Every distribution's entry points, not `entry_points()`'s one per distribution name: a
    # package calling itself `rentopt` would otherwise hide the real one's built-in plugins.
    every = {(ep.name, ep.value): ep for dist in distributions() for ep in dist.entry_points
             if ep.group == ENTRY_POINT_GROUP}
    points = sorted(every.values(), key=lambda e: (not _builtin_value(e), e.name, e.value))
    builtin_names: set[str] = set()
    for ep in points:
        own = _builtin_value(ep)
        if builtin_only and not own:
            continue
        if not own and ep.name in builtin_names:
            broken.append(BrokenPlugin(ep.name, f"refused: {ep.value} would replace rentopt's built-in plugin {ep.name!r} "
                                                "(a built-in name cannot be taken by another package)"))
            continue
        try:
            cls = ep.load()
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a broken third-party plugin must not break rentopt
            broken.append(BrokenPlugin(ep.name, f"cannot import {ep.value}: {type(exc).__name__}: {exc}"))
            continue
        if not (isinstance(cls, type) and issubclass(cls, Provider)):
            broken.append(BrokenPlugin(ep.name, f"{ep.value} is not a rentopt Provider subclass"))
            continue
        if own and not _builtin_class(cls):
            broken.append(BrokenPlugin(ep.name, f"{ep.value} is not a module of this rentopt installation"))
            continue
        name = getattr(cls, "name", None)
        if not own and (name in builtin_names or not isinstance(name, str) or not PROVIDER_NAME.fullmatch(name)):
            why = (f"would replace rentopt's built-in plugin {name!r}" if name in builtin_names
                   else f"its name {name!r} is not a plugin name (lower-case letters, digits, '_' and '-')")
            broken.append(BrokenPlugin(ep.name, f"refused: {ep.value} {why}"))
            continue
        if name in found and found[name] is not cls:
            broken.append(BrokenPlugin(ep.name, f"duplicate provider name {name!r} (also {found[name].__module__})"))
            continue
        found[name] = cls
        if own:
            builtin_names.add(name)
            builtin_names.add(ep.name)
    return found, tuple(broken)


load_providers.cache_clear = _load_providers.cache_clear  # type: ignore[attr-defined]


def provider_names() -> list[str]:
    return sorted(load_providers()[0])


def get_providers(names: list[str] | None = None) -> list[Provider]:
    """Instantiate providers by name (all registered ones when `names` is None).

    `RENTOPT_PROVIDERS=a,b` narrows the default set, like `--providers a,b`. A plugin whose
    constructor fails is left out (`construct_providers` names it).
    """
    return construct_providers(names)[0]


def construct_providers(names: list[str] | None = None) -> tuple[list[Provider], list[BrokenPlugin]]:
    """`get_providers`, and the plugins that could not be used: each one that failed to
    import (when it was asked for by name, or no name was given) or to construct, with why.
    An unknown name is an InputError, before anything is constructed."""
    registry, broken = load_providers()
    if names is None and (narrowed := current_settings().providers):
        names = list(narrowed)
    broken_by_name = {b.name: b for b in broken}
    if names is None:
        wanted, failed = sorted(registry), list(broken)
    else:
        unknown = [n for n in names if n not in registry and n not in broken_by_name]
        if unknown:
            where = " (from RENTOPT_PROVIDERS)" if names == list(current_settings().providers or ()) else ""
            raise InputError(
                f"unknown provider {', '.join(unknown)}{where}; known providers: {', '.join(sorted(registry))}"
            )
        wanted = [n for n in dict.fromkeys(names) if n in registry]
        failed = [broken_by_name[n] for n in dict.fromkeys(names) if n in broken_by_name and n not in registry]
    made = []
    for name in wanted:
        try:
            made.append(registry[name]())
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # plugin code: it fails alone
            failed.append(BrokenPlugin(name, f"cannot construct {registry[name].__module__}."
                                             f"{registry[name].__qualname__}: {type(exc).__name__}: {exc}"))
    return made, failed


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
    rejected: list[tuple[str, str]] = field(default_factory=list)  # rows with a price outside the sane bands
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
    """Fetch one provider within `settings.budget_s`; every fault becomes a failed outcome."""
    start = time.perf_counter()
    if reason := provider.skip_reason():
        return FetchOutcome(provider.name, "skipped", error=reason)
    ctx = FetchContext(provider, client, settings)
    if fetched_at is not None:
        ctx.fetched_at = fetched_at

    def failed(message: str) -> FetchOutcome:
        message = ctx.scrub(message)
        log.warning("%s: fetch failed: %s", provider.name, message)
        return FetchOutcome(provider.name, "failed", error=message, skipped=ctx.skipped, rejected=ctx.rejected,
                            seconds=time.perf_counter() - start, requests=ctx.requests)

    budget = asyncio.timeout(settings.budget_s)
    try:
        async with budget:
            offers = await provider.fetch(ctx)
        offers = check_offers(ctx, offers)
    except ProviderError as exc:
        return failed(exc.reason)
    except InputError as exc:  # a setting the plugin reads (RENTOPT_AWS_REGIONS) is invalid
        return failed(str(exc))
    except TimeoutError as exc:
        if not budget.expired():
            return failed(f"plugin raised {type(exc).__name__}: {exc}")
        return failed(
            f"gave up after its {settings.budget_s:g} s time budget ({ctx.requests} requests): the server "
            "answered too slowly or not at all; raise it with --time-budget or RENTOPT_REFRESH_BUDGET if it is just slow"
        )
    except RecursionError:
        return failed("the response is nested too deeply to be an API reply")
    except (Exception, SystemExit, KeyboardInterrupt) as exc:  # a plugin bug (or exit) fails that provider only
        return failed(f"plugin raised {type(exc).__name__}: {exc}")
    return FetchOutcome(
        provider.name, "ok", offers=offers, skipped=ctx.skipped, rejected=ctx.rejected,
        unknown_gpus=sorted(ctx.unknown_gpus), seconds=time.perf_counter() - start,
        requests=ctx.requests, fetched_at=ctx.fetched_at,
        provider_errors={k: ctx.scrub(v) for k, v in ctx.provider_errors.items()},
        provider_sources=dict(ctx.provider_sources),
    )


def check_offers(ctx: FetchContext, offers: list[Offer]) -> list[Offer]:
    """Integrity checks run on every batch before it may be stored; returns the offers to store.

    An offer with a price outside the sane bands is dropped and counted as rejected here too,
    for plugins that build Offer objects without `ctx.offer`.
    """
    name = ctx.provider.name
    if not isinstance(offers, list) or not all(isinstance(o, Offer) for o in offers):
        raise ctx.schema_error("plugin returned something other than a list of offers")
    kept = []
    for o in offers:
        if problem := ctx.price_problem(o):
            ctx.reject(o.offer_id, problem)
        else:
            kept.append(o)
    unusable = len(ctx.skipped) + len(ctx.rejected)
    total = len(kept) + unusable
    if total == 0 and not (ctx.provider.multi_provider and ctx.provider_errors):
        raise ctx.schema_error("the response held no offers at all")
    if ctx.provider.guard_skipped_share and unusable > MAX_SKIPPED_SHARE * total:
        first = (ctx.skipped or ctx.rejected)[0][1]
        raise ctx.schema_error(
            f"{unusable} of {total} rows could not be used (first: {first}); "
            "the API's format has probably changed"
        )
    if not kept and ctx.rejected:
        raise ctx.schema_error(f"every row was rejected (first: {ctx.rejected[0][1]})")
    seen: set[tuple[str, str]] = set()
    for o in kept:
        if o.provider != name and not (ctx.provider.multi_provider and PROVIDER_NAME.fullmatch(o.provider)):
            raise ctx.schema_error(f"offer {o.offer_id} claims provider {o.provider!r}")
        if o.key in seen:
            raise ctx.schema_error(f"duplicate offer id {o.offer_id!r}")
        seen.add(o.key)
    return kept


# How long after its time budget a plugin's fetch is given up by the refresh itself, when the
# budget inside its own thread could not fire (a plugin blocking its event loop: time.sleep, a
# synchronous socket read). The budget's own message, when it can fire, comes well before this.
ISOLATION_GRACE_S = 2.0


async def fetch_all(providers: list[Provider], settings: HttpSettings | None = None,
                    transport: httpx.AsyncBaseTransport | None = None,
                    fetched_at: datetime | None = None,
                    on_done: Callable[[FetchOutcome], None] | None = None) -> list[FetchOutcome]:
    """Fetch every provider concurrently; one failure never stops others.

    Each plugin's fetch runs in a thread of its own, with its own event loop and HTTP client
    (`fetch_isolated`): a plugin that blocks (a synchronous sleep or socket read inside its
    `fetch`) cannot stall the others or the time budget, which this loop enforces from outside;
    `SystemExit` and `KeyboardInterrupt` raised by plugin code become that provider's failure.
    A thread given up on is left to end by itself (a daemon: it never holds the process open,
    and nothing it returns late is stored).

    `transport` and `fetched_at` exist for replaying recorded responses (tests, the bundled
    snapshot build, benchmarks). `on_done` is called with each outcome as soon as it is ready
    (refresh's progress lines); results still come back in the order of `providers`.
    """
    settings = settings or HttpSettings.from_env()
    loop = asyncio.get_running_loop()

    async def one(p: Provider) -> FetchOutcome:
        start = time.perf_counter()
        future: asyncio.Future[FetchOutcome] = loop.create_future()

        def deliver(outcome: FetchOutcome) -> None:
            if not future.done():
                future.set_result(outcome)

        def report(outcome: FetchOutcome) -> None:
            try:
                loop.call_soon_threadsafe(deliver, outcome)
            except RuntimeError:
                pass  # the refresh gave up on this plugin and has ended

        threading.Thread(target=fetch_isolated, args=(p, settings, transport, fetched_at, report), daemon=True,
                         name=f"rentopt-fetch-{p.name}").start()
        try:
            outcome = await asyncio.wait_for(asyncio.shield(future), settings.budget_s + ISOLATION_GRACE_S)
        except TimeoutError:
            outcome = FetchOutcome(p.name, "failed", seconds=time.perf_counter() - start, error=(
                f"gave up after its {settings.budget_s:g} s time budget: the plugin's fetch did not return (it "
                "blocks instead of awaiting); raise the budget with --time-budget or RENTOPT_REFRESH_BUDGET if the "
                "server is just slow"))
            log.warning("%s: fetch failed: %s", p.name, outcome.error)
        if on_done is not None:
            on_done(outcome)
        return outcome

    return list(await asyncio.gather(*(one(p) for p in providers)))


def fetch_isolated(provider: Provider, settings: HttpSettings, transport: httpx.AsyncBaseTransport | None,
                   fetched_at: datetime | None, report: Callable[[FetchOutcome], None]) -> None:
    """One provider's fetch on an event loop and HTTP client of its own (run in a worker
    thread by `fetch_all`); its outcome, whatever plugin code raised, goes to `report`."""
    start = time.perf_counter()

    async def run() -> FetchOutcome:
        async with _client(transport) as client:
            return await fetch_one(provider, client, settings, fetched_at)

    try:
        outcome = asyncio.run(run())
    except BaseException as exc:  # noqa: BLE001 - plugin code raised past fetch_one (SystemExit in a task it made)
        outcome = FetchOutcome(provider.name, "failed", seconds=time.perf_counter() - start,
                               error=redact(f"plugin raised {type(exc).__name__}: {exc}", provider.credentials()))
    report(outcome)


def _client(transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        # Redirects are followed by FetchContext.request, which never sends a credential to
        # another host (httpx would resend a 307/308 body, client secret included).
        limits=httpx.Limits(max_connections=16, max_keepalive_connections=8), transport=transport,
        follow_redirects=False, headers={"User-Agent": "rentopt (+https://github.com/rentopt/rentopt)"},
    )
