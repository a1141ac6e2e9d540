"""The first pass against the exact pass, candidate by candidate (hypothesis).

`first_pass.py`'s contract: it keeps every candidate the exact pass would keep, and each bound
it computes contains the exact bill. `plan_instance(first_pass=False)` builds every candidate
exactly and keeps the first pass's columns beside them (`Planned.rough`); here, for random
catalogs and requests, each candidate's float hours are compared with its exact hours, each
rough bound with the exact bill of that stage or lease, and the quote with and without the first
pass. The catalogs vary what the planner reads: the price's day (exchange rates that change
between days), interconnect and fabric apart from the node count, spot prices on hyperscalers
and marketplaces, day/week/month blocks and reserved terms, the training mode, a fixed rental
(--rent-days), the nodes available, upload and download speeds apart.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rentopt.optimizer.billing import lease_refusal, price_alone, price_lease
from rentopt.optimizer.currency import EcbHistory, FxTable
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.models import Offer, PriceOption, TrainingSetup
from rentopt.optimizer.job import QuoteRequest
from rentopt.optimizer.planner import plan_instance
from rentopt.optimizer.solver import solve
from rentopt.optimizer.workload import resolve_model

MODEL = resolve_model("0.5b")
# Two price days with different rates (units per EUR): an offer converts at its own day's rate.
ECB = EcbHistory.from_csv("Date,USD,CNY,\n2026-11-02,1.1000,7.9000,\n2026-03-02,1.2500,7.5000,\n", "test rates")
FX = FxTable.load(histories=[ECB])
DAYS = [datetime(2026, 3, 2, 9, tzinfo=timezone.utc), datetime(2026, 11, 2, 9, tzinfo=timezone.utc)]
GPUS = [("RTX-4090-24GB", 24.0), ("L40S-48GB", 48.0), ("A100-SXM4-80GB", 80.0)]
# Rough hours are floats, exact hours Decimals rounded up to 1e-6 h at most three times (the
# import, the export or copy-out, the stage): the exact ones lie within this above the rough.
HOURS_SLACK = 3.5e-6


def _money(low: int, high: int) -> st.SearchStrategy[Decimal]:
    return st.integers(low * 100, high * 100).map(lambda n: Decimal(n).scaleb(-2))


@st.composite
def catalogs(draw, most: int = 4, providers: tuple[str, ...] = ("a", "b", "aws")) -> list[Offer]:  # noqa: ANN001
    out = []
    for i in range(draw(st.integers(1, most))):
        gpu, memory = draw(st.sampled_from(GPUS))
        currency = draw(st.sampled_from(["USD", "EUR", "CNY"]))
        scale = {"USD": 1, "EUR": 1, "CNY": 7}[currency]
        options = []
        for interruptible in (False, True):
            if interruptible and not draw(st.booleans()):
                continue
            hourly = draw(st.none() | _money(1, 8))
            if hourly is not None:
                options.append(PriceOption(unit="hour", amount=hourly * scale, interruptible=interruptible))
            for unit in draw(st.lists(st.sampled_from(["day", "week", "month"]), unique=True,
                                      min_size=0 if hourly is not None else 1, max_size=3)):
                options.append(PriceOption(unit=unit, amount=draw(_money(10, 2000)) * scale,
                                           interruptible=interruptible))
        if draw(st.booleans()):
            options.append(PriceOption(unit="term", term_hours=draw(st.sampled_from([48, 500])),
                                       amount=draw(_money(50, 3000)) * scale))
        if all(o.interruptible for o in options):
            options.append(PriceOption(unit="hour", amount=Decimal(9) * scale))
        fabric = draw(st.sampled_from([None, "infiniband", "roce", "ethernet"]))
        disk = lambda: draw(st.none() | st.sampled_from([Decimal(0), Decimal("0.05"), Decimal("0.30")]))  # noqa: E731
        out.append(Offer(
            provider=draw(st.sampled_from(providers)), offer_id=f"o{i}", gpu=gpu, gpu_raw=gpu,
            gpus=draw(st.sampled_from([1, 2, 4])), gpu_memory_gb=memory,
            interconnect=draw(st.sampled_from(["pcie", "nvlink", "unknown"])), price_options=options,
            currency=currency, fetched_at=draw(st.sampled_from(DAYS)), source="test",
            nodes_available=draw(st.sampled_from([1, 2, 3])), fabric=fabric,
            fabric_gbps=None if fabric is None else draw(st.sampled_from([None, 100.0, 200.0, 400.0])),
            billing_granularity_s=draw(st.sampled_from([1, 60, 3600])),
            billing_minimum_s=draw(st.sampled_from([0, 600])),
            month_hours=draw(st.sampled_from([720, 730])),
            storage_gb_month=disk(), storage_stopped_gb_month=disk(),
            egress_gb=draw(st.none() | st.sampled_from([Decimal(0), Decimal("0.09")])),
            ingress_gb=draw(st.none() | st.sampled_from([Decimal(0), Decimal("0.20")])),
            stopped_bills=draw(st.sampled_from(["storage", "everything", "nothing"])),
            stopped_max_days=draw(st.sampled_from([None, 1.0])),
            free_disk_gb=draw(st.sampled_from([0.0, 50.0])),
            max_duration_hours=draw(st.sampled_from([None, None, 300.0])),
            net_up_mbps=draw(st.sampled_from([None, 100.0, 1000.0, 10000.0])),
            net_down_mbps=draw(st.sampled_from([None, 100.0, 1000.0, 10000.0])),
        ))
    return out


@st.composite
def requests(draw) -> QuoteRequest:  # noqa: ANN001
    rent = draw(st.booleans())
    return QuoteRequest(
        model=MODEL, setup=TrainingSetup(mode=draw(st.sampled_from(["lora", "qlora", "full"]))),
        tokens=None if rent else draw(st.sampled_from([2e7, 4e8, 1.5e9])),
        rent_days=draw(st.sampled_from([Decimal(1), Decimal(14)])) if rent else None,
        currency=draw(st.sampled_from(["USD", "CNY"])),
        validate_hours=draw(st.sampled_from([None, Decimal(1), Decimal(4)])),
        idle_days=draw(st.sampled_from([Decimal(0), Decimal("0.5"), Decimal(3)])),
        deadline_days=draw(st.sampled_from([None, None, Decimal(1), Decimal(20)])),
        budget=draw(st.sampled_from([None, None, Decimal(50)])),
        spot=draw(st.booleans()), checkpoint_every_hours=draw(st.sampled_from([Decimal(1), Decimal(4)])),
        data_gb=Decimal(draw(st.sampled_from([1, 40]))), top=3,
    )


def _hours_agree(rough: float, exact: Decimal, what: str) -> None:
    gap = float(exact) - rough
    assert -1e-9 <= gap <= HOURS_SLACK, f"{what}: first pass {rough!r} h, exact {exact} h"


def _known(stages) -> float:  # noqa: ANN001 - StageBills
    return float(sum(s.cost for s in stages))


def _contains(lo: float, hi: float, exact: float, what: str) -> None:
    assert lo <= exact <= hi, f"{what}: exact {exact!r} outside the first pass's [{lo!r}, {hi!r}]"


def check_candidates(req: QuoteRequest, catalog: list[Offer]) -> None:
    """Every candidate's first-pass hours and bounds against the exact pass's, item by item."""
    planned = plan_instance(req, catalog, FX, first_pass=False)
    rough, exact = planned.rough, planned.candidates
    assert rough is not None
    fp, tr, va = rough.first_pass, rough.train, rough.validate
    # the same candidates: the first pass makes no candidate the exact pass does not, and none less
    assert sorted(rough.train_ids + rough.validate_ids) == sorted(exact)
    lo_t, hi_t = fp.train_bounds(tr)
    for i, cid in enumerate(rough.train_ids):
        c = exact[cid]
        _hours_agree(float(tr.hours[i]), c.use.hours, f"{cid} hours")
        _hours_agree(float(tr.low[i]), c.hours_low, f"{cid} hours at the fast end")
        _hours_agree(float(tr.wall[i]), c.hours_high, f"{cid} wall clock at the slow end")
        assert abs(float(tr.tokens[i]) - c.tokens) <= 1e-9 * c.tokens, cid
        _contains(lo_t[i], hi_t[i], _known(price_alone(c.use)), cid)
    if va is None:
        assert not rough.validate_ids
        return
    lo_v, hi_v = fp.validate_bounds(va)
    for i, cid in enumerate(rough.validate_ids):
        c = exact[cid]
        _hours_agree(float(va.hours[i]), c.use.hours, f"{cid} hours")
        _hours_agree(float(va.out[i]), c.use.out_hours, f"{cid} copy-out hours")
        _hours_agree(float(va.destroy_wall[i]), c.use.hours + c.use.out_hours, f"{cid} wall clock when destroyed")
        _contains(lo_v[i], hi_v[i], _known(price_alone(c.use)), cid)
    # leases: every pair the exact pass may lease is a rough pair, and its bounds contain the bill
    deadline = planned.work.deadline_hours
    (v_idx, t_idx), (lo_l, hi_l) = fp.leases(tr, va, fp.limits.deadline)
    rough_pairs = {(rough.validate_ids[v], rough.train_ids[t]): (lo_l[n], hi_l[n])
                   for n, (v, t) in enumerate(zip(v_idx.tolist(), t_idx.tolist()))}
    idle = req.idle_days * 24
    instance = planned.instance
    needs = {t.id: t.signature for t in instance.train}
    satisfies = {v.id: v.signature for v in instance.validate}
    for vid in rough.validate_ids:
        for tid in rough.train_ids:
            v, t = exact[vid].use, exact[tid].use
            if v.key != t.key or needs[tid] not in satisfies[vid] or lease_refusal(v, t, idle) is not None:
                continue
            if deadline is not None and v.hours + idle + exact[tid].hours_high > deadline:
                continue
            assert (vid, tid) in rough_pairs, f"the lease {vid} -> {tid} is missing from the first pass"
            _contains(*rough_pairs[vid, tid], _known(price_lease(v, t, idle)), f"lease {vid} -> {tid}")


def check_quote(req: QuoteRequest, catalog: list[Offer]) -> None:
    """The quote with the first pass is the quote over every candidate: the same plans, totals."""
    def plans(first_pass: bool) -> list[tuple[str, Decimal]] | None:
        inst = plan_instance(req, catalog, FX, first_pass=first_pass).instance
        if not inst.train:
            return None
        try:
            found = solve(inst, top_k=req.top).plans
        except NoFeasiblePlan:
            return None
        return [(p.choice.train, p.total) for p in found]

    with_first = plans(True)
    everything = plans(False)
    if with_first is None or everything is None:
        assert with_first == everything
        return
    # ties at one total may name a different (equal) offer: compare the totals, rank by rank
    assert [total for _, total in with_first] == [total for _, total in everything]


SETTINGS = settings(max_examples=int(__import__("os").environ.get("PROPERTY_EXAMPLES", "150")), deadline=None,
                    derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


@SETTINGS
@given(requests(), catalogs())
def test_every_candidates_first_pass_hours_and_bounds_contain_the_exact_ones(req, catalog):
    check_candidates(req, catalog)


@SETTINGS
@given(requests(), catalogs())
def test_the_first_pass_keeps_what_the_exact_pass_would_choose(req, catalog):
    check_quote(req, catalog)


def test_the_generator_reaches_what_it_is_meant_to_vary():
    """The catalogs above do make candidates of each kind this test is about: multi-node runs,
    spot runs, fixed rentals, validations and leases (a generator that never reached them would
    check nothing)."""
    seen: set[str] = set()

    @settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
    @given(requests(), catalogs())
    def look(req, catalog):  # noqa: ANN001
        planned = plan_instance(req, catalog, FX, first_pass=False)
        rough = planned.rough
        assert rough is not None
        tr = rough.train
        if len(tr):
            seen.update({"train"} | ({"multi-node"} if (tr.nodes > 1).any() else set())
                        | ({"spot"} if (tr.kind == 1).any() else set())
                        | ({"rent-days"} if req.rent_days is not None else set()))
        if rough.validate is not None and len(rough.validate):
            seen.add("validate")
            if len(rough.first_pass.leases(tr, rough.validate, rough.first_pass.limits.deadline)[0][0]):
                seen.add("lease")
        if {o.currency for o in catalog} >= {"EUR"} and len({o.fetched_at for o in catalog}) > 1:
            seen.add("two price days")

    look()
    assert seen >= {"train", "multi-node", "spot", "rent-days", "validate", "lease", "two price days"}, seen


@pytest.mark.slow  # over 5 s (pytest --durations)
@settings(max_examples=int(__import__("os").environ.get("PROPERTY_EXAMPLES", "150")), deadline=None,
          derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                   HealthCheck.function_scoped_fixture])
@given(requests(), catalogs(most=8, providers=("a",)))
def test_narrowing_from_one_head_keeps_what_the_exact_pass_would_choose(monkeypatch, req, catalog):
    """The same, with the prune narrowed from one head per group and key on every example (a
    large catalog's path), over catalogs of one provider: most candidates are no head."""
    import rentopt.optimizer.first_pass as first_pass

    monkeypatch.setattr(first_pass, "HEADS_FROM", 0)
    monkeypatch.setattr(first_pass, "HEADS", 1)
    check_quote(req, catalog)
