"""How long each stage of a plan rents its instance: transfers, spot's expected lost work, and
the sums that make a stage's hours.

Written once, in arithmetic that works the same on Decimals (the exact pass, one offer at a
time) and on float arrays (the first pass, every offer at once): the two passes cannot disagree
on what the hours are made of, only on rounding.
"""

from __future__ import annotations

from decimal import ROUND_CEILING, Decimal
from typing import Literal, TypeVar

import numpy as np

from rentopt.optimizer.models import Offer
from rentopt.optimizer.offer_table import OfferTable

# Transfers at an offer's stated bandwidth; when it states none we assume 1 Gbit/s, a common
# floor for rented GPU hosts (Vast lists inet_up/inet_down per host; many datacenter hosts have
# 10 Gbit/s or more), and say so in the plan.
DEFAULT_MBPS = 1000.0

# Spot/interruptible capacity: expected preemptions per hour. Hyperscalers publish interruption
# frequency buckets per month (AWS Spot Instance Advisor, spot-advisor-data.json: GPU types are
# often in the ">20 %" bucket, i.e. ~3e-4 per hour); marketplace bids (Vast interruptible, RunPod
# spot) are outbid or reclaimed far more often, and no provider publishes a rate, so the
# marketplace figure is a stated prior. Each preemption loses on average half a checkpoint
# interval plus a restart (reload the checkpoint, warm up).
PREEMPTIONS_PER_HOUR = {"hyperscaler": Decimal("0.0005"), "marketplace": Decimal("0.05")}
PROVIDER_CLASS = {"aws": "hyperscaler", "azure": "hyperscaler", "gcp": "hyperscaler"}
RESTART_HOURS = Decimal("0.25")

SECONDS_PER_HOUR = 3600
HOUR_GRID = Decimal("0.000001")  # exact hours are rounded up to this grid

Transfer = Literal["import", "export"]
Hours = TypeVar("Hours", Decimal, float, np.ndarray)


def spot_factor(provider: str, every: Decimal) -> tuple[Decimal, str]:
    """Expected hours per hour of work on `provider`'s spot capacity with a checkpoint `every`
    hours, and the note that says so."""
    cls = PROVIDER_CLASS.get(provider, "marketplace")
    rate = PREEMPTIONS_PER_HOUR[cls]
    lost = every / 2 + RESTART_HOURS
    factor = 1 + rate * lost
    note = (f"spot: assumed {rate} preemptions/h ({cls}); each loses ~{lost} h (half the {every} h checkpoint "
            f"interval + restart), so +{(factor - 1) * 100:.2f} % expected hours")
    return factor, note


def link_mbps(holder: Offer | OfferTable, transfer: Transfer) -> float | None | np.ndarray:
    """The bandwidth a transfer runs at: an import (base weights and data into a fresh instance)
    downloads; an export (final weights and kept checkpoints, or a destroyed validation's data
    and checkpoint) uploads. An Offer gives Mbit/s or None; an OfferTable a column, NaN unstated."""
    return holder.net_down_mbps if transfer == "import" else holder.net_up_mbps


def moved_hours(gb: Hours, mbps: Hours) -> Hours:
    """Hours to move `gb` (1e9 bytes) at `mbps` (1e6 bit/s), unrounded.

    >>> moved_hours(Decimal(500), Decimal(1000))
    Decimal('1.111111111111111111111111111')
    """
    seconds = gb * 8000 / mbps  # GB -> 8e9 bit; Mbps -> 1e6 bit/s
    return seconds / SECONDS_PER_HOUR


def transfer_hours(gb: Decimal, offer: Offer, transfer: Transfer) -> Decimal:
    """`moved_hours` in or out of `offer`'s instance, rounded up to 1e-6 h (an unstated or
    non-positive speed is DEFAULT_MBPS).

    >>> transfer_hours(Decimal(500), Offer.model_construct(net_down_mbps=None), "import")
    Decimal('1.111112')
    """
    mbps = link_mbps(offer, transfer) or DEFAULT_MBPS
    rate = Decimal(str(mbps))
    if not rate > 0:
        rate = Decimal(str(DEFAULT_MBPS))
    return moved_hours(gb, rate).quantize(HOUR_GRID, rounding=ROUND_CEILING)


def transfer_hours_per_row(gb: float, table: OfferTable, transfer: Transfer) -> np.ndarray:
    """`transfer_hours` of every row of `table`, in floats (unrounded)."""
    mbps = link_mbps(table, transfer)
    rate = np.where(np.isnan(mbps) | (mbps <= 0), DEFAULT_MBPS, mbps)
    return moved_hours(gb, rate)


def training_hours(import_h: Hours, work_h: Hours, factor: Hours, export_h: Hours) -> Hours:
    """A training stage's rental: the import, the work stretched by spot's lost work (`factor`,
    1 on demand), the export."""
    return import_h + work_h * factor + export_h


def validation_hours(import_h: Hours, validate_h: Hours) -> Hours:
    """A validation stage's rental on its instance: the import, then the run."""
    return validate_h + import_h


def rounded_hours(x: float | Decimal) -> Decimal:
    """Hours on the 1e-6 grid, rounded up (never under-bill)."""
    return Decimal(str(x)).quantize(HOUR_GRID, rounding=ROUND_CEILING)
