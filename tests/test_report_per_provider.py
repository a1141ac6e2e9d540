"""The report's best plan per provider, planned for all providers at once, against each provider
planned alone (the report's method before, and the definition: a provider's best plan uses its
own offers only, validation included).

Random small markets of three providers; the rows must name the same plan (its total to the cent,
its stages' offers) or no plan for the same providers.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rentopt.optimizer.catalog import OfferSet
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.planner import build_quote
from rentopt.optimizer.report import (
    parse_workload,
    price_workload,
    provider_sets,
    quote_request,
)

from tests.test_quote import A6000, H100, offer

CARDS = {"H100": (H100, 1), "H100x8": (H100, 8), "A6000": (A6000, 1), "A6000x4": (A6000, 4)}
FX = FxTable.load()


def alone(workload, offers: OfferSet, providers):
    """Each provider planned on its own offers: provider -> (total, stage offers) or None."""
    sets = provider_sets(offers)
    out = {}
    for p in providers:
        try:
            plan = build_quote(quote_request(workload, "USD"), sets[p], FX, list_rejected=False).plans[0]
        except (NoFeasiblePlan, KeyError):
            out[p] = None
            continue
        out[p] = (plan.total, tuple((s.provider, s.offer_id) for s in plan.stages))
    return out


one = st.tuples(st.sampled_from("abc"), st.sampled_from(sorted(CARDS)),
                st.sampled_from(["0.40", "0.79", "1.10", "2.00", "2.49", "3.10", "9.00", "16.00", "19.90"]),
                st.sampled_from(["0.00", "0.10", "0.25"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(one, min_size=1, max_size=12), st.sampled_from(["7b lora 1d", "13b qlora 2d", "7b full 3d"]))
def test_one_pass_for_all_providers_finds_each_providers_own_best_plan(drawn, job):
    offers = [offer(f"{p}-{i}", gpus=CARDS[card][1], hourly=price, provider=p, storage=disk, **CARDS[card][0])
              for i, (p, card, price, disk) in enumerate(drawn)]
    offer_set = OfferSet(offers=offers, origin="offers-file", provenance={}, prices_as_of=None, label="test")
    providers = sorted({o.provider for o in offers})
    workload = parse_workload(job)
    expected = alone(workload, offer_set, providers)
    try:  # the one pass itself, with no provider planned alone
        plans = build_quote(quote_request(workload, "USD"), offer_set, FX, list_rejected=False, per_provider=True).plans
    except NoFeasiblePlan:
        plans = []
    assert {plan.stages[0].provider: (plan.total, tuple((s.provider, s.offer_id) for s in plan.stages))
            for plan in plans} == {p: found for p, found in expected.items() if found is not None}
    assert [plan.total for plan in plans] == sorted(plan.total for plan in plans)
    assert len({plan.stages[0].provider for plan in plans}) == len(plans)  # one plan per provider, never two
    rows = price_workload(workload, offer_set, providers, FX, "USD").rows
    got = {r.provider: None if r.plan is None else
           (r.plan.total, tuple((s.provider, s.offer_id) for s in r.plan.stages)) for r in rows}
    assert got == expected
    assert all(r.reason for r in rows if r.plan is None)


def test_per_provider_plans_are_told_apart_by_provider_alone():
    """The solver's top plans differ by group; in per-provider mode a group is the provider, so two
    GPUs of one provider never take two of the places (the other provider's best would drop out)."""
    from rentopt.optimizer.planner import plan_instance

    offers = [offer("a-h", gpus=1, hourly="2.00", provider="a", **H100),
              offer("a-x", gpus=1, hourly="0.79", provider="a", **A6000),
              offer("b-h", gpus=1, hourly="3.00", provider="b", **H100)]
    request = quote_request(parse_workload("7b lora 1d"), "USD")
    train = plan_instance(request, offers, FX, first_pass=False, per_provider=True).instance.train
    assert {t.group for t in train} == {("a", ""), ("b", "")}
    assert {t.group for t in plan_instance(request, offers, FX, first_pass=False).instance.train} == {
        ("a", "H100-SXM-80GB"), ("a", "RTX-A6000-48GB"), ("b", "H100-SXM-80GB")}


def test_the_reports_plans_are_the_quotes_less_the_range_it_never_shows():
    """`ranges=False` (the report's passes) leaves only the totals at the ends of the speed range
    unpriced: every other field of every plan is the quote's."""
    offers = [offer("a-h", gpus=1, hourly="2.00", provider="a", **H100),
              offer("a-x", gpus=4, hourly="3.16", provider="a", **A6000),
              offer("b-h", gpus=8, hourly="19.90", provider="b", **H100)]
    offer_set = OfferSet(offers=offers, origin="offers-file", provenance={}, prices_as_of=None, label="test")
    request = quote_request(parse_workload("13b lora 2d"), "USD")
    ranged = build_quote(request, offer_set, FX, list_rejected=False, per_provider=True).plans
    plain = build_quote(request, offer_set, FX, list_rejected=False, per_provider=True, ranges=False).plans
    assert len(ranged) == 2 and all(p.total_low is not None and p.total_high is not None for p in ranged)
    assert all(p.total_low < p.total < p.total_high for p in ranged)  # a range of speeds, a range of bills
    assert all(p.total_low is None and p.total_high is None for p in plain)
    assert [p.model_dump(exclude={"total_low", "total_high"}) for p in plain] == \
        [p.model_dump(exclude={"total_low", "total_high"}) for p in ranged]
    rows = price_workload(parse_workload("13b lora 2d"), offer_set, ["a", "b"], FX, "USD").rows
    assert [r.plan.total for r in rows] == [p.total for p in ranged]
    assert all(r.plan.total_low is None for r in rows)
