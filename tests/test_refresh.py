"""`rentopt refresh`: failure isolation, secrets, the lock, exit codes, and the CLI commands.

The failure matrix runs the real Vast.ai and Lambda plugins over their recorded fixtures
(tools.fixture_routes + respx): night 1 both answer; night 2 Vast fails in one of eight ways while
Lambda returns new prices. Vast's night-1 snapshot must survive intact (marked stale with the
error) and Lambda's new prices must be stored.
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import time
from decimal import Decimal
from typing import ClassVar

import httpx
import pytest
import respx
from click.testing import CliRunner

import rentopt.providers.base as base
from rentopt.optimizer.cli import cli
from rentopt.optimizer.errors import StoreError
from rentopt.optimizer.models import PriceOption
from rentopt.optimizer.refresh import LOCK_FILENAME, format_report, provider_overview, refresh_lock, run_refresh
from rentopt.optimizer.store import open_readonly, store_path
from rentopt.providers.base import FetchContext, HttpSettings, Provider
from rentopt.providers.lambdalabs import LambdaProvider
from rentopt.providers.vast import VastProvider
from tools.fixture_routes import install_respx, load_manifest

SECRET = "sk-test-SECRET-123"
FAST = HttpSettings(retries=2, backoff_s=0)


@pytest.fixture
def no_sleep(monkeypatch):
    """Record the waits FetchContext asks for instead of sleeping them."""
    waits: list[float] = []

    async def record(self, seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(FetchContext, "sleep", record)
    return waits


def stored(provider: str):
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        state = {p.name: p for p in s.providers()}.get(provider)
        offers = [o for o in s.load_offers() if o.provider == provider]
    return state, offers


def lambda_body(price_bump_cents: int = 0) -> bytes:
    body = json.loads(load_manifest("lambda").routes[0].body())
    if price_bump_cents:
        body["data"]["gpu_1x_a10"]["instance_type"]["price_cents_per_hour"] += price_bump_cents
    return json.dumps(body).encode()


def vast_body() -> bytes:
    return load_manifest("vast").routes[0].body()


def without_dph_total() -> bytes:
    body = json.loads(vast_body())
    for row in body["offers"]:
        row.pop("dph_total", None)
    return json.dumps(body).encode()


VAST_URL = "https://console.vast.ai/api/v0/bundles/"
LAMBDA_URL = "https://cloud.lambda.ai/api/v1/instance-types"


class PluginBug(RuntimeError):
    pass


FAILURES = {
    "timeout": (dict(side_effect=httpx.ConnectTimeout("connect timed out")), "timed out after 3 attempts"),
    "429 with Retry-After": (dict(return_value=httpx.Response(429, headers={"Retry-After": "7"})),
                             "rate limited (HTTP 429) after 3 attempts"),
    "500": (dict(return_value=httpx.Response(500, text="upstream exploded")), "server error HTTP 500 after 3 attempts"),
    "malformed JSON": (dict(return_value=httpx.Response(200, content=b"{'offers': [oops")), "not valid JSON"),
    "truncated body": (dict(return_value=httpx.Response(200, content=vast_body()[:777])), "not valid JSON"),
    "missing field": (dict(return_value=httpx.Response(200, content=without_dph_total())), "has no dph_total field"),
    "empty list": (dict(return_value=httpx.Response(200, json={"offers": []})), "held no offers at all"),
    "plugin raises": (None, f"plugin raised PluginBug: parser fell over near key {'***'}"),
}


@pytest.mark.parametrize("mode", list(FAILURES))
def test_a_failing_provider_keeps_its_last_good_snapshot(mode, monkeypatch, no_sleep, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LAMBDA_API_KEY", SECRET)
    monkeypatch.setenv("VAST_API_KEY", SECRET)

    with respx.mock(assert_all_called=False) as router:
        install_respx(router, VastProvider)
        install_respx(router, LambdaProvider)
        first = run_refresh(["vast", "lambda"], settings=FAST)
    assert first.exit_code == 0, format_report(first)
    vast_state_1, vast_offers_1 = stored("vast")
    _, lambda_offers_1 = stored("lambda")
    # fixtures/vast: 26 asks, one at a zero price (no offer); fixtures/lambda: 18 instance types,
    # one of them CPU-only (cpu_4x_general)
    assert len(vast_offers_1) == 25 and len(lambda_offers_1) == 17

    mock, expected_error = FAILURES[mode]
    with respx.mock(assert_all_called=False) as router:
        if mock is None:
            async def broken(self, ctx):
                raise PluginBug(f"parser fell over near key {SECRET}")

            monkeypatch.setattr(VastProvider, "fetch", broken)
        else:
            router.post(VAST_URL).mock(**mock)
        router.get(LAMBDA_URL).mock(return_value=httpx.Response(200, content=lambda_body(price_bump_cents=10)))
        second = run_refresh(["vast", "lambda"], settings=FAST)

    results = {r.provider: r for r in second.results}
    assert second.exit_code == 1
    assert results["vast"].status == "failed" and expected_error in results["vast"].error
    assert results["lambda"].status == "ok" and results["lambda"].changed == 1 and results["lambda"].new == 0

    vast_state_2, vast_offers_2 = stored("vast")
    assert vast_offers_2 == vast_offers_1  # the same offers, field for field
    assert vast_state_2.stale and expected_error in vast_state_2.last_error
    assert vast_state_2.fetched_at == vast_state_1.fetched_at and vast_state_2.offers_count == len(vast_offers_1)

    lambda_state, lambda_offers_2 = stored("lambda")
    assert not lambda_state.stale
    a10_before = next(o for o in lambda_offers_1 if o.offer_id == "gpu_1x_a10")
    a10_after = next(o for o in lambda_offers_2 if o.offer_id == "gpu_1x_a10")
    assert a10_after.price_options[0].amount == a10_before.price_options[0].amount + Decimal("0.10")

    if mode == "429 with Retry-After":
        assert no_sleep == [7.0, 7.0]  # the server's wait was honoured, not slept for real
    assert_no_secret_anywhere(caplog, [results["vast"].error, format_report(second)])


def assert_no_secret_anywhere(caplog, texts: list[str | None]) -> None:
    path = store_path()
    for candidate in (path, path.with_name(path.name + "-wal")):
        if candidate.exists():
            assert SECRET.encode() not in candidate.read_bytes(), candidate
    assert SECRET not in caplog.text
    for text in texts:
        assert SECRET not in (text or "")


def test_the_key_is_sent_but_never_kept(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LAMBDA_API_KEY", SECRET)
    with respx.mock() as router:
        routes = install_respx(router, LambdaProvider)
        result = CliRunner().invoke(cli, ["refresh", "--providers", "lambda"])
        overview = CliRunner().invoke(cli, ["providers"])
    (route,) = routes.values()
    assert route.calls.last.request.headers["Authorization"] == f"Bearer {SECRET}"
    assert result.exit_code == 0, result.output
    assert "lambda" in result.output and SECRET not in result.output
    assert "yes" in overview.output and SECRET not in overview.output
    assert_no_secret_anywhere(caplog, [])


def test_a_refused_key_is_reported_without_the_key(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LAMBDA_API_KEY", SECRET)
    with respx.mock() as router:
        router.get(LAMBDA_URL).mock(return_value=httpx.Response(401, json={"error": {"message": f"bad key {SECRET}"}}))
        result = CliRunner().invoke(cli, ["refresh", "--providers", "lambda"])
    assert result.exit_code == 3  # none succeeded
    assert "check LAMBDA_API_KEY" in result.output and SECRET not in result.output
    state, offers = stored("lambda")
    assert state.stale and "LAMBDA_API_KEY" in state.last_error and offers == []
    assert_no_secret_anywhere(caplog, [state.last_error])


# --------------------------------------------------------------------------------------------
# Fake providers (registered by monkeypatching the registry, never globally)


class FakeProvider(Provider):
    """Answers GET <api_root>/offers with [{"id", "gpu", "price", "mem"?}]; `delay` seconds first."""

    name: ClassVar[str] = "fake"
    api_root: ClassVar[str] = "https://fake.test/api"
    delay: ClassVar[float] = 0.0

    async def fetch(self, ctx):
        if self.delay:
            await asyncio.sleep(self.delay)
        rows = await ctx.get_json(ctx.url("offers"))
        return [o for r in rows if (o := ctx.offer(offer_id=r["id"], gpu_raw=r["gpu"], gpu_memory_gb=r.get("mem"), gpus=1, price_options=[
            PriceOption(unit="hour", amount=Decimal(r["price"]))]))]


def fake(name: str, *, delay: float = 0.0, key_env: str | None = None, fail: str | None = None) -> type[Provider]:
    attrs = {"name": name, "api_root": f"https://{name}.test/api", "delay": delay, "key_env": key_env,
             "key_required": key_env is not None}
    if fail:
        async def fetch(self, ctx):
            raise RuntimeError(fail.format(key=self.api_key()))
        attrs["fetch"] = fetch
    return type(f"Fake_{name}", (FakeProvider,), attrs)


@pytest.fixture
def registry(monkeypatch):
    """Replace the plugin registry with the given fake classes for one test."""
    def install(*classes: type[Provider]) -> None:
        found = {c.name: c for c in classes}
        monkeypatch.setattr(base, "load_providers", lambda: (found, ()))
    return install


def serve(router, name: str, rows: list[dict]) -> None:
    router.get(f"https://{name}.test/api/offers").mock(return_value=httpx.Response(200, json=rows))


ROWS = [{"id": "1", "gpu": "RTX 4090", "price": "0.40"}, {"id": "2", "gpu": "H100 SXM 80GB", "price": "2.20"}]


def test_providers_are_fetched_at_the_same_time(registry):
    registry(fake("one", delay=0.4), fake("two", delay=0.4), fake("three", delay=0.4))
    marks: list[float] = []
    with respx.mock() as router:
        for name in ("one", "two", "three"):
            serve(router, name, ROWS)
        report = run_refresh(None, settings=FAST, progress=lambda line: marks.append(time.perf_counter()))
    assert [r.status for r in report.results] == ["ok"] * 3
    fetching = marks[-1] - marks[0]  # from "refreshing ..." to the last provider's outcome
    assert 0.4 <= fetching < 0.9  # three 0.4 s fetches overlapped (one after another: 1.2 s or more)


@pytest.mark.parametrize("setup, names, code", [
    ({"a": "ok", "b": "ok"}, None, 0),
    ({"a": "ok", "b": "fail"}, None, 1),
    ({"a": "fail", "b": "fail"}, None, 3),
    ({"a": "ok", "b": "nokey"}, None, 0),  # skipped for a key nobody asked for: not a failure
    ({"a": "ok", "b": "nokey"}, ["a", "b"], 1),  # explicitly requested: it was not refreshed
    ({"a": "nokey", "b": "nokey"}, None, 3),
])
def test_exit_codes(registry, setup, names, code):
    classes = []
    for name, how in setup.items():
        if how == "fail":
            classes.append(fake(name, fail="boom"))
        elif how == "nokey":
            classes.append(fake(name, key_env=f"{name.upper()}_TEST_API_KEY"))
        else:
            classes.append(fake(name))
    registry(*classes)
    with respx.mock(assert_all_called=False) as router:
        for name in setup:
            serve(router, name, ROWS)
        report = run_refresh(names, settings=FAST)
    assert report.exit_code == code, format_report(report)


def test_a_failure_says_whether_earlier_prices_are_kept(registry, monkeypatch):
    registry(fake("a"))
    with respx.mock() as router:
        serve(router, "a", ROWS)
        run_refresh(None, settings=FAST)
    registry(fake("a", fail="boom"), fake("b", fail="boom"))
    report = run_refresh(None, settings=FAST)
    text = format_report(report)
    assert "a: failed: plugin raised RuntimeError: boom (its last good prices are kept, marked stale)" in text
    assert "b: failed: plugin raised RuntimeError: boom (it has no earlier prices)" in text


def test_a_skipped_provider_says_which_variable_to_set(registry):
    registry(fake("a"), fake("b", key_env="BEE_API_KEY"))
    with respx.mock() as router:
        serve(router, "a", ROWS)
        report = run_refresh(None, settings=FAST)
    skipped = report.results[1]
    assert skipped.status == "skipped" and "export BEE_API_KEY=" in skipped.error
    assert "b: skipped: needs an API key: set BEE_API_KEY" in format_report(report)
    state, _ = stored("a")
    assert state.offers_count == 2
    with open_readonly(store_path()) as s:  # type: ignore[union-attr]
        assert [p.name for p in s.providers()] == ["a"]  # a skipped provider leaves no trace


def test_a_plugin_exception_holding_the_key_is_scrubbed(registry, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("LEAKY_API_KEY", SECRET)
    registry(fake("leaky", key_env="LEAKY_API_KEY", fail="server said: {key} is invalid"))
    report = run_refresh(None, settings=FAST)
    (result,) = report.results
    assert result.status == "failed" and "*** is invalid" in result.error
    state, _ = stored("leaky")
    assert state.last_error.endswith("*** is invalid")
    assert_no_secret_anywhere(caplog, [result.error, format_report(report)])


def test_progress_reports_each_provider(registry):
    registry(fake("a"), fake("b", fail="nope"))
    lines: list[str] = []
    with respx.mock() as router:
        serve(router, "a", ROWS)
        run_refresh(None, settings=FAST, progress=lines.append)
    assert lines[0].startswith("refreshing a, b into ")
    assert sorted(lines[1:]) == ["a: 2 offers in 0.0 s", "b: failed: plugin raised RuntimeError: nope"]


def test_unknown_gpu_names_are_kept_and_counted(registry):
    registry(fake("a"))
    with respx.mock() as router:
        serve(router, "a", ROWS + [{"id": "3", "gpu": "Zephyr X9", "mem": 48, "price": "1.00"}])
        report = run_refresh(None, settings=FAST)
    assert report.results[0].unknown_gpus == ["Zephyr X9"] and report.results[0].offers == 3
    assert "GPU names not in the catalog (kept as unknown): Zephyr X9" in format_report(report)
    _, offers = stored("a")
    assert [(o.gpu, o.gpu_raw) for o in offers if o.offer_id == "3"] == [(None, "Zephyr X9")]


def test_an_unknown_provider_name_changes_nothing(registry, rentopt_home):
    registry(fake("a"))
    from rentopt.optimizer.errors import InputError

    with pytest.raises(InputError, match="unknown provider nope"):
        run_refresh(["nope"])
    assert not rentopt_home.exists()


# --------------------------------------------------------------------------------------------
# One refresh at a time


def test_a_second_refresh_while_one_runs_fails_clearly(registry, rentopt_home):
    registry(fake("a"))
    rentopt_home.mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from pathlib import Path; from rentopt.optimizer.refresh import refresh_lock\n"
         "with refresh_lock(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(30)",
         str(rentopt_home / LOCK_FILENAME)],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match=rf"another `rentopt refresh` \(pid {holder.pid}\) is already updating"):
            run_refresh(None, settings=FAST)
        result = CliRunner().invoke(cli, ["refresh"])
        assert result.exit_code == 4 and f"(pid {holder.pid})" in result.output
    finally:
        holder.kill()
        holder.wait()
    assert not store_path().exists()  # the loser touched nothing
    with respx.mock() as router:
        serve(router, "a", ROWS)
        assert run_refresh(None, settings=FAST).exit_code == 0  # a dead holder's lock is gone


def test_the_lock_is_released_after_a_refresh(tmp_path):
    path = tmp_path / LOCK_FILENAME
    with refresh_lock(path):
        with pytest.raises(StoreError, match="already updating"), refresh_lock(path):
            pass
    with refresh_lock(path):
        pass


# --------------------------------------------------------------------------------------------
# CLI


def test_refresh_quiet_prints_only_errors(registry):
    registry(fake("a"), fake("b", fail="kaput"))
    with respx.mock() as router:
        serve(router, "a", ROWS)
        result = CliRunner().invoke(cli, ["refresh", "--quiet"])
    assert result.exit_code == 1
    assert result.output.strip() == "rentopt: b: failed: plugin raised RuntimeError: kaput"


def test_refresh_prints_a_summary_table(registry):
    registry(fake("a"))
    with respx.mock() as router:
        serve(router, "a", ROWS)
        result = CliRunner().invoke(cli, ["refresh"])
    assert result.exit_code == 0
    header, _, row = result.output.splitlines()[:3]
    assert header.split()[:3] == ["provider", "status", "offers"]
    assert row.split()[:6] == ["a", "ok", "2", "2", "0", "0"]


def test_providers_command_shows_keys_freshness_and_broken_plugins(monkeypatch):
    monkeypatch.setenv("NEED_API_KEY", SECRET)
    found = {c.name: c for c in (fake("open"), fake("need", key_env="NEED_API_KEY"), fake("gone", key_env="GONE_API_KEY"))}
    broken = (base.BrokenPlugin("busted", "cannot import busted.plugin: ImportError: no module"),)
    monkeypatch.setattr(base, "load_providers", lambda: (found, broken))
    with respx.mock() as router:
        serve(router, "open", ROWS)
        serve(router, "need", ROWS)
        run_refresh(["open", "need"], settings=FAST)
    result = CliRunner().invoke(cli, ["providers"])
    assert result.exit_code == 0
    plugins_table = result.output.split("\n\n")[0].splitlines()[3:]
    rows = {line.split()[0]: line for line in plugins_table if line and not line.startswith("broken")}
    assert rows["open"].split()[1:4] == ["not", "needed", "2"] and rows["open"].split()[4] == "open"
    assert rows["need"].split()[1:4] == ["yes", "2", "need"]
    assert rows["gone"].split()[1:4] == ["no", "-", "-"]
    # the providers table says where each provider's prices come from: the two refreshed ones from
    # the store, the never-refreshed bundled ones from the bundled snapshot
    sources = {line.split()[0]: line for line in result.output.split("come from:\n")[1].splitlines()[2:] if line}
    assert sources["open"].split()[1:4] == ["open", "price", "store"]
    assert sources["gcp"].split()[1:4] == ["skypilot", "bundled", "snapshot"]
    assert "broken plugin busted: cannot import busted.plugin" in result.output
    assert SECRET not in result.output
    overview = provider_overview()
    assert [p.name for p in overview.providers] == ["gone", "need", "open"] and overview.has_store


def test_providers_command_without_a_store_creates_nothing(rentopt_home):
    result = CliRunner().invoke(cli, ["providers"])
    assert result.exit_code == 0 and "bundled snapshot" in result.output
    assert not rentopt_home.exists()


def test_offers_command_lists_the_bundled_snapshot_with_its_origin(rentopt_home):
    result = CliRunner().invoke(cli, ["offers", "--gpu", "H100 SXM 80GB", "--min-gpus", "8", "--limit", "3"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == ("Offers from the bundled snapshot of published prices (oldest 2026-04-20) "
                        "(run `rentopt refresh` for current prices); date unknown: hyperbolic, hyperstack, jarvislabs, "
                        "lium, mithril, nebius, seeweb, verda, yotta")
    sources = [line for line in lines if line.startswith("prices: ")]
    assert len(sources) == 15 and any(line.startswith("prices: gcp: SkyPilot catalog of 2026-04-20") for line in sources)
    rest = lines[1 + len(sources):]
    assert rest[0].startswith("note: showing 3 of ") and rest[0].endswith("raise --limit to see more")
    assert rest[1].split()[:3] == ["provider", "offer", "gpu"]
    body = rest[3:]
    assert len(body) == 3 and all("H100-SXM-80GB" in line and "USD" in line for line in body)
    assert not rentopt_home.exists()


def test_offers_json_reads_back_as_an_offers_file(tmp_path):
    result = CliRunner().invoke(cli, ["offers", "--provider", "lambda", "--format", "json"])
    assert result.exit_code == 0
    path = tmp_path / "lambda.json"
    path.write_text(result.stdout)
    again = CliRunner().invoke(cli, ["offers", "--offers-file", str(path), "--format", "csv"])
    assert again.exit_code == 0
    csv_path = tmp_path / "lambda.csv"
    csv_path.write_text(again.stdout)
    third = CliRunner().invoke(cli, ["offers", "--offers-file", str(csv_path), "--format", "json"])
    first_offers, third_offers = json.loads(result.stdout), json.loads(third.stdout)
    assert [o["offer_id"] for o in third_offers] == [o["offer_id"] for o in first_offers]
    assert [o["price_options"][0]["amount"] for o in third_offers] == [o["price_options"][0]["amount"] for o in first_offers]


@pytest.mark.parametrize("args, message", [
    (["offers", "--gpu", "A100"], "ambiguous"),  # 40 or 80 GB: the user chooses
    (["offers", "--max-price", "free"], "'free' is not a number"),
    (["offers", "--max-price", "0"], "must be a positive number"),
    (["offers", "--provider", "vats"], "unknown provider vats"),
    (["offers", "--offers-file", "/nonexistent/offers.csv"], "cannot read offers file"),
])
def test_offers_command_input_errors_are_one_line(args, message):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_offers_filters_by_price_in_the_offers_own_currency(rentopt_home):
    result = CliRunner().invoke(cli, ["offers", "--max-price", "1.5", "--currency", "usd", "--format", "json", "--sort", "gpu"])
    offers = json.loads(result.stdout)
    assert offers and all(o["currency"] == "USD" for o in offers)
    from rentopt.optimizer.offers_io import hour_price
    from rentopt.optimizer.models import Offer

    assert all(hour_price(Offer.model_validate(o)) <= Decimal("1.5") for o in offers)


# --------------------------------------------------------------------------------------------
# JSON output, and a price no store can hold


def test_refresh_format_json_has_each_provider_and_the_exit_code(registry, monkeypatch):
    registry(fake("a"), fake("b", fail="kaput"), fake("c", key_env="SEE_API_KEY"))
    with respx.mock() as router:
        serve(router, "a", ROWS)
        result = CliRunner().invoke(cli, ["refresh", "--format", "json"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["exit_code"] == 1 and report["store"] == str(store_path())
    by_name = {p["provider"]: p for p in report["providers"]}
    assert by_name["a"]["status"] == "ok" and by_name["a"]["offers"] == 2 and by_name["a"]["new"] == 2
    assert by_name["b"]["status"] == "failed" and by_name["b"]["error"] == "plugin raised RuntimeError: kaput"
    assert by_name["b"]["offers"] is None and by_name["b"]["kept_earlier_prices"] is False
    assert by_name["c"]["status"] == "skipped" and "SEE_API_KEY" in by_name["c"]["error"]


def test_providers_format_json_never_holds_the_key(monkeypatch, registry):
    monkeypatch.setenv("NEED_API_KEY", SECRET)
    registry(fake("open"), fake("need", key_env="NEED_API_KEY"))
    with respx.mock() as router:
        serve(router, "open", ROWS)
        serve(router, "need", ROWS)
        run_refresh(None, settings=FAST)
    result = CliRunner().invoke(cli, ["providers", "--format", "json"])
    assert result.exit_code == 0 and SECRET not in result.output
    data = json.loads(result.stdout)
    need = next(p for p in data["providers"] if p["provider"] == "need")
    assert need["key"] == "yes" and need["key_env"] == "NEED_API_KEY" and need["offers"] == 2 and not need["stale"]
    assert need["last_success_at"].endswith("Z") and data["has_store"] is True and data["broken_plugins"] == []


class BypassingProvider(FakeProvider):
    """A plugin that builds Offer objects itself, skipping ctx.offer (and so its band check)."""

    name: ClassVar[str] = "bypass"
    api_root: ClassVar[str] = "https://bypass.test/api"

    async def fetch(self, ctx):
        from rentopt.optimizer.models import Offer

        def offer(i: str, price: str) -> Offer:
            return Offer(provider="bypass", offer_id=i, gpu="RTX-4090-24GB", gpu_raw="RTX 4090", gpus=1,
                         gpu_memory_gb=24, price_options=[PriceOption(unit="hour", amount=Decimal(price))],
                         currency="USD", fetched_at=ctx.fetched_at, source="https://bypass.test/api")
        return [offer("huge", "1e400"), offer("ok1", "0.40"), offer("ok2", "0.41"), offer("ok3", "0.42")]


def test_an_unstorable_price_fails_its_row_never_the_providers_after_it(registry):
    """'1e400' reached the store's history writer (InvalidOperation), ending the refresh with the
    providers after it unrefreshed and no failure recorded. Now the row is rejected and counted."""
    registry(BypassingProvider, fake("zz"))
    with respx.mock() as router:
        serve(router, "zz", ROWS)
        report = run_refresh(None, settings=FAST)
    bypass, zz = report.results
    assert bypass.status == "ok" and bypass.rejected_rows == 1 and bypass.offers == 3
    assert bypass.problems == ["rejected huge: 1E+400 USD per GPU-hour is above the sane range 0.001-200 USD"]
    assert zz.status == "ok" and zz.offers == 2
    assert "bypass: 1 row(s) rejected: a price outside the sane range, an unknown GPU id" in format_report(report)


def test_a_provider_the_store_cannot_take_is_recorded_and_the_next_still_stored(registry, monkeypatch):
    from decimal import InvalidOperation

    import rentopt.optimizer.store as store_module

    registry(fake("aa"), fake("bb"))
    write = store_module.Store.write_snapshot

    def choke(self, provider, offers, **kw):
        if provider == "aa":
            raise InvalidOperation([object])
        return write(self, provider, offers, **kw)

    monkeypatch.setattr(store_module.Store, "write_snapshot", choke)
    with respx.mock() as router:
        serve(router, "aa", ROWS)
        serve(router, "bb", ROWS)
        report = run_refresh(None, settings=FAST)
    aa, bb = report.results
    assert aa.status == "failed" and aa.error.startswith("fetched, but could not be stored (InvalidOperation")
    assert bb.status == "ok" and bb.offers == 2 and report.exit_code == 1
    state, offers = stored("aa")
    assert state.stale and state.last_error.startswith("fetched, but could not be stored") and offers == []


def test_a_hung_exchange_rate_server_is_held_to_the_time_budget(registry, monkeypatch):
    import dataclasses

    import rentopt.providers.ecb as ecb

    async def never(settings=None, transport=None, url=ecb.ECB_HISTORY_URL):
        await asyncio.sleep(3600)

    monkeypatch.setattr(ecb, "fetch_reference_rates", never)
    registry(fake("a"))
    start = time.perf_counter()
    with respx.mock() as router:
        serve(router, "a", ROWS)
        report = run_refresh(None, settings=dataclasses.replace(FAST, budget_s=0.2))
    assert time.perf_counter() - start < 3
    assert report.exit_code == 0 and report.fx.status == "failed"
    assert report.fx.error == "gave up after the 0.2 s time budget"
