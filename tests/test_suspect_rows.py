"""suspect.suspect_rows, grouped with arrays, against the rule read straight from its docstring
(issue 23), worked row by row here, and one case worked by hand."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from statistics import median

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.suspect import _medians, suspect_rows

T0 = datetime(2026, 11, 28, 6, tzinfo=timezone.utc)


def offer(provider: str, i: int, gpu: str, price: str, *, spot: bool = False, currency: str = "USD", gpus: int = 1):
    return Offer(provider=provider, offer_id=f"{provider}-{i}", gpu=gpu, gpu_raw=gpu, gpus=gpus, gpu_memory_gb=80,
                 spot=spot, currency=currency, fetched_at=T0, source="test",
                 price_options=[PriceOption(unit="hour", amount=Decimal(price), interruptible=spot)])


def by_the_rule(offers: list[Offer]) -> dict[int, tuple]:
    """Row -> (kind, per GPU, others' median, others): a row is suspect when its hourly price per
    GPU is under 1/5 of the median of the other providers' medians for the same GPU, kind and
    currency, with at least 2 other providers (the first kind found wins)."""
    found: dict[int, tuple] = {}
    for kind in (0, 1):
        prices = {}
        for r, o in enumerate(offers):
            if o.spot == bool(kind):
                prices[r] = float(o.price_options[0].amount) / o.gpus
        for r, v in prices.items():
            o = offers[r]
            per_provider: dict[str, list[float]] = {}
            for q, w in prices.items():
                if offers[q].gpu == o.gpu and offers[q].currency == o.currency:
                    per_provider.setdefault(offers[q].provider, []).append(w)
            if len(per_provider) <= 2:
                continue
            others = [median(ws) for p, ws in per_provider.items() if p != o.provider]
            if len(others) >= 2 and v < 0.2 * median(others) and r not in found:
                found[r] = (kind, v, median(others), len(others))
    return found


def test_a_price_under_a_fifth_of_the_others_median_is_suspect():
    # others' medians: b 2.0; c (2.0, 3.0) -> 2.5; d 4.0 -> median of a's others 2.5; 0.49 < 0.5
    offers = [offer("a", 0, "H100-SXM-80GB", "0.49"), offer("a", 1, "H100-SXM-80GB", "0.51"),
              offer("b", 0, "H100-SXM-80GB", "2.0"), offer("c", 0, "H100-SXM-80GB", "2.0"),
              offer("c", 1, "H100-SXM-80GB", "3.0"), offer("d", 0, "H100-SXM-80GB", "4.0")]
    found = suspect_rows(OfferTable.from_offers(offers))
    assert list(found) == [0]
    assert (found[0].per_gpu, found[0].others_median, found[0].others) == (0.49, 2.5, 3)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcde"), st.sampled_from(["H100-SXM-80GB", "A100-SXM4-80GB"]),
                          st.sampled_from(["0.1", "0.3", "0.45", "1", "2", "2.5", "3", "8"]), st.booleans(),
                          st.sampled_from(["USD", "CNY"]), st.sampled_from([1, 2])), max_size=40))
def test_suspect_rows_follow_the_rule(rows):
    offers = [offer(p, i, g, price, spot=spot, currency=ccy, gpus=n) for i, (p, g, price, spot, ccy, n) in enumerate(rows)]
    found = suspect_rows(OfferTable.from_offers(offers))
    assert {r: (s.kind, s.per_gpu, s.others_median, s.others) for r, s in found.items()} == by_the_rule(offers)


def test_worked_out_once_per_table_and_never_carried_to_another():
    """The memo belongs to one table: a slice of it (`take`) has other neighbours, so its own
    answer; a caller that changes the returned dict changes nothing for the next. Here: four
    providers sell H100 at 2.00, 2.10 and 2.20, 'cut' at 0.10 (under 1/5 of 2.10). Without
    'b' and 'c' only 'a' is left to compare with: fewer than two others, nothing suspect."""
    offers = [offer("a", 1, "H100-SXM-80GB", "2.00"), offer("b", 1, "H100-SXM-80GB", "2.10"),
              offer("c", 1, "H100-SXM-80GB", "2.20"), offer("cut", 1, "H100-SXM-80GB", "0.10")]
    table = OfferTable.from_offers(offers)
    first = suspect_rows(table)
    assert list(first) == [3]
    first.clear()
    assert list(suspect_rows(table)) == [3]
    assert suspect_rows(table.take(np.array([0, 3]))) == {}
    assert list(suspect_rows(table.take(np.array([1, 2, 3, 0])))) == [2]


def medians_by_statistics(values: list[float], segments: list[int], count: int) -> list[float]:
    return [median([v for v, s in zip(values, segments) if s == k]) for k in range(count)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.1, 0.3, 0.45, 1.0, 2.0, 2.5, 3.0, 8.0, 1e-9, 7e6]), min_size=1, max_size=70),
                min_size=1, max_size=12), st.randoms(use_true_random=False))
def test_segment_medians_are_statistics_median(segments, random):
    """Segments of every size from 1 to 70 (blocks of widths 1 to 128, padded), values shuffled
    across segments: each segment's median as statistics.median takes it."""
    pairs = [(v, k) for k, values in enumerate(segments) for v in values]
    random.shuffle(pairs)
    values, labels = [v for v, _ in pairs], [k for _, k in pairs]
    got = _medians(np.array(values), np.array(labels, dtype=np.int64), len(segments))
    assert got.tolist() == medians_by_statistics(values, labels, len(segments))


def test_segment_medians_past_16_bit_segment_numbers():
    """More segments than a 16-bit number holds take the other stable sort; the medians are the
    same as a sort of every value by (segment, value) gives."""
    rng = np.random.default_rng(7)
    count = 70_000
    labels = np.concatenate([np.arange(count), rng.integers(0, count, 60_000)])
    values = rng.integers(1, 50, len(labels)) / 4
    order = np.lexsort((values, labels))
    sizes = np.bincount(labels)
    at = np.cumsum(sizes) - sizes
    ranked = values[order]
    expected = (ranked[at + (sizes - 1) // 2] + ranked[at + sizes // 2]) / 2
    got = _medians(values, labels, count)
    assert np.array_equal(got, expected)
    assert got[int(np.argmax(sizes))] != 0  # not trivially equal
