"""The errors the SDK raises, all under :class:`MSJobError`.

API refusals the SDK does not interpret (forbidden, conflict, ...) surface unchanged as
:class:`msop.kube.errors.ApiError`.
"""

from __future__ import annotations

from typing import Any

from msop.api import FieldError

__all__ = [
    "MSJobError",
    "MSJobFailedError",
    "MSJobLogsError",
    "MSJobNotFoundError",
    "MSJobTimeoutError",
    "MSJobValidationError",
]


class MSJobError(Exception):
    """Base of every error raised by :mod:`msop.sdk`."""


class MSJobValidationError(MSJobError, ValueError):
    """The MSJob breaks the admission rules; nothing was sent. ``errors`` lists the fields."""

    def __init__(self, name: str, errors: list[FieldError]) -> None:
        self.name = name
        self.errors = errors
        lines = "\n".join(f"  {e.path}: {e.message}" for e in errors)
        super().__init__(f"MSJob {name or '<unnamed>'} is invalid:\n{lines}")


class MSJobNotFoundError(MSJobError, LookupError):
    """The MSJob does not exist (or was deleted while being waited on)."""


class MSJobFailedError(MSJobError):
    """The MSJob has the ``Failed`` condition; the message is the condition's."""

    def __init__(self, job: dict[str, Any], reason: str, message: str) -> None:
        self.job = job
        self.reason = reason
        self.condition_message = message
        meta = job.get("metadata") or {}
        super().__init__(
            f"MSJob {meta.get('namespace')}/{meta.get('name')} failed ({reason}): {message}"
        )


class MSJobTimeoutError(MSJobError, TimeoutError):
    """``wait_for_job`` ran out of time; ``job`` is the last state seen (None if never seen)."""

    def __init__(self, message: str, job: dict[str, Any] | None) -> None:
        self.job = job
        super().__init__(message)


class MSJobLogsError(MSJobError):
    """The API server could not serve the pod's log; the message is the API's."""
