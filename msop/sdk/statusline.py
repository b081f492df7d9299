"""The live progress line of ``wait_for_job``: pure formatting plus a small writer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TextIO

from msop.api import constants as c
from msop.api.conditions import latest_condition_type
from msop.api.report import summary
from msop.sdk.status import JobStatus


def format_progress(job: Mapping[str, Any]) -> str:
    """``ns/name Condition | Worker active=2 succeeded=1 failed=0 | ... | 45% epoch 9/20
    ETA 2m5s loss=0.0213``.

    The condition is the latest one (``Pending`` before the operator saw the job); replica
    types appear in Scheduler, PS, Worker order, and only those the status reports; the
    training progress comes last, once the job has reported some (``status.progress``),
    and ``resumes from step N`` while the job is restarting, suspended or queued with a
    checkpoint reported (:attr:`JobStatus.resumes_from`).
    """
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    state = latest_condition_type(status) or "Pending"
    parts = [f"{meta.get('namespace')}/{meta.get('name')} {state}"]
    replicas = status.get("replicaStatuses") or {}
    for rtype in (*c.REPLICA_TYPES, *sorted(set(replicas) - set(c.REPLICA_TYPES))):
        counts = replicas.get(rtype)
        if not isinstance(counts, Mapping):
            continue
        parts.append(
            f"{rtype} active={counts.get('active', 0)} succeeded={counts.get('succeeded', 0)} "
            f"failed={counts.get('failed', 0)}"
        )
    progress = summary(status.get("progress"))
    if progress:
        parts.append(progress)
    resumes = JobStatus.of(job).resumes_from
    if resumes is not None:
        parts.append(f"resumes from {resumes}")
    return " | ".join(parts)


class ProgressLine:
    """Writes a changing status line: rewritten in place with ``\\r`` on a terminal, one
    line per change otherwise (logs, CI). Identical consecutive lines are not repeated."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._last: str | None = None

    def update(self, text: str) -> None:
        if text == self._last:
            return
        if self._tty:
            pad = max(0, len(self._last or "") - len(text))
            self._stream.write("\r" + text + " " * pad)
        else:
            self._stream.write(text + "\n")
        self._last = text
        self._stream.flush()

    def close(self) -> None:
        """End the line on a terminal so later output starts on a fresh one."""
        if self._tty and self._last is not None:
            self._stream.write("\n")
            self._stream.flush()
        self._last = None
