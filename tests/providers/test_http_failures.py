"""The HTTP failures every provider meets, once for every registered provider that speaks HTTP.

Each provider's own fixtures/<name>/routes.json says which requests it makes; here every one
of those requests is answered with a failure (or, for 429, the first one is), so a provider's
whole flow (DataCrunch's login, Azure's paging, AWS's region files) goes through the same cases.
What a provider does beyond this (a 401 naming its variable, AWS naming the failed region, a
failed spot feed costing only spot offers) is tested in its own module.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
import respx

from rentopt.providers.base import FetchContext, FetchOutcome, Provider, load_providers, provider_names
from tests.providers.helpers import FAST, credential_envs, fetch, fetch_recorded, replays_http
from tools.fixture_routes import install_respx

HTTP_PROVIDERS = [name for name in provider_names() if replays_http(name)]
ATTEMPTS = FAST.retries + 1  # the messages below say "after 3 attempts"

# An answer gets the recorded response for the request and returns what to send instead (or raises).
Answer = Callable[[httpx.Response], httpx.Response]


@pytest.fixture(params=HTTP_PROVIDERS)
def provider(request, monkeypatch) -> type[Provider]:
    """Each HTTP provider's class, with placeholder credentials set where it requires a key."""
    cls = load_providers()[0][request.param]
    if cls.key_required:
        for env in credential_envs(cls):
            monkeypatch.setenv(env, f"placeholder-{env.lower()}")
    return cls


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    """Every wait FetchContext asks for, recorded instead of slept."""
    asked: list[float] = []

    async def record(self, seconds: float) -> None:
        asked.append(seconds)

    monkeypatch.setattr(FetchContext, "sleep", record)
    return asked


def bad_body_message(cls: type[Provider]) -> str:
    """What a provider says of a body that is not its format: JSON APIs, or SkyPilot's CSV files."""
    return "a SkyPilot v8 catalog" if cls.name == "skypilot" else "not valid JSON"


def replay(cls: type[Provider], answer: Answer) -> tuple[FetchOutcome, dict[str, respx.Route]]:
    """Fetch with every request in the provider's manifest answered by `answer(recorded response)`."""
    with respx.mock(assert_all_called=False) as router:
        routes = install_respx(router, cls)
        for route in routes.values():
            recorded = route.return_value
            route.side_effect = lambda request, recorded=recorded, **_: answer(recorded)
        outcome = fetch(cls)
    return outcome, routes


def attempts_per_route(routes: dict[str, respx.Route]) -> set[int]:
    return {route.call_count for route in routes.values() if route.called}


def test_every_builtin_http_provider_is_covered():
    assert {"vast", "runpod", "lambda", "datacrunch", "aws", "azure"} <= set(HTTP_PROVIDERS)
    assert "sheet" not in HTTP_PROVIDERS


def test_429_waits_for_retry_after_then_succeeds(provider, waits):
    expected, _ = fetch_recorded(provider)
    assert expected.status == "ok", expected.error
    first = True

    def rate_limit_first(recorded: httpx.Response) -> httpx.Response:
        nonlocal first
        if first:
            first = False
            return httpx.Response(429, headers={"Retry-After": "2"})
        return recorded

    outcome, _ = replay(provider, rate_limit_first)
    assert outcome.status == "ok", outcome.error
    assert len(outcome.offers) == len(expected.offers)
    assert waits == [2.0]
    assert outcome.requests == expected.requests + 1


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_is_retried_then_fails(provider, waits, status):
    outcome, routes = replay(provider, lambda recorded: httpx.Response(status))
    assert outcome.status == "failed" and outcome.offers is None
    assert outcome.error.endswith(f"server error HTTP {status} after 3 attempts"), outcome.error
    assert attempts_per_route(routes) == {ATTEMPTS}
    assert len(waits) == FAST.retries


@pytest.mark.parametrize("timeout", [httpx.ConnectTimeout, httpx.ReadTimeout])
def test_a_timeout_is_retried_then_fails(provider, waits, timeout):
    def time_out(recorded: httpx.Response) -> httpx.Response:
        raise timeout("slow")

    outcome, routes = replay(provider, time_out)
    assert outcome.status == "failed" and outcome.offers is None
    assert f"timed out after 3 attempts ({timeout.__name__})" in outcome.error, outcome.error
    assert attempts_per_route(routes) == {ATTEMPTS}
    assert len(waits) == FAST.retries


@pytest.mark.parametrize("body", [b"<html>502 Bad Gateway</html>", b"upstream connect error", b""],
                         ids=["html", "text", "empty"])
def test_a_body_that_is_not_json_rejects_the_response(provider, body):
    outcome, routes = replay(provider, lambda recorded: httpx.Response(200, content=body))
    assert outcome.status == "failed" and outcome.offers is None
    assert bad_body_message(provider) in outcome.error, outcome.error
    assert attempts_per_route(routes) == {1}  # a bad body is not retried


@pytest.mark.parametrize("cut", [lambda body: body[: len(body) // 2], lambda body: body.rstrip()[:-1]],
                         ids=["half", "last-bracket"])
def test_a_truncated_recorded_body_rejects_the_response(provider, cut):
    def truncate(recorded: httpx.Response) -> httpx.Response:
        return httpx.Response(recorded.status_code, content=cut(recorded.content),
                              headers={"Content-Type": recorded.headers["Content-Type"]})

    outcome, _ = replay(provider, truncate)
    if provider.name == "skypilot":
        # A CSV has no closing bracket: a file cut inside a row leaves that row narrower than the
        # header, and it is counted, not read (a missing final newline alone is no cut: yotta's
        # published file has none). The rows before the cut are whole and kept.
        assert ("skipped", "wrong number of fields") in {("skipped", why) for _, why in outcome.skipped}, outcome.skipped
        return
    assert outcome.status == "failed" and outcome.offers is None
    assert "not valid JSON" in outcome.error, outcome.error


def test_a_url_in_a_message_or_source_keeps_neither_its_query_nor_its_user_and_password():
    from rentopt.providers.base import _where
    assert _where("https://bob:p@ss@mirror.example:8443/v1/x?api_key=k") == "https://mirror.example:8443/v1/x"
    assert _where("https://api.example/v1/x") == "https://api.example/v1/x"


@pytest.mark.parametrize("parts", [
    {"json": {"page": 1}, "params": {"api_key": "sk-IN-QUERY-1"}},
    {"content": b"page=1", "data": {"token": "sk-IN-QUERY-1"}},
    {"json": {"auth": [{"key": "sk-IN-QUERY-1"}]}},
])
def test_a_credential_in_any_part_of_a_request_stops_a_redirect_to_another_host(monkeypatch, parts):
    import asyncio

    from rentopt.providers.vast import VastProvider
    from tests.providers.helpers import TLS

    monkeypatch.setenv("VAST_API_KEY", "sk-IN-QUERY-1")

    async def post():
        async with httpx.AsyncClient(verify=TLS) as client:
            ctx = FetchContext(VastProvider(), client, FAST)
            await ctx.request("POST", "https://console.vast.ai/api/v0/moved/", auth=False, **parts)

    with respx.mock(assert_all_called=False) as router:
        router.post("https://console.vast.ai/api/v0/moved/").respond(
            307, headers={"Location": "https://elsewhere.example/take"})
        other = router.post("https://elsewhere.example/take").respond(200, json={})
        with pytest.raises(Exception, match="refused a redirect") as err:
            asyncio.run(post())
    assert not other.called and "sk-IN-QUERY-1" not in str(err.value)
