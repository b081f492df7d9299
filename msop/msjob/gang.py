"""Gang scheduling with Volcano: what an MSJob's PodGroup says, in the job's words.

Pure functions over a PodGroup as the informer cache holds it. The planner creates the
PodGroup (:func:`msop.msjob.desired.pod_group`) before any pod, holds the pods while
Volcano has not admitted it, and reports the wait in the job's ``Queued`` condition:

========================  ============================================================
PodGroup                  ``Queued`` condition
========================  ============================================================
missing, phase unset or   True, ``PodGroupPending``: Volcano's enqueue action has not
``Pending``               admitted the gang to its queue (the queue's capability, or
                          the cluster's free resources, are short of ``minResources``)
``Inqueue``               True, ``PodGroupInqueue``: admitted; the pods exist and wait
                          to be placed together; or Volcano's own reason (e.g.
                          ``NotEnoughResources``) while its latest condition says
                          ``Unschedulable``
``Running``, ``Unknown``  False, ``GangScheduled``: at least ``minMember`` pods placed
or ``Completed``
========================  ============================================================

Volcano moves a PodGroup back to ``Pending`` when fewer than ``minMember`` of its pods
are placed (a whole-job restart deletes them all): the job waits in the queue again and
its pods are placed as a gang again.
"""

from __future__ import annotations

from dataclasses import dataclass

from msop.api.types import MSJob
from msop.kube.objects import JSON
from msop.msjob import desired

PENDING = "Pending"
INQUEUE = "Inqueue"

#: The phases in which Volcano has not admitted the gang: its pods are not created.
UNADMITTED_PHASES = ("", PENDING)

REASON_PENDING = "PodGroupPending"
REASON_INQUEUE = "PodGroupInqueue"
REASON_SCHEDULED = "GangScheduled"


@dataclass(frozen=True)
class Wait:
    """Why a job's gang is not placed yet: the ``Queued`` condition's reason and message,
    and the type of the event that announces it."""

    reason: str
    message: str
    event_type: str = "Normal"


def phase(pod_group: JSON | None) -> str:
    """The PodGroup's ``status.phase``; "" when there is none (not seen by Volcano yet)."""
    if pod_group is None:
        return ""
    value = (pod_group.get("status") or {}).get("phase")
    return value if isinstance(value, str) else ""


def admitted(pod_group: JSON | None) -> bool:
    """Whether Volcano has admitted the gang (its pods may be created)."""
    return pod_group is not None and phase(pod_group) not in UNADMITTED_PHASES


def placed(pod_group: JSON | None) -> bool:
    """Whether at least ``minMember`` pods are placed (the wait is over)."""
    return admitted(pod_group) and phase(pod_group) != INQUEUE


def _describe(job: JSON) -> str:
    spec = desired.pod_group_spec(job)
    resources = ", ".join(f"{k}={v}" for k, v in (spec.get("minResources") or {}).items())
    need = f"{spec['minMember']} pods" + (f" ({resources})" if resources else "")
    return f"gang of {need} in queue {spec.get('queue') or 'default'!r}"


def _unschedulable(pod_group: JSON) -> JSON | None:
    """Volcano's latest condition if it is ``Unschedulable`` and True (the scheduler's
    verdict of its last session), else None."""
    conditions = [
        x for x in (pod_group.get("status") or {}).get("conditions") or [] if isinstance(x, dict)
    ]
    if not conditions:
        return None
    latest = max(conditions, key=lambda x: str(x.get("lastTransitionTime") or ""))
    if latest.get("type") == "Unschedulable" and latest.get("status") == "True":
        return latest
    return None


def waiting(job: JSON, pod_group: JSON | None) -> Wait | None:
    """Why the job's gang waits, or None if Volcano has placed it."""
    view = MSJob(job)
    ref = f"{view.namespace}/{view.name}"
    what = _describe(job)
    if not admitted(pod_group):
        return Wait(
            REASON_PENDING,
            f"MSJob {ref} waits for Volcano to admit its {what}: the queue's capability or "
            "the cluster's free resources are short of it "
            f"(kubectl describe podgroup {view.name} -n {view.namespace} shows the "
            "scheduler's events).",
        )
    assert pod_group is not None
    if placed(pod_group):
        return None
    verdict = _unschedulable(pod_group)
    if verdict is not None:
        return Wait(
            str(verdict.get("reason") or "Unschedulable"),
            f"MSJob {ref}: Volcano admitted its {what} but cannot place it whole yet: "
            f"{verdict.get('message') or 'no message'}",
            "Warning",
        )
    return Wait(
        REASON_INQUEUE,
        f"MSJob {ref}: Volcano admitted its {what}; its pods wait to be placed together.",
    )
