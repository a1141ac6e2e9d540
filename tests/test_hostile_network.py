"""Bounded bytes and redirects (issue 24): every source stops at its byte limit, on the wire and
once decompressed, in one line with nothing stored; no redirect lands on this machine or a
private network unless the first URL was there."""

from __future__ import annotations

import asyncio
import gzip
import json
import tracemalloc
from decimal import Decimal
from typing import ClassVar

import httpx
import pytest
import respx
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import PriceOption
from rentopt.optimizer.store import open_readonly, store_path
from rentopt.providers.base import HttpSettings, Provider, fetch_all

FAST = HttpSettings(retries=0, backoff_s=0, budget_s=20)
MIB = 1 << 20


class Feed(Provider):
    name: ClassVar[str] = "feed"
    api_root: ClassVar[str] = "https://feed.example"
    max_response_bytes: ClassVar[int] = 2 * MIB

    async def fetch(self, ctx):
        rows = await ctx.get_json(ctx.url("offers"))
        return [ctx.offer(offer_id=str(i), gpu_raw="RTX 4090", gpus=1,
                          price_options=[PriceOption(unit="hour", amount=Decimal("0.4"))]) for i in rows]


def fetch(route_response) -> object:
    with respx.mock() as router:
        router.get("https://feed.example/offers").mock(return_value=route_response)
        (outcome,) = asyncio.run(fetch_all([Feed()], FAST))
    return outcome


def test_a_gzip_bomb_response_fails_its_provider_at_the_limit_without_filling_memory():
    bomb = gzip.compress(b"[" + b" " * (200 * MIB) + b"]", compresslevel=9)  # 200 KB on the wire

    async def network_chunks():  # as a socket gives them: 64 KiB at a time
        for start in range(0, len(bomb), 64 << 10):
            yield bomb[start:start + (64 << 10)]

    tracemalloc.start()
    outcome = fetch(httpx.Response(200, content=network_chunks(), headers={"Content-Encoding": "gzip"}))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert outcome.status == "failed"
    assert "larger than 2 MiB once decompressed, the limit for it; nothing of it was stored" in outcome.error
    assert peak < 160 * MIB  # it was read whole before: 200 MiB inflated, then copied


def test_a_body_past_the_limit_fails_in_one_line_and_a_setting_raises_it(monkeypatch):
    body = b"[1, 2, 3" + b" " * (4 * MIB) + b"]"  # 4 MB of a valid answer
    outcome = fetch(httpx.Response(200, content=body))
    assert outcome.status == "failed" and "is larger than 2 MiB, the limit for it" in outcome.error
    assert "RENTOPT_MAX_DOWNLOAD_MB" in outcome.error and "\n" not in outcome.error
    monkeypatch.setenv("RENTOPT_MAX_DOWNLOAD_MB", "8")
    assert fetch(httpx.Response(200, content=body)).status == "ok"


def test_a_snapshot_bomb_is_one_line_and_nothing_stored(tmp_path, monkeypatch):
    monkeypatch.setenv("RENTOPT_MAX_DOWNLOAD_MB", "1")
    path = tmp_path / "team.json.gz"
    path.write_bytes(gzip.compress(b'{"format": 2, "providers": [' + b" " * (8 * MIB) + b"]}"))
    result = CliRunner().invoke(cli, ["refresh", "--from", str(path)])
    assert result.exit_code == 2
    assert result.stderr.startswith("rentopt: error: the snapshot is larger than 1 MiB once decompressed")
    assert not store_path().exists()
    big = tmp_path / "team.json"
    big.write_bytes(b" " * (2 * MIB))
    result = CliRunner().invoke(cli, ["refresh", "--from", str(big)])
    assert result.exit_code == 2 and "is larger than 1 MiB, the limit for it" in result.stderr
    with respx.mock() as router:
        router.get("https://ci.example/prices.json.gz").mock(return_value=httpx.Response(200, content=b"x" * (2 * MIB)))
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/prices.json.gz"])
    assert result.exit_code == 2 and "is larger than 1 MiB, the limit for it" in result.stderr
    assert open_readonly(store_path()) is None


@pytest.mark.parametrize("target", ["http://169.254.169.254/latest/meta-data/iam/", "http://127.0.0.1:8081/admin",
                                    "http://[::1]:2375/containers", "http://localhost:6379/", "http://10.0.0.5/"])
def test_no_redirect_from_a_public_address_to_this_machine_or_a_private_network(target):
    with respx.mock(assert_all_called=False) as router:
        router.get("https://ci.example/prices.json.gz").mock(
            return_value=httpx.Response(302, headers={"Location": target}))
        inner = router.get(target).mock(return_value=httpx.Response(200, content=b"{}"))
        result = CliRunner().invoke(cli, ["refresh", "--from", "https://ci.example/prices.json.gz"])
    assert result.exit_code == 2 and "refused a redirect" in result.stderr, result.output
    assert not inner.called


def test_a_local_first_url_may_redirect_to_another_local_port():
    with respx.mock(assert_all_called=False) as router:
        router.get("http://127.0.0.1:9000/prices.json").mock(
            return_value=httpx.Response(302, headers={"Location": "http://127.0.0.1:9001/prices.json"}))
        router.get("http://127.0.0.1:9001/prices.json").mock(return_value=httpx.Response(200, content=b"[]"))
        result = CliRunner().invoke(cli, ["refresh", "--from", "http://127.0.0.1:9000/prices.json"])
    assert "refused a redirect" not in result.stderr and "no 'providers' list" in result.stderr
