"""Gang scheduling with Volcano: what an MSJob's PodGroup says, in the job's words.

With ``--enable-gang-scheduling`` every MSJob gets a PodGroup named like the job
(:func:`pod_group`), created before any of its pods; the pods carry Volcano's scheduler
name and the PodGroup's annotations, and are held while Volcano has not admitted the gang.
The PodGroup's spec follows the job (a scale, an edited scheduling policy) and it is
deleted when the job is suspended or finished. The wait is reported in the job's
``Queued`` condition:

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

This module is Volcano's implementation of the scheduling seam (:mod:`.scheduling`):
:class:`Volcano` reads a job's PodGroup from the cache, :class:`Seen` decides (pure) and
:class:`Decision` writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msop.api import constants as c
from msop.api import quantity
from msop.api.conditions import get_condition
from msop.api.naming import job_selector, owner_reference
from msop.api.types import MSJob
from msop.kube.errors import ApiError, is_already_exists, is_not_found
from msop.kube.objects import JSON
from msop.kube.resources import PODGROUPS
from msop.msjob import desired
from msop.msjob.podstate import terminating
from msop.msjob.scheduling import (
    Admitted,
    Caches,
    Granted,
    Integration,
    Pass,
    Placement,
    Wait,
    Writer,
)

if TYPE_CHECKING:
    from fractions import Fraction  # imported where used: see msop.api.quantity

    from msop.controller.reconcile import Request
    from msop.kube.writer import Client

#: The scheduler that places the pods, and the annotations that tie them to the PodGroup.
SCHEDULER_NAME = "volcano"
ANNOTATION_POD_GROUP = "scheduling.k8s.io/group-name"
ANNOTATION_VOLCANO_TASK = "volcano.sh/task-spec"

PENDING = "Pending"
INQUEUE = "Inqueue"

#: The phases in which Volcano has not admitted the gang: its pods are not created.
UNADMITTED_PHASES = ("", PENDING)

REASON_PENDING = "PodGroupPending"
REASON_INQUEUE = "PodGroupInqueue"
REASON_SCHEDULED = "GangScheduled"


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
    spec = pod_group_spec(job)
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


def min_member(job: JSON) -> int:
    """How many pods Volcano must place together (:func:`~.desired.gang_size`)."""
    return desired.gang_size(job)


def min_resources(job: JSON) -> dict[str, str]:
    """``schedulingPolicy.minResources`` as written, or else the requests of the first
    ``minMember`` pods (Scheduler first, then PS, then Workers) summed: what Volcano's
    enqueue action checks against the queue and the cluster before it admits the gang."""
    from fractions import Fraction

    sp = MSJob(job).run_policy.scheduling_policy
    if sp is not None and sp.min_resources:
        return {k: str(v) for k, v in sp.min_resources.items()}
    specs = MSJob(job).replica_specs
    per_type = {
        rt: desired.pod_requests(dict(specs[rt].template.get("spec") or {})) for rt in specs
    }
    total: dict[str, Fraction] = {}
    binary: set[str] = set()
    for rtype, _ in desired.replica_slots(job)[: max(0, min_member(job))]:
        for name, (value, is_binary) in per_type[rtype].items():
            total[name] = total.get(name, Fraction(0)) + value
            if is_binary:
                binary.add(name)
    return {
        name: quantity.format_quantity(value, binary=name in binary)
        for name, value in sorted(total.items())
    }


def pod_group_spec(job: JSON) -> JSON:
    """The PodGroup's spec: ``minMember`` (:func:`min_member`), ``minResources``
    (:func:`min_resources`), and ``queue`` and ``priorityClassName`` from the
    scheduling policy."""
    sp = MSJob(job).run_policy.scheduling_policy
    spec: JSON = {"minMember": min_member(job)}
    resources = min_resources(job)
    if resources:
        spec["minResources"] = resources
    if sp is not None and sp.queue:
        spec["queue"] = sp.queue
    if sp is not None and sp.priority_class:
        spec["priorityClassName"] = sp.priority_class
    return spec


def pod_group_patch(job: JSON, pod_group: JSON) -> JSON | None:
    """A merge patch that brings an existing PodGroup's spec to :func:`pod_group_spec`
    (after a scale or an edit of the scheduling policy), or None if it already is.
    Quantities compare by value ("1024Mi" is "1Gi"); a field the job no longer sets is
    removed."""
    want = pod_group_spec(job)
    have = pod_group.get("spec") or {}
    patch: JSON = {}
    if have.get("minMember") != want["minMember"]:
        patch["minMember"] = want["minMember"]
    if not _same_quantities(have.get("minResources") or {}, want.get("minResources") or {}):
        patch["minResources"] = {
            **{k: None for k in have.get("minResources") or {}},
            **(want.get("minResources") or {}),
        }
    for key in ("queue", "priorityClassName"):
        if (have.get(key) or None) != want.get(key) and not (key == "queue" and key not in want):
            patch[key] = want.get(key)
    return {"spec": patch} if patch else None


def _same_quantities(a: JSON, b: JSON) -> bool:
    if a.keys() != b.keys():
        return False
    try:
        return all(quantity.parse(a[k]) == quantity.parse(b[k]) for k in a)
    except ValueError:
        return False


def pod_group(job: JSON) -> JSON:
    """The Volcano PodGroup named like the job, owned by it (:func:`pod_group_spec`)."""
    view = MSJob(job)
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": view.name,
            "namespace": view.namespace,
            "labels": job_selector(view.name),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": pod_group_spec(job),
    }


def placement(job: JSON, replica_type: str) -> Placement:
    """What a replica's pods carry: Volcano as their scheduler, their PodGroup and task."""
    return Placement(
        scheduler_name=SCHEDULER_NAME,
        annotations={
            ANNOTATION_POD_GROUP: MSJob(job).name,
            ANNOTATION_VOLCANO_TASK: c.replica_type_label(replica_type),
        },
    )


class Volcano:
    """Volcano in the operator process: a job's PodGroup from the cache."""

    def __init__(self, pod_group: Callable[[str, str], JSON | None]) -> None:
        self.pod_group = pod_group
        """The PodGroup named ``name`` in ``namespace`` (the informer cache's)."""

    @classmethod
    def start(cls, client: Client, caches: Caches) -> Volcano:
        """Volcano in the operator, with its cache: the PodGroups msop made (their events
        enqueue the job)."""
        return cls(caches.children(PODGROUPS).get)

    async def observe(self, job: JSON) -> Seen | None:
        managed_by = MSJob(job).spec.managed_by
        if managed_by and managed_by != c.MANAGED_BY_MSOP:
            # msop makes no pod of it here (another controller does, or another cluster
            # runs it): nothing to gang-schedule.
            return None
        meta = job["metadata"]
        return Seen(self.pod_group(meta["name"], meta["namespace"]))

    async def forget(self, request: Request) -> None:
        """Nothing to do: the garbage collector deletes a gone job's PodGroup."""


@dataclass(frozen=True)
class Seen:
    """A job's PodGroup as the cache holds it (None: not there yet)."""

    pod_group: JSON | None = None

    def decide(self) -> Decision:
        return Decision(self.pod_group)


class Decision(Admitted):
    """Volcano's decisions for a job in one pass: the PodGroup first, the pods held until
    Volcano admits the gang, the PodGroup deleted once the job is suspended or finished."""

    def __init__(self, pod_group: JSON | None) -> None:
        self.pod_group = pod_group
        self.create: JSON | None = None
        """The PodGroup to create."""
        self.patch: JSON | None = None
        """A merge patch for its spec (after a scale or a scheduling-policy edit)."""
        self.delete = False

    def release_pods(self, p: Pass) -> bool:
        """Create the PodGroup first, keep its spec in step with the job, and hold the
        pods until Volcano has admitted the gang; ``Queued`` says where it waits."""
        pg = self.pod_group
        if pg is None:
            self.create = pod_group(p.job)
        elif not terminating(pg):
            self.patch = pod_group_patch(p.job, pg)
        # Every pod running ends the wait even if the PodGroup's status lags behind.
        wait = None if p.all_running() else waiting(p.job, pg)
        if wait is not None:
            p.wait(wait)
        else:
            self.running(p)
        return pg is not None and not terminating(pg) and admitted(pg)

    def running(self, p: Pass) -> None:
        """``Queued`` turns False (out of the State column) once the gang is placed: the
        PodGroup says so, or every pod already runs (its status may lag behind)."""
        queued = get_condition(p.status, c.QUEUED)
        if queued is None or queued.get("reason") == REASON_SCHEDULED:
            return
        p.placed(REASON_SCHEDULED, f"MSJob {p.ref}: Volcano placed its gang.")

    def placement(self, p: Pass, replica_type: str) -> Placement:
        return placement(p.job, replica_type)

    def suspend(self, p: Pass) -> None:
        self.delete = self.pod_group is not None

    def finish(self, p: Pass) -> None:
        self.delete = self.pod_group is not None

    def granted(self) -> Granted | None:
        """Offline: the PodGroup this pass creates, seen ``Inqueue`` (admitted)."""
        if self.create is None:
            return None
        return Granted(
            [self.create], Seen({**copy.deepcopy(self.create), "status": {"phase": INQUEUE}})
        )

    async def apply(self, w: Writer) -> bool:
        if self.create is not None:
            try:
                await w.client.create(PODGROUPS, self.create, w.namespace)
            except ApiError as e:
                if not is_already_exists(e):
                    raise
        if self.patch is not None:
            try:
                await w.client.patch(PODGROUPS, w.name, self.patch, w.namespace)
            except ApiError as e:
                if not is_not_found(e):
                    raise
        if self.delete:
            try:
                await w.client.delete(PODGROUPS, w.name, w.namespace)
            except ApiError as e:
                if not is_not_found(e):
                    raise
        return True


#: Volcano among the scheduling systems (:mod:`.systems`).
INTEGRATION = Integration("volcano", Volcano.start, Seen)
