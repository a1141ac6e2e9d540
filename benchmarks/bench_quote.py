"""End-to-end `rentopt quote` speed: the bundled snapshot against its import floor, then over a
price store of 10,000 and 100,000 offers.

    .venv/bin/python benchmarks/bench_quote.py [--sizes 10000,100000] [--repeat 5] [--bundled-repeat 10]

The mission quote (`rentopt quote --model 13b --mode lora --days 10`, no store: the bundled
snapshot) is timed in --bundled-repeat pairs, each a run of its floor just before a run of the
quote, every run a fresh process: wall and CPU (user + system, from os.wait4) medians and the
median of the pairs' ratios (target, issue 25: <= 1.6x). The floor is Python importing exactly
the third-party modules that quote loads (benchmarks/floors.py finds them by running it), so
the ratio is rentopt's own cost. `rentopt --help` and `rentopt estimate` are timed the same way.

Targets (issue 4): process start to printed plan in at most 1 s over 10,000 offers and 5 s
over 100,000 on the 2-core development machine. Each size is timed as a fresh subprocess
(`rentopt quote ...`, best of --repeat), then once in-process to split the time into import,
loading offers, planning (feasibility, timing, billing, dominance), solving and rendering, so
the solver's share is visible. The offers are synthetic but shaped like a marketplace catalog
(bench_store.synthetic_offers).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MISSION = ["quote", "--model", "13b", "--mode", "lora", "--days", "10"]
# Other bundled commands whose start-up must not regress, each against its own floor.
BUNDLED_OTHERS = {"--help": ["--help"], "estimate": ["estimate", "--model", "13b", "--mode", "lora"]}
JOBS = {
    "13b lora 10 days": ["--model", "13b", "--mode", "lora", "--days", "10"],
    "7b full 2B tokens": ["--model", "7b", "--mode", "full", "--tokens", "2e9"],
}


def fill_store(home: Path, n: int) -> None:
    from bench_store import synthetic_offers

    from rentopt.optimizer import store

    home.mkdir(parents=True, exist_ok=True)
    offers = synthetic_offers(n)
    with store.open_writable(home / "prices.sqlite") as s:
        s.write_snapshot("bench", offers, fetched_at=offers[0].fetched_at)


def time_subprocess(home: Path, args: list[str], repeat: int) -> tuple[float, float]:
    """Best and median wall time of `rentopt quote ARGS` as a fresh process.

    Bytecode caching is on, as in any installed copy (pip compiles .pyc files at install time);
    an environment that sets PYTHONDONTWRITEBYTECODE would recompile every module on each run.
    One untimed run warms the caches first.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["RENTOPT_HOME"] = str(home)
    exe = [sys.executable, "-c", "from rentopt.optimizer.cli import main; main()", "quote", *args]
    times = []
    for i in range(repeat + 1):
        start = time.perf_counter()
        proc = subprocess.run(exe, env=env, capture_output=True, text=True)
        if i:
            times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"quote failed: {proc.stderr.strip()}")
    return min(times), statistics.median(times)


def _wall_and_cpu(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s: the child's user + system time) of one run of `argv`."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read() if proc.stderr else b""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv[3:])} failed: {err.decode(errors='replace').strip()[-500:]}")
    return wall, usage.ru_utime + usage.ru_stime


def time_against_floor(args: list[str], env: dict[str, str], repeat: int) -> str:
    """`rentopt ARGS` and its floor (floors.py) in `repeat` pairs, floor first: one line of
    medians and the median of the pairs' ratios, wall and CPU."""
    from floors import describe, floor_argv, loaded_libraries

    modules = loaded_libraries(args, env)
    floor = floor_argv(modules)
    command = [sys.executable, "-c", "from rentopt.optimizer.cli import main; main()", *args]
    _wall_and_cpu(floor, env)  # warm the page cache and the .pyc files
    _wall_and_cpu(command, env)
    pairs = [(_wall_and_cpu(floor, env), _wall_and_cpu(command, env)) for _ in range(repeat)]
    med = statistics.median
    return (f"{med(c[0] for _, c in pairs):.3f} s wall, {med(c[1] for _, c in pairs):.3f} s CPU; floor "
            f"{med(f[0] for f, _ in pairs):.3f} s wall, {med(f[1] for f, _ in pairs):.3f} s CPU; x floor (paired) "
            f"{med(c[0] / f[0] for f, c in pairs):.2f} wall, {med(c[1] / f[1] for f, c in pairs):.2f} CPU\n"
            f"      floor: {describe(modules)}")


def bundled(repeat: int) -> None:
    """The bundled-snapshot commands against their floors (no store: RENTOPT_HOME is empty)."""
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["RENTOPT_HOME"] = home
        print(f"bundled snapshot, {repeat} pairs (medians)")
        for name, args in {"mission quote": MISSION, **BUNDLED_OTHERS}.items():
            print(f"  {name:<14} {time_against_floor(args, env, repeat)}")


def breakdown(home: Path, args: list[str]) -> dict[str, float]:
    """One in-process run, timed by phase (imports are already warm except the solver's)."""
    os.environ["RENTOPT_HOME"] = str(home)
    times: dict[str, float] = {}
    t = time.perf_counter()
    from rentopt.optimizer import solver  # noqa: F401  ortools
    times["import ortools"] = time.perf_counter() - t
    from rentopt.optimizer.catalog import load_offers
    from rentopt.optimizer.currency import FxTable
    from rentopt.optimizer.models import TrainingSetup
    from rentopt.optimizer.job import QuoteRequest
    from rentopt.optimizer.planner import build_quote, plan_instance
    from rentopt.optimizer.render import quote_table
    from rentopt.optimizer.workload import resolve_model

    kw = dict(zip(args[::2], args[1::2]))
    t = time.perf_counter()
    offers = load_offers(lazy=True)
    table = offers.table()  # the planner's columns, as build_quote reads them
    times["read offers into the planner's columns"] = time.perf_counter() - t
    req = QuoteRequest(model=resolve_model(kw["--model"]), setup=TrainingSetup(mode=kw["--mode"]),
                       days=Decimal(kw["--days"]) if "--days" in kw else None,
                       tokens=float(kw["--tokens"]) if "--tokens" in kw else None)
    fx = FxTable.load()
    t = time.perf_counter()
    planned = plan_instance(req, table, fx)
    times["plan (layouts, hours, billing terms per offer)"] = time.perf_counter() - t
    t = time.perf_counter()
    solution = solver.solve(planned.instance, top_k=req.top)
    times["solve (bounds, prune, exact prices, top 5)"] = time.perf_counter() - t
    t = time.perf_counter()
    quote_table(build_quote(req, offers, fx, list_rejected=False))
    times["whole build_quote + render (again)"] = time.perf_counter() - t
    times["candidates"] = float(len(planned.instance.train) + len(planned.instance.validate))
    times["candidates dropped by pruning"] = float(sum(solution.pruned.values()))
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--bundled-repeat", type=int, default=10, help="pairs for the bundled-snapshot commands (0: skip)")
    args = ap.parse_args()
    if args.bundled_repeat:
        bundled(args.bundled_repeat)
    for n in (int(x) for x in args.sizes.split(",") if x):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "home"
            start = time.perf_counter()
            fill_store(home, n)
            print(f"{n:,} offers (store filled in {time.perf_counter() - start:.1f} s)")
            for name, job in JOBS.items():
                best, median = time_subprocess(home, job, args.repeat)
                print(f"  {name:<20} end to end: best {best:.3f} s, median {median:.3f} s ({args.repeat} runs)")
            for phase, seconds in breakdown(home, JOBS["13b lora 10 days"]).items():
                unit = "" if phase.startswith("candidates") else " s"
                value = f"{seconds:.0f}" if not unit else f"{seconds:.3f}"
                print(f"    {phase:<58} {value}{unit}")


if __name__ == "__main__":
    main()
