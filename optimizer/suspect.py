"""Suspect prices: a price far below what every other seller asks for the same GPU.

A catalog can carry prices no one sells at: mithril's SkyPilot rows list A100 and B200 at
0.01 USD per GPU-hour (skypilot-v8-more/mithril/vms.csv), inside any sane band, and a quote that
believes them puts 8 x B200 first at cents. Such a price is held out, not deleted: a quote lists
it (`--explain`), `rentopt offers --suspect` shows it, and `--allow-suspect` plans with it.

The rule (issue 23): an offer's hourly price per GPU is SUSPECT when it is under SUSPECT_SHARE
of the median of the other providers' prices for the same GPU, the same kind of price (on-demand
with on-demand, spot with spot: a spot discount of 60-90 % is ordinary) and the same currency.
Each other provider counts once, by the median of its own offers, so one provider with many
rows does not outvote the rest; at least MIN_OTHER_PROVIDERS others must sell the GPU, or there
is nothing to compare with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rentopt.optimizer.ties import renumbered_codes, stable_order

# "say under 1/5 of the median of the other providers" (issue 23). The cheapest honest offers in
# the bundled snapshot sit at about 1/3 of the median of the others for the same GPU (a Vast
# host against the hyperscalers), so 1/5 leaves them alone.
SUSPECT_SHARE = 0.2
MIN_OTHER_PROVIDERS = 2


@dataclass(frozen=True)
class Suspect:
    """Why one row's price is suspect (the numbers that failed)."""

    kind: int  # 0 on-demand, 1 spot
    per_gpu: float
    others_median: float
    others: int  # how many other providers
    currency: str

    def reason(self, gpu: str) -> str:
        what = "spot" if self.kind else "on-demand"
        return (f"suspect {what} price: {self.per_gpu:.4g} {self.currency} per GPU-hour, under 1/5 of the median "
                f"{self.others_median:.4g} {self.currency} of {self.others} other providers' {gpu}; "
                "held out (--allow-suspect plans with it)")


def suspect_rows(table: Any) -> dict[int, Suspect]:
    """Row -> Suspect for every row of an OfferTable whose hourly price is suspect (any kind).
    Worked out once per table (a report plans the same table once per job)."""
    derived = getattr(table, "_derived", None)
    if derived is None:
        return _suspect_rows(table)
    if "suspect_rows" not in derived:
        derived["suspect_rows"] = _suspect_rows(table)
    return dict(derived["suspect_rows"])


def _suspect_rows(table: Any) -> dict[int, Suspect]:
    found: dict[int, Suspect] = {}
    if not table.n:
        return found
    gpu_code, gpu_ids = table.category("gpu")
    provider_code, providers = table.category("provider")
    currency_code, currencies = table.category("currency")
    gpus = np.maximum(np.asarray(table.gpus, dtype=float), 1.0)
    for kind in (0, 1):
        per_gpu = np.asarray(table.hourly[kind], dtype=float) / gpus
        rows = np.flatnonzero(~np.isnan(per_gpu) & (per_gpu > 0) & np.array(
            [g is not None for g in gpu_ids], dtype=bool)[gpu_code])
        if not len(rows):
            continue
        # Each provider's median per (gpu, currency): the rows numbered by their (gpu, currency,
        # provider) in that order, then each such segment's median (`_medians`).
        g, c, p, v = gpu_code[rows].astype(np.int64), currency_code[rows].astype(np.int64), \
            provider_code[rows].astype(np.int64), per_gpu[rows]
        key = (g * len(currencies) + c) * len(providers) + p
        segment = renumbered_codes(key)
        key_of = np.empty(int(segment.max()) + 1, dtype=np.int64)
        key_of[segment] = key
        medians = _medians(v, segment, len(key_of))
        # The median of the OTHER providers' medians depends on the group and the provider, not
        # the row: per (group, provider), from the group's medians sorted once (`_others_median`).
        group = key_of // len(providers)
        middle, others = _others_median(medians, group)
        threshold = np.where(others >= MIN_OTHER_PROVIDERS, SUSPECT_SHARE * middle, np.nan)
        if np.isnan(threshold).all():
            continue
        with np.errstate(invalid="ignore"):
            under = np.flatnonzero(v < threshold[segment])  # NaN (no comparison) is never under
        for i in under.tolist():
            r = int(rows[i])
            if r not in found:
                at = int(segment[i])
                found[r] = Suspect(kind, float(v[i]), float(middle[at]), int(others[at]), currencies[int(c[i])])
    return found


def _medians(values: np.ndarray, segment: np.ndarray, count: int) -> np.ndarray:
    """Per segment 0 .. count - 1 (`segment`: each value's; every segment holds one or more), the
    median of its values as statistics.median takes it: the middle value, or the mean of the
    middle two. The values are put in segment order by one stable sort of the segment numbers
    (`stable_order`: by counting where they fit 16 bits), then the segments are sorted side by
    side, those of a like size together as the rows of one block (their size rounded up to a
    power of two, padded with +inf, which sorts last): no sort of every value by (segment, value).

    >>> _medians(np.array([5.0, 1.0, 4.0, 2.0, 3.0, 9.0]), np.array([0, 1, 0, 1, 1, 2]), 3).tolist()
    [4.5, 2.0, 9.0]
    """
    order = stable_order(segment)
    grouped = values[order]
    sizes = np.bincount(segment, minlength=count)
    starts = np.cumsum(sizes) - sizes
    widths = np.left_shift(1, np.frexp(sizes - 1)[1])  # the least power of two >= size
    medians = np.empty(count)
    for width in np.unique(widths).tolist():
        at = np.flatnonzero(widths == width)
        size = sizes[at][:, None]
        place = np.arange(width)
        block = np.where(place < size, grouped[np.minimum(starts[at][:, None] + place, len(grouped) - 1)], np.inf)
        block.sort(axis=1)
        size = size[:, 0]
        low, high = np.take_along_axis(block, ((size - 1) // 2)[:, None], 1)[:, 0], \
            np.take_along_axis(block, (size // 2)[:, None], 1)[:, 0]
        medians[at] = np.where(size % 2 == 1, high, (low + high) / 2)
    return medians


def _others_median(medians: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per provider of a group (`group`: sorted labels, one per provider): the median of the
    group's OTHER providers' `medians`, as statistics.median takes it (the middle value, or the
    mean of the middle two), and how many others there are (the median is NaN below 2).

    >>> m, n = _others_median(np.array([4.0, 1.0, 2.0, 8.0, 5.0]), np.array([0, 0, 0, 1, 1]))
    >>> m.tolist(), n.tolist()  # group 0: others of 4 are 1, 2 -> 1.5; of 1: 2, 4 -> 3.0; of 2: 1, 4 -> 2.5
    ([1.5, 3.0, 2.5, nan, nan], [2, 2, 2, 1, 1])
    """
    if not len(medians):
        return np.zeros(0), np.zeros(0, dtype=np.int64)
    first = np.r_[True, group[1:] != group[:-1]]
    start_of_group = np.flatnonzero(first)
    size = np.diff(np.r_[start_of_group, len(group)])
    per = np.repeat(np.arange(len(start_of_group)), size)
    start, others = start_of_group[per], size[per] - 1
    order = np.lexsort((medians, per))  # each group's medians ascending, groups in place
    ascending = medians[order]
    pos = np.empty(len(medians), dtype=np.int64)
    pos[order] = np.arange(len(medians)) - start[order]  # each provider's place in its group

    def other(k: np.ndarray) -> np.ndarray:
        """The k-th smallest of the others (k < others): its own place skipped. (A group of one
        reads past itself, clipped to the array: its median is NaN all the same.)"""
        return ascending[np.minimum(start + k + (k >= pos), len(ascending) - 1)]

    half = others // 2
    enough = others >= 2
    low, high = other(np.where(enough, np.maximum(half - 1, 0), 0)), other(np.where(enough, half, 0))
    middle = np.where(others % 2 == 1, high, (low + high) / 2)
    return np.where(enough, middle, np.nan), others


def suspect_offers(offers: list) -> dict[tuple[str, str], str]:
    """(provider, offer id) -> reason, for full offers (`rentopt offers --suspect`)."""
    from rentopt.optimizer.offer_table import OfferTable

    table = OfferTable.from_offers(offers)
    return {(table.provider[r], table.offer_id[r]): s.reason(table.gpu[r] or table.gpu_raw[r])
            for r, s in suspect_rows(table).items()}
