"""``msop render``: the pods and Services the operator would create for an MSJob.

Offline and pure: the MSJob goes through the reconciler's own planner
(:func:`msop.msjob.plan.plan`) as a brand-new job with nothing observed, so
the output is what the operator's first reconciles create, and cannot drift from it.

Two facts only a cluster knows are shown as placeholders:

- the MSJob's ``metadata.uid`` (in every ownerReference): :data:`UID_PLACEHOLDER`,
  unless the input already has a uid;
- the Scheduler Service's ClusterIP, which every non-Scheduler replica receives as
  ``MS_SCHED_HOST``: :data:`CLUSTER_IP_PLACEHOLDER`.

The planner creates the Scheduler Service first and holds the other pods until the
Service has a ClusterIP (and, with gang scheduling, holds every pod until the PodGroup
is Inqueue). ``render`` therefore plans twice: once with nothing observed, then again
observing exactly the planned Service (with the placeholder ClusterIP) and PodGroup
(Inqueue), and no pods. The second plan holds every pod.

With Kueue (``kueue=True``, for a job labelled ``kueue.x-k8s.io/queue-name``) the first
plan creates only the Workload; it is then observed admitted to
:data:`CLUSTER_QUEUE_PLACEHOLDER` with no flavor (a cluster's ResourceFlavors would add
their node labels and tolerations to the pods), and the two plans above follow.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime

from msop.api import FieldError, validate_admission
from msop.api.validation import beyond_admission
from msop.kube.objects import JSON
from msop.msjob import gang
from msop.msjob import kueue as queue
from msop.msjob.passes import Observed, Plan
from msop.msjob.plan import plan
from msop.msjob.scheduling import Seen, decision

UID_PLACEHOLDER = "<msjob-uid>"
CLUSTER_IP_PLACEHOLDER = "<scheduler-service-cluster-ip>"
CLUSTER_QUEUE_PLACEHOLDER = "<cluster-queue>"


@dataclass
class Rendered:
    """What the operator creates for one job, in creation order."""

    pod_group: JSON | None
    services: list[JSON]
    pods: list[JSON]
    notes: list[str]
    """Why something expected is missing (suspended, managed elsewhere)."""
    workload: JSON | None = None
    """Kueue's Workload, created before anything else."""

    def objects(self) -> list[JSON]:
        head = [o for o in (self.workload, self.pod_group) if o is not None]
        return [*head, *self.services, *self.pods]


def _admitted(workload: JSON) -> JSON:
    """``workload`` as Kueue leaves it once admitted (no flavor assigned)."""
    seen = copy.deepcopy(workload)
    seen["metadata"]["resourceVersion"] = "1"
    seen["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": ""}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": CLUSTER_QUEUE_PLACEHOLDER,
            "podSetAssignments": [
                {"name": ps["name"], "flavors": {}, "count": ps["count"]}
                for ps in workload["spec"]["podSets"]
            ],
        },
    }
    return seen


class InvalidJobError(ValueError):
    """The MSJob breaks the admission rules; ``errors`` are the same as admission's."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


def render(
    job: JSON,
    *,
    namespace: str | None = None,
    gang_scheduling: bool = False,
    kueue: bool = False,
    now: datetime | None = None,
) -> Rendered:
    """Plan ``job`` (raw, as a user wrote it) and return what would be created.

    ``namespace`` overrides ``metadata.namespace`` (else the job's, else ``default``).
    Raises InvalidJobError with the admission field errors when ``job`` is invalid.
    """
    errors = validate_admission(job) + beyond_admission(job)
    if errors:
        raise InvalidJobError(errors)
    job = copy.deepcopy(job)
    meta = job.setdefault("metadata", {})
    meta["namespace"] = namespace or meta.get("namespace") or "default"
    meta.setdefault("uid", UID_PLACEHOLDER)
    job.pop("status", None)  # a new job: the plan must not depend on a stale status
    when = now or datetime.now(UTC)

    def planned(services: list[JSON], wl: JSON | None, pg: JSON | None) -> Plan:
        seen: list[Seen] = []
        if kueue:
            seen.append(queue.Seen(workload=wl))
        if gang_scheduling:
            seen.append(gang.Seen(pg))
        return plan(Observed(job=job, pods=[], services=services, now=when, scheduling=seen))

    queued = decision(planned([], None, None).scheduling, queue.Decision)
    workload = queued.create_workload if queued is not None else None
    seen_workload = _admitted(workload) if workload is not None else None
    first = planned([], seen_workload, None)
    services = first.create_services
    observed_services = []
    for svc in services:
        seen = copy.deepcopy(svc)
        seen["spec"]["clusterIP"] = CLUSTER_IP_PLACEHOLDER
        observed_services.append(seen)
    gang_decision = decision(first.scheduling, gang.Decision)
    pod_group = gang_decision.create if gang_decision is not None else None
    observed_group = None
    if pod_group is not None:
        observed_group = {**copy.deepcopy(pod_group), "status": {"phase": "Inqueue"}}
    second = planned(observed_services, seen_workload, observed_group)
    notes: list[str] = []
    if not second.create_pods and not services:
        notes.append(
            "nothing to create: the job is suspended, or managed by another controller "
            "(spec.runPolicy.suspend / spec.runPolicy.managedBy)"
        )
    if workload is not None:
        notes.append(
            "the pods are created once Kueue admits the Workload, with the node labels and "
            "tolerations of the ResourceFlavors it assigns; its priority is read from the "
            "class the job names when it is created"
        )
    return Rendered(
        pod_group=pod_group,
        services=services,
        pods=second.create_pods,
        notes=notes,
        workload=workload,
    )
