"""Price store speed: write 50,000 offers as one snapshot, load 10,000 and 100,000 back.

    .venv/bin/python benchmarks/bench_store.py [--offers 50000] [--repeat 3]

Budgets (briefs/store.md): the 50k write under 2 s on a 2-core machine; loading 10k well under
0.2 s, so that `rentopt quote` over 10k offers finishes in about a second end to end. Each timing
is the best of --repeat runs, in a fresh temporary RENTOPT_HOME. The offers are synthetic but
shaped like a Vast.ai catalog: several price options, storage/egress prices, extras.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rentopt.optimizer import store  # noqa: E402
from rentopt.optimizer.models import Offer, PriceOption, PriceUnit  # noqa: E402

# (canonical id, GB per GPU, interconnect, typical $/GPU-hour): a realistic spread of cards.
CARDS = [
    ("H100-SXM-80GB", 80.0, "nvlink", "2.10"), ("H100-PCIe-80GB", 80.0, "pcie", "1.80"),
    ("A100-SXM4-80GB", 80.0, "nvlink", "1.20"), ("A100-PCIe-40GB", 40.0, "pcie", "0.70"),
    ("L40S-48GB", 48.0, "pcie", "0.85"), ("RTX-4090-24GB", 24.0, "pcie", "0.35"),
    ("RTX-3090-24GB", 24.0, "pcie", "0.20"), ("RTX-A6000-48GB", 48.0, "pcie", "0.45"),
    ("H200-SXM-141GB", 141.0, "nvlink", "3.20"), ("RTX-5090-32GB", 32.0, "pcie", "0.60"),
]
REGIONS = ["US-CA", "US-TX", "DE", "FI", "JP", "CA-QC", "SE", "PL"]


def synthetic_offers(n: int, provider: str = "bench", seed: int = 1) -> list[Offer]:
    rng = random.Random(seed)
    fetched = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)
    offers = []
    for i in range(n):
        gpu, mem, link, base = rng.choice(CARDS)
        gpus = rng.choice([1, 1, 2, 4, 8])
        per_gpu = Decimal(base) * Decimal(rng.randint(80, 140)) / 100
        options = [PriceOption(unit=PriceUnit.HOUR, amount=(per_gpu * gpus).quantize(Decimal("0.0001")), label="on-demand")]
        if rng.random() < 0.5:
            options.append(PriceOption(unit=PriceUnit.HOUR, amount=(per_gpu * gpus / 2).quantize(Decimal("0.0001")),
                                       interruptible=True, label="bid"))
        offers.append(Offer(
            provider=provider, offer_id=str(20_000_000 + i), gpu=gpu, gpu_raw=gpu.replace("-", " "),
            gpus=gpus, gpu_memory_gb=mem, interconnect=link, region=rng.choice(REGIONS),
            price_options=options, storage_gb_month=Decimal("0.15"), egress_gb=Decimal("0.005"),
            ingress_gb=Decimal("0.005"), net_up_mbps=rng.uniform(100, 5000), net_down_mbps=rng.uniform(100, 5000),
            max_duration_hours=rng.uniform(24, 2000), currency="USD", fetched_at=fetched,
            source="https://console.vast.ai/api/v0/bundles/",
            extra={"reliability": round(rng.uniform(0.9, 1), 4), "host_id": rng.randint(1, 99999),
                   "cpu_cores": rng.choice([16, 32, 64]), "cpu_ram_gb": rng.choice([64, 128, 512])},
        ))
    return offers


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--offers", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    offers = synthetic_offers(max(args.offers, 100_000))
    write_set = offers[: args.offers]
    with tempfile.TemporaryDirectory() as tmp:
        def write() -> None:
            path = Path(tmp) / f"w{time.perf_counter_ns()}.sqlite"
            with store.open_writable(path) as s:
                s.write_snapshot("bench", write_set, fetched_at=write_set[0].fetched_at)

        seconds, _ = best_of(args.repeat, write)
        print(f"write {len(write_set):>7,} offers in one snapshot: {seconds:.3f} s")

        # A second snapshot of the same provider replaces the first (diff + delete + insert).
        path = Path(tmp) / "load.sqlite"
        with store.open_writable(path) as s:
            s.write_snapshot("bench", write_set, fetched_at=write_set[0].fetched_at)
            later = write_set[0].fetched_at + timedelta(days=1)
            seconds, _ = best_of(1, lambda: s.write_snapshot("bench", write_set, fetched_at=later))
        print(f"replace {len(write_set):>5,} offers (second night):   {seconds:.3f} s")

        for n in (10_000, 100_000):
            path = Path(tmp) / f"load{n}.sqlite"
            with store.open_writable(path) as s:
                s.write_snapshot("bench", offers[:n], fetched_at=offers[0].fetched_at)
            with store.open_readonly(path) as s:  # type: ignore[union-attr]
                seconds, loaded = best_of(args.repeat, s.load_offers)
                assert len(loaded) == n  # type: ignore[arg-type]
                q = store.OfferQuery(gpus=("H100-SXM-80GB",), min_gpus=8)
                q_seconds, some = best_of(args.repeat, lambda: s.load_offers(q))
            print(f"load  {n:>7,} offers: {seconds:.3f} s   (filtered to {len(some):,} H100-SXM x8: {q_seconds:.3f} s)")  # type: ignore[arg-type]
            if n == 10_000:
                compare_decoders(offers[:n], args.repeat)


def compare_decoders(offers: list[Offer], repeat: int) -> None:
    """The ways to turn stored rows back into Offers (store.load_offers uses the first).

    A stored row is exactly `offer.model_dump_json()`, so the rows are rebuilt here rather
    than read with SQL (only optimizer/store.py speaks SQL).
    """
    import json

    from pydantic import TypeAdapter

    from rentopt.optimizer.models import PriceOption

    rows = [o.model_dump_json() for o in offers]
    as_list = TypeAdapter(list[Offer])

    def constructed(text: str) -> Offer:  # trusting the row: no validation at all
        d = json.loads(text)
        d["price_options"] = [PriceOption.model_construct(**{**p, "amount": Decimal(p["amount"]), "unit": PriceUnit(p["unit"])})
                              for p in d["price_options"]]
        for k in ("storage_gb_month", "storage_stopped_gb_month", "egress_gb", "ingress_gb"):
            if d[k] is not None:
                d[k] = Decimal(d[k])
        d["fetched_at"] = datetime.fromisoformat(d["fetched_at"].replace("Z", "+00:00"))
        return Offer.model_construct(**d)

    candidates = {
        "TypeAdapter(list[Offer]).validate_json, one call": lambda: as_list.validate_json("[" + ",".join(rows) + "]"),
        "Offer.model_validate_json per row": lambda: [Offer.model_validate_json(r) for r in rows],
        "json.loads + model_construct per row (no validation)": lambda: [constructed(r) for r in rows],
    }
    for name, fn in candidates.items():
        seconds, _ = best_of(repeat, fn)
        print(f"    decode {len(rows):,} rows: {name:<58} {seconds:.3f} s")


if __name__ == "__main__":
    main()
