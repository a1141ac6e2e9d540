"""The planner's tie classes and node shapes, kept on the offer table for the usable rows they
were worked out for: the same usable rows get the same answer without working it out again,
other usable rows (another job's filter, spot) and another table get their own, and the answer
is the one worked out afresh."""

from __future__ import annotations

from dataclasses import replace
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


def test_a_shapes_split_by_provider_and_kind_is_kept_with_the_shapes_and_is_the_fresh_one():
    from rentopt.optimizer.stage_hours import transfer_hours_per_row
    from tests.test_validation_pieces import check_same

    # the bundled offers, and a copy of every third one rented for at most an hour: too short for
    # a validation, so their shapes' rows are split without them
    offers = [o for p in bundled_snapshot().providers for o in p.offers]
    an_hour = [o.model_copy(update={"offer_id": o.offer_id + "-1h", "max_duration_hours": 1}) for o in offers[::3]]
    table = OfferTable.from_offers(offers + an_hour)

    def validation_columns(model: str, spot: bool = False, fresh_splits: bool = False):
        req = with_sized_validation(QuoteRequest(model=resolve_model(model), setup=TrainingSetup(mode="lora"),
                                                 days=Decimal(3), spot=spot))
        p = _Planner(req, table, FX, per_provider=True)
        kinds = (0, 1) if spot else (0,)
        _, shapes = p._groups(p._usable_rows(kinds))
        if fresh_splits:
            p._splits = {}
        import_h = transfer_hours_per_row(float(p.prep.import_gb), table, "import")
        tr = p._train_columns(shapes, kinds, import_h)
        # the columns are those of the planner's loop before (test_validation_pieces' reference),
        # rows out of time left out
        check_same(p, shapes, kinds, import_h, tr)
        va, need = p._validate_columns(shapes, kinds, import_h, tr)
        return p, (va.row.tolist(), va.pieces.tolist(), va.starts.tolist(), need.tolist())

    first, _ = validation_columns("7b")
    kept = dict(first._splits)
    assert kept and all(k[1:] == ((0,), True) for k in kept)
    shapes = table._derived["planning_groups"][2]
    assert len(kept) < len(shapes)  # the shapes with a row out of time are split afresh, not kept
    second, got = validation_columns("13b")  # another job's pass over the same table and rows
    assert second._splits is first._splits and all(second._splits[k] is v for k, v in kept.items())
    assert got == validation_columns("13b", fresh_splits=True)[1]
    for key, (rows, counts, groups) in kept.items():  # each the split of all its shape's rows
        want = first._split_by_provider_and_kind(shapes[key[0]][2], [table.has_kind(0)])
        assert rows.tolist() == want[0].tolist() and counts.tolist() == want[1].tolist()
        assert groups.tolist() == want[2].tolist()
    # spot: other usable rows, other shapes, their own splits by both kinds
    assert validation_columns("13b", spot=True)[1] == validation_columns("13b", spot=True, fresh_splits=True)[1]
    # offers with no spot price: a spot pass has the on-demand pass's usable rows and shapes, and
    # splits them by both kinds, apart from the on-demand pass's splits
    table = OfferTable.from_offers([o for o in offers if not o.spot and not o.options(interruptible=True)])
    on_demand, _ = validation_columns("7b")
    spot, got = validation_columns("7b", spot=True)
    assert spot._splits is on_demand._splits and {k[1] for k in spot._splits} == {(0,), (0, 1)}
    assert got == validation_columns("7b", spot=True, fresh_splits=True)[1]


def test_a_tables_full_offers_and_terms_are_resolved_once_for_the_passes_that_share_the_rates():
    from rentopt.optimizer.billing import offer_terms

    offers = [o for p in bundled_snapshot().providers for o in p.offers]
    asked: list[list[int]] = []
    table = OfferTable.from_offers(offers)
    resolve = table.resolve
    table.resolve = lambda rows: asked.append(list(rows)) or resolve(rows)
    full, terms = planner(table)._resolved([3, 1, 4])
    assert asked == [[3, 1, 4]] and {r: o.key for r, o in full.items()} == {r: offers[r].key for r in (3, 1, 4)}
    terms[1] = offer_terms(full[1], FX, "USD")
    # another pass over the table, the same rates and currency: only the new row is read, the
    # terms worked out so far are there
    full2, terms2 = planner(table)._resolved([1, 5, 3])
    assert asked == [[3, 1, 4], [5]] and full2[5].key == offers[5].key and full2[1] is full[1] and terms2[1] is terms[1]
    # another quote currency, or other rates (another FxTable): terms afresh, offers read again
    eur = planner(table)
    eur.req = replace(eur.req, currency="EUR")
    assert eur._resolved([1])[1] == {} and asked[-1] == [1]
    assert planner(table)._resolved([1])[1] == {}  # the kept entry is EUR's now: USD's afresh
    other = _Planner(planner(table).req, table, FxTable.load(), per_provider=True)._resolved([1])
    assert asked[-1] == [1] and other[1] == {} and len(asked) == 5
