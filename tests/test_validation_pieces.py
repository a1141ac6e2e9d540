"""The planner's validation candidates, built with array operations (a shape's rows split by
provider and kind once, keys numbered by first appearance), against the piece-by-piece loop it
replaced: the same rows, pieces, key numbers and needed keys, in the same order.

The reference below is that loop as it was (a Python loop per shape, signature, provider and
kind, keys numbered by dict.setdefault, the needed key looked up per training layout and
provider), run on the same random catalogs: the bundled snapshot's offers, a random subset,
dealt out to a few providers, spot or not, per provider or not.
"""

from __future__ import annotations

from decimal import Decimal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rentopt.optimizer.candidates import Signature
from rentopt.optimizer.catalog import bundled_snapshot
from rentopt.optimizer.currency import FxTable
from rentopt.optimizer.feasibility import NoFit, fused_attention
from rentopt.optimizer.first_pass import ValidateColumns
from rentopt.optimizer.job import QuoteRequest, with_sized_validation
from rentopt.optimizer.models import TrainingSetup
from rentopt.optimizer.offer_table import OfferTable
from rentopt.optimizer.planner import _needed_key, _Planner, _validation_keys, _ValidationKeys
from rentopt.optimizer.stage_hours import transfer_hours_per_row, validation_hours
from rentopt.optimizer.workload import resolve_model

FX = FxTable.load()
OFFERS = [o for p in bundled_snapshot().providers for o in p.offers]


def reference(planner: _Planner, shapes, kinds, import_h, tr):
    """The loop the planner ran before: (row, piece, pieces, starts) of the validation columns,
    the keys numbered by setdefault, and per training candidate the key it needs."""
    req, prep, t = planner.req, planner.prep, planner.table
    by_arch: dict = {}
    for fit, gpu, _, _ in planner.fit_list:
        by_arch.setdefault(gpu.architecture, set()).add(Signature.of(fit.layout))
    signatures = sorted({s for sigs in by_arch.values() for s in sigs}, key=repr)
    numbered = {sig: n for n, sig in enumerate(signatures)}
    setups = {sig: (prep.validate_setup.model_copy(update={
        "precision": sig.precision, "flash_attention": fused_attention(sig.attention)}), sig.pins(req.pins))
        for sig in signatures}
    keys: dict = {}
    out_h = transfer_hours_per_row(float(prep.destroy_gb), t, "export")
    hours = validation_hours(import_h, float(req.validate_hours))
    in_time = ~(hours + out_h > t.max_hours)
    has = {k: t.has_kind(k) for k in kinds}
    rows_of, pieces = [], []
    for gpu, shape, rows in shapes.values():
        sigs = by_arch.get(gpu.architecture)
        if not sigs:
            continue
        rows = rows[in_time[rows]]
        if not len(rows):
            continue
        for sig in sigs:
            setup, pins = setups[sig]
            fit = planner.layout(setup, shape, pins)
            if isinstance(fit, NoFit) or Signature.of(fit.layout) != sig:
                continue
            if planner.per_provider:
                codes = planner.provider_code[rows]
                split = [(t.provider[int(at[0])], at) for at in (rows[codes == c] for c in np.unique(codes).tolist())]
            else:
                split = [(None, rows)]
            for provider, mine in split:
                model, arch = _validation_keys(gpu, sig, provider)
                model_key = keys.setdefault(model, len(keys))
                arch_key = keys.setdefault(arch, len(keys))
                for kind in kinds:
                    rows_of.append(mine[has[kind][mine]])
                    pieces.append((kind, numbered[sig], len(rows_of), model_key, arch_key))
    need = []
    for c in range(len(tr)):
        fit, gpu, _, _ = planner.fit_list[int(tr.fit[c])]
        provider = t.provider[int(tr.row[c])] if planner.per_provider else None
        need.append(keys.get(_needed_key(gpu, Signature.of(fit.layout), keys, provider), -1))
    counts = [len(r) for r in rows_of]
    row = np.concatenate(rows_of).astype(np.int64) if rows_of else np.zeros(0, dtype=np.int64)
    return row, np.repeat(np.arange(len(pieces)), counts), np.array(pieces, dtype=np.int64).reshape(-1, 5), \
        np.cumsum([0, *counts]), np.array(need, dtype=np.int64)


def planned_columns(table: OfferTable, model: str, mode: str, spot: bool, per_provider: bool):
    req = with_sized_validation(QuoteRequest(model=resolve_model(model), setup=TrainingSetup(mode=mode),
                                             days=Decimal(3), spot=spot))
    planner = _Planner(req, table, FX, per_provider=per_provider)
    kinds = (0, 1) if spot else (0,)
    shapes = planner._shapes(planner._usable_rows(kinds))
    import_h = transfer_hours_per_row(float(planner.prep.import_gb), table, "import")
    tr = planner._train_columns(shapes, kinds, import_h)
    return planner, shapes, kinds, import_h, tr


def dealt(seed: int, size: int, providers: int) -> OfferTable:
    """A random subset of the bundled offers, dealt out at random to `providers` providers."""
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(OFFERS), size=min(size, len(OFFERS)), replace=False)
    owner = rng.integers(0, providers, size=len(picked))
    return OfferTable.from_offers([OFFERS[i].model_copy(update={"provider": f"p{o}", "offer_id": f"o{i}"})
                                   for i, o in zip(picked.tolist(), owner.tolist())])


def check_same(planner, shapes, kinds, import_h, tr):
    row, piece, pieces, starts, need = reference(planner, shapes, kinds, import_h, tr)
    va, got_need = planner._validate_columns(shapes, kinds, import_h, tr)
    assert isinstance(va, ValidateColumns)
    pieces[:, 2] = -1  # the reference numbers fits its own way; compared through the fits' layouts below
    got = va.pieces.copy()
    got[:, 2] = -1
    assert va.row.tolist() == row.tolist()
    assert va.piece.tolist() == piece.tolist()
    assert got.tolist() == pieces.tolist()
    assert va.starts.tolist() == starts.tolist()
    assert got_need.tolist() == need.tolist()
    for p in range(len(va.pieces)):  # each piece's fit is its signature's layout
        assert Signature.of(planner.v_fits[int(va.pieces[p, 2])].layout) == planner.signatures[int(va.pieces[p, 1])]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1), st.integers(1, 400), st.integers(1, 7), st.booleans(), st.booleans(),
       st.sampled_from([("0.5b", "full"), ("7b", "lora"), ("13b", "qlora"), ("70b", "lora")]))
def test_validation_pieces_match_the_loop(seed, size, providers, spot, per_provider, job):
    table = dealt(seed, size, providers)
    check_same(*planned_columns(table, *job, spot, per_provider))


@pytest.mark.parametrize("spot", [False, True])
@pytest.mark.parametrize("per_provider", [False, True])
def test_validation_pieces_match_the_loop_on_the_whole_snapshot(spot, per_provider):
    table = OfferTable.from_offers(OFFERS)
    check_same(*planned_columns(table, "7b", "lora", spot, per_provider))


def test_keys_are_numbered_by_first_appearance_and_found_by_provider():
    """Worked by hand: bases 0 and 1 at providers 2 and 0 of 3 (codes 0*3+2=2, 1*3+2=5, 0, 3)."""
    keys = _ValidationKeys(3)
    assert keys.base(("H100", "s")) == 0 and keys.base(("arch:hopper", "s")) == 1 and keys.base(("H100", "s")) == 0
    model, arch = keys.number(np.array([0, 0]), np.array([1, 1]), np.array([2, 0]))
    assert model.tolist() == [0, 2] and arch.tolist() == [1, 3]
    assert keys.lookup(np.array([0, 1, 0, 1, -1, 2]), np.array([0, 0, 1, 2, 2, 0])).tolist() == [2, 3, -1, 1, -1, -1]
    assert keys.find(("arch:ampere", "s")) == -1
    assert _ValidationKeys(1).lookup(np.array([0]), np.array([0])).tolist() == [-1]
