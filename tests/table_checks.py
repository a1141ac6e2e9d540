"""Shared check for the tests of the three ways offers become planner columns (CSV reader,
store columns, OfferTable.from_offers): two tables are the same table."""

from __future__ import annotations

import numpy as np

from rentopt.optimizer.offer_table import ARRAY_COLUMNS, LIST_COLUMNS, PRICE_COLUMNS, OfferTable


def assert_same_table(got: OfferTable, want: OfferTable) -> None:
    """Every column equal (NaN equal to NaN), the terms and notes too."""
    assert got.n == want.n
    for name in LIST_COLUMNS:
        assert getattr(got, name) == getattr(want, name), name
    for name in (*ARRAY_COLUMNS, *PRICE_COLUMNS):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
    assert got.terms == want.terms and got.extra_notes == want.extra_notes
