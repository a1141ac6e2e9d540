"""Worst case for a nightly refresh: every HTTP provider's server drips its answer at 1 byte/s.

    .venv/bin/python benchmarks/bench_drip.py [--budgets 1,5,20] [--fault drip|hang]

Each built-in HTTP provider is pointed (RENTOPT_<NAME>_BASE_URL) at its own loopback server
(tests/providers/loopback.py) that sends headers at once and then one byte a second, or never
answers (--fault hang). `rentopt refresh` runs as a user runs it (a subprocess, `--time-budget B`)
from a store holding a good snapshot; the wall time printed is what cron would wait. Before the
time budget existed this did not end (a vast, runpod or lambda answer of a few KB at 1 byte/s
takes hours). Nothing leaves the machine; credentials are placeholders.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.providers import loopback  # noqa: E402
from tools.fixture_routes import PLACEHOLDER_CREDENTIAL, builtin_providers  # noqa: E402
from tools.fixture_routes import load_manifest  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budgets", default="1,5,20", help="comma list of --time-budget values (seconds)")
    parser.add_argument("--fault", choices=["drip", "hang"], default="drip")
    args = parser.parse_args()
    classes = [c for c in builtin_providers() if load_manifest(c.name).routes] if (ROOT / "fixtures").exists() else []
    home = Path(tempfile.mkdtemp(prefix="rentopt-drip-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RENTOPT_")}
    env.update(RENTOPT_HOME=str(home), RENTOPT_PLUGINS="builtin")
    for cls in classes:
        for var in {cls.key_env, *getattr(cls, "credential_envs", ())} - {None}:
            env[var] = PLACEHOLDER_CREDENTIAL
    servers = {c.name: loopback.FaultServer(load_manifest(c.name)) for c in classes}
    for cls in classes:
        path = cls.api_root.split("://", 1)[1].partition("/")[2]
        env[cls.base_url_env()] = f"{servers[cls.name].root}/{path}".rstrip("/")
        if cls.name == "aws":
            env["RENTOPT_AWS_SPOT_URL"] = f"{servers['aws'].root}/spot.json"
    names = ",".join(c.name for c in classes)
    command = [sys.executable, "-m", "rentopt", "refresh", "--providers", names, "--format", "json"]
    try:
        good = subprocess.run(command, env=env, capture_output=True, text=True)
        print(f"good night: exit {good.returncode}, {len(classes)} providers")
        for server in servers.values():
            server.fault = loopback.drip(1.0) if args.fault == "drip" else loopback.hang
        for budget in (float(b) for b in args.budgets.split(",")):
            start = time.perf_counter()
            done = subprocess.run([*command, "--time-budget", f"{budget:g}"], env=env, capture_output=True, text=True)
            wall = time.perf_counter() - start
            report = json.loads(done.stdout)
            slowest = max(p["seconds"] for p in report["providers"])
            failed = sum(p["status"] == "failed" for p in report["providers"])
            print(f"{args.fault}, --time-budget {budget:g} s: exit {done.returncode}, {failed}/{len(classes)} failed, "
                  f"slowest provider {slowest:.2f} s, whole refresh {wall:.2f} s (process start to exit)")
    finally:
        for server in servers.values():
            server.close()


if __name__ == "__main__":
    main()
