"""Gang scheduling with Kubernetes' own Workload API: no add-on.

Since Kubernetes 1.35 the scheduler places a group of pods whole or not at all when the
pods name a ``PodGroup`` (``scheduling.k8s.io``; ``v1alpha2`` in 1.36 behind the
``GenericWorkload`` and ``GangScheduling`` feature gates, ``v1beta1`` from 1.37) in their
``spec.schedulingGroup``. With ``msop run --gang-scheduler=kubernetes`` (or ``auto``, where
the API server serves it) every MSJob gets, before any of its pods:

- a ``Workload`` named like the job, owned by it, whose ``controllerRef`` names the MSJob
  and whose one PodGroup template (``gang``) says the gang's minimum: every pod of the job,
  or ``runPolicy.schedulingPolicy.minAvailable``, with the policy's ``priorityClass``;
- a ``PodGroup`` named like the job, made from that template;
- on every pod, ``spec.schedulingGroup.podGroupName``.

Both are immutable where it matters (the templates, the PodGroup's policy): a change of the
job's size deletes them, and the pods of the new size wait until they are made again. A
suspended or finished job's are deleted; the garbage collector deletes a deleted job's.
The wait is reported in the job's ``Queued`` condition, from the PodGroup's
``PodGroupScheduled`` condition:

==========================  ==========================================================
PodGroup                    ``Queued`` condition
==========================  ==========================================================
missing, or no verdict yet  True, ``GangPending``: the scheduler has not placed the gang
``PodGroupScheduled`` False True, the scheduler's reason (``Unschedulable``) and message,
                            with a Warning Event: the gang does not fit whole
``PodGroupScheduled`` True  False, ``GangScheduled``: placed (also once every pod runs)
==========================  ==========================================================

This module is the Workload API's implementation of the scheduling seam
(:mod:`.scheduling`); the API version is the one the API server serves
(:func:`served_version`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msop.api import constants as c
from msop.api.conditions import get_condition
from msop.api.naming import job_selector, owner_reference
from msop.api.types import MSJob
from msop.kube.errors import ApiError, is_already_exists, is_not_found
from msop.kube.objects import JSON
from msop.kube.resources import Resource
from msop.msjob.desired import gang_size
from msop.msjob.podstate import terminating
from msop.msjob.scheduling import (
    Admitted,
    Caches,
    Children,
    Granted,
    Integration,
    Pass,
    Placement,
    Wait,
    Writer,
)

if TYPE_CHECKING:
    from msop.controller.reconcile import Request
    from msop.kube.client import KubeClient
    from msop.kube.writer import Client

GROUP = "scheduling.k8s.io"
VERSIONS = ("v1beta1", "v1alpha2")
"""The versions msop speaks, the preferred first."""
TEMPLATE = "gang"
"""The name of the Workload's one PodGroup template."""
CONDITION_SCHEDULED = "PodGroupScheduled"

REASON_PENDING = "GangPending"
REASON_SCHEDULED = "GangScheduled"


def workloads(version: str) -> Resource:
    return Resource(GROUP, version, "workloads", "Workload")


def podgroups(version: str) -> Resource:
    return Resource(GROUP, version, "podgroups", "PodGroup")


async def served_version(client: KubeClient) -> str | None:
    """The version of the Workload API the API server serves (``v1beta1`` before
    ``v1alpha2``), with both Workloads and PodGroups; None if it serves neither. Read
    from the server's discovery, never guessed from its version."""
    try:
        group = await client.request("GET", f"/apis/{GROUP}")
    except ApiError:
        return None
    served = {str(v.get("version")) for v in (group or {}).get("versions") or []}
    for version in VERSIONS:
        if version not in served:
            continue
        try:
            listed = await client.request("GET", f"/apis/{GROUP}/{version}")
        except ApiError:
            continue
        names = {str(r.get("name")) for r in (listed or {}).get("resources") or []}
        if {"workloads", "podgroups"} <= names:
            return version
    return None


def policy(job: JSON) -> JSON:
    """The gang's scheduling policy: its minimum count."""
    return {"gang": {"minCount": gang_size(job)}}


DISRUPTION_MODE = "PodGroup"
"""A MindSpore cluster missing one member is useless: the whole gang is preempted or none
of it (by default the scheduler takes as few of a gang's pods as it can). The API server
keeps it where ``WorkloadAwarePreemption`` (alpha in 1.36) is on, and stores ``Pod``
where it is off."""


def _gang(job: JSON) -> JSON:
    """What the Workload's template and the PodGroup both say of the gang: its policy,
    its disruption mode and its priority (``schedulingPolicy.priorityClass``)."""
    gang: JSON = {"schedulingPolicy": policy(job), "disruptionMode": DISRUPTION_MODE}
    sp = MSJob(job).run_policy.scheduling_policy
    if sp is not None and sp.priority_class:
        gang["priorityClassName"] = sp.priority_class
    return gang


def workload(job: JSON, version: str) -> JSON:
    """The job's Workload: one PodGroup template, the gang (:func:`policy`)."""
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Workload",
        "metadata": _metadata(job),
        "spec": {
            "controllerRef": {"apiGroup": c.GROUP, "kind": c.KIND, "name": MSJob(job).name},
            "podGroupTemplates": [{"name": TEMPLATE, **_gang(job)}],
        },
    }


def pod_group(job: JSON, version: str) -> JSON:
    """The job's PodGroup, made from its Workload's template."""
    ref = {"workloadName": MSJob(job).name, "podGroupTemplateName": TEMPLATE}
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": _metadata(job),
        "spec": {"podGroupTemplateRef": {"workload": ref}, **_gang(job)},
    }


def _metadata(job: JSON) -> JSON:
    view = MSJob(job)
    return {
        "name": view.name,
        "namespace": view.namespace,
        "labels": job_selector(view.name),
        "ownerReferences": [owner_reference(job)],
    }


def current(obj: JSON | None, job: JSON) -> bool:
    """Whether a Workload or PodGroup of the job says the job's gang as it is now."""
    if obj is None or terminating(obj):
        return False
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Workload":
        templates = spec.get("podGroupTemplates") or [{}]
        have = templates[0].get("schedulingPolicy")
    else:
        have = spec.get("schedulingPolicy")
    return bool(have == policy(job))


def scheduled(pg: JSON | None) -> JSON | None:
    """The PodGroup's ``PodGroupScheduled`` condition, if it has one."""
    for cond in ((pg or {}).get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == CONDITION_SCHEDULED:
            return cond
    return None


def waiting(job: JSON, pg: JSON | None) -> Wait | None:
    """Why the job's gang waits, or None if the scheduler has placed it."""
    view = MSJob(job)
    ref, need = f"{view.namespace}/{view.name}", gang_size(job)
    verdict = scheduled(pg)
    if verdict is not None and verdict.get("status") == c.CONDITION_TRUE:
        return None
    if verdict is not None and verdict.get("status") == c.CONDITION_FALSE:
        return Wait(
            str(verdict.get("reason") or "Unschedulable"),
            f"MSJob {ref}: the scheduler cannot place its gang of {need} pods whole yet: "
            f"{verdict.get('message') or 'no message'} (kubectl get events -n "
            f"{view.namespace} shows why each pod does not fit).",
            "Warning",
        )
    return Wait(
        REASON_PENDING,
        f"MSJob {ref} waits for the scheduler to place its gang of {need} pods "
        f"(PodGroup {view.name}, Kubernetes' Workload API).",
    )


class WorkloadAPI:
    """The Workload API in the operator process: a job's Workload and PodGroup from the
    caches."""

    def __init__(self, version: str, workloads: Children, pod_groups: Children) -> None:
        self.version = version
        self.workloads = workloads
        self.pod_groups = pod_groups

    async def observe(self, job: JSON) -> Seen | None:
        managed_by = MSJob(job).spec.managed_by
        if managed_by and managed_by != c.MANAGED_BY_MSOP:
            return None  # msop makes no pod of it here
        name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
        return Seen(self.version, self.workloads.get(name, ns), self.pod_groups.get(name, ns))

    async def forget(self, request: Request) -> None:
        """Nothing to do: the garbage collector deletes a gone job's objects."""


@dataclass(frozen=True)
class Seen:
    """A job's Workload and PodGroup as the caches hold them (None: not there)."""

    version: str
    workload: JSON | None = None
    pod_group: JSON | None = None

    def decide(self) -> Decision:
        return Decision(self)


class Decision(Admitted):
    """The Workload API's decisions for a job in one pass: the Workload and PodGroup first
    (made again after a change of size), the pods held until the PodGroup exists, both
    deleted once the job is suspended or finished."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
        self.create: list[JSON] = []
        self.delete = False

    def release_pods(self, p: Pass) -> bool:
        wl, pg = self.seen.workload, self.seen.pod_group
        stale = [o for o in (wl, pg) if o is not None and not terminating(o)]
        if stale and not all(current(o, p.job) for o in stale):
            self.delete = True  # the job's size changed: made again once they are gone
        elif not any(o is not None and terminating(o) for o in (wl, pg)):
            if wl is None:
                self.create.append(workload(p.job, self.seen.version))
            if pg is None:
                self.create.append(pod_group(p.job, self.seen.version))
        wait = None if p.all_running() else waiting(p.job, pg)
        if wait is not None:
            p.wait(wait)
        else:
            self.running(p)
        return current(wl, p.job) and current(pg, p.job)

    def running(self, p: Pass) -> None:
        queued = get_condition(p.status, c.QUEUED)
        if queued is None or queued.get("reason") == REASON_SCHEDULED:
            return
        p.placed(REASON_SCHEDULED, f"MSJob {p.ref}: the scheduler placed its gang.")

    def placement(self, p: Pass, replica_type: str) -> Placement:
        return Placement(scheduling_group=MSJob(p.job).name)

    def suspend(self, p: Pass) -> None:
        self.delete = self.seen.workload is not None or self.seen.pod_group is not None

    def finish(self, p: Pass) -> None:
        self.suspend(p)

    def granted(self) -> Granted | None:
        """Offline: the Workload and PodGroup this pass creates, seen scheduled."""
        if len(self.create) < 2:
            return None
        wl, pg = (copy.deepcopy(o) for o in self.create)
        pg["status"] = {"conditions": [{"type": CONDITION_SCHEDULED, "status": "True"}]}
        return Granted(list(self.create), Seen(self.seen.version, wl, pg))

    async def apply(self, w: Writer) -> bool:
        version = self.seen.version
        for obj in self.create:
            resource = workloads(version) if obj["kind"] == "Workload" else podgroups(version)
            try:
                await w.client.create(resource, obj, w.namespace)
            except ApiError as e:
                if not is_already_exists(e):
                    raise
        if self.delete:
            for resource in (podgroups(version), workloads(version)):
                try:
                    await w.client.delete(resource, w.name, w.namespace)
                except ApiError as e:
                    if not is_not_found(e):
                        raise
        return True


def integration(version: str) -> Integration:
    """The Workload API of ``version`` among the scheduling systems (:mod:`.systems`)."""

    def start(client: Client, caches: Caches) -> WorkloadAPI:
        return WorkloadAPI(
            version, caches.children(workloads(version)), caches.children(podgroups(version))
        )

    return Integration("kubernetes", start, lambda: Seen(version))
