"""`rentopt report`: a provider comparison a team can read, as Markdown or one self-contained HTML
file, or the same sections as JSON for scripts.

What it shows, all in one currency (each price converted at the exchange rate of its day, every
rate listed with its date and source, a rate much older than the prices flagged in the notes):

1. freshness per provider: prices as of, last success, stale or not (and the error), offers,
   GPU names the catalog did not know;
2. the cheapest price per GPU-hour for each GPU model x provider, on-demand and spot, also per
   GB of GPU memory-hour and per dense TFLOPS-hour;
3. what whole reference jobs cost at each provider: the best plan per provider from the
   planner (total and line items), or why that provider cannot run the job;
4. price history per GPU model, one point per refresh run (snapshots minutes apart are one run),
   and the largest price moves since each provider's previous refresh.

Data comes from `catalog.load_offers` (the price store, else the bundled snapshot, labelled) and,
for freshness and history, from the store opened read-only: the report never writes anything
but its own output. HTML is one file with inline CSS and inline SVG charts written here (no
chart library, no script, nothing fetched), so it reads the same when mailed or offline.
Every provider-supplied string is escaped in both formats: an offer id `<script>` stays text.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Literal

import numpy as np

from rentopt import __version__
from rentopt.optimizer.catalog import OfferSet, TableColumns, load_offers, open_history
from rentopt.optimizer.charts import PALETTE, Bar, bar_chart, bar_scale, line_chart, scale_words
from rentopt.optimizer.currency import FxTable, round_money
from rentopt.optimizer.errors import InputError, NoFeasiblePlan
from rentopt.optimizer.hardware import get_gpu
from rentopt.optimizer.models import FxRate, GpuSpec, ModelSpec, Offer, Origin, Plan, PlanStage, PriceUnit, TrainingSetup
from rentopt.optimizer.models import UNIT_HOURS, UNIT_ORDER, age_words, hour_price
from rentopt.optimizer.offers_io import money as unit_price
from rentopt.optimizer.job import QuoteRequest, gpu_name_notes, parse_gpu_filter
from rentopt.optimizer.planner import build_quote
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.render import cost_text, money, number
from rentopt.optimizer.store import HistoryColumns, OfferQuery
from rentopt.optimizer.text import escape_html as esc
from rentopt.optimizer.text import escape_markdown as md
from rentopt.optimizer.workload import resolve_model

Format = Literal["markdown", "html", "json"]
TrainMode = Literal["full", "lora", "qlora"]
MODE_LABELS: dict[str, str] = {"full": "full fine-tune", "lora": "LoRA", "qlora": "QLoRA"}

# The jobs every report prices, as issue 5 lists them: QLoRA, LoRA and full fine-tunes at the
# 7B-70B sizes of the seeds' sizing table (shared/seeds/004_266ca01670408f55.txt).
REFERENCE_WORKLOADS = ("7b qlora 3d", "13b lora 10d", "7b full 10d", "70b lora 14d")

# How many GPU models the charts show: the ones sold by the most providers. More bars than this
# stop being readable on one page; the tables list every GPU.
CHART_GPUS = 8
# How many price moves the "largest moves" table lists.
TOP_MOVES = 20
# A month in --since is 30 days (the window only needs to be roughly right).
DAYS_PER_UNIT = {"d": 1, "w": 7, "m": 30}
TOKEN_SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
SPARK_BLOCKS = "▁▂▃▄▅▆▇█"

# --------------------------------------------------------------------------------------------
# Inputs: the --since window and the --workload syntax


def parse_since(text: str) -> timedelta:
    """The history window: a whole number of days, weeks or months (30 days).

    >>> parse_since("30d"), parse_since("12w"), parse_since(" 6M ")
    (datetime.timedelta(days=30), datetime.timedelta(days=84), datetime.timedelta(days=180))
    >>> parse_since("soon")
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: --since 'soon' is not a window such as 7d, 30d, 12w or 6m (days, weeks, months)
    """
    m = re.fullmatch(r"\s*(\d+)\s*([dwm])\s*", text or "", re.IGNORECASE)
    if not m or int(m.group(1)) == 0:
        raise InputError(f"--since {text!r} is not a window such as 7d, 30d, 12w or 6m (days, weeks, months)")
    return timedelta(days=int(m.group(1)) * DAYS_PER_UNIT[m.group(2).lower()])


@dataclass(frozen=True)
class Workload:
    """One job to price at every provider: MODEL MODE and either wall-clock days or tokens."""

    text: str
    model: ModelSpec
    mode: TrainMode
    days: Decimal | None = None
    tokens: float | None = None

    @property
    def key(self) -> tuple:
        """Equal for the same job however it was spelled ("7B QLoRA 3d" and "7b qlora 3days")."""
        return (self.model.name, self.mode, self.days, self.tokens)

    @property
    def label(self) -> str:
        amount = f"{number(self.days)} days" if self.days is not None else f"{_count(self.tokens or 0)} tokens"
        return f"{self.text.split()[0]} {MODE_LABELS[self.mode]}, {amount}"


def parse_workload(text: str) -> Workload:
    """`MODEL MODE DAYSd` or `MODEL MODE TOKENS`: "llama-3.1-8b qlora 3d", "7b full 2B".

    MODE is full, lora or qlora; TOKENS takes K/M/B/T suffixes or e-notation (2e9).

    >>> w = parse_workload("7b full 2B"); (w.model.name, w.mode, w.days, w.tokens)
    ('llama-2-7b', 'full', None, 2000000000.0)
    >>> parse_workload("13b lora 10d").label, parse_workload("llama-3.1-8b qlora 5E8").label
    ('13b LoRA, 10 days', 'llama-3.1-8b QLoRA, 500M tokens')
    >>> parse_workload("13b sing 3d")
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: --workload '13b sing 3d': mode 'sing' is not one of full, lora, qlora
    """
    parts = (text or "").split()
    usage = f'--workload {text!r} is not MODEL MODE DAYSd or MODEL MODE TOKENS, e.g. "13b lora 10d" or "7b full 2B"'
    if len(parts) != 3:
        raise InputError(usage)
    model_name, mode, amount = parts[0], parts[1].lower(), parts[2].lower()
    if mode not in MODE_LABELS:
        raise InputError(f"--workload {text!r}: mode {parts[1]!r} is not one of {', '.join(MODE_LABELS)}")
    days: Decimal | None = None
    tokens: float | None = None
    if m := re.fullmatch(r"(\d+(?:\.\d+)?)d(?:ays?)?", amount):
        days = Decimal(m.group(1))
        if days <= 0:
            raise InputError(f"--workload {text!r}: the number of days must be positive")
    elif m := re.fullmatch(r"(\d+(?:\.\d+)?(?:e\d+)?)([kmbgt]?)", amount):
        tokens = float(m.group(1)) * TOKEN_SUFFIXES.get(m.group(2), 1.0)
        if not math.isfinite(tokens) or tokens <= 0:
            raise InputError(f"--workload {text!r}: the token count must be positive")
    else:
        raise InputError(usage)
    try:
        model = resolve_model(model_name)
    except InputError as exc:
        raise InputError(f"--workload {text!r}: {exc}") from None
    return Workload(text=text.strip(), model=model, mode=mode, days=days, tokens=tokens)  # type: ignore[arg-type]


def reference_workloads() -> list[Workload]:
    return [parse_workload(w) for w in REFERENCE_WORKLOADS]


# What -o may end in, and the format each suffix means.
SUFFIX_FORMATS: dict[str, Format] = {".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html",
                                     ".json": "json"}


def format_for(output: Path | None, requested: str | None = None) -> Format:
    """The output format: as requested, else from the -o file's suffix, else Markdown.

    A suffix that names no format rentopt writes (`-o report.pdf`) is an input error: writing
    Markdown into a .pdf would only look like a broken file.

    >>> format_for(Path("r.HTML")), format_for(Path("r.md")), format_for(None), format_for(Path("r.pdf"), "html")
    ('html', 'markdown', 'markdown', 'html')
    >>> format_for(Path("r.pdf"))
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: -o r.pdf: rentopt writes the report as Markdown (.md, .markdown), HTML (.html, .htm) or JSON (.json); name the file with one of those suffixes, or choose the format with --format
    """
    if requested:
        return requested  # type: ignore[return-value]
    if output is None:
        return "markdown"
    found = SUFFIX_FORMATS.get(output.suffix.lower())
    if found is None:
        raise InputError(f"-o {output}: rentopt writes the report as Markdown (.md, .markdown), HTML (.html, .htm) "
                         "or JSON (.json); name the file with one of those suffixes, or choose the format with --format")
    return found


def read_gpus(items: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The report's --gpu: catalog ids, read as quote's --gpu reads names (comma lists or repeated;
    a bare H100 is the SXM card), and the assumption lines that say how a bare name was read.

    A report compares GPU models across node sizes, so a GPUs-per-node count is refused.

    >>> read_gpus(["h100-sxm-80gb,RTX-4090-24GB", "H100-SXM-80GB"])
    (('H100-SXM-80GB', 'RTX-4090-24GB'), ())
    >>> read_gpus(["H100:8"])
    Traceback (most recent call last):
    ...
    rentopt.optimizer.errors.InputError: --gpu H100:8: the report compares GPU models at every node size; name the GPU alone (--gpu H100), or price 8-GPU nodes with `rentopt quote --gpu H100:8`
    """
    for item in items:
        for part in item.split(","):
            name, sep, count = part.strip().partition(":")
            if sep:
                raise InputError(f"--gpu {part.strip()}: the report compares GPU models at every node size; name the "
                                 f"GPU alone (--gpu {name.strip()}), or price {count.strip()}-GPU nodes with "
                                 f"`rentopt quote --gpu {part.strip()}`")
    ids = tuple(dict.fromkeys(gpu for gpu, _ in parse_gpu_filter(items)))
    return ids, tuple(gpu_name_notes(items, []))


@dataclass(frozen=True)
class ReportRequest:
    since: timedelta = timedelta(days=30)
    since_text: str = "30d"
    currency: str = "USD"
    workloads: tuple[Workload, ...] = ()
    providers: tuple[str, ...] | None = None
    now: datetime | None = None  # pinned by tests; default: the time of the report
    gpus: tuple[str, ...] = ()  # --gpu: only these catalog ids (read_gpus)
    min_gpu_memory_gb: float | None = None  # --min-gpu-memory
    gpu_notes: tuple[str, ...] = ()  # how --gpu's bare names were read (read_gpus)

    @property
    def filtered(self) -> bool:
        return bool(self.gpus) or self.min_gpu_memory_gb is not None

    def filter_words(self) -> str:
        """The GPU filters in words, as the report's header states them ("" without filters).

        >>> ReportRequest(gpus=("H100-SXM-80GB",), min_gpu_memory_gb=48).filter_words()
        'only H100-SXM-80GB (--gpu), with at least 48 GB per GPU (--min-gpu-memory)'
        """
        parts = []
        if self.gpus:
            parts.append(f"only {', '.join(self.gpus)} (--gpu)")
        if self.min_gpu_memory_gb is not None:
            parts.append(f"{'with ' if self.gpus else 'only GPUs with '}at least {self.min_gpu_memory_gb:g} GB per GPU "
                         "(--min-gpu-memory)")
        return ", ".join(parts)


# --------------------------------------------------------------------------------------------
# The report's data


@dataclass(frozen=True)
class Freshness:
    provider: str
    origin: str  # "price store" or "bundled snapshot of <date>"
    offers: int
    fetched_at: datetime | None  # when the oldest price shown was read
    last_success_at: datetime | None
    stale: bool
    last_error: str | None
    last_error_at: datetime | None
    unknown_gpus: tuple[str, ...]


@dataclass(frozen=True)
class PriceCell:
    """The cheapest offer of one GPU model at one provider, per GPU-hour."""

    provider: str
    gpu: str
    spot: bool
    per_gpu_hour: Decimal  # in the report currency
    native_per_gpu_hour: Decimal
    native_currency: str
    offer_id: str
    node_gpus: int
    basis: PriceUnit  # the unit the hourly figure comes from (hour, or a day/week/month/term price)
    fetched_at: datetime


@dataclass
class GpuPrices:
    spec: GpuSpec
    on_demand: dict[str, PriceCell] = field(default_factory=dict)
    spot: dict[str, PriceCell] = field(default_factory=dict)

    @property
    def providers(self) -> list[str]:
        return sorted(set(self.on_demand) | set(self.spot))

    @property
    def tflops(self) -> float:
        return self.spec.dense_tflops("bf16")

    @property
    def tflops_kind(self) -> str:
        """Which dense rate `tflops` is: BF16, or FP16 for cards without BF16 (V100, T4)."""
        if self.spec.bf16_tflops:
            return "BF16"
        return "FP16" if self.spec.fp16_tflops else "FP32"

    def per_gb_hour(self, cell: PriceCell) -> Decimal:
        return cell.per_gpu_hour / Decimal(str(self.spec.memory_gb))

    def per_tflops_hour(self, cell: PriceCell) -> Decimal | None:
        return cell.per_gpu_hour / Decimal(str(self.tflops)) if self.tflops else None


@dataclass(frozen=True)
class JobRow:
    """One provider's best plan for a workload, or why it has none."""

    provider: str
    plan: Plan | None
    reason: str | None = None

    @property
    def train(self) -> PlanStage | None:
        if self.plan is None:
            return None
        return next((s for s in self.plan.stages if s.kind == "train"), None)


@dataclass
class WorkloadJobs:
    workload: Workload
    rows: list[JobRow]

    @property
    def feasible(self) -> list[JobRow]:
        return [r for r in self.rows if r.plan is not None]

    @property
    def infeasible(self) -> list[JobRow]:
        return [r for r in self.rows if r.plan is None]


@dataclass(frozen=True)
class HistorySeries:
    """Min price per GPU-hour of one GPU at one provider, per snapshot, in the report currency."""

    gpu: str
    provider: str
    spot: bool
    points: tuple[tuple[datetime, Decimal], ...]


@dataclass(frozen=True)
class PriceMove:
    provider: str
    gpu: str
    spot: bool
    previous: Decimal
    latest: Decimal
    previous_at: datetime
    latest_at: datetime

    @property
    def change_pct(self) -> Decimal:
        return (self.latest - self.previous) / self.previous * 100


@dataclass
class Report:
    generated_at: datetime
    origin: Origin
    label: str
    currency: str
    fx: list[FxRate]
    since: timedelta
    since_text: str
    freshness: list[Freshness]
    prices: list[GpuPrices]
    chart_gpus: list[str]
    jobs: list[WorkloadJobs]
    history: dict[str, list[HistorySeries]]
    moves: list[PriceMove]
    history_note: str | None
    notes: list[str]
    providers: list[str]
    gpus: tuple[str, ...] = ()  # the --gpu filter (catalog ids); empty: every GPU
    min_gpu_memory_gb: float | None = None  # the --min-gpu-memory filter
    filter_text: str = ""  # the filters in words, and what they kept ("" without filters)


# --------------------------------------------------------------------------------------------
# Gathering


def build_report(request: ReportRequest, fx: FxTable) -> Report:
    """Everything the report shows, from the store read-only (or the bundled snapshot).

    The offers are read as planning columns (`load_offers(lazy=True)`, as the quote reads them):
    full offers are built only for the rows the report shows, the candidates for each price
    cell's cheapest (`gather_prices_table`) and the offers of the plans."""
    currency = fx.rate(request.currency).currency  # an unknown currency fails before any work
    now = request.now or datetime.now(timezone.utc)
    query = OfferQuery(gpus=request.gpus or None, min_gpu_memory_gb=request.min_gpu_memory_gb)
    offers = load_offers(list(request.providers) if request.providers else None, query=query, lazy=True)
    table = offers.table()
    notes = list(request.gpu_notes) + list(offers.notes)
    filter_text, kept = "", set()
    if request.filtered:
        filter_text, kept = _apply_filters(offers, table, request)
        offers = replace(offers, provenance={p: v for p, v in offers.provenance.items() if p in kept})
    provider_codes, provider_names = table.category("provider")
    currency_codes, currencies = table.category("currency")
    in_kept = np.isin(provider_codes, [i for i, p in enumerate(provider_names) if p in kept]) if request.filtered \
        else np.ones(table.n, dtype=bool)
    used = _used(currency_codes[in_kept], currencies)
    if left_out := sorted({c for c in used if not fx.knows(c)}):
        notes.append(f"offers priced in {', '.join(left_out)} are left out: no exchange rate; add one with "
                     f"--fx {left_out[0]}=UNITS_PER_USD")
    known = np.array([fx.knows(c) for c in currencies] or [False])
    table = table.take(in_kept & known[currency_codes])
    priced = _price_days(table)
    notes += fx.old_rate_warnings(priced, currency)
    providers = sorted(offers.provenance)
    rows = _RowFacts.of(table)
    facts = _store_facts(offers, rows, providers, request, now, fx, currency) if offers.origin != "offers-file" \
        else _bundled_facts(offers, rows)
    prices, unlisted = gather_prices_table(table, fx, currency)
    if unlisted:
        notes.append(f"GPU ids not in this rentopt's catalog are left out of the GPU tables: {', '.join(unlisted)} "
                     "(the store was written by another version; `rentopt refresh` rewrites it)")
    workloads = list(reference_workloads())
    workloads += [w for w in request.workloads if w.key not in {r.key for r in workloads}]
    planning = replace(offers, offers=[], columns=TableColumns(table))  # one offer table for every plan
    alone = _Alone(planning)
    return Report(
        generated_at=now, origin=offers.origin, label=offers.label, currency=currency,
        fx=fx.rates_used(priced, to_ccy=currency),
        since=request.since, since_text=request.since_text, freshness=facts.freshness, prices=prices,
        chart_gpus=pick_chart_gpus(prices), jobs=[price_workload(w, planning, providers, fx, currency, alone) for w in workloads],
        history=facts.history, moves=facts.moves, history_note=facts.history_note, notes=notes, providers=providers,
        gpus=request.gpus, min_gpu_memory_gb=request.min_gpu_memory_gb, filter_text=filter_text,
    )


def _used(codes: np.ndarray, values: list) -> list:
    """The values of a coded column some row holds (a filtered table keeps its parent's values)."""
    return [values[i] for i in np.unique(codes).tolist()]


def _price_days(table: OfferTable) -> list[tuple[str, datetime]]:
    """Each distinct (currency, fetched_at) of the table's rows: what the exchange rates are chosen by."""
    currency_codes, currencies = table.category("currency")
    day_codes, days = table.category("fetched_at")
    pairs = np.unique(currency_codes.astype(np.int64) * max(len(days), 1) + day_codes)
    return [(currencies[p // max(len(days), 1)], days[p % max(len(days), 1)]) for p in pairs.tolist()]


def _apply_filters(offers: OfferSet, table: OfferTable, request: ReportRequest) -> tuple[str, set[str]]:
    """The filters' sentence for the header: what they keep and which providers have nothing left
    (those drop out of the report), and the providers kept. Nothing left at all is the user's to
    loosen: an input error."""
    gpu_codes, gpus = table.category("gpu")
    provider_codes, provider_names = table.category("provider")
    with_gpu = np.array([bool(g) for g in gpus] or [False])[gpu_codes]
    kept = sorted(_used(provider_codes[with_gpu], provider_names))
    if not kept:
        flags = (f" --gpu {','.join(request.gpus)}" if request.gpus else "") + \
            (f" --min-gpu-memory {request.min_gpu_memory_gb:g}" if request.min_gpu_memory_gb is not None else "")
        where = f"{len(offers.provenance)} provider{'' if len(offers.provenance) == 1 else 's'}"
        raise InputError(f"no offer of the {where} matches{flags}; `rentopt offers{flags}` lists what "
                         "matches, `rentopt gpus` every GPU id")
    left = sorted(set(offers.provenance) - set(kept))
    matched = int(with_gpu.sum())
    text = (f"{request.filter_words()}: {matched} offer{'' if matched == 1 else 's'} from {len(kept)} "
            f"provider{'' if len(kept) == 1 else 's'}")
    return text + (f"; left out, with no such offer: {', '.join(left)}." if left else "."), set(kept)


@dataclass
class _RowFacts:
    """What freshness and history need of the offers, per provider, read off the table's columns."""

    oldest: dict[str, datetime]  # when its oldest price was read
    unknown_gpus: dict[str, set[str]]  # the GPU names of its offers the catalog did not know
    gpus: list[str]  # every GPU id of the offers, sorted

    @classmethod
    def of(cls, table: OfferTable) -> _RowFacts:
        provider_codes, providers = table.category("provider")
        day_codes, days = table.category("fetched_at")
        gpu_codes, gpus = table.category("gpu")
        raw_codes, raws = table.category("gpu_raw")
        oldest: dict[str, datetime] = {}
        width = max(len(days), 1)
        for pair in np.unique(provider_codes.astype(np.int64) * width + day_codes).tolist():
            p, when = providers[pair // width], days[pair % width]
            if p not in oldest or when < oldest[p]:
                oldest[p] = when
        unknown: dict[str, set[str]] = defaultdict(set)
        no_gpu = np.array([g is None for g in gpus] or [False])[gpu_codes]
        width = max(len(raws), 1)
        for pair in np.unique(provider_codes[no_gpu].astype(np.int64) * width + raw_codes[no_gpu]).tolist():
            unknown[providers[pair // width]].add(raws[pair % width])
        return cls(oldest, unknown, sorted({g for g in _used(gpu_codes, gpus) if g}))


@dataclass
class _Facts:
    """What only the store knows: freshness with errors, and history."""

    freshness: list[Freshness]
    history: dict[str, list[HistorySeries]] = field(default_factory=dict)
    moves: list[PriceMove] = field(default_factory=list)
    history_note: str | None = None


def _store_facts(offers: OfferSet, rows: _RowFacts, providers: list[str], request: ReportRequest, now: datetime,
                 fx: FxTable, currency: str) -> _Facts:
    """Freshness and history, each provider's from where its offers came (catalog.open_history):
    the price store's snapshots, or the bundled snapshot's published history."""
    oldest, unknown = rows.oldest, rows.unknown_gpus
    with open_history(offers) as history:
        states = history.states()
        summaries = {p: history.snapshot_summaries(p) for p in providers}
        freshness = []
        for p in providers:
            prov, s = offers.provenance[p], states.get(p)
            if s is not None:
                freshness.append(Freshness(
                    provider=p, origin="price store", offers=s.offers_count if s.has_data else 0,
                    fetched_at=oldest.get(p, s.fetched_at), last_success_at=s.last_success_at,
                    stale=s.stale or not s.has_data, last_error=s.last_error, last_error_at=s.last_error_at,
                    unknown_gpus=tuple(summaries[p][-1].get("unknown_gpus", ())) if summaries[p] else ()))
            else:
                where = "your price sheet" if prov.origin == "sheet" else \
                    f"bundled snapshot of {prov.fetched_at:%Y-%m-%d}" if prov.fetched_at else "bundled snapshot"
                freshness.append(Freshness(
                    provider=p, origin=where, offers=prov.offers, fetched_at=oldest.get(p, prov.fetched_at),
                    last_success_at=None, stale=False, last_error=None, last_error_at=None,
                    unknown_gpus=tuple(sorted(unknown[p]))))
        # Moves compare each provider's last two snapshots, which may be older than the window.
        previous = {p: [row["fetched_at"] for row in rows[-2:]] for p, rows in summaries.items()}
        window_start = now - request.since
        start = min([window_start] + [t[0] for t in previous.values() if t])
        points = history.price_history_columns(rows.gpus, since=start)
    by_key = history_points_by_key(points, fx, currency)  # the points of `providers` (offers.provenance) alone
    by_provider: dict[str, dict[tuple[str, str, bool], dict[datetime, Decimal]]] = defaultdict(dict)
    for key, points_of_key in by_key.items():
        by_provider[key[0]][key] = points_of_key
    # A bundled provider's history is its published catalogs': the window ends at its own last one.
    series: dict[str, list[HistorySeries]] = defaultdict(list)
    anchored = []
    for p in providers:
        last = previous.get(p, [])[-1:] if offers.provenance[p].origin != "store" else []
        start_p = (last[0] - request.since) if last and last[0] - request.since < window_start else window_start
        if start_p < window_start:
            anchored.append(f"{p} up to {last[0]:%Y-%m-%d}")
        for gpu, lines in history_series(by_provider.get(p, {}), start_p).items():
            series[gpu] += lines
    note = None
    if all(len(t) < 2 for t in previous.values()):
        note = "Only one refresh is stored so far: history builds up with each `rentopt refresh` (run it nightly)."
    elif anchored:
        note = (f"Providers shown from the bundled snapshot have the history their published catalogs carry: the "
                f"{request.since_text} before their latest catalog ({', '.join(anchored)}).")
    return _Facts(freshness, dict(series), price_moves(by_key, previous), note)


def _bundled_facts(offers: OfferSet, rows: _RowFacts) -> _Facts:
    note = ("History starts with the first `rentopt refresh`: these prices come from the snapshot bundled with "
            "rentopt, which has no history.")
    return _Facts(_bundled_freshness(offers, rows), history_note=note)


def _bundled_freshness(offers: OfferSet, rows: _RowFacts) -> list[Freshness]:
    return [
        Freshness(provider=p.provider, origin=f"bundled snapshot of {p.fetched_at:%Y-%m-%d}", offers=p.offers,
                  fetched_at=rows.oldest.get(p.provider, p.fetched_at), last_success_at=None, stale=False,
                  last_error=None, last_error_at=None, unknown_gpus=tuple(sorted(rows.unknown_gpus[p.provider])))
        for p in sorted(offers.provenance.values(), key=lambda p: p.provider)
    ]


def interruptible_hour_price(offer: Offer) -> Decimal | None:
    """Reference price per node-hour of the offer's interruptible (spot) options, if any.

    Marketplaces sell spot as an option on an on-demand offer (RunPod, Vast); hyperscalers as
    separate spot offers. Both count here, priced the same way as `hour_price`.
    """
    if offer.spot:
        return hour_price(offer)
    options = offer.options(interruptible=True)
    if not options:
        return None
    return hour_price(offer.model_copy(update={"spot": True, "price_options": options}))


def _basis(offer: Offer, spot: bool) -> PriceUnit:
    """The unit `hour_price` took its figure from (the finest the offer sells)."""
    own = offer.options(interruptible=spot) or offer.price_options
    return next(u for u in UNIT_ORDER if any(p.unit == u for p in own))


def gather_prices(offers: Iterable[Offer], fx: FxTable, currency: str) -> tuple[list[GpuPrices], list[str]]:
    """Cheapest on-demand and spot price per GPU-hour for each known GPU x provider.

    Also returns the GPU ids the catalog does not have (a store written by another version).
    """
    table: dict[str, GpuPrices] = {}
    unlisted: set[str] = set()
    converters: dict[tuple[str, datetime], Callable[[Decimal], Decimal]] = {}  # per currency and price date
    for o in offers:
        if o.gpu is None or o.gpu in unlisted:
            continue
        if o.gpu not in table:
            try:
                table[o.gpu] = GpuPrices(get_gpu(o.gpu))
            except KeyError:
                unlisted.add(o.gpu)
                continue
        on_demand = hour_price(o) if o.options(interruptible=False) else None
        for spot, node_price in ((False, on_demand), (True, interruptible_hour_price(o))):
            if node_price is None:
                continue
            native = node_price / o.gpus
            if (convert := converters.get((o.currency, o.fetched_at))) is None:
                convert = converters[(o.currency, o.fetched_at)] = fx.converter(o.currency, currency, on=o.fetched_at)
            per_gpu_hour = convert(native)
            cells = table[o.gpu].spot if spot else table[o.gpu].on_demand
            best = cells.get(o.provider)
            if best is None or (per_gpu_hour, o.offer_id) < (best.per_gpu_hour, best.offer_id):
                cells[o.provider] = PriceCell(
                    provider=o.provider, gpu=o.gpu, spot=spot, per_gpu_hour=per_gpu_hour, native_per_gpu_hour=native,
                    native_currency=o.currency, offer_id=o.offer_id, node_gpus=o.gpus, basis=_basis(o, spot),
                    fetched_at=o.fetched_at)
    # Biggest memory first, then name: the order people scan a GPU list in.
    prices = sorted((g for g in table.values() if g.on_demand or g.spot), key=lambda g: (-g.spec.memory_gb, g.spec.id))
    return prices, sorted(unlisted)


# How close to its cell's cheapest estimate a row's own estimate must be for its exact price to
# be read. An estimate is a few float operations (unit hours, GPUs, the exchange rate) on prices
# read from their decimals, each off by at most a few parts in 1e16; one part in 1e9 keeps every
# row whose exact price can be the cell's cheapest, or tie with it.
ESTIMATE_TOLERANCE = 1e-9


def gather_prices_table(table: OfferTable, fx: FxTable, currency: str) -> tuple[list[GpuPrices], list[str]]:
    """`gather_prices` over a table's rows, building full offers only for the few rows that can
    be a cell's cheapest (`price_candidates`): the cells, their exact prices and tie-breaks are
    `gather_prices`'s own, worked out on those offers."""
    candidates, unlisted = price_candidates(table, fx, currency)
    prices, _ = gather_prices(table.offers(candidates.tolist()), fx, currency)
    return prices, unlisted


def price_candidates(table: OfferTable, fx: FxTable, currency: str,
                     tolerance: float = ESTIMATE_TOLERANCE) -> tuple[np.ndarray, list[str]]:
    """The rows (in table order) whose price per GPU-hour can be the cheapest of its cell (GPU x
    provider, on-demand or spot), and the GPU ids the catalog does not have.

    Each row's price per GPU-hour in `currency` is estimated in floats from the table's columns,
    exactly as `gather_prices` works it out in decimals (`hour_price` for the offer's kind,
    `interruptible_hour_price` for spot, per GPU, converted at the rate of the price's day);
    a row is a candidate when its estimate is within `tolerance` (relative) of its cell's
    cheapest. A row whose estimate is not a number stays a candidate: it is never dropped unseen.
    """
    gpu_codes, gpus = table.category("gpu")
    provider_codes, providers = table.category("provider")
    unlisted = set()
    listed = np.zeros(max(len(gpus), 1), dtype=bool)
    for i in np.unique(gpu_codes).tolist():
        if gpus[i] is None:
            continue
        try:
            get_gpu(gpus[i])
            listed[i] = True
        except KeyError:
            unlisted.add(gpus[i])
    if not table.n:
        return np.zeros(0, dtype=np.int64), sorted(unlisted)
    per_gpu = _fx_factors(table, fx, currency) / np.asarray(table.gpus, dtype=np.float64)
    # A spot offer has only interruptible options (models.Offer), so an offer is in a cell of a
    # kind when it has an option of that kind, priced by those options (`hour_price`,
    # `interruptible_hour_price`).
    # one small integer per cell (codes number the distinct GPUs and providers): the cells' minima
    # go straight into an array of every possible cell, no sort
    cell_key = gpu_codes.astype(np.int64) * max(len(providers), 1) + provider_codes
    chosen = np.zeros(table.n, dtype=bool)
    for kind in (0, 1):
        rows = np.flatnonzero(table.has_kind(kind) & listed[gpu_codes])
        if not len(rows):
            continue
        estimate = _node_hour_estimate(table, kind)[rows] * per_gpu[rows]
        cell = cell_key[rows]
        cheapest = np.full(len(gpus) * max(len(providers), 1), np.inf)
        np.fmin.at(cheapest, cell, estimate)
        chosen[rows[~(estimate > cheapest[cell] * (1 + tolerance))]] = True
    return np.flatnonzero(chosen), sorted(unlisted)


def _node_hour_estimate(table: OfferTable, kind: int) -> np.ndarray:
    """Per row, `hour_price` of the options of `kind` in floats: the finest unit sold (hour, day,
    week, month, then a reserved term), per hour; NaN for a row with no option of that kind."""
    estimate = np.array(table.hourly[kind], dtype=np.float64)
    month_hours = np.asarray(table.month_hours, dtype=np.float64)
    for column, hours in ((table.day, UNIT_HOURS[PriceUnit.DAY]), (table.week, UNIT_HOURS[PriceUnit.WEEK]),
                          (table.month, month_hours)):
        fill = np.isnan(estimate) & ~np.isnan(column[kind])
        estimate[fill] = (column[kind] / hours)[fill]
    for (k, row), terms in table.terms.items():
        if k == kind and math.isnan(estimate[row]):
            estimate[row] = min(price / (hours or 1) for hours, price in terms)
    return estimate


def _fx_factors(table: OfferTable, fx: FxTable, currency: str) -> np.ndarray:
    """Per row, what one unit of its currency is in `currency` at the rate of its price's day."""
    currency_codes, currencies = table.category("currency")
    day_codes, days = table.category("fetched_at")
    width = max(len(days), 1)
    pair = currency_codes.astype(np.int64) * width + day_codes  # small: codes number the distinct values
    factors = np.zeros(len(currencies) * width)
    for p in np.flatnonzero(np.bincount(pair, minlength=len(factors))).tolist():  # the pairs present
        factors[p] = float(fx.convert(Decimal(1), currencies[p // width], currency, on=days[p % width]))
    return factors[pair]


def pick_chart_gpus(prices: Sequence[GpuPrices], limit: int = CHART_GPUS) -> list[str]:
    """The GPU models sold on demand by the most providers (ties: more memory first)."""
    ranked = sorted((g for g in prices if g.on_demand), key=lambda g: (-len(g.on_demand), -g.spec.memory_gb, g.spec.id))
    return [g.spec.id for g in ranked[:limit]]


def provider_sets(offers: OfferSet, only: Iterable[str] | None = None) -> dict[str, OfferSet]:
    """Each provider's offers as a set of its own, for planning one provider at a time: slices of
    one offer table (`only`: of those providers alone). A provider with no offer left has none.
    A price the whole catalog holds out as suspect (far below every other seller of the GPU) is
    left out here too: planned alone, a provider has no other sellers to be compared with."""
    import numpy as np

    from rentopt.optimizer.suspect import suspect_rows

    table = offers.table()
    kept = np.ones(table.n, dtype=bool)
    kept[list(suspect_rows(table))] = False
    codes, names = table.category("provider")
    wanted = range(len(names)) if only is None else [names.index(p) for p in set(only) if p in names]
    found = {}
    for code in sorted(wanted):
        rows = np.flatnonzero(kept & (codes == code))
        if len(rows):
            found[names[code]] = replace(offers, offers=[], columns=TableColumns(table.take(rows)))
    return found


def quote_request(workload: Workload, currency: str) -> QuoteRequest:
    """The quote a report row prices: the workload's job, its best plan."""
    return QuoteRequest(model=workload.model, setup=TrainingSetup(mode=workload.mode), days=workload.days,
                        tokens=workload.tokens, currency=currency, top=1)


class _Alone:
    """Each provider's offers as a set of its own (`provider_sets`), built when first asked for:
    only a provider without a plan is planned alone, for the reason it has none."""

    def __init__(self, offers: OfferSet):
        self.offers, self._sets = offers, {}

    def get(self, provider: str) -> OfferSet | None:
        if provider not in self._sets:
            self._sets[provider] = provider_sets(self.offers, only=[provider]).get(provider)
        return self._sets[provider]


def price_workload(workload: Workload, offers: OfferSet, providers: Sequence[str], fx: FxTable, currency: str,
                   alone: _Alone | None = None) -> WorkloadJobs:
    """The best plan at each provider, every stage at that provider: one planner pass over all
    the providers' offers (`build_quote(per_provider=True)`; a price the catalog holds out as
    suspect stays out). A provider without a plan is planned alone, for its reason. The report
    shows each plan's total, line items and stages, never its range: the range is not priced."""
    request = quote_request(workload, currency)
    alone = alone or _Alone(offers)
    try:
        found = {plan.stages[0].provider: plan for plan in
                 build_quote(request, offers, fx, list_rejected=False, per_provider=True, ranges=False).plans}
    except NoFeasiblePlan:
        found = {}
    rows = []
    for p in providers:
        if p in found:
            rows.append(JobRow(p, found[p]))
            continue
        mine = alone.get(p)
        if mine is None:
            rows.append(JobRow(p, None, "no offers (every price held out as suspect)"))
            continue
        try:
            quote = build_quote(request, mine, fx, list_rejected=False, ranges=False)
        except NoFeasiblePlan as exc:
            rows.append(JobRow(p, None, short_reason(exc)))
            continue
        rows.append(JobRow(p, quote.plans[0]))
    # As the quote ranks: the known total, and a fully priced plan before one with unknown charges.
    rows.sort(key=lambda r: (r.plan is None, r.plan.total if r.plan else 0, bool(r.plan and r.plan.unknown_charges),
                             r.provider))
    return WorkloadJobs(workload, rows)


def short_reason(exc: NoFeasiblePlan, limit: int = 160) -> str:
    """The binding constraint in one short line.

    >>> short_reason(NoFeasiblePlan("x", ["all 3 offers were rejected: 3 offers by memory", "closest miss: ..."]))
    'all 3 offers were rejected: 3 offers by memory'
    >>> short_reason(NoFeasiblePlan("No feasible plan: over budget. Run with --explain to see rejected offers."))
    'over budget'
    """
    text = exc.reasons[0] if exc.reasons else str(exc)
    text = text.removeprefix("No feasible plan: ")
    text = re.sub(r"\s*Run with --explain.*$", "", text).rstrip(". ")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# Snapshots less than this apart belong to one refresh run: `rentopt refresh` fetches every
# provider at once, and one run lasts seconds to a few minutes (each request times out after
# 20 s, with up to 3 retries; providers/base.py HttpSettings).
RUN_GAP = timedelta(minutes=15)


def history_points_by_key(points: HistoryColumns, fx: FxTable,
                          currency: str) -> dict[tuple[str, str, bool], dict[datetime, Decimal]]:
    """(provider, gpu, spot) -> {fetched_at: min price per GPU-hour over node sizes and currencies},
    each snapshot converted at the exchange rate of its own day. A point in a currency without
    a rate is left out."""
    known = {c: fx.knows(c) for c in set(points.currency)}
    if not all(known.values()):
        points = points.take(i for i, c in enumerate(points.currency) if known[c])
    prices = fx.convert_each(points.min_gpu_hour, points.currency, points.fetched_at, currency)
    out: dict[tuple[str, str, bool], dict[datetime, Decimal]] = defaultdict(dict)
    for provider, gpu, spot, when, price in zip(points.provider, points.gpu, points.spot, points.fetched_at, prices):
        series = out[(provider, gpu, spot)]
        if (best := series.get(when)) is None or price < best:
            series[when] = price
    return out


def refresh_runs(times: Iterable[datetime], gap: timedelta = RUN_GAP) -> dict[datetime, datetime]:
    """Each snapshot time -> the start of its refresh run (times closer than `gap` to the
    previous one belong to the same run).

    >>> t = datetime(2026, 12, 1, 3, 15, tzinfo=timezone.utc)
    >>> runs = refresh_runs([t, t + timedelta(seconds=40), t + timedelta(days=1)])
    >>> sorted({f"{v:%m-%d %H:%M:%S}" for v in runs.values()})
    ['12-01 03:15:00', '12-02 03:15:00']
    """
    runs: dict[datetime, datetime] = {}
    start = previous = None
    for t in sorted(set(times)):
        if previous is None or t - previous >= gap:
            start = t
        runs[t] = start  # type: ignore[assignment]
        previous = t
    return runs


def history_series(by_key: dict[tuple[str, str, bool], dict[datetime, Decimal]],
                   window_start: datetime) -> dict[str, list[HistorySeries]]:
    """The points inside the window, one per refresh run (its start time), as one series per
    GPU x provider x kind, grouped by GPU."""
    runs = refresh_runs(t for series in by_key.values() for t in series)
    out: dict[str, list[HistorySeries]] = defaultdict(list)
    for (provider, gpu, spot), series in sorted(by_key.items()):
        bucketed: dict[datetime, Decimal] = {}
        for t, p in series.items():
            run = runs[t]
            if run >= window_start and (run not in bucketed or p < bucketed[run]):
                bucketed[run] = p
        if bucketed:
            out[gpu].append(HistorySeries(gpu, provider, spot, tuple(sorted(bucketed.items()))))
    return dict(out)


def price_moves(by_key: dict[tuple[str, str, bool], dict[datetime, Decimal]],
                previous: dict[str, list[datetime]], limit: int = TOP_MOVES) -> list[PriceMove]:
    """Per GPU x provider: min price at the provider's previous refresh vs its latest, biggest % first."""
    moves = []
    for (provider, gpu, spot), series in by_key.items():
        times = previous.get(provider, [])
        if len(times) < 2:
            continue
        before, after = series.get(times[0]), series.get(times[1])
        if before is None or after is None or before == after or before <= 0:
            continue
        moves.append(PriceMove(provider, gpu, spot, before, after, times[0], times[1]))
    moves.sort(key=lambda m: (-abs(m.change_pct), m.provider, m.gpu, m.spot))
    return moves[:limit]


# --------------------------------------------------------------------------------------------
# Small formatting helpers (display only: the numbers themselves stay Decimal)


def significant(amount: Decimal, digits: int = 3) -> str:
    """A small unit price to `digits` significant digits.

    >>> significant(Decimal("0.0311250")), significant(Decimal("0.002517")), significant(Decimal("12.345"))
    ('0.0311', '0.00252', '12.3')
    """
    if amount == 0:
        return "0"
    quantum = Decimal(1).scaleb(min(0, amount.adjusted() - digits + 1))
    return f"{amount.quantize(quantum):f}"


def sparkline(values: Sequence[Decimal]) -> str:
    """A price trend in eight block heights (flat when the price never moved).

    >>> sparkline([Decimal(1), Decimal(2), Decimal(3)]), sparkline([Decimal(2), Decimal(2)])
    ('▁▅█', '▄▄')
    """
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARK_BLOCKS[3] * len(values)
    top = len(SPARK_BLOCKS) - 1
    return "".join(SPARK_BLOCKS[int(((v - lo) / (hi - lo) * top).to_integral_value())] for v in values)


def when(t: datetime | None) -> str:
    return t.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if t else "never"


def age_text(then: datetime | None, now: datetime) -> str:
    """How old, in words ("-" when never).

    >>> age_text(datetime(2026, 11, 1, tzinfo=timezone.utc), datetime(2026, 11, 3, 6, tzinfo=timezone.utc))
    '2 days'
    """
    return "-" if then is None else age_words(then, now)


def pct(d: Decimal) -> str:
    """A signed percentage with one decimal.

    >>> pct(Decimal("-12.345")), pct(Decimal("3"))
    ('-12.3 %', '+3.0 %')
    """
    return f"{d.quantize(Decimal('0.1')):+} %"


def _count(n: float) -> str:
    """2e9 -> '2B'.

    >>> _count(2e9), _count(5e8), _count(1.5e12), _count(1234), _count(999)
    ('2B', '500M', '1.5T', '1.234K', '999')
    """
    for suffix, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:g}{suffix}"
    return f"{n:g}"


BASIS_WORDS = {PriceUnit.DAY: "daily", PriceUnit.WEEK: "weekly", PriceUnit.MONTH: "monthly", PriceUnit.TERM: "reserved-term"}


def _basis_note(cell: PriceCell) -> str:
    return f"from a {BASIS_WORDS[cell.basis]} price" if cell.basis in BASIS_WORDS else ""


def _offer_text(cell: PriceCell, currency: str) -> str:
    """The offer behind a price: its node size, and its own price when it was converted."""
    extra = [f"{cell.node_gpus}-GPU node"]
    if cell.native_currency != currency:
        extra.append(f"{unit_price(cell.native_per_gpu_hour)} {cell.native_currency}/GPU-h")
    if b := _basis_note(cell):
        extra.append(b)
    return f"{cell.offer_id} ({', '.join(extra)})"


def _fx_lines(report: Report) -> list[str]:
    if not report.fx:
        return [f"All prices were quoted in {report.currency}: no conversion."]
    return [f"1 USD = {r.per_usd} {r.currency} (as of {r.as_of}; {r.source})" for r in report.fx]


def _line_item_total(plan: Plan, key: str) -> Decimal:
    """The known part of one line item; `_unknown_items` says which items have an unknown part
    (the plan's own line_items hold null for those)."""
    whole = getattr(plan.line_items, key)
    if whole is not None:
        return whole
    return sum((line.cost for st in plan.stages for line in st.billing if line.what == key and line.cost is not None),
               Decimal(0))


def _unknown_items(plan: Plan) -> set[str]:
    """The line items with a charge whose price is unknown (so not in the known amount)."""
    return {line.what for st in plan.stages for line in st.billing if line.cost is None}


def _line_item_text(plan: Plan, key: str, ccy: str) -> str:
    known = f"{round_money(_line_item_total(plan, key), ccy):,}"
    return known + " + unknown" if key in _unknown_items(plan) else known


LINE_ITEMS = (("compute", "compute"), ("storage_running", "storage running"), ("storage_stopped", "storage stopped"),
              ("egress", "egress"), ("ingress", "ingress"))


def _chosen(row: JobRow) -> str:
    t = row.train
    if t is None:
        return "-"
    nodes = f" on {t.nodes} nodes" if t.nodes > 1 else ""
    return f"{t.gpus} x {t.gpu}{nodes}, {t.layout}"


# --------------------------------------------------------------------------------------------
# Tables: the same rows for both formats (each renderer escapes every cell its own way)


@dataclass
class Table:
    headers: list[str]
    rows: list[list[object]]
    numeric: frozenset[int] = frozenset()  # right-aligned columns
    row_classes: list[str] = field(default_factory=list)  # HTML only: "best", "group-start", "stale"


SECTIONS = (("freshness", "Provider freshness"), ("prices", "Cheapest price per GPU-hour"),
            ("jobs", "Whole-job cost"), ("history", "Price history"), ("notes", "How to read this report"))


def freshness_table(report: Report) -> Table:
    rows, classes = [], []
    for f in report.freshness:
        success = when(f.last_success_at) if f.last_success_at else ("never" if report.origin == "store" else "-")
        rows.append([f.provider, f.origin, f.offers, when(f.fetched_at), age_text(f.fetched_at, report.generated_at),
                     success, "yes" if f.stale else "no", _error_text(f), ", ".join(f.unknown_gpus) or "-"])
        classes.append("stale" if f.stale else "")
    return Table(["provider", "origin", "offers", "oldest price from", "age", "last success", "stale", "last error",
                  "GPU names not in the catalog"], rows, frozenset({2}), classes)


def price_table(report: Report) -> Table:
    ccy = report.currency
    rows, classes = [], []
    for g in report.prices:
        best = min((c.per_gpu_hour for c in g.on_demand.values()), default=None)
        for i, p in enumerate(g.providers):
            od, sp = g.on_demand.get(p), g.spot.get(p)
            per_tf = g.per_tflops_hour(od) if od else None
            shown = od or sp
            assert shown is not None  # `providers` lists only providers with a price
            rows.append([g.spec.id, f"{g.spec.memory_gb:g}", f"{g.tflops:g} {g.tflops_kind}" if g.tflops else "n/a", p,
                         unit_price(od.per_gpu_hour) if od else "-", significant(g.per_gb_hour(od)) if od else "-",
                         significant(per_tf) if per_tf is not None else "-",
                         unit_price(sp.per_gpu_hour) if sp else "-", _offer_text(shown, ccy)])
            classes.append(" ".join(c for c in ("group-start" if i == 0 else "",
                                                "best" if od and od.per_gpu_hour == best else "") if c))
    return Table(["GPU", "GB", "dense TFLOPS", "provider", f"on-demand {ccy}/GPU-h", f"{ccy}/GB-h", f"{ccy}/TFLOPS-h",
                  f"spot {ccy}/GPU-h", "cheapest offer"], rows, frozenset({1, 2, 4, 5, 6, 7}), classes)


def job_table(report: Report, jobs: WorkloadJobs) -> Table:
    ccy = report.currency
    rows: list[list[object]] = []
    for r in jobs.feasible:
        assert r.plan is not None
        rows.append([r.provider, cost_text(r.plan.total, r.plan.unknown_charges, ccy),
                     *(_line_item_text(r.plan, k, ccy) for k, _ in LINE_ITEMS),
                     _chosen(r), r.train.offer_id if r.train else "-"])
    return Table(["provider", "total", *(f"{label} ({ccy})" for _, label in LINE_ITEMS), "GPUs, layout", "offer"],
                 rows, frozenset({1, 2, 3, 4, 5, 6}))


def history_table(report: Report) -> Table:
    rows: list[list[object]] = []
    # A series' first, latest, least and greatest price are often one number (every series is,
    # after a single refresh): each distinct number is written once.
    written: dict[str, str] = {}

    def price(d: Decimal) -> str:
        key = str(d)
        if (text := written.get(key)) is None:
            text = written[key] = unit_price(d)
        return text

    for g in report.prices:
        for s in report.history.get(g.spec.id, []):
            values = [p for _, p in s.points]
            rows.append([s.gpu, s.provider, "spot" if s.spot else "on-demand", f"{s.points[0][0]:%Y-%m-%d}",
                         len(values), price(values[0]), price(values[-1]), price(min(values)), price(max(values)),
                         sparkline(values)])
    return Table(["GPU", "provider", "kind", "since", "refreshes", "first", "latest", "min", "max", "trend"], rows,
                 frozenset({4, 5, 6, 7, 8}))


def moves_table(report: Report) -> Table:
    ccy = report.currency
    return Table(["provider", "GPU", "kind", f"previous {ccy}/GPU-h", f"latest {ccy}/GPU-h", "change",
                  "previous refresh", "latest refresh"],
                 [[m.provider, m.gpu, "spot" if m.spot else "on-demand", unit_price(m.previous), unit_price(m.latest),
                   pct(m.change_pct), when(m.previous_at), when(m.latest_at)] for m in report.moves],
                 frozenset({3, 4, 5}))


def _error_text(f: Freshness) -> str:
    return f"{when(f.last_error_at)}: {f.last_error}" if f.last_error else "-"


def _prices_intro(report: Report) -> str:
    return (f"The cheapest offer of each GPU model at each provider, per GPU-hour in {report.currency} (a node's "
            "price divided by its GPUs). Per GB-hour divides by the GPU's memory, per TFLOPS-hour by its dense "
            "peak (BF16; FP16 for cards without BF16). Spot is interruptible capacity, shown apart. A price "
            "marked 'from a monthly price' is that rate spread over its hours: you pay for the whole month.")


def _jobs_intro(report: Report) -> str:
    return (f"What a whole job costs at each provider, in {report.currency}: the best plan the planner finds on "
            "that provider's offers alone (a 4-hour validation run, training, storage while it runs, exporting "
            "checkpoints), at on-demand prices. Cheapest first.")


def _history_intro(report: Report) -> str:
    return (f"Min price per GPU-hour ({report.currency}) at each refresh over the last {report.since_text}. "
            "Spot here counts separate spot offers (hyperscalers); spot sold as an option on an on-demand offer "
            "(RunPod, Vast) is in the price table only.")


def _no_moves(report: Report) -> str:
    if report.origin == "store":
        return "No price moved between each provider's last two refreshes."
    return "None yet: moves appear from the second `rentopt refresh` on."


def _method_lines(report: Report) -> list[str]:
    return [
        f"Prices come from the {report.label}; the freshness table says how old each provider's are. "
        "A stale provider's last refresh failed: its last good prices are shown.",
        "Unknown or zero prices count as unknown, never as free. Offers whose GPU the catalog does not know "
        "are named under freshness and left out of the GPU tables.",
        "Conversions use the ECB euro reference rate of each price's day (or the last business day before it), "
        "or your --fx / config rates; history converts each snapshot at its own day's rate.",
        "Whole-job plans use default job settings (sequence 2048, micro-batch 1, gradient checkpointing, "
        "10 GB of data, 2 checkpoints kept); 'rentopt quote' prices a job with your own settings.",
    ]


# --------------------------------------------------------------------------------------------
# Markdown


def _md_table(table: Table) -> list[str]:
    def row(cells: Iterable[object]) -> str:
        return "| " + " | ".join(md(c) for c in cells) + " |"

    align = ["---:" if i in table.numeric else "---" for i in range(len(table.headers))]
    return [row(table.headers), "|" + "|".join(align) + "|", *(row(r) for r in table.rows)]


def _anchor(title: str) -> str:
    """GitHub-style heading anchor.

    >>> _anchor("Cheapest price per GPU-hour")
    'cheapest-price-per-gpu-hour'
    """
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).replace(" ", "-")


def render_markdown(report: Report) -> str:
    out = ["# GPU rental: provider comparison", "",
           f"Generated {when(report.generated_at)} by rentopt {__version__}. Prices from the {md(report.label)}.", "",
           f"Amounts in **{report.currency}**. Exchange rates used:", ""]
    out += [f"- {md(line)}" for line in _fx_lines(report)] + [""]
    if report.filter_text:
        out += [f"Filters: {md(report.filter_text)}", ""]
    if report.notes:
        out += ["Notes:", ""] + [f"- {md(n)}" for n in report.notes] + [""]
    out += ["Contents:", ""] + [f"{i}. [{title}](#{_anchor(title)})" for i, (_, title) in enumerate(SECTIONS, 1)]

    out += ["", f"## {SECTIONS[0][1]}", "", *_md_table(freshness_table(report))]
    out += ["", f"## {SECTIONS[1][1]}", "", _prices_intro(report), "", *_md_table(price_table(report))]

    out += ["", f"## {SECTIONS[2][1]}", "", _jobs_intro(report), ""]
    for jobs in report.jobs:
        out += [f"### {md(jobs.workload.label)}", ""]
        if jobs.workload.model.notes:
            out += [f"_{md('; '.join(jobs.workload.model.notes))}_", ""]
        if jobs.feasible:
            out += _md_table(job_table(report, jobs))
        else:
            out.append("No provider can run this job with the offers at hand.")
        if jobs.infeasible:
            out += ["", "Cannot run it:", ""] + [f"- **{md(r.provider)}**: {md(r.reason)}" for r in jobs.infeasible]
        out.append("")

    out += [f"## {SECTIONS[3][1]}", ""]
    if report.history_note:
        out += [report.history_note, ""]
    history = history_table(report)
    if history.rows:
        out += [_history_intro(report), "", *_md_table(history)]
    elif not report.history_note:
        out.append(f"No stored snapshots in the last {md(report.since_text)}.")
    out += ["", "### Largest price moves since the previous refresh", ""]
    out += _md_table(moves_table(report)) if report.moves else [_no_moves(report)]

    out += ["", f"## {SECTIONS[4][1]}", ""] + [f"- {md(line)}" for line in _method_lines(report)]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# Charts (drawing lives in charts.py)

LINE_ITEM_COLORS = {"compute": "#0072B2", "storage_running": "#E69F00", "storage_stopped": "#CC79A7",
                    "egress": "#D55E00", "ingress": "#009E73"}

def provider_colors(providers: Sequence[str]) -> dict[str, str]:
    return {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(sorted(providers))}


@dataclass(frozen=True)
class BarFigure:
    """One bar chart of the report, drawn twice (wide for desktops and print, narrow for phones:
    the page's CSS shows one), with the caption that says which scale it uses and why."""

    chart_id: str
    title: str
    axis_label: str
    groups: list[tuple[str, list[Bar]]]
    legend: list[tuple[str, str, bool]]
    lead: str  # the caption's first sentence ("" for none)
    amount_text: Callable[[float], str]  # a bar's amount as the caption states it

    @property
    def totals(self) -> list[float]:
        return [sum(v for v, _, _ in b.segments) for _, bars in self.groups for b in bars]

    def caption(self) -> str:
        positive = [v for v in self.totals if v > 0]
        scale = bar_scale(self.totals, 1.0)
        words = scale_words(scale, self.amount_text(min(positive)), self.amount_text(max(positive))) \
            if positive else "No amounts to draw."
        return f"{self.lead} {words}".strip()

    def svg(self, narrow: bool = False) -> str:
        chart_id = f"narrow-{self.chart_id}" if narrow else self.chart_id
        return bar_chart(chart_id, self.title, self.axis_label, self.groups, self.legend, narrow=narrow)

    def html(self) -> str:
        return (f'<figure><div class="chart-wide">{self.svg()}</div><div class="chart-narrow">{self.svg(narrow=True)}'
                f"</div><figcaption>{esc(self.caption())}</figcaption></figure>")


def price_chart(report: Report) -> BarFigure | None:
    colors = provider_colors(report.providers)
    by_id = {g.spec.id: g for g in report.prices}
    groups = []
    for gpu in report.chart_gpus:
        cells = sorted(by_id[gpu].on_demand.values(), key=lambda c: (c.per_gpu_hour, c.provider))
        groups.append((gpu, [Bar(c.provider, [(float(c.per_gpu_hour), colors[c.provider],
                                               f"{c.provider} {gpu}: {unit_price(c.per_gpu_hour)} {report.currency}"
                                               f"/GPU-h ({_offer_text(c, report.currency)})")],
                                 unit_price(c.per_gpu_hour)) for c in cells]))
    if not groups:
        return None
    used = sorted({b.label for _, bars in groups for b in bars})
    return BarFigure("chart-prices", "Cheapest on-demand price per GPU-hour, by provider",
                     f"{report.currency} per GPU-hour (cheapest on-demand offer)", groups,
                     [(p, colors[p], False) for p in used],
                     "The GPU models sold by the most providers; the table lists every model.",
                     lambda v: f"{unit_price(Decimal(repr(v)))} {report.currency}/GPU-h")


def job_chart(report: Report, index: int, jobs: WorkloadJobs) -> BarFigure:
    ccy = report.currency
    bars = []
    for r in jobs.rows:
        if r.plan is None:
            bars.append(Bar(r.provider, [], "", f"cannot run: {r.reason}"))
            continue
        segments = [(float(_line_item_total(r.plan, k)), LINE_ITEM_COLORS[k],
                     f"{label}: {money(_line_item_total(r.plan, k), ccy)}")
                    for k, label in LINE_ITEMS if _line_item_total(r.plan, k) > 0]
        bars.append(Bar(r.provider, segments, cost_text(r.plan.total, r.plan.unknown_charges, ccy)))
    legend = [(label, LINE_ITEM_COLORS[k], False) for k, label in LINE_ITEMS]
    return BarFigure(f"chart-job-{index}", f"Whole-job cost: {jobs.workload.label}",
                     f"total job cost ({ccy}), stacked by line item", [("", bars)], legend, "",
                     lambda v: money(Decimal(repr(v)), ccy))


def history_charts(report: Report) -> list[str]:
    colors = provider_colors(report.providers)
    charts = []
    for i, gpu in enumerate(report.chart_gpus):
        series = [(f"{s.provider}{' (spot)' if s.spot else ''}", colors[s.provider], s.spot,
                   [(t, float(v)) for t, v in s.points]) for s in report.history.get(gpu, [])]
        if series:
            charts.append(line_chart(f"chart-history-{i}", gpu, f"{report.currency} per GPU-hour (min)", series))
    return charts


# --------------------------------------------------------------------------------------------
# HTML

CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif;
       color: #1d1d1f; max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; background: #fff; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 20px; margin: 36px 0 10px; padding-bottom: 4px; border-bottom: 2px solid #0072B2; }
h3 { font-size: 16px; margin: 24px 0 8px; }
.meta { color: #444; margin: 4px 0; }
.note { background: #fff6e0; border-left: 4px solid #E69F00; padding: 6px 10px; margin: 8px 0; }
nav.toc { background: #f4f6f8; padding: 8px 16px; border-radius: 6px; display: inline-block; margin: 12px 0; }
nav.toc ol { margin: 4px 0; padding-left: 20px; }
table { border-collapse: collapse; margin: 8px 0 14px; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; vertical-align: top; }
th { background: #f4f6f8; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.best td { font-weight: bold; }
tr.group-start td { border-top: 2px solid #9aa4ad; }
.stale { color: #b42318; font-weight: bold; }
.muted { color: #666; }
figure { margin: 10px 0 18px; }
figcaption { color: #555; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
svg { max-width: 100%; height: auto; background: #fff; }
svg text { fill: #1d1d1f; }
/* Wide tables scroll inside their own box; the page itself never scrolls sideways. */
.table-scroll { overflow-x: auto; max-width: 100%; margin: 8px 0 14px; }
.table-scroll > table { margin: 0; }
p, li, .meta, .note, figcaption, td { overflow-wrap: anywhere; }
td:first-child { overflow-wrap: normal; }
/* Each bar chart comes drawn twice: wide (labels beside the bars) and narrow (labels above,
   text at 1:1 on a phone); the screen's width picks one. Print takes the wide one. */
.chart-narrow { display: none; }
@media screen and (max-width: 640px) {
  body { padding: 12px 12px 40px; }
  h1 { font-size: 22px; }
  h2 { font-size: 18px; margin-top: 28px; }
  .chart-wide { display: none; }
  .chart-narrow { display: block; }
  /* a table as wide as its text (a long cell wraps at 18em), scrolled sideways, rather than
     columns squeezed to a word each */
  .table-scroll > table { width: max-content; }
  th, td { max-width: 18em; }
  nav.toc { display: block; }
}
@media print {
  body { max-width: none; padding: 0; font-size: 11px; }
  h2 { break-after: avoid; }
  figure, table, .charts > svg { break-inside: avoid; }
  nav.toc { display: none; }
  .table-scroll { overflow: visible; }
  a { color: inherit; text-decoration: none; }
}
"""


def _table(table: Table) -> str:
    def cell(tag: str, i: int, value: object) -> str:
        return f'<{tag} class="num">{esc(value)}</{tag}>' if i in table.numeric else f"<{tag}>{esc(value)}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(table.headers))
    body = []
    for n, row in enumerate(table.rows):
        cls = table.row_classes[n] if n < len(table.row_classes) else ""
        body.append(f'<tr class="{cls}">' if cls else "<tr>")
        body.append("".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>")
    return f'<div class="table-scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def render_html(report: Report) -> str:
    toc = "".join(f'<li><a href="#{key}">{esc(title)}</a></li>' for key, title in SECTIONS)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>GPU rental provider comparison, {report.generated_at:%Y-%m-%d}</title>",
           f"<style>{CSS}</style></head><body>",
           "<header><h1>GPU rental: provider comparison</h1>",
           f'<p class="meta">Generated {esc(when(report.generated_at))} by rentopt {esc(__version__)}. '
           f"Prices from the {esc(report.label)}.</p>",
           f'<p class="meta">Amounts in <strong>{esc(report.currency)}</strong>. Exchange rates: '
           + "; ".join(esc(line) for line in _fx_lines(report)) + "</p>"]
    if report.filter_text:
        out.append(f'<p class="meta filters"><strong>Filters</strong>: {esc(report.filter_text)}</p>')
    out += [f'<p class="note">{esc(n)}</p>' for n in report.notes]
    out.append(f'<nav class="toc"><strong>Contents</strong><ol>{toc}</ol></nav></header>')

    out.append(f'<section id="freshness"><h2>{SECTIONS[0][1]}</h2>{_table(freshness_table(report))}</section>')

    out.append(f'<section id="prices"><h2>{SECTIONS[1][1]}</h2><p>{esc(_prices_intro(report))}</p>')
    if chart := price_chart(report):
        out.append(chart.html())
    out.append(_table(price_table(report)))
    out.append('<p class="muted">Bold: the cheapest on-demand provider for that GPU.</p></section>')

    out.append(f'<section id="jobs"><h2>{SECTIONS[2][1]}</h2><p>{esc(_jobs_intro(report))}</p>')
    for i, jobs in enumerate(report.jobs):
        out.append(f"<h3>{esc(jobs.workload.label)}</h3>")
        if jobs.workload.model.notes:
            out.append(f'<p class="muted">{esc("; ".join(jobs.workload.model.notes))}</p>')
        out.append(job_chart(report, i, jobs).html())
        if jobs.feasible:
            out.append(_table(job_table(report, jobs)))
        if jobs.infeasible:
            items = "".join(f"<li><strong>{esc(r.provider)}</strong>: {esc(r.reason)}</li>" for r in jobs.infeasible)
            out.append(f"<p>Cannot run it:</p><ul>{items}</ul>")
    out.append("</section>")

    out.append(f'<section id="history"><h2>{SECTIONS[3][1]}</h2>')
    if report.history_note:
        out.append(f"<p>{esc(report.history_note)}</p>")
    history = history_table(report)
    if history.rows:
        out.append(f"<p>{esc(_history_intro(report))} Charts: the GPU models most providers sell; spot dashed.</p>")
        out.append('<div class="charts">' + "".join(history_charts(report)) + "</div>")
        out.append(_table(history))
    elif not report.history_note:
        out.append(f"<p>No stored snapshots in the last {esc(report.since_text)}.</p>")
    out.append("<h3>Largest price moves since the previous refresh</h3>")
    out.append(_table(moves_table(report)) if report.moves else f"<p>{esc(_no_moves(report))}</p>")
    out.append("</section>")

    out.append(f'<section id="notes"><h2>{SECTIONS[4][1]}</h2><ul>')
    out += [f"<li>{esc(line)}</li>" for line in _method_lines(report)]
    out.append("</ul></section></body></html>")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# JSON: what the Markdown says, as data (amounts as exact decimal strings, times in ISO 8601 UTC)


def _iso(t: datetime | None) -> str | None:
    return t.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if t else None


def _dec(d: Decimal | None) -> str | None:
    return None if d is None else str(d)


def _price_json(g: GpuPrices, cell: PriceCell | None) -> dict | None:
    if cell is None:
        return None
    per_tf = g.per_tflops_hour(cell)
    return {"per_gpu_hour": _dec(cell.per_gpu_hour), "per_gb_hour": _dec(g.per_gb_hour(cell)),
            "per_tflops_hour": _dec(per_tf), "offer_id": cell.offer_id, "node_gpus": cell.node_gpus,
            "native_per_gpu_hour": _dec(cell.native_per_gpu_hour), "native_currency": cell.native_currency,
            "basis": cell.basis.value, "fetched_at": _iso(cell.fetched_at)}


def _job_json(row: JobRow) -> dict:
    if row.plan is None:
        return {"provider": row.provider, "feasible": False, "reason": row.reason}
    t = row.train
    return {"provider": row.provider, "feasible": True, "total": _dec(row.plan.total),
            "line_items": {k: None if getattr(row.plan.line_items, k) is None else _dec(_line_item_total(row.plan, k))
                           for k, _ in LINE_ITEMS},
            "unknown_charges": list(row.plan.unknown_charges),
            "unknown_line_items": [k for k, _ in LINE_ITEMS if k in _unknown_items(row.plan)],
            "gpu": t.gpu if t else None, "gpus": t.gpus if t else None, "nodes": t.nodes if t else None,
            "layout": t.layout if t else None, "offer_id": t.offer_id if t else None}


def report_data(report: Report) -> dict:
    """The report as one JSON-ready dict: the same sections and numbers as the Markdown."""
    return {
        "generated_at": _iso(report.generated_at), "rentopt_version": __version__, "origin": report.origin,
        "prices_from": report.label, "currency": report.currency,
        "fx": [r.model_dump(mode="json") for r in report.fx], "notes": list(report.notes),
        "filters": {"gpus": list(report.gpus), "min_gpu_memory_gb": report.min_gpu_memory_gb,
                    "text": report.filter_text or None},
        "freshness": [{"provider": f.provider, "origin": f.origin, "offers": f.offers,
                       "oldest_price_at": _iso(f.fetched_at), "last_success_at": _iso(f.last_success_at),
                       "stale": f.stale, "last_error": f.last_error, "last_error_at": _iso(f.last_error_at),
                       "unknown_gpus": list(f.unknown_gpus)} for f in report.freshness],
        "prices": [{"gpu": g.spec.id, "memory_gb": g.spec.memory_gb, "dense_tflops": g.tflops or None,
                    "tflops_kind": g.tflops_kind, "provider": p, "on_demand": _price_json(g, g.on_demand.get(p)),
                    "spot": _price_json(g, g.spot.get(p))} for g in report.prices for p in g.providers],
        "jobs": [{"workload": {"text": j.workload.text, "label": j.workload.label, "model": j.workload.model.name,
                               "mode": j.workload.mode, "days": _dec(j.workload.days), "tokens": j.workload.tokens},
                  "providers": [_job_json(r) for r in j.rows]} for j in report.jobs],
        "history": {"since": report.since_text, "note": report.history_note,
                    "series": [{"gpu": s.gpu, "provider": s.provider, "spot": s.spot,
                                "points": [{"at": _iso(t), "min_per_gpu_hour": _dec(v)} for t, v in s.points]}
                               for g in report.prices for s in report.history.get(g.spec.id, [])],
                    "moves": [{"provider": m.provider, "gpu": m.gpu, "spot": m.spot, "previous": _dec(m.previous),
                               "latest": _dec(m.latest), "change_pct": _dec(m.change_pct.quantize(Decimal("0.1"))),
                               "previous_at": _iso(m.previous_at), "latest_at": _iso(m.latest_at)}
                              for m in report.moves]},
    }


def render_json(report: Report) -> str:
    import json

    return json.dumps(report_data(report), indent=2, ensure_ascii=False) + "\n"


def render(report: Report, fmt: Format) -> str:
    if fmt == "json":
        return render_json(report)
    return render_html(report) if fmt == "html" else render_markdown(report)


def write_report(path: Path, text: str) -> None:
    """Write the report file atomically (paths.write_atomic: a full disk leaves the previous
    file as it was); a path that cannot be written is the user's to fix."""
    from rentopt.optimizer.paths import write_atomic

    try:
        write_atomic(path, text.encode("utf-8"))
    except OSError as exc:
        raise InputError(f"cannot write the report to {path}: {exc.strerror or exc}; choose another -o path") from None
