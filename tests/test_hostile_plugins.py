"""Third-party plugins cannot stall or fool the nightly refresh (issue 24): each fetch runs in a
thread of its own under the time budget, plugin code's SystemExit and KeyboardInterrupt fail
that plugin only, a plugin that cannot be imported or constructed fails alone and is named,
built-in names cannot be taken, and RENTOPT_PLUGINS=builtin loads nothing else whatever a
distribution calls itself. The plugins are real distributions on sys.path (dist-info and
entry points), discovered the way an installed package would be."""

from __future__ import annotations

import textwrap
import time

import pytest
import respx
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.refresh import run_refresh
from rentopt.providers.base import HttpSettings, load_providers

FAST = HttpSettings(retries=0, backoff_s=0, budget_s=0.5)

PLUGINS = '''
import sys
import time
from decimal import Decimal

from rentopt.optimizer.models import PriceOption
from rentopt.providers.base import Provider


class Good(Provider):
    name = "goodcloud"
    api_root = "https://good.example"

    async def fetch(self, ctx):
        return [ctx.offer(offer_id="g1", gpu_raw="RTX 4090", gpus=1,
                          price_options=[PriceOption(unit="hour", amount=Decimal("0.40"))])]


class Sleeper(Provider):
    name = "sleeper"
    api_root = "https://sleeper.example"

    async def fetch(self, ctx):
        time.sleep(3)  # blocks its event loop: asyncio's budget cannot fire
        return []


class Exiter(Provider):
    name = "exiter"
    api_root = "https://exiter.example"

    async def fetch(self, ctx):
        sys.exit(0)


class Interrupter(Provider):
    name = "interrupter"
    api_root = "https://interrupter.example"

    async def fetch(self, ctx):
        raise KeyboardInterrupt


class BadInit(Provider):
    name = "badinit"
    api_root = "https://badinit.example"

    def __init__(self):
        raise RuntimeError("no config")

    async def fetch(self, ctx):
        return []


class FakeVast(Provider):
    name = "vast"
    api_root = "https://evil.example"
    key_env = "VAST_API_KEY"

    async def fetch(self, ctx):
        raise AssertionError("a shadowing plugin ran")
'''

EXIT_AT_IMPORT = "import sys\nsys.exit(3)\n"


def distribution(root, dist_name: str, entries: str) -> None:
    info = root / f"{dist_name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[rentopt.providers]\n" + entries)


@pytest.fixture
def hostile_plugins(tmp_path, monkeypatch):
    (tmp_path / "hostile_plugins.py").write_text(textwrap.dedent(PLUGINS))
    (tmp_path / "exit_at_import.py").write_text(EXIT_AT_IMPORT)
    distribution(tmp_path, "rentopt-hostile", "goodcloud = hostile_plugins:Good\nsleeper = hostile_plugins:Sleeper\n"
                 "exiter = hostile_plugins:Exiter\ninterrupter = hostile_plugins:Interrupter\n"
                 "badinit = hostile_plugins:BadInit\nimportexit = exit_at_import:Nothing\n"
                 "vast = hostile_plugins:FakeVast\nvast2 = hostile_plugins:FakeVast\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RENTOPT_PLUGINS", "all")
    load_providers.cache_clear()
    yield tmp_path
    load_providers.cache_clear()


def test_a_blocking_plugin_fails_within_its_budget_and_the_others_are_stored(hostile_plugins):
    started = time.perf_counter()
    report = run_refresh(["goodcloud", "sleeper"], settings=FAST)
    took = time.perf_counter() - started
    by = {r.provider: r for r in report.results}
    assert by["sleeper"].status == "failed" and "time budget" in by["sleeper"].error
    assert by["goodcloud"].status == "ok" and by["goodcloud"].offers == 1
    assert took < 0.5 + 2.0 + 1.0  # budget + isolation grace + slack; the sleeper alone sleeps 3 s
    assert report.exit_code == 1
    # the lock is free again: a second refresh runs at once
    assert run_refresh(["goodcloud"], settings=FAST).exit_code == 0


@pytest.mark.parametrize("name, raised", [("exiter", "SystemExit"), ("interrupter", "KeyboardInterrupt")])
def test_an_exit_inside_a_plugin_fetch_is_that_plugins_failure(hostile_plugins, name, raised):
    result = CliRunner().invoke(cli, ["refresh", "--providers", f"goodcloud,{name}", "--time-budget", "5"])
    assert result.exit_code == 1, result.output  # was 0, with no output and nothing refreshed
    assert f"{name}: failed: plugin raised {raised}" in result.output
    assert "goodcloud  " in result.output and " ok " in result.output


def test_a_plugin_that_exits_at_import_or_cannot_be_constructed_fails_alone_and_named(hostile_plugins):
    result = CliRunner().invoke(cli, ["refresh", "--providers", "sheet"])
    assert result.exit_code == 0, result.output  # was 3, silently, whatever was asked
    result = CliRunner().invoke(cli, ["refresh", "--providers", "goodcloud,badinit,importexit", "--time-budget", "5"])
    assert result.exit_code == 1, result.output
    assert "badinit: failed: plugin not usable: cannot construct" in result.output and "no config" in result.output
    assert "importexit: failed: plugin not usable: cannot import exit_at_import:Nothing: SystemExit: 3" in result.output
    found, broken = load_providers()
    assert "goodcloud" in found and {b.name for b in broken} >= {"importexit"}


def test_a_builtin_name_cannot_be_taken(hostile_plugins):
    from rentopt.providers.vast import VastProvider

    found, broken = load_providers()
    assert found["vast"] is VastProvider  # the real one, with VAST_API_KEY out of the impostor's reach
    refused = {b.name: b.error for b in broken}
    assert "would replace rentopt's built-in plugin 'vast'" in refused["vast"]
    assert "would replace rentopt's built-in plugin 'vast'" in refused["vast2"]  # the class's own name counts too


def test_builtin_loads_nothing_else_whatever_a_distribution_calls_itself(hostile_plugins, monkeypatch):
    distribution(hostile_plugins, "rentopt", "goodcloud2 = hostile_plugins:Good\n")  # it calls itself rentopt
    monkeypatch.setenv("RENTOPT_PLUGINS", "builtin")
    load_providers.cache_clear()
    found, broken = load_providers()
    assert "goodcloud" not in found and "goodcloud2" not in found and broken == ()
    assert {"vast", "runpod", "lambda", "sheet", "skypilot"} <= set(found)


def test_an_async_hang_still_ends_at_the_budget_with_its_own_message(hostile_plugins):
    """The budget inside the plugin's thread fires first when the plugin awaits (the usual case)."""
    import asyncio

    from rentopt.providers.base import Provider, fetch_all

    class Waiter(Provider):
        name = "waiter"
        api_root = "https://waiter.example"

        async def fetch(self, ctx):
            await asyncio.sleep(30)

    with respx.mock(assert_all_called=False):
        (outcome,) = asyncio.run(fetch_all([Waiter()], FAST))
    assert outcome.status == "failed" and "gave up after its 0.5 s time budget (0 requests)" in outcome.error
