"""Time prune + solve on random plan instances of 1,000 / 10,000 / 100,000 candidates.

    .venv/bin/python benchmarks/bench_solver.py [--sizes 1000 10000 100000] [--top 5] [--seed 0]

Instances look like a real catalog after feasibility: ~12 providers x ~25 GPUs, mostly hourly
metered prices (per second, minute or hour, some with a minimum), a fifth with day/week/month
blocks (CNY-style platforms), running storage, ingress/egress, one validation candidate per ten
training candidates (half on the offer of a training one, so leases are possible), a 2-day idle
gap and a deadline that excludes the slowest layouts. Building the instance is not timed; the
time printed is `prune()` alone and `solve()` (pruning with billing's bounds, exact prices for
the survivors, enumeration or CP-SAT, top-K), each on a fresh instance.
"""

from __future__ import annotations

import argparse
import random
import time
from decimal import Decimal

from rentopt.optimizer.billing import Block, RentalPricing, Terms, Use, quantize_money
from rentopt.optimizer.models import PriceUnit
from rentopt.optimizer.solver import Candidate, PlanInstance, prune, solve


def _money(rng: random.Random, low: float, high: float) -> Decimal:
    return Decimal(rng.randint(int(low * 10**6), int(high * 10**6))).scaleb(-6)


def _pricing(rng: random.Random) -> RentalPricing:
    hourly = _money(rng, 0.2, 40)
    blocks: tuple[Block, ...] = ()
    if rng.random() < 0.2:
        def discounted(hours: int, low: float, high: float) -> Decimal:
            return quantize_money(hourly * hours * Decimal(rng.uniform(low, high)))

        blocks = (
            Block("day", PriceUnit.DAY, 24, discounted(24, 0.7, 1.0)),
            Block("week", PriceUnit.WEEK, 168, discounted(168, 0.6, 0.9)),
            Block("month", PriceUnit.MONTH, 720, discounted(720, 0.5, 0.8)),
        )
    granularity, minimum = rng.choice([(1, 0), (1, 60), (60, 0), (60, 300), (3600, 0)])
    return RentalPricing(hourly, granularity, minimum, blocks)


def _terms(rng: random.Random, provider: str, offer: str) -> Terms:
    return Terms(provider=provider, offer_id=offer, currency="USD", on_demand=_pricing(rng), interruptible=None,
                 storage_gb_month=_money(rng, 0, 0.3), stopped_storage_gb_month=_money(rng, 0, 0.3),
                 egress_gb=rng.choice([None, _money(rng, 0, 0.1)]), ingress_gb=Decimal(0), month_hours=730,
                 stopped_bills=rng.choice(["storage", "storage", "everything"]))


def make_instance(n: int, seed: int) -> PlanInstance:
    rng = random.Random(seed)
    providers = [f"prov{i}" for i in range(12)]
    gpus = [f"gpu{i}" for i in range(25)]
    n_train = n - n // 11
    train = []
    for i in range(n_train):
        hours = Decimal(rng.randint(1000, 50000)).scaleb(-2)
        t = _terms(rng, rng.choice(providers), f"o{i}")
        gpu = rng.choice(gpus)
        use = Use(f"t{i}", "train", t, False, 1, hours, Decimal(rng.randint(20, 500)), Decimal(30), Decimal(20))
        train.append(Candidate(use, group=(t.provider, gpu), wall_hours=hours * Decimal("1.3"), signature=gpu))
    validate = []
    for i in range(n - n_train):
        twin = rng.choice(train)  # half of them on a training candidate's offer
        t = twin.use.terms if rng.random() < 0.5 else _terms(rng, rng.choice(providers), f"vo{i}")
        use = Use(f"v{i}", "validate", t, False, 1, Decimal(rng.randint(50, 400)).scaleb(-2), Decimal(40),
                  Decimal(30), Decimal(12), Decimal("0.1"))
        validate.append(Candidate(use, signature=frozenset({twin.signature})))
    return PlanInstance(validate, train, idle_hours=Decimal(48), deadline_hours=Decimal(400), currency="USD")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import ortools.sat.python.cp_model  # noqa: F401  (import cost is not part of the timing)

    print(f"{'candidates':>10} {'kept':>6} {'prune s':>8} {'solve s':>8}  best   (solve = prune + exact prices + top-K)")
    for n in args.sizes:
        # a fresh instance for each timing, so nothing computed by the first is reused
        inst = make_instance(n, args.seed)
        t0 = time.perf_counter()
        kept = prune(inst, args.top)
        pruning = time.perf_counter() - t0
        inst = make_instance(n, args.seed)
        t0 = time.perf_counter()
        solution = solve(inst, top_k=args.top)
        total = time.perf_counter() - t0
        print(f"{n:>10} {len(kept.validate) + len(kept.train):>6} {pruning:>8.3f} {total:>8.3f}  "
              f"{solution.plans[0].total:.2f} ({len(solution.plans)} plans, {solution.method})")


if __name__ == "__main__":
    main()
