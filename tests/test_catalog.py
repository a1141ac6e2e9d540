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


MORE_CLOUDS = {"verda", "nebius", "hyperstack", "jarvislabs", "lium", "mithril", "seeweb", "yotta", "hyperbolic"}


def bundled_providers() -> set[str]:
    return {p.provider for p in catalog.bundled_snapshot().providers}


# --------------------------------------------------------------------------------------------
# The bundled snapshot


def test_without_a_store_the_bundled_snapshot_is_used_and_labelled(rentopt_home):
    found = load_offers()
    assert found.origin == "bundled"
    # the oldest KNOWN date is gcp's (its file last changed 2026-04-20: shared catalogs README);
    # the nine clouds of skypilot-v8-more have no date, and the label names them
    assert found.label == ("bundled snapshot of published prices (oldest 2026-04-20) "
                           "(run `rentopt refresh` for current prices); date unknown: hyperbolic, hyperstack, "
                           "jarvislabs, lium, mithril, nebius, seeweb, verda, yotta")
    assert len(found.offers) == len(catalog.bundled_snapshot().offers) > 1000
    assert found.prices_as_of == datetime(2026, 4, 20, tzinfo=timezone.utc)
    assert set(found.provenance) == bundled_providers()
    assert {p.origin for p in found.provenance.values()} == {"bundled"}
    assert not rentopt_home.exists()  # reading never creates the store


def test_the_bundled_snapshot_holds_published_prices_only():
    snapshot = catalog.bundled_snapshot()
    sections = {p.provider: p for p in snapshot.providers}
    # SkyPilot's catalog for four clouds and the two sheets with sourced prices; NexGPU's
    # placeholder prices contribute nothing, and no recorded test fixture ships.
    assert set(sections) == {"gcp", "azure", "lambda", "vast", "jygpu", "autodl", *MORE_CLOUDS}
    # each cloud dated by its file's last change in the mirror (shared catalogs README), not by
    # the folder's label 2026-05-20: gcp 2026-04-20, azure 2026-05-20, lambda 2026-05-07, vast 2026-04-29
    for cloud, day in (("gcp", 20), ("azure", 5 * 100 + 20), ("lambda", 5 * 100 + 7), ("vast", 29)):
        section = sections[cloud]
        when = datetime(2026, 4 if day < 100 else 5, day % 100, tzinfo=timezone.utc)
        assert section.plugin == "skypilot" and section.dated_by == "published"
        assert section.fetched_at == when
        assert section.source.startswith(f"SkyPilot catalog of {when:%Y-%m-%d} (") and "github.com/anycloud-sh/catalog" in section.source
        assert {o.source for o in section.offers} == {section.source}
    # the nine more clouds: date unknown, said so, the commit id kept as their source
    from rentopt.optimizer.models import UNKNOWN_DATE

    for cloud, commit in (("verda", "538675a"), ("mithril", "f379965"), ("yotta", "2811459")):  # SOURCES.md
        section = sections[cloud]
        assert (section.dated_by, section.fetched_at, section.history) == ("unknown", UNKNOWN_DATE, [])
        assert "date unknown" in section.source and f"commit {commit}" in section.source
        assert {o.dated_by for o in section.offers} == {"unknown"}
    assert sum(len(sections[c].offers) for c in ("gcp", "azure", "lambda", "vast")) >= 1000
    assert sections["jygpu"].fetched_at == datetime(2026, 9, 20, tzinfo=timezone.utc)
    assert not [o for o in snapshot.offers if o.provider in ("sheet", "nexgpu") or o.offer_id == "21166299"]
    assert all(p.amount > 0 for o in snapshot.offers for p in o.price_options)
    # JYGPU: 9,900 list and 7,920 discounted CNY a month for the 8 x RTX 4090 node (seed 004, 2026-09-20)
    (jygpu,) = sections["jygpu"].offers
    assert [(p.unit, p.amount) for p in jygpu.price_options] == [("month", Decimal(9900)), ("month", Decimal(7920))]
    # lambda's gpu_8x_h100_sxm5 in us-east-1 costs 31.92 USD/h in the 2026-05-20 catalog
    lam = {o.offer_id: o for o in sections["lambda"].offers}["gpu_8x_h100_sxm5/us-east-1"]
    assert lam.price_options[0].amount == Decimal("31.92")


def test_the_bundled_snapshot_carries_published_price_history():
    sections = {p.provider: p for p in catalog.bundled_snapshot().providers}
    days = lambda name: [h.fetched_at.date().isoformat() for h in sections[name].history]  # noqa: E731
    # Repeated copies are no history: `md5sum history/*/lambda/vms.csv | sort -u` gives 4 distinct
    # files of 32 (first seen 2026-04-02, 04-06, 04-20; the last one's change dated 2026-05-07 by
    # the mirror's log), vast's 14 are one seed (2026-04-29); gcp and azure each two versions
    assert days("lambda") == ["2026-04-02", "2026-04-06", "2026-04-20", "2026-05-07"]
    assert days("vast") == ["2026-04-29"]
    assert days("gcp") == ["2026-04-19", "2026-04-20"] and days("azure") == ["2026-04-19", "2026-05-20"]
    assert all(h.rows for h in sections["vast"].history)


# Rows of the shared catalogs, committed so this runs in every clone (tests/data/catalogs/README.md)
CATALOG_EXCERPT = ROOT / "tests" / "data" / "catalogs"


def test_the_build_prices_published_rows_as_worked_by_hand_and_the_shipped_snapshot_holds_them():
    from tools.build_snapshot import build

    built = build(CATALOG_EXCERPT)
    sections = {p.provider: p for p in built.providers}
    offers = {(o.provider, o.offer_id): o for o in built.offers}

    def hour(provider: str, offer_id: str) -> Decimal:
        (option,) = offers[(provider, offer_id)].price_options
        return option.amount

    assert set(sections) == {"gcp", "azure", "lambda", "vast", "verda", "yotta", "jygpu", "autodl"}
    # Each cloud dated by its file's last change in the mirror (shared catalogs README), not by
    # the folder's label 2026-05-20
    assert [(c, sections[c].fetched_at) for c in ("gcp", "azure", "lambda", "vast")] == [
        ("gcp", datetime(2026, 4, 20, tzinfo=timezone.utc)), ("azure", datetime(2026, 5, 20, tzinfo=timezone.utc)),
        ("lambda", datetime(2026, 5, 7, tzinfo=timezone.utc)), ("vast", datetime(2026, 4, 29, tzinfo=timezone.utc))]
    # gcp prices host VM + GPUs in the zone (us-central1-a rows):
    #   a3-highgpu-8g ... 9.46006,3.86318 + ,,,H100,8 ... 33.60609,32.0104
    assert hour("gcp", "a3-highgpu-8g/us-central1-a") == Decimal("43.06615")  # 9.46006 + 33.60609
    assert hour("gcp", "a3-highgpu-8g/us-central1-a/spot") == Decimal("35.87358")  # 3.86318 + 32.0104
    #   a2-highgpu-1g ... 0.73948,0.36975 + ,,,A100,1 ... 2.93391,1.4341
    assert hour("gcp", "a2-highgpu-1g/us-central1-a") == Decimal("3.67339")  # 0.73948 + 2.93391
    assert hour("gcp", "a2-highgpu-1g/us-central1-a/spot") == Decimal("1.80385")  # 0.36975 + 1.4341
    #   T4 x1 needs an N1 host of >= 4 vCPUs and >= 16 GiB: n1-highcpu-4 (3.6 GiB, 0.1417) and
    #   n1-standard-4 (15 GiB, 0.19) are too small, n1-highmem-4 (26 GiB, 0.23661) is the cheapest
    #   that fits (n1-standard-8: 0.38); 0.23661 + 0.35 = 0.58661, spot 0.08638 + 0.1654 = 0.25178
    assert hour("gcp", "n1-highmem-4+1xT4/us-central1-a") == Decimal("0.58661")
    assert hour("gcp", "n1-highmem-4+1xT4/us-central1-a/spot") == Decimal("0.25178")
    # azure: Standard_ND96isr_H100_v5 98.32, spot 18.169536; the 11-field V100 row 6.12, spot
    # 1.130976; the fractional A10 (0.167 GPU) and the CPU-only A1_v2 give no offer
    assert [(k[1], hour(*k)) for k in sorted(offers) if k[0] == "azure"] == [
        ("Standard_NC12s_v3/eastus", Decimal("6.12")), ("Standard_NC12s_v3/eastus/spot", Decimal("1.130976")),
        ("Standard_ND96isr_H100_v5/eastus", Decimal("98.32")),
        ("Standard_ND96isr_H100_v5/eastus/spot", Decimal("18.169536"))]
    # lambda: gpu_1x_a100 1.99, gpu_8x_h100_sxm5 31.92, no spot; cpu_4x_general gives nothing
    assert [(k[1], hour(*k)) for k in sorted(offers) if k[0] == "lambda"] == [
        ("gpu_1x_a100/us-east-1", Decimal("1.99")), ("gpu_8x_h100_sxm5/us-east-1", Decimal("31.92"))]
    # vast: 0.44, 0.93 and 2.35 per instance; their 0.00 spot is no spot price
    assert [(k[1], hour(*k)) for k in sorted(offers) if k[0] == "vast"] == [
        ("1x-H200-32-65536/France, FR, EU", Decimal("2.35")), ("1x-RTX_5090-32-65536/Denmark, DK, EU", Decimal("0.44")),
        ("2x-RTX_5090-32-65536/Taiwan, TW, AS", Decimal("0.93"))]
    # Price history: lambda's distinct files. 2026-04-04's is a copy of 04-02's (no new version);
    # the H100 node was 27.52 / 8 = 3.44 per GPU-hour on 04-02 and 31.92 / 8 = 3.99 from 04-06;
    # the newest file (with the A100 row) is dated by its last change, 2026-05-07
    assert [(h.fetched_at.date().isoformat(), h.rows) for h in sections["lambda"].history] == [
        ("2026-04-02", [("H100-SXM-80GB", 8, 0, "USD", 1, "3.440000", "3.440000")]),
        ("2026-04-06", [("H100-SXM-80GB", 8, 0, "USD", 1, "3.990000", "3.990000")]),
        ("2026-05-07", [("A100-PCIe-40GB", 1, 0, "USD", 1, "1.990000", "1.990000"),
                        ("H100-SXM-80GB", 8, 0, "USD", 1, "3.990000", "3.990000")])]
    # The more clouds: date unknown. verda's JSON GpuInfo and CRLF lines: 1B300.30V 4.95 (spot
    # 1.24), 1H100.80S.30V 1.99 (spot 1.0); yotta's last row, with no final newline, is read: 5.2
    assert sections["verda"].dated_by == sections["yotta"].dated_by == "unknown"
    assert [(k[1], hour(*k)) for k in sorted(offers) if k[0] == "verda"] == [
        ("1B300.30V/FIN-03", Decimal("4.95")), ("1B300.30V/FIN-03/spot", Decimal("1.24")),
        ("1H100.80S.30V/FIN-03", Decimal("1.99")), ("1H100.80S.30V/FIN-03/spot", Decimal("1.0"))]
    assert hour("yotta", "8x240v920g_NVIDIA_GeForce_RTX_5090_32G_SECURE/us-central-2") == Decimal("5.2")
    # 6 gcp + 4 azure + 2 lambda + 3 vast + 4 verda + 2 yotta offers from
    # the excerpt's 25 current rows (11 gcp, 4 azure, 3 lambda, 3 vast, 2 verda, 2 yotta)
    assert sum(len(sections[c].offers) for c in ("gcp", "azure", "lambda", "vast", "verda", "yotta")) == 21

    # The shipped snapshot holds each of these rows exactly as built now, and the sheets' sections
    # whole: a plugin or sheet change that moves them needs tools/build_snapshot.py rerun (its
    # --check compares the whole build where the shared catalogs are)
    shipped = catalog.bundled_snapshot()
    shipped_offers = {(o.provider, o.offer_id): o for o in shipped.offers}
    for key, built_offer in offers.items():
        assert shipped_offers.get(key) == built_offer, f"{key}: optimizer/data/snapshot.json.gz is stale: run tools/build_snapshot.py"
    assert [p for p in shipped.providers if p.plugin == "sheet"] == [sections["autodl"], sections["jygpu"]]


def test_a_damaged_snapshot_is_a_clear_error():
    with pytest.raises(InputError, match="not a rentopt snapshot"):
        catalog.parse_snapshot(b"not gzip at all")
    with pytest.raises(InputError, match="damaged gzip"):
        catalog.parse_snapshot(b"\x1f\x8b\x08garbage")
    with pytest.raises(InputError, match="format 99; this rentopt reads format 2"):
        catalog.parse_snapshot(gzip.compress(b'{"format": 99, "providers": []}'))


# --------------------------------------------------------------------------------------------
# Per provider: the store's newest data, else the bundled snapshot's, never a mix


def test_a_refreshed_provider_comes_from_the_store_and_the_others_from_the_bundle(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1"), offer("vast", "2", price="3.00")], fetched_at=T0)
    found = load_offers()
    assert found.origin == "store"
    vast = [o.key for o in found.offers if o.provider == "vast"]
    assert vast == [("vast", "1"), ("vast", "2")]  # none of the bundled vast offers mixed in
    assert found.provenance["vast"].origin == "store" and found.provenance["vast"].fetched_at == T0
    assert "newer than the bundled snapshot's of 2026-04-29" in found.provenance["vast"].why
    for name in bundled_providers() - {"vast"}:  # never refreshed: keeps its bundled offers
        assert found.provenance[name].origin == "bundled"
        assert any(o.provider == name for o in found.offers)
    assert "store 1" in found.label and "bundled 14" in found.label
    lines = found.sources(now=T0)
    # T0 is 2026-12-01 06:00: 225 days after 2026-04-20, the day gcp's file last changed
    assert lines[[p for p in sorted(found.provenance)].index("gcp")] == (
        "gcp: SkyPilot catalog of 2026-04-20 (gcp/vms.csv at github.com/anycloud-sh/catalog, a mirror of "
        "SkyPilot's published v8 catalog; dated by mirror commit 5738017, the file's last change); "
        "from the bundled snapshot, 225 days old")
    assert lines[[p for p in sorted(found.provenance)].index("verda")] == (  # no age: no date (SOURCES.md: commit only)
        "verda: SkyPilot catalog, date unknown (verda/vms.csv at github.com/skypilot-org/skypilot-catalog, catalogs/v8, "
        "commit 538675a); from the bundled snapshot")


def test_older_store_data_than_the_bundle_gives_way_to_the_bundle(rentopt_home):
    old = datetime(2026, 4, 19, tzinfo=timezone.utc)
    with open_writable(store_path()) as s:
        s.write_snapshot("gcp", [offer("gcp", "old", fetched_at=old)], fetched_at=old, plugin="skypilot")
    found = load_offers(["gcp"])
    assert found.provenance["gcp"].origin == "bundled"
    assert "newer or better dated than the price store's of 2026-04-19" in found.provenance["gcp"].why
    assert ("gcp", "old") not in {o.key for o in found.offers}


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
    assert {o.provider for o in found.offers} >= {"vast", "runpod"}
    assert found.provenance["vast"].stale and found.provenance["vast"].last_error == "HTTP 500 after 4 attempts"
    assert not found.provenance["runpod"].stale
    assert any(n.startswith("vast: the last refresh failed (HTTP 500") for n in found.notes)
    assert "STALE" in found.provenance["vast"].describe(T0)
    assert "stale" in found.label


def test_providers_narrow_the_store_and_the_bundle(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1")], fetched_at=T0)
        s.write_snapshot("runpod", [offer("runpod", "r")], fetched_at=T0)
    found = load_offers(["runpod"])
    assert [o.key for o in found.offers] == [("runpod", "r")]
    assert set(found.provenance) == {"runpod"}
    found = load_offers(["lambda"])  # never refreshed: its bundled prices, said so
    assert found.offers and {o.provider for o in found.offers} == {"lambda"}
    assert found.provenance["lambda"].origin == "bundled" and found.notes == []


def test_a_lazy_quote_set_mixes_store_rows_and_bundled_offers_by_provider(rentopt_home):
    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1")], fetched_at=T0)
    found = load_offers(["vast", "jygpu"], lazy=True)
    keys = set(found.keys())
    assert found.columns is not None and found.columns.n == 1  # the store's offer as planning columns
    assert ("vast", "1") in keys and ("jygpu", "8x-rtx4090") in keys
    full = found.offers_by_key(keys)
    assert full[("vast", "1")].price_options[0].amount == Decimal("2.00")
    assert full[("jygpu", "8x-rtx4090")].currency == "CNY"
    assert {o.key for o in found.all_offers()} == keys  # the store's and the bundled ones, each once
    table = found.table()
    assert {table.key(r) for r in range(table.n)} == keys
    rows = [r for r in range(table.n) if table.key(r) in {("vast", "1"), ("jygpu", "8x-rtx4090")}]
    assert [o.key for o in table.offers(rows)] == [table.key(r) for r in rows]  # the resolver, in the order asked


def test_a_user_sheet_is_read_without_a_refresh_and_replaces_its_platform(rentopt_home):
    sheets = rentopt_home / "sheets"
    sheets.mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "sheet" / "user_autodl.toml", sheets / "autodl.toml")
    found = load_offers(["autodl"])
    assert found.provenance["autodl"].origin == "sheet"
    assert "replaces the bundled snapshot" in found.provenance["autodl"].why
    assert {o.offer_id for o in found.offers} == {"rtx4090-1x", "rtx4090-8x"}  # the user's two, not the bundled 20
    assert not store_path().exists()


def test_prices_only_from_the_users_own_sheet_are_never_called_the_bundled_snapshot(rentopt_home):
    """No store, and the one provider asked for comes from the user's sheet: the quote must say
    so, not "the BUNDLED SNAPSHOT ... run `rentopt refresh`" (a refresh changes nothing there)."""
    from click.testing import CliRunner

    from rentopt.optimizer.cli import cli

    sheets = rentopt_home / "sheets"
    sheets.mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "sheet" / "user_autodl.toml", sheets / "autodl.toml")
    found = load_offers(["autodl"])
    assert found.origin == "sheet" and found.label.startswith(f"price sheets in {sheets}")
    result = CliRunner().invoke(cli, ["quote", "--model", "7b", "--mode", "qlora", "--days", "1", "--providers", "autodl"])
    assert result.exit_code == 0, result.output
    assert "Prices: your own price sheets of 2026-11-20" in result.stdout
    prices_line = next(line for line in result.stdout.splitlines() if line.startswith("Prices: "))
    assert "BUNDLED" not in result.stdout and "rentopt refresh" not in prices_line
    assert load_offers(["autodl", "vast"]).origin == "bundled"  # a sheet next to bundled providers


def test_a_misspelt_provider_is_an_input_error(rentopt_home):
    with pytest.raises(InputError, match="unknown provider vats.*known providers: .*vast"):
        load_offers(["vats"])


@pytest.mark.parametrize("lazy", [False, True])
def test_the_providers_states_and_their_offers_are_read_in_one_transaction(rentopt_home, monkeypatch, lazy):
    """A refresh that commits between reading the providers' states and reading their offers
    would pair one night's provenance with another night's prices: one connection, one read."""
    from rentopt.optimizer import store as store_module

    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1")], fetched_at=T0)
    opened, seen = [], []
    real_open = catalog.open_readonly

    def counting_open(*args, **kwargs):  # noqa: ANN002, ANN003
        found = real_open(*args, **kwargs)
        opened.append(found)
        return found

    def watch(name):  # noqa: ANN001, ANN202
        real = getattr(store_module.Store, name)

        def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003
            seen.append((name, id(self), self.db.in_transaction))
            return real(self, *args, **kwargs)
        monkeypatch.setattr(store_module.Store, name, wrapper)

    monkeypatch.setattr(catalog, "open_readonly", counting_open)
    for name in ("providers", "load_plan_part", "load_offers"):
        watch(name)
    found = load_offers(["vast"], lazy=lazy)
    assert found.provenance["vast"].origin == "store" and len(opened) == 1
    assert [n for n, _, _ in seen] == ["providers", "load_plan_part" if lazy else "load_offers"]
    assert len({i for _, i, _ in seen}) == 1 and all(inside for _, _, inside in seen)


def test_provenance_alone_reads_no_offer_and_says_what_a_quote_would(rentopt_home, monkeypatch):
    """`rentopt providers` and refresh's hints ask only where each provider's prices come from:
    the same answer as loading every offer (6.9 s at 100k offers), without reading one."""
    from click.testing import CliRunner

    from rentopt.optimizer import store as store_module
    from rentopt.optimizer.cli import cli

    with open_writable(store_path()) as s:
        s.write_snapshot("vast", [offer("vast", "1"), offer("vast", "2", price="3.00")], fetched_at=T0)
    sheets = rentopt_home / "sheets"
    sheets.mkdir(parents=True)
    shutil.copy(ROOT / "fixtures" / "sheet" / "user_autodl.toml", sheets / "autodl.toml")
    want = load_offers().provenance
    for name in ("load_offers", "load_plan_part", "load_current_offers"):
        monkeypatch.setattr(store_module.Store, name, lambda *a, **k: pytest.fail("an offer was read"))
    assert catalog.load_provenance() == want
    assert {want["vast"].origin, want["autodl"].origin, want["gcp"].origin} == {"store", "sheet", "bundled"}
    result = CliRunner().invoke(cli, ["providers", "--format", "json"])
    assert result.exit_code == 0, result.output


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
    assert found.origin == "bundled" and len(found.offers) == 3  # the limit: gcp alone sells 8 x H100 in many zones
    assert all(o.gpu == "H100-SXM-80GB" and o.gpus >= 8 for o in found.offers)
    everything = [o for o in catalog.bundled_snapshot().offers if query.matches(o)]
    assert found.offers == sort_offers(everything, "price")[:3]


def test_a_plugin_name_selects_the_providers_it_delivers(rentopt_home):
    found = load_offers(["sheet"])
    assert set(found.provenance) == {"autodl", "jygpu"}
    found = load_offers(["skypilot", "jygpu"])
    assert set(found.provenance) == {"gcp", "azure", "lambda", "vast", "jygpu", *MORE_CLOUDS}
    assert set(load_offers(["gcp"]).provenance) == {"gcp"}


def test_the_snapshot_build_holds_catalog_prices_to_the_sane_bands_as_a_refresh_does(tmp_path, capsys):
    """A published catalog row at 2,500 USD per GPU-hour for one A10 (a typo, a currency slip) is
    left out of the bundled snapshot, as `rentopt refresh` leaves it out of the store."""
    from tools.build_snapshot import skypilot_sections

    folder = tmp_path / "skypilot-v8" / "2026-05-20" / "lambda"
    folder.mkdir(parents=True)
    header = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,Price,Region,GpuInfo,SpotPrice\n"
    info = '"' + "{'Gpus': [{'Name': 'A10', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 24576}}], 'TotalGpuMemoryInMiB': 24576}" + '"'
    (folder / "vms.csv").write_text(header + f"gpu_1x_a10,A10,1,30,200,0.75,us-east-1,{info},\n"
                                    + f"gpu_1x_a10,A10,1,30,200,2500,us-west-1,{info},\n", encoding="utf-8")
    (section,) = skypilot_sections(tmp_path)
    assert [o.region for o in section.offers] == ["us-east-1"]
    assert "1 rows rejected" in capsys.readouterr().err
