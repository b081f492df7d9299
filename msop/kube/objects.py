"""The one alias for Kubernetes objects and their parts as plain dicts, and RFC 3339 time.

Objects are dicts exactly as the API server sends them (see DESIGN.md); ``JSON`` names
that everywhere. Times on the wire are RFC 3339 in UTC: ``Time`` has whole seconds
(``2026-01-01T00:00:00Z``), ``MicroTime`` microseconds (Leases, ``eventTime``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

__all__ = ["JSON", "format_micro_time", "format_time", "parse_time"]

JSON = dict[str, Any]


def format_time(t: datetime) -> str:
    """A Kubernetes ``Time``: RFC 3339, UTC, whole seconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(t: datetime) -> str:
    """A Kubernetes ``MicroTime``: RFC 3339, UTC, microseconds."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any) -> datetime | None:
    """A ``Time`` or ``MicroTime`` string as an aware datetime; None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
