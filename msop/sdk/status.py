"""A typed, read-only view of an MSJob's status: :class:`JobStatus`.

``JobStatus.of(job)`` reads the object as the API server returns it (the SDK's methods
return such objects) and never raises on a partial or older status: what is missing is
``None``, ``""`` or empty. Times stay RFC 3339 strings, as on the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from msop.api import constants as c
from msop.api.conditions import latest_condition_type

__all__ = ["Checkpoint", "Condition", "JobStatus", "ReplicaStatus"]


@dataclass(frozen=True)
class Condition:
    """One of ``status.conditions``."""

    type: str
    """``Created``, ``Queued``, ``Running``, ``Restarting``, ``Succeeded``, ``Failed``,
    ``Suspended`` or ``ReplicaFailure``."""
    status: str
    """``True``, ``False`` or ``Unknown``."""
    reason: str = ""
    """Machine-readable cause of the last transition (``MSJobRunning``,
    ``BackoffLimitExceeded``, ``WorkloadPending``; the Conditions reference lists them)."""
    message: str = ""
    """Human-readable details: which pod failed with which exit code, and for a failure
    that restarted or ended the job, the failed run's last output."""
    last_transition_time: str = ""
    """When ``status`` last changed (RFC 3339)."""

    @property
    def true(self) -> bool:
        """Whether ``status`` is ``True``."""
        return self.status == c.CONDITION_TRUE


@dataclass(frozen=True)
class Checkpoint:
    """``status.progress.lastCheckpoint``: the last checkpoint the training reported saving
    (``Reporter.checkpoint``); a restarted, suspended or requeued job resumes after it."""

    step: int | None = None
    """Global training steps done when it was saved, if the script said."""
    epoch: int | None = None
    """Epochs done when it was saved, if the script said."""
    path: str = ""
    """Where the script says it saved it ("" if it did not say)."""
    time: str = ""
    """When it was saved (RFC 3339)."""

    @classmethod
    def of(cls, raw: Any) -> Checkpoint | None:
        """The view of ``lastCheckpoint``; None if it is missing or names neither a step
        nor an epoch."""
        if not isinstance(raw, Mapping):
            return None
        step, epoch = (raw.get(k) if isinstance(raw.get(k), int) else None
                       for k in ("step", "epoch"))  # fmt: skip
        if step is None and epoch is None:
            return None
        return cls(step, epoch, str(raw.get("path") or ""), str(raw.get("time") or ""))

    def __str__(self) -> str:
        """``step 90 (epoch 9) at 2026-11-22T10:00:30Z``."""
        where = f"step {self.step}" if self.step is not None else f"epoch {self.epoch}"
        if self.step is not None and self.epoch is not None:
            where += f" (epoch {self.epoch})"
        return f"{where} at {self.time}" if self.time else where


@dataclass(frozen=True)
class ReplicaStatus:
    """``status.replicaStatuses.<type>``: pods of one replica type."""

    active: int = 0
    """Pods that are pending or running."""
    succeeded: int = 0
    """Pods that exited 0."""
    failed: int = 0
    """Pods that failed and were not (yet) replaced."""
    restarts: int = 0
    """Restarts the operator made (pods recreated, or the whole job restarted)."""


@dataclass(frozen=True)
class JobStatus:
    """Where an MSJob stands, typed. Build it with :meth:`JobStatus.of`."""

    namespace: str
    """The job's namespace."""
    name: str
    """The job's name."""
    state: str | None
    """The type of the latest condition (the STATE column), None before the first."""
    reason: str
    """That condition's reason ("" without one)."""
    message: str
    """That condition's message."""
    conditions: tuple[Condition, ...] = ()
    """Every condition, in the status's order (the latest last)."""
    replicas: dict[str, ReplicaStatus] = field(default_factory=dict)
    """By replica type: ``Scheduler``, ``PS``, ``Worker``."""
    workers: str = ""
    """Active Workers (their pods Pending or Running, not only Running) of the desired
    ones, ``"2/4"`` (the WORKERS column)."""
    progress: dict[str, Any] | None = None
    """``status.progress`` as the training reported it (percentComplete, epoch, step,
    eta, metrics, lastReportTime ...), None without a report."""
    last_checkpoint: Checkpoint | None = None
    """The last checkpoint the training reported saving, kept across restarts."""
    start_time: str | None = None
    """When the job (last) started running its pods (RFC 3339); reset by a resume."""
    completion_time: str | None = None
    """When it Succeeded or Failed (RFC 3339)."""

    @classmethod
    def of(cls, job: Mapping[str, Any]) -> JobStatus:
        """The view of an MSJob object (a dict as the API returns it)."""
        meta = job.get("metadata") or {}
        status = job.get("status") or {}
        conditions = tuple(
            Condition(
                type=str(x.get("type") or ""),
                status=str(x.get("status") or ""),
                reason=str(x.get("reason") or ""),
                message=str(x.get("message") or ""),
                last_transition_time=str(x.get("lastTransitionTime") or ""),
            )
            for x in status.get("conditions") or []
            if isinstance(x, Mapping)
        )
        state = latest_condition_type(status)
        latest = next((x for x in conditions if x.type == state), None)
        replicas = {
            str(rtype): ReplicaStatus(
                active=int(rs.get("active") or 0),
                succeeded=int(rs.get("succeeded") or 0),
                failed=int(rs.get("failed") or 0),
                restarts=int(rs.get("restarts") or 0),
            )
            for rtype, rs in (status.get("replicaStatuses") or {}).items()
            if isinstance(rs, Mapping)
        }
        progress = status.get("progress")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta.get("name") or ""),
            state=state,
            reason=latest.reason if latest else "",
            message=latest.message if latest else "",
            conditions=conditions,
            replicas=replicas,
            workers=str(status.get("workers") or ""),
            progress=dict(progress) if isinstance(progress, Mapping) else None,
            last_checkpoint=Checkpoint.of((progress or {}).get("lastCheckpoint"))
            if isinstance(progress, Mapping)
            else None,
            start_time=status.get("startTime"),
            completion_time=status.get("completionTime"),
        )

    def condition(self, type_: str) -> Condition | None:
        """The condition of that type, if the job has one."""
        return next((x for x in self.conditions if x.type == type_), None)

    @property
    def finished(self) -> bool:
        """Succeeded or Failed: the job will not run again."""
        return any(x.true and x.type in (c.SUCCEEDED, c.FAILED) for x in self.conditions)

    @property
    def queued(self) -> Condition | None:
        """The ``Queued`` condition while it is True: where the job waits and why."""
        q = self.condition(c.QUEUED)
        return q if q is not None and q.true else None

    @property
    def resumes_from(self) -> Checkpoint | None:
        """Where the job starts again: its last checkpoint while it is not running but will
        (Restarting, Suspended or Queued, not finished); None otherwise or without one."""
        if self.last_checkpoint is None or self.finished:
            return None
        waiting = any(x.true for x in self.conditions if x.type in (c.RESTARTING, c.SUSPENDED))
        return self.last_checkpoint if waiting or self.queued is not None else None

    @property
    def last_failure(self) -> Condition | None:
        """The newest ``Restarting`` or ``Failed`` condition, True or not: what last went
        wrong (its message ends with the failed run's last output, when it left some). A
        restart for a new cluster size (``MSJobResizing``, ``MSJobResized``) is no failure."""
        failures = [x for x in self.conditions if x.type in (c.RESTARTING, c.FAILED)]
        failures = [
            x
            for x in failures
            if x.message and x.reason not in (c.REASON_RESIZING, c.REASON_RESIZED)
        ]
        return max(failures, key=lambda x: x.last_transition_time, default=None)

    @property
    def restarts(self) -> int:
        """Restarts the operator made, over every replica type."""
        return sum(r.restarts for r in self.replicas.values())
