"""Time prune + solve on random plan instances of 1,000 / 10,000 / 100,000 candidates.

    .venv/bin/python benchmarks/bench_solver.py [--sizes 1000 10000 100000] [--top 5] [--seed 0]

Instances look like a real catalog after feasibility: ~12 providers x ~25 GPUs, mostly hourly
metered prices (per second, minute or hour, some with a minimum), a fifth with day/week/month
blocks (CNY-style platforms), running storage, ingress/egress, one validation candidate per ten
training candidates (some on the same offer as a training one), a 2-day idle gap and a deadline
that excludes the slowest layouts. Building the instance is not timed; the time printed is
`prune()` alone and `solve()` (pruning, the CP-SAT model, the top-K re-solves), each on a fresh instance.
"""

from __future__ import annotations

import argparse
import random
import time
from decimal import Decimal

from rentopt.optimizer.billing import Block, Candidate, PlanInstance, RentalPricing, plan_cost, quantize_money
from rentopt.optimizer.models import PriceUnit
from rentopt.optimizer.solver import prune, solve


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


def make_instance(n: int, seed: int) -> PlanInstance:
    rng = random.Random(seed)
    providers = [f"prov{i}" for i in range(12)]
    gpus = [f"gpu{i}" for i in range(25)]
    n_train = n - n // 11
    train = []
    for i in range(n_train):
        hours = Decimal(rng.randint(1000, 50000)).scaleb(-2)
        train.append(Candidate(
            f"t{i}", "train", rng.choice(providers), f"o{i}", rng.choice(gpus), 8, 1, "ddp", hours, _pricing(rng),
            storage_running=_money(rng, 0, 30), ingress=_money(rng, 0, 20), egress=_money(rng, 0, 40),
        ))
    validate = []
    for i in range(n - n_train):
        twin = rng.choice(train)  # half of them on a training candidate's offer
        provider, offer = (twin.provider, twin.offer_id) if rng.random() < 0.5 else (rng.choice(providers), f"vo{i}")
        validate.append(Candidate(
            f"v{i}", "validate", provider, offer, twin.gpu, 1, 1, "single", Decimal(rng.randint(50, 400)).scaleb(-2),
            _pricing(rng), storage_running=_money(rng, 0, 2), ingress=_money(rng, 0, 20),
            destroy_egress=_money(rng, 0, 20), stop_storage=_money(rng, 0, 10),
        ))
    return PlanInstance(validate, train, idle_hours=Decimal(48), deadline_hours=Decimal(400), currency="USD")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    import ortools.sat.python.cp_model  # noqa: F401  (import cost is not part of the timing)

    print(f"{'candidates':>10} {'kept':>6} {'prune s':>8} {'solve s':>8}  best   (solve = prune + model + top-K)")
    for n in args.sizes:
        # a fresh instance for each timing, so nothing computed by the first is reused
        inst = make_instance(n, args.seed)
        t0 = time.perf_counter()
        kept = prune(inst, args.top)
        pruning = time.perf_counter() - t0
        inst = make_instance(n, args.seed)
        t0 = time.perf_counter()
        decisions = solve(inst, top_k=args.top)
        total = time.perf_counter() - t0
        best = plan_cost(inst, decisions[0]).total
        print(f"{n:>10} {len(kept.validate) + len(kept.train):>6} {pruning:>8.3f} {total:>8.3f}  "
              f"{best:.2f} ({len(decisions)} plans, {decisions[0].status})")


if __name__ == "__main__":
    main()
