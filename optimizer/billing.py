"""Billing: the one owner of every pricing rule. Nothing else in rentopt prices anything.

What it knows, and where each rule is written (once):

- **Price options** (`rental_pricing`): an offer's hourly price is metered time, billed in granules
  of `billing_granularity_s` with a minimum charge `billing_minimum_s` per session; day, week,
  month (the provider's `month_hours`) and reserved-term prices are prepaid blocks. Prices are
  converted into the quote currency at the exchange rate of the price's own day (the offer's
  fetched_at) and quantised to 1e-6 of it.
- **The cheapest cover** (`cover_in_units`, `cheapest_cover`): the exact cheapest mix of blocks
  and metered time for a span of running time (one month + 15 days vs two months), by a bounded
  search, no solver.
- **Disk and transfers** (`storage_line`, `transfer_line`): disk by the GB-month, prorated by the
  hour, billed only above the disk the price includes (`free_disk_gb`); egress and ingress by
  the GB. An unknown price is carried as unknown (cost None), never as 0.
- **A lease** (`price_lease`): consecutive stages on the same instance -- validate, stop over the
  idle gap, train, export -- are ONE rental. Prepaid blocks are consumed by the wall clock and
  carry across the stages and the gap: a month bought at validation covers a short gap and the
  training run (seed 004's 8 x RTX 4090 node: a 4 h validation and 10 days of training fit in one
  7,920 CNY month). Metered time is billed per session.
- **The platforms' stop rules** (typed on the Offer): `stopped_bills` says what a stopped
  instance keeps paying -- "storage" (compute stops, the disk keeps billing: the seeds' "Stop keeps
  charging for disk; only Destroy stops all billing"), "everything" (JYGPU's rented nodes bill in
  full while stopped, so the gap is running time) or "nothing"; `stopped_max_days` is the
  retention after which a stopped instance is released (AutoDL: 15 days), past which stopping is
  not an option; the host's maximum rental bounds a lease.
- **Stop versus destroy** (`idle_choice`): decided on known money only; when the difference rests
  on an unknown price the fully priced option is kept and the other is shown, with the price at
  which it would win.
- **The plan** (`price_plan`): the exact bill of a Choice (validation or none, idle choice,
  training), line by line, with its unknown charges; and `use_bounds` / `lease_bounds` /
  `idle_bounds`, the bounds the solver prunes with: the exact covers' cost, open only by the
  rounding of the compute lines, without building a bill. Every cost the solver compares comes
  from here.

Rounding: every billing line's cost is rounded half-up to the quote currency's minor unit (a
provider's invoice does the same), and a bill's total is the sum of its lines, so a JSON total
always equals the sum of the amounts printed under it. Unit prices keep the 1e-6 grid.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from decimal import ROUND_FLOOR, ROUND_HALF_UP, Decimal
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Literal, NamedTuple

from rentopt.optimizer.currency import FxTable, round_money
from rentopt.optimizer.models import UNIT_HOURS, Offer, PriceUnit, StageKind

__all__ = [
    "Block", "RentalPricing", "IntegerPricing", "Cover", "Terms", "Use", "Line", "StageBill", "Choice", "PlanBill",
    "Bounds", "IdleOption", "QUANTUM", "SCALE", "SECONDS_PER_HOUR", "quantize_money", "round_money",
    "rental_pricing", "in_quote_currency", "offer_terms", "seconds_to_cover", "billed_metered_seconds", "cover_in_units",
    "cheapest_cover", "cover_alternatives", "explain_cover", "cover_notes", "lease_cover_notes", "storage_line", "transfer_line",
    "price_alone", "price_lease", "lease_refusal", "idle_choice", "price_plan", "use_bounds", "lease_bounds", "idle_bounds",
    "rounding_slack",
]

SECONDS_PER_HOUR = 3600
QUANTUM = Decimal("0.000001")  # prices are quantised to 1e-6 of the quote currency
MICROS = 10**6
SCALE = SECONDS_PER_HOUR * MICROS  # integer units per currency unit: per-second metering stays exact
LINE_ROUNDING = 8  # at most this many lines per stage are rounded: what bounds must allow for

Idle = Literal["stop", "destroy", "continue"]


def quantize_money(amount: Decimal) -> Decimal:
    """Round to 1e-6 of a currency unit (half up): the grid every unit price lives on.

    >>> quantize_money(Decimal("7920") / Decimal("7.279"))
    Decimal('1088.061547')
    """
    return amount.quantize(QUANTUM, rounding=ROUND_HALF_UP)


def _to_decimal(value: Fraction) -> Decimal:
    """An exact Fraction as Decimal: exact when it terminates, else 28 significant digits."""
    return Decimal(value.numerator) / Decimal(value.denominator)


# --------------------------------------------------------------------------------------------
# Pricing of one rental: blocks and metered time


@dataclass(frozen=True)
class Block:
    """A prepaid block: `price` buys `hours` of the whole rental (all nodes), in the quote currency."""

    label: str
    unit: PriceUnit
    hours: int
    price: Decimal

    def __post_init__(self) -> None:
        if self.hours <= 0:
            raise ValueError(f"block {self.label!r}: hours must be positive, got {self.hours}")
        if not self.price > 0:
            raise ValueError(f"block {self.label!r}: price must be positive (unknown prices are not blocks)")


@dataclass(frozen=True)
class RentalPricing:
    """Every way to pay for one rental's running time, already in the quote currency and x nodes."""

    metered_hourly: Decimal | None
    granularity_s: int = 1
    minimum_s: int = 0
    blocks: tuple[Block, ...] = ()

    def __post_init__(self) -> None:
        if self.metered_hourly is not None and not self.metered_hourly > 0:
            raise ValueError("metered_hourly must be positive or None (None: no hourly option)")
        if self.granularity_s < 1 or self.minimum_s < 0:
            raise ValueError("granularity_s must be >= 1 and minimum_s >= 0")
        if self.metered_hourly is None and not self.blocks:
            raise ValueError("a rental needs an hourly price or at least one prepaid block")
        labels = [b.label for b in self.blocks]
        if len(set(labels)) != len(labels):
            raise ValueError(f"block labels must be unique, got {labels}")

    def block(self, label: str) -> Block | None:
        return next((b for b in self.blocks if b.label == label), None)

    @cached_property
    def units(self) -> IntegerPricing:
        """This pricing in exact integers (see IntegerPricing); computed once."""
        return IntegerPricing.of(self)


def seconds_to_cover(hours: Decimal) -> int:
    """Whole seconds of running time to pay for: `hours` rounded up to the second.

    >>> seconds_to_cover(Decimal("1.0001"))
    3601
    """
    return max(0, math.ceil(hours * SECONDS_PER_HOUR))


def billed_metered_seconds(granularity_s: int, minimum_s: int, used_s: int) -> int:
    """Seconds billed for `used_s` seconds of metered time: whole granules, at least the minimum.

    >>> billed_metered_seconds(60, 0, 61), billed_metered_seconds(1, 60, 10), billed_metered_seconds(3600, 0, 0)
    (120, 60, 0)
    """
    if used_s <= 0:
        return 0
    return max(minimum_s, -(-used_s // granularity_s) * granularity_s)


def _decimal_scale(values: Sequence[Decimal]) -> int:
    """Smallest k >= 6 such that every value x 10^k is an integer.

    >>> _decimal_scale([Decimal("7920"), Decimal("0.123456")]), _decimal_scale([Decimal("1.0000001")])
    (6, 7)
    """
    k = 6
    for v in values:
        exp = v.normalize().as_tuple().exponent
        if isinstance(exp, int) and -exp > k:
            k = -exp
    return k


def _scaled_ints(values: Sequence[Decimal]) -> tuple[int, list[int]] | None:
    """(6, values x 1e6) when every value is on the 1e-6 grid (the usual case, kept fast)."""
    out = []
    for v in values:
        scaled = v.scaleb(6)
        as_int = int(scaled)
        if as_int != scaled:
            return None
        out.append(as_int)
    return 6, out


@dataclass(frozen=True)
class IntegerPricing:
    """A RentalPricing in integers: cost unit 1 / (3600 x 10^k) of the currency.

    `blocks` keeps every block (label, seconds, cost); `search` is the reduced, ascending list of
    (index into `blocks`, cap on its count or None) that some optimal cover needs (see
    `_reduce_blocks`); `floor_rate[i]` is the lowest cost per covered second, as (cost, seconds),
    among search[0..i] and metered time: a lower bound that prunes the search.
    """

    k: int
    blocks: tuple[tuple[str, int, int], ...]
    rate: int | None  # cost of one billed metered second
    granularity: int
    minimum: int
    search: tuple[tuple[int, int | None], ...]
    floor_rate: tuple[tuple[int, int], ...]

    @property
    def unit(self) -> int:
        return SECONDS_PER_HOUR * 10**self.k

    @classmethod
    def of(cls, p: RentalPricing) -> IntegerPricing:
        prices = [b.price for b in p.blocks]
        if p.metered_hourly is not None:
            prices.append(p.metered_hourly)
        found = _scaled_ints(prices)
        if found is None:
            k = _decimal_scale(prices)
            found = k, [int(v.scaleb(k)) for v in prices]
        k, ints = found
        blocks = tuple(
            (b.label, b.hours * SECONDS_PER_HOUR, price * SECONDS_PER_HOUR) for b, price in zip(p.blocks, ints)
        )
        rate = ints[-1] if p.metered_hourly is not None else None
        search = _reduce_blocks(blocks)
        floor: list[tuple[int, int]] = []
        low = (rate, 1) if rate is not None else None
        for index, _cap in search:
            cost, length = blocks[index][2], blocks[index][1]
            if low is None or cost * low[1] < low[0] * length:
                low = (cost, length)
            floor.append(low)
        return cls(k, blocks, rate, p.granularity_s, p.minimum_s, search, tuple(floor))


def _reduce_blocks(blocks: Sequence[tuple[str, int, int]]) -> tuple[tuple[int, int | None], ...]:
    """Blocks an optimal cover may need, ascending by length, each with a cap on its count.

    Exchange arguments keep this exact (some optimal cover survives every reduction):
    - block j (longer) is never needed when k = ceil(s_j / s_i) copies of a shorter block i cost
      no more: they cover at least as long. Equal lengths keep the cheaper block.
    - otherwise, for kept i < j with k' = floor(s_j / s_i) and price_j <= k' x price_i, a cover
      never needs k' or more copies of i: one j covers as long for no more.
    Repeating those swaps ends (the number of blocks never grows and the covered length only
    grows), so an optimal cover within all caps at once exists.
    """
    if len(blocks) == 1:
        return ((0, None),)
    order = sorted(range(len(blocks)), key=lambda i: (blocks[i][1], blocks[i][2], i))
    kept: list[int] = []
    for j in order:
        _, sj, pj = blocks[j]
        if not any(sj == blocks[i][1] or -(-sj // blocks[i][1]) * blocks[i][2] <= pj for i in kept):
            kept.append(j)
    out: list[tuple[int, int | None]] = []
    for pos, i in enumerate(kept):
        _, si, pi = blocks[i]
        cap: int | None = None
        for j in kept[pos + 1:]:
            whole = blocks[j][1] // si
            if blocks[j][2] <= whole * pi and (cap is None or whole - 1 < cap):
                cap = whole - 1
        out.append((i, cap))
    return tuple(out)


def _smallest_block_counts(ip: IntegerPricing, s0: int, residual: int, lo: int, hi: int) -> list[int]:
    """Counts c in [lo, hi] of the shortest block worth trying when it and metered time cover `residual`.

    With x = residual - c*s0 seconds metered, the cost c*p0 + rate*billed(x) is
    - linear plus a term periodic in c (whole granules) where billed(x) is above the minimum: the
      best c lies within one period of either end of that range;
    - increasing in c where the minimum charge applies (billed(x) = minimum): try the first c;
    - plus c = ceil(residual / s0): blocks alone, no metered time.
    `lo` > 0 when the blocks must span at least some time (a lease's window across a gap).
    """
    full = -(-residual // s0)
    counts = {full} if lo <= full <= hi else set()
    if ip.rate is None:
        return list(counts)
    g, mn = ip.granularity, ip.minimum
    last_tail = min(full - 1, hi)  # the largest c that still leaves metered time
    x_min = max(g * (-(-mn // g) - 1), 0)  # billed(x) is whole granules (>= minimum) iff x > x_min
    last_granular = min(-(-(residual - x_min) // s0) - 1, last_tail) if residual > x_min else -1
    period = g // math.gcd(g, s0)
    if last_granular >= lo:
        if last_granular + 1 - lo <= 2 * period:
            counts.update(range(lo, last_granular + 1))
        else:
            counts.update(range(lo, lo + period))
            counts.update(range(last_granular - period + 1, last_granular + 1))
    first_minimum = max(last_granular + 1, lo)
    if first_minimum <= last_tail:
        counts.add(first_minimum)
    return list(counts)


def cover_in_units(pricing: RentalPricing, seconds: int, window_s: int = 0) -> tuple[tuple[int, ...], int, int] | None:
    """The cheapest cover of `seconds` in exact integers, its blocks spanning at least `window_s`.

    Returns (count of each block in `pricing.blocks` order, billed metered seconds, cost), the cost
    in units of 1 / `pricing.units.unit` of the currency (SCALE when prices are on the 1e-6 grid),
    or None when the pricing cannot cover the time. A depth-first search over the longer blocks'
    counts (capped by `_reduce_blocks`, pruned by the `floor_rate` lower bound), with the
    shortest block's count and the metered tail settled in closed form. `window_s` > 0 asks for
    prepaid blocks lasting at least that long (a lease whose blocks carry across a gap).
    """
    ip = pricing.units
    n = len(ip.blocks)
    if seconds <= 0:
        return (0,) * n, 0, 0
    if not ip.blocks:
        if window_s > 0:
            return None
        billed = billed_metered_seconds(ip.granularity, ip.minimum, seconds)
        return (), billed, ip.rate * billed  # type: ignore[operator]
    g, mn, rate, blocks, search, floor = ip.granularity, ip.minimum, ip.rate, ip.blocks, ip.search, ip.floor_rate
    metered_cap = seconds - window_s  # metered seconds may cover at most this much
    best_cost = -1
    best: tuple[tuple[int, ...], int] | None = None
    counts = [0] * n

    def consider(cost: int, metered: int) -> None:
        nonlocal best_cost, best
        if best is None or cost < best_cost:
            best_cost, best = cost, (tuple(counts), metered)

    def visit(level: int, residual: int, spent: int) -> None:
        if residual <= 0:
            consider(spent, 0)
            return
        if best is not None:
            low_cost, low_len = floor[level]
            if spent * low_len + residual * low_cost >= best_cost * low_len:
                return  # even the cheapest rate per second cannot beat the best cover found
        index, cap = search[level]
        _, length, price = blocks[index]
        full = -(-residual // length)
        hi = full if cap is None or cap > full else cap
        if level == 0:
            lo = max(0, -(-(residual - metered_cap) // length))
            for c in _smallest_block_counts(ip, length, residual, lo, hi):
                rest = residual - c * length
                if rest <= 0:
                    counts[index] = c
                    consider(spent + c * price, 0)
                elif rate is not None:
                    counts[index] = c
                    metered = billed_metered_seconds(g, mn, rest)
                    consider(spent + c * price + rate * metered, metered)
            counts[index] = 0
            return
        for c in range(hi, -1, -1):
            counts[index] = c
            visit(level - 1, residual - c * length, spent + c * price)
        counts[index] = 0

    visit(len(search) - 1, seconds, 0)
    return None if best is None else (best[0], best[1], best_cost)


_cached_cover = lru_cache(maxsize=4096)(cover_in_units)


class Cover(NamedTuple):
    """The cheapest way to pay for one rental: block counts by label, billed metered seconds."""

    blocks: dict[str, int]
    metered_seconds: int
    cost: Decimal
    cost_exact: Fraction


def cheapest_cover(pricing: RentalPricing, hours: Decimal) -> Cover:
    """The exact cheapest cover of `hours` of running time by blocks plus metered time.

    >>> month = Block("month", PriceUnit.MONTH, 720, Decimal("7920"))
    >>> day = Block("day", PriceUnit.DAY, 24, Decimal("330"))
    >>> cheapest_cover(RentalPricing(None, blocks=(month, day)), Decimal(45 * 24)).blocks
    {'month': 1, 'day': 15}
    """
    found = _cached_cover(pricing, seconds_to_cover(hours))
    if found is None:  # pragma: no cover - RentalPricing always has a way to cover
        raise ValueError("this rental has no price option that can cover the hours")
    counts, metered, cost = found
    exact = Fraction(cost, pricing.units.unit)
    blocks = {b.label: c for b, c in zip(pricing.blocks, counts, strict=True) if c}
    return Cover(blocks, metered, _to_decimal(exact), exact)


def cover_alternatives(pricing: RentalPricing, hours: Decimal) -> dict[str, Decimal]:
    """What paying for `hours` with each single option alone would cost (for the "why" notes).

    >>> p = RentalPricing(Decimal("13.75"), blocks=(Block("day", PriceUnit.DAY, 24, Decimal("330")),))
    >>> cover_alternatives(p, Decimal(240))
    {'hour': Decimal('3300'), 'day': Decimal('3300')}
    """
    seconds = seconds_to_cover(hours)
    out: dict[str, Decimal] = {}
    if pricing.metered_hourly is not None:
        billed = billed_metered_seconds(pricing.granularity_s, pricing.minimum_s, seconds)
        out["hour"] = _to_decimal(Fraction(pricing.metered_hourly) * billed / SECONDS_PER_HOUR)
    for b in pricing.blocks:
        out[b.label] = -(-seconds // (b.hours * SECONDS_PER_HOUR)) * b.price
    return out


def _describe_cover(cover: Cover) -> str:
    parts = [f"{count} x {label}" for label, count in cover.blocks.items()]
    if cover.metered_seconds:
        parts.append(f"{Decimal(cover.metered_seconds) / SECONDS_PER_HOUR:.6g} h metered")
    return " + ".join(parts) if parts else "nothing"


def explain_cover(pricing: RentalPricing, hours: Decimal, currency: str) -> str:
    """One line saying how `hours` are paid for and what the single-option covers would cost.

    >>> month = Block("month", PriceUnit.MONTH, 720, Decimal("7920"))
    >>> day = Block("day", PriceUnit.DAY, 24, Decimal("330"))
    >>> explain_cover(RentalPricing(None, blocks=(month, day)), Decimal(240), "CNY")
    '240 h: 10 x day = 3300.00 CNY (month only: 7920.00)'
    """
    cover = cheapest_cover(pricing, hours)
    alternatives = [
        f"{label} only: {round_money(cost, currency)}"
        for label, cost in cover_alternatives(pricing, hours).items()
        if cost != cover.cost
    ]
    text = f"{hours.normalize():f} h: {_describe_cover(cover)} = {round_money(cover.cost, currency)} {currency}"
    return text + (f" ({'; '.join(alternatives)})" if alternatives else "")


def rental_pricing(offer: Offer, nodes: int, fx: FxTable, currency: str, interruptible: bool) -> RentalPricing:
    """The price options of `nodes` nodes of `offer` for one rental, in `currency`.

    HOUR becomes metered time (the cheapest hourly option when there are several); DAY and WEEK
    are 24 h and 168 h blocks; MONTH lasts the provider's `month_hours`; TERM lasts `term_hours`.
    Options of the other interruptibility are ignored. Prices are converted and quantised to
    1e-6 of `currency` so the solver's integers are exact.
    """
    if nodes < 1:
        raise ValueError("nodes must be at least 1")
    options = offer.options(interruptible)
    if not options:
        kind = "interruptible (spot)" if interruptible else "on-demand"
        raise ValueError(f"offer {offer.provider}/{offer.offer_id} has no {kind} price option")
    hourly: Decimal | None = None
    blocks: list[Block] = []
    for opt in options:
        price = quantize_money(in_quote_currency(opt.amount, offer.currency, offer.fetched_at, fx, currency) * nodes)
        if price <= 0:  # a price below 1e-6 of the currency cannot be represented; treat as unknown
            continue
        if opt.unit == PriceUnit.HOUR:
            hourly = price if hourly is None else min(hourly, price)
            continue
        if opt.unit == PriceUnit.MONTH:
            hours = offer.month_hours
        elif opt.unit == PriceUnit.TERM:
            hours = int(opt.term_hours or 0)
        else:
            hours = UNIT_HOURS[opt.unit]
        label = opt.label or (opt.unit.value if opt.unit != PriceUnit.TERM else f"term-{hours}h")
        taken = {b.label for b in blocks}
        base, n = label, 2
        while label in taken:
            label, n = f"{base}-{n}", n + 1
        blocks.append(Block(label, opt.unit, hours, price))
    if hourly is None and not blocks:
        raise ValueError(f"offer {offer.provider}/{offer.offer_id}: every price rounds to 0 {currency}")
    return RentalPricing(hourly, offer.billing_granularity_s, offer.billing_minimum_s, tuple(blocks))


# --------------------------------------------------------------------------------------------
# An offer's terms in the quote currency


@dataclass(frozen=True)
class Terms:
    """Everything billing needs of one offer, converted into the quote currency, per node.

    None is an unknown price (never free); 0 is free.
    """

    provider: str
    offer_id: str
    currency: str  # the quote currency
    on_demand: RentalPricing | None
    interruptible: RentalPricing | None
    storage_gb_month: Decimal | None  # while running
    stopped_storage_gb_month: Decimal | None  # while stopped (the offer's own, else the running price)
    egress_gb: Decimal | None
    ingress_gb: Decimal | None
    month_hours: int
    stopped_bills: Literal["storage", "everything", "nothing"] = "storage"
    stopped_max_hours: Decimal | None = None  # a stopped instance is released after this long
    free_disk_gb: Decimal = Decimal(0)
    max_hours: Decimal | None = None  # the host's maximum rental (Vast's end date)

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.offer_id)

    def pricing(self, spot: bool) -> RentalPricing:
        found = self.interruptible if spot else self.on_demand
        if found is None:
            kind = "interruptible (spot)" if spot else "on-demand"
            raise ValueError(f"offer {self.provider}/{self.offer_id} has no {kind} price")
        return found


def in_quote_currency(amount: Decimal, price_currency: str, priced_on: date, fx: FxTable, currency: str) -> Decimal:
    """`amount` of `price_currency` in `currency`, at the exchange rate of the price's own day
    (`priced_on`, a date or an offer's fetched_at): a price read in March is converted at March's rate, not today's.
    Every price is converted here: an offer's compute, disk and transfers (`offer_terms`) and
    the planner's first pass (per currency and day)."""
    return fx.convert(amount, price_currency, currency, on=priced_on)


def _optional(offer: Offer, fx: FxTable, currency: str, amount: Decimal | None) -> Decimal | None:
    return None if amount is None else quantize_money(in_quote_currency(amount, offer.currency, offer.fetched_at, fx,
                                                                          currency))


def offer_terms(offer: Offer, fx: FxTable, currency: str) -> Terms:
    """`offer`'s billing terms in `currency` (see Terms)."""

    def pricing(spot: bool) -> RentalPricing | None:
        return rental_pricing(offer, 1, fx, currency, spot) if offer.options(spot) else None

    return Terms(
        provider=offer.provider, offer_id=offer.offer_id, currency=currency,
        on_demand=pricing(False), interruptible=pricing(True),
        storage_gb_month=_optional(offer, fx, currency, offer.storage_gb_month),
        stopped_storage_gb_month=_optional(offer, fx, currency, offer.stopped_storage_price),
        egress_gb=_optional(offer, fx, currency, offer.egress_gb),
        ingress_gb=_optional(offer, fx, currency, offer.ingress_gb),
        month_hours=offer.month_hours, stopped_bills=offer.stopped_bills,
        stopped_max_hours=None if offer.stopped_max_days is None else Decimal(str(offer.stopped_max_days)) * 24,
        free_disk_gb=Decimal(str(offer.free_disk_gb)),
        max_hours=None if offer.max_duration_hours is None else Decimal(str(offer.max_duration_hours)),
    )


# --------------------------------------------------------------------------------------------
# What a stage uses, and its lines


@dataclass(frozen=True)
class Use:
    """One running stage on `nodes` nodes of one offer: all billing needs to price it.

    `hours` is the running time per node: for validation the import and the run, for training
    the import, the run and the export. Disk and imports are per node; `out_gb` is copied out
    once: a training run's final weights and kept checkpoints, or, for a validation instance
    that is destroyed, its data and checkpoint (which takes `out_hours` more running time).
    """

    id: str
    kind: Literal["validate", "train"]
    terms: Terms
    spot: bool
    nodes: int
    hours: Decimal
    disk_gb: Decimal
    import_gb: Decimal
    out_gb: Decimal
    out_hours: Decimal = Decimal(0)

    def __post_init__(self) -> None:
        if self.kind not in ("validate", "train"):
            raise ValueError(f"use {self.id}: kind must be validate or train, got {self.kind!r}")
        if self.nodes < 1 or (self.kind == "validate" and self.nodes != 1):
            raise ValueError(f"use {self.id}: a validation runs on one node, training on at least one")
        if not self.hours > 0:
            raise ValueError(f"use {self.id}: hours must be positive, got {self.hours}")
        for name in ("disk_gb", "import_gb", "out_gb", "out_hours"):
            if getattr(self, name) < 0:
                raise ValueError(f"use {self.id}: {name} must not be negative")

    @property
    def pricing(self) -> RentalPricing:
        return self.terms.pricing(self.spot)

    @property
    def key(self) -> tuple[str, str, bool]:
        """The instance a lease continues on: the same offer, bought the same way."""
        return (self.terms.provider, self.terms.offer_id, self.spot)


@dataclass(frozen=True)
class Line:
    """One billed line. `cost` None: the price is unknown, so this charge is not in the total."""

    what: Literal["compute", "storage_running", "storage_stopped", "egress", "ingress"]
    unit: str  # hour, day, week, month, a term or block label, GB-month, GB
    count: Decimal
    unit_price: Decimal | None
    cost: Decimal | None
    note: str = ""

    @property
    def unknown(self) -> bool:
        return self.cost is None


def _gb(x: Decimal) -> str:
    return f"{x.normalize():f}"


def storage_line(terms: Terms, gb_per_node: Decimal, nodes: int, hours: Decimal, *, stopped: bool = False,
                 rate: Decimal | None | Literal["default"] = "default") -> Line | None:
    """Disk of `gb_per_node` on each of `nodes` nodes kept for `hours`, by the GB-month.

    Only the disk above the offer's included `free_disk_gb` is billed. A GB-month is the
    provider's `month_hours` hours of one GB. `rate` overrides the price (a stopped disk billed at
    the running rate). None when there is nothing to bill.

    >>> t = Terms("p", "o", "USD", None, None, Decimal("0.20"), None, None, None, 730)
    >>> storage_line(t, Decimal(500), 1, Decimal(14 * 24)).cost  # 0.20 x 500 x 336 / 730
    Decimal('46.03')
    >>> free = replace(t, storage_gb_month=None, free_disk_gb=Decimal(50))
    >>> storage_line(free, Decimal(40), 1, Decimal(24)).note, storage_line(free, Decimal(60), 1, Decimal(24)).cost is None
    ('within the 50 GB of disk the price includes', True)
    """
    if hours <= 0 or gb_per_node <= 0:
        return None
    what = "storage_stopped" if stopped else "storage_running"
    billable = max(Decimal(0), gb_per_node - terms.free_disk_gb) * nodes
    if billable == 0:
        return Line(what, "GB-month", Decimal(0), Decimal(0), Decimal(0),
                    note=f"within the {_gb(terms.free_disk_gb)} GB of disk the price includes")
    price = (terms.stopped_storage_gb_month if stopped else terms.storage_gb_month) if rate == "default" else rate
    gb_months = billable * hours / terms.month_hours
    note = f"{_gb(billable)} GB for {hours.quantize(Decimal('0.01')).normalize():f} h"
    if terms.free_disk_gb:
        note += f" (above the {_gb(terms.free_disk_gb)} GB included)"
    if price is None:
        return Line(what, "GB-month", gb_months, None, None, note=note + ": price unknown")
    return Line(what, "GB-month", gb_months, price, round_money(price * gb_months, terms.currency), note=note)


def transfer_line(terms: Terms, gb: Decimal, what: Literal["egress", "ingress"], note: str = "") -> Line | None:
    """Moving `gb` out (egress) or in (ingress): 0 is free, None is an unknown price.

    >>> t = Terms("p", "o", "USD", None, None, None, None, Decimal("0.09"), None, 730)
    >>> transfer_line(t, Decimal(500), "egress").cost, transfer_line(t, Decimal(500), "ingress").cost
    (Decimal('45.00'), None)
    """
    if gb <= 0:
        return None
    price = terms.egress_gb if what == "egress" else terms.ingress_gb
    if price is None:
        return Line(what, "GB", gb, None, None, note=(note + ": " if note else "") + "price unknown")
    return Line(what, "GB", gb, price, round_money(price * gb, terms.currency), note=note)


def _compute_lines(pricing: RentalPricing, counts: Sequence[int], metered_s: int, nodes: int,
                   currency: str, note: str = "") -> list[Line]:
    """Lines for a cover (block counts in `pricing.blocks` order, billed metered seconds) on `nodes` nodes."""
    lines = []
    for block, count in zip(pricing.blocks, counts, strict=True):
        if count:
            price = block.price * nodes
            lines.append(Line("compute", block.label, Decimal(count), price, round_money(price * count, currency),
                              note=note))
    if metered_s:
        hourly = pricing.metered_hourly * nodes  # type: ignore[operator]
        hours = Decimal(metered_s) / SECONDS_PER_HOUR
        lines.append(Line("compute", "hour", hours, hourly, round_money(hourly * hours, currency), note=note))
    return lines


def _cover(pricing: RentalPricing, seconds: int, window_s: int = 0) -> tuple[tuple[int, ...], int, int]:
    found = _cached_cover(pricing, seconds, window_s)
    if found is None:
        raise ValueError("these prices cannot cover the running time")
    return found


@dataclass(frozen=True)
class StageBill:
    """One priced stage of a plan: its billed lines (an unknown price stays a line, not a 0)."""

    kind: StageKind
    use_id: str
    lines: tuple[Line, ...]
    notes: tuple[str, ...] = ()

    @property
    def cost(self) -> Decimal:
        """The known part; unknown lines are listed in `unknown`, never counted as 0."""
        return sum((ln.cost for ln in self.lines if ln.cost is not None), Decimal(0))

    @property
    def unknown(self) -> tuple[str, ...]:
        """The charges whose price nobody published, in words: "egress: 1.75 GB"."""
        return tuple(_unknown_text(ln) for ln in self.lines if ln.cost is None)

    @property
    def unknown_kinds(self) -> tuple[str, ...]:
        return tuple(ln.what for ln in self.lines if ln.cost is None)


def _unknown_text(line: Line) -> str:
    """
    >>> _unknown_text(Line("storage_running", "GB-month", Decimal("0.2084"), None, None, "37.53 GB for 4.08 h: price unknown"))
    'storage running: 37.53 GB for 4.08 h'
    >>> _unknown_text(Line("egress", "GB", Decimal("1.750"), None, None, "price unknown"))
    'egress: 1.75 GB'
    """
    what = line.what.replace("_", " ")
    if line.unit == "GB-month" and " for " in line.note:
        return f"{what}: {line.note.split(':')[0].split(' (')[0]}"
    return f"{what}: {line.count.normalize():f} {line.unit}"


def _lines(*found: Line | None | Sequence[Line]) -> tuple[Line, ...]:
    out: list[Line] = []
    for item in found:
        if item is None:
            continue
        out.extend(item if isinstance(item, (list, tuple)) else [item])
    return tuple(out)


# --------------------------------------------------------------------------------------------
# The exact pricers


def price_alone(use: Use) -> tuple[StageBill, ...]:
    """A stage on an instance of its own, destroyed after it.

    Validation: run, copy data and checkpoint out (`out_hours`), destroy (the egress is the idle
    stage's line). Training: every node imports, runs and keeps its disk; the export egress is
    the export stage's line.
    """
    t, ccy, pricing = use.terms, use.terms.currency, use.pricing
    running = use.hours + (use.out_hours if use.kind == "validate" else Decimal(0))
    counts, metered, _ = _cover(pricing, seconds_to_cover(running))
    run = _lines(
        _compute_lines(pricing, counts, metered, use.nodes, ccy),
        storage_line(t, use.disk_gb, use.nodes, running),
        transfer_line(t, use.import_gb * use.nodes, "ingress", "base weights and data into a fresh instance"),
    )
    out = transfer_line(t, use.out_gb, "egress",
                        "data and checkpoint copied out before destroy" if use.kind == "validate"
                        else "final weights and kept checkpoints")
    after = "idle" if use.kind == "validate" else "export"
    return (StageBill(use.kind, use.id, run), StageBill(after, use.id, _lines(out)))


def lease_refusal(v: Use, t: Use, idle_hours: Decimal) -> str | None:
    """Why validation `v` cannot continue into training `t` on the same instance, or None."""
    if v.key != t.key:
        return "training runs on another offer"
    terms = v.terms
    if idle_hours > 0 and terms.stopped_max_hours is not None and idle_hours > terms.stopped_max_hours:
        return (f"{terms.provider} releases an instance stopped for more than "
                f"{(terms.stopped_max_hours / 24).normalize():f} days (its data is wiped), and the gap is "
                f"{(idle_hours / 24).normalize():f} days: destroy after copying out")
    span = v.hours + idle_hours + t.hours
    if terms.max_hours is not None and span > terms.max_hours:
        return (f"the host rents for at most {terms.max_hours.normalize():f} h and the lease would take "
                f"{span.quantize(Decimal('0.1'))} h")
    return None


def _gap_bills(terms: Terms) -> bool:
    return terms.stopped_bills == "everything"


def _gap_disk_line(terms: Terms, gb: Decimal, idle_hours: Decimal) -> Line | None:
    """The validation instance's disk over a gap it is kept through: at the running rate when a
    stopped instance bills in full, not at all when the platform charges nothing for it."""
    if idle_hours <= 0 or terms.stopped_bills == "nothing":
        return None
    return storage_line(terms, gb, 1, idle_hours, stopped=True,
                        rate=terms.storage_gb_month if _gap_bills(terms) else "default")


def price_lease(v: Use, t: Use, idle_hours: Decimal) -> tuple[StageBill, ...]:
    """Validation, the idle gap and training on ONE instance (node 1 of the training run).

    Node 1 is one rental from the start of validation to the end of the export: blocks bought at
    validation are consumed by the wall clock and carry across the gap. The gap is running time
    when the platform bills a stopped instance in full (`stopped_bills = "everything"`), and with no
    gap at all training simply continues; otherwise the instance is stopped, the gap is not
    metered, and the cheaper of two real bills is taken: each session paid on its own, or one
    prepaid window from validation that spans the gap into training (metered time after it).
    The other nodes of a multi-node run are fresh rentals. Raises ValueError when
    `lease_refusal` says no.
    """
    if (why := lease_refusal(v, t, idle_hours)) is not None:
        raise ValueError(why)
    terms, ccy, pricing = v.terms, v.terms.currency, v.pricing
    sv, st = seconds_to_cover(v.hours), seconds_to_cover(t.hours)
    sg = seconds_to_cover(idle_hours)
    notes: list[str] = []
    v_compute: list[Line]
    t_compute: list[Line]
    if sg == 0 or _gap_bills(terms):
        counts, metered, _ = _cover(pricing, sv + sg + st)
        window = sum(c * len_s for c, (_, len_s, _) in zip(counts, pricing.units.blocks, strict=True))
        # Metered seconds fall after the prepaid window: split them over the stages by time.
        used = max(0, sv + sg + st - window)
        in_v = max(0, min(sv, sv - window)) if window < sv else 0
        in_gap = max(0, min(sg, sv + sg - max(window, sv))) if sg else 0
        in_t = used - in_v - in_gap + (metered - used)  # granule rounding lands on the last session
        v_compute = _compute_lines(pricing, counts, in_v, 1, ccy)
        gap_compute = _compute_lines(pricing, (0,) * len(counts), in_gap, 1, ccy,
                                     note="a stopped instance bills in full here") if in_gap else []
        t_compute = _compute_lines(pricing, (0,) * len(counts), in_t, 1, ccy)
        if sg and _gap_bills(terms):
            notes.append(f"{terms.provider} bills a stopped instance in full: the gap counts as rental time")
    else:
        separate = (_cover(pricing, sv), _cover(pricing, st))
        spanning = _cached_cover(pricing, sv + sg + st, sv + sg)
        gap_compute = []
        if spanning is not None and spanning[2] < separate[0][2] + separate[1][2]:
            counts, metered, _ = spanning
            v_compute = _compute_lines(pricing, counts, 0, 1, ccy)
            t_compute = _compute_lines(pricing, (0,) * len(counts), metered, 1, ccy)
            notes.append("the prepaid time bought at validation lasts through the gap into training")
        else:
            (vc, vm, _), (tc, tm, _) = separate
            v_compute = _compute_lines(pricing, vc, vm, 1, ccy)
            t_compute = _compute_lines(pricing, tc, tm, 1, ccy)
    others = t.nodes - 1
    if others:
        counts, metered, _ = _cover(pricing, st)
        t_compute += _compute_lines(pricing, counts, metered, others, ccy, note=f"nodes 2-{t.nodes}, fresh rentals")
    idle_lines = _lines(gap_compute, _gap_disk_line(terms, v.disk_gb, idle_hours))
    if sg and terms.stopped_bills == "nothing":
        notes.append(f"{terms.provider} charges nothing for a stopped instance")
    validate = StageBill("validate", v.id, _lines(
        v_compute, storage_line(terms, v.disk_gb, 1, v.hours),
        transfer_line(terms, v.import_gb, "ingress", "base weights and data into a fresh instance")))
    train = StageBill("train", t.id, _lines(
        t_compute, storage_line(terms, t.disk_gb, t.nodes, t.hours),
        transfer_line(terms, t.import_gb * others, "ingress", f"nodes 2-{t.nodes} import") if others else None))
    export = StageBill("export", t.id, _lines(transfer_line(terms, t.out_gb, "egress", "final weights and kept checkpoints")))
    return (validate, StageBill("idle", v.id, idle_lines, tuple(notes)), train, export)


def cover_notes(pricing: RentalPricing, hours: Decimal, currency: str, nodes: int = 1) -> list[str]:
    """What a user should know about paying for `hours` with prepaid blocks.

    - A run just past a block boundary (30 days + half an hour of copying on a monthly offer):
      how much finishing that tail sooner would save.
    - A monthly block used only partly: the daily price below which renting by the day would be
      cheaper (seed 004: 10 days of a monthly node -- consider daily rental).

    >>> month = Block("month", PriceUnit.MONTH, 720, Decimal("7920"))
    >>> cover_notes(RentalPricing(None, blocks=(month,)), Decimal("720.5"), "CNY")[0]
    'the run lasts 0.50 h into a new month: finishing 0.50 h sooner (a faster export, a shorter run) would save 7,920.00 CNY'
    >>> cover_notes(RentalPricing(None, blocks=(month,)), Decimal(244), "CNY")[0]
    'uses 244.00 h of a 720 h month (7,920.00 CNY): an 11-day rental would save 7,920.00 CNY less 11 days at its daily price, so it is cheaper at under 720.00 CNY per day'
    >>> cover_notes(RentalPricing(None, blocks=(month,)), Decimal("2.15"), "CNY")
    ['uses 2.15 h of a 720 h month (7,920.00 CNY): a one-day rental would save 7,920.00 CNY less its price']
    >>> cover_notes(RentalPricing(None, blocks=(month,)), Decimal(500), "CNY")  # 21 of 30 days: a month is no waste
    []
    """
    seconds = seconds_to_cover(hours)
    counts, _, cost = _cover(pricing, seconds)
    used = [(b, c) for b, c in zip(pricing.blocks, counts, strict=True) if c]
    if not used:
        return []
    notes = []
    longest, count = max(used, key=lambda bc: bc[0].hours)
    length = longest.hours * SECONDS_PER_HOUR
    excess = seconds - (seconds // length) * length
    # Only a run longer than one block can spill into a new one (a 6 h run on a monthly offer
    # is inside its first month).
    if seconds > length and 0 < excess <= max(SECONDS_PER_HOUR, length // 20):
        trimmed = _cover(pricing, seconds - excess)[2]
        saving = Fraction(cost - trimmed, pricing.units.unit) * nodes
        if saving > 0:
            tail = _hours_words(Decimal(excess) / SECONDS_PER_HOUR)
            notes.append(f"the run lasts {tail} h into a new {longest.label}: finishing {tail} h sooner (a faster "
                         f"export, a shorter run) would save {_money_words(_to_decimal(saving), currency)}")
    if longest.unit == PriceUnit.MONTH and not any(b.unit == PriceUnit.DAY for b in pricing.blocks):
        last = seconds - (count - 1) * length
        days = -(-last // (24 * SECONDS_PER_HOUR))
        month_days = length // (24 * SECONDS_PER_HOUR)
        # Advice only where it holds: a daily rental beats the month when it costs under the
        # month's price over the days used; that is worth saying only while those days are at
        # most half the month (a break-even of twice the month's own daily rate or more; daily
        # rates run above the monthly rate per day, so past half a month the month is no waste).
        if 0 < last < length and 2 * days <= month_days:
            month = _money_words(longest.price * nodes, currency)
            used_text = f"uses {_hours_words(Decimal(last) / SECONDS_PER_HOUR)} h of a {longest.hours} h month ({month})"
            if days == 1:
                notes.append(f"{used_text}: a one-day rental would save {month} less its price")
            else:
                per_day = _money_words(longest.price * nodes / days, currency)
                article = "an" if str(days)[0] == "8" or str(days) in ("11", "18") else "a"
                notes.append(f"{used_text}: {article} {days}-day rental would save {month} less {days} days at its "
                             f"daily price, so it is cheaper at under {per_day} per day")
    return notes


def _hours_words(hours: Decimal) -> str:
    """Hours in a sentence: two decimals (never 2.153611111111111111111111111)."""
    return f"{hours.quantize(Decimal('0.01')):,}"


def _money_words(amount: Decimal, currency: str) -> str:
    """An amount in a sentence: the currency's minor unit, thousands separated ('7,920.00 CNY')."""
    return f"{round_money(amount, currency):,} {currency}"


def lease_cover_notes(v: Use, t: Use, idle_hours: Decimal) -> list[str]:
    """`cover_notes` for a lease's one rental: validation, the gap when it is billed as running
    time, and training."""
    billed_gap = idle_hours if _gap_bills(t.terms) else Decimal(0)
    return cover_notes(t.pricing, v.hours + billed_gap + t.hours, t.terms.currency)


# --------------------------------------------------------------------------------------------
# Choices and plans


@dataclass(frozen=True)
class Choice:
    """A plan's decisions: the validation use (or none), what happens in the gap, the training use.

    idle: "continue" (no gap, same instance), "stop" (same instance, stopped over the gap),
    "destroy" (validation destroyed; training on a fresh instance), None (no validation).
    """

    validate: str | None
    train: str
    idle: Idle | None


@dataclass(frozen=True)
class IdleOption:
    """The idle choice not taken, when the choice rested on an unknown price: shown to the user."""

    idle: Idle
    total: Decimal
    unknown: tuple[str, ...]
    break_even: str = ""


@dataclass(frozen=True)
class PlanBill:
    """A whole plan priced: its choice, each stage's bill, and the idle option not taken."""

    choice: Choice
    stages: tuple[StageBill, ...]
    currency: str
    wall_hours: Decimal  # validation (+ copy-out when destroyed) + gap + training
    alternative: IdleOption | None = None

    @cached_property
    def total(self) -> Decimal:
        return sum((s.cost for s in self.stages), Decimal(0))

    @cached_property
    def unknown(self) -> tuple[str, ...]:
        return tuple(u for s in self.stages for u in s.unknown)

    @cached_property
    def unknown_kinds(self) -> tuple[str, ...]:
        return tuple(k for s in self.stages for k in s.unknown_kinds)

    @property
    def key(self) -> tuple[Decimal, bool]:
        """Ranking: the known total, then fully priced before a plan with unknown charges."""
        return (self.total, bool(self.unknown))

    def line_items(self) -> dict[str, Decimal | None]:
        """Each kind's cost over the stages; None when any part of it has no price: a sum of the
        known part would read as the whole charge (a script adding up line items gets a bill
        that looks exact)."""
        items: dict[str, Decimal | None] = dict.fromkeys(
            ("compute", "storage_running", "storage_stopped", "egress", "ingress"), Decimal(0))
        for s in self.stages:
            for ln in s.lines:
                known = items[ln.what]
                items[ln.what] = None if ln.cost is None or known is None else known + ln.cost
        return items

    def stage(self, kind: str) -> StageBill | None:
        return next((s for s in self.stages if s.kind == kind), None)


def _certainly_no_dearer(a: PlanBill, b: PlanBill) -> bool:
    """a costs no more than b whatever the unknown prices are: its unknowns are among b's kinds."""
    return a.total <= b.total and set(a.unknown_kinds) <= set(b.unknown_kinds)


def idle_choice(keep: PlanBill, destroy: PlanBill) -> PlanBill:
    """Stop (or continue) versus destroy for the same validation and training, on known money only.

    When the two differ in unknown charges and neither is certainly cheaper, the fully priced
    option (else the one with fewer unknowns, else the cheaper known total) is kept and the
    other is attached as `alternative`, with what its unknown price would have to stay under.
    """
    if _certainly_no_dearer(keep, destroy):
        return keep
    if _certainly_no_dearer(destroy, keep):
        return destroy
    first, other = sorted((keep, destroy), key=lambda b: (len(b.unknown), b.total, b.choice.idle == "destroy"))
    return replace(first, alternative=IdleOption(other.choice.idle, other.total, other.unknown,  # type: ignore[arg-type]
                                                 _break_even(first, other)))


def _break_even(kept: PlanBill, other: PlanBill) -> str:
    """The price per unit under which `other`'s single unknown line would make it the cheaper plan."""
    missing = [ln for s in other.stages for ln in s.lines if ln.cost is None]
    if len(missing) != 1 or kept.unknown or not missing[0].count:
        return ""
    room = kept.total - other.total
    if room <= 0:
        return ""
    line = missing[0]
    per = (room / line.count).quantize(Decimal("0.0001"), rounding=ROUND_FLOOR)
    return f"cheaper only if {line.what.replace('_', ' ')} costs under {per} {kept.currency} per {line.unit}"


def price_plan(choice: Choice, uses: dict[str, Use], idle_hours: Decimal,
               alone: Mapping[str, tuple[StageBill, ...]] | None = None) -> PlanBill:
    """The exact bill of `choice` over `uses` (by id). Raises ValueError for a choice no rule allows.
    `alone`: `price_alone`'s bills of some of the uses, by id, taken instead of pricing them again."""

    def bill_alone(use: Use) -> tuple[StageBill, ...]:
        found = None if alone is None else alone.get(use.id)
        return found if found is not None else price_alone(use)

    t = uses[choice.train]
    if t.kind != "train":
        raise ValueError(f"{choice.train} is not a training use")
    if choice.validate is None:
        if choice.idle is not None:
            raise ValueError("an idle choice needs a validation stage")
        stages = bill_alone(t)
        return PlanBill(choice, stages, t.terms.currency, t.hours)
    v = uses[choice.validate]
    if v.kind != "validate":
        raise ValueError(f"{choice.validate} is not a validation use")
    if choice.idle == "destroy":
        stages = bill_alone(v) + bill_alone(t)
        return PlanBill(choice, stages, t.terms.currency, v.hours + v.out_hours + idle_hours + t.hours)
    if (choice.idle == "continue") != (idle_hours == 0) or choice.idle not in ("stop", "continue"):
        raise ValueError(f"idle {choice.idle!r} does not fit a gap of {idle_hours} h")
    stages = price_lease(v, t, idle_hours)
    return PlanBill(choice, stages, t.terms.currency, v.hours + idle_hours + t.hours)


# --------------------------------------------------------------------------------------------
# Bounds without a bill, for pruning


@dataclass(frozen=True, slots=True)
class Bounds:
    """lo <= the exact known total <= hi; `unknown`: the bill has unknown charges (exact)."""

    lo: Decimal
    hi: Decimal
    unknown: bool


def _cover_cost(pricing: RentalPricing, seconds: int, window_s: int = 0) -> tuple[int, int] | None:
    """The cheapest cover of `seconds` (its blocks spanning `window_s`) as (its cost in
    `pricing.units`, how many compute lines it bills, each rounded on its own), or None when
    there is none; (0, 0) for no time."""
    if seconds <= 0:
        return 0, 0
    found = _cached_cover(pricing, seconds, window_s)
    if found is None:
        return None
    counts, metered, cost = found
    return cost, sum(1 for c in counts if c) + (1 if metered else 0)


def _fixed(lines: Sequence[Line | None]) -> tuple[Decimal, bool]:
    known, unknown = Decimal(0), False
    for ln in lines:
        if ln is None:
            continue
        if ln.cost is None:
            unknown = True
        else:
            known += ln.cost
    return known, unknown


def rounding_slack(currency: str, lines: int = LINE_ROUNDING) -> Decimal:
    """What rounding `lines` lines each to the minor unit can move a total by (half a unit each,
    at most: a whole unit each is allowed)."""
    unit = round_money(Decimal(0), currency).as_tuple().exponent
    return Decimal(1).scaleb(unit) * lines  # type: ignore[arg-type]


def _bounds(compute: Fraction, lines: int, fixed: Decimal, unknown: bool, currency: str) -> Bounds:
    """Bounds on a bill of `lines` compute lines adding up to `compute` before they are rounded,
    and exact (already rounded) other lines adding up to `fixed`."""
    exact, slack = _to_decimal(compute) + fixed, rounding_slack(currency, lines)
    return Bounds(exact - slack, exact + slack, unknown)


def use_bounds(use: Use) -> Bounds:
    """Bounds on `price_alone(use)`'s total, apart only by the rounding of its compute lines: the
    compute is the cheapest cover's cost (the search is cached: the exact bill finds it again),
    the disk and transfer lines are priced as the bill prices them."""
    t, pricing = use.terms, use.pricing
    running = use.hours + (use.out_hours if use.kind == "validate" else Decimal(0))
    cost, lines = _cover_cost(pricing, seconds_to_cover(running)) or _no_cover()
    fixed, unknown = _fixed([
        storage_line(t, use.disk_gb, use.nodes, running),
        transfer_line(t, use.import_gb * use.nodes, "ingress"), transfer_line(t, use.out_gb, "egress")])
    return _bounds(Fraction(cost * use.nodes, pricing.units.unit), lines, fixed, unknown, t.currency)


def lease_bounds(v: Use, t: Use, idle_hours: Decimal) -> Bounds | None:
    """Bounds on `price_lease(v, t, idle_hours)`'s total, or None when the lease is refused.

    As `use_bounds`: the compute is the cost of `price_lease`'s covers -- one session through
    the gap when there is none or it is billed (its metered time split over up to three
    sessions' lines), else the cheaper of the sessions paid on their own and one prepaid window
    spanning the gap -- and the other nodes' fresh rentals; only the lines' rounding is open.
    """
    if lease_refusal(v, t, idle_hours) is not None:
        return None
    terms, pricing = v.terms, v.pricing
    sv, st, sg = seconds_to_cover(v.hours), seconds_to_cover(t.hours), seconds_to_cover(idle_hours)
    if sg == 0 or _gap_bills(terms):
        cost, lines = _cover_cost(pricing, sv + sg + st) or _no_cover()
        lines += 2
    else:
        (v_cost, v_lines), (t_cost, t_lines) = (_cover_cost(pricing, sv) or _no_cover(),
                                                _cover_cost(pricing, st) or _no_cover())
        cost, lines = v_cost + t_cost, v_lines + t_lines
        spanning = _cover_cost(pricing, sv + sg + st, sv + sg)
        if spanning is not None:
            cost, lines = min(cost, spanning[0]), max(lines, spanning[1])
    others = t.nodes - 1
    if others:
        o_cost, o_lines = _cover_cost(pricing, st) or _no_cover()
        cost, lines = cost + o_cost * others, lines + o_lines
    fixed, unknown = _fixed([
        storage_line(terms, v.disk_gb, 1, v.hours), transfer_line(terms, v.import_gb, "ingress"),
        _gap_disk_line(terms, v.disk_gb, idle_hours),
        storage_line(terms, t.disk_gb, t.nodes, t.hours),
        transfer_line(terms, t.import_gb * others, "ingress") if others else None,
        transfer_line(terms, t.out_gb, "egress")])
    return _bounds(Fraction(cost, pricing.units.unit), lines, fixed, unknown, terms.currency)


def idle_bounds(keep: Bounds, destroy: Bounds) -> Bounds:
    """Bounds on `idle_choice`'s total from bounds on its two options' totals: it takes the
    cheaper when both are fully priced, and may take either otherwise."""
    if keep.unknown or destroy.unknown:
        return Bounds(min(keep.lo, destroy.lo), max(keep.hi, destroy.hi), True)
    return Bounds(min(keep.lo, destroy.lo), min(keep.hi, destroy.hi), False)


def _no_cover() -> tuple[int, int]:
    raise ValueError("these prices cannot cover the running time")
