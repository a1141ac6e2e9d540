"""The fault matrix: every HTTP provider against every wire fault, from a real loopback server.

Each trial starts from a store holding a good snapshot of every provider, then refreshes the
provider under test (served a fault) together with a companion (served its recorded answers),
all over real HTTP on 127.0.0.1 (tests/providers/loopback.py): respx cannot drip a byte a
second, hang, send gzip that does not decode, or redirect to another port. A trial checks:

- bounded time: a drip or a hang ends at the provider's time budget (0.2 s here), not 50 s;
- one clear line: the failure names the fault ("time budget", "redirect loop", "could not be
  decoded", "refused a redirect ... to another host"), never "plugin raised";
- the old snapshot intact: a failed provider keeps its previous offers exactly, marked stale;
- the others refreshed: the companion's new snapshot is stored;
- no credential anywhere else: not in the store file, the summary, the JSON, the log (DEBUG,
  httpx included), nor in any request the other host received.

Absurd prices are the one fault a provider survives: the row is rejected and counted, and no
price outside the sane bands is stored.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from rentopt.optimizer.refresh import format_report, report_json, run_refresh
from rentopt.optimizer.sanity import PriceBands
from rentopt.optimizer.store import OfferQuery, open_readonly, store_path
import rentopt.providers.base as base
from rentopt.providers.base import HttpSettings, load_providers
from tests.providers import loopback
from tests.providers.helpers import credential_envs
from tests.providers.test_http_failures import HTTP_PROVIDERS
from tools.fixture_routes import load_manifest

BUDGET_S = 0.2
# A per-read timeout far above the budget: only the budget can end a drip. Providers that are
# not meant to hit their budget get a generous one, so a slow machine never fails a trial.
SETTINGS = HttpSettings(timeout_s=5.0, retries=1, backoff_s=0.0, budget_s=30.0)
TIGHT = replace(SETTINGS, budget_s=BUDGET_S)
# Time a trial may take beyond the budget: two providers' parsing and storing, on a busy machine.
SLACK_S = 2.5
SECRETS = {
    "VAST_API_KEY": "vast-key-SECRET-0001",
    "RUNPOD_API_KEY": "runpod-key-SECRET-0002",
    "LAMBDA_API_KEY": "lambda-key-SECRET-0003",
    "DATACRUNCH_CLIENT_ID": "datacrunch-id-SECRET-0004",
    "DATACRUNCH_CLIENT_SECRET": "datacrunch-secret-SECRET-0005",
}
# DataCrunch's fixture token is a credential too once issued.
TOKEN = json.loads(load_manifest("datacrunch").routes[0].body())["access_token"]
CREDENTIALS = [*SECRETS.values(), TOKEN]


def provider_cls(name: str):
    return load_providers()[0][name]


def companion_of(name: str) -> str:
    return "vast" if name == "lambda" else "lambda"


# -- absurd prices: one row of each provider's recorded answer, made impossible ------------------


def _vast(bodies):
    body = json.loads(bodies["bundles.json"])
    body["offers"][0]["dph_total"] = 1e12
    bodies["bundles.json"] = json.dumps(body).encode()


def _runpod(bodies):
    body = json.loads(bodies["gpu_types.json"])
    row = next(t for t in body["data"]["gpuTypes"] if t.get("communityCloud") and t.get("communityPrice"))
    row["communityPrice"] = 1e10
    bodies["gpu_types.json"] = json.dumps(body).encode()


def _lambda(bodies):
    body = json.loads(bodies["instance_types.json"])
    entry = next(e for e in body["data"].values() if e["instance_type"]["specs"].get("gpus"))
    entry["instance_type"]["price_cents_per_hour"] = 10**14
    bodies["instance_types.json"] = json.dumps(body).encode()


def _datacrunch(bodies):
    rows = json.loads(bodies["instance_types.json"])
    next(r for r in rows if (r.get("gpu") or {}).get("number_of_gpus"))["price_per_hour"] = "1e400"
    bodies["instance_types.json"] = json.dumps(rows).encode()


def _aws(bodies):
    body = json.loads(bodies["us-east-1_index.json"])
    sku = next(iter(body["terms"]["OnDemand"]))
    for term in body["terms"]["OnDemand"][sku].values():
        for dim in term["priceDimensions"].values():
            dim["pricePerUnit"]["USD"] = "1e400"
    bodies["us-east-1_index.json"] = json.dumps(body).encode()


def _azure(bodies):
    body = json.loads(bodies["prices_page1.json"])
    item = next(i for i in body["Items"] if i["serviceName"] == "Virtual Machines" and i["type"] == "Consumption"
                and not i["skuName"].endswith("Spot"))
    item["retailPrice"] = 1e12
    bodies["prices_page1.json"] = json.dumps(body).encode()


def _skypilot(bodies):
    import csv
    import io

    rows = list(csv.reader(io.StringIO(bodies["gcp_vms.csv"].decode())))
    header = rows[0]
    row = next(r for r in rows[1:] if r[header.index("AcceleratorName")] and not r[header.index("AcceleratorName")]
               .startswith("tpu") and r[header.index("Price")])
    row[header.index("Price")] = "1000000000000"
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    bodies["gcp_vms.csv"] = out.getvalue().encode()


ABSURD = {"vast": _vast, "runpod": _runpod, "lambda": _lambda, "datacrunch": _datacrunch, "aws": _aws, "azure": _azure,
          "skypilot": _skypilot}


# -- the servers and the store -----------------------------------------------------------------


class Servers:
    """One loopback server per provider, and an `elsewhere` server on another port."""

    def __init__(self, names, monkeypatch):
        self.by_name = {name: loopback.FaultServer(load_manifest(name)) for name in names}
        self.elsewhere: loopback.FaultServer | None = None
        for name, server in self.by_name.items():
            cls = provider_cls(name)
            path = cls.api_root.split("://", 1)[1].partition("/")[2]
            monkeypatch.setenv(cls.base_url_env(), f"{server.root}/{path}".rstrip("/"))
            if name == "aws":
                monkeypatch.setenv("RENTOPT_AWS_SPOT_URL", f"{server.root}/spot.json")

    def add_elsewhere(self, name: str) -> loopback.FaultServer:
        """A second host serving `name`'s recorded answers (where a redirect points)."""
        self.elsewhere = loopback.FaultServer(load_manifest(name))
        return self.elsewhere

    def close(self):
        for server in [*self.by_name.values(), *([self.elsewhere] if self.elsewhere else [])]:
            server.close()


@pytest.fixture
def credentials(monkeypatch):
    for env, value in SECRETS.items():
        monkeypatch.setenv(env, value)


@pytest.fixture(scope="module")
def good_store(tmp_path_factory) -> Path:
    """A store holding one good snapshot of every HTTP provider, refreshed over loopback once."""
    home = tmp_path_factory.mktemp("good-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RENTOPT_HOME", str(home))
        mp.setenv("RENTOPT_PLUGINS", "builtin")
        for env, value in SECRETS.items():
            mp.setenv(env, value)
        servers = Servers(HTTP_PROVIDERS, mp)
        try:
            report = run_refresh(HTTP_PROVIDERS, settings=SETTINGS)
        finally:
            servers.close()
    # Every plugin refreshed (SkyPilot's clouds that other plugins deliver newer are "kept").
    assert all(r.status in ("ok", "kept") for r in report.results), format_report(report)
    return home / "prices.sqlite"


def delivered(plugin: str) -> list[str]:
    """The providers whose current prices `plugin` delivered (its own name, or a catalog's clouds)."""
    with open_readonly(store_path()) as store:  # type: ignore[union-attr]
        return sorted(p.name for p in store.providers() if (p.plugin or p.name) == plugin and p.has_data)


def snapshot(provider: str):
    with open_readonly(store_path()) as store:  # type: ignore[union-attr]
        state = {p.name: p for p in store.providers()}[provider]
        offers = store.load_offers(OfferQuery(providers=(provider,)))  # ordered by offer id
    return state, offers


def no_credential_in(texts: list[str], *, where: str) -> None:
    for text in texts:
        for secret in CREDENTIALS:
            assert secret not in text, f"a credential reached {where}"


def run_trial(name, fault_name, good_store, rentopt_home, monkeypatch, caplog):
    """Refresh `name` (served `fault_name`) and its companion; returns what the checks need."""
    caplog.set_level(logging.DEBUG)
    rentopt_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(good_store, store_path())
    companion = companion_of(name)
    before = {p: snapshot(p) for plugin in (name, companion) for p in delivered(plugin)}
    servers = Servers([name, companion], monkeypatch)
    faulty = servers.by_name[name]
    if fault_name in ("drip", "hang"):
        faulty.fault = loopback.drip(1.0) if fault_name == "drip" else loopback.hang
        tight_for(name, monkeypatch)
    elif fault_name == "gzip garbage":
        faulty.fault = loopback.gzip_garbage
    elif fault_name == "redirect loop":
        faulty.fault = loopback.redirect_loop
    elif fault_name.startswith("redirect "):
        faulty.fault = loopback.redirect_to(servers.add_elsewhere(name), int(fault_name.split()[1]))
    elif fault_name == "absurd prices":
        bodies = {r.fixture.name: r.body() for r in faulty.manifest.routes}
        ABSURD[name](bodies)
        faulty.bodies = bodies
    try:
        start = time.perf_counter()
        report = run_refresh([name, companion], settings=SETTINGS)
        elapsed = time.perf_counter() - start
    finally:
        servers.close()
    return report, before, elapsed, servers


def tight_for(name: str, monkeypatch) -> None:
    """Give provider `name` alone the small time budget (its companion keeps the generous one)."""
    fetch_one = base.fetch_one

    async def budgeted(provider, client, settings, fetched_at=None):
        return await fetch_one(provider, client, TIGHT if provider.name == name else settings, fetched_at)

    monkeypatch.setattr(base, "fetch_one", budgeted)


FAILING = {
    "drip": f"gave up after its {BUDGET_S:g} s time budget",
    "hang": f"gave up after its {BUDGET_S:g} s time budget",
    "gzip garbage": "could not be decoded",
    "redirect loop": "redirect loop:",
}


@pytest.mark.parametrize("fault_name", [*FAILING, "redirect 302", "redirect 307", "redirect 308", "absurd prices"])
@pytest.mark.parametrize("name", HTTP_PROVIDERS)
def test_fault_matrix(name, fault_name, good_store, rentopt_home, monkeypatch, caplog, credentials):
    report, before, elapsed, servers = run_trial(name, fault_name, good_store, rentopt_home, monkeypatch, caplog)
    mine = [r for r in report.results if (r.plugin or r.provider) == name]
    (companion,) = [r for r in report.results if (r.plugin or r.provider) == companion_of(name)]
    summary, as_json = format_report(report), report_json(report)

    # Bounded time, whatever the server does.
    assert elapsed < BUDGET_S + SLACK_S, f"{name} {fault_name}: refresh took {elapsed:.2f} s"
    # The others refreshed: the companion's new snapshot is the one stored.
    assert companion.status == "ok", companion.error
    state, _ = snapshot(companion.provider)
    assert state.last_success_at > before[companion.provider][0].last_success_at

    credentialed = bool(credential_envs(provider_cls(name)))
    redirect = fault_name.startswith("redirect ")
    providers = delivered(name) or [name]
    if fault_name in FAILING or (redirect and credentialed):
        expected = FAILING.get(fault_name) or (
            f"refused a redirect (HTTP {fault_name.split()[1]}) from {servers.by_name[name].netloc} to another host, "
            f"{servers.elsewhere.netloc}: the request carries credentials")
        assert mine and all(r.status == "failed" and expected in r.error for r in mine), [r.error for r in mine]
        for result in mine:
            # One clear line, naming the fault and the provider.
            assert "\n" not in result.error and "plugin raised" not in result.error
            assert f"{result.label}: failed: {result.error}" in summary
        if fault_name in ("drip", "hang"):
            assert elapsed >= BUDGET_S * 0.9
        # The old snapshot intact, marked stale with the error.
        for provider in providers:
            state, offers = snapshot(provider)
            old_state, old_offers = before[provider]
            assert offers == old_offers and state.fetched_at == old_state.fetched_at
            assert state.stale and expected in state.last_error
    elif redirect:
        # No credential on the request: following the redirect is safe, and it succeeds.
        assert mine and all(r.status in ("ok", "kept") for r in mine), [r.error for r in mine]
        assert servers.elsewhere.received, "the redirect was not followed"
    else:  # absurd prices: the row is rejected and counted, the provider refreshed
        (run, *_) = mine
        assert all(r.status in ("ok", "kept") for r in mine) and run.rejected_rows >= 1, [r.error for r in mine]
        assert f"{name}: {run.rejected_rows} row(s) rejected" in summary
        assert any("above the sane range" in line for line in run.problems), run.problems
        rejected = {line.split(": ", 1)[0].removeprefix("rejected ") for line in run.problems}
        bands = PriceBands()
        for provider in providers:
            _, offers = snapshot(provider)
            assert offers and all(bands.offer_problem(o) is None for o in offers)
            assert not rejected & {o.offer_id for o in offers}
        # Only the bad rows (and, at AWS, the spot twin built from a rejected on-demand row) went.
        old = sum(len(before[p][1]) for p in providers)
        new = sum(len(snapshot(p)[1]) for p in providers)
        assert old - 2 * run.rejected_rows <= new <= old - run.rejected_rows

    # No credential anywhere else.
    if servers.elsewhere is not None:
        no_credential_in([r.text() for r in servers.elsewhere.received], where="the other host")
        if credentialed:
            assert servers.elsewhere.received == []
    path = store_path()
    stored = [p.read_bytes().decode("latin-1") for p in (path, path.with_name(path.name + "-wal")) if p.exists()]
    no_credential_in(stored, where="the store")
    no_credential_in([summary, as_json, caplog.text], where="the output or the log")
    json.loads(as_json)


def test_a_token_request_redirected_to_another_host_never_carries_the_token(
        good_store, rentopt_home, monkeypatch, caplog, credentials):
    """DataCrunch's login succeeds, then its Bearer-token GETs are redirected: refused, unsent."""
    caplog.set_level(logging.DEBUG)
    rentopt_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(good_store, store_path())
    servers = Servers(["datacrunch"], monkeypatch)
    elsewhere = servers.add_elsewhere("datacrunch")
    to_elsewhere = loopback.redirect_to(elsewhere, 307)
    servers.by_name["datacrunch"].fault = lambda s, request, body: (
        to_elsewhere(s, request, body) if request.method == "GET" else None)
    try:
        report = run_refresh(["datacrunch"], settings=SETTINGS)
    finally:
        servers.close()
    (result,) = report.results
    assert result.status == "failed" and "refused a redirect (HTTP 307)" in result.error
    token_sent_home = [r for r in servers.by_name["datacrunch"].received if TOKEN in r.headers.get("Authorization", "")]
    assert token_sent_home and elsewhere.received == []
    no_credential_in([format_report(report), caplog.text, result.error], where="the output or the log")


def test_the_cli_time_budget_bounds_a_dripping_provider(good_store, rentopt_home, monkeypatch, credentials):
    from click.testing import CliRunner

    from rentopt.optimizer.cli import cli

    rentopt_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(good_store, store_path())
    servers = Servers(["vast"], monkeypatch)
    servers.by_name["vast"].fault = loopback.drip(1.0)  # a 13 KB answer: 3.6 hours at this rate
    try:
        start = time.perf_counter()
        result = CliRunner().invoke(cli, ["refresh", "--providers", "vast", "--time-budget", "0.5", "--format", "json"])
        elapsed = time.perf_counter() - start
    finally:
        servers.close()
    assert result.exit_code == 3, result.output  # none succeeded
    (vast,) = json.loads(result.stdout)["providers"]
    assert vast["status"] == "failed" and vast["error"].startswith("gave up after its 0.5 s time budget")
    assert vast["kept_earlier_prices"] is True
    assert 0.5 <= elapsed < 0.5 + SLACK_S
