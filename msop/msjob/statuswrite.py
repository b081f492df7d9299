"""What to write once a pass's creates went out: the status-write decision.

The planner (``plan.py``) says what the status should be before anything is created; this
module decides what is written after: a create the API server refused (422: the job
fails with the API's reason; anything else: ``ReplicaFailure``), and whether a change of
pod counts alone waits ``COUNT_WRITE_DELAY`` so that a burst of pod events costs one
write. Pure, like the planner: the reconciler applies what :func:`status_write` returns.
"""

from __future__ import annotations

from dataclasses import dataclass

from msop.api import constants as c
from msop.api.conditions import get_condition, set_condition
from msop.kube.errors import ApiError, is_invalid
from msop.kube.objects import JSON, format_time
from msop.msjob.passes import Observed, Plan

#: Longest condition message taken from an API error.
API_MESSAGE_LIMIT = 1024
#: Seconds a status change that only moves pod counts may wait to be coalesced.
COUNT_WRITE_DELAY = 1.0


@dataclass
class StatusWrite:
    """The status to write after the creates and deletes of a Plan went out."""

    status: JSON | None
    """The new status, or None: nothing to write (or held, see ``held``)."""
    transitions: list[str]
    """Condition types to count when the write succeeds (see :attr:`Plan.transitions`)."""
    requeue_after: float | None
    """The Plan's requeue, shortened to the end of a hold."""
    held: bool = False
    """A change of pod counts alone was held back to coalesce a burst of pod events: the
    caller remembers since when (``Observed.counts_unwritten_since``) until it writes."""


def status_write(observed: Observed, plan: Plan, refused: ApiError | None) -> StatusWrite:
    """What to write once ``plan``'s creates went out, ``refused`` the first create the
    API server refused in this pass (creates stop there), if any.

    ``observed.job`` is the job as stored now: if the Plan's status was already written
    first (``status_first``), the job that write returned, and ``plan.status`` None.

    - A 422 Invalid refusal fails the job with the API's reason and message: the same
      spec would make the same object, so a retry is refused the same way.
    - Any other refusal sets ``ReplicaFailure`` (the API's reason and message); a pass
      whose creates all went out removes it.
    - A change of pod counts alone (``replicaStatuses``, ``workers``) waits until
      ``COUNT_WRITE_DELAY`` after the first such change left unwritten, so a burst of pod
      events costs one write. Condition changes are never held.
    """
    stored: JSON = observed.job.get("status") or {}
    now_s = format_time(observed.now)
    transitions = list(plan.transitions)
    if refused is not None and is_invalid(refused):
        status = _failed_by_api(stored, plan.status, refused, now_s)
        transitions.append(c.FAILED)
    else:
        status = _replica_failure(stored, plan.status, refused, now_s)
    if status is None or not _only_counts_changed(stored, status):
        return StatusWrite(status, transitions, plan.requeue_after)
    since = observed.counts_unwritten_since or observed.now
    waited = (observed.now - since).total_seconds()
    if not 0 <= waited < COUNT_WRITE_DELAY:
        return StatusWrite(status, transitions, plan.requeue_after)
    wait = COUNT_WRITE_DELAY - waited
    requeue = wait if plan.requeue_after is None else min(plan.requeue_after, wait)
    return StatusWrite(None, transitions, requeue, held=True)


def _without_replica_failure(status: JSON) -> JSON:
    conditions = status.get("conditions") or []
    return {**status, "conditions": [
        dict(x) for x in conditions if x.get("type") != c.REPLICA_FAILURE
    ]}  # fmt: skip


def _failed_by_api(
    stored: JSON, planned: JSON | None, refused: ApiError, now_s: str
) -> JSON | None:
    base = _without_replica_failure(planned if planned is not None else stored)
    reason = refused.reason or "Invalid"
    message = refused.message[:API_MESSAGE_LIMIT]
    if not set_condition(base, c.FAILED, c.CONDITION_TRUE, reason, message, now_s):
        return planned
    base.setdefault("completionTime", now_s)
    return base


def _replica_failure(
    stored: JSON, planned: JSON | None, refused: ApiError | None, now_s: str
) -> JSON | None:
    base = planned if planned is not None else stored
    if refused is None:
        if get_condition(base, c.REPLICA_FAILURE) is None:
            return planned
        return _without_replica_failure(base)
    base = {**base, "conditions": [dict(x) for x in base.get("conditions") or []]}
    changed = set_condition(
        base, c.REPLICA_FAILURE, c.CONDITION_TRUE, refused.reason or "FailedCreate",
        refused.message[:API_MESSAGE_LIMIT], now_s,
    )  # fmt: skip
    return base if changed else planned


def _only_counts_changed(stored: JSON, status: JSON) -> bool:
    ignore = ("replicaStatuses", "workers", "lastReconcileTime")
    return {k: v for k, v in status.items() if k not in ignore} == {
        k: v for k, v in stored.items() if k not in ignore
    }
