"""Meta-tests over every registered provider plugin, and plugin discovery from outside the package."""

from __future__ import annotations

import asyncio
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import respx

from rentopt.providers.base import (
    ENTRY_POINT_GROUP,
    Provider,
    fetch_all,
    get_providers,
    load_providers,
    provider_names,
)
from rentopt.providers.datacrunch import DataCrunchProvider
from rentopt.providers.lambdalabs import LambdaProvider
from rentopt.providers.runpod import RunpodProvider
from rentopt.providers.vast import VastProvider
from tests.providers.helpers import FAST, credential_envs, fetch, replays_http
from tools.fixture_routes import FIXTURES, install_respx, load_manifest

TESTS = Path(__file__).resolve().parent
NAMES = provider_names()


def registry() -> dict[str, type[Provider]]:
    return load_providers()[0]


def test_the_builtin_plugins_load_without_errors():
    found, broken = load_providers()
    assert broken == (), [f"{b.name}: {b.error}" for b in broken]
    for expected in ("vast", "runpod", "lambda", "datacrunch"):
        assert expected in found


def test_every_provider_name_is_unique_and_matches_its_entry_point():
    eps = [ep for ep in entry_points(group=ENTRY_POINT_GROUP)]
    classes = {ep.name: ep.load() for ep in eps}
    names = [cls.name for cls in classes.values()]
    assert len(names) == len(set(names)), names
    for ep_name, cls in classes.items():
        assert cls.name == ep_name, f"entry point {ep_name!r} loads a provider named {cls.name!r}"
        assert cls.base_url_env() == f"RENTOPT_{ep_name.upper()}_BASE_URL"


@pytest.mark.parametrize("name", NAMES)
def test_every_provider_has_fixtures_and_a_test_module(name):
    folder = FIXTURES / name
    assert folder.is_dir(), f"fixtures/{name}/ is missing"
    assert (TESTS / f"test_{name}.py").is_file(), f"tests/providers/test_{name}.py is missing"
    if (folder / "routes.json").exists():
        manifest = load_manifest(name)
        assert manifest.recorded_at.isoformat() == "2026-11-28T06:00:00+00:00"
        for route in manifest.routes:
            assert route.fixture.is_file(), f"{route.fixture} named in routes.json does not exist"


@pytest.mark.parametrize("name", [n for n in NAMES if not replays_http(n)])
def test_a_provider_without_recorded_routes_makes_no_http_requests(name):
    cls = registry()[name]
    with respx.mock(assert_all_called=False) as router:
        outcome = fetch(cls())
        assert not router.calls, f"{name} has no recorded routes but sent {router.calls.last.request.url}"
    assert outcome.status in ("ok", "skipped"), outcome.error


@pytest.mark.parametrize("name", NAMES)
def test_base_url_override_replaces_the_api_root(name, monkeypatch):
    cls = registry()[name]
    root = urlsplit(cls.api_root)
    mirror = f"https://{name}-mirror.example{root.path}/"
    monkeypatch.setenv(cls.base_url_env(), mirror)
    assert cls().base_url() == mirror.rstrip("/")


@pytest.mark.parametrize("name", [n for n in NAMES if replays_http(n)])
def test_a_refresh_through_the_override_never_touches_the_real_api(name, monkeypatch):
    cls = registry()[name]
    for env in credential_envs(cls):
        monkeypatch.setenv(env, "meta-test-credential")
    root = urlsplit(cls.api_root)
    monkeypatch.setenv(cls.base_url_env(), f"https://{name}-mirror.example{root.path}")
    with respx.mock(assert_all_called=False) as router:
        install_respx(router, cls, base_url=f"https://{name}-mirror.example")
        outcome = fetch(cls())
        hosts = {call.request.url.host for call in router.calls}
    assert outcome.status == "ok", outcome.error
    assert f"{name}-mirror.example" in hosts
    assert root.hostname not in hosts


# -- discovery from outside the package ---------------------------------------------------------

EXTERNAL_PLUGIN = '''
from rentopt.providers.base import Provider


class AcmeProvider(Provider):
    name = "acme"
    api_root = "https://api.acme.example/v1"

    async def fetch(self, ctx):
        return []
'''


@pytest.fixture
def installed_elsewhere(tmp_path, monkeypatch):
    """A tiny distribution on sys.path registering one good and two broken entry points."""
    (tmp_path / "rentopt_acme_plugin.py").write_text(textwrap.dedent(EXTERNAL_PLUGIN))
    dist = tmp_path / "rentopt_acme_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rentopt-acme-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[rentopt.providers]\n"
        "acme = rentopt_acme_plugin:AcmeProvider\n"
        "ghost = rentopt_no_such_module:GhostProvider\n"
        "notaprovider = json:JSONDecoder\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RENTOPT_PLUGINS", "all")  # this test asks for third-party plugins
    load_providers.cache_clear()
    yield
    load_providers.cache_clear()


def test_a_plugin_registered_outside_the_package_is_discovered(installed_elsewhere):
    providers = {p.name: p for p in get_providers()}
    assert "acme" in providers
    assert type(providers["acme"]).__module__ == "rentopt_acme_plugin"
    assert providers["acme"].base_url_env() == "RENTOPT_ACME_BASE_URL"
    for builtin in ("vast", "runpod", "lambda", "datacrunch"):
        assert builtin in providers


def test_broken_entry_points_are_reported_and_do_not_break_the_others(installed_elsewhere):
    found, broken = load_providers()
    by_name = {b.name: b.error for b in broken}
    assert "rentopt_no_such_module" in by_name["ghost"] and "cannot import" in by_name["ghost"]
    assert "not a rentopt Provider subclass" in by_name["notaprovider"]
    assert "ghost" not in found and "notaprovider" not in found
    assert {"acme", "vast", "runpod", "lambda", "datacrunch"} <= set(found)



# -- refreshing several providers at once ------------------------------------------------------


def test_fetch_all_keeps_going_when_one_provider_fails(monkeypatch):
    monkeypatch.setenv("LAMBDA_API_KEY", "meta-test-key")
    monkeypatch.setenv("DATACRUNCH_CLIENT_ID", "meta-test-id")
    monkeypatch.setenv("DATACRUNCH_CLIENT_SECRET", "meta-test-secret")
    healthy = (VastProvider, LambdaProvider, DataCrunchProvider)
    with respx.mock() as router:
        for cls in healthy:
            install_respx(router, cls)
        router.post("https://api.runpod.io/graphql").respond(500)
        outcomes = asyncio.run(fetch_all([cls() for cls in (*healthy, RunpodProvider)], FAST))
    status = {o.provider: o.status for o in outcomes}
    assert status == {"vast": "ok", "lambda": "ok", "datacrunch": "ok", "runpod": "failed"}
    assert all(o.offers for o in outcomes if o.status == "ok")


def test_builtin_mode_never_loads_a_plugin_installed_next_to_rentopt(installed_elsewhere, monkeypatch):
    monkeypatch.setenv("RENTOPT_PLUGINS", "builtin")
    found, broken = load_providers()
    assert "acme" not in found and broken == ()
    assert {"vast", "runpod", "lambda", "datacrunch", "sheet"} <= set(found)


def test_an_unknown_plugins_mode_is_a_clear_error(monkeypatch):
    from rentopt.optimizer.errors import InputError

    monkeypatch.setenv("RENTOPT_PLUGINS", "some")
    with pytest.raises(InputError, match="RENTOPT_PLUGINS='some'"):
        load_providers()
