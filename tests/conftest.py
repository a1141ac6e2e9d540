"""Test isolation: every test gets its own RENTOPT_HOME and no provider keys from the machine."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"

# Variables that could leak a developer's real configuration into a test.
_LEAKY_SUFFIXES = ("_API_KEY", "_BASE_URL", "_CLIENT_ID", "_CLIENT_SECRET")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.endswith(_LEAKY_SUFFIXES) or name.startswith("RENTOPT_"):
            monkeypatch.delenv(name, raising=False)
    home = tmp_path / "rentopt-home"
    monkeypatch.setenv("RENTOPT_HOME", str(home))
    # Nor the developer's own config file (~/.config/rentopt/config.toml: keys, providers, currency).
    monkeypatch.setenv("RENTOPT_CONFIG", str(tmp_path / "no-config" / "config.toml"))
    # Only rentopt's own plugins: one installed next to it must not change a test's result.
    monkeypatch.setenv("RENTOPT_PLUGINS", "builtin")
    # Nor a developer's own SkyPilot catalog (~/.sky/catalogs/v8), which the skypilot plugin reads.
    from rentopt.providers import skypilot

    monkeypatch.setattr(skypilot, "LOCAL_CATALOG", tmp_path / "no-skypilot-catalog")
    yield home


@pytest.fixture(autouse=True)
def no_ecb_network(request, monkeypatch):
    """`rentopt refresh` also fetches the ECB's exchange rates: in tests that happens only over a
    replayed transport, or where a test asks for `ecb_http` and serves the recorded file (respx)."""
    if "ecb_http" in request.fixturenames:
        return
    import rentopt.providers.ecb as ecb

    real = ecb.fetch_reference_rates

    async def offline(settings=None, transport=None, url=ecb.ECB_HISTORY_URL):
        if transport is not None:
            return await real(settings, transport, url)
        return ecb.FxOutcome("failed", error="not fetched in tests")

    monkeypatch.setattr(ecb, "fetch_reference_rates", offline)


@pytest.fixture
def ecb_http() -> None:
    """Let refresh's ECB fetch go to HTTP (which the test must serve with respx)."""


@pytest.fixture
def rentopt_home(isolated_env) -> Path:
    return isolated_env


def fixture_path(provider: str, name: str) -> Path:
    return FIXTURES / provider / name


@pytest.fixture
def load_fixture():
    """load_fixture("vast", "bundles.json") -> parsed JSON (or text for non-JSON files)."""

    def load(provider: str, name: str):
        path = fixture_path(provider, name)
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if path.suffix == ".json" else text

    return load
