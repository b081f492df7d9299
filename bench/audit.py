"""Count one client's API requests from a kube-apiserver audit log (JSON lines).

Only the ``ResponseComplete`` stage (or ``Panic``) of each audit ID counts, so a watch
that streamed for minutes is one request. Pure apart from reading the file.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.stats import summarize

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READ_VERBS = frozenset({"get", "list"})


@dataclass
class RequestCounts:
    """Requests by ``(verb, resource[/subresource])``."""

    by_verb_resource: Counter[tuple[str, str]] = field(default_factory=Counter)
    server_seconds: defaultdict[tuple[str, str], list[float]] = field(
        default_factory=lambda: defaultdict(list)
    )
    """Time in the API server (received to response complete) of each request."""

    def total(self, verbs: frozenset[str] | None = None, resource: str | None = None) -> int:
        return sum(
            n
            for (verb, res), n in self.by_verb_resource.items()
            if (verbs is None or verb in verbs) and (resource is None or res == resource)
        )

    def as_rows(self) -> list[dict[str, object]]:
        """One row per (verb, resource): count and server-side latency (not for watches)."""
        rows: list[dict[str, object]] = []
        for (verb, res), n in sorted(self.by_verb_resource.items()):
            row: dict[str, object] = {"verb": verb, "resource": res, "count": n}
            if verb != "watch":
                row["server_s"] = summarize(self.server_seconds[(verb, res)])
            rows.append(row)
        return rows


def _seconds(start: object, end: object) -> float | None:
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (b - a).total_seconds()


def _resource(obj_ref: dict[str, object]) -> str:
    res = str(obj_ref.get("resource", ""))
    group = str(obj_ref.get("apiGroup", ""))
    if group:
        res = f"{res}.{group}"
    sub = obj_ref.get("subresource")
    return f"{res}/{sub}" if sub else res


def completed_events(lines: Iterable[str], user_agent_prefix: str) -> Iterator[dict[str, Any]]:
    """The audit events of completed requests whose User-Agent starts with
    ``user_agent_prefix``, in log order."""
    for line in lines:
        if user_agent_prefix not in line:
            continue  # cheap pre-filter; the log holds every client's requests
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if not str(event.get("userAgent", "")).startswith(user_agent_prefix):
            continue
        if event.get("stage") in ("ResponseComplete", "Panic"):
            yield event


def count_requests(lines: Iterable[str], user_agent_prefix: str) -> RequestCounts:
    """Count the requests whose User-Agent starts with ``user_agent_prefix``."""
    counts = RequestCounts()
    for event in completed_events(lines, user_agent_prefix):
        ref = event.get("objectRef") or {}
        key = (str(event.get("verb", "")), _resource(ref))
        counts.by_verb_resource[key] += 1
        took = _seconds(event.get("requestReceivedTimestamp"), event.get("stageTimestamp"))
        if took is not None:
            counts.server_seconds[key].append(took)
    return counts


@dataclass(frozen=True)
class Request:
    """One completed request: when the API server received it (seconds since the epoch),
    its verb, resource (as in :class:`RequestCounts`), object name and HTTP code."""

    time: float
    verb: str
    resource: str
    name: str
    code: int


def epoch(stamp: object) -> float | None:
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def requests_of(lines: Iterable[str], user_agent_prefix: str) -> list[Request]:
    """The completed requests whose User-Agent starts with ``user_agent_prefix``, in log
    order, each with the time the API server received it."""
    out: list[Request] = []
    for event in completed_events(lines, user_agent_prefix):
        t = epoch(event.get("requestReceivedTimestamp"))
        if t is None:
            continue
        ref = event.get("objectRef") or {}
        code = (event.get("responseStatus") or {}).get("code", 0)
        out.append(
            Request(t, str(event.get("verb", "")), _resource(ref), str(ref.get("name", "")),
                    int(code) if isinstance(code, int) else 0)
        )  # fmt: skip
    return out


def count_file(path: Path, user_agent_prefix: str, keep: Path | None = None) -> RequestCounts:
    """Count from the log at ``path``; with ``keep``, also copy the lines that mention
    ``user_agent_prefix`` there (the client's own audit trail, for a closer look)."""
    with path.open(encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if user_agent_prefix in line]
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text("".join(lines))
    return count_requests(lines, user_agent_prefix)
