"""What every provider test shares: one TLS context, fast retries, and fetches over replayed HTTP.

Imported as `from tests.providers.helpers import ...` (pyproject puts the repository root on
sys.path). Each test module keeps only what is particular to its provider.
"""

from __future__ import annotations

import asyncio
import ssl
from datetime import datetime
from functools import cache

import httpx
import pytest
import respx

from rentopt.optimizer.models import Offer
from rentopt.providers.base import FetchOutcome, HttpSettings, Provider, fetch_one
from tools.fixture_routes import FIXTURES, install_respx, load_manifest

# respx answers every request, so no TLS happens; one shared context spares each test the
# ~30 ms (more on a loaded machine) that httpx spends building a fresh one per client.
TLS = ssl.create_default_context()
# Three attempts with no backoff: the retry paths run and nothing waits.
FAST = HttpSettings(retries=2, backoff_s=0)


@cache
def recorded_at(name: str) -> datetime | None:
    """When fixtures/<name>/ was recorded (its routes.json), or None for a provider without one."""
    if not (FIXTURES / name / "routes.json").exists():
        return None
    return load_manifest(name).recorded_at


def replays_http(name: str) -> bool:
    """Whether the provider's manifest records HTTP routes (every provider but the sheet one)."""
    return recorded_at(name) is not None and bool(load_manifest(name).routes)


def credential_envs(cls: type[Provider]) -> tuple[str, ...]:
    """Every variable a provider reads credentials from (DataCrunch needs two)."""
    return tuple(getattr(cls, "credential_envs", None) or ((cls.key_env,) if cls.key_env else ()))


def fetch(provider: Provider | type[Provider], settings: HttpSettings = FAST) -> FetchOutcome:
    """fetch_one for a provider, dated its manifest's recorded_at so offers compare exactly.

    A class is instantiated here, after the test has set its environment.
    """
    instance = provider() if isinstance(provider, type) else provider

    async def go() -> FetchOutcome:
        async with httpx.AsyncClient(verify=TLS) as client:
            return await fetch_one(instance, client, settings, recorded_at(instance.name))

    return asyncio.run(go())


def fetch_recorded(provider_cls: type[Provider], base_url: str | None = None, *,
                   assert_all_called: bool = True) -> tuple[FetchOutcome, dict[str, respx.Route]]:
    """Fetch with every request answered from fixtures/<name>/routes.json; routes by fixture name.

    `base_url` serves the routes from a mirror host (set the provider's base-URL variable too).
    respx checks on exit that every route was requested unless `assert_all_called` is False.
    """
    with respx.mock(assert_all_called=assert_all_called) as router:
        routes = install_respx(router, provider_cls, base_url=base_url)
        outcome = fetch(provider_cls)
    return outcome, routes


def fetch_answering(provider_cls: type[Provider], method: str, url: str,
                    *answers: httpx.Response | Exception) -> tuple[FetchOutcome, respx.Route]:
    """Fetch with the one request `method url` answered by `answers` in turn (responses or errors)."""
    with respx.mock() as router:
        route = router.route(method=method, url=url)
        route.side_effect = list(answers)
        outcome = fetch(provider_cls)
    return outcome, route


def offers_by_id(outcome: FetchOutcome) -> dict[str, Offer]:
    return {o.offer_id: o for o in outcome.offers or []}


def recorded_fixtures(provider_cls: type[Provider], *, scope: str = "module", needs: tuple[str, ...] = ()):
    """The `recorded` (a successful replay of the manifest) and `offers` (its offers by id) fixtures.

    `needs` names fixtures that must run first (the ones that set a provider's credentials);
    they are function-scoped, so a provider that needs them uses scope="function".
    Use as `recorded, offers = recorded_fixtures(VastProvider)` at module level.
    """

    @pytest.fixture(scope=scope)
    def recorded(request) -> FetchOutcome:
        for name in needs:
            request.getfixturevalue(name)
        outcome, _ = fetch_recorded(provider_cls)
        assert outcome.status == "ok", outcome.error
        return outcome

    @pytest.fixture(scope=scope)
    def offers(recorded) -> dict[str, Offer]:
        return offers_by_id(recorded)

    return recorded, offers
