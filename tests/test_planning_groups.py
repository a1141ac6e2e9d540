"""The planner's tie classes and node shapes, kept on the offer table for the usable rows they
were worked out for: the same usable rows get the same answer without working it out again,
other usable rows (another job's filter, spot) and another table get their own, and the answer
is the one worked out afresh."""

from __future__ import annotations

from decimal import Decimal

import numpy as np

from rentopt.optimizer.catalog import bundled_snapshot
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.job import QuoteRequest, with_sized_validation
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.planner import _Planner
from rentopt.optimizer.ties import tie_classes
from rentopt.optimizer.workload import resolve_model

FX = FxTable.load()


def planner(table: OfferTable, first_pass: bool = True) -> _Planner:
    req = with_sized_validation(QuoteRequest(model=resolve_model("7b"), setup=TrainingSetup(mode="lora"),
                                             days=Decimal(3)))
    return _Planner(req, table, FX, first_pass=first_pass, per_provider=True)


def tied_table() -> OfferTable:
    """The bundled offers, each twice (a copy under another id): every offer is in a class of two."""
    offers = [o for p in bundled_snapshot().providers for o in p.offers]
    return OfferTable.from_offers(offers + [o.model_copy(update={"offer_id": o.offer_id + "-copy"}) for o in offers])


def fresh(table: OfferTable, usable: np.ndarray):
    ties = tie_classes(table, usable)
    return ties, planner(table)._shapes(usable & ties.first if len(ties.klass) else usable)


def same(got, want) -> bool:
    (ties, shapes), (want_ties, want_shapes) = got, want
    return (ties.first.tolist() == want_ties.first.tolist() and ties.klass.tolist() == want_ties.klass.tolist()
            and ties.members.tolist() == want_ties.members.tolist() and list(shapes) == list(want_shapes)
            and all(shapes[k][2].tolist() == want_shapes[k][2].tolist() for k in want_shapes))


def test_the_same_usable_rows_reuse_the_answer_and_other_rows_get_their_own():
    table = tied_table()
    usable = planner(table)._usable_rows((0,))
    first = planner(table)._groups(usable)
    assert len(first[0].klass) and same(first, fresh(table, usable))
    again = planner(table)._groups(usable.copy())  # another pass, equal rows: the kept answer
    assert again[0] is first[0] and again[1] is first[1]
    fewer = usable.copy()
    fewer[np.flatnonzero(usable)[::2]] = False  # every other usable row left out (a class loses a member)
    other = planner(table)._groups(fewer)
    assert other[0] is not first[0] and same(other, fresh(table, fewer)) and not same(other, first)
    assert same(planner(table)._groups(usable), first)  # and back


def test_another_table_and_the_oracles_pass_get_their_own():
    table = tied_table()
    usable = planner(table)._usable_rows((0,))
    kept = planner(table)._groups(usable)
    half = table.take(np.arange(table.n // 2))
    half_usable = planner(half)._usable_rows((0,))
    assert same(planner(half)._groups(half_usable), fresh(half, half_usable))
    ties, shapes = planner(table, first_pass=False)._groups(usable)  # every offer planned: no classes
    assert not len(ties.klass) and sum(len(v[2]) for v in shapes.values()) == int(usable.sum())
    assert planner(table)._groups(usable)[0] is kept[0]  # the oracle's pass kept nothing of its own
