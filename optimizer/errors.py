"""Domain errors. Library code raises these; only the CLI turns them into messages and exit codes.

Messages are complete sentences meant for the user: they say what was wrong and, where there is
one, what to do. They never contain an API key (providers redact before raising).
"""

from __future__ import annotations


class RentoptError(Exception):
    """Base class. `exit_code` is what the CLI exits with."""

    exit_code = 1


class InputError(RentoptError):
    """Bad input from the user: an unknown model, a negative size, incompatible flags."""

    exit_code = 2


class UnknownModelError(InputError):
    """A model name that is neither a preset, a size like `13b`, nor a readable config.json."""


class UnknownGpuError(InputError):
    """A GPU name given by the user (not a provider) that matches nothing in the catalog."""


class OffersFileError(InputError):
    """An --offers-file that cannot be read; the message names the line or field."""


class NoFeasiblePlan(RentoptError):
    """No plan satisfies the constraints. `reasons` names the binding constraint(s).

    `explanation` (set by the planner) is what `--explain` and `--format json` print: the binding
    constraint with its numbers, the closest misses and the rejections by reason; `rejected` the
    rejected offers when they were listed.
    """

    exit_code = 3

    def __init__(self, message: str, reasons: list[str] | None = None):
        super().__init__(message)
        self.reasons = list(reasons or [])
        self.explanation: dict | None = None
        self.rejected: list = []


class StoreError(RentoptError):
    """The local price store cannot be used (corrupt, foreign, locked, written by an older or a
    newer rentopt). Says how to recover. Exit status 4, README's "rentopt's own files cannot be
    used", on every command (read commands met an old store with 1 before: issue 24)."""

    exit_code = 4


class ProviderError(RentoptError):
    """A provider could not be refreshed. `provider` names it; the message never holds a key.
    `status`: the HTTP status that ended it, when one did (for a caller's hint, not by parsing text)."""

    def __init__(self, provider: str, message: str, status: int | None = None):
        super().__init__(f"{provider}: {message}")
        self.provider = provider
        self.reason = message
        self.status = status


class ProviderSchemaError(ProviderError):
    """A provider's response did not have the expected shape: the whole response is rejected."""


class FileSystemError(StoreError):
    """rentopt's own files cannot be used: RENTOPT_HOME is a file, read-only, or the disk is full.

    Its own exit status (4), so cron can tell "fix the machine" from "a provider failed". The
    message names the path and the fix, and never advises moving a healthy store aside.
    """

    exit_code = 4
