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
Service has a ClusterIP; a scheduling system may hold the job or its pods until it lets
them go ahead. ``render`` therefore plans again and again, each time observing what the
previous plan created: the Services (with the placeholder ClusterIP), and each enabled
scheduling system's objects as that system says it would see them once it lets the job
go ahead (:meth:`msop.msjob.scheduling.Decision.granted`: Kueue's Workload admitted to a
placeholder ClusterQueue with no flavor, Volcano's PodGroup ``Inqueue``), and no pods,
until a plan creates nothing new. The last plan holds every pod.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import UTC, datetime

from msop.api import FieldError, validate_admission
from msop.api.validation import beyond_admission
from msop.kube.objects import JSON
from msop.msjob import systems
from msop.msjob.passes import Observed, Plan
from msop.msjob.plan import plan

UID_PLACEHOLDER = "<msjob-uid>"
CLUSTER_IP_PLACEHOLDER = "<scheduler-service-cluster-ip>"


@dataclass
class Rendered:
    """What the operator creates for one job, in creation order."""

    scheduling: list[JSON]
    """The scheduling systems' objects (Kueue's Workload, Volcano's PodGroup), created
    before anything else."""
    services: list[JSON]
    pods: list[JSON]
    notes: list[str]
    """Why something expected is missing (suspended, managed elsewhere), and what a
    cluster's scheduling systems would add."""

    @property
    def workload(self) -> JSON | None:
        """Kueue's Workload, if the job has one."""
        return self._of_kind("Workload")

    @property
    def pod_group(self) -> JSON | None:
        """Volcano's PodGroup, if the job has one."""
        return self._of_kind("PodGroup")

    def _of_kind(self, kind: str) -> JSON | None:
        return next((o for o in self.scheduling if o.get("kind") == kind), None)

    def objects(self) -> list[JSON]:
        return [*self.scheduling, *self.services, *self.pods]


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
    workload_api: str | None = None,
) -> Rendered:
    """Plan ``job`` (raw, as a user wrote it) and return what would be created.

    ``namespace`` overrides ``metadata.namespace`` (else the job's, else ``default``).
    ``workload_api``: as an operator gang-scheduling with Kubernetes' Workload API of that
    version.
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
    integrations = systems.enabled(
        kueue_enabled=kueue, gang_scheduling=gang_scheduling, workload_api=workload_api
    )
    seen = [integration.unseen() for integration in integrations]
    scheduling: list[JSON] = []
    notes: list[str] = []
    services: list[JSON] = []
    observed_services: list[JSON] = []

    def planned() -> Plan:
        return plan(
            Observed(job=job, pods=[], services=observed_services, now=when, scheduling=seen)
        )

    # Each round observes what the one before created; every system creates its objects
    # once, and so does the planner its Services.
    last = planned()
    for _ in range(len(seen) + 2):
        grew = False
        for i, decided in enumerate(last.scheduling):
            granted = decided.granted()
            if granted is not None:
                scheduling += granted.objects
                seen[i] = granted.seen
                notes += [granted.note] if granted.note else []
                grew = True
        if last.create_services and not observed_services:
            services = last.create_services
            for svc in services:
                observed = copy.deepcopy(svc)
                observed["spec"]["clusterIP"] = CLUSTER_IP_PLACEHOLDER
                observed_services.append(observed)
            grew = True
        if not grew:
            break
        last = planned()
    if not last.create_pods and not services:
        notes.insert(
            0,
            "nothing to create: the job is suspended, or managed by another controller "
            "(spec.runPolicy.suspend / spec.runPolicy.managedBy)",
        )
    return Rendered(scheduling=scheduling, services=services, pods=last.create_pods, notes=notes)
