"""Offers as columns: what the planner's first pass needs of N offers, without N Offer objects.

A quote over a large catalog ranks offers before it builds anything per offer: feasibility and
speed run once per node shape, billing's rough bounds run as array arithmetic over these
columns, and only the few offers that can still be among the best plans become full `Offer`
objects (`OfferTable.offers(rows)`). Any source can fill a table: a list of offers
(`from_offers`), an offers file's columns, the price store's planning columns.

Conventions: numbers are numpy arrays, NaN where a price or a figure is unknown (never 0: a 0
is free); strings are Python lists. Prices are per node, in the offer's own currency, by kind:
index 0 on-demand, 1 interruptible. Several options of the same unit keep the cheapest (the
dearer one is never part of a cheapest cover); reserved terms, rare, are kept per row in `terms`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from rentopt.optimizer.models import Offer, PriceUnit

KINDS = (False, True)  # on-demand, interruptible
_NAN = float("nan")
_UNIT_COLUMNS = {PriceUnit.HOUR: "hourly", PriceUnit.DAY: "day", PriceUnit.WEEK: "week", PriceUnit.MONTH: "month"}


@dataclass
class OfferTable:
    provider: list[str]
    offer_id: list[str]
    gpu: list[str | None]
    gpu_raw: list[str]
    gpu_status: list[str]
    currency: list[str]
    fetched_at: list[datetime]
    interconnect: list[str]
    fabric: list[str | None]
    stopped_bills: list[str]
    gpus: np.ndarray
    gpu_memory_gb: np.ndarray
    fabric_gbps: np.ndarray
    nodes_available: np.ndarray
    host_ram_gb: np.ndarray
    spot: np.ndarray
    net_up_mbps: np.ndarray
    net_down_mbps: np.ndarray
    granularity_s: np.ndarray
    minimum_s: np.ndarray
    month_hours: np.ndarray
    max_hours: np.ndarray
    storage: np.ndarray
    stopped_storage: np.ndarray  # the offer's stopped-disk price, else its running one
    egress: np.ndarray
    ingress: np.ndarray
    stopped_max_hours: np.ndarray
    free_disk_gb: np.ndarray
    hourly: np.ndarray  # shape (2, n): [kind, row]
    day: np.ndarray
    week: np.ndarray
    month: np.ndarray
    terms: dict[tuple[int, int], tuple[tuple[float, float], ...]] = field(default_factory=dict)  # (kind, row) -> (hours, price)
    extra_notes: dict[int, str] = field(default_factory=dict)  # row -> a note the offer carries (sheet GPU names)
    resolve: Callable[[Sequence[int]], list[Offer]] | None = None

    @property
    def n(self) -> int:
        return len(self.provider)

    def key(self, row: int) -> tuple[str, str]:
        return (self.provider[row], self.offer_id[row])

    def has_kind(self, kind: int) -> np.ndarray:
        """Rows with at least one price option of `kind`."""
        found = ~(np.isnan(self.hourly[kind]) & np.isnan(self.day[kind]) & np.isnan(self.week[kind])
                  & np.isnan(self.month[kind]))
        for k, row in self.terms:
            if k == kind:
                found[row] = True
        return found

    def offers(self, rows: Iterable[int]) -> list[Offer]:
        """The full offers of `rows`, in that order (from the table's source)."""
        rows = list(rows)
        if self.resolve is None:
            raise ValueError("this offer table cannot resolve full offers")
        return self.resolve(rows)

    @classmethod
    def from_offers(cls, offers: Sequence[Offer]) -> OfferTable:
        """The table of a list of offers (bundled snapshot, offers files, sheets, a store read whole)."""
        n = len(offers)
        f = lambda values: np.array(values, dtype=np.float64)  # noqa: E731
        opt = lambda x: _NAN if x is None else float(x)  # noqa: E731
        prices = {name: np.full((2, n), _NAN) for name in ("hourly", "day", "week", "month")}
        terms: dict[tuple[int, int], list[tuple[float, float]]] = {}
        notes: dict[int, str] = {}
        for i, o in enumerate(offers):
            for p in o.price_options:
                kind = int(p.interruptible)
                amount = float(p.amount)
                column = _UNIT_COLUMNS.get(p.unit)
                if column is None:
                    terms.setdefault((kind, i), []).append((float(p.term_hours or 0), amount))
                    continue
                have = prices[column][kind, i]
                if np.isnan(have) or amount < have:
                    prices[column][kind, i] = amount
            if o.extra.get("gpu_note"):
                notes[i] = str(o.extra["gpu_note"])
        kept = list(offers)
        return cls(
            provider=[o.provider for o in offers], offer_id=[o.offer_id for o in offers], gpu=[o.gpu for o in offers],
            gpu_raw=[o.gpu_raw for o in offers], gpu_status=[o.gpu_status for o in offers],
            currency=[o.currency for o in offers], fetched_at=[o.fetched_at for o in offers],
            interconnect=[o.interconnect for o in offers], fabric=[o.fabric for o in offers],
            stopped_bills=[o.stopped_bills for o in offers],
            gpus=np.array([o.gpus for o in offers], dtype=np.int64), gpu_memory_gb=f([o.gpu_memory_gb for o in offers]),
            fabric_gbps=f([opt(o.fabric_gbps) for o in offers]),
            nodes_available=np.array([o.nodes_available for o in offers], dtype=np.int64),
            host_ram_gb=f([opt(o.host_ram_gb) for o in offers]), spot=np.array([o.spot for o in offers], dtype=bool),
            net_up_mbps=f([opt(o.net_up_mbps) for o in offers]), net_down_mbps=f([opt(o.net_down_mbps) for o in offers]),
            granularity_s=np.array([o.billing_granularity_s for o in offers], dtype=np.int64),
            minimum_s=np.array([o.billing_minimum_s for o in offers], dtype=np.int64),
            month_hours=np.array([o.month_hours for o in offers], dtype=np.int64),
            max_hours=f([opt(o.max_duration_hours) for o in offers]),
            storage=f([opt(o.storage_gb_month) for o in offers]),
            stopped_storage=f([opt(o.stopped_storage_price) for o in offers]),
            egress=f([opt(o.egress_gb) for o in offers]), ingress=f([opt(o.ingress_gb) for o in offers]),
            stopped_max_hours=f([_NAN if o.stopped_max_days is None else o.stopped_max_days * 24 for o in offers]),
            free_disk_gb=f([o.free_disk_gb for o in offers]),
            terms={k: tuple(v) for k, v in terms.items()}, extra_notes=notes,
            resolve=lambda rows: [kept[r] for r in rows], **prices,
        )
