"""Recorded provider responses, addressed by a per-provider manifest.

`fixtures/<provider>/routes.json` says which recorded body answers which request:

    {"recorded_at": "2026-11-28T06:00:00Z",
     "notes": "where each body came from",
     "routes": [{"method": "GET", "path": "/api/retail/prices", "params": {"$skip": "1000"},
                 "fixture": "prices_page2.json"},
                {"method": "GET", "path": "/api/retail/prices", "fixture": "prices_page1.json"}]}

`path` is the URL path on the provider's API host; `params` (optional) must all be present in
the request's query (first matching route wins, so list specific routes first); `status`
(default 200) and `headers` are optional. `host` (optional, "https://other.example") serves a
route from a second host the provider also reads (AWS's spot feed); without it the route is on
the provider's API host. The same manifest drives the provider tests (respx), the report
tests and the refresh benchmark, so all three replay exactly the same responses. Dev/test only: nothing here ships in the package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@dataclass
class FixtureRoute:
    method: str
    path: str
    fixture: Path
    params: dict[str, str] = field(default_factory=dict)
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    host: str | None = None  # scheme://netloc of a second host; None: the provider's API host

    def body(self) -> bytes:
        return self.fixture.read_bytes()


@dataclass
class Manifest:
    provider: str
    recorded_at: datetime
    routes: list[FixtureRoute]


def load_manifest(provider: str, fixtures: Path = FIXTURES) -> Manifest:
    folder = fixtures / provider
    raw = json.loads((folder / "routes.json").read_text(encoding="utf-8"))
    routes = [
        FixtureRoute(
            method=r.get("method", "GET").upper(),
            path=r["path"],
            fixture=folder / r["fixture"],
            params={k: str(v) for k, v in (r.get("params") or {}).items()},
            status=int(r.get("status", 200)),
            headers=dict(r.get("headers") or {}),
            host=r.get("host"),
        )
        for r in raw["routes"]
    ]
    recorded = datetime.fromisoformat(raw["recorded_at"].replace("Z", "+00:00"))
    return Manifest(provider, recorded, routes)


def install_respx(router, provider_cls, manifest: Manifest | None = None, base_url: str | None = None) -> dict:
    """Register the manifest's routes on a respx router for `provider_cls`; returns routes by fixture name."""
    import httpx

    manifest = manifest or load_manifest(provider_cls.name)
    base = urlsplit(base_url or provider_cls.api_root)
    installed = {}
    for i, r in enumerate(manifest.routes):
        url = f"{r.host.rstrip('/')}{r.path}" if r.host else f"{base.scheme}://{base.netloc}{r.path}"
        # respx replaces a route of the same name: number them, as one body may answer several paths
        route = router.route(method=r.method, url=url, params=r.params or None, name=f"{provider_cls.name}:{r.fixture.name}:{i}")
        route.mock(return_value=httpx.Response(r.status, content=r.body(), headers={"Content-Type": "application/json", **r.headers}))
        installed[r.fixture.name] = route
    return installed


# --------------------------------------------------------------------------------------------
# Finding the recorded response for a request; the builtin providers

# What a key-needing plugin is given during the build: it only ever reaches the mock transport.
PLACEHOLDER_CREDENTIAL = "snapshot-build-placeholder"


class ReplayError(Exception):
    """The fixtures cannot be replayed: a builtin plugin failed to load, or no route answers."""


def find_route(manifest: Manifest, method: str, origin: str, path: str, params: dict[str, str],
               api_origin: str) -> FixtureRoute | None:
    """The first manifest route answering this request (same rule as respx in install_respx).

    `origin` is "scheme://host" of the request, `api_origin` that of the provider's API root.
    """
    for r in manifest.routes:
        want_origin = (r.host or api_origin).rstrip("/")
        if r.method == method.upper() and want_origin == origin and r.path == path \
                and all(params.get(k) == v for k, v in r.params.items()):
            return r
    return None


def builtin_providers() -> list:
    """The providers shipped in this repository (a third-party plugin never enters the snapshot)."""
    from rentopt.providers.base import load_providers

    registry, broken = load_providers()
    mine = [b for b in broken if b.error.startswith("cannot import rentopt.providers.")]
    if mine:
        raise ReplayError("; ".join(f"{b.name}: {b.error}" for b in mine))
    return [cls for _, cls in sorted(registry.items()) if cls.__module__.startswith("rentopt.providers.")]


