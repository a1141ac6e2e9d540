"""Keeping API keys out of text: error messages, logs, and anything written to the store.

Three layers: `redact(text, secrets)` replaces known secret values; `scrub_url_secrets` blanks
the values of query parameters named like credentials (`?api_key=...`, `&token=...`), which
catches a key we were never told about; and `RedactingFilter`, on every log handler the CLI
installs and on the loggers of rentopt and httpx, applies both to every log record, because
httpx logs each request's full URL at INFO.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable

# Provider API keys are 20-64 characters. A "secret" shorter than this cannot be a real key, and
# scrubbing it would rewrite ordinary words in stored data (a key "x" would turn "exact" into
# "e***act" and corrupt the offer JSON).
MIN_SECRET_LENGTH = 8

# Environment variables whose values are credentials by their name (every built-in provider's
# key variable ends so; a third-party plugin's key_env is registered when it is used).
CREDENTIAL_SUFFIXES = ("_API_KEY", "_KEY", "_TOKEN", "_SECRET", "_CLIENT_SECRET", "_CLIENT_ID", "_PASSWORD")

_QUERY_SECRET = re.compile(
    r"(?i)([?&;](?:api[_-]?key|apikey|key|token|access[_-]?token|secret|client[_-]?secret|password|signature|sig)=)"
    r"[^&#\s\"']+"
)

# Values learnt at run time: an OAuth access token, a third-party plugin's key.
_runtime_secrets: set[str] = set()


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every secret in `text` with `***`.

    >>> redact("GET https://x/?api_key=abc123456 failed", ["abc123456"])
    'GET https://x/?api_key=*** failed'
    >>> redact("exact", ["x"])
    'exact'
    """
    for s in secrets:
        if s and len(s) >= MIN_SECRET_LENGTH and s in text:
            text = text.replace(s, "***")
    return text


def scrub_url_secrets(text: str) -> str:
    """Blank credential-like query parameters in any URL inside `text`.

    >>> scrub_url_secrets("GET https://api.example/v1/x?api_key=s3cr3t&limit=5")
    'GET https://api.example/v1/x?api_key=***&limit=5'
    """
    return _QUERY_SECRET.sub(r"\1***", text)


def remember_secret(value: str | None) -> None:
    """Scrub `value` from every log line from now on (a token obtained at run time)."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        _runtime_secrets.add(value)


def known_secrets() -> list[str]:
    """Every credential value this process knows of: by variable name, and learnt at run time."""
    found = {v for k, v in os.environ.items() if k.endswith(CREDENTIAL_SUFFIXES) and v}
    return sorted(found | _runtime_secrets, key=len, reverse=True)  # longest first: no partial leftovers


def scrub(text: str, extra: Iterable[str | None] = ()) -> str:
    """Both layers: known secrets (and `extra`), then credential-like URL parameters."""
    return scrub_url_secrets(redact(text, [*extra, *known_secrets()]))


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with every secret scrubbed (it never drops a record)."""

    def __init__(self, secrets: Callable[[], Iterable[str]] = known_secrets):
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed log call: leave it to logging's own error handling
            return True
        clean = scrub_url_secrets(redact(message, self._secrets()))
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_text is None:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_url_secrets(redact(record.exc_text, self._secrets()))
        return True


# Loggers whose records may carry a URL or a key: rentopt's own and the HTTP stack's.
REDACTED_LOGGERS = ("rentopt", "rentopt.providers", "httpx", "httpcore")


def install_logger_filters() -> None:
    """Put one RedactingFilter on each logger in REDACTED_LOGGERS (idempotent)."""
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactingFilter) for f in logger.filters):
            logger.addFilter(RedactingFilter())
