"""The one alias for Kubernetes objects and their parts as plain dicts, RFC 3339 time, and
the controller owner of an object.

Objects are dicts exactly as the API server sends them (docs/development/layout.md); ``JSON`` names
that everywhere. Times on the wire are RFC 3339 in UTC: ``Time`` has whole seconds
(``2026-01-01T00:00:00Z``), ``MicroTime`` microseconds (Leases, ``eventTime``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = ["JSON", "EventType", "controller_ref", "format_micro_time", "format_time", "parse_time"]

JSON = dict[str, Any]

EventType = Literal["Normal", "Warning"]
"""The type of a Kubernetes Event (``core/v1`` Event ``type``)."""


def controller_ref(obj: Any) -> JSON | None:
    """The ownerReference of ``obj`` that has ``controller: true`` (at most one may), if any."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    for ref in (meta or {}).get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def format_time(t: datetime) -> str:
    """A Kubernetes ``Time``: RFC 3339, UTC, whole seconds."""
    if t.tzinfo is not UTC:
        t = t.astimezone(UTC)
    # isoformat is several times cheaper than strftime (a planner pass formats a few).
    return t.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


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
