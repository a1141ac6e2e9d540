"""Plugins vs providers in refresh: one plugin delivering several providers, two plugins
delivering the same one, a failed refresh that hides nothing, and the team catalog
(`rentopt snapshot export` in one home, `rentopt refresh --from` in another)."""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
import respx
from click.testing import CliRunner

import rentopt.providers.base as base
from rentopt.optimizer.catalog import load_offers
from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import PriceOption
from rentopt.optimizer.refresh import run_import, run_refresh
from rentopt.optimizer.store import OfferQuery, open_readonly, open_writable, store_path
from rentopt.providers.base import HttpSettings, Provider

FAST = HttpSettings(retries=0, backoff_s=0)
DAY1 = datetime(2026, 11, 20, tzinfo=timezone.utc)
DAY2 = DAY1 + timedelta(days=1)


class Catalog(Provider):
    """A fake multi-provider plugin: GET <root>/catalog -> {"date", "clouds": {cloud: [[id, gpu, price]]}},
    with "errors": {cloud: why} for clouds that failed this time."""

    name: ClassVar[str] = "catalog"
    api_root: ClassVar[str] = "https://catalog.test"
    multi_provider: ClassVar[bool] = True

    async def fetch(self, ctx):
        body = await ctx.get_json(ctx.url("catalog"))
        when = datetime.fromisoformat(body["date"])
        ctx.provider_errors.update(body.get("errors", {}))
        offers = []
        for cloud, rows in body["clouds"].items():
            ctx.provider_sources[cloud] = (f"catalog of {when:%Y-%m-%d}", when)
            for offer_id, gpu, price in rows:
                offers.append(ctx.offer(provider=cloud, offer_id=offer_id, gpu_raw=gpu, gpus=1, fetched_at=when,
                                        price_options=[PriceOption(unit="hour", amount=Decimal(price))]))
        return offers


class Direct(Provider):
    """A fake direct plugin for provider "vast": GET <root>/offers -> [[id, gpu, price]]."""

    name: ClassVar[str] = "vast"
    api_root: ClassVar[str] = "https://vast.test"

    async def fetch(self, ctx):
        rows = await ctx.get_json(ctx.url("offers"))
        return [ctx.offer(offer_id=i, gpu_raw=g, gpus=1, price_options=[PriceOption(unit="hour", amount=Decimal(p))])
                for i, g, p in rows]


@pytest.fixture
def plugins(monkeypatch):
    found = {"catalog": Catalog, "vast": Direct}
    monkeypatch.setattr(base, "load_providers", lambda: (found, ()))
    return found


def refresh(names, catalog=None, direct=None, when=DAY1):
    """One refresh: `catalog`/`direct` are the bodies to answer (None: connection refused)."""
    import functools

    with respx.mock(assert_all_called=False) as router:
        for url, body in (("https://catalog.test/catalog", catalog), ("https://vast.test/offers", direct)):
            route = router.get(url)
            if body is None:
                route.mock(side_effect=httpx.ConnectError("offline"))
            else:
                route.mock(return_value=httpx.Response(200, json=body))
        original = base.fetch_all
        base.fetch_all = functools.partial(original, fetched_at=when)
        try:
            return run_refresh(names, settings=FAST)
        finally:
            base.fetch_all = original


def states():
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        return {p.name: p for p in s.providers()}, {p.name: p for p in s.plugins()}


def offers_of(provider):
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        return s.load_offers(OfferQuery(providers=(provider,)))


CATALOG = {"date": "2026-11-19T00:00:00+00:00",
           "clouds": {"gcp": [["g1", "H100 SXM", "40"]], "vast": [["cat-1", "RTX 4090", "0.50"]]}}


def test_one_plugin_refreshes_several_providers_each_stored_on_its_own(plugins):
    report = refresh(["catalog"], catalog=CATALOG)
    assert report.exit_code == 0
    assert [(r.label, r.status, r.offers) for r in report.results] == [("catalog/gcp", "ok", 1), ("catalog/vast", "ok", 1)]
    providers, runs = states()
    assert {n: (p.plugin, p.fetched_at) for n, p in providers.items()} == {
        "gcp": ("catalog", datetime(2026, 11, 19, tzinfo=timezone.utc)),
        "vast": ("catalog", datetime(2026, 11, 19, tzinfo=timezone.utc))}  # the catalog's own date
    assert set(runs) == {"catalog"} and runs["catalog"].last_success_at is not None


def test_a_provider_the_plugin_could_not_deliver_keeps_its_data_the_others_are_stored(plugins):
    refresh(["catalog"], catalog=CATALOG)
    night2 = {"date": "2026-11-20T00:00:00+00:00", "clouds": {"vast": [["cat-1", "RTX 4090", "0.45"]]},
              "errors": {"gcp": "gcp/vms.csv is not a SkyPilot v8 catalog"}}
    report = refresh(["catalog"], catalog=night2, when=DAY2)
    assert report.exit_code == 1
    by = {r.provider: r for r in report.results}
    assert by["gcp"].status == "failed" and by["gcp"].had_prices and by["vast"].status == "ok"
    providers, _ = states()
    assert providers["gcp"].stale and [o.offer_id for o in offers_of("gcp")] == ["g1"]
    assert offers_of("vast")[0].price_options[0].amount == Decimal("0.45")


def test_between_two_plugins_the_newer_prices_win_and_the_summary_says_which(plugins):
    # night 1: the direct API (today) and the catalog (yesterday's date) both deliver "vast"
    report = refresh(["catalog", "vast"], catalog=CATALOG, direct=[["v1", "RTX 4090", "0.40"]])
    by = {r.label: r for r in report.results}
    assert by["vast"].status == "ok" and by["catalog/vast"].status == "ok"
    providers, _ = states()
    assert providers["vast"].plugin == "vast"  # the direct data of DAY1 is newer than the catalog's of the 19th
    assert [o.offer_id for o in offers_of("vast")] == ["v1"]  # never a mix of the two
    # the next night the catalog comes first again, still with older data: it is not stored
    report = refresh(["catalog"], catalog=CATALOG, when=DAY2)
    (kept,) = [r for r in report.results if r.provider == "vast"]
    assert kept.status == "kept" and "kept vast's prices of 2026-11-20 00:00 UTC" in kept.error
    assert "catalog/vast: not stored: kept vast's prices" in __import__(
        "rentopt.optimizer.refresh", fromlist=["format_report"]).format_report(report)
    assert [o.offer_id for o in offers_of("vast")] == ["v1"]
    # a newer catalog replaces the direct data whole
    newer = {"date": "2026-11-25T00:00:00+00:00", "clouds": {"vast": [["cat-2", "RTX 4090", "0.30"]]}}
    refresh(["catalog"], catalog=newer, when=DAY2)
    assert [o.offer_id for o in offers_of("vast")] == ["cat-2"]
    assert states()[0]["vast"].plugin == "catalog"


def test_an_offline_refresh_hides_no_provider_from_a_quote(plugins, rentopt_home):
    """The mission's command after a refresh that failed everywhere: every bundled provider is
    still planned over, and the quote says where each provider's prices come from."""
    report = refresh(None, catalog=None, direct=None)
    assert report.exit_code == 3  # none succeeded (optimizer/refresh.py: 2 is bad input)
    providers, runs = states()
    assert "catalog" not in providers and runs["catalog"].stale  # a plugin is not a provider
    result = CliRunner().invoke(cli, ["quote", "--model", "13b", "--mode", "lora", "--days", "10", "--details"])
    assert result.exit_code == 0, result.output
    where = result.output.split("where the prices come from (per provider):\n")[1]
    for provider in ("autodl", "azure", "gcp", "jygpu", "lambda", "vast"):
        assert f"  {provider}: " in where and "from the bundled snapshot" in where
    found = load_offers()
    assert {p.origin for p in found.provenance.values()} == {"bundled"}
    assert {o.provider for o in found.offers} == {"autodl", "azure", "gcp", "jygpu", "lambda", "vast", "hyperbolic",
                                                 "hyperstack", "jarvislabs", "lium", "mithril", "nebius", "seeweb",
                                                 "verda", "yotta"}


def test_a_stale_store_provider_and_bundled_ones_are_planned_together(plugins):
    refresh(["vast"], direct=[["v1", "RTX 4090", "0.01"]])
    refresh(["vast"], direct=None, when=DAY2)  # offline: vast keeps DAY1's prices, marked stale
    result = CliRunner().invoke(cli, ["quote", "--model", "13b", "--mode", "lora", "--days", "10", "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "STALE: vast." in result.output  # the one screen's header says so
    result = CliRunner().invoke(cli, ["quote", "--model", "13b", "--mode", "lora", "--days", "10", "--top", "3", "-v"])
    assert "vast: " in result.output and "from the price store" in result.output and "STALE" in result.output
    assert "gcp: SkyPilot catalog of 2026-04-20" in result.output  # bundled providers are still there
    found = load_offers()
    assert found.provenance["vast"].origin == "store" and found.provenance["gcp"].origin == "bundled"


# --------------------------------------------------------------------------------------------
# The team catalog


def fill_store(plugins) -> None:
    refresh(["catalog"], catalog=CATALOG)
    night2 = {"date": "2026-11-20T00:00:00+00:00",
              "clouds": {"gcp": [["g1", "H100 SXM", "38"]], "vast": [["cat-1", "RTX 4090", "0.50"]]}}
    refresh(["catalog"], catalog=night2, when=DAY2)


def test_export_in_one_home_and_import_in_another_give_the_same_offers(plugins, tmp_path, monkeypatch):
    fill_store(plugins)
    exported = tmp_path / "team.json.gz"
    result = CliRunner().invoke(cli, ["snapshot", "export", str(exported)])
    assert result.exit_code == 0, result.output
    assert "wrote " in result.stderr and "gcp 1" in result.stderr
    before = {o.key: o for o in load_offers().offers}
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        history_before = [(h.fetched_at, h.min_gpu_hour) for h in s.price_history("H100-SXM-80GB", "gcp")]

    monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / "laptop"))
    result = CliRunner().invoke(cli, ["refresh", "--from", str(exported)])
    assert result.exit_code == 0, result.output
    assert "catalog/gcp" in result.output and "catalog/vast" in result.output
    after = {o.key: o for o in load_offers().offers}
    assert after == before  # every offer, field for field, and the bundled providers as before
    providers, _ = states()
    assert (providers["gcp"].plugin, providers["gcp"].source) == ("catalog", "catalog of 2026-11-20")
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        assert [(h.fetched_at, h.min_gpu_hour) for h in s.price_history("H100-SXM-80GB", "gcp")] == history_before
        assert [h[0] for h in history_before] == [datetime(2026, 11, 19, tzinfo=timezone.utc), datetime(2026, 11, 20, tzinfo=timezone.utc)]
    # importing the same file again changes nothing
    again = CliRunner().invoke(cli, ["refresh", "--from", str(exported)])
    assert again.exit_code == 0 and "not stored: kept the stored prices" in again.output
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        assert len(s.price_history("H100-SXM-80GB", "gcp")) == 2


def test_a_plain_json_export_reads_back_too(plugins, tmp_path, monkeypatch):
    fill_store(plugins)
    path = tmp_path / "team.json"
    assert CliRunner().invoke(cli, ["snapshot", "export", str(path)]).exit_code == 0
    assert json.loads(path.read_text())["format"] == 2
    monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / "other"))
    assert run_import(str(path)).exit_code == 0
    assert [o.offer_id for o in offers_of("gcp")] == ["g1"]


def test_import_from_a_url_goes_through_the_shared_http_client(plugins, tmp_path, monkeypatch):
    fill_store(plugins)
    path = tmp_path / "team.json.gz"
    CliRunner().invoke(cli, ["snapshot", "export", str(path)])
    monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / "ci-consumer"))
    with respx.mock() as router:
        router.get("https://ci.example/prices.json.gz").mock(return_value=httpx.Response(200, content=path.read_bytes()))
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/prices.json.gz"])
    assert result.exit_code == 0, result.output
    assert [o.offer_id for o in offers_of("vast")] == ["cat-1"]


def test_a_url_import_follows_redirects_by_the_shared_rules_and_keeps_to_the_time_budget(plugins, tmp_path,
                                                                                        monkeypatch):
    import asyncio

    fill_store(plugins)
    path = tmp_path / "team.json.gz"
    CliRunner().invoke(cli, ["snapshot", "export", str(path)])
    monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / "ci-consumer"))
    with respx.mock() as router:  # a moved file: followed (the request carries no credential)
        router.get("https://ci.example/old.json.gz").mock(
            return_value=httpx.Response(301, headers={"Location": "https://cdn.example/prices.json.gz"}))
        router.get("https://cdn.example/prices.json.gz").mock(return_value=httpx.Response(200, content=path.read_bytes()))
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/old.json.gz"])
    assert result.exit_code == 0, result.output
    with respx.mock() as router:  # a loop: base.py's rule names it (httpx's own following said "too many")
        router.get("https://ci.example/a").mock(return_value=httpx.Response(302, headers={"Location": "/b"}))
        router.get("https://ci.example/b").mock(return_value=httpx.Response(302, headers={"Location": "/a"}))
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/a"])
    assert result.exit_code == 2 and "redirect loop" in result.stderr

    async def hang(request):  # noqa: ANN001, ANN202
        await asyncio.sleep(30)

    with respx.mock(assert_all_called=False) as router:  # cancelled mid-answer: respx never counts it
        router.get("https://ci.example/slow.json.gz").mock(side_effect=hang)
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/slow.json.gz", "--time-budget", "0.3"])
    assert result.exit_code == 2 and "gave up after the 0.3 s time budget" in result.stderr


@pytest.mark.parametrize("content, message", [
    (b"definitely not json", "not a rentopt snapshot: not valid JSON"),
    (gzip.compress(b'{"format": 1, "providers": []}'), "snapshot format 1; this rentopt reads format 2"),
    (b"\x1f\x8b\x08\x00broken", "damaged gzip file"),
    (b'["a list"]', "no 'providers' list"),
])
def test_a_bad_snapshot_file_is_one_clear_line_and_changes_nothing(plugins, tmp_path, content, message):
    fill_store(plugins)
    before = {o.key: o for o in load_offers().offers}
    path = tmp_path / "bad.json.gz"
    path.write_bytes(content)
    result = CliRunner().invoke(cli, ["refresh", "--from", str(path)])
    assert result.exit_code == 2 and result.stderr.startswith("rentopt: error: ") and message in result.stderr
    assert "Traceback" not in result.output
    assert {o.key: o for o in load_offers().offers} == before


def test_a_missing_file_or_unreachable_url_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["refresh", "--from", str(tmp_path / "nope.json.gz")])
    assert result.exit_code == 2 and "cannot read the snapshot file" in result.stderr
    with respx.mock() as router:
        router.get("https://ci.example/x.json.gz").mock(return_value=httpx.Response(404))
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/x.json.gz"])
    assert result.exit_code == 2 and "cannot fetch the snapshot https://ci.example/x.json.gz: HTTP 404" in result.stderr
    assert not store_path().exists()


def test_one_bad_provider_section_loses_only_that_provider(plugins, tmp_path, monkeypatch):
    fill_store(plugins)
    path = tmp_path / "team.json"
    CliRunner().invoke(cli, ["snapshot", "export", str(path)])
    data = json.loads(path.read_text())
    gcp = next(p for p in data["providers"] if p["provider"] == "gcp")
    gcp["offers"][0]["price_options"][0]["amount"] = "-5"  # a negative price: refused
    path.write_text(json.dumps(data))
    monkeypatch.setenv("RENTOPT_HOME", str(tmp_path / "laptop"))
    report = run_import(str(path))
    by = {r.provider: r for r in report.results}
    assert report.exit_code == 1
    assert by["gcp"].status == "failed" and "price_options" in by["gcp"].error
    assert by["vast"].status == "ok" and [o.offer_id for o in offers_of("vast")] == ["cat-1"]
    assert offers_of("gcp") == []


def test_export_without_a_store_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(cli, ["snapshot", "export", str(tmp_path / "x.json.gz")])
    assert result.exit_code == 2 and "no price store" in result.stderr


def test_from_and_providers_do_not_mix(tmp_path):
    result = CliRunner().invoke(cli, ["refresh", "--from", "x.json", "--providers", "vast"])
    assert result.exit_code == 2 and "leave out --providers" in result.output + (result.stderr or "")


def test_the_bundled_snapshot_imports_like_a_team_catalog(tmp_path):
    """The bundled file and an export share one format: importing it gives its offers exactly."""
    from rentopt.optimizer.catalog import SNAPSHOT_RESOURCE, bundled_snapshot

    source = Path(__import__("rentopt.optimizer", fromlist=["x"]).__file__).parent / SNAPSHOT_RESOURCE
    report = run_import(str(source))
    assert report.exit_code == 0
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        stored = {o.key: o for o in s.load_offers()}
        lam = s.snapshot_summaries("lambda")
    assert stored == {o.key: o for o in bundled_snapshot().offers}
    assert len(lam) == 4  # its published history came along: 4 distinct versions (repeated copies are none)
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        states = {p.name: p for p in s.providers()}
    assert (states["verda"].dated_by, states["gcp"].dated_by) == ("unknown", "published")
    with open_writable(store_path()):
        pass


def test_refreshing_a_provider_by_name_points_to_its_plugin(rentopt_home):
    result = CliRunner().invoke(cli, ["refresh", "--providers", "gcp"])
    assert result.exit_code == 2
    assert "gcp is refreshed by the skypilot plugin: run `rentopt refresh --providers skypilot`" in result.stderr
    assert not store_path().exists()
