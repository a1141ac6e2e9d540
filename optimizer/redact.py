"""Keeping API keys out of text: error messages, logs, and anything written to the store."""

from __future__ import annotations

from collections.abc import Iterable

# Provider API keys are 20-64 characters. A "secret" shorter than this cannot be a real key, and
# scrubbing it would rewrite ordinary words in stored data (a key "x" would turn "exact" into
# "e***act" and corrupt the offer JSON).
MIN_SECRET_LENGTH = 8


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
