"""Kueue: an MSJob as a Kueue Workload, queued, admitted, evicted and finished.

Kueue manages job kinds it does not know (``integrations.externalFrameworks`` in its
configuration, ``MSJob.v1.mindspore.gitee.com``) through their own controller, which does
for them what Kueue's ``jobframework`` does for its built-in kinds. With
``--enable-kueue`` msop does it for every MSJob labelled ``kueue.x-k8s.io/queue-name``;
jobs without the label are untouched. Pure functions over the MSJob and its Workload as
the informer caches hold them; the planner decides with them and the reconciler writes.

One difference from Kueue's built-in integrations, on purpose: msop never rewrites the
user's MSJob. Kueue's jobframework suspends a job through its spec, injects the admitted
flavors' node labels and tolerations into the job's pod templates and restores them on
eviction. msop holds the job's pods until the Workload is admitted and gives each pod its
flavor's placement when it creates it, so ``runPolicy.suspend`` stays the user's switch
(a suspended job's Workload is made inactive, which releases its quota) and a GitOps tool
never sees msop's writes as drift in the spec.

The Workload (named as Kueue names its own, ``msjob-<name>-<hash>``) has one pod set per
replica type (``scheduler``, ``worker``; the count is the replica count, the template the
replica's), the queue name from the label, the priority of the
``kueue.x-k8s.io/priority-class`` WorkloadPriorityClass or else of the first
``priorityClassName`` in the templates, Kueue's finalizer and the MSJob as controller.

======================================  ==============================================
Workload                                what msop does (``Queued`` condition)
======================================  ==============================================
missing                                 creates it; no pod (True, ``WorkloadPending``)
missing, its priority class missing     no pod, no Workload (True,
                                        ``PriorityClassNotFound``)
missing, a template's topology          no pod, no Workload (True,
annotations invalid                     ``InvalidTopologyRequest``, :mod:`.topology`)
quota not reserved, or checks pending   no pod (True, ``WorkloadPending``, Kueue's
                                        message: which quota is short)
inactive (not by the user's suspend)    no pod (True, ``WorkloadInactive``)
``Admitted``                            creates the pods with the flavors' node labels
                                        and tolerations (False, ``WorkloadAdmitted``);
                                        ``PodsReady`` True once every pod runs, False
                                        while one is missing (Kueue's waitForPodsReady)
``Evicted`` (preempted, deactivated,    deletes the pods; once they are gone, clears
queue stopped, ...)                     the admission so that Kueue queues it again
                                        (True, ``WorkloadEvicted``); not a failure:
                                        nothing counts toward ``backoffLimit``
``Evicted``, then requeued by Kueue     no pod (True, ``WorkloadPending``: it waits
for another cause (``Reactivated``)     for quota, :func:`eviction_explains_wait`)
job finished                            marks it ``Finished`` (its quota is released)
                                        and removes Kueue's finalizer
spec out of date (replicas or           not admitted: updated in place; admitted: the
resources changed)                      pods are deleted and a new Workload queued
======================================  ==============================================

**MultiKueue.** A job whose ``spec.managedBy`` is ``kueue.x-k8s.io/multikueue`` is
*dispatched*: on this (the manager) cluster msop queues its Workload as above, but never
creates its pods or Services; Kueue's MultiKueue admission check picks a worker cluster
with free quota, creates a copy of the job there (without ``managedBy``, labelled with
the name of the Workload it pre-built there) and copies the worker's status back. msop
writes the status only while the job is not on a worker (its Workload has no
``status.clusterName``): ``Created``, ``Queued``, ``Suspended``. On the worker, the copy's
label names its *pre-built* Workload: msop adopts it (makes the job its controller, as
Kueue's jobframework does) instead of creating one, and runs the job as usual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from msop.api import constants as c
from msop.api.conditions import get_condition, is_finished
from msop.api.conditions import is_true as is_true_condition
from msop.api.naming import job_selector, owner_reference
from msop.api.types import MSJob
from msop.kube.errors import ApiError, is_already_exists, is_conflict, is_not_found
from msop.kube.objects import JSON, parse_time
from msop.kube.resources import PRIORITYCLASSES, WORKLOADPRIORITYCLASSES, WORKLOADS
from msop.msjob import topology
from msop.msjob.scheduling import Admitted, Pass, Placement, Wait, Writer

if TYPE_CHECKING:
    from msop.controller.reconcile import Request
    from msop.kube.writer import Client

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
PODSET_LABEL = "kueue.x-k8s.io/podset"
FINALIZER = "kueue.x-k8s.io/resource-in-use"
#: The label MultiKueue puts on a job's copy on a worker cluster: the name of the Workload
#: it created there for it (the job adopts it rather than creating its own).
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
#: The label MultiKueue puts on what it creates on a worker cluster: which manager.
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
API_VERSION = "kueue.x-k8s.io/v1beta2"

REASON_PENDING = "WorkloadPending"
REASON_INACTIVE = "WorkloadInactive"
REASON_EVICTED = "WorkloadEvicted"
REASON_ADMITTED = "WorkloadAdmitted"
REASON_DISPATCHED = "WorkloadDispatched"
REASON_PREBUILT_MISSING = "PrebuiltWorkloadMissing"
REASON_PREBUILT_MISMATCH = "PrebuiltWorkloadMismatch"
#: The ``Queued`` reasons msop writes on a manager cluster while a dispatched job waits.
_MANAGER_WAITS = (REASON_PENDING, REASON_INACTIVE, REASON_EVICTED)

#: Kueue's ``Evicted`` reason for a Workload made inactive (``spec.active: false``).
EVICTED_DEACTIVATED = "Deactivated"

#: Kueue's Workload name: ``<kind>-<job name>`` cut to fit, a dash, 5 hex of a hash.
_NAME_LIMIT = 253
_HASH_LENGTH = 5


def queue_name(job: JSON) -> str:
    """The job's ``kueue.x-k8s.io/queue-name`` label; "" if it has none."""
    value = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    return value if isinstance(value, str) else ""


def dispatched(job: JSON) -> bool:
    """Whether MultiKueue runs the job on a worker cluster (``spec.managedBy``)."""
    return MSJob(job).spec.managed_by == c.MANAGED_BY_MULTIKUEUE


def prebuilt_name(job: JSON) -> str:
    """The Workload MultiKueue pre-built for this copy of a job on a worker cluster; ""
    for a job submitted here."""
    value = (job["metadata"].get("labels") or {}).get(PREBUILT_LABEL)
    return value if isinstance(value, str) else ""


def worker_cluster(wl: JSON | None) -> str:
    """The worker cluster MultiKueue placed the Workload's job on (its
    ``status.clusterName``, cleared when the Workload is evicted); "" while none."""
    return str(((wl or {}).get("status") or {}).get("clusterName") or "")


def controller_uid(obj: JSON) -> str | None:
    """The uid of the object's controller (ownerReference with ``controller: true``)."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid") or "")
    return None


def adoption_patch(wl: JSON, job: JSON) -> JSON:
    """The merge patch that makes ``job`` the controller of a pre-built Workload (and
    labels it with the job's uid), as Kueue's jobframework does for its own kinds; carries
    the resourceVersion."""
    refs = [r for r in wl["metadata"].get("ownerReferences") or [] if not r.get("controller")]
    return {
        "metadata": {
            "resourceVersion": wl["metadata"]["resourceVersion"],
            "ownerReferences": [*refs, owner_reference(job)],
            "labels": {JOB_UID_LABEL: job["metadata"]["uid"]},
        }
    }


def workload_name(job_name: str, uid: str) -> str:
    """The name Kueue itself would give the Workload of this MSJob."""
    digest = hashlib.sha1(
        "\n".join([c.KIND, c.GROUP, job_name, uid]).encode(), usedforsecurity=False
    ).hexdigest()
    prefix = f"{c.KIND.lower()}-{job_name}"[: _NAME_LIMIT - 1 - _HASH_LENGTH]
    return f"{prefix}-{digest[:_HASH_LENGTH]}"


def pod_set_name(replica_type: str) -> str:
    return replica_type.lower()


def pod_sets(job: JSON) -> list[JSON]:
    """One pod set per replica type with replicas, in the job's order (Scheduler first),
    with the topology request of its template's annotations, if any (:mod:`.topology`)."""
    view = MSJob(job)
    out = []
    for rtype in c.REPLICA_TYPES:
        spec = view.replica_specs.get(rtype)
        if spec is None or spec.replicas < 1:
            continue
        template = spec.template
        ps: JSON = {
            "name": pod_set_name(rtype),
            "count": spec.replicas,
            "template": {
                "metadata": dict(template.get("metadata") or {}),
                "spec": dict(template.get("spec") or {}),
            },
        }
        request = topology.request(template)
        if request is not None:
            ps["topologyRequest"] = request
        out.append(ps)
    return out


def priority_source(job: JSON) -> tuple[str, str] | None:
    """Where the Workload's priority comes from: ``("WorkloadPriorityClass", name)`` for
    the job's ``kueue.x-k8s.io/priority-class`` label, else ``("PriorityClass", name)``
    for the first template's ``priorityClassName``; None: no priority (0)."""
    label = (job["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
    if isinstance(label, str) and label:
        return ("WorkloadPriorityClass", label)
    for ps in pod_sets(job):
        name = ps["template"]["spec"].get("priorityClassName")
        if isinstance(name, str) and name:
            return ("PriorityClass", name)
    return None


def priority_ref(kind: str, name: str, value: int) -> JSON:
    """The Workload's ``priorityClassRef`` and ``priority`` for a resolved class."""
    group = "kueue.x-k8s.io" if kind == "WorkloadPriorityClass" else "scheduling.k8s.io"
    return {"priorityClassRef": {"group": group, "kind": kind, "name": name}, "priority": value}


@dataclass(frozen=True)
class MissingClass:
    """The priority class a job names (:func:`priority_source`) does not exist: its
    Workload is not created until it does."""

    kind: str
    name: str


def workload(job: JSON, *, active: bool, priority: JSON | None = None) -> JSON:
    """The Workload for ``job``; ``priority``: the fields of :func:`priority_ref` for
    the class :func:`priority_source` names, resolved by the caller (None: no class)."""
    meta = job["metadata"]
    view = MSJob(job)
    labels = dict(job_selector(view.name))
    labels[JOB_UID_LABEL] = meta["uid"]
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(view.name, meta["uid"]),
            "namespace": view.namespace,
            "labels": labels,
            "finalizers": [FINALIZER],
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "queueName": queue_name(job),
            "podSets": pod_sets(job),
            "active": active,
            **(priority or {}),
        },
    }


def _resources(ps: JSON) -> list[Any]:
    spec = (ps.get("template") or {}).get("spec") or {}
    return [
        (x.get("name"), x.get("resources") or {})
        for key in ("initContainers", "containers")
        for x in spec.get(key) or []
    ]


def pod_sets_match(job: JSON, wl: JSON) -> bool:
    """Whether the Workload still describes the job: the same pod sets, counts and
    container resources (what Kueue's quota is computed from)."""
    want = [(p["name"], p["count"], _resources(p)) for p in pod_sets(job)]
    have = [
        (p.get("name"), p.get("count"), _resources(p))
        for p in (wl.get("spec") or {}).get("podSets") or []
    ]
    return want == have


def _conditions(wl: JSON | None) -> list[JSON]:
    if wl is None:
        return []
    return [x for x in (wl.get("status") or {}).get("conditions") or [] if isinstance(x, dict)]


def condition(wl: JSON | None, type_: str) -> JSON | None:
    return next((x for x in _conditions(wl) if x.get("type") == type_), None)


def is_true(wl: JSON | None, type_: str) -> bool:
    return (condition(wl, type_) or {}).get("status") == "True"


def admitted(wl: JSON | None) -> bool:
    """Admitted by Kueue and not evicted since: the job's pods may run."""
    return is_true(wl, "Admitted") and not is_true(wl, "Evicted") and not is_true(wl, "Finished")


def has_quota(wl: JSON | None) -> bool:
    return is_true(wl, "QuotaReserved") or bool((wl or {}).get("status", {}).get("admission"))


def active(wl: JSON | None) -> bool:
    return (wl or {}).get("spec", {}).get("active") is not False


def terminating(wl: JSON | None) -> bool:
    return bool((wl or {}).get("metadata", {}).get("deletionTimestamp"))


def has_finalizer(wl: JSON) -> bool:
    return FINALIZER in (wl["metadata"].get("finalizers") or [])


def cluster_queue(wl: JSON | None) -> str:
    admission = ((wl or {}).get("status") or {}).get("admission") or {}
    return str(admission.get("clusterQueue") or "")


def eviction_explains_wait(wl: JSON) -> bool:
    """Whether the Workload's ``Evicted`` condition still says why the job waits.

    Kueue leaves ``Evicted`` True until the Workload is admitted again, also after it
    requeued it for another cause (``Requeued`` True, ``Reactivated`` after a resume,
    ``BackoffFinished`` after a PodsReady timeout's backoff), and a deactivation ends when
    the Workload is made active again: from then on the job waits
    for quota like any other, and ``QuotaReserved`` says why. msop's own hand-back after a
    preemption writes ``Requeued`` with the eviction's reason: that wait is the eviction's.
    A requeue older than the eviction (an earlier cycle's) explains nothing."""
    ev = condition(wl, "Evicted")
    if ev is None or ev.get("status") != "True":
        return False
    if ev.get("reason") == EVICTED_DEACTIVATED and active(wl):
        return False  # made active again: the deactivation is over
    rq = condition(wl, "Requeued")
    if rq is None or rq.get("status") != "True" or rq.get("reason") == ev.get("reason"):
        return True
    requeued, evicted = (
        parse_time(rq.get("lastTransitionTime")),
        parse_time(ev.get("lastTransitionTime")),
    )
    return requeued is not None and evicted is not None and requeued < evicted


def why_waiting(job: JSON, wl: JSON | None, *, reactivating: bool = False) -> Wait:
    """Why the job waits in Kueue (its Workload is missing or not admitted);
    ``reactivating``: this pass makes the Workload active again (the job was resumed)."""
    if wl is not None and reactivating:
        wl = {**wl, "spec": {**(wl.get("spec") or {}), "active": True}}
    view = MSJob(job)
    ref = f"{view.namespace}/{view.name}"
    queue = queue_name(job)
    if wl is not None and eviction_explains_wait(wl):
        ev = condition(wl, "Evicted") or {}
        return Wait(
            REASON_EVICTED,
            f"MSJob {ref}: Kueue evicted its Workload ({ev.get('reason') or 'Evicted'}: "
            f"{ev.get('message') or 'no message'}); its pods are deleted and it waits in "
            f"LocalQueue {queue!r} to be admitted again.",
        )
    if wl is not None and not active(wl):
        return Wait(
            REASON_INACTIVE,
            f"MSJob {ref}: its Workload {wl['metadata']['name']} is inactive "
            "(spec.active is false); it is not queued until it is made active again.",
        )
    detail = "msop is creating its Workload"
    if wl is not None:
        detail = "Kueue has not looked at its Workload yet"
        qr = condition(wl, "QuotaReserved")
        if has_quota(wl):
            checks = "; ".join(
                f"{x.get('name')}: {x.get('message')}"
                for x in (wl.get("status") or {}).get("admissionChecks") or []
                if x.get("state") != "Ready" and x.get("message")
            )
            detail = (
                f"quota is reserved in ClusterQueue {cluster_queue(wl)!r}; "
                "admission checks are pending" + (f" ({checks})" if checks else "")
            )
        elif qr is not None and qr.get("message"):
            detail = str(qr["message"])
    return Wait(REASON_PENDING, f"MSJob {ref} waits in LocalQueue {queue!r}: {detail}.")


#: The ``Queued`` reason while the priority class a job names does not exist.
REASON_PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"


def waiting_for_class(job: JSON, missing: MissingClass) -> Wait:
    """Why a job has no Workload while the priority class it names is missing."""
    view = MSJob(job)
    return Wait(
        REASON_PRIORITY_CLASS_NOT_FOUND,
        event_type="Warning",
        message=(
            f"MSJob {view.namespace}/{view.name}: {missing.kind} {missing.name!r} does not "
            f"exist; its Workload is created, and queued in LocalQueue {queue_name(job)!r}, "
            "once it does."
        ),
    )


def placements(wl: JSON, flavors: dict[str, JSON | None]) -> dict[str, Placement] | None:
    """Per replica type, what its pods get from the admission: the node labels and
    tolerations of the ResourceFlavors assigned to its pod set, Kueue's topology gate
    where TAS places it (:func:`.topology.placement`), then the admission checks' pod set
    updates. None while a flavor is not in the cache yet."""
    status = wl.get("status") or {}
    out: dict[str, Placement] = {}
    for assignment in (status.get("admission") or {}).get("podSetAssignments") or []:
        name = str(assignment.get("name") or "")
        node_selector: dict[str, str] = {}
        tolerations: list[JSON] = []
        labels = {PODSET_LABEL: name}
        annotations: dict[str, str] = {}
        seen: set[str] = set()
        for flavor_name in (assignment.get("flavors") or {}).values():
            if flavor_name in seen:
                continue
            seen.add(flavor_name)
            flavor = flavors.get(flavor_name)
            if flavor is None:
                return None
            fspec = flavor.get("spec") or {}
            node_selector.update(fspec.get("nodeLabels") or {})
            tolerations.extend(fspec.get("tolerations") or [])
        for check in status.get("admissionChecks") or []:
            for update in check.get("podSetUpdates") or []:
                if update.get("name") != name:
                    continue
                node_selector.update(update.get("nodeSelector") or {})
                tolerations.extend(update.get("tolerations") or [])
                labels.update(update.get("labels") or {})
                annotations.update(update.get("annotations") or {})
        place = Placement(node_selector, tolerations, labels, annotations)
        by_topology = topology.placement(wl, assignment)
        if by_topology is not None:
            # Kueue's own first: what an admission check's update says wins.
            place = by_topology + place
        for rtype in c.REPLICA_TYPES:
            if pod_set_name(rtype) == name:
                out[rtype] = place
    return out


def flavor_names(wl: JSON) -> list[str]:
    admission = (wl.get("status") or {}).get("admission") or {}
    names = {
        str(f)
        for a in admission.get("podSetAssignments") or []
        for f in (a.get("flavors") or {}).values()
    }
    return sorted(names)


def _set(conditions: list[JSON], new: JSON) -> None:
    for i, x in enumerate(conditions):
        if x.get("type") == new["type"]:
            if x.get("status") == new["status"]:
                new = {**new, "lastTransitionTime": x.get("lastTransitionTime")}
            conditions[i] = new
            return
    conditions.append(new)


def _cond(wl: JSON, type_: str, status: str, reason: str, message: str, now: str) -> JSON:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": now,
        "observedGeneration": wl["metadata"].get("generation", 0),
    }


def requeue_patch(wl: JSON, now: str) -> JSON:
    """The status merge patch that hands an evicted Workload back to Kueue once the job's
    pods are gone, as Kueue's jobframework does: ``QuotaReserved`` False (``Pending``),
    ``Admitted`` False, ``Requeued`` (True after a preemption or a node failure) and no
    ``admission``. Carries the resourceVersion: a Workload that moved is re-read."""
    ev = condition(wl, "Evicted") or {}
    reason = str(ev.get("reason") or "Evicted")
    message = str(ev.get("message") or "evicted")
    conditions = [dict(x) for x in _conditions(wl)]
    requeued = "True" if reason in ("Preempted", "NodeFailures") else "False"
    _set(conditions, _cond(wl, "Requeued", requeued, reason, message, now))
    _set(conditions, _cond(wl, "QuotaReserved", "False", "Pending", message, now))
    checks_ready = all(
        x.get("state") == "Ready" for x in (wl.get("status") or {}).get("admissionChecks") or []
    )
    if checks_ready:
        admitted_reason, admitted_message = "NoReservation", "The workload has no reservation"
    else:
        admitted_reason = "NoReservationUnsatisfiedChecks"
        admitted_message = "The workload has no reservation and not all checks ready"
    _set(conditions, _cond(wl, "Admitted", "False", admitted_reason, admitted_message, now))
    if condition(wl, "PodsReady") is not None:
        _set(conditions, _cond(wl, "PodsReady", "False", PODS_WAIT_FOR_START,
                               "Not all pods are ready or succeeded", now))  # fmt: skip
    return {
        "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
        "status": {"conditions": conditions, "admission": None},
    }


#: Kueue's PodsReady reasons (its waitForPodsReady evicts a Workload that stays False).
PODS_STARTED = "Started"
PODS_RECOVERED = "Recovered"
PODS_WAIT_FOR_START = "WaitForStart"
PODS_WAIT_FOR_RECOVERY = "WaitForRecovery"


def pods_ready(wl: JSON, ready: bool) -> tuple[str, str, str]:
    """The ``PodsReady`` condition (status, reason, message) of an admitted Workload whose
    job's pods all run (``ready``) or not, as Kueue's jobframework computes it: True,
    ``Started`` (``Recovered`` after a recovery); False, ``WaitForStart`` until the pods
    first ran, ``WaitForRecovery`` after."""
    current = condition(wl, "PodsReady")
    reason = str((current or {}).get("reason") or "")
    if ready:
        recovered = reason in (PODS_WAIT_FOR_RECOVERY, PODS_RECOVERED)
        return (
            "True",
            PODS_RECOVERED if recovered else PODS_STARTED,
            "All pods reached readiness and the workload is running",
        )
    if (current or {}).get("status") == "True" or reason == PODS_WAIT_FOR_RECOVERY:
        return "False", PODS_WAIT_FOR_RECOVERY, "At least one pod has failed, waiting for recovery"
    return "False", PODS_WAIT_FOR_START, "Not all pods are ready or succeeded"


def pods_ready_patch(wl: JSON, ready: bool, now: str) -> JSON | None:
    """The status merge patch that sets ``PodsReady`` (:func:`pods_ready`), or None when
    the Workload already says it. Kueue evicts a Workload whose pods do not get ready in
    time only when its ``waitForPodsReady`` is on; written either way (two writes per
    start)."""
    status, reason, message = pods_ready(wl, ready)
    current = condition(wl, "PodsReady") or {}
    if (current.get("status"), current.get("reason")) == (status, reason):
        return None
    conditions = [dict(x) for x in _conditions(wl)]
    _set(conditions, _cond(wl, "PodsReady", status, reason, message, now))
    return {
        "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
        "status": {"conditions": conditions},
    }


def finish_patch(wl: JSON, succeeded: bool, message: str, now: str) -> JSON:
    """The status merge patch that marks the Workload ``Finished`` (its quota is
    released); carries the resourceVersion."""
    conditions = [dict(x) for x in _conditions(wl)]
    reason = "Succeeded" if succeeded else "Failed"
    _set(conditions, _cond(wl, "Finished", "True", reason, message, now))
    return {
        "metadata": {"resourceVersion": wl["metadata"]["resourceVersion"]},
        "status": {"conditions": conditions},
    }


def finalizer_patch(wl: JSON) -> JSON:
    """The merge patch that removes Kueue's finalizer (kept: anyone else's)."""
    rest = [f for f in wl["metadata"].get("finalizers") or [] if f != FINALIZER]
    return {"metadata": {"resourceVersion": wl["metadata"]["resourceVersion"], "finalizers": rest}}


class Kueue:
    """Kueue in the operator process: a job's Workloads and the ResourceFlavors their
    admission names, from the caches; a priority class, read live (one read per Workload
    created: no cache is worth it)."""

    def __init__(
        self,
        client: Client,
        *,
        owned_by: Callable[[str], list[JSON]],
        in_namespace: Callable[[str], list[JSON]],
        flavor: Callable[[str], JSON | None],
    ) -> None:
        self.client = client
        self.owned_by = owned_by
        """The Workloads whose controller has this uid."""
        self.in_namespace = in_namespace
        self.flavor = flavor

    async def observe(self, job: JSON) -> Seen | None:
        """The job's Workload, the other Workloads it controls, the flavors of its
        admission and, while it has no Workload, its priority class."""
        if dispatched(job) and not queue_name(job):
            return None  # MultiKueue queues only jobs with a queue: nobody runs this one
        meta = job["metadata"]
        mine = self.owned_by(meta["uid"])
        prebuilt = prebuilt_name(job)
        if prebuilt:
            # A worker cluster's copy: its Workload was made by MultiKueue, not owned yet.
            name = prebuilt
            candidates = self.in_namespace(meta["namespace"])
        else:
            name = workload_name(meta["name"], meta["uid"])
            candidates = mine
        wl = next((w for w in candidates if w["metadata"]["name"] == name), None)
        others = [w for w in mine if w["metadata"]["name"] != name]
        flavors = {n: self.flavor(n) for n in flavor_names(wl)} if wl is not None else {}
        priority = None
        if (
            wl is None
            and not prebuilt
            and queue_name(job)
            and not is_finished(job.get("status") or {})
        ):
            priority = await self._priority(job)
        return Seen(wl, others, flavors, priority, dispatched=dispatched(job), prebuilt=prebuilt)

    async def _priority(self, job: JSON) -> JSON | MissingClass | None:
        """The priority fields of the class the job names; None: it names none."""
        source = priority_source(job)
        if source is None:
            return None
        kind, name = source
        res = WORKLOADPRIORITYCLASSES if kind == "WorkloadPriorityClass" else PRIORITYCLASSES
        try:
            obj = await self.client.get(res, name)
        except ApiError as e:
            if is_not_found(e):
                return MissingClass(kind, name)
            raise
        return priority_ref(kind, name, int(obj.get("value") or 0))

    async def forget(self, request: Request) -> None:
        """The job is gone: its Workloads, being deleted by the garbage collector, lose
        Kueue's finalizer (Kueue releases their quota)."""
        for wl in self.in_namespace(request.namespace):
            refs = wl["metadata"].get("ownerReferences") or []
            owned = any(r.get("kind") == c.KIND and r.get("name") == request.name for r in refs)
            if owned and terminating(wl) and has_finalizer(wl):
                await _patch(self.client, wl, finalizer_patch(wl))


@dataclass(frozen=True)
class Seen:
    """What Kueue's caches hold for one job."""

    workload: JSON | None = None
    """The job's Workload (the one named :func:`workload_name`), if any."""
    other_workloads: list[JSON] = field(default_factory=list)
    """Other Workloads the job controls (left by an earlier spec): deleted."""
    flavors: dict[str, JSON | None] = field(default_factory=dict)
    """The ResourceFlavors the Workload's admission names (None: not in the cache yet)."""
    priority: JSON | MissingClass | None = None
    """While the job has no Workload: the priority fields of the class it names
    (:func:`priority_ref`), or that class missing; None: it names none."""
    dispatched: bool = False
    """MultiKueue runs the job on a worker cluster (:func:`dispatched`)."""
    prebuilt: str = ""
    """This is a worker cluster's copy: the name of the Workload MultiKueue pre-built."""

    def decide(self) -> Decision:
        return Decision(self)


class Decision(Admitted):
    """Kueue's decisions for a job in one pass (see the module docstring's table), and
    the Workload writes they make."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
        self.placements: dict[str, Placement] = {}
        """Per replica type, what Kueue's admission adds to its pods."""
        self.create_workload: JSON | None = None
        """A Workload to create, with its priority (:attr:`Seen.priority`)."""
        self.patch_workload: JSON | None = None
        """A merge patch for the Workload's spec (pod sets, queue name, active)."""
        self.workload_status: JSON | None = None
        """A merge patch for the Workload's status (requeued after an eviction, pods
        ready, finished)."""
        self.release_workloads: list[JSON] = []
        """Workloads whose Kueue finalizer is removed (finished, or going away)."""
        self.delete_workloads: list[JSON] = []
        self.adopt_workload: JSON | None = None
        """A merge patch that makes the job the controller of its pre-built Workload."""

    # --- decisions -----------------------------------------------------------------------
    def admit(self, p: Pass, resuming: bool) -> bool:
        """A job labelled with a queue: keep its Workload in step with it and let its pods
        run only while the Workload is admitted; ``Queued`` says where it waits."""
        if not queue_name(p.stored):
            return True
        wl = self.seen.workload
        for old in self.seen.other_workloads:
            self._drop(old)
        if self.seen.prebuilt:
            return self._prebuilt(p, wl, resuming)
        if wl is not None and terminating(wl):
            # Deleted under the job: stop, let it go, and queue a new one.
            p.stop_pods()
            self._drop(wl)
            wl = None
        if wl is None:
            return self._without_workload(p)
        if not pod_sets_match(p.job, wl):
            self._reshape(p, wl)
            return False
        self._sync_spec(p, wl, resuming)
        return self._admitted(p, wl)

    def _admitted(self, p: Pass, wl: JSON) -> bool:
        """The job's pods may run once its Workload is admitted (a dispatched job's run
        on the worker cluster MultiKueue chose)."""
        if not admitted(wl):
            reactivating = ((self.patch_workload or {}).get("spec") or {}).get("active")
            wait = why_waiting(p.job, wl, reactivating=reactivating is True)
            if wait.reason == REASON_EVICTED:
                p.status.pop("startTime", None)
            p.stop_pods()
            self._requeue_when_stopped(p, wl)
            self._wait(p, wait)
            return False
        if self.seen.dispatched:
            return self._dispatched(p, wl)
        admission = placements(wl, self.seen.flavors)
        if admission is None:
            p.requeue_at(1.0)  # a ResourceFlavor not in the cache yet
            return False
        self.placements = admission
        self.workload_status = pods_ready_patch(wl, p.all_running(), p.now_s)
        queued = get_condition(p.status, c.QUEUED)
        if queued is None or queued.get("reason") != REASON_ADMITTED:
            p.placed(
                REASON_ADMITTED,
                f"MSJob {p.ref}: Kueue admitted its Workload {wl['metadata']['name']} to "
                f"ClusterQueue {cluster_queue(wl)!r}.",
            )
        return True

    def _dispatched(self, p: Pass, wl: JSON) -> bool:
        """Admitted through MultiKueue: the job runs on the worker cluster, whose status
        MultiKueue copies here; nothing runs here, so nothing reports ``PodsReady``."""
        queued = get_condition(p.old_status, c.QUEUED) or {}
        if queued.get("status") == c.CONDITION_TRUE and queued.get("reason") in _MANAGER_WAITS:
            # The status is still this cluster's wait, not yet the worker's copy: announce
            # where the job went (the status will not say: it becomes the worker's).
            p.event(
                "Normal",
                REASON_DISPATCHED,
                f"MSJob {p.ref}: MultiKueue dispatched it to worker cluster "
                f"{worker_cluster(wl)!r} (Workload {wl['metadata']['name']}, ClusterQueue "
                f"{cluster_queue(wl)!r}); its status here is copied from there.",
            )
        return True

    def _prebuilt(self, p: Pass, wl: JSON | None, resuming: bool) -> bool:
        """A worker cluster's copy of a dispatched job: it runs under the Workload
        MultiKueue pre-built for it, which it adopts; it never creates one."""
        name = self.seen.prebuilt
        if wl is None or terminating(wl):
            p.stop_pods()
            self._wait(p, Wait(
                REASON_PREBUILT_MISSING,
                f"MSJob {p.ref} waits for Workload {name}, which MultiKueue creates for "
                f"it (label {PREBUILT_LABEL}).",
            ))  # fmt: skip
            p.requeue_at(5.0)  # its creation does not name the job: look again
            return False
        owner = controller_uid(wl)
        if owner is not None and owner != p.stored["metadata"]["uid"]:
            p.stop_pods()
            self._wait(p, Wait(
                REASON_PREBUILT_MISSING,
                f"MSJob {p.ref}: Workload {name} (label {PREBUILT_LABEL}) is controlled by "
                "another object; the job waits.",
                event_type="Warning",
            ))  # fmt: skip
            return False
        if owner is None:
            self.adopt_workload = adoption_patch(wl, p.stored)
        if not pod_sets_match(p.job, wl):
            p.stop_pods()
            self._wait(p, Wait(
                REASON_PREBUILT_MISMATCH,
                f"MSJob {p.ref}: its pre-built Workload {name} does not describe it (pod "
                "sets, counts or resources differ): was the copy edited on this cluster? "
                "The job waits.",
                event_type="Warning",
            ))  # fmt: skip
            return False
        self._sync_spec(p, wl, resuming)
        return self._admitted(p, wl)

    def mirrors_status(self, p: Pass) -> bool:
        """A dispatched job on a worker cluster: MultiKueue owns its status here."""
        return self.seen.dispatched and bool(worker_cluster(self.seen.workload))

    def _without_workload(self, p: Pass) -> bool:
        """No Workload (yet, or any more): once the pods are gone, create one, unless the
        priority class it would name is missing or a template's topology annotations
        break Kueue's rules."""
        priority = self.seen.priority
        if isinstance(priority, MissingClass):
            p.stop_pods()
            self._wait(p, waiting_for_class(p.job, priority))
            # Looked up again after as long as it has waited so far, 1 s to a minute.
            since = parse_time((get_condition(p.status, c.QUEUED) or {}).get(
                "lastTransitionTime")) or p.now  # fmt: skip
            p.requeue_at(min(60.0, max(1.0, (p.now - since).total_seconds())))
            return False
        refused = topology.refusal(p.job)
        if refused is not None:
            p.stop_pods()
            self._wait(p, refused)
            return False
        if p.stop_pods() and not self.seen.other_workloads:
            self.create_workload = workload(p.job, active=True, priority=priority)
        self._wait(p, why_waiting(p.job, None))
        return False

    def placement(self, p: Pass, replica_type: str) -> Placement | None:
        return self.placements.get(replica_type)

    def suspend(self, p: Pass) -> None:
        """A suspended job holds no quota: its Workload is made inactive (Kueue evicts
        it) and handed back once the pods are gone."""
        wl = self.seen.workload
        if wl is None or terminating(wl):
            return
        if active(wl):
            self.patch_workload = {"spec": {"active": False}}
        self._requeue_when_stopped(p, wl)
        queued = get_condition(p.status, c.QUEUED)
        if queued is not None and queued.get("reason") == REASON_ADMITTED:
            # No longer admitted: the queue-name label may change (config/admission).
            msg = f"MSJob {p.ref} is suspended: its Workload holds no quota."
            p.set_condition(c.QUEUED, c.CONDITION_FALSE, "MSJobSuspended", msg, in_place=True)

    def finish(self, p: Pass) -> None:
        """A finished job's Workload is marked Finished (its quota is released) and
        Kueue's finalizer removed."""
        wl = self.seen.workload
        for old in self.seen.other_workloads:
            self._drop(old)
        if wl is None:
            return
        if not is_true(wl, "Finished") and not terminating(wl):
            done = get_condition(p.status, c.SUCCEEDED)
            succeeded = bool(done and done.get("status") == c.CONDITION_TRUE)
            final = done if succeeded else get_condition(p.status, c.FAILED)
            message = str((final or {}).get("message") or "finished")
            self.workload_status = finish_patch(wl, succeeded, message, p.now_s)
        if has_finalizer(wl):
            self.release_workloads.append(wl)

    def _drop(self, wl: JSON) -> None:
        if has_finalizer(wl):
            self.release_workloads.append(wl)
        if not terminating(wl):
            self.delete_workloads.append(wl)

    def _requeue_when_stopped(self, p: Pass, wl: JSON) -> None:
        """An evicted Workload goes back to Kueue's queue once the pods are gone: until
        then they hold the resources its quota accounted for."""
        if is_true(wl, "Evicted") and has_quota(wl) and not p.pods:
            self.workload_status = requeue_patch(wl, p.now_s)

    def _wait(self, p: Pass, wait: Wait) -> None:
        """``Queued`` True (``Running`` False): the pods are held."""
        if is_true_condition(p.status, c.RUNNING):
            p.set_condition(c.RUNNING, c.CONDITION_FALSE, wait.reason, wait.message)
        p.wait(wait)

    def _reshape(self, p: Pass, wl: JSON) -> None:
        """The job's replicas or resources changed: a Workload not yet admitted is
        updated; one admitted for the old shape is dropped once the pods are stopped, and
        a new one is queued."""
        if has_quota(wl) or p.pods:
            if p.stop_pods():
                self._drop(wl)
        else:
            self.patch_workload = {"spec": {"podSets": pod_sets(p.job)}}
        self._wait(
            p,
            Wait(
                REASON_PENDING,
                f"MSJob {p.ref} changed its replicas or resources: its Workload is "
                f"queued again in LocalQueue {queue_name(p.stored)!r}.",
            ),
        )

    def _sync_spec(self, p: Pass, wl: JSON, resuming: bool) -> None:
        """The queue name follows the label until the Workload holds quota (then a change
        is refused: the Workload stays in its queue and a Warning says so); a resumed
        job's Workload is made active again."""
        spec: JSON = {}
        want = queue_name(p.stored)
        have = (wl.get("spec") or {}).get("queueName")
        if want != have and has_quota(wl):
            p.event(
                "Warning",
                "QueueNameChangeRefused",
                f"MSJob {p.ref}: the {QUEUE_LABEL} label says {want!r}, but its "
                f"Workload is admitted through LocalQueue {have!r}; the change is refused "
                "while it holds quota (suspend the job to move it).",
            )
        elif want != have:
            spec["queueName"] = want
        if resuming and not active(wl):
            spec["active"] = True
        if spec:
            self.patch_workload = {"spec": spec}

    # --- writes ----------------------------------------------------------------------------
    async def apply(self, w: Writer) -> bool:
        """Create, then the job's Workload (spec patch, status patch), then finalizers off
        and deletes; False when a Workload write conflicted (plan again)."""
        if self.create_workload is not None:
            await self._create(w, self.create_workload)
        if self.adopt_workload is not None and self.seen.workload is not None:
            adopted = await _patch(w.client, self.seen.workload, self.adopt_workload)
            if adopted is None:
                return False
            self.seen = replace(self.seen, workload=adopted)
            w.recorder.event(
                w.job, "Normal", "AdoptedWorkload",
                f"Adopted Workload {w.namespace}/{adopted['metadata']['name']}, pre-built by "
                "MultiKueue",
            )  # fmt: skip
        written, latest = await self._update(w.client)
        return written and await self._release(w, latest)

    async def _create(self, w: Writer, wl: JSON) -> None:
        """AlreadyExists counts as created (and is not announced again)."""
        try:
            await w.client.create(WORKLOADS, wl, w.namespace)
        except ApiError as e:
            if not is_already_exists(e):
                raise
            return
        message = f"Created Workload: {w.namespace}/{wl['metadata']['name']}"
        w.recorder.event(w.job, "Normal", "CreatedWorkload", message)

    async def _update(self, client: Client) -> tuple[bool, JSON | None]:
        """The spec patch, then the status patch; False if one conflicted, and the
        Workload as last written (or cached)."""
        latest = self.seen.workload
        if latest is None:
            return True, None
        if self.patch_workload is not None:
            latest = await _patch(client, latest, self.patch_workload)
        if latest is not None and self.workload_status is not None:
            # The status patch was planned from the cached Workload; a spec patch of this
            # pass moved only the spec, so it applies to the newer resourceVersion.
            rv = latest["metadata"]["resourceVersion"]
            patch = {**self.workload_status, "metadata": {"resourceVersion": rv}}
            latest = await _patch(client, latest, patch, "status")
        return latest is not None, latest

    async def _release(self, w: Writer, latest: JSON | None) -> bool:
        """Kueue's finalizer off (the job's own Workload as just written), then deletes."""
        for wl in self.release_workloads:
            if latest is not None and wl["metadata"]["name"] == latest["metadata"]["name"]:
                wl = latest
            if await _patch(w.client, wl, finalizer_patch(wl)) is None:
                return False
        for wl in self.delete_workloads:
            meta = wl["metadata"]
            try:
                await w.client.delete(
                    WORKLOADS, meta["name"], w.namespace, uid_precondition=meta["uid"]
                )
            except ApiError as e:
                if not (is_not_found(e) or is_conflict(e)):
                    raise
        return True


async def _patch(
    client: Client, wl: JSON, patch: JSON, subresource: str | None = None
) -> JSON | None:
    """Merge-patch a Workload; None when it moved (a conflict) or is gone."""
    meta = wl["metadata"]
    try:
        out: JSON = await client.patch(
            WORKLOADS, meta["name"], patch, meta["namespace"], subresource=subresource
        )
        return out
    except ApiError as e:
        if is_conflict(e) or is_not_found(e):
            import structlog  # the operator's logger: the SDK's planner never writes

            structlog.get_logger("msop.msjob").info(
                "workload write conflicted; requeueing", workload=meta["name"]
            )
            return None
        raise
