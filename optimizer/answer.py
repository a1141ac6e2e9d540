"""The answer: the solver's bills as the Quote the CLI renders (plans, stages, notes, assumptions),
and, when nothing fits, the explanation of why (the binding constraint, the nearest misses)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from rentopt.optimizer.billing import (
    PlanBill,
    StageBill,
    cover_notes,
    explain_cover,
    lease_cover_notes,
    lease_refusal,
    price_plan,
    round_money,
)
from rentopt.optimizer.candidates import Candidate, Planned
from rentopt.optimizer.catalog import OfferSet
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.errors import NoFeasiblePlan
from rentopt.optimizer.job import QuoteRequest, rounded_gb
from rentopt.optimizer.models import (
    BillingLine,
    LineItems,
    Plan,
    PlanStage,
    PriceSource,
    Quote,
    Rejection,
    StageKind,
    TokenRate,
    Work,
)
from rentopt.optimizer.offer_table import values_at
from rentopt.optimizer.solver import solve
from rentopt.optimizer.stage_hours import DEFAULT_MBPS, transfer_hours


def rejections(planned: Planned) -> list[Rejection]:
    """The rejected offers in the order of the offers (not of the shapes the planner went through).
    Their names are gathered column by column, not rejection by rejection."""
    t = planned.table
    rows, constraints, reasons = planned.rejections.columns()
    providers, ids, gpus, raw = (values_at(getattr(t, name), rows) for name in ("provider", "offer_id", "gpu", "gpu_raw"))
    return [Rejection(provider=p, offer_id=i, gpu=g or r, constraint=c, reason=why)
            for p, i, g, r, c, why in zip(providers, ids, gpus, raw, constraints, reasons)]


# How many of the nearest misses a no-plan explanation lists (one per GPU shape).
CLOSEST_MISSES = 5


def explain_no_plan(exc: NoFeasiblePlan, planned: Planned, list_rejected: bool) -> NoFeasiblePlan:
    """`exc` with what `--explain` and JSON print when nothing fits: the binding constraint with
    its numbers, the closest misses, and the rejections by reason (each with a count and its
    first reason, which states the number that failed)."""
    rows, constraints, reasons = planned.rejections.columns()
    by_reason: dict[str, dict[str, Any]] = {}
    for constraint, reason in zip(constraints, reasons):
        entry = by_reason.setdefault(constraint, {"constraint": constraint, "offers": 0, "example": reason})
        entry["offers"] += 1
    binding = exc.reasons[0] if exc.reasons else str(exc)
    if not planned.instance.train:
        # Every offer was rejected: the binding constraint is the commonest one the user did not
        # choose (a --gpu or --providers filter, an offer dominated by a cheaper one, are choices).
        chosen = [e for e in sorted(by_reason.values(), key=lambda e: -e["offers"])
                  if e["constraint"] not in ("gpu", "dominated")]
        if chosen:
            top = chosen[0]
            nearest = planned.closest_misses[0] if top["constraint"] == "memory" and planned.closest_misses else \
                top["example"]
            binding = f"{top['constraint']}: {top['offers']:,} of {planned.table.n if planned.table else '?':,} offers " \
                      f"fail it; the closest: {nearest}"
    misses = list(planned.closest_misses) if not planned.instance.train else _nearest_plans(planned)
    exc.explanation = {
        "binding": binding,
        "reasons": list(exc.reasons),
        "closest_misses": misses,
        "rejections_by_reason": sorted(by_reason.values(), key=lambda e: -e["offers"]),
        "offers": planned.table.n if planned.table is not None else None,
        "rejected_count": len(planned.rejections),
    }
    if list_rejected:
        exc.rejected = rejections(planned)
    return exc


def _nearest_plans(planned: Planned) -> list[str]:
    """When the budget or the deadline binds: the plans that come nearest, the cheapest ones with
    neither, each with its total and its finish at the typical and the slow end."""
    inst = planned.instance
    try:
        relaxed = solve(replace(inst, budget=None, deadline_hours=None), top_k=CLOSEST_MISSES)
    except NoFeasiblePlan:
        return []
    out = []
    for bill in relaxed.plans:
        t = planned.candidates[bill.choice.train]
        v = planned.candidates[bill.choice.validate] if bill.choice.validate else None
        slow = _wall(bill, v, t.hours_high, inst.idle_hours) or bill.wall_hours
        out.append(f"{t.offer.provider}/{t.offer.offer_id} ({t.use.nodes * t.offer.gpus} x {t.gpu.id}): "
                   f"{round_money(bill.total, inst.currency):,} {inst.currency}"
                   + (" + unknown" if bill.unknown else "")
                   + f", done in {_days_text(bill.wall_hours)} ({_days_text(slow)} at the slow end)")
    return out


def _days_text(hours: Decimal) -> str:
    """
    >>> _days_text(Decimal(24)), _days_text(Decimal(100))
    ('1.0 day', '4.2 days')
    """
    days = (hours / 24).quantize(Decimal("0.1"))
    return f"{days} day" if days == 1 else f"{days} days"


def no_candidates(planned: Planned, req: QuoteRequest, offer_count: int) -> NoFeasiblePlan:
    """The error of a quote whose every offer was rejected: the counts by reason and what to try."""
    counts = planned.rejections.counts()
    parts = [f"{n} offer{'s' if n > 1 else ''} by {c}" for c, n in sorted(counts.items(), key=lambda kv: -kv[1])]
    reasons = [f"all {offer_count} offers were rejected: " + ", ".join(parts)] if parts else ["no offers to plan with"]
    if planned.closest_memory:
        reasons.append(f"closest miss: {planned.closest_memory}")
    if req.setup.mode == "full":
        reasons.append("try --mode lora/qlora, gradient checkpointing, a shorter --seq-len, or more GPUs")
    message = ("No feasible plan: " + "; ".join(reasons) + ". Run with --explain to see the closest misses and "
               "every rejection.")
    return NoFeasiblePlan(message, reasons)


def quote_of(req: QuoteRequest, planned: Planned, bills: Sequence[PlanBill], offers: OfferSet, fx: FxTable,
             validation_note: str | None, list_rejected: bool, *, ranges: bool = True) -> Quote:
    """The Quote of the solver's `bills`, best first: their plans, the assumptions, the rates used and
    the rejected offers (only counted when `list_rejected` is False). `ranges=False`: the plans'
    totals at the ends of the training time's range are not priced (`plan_of`)."""
    plans = [plan_of(rank, bill, planned, offers, ranges=ranges) for rank, bill in enumerate(bills, start=1)]
    used = [planned.candidates[uid].offer for b in bills for uid in (b.choice.train, b.choice.validate) if uid]
    prep = planned.prep
    assumptions = list(req.assumptions) + list(prep.train_memory.assumptions[:1]) + prep.notes + list(planned.work.notes)
    if validation_note:
        assumptions.append(validation_note)
    assumptions.append(f"disk {prep.disk_gb} GB = base weights + {req.data_gb} GB data + "
                       f"{req.keep_checkpoints} checkpoints of {rounded_gb(prep.train_memory.checkpoint_gb)} GB")
    dated = [(o.currency, o.fetched_at) for o in used]
    assumptions += fx.old_rate_warnings(dated, req.currency)
    return Quote(
        currency=req.currency, price_origin=offers.origin,
        # the oldest KNOWN date: an offer of unknown date has none (its source line says so)
        prices_as_of=min((o.fetched_at for o in used if o.dated_by != "unknown"), default=None),
        work=Work(tokens=planned.work.tokens, basis=planned.work.basis,
                  deadline_hours=planned.work.deadline_hours),
        fx=fx.rates_used(dated, to_ccy=req.currency), plans=plans,
        rejected=rejections(planned) if list_rejected else [], rejected_count=len(planned.rejections),
        memory=prep.train_memory, assumptions=assumptions,
        sources=offers.price_sources(), source_notes=list(offers.notes), missing_providers=list(offers.missing),
    )


def _stage_bill(bill: PlanBill, kind: StageKind) -> StageBill:
    """The bill of a stage the plan has: train and export always, validate and idle with a validation."""
    found = bill.stage(kind)
    if found is None:
        raise AssertionError(f"the plan {bill.choice} has no {kind} stage in its bill")
    return found


def _money_lines(stage_bill: StageBill) -> list[BillingLine]:
    return [BillingLine(unit=ln.unit, count=ln.count, unit_price=ln.unit_price, cost=ln.cost, what=ln.what,
                        note=ln.note) for ln in stage_bill.lines]


def _stage(kind: StageKind, c: Candidate, bill: StageBill, hours: Decimal, layout: str, gpus: int | None = None,
           notes: Sequence[str] = (), same_price: Sequence[str] = ()) -> PlanStage:
    return PlanStage(kind=kind, provider=c.offer.provider, offer_id=c.offer.offer_id, gpu=c.gpu.id,
                     gpus=c.use.nodes * c.offer.gpus if gpus is None else gpus, nodes=c.use.nodes, layout=layout,
                     hours=hours, billing=_money_lines(bill), cost=bill.cost, unknown_charges=list(bill.unknown),
                     precision=c.layout.precision if gpus is None else None,
                     attention=c.layout.attention if gpus is None else None,
                     link=c.layout.link if gpus is None else None, notes=list(notes),
                     same_price_offers=list(same_price))


def plan_of(rank: int, bill: PlanBill, planned: Planned, offers: OfferSet, *, ranges: bool = True) -> Plan:
    """The solver's `bill` as the quote's plan number `rank`: its stages, totals, range and notes.

    `ranges=False` leaves `total_low` and `total_high` unpriced (None), for a caller that shows
    no range (the report's job tables: each is two more pricings of the whole plan)."""
    ccy = planned.instance.currency
    inst = planned.instance
    cands = planned.candidates
    t = cands[bill.choice.train]
    v = cands[bill.choice.validate] if bill.choice.validate else None
    stages: list[PlanStage] = []
    notes: list[str] = []
    key: list[str] = []  # the notes that can change the choice (Plan.key_notes)
    idle_h = inst.idle_hours
    if v is not None:
        vb = _stage_bill(bill, "validate")
        ib = _stage_bill(bill, "idle")
        assert bill.choice.idle is not None  # a plan with a validation chose what to do in the gap
        v_hours = v.use.hours + (v.use.out_hours if bill.choice.idle == "destroy" else 0)
        stages.append(_stage("validate", v, vb, v_hours, v.layout.strategy,
                             same_price=planned.same_price_ids.get(v.offer.key, ())))
        idle_label = {"continue": "training continues on this instance", "stop": "stopped (instance kept)",
                      "destroy": "copied out and destroyed"}[bill.choice.idle]
        stages.append(_stage("idle", v, ib, idle_h, idle_label, gpus=0, notes=ib.notes))
        notes.append(_validation_reason(v, t))
        notes.append(_idle_reason(bill, v, t, ccy, idle_h))
        notes += [f"{v.offer.provider}/{v.offer.offer_id}: {n}" for n in v.notes]
        key += [f"{v.offer.provider}/{v.offer.offer_id}: {n}" for n in v.key_notes]
    tb, eb = _stage_bill(bill, "train"), _stage_bill(bill, "export")
    export_h = transfer_hours(planned.prep.export_gb, t.offer, "export")
    stages.append(_stage("train", t, tb, t.use.hours, t.layout.strategy,
                         same_price=planned.same_price_ids.get(t.offer.key, ())))
    stages.append(_stage("export", t, eb, export_h, "copy out, verify, destroy", gpus=0))
    if bill.choice.idle not in ("stop", "continue"):
        notes.append(f"train compute: {explain_cover(t.use.pricing, t.use.hours, ccy)}"
                     + (f" per node, {t.use.nodes} nodes" if t.use.nodes > 1 else ""))
        advice = cover_notes(t.use.pricing, t.use.hours, ccy, t.use.nodes)
    elif v is not None:
        advice = lease_cover_notes(v.use, t.use, idle_h)
    else:
        advice = []
    notes += advice
    key += advice
    if not t.offer.net_down_mbps or not t.offer.net_up_mbps:
        notes.append(f"transfer speed not stated: assumed {DEFAULT_MBPS:g} Mbit/s")
    notes += [f"{t.offer.provider}/{t.offer.offer_id}: {n}" for n in t.notes]
    key += [f"{t.offer.provider}/{t.offer.offer_id}: {n}" for n in t.key_notes]
    notes += [f"{c.offer.provider}/{c.offer.offer_id}: {planned.same_price[c.offer.key]}"
              for c in ([v] if v is not None else []) + [t] if c.offer.key in planned.same_price]
    if t.offer.price_locked:
        notes.append(f"{t.offer.provider}: the hourly price is locked at order time until destroy")
        key.append(notes[-1])
    if t.offer.max_duration_hours:
        notes.append(f"host maximum rental: {t.offer.max_duration_hours:.0f} h")
        key.append(notes[-1])
    chosen = [t.offer] + ([v.offer] if v else [])
    prices = []
    for o in {o.key: o for o in chosen}.values():
        prov = offers.provenance.get(o.provider)
        prices.append(PriceSource(provider=o.provider, source=o.source,
                                  fetched_at=None if o.dated_by == "unknown" else o.fetched_at, dated_by=o.dated_by,
                                  origin=prov.origin if prov else offers.origin, stale=bool(prov and prov.stale)))
    total_low, total_high = _range_totals(bill, planned, t) if ranges else (None, None)
    tokens = Decimal(str(t.tokens)) if t.tokens is not None else None
    speed = t.speed
    li = bill.line_items()
    return Plan(
        rank=rank, total=bill.total, currency=ccy, stages=stages, line_items=LineItems(**li),
        unknown_charges=list(bill.unknown), idle=bill.choice.idle,
        hours=bill.wall_hours, hours_low=_wall(bill, v, t.hours_low, idle_h), hours_high=_wall(bill, v, t.hours_high, idle_h),
        total_low=total_low, total_high=total_high, tokens=tokens,
        tokens_per_second=TokenRate(low=speed.low, typical=speed.typical, high=speed.high) if speed else None,
        cost_per_billion_tokens=round_money(bill.total / tokens * Decimal(10**9), ccy) if tokens else None,
        scaling_efficiency=speed.scaling if speed else None,
        prices=prices, notes=list(dict.fromkeys(n for n in notes if n)),
        key_notes=list(dict.fromkeys(n for n in key if n)),
        idle_alternative=_alternative(bill, ccy),
    )


def _wall(bill: PlanBill, v: Candidate | None, train_hours: Decimal | None, idle_h: Decimal) -> Decimal | None:
    if train_hours is None:
        return None
    if v is None:
        return train_hours
    return v.use.hours + (v.use.out_hours if bill.choice.idle == "destroy" else 0) + idle_h + train_hours


def _range_totals(bill: PlanBill, planned: Planned, t: Candidate) -> tuple[Decimal | None, Decimal | None]:
    """The same plan priced at the fast and the slow end of the training time's range."""
    if t.hours_low is None or t.hours_high is None or t.hours_low == t.hours_high:
        return None, None
    uses = planned.instance.uses
    out = []
    for hours in (t.hours_low, t.hours_high):
        changed = dict(uses)
        changed[t.use.id] = replace(t.use, hours=hours)
        try:
            out.append(price_plan(bill.choice, changed, planned.instance.idle_hours).total)
        except ValueError:  # the slow end no longer fits the host's maximum rental: no figure
            out.append(None)
    return out[0], out[1]


def _alternative(bill: PlanBill, ccy: str) -> str | None:
    alt = bill.alternative
    if alt is None:
        return None
    # the kinds of the unknown charges ("storage running: 23.96 GB for 0.63 h" -> storage running)
    kinds = list(dict.fromkeys(u.split(":", 1)[0] for u in alt.unknown))
    unknown = f" + unknown {', '.join(kinds)}" if kinds else ""
    tail = f"; {alt.break_even}" if alt.break_even else ""
    return f"{alt.idle}: {round_money(alt.total, ccy):,} {ccy}{unknown}{tail}"


def _validation_reason(v: Candidate, t: Candidate) -> str:
    if v.offer.key == t.offer.key:
        where = "on the training instance itself"
    elif v.gpu.id == t.gpu.id:
        where = f"on {v.offer.gpus} x {v.gpu.id}: the training GPU model, the cheapest instance that holds the job"
    else:
        where = (f"on {v.offer.gpus} x {v.gpu.id}: no offer of {t.gpu.id} holds the validation run, so a GPU of the "
                 f"same architecture ({t.gpu.architecture})")
    return (f"validation runs the training job ({t.layout.precision}, {t.layout.attention}, {v.layout.strategy}) at "
            f"micro-batch 1 {where}")


def _idle_reason(bill: PlanBill, v: Candidate, t: Candidate, ccy: str, idle_hours: Decimal) -> str:
    same = v.offer.key == t.offer.key and v.use.spot == t.use.spot
    if bill.choice.idle == "continue":
        return "no idle gap: training continues on the validation instance (one rental, no re-import)"
    if bill.choice.idle == "stop":
        gap = bill.stage("idle")
        cost = f"{round_money(gap.cost, ccy):,} {ccy}" if gap else "nothing"
        unknown = " + unknown charges" if gap and gap.unknown else ""
        return f"idle: stop the instance for the gap ({cost}{unknown}), then train on it (one rental, no re-import)"
    if not same:
        return "idle: destroy the validation instance (training uses another offer) after copying data and checkpoints out"
    why = lease_refusal(v.use, t.use, idle_hours)
    return "idle: destroy after copying out" + (f" ({why})" if why else ": cheaper than keeping the instance stopped")
