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
# RENTOPT_MAX_DOWNLOAD_MB: replaces every source's byte limit (optimizer/limits.py); at most 64 GiB.
MAX_DOWNLOAD_MB = 65536.0

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
    "max_download_mb": "RENTOPT_MAX_DOWNLOAD_MB",
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
    # Defaults of commands.
    "currency": "RENTOPT_CURRENCY",
    "config": "RENTOPT_CONFIG",
}

HINTS: dict[str, str] = {
    "currency": "a three-letter currency code, e.g. RENTOPT_CURRENCY=EUR",
    "config": "the path of rentopt's config file, e.g. RENTOPT_CONFIG=~/.config/rentopt/config.toml",
    "home": "a directory path, e.g. RENTOPT_HOME=~/.local/share/rentopt",
    "http_timeout_s": f"seconds per HTTP request, above 0 and at most {MAX_HTTP_TIMEOUT_S:g}, e.g. RENTOPT_HTTP_TIMEOUT=20",
    "http_retries": f"a whole number of retries from 0 to {MAX_HTTP_RETRIES}, e.g. RENTOPT_HTTP_RETRIES=3",
    "refresh_budget_s": (f"seconds one provider's refresh may take in all, above 0 and at most {MAX_REFRESH_BUDGET_S:g}, "
                         "e.g. RENTOPT_REFRESH_BUDGET=300"),
    "max_download_mb": (f"mebibytes one source may download or decompress to, above 0 and at most {MAX_DOWNLOAD_MB:g}, "
                        "e.g. RENTOPT_MAX_DOWNLOAD_MB=1024"),
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


def _positive_at_most(value: Any, high: float, noun: str, unit: str) -> float:
    """A finite number above 0 and at most `high`, or a ValueError naming the unit."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"not a number of {noun}") from None
    if not math.isfinite(number) or number <= 0 or number > high:
        raise ValueError(f"must be above 0 and at most {high:g} {unit}")
    return number


def _seconds(value: Any, high: float) -> float:
    return _positive_at_most(value, high, "seconds", "seconds")


class Settings(BaseModel):
    """The validated RENTOPT_* environment. Never holds a credential."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path | None = None  # None: the platform's user data directory (optimizer/paths.py)
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S
    http_retries: int = Field(DEFAULT_HTTP_RETRIES, ge=0, le=MAX_HTTP_RETRIES)
    refresh_budget_s: float = DEFAULT_REFRESH_BUDGET_S
    max_download_mb: float | None = None  # None: each source's own limit (optimizer/limits.py)
    providers: tuple[str, ...] | None = None  # narrows the default provider set
    plugins: Literal["all", "builtin"] = "all"
    log_level: LogLevel | None = None  # None: no log lines (the summaries say what matters)
    debug: bool = False
    azure_regions: tuple[str, ...] | Literal["all"] | None = None  # None: azure.py's defaults
    aws_regions: tuple[str, ...] | None = None  # None: aws.py's defaults
    aws_spot: bool = True
    aws_spot_url: str | None = None
    skypilot_catalog: str | None = None  # a folder or an http(s) URL base of <cloud>/vms.csv files
    currency: str | None = None  # quote's and report's default --currency (None: USD)
    config: Path | None = None  # the config file (None: the platform's config folder, config_path())
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

    @field_validator("max_download_mb", mode="before")
    @classmethod
    def _max_download(cls, v: Any) -> Any:
        return _positive_at_most(v, MAX_DOWNLOAD_MB, "mebibytes", "MiB")

    @field_validator("http_retries", mode="before")
    @classmethod
    def _retries(cls, v: Any) -> Any:
        if isinstance(v, str):
            if not v.strip().isdigit():
                raise ValueError("not a whole number")
            return int(v)
        return v

    @field_validator("currency", mode="before")
    @classmethod
    def _currency(cls, v: Any) -> Any:
        if isinstance(v, str):
            if not re.fullmatch(r"[A-Za-z]{3}", v.strip()):
                raise ValueError("not a three-letter currency code")
            return v.strip().upper()
        return v

    @field_validator("config", mode="before")
    @classmethod
    def _config(cls, v: Any) -> Any:
        return Path(v).expanduser() if isinstance(v, str) else v

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


# --------------------------------------------------------------------------------------------
# The config file
#
# cron runs a job with almost no environment (HOME, LOGNAME, SHELL and PATH=/usr/bin:/bin), so
# API keys exported in a shell's start-up file are not there. The config file holds what a
# nightly job needs: keys, the providers to refresh, the quote currency. The environment
# overrides it, variable by variable.

CONFIG_NAME = "config.toml"
# What a [keys] entry may be called: a provider's credential variable.
_KEY_NAME = re.compile(r"^[A-Z][A-Z0-9_]*_(API_KEY|KEY|TOKEN|CLIENT_ID|CLIENT_SECRET|SECRET)$")
_CONFIG_KEYS = frozenset({"currency", "providers", "keys"})


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """RENTOPT_CONFIG, else config.toml in the platform's config folder (platformdirs: on Linux
    $XDG_CONFIG_HOME/rentopt, else ~/.config/rentopt; ~/Library/Application Support/rentopt on
    macOS)."""
    environ = os.environ if environ is None else environ
    if (given := environ.get(ENV["config"], "").strip()):
        return Path(given).expanduser()
    from platformdirs import user_config_dir

    return Path(user_config_dir("rentopt")) / CONFIG_NAME


class ConfigFile(BaseModel):
    """What the config file says. `keys` holds credentials: never printed (see `shown`)."""

    model_config = ConfigDict(frozen=True)

    path: Path
    found: bool = False
    currency: str | None = None
    providers: tuple[str, ...] | None = None
    keys: dict[str, str] = {}

    def __repr__(self) -> str:  # a key must not reach a log line or a traceback through repr()
        return f"ConfigFile(path={self.path!r}, found={self.found}, keys={sorted(self.keys)})"

    __str__ = __repr__


def read_config(path: Path) -> ConfigFile:
    """The config file at `path` (not there: an empty one). A file rentopt cannot use is a
    SettingsError naming the file and the entry; a key's value never appears in it."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ConfigFile(path=path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"config file {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    import tomllib  # here: most runs have no config file, and need no TOML parser

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path}: not valid TOML ({exc})") from None
    unknown = sorted(set(data) - _CONFIG_KEYS)
    if unknown:
        raise SettingsError(f"config file {path}: unknown entr{'ies' if len(unknown) > 1 else 'y'} "
                            f"{', '.join(unknown)}; it may hold currency, providers and a [keys] table")
    currency = data.get("currency")
    if currency is not None and not (isinstance(currency, str) and re.fullmatch(r"[A-Za-z]{3}", currency.strip())):
        raise SettingsError(f"config file {path}: currency must be a three-letter code such as \"EUR\"")
    providers = data.get("providers")
    if isinstance(providers, str):
        providers = [p for p in providers.split(",")]
    if providers is not None:
        if not isinstance(providers, list) or not all(isinstance(p, str) and _PROVIDER_NAME.match(p.strip().lower())
                                                      for p in providers):
            raise SettingsError(f"config file {path}: providers must be a list of provider names, "
                                "e.g. providers = [\"vast\", \"lambda\"]")
        providers = tuple(p.strip().lower() for p in providers)
    keys = data.get("keys", {})
    if not isinstance(keys, dict):
        raise SettingsError(f"config file {path}: [keys] must be a table of NAME = \"value\" lines")
    for name, value in keys.items():
        if not _KEY_NAME.match(name):
            raise SettingsError(f"config file {path}: [keys] entry {name!r} is not a credential variable's name "
                                "(e.g. LAMBDA_API_KEY, DATACRUNCH_CLIENT_SECRET)")
        if not isinstance(value, str) or not value.strip() or "\x00" in value:
            raise SettingsError(f"config file {path}: [keys] {name} must be a non-empty string (its value is not shown)")
    return ConfigFile(path=path, found=True, currency=currency.strip().upper() if currency else None,
                      providers=providers, keys={k: v.strip() for k, v in keys.items()})


def apply_config(environ: Any = None) -> ConfigFile:
    """Read the config file and give its entries to the process's environment where the
    environment does not already set them (the environment wins, variable by variable): each
    [keys] entry as its own variable (providers read keys from the environment only), providers
    as RENTOPT_PROVIDERS, currency as RENTOPT_CURRENCY."""
    environ = os.environ if environ is None else environ
    config = read_config(config_path(environ))
    for name, value in config.keys.items():
        if not environ.get(name):
            environ[name] = value
    if config.providers is not None and not environ.get(ENV["providers"], "").strip():
        environ[ENV["providers"]] = ",".join(config.providers)
    if config.currency is not None and not environ.get(ENV["currency"], "").strip():
        environ[ENV["currency"]] = config.currency
    return config


def shown_config(config: ConfigFile, environ: Mapping[str, str] | None = None,
                 key_names: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """(setting, value as shown, where it comes from) for `rentopt config show`: every key
    redacted (set or not, never its value)."""
    environ = os.environ if environ is None else environ
    rows = []
    for field_name, var, from_file in (("currency", ENV["currency"], config.currency),
                                       ("providers", ENV["providers"],
                                        ",".join(config.providers) if config.providers else None)):
        value = environ.get(var, "").strip()
        if value and value != from_file:
            rows.append((field_name, value, f"environment ({var})"))
        elif from_file:
            rows.append((field_name, from_file, "config file"))
        else:
            rows.append((field_name, "USD" if field_name == "currency" else "all", "default"))
    for name in sorted({*key_names, *config.keys}):
        value = environ.get(name, "")
        if name in config.keys and (not value or value == config.keys[name]):
            rows.append((name, "set (hidden)", "config file"))
        elif value:
            rows.append((name, "set (hidden)", "environment"))
        else:
            rows.append((name, "not set", "-"))
    return rows
