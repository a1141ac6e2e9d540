"""Refresh every built-in provider against a local mock API with real network latency.

    .venv/bin/python benchmarks/bench_refresh.py [--latency-ms 200]

A threaded HTTP server on 127.0.0.1 replays fixtures/<provider>/routes.json (the same manifests
the tests and the bundled snapshot use), sleeping --latency-ms before every answer. Each
provider is pointed at it with RENTOPT_<NAME>_BASE_URL (plus RENTOPT_AWS_SPOT_URL for AWS's
second host). Providers are fetched concurrently, so the total should be about the slowest
provider's time (its sequential requests x latency + parsing), not the sum of all of them.
Runs in a temporary RENTOPT_HOME with placeholder credentials; nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tools.fixture_routes import PLACEHOLDER_CREDENTIAL, builtin_providers, find_route  # noqa: E402
from tools.fixture_routes import FIXTURES, load_manifest  # noqa: E402

# Routes served from a second host, and the variable that points the plugin at our copy of it.
SECOND_HOST_ENVS = {("aws", "https://website.spot.ec2.aws.a2z.com"): "RENTOPT_AWS_SPOT_URL"}


def make_handler(manifest, origin: str, api_origin: str, latency_s: float, counts: dict):
    """Answers as `origin` (the provider's API host or its second host) would, after `latency_s`."""

    class Replay(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            url = urlsplit(self.path)
            route = find_route(manifest, self.command, origin, url.path, dict(parse_qsl(url.query)), api_origin)
            time.sleep(latency_s)
            counts[manifest.provider] = counts.get(manifest.provider, 0) + 1
            body = route.body() if route else b'{"error": "no recorded response"}'
            self.send_response(route.status if route else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, *args) -> None:  # keep the benchmark's output readable
            pass

    return Replay


def serve(handler) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--latency-ms", type=float, default=200.0)
    args = ap.parse_args()
    latency = args.latency_ms / 1000

    classes = [c for c in builtin_providers() if (FIXTURES / c.name / "routes.json").exists()]
    counts: dict[str, int] = {}
    servers = []
    with tempfile.TemporaryDirectory(prefix="rentopt-bench-") as home:
        os.environ["RENTOPT_HOME"] = home
        # One local server per host (a plugin may rebuild URLs from the API root, e.g. Azure's
        # NextPageLink, so the API root's path must stay as it is).
        for cls in classes:
            manifest = load_manifest(cls.name)
            root = urlsplit(cls.api_root)
            api_origin = f"{root.scheme}://{root.netloc}"
            server, local = serve(make_handler(manifest, api_origin, api_origin, latency, counts))
            servers.append(server)
            os.environ[cls.base_url_env()] = local + root.path
            for env in {cls.key_env, *getattr(cls, "credential_envs", ())} - {None}:
                os.environ[env] = PLACEHOLDER_CREDENTIAL
            for (name, host), env in SECOND_HOST_ENVS.items():
                routes = [r for r in manifest.routes if r.host == host]
                if name == cls.name and routes:
                    server, local = serve(make_handler(manifest, host, api_origin, latency, counts))
                    servers.append(server)
                    os.environ[env] = local + routes[0].path

        from rentopt.optimizer.refresh import format_report, run_refresh
        from rentopt.providers.base import HttpSettings

        marks: list[float] = []
        start = time.perf_counter()
        report = run_refresh([c.name for c in classes], settings=HttpSettings(retries=0),
                             progress=lambda line: marks.append(time.perf_counter()))
        total = time.perf_counter() - start
    for server in servers:
        server.shutdown()

    print(format_report(report))
    print()
    print(f"latency per request: {args.latency_ms:.0f} ms")
    for r in report.results:
        print(f"  {r.provider:<11} {r.status:<7} {r.offers:>4} offers  {counts.get(r.provider, 0)} requests  {r.seconds:.2f} s")
    slowest = max(r.seconds for r in report.results)
    fetching = marks[-1] - marks[0] if len(marks) > 1 else 0.0
    print(f"fetch phase {fetching:.2f} s   slowest provider {slowest:.2f} s   sum of providers "
          f"{sum(r.seconds for r in report.results):.2f} s   whole refresh (lock, store, writes) {total:.2f} s")


if __name__ == "__main__":
    main()
