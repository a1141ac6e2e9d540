"""Keeping API keys out of text: error messages, logs, and anything written to the store.

Three layers: `redact(text, secrets)` replaces known secret values; `scrub_url_secrets` blanks
the values of query parameters named like credentials (`?api_key=...`, `&token=...`) and the
user name and password of a URL (`https://bob:pw@host`), which catches a key we were never
told about; and `RedactingFilter`, on every log handler the CLI installs, on every rentopt
module's logger (`redacted_logger`) and on the HTTP stack's (`HTTP_LOGGERS`), applies both to
every log record, because httpx logs each request's full URL at INFO.
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
# The userinfo of a URL (RFC 3986 section 3.2.1), up to its last "@" before the path: a password
# may hold an unescaped "@" that urllib still reads as part of it.
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#\s]+@")

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
    """Blank credential-like query parameters and the user:password of any URL inside `text`.

    >>> scrub_url_secrets("GET https://api.example/v1/x?api_key=s3cr3t&limit=5")
    'GET https://api.example/v1/x?api_key=***&limit=5'
    >>> scrub_url_secrets("https://bob:p@ss@mirror.example/api?q=1")
    'https://***@mirror.example/api?q=1'
    """
    return _URL_USERINFO.sub(r"\1***@", _QUERY_SECRET.sub(r"\1***", text))


def remember_secret(value: str | None) -> None:
    """Scrub `value` from every log line from now on (a token obtained at run time)."""
    if value and len(value) >= MIN_SECRET_LENGTH:
        _runtime_secrets.add(value)


def known_secrets() -> list[str]:
    """Every credential value this process knows of: by variable name, and learnt at run time."""
    found = {v for k, v in os.environ.items() if k.endswith(CREDENTIAL_SUFFIXES) and v}
    return sorted(found | _runtime_secrets, key=len, reverse=True)  # longest first: no partial leftovers


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


# The HTTP stack's loggers, which log each request's full URL. A logger's filter sees only the
# records made on that very logger, never its children's, so each one is named.
HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy",
                "httpcore.socks")


def _add_filter(logger: logging.Logger) -> logging.Logger:
    if not any(isinstance(f, RedactingFilter) for f in logger.filters):
        logger.addFilter(RedactingFilter())
    return logger


def redacted_logger(name: str) -> logging.Logger:
    """The logger `name` with a RedactingFilter on it: every rentopt module logs through one, so
    its records are scrubbed whatever handler a program that imports rentopt installs."""
    return _add_filter(logging.getLogger(name))


def install_logger_filters() -> None:
    """Put one RedactingFilter on each of the HTTP stack's loggers (idempotent)."""
    for name in HTTP_LOGGERS:
        _add_filter(logging.getLogger(name))
