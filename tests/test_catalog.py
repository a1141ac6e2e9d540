"""Where offers come from: offers file, price store, or the bundled snapshot (and that it ships)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from rentopt.optimizer import catalog
from rentopt.optimizer.catalog import find_offers, load_offers, sort_offers
from rentopt.optimizer.errors import InputError, StoreError
from rentopt.optimizer.models import Offer, PriceOption
from rentopt.optimizer.store import OfferQuery, open_writable, store_path

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 12, 1, 6, tzinfo=timezone.utc)


def offer(provider: str, offer_id: str, price: str = "2.00", currency: str = "USD", **fields) -> Offer:
    values = dict(provider=provider, offer_id=offer_id, gpu="H100-SXM-80GB", gpu_raw="H100 SXM", gpus=1,
                  gpu_memory_gb=80.0, price_options=[PriceOption(unit="hour", amount=Decimal(price))],
                  currency=currency, fetched_at=T0, source=f"https://{provider}.test")
    values.update(fields)
    return Offer(**values)


def bundled_providers() -> set[str]:
    return {p.provider for p in catalog.bundled_snapshot().providers}


# --------------------------------------------------------------------------------------------
# The bundled snapshot


def test_without_a_store_the_bundled_snapshot_is_used_and_labelled(rentopt_home):
    found = load_offers()
    assert found.origin == "bundled"
    assert found.label == "bundled snapshot of 2026-11-28 (run `rentopt refresh` for current prices)"
    assert len(found.offers) == sum(p.offers for p in catalog.bundled_snapshot().providers) > 100
    assert found.prices_as_of == min(o.fetched_at for o in found.offers)
    assert set(found.provenance) == bundled_providers()
    assert not rentopt_home.exists()  # reading never creates the store


def test_the_bundled_snapshot_covers_the_built_in_providers():
    snapshot = catalog.bundled_snapshot()
    by_provider = {p.provider: p for p in snapshot.providers}
    assert set(by_provider) >= {"vast", "runpod", "lambda", "datacrunch", "azure", "aws"}
    for name, entry in by_provider.items():
        mine = [o for o in snapshot.offers if o.provider == name]
        assert len(mine) == entry.offers > 0, name
        assert entry.fetched_at == datetime(2026, 11, 28, 6, tzinfo=timezone.utc)
    assert all(p.amount > 0 for o in snapshot.offers for p in o.price_options)


def test_the_shipped_snapshot_equals_a_fresh_build_from_the_fixtures():
    from tools.build_snapshot import SNAPSHOT_PATH, build

    shipped = json.loads(gzip.decompress(SNAPSHOT_PATH.read_bytes()))
    fresh = build()
    assert shipped == fresh, "optimizer/data/snapshot.json.gz is stale: run tools/build_snapshot.py"


def test_a_damaged_snapshot_is_a_clear_error():
    with pytest.raises(StoreError, match="bundled price snapshot is damaged"):
        catalog.parse_snapshot(b"not gzip at all")
    with pytest.raises(StoreError, match="has format 99"):
        catalog.parse_snapshot(gzip.compress(b'{"format": 99, "providers": [], "offers": []}'))


# --------------------------------------------------------------------------------------------
# The store, and never mixing it with the bundled snapshot


def test_the_store_wins_once_it_holds_data_and_is_not_mixed_with_the_bundle(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1"), offer("vast", "2", price="3.00")], fetched_at=T0)
    found = load_offers()
    assert found.origin == "store"
    assert [o.key for o in found.offers] == [("vast", "1"), ("vast", "2")]
    assert set(found.provenance) == {"vast"}
    assert found.prices_as_of == T0
    assert str(store_path()) in found.label and "2026-12-01 06:00 UTC" in found.label
    missing = sorted(bundled_providers() - {"vast"})
    assert missing and found.notes == [
        f"no prices in the price store yet from {', '.join(missing)}: run `rentopt refresh --providers "
        f"{','.join(missing)}` (bundled prices are not mixed with refreshed ones)"]


def test_a_store_without_any_good_snapshot_falls_back_to_the_bundle(rentopt_home):
    with open_writable(store_path()) as s:
        s.mark_failed("vast", "timed out")
    assert load_offers().origin == "bundled"


def test_a_stale_provider_is_served_and_flagged(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1")], fetched_at=T0, now=T0)
        s.write_snapshot("runpod", [offer("runpod", "r")], fetched_at=T0, now=T0)
        s.mark_failed("vast", "HTTP 500 after 4 attempts", now=T0 + timedelta(days=1))
    found = load_offers()
    assert {o.provider for o in found.offers} == {"vast", "runpod"}
    assert found.provenance["vast"].stale and found.provenance["vast"].last_error == "HTTP 500 after 4 attempts"
    assert not found.provenance["runpod"].stale
    assert any(n.startswith("vast: the last refresh failed (HTTP 500") for n in found.notes)
    assert "stale" in found.label


def test_providers_narrow_the_store(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1")], fetched_at=T0)
        s.write_snapshot("runpod", [offer("runpod", "r")], fetched_at=T0)
    found = load_offers(["runpod"])
    assert [o.key for o in found.offers] == [("runpod", "r")]
    assert set(found.provenance) == {"runpod"}
    found = load_offers(["lambda"])
    assert found.origin == "store" and found.offers == []
    assert found.notes == ["no prices in the price store yet from lambda: run `rentopt refresh --providers lambda` "
                           "(bundled prices are not mixed with refreshed ones)"]


def test_a_misspelt_provider_is_an_input_error(rentopt_home):
    with pytest.raises(InputError, match="unknown provider vats.*known providers: .*vast"):
        load_offers(["vats"])


def test_a_corrupt_store_is_reported_not_papered_over(rentopt_home):
    rentopt_home.mkdir(parents=True)
    store_path().write_text("this is not a database, it is a shopping list\n")
    with pytest.raises(StoreError, match="mv "):
        load_offers()


# --------------------------------------------------------------------------------------------
# Offers files


def test_an_offers_file_wins_over_the_store(rentopt_home, tmp_path):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1")], fetched_at=T0)
    path = tmp_path / "mine.csv"
    path.write_text("provider,offer_id,gpu,gpus,price_hour,currency\nmycloud,x,L40S-48GB,4,3.2,EUR\n")
    found = load_offers(offers_file=path)
    assert found.origin == "offers-file"
    assert [o.key for o in found.offers] == [("mycloud", "x")]
    assert found.label == f"offers file {path}"
    assert found.provenance["mycloud"].source == str(path)
    assert load_offers(["mycloud"], offers_file=path).offers == found.offers


# --------------------------------------------------------------------------------------------
# Listing


def test_sort_by_price_keeps_currencies_apart_and_unpriced_last():
    offers = [offer("a", "usd3", "3"), offer("a", "cny10", "10", "CNY"), offer("a", "usd1", "1"),
              offer("a", "cny2", "2", "CNY"), offer("a", "term", price_options=[PriceOption(unit="term", amount=Decimal("1"), term_hours=1)])]
    assert [o.offer_id for o in sort_offers(offers, "price")] == ["cny2", "cny10", "term", "usd1", "usd3"]


def test_sort_by_memory_puts_the_largest_gpus_first():
    offers = [offer("a", "small", gpu_memory_gb=24.0, gpus=8), offer("a", "big", gpu_memory_gb=141.0),
              offer("a", "mid8", gpu_memory_gb=80.0, gpus=8), offer("a", "mid1", gpu_memory_gb=80.0)]
    assert [o.offer_id for o in sort_offers(offers, "memory")] == ["big", "mid8", "mid1", "small"]


def test_an_unknown_sort_key_is_an_input_error():
    with pytest.raises(InputError, match="unknown sort key"):
        sort_offers([], "colour")  # type: ignore[arg-type]


def test_find_offers_filters_sorts_and_limits_the_bundled_snapshot(rentopt_home):
    query = OfferQuery(gpus=("H100-SXM-80GB",), min_gpus=8, currency="USD")
    found = find_offers(query, sort="price", limit=3)
    assert found.origin == "bundled" and 0 < len(found.offers) <= 3
    assert all(o.gpu == "H100-SXM-80GB" and o.gpus >= 8 for o in found.offers)
    everything = [o for o in catalog.bundled_snapshot().offers if query.matches(o)]
    assert found.offers == sort_offers(everything, "price")[:3]
