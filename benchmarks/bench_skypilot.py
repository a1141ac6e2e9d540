"""A whole-job `rentopt quote` against SkyPilot's optimizer, on the same catalog (issue 25).

    .venv/bin/python benchmarks/bench_skypilot.py [--repeat 5] [--sky-python PATH] [--catalogs DIR]

Not part of the test suite, and rentopt never depends on SkyPilot: SkyPilot lives in a venv of
its own, outside the repository, e.g.

    python3 -m venv ../scratch/skyvenv && ../scratch/skyvenv/bin/pip install skypilot==0.14.1

found by --sky-python, $BENCH_SKYPILOT_PYTHON, or a `scratch/skyvenv` folder above the
repository. Without it (or without the catalogs) the bench says so and exits 0.

Both sides read the same files: SkyPilot's v8 `vms.csv` of each cloud in
`<catalogs>/skypilot-v8/<date>/` (the catalogs are found as tools/build_snapshot.py finds them).
The default clouds are gcp, lambda and vast: SkyPilot 0.14.1 cannot read the mirror's azure file
(about 27,000 lines carry an unquoted `V1,V2`, which pandas refuses), so azure is left out of both.

SkyPilot side: a fresh process imports sky and runs `sky.Optimizer.optimize(dag,
minimize=COST)` for one task asking `sky.Resources(accelerators=...)` (8 x H100, and 1 x
A100-80GB), printing its table of considered resources as `sky launch` does. That is the work
`sky launch --dryrun` does server-side; the CLI itself sends the request to a local API server
(started in the background on first use), whose start-up and HTTP round trip would be timed
instead of the optimizer, and whose CPU would not count as the client's. SkyPilot runs under a
temporary HOME holding `.sky/catalogs/v8/<cloud>/vms.csv`, `common/accelerators.csv` and a
`config.yaml` with `allowed_clouds`; the enabled clouds are cached in its state database once,
untimed, as `sky check` leaves them on a set-up machine (no credentials are looked for). A
catalog file with no `.meta/<file>.md5` counts for SkyPilot as placed by hand and is never
re-downloaded (sky/catalog/common.py, read_catalog); the bench also points HTTP(S)_PROXY at a
closed local port and turns usage collection off, and fails if SkyPilot tried to fetch anything.

rentopt side: the same files are imported once with `RENTOPT_SKYPILOT_CATALOG=<copy> rentopt
refresh --providers skypilot` (timed once, reported, not part of the ratio), exported with
`rentopt offers --providers gcp,lambda,vast --format json`, and each timed run is `rentopt quote
--model 13b --mode lora --days 10 --offers-file offers.json`: the offers are read and parsed in
every run, as SkyPilot reads its CSVs in every run. A second rentopt variant is the everyday
quote from the price store (`--providers gcp,lambda,vast`, no offers file).

The comparison is not like for like, and the report says so: rentopt prices a whole job (which
GPUs, how many, how long, every stage's bill) over every GPU in the catalog, where SkyPilot
picks the cheapest instance for one given accelerator request.

Timing: --repeat rounds after one untimed warm-up round; each round runs every case once as a
fresh process, in an order that rotates from round to round, so a slow minute on this shared
machine slows both sides of a round. Wall time, and the child's CPU (user + sys) and peak RSS
from wait4. Ratios: median over rounds of (rentopt / SkyPilot) in the same round, and the ratio
of the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

JOB = ["--model", "13b", "--mode", "lora", "--days", "10"]
SKY_REQUESTS = ["H100:8", "A100-80GB:1"]
DEFAULT_CLOUDS = "gcp,lambda,vast"
DEFAULT_DATE = "2026-05-20"
# A port nothing listens on: any HTTP request SkyPilot tried would fail at once, not wait.
CLOSED_PROXY = "http://127.0.0.1:9"

# Runs in SkyPilot's venv, once, untimed: what `sky check` leaves behind on a machine with
# credentials (the allowed and enabled clouds cached in ~/.sky's state database).
SKY_SETUP = """
import sys
from sky import check, global_user_state, skypilot_config
from sky.clouds import cloud as sky_cloud
workspace = skypilot_config.get_active_workspace()
global_user_state.set_allowed_clouds(check._get_workspace_allowed_clouds(workspace), workspace)
global_user_state.set_enabled_clouds(sys.argv[1].split(','), sky_cloud.CloudCapability.COMPUTE, workspace)
print(global_user_state.get_cached_enabled_clouds(sky_cloud.CloudCapability.COMPUTE, workspace))
"""

# The timed SkyPilot process: import, build the task, optimize for cost, print the choice.
SKY_OPTIMIZE = """
import sys
import sky
with sky.Dag() as dag:
    task = sky.Task(run='true')
    task.set_resources(sky.Resources(accelerators=sys.argv[1]))
dag = sky.Optimizer.optimize(dag, minimize=sky.OptimizeTarget.COST, quiet=False)
best = dag.tasks[0].best_resources
print('CHOSEN', best, 'USD/h', best.get_cost(3600))
"""


@dataclass
class Case:
    label: str
    side: str  # "sky" or "rentopt"
    argv: list[str]
    env: dict[str, str]
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)
    last_out: str = ""


def find_sky_python(explicit: str | None) -> Path | None:
    """The first of --sky-python, $BENCH_SKYPILOT_PYTHON, `scratch/skyvenv` above the repository
    that is given (a given path that is not there is not replaced by the next one)."""
    given = explicit or os.environ.get("BENCH_SKYPILOT_PYTHON")
    candidates = [Path(given)] if given else [up / "scratch" / "skyvenv" / "bin" / "python"
                                               for up in (ROOT, *ROOT.parents)]
    return next((c for c in candidates if c.is_file()), None)


def rentopt_command() -> list[str]:
    """The installed `rentopt` script next to this Python (what users run), else the module."""
    script = Path(sys.executable).parent / "rentopt"
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-c", "from rentopt.optimizer.cli import main; main()"]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without anything that would make either tool read the user's own
    settings (SkyPilot's SKYPILOT_*/SKY_*, rentopt's RENTOPT_*), plus EXTRA."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SKYPILOT_", "SKY_", "RENTOPT_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra)
    return env


def run_timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, float, int, str, str]:
    """Wall s, CPU s (user + sys of the child), peak RSS MB, exit status, stdout, stderr."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, proc.returncode,
                out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def check_output(argv: list[str], env: dict[str, str], what: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    return proc


def sky_fetch_attempt(stdout: str, stderr: str) -> str | None:
    """SkyPilot's own words when it tried to download a catalog (sky/catalog/common.py)."""
    for line in (stdout + stderr).splitlines():
        if "Failed to fetch" in line or ("Updating " in line and "catalog" in line):
            return line.strip()
    return None


def prepare_skypilot(work: Path, sky_python: Path, dated: Path, accelerators: Path,
                     clouds: list[str]) -> dict[str, str]:
    home = work / "sky-home"
    v8 = home / ".sky" / "catalogs" / "v8"
    for cloud in clouds:
        (v8 / cloud).mkdir(parents=True)
        shutil.copy2(dated / cloud / "vms.csv", v8 / cloud / "vms.csv")
    (v8 / "common").mkdir(parents=True)
    shutil.copy2(accelerators, v8 / "common" / "accelerators.csv")
    (home / ".sky" / "config.yaml").write_text(f"allowed_clouds: [{', '.join(clouds)}]\n")
    env = clean_env(HOME=str(home), SKYPILOT_DISABLE_USAGE_COLLECTION="1",
                    HTTP_PROXY=CLOSED_PROXY, HTTPS_PROXY=CLOSED_PROXY,
                    http_proxy=CLOSED_PROXY, https_proxy=CLOSED_PROXY)
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    check_output([str(sky_python), "-c", SKY_SETUP, ",".join(clouds)], env, "SkyPilot set-up (enabled clouds)")
    return env


def prepare_rentopt(work: Path, dated: Path, clouds: list[str]) -> tuple[dict[str, str], Path, dict]:
    catalog = work / "rentopt-catalog"
    for cloud in clouds:
        (catalog / cloud).mkdir(parents=True)
        shutil.copy2(dated / cloud / "vms.csv", catalog / cloud / "vms.csv")
    env = clean_env(RENTOPT_HOME=str(work / "rentopt-home"), RENTOPT_CONFIG=str(work / "no-config.toml"),
                    RENTOPT_SKYPILOT_CATALOG=str(catalog))
    start = time.perf_counter()
    proc = subprocess.run([*rentopt_command(), "refresh", "--providers", "skypilot", "--format", "json"],
                          env=env, capture_output=True, text=True, check=False)
    refresh_wall = time.perf_counter() - start
    try:
        summary = json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"rentopt refresh failed (exit {proc.returncode}):\n{proc.stderr.strip()[-2000:]}")
    stored = {p["provider"]: p["offers"] for p in summary["providers"] if p["status"] == "ok"}
    missing = [c for c in clouds if not stored.get(c)]
    if missing:
        raise SystemExit(f"rentopt refresh stored no offers for {', '.join(missing)}: {summary['providers']}")
    offers_file = work / "offers.json"
    exported = check_output([*rentopt_command(), "offers", "--providers", ",".join(clouds), "--format", "json"],
                            env, "rentopt offers --format json")
    offers_file.write_text(exported.stdout)
    counts: dict[str, int] = {}
    for offer in json.loads(exported.stdout):
        counts[offer["provider"]] = counts.get(offer["provider"], 0) + 1
    if counts != {c: stored[c] for c in clouds}:
        raise SystemExit(f"the exported offers {counts} are not the {stored} the refresh stored")
    info = {"refresh_wall": refresh_wall, "stored": stored,
            "provenance": [line for line in exported.stderr.splitlines() if line.startswith("#")]}
    return env, offers_file, info


def med(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed rounds (after one warm-up round)")
    parser.add_argument("--sky-python", help="Python of a venv with skypilot installed")
    parser.add_argument("--catalogs", type=Path, help="folder holding skypilot-v8/ (default: as build_snapshot finds it)")
    parser.add_argument("--date", default=DEFAULT_DATE, help="catalog date folder under skypilot-v8/")
    parser.add_argument("--clouds", default=DEFAULT_CLOUDS, help="clouds both sides read (SkyPilot cannot read azure's file)")
    args = parser.parse_args()

    sky_python = find_sky_python(args.sky_python)
    if sky_python is None:
        print("bench_skypilot: skipped: no SkyPilot venv (give --sky-python or $BENCH_SKYPILOT_PYTHON, "
              "or create ../scratch/skyvenv with `pip install skypilot==0.14.1`)")
        return
    probe = subprocess.run([str(sky_python), "-c", "import sky; print(sky.__version__)"],
                           capture_output=True, text=True, check=False,
                           env=clean_env(SKYPILOT_DISABLE_USAGE_COLLECTION="1"))
    if probe.returncode != 0:
        print(f"bench_skypilot: skipped: {sky_python} cannot import sky: {probe.stderr.strip()[-300:]}")
        return
    sky_version = probe.stdout.strip()

    from build_snapshot import find_catalogs

    if args.catalogs:  # a folder given is the one used, never replaced by one found elsewhere
        root = args.catalogs if (args.catalogs / "skypilot-v8").is_dir() else None
    else:
        root = find_catalogs()
    dated = root / "skypilot-v8" / args.date if root else None
    accelerators = root / "skypilot-v8" / "accelerators.csv" if root else None
    clouds = [c.strip() for c in args.clouds.split(",") if c.strip()]
    if dated is None or not accelerators.is_file() or not all((dated / c / "vms.csv").is_file() for c in clouds):
        print(f"bench_skypilot: skipped: no SkyPilot catalog {args.date} for {', '.join(clouds)} "
              "(give --catalogs DIR holding skypilot-v8/, or set RENTOPT_CATALOGS)")
        return

    from rentopt import __version__ as rentopt_version

    with tempfile.TemporaryDirectory(prefix="bench-skypilot-") as tmp:
        work = Path(tmp)
        sky_env = prepare_skypilot(work, sky_python, dated, accelerators, clouds)
        rentopt_env, offers_file, info = prepare_rentopt(work, dated, clouds)
        cases = [Case(f"SkyPilot optimize {req}", "sky", [str(sky_python), "-c", SKY_OPTIMIZE, req], sky_env)
                 for req in SKY_REQUESTS]
        cases.append(Case("rentopt quote --offers-file", "rentopt",
                          [*rentopt_command(), "quote", *JOB, "--offers-file", str(offers_file)], rentopt_env))
        cases.append(Case(f"rentopt quote --providers {','.join(clouds)} (store)", "rentopt",
                          [*rentopt_command(), "quote", *JOB, "--providers", ",".join(clouds)], rentopt_env))

        print(f"bench_skypilot {time.strftime('%Y-%m-%d %H:%M %Z')}: {platform.node()}, {os.cpu_count()} CPUs, "
              f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}; Python {platform.python_version()}; "
              f"rentopt {rentopt_version}; SkyPilot {sky_version} ({sky_python})")
        stored = ", ".join(f"{c} {info['stored'][c]} offers" for c in clouds)
        print(f"catalog: {dated} ({stored} as rentopt stores them); "
              f"rentopt refresh of those files, once: {info['refresh_wall']:.2f} s wall")
        for line in info["provenance"]:
            print(f"  {line}")
        print(f"rounds: 1 warm-up + {args.repeat} timed, each case once per round, order rotating")

        for round_no in range(args.repeat + 1):
            shift = round_no % len(cases)
            for case in cases[shift:] + cases[:shift]:
                wall, cpu, rss, rc, out, err = run_timed(case.argv, case.env)
                if rc != 0:
                    raise SystemExit(f"{case.label} failed (exit {rc}):\n{(out + err).strip()[-2000:]}")
                if case.side == "sky" and (attempt := sky_fetch_attempt(out, err)):
                    raise SystemExit(f"{case.label}: SkyPilot tried to download a catalog: {attempt}")
                if round_no:
                    case.wall.append(wall)
                    case.cpu.append(cpu)
                    case.rss_mb.append(rss)
                case.last_out = out

        print()
        print(f"{'case':<52} {'wall med':>9} {'wall min-max':>13} {'CPU med':>8} {'peak MB':>8}")
        for case in cases:
            print(f"{case.label:<52} {med(case.wall):>8.2f}s {min(case.wall):>5.2f}-{max(case.wall):<5.2f}s "
                  f"{med(case.cpu):>7.2f}s {med(case.rss_mb):>8.0f}")
        print()
        for case in cases:
            chosen = [line for line in case.last_out.splitlines() if line.startswith(("CHOSEN", "  1 "))]
            if chosen:
                print(f"{case.label}: {chosen[0].strip()}")

        print()
        print("ratio rentopt / SkyPilot (median over rounds of the same round's pair; ratio of medians):")
        for mine in (c for c in cases if c.side == "rentopt"):
            for theirs in (c for c in cases if c.side == "sky"):
                paired_wall = med([a / b for a, b in zip(mine.wall, theirs.wall)])
                paired_cpu = med([a / b for a, b in zip(mine.cpu, theirs.cpu)])
                print(f"  {mine.label} vs {theirs.label}: wall {paired_wall:.3f} "
                      f"({med(mine.wall) / med(theirs.wall):.3f}), CPU {paired_cpu:.3f} "
                      f"({med(mine.cpu) / med(theirs.cpu):.3f})")
        print("Not like for like: rentopt prices a whole job (GPU, count, duration, every stage's bill) "
              "over every GPU of these clouds; SkyPilot picks the cheapest instance for one accelerator request.")


if __name__ == "__main__":
    main()
