"""first_pass.PriceColumns: a table's prices in the quote currency, worked out by hand here."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from rentopt.optimizer.first_pass import PriceColumns
from rentopt.optimizer.offer_table import Const, OfferTable


def table(n: int, prices: dict) -> OfferTable:
    columns = {"provider": ["p"] * n, "offer_id": [f"o{i}" for i in range(n)], "gpu": ["H100-SXM-80GB"] * n,
               "gpu_raw": ["H100"] * n, "currency": ["EUR"] * n,
               "fetched_at": [datetime(2026, 11, 1, tzinfo=timezone.utc)] * n, "gpus": [1] * n,
               "gpu_memory_gb": [80.0] * n}
    return OfferTable.build(n, columns, prices=prices)


def test_a_price_held_once_for_every_row_is_still_converted_and_an_unknown_one_stays_unknown():
    """A source may hold one price for every row (a Const) and leave units out (NaN held once):
    each row's price is still times its own rate, and the units nobody sells stay NaN."""
    factor = np.array([1.0, 0.5, 7.0])  # one EUR in the quote currency, per row
    p = PriceColumns(table(3, {"hourly": Const(2.0)}), 0, factor, "USD")
    assert p.hourly.tolist() == [2.0, 1.0, 14.0]
    assert all(np.isnan(getattr(p, unit)).all() and getattr(p, unit).shape == (3,) for unit in ("day", "week", "month"))
    assert p.metered_only.tolist() == [True, True, True]
    assert p.floor_per_hour.tolist() == [2.0, 1.0, 14.0]


def test_the_floor_is_the_cheapest_rate_per_hour_of_any_unit():
    """Per row: hourly 3.0; a day at 48 (2.0/h); a week at 168 (1.0/h); a month of 730 h at 365
    (0.5/h): the floor is the month's 0.5, then times the rate."""
    n = 2
    prices = {unit: np.array([[price] * n, [np.nan] * n])
              for unit, price in (("hourly", 3.0), ("day", 48.0), ("week", 168.0), ("month", 365.0))}
    p = PriceColumns(table(n, prices), 0, np.array([1.0, 2.0]), "USD")
    assert p.floor_per_hour.tolist() == [0.5, 1.0]
    assert p.metered_only.tolist() == [False, False]
    interruptible = PriceColumns(table(n, prices), 1, np.array([1.0, 2.0]), "USD")
    assert np.isnan(interruptible.floor_per_hour).all()
