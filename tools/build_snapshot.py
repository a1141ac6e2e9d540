"""Build optimizer/data/snapshot.json.gz: every built-in provider's recorded fixtures, replayed
through the real plugins, as the price catalog rentopt ships for use before the first refresh.

    .venv/bin/python tools/build_snapshot.py            # rewrite the bundled snapshot
    .venv/bin/python tools/build_snapshot.py --check    # exit 1 if it differs from a fresh build

Each provider's responses come from fixtures/<name>/routes.json (tools/fixture_routes.py) over an
httpx.MockTransport, and its offers are dated by the manifest's `recorded_at`, so the file is a
pure function of the fixtures and the plugins: tests/test_catalog.py rebuilds it and compares.
The build runs in a scrubbed environment (a temporary RENTOPT_HOME so no user price sheet leaks
in, no RENTOPT_* or *_BASE_URL overrides, placeholder credentials that only reach the mock).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tools.fixture_routes import FIXTURES, FixtureRoute, Manifest, load_manifest  # noqa: E402

SNAPSHOT_PATH = ROOT / "optimizer" / "data" / "snapshot.json.gz"
SNAPSHOT_FORMAT = 1  # optimizer.catalog.SNAPSHOT_FORMAT
# What a key-needing plugin is given during the build: it only ever reaches the mock transport.
PLACEHOLDER_CREDENTIAL = "snapshot-build-placeholder"
_LEAKY_SUFFIXES = ("_API_KEY", "_BASE_URL", "_CLIENT_ID", "_CLIENT_SECRET")


class SnapshotBuildError(Exception):
    pass


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


def replay_transport(manifest: Manifest, api_root: str) -> httpx.MockTransport:
    """An httpx transport that answers from the manifest; an unknown request is a build error."""
    base = urlsplit(api_root)
    api_origin = f"{base.scheme}://{base.netloc}"

    def handle(request: httpx.Request) -> httpx.Response:
        origin = f"{request.url.scheme}://{request.url.netloc.decode()}"
        route = find_route(manifest, request.method, origin, request.url.path, dict(request.url.params), api_origin)
        if route is None:
            raise SnapshotBuildError(f"{manifest.provider}: no recorded response for {request.method} {request.url.copy_with(query=None)}")
        return httpx.Response(route.status, content=route.body(),
                              headers={"Content-Type": "application/json", **route.headers})

    return httpx.MockTransport(handle)


@contextmanager
def scrubbed_environment(providers: list) -> Iterator[None]:
    """Temporarily: an empty RENTOPT_HOME, no overrides, placeholder credentials. Restored after."""
    saved = dict(os.environ)
    try:
        for name in list(os.environ):
            if name.startswith("RENTOPT_") or name.endswith(_LEAKY_SUFFIXES):
                del os.environ[name]
        for cls in providers:
            for env in {cls.key_env, *getattr(cls, "credential_envs", ())} - {None}:
                os.environ[env] = PLACEHOLDER_CREDENTIAL
        with tempfile.TemporaryDirectory(prefix="rentopt-snapshot-") as home:
            os.environ["RENTOPT_HOME"] = home
            yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def builtin_providers() -> list:
    """The providers shipped in this repository (a third-party plugin never enters the snapshot)."""
    from rentopt.providers.base import load_providers

    registry, broken = load_providers()
    mine = [b for b in broken if b.error.startswith("cannot import rentopt.providers.")]
    if mine:
        raise SnapshotBuildError("; ".join(f"{b.name}: {b.error}" for b in mine))
    return [cls for _, cls in sorted(registry.items()) if cls.__module__.startswith("rentopt.providers.")]


def build(fixtures: Path = FIXTURES) -> dict:
    """The snapshot document: {"format", "providers": [...], "offers": [...]}."""
    from rentopt.providers.base import HttpSettings, fetch_all

    classes = builtin_providers()
    entries, offers = [], []
    with scrubbed_environment(classes):
        for cls in classes:
            if not (fixtures / cls.name / "routes.json").exists():
                raise SnapshotBuildError(f"{cls.name}: no fixtures/{cls.name}/routes.json to build the snapshot from")
            manifest = load_manifest(cls.name, fixtures)
            provider = cls()
            transport = replay_transport(manifest, provider.base_url())
            outcome = asyncio.run(fetch_all([provider], HttpSettings(retries=0, backoff_s=0), transport=transport,
                                            fetched_at=manifest.recorded_at))[0]
            if outcome.status != "ok" or outcome.offers is None:
                raise SnapshotBuildError(f"{cls.name}: replaying its fixtures failed: {outcome.error}")
            mine = sorted(outcome.offers, key=lambda o: o.offer_id)
            entries.append({"provider": cls.name, "fetched_at": manifest.recorded_at.isoformat().replace("+00:00", "Z"),
                            "source": provider.base_url(), "offers": len(mine)})
            offers.extend(o.model_dump(mode="json") for o in mine)
    return {"format": SNAPSHOT_FORMAT, "providers": entries, "offers": offers}


def encode(document: dict) -> bytes:
    """Deterministic bytes: compact JSON, gzip without a timestamp or file name."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    return gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the shipped file instead of writing it")
    ap.add_argument("--output", type=Path, default=SNAPSHOT_PATH)
    args = ap.parse_args(argv)
    try:
        document = build()
    except SnapshotBuildError as exc:
        print(f"build_snapshot: {exc}", file=sys.stderr)
        return 2
    summary = ", ".join(f"{p['provider']} {p['offers']}" for p in document["providers"])
    if args.check:
        shipped = json.loads(gzip.decompress(args.output.read_bytes())) if args.output.exists() else None
        if shipped != document:
            print(f"{args.output} is out of date with the fixtures; run tools/build_snapshot.py", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date ({summary})")
        return 0
    args.output.write_bytes(encode(document))
    print(f"wrote {args.output}: {len(document['offers'])} offers ({summary})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
