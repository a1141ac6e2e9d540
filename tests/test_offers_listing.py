"""`rentopt offers --offers-file`: filtered, sorted and cut on the file's columns, full offers built
only for the rows shown, and the same rows in the same order as the full offers sorted by
`sort_offers` (the reference: every offer built, then filtered by OfferQuery.matches)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rentopt.optimizer import offers_io
from rentopt.optimizer.errors import InputError
from rentopt.optimizer.catalog import find_offers, sort_offers
from rentopt.optimizer.offers_io import read_offers_file
from rentopt.optimizer.store import OfferQuery
from rentopt.optimizer.suspect import suspect_offers

HEADER = "provider,offer_id,gpu,gpus,price_hour,price_day,price_week,price_month,currency,region,spot,gpu_memory_gb\n"
T = "2026-11-28T06:00:00Z"

# Prices chosen so that floats would order them wrongly or call them equal:
#   2.1 per hour = 50.4 per day / 24 = 1533 per month / 730 (Offer's default month), exactly;
#   2.1000000000000001 and 2.0999999999999999 are the float 2.1, but not the Decimal 2.1.
TIES = HEADER + """\
alpha,a-2,H100-SXM-80GB,1,2.10,,,,USD,us-east,no,
alpha,a-1,H100-SXM-80GB,1,2.1,,,,USD,eu-west,no,
beta,b-2,H100-SXM-80GB,1,,,,1533,USD,us-west,no,
beta,b-1,H100-SXM-80GB,1,,50.4,,,USD,US-EAST-2,no,
aaa,x-1,H100-SXM-80GB,1,2.1000000000000001,,,,USD,,no,
delta,d-1,A100-SXM4-80GB,8,2.0999999999999999,,,,USD,us-east,no,
omega,o-1,RTX 4090,1,10,,,,CNY,cn-north,no,
alpha,a-3,H100-SXM-80GB,2,0.9,,,,USD,us-east,yes,
zeta,z-1,Mystery 9000,2,,,30,,USD,us-east,no,48
"""


def ids(found) -> list[str]:
    return [o.offer_id for o in found.offers]


def reference(path: Path, query: OfferQuery, sort: str, limit: int | None, suspect: bool = False) -> list:
    """What `rentopt offers` listed before it read files as columns: every offer built."""
    everything = read_offers_file(path)
    unknown = [p for p in query.providers or () if p not in {o.provider for o in everything}]
    if unknown:  # none of this test's names is a registered plugin's
        raise InputError(f"unknown provider {', '.join(unknown)} (not registered")
    kept = [o for o in everything if query.matches(o)]
    if suspect:
        reasons = suspect_offers(everything)
        kept = [o.model_copy(update={"extra": {**o.extra, "suspect": reasons[o.key]}}) for o in kept if o.key in reasons]
    return sort_offers(kept, sort)[:limit]


@pytest.fixture
def ties_file(tmp_path) -> Path:
    path = tmp_path / "ties.csv"
    path.write_text(TIES)
    return path


def test_prices_order_exactly_within_each_currency(ties_file):
    # worked by hand: CNY before USD; 0.9 < 2.0999999999999999 < 2.1 (four rows, by provider then id)
    # < 2.1000000000000001; z-1 is 30/168 = 0.178... per hour
    found = find_offers(OfferQuery(), offers_file=ties_file, sort="price")
    assert ids(found) == ["o-1", "z-1", "a-3", "d-1", "a-1", "a-2", "b-1", "b-2", "x-1"]


def test_a_cut_inside_a_tie_keeps_the_offer_id_order(ties_file):
    found = find_offers(OfferQuery(), offers_file=ties_file, sort="price", limit=5)
    assert ids(found) == ["o-1", "z-1", "a-3", "d-1", "a-1"]  # a-1 before a-2, although a-2 comes first in the file
    assert found.notes[-1] == "showing 5 of 9 matching offers; raise --limit to see more"


def test_the_price_filter_is_exact(ties_file):
    found = find_offers(OfferQuery(max_hour_price=Decimal("2.1")), offers_file=ties_file, sort="price")
    # 10 CNY is over 2.1 in its own currency; 2.1000000000000001 is over 2.1; 1533/730 is 2.1
    assert ids(found) == ["z-1", "a-3", "d-1", "a-1", "a-2", "b-1", "b-2"]


def test_region_and_column_filters(ties_file):
    found = find_offers(OfferQuery(region="US-East", gpus=("H100-SXM-80GB",)), offers_file=ties_file, sort="provider")
    assert ids(found) == ["a-3", "a-2", "b-1"]  # provider, then price: a-3 0.9 < a-2 2.10
    found = find_offers(OfferQuery(spot=False, min_gpus=2), offers_file=ties_file, sort="memory")
    assert ids(found) == ["d-1", "z-1"]  # 80 GB before 48 GB


@pytest.mark.parametrize("sort", ["price", "gpu", "provider", "memory"])
@pytest.mark.parametrize("limit", [None, 1, 4, 6])
def test_every_sort_and_cut_matches_the_reference(ties_file, sort, limit):
    assert find_offers(OfferQuery(), offers_file=ties_file, sort=sort, limit=limit).offers == \
        reference(ties_file, OfferQuery(), sort, limit)


def test_full_offers_are_built_only_for_the_rows_shown(tmp_path, monkeypatch):
    path = tmp_path / "many.csv"
    path.write_text(HEADER + "".join(f"p{i % 7},id-{i},H100-SXM-80GB,1,{1 + i % 97}.5,,,,USD,r,no,\n"
                                     for i in range(400)))
    built = []
    real = offers_io.offer_from_cells
    monkeypatch.setattr(offers_io, "offer_from_cells", lambda *a, **k: built.append(a[2]) or real(*a, **k))
    found = find_offers(OfferQuery(), offers_file=path, sort="price", limit=3)
    assert len(built) == 3
    # 1.5 USD on lines i = 0, 97, 194, 291, 388 of providers p0, p6, p5, p4, p3 (i % 7): by provider
    assert [(o.provider, o.offer_id) for o in found.offers] == [("p0", "id-0"), ("p3", "id-388"), ("p4", "id-291")]


def test_suspect_prices_from_a_file(tmp_path):
    path = tmp_path / "suspect.csv"
    # four providers sell an H100 at 2.0-2.6 per hour; cheap's 0.30 is under 1/5 of the others' median 2.4
    path.write_text(HEADER + "a,1,H100-SXM-80GB,1,2.0,,,,USD,,no,\nb,1,H100-SXM-80GB,1,2.4,,,,USD,,no,\n"
                             "c,1,H100-SXM-80GB,1,2.6,,,,USD,,no,\ncheap,1,H100-SXM-80GB,1,0.30,,,,USD,,no,\n")
    found = find_offers(OfferQuery(), offers_file=path, suspect=True)
    assert [(o.provider, o.extra["suspect"][:40]) for o in found.offers] == \
        [("cheap", "suspect on-demand price: 0.3 USD per GPU")]
    assert found.offers == reference(path, OfferQuery(), "price", None, suspect=True)
    none = find_offers(OfferQuery(providers=("a",)), offers_file=path, suspect=True)
    assert none.offers == [] and none.empty_reason.startswith("No suspect price")


def test_the_listing_of_a_json_file_matches_the_reference(tmp_path, ties_file):
    path = tmp_path / "offers.json"
    with path.open("w") as fp:
        offers_io.write_offers_json(read_offers_file(ties_file), fp)
    for sort in ("price", "gpu", "provider", "memory"):
        assert find_offers(OfferQuery(), offers_file=path, sort=sort, limit=5).offers == \
            reference(path, OfferQuery(), sort, 5)


# -- any file, any filter, any sort: the same as the reference -----------------------------------

PRICES = ["", "1", "1.0", "1.00", "2.1", "2.10", "50.4", "1533", "0.5", "2.1000000000000001", "2.0999999999999999",
          "7", "168", "12.5"]
ROW = st.tuples(
    st.sampled_from(["a", "b", "c", "zz"]), st.sampled_from(["H100-SXM-80GB", "A100-SXM4-80GB", "RTX 4090", "Odd 1"]),
    st.sampled_from(["1", "2", "8"]), st.sampled_from(PRICES), st.sampled_from(PRICES), st.sampled_from(PRICES),
    st.sampled_from(PRICES), st.sampled_from(["USD", "CNY"]), st.sampled_from(["", "us-east", "EU-west", " us-EAST-1 "]),
    st.sampled_from(["no", "yes"]))
QUERY = st.builds(OfferQuery, providers=st.none() | st.just(("a", "c")), min_gpus=st.none() | st.just(2),
                  spot=st.none() | st.booleans(), region=st.none() | st.sampled_from(["us-east", "west"]),
                  currency=st.none() | st.just("USD"),
                  max_hour_price=st.none() | st.sampled_from([Decimal("2.1"), Decimal("0.5"), Decimal("1")]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(ROW, min_size=1, max_size=25), query=QUERY, sort=st.sampled_from(["price", "gpu", "provider", "memory"]),
       limit=st.none() | st.integers(1, 8), suspect=st.booleans())
def test_any_listing_matches_the_reference(tmp_path, rows, query, sort, limit, suspect):
    lines = []
    for i, (provider, gpu, gpus, h, d, w, m, currency, region, spot) in enumerate(rows):
        if not (h or d or w or m):
            h = "3"
        memory = "40" if gpu == "Odd 1" else ""
        lines.append(f"{provider},{provider}-{i % 5}-{i},{gpu},{gpus},{h},{d},{w},{m},{currency},{region},{spot},{memory}\n")
    path = tmp_path / "any.csv"
    path.write_text(HEADER + "".join(lines))
    try:
        expected = reference(path, query, sort, limit, suspect)
    except Exception as exc:  # a line the reader refuses (a price outside the sane band): both must refuse alike
        with pytest.raises(type(exc), match=str(exc)[:30].replace("(", r"\(").replace(")", r"\)")):
            find_offers(query, offers_file=path, sort=sort, limit=limit, suspect=suspect)
        return
    assert find_offers(query, offers_file=path, sort=sort, limit=limit, suspect=suspect).offers == expected
