"""Kueue's Workload for an MSJob, as pure functions: its name and pod sets, its priority,
what its conditions say (admitted, evicted, why the job waits), the placements its
admission gives the pods, and the merge patches msop writes to it.

No I/O and no logging: the decisions of :mod:`.kueue` are built from these, and so is
``msop render``'s Workload.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from msop.api import constants as c
from msop.api.naming import job_selector, owner_reference
from msop.api.types import MSJob
from msop.kube.contact import Outage
from msop.kube.objects import JSON, parse_time
from msop.msjob import topology
from msop.msjob.scheduling import Placement, Wait

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
#: A MultiKueue copy held after this (worker) cluster's API server was lost for long.
REASON_WORKER_LOST = "MultiKueueWorkerLost"
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


def origin(job: JSON) -> str:
    """The MultiKueue manager that made this copy (its ``multikueue-origin`` label); ""
    for a job not made by MultiKueue."""
    value = (job["metadata"].get("labels") or {}).get(ORIGIN_LABEL)
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class LostWorker:
    """This worker cluster's API server did not answer msop from ``start`` to ``end``,
    long enough for MultiKueue's manager to have given its jobs to another worker; a copy
    that was here before is held until ``until``."""

    start: datetime
    end: datetime
    until: datetime


def lost_worker(
    job: JSON, outages: Sequence[Outage], *, timeout: float, hold: float
) -> LostWorker | None:
    """The outage (at least ``timeout`` seconds; 0: never) that holds this MultiKueue
    copy (made before it ended) for ``hold`` seconds after it, the latest if several;
    None if none does."""
    if timeout <= 0 or not origin(job) or not prebuilt_name(job):
        return None
    created = parse_time(job["metadata"].get("creationTimestamp"))
    found = None
    for o in outages:
        if o.seconds >= timeout and (created is None or created < o.end):
            found = LostWorker(o.start, o.end, o.end + timedelta(seconds=hold))
    return found


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
    checks = _pending_checks(wl)
    if wl is not None and eviction_explains_wait(wl):
        ev = condition(wl, "Evicted") or {}
        return Wait(
            REASON_EVICTED,
            f"MSJob {ref}: Kueue evicted its Workload ({ev.get('reason') or 'Evicted'}: "
            f"{ev.get('message') or 'no message'}{'; ' + checks if checks else ''}); its pods "
            f"are deleted and it waits in LocalQueue {queue!r} to be admitted again.",
        )
    if wl is not None and not active(wl):
        return Wait(
            REASON_INACTIVE,
            f"MSJob {ref}: its Workload {wl['metadata']['name']} is inactive "
            f"(spec.active is false{'; ' + checks if checks else ''}); it is not queued until "
            "it is made active again.",
        )
    detail = "msop is creating its Workload"
    if wl is not None:
        detail = "Kueue has not looked at its Workload yet"
        qr = condition(wl, "QuotaReserved")
        if has_quota(wl):
            detail = (
                f"quota is reserved in ClusterQueue {cluster_queue(wl)!r}; "
                "admission checks are pending" + (f" ({checks})" if checks else "")
            )
        else:
            if qr is not None and qr.get("message"):
                detail = str(qr["message"])
            if checks:
                detail += f" ({checks})"
    return Wait(REASON_PENDING, f"MSJob {ref} waits in LocalQueue {queue!r}: {detail}.")


def _pending_checks(wl: JSON | None) -> str:
    """The admission checks that are not Ready, each with its own message (a MultiKueue
    check's says what its worker clusters answered) and its state unless Pending."""
    parts = []
    for x in ((wl or {}).get("status") or {}).get("admissionChecks") or []:
        state = x.get("state")
        if state == "Ready":
            continue
        name = f"{x.get('name')}" + (f" ({state})" if state and state != "Pending" else "")
        message = x.get("message")
        if message:
            parts.append(f"{name}: {message}")
        elif state and state != "Pending":
            parts.append(name)
    return "; ".join(parts)


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


def as_admitted(wl: JSON, cluster_queue: str) -> JSON:
    """A copy of a new ``wl`` as Kueue leaves it once admitted to ``cluster_queue`` with
    no flavor assigned (``msop render``)."""
    seen = copy.deepcopy(wl)
    seen["metadata"]["resourceVersion"] = "1"
    seen["status"] = {
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": ""}
            for t in ("QuotaReserved", "Admitted")
        ],
        "admission": {
            "clusterQueue": cluster_queue,
            "podSetAssignments": [
                {"name": ps["name"], "flavors": {}, "count": ps["count"]}
                for ps in wl["spec"]["podSets"]
            ],
        },
    }
    return seen


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
