"""The typed settings model: every RENTOPT_* variable validated in one place, bad values one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from rentopt.optimizer.cli import cli
from rentopt.optimizer.settings import ENV, Settings, SettingsError, settings


@pytest.mark.parametrize("var, value, message", [
    ("RENTOPT_HTTP_TIMEOUT", "abc", "RENTOPT_HTTP_TIMEOUT='abc': not a number of seconds; give seconds per HTTP request"),
    ("RENTOPT_HTTP_TIMEOUT", "0", "must be above 0 and at most 3600 seconds"),
    ("RENTOPT_HTTP_TIMEOUT", "nan", "must be above 0 and at most 3600 seconds"),
    ("RENTOPT_HTTP_TIMEOUT", "1e9", "must be above 0 and at most 3600 seconds"),
    ("RENTOPT_HTTP_RETRIES", "three", "RENTOPT_HTTP_RETRIES='three': not a whole number"),
    ("RENTOPT_HTTP_RETRIES", "-1", "not a whole number"),
    ("RENTOPT_HTTP_RETRIES", "11", "less than or equal to 10"),
    ("RENTOPT_REFRESH_BUDGET", "inf", "RENTOPT_REFRESH_BUDGET='inf': must be above 0"),
    ("RENTOPT_PROVIDERS", "vast,,Run Pod", "'Run Pod' is not a provider name"),
    ("RENTOPT_PROVIDERS", ",", "the list is empty"),
    ("RENTOPT_PLUGINS", "some", "RENTOPT_PLUGINS='some': Input should be 'all' or 'builtin'"),
    ("RENTOPT_LOG", "loud", "RENTOPT_LOG='loud': Input should be 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"),
    ("RENTOPT_DEBUG", "maybe", "RENTOPT_DEBUG='maybe': 'maybe' is neither yes nor no"),
    ("RENTOPT_AZURE_REGIONS", "East US", "'East US' is not an Azure region name"),
    ("RENTOPT_AWS_REGIONS", "us-east-1,Virginia", "'Virginia' is not an AWS region name"),
    ("RENTOPT_AWS_SPOT", "sometimes", "RENTOPT_AWS_SPOT='sometimes'"),
    ("RENTOPT_AWS_SPOT_URL", "ftp://x", "not an http(s) URL with a host"),
    ("RENTOPT_VAST_BASE_URL", "console.vast.ai/api", "RENTOPT_VAST_BASE_URL='console.vast.ai/api': not an http(s) URL"),
    ("RENTOPT_ACME_BASE_URL", "https://user:pw@mirror.example", "credentials in a URL would end up in logs"),
    ("RENTOPT_HOME", "~no-such-user-x/rentopt", "RENTOPT_HOME='~no-such-user-x/rentopt': starts with ~ but names no user"),
])
def test_a_bad_setting_is_one_line_naming_the_variable_and_exit_2(monkeypatch, var, value, message):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=None) as err:
        settings()
    assert message in str(err.value)
    for args in (["gpus"], ["refresh", "--providers", "sheet"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.startswith(f"rentopt: error: {var}=") and message in result.stderr
        assert result.stderr.count("\n") == 1 and "rentopt: internal error" not in result.output


def test_good_values_are_typed(monkeypatch, tmp_path):
    for var, value in {"RENTOPT_HOME": str(tmp_path), "RENTOPT_HTTP_TIMEOUT": "7.5", "RENTOPT_HTTP_RETRIES": "0",
                       "RENTOPT_REFRESH_BUDGET": "60", "RENTOPT_PROVIDERS": " vast, runpod ,vast",
                       "RENTOPT_PLUGINS": "BUILTIN", "RENTOPT_LOG": "warn", "RENTOPT_DEBUG": "yes",
                       "RENTOPT_AZURE_REGIONS": "ALL", "RENTOPT_AWS_REGIONS": "us-west-2", "RENTOPT_AWS_SPOT": "off",
                       "RENTOPT_LAMBDA_BASE_URL": "http://127.0.0.1:8080/api/v1"}.items():
        monkeypatch.setenv(var, value)
    s = settings()
    assert s.home == tmp_path and s.http_timeout_s == 7.5 and s.http_retries == 0 and s.refresh_budget_s == 60
    assert s.providers == ("vast", "runpod") and s.plugins == "builtin" and s.log_level == "WARNING" and s.debug
    assert s.azure_regions == "all" and s.aws_regions == ("us-west-2",) and s.aws_spot is False
    assert s.base_url("RENTOPT_LAMBDA_BASE_URL") == "http://127.0.0.1:8080/api/v1"


def test_unset_and_empty_mean_the_defaults(monkeypatch):
    monkeypatch.delenv("RENTOPT_HOME")
    for var in ENV.values():
        monkeypatch.setenv(var, "")
    assert settings() == Settings()
    assert Settings().http_timeout_s == 20 and Settings().refresh_budget_s == 300 and Settings().http_retries == 3


def test_keys_are_never_settings(monkeypatch):
    secret = "sk-live-SETTINGS-SECRET-123"
    for var in ("VAST_API_KEY", "LAMBDA_API_KEY", "DATACRUNCH_CLIENT_SECRET", "RENTOPT_SOMETHING_API_KEY"):
        monkeypatch.setenv(var, secret)
    s = settings()
    assert secret not in repr(s) and secret not in str(s.model_dump())


def test_every_setting_is_in_the_readme():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    for var in [*ENV.values(), "RENTOPT_<PROVIDER>_BASE_URL"]:
        assert var in readme, f"README.md does not document {var}"


def test_the_http_settings_come_from_the_model(monkeypatch):
    from rentopt.providers.base import HttpSettings

    monkeypatch.setenv("RENTOPT_HTTP_TIMEOUT", "3")
    monkeypatch.setenv("RENTOPT_HTTP_RETRIES", "1")
    monkeypatch.setenv("RENTOPT_REFRESH_BUDGET", "45")
    s = HttpSettings.from_env()
    assert (s.timeout_s, s.retries, s.budget_s) == (3.0, 1, 45.0)


@pytest.mark.parametrize("var", ["RENTOPT_ACME_BASE_URL", "RENTOPT_SKYPILOT_CATALOG", "RENTOPT_AWS_SPOT_URL"])
def test_a_refused_url_with_a_password_never_echoes_the_password(monkeypatch, var):
    monkeypatch.setenv(var, "https://bob:hunter2-PW@mirror.example/api?api_key=sk-QUERY-KEY")
    with pytest.raises(SettingsError) as err:
        settings()
    message = str(err.value)
    assert "credentials in a URL" in message and "mirror.example/api" in message
    assert "hunter2-PW" not in message and "bob" not in message and "sk-QUERY-KEY" not in message


def test_version_and_help_work_whatever_the_environment_holds(monkeypatch):
    """A bad RENTOPT_* value stops commands with one line, but never the --version and --help
    that explain how to fix it (the real entry point: the settings were read before click)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "RENTOPT_HTTP_TIMEOUT": "abc"}
    run = lambda *args: subprocess.run([sys.executable, "-m", "rentopt", *args], env=env,  # noqa: E731
                                       capture_output=True, text=True, timeout=120)
    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("rentopt, version ") and not version.stderr
    for args in (["--help"], ["quote", "--help"], ["refresh", "-h"]):
        shown = run(*args)
        assert shown.returncode == 0 and shown.stdout.startswith("Usage: rentopt") and not shown.stderr, args
    refused = run("gpus")
    assert refused.returncode == 2 and refused.stderr.startswith("rentopt: error: RENTOPT_HTTP_TIMEOUT='abc'")
