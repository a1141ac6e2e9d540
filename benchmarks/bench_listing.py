"""`rentopt offers --offers-file F` (and its JSON/CSV formats) against a quote of the same file,
and a quote from a store of the same size: wall seconds and peak RSS of each, fresh processes.

    .venv/bin/python benchmarks/bench_listing.py [--sizes 100000,1000000] [--shape marketplace]
                                                 [--repeat 3] [--data FOLDER] [--store]

Issue 25's target: `offers --offers-file` over 100,000 rows at most 2x a quote of the same file
(`quote --model 13b --mode lora --days 10 --offers-file F`). The table lists 50 rows by default;
--format json/csv list every row, written from the file's columns (optimizer/offers_writer.py):
their time grows with the text written (about 1.2 KB of JSON, 150 bytes of CSV per row).
--store also writes a store of each size (bench_scale.fill_store: minutes at 1M) and times a
quote from it and `rentopt report` over it (the same issue's target: at most 2x the quote of
the same store). Timing as bench_scale.py's `timed` (best and median of --repeat runs after one
untimed warm-up; peak RSS from os.wait4). "x quote" is the median over runs each paired with a
run of the quote of the same data just before it (on a VM whose speed drifts, a quote timed
minutes earlier says little).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale  # noqa: E402

RENTOPT = [sys.executable, "-c", "from rentopt.optimizer.cli import main; main()"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--shape", choices=sorted(bench_scale.WRITERS), default="marketplace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--data", type=Path, help="keep the offers files and stores here and reuse them")
    ap.add_argument("--store", action="store_true", help="also time a quote from a store of each size")
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="rentopt-listing-") as tmp:
        folder = args.data or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        home = folder / "empty-home"
        home.mkdir(exist_ok=True)
        print(f"{'offers':>9} {'command':<44} {'best s':>7} {'median s':>8} {'peak MB':>8} {'x quote':>8}")
        for n in (int(x) for x in args.sizes.split(",")):
            path = folder / f"offers-{args.shape}-{n}.csv"
            if not path.exists():
                subprocess.run([sys.executable, bench_scale.__file__, "--write-csv", str(path), str(n), args.shape],
                               check=True)
            runs = {
                "quote --offers-file": [*RENTOPT, "quote", *bench_scale.JOB, "--offers-file", str(path)],
                "offers --offers-file": [*RENTOPT, "offers", "--offers-file", str(path)],
                "offers --offers-file --gpu H100 --sort gpu": [*RENTOPT, "offers", "--offers-file", str(path),
                                                               "--gpu", "H100", "--sort", "gpu"],
                "offers --offers-file --format csv": [*RENTOPT, "offers", "--offers-file", str(path), "--format", "csv"],
                "offers --offers-file --format json": [*RENTOPT, "offers", "--offers-file", str(path), "--format", "json"],
            }
            run_env = {**env, "RENTOPT_HOME": str(home)}
            file_quote = runs["quote --offers-file"]
            for label, argv in runs.items():
                paired_with = None if argv is file_quote else file_quote
                report(n, label, bench_scale.timed(argv, run_env, args.repeat, args.timeout, floor=paired_with))
            if args.store:
                store_home = folder / f"store-{n}"
                if not (store_home / "prices.sqlite").exists():
                    print(f"          (store of {n:,} offers written in {bench_scale.fill_store(store_home, n):.1f} s)")
                store_env = {**env, "RENTOPT_HOME": str(store_home)}
                store_quote = [*RENTOPT, "quote", *bench_scale.JOB]
                report(n, "quote (from the store)",
                       bench_scale.timed(store_quote, store_env, args.repeat, args.timeout))
                report(n, "report (from the store, markdown)",
                       bench_scale.timed([*RENTOPT, "report"], store_env, args.repeat, args.timeout, floor=store_quote))


def report(n: int, label: str, result: bench_scale.Timing) -> None:
    if result.best == float("inf"):
        print(f"{n:>9,} {label:<44} over the time limit")
    else:
        paired = f"{result.paired:>8.2f}" if result.paired else f"{'':>8}"
        print(f"{n:>9,} {label:<44} {result.best:>7.2f} {result.median:>8.2f} {result.peak_kb / 1024:>8.0f} {paired}")


if __name__ == "__main__":
    main()
