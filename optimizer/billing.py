"""Billing: what covering H hours costs, storage and transfer charges, and the plan oracle.

This module is the money oracle. It knows the billing rules and nothing about solvers:

- `rental_pricing` turns an Offer's price options into a `RentalPricing` for one rental in the
  quote currency: metered hourly time (billed in granules of `granularity_s` with a minimum
  charge `minimum_s`) plus prepaid blocks (day, week, month, reserved term).
- `cheapest_cover` finds the exact cheapest way to pay for H hours of one rental (e.g. one
  month plus 15 days vs two months) by bounded enumeration, without a solver.
- `plan_cost` checks a solver `Decision` against a `PlanInstance` (cover, idle rule, deadline,
  budget) and prices it line by line with exact arithmetic.

The model of a plan. A plan is an optional VALIDATE run, an IDLE gap of `idle_hours` after it,
the TRAIN run, and the EXPORT of weights and checkpoints (its hours and egress are already in the
train candidate). Each running stage is its own rental: a prepaid day, week or month bought for
validation is not carried across the idle gap into training. Across the gap:

- validate and train on the same offer (provider and offer_id): STOP keeps the disk (pay the
  validate candidate's `stop_storage`; training then needs no ingress, the data is already on the
  disk) or DESTROY (pay `destroy_egress` to copy data and checkpoints out, and the training
  instance pays its `ingress`);
- different offers: DESTROY is the only choice.

Billing facts behind the rules (seed 000, quoting NexGPU's billing page): an hourly price
metered per second, locked from order until destroy; Stop releases the compute but the disk keeps
billing, and only Destroy stops every charge, so checkpoints are copied out and verified first.
Seed 004: an 8x RTX 4090 node at 7920 CNY/month used for 10 days is cheaper by the day; rent by
day or week for periodic jobs.

Money is Decimal. Prices entering the solver are quantised to 1e-6 of the quote currency so that
`SCALE` (3600 x 1e6) units per currency unit make every charge, including per-second metering of
an hourly rate, an exact integer. Rounding to cents happens only for display (`round_money`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from fractions import Fraction
from functools import cached_property, lru_cache
from typing import Literal, NamedTuple

from rentopt.optimizer.currency import FxTable, round_money
from rentopt.optimizer.models import UNIT_HOURS, BillingLine, LineItems, Offer, PriceUnit

__all__ = [
    "Block", "RentalPricing", "Candidate", "PlanInstance", "Decision", "Cover", "Charge", "OfferRates",
    "PlanCost", "StageCost", "InvalidDecision", "QUANTUM", "SCALE", "rental_pricing", "offer_rates",
    "storage_cost", "transfer_cost", "transfer_hours", "cheapest_cover", "cover_alternatives",
    "explain_cover", "seconds_to_cover", "billed_metered_seconds", "plan_cost", "round_money",
    "quantize_money",
]

SECONDS_PER_HOUR = 3600
QUANTUM = Decimal("0.000001")  # prices are quantised to 1e-6 of the quote currency
MICROS = 10**6
SCALE = SECONDS_PER_HOUR * MICROS  # solver integer units per currency unit (exact per-second metering)

Stage = Literal["validate", "train"]
Idle = Literal["stop", "destroy"]


def quantize_money(amount: Decimal) -> Decimal:
    """Round to 1e-6 of a currency unit (half up): the grid every solver price lives on.

    >>> quantize_money(Decimal("7920") / Decimal("7.279"))
    Decimal('1088.061547')
    """
    return amount.quantize(QUANTUM, rounding=ROUND_HALF_UP)


def _to_decimal(value: Fraction) -> Decimal:
    """An exact Fraction as Decimal: exact when it terminates, else 28 significant digits."""
    return Decimal(value.numerator) / Decimal(value.denominator)


# --------------------------------------------------------------------------------------------
# Pricing of one rental


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


def _valid_billed_seconds(pricing: RentalPricing, seconds: int) -> bool:
    """Whether `seconds` is an amount the provider could bill: 0 or max(minimum, k granules)."""
    g, mn = pricing.granularity_s, pricing.minimum_s
    if seconds == 0:
        return True
    if seconds < 0 or pricing.metered_hourly is None:
        return False
    return (seconds % g == 0 and seconds >= mn) or (seconds == mn and mn >= g)


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


def _smallest_block_counts(ip: IntegerPricing, s0: int, residual: int, hi: int) -> list[int]:
    """Counts of the shortest block worth trying when it and metered time cover `residual`.

    With x = residual - c*s0 seconds metered, the cost c*p0 + rate*billed(x) is
    - increasing in c where the minimum charge applies (billed(x) = minimum): try the first c;
    - linear plus a term periodic in c (whole granules) elsewhere: the best c lies within one
      period of either end of that range;
    - plus c = ceil(residual / s0): blocks alone, no metered time.
    """
    full = -(-residual // s0)
    counts = {full} if full <= hi else set()
    if ip.rate is None:
        return list(counts)
    g, mn = ip.granularity, ip.minimum
    last_tail = min(full - 1, hi)  # the largest c that still leaves metered time
    x_min = max(g * (-(-mn // g) - 1), 0)  # billed(x) is whole granules (>= minimum) iff x > x_min
    last_granular = min(-(-(residual - x_min) // s0) - 1, last_tail) if residual > x_min else -1
    period = g // math.gcd(g, s0)
    if last_granular >= 0:
        if last_granular + 1 <= 2 * period:
            counts.update(range(0, last_granular + 1))
        else:
            counts.update(range(0, period))
            counts.update(range(last_granular - period + 1, last_granular + 1))
    first_minimum = last_granular + 1
    if first_minimum <= last_tail:
        counts.add(first_minimum)
    return list(counts)


def cover_in_units(pricing: RentalPricing, seconds: int) -> tuple[tuple[int, ...], int, int] | None:
    """The cheapest cover of `seconds` in exact integers.

    Returns (count of each block in `pricing.blocks` order, billed metered seconds, cost), the cost
    in units of 1 / `pricing.units.unit` of the currency (SCALE when prices are on the 1e-6 grid),
    or None when the pricing cannot cover the time. A depth-first search over the longer blocks'
    counts (capped by `_reduce_blocks`, pruned by the `floor_rate` lower bound), with the
    shortest block's count and the metered tail settled in closed form.
    """
    ip = pricing.units
    n = len(ip.blocks)
    if seconds <= 0:
        return (0,) * n, 0, 0
    if not ip.blocks:
        billed = billed_metered_seconds(ip.granularity, ip.minimum, seconds)
        return (), billed, ip.rate * billed  # type: ignore[operator]
    g, mn, rate, blocks, search, floor = ip.granularity, ip.minimum, ip.rate, ip.blocks, ip.search, ip.floor_rate
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
            for c in _smallest_block_counts(ip, length, residual, hi):
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
        price = quantize_money(fx.convert(opt.amount, offer.currency, currency) * nodes)
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
# Storage and transfer


class Charge(NamedTuple):
    """A priced charge; `note` says what is not included when the provider's price is unknown."""

    cost: Decimal
    note: str | None = None


class OfferRates(NamedTuple):
    """An offer's storage and transfer prices in the quote currency (None: unknown)."""

    storage_gb_month: Decimal | None
    storage_stopped_gb_month: Decimal | None
    egress_gb: Decimal | None
    ingress_gb: Decimal | None


def offer_rates(offer: Offer, fx: FxTable, currency: str) -> OfferRates:
    """Convert an offer's per-GB prices into `currency` (unknown stays None, free stays 0)."""

    def conv(value: Decimal | None) -> Decimal | None:
        return None if value is None else fx.convert(value, offer.currency, currency)

    return OfferRates(
        conv(offer.storage_gb_month), conv(offer.stopped_storage_price), conv(offer.egress_gb), conv(offer.ingress_gb)
    )


def storage_cost(
    price_gb_month: Decimal | None, gb: Decimal, hours: Decimal, month_hours: int, what: str = "storage"
) -> Charge:
    """Disk of `gb` kept for `hours` at `price_gb_month` (quote currency), prorated by the hour.

    A GB-month is `month_hours` hours of one GB (730 unless the provider says otherwise).

    >>> storage_cost(Decimal("0.20"), Decimal(500), Decimal(14 * 24), 730)
    Charge(cost=Decimal('46.027397'), note=None)
    >>> storage_cost(None, Decimal(500), Decimal(24), 730).note
    'storage price unknown: not included in the total'
    """
    if price_gb_month is None:
        return Charge(Decimal(0), f"{what} price unknown: not included in the total")
    return Charge(quantize_money(price_gb_month * gb * hours / month_hours))


def transfer_cost(price_per_gb: Decimal | None, gb: Decimal, what: str = "transfer") -> Charge:
    """Moving `gb` in or out at `price_per_gb` (quote currency); 0 is free, None is unknown.

    >>> transfer_cost(Decimal("0.09"), Decimal(500), "egress")
    Charge(cost=Decimal('45.000000'), note=None)
    """
    if price_per_gb is None:
        return Charge(Decimal(0), f"{what} price unknown: not included in the total")
    return Charge(quantize_money(price_per_gb * gb))


def transfer_hours(gb: Decimal, mbps: float | Decimal | None) -> Decimal | None:
    """Hours to move `gb` (1e9 bytes) at `mbps` (1e6 bit/s), rounded up to 1e-6 h; None if unknown.

    >>> transfer_hours(Decimal(500), 1000)
    Decimal('1.111112')
    """
    if mbps is None:
        return None
    rate = Decimal(str(mbps))
    if not rate > 0:
        return None
    seconds = gb * 8000 / rate  # GB -> 8e9 bit; Mbps -> 1e6 bit/s
    return (seconds / SECONDS_PER_HOUR).quantize(QUANTUM, rounding=ROUND_CEILING)


# --------------------------------------------------------------------------------------------
# The plan instance the solver gets, and its decisions


@dataclass(frozen=True)
class Candidate:
    """One stage option, fully priced: an offer x layout for validation or training."""

    id: str
    stage: Stage
    provider: str
    offer_id: str
    gpu: str
    gpus: int
    nodes: int
    layout: str
    hours: Decimal  # running hours to pay for
    pricing: RentalPricing  # in the quote currency, already x nodes
    storage_running: Decimal = Decimal(0)  # disk while running these hours
    ingress: Decimal = Decimal(0)  # data + base weights into a fresh instance
    egress: Decimal = Decimal(0)  # train: export of final weights + kept checkpoints
    destroy_egress: Decimal = Decimal(0)  # validate: copying data + checkpoints out on destroy
    stop_storage: Decimal = Decimal(0)  # validate: stopped disk for the idle gap
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.stage not in ("validate", "train"):
            raise ValueError(f"candidate {self.id}: stage must be validate or train, got {self.stage!r}")
        if not self.hours > 0:
            raise ValueError(f"candidate {self.id}: hours must be positive, got {self.hours}")
        for name in ("storage_running", "ingress", "egress", "destroy_egress", "stop_storage"):
            if getattr(self, name) < 0:
                raise ValueError(f"candidate {self.id}: {name} must not be negative")

    @property
    def offer_key(self) -> tuple[str, str]:
        return (self.provider, self.offer_id)

    @property
    def group(self) -> tuple[str, str]:
        """Top-K plans differ in the training stage's (provider, GPU)."""
        return (self.provider, self.gpu)


@dataclass(frozen=True)
class PlanInstance:
    """Everything the solver needs: candidates per stage, the idle gap, deadline and budget.

    When `validate` is not empty every plan has a validation stage.
    """

    validate: Sequence[Candidate]
    train: Sequence[Candidate]
    idle_hours: Decimal = Decimal(0)
    deadline_hours: Decimal | None = None
    budget: Decimal | None = None
    currency: str = "USD"

    def __post_init__(self) -> None:
        object.__setattr__(self, "validate", tuple(self.validate))
        object.__setattr__(self, "train", tuple(self.train))
        for stage, cands in (("validate", self.validate), ("train", self.train)):
            for c in cands:
                if c.stage != stage:
                    raise ValueError(f"candidate {c.id} is a {c.stage} candidate in the {stage} list")
        ids = [c.id for c in self.validate] + [c.id for c in self.train]
        if len(set(ids)) != len(ids):
            raise ValueError("candidate ids must be unique across validate and train")
        if self.idle_hours < 0:
            raise ValueError("idle_hours must not be negative")
        if self.deadline_hours is not None and not self.deadline_hours > 0:
            raise ValueError("deadline_hours must be positive")
        if self.budget is not None and self.budget < 0:
            raise ValueError("budget must not be negative")

    @cached_property
    def by_id(self) -> dict[str, Candidate]:
        return {c.id: c for c in (*self.validate, *self.train)}


@dataclass(frozen=True)
class Decision:
    """A solver's choice. `blocks` and `metered_seconds` are keyed by candidate id."""

    validate_id: str | None
    train_id: str
    idle: Idle | None
    blocks: dict[str, dict[str, int]] = field(default_factory=dict)
    metered_seconds: dict[str, int] = field(default_factory=dict)
    status: Literal["OPTIMAL", "FEASIBLE"] = "OPTIMAL"


# --------------------------------------------------------------------------------------------
# The oracle


class InvalidDecision(ValueError):
    """A decision that breaks a billing rule or a constraint. `rule` names which."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


@dataclass(frozen=True)
class StageCost:
    kind: Literal["validate", "idle", "train", "export"]
    candidate_id: str
    lines: tuple[BillingLine, ...]
    cost: Decimal


@dataclass(frozen=True)
class PlanCost:
    """Exact line items and total of one decision. `total_exact` is the exact rational value."""

    total: Decimal
    total_exact: Fraction
    line_items: LineItems
    stages: tuple[StageCost, ...]
    wall_hours: Decimal
    currency: str

    def stage(self, kind: str) -> StageCost | None:
        return next((s for s in self.stages if s.kind == kind), None)


def _check_cover(c: Candidate, blocks: Mapping[str, int], metered: int) -> Fraction:
    """Validate one rental's billing choice and return its compute cost (exact)."""
    p = c.pricing
    covered = 0
    cost = Fraction(0)
    for label, count in blocks.items():
        block = p.block(label)
        if block is None:
            raise InvalidDecision("cover", f"candidate {c.id} has no price option {label!r}")
        if not isinstance(count, int) or count < 0:
            raise InvalidDecision("cover", f"candidate {c.id}: count of {label!r} must be a whole number >= 0")
        covered += count * block.hours * SECONDS_PER_HOUR
        cost += count * Fraction(block.price)
    if not isinstance(metered, int) or not _valid_billed_seconds(p, metered):
        raise InvalidDecision(
            "cover",
            f"candidate {c.id}: {metered} metered seconds cannot be billed "
            f"(granularity {p.granularity_s} s, minimum {p.minimum_s} s, hourly {p.metered_hourly})",
        )
    if metered:
        cost += Fraction(p.metered_hourly) * metered / SECONDS_PER_HOUR  # type: ignore[arg-type]
    need = seconds_to_cover(c.hours)
    if covered + metered < need:
        raise InvalidDecision("cover", f"candidate {c.id}: pays for {covered + metered} s of the {need} s it runs")
    return cost


def _compute_lines(c: Candidate, blocks: Mapping[str, int], metered: int) -> list[BillingLine]:
    lines = []
    for label, count in blocks.items():
        if count:
            b = c.pricing.block(label)
            assert b is not None
            lines.append(
                BillingLine(unit=b.unit.value, count=Decimal(count), unit_price=b.price, cost=count * b.price)
            )
    if metered:
        hourly = c.pricing.metered_hourly
        assert hourly is not None
        cost = _to_decimal(Fraction(hourly) * metered / SECONDS_PER_HOUR)
        hours = Decimal(metered) / SECONDS_PER_HOUR
        lines.append(BillingLine(unit="hour", count=hours, unit_price=hourly, cost=cost))
    return lines


def _fixed_line(amount: Decimal, what: str) -> BillingLine:
    return BillingLine(unit="total", count=Decimal(1), unit_price=amount, cost=amount, what=what)


def plan_cost(instance: PlanInstance, decision: Decision) -> PlanCost:
    """Check `decision` against every rule of `instance` and price it exactly.

    Raises InvalidDecision (with `.rule` = ids | idle | cover | deadline | budget) when the
    decision is not a plan the instance allows.
    """
    by_id = instance.by_id
    t = by_id.get(decision.train_id)
    if t is None or t.stage != "train":
        raise InvalidDecision("ids", f"{decision.train_id!r} is not a training candidate of this instance")
    v: Candidate | None = None
    if decision.validate_id is not None:
        v = by_id.get(decision.validate_id)
        if v is None or v.stage != "validate":
            raise InvalidDecision("ids", f"{decision.validate_id!r} is not a validation candidate of this instance")
    elif instance.validate:
        raise InvalidDecision("ids", "this instance asks for a validation stage; the decision has none")
    chosen = {t.id} | ({v.id} if v else set())
    extra = (set(decision.blocks) | set(decision.metered_seconds)) - chosen
    if extra:
        raise InvalidDecision("ids", f"billing given for candidates that were not chosen: {sorted(extra)}")

    if v is None:
        if decision.idle is not None:
            raise InvalidDecision("idle", "an idle choice needs a validation stage")
    elif decision.idle not in ("stop", "destroy"):
        raise InvalidDecision("idle", "with a validation stage the idle gap must be 'stop' or 'destroy'")
    elif decision.idle == "stop" and v.offer_key != t.offer_key:
        raise InvalidDecision("idle", "stop keeps the validation disk, so training must use the same offer")

    items = {k: Fraction(0) for k in ("compute", "storage_running", "storage_stopped", "egress", "ingress")}
    stages: list[StageCost] = []

    def add_stage(
        kind, cand: Candidate, compute: Fraction, lines: list[BillingLine], fixed: list[tuple[str, Decimal]]
    ) -> None:
        total = compute
        items["compute"] += compute
        for what, amount in fixed:
            if amount:
                items[what] += Fraction(amount)
                total += Fraction(amount)
                lines.append(_fixed_line(amount, what))
        stages.append(StageCost(kind, cand.id, tuple(lines), _to_decimal(total)))

    hours = t.hours
    if v is not None:
        vb, vm = decision.blocks.get(v.id, {}), decision.metered_seconds.get(v.id, 0)
        add_stage("validate", v, _check_cover(v, vb, vm), _compute_lines(v, vb, vm),
                  [("storage_running", v.storage_running), ("ingress", v.ingress), ("egress", v.egress)])
        stopped = decision.idle == "stop"
        idle_fixed = [("storage_stopped", v.stop_storage)] if stopped else [("egress", v.destroy_egress)]
        add_stage("idle", v, Fraction(0), [], idle_fixed)
        hours = v.hours + instance.idle_hours + t.hours
    tb, tm = decision.blocks.get(t.id, {}), decision.metered_seconds.get(t.id, 0)
    ingress = Decimal(0) if decision.idle == "stop" else t.ingress
    add_stage("train", t, _check_cover(t, tb, tm), _compute_lines(t, tb, tm),
              [("storage_running", t.storage_running), ("ingress", ingress)])
    add_stage("export", t, Fraction(0), [], [("egress", t.egress)])

    if instance.deadline_hours is not None and hours > instance.deadline_hours:
        raise InvalidDecision(
            "deadline", f"the plan takes {hours} h, past the deadline of {instance.deadline_hours} h"
        )
    total = sum(items.values(), Fraction(0))
    if instance.budget is not None and total > instance.budget:
        raise InvalidDecision("budget", f"the plan costs {_to_decimal(total)} {instance.currency}, over the budget")
    return PlanCost(
        total=_to_decimal(total),
        total_exact=total,
        line_items=LineItems(**{k: _to_decimal(x) for k, x in items.items()}),
        stages=tuple(stages),
        wall_hours=hours,
        currency=instance.currency,
    )
