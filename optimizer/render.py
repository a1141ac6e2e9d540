"""Text renderings of estimates and quotes (tables for people, JSON and Markdown for machines).

The JSON shapes are the public contracts in design.md; these functions only format.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from rentopt.optimizer.feasibility import Fit
from rentopt.optimizer.models import MemoryEstimate, ModelSpec, Plan, PlanStage, Quote, TrainingSetup
from rentopt.optimizer.models import age_words, date_words
from rentopt.optimizer.timing import LayoutSpeed

CLASS_ORDER = ("datacenter", "workstation", "consumer")


def _gb(x: float) -> str:
    return f"{x:,.2f}"


def estimate_header(model: ModelSpec, setup: TrainingSetup) -> str:
    parts = [f"{model.name} ({model.total_params / 1e9:.2f}B params)", setup.mode, setup.precision,
             f"seq {setup.seq_len} x micro-batch {setup.micro_batch}", f"{setup.gpus} GPU{'s' if setup.gpus > 1 else ''}"]
    if layout := setup_layout_text(setup):
        parts.append(layout)
    return ", ".join(parts)


def fits_summary(fits: dict[int, list[Fit]], classes: dict[str, str]) -> list[list[str]]:
    """Rows per GPU count; per class the smallest GPU that holds the job without CPU offload
    (else with it), and how many catalog GPUs of that class hold it at all."""
    rows = []
    for n, found in fits.items():
        row = [str(n)]
        for cls in CLASS_ORDER:
            here = sorted((f for f in found if classes[f.layout.gpu] == cls),
                          key=lambda f: (f.layout.offload != "none", f.layout.gpu_memory_gb, f.layout.gpu))
            if not here:
                row.append("-")
                continue
            best = here[0].layout
            row.append(f"{best.gpu} ({best.strategy}); {len(here)} fit")
        rows.append(row)
    return rows


def estimate_answer(model: ModelSpec, setup: TrainingSetup, est: MemoryEstimate, fits: dict[int, list[Fit]],
                    classes: dict[str, str], speed: LayoutSpeed | None = None,
                    layout_memory: MemoryEstimate | None = None) -> dict[str, Any]:
    """The question `estimate` answers, answered first: does the job fit (on --gpu, else as
    configured), with which layout, and how much host RAM CPU offload needs.

    `layout_memory` is the memory of the layout chosen on --gpu (its offloaded state is the
    host RAM it needs, per GPU)."""
    if speed is not None:
        where = f"{speed.layout.total_gpus if speed.layout else setup.gpus} x {speed.layout.gpu if speed.layout else '?'}"
        if speed.layout is None or layout_memory is None:
            return {"fits": False, "text": f"fits: no: {speed.rejected}", "gpu": None, "gpus": setup.gpus,
                    "layout": None, "host_ram_gb": 0.0, "offload_bytes": 0, "reason": speed.rejected}
        lay = speed.layout
        per_node = lay.gpus_per_node
        host = layout_memory.cpu_offload_gb * per_node
        words = layout_words(lay.strategy, lay.total_gpus, lay.nodes, lay.link)
        text = f"fits {where}: yes, with {words}"
        if host:
            text += f", needs ~{host:,.0f} GB of host RAM per node for the offloaded state"
        text += f"; {lay.required_gb_per_gpu:,.1f} of {lay.gpu_memory_gb:g} GB per GPU"
        return {"fits": True, "text": text, "gpu": lay.gpu, "gpus": lay.total_gpus, "nodes": lay.nodes,
                "layout": lay.strategy, "layout_words": words, "required_gb_per_gpu": lay.required_gb_per_gpu,
                "host_ram_gb": round(host, 2), "host_ram_gb_per_gpu": layout_memory.cpu_offload_gb,
                "offload_bytes": int(round(host * 1e9)), "reason": None}
    found = fits.get(setup.gpus) or []
    host = est.cpu_offload_gb * setup.gpus
    if not found:
        text = (f"fits: no catalog GPU holds it on {setup.gpus} GPU{'s' if setup.gpus > 1 else ''} as configured "
                f"({est.required_gb_per_gpu:,.1f} GB per GPU); see the table for more GPUs")
        return {"fits": False, "text": text, "gpu": None, "gpus": setup.gpus, "layout": None,
                "host_ram_gb": round(host, 2), "offload_bytes": int(round(host * 1e9)), "reason": text}
    smallest = {}
    for f in sorted(found, key=lambda f: (f.layout.offload != "none", f.layout.gpu_memory_gb, f.layout.gpu)):
        smallest.setdefault(classes[f.layout.gpu], f)
    picks = ", ".join(f"{f.layout.gpu} ({layout_words(f.layout.strategy, setup.gpus, 1, f.layout.link)})"
                      for cls in CLASS_ORDER if (f := smallest.get(cls)))
    text = (f"fits: yes, on {setup.gpus} GPU{'s' if setup.gpus > 1 else ''} of {len(found)} catalog cards; the smallest "
            f"per class: {picks}")
    if host:
        text += f"; needs ~{host:,.0f} GB of host RAM for the offloaded state"
    best = smallest[next(c for c in CLASS_ORDER if c in smallest)].layout
    return {"fits": True, "text": text, "gpu": best.gpu, "gpus": setup.gpus, "layout": best.strategy,
            "host_ram_gb": round(host, 2), "offload_bytes": int(round(host * 1e9)), "reason": None}


def estimate_table(model: ModelSpec, setup: TrainingSetup, est: MemoryEstimate,
                   fits: dict[int, list[Fit]], classes: dict[str, str], speed: LayoutSpeed | None = None,
                   layout_memory: MemoryEstimate | None = None) -> str:
    """The answer first (does it fit, how, what host RAM), then the cheapest cards that hold it,
    then the speed, then the breakdown and what it assumes."""
    from tabulate import tabulate

    b = est.breakdown_gb
    answer = estimate_answer(model, setup, est, fits, classes, speed, layout_memory)
    lines = [estimate_header(model, setup), *wrapped(answer["text"][0].upper() + answer["text"][1:] + "."), ""]
    if model.notes:
        lines += [f"note: {n}" for n in model.notes] + [""]
    lines.append("Smallest GPU per class that holds this job in one node, without CPU offload where possible")
    lines.append("(`rentopt gpus` lists the catalog; PCIe assumed unless SXM/OAM parts with NVLink):")
    lines.append(tabulate(fits_summary(fits, classes), headers=["GPUs", *CLASS_ORDER], disable_numparse=True))
    lines.append("")
    if speed is not None:
        lines += speed_section(speed) + [""]
    if layout_memory is not None and speed is not None and speed.layout is not None:
        lines.append(f"Memory as configured on the command line ({setup.gpus} GPU{'s' if setup.gpus > 1 else ''}"
                     f"{', ' + layout if (layout := setup_layout_text(setup)) else ''}); "
                     f"on {speed.layout.strategy} it is {layout_memory.required_gb_per_gpu:,.2f} GB per GPU:")
    comp = [
        ["weights", _gb(b.weights), "parameters resident on each GPU (sharded/quantised as configured)"],
        ["gradients", _gb(b.gradients), f"{est.trainable_params_b:.3f}B trainable parameters"],
        ["optimizer", _gb(b.optimizer), f"{setup.optimizer} state (+ fp32 master copy in mixed precision)"],
        ["activations", _gb(b.activations), "saved for backward + the loss/logits (KV cache for inference)"],
        ["overhead", _gb(b.overhead), "buffers, allocator slack, CUDA context"],
    ]
    lines.append(tabulate(comp, headers=["per GPU", "GB", "what"], disable_numparse=True))
    lines.append("")
    views = [
        ["peak allocated", _gb(est.peak_gb_per_gpu), "torch.cuda.max_memory_allocated"],
        ["reserved", _gb(est.reserved_gb_per_gpu), "held by PyTorch's caching allocator"],
        ["device", _gb(est.device_gb_per_gpu), "what nvidia-smi shows"],
        ["required", _gb(est.required_gb_per_gpu),
         f"device + {est.margin:.0%} margin on all but the {_gb(est.states_gb_per_gpu)} GB of exact states: what must fit"],
    ]
    lines.append(tabulate(views, headers=["total", "GB", "meaning"], disable_numparse=True))
    lines.append("")
    lines.append(f"checkpoint on disk: {_gb(est.checkpoint_gb)} GB per resumable checkpoint; "
                 f"base weights {_gb(est.model_files_gb)} GB")
    if est.cpu_offload_gb:
        lines.append(f"host RAM for offloaded/paged state: {_gb(est.cpu_offload_gb)} GB per GPU")
    lines.append("")
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in est.assumptions]
    return "\n".join(lines)


def setup_layout_text(setup: TrainingSetup) -> str:
    """The layout flags a setup pins, in short words ("ZeRO-3 + offload all"); "" when none."""
    parts = []
    if setup.zero:
        parts.append(f"ZeRO-{setup.zero}")
    if setup.fsdp:
        parts.append("FSDP")
    if setup.tensor_parallel > 1:
        parts.append(f"TP{setup.tensor_parallel}")
    if setup.offload != "none":
        parts.append(f"offload {setup.offload}")
    return " + ".join(parts)


def speed_section(speed: LayoutSpeed) -> list[str]:
    """The `estimate --gpu` speed block: layout, tokens/s range, MFU, scaling and what it assumes."""
    if speed.throughput is None or speed.layout is None:
        return [f"Speed: no layout holds the job on this node shape: {speed.rejected}"]
    lay, t = speed.layout, speed.throughput
    low, typical, high = t.tokens_per_second
    where = f"{lay.total_gpus} x {lay.gpu}" + (f" over {lay.nodes} nodes" if lay.nodes > 1 else "")
    lines = [f"Speed on {where} ({lay.strategy}, micro-batch {lay.micro_batch}, "
             f"{'checkpointing' if lay.grad_checkpointing else 'no checkpointing'}):"]
    rows = [["tokens/s, all GPUs", f"{typical:,.0f}", f"{low:,.0f} - {high:,.0f}"],
            ["MFU per GPU", f"{t.mfu:.0%}", ""],
            ["scaling efficiency", f"{t.scaling_efficiency:.0%}",
             f"{t.scaling_range[0]:.0%} - {t.scaling_range[1]:.0%}" if lay.total_gpus > 1 else ""]]
    from tabulate import tabulate

    lines.append(tabulate(rows, headers=["", "typical", "range"], disable_numparse=True))
    if lay.total_gpus > 1 and t.scaling_efficiency < 0.70:
        lines.append(f"warning: scaling efficiency {t.scaling_efficiency:.0%} is below 70 %: the link, not the "
                     "GPUs, sets the pace (a network bottleneck)")
    lines += [f"  - {a}" for a in (*speed.assumed, *t.notes)]
    return lines


def speed_json(speed: LayoutSpeed) -> dict | None:
    """The `throughput` object of `estimate --gpu --format json` (None when no layout fits)."""
    if speed.throughput is None or speed.layout is None:
        return None
    lay, t = speed.layout, speed.throughput
    low, typical, high = t.tokens_per_second
    return {
        "tokens_per_second": {"low": round(low, 1), "typical": round(typical, 1), "high": round(high, 1)},
        "mfu": round(t.mfu, 4),
        "scaling_efficiency": round(t.scaling_efficiency, 4),
        "scaling_range": {"low": round(t.scaling_range[0], 4), "high": round(t.scaling_range[1], 4)},
        "flops_per_token": t.flops_per_token,
        "layout": lay.model_dump(mode="json", include={
            "gpu", "gpus_per_node", "nodes", "strategy", "zero", "fsdp", "tensor_parallel", "pipeline_parallel",
            "offload", "micro_batch", "grad_checkpointing", "precision", "attention", "link", "link_gbps",
            "fabric_gbps"}),
        "assumed": list(speed.assumed),
        "notes": list(t.notes),
    }


def estimate_json(est: MemoryEstimate, fits: dict[int, list[Fit]], classes: dict[str, str],
                  speed: LayoutSpeed | None = None, *, model: ModelSpec | None = None,
                  setup: TrainingSetup | None = None, layout_memory: MemoryEstimate | None = None) -> str:
    data = est.model_dump(mode="json")
    if model is not None and setup is not None:
        data["answer"] = estimate_answer(model, setup, est, fits, classes, speed, layout_memory)
    data["fits"] = {
        str(n): [{"gpu": f.layout.gpu, "class": classes[f.layout.gpu], "layout": f.layout.strategy,
                  "required_gb_per_gpu": f.layout.required_gb_per_gpu, "gpu_memory_gb": f.layout.gpu_memory_gb,
                  "precision": f.layout.precision, "attention": f.layout.attention,
                  "grad_checkpointing": f.layout.grad_checkpointing}
                 for f in found]
        for n, found in fits.items()
    }
    if speed is not None:
        data["throughput"] = speed_json(speed)
        if speed.rejected:
            data["throughput_rejected"] = speed.rejected
    return json.dumps(data, indent=2)


# --------------------------------------------------------------------------------------------
# Quotes


def money(amount: Decimal, currency: str) -> str:
    """Display rounding only: the plan keeps exact Decimals.

    >>> money(Decimal("1234.565"), "USD")
    '1,234.57 USD'
    """
    from rentopt.optimizer.billing import round_money

    return f"{round_money(amount, currency):,} {currency}"


def age(fetched_at: datetime, now: datetime | None = None) -> str:
    """How old a price is, for a sentence.

    >>> age(datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 3, 6, tzinfo=timezone.utc))
    '2 days old'
    """
    return f"{age_words(fetched_at, now or datetime.now(timezone.utc))} old"


def quote_json(quote: Quote) -> str:
    return quote.model_dump_json(indent=2)


def number(d: Decimal, places: int = 2) -> str:
    """A quantity for people: at most `places` decimals, no trailing zeros.

    >>> number(Decimal("4.080277777777777777777777778")), number(Decimal("240")), number(Decimal("0.5"))
    ('4.08', '240', '0.5')
    """
    q = d.quantize(Decimal(1).scaleb(-places))
    text = f"{q:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def cost_text(amount: Decimal | None, unknown: Sequence[str], currency: str) -> str:
    """A stage or plan amount: the known part, and '+ unknown' for what has no published price
    (the known part is always shown, so a stage covered by an earlier stage's rental reads 0.00;
    an amount None is wholly unknown: a line item with an unpriced part).

    >>> cost_text(Decimal("4.236"), ["egress: 1 GB"], "USD"), cost_text(Decimal(0), ["x"], "CNY"), cost_text(None, [], "USD")
    ('4.24 USD + unknown', '0.00 CNY + unknown', 'unknown')
    """
    if amount is None:
        return "unknown"
    return money(amount, currency) + (" + unknown" if unknown else "")


def hours_text(hours: Decimal) -> str:
    """Hours for people: always two decimals.

    >>> hours_text(Decimal("2.153611111111111111111111111")), hours_text(Decimal(0)), hours_text(Decimal("1234.5"))
    ('2.15', '0.00', '1,234.50')
    """
    return f"{hours.quantize(Decimal('0.01')):,}"


def rate_text(price: Decimal, currency: str) -> str:
    """A unit price: the currency's minor unit, or up to two more digits where the price has them
    (0.8338 per hour is a real published rate; 1.04 is not written 1.0400).

    >>> rate_text(Decimal("1.040000"), "USD"), rate_text(Decimal("0.833800"), "USD"), rate_text(Decimal("7920"), "CNY")
    ('1.04', '0.8338', '7,920.00')
    """
    from rentopt.optimizer.billing import round_money

    minor = round_money(price, currency)
    if minor == price:
        return f"{minor:,}"
    places = -minor.as_tuple().exponent + 2  # type: ignore[operator]
    finer = price.quantize(Decimal(1).scaleb(-places)).normalize()
    if -finer.as_tuple().exponent < -minor.as_tuple().exponent:  # type: ignore[operator]
        finer = finer.quantize(minor)
    return f"{finer:,}"


def _bill_text(st: PlanStage, currency: str = "") -> str:
    """A stage's compute lines: '4.08 h x 1.04', '2 days x 330.00', '1 x month-2026 at 7,920.00'."""
    parts = []
    for line in st.billing:
        if line.what != "compute":
            continue
        price = "?" if line.unit_price is None else rate_text(line.unit_price, currency or "USD")
        if line.unit == "hour":
            parts.append(f"{hours_text(line.count)} h x {price}/h")
        elif line.unit in ("day", "week", "month"):
            parts.append(f"{number(line.count)} {line.unit}{'' if line.count == 1 else 's'} x {price}")
        else:
            parts.append(f"{number(line.count)} x {line.unit} at {price}")
    return "; ".join(parts)


def lease_text(plan: Plan, index: int) -> str:
    """What the rental charges stage `index` for its compute: its own units, or, for a stage that
    runs on an instance an earlier stage already rented (one lease), which stage paid for it."""
    st = plan.stages[index]
    own = _bill_text(st, plan.currency)
    if own:
        return own
    if st.kind == "idle" and st.layout.startswith("training continues"):
        return "no gap"
    if st.kind == "export":
        return "in the train stage's hours"  # the copy-out is part of the training rental's time
    for earlier in plan.stages[:index]:
        if earlier.offer_id == st.offer_id and earlier.provider == st.provider and _bill_text(earlier, plan.currency):
            return f"in the rental paid at {earlier.kind}"
    return "-"


def _plan_rows(plan: Plan) -> list[list[str]]:
    rows = []
    for i, st in enumerate(plan.stages):
        where = f"{st.provider}/{st.offer_id}" if st.offer_id else st.provider
        gpus = f"{st.gpus} x {st.gpu}" if st.gpus else st.gpu
        run = " ".join(x for x in (st.precision, st.attention) if x) or "-"
        rows.append([st.kind, where, gpus, st.layout, run, hours_text(st.hours), lease_text(plan, i),
                     cost_text(st.cost, st.unknown_charges, plan.currency)])
    return rows


PLAN_HEADERS = ["stage", "offer", "GPUs", "layout", "runs", "hours", "billed as", "cost"]


def _days(hours: Decimal | None) -> str:
    return "?" if hours is None else number(hours / 24, 1)


def _tokens(value: float | Decimal) -> str:
    v = float(value)
    return f"{v / 1e9:,.3g} B" if v >= 1e9 else f"{v / 1e6:,.3g} M"


def plan_headline(plan: Plan) -> str:
    """What a plan costs and does, on one line: total, finish time, tokens/s, cost per B tokens."""
    parts = [f"#{plan.rank}  total {cost_text(plan.total, plan.unknown_charges, plan.currency)}"]
    if plan.total_low is not None and plan.total_high is not None:
        parts[0] += f" ({money(plan.total_low, plan.currency)}-{money(plan.total_high, plan.currency)})"
    if plan.hours is not None:
        span = (f" ({_days(plan.hours_low)}-{_days(plan.hours_high)})"
                if plan.hours_high is not None and plan.hours_high != plan.hours_low else "")
        parts.append(f"finish {_days(plan.hours)} days{span}")
    if plan.tokens is not None and plan.tokens_per_second is not None:
        r = plan.tokens_per_second
        parts.append(f"{_tokens(plan.tokens)} tokens at {r.typical:,.0f} tokens/s ({r.low:,.0f}-{r.high:,.0f})")
    if plan.cost_per_billion_tokens is not None:
        parts.append(f"{money(plan.cost_per_billion_tokens, plan.currency)} per B tokens")
    return "   ".join(parts)


def _unknown_kinds(plan: Plan) -> set[str]:
    return {line.what for st in plan.stages for line in st.billing if line.cost is None}


_UNKNOWN_WORDS = {"compute": "compute", "storage_running": "disk", "storage_stopped": "stopped disk",
                  "egress": "egress", "ingress": "ingress"}


def unknown_words(plan: Plan) -> str:
    """The kinds of charge a plan has no published price for, in a few words ('-' when none).

    Kinds are listed in line-item order: compute, disk, stopped disk, egress, ingress."""
    kinds = _unknown_kinds(plan) if plan.unknown_charges else set()
    return ", ".join(word for k, word in _UNKNOWN_WORDS.items() if k in kinds) or "-"


def _line_items(plan: Plan) -> str:
    unknown_kinds = _unknown_kinds(plan)
    out = []
    for k in ("compute", "storage_running", "storage_stopped", "egress", "ingress"):
        amount = getattr(plan.line_items, k)
        out.append(f"{k.replace('_', ' ')} {cost_text(amount, [k] if k in unknown_kinds else [], plan.currency)}")
    return ", ".join(out)


_STRATEGY_WORDS = {"single": "one GPU", "ddp": "data parallel", "replicas": "a copy per GPU", "fsdp": "FSDP",
                   "offload-optimizer": "optimizer on CPU", "offload-all": "CPU offload"}
_LINK_WORDS = {"nvlink": "NVLink", "infinity-fabric": "Infinity Fabric", "pcie": "PCIe", "pcie-no-p2p": "PCIe (no P2P)"}


def layout_words(strategy: str, gpus: int = 1, nodes: int = 1, link: str | None = None) -> str:
    """A parallel layout in plain words (the README's glossary explains each term once).

    >>> layout_words("zero1", 2, 1, "pcie"), layout_words("single")
    ('ZeRO-1 over PCIe', 'one GPU')
    >>> layout_words("zero3+offload-optimizer", 4, 1, "pcie-no-p2p")
    'ZeRO-3 + optimizer on CPU over PCIe (no P2P)'
    >>> layout_words("tp8+pp2", 16, 2, "nvlink")
    'tensor parallel 8 + pipeline 2 over NVLink, 2 nodes'
    """
    words = []
    for part in strategy.split("+"):
        if part in _STRATEGY_WORDS:
            words.append(_STRATEGY_WORDS[part])
        elif part.startswith("zero") and part[4:].isdigit():
            words.append(f"ZeRO-{part[4:]}")
        elif part.startswith("tp") and part[2:].isdigit():
            words.append(f"tensor parallel {part[2:]}")
        elif part.startswith("pp") and part[2:].isdigit():
            words.append(f"pipeline {part[2:]}")
        else:
            words.append(part)
    text = " + ".join(words)
    if gpus > nodes and link in _LINK_WORDS:
        text += f" over {_LINK_WORDS[link]}"
    if nodes > 1:
        text += f", {nodes} nodes"
    return text


def _training_stage(plan: Plan) -> PlanStage:
    return next(st for st in plan.stages if st.kind == "train")


def _finish_text(plan: Plan) -> str:
    if plan.hours is None:
        return "?"
    if plan.hours_low is not None and plan.hours_high is not None and plan.hours_high != plan.hours_low:
        return f"{_days(plan.hours)} ({_days(plan.hours_low)}-{_days(plan.hours_high)})"
    return _days(plan.hours)


# The one-screen quote: at most this many notes under the #1 plan (the rest: --details).
KEY_NOTES = 5
# Offer ids are shortened to this many characters on the one screen (whole in JSON and --details).
OFFER_ID_WIDTH = 60


def shorten(text: str, width: int) -> str:
    """
    >>> shorten("vast/2x-RTX_6000Ada-32-65536/Estonia, EE, EU", 20)
    'vast/2x-RTX_6000A...'
    """
    return text if len(text) <= width else text[: width - 3] + "..."


class _Laid(str):
    """A table tabulate laid out (its cells already one inert line each): kept as it is."""


def _tabulate(rows: list, **kw: Any) -> _Laid:
    """tabulate, every cell first made one inert line (text.table_cells)."""
    from tabulate import tabulate

    from rentopt.optimizer.text import table_cells

    return _Laid(tabulate(table_cells(rows), **kw))


def _inert(out: list[str]) -> str:
    """The lines of a terminal output joined, each one inert line (text.one_line): a control
    character in a provider's name, offer id or source shows as its escape and can neither move
    the cursor nor start a line of its own (a newline in a name once forged "#1 total 0.01 USD")."""
    from rentopt.optimizer.text import one_line

    return "\n".join(x if isinstance(x, _Laid) else one_line(x) for x in out)


def quote_table(quote: Quote, *, explain: bool = False, details: bool = False, now: datetime | None = None,
                job: str = "") -> str:
    """The quote for people. By default one screen: a short header, one row per plan, the #1
    plan's stages and the notes that can change the choice. `details`: everything (each plan's
    stages, line items, notes and sources; the assumptions). `explain`: every rejected offer."""
    if details:
        return _quote_details(quote, explain=explain, now=now, job=job)
    tabulate = _tabulate

    ccy = quote.currency
    out = _quote_header(quote, now, job)
    rows = []
    for plan in quote.plans:
        t = _training_stage(plan)
        rows.append([str(plan.rank), t.provider, f"{t.gpus} x {t.gpu}", layout_words(t.layout, t.gpus, t.nodes, t.link),
                     _finish_text(plan), money(plan.total, ccy).removesuffix(f" {ccy}"),
                     "-" if plan.cost_per_billion_tokens is None else
                     money(plan.cost_per_billion_tokens, ccy).removesuffix(f" {ccy}"),
                     unknown_words(plan)])
    out.append("")
    out.append(tabulate(rows, headers=["#", "provider", "GPUs", "layout", "finish, days", f"total {ccy}",
                                       f"{ccy} per B tokens", "not priced (unknown)"],
                        disable_numparse=True, colalign=("right", "left", "left", "left", "left", "right", "right")))
    if quote.plans:
        out.append("")
        out += _best_plan(quote.plans[0], quote, now)
    out.append("")
    more = ["--details: every plan's stages, notes and price sources"]
    if explain and quote.rejected:
        out += _rejections(quote)
    elif quote.rejected_count:
        more.append(f"--explain: the {quote.rejected_count:,} offer{'' if quote.rejected_count == 1 else 's'} "
                    "rejected and why")
    out.append("More: " + "; ".join(more) + ".")
    return _inert(out)


def _quote_header(quote: Quote, now: datetime | None, job: str) -> list[str]:
    out = wrapped(job) if job else []
    if quote.work is not None:
        due_days = number(quote.work.deadline_hours / 24, 1) if quote.work.deadline_hours is not None else ""
        due = (f"; done within {due_days} day{'' if due_days == '1' else 's'}"
               if quote.work.deadline_hours is not None else "")
        basis = quote.work.basis if quote.work.basis != "--tokens" or quote.work.tokens is None else \
            f"{_tokens(quote.work.tokens)} tokens"
        out.append(f"Work: {basis}{due}. Amounts in {quote.currency}.")
    else:
        out.append(f"Amounts in {quote.currency}.")
    for a in quote.assumptions:
        if a.startswith("GPU '"):  # how a bare GPU name on the command line was read
            out += wrapped(f"Assumed: {a}.")
    out += wrapped(prices_header(quote, now))
    out += [f"NO PRICES for {line}" for line in quote.missing_providers]
    for fx in quote.fx:
        out.append(f"Exchange rate: 1 USD = {fx.per_usd} {fx.currency} (ECB reference rate of {fx.as_of})"
                   if fx.source.startswith("ECB") else
                   f"Exchange rate: 1 USD = {fx.per_usd} {fx.currency} ({fx.source}, {fx.as_of})")
    return out


def prices_header(quote: Quote, now: datetime | None = None) -> str:
    """Where the prices come from and how old they are, from every provider the quote read (so it
    does not change with --top)."""
    origin = {"store": "the local price store", "bundled": "the BUNDLED SNAPSHOT shipped with rentopt",
              "sheet": "your own price sheets", "offers-file": "the offers file"}[quote.price_origin]
    dates = sorted({s.fetched_at for s in quote.sources if s.fetched_at is not None and s.dated_by != "unknown"})
    if not dates and quote.prices_as_of is not None:
        dates = [quote.prices_as_of]
    if not dates:
        when = ""
    elif dates[0].date() == dates[-1].date():
        when = f" of {dates[0]:%Y-%m-%d} ({age(dates[0], now)})"
    else:
        when = f" dated {dates[0]:%Y-%m-%d} ({age(dates[0], now)}) to {dates[-1]:%Y-%m-%d}"
    stale = sorted(s.provider for s in quote.sources if s.stale)
    undated = sorted(s.provider for s in quote.sources if s.dated_by == "unknown")
    by_file = sorted(s.provider for s in quote.sources if s.dated_by == "file-time")
    hint = "; run `rentopt refresh` for current prices" if quote.price_origin == "bundled" else ""
    tail = "".join(f"; {what}: {', '.join(names)}" for what, names in
                   (("date unknown", undated), ("dated by file time", by_file), ("STALE", stale)) if names)
    return f"Prices: {origin}{when}{hint}{tail}."


def _best_plan(plan: Plan, quote: Quote, now: datetime | None) -> list[str]:
    tabulate = _tabulate

    ccy = plan.currency
    t = _training_stage(plan)
    price = next((p for p in plan.prices if p.provider == t.provider), None)
    dated = f", prices: {date_words(price.fetched_at, price.dated_by, now, age=False)}" if price else ""
    out = [f"#1 stage by stage: {shorten(f'{t.provider}/{t.offer_id}', OFFER_ID_WIDTH)}{dated}"]
    rows = []
    for i, st in enumerate(plan.stages):
        if st.kind == "idle" and st.hours == 0 and not st.billing:
            continue  # no gap: training continues on the validation instance
        what = (layout_words(st.layout, st.gpus, st.nodes, st.link) if st.gpus else st.layout)
        where = f"{st.gpus} x {st.gpu}, {what}" if st.gpus else what
        if st.offer_id != t.offer_id or st.provider != t.provider:
            where = f"{shorten(f'{st.provider}/{st.offer_id}', 30)}: {where}"
        rows.append([st.kind, where, hours_text(st.hours), lease_text(plan, i), cost_text(st.cost, st.unknown_charges, ccy)])
    out.append(tabulate(rows, headers=["stage", "runs on", "hours", "the rental charges", "cost"],
                        disable_numparse=True, colalign=("left", "left", "right", "left", "right")))
    unknown = unknown_words(plan)
    if unknown != "-":
        out.append(f"Not in the total (no published price): {unknown}.")
    notes = [a for a in quote.assumptions if a.startswith("validation: ")]
    if plan.idle_alternative:
        notes.append(f"alternative for the gap: {plan.idle_alternative}")
    own = f"{t.provider}/{t.offer_id}: "
    notes += [n.removeprefix(own) for n in plan.key_notes]
    notes += [n for n in quote.assumptions if "rate" in n and "older" in n]
    for n in notes[:KEY_NOTES]:
        out += wrapped(f"note: {n}")
    return out


# The one screen's width: lines are wrapped to it (a terminal of 160 columns shows it whole).
SCREEN_WIDTH = 160


def wrapped(line: str, width: int = SCREEN_WIDTH) -> list[str]:
    """One line of prose wrapped to `width`, continuation lines indented.

    >>> wrapped("note: " + "word " * 5, 16)
    ['note: word word', '  word word word']
    """
    import textwrap

    return textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False) or [line]


def _rejections(quote: Quote) -> list[str]:
    tabulate = _tabulate

    out = ["", f"rejected offers ({len(quote.rejected)}):"]
    rows = [[r.provider, r.offer_id, r.gpu, r.constraint, r.reason] for r in quote.rejected]
    out.append(tabulate(rows, headers=["provider", "offer", "gpu", "constraint", "reason"], disable_numparse=True))
    return out


def _quote_details(quote: Quote, *, explain: bool, now: datetime | None, job: str) -> str:
    tabulate = _tabulate

    out: list[str] = [job] if job else []
    out.append(_prices_line(quote, now))
    out += [f"NO PRICES for {line}" for line in quote.missing_providers]
    for fx in quote.fx:
        out.append(f"exchange rate: 1 USD = {fx.per_usd} {fx.currency} (as of {fx.as_of}; {fx.source})")
    if quote.work is not None:
        out.append(f"work: {quote.work.basis}")
    for a in quote.assumptions:
        out.append(f"assumption: {a}")
    for plan in quote.plans:
        out.append("")
        out.append(plan_headline(plan))
        out.append(tabulate(_plan_rows(plan), headers=PLAN_HEADERS, disable_numparse=True))
        out.append("line items: " + _line_items(plan))
        if plan.unknown_charges:
            out.append("unknown (not in the total): " + "; ".join(plan.unknown_charges))
        if plan.idle_alternative:
            out.append(f"alternative for the gap: {plan.idle_alternative}")
        for p in plan.prices:
            out.append(f"prices: {p.provider} via {p.origin} ({p.source}), "
                       f"{date_words(p.fetched_at, p.dated_by, now) if p.dated_by != 'published' else age(p.fetched_at, now)}"
                       + (" - STALE" if p.stale else ""))
        for n in plan.notes:
            out.append(f"note: {n}")
    if quote.sources:
        out.append("")
        out.append("where the prices come from (per provider):")
        out += [f"  {src.line}" for src in quote.sources]
    out += [f"note: {n}" for n in quote.source_notes]
    if explain and quote.rejected:
        out += _rejections(quote)
    elif quote.rejected_count:
        out.append("")
        out.append(f"{quote.rejected_count} offers rejected; --explain lists each with the number that failed.")
    return _inert(out)


def _prices_line(quote: Quote, now: datetime | None) -> str:
    origin = {"store": "the local price store", "bundled": "the BUNDLED SNAPSHOT shipped with rentopt",
              "sheet": "your own price sheets", "offers-file": "the offers file"}[quote.price_origin]
    when = f" as of {quote.prices_as_of:%Y-%m-%d %H:%M} UTC ({age(quote.prices_as_of, now)})" if quote.prices_as_of else ""
    hint = " - run `rentopt refresh` for current prices" if quote.price_origin == "bundled" else ""
    # "as of" is the oldest KNOWN date: prices of unknown date, or dated only by a file's time, are named
    undated = [s.provider for s in quote.sources if s.dated_by == "unknown"]
    by_file = [s.provider for s in quote.sources if s.dated_by == "file-time"]
    dates = "".join(f"; {what}: {', '.join(names)}" for what, names in
                    (("date unknown", undated), ("dated by file time", by_file)) if names)
    return f"Prices from {origin}{when}{dates}{hint}. Amounts in {quote.currency}."


def quote_markdown(quote: Quote, now: datetime | None = None, job: str = "") -> str:
    out = ["# rentopt quote", ""]
    if job:
        out += [_md(job), ""]
    out += [_md(_prices_line(quote, now)), ""]
    if quote.work is not None:
        out.append(f"- work: {_md(quote.work.basis)}")
    for fx in quote.fx:
        out.append(f"- exchange rate: 1 USD = {fx.per_usd} {fx.currency} (as of {_md(fx.as_of)}; {_md(fx.source)})")
    for a in quote.assumptions:
        out.append(f"- assumption: {_md(a)}")
    for plan in quote.plans:
        out += ["", f"## Plan {plan.rank}: {_md(plan_headline(plan).split('  ', 1)[1])}", ""]
        out.append("| " + " | ".join(PLAN_HEADERS) + " |")
        out.append("|---|---|---|---|---|---:|---|---:|")
        for row in _plan_rows(plan):
            out.append("| " + " | ".join(_md(c) for c in row) + " |")
        li = plan.line_items
        unknown_kinds = _unknown_kinds(plan)
        out += ["", "| line item | amount |", "|---|---:|"]
        for k in ("compute", "storage_running", "storage_stopped", "egress", "ingress"):
            cell = cost_text(getattr(li, k), [k] if k in unknown_kinds else [], plan.currency)
            out.append(f"| {k.replace('_', ' ')} | {cell} |")
        out.append(f"| **total** | **{_md(cost_text(plan.total, plan.unknown_charges, plan.currency))}** |")
        extra = list(plan.notes)
        if plan.idle_alternative:
            extra.insert(0, f"alternative for the gap: {plan.idle_alternative}")
        if extra:
            out.append("")
            out += [f"- {_md(n)}" for n in extra]
    if quote.sources or quote.source_notes:
        out += ["", "## Where the prices come from", ""]
        out += [f"- {_md(src.line)}" for src in quote.sources]
        out += [f"- note: {_md(n)}" for n in quote.source_notes]
    if quote.rejected_count:
        out += ["", f"{quote.rejected_count} offers rejected (see `--explain`)."]
    return "\n".join(out) + "\n"


def _md(text: Any) -> str:
    """Offer text in a Markdown cell or line: links, HTML and table syntax made inert."""
    from rentopt.optimizer.text import escape_markdown

    return escape_markdown(str(text))


# --------------------------------------------------------------------------------------------
# No plan


def no_plan_text(exc: Any) -> str:
    """What `--explain` prints when no plan fits: the binding constraint with its numbers, the
    closest misses, the rejections by reason, then every rejected offer."""
    tabulate = _tabulate  # offer ids and reasons: one inert line each

    info = exc.explanation or {"binding": str(exc), "reasons": exc.reasons, "closest_misses": [],
                               "rejections_by_reason": []}
    out = ["No feasible plan.", ""]
    out += wrapped(f"Binding constraint: {info['binding']}")
    for reason in info["reasons"][1:]:
        out += wrapped(f"  also: {reason}")
    if info["closest_misses"]:
        out += ["", "Closest misses (nearest first):"]
        for miss in info["closest_misses"]:
            out += wrapped(f"  - {miss}")
    if info["rejections_by_reason"]:
        out += ["", "Rejected offers by reason:"]
        rows = [[e["constraint"], f"{e['offers']:,}", e["example"]] for e in info["rejections_by_reason"]]
        out.append(tabulate(rows, headers=["constraint", "offers", "for example"], disable_numparse=True,
                            colalign=("left", "right", "left")))
    if exc.rejected:
        rows = [[r.provider, r.offer_id, r.gpu, r.constraint, r.reason] for r in exc.rejected]
        out += ["", f"Every rejected offer ({len(rows):,}):",
                tabulate(rows, headers=["provider", "offer", "gpu", "constraint", "reason"], disable_numparse=True)]
    return _inert(out)


def no_plan_json(exc: Any) -> str:
    """The JSON object `quote --format json` prints on stdout when no plan fits (exit status 3):
    {"error": {"kind": "no_feasible_plan", "exit_code": 3, "message", "binding", "reasons",
    "closest_misses", "rejections_by_reason", "offers", "rejected_count"}, "plans": [], "rejected": [...]}."""
    info = dict(exc.explanation or {"binding": str(exc), "reasons": exc.reasons})
    error = {"kind": "no_feasible_plan", "exit_code": exc.exit_code, "message": " ".join(str(exc).split()), **info}
    rejected = [{"provider": r.provider, "offer_id": r.offer_id, "gpu": r.gpu, "constraint": r.constraint,
                 "reason": r.reason} for r in exc.rejected]
    return json.dumps({"error": error, "plans": [], "rejected": rejected}, indent=2)
