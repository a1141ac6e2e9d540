"""Logging: redacted at every level (httpx's full request URLs included), one line per retry,
-q/-v on the group, timestamps when stderr is not a terminal."""

from __future__ import annotations

import logging
import re
from decimal import Decimal
from typing import ClassVar

import httpx
import pytest
import respx
from click.testing import CliRunner

import rentopt.providers.base as base
from rentopt.optimizer.cli import cli
from rentopt.optimizer.models import PriceOption
from rentopt.optimizer.redact import RedactingFilter, scrub_url_secrets
from rentopt.providers.base import FetchContext, Provider

SECRET = "sk-log-SECRET-4567890"
TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d{4} ")


class KeyInQuery(Provider):
    """A provider whose API wants the key in the query string (as some do): httpx logs the URL."""

    name: ClassVar[str] = "querykey"
    api_root: ClassVar[str] = "https://querykey.test/api"
    key_env: ClassVar[str] = "QUERYKEY_TOKEN"
    key_required: ClassVar[bool] = True

    def auth_headers(self, key: str) -> dict[str, str]:
        return {}

    async def fetch(self, ctx):
        rows = await ctx.get_json(ctx.url("offers"), params={"token": self.api_key()})
        return [o for r in rows if (o := ctx.offer(offer_id=r["id"], gpu_raw="RTX 4090", gpus=1,
                                                    price_options=[PriceOption(unit="hour", amount=Decimal(r["p"]))]))]


URL = "https://querykey.test/api/offers"
ROWS = [{"id": "1", "p": "0.40"}, {"id": "2", "p": "0.45"}]


@pytest.fixture
def provider(monkeypatch):
    monkeypatch.setenv("QUERYKEY_TOKEN", SECRET)
    monkeypatch.setattr(base, "load_providers", lambda: ({"querykey": KeyInQuery}, ()))

    async def no_wait(self, seconds):
        pass

    monkeypatch.setattr(FetchContext, "sleep", no_wait)
    yield
    logging.getLogger().handlers[:] = [h for h in logging.getLogger().handlers if h.name != "rentopt-cli"]


def refresh(*group_args: str, answers=None):
    with respx.mock() as router:
        route = router.get(url__startswith=URL)
        route.side_effect = answers or [httpx.Response(200, json=ROWS)]
        return CliRunner().invoke(cli, [*group_args, "refresh"])


def test_httpx_urls_are_logged_without_the_key(provider):
    result = refresh("-vv")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    requests = [x for x in lines if "httpx: INFO: HTTP Request: GET https://querykey.test/api/offers?token=***" in x]
    assert requests, result.stderr
    assert SECRET not in result.output


def test_one_log_line_per_retry(provider, monkeypatch):
    monkeypatch.setenv("RENTOPT_HTTP_RETRIES", "3")
    result = refresh("-v", answers=[httpx.Response(503), httpx.Response(502), httpx.Response(200, json=ROWS)])
    assert result.exit_code == 0, result.output
    retries = [x for x in result.stderr.splitlines() if "rentopt.providers: INFO: querykey: retry" in x]
    assert len(retries) == 2, result.stderr
    assert re.search(r"retry 1 of 3 in \d+\.\d s: server error HTTP 503 \(GET https://querykey.test/api/offers\)$",
                     retries[0]), retries[0]
    assert "retry 2 of 3" in retries[1] and "HTTP 502" in retries[1]
    assert SECRET not in result.output


def test_log_lines_carry_a_timestamp_when_stderr_is_not_a_terminal(provider):
    result = refresh("-v")
    lines = [x for x in result.stderr.splitlines() if ": INFO: " in x]
    assert lines and all(TIMESTAMP.match(x) for x in lines), lines


def test_by_default_no_log_lines_and_quiet_silences_the_log_setting(provider, monkeypatch):
    result = refresh()
    assert result.exit_code == 0 and result.stderr == ""
    monkeypatch.setenv("RENTOPT_LOG", "INFO")
    assert ": INFO: " in refresh().stderr
    quiet = refresh("-q")
    assert quiet.exit_code == 0 and quiet.output == ""  # -q: no summary, no log lines


def test_quiet_still_prints_errors(provider):
    result = refresh("-q", answers=[httpx.Response(401)] * 4)
    assert result.exit_code == 3
    assert result.stderr.strip() == "rentopt: querykey: failed: HTTP 401: the API refused the credentials; check QUERYKEY_TOKEN"


def test_the_filter_scrubs_secrets_in_arguments_and_tracebacks(monkeypatch):
    monkeypatch.setenv("SOME_API_KEY", SECRET)
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "sent %s to %s", (SECRET, "https://h/?key=abc"), None)
    try:
        raise ValueError(f"boom {SECRET}")
    except ValueError:
        import sys

        record.exc_info = sys.exc_info()
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "sent *** to https://h/?key=***"
    assert SECRET not in record.exc_text and "boom ***" in record.exc_text


def test_credential_like_query_parameters_are_scrubbed_even_unknown():
    text = "GET https://x.example/v1?limit=5&api_key=abc&Signature=zz&next=1 and https://y/?access_token=t0k"
    assert scrub_url_secrets(text) == ("GET https://x.example/v1?limit=5&api_key=***&Signature=***&next=1 and "
                                       "https://y/?access_token=***")


@pytest.mark.parametrize("name", ["rentopt.refresh", "rentopt.currency", "rentopt.solver", "rentopt.providers",
                                  "httpx", "httpcore.http11", "httpcore.connection"])
def test_a_program_importing_rentopt_gets_scrubbed_records_from_every_logger_that_may_carry_a_url(
        monkeypatch, name):
    """No CLI: a library caller's own handler on the root logger, the loggers rentopt and httpx use."""
    import rentopt.optimizer.currency
    import rentopt.optimizer.refresh
    import rentopt.optimizer.solver  # noqa: F401

    monkeypatch.setenv("SOME_API_KEY", SECRET)
    base.FetchContext(KeyInQuery(), client=None)  # type: ignore[arg-type]  # a fetch starting
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Collect(level=logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    logger = logging.getLogger(name)
    old_logger_level, logger.level = logger.level, logging.DEBUG
    try:
        logger.info("GET %s with %s", f"https://h.example/v1?api_key={SECRET}&page=2", SECRET)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        logger.setLevel(old_logger_level)
    assert seen == ["GET https://h.example/v1?api_key=***&page=2 with ***"]
