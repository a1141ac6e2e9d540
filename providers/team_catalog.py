"""Fetching a team's snapshot file over HTTP for `rentopt refresh --from URL` (providers/ is the
only package that speaks HTTP): one GET through the shared client in base.py, with its timeouts,
retries and `Retry-After` handling. Not a registered plugin: it returns bytes, not offers."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import httpx

from rentopt.optimizer.errors import ProviderError
from rentopt.optimizer.limits import SNAPSHOT_BYTES
from rentopt.optimizer.models import Offer
from rentopt.providers.base import FetchContext, HttpSettings, Provider


class TeamCatalog(Provider):
    """A snapshot file published by a team (a nightly CI job's `rentopt snapshot export`)."""

    name: ClassVar[str] = "snapshot-file"
    api_root: ClassVar[str] = ""
    max_response_bytes: ClassVar[int] = SNAPSHOT_BYTES

    def __init__(self, url: str):
        self.url = url

    def base_url(self) -> str:
        return self.url

    async def fetch(self, ctx: FetchContext) -> list[Offer]:  # pragma: no cover - not a plugin
        raise NotImplementedError


def fetch_snapshot_bytes(url: str, settings: HttpSettings | None = None,
                         transport: httpx.AsyncBaseTransport | None = None) -> bytes:
    """The bytes at `url`; ProviderError (with the reason) when it cannot be fetched, within the
    refresh's time budget (a hung server must not stall a nightly cron) and following redirects
    by base.py's rules only (the client itself follows none)."""
    settings = settings or HttpSettings.from_env()

    async def run() -> bytes:
        async with httpx.AsyncClient(transport=transport, follow_redirects=False,
                                     headers={"User-Agent": "rentopt (+https://github.com/rentopt/rentopt)"}) as client:
            ctx = FetchContext(TeamCatalog(url), client, settings)
            budget = asyncio.timeout(settings.budget_s)
            try:
                async with budget:
                    return (await ctx.request("GET", url)).content
            except TimeoutError:
                if not budget.expired():
                    raise
                raise ctx.error(f"gave up after the {settings.budget_s:g} s time budget: the server answered too "
                                "slowly or not at all; raise it with --time-budget or RENTOPT_REFRESH_BUDGET") from None

    return asyncio.run(run())


__all__ = ["ProviderError", "TeamCatalog", "fetch_snapshot_bytes"]
