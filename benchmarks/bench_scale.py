"""`rentopt quote` end to end at 1k, 10k, 100k and 1M offers, from an offers file and from the store.

    .venv/bin/python benchmarks/bench_scale.py [--sizes 1000,10000,100000,1000000] [--repeat 3]
                                               [--sources csv,store] [--timeout 300]

Each quote is a fresh process (`python -c "from rentopt.optimizer.cli import main; main()" quote
...`), timed wall-clock, best and median of --repeat runs after one untimed warm-up, with its
peak RSS (the child's own ru_maxrss, from os.wait4; the offers are written by separate
interpreters so the bench process stays small). The import floor is timed the same way in
the same interpreter, per source: Python and exactly the third-party modules a quote from that
source loads (benchmarks/floors.py runs one and lists them: an offers file's quote loads
pyarrow's CSV reader, a store's does not; OR-Tools and pandas load only when a CP-SAT model is
built), and, where polars is installed, polars' own read + argmin of the same file. Reported per size: the ratio of the
best to the best floor, the median ratio of runs each paired with a floor run just before it
("x paired": the figure to read on a machine whose speed drifts), and the cost growth in
microseconds per offer ((time - floor) / offers).

The offers are synthetic but shaped like a marketplace (benchmarks/marketplace.py: 40 providers,
30 GPU spellings, hourly/day/week/month and spot prices, USD and CNY). The store holds the same
rows as the CSV, written provider by provider with `write_snapshot` (what `rentopt refresh`
does); the bundled snapshot's providers join every quote, as they do for a user.

Bytecode caching is on (an installed copy has its .pyc files); PYTHONDONTWRITEBYTECODE is
removed from the children's environment.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import marketplace  # noqa: E402
from floors import describe, floor_argv, loaded_libraries  # noqa: E402

JOB = ["--model", "13b", "--mode", "lora", "--days", "10"]
# polars' own read of the same file and argmin of its hourly prices: the physical floor of
# "read the offers, find the cheapest" (optional: skipped where polars is not installed).
POLARS = """
import sys, polars as pl
df = pl.read_csv(sys.argv[1], infer_schema=False)
df.select(pl.col("price_hour").cast(pl.Float64, strict=False).arg_min()).item()
"""
WRITERS = {"marketplace": "write_csv", "spreadsheet": "write_spreadsheet_csv", "ties": "write_ties_csv"}


# One quote in a child process, timed by phase: what reading the offers costs (load_offers and
# the OfferTable: this module's concern) apart from planning and solving.
PHASES = """
import os, sys, time
t0 = time.perf_counter()
from rentopt.optimizer.cli import HUGEPAGE_SETTING
os.environ.setdefault(HUGEPAGE_SETTING, "0")  # as the rentopt command does, before numpy's import
from rentopt.optimizer.catalog import load_offers
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.job import QuoteRequest
from rentopt.optimizer.planner import plan_instance
from rentopt.optimizer.workload import resolve_model
from decimal import Decimal
t1 = time.perf_counter()
offers = load_offers(offers_file=sys.argv[1] or None, lazy=True)
table = offers.table()
t2 = time.perf_counter()
req = QuoteRequest(model=resolve_model("13b"), setup=TrainingSetup(mode="lora"), days=Decimal(10))
planned = plan_instance(req, table, FxTable.load())
t3 = time.perf_counter()
from rentopt.optimizer.solver import solve
solve(planned.instance, top_k=req.top)
t4 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f} {t3 - t2:.3f} {t4 - t3:.3f} {table.n}")
"""


def phases(path: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, "-c", PHASES, path], env=env, capture_output=True, text=True, check=True)
    imports, read, plan, solve, n = out.stdout.split()
    return f"imports {imports} s, offers read into a table {read} s ({n} rows), plan {plan} s, solve {solve} s"


def run(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float, int, int, float]:
    """(wall seconds, peak RSS in KB, exit status, CPU seconds: user + system) of one child process."""
    with tempfile.TemporaryFile() as err:  # not a pipe: a chatty child must never block on a full one
        start = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                return float("inf"), usage.ru_maxrss, -9, float("inf")
            time.sleep(0.002)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 3):
            err.seek(0)
            raise SystemExit(f"{' '.join(argv[-8:])} failed ({code}): "
                             f"{err.read().decode(errors='replace').strip()[-500:]}")
    return wall, usage.ru_maxrss, code, usage.ru_utime + usage.ru_stime


class Timing(NamedTuple):
    best: float  # wall seconds
    median: float  # wall seconds
    peak_kb: int
    paired: float | None  # median of the runs' wall ratios to the floor run just before each
    cpu: float  # median CPU seconds (user + system): what a loaded or drifting machine disturbs least


def timed(argv: list[str], env: dict[str, str], repeat: int, timeout: float,
          floor: list[str] | None = None) -> Timing:
    """Best and median wall, peak RSS, median CPU and, with `floor`, the median ratio to the
    floor: each run is paired with a run of the floor just before it and the ratio is the median
    of the pairs' ratios (on a shared VM whose speed drifts by 20-50 % over minutes, a floor
    timed minutes earlier says little about this size's ratio)."""
    run(argv, env, timeout)  # warm the page cache and the .pyc files
    results, ratios = [], []
    for _ in range(repeat):
        base = run(floor, env, 60)[0] if floor else None
        results.append(run(argv, env, timeout))
        if base:
            ratios.append(results[-1][0] / base)
    walls = [w for w, _, _, _ in results]
    return Timing(min(walls), statistics.median(walls), max(r for _, r, _, _ in results),
                  statistics.median(ratios) if ratios else None, statistics.median(c for *_, c in results))


def _has_polars() -> bool:
    import importlib.util

    return importlib.util.find_spec("polars") is not None


def fill_store(home: Path, n: int) -> float:
    """Write the store in a separate interpreter: Linux counts a child's RSS before exec in its
    ru_maxrss, so a bench process holding a million offers would inflate every quote's peak."""
    out = subprocess.run([sys.executable, __file__, "--fill-store", str(home), str(n)],
                         capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def _fill_store(home: Path, n: int) -> float:
    from rentopt.optimizer import store

    home.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with store.open_writable(home / "prices.sqlite") as s:
        chunks: dict[str, list] = {}
        for provider, offers in marketplace.by_provider(n):
            chunks.setdefault(provider, []).extend(offers)
        for provider, offers in chunks.items():
            s.write_snapshot(provider, offers, fetched_at=marketplace.FETCHED, source="synthetic marketplace")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--sources", default="csv,store")
    ap.add_argument("--shape", choices=sorted(WRITERS), default="marketplace",
                    help="marketplace: LF, unquoted; spreadsheet: the same offers with a BOM, CRLF, every cell "
                         "quoted; ties: 300 sellers, mostly CNY monthly prices, one price per card and seller")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--data", type=Path, help="keep the offers files and stores in this folder and reuse them "
                                              "on the next run (a 1M-offer store takes minutes to write)")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    floors: dict[str, tuple[list[str], float]] = {}  # source -> (floor's argv, its best wall)
    quote = [sys.executable, "-c", "from rentopt.optimizer.cli import main; main()", "quote", *JOB]
    print(f"{'offers':>9} {'source':<6} {'best s':>7} {'median s':>8} {'x floor':>7} {'x paired':>8} {'us/offer':>8} "
          f"{'peak MB':>8}")
    with tempfile.TemporaryDirectory(prefix="rentopt-scale-") as tmp:
        folder = args.data or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for n in (int(x) for x in args.sizes.split(",")):
            for source in args.sources.split(","):
                home = folder / f"{source}-{n}"
                kept = home.exists() and args.data is not None
                home.mkdir(exist_ok=True)
                run_env = {**env, "RENTOPT_HOME": str(home)}
                if source == "csv":
                    path = folder / f"offers-{args.shape}-{n}.csv"
                    if not (kept and path.exists()):
                        subprocess.run([sys.executable, __file__, "--write-csv", str(path), str(n), args.shape],
                                       check=True)
                    argv = [*quote, "--offers-file", str(path)]
                else:
                    if not (kept and (home / "prices.sqlite").exists()):
                        seconds = fill_store(home, n)
                        print(f"          (store of {n:,} offers written in {seconds:.1f} s)")
                    argv = quote
                if source not in floors:  # the libraries this source's quote loads, found by running one
                    modules = loaded_libraries(argv[3:], run_env)
                    f_best, f_median, f_rss, _, _ = timed(floor_argv(modules), env, max(args.repeat, 5), 60)
                    print(f"          import floor of {source} quotes (python + {describe(modules)}): "
                          f"best {f_best:.3f} s, median {f_median:.3f} s, {f_rss / 1024:.0f} MB")
                    floors[source] = (floor_argv(modules), f_best)
                floor, floor_best = floors[source]
                repeat = args.repeat if n < 1_000_000 else max(1, args.repeat // 2)
                best, median, rss, paired, cpu = timed(argv, run_env, repeat, args.timeout, floor)
                if best == float("inf"):
                    print(f"{n:>9,} {source:<6} over the {args.timeout:.0f} s limit")
                    continue
                print(f"{n:>9,} {source:<6} {best:>7.3f} {median:>8.3f} {best / floor_best:>7.2f} {paired or 0:>8.2f} "
                      f"{(best - floor_best) / n * 1e6:>8.2f} {rss / 1024:>8.0f}")
                print(f"          {phases(str(path) if source == 'csv' else '', run_env)}")
                if source == "csv" and _has_polars():
                    lib = timed([sys.executable, "-c", POLARS, str(path)], env, repeat, args.timeout)
                    print(f"          polars read+argmin: best {lib.best:.3f} s, CPU {lib.cpu:.3f} s, "
                          f"{lib.peak_kb / 1024:.0f} MB; quote / polars: wall {best / lib.best:.2f}x, "
                          f"CPU {cpu / lib.cpu:.2f}x (quote CPU {cpu:.3f} s, medians)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fill-store"]:
        print(_fill_store(Path(sys.argv[2]), int(sys.argv[3])))
    elif sys.argv[1:2] == ["--write-csv"]:
        getattr(marketplace, WRITERS[sys.argv[4] if len(sys.argv) > 4 else "marketplace"])(Path(sys.argv[2]),
                                                                                          int(sys.argv[3]))
    else:
        main()
