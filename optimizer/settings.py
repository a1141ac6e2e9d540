"""Every setting rentopt reads from the environment, in one typed model.

`settings()` reads the `RENTOPT_*` variables once per distinct environment and validates them
all together; a bad value is a `SettingsError` (exit 2) naming the variable, the value and what
it should look like, e.g. `RENTOPT_HTTP_TIMEOUT='abc': not a number of seconds`. The CLI reads
it before running any command, so a typo in a cron job's environment fails fast and clearly.

API keys are NOT settings: they stay in the environment and are read only where they are used
(providers/base.py `Provider.api_key`), so they never sit in this object or its repr.

Adding a setting: a field below with its default, its variable in `ENV`, a line in `HINTS`
saying what a good value looks like, and a row in README's Configuration table.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rentopt.optimizer.errors import InputError
from rentopt.optimizer.redact import scrub_url_secrets

PREFIX = "RENTOPT_"
BASE_URL_SUFFIX = "_BASE_URL"

# Defaults, with why.
# Per request: long enough for AWS's multi-hundred-MB price files to start arriving.
DEFAULT_HTTP_TIMEOUT_S = 20.0
DEFAULT_HTTP_RETRIES = 3
# Per provider, for its whole fetch (every request, retry and wait): a slow-drip or hung server
# can hold a request open for ever without tripping the per-read timeout. Five minutes covers
# AWS's two default regions (README: tens of seconds to minutes per region) and still bounds a
# nightly cron run; every other provider finishes in about a second (benchmarks/bench_refresh.py).
DEFAULT_REFRESH_BUDGET_S = 300.0
MAX_HTTP_TIMEOUT_S = 3600.0
MAX_HTTP_RETRIES = 10
MAX_REFRESH_BUDGET_S = 86400.0

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_PROVIDER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_AZURE_REGION = re.compile(r"^[a-z][a-z0-9]+$")
_AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR"]


class SettingsError(InputError):
    """A RENTOPT_* variable with a value rentopt cannot use; the message names it."""


# field name -> environment variable
ENV: dict[str, str] = {
    "home": "RENTOPT_HOME",
    "http_timeout_s": "RENTOPT_HTTP_TIMEOUT",
    "http_retries": "RENTOPT_HTTP_RETRIES",
    "refresh_budget_s": "RENTOPT_REFRESH_BUDGET",
    "providers": "RENTOPT_PROVIDERS",
    "plugins": "RENTOPT_PLUGINS",
    "log_level": "RENTOPT_LOG",
    "debug": "RENTOPT_DEBUG",
    "azure_regions": "RENTOPT_AZURE_REGIONS",
    "aws_regions": "RENTOPT_AWS_REGIONS",
    "aws_spot": "RENTOPT_AWS_SPOT",
    "aws_spot_url": "RENTOPT_AWS_SPOT_URL",
    # Data sources.
    "skypilot_catalog": "RENTOPT_SKYPILOT_CATALOG",
}

HINTS: dict[str, str] = {
    "home": "a directory path, e.g. RENTOPT_HOME=~/.local/share/rentopt",
    "http_timeout_s": f"seconds per HTTP request, above 0 and at most {MAX_HTTP_TIMEOUT_S:g}, e.g. RENTOPT_HTTP_TIMEOUT=20",
    "http_retries": f"a whole number of retries from 0 to {MAX_HTTP_RETRIES}, e.g. RENTOPT_HTTP_RETRIES=3",
    "refresh_budget_s": (f"seconds one provider's refresh may take in all, above 0 and at most {MAX_REFRESH_BUDGET_S:g}, "
                         "e.g. RENTOPT_REFRESH_BUDGET=300"),
    "providers": "a comma list of provider names, e.g. RENTOPT_PROVIDERS=vast,runpod (see `rentopt providers`)",
    "plugins": "'all' (default: also third-party plugins) or 'builtin' (only rentopt's own)",
    "log_level": "DEBUG, INFO, WARNING or ERROR (or empty for no log lines)",
    "debug": "1 to show a traceback for internal errors, 0 (or unset) not to",
    "azure_regions": "a comma list of Azure region names such as eastus,westeurope, or 'all'",
    "aws_regions": "a comma list of AWS region names such as us-east-1,us-west-2",
    "aws_spot": "1 (default: also fetch AWS spot prices) or 0",
    "aws_spot_url": "an http(s) URL",
    "skypilot_catalog": "a folder or an http(s) URL holding <cloud>/vms.csv files",
    "base_urls": "an http(s) URL of the provider's API root, e.g. https://mirror.example/api/v0",
}


def _comma_list(value: Any) -> Any:
    if isinstance(value, str):
        items = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
        if not items:
            raise ValueError("the list is empty")
        return items
    return value


def _boolean(value: Any) -> Any:
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE:
            return True
        if word in _FALSE or word == "":
            return False
        raise ValueError(f"{value!r} is neither yes nor no")
    return value


def _http_url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http(s) URL with a host")
    if parts.username or parts.password:
        raise ValueError("credentials in a URL would end up in logs; rentopt takes keys only from their own variables")
    return value.strip()


def _matching_list(value: Any, pattern: re.Pattern[str], what: str) -> Any:
    """A comma-separated list whose every item matches `pattern`; else the first that does not."""
    items = _comma_list(value)
    bad = [item for item in items or () if not pattern.match(item)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not {what}")
    return items


def _seconds(value: Any, high: float) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError("not a number of seconds") from None
    if not math.isfinite(seconds) or seconds <= 0 or seconds > high:
        raise ValueError(f"must be above 0 and at most {high:g} seconds")
    return seconds


class Settings(BaseModel):
    """The validated RENTOPT_* environment. Never holds a credential."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path | None = None  # None: the platform's user data directory (optimizer/paths.py)
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S
    http_retries: int = Field(DEFAULT_HTTP_RETRIES, ge=0, le=MAX_HTTP_RETRIES)
    refresh_budget_s: float = DEFAULT_REFRESH_BUDGET_S
    providers: tuple[str, ...] | None = None  # narrows the default provider set
    plugins: Literal["all", "builtin"] = "all"
    log_level: LogLevel | None = None  # None: no log lines (the summaries say what matters)
    debug: bool = False
    azure_regions: tuple[str, ...] | Literal["all"] | None = None  # None: azure.py's defaults
    aws_regions: tuple[str, ...] | None = None  # None: aws.py's defaults
    aws_spot: bool = True
    aws_spot_url: str | None = None
    skypilot_catalog: str | None = None  # a folder or an http(s) URL base of <cloud>/vms.csv files
    # RENTOPT_<PROVIDER>_BASE_URL, keyed by the variable's name (third-party plugins have one too).
    base_urls: dict[str, str] = {}

    @field_validator("home", mode="before")
    @classmethod
    def _home(cls, v: Any) -> Any:
        if isinstance(v, str):
            if not v.strip():
                return None
            if "\x00" in v:
                raise ValueError("holds a NUL byte")
            try:
                return Path(v).expanduser()
            except RuntimeError:
                raise ValueError("starts with ~ but names no user with a home directory") from None
        return v

    @field_validator("http_timeout_s", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        return _seconds(v, MAX_HTTP_TIMEOUT_S)

    @field_validator("refresh_budget_s", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> float:
        return _seconds(v, MAX_REFRESH_BUDGET_S)

    @field_validator("http_retries", mode="before")
    @classmethod
    def _retries(cls, v: Any) -> Any:
        if isinstance(v, str):
            if not v.strip().isdigit():
                raise ValueError("not a whole number")
            return int(v)
        return v

    @field_validator("providers", mode="before")
    @classmethod
    def _providers(cls, v: Any) -> Any:
        return _matching_list(v, _PROVIDER_NAME, "a provider name")

    @field_validator("plugins", "log_level", mode="before")
    @classmethod
    def _word(cls, v: Any, info: Any) -> Any:
        if isinstance(v, str):
            word = v.strip()
            if info.field_name == "log_level":
                word = word.upper()
                if word in ("", "OFF", "NONE"):
                    return None
                return "WARNING" if word == "WARN" else word
            return word.lower() or "all"
        return v

    @field_validator("debug", "aws_spot", mode="before")
    @classmethod
    def _flags(cls, v: Any) -> Any:
        return _boolean(v)

    @field_validator("azure_regions", mode="before")
    @classmethod
    def _azure(cls, v: Any) -> Any:
        if isinstance(v, str) and v.strip().lower() == "all":
            return "all"
        return _matching_list(v, _AZURE_REGION, "an Azure region name (lowercase, like eastus)")

    @field_validator("aws_regions", mode="before")
    @classmethod
    def _aws(cls, v: Any) -> Any:
        return _matching_list(v, _AWS_REGION, "an AWS region name (like us-east-1)")

    @field_validator("aws_spot_url", mode="before")
    @classmethod
    def _spot_url(cls, v: Any) -> Any:
        return _http_url(v) if isinstance(v, str) else v

    @field_validator("skypilot_catalog", mode="before")
    @classmethod
    def _catalog(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v.strip().startswith(("http://", "https://")):
                return _http_url(v)
            if "\x00" in v:
                raise ValueError("holds a NUL byte")
            return v.strip()
        return v

    def base_url(self, env_name: str) -> str | None:
        """The override for a provider's API root (`RENTOPT_<NAME>_BASE_URL`), if set."""
        return self.base_urls.get(env_name)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Validate the RENTOPT_* variables of `environ` (default: os.environ)."""
        environ = os.environ if environ is None else environ
        return _parse(tuple(sorted((k, v) for k, v in environ.items() if k.startswith(PREFIX))))


def settings() -> Settings:
    """The current environment's settings (parsed once per distinct set of RENTOPT_* values)."""
    return Settings.from_env()


@lru_cache(maxsize=16)
def _parse(items: tuple[tuple[str, str], ...]) -> Settings:
    env = dict(items)
    values: dict[str, Any] = {}
    for field_name, var in ENV.items():
        # An empty variable means "not set", as in most Unix tools (VAR= command).
        if var in env and env[var].strip() != "":
            values[field_name] = env[var]
    base_urls: dict[str, str] = {}
    for var, value in env.items():
        if var.endswith(BASE_URL_SUFFIX) and var != PREFIX + BASE_URL_SUFFIX.lstrip("_") and value.strip():
            try:
                base_urls[var] = _http_url(value)
            except ValueError as exc:
                raise SettingsError(f"{var}={scrub_url_secrets(value)!r}: {exc}; give {HINTS['base_urls']}") from None
    values["base_urls"] = base_urls
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        err = exc.errors()[0]
        field_name = str(err["loc"][0]) if err.get("loc") else ""
        var = ENV.get(field_name, field_name)
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise SettingsError(f"{var}={scrub_url_secrets(env.get(var, ''))!r}: {message}; give {HINTS.get(field_name, 'a valid value')}") from None
