"""Kueue: an MSJob as a Kueue Workload, queued, admitted, evicted and finished.

Kueue manages job kinds it does not know (``integrations.externalFrameworks`` in its
configuration, ``MSJob.v1.mindspore.gitee.com``) through their own controller, which does
for them what Kueue's ``jobframework`` does for its built-in kinds. With
``--enable-kueue`` msop does it for every MSJob labelled ``kueue.x-k8s.io/queue-name``;
jobs without the label are untouched. This module is Kueue's side of the scheduling seam
(:mod:`.scheduling`): :class:`Kueue` reads the caches, :class:`Decision` decides (pure,
from the pure Workload functions of :mod:`.kueue_workload`) and fills in the
:class:`WorkloadWrites` that the reconciler applies.

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
``Admitted``, a missing pod's place in  no pod created until Kueue has moved the place
the topology assignment on a lost node  (True, ``WorkloadNodeReplacement``:
                                        :func:`.topology.unplaceable`); the Workload
                                        is not touched
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
*dispatched* (Kueue's answer to the planner: :meth:`Decision.runs_elsewhere`): on this
(the manager) cluster msop queues its Workload as above, but never creates its pods or
Services; Kueue's MultiKueue admission check picks a worker cluster
with free quota, creates a copy of the job there (without ``managedBy``, labelled with
the name of the Workload it pre-built there) and copies the worker's status back. msop
writes the status only while the job is not on a worker (its Workload has no
``status.clusterName``): ``Created``, ``Queued``, ``Suspended``. On the worker, the copy's
label names its *pre-built* Workload: msop adopts it (makes the job its controller, as
Kueue's jobframework does) instead of creating one, and runs the job as usual. A copy
that was on the worker through an outage of its API server at least as long as the
manager's ``workerLostTimeout`` (:class:`~msop.msjob.settings.WorkerLost`, the outages
from :class:`~msop.kube.contact.Contact`) has been given to another worker meanwhile:
it is held (``Queued`` ``MultiKueueWorkerLost``: its pods stopped, none created or
restarted) until MultiKueue deletes it or the hold ends (:meth:`Decision._held`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING

import structlog

from msop.api import constants as c
from msop.api.conditions import get_condition, is_finished
from msop.api.conditions import is_true as is_true_condition
from msop.api.report import format_duration
from msop.kube.contact import Contact, Outage
from msop.kube.errors import ApiError, is_already_exists, is_conflict, is_not_found
from msop.kube.objects import JSON, format_time, parse_time
from msop.kube.resources import (
    PRIORITYCLASSES,
    RESOURCEFLAVORS,
    WORKLOADPRIORITYCLASSES,
    WORKLOADS,
)
from msop.msjob import nodehealth, topology
from msop.msjob.kueue_workload import (
    PODSET_LABEL,
    PREBUILT_LABEL,
    QUEUE_LABEL,
    REASON_ADMITTED,
    REASON_DISPATCHED,
    REASON_EVICTED,
    REASON_INACTIVE,
    REASON_PENDING,
    REASON_PREBUILT_MISMATCH,
    REASON_PREBUILT_MISSING,
    REASON_WORKER_LOST,
    LostWorker,
    MissingClass,
    active,
    admitted,
    adoption_patch,
    as_admitted,
    cluster_queue,
    controller_uid,
    dispatched,
    finalizer_patch,
    finish_patch,
    flavor_names,
    has_finalizer,
    has_quota,
    is_true,
    lost_worker,
    origin,
    placements,
    pod_sets,
    pod_sets_match,
    pods_ready_patch,
    prebuilt_name,
    priority_ref,
    priority_source,
    queue_name,
    requeue_patch,
    terminating,
    waiting_for_class,
    why_waiting,
    worker_cluster,
    workload,
    workload_name,
)
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
from msop.msjob.settings import WorkerLost

if TYPE_CHECKING:
    from msop.controller.reconcile import Request
    from msop.kube.writer import Client

log = structlog.get_logger("msop.msjob")

#: ``msop render``: the ClusterQueue its Workload is seen admitted to, and what it says.
CLUSTER_QUEUE_PLACEHOLDER = "<cluster-queue>"
RENDER_NOTE = (
    "the pods are created once Kueue admits the Workload, with the node labels and "
    "tolerations of the ResourceFlavors it assigns; its priority is read from the "
    "class the job names when it is created"
)

#: The ``Queued`` reasons msop writes on a manager cluster while a dispatched job waits.
_MANAGER_WAITS = (REASON_PENDING, REASON_INACTIVE, REASON_EVICTED)
#: The ``Queued`` reason of an admitted job whose missing pods wait for Kueue to move
#: their places off a lost node (:meth:`Decision.release_pods`).
REASON_NODE_REPLACEMENT = "WorkloadNodeReplacement"
#: How soon a job held for a node replacement looks again: what ends the wait is a
#: Workload update (which wakes the job) or a node coming back (which does not).
NODE_REPLACEMENT_RECHECK_SECONDS = 5.0


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
        worker_lost: WorkerLost | None = None,
        outages: Callable[[], list[Outage]] = list,
        nodes: Callable[[str], JSON | None] | None = None,
    ) -> None:
        self.client = client
        self.nodes = nodes
        """The operator's node cache by name (None: nodes are not watched)."""
        self.owned_by = owned_by
        """The Workloads whose controller has this uid."""
        self.in_namespace = in_namespace
        self.flavor = flavor
        self.worker_lost = worker_lost or WorkerLost()
        self.outages = outages
        """The API server's outages this process saw (:class:`~msop.kube.contact.Contact`)."""

    @classmethod
    def start(
        cls,
        client: Client,
        caches: Caches,
        *,
        worker_lost: WorkerLost | None = None,
        contact: Contact | None = None,
    ) -> Kueue:
        """Kueue in the operator, with its caches: the Workloads msop made (their events
        enqueue the job) and every ResourceFlavor (cluster-scoped, few: an admitted
        Workload's flavors give its pods their node labels and tolerations); ``contact``:
        the outages of the API server, which hold MultiKueue's copies (``worker_lost``)."""
        workloads = caches.children(WORKLOADS)
        return cls(
            client,
            owned_by=workloads.owned_by,
            in_namespace=workloads.in_namespace,
            flavor=caches.cluster(RESOURCEFLAVORS),
            worker_lost=worker_lost,
            outages=contact.outages if contact is not None else list,
            nodes=caches.nodes(),
        )

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
        lost = lost_worker(
            job, self.outages(), timeout=self.worker_lost.timeout, hold=self.worker_lost.hold
        )
        nodes = None
        if self.nodes is not None and wl is not None:
            admission = (wl.get("status") or {}).get("admission") or {}
            nodes = {
                host: self.nodes(host)
                for psa in admission.get("podSetAssignments") or []
                for host in topology.node_places(psa)
            }
        return Seen(
            wl, others, flavors, priority,
            dispatched=dispatched(job), prebuilt=prebuilt, lost=lost, nodes=nodes,
        )  # fmt: skip

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
    lost: LostWorker | None = None
    """This worker cluster's copy was here through a long outage of the API server
    (:func:`lost_worker`): the manager may have given the job to another worker."""
    nodes: dict[str, JSON | None] | None = None
    """The nodes of the admission's topology assignments, as the operator's node cache
    holds them (None: not in it); None when nodes are not watched."""

    def decide(self) -> Decision:
        return Decision(self)


class WorkloadWrites:
    """The Workload writes a pass decided on (its Decision fills them in) and how they are
    made, after the job's own children: nothing here decides."""

    def __init__(self, seen: Seen) -> None:
        self.seen = seen
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


class Decision(WorkloadWrites, Admitted):
    """Kueue's decisions for a job in one pass (see the module docstring's table): they
    fill in the Workload writes (:class:`WorkloadWrites`) and read only the Seen and
    the pass."""

    def __init__(self, seen: Seen) -> None:
        super().__init__(seen)
        self.placements: dict[str, Placement] = {}
        """Per replica type, what Kueue's admission adds to its pods."""
        self.hold: Wait | None = None
        """Why the missing pods are not created yet (:meth:`release_pods`)."""

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
        self.hold = self._lost_places(p, wl)
        queued = get_condition(p.status, c.QUEUED)
        if self.hold is not None:
            p.wait(self.hold)
            p.requeue_at(NODE_REPLACEMENT_RECHECK_SECONDS)
        elif queued is not None and queued.get("reason") == REASON_NODE_REPLACEMENT:
            p.placed(
                REASON_ADMITTED,
                f"MSJob {p.ref}: Kueue moved the places of its Workload "
                f"{wl['metadata']['name']} off the lost node(s); its missing pods are created.",
            )
        elif queued is None or queued.get("reason") != REASON_ADMITTED:
            p.placed(
                REASON_ADMITTED,
                f"MSJob {p.ref}: Kueue admitted its Workload {wl['metadata']['name']} to "
                f"ClusterQueue {cluster_queue(wl)!r}.",
            )
        return True

    def release_pods(self, p: Pass) -> bool:
        """The missing pods wait while a place of a topology assignment they would take is
        on a lost node (:meth:`_lost_places`)."""
        return self.hold is None

    def _lost_places(self, p: Pass, wl: JSON) -> Wait | None:
        """Why the job's missing pods wait for Kueue's failed-node replacement: a pod set
        placed by topology lacks a pod, and a place of its assignment that no pod holds
        is on a node that cannot take one (:func:`.topology.unplaceable`). Kueue's
        ungater would send a pod created now there; Kueue moves the place (and says so
        by updating the assignment, which wakes the job), or evicts the Workload when it
        finds no room. None: nothing waits."""
        admission = (wl.get("status") or {}).get("admission") or {}
        stuck: list[str] = []
        for psa in admission.get("podSetAssignments") or []:
            name = psa.get("name")
            pods = [
                pod for pod in p.pods
                if ((pod.get("metadata") or {}).get("labels") or {}).get(PODSET_LABEL) == name
                and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            ]  # fmt: skip
            if len(pods) >= int(psa.get("count") or 0):
                continue
            usable = partial(self._usable, p)
            stuck += [
                f"{host} ({why}; pod set {name})"
                for host, why in topology.unplaceable(wl, psa, pods, usable)
            ]
        if not stuck:
            return None
        return Wait(
            REASON_NODE_REPLACEMENT,
            f"MSJob {p.ref}: the topology assignment of its Workload "
            f"{wl['metadata']['name']} keeps places for its missing pods on node(s) "
            f"{', '.join(stuck)}; they are created once Kueue has moved those places "
            "(its failed-node replacement, TASFailedNodeReplacement, on by default since "
            "Kueue 0.14).",
        )

    def _usable(self, p: Pass, host: str) -> str:
        """Why the operator's node cache says ``host`` cannot take a pod ("" if it can,
        or when nodes are not watched)."""
        nodes = self.seen.nodes
        if nodes is None or host not in nodes:
            return ""
        node = nodes[host]
        if node is None:
            return "not in the cluster"
        if nodehealth.node_down(node, now=p.now, grace=0.0):
            return "not ready"
        return ""

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
        if self._held(p, wl):
            return False
        self._sync_spec(p, wl, resuming)
        return self._admitted(p, wl)

    def _held(self, p: Pass, wl: JSON) -> bool:
        """A copy whose worker (this cluster) was cut off for at least the manager's
        ``workerLostTimeout`` has been given to another worker by then, and MultiKueue
        acts on it only once it reaches this cluster again: until it does (or the hold
        ends), nothing of it runs here. Its pods are stopped and none is created or
        restarted, so that two runs of the job do not write the same checkpoints; if the
        manager keeps this copy after all, it runs again once the hold ends."""
        lost = self.seen.lost
        if lost is None or p.now >= lost.until or not admitted(wl):
            return False
        p.stop_pods()
        self._wait(p, Wait(
            REASON_WORKER_LOST,
            f"MSJob {p.ref} is MultiKueue's copy of a job of manager "
            f"{origin(p.stored)!r}, and this cluster's API server did not answer msop for "
            f"{format_duration(round((lost.end - lost.start).total_seconds()))} (from "
            f"{format_time(lost.start)} to {format_time(lost.end)}): long enough for the "
            "manager to have given the job to another worker. Its pods are stopped, and "
            "none is created or restarted until MultiKueue deletes this copy, or until "
            f"{format_time(lost.until)} if it does not.",
            event_type="Warning",
        ))  # fmt: skip
        p.requeue_at(max(1.0, (lost.until - p.now).total_seconds()))
        return True

    def runs_elsewhere(self, p: Pass) -> bool:
        """A dispatched job (``spec.managedBy: kueue.x-k8s.io/multikueue``): MultiKueue
        runs it on a worker cluster; here it is only queued."""
        return dispatched(p.job)

    def mirrors_status(self, p: Pass) -> bool:
        """A dispatched job on a worker cluster: MultiKueue owns its status here."""
        return self.seen.dispatched and bool(worker_cluster(self.seen.workload))

    def granted(self) -> Granted | None:
        """Offline: the Workload this pass creates, seen admitted to
        :data:`CLUSTER_QUEUE_PLACEHOLDER` with no flavor."""
        wl = self.create_workload
        if wl is None:
            return None
        admitted_wl = as_admitted(wl, CLUSTER_QUEUE_PLACEHOLDER)
        return Granted([wl], replace(self.seen, workload=admitted_wl), RENDER_NOTE)

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
            log.info("workload write conflicted; requeueing", workload=meta["name"])
            return None
        raise


#: Kueue among the scheduling systems (:mod:`.systems`).
INTEGRATION = Integration("kueue", Kueue.start, Seen)


def integration(worker_lost: WorkerLost, contact: Contact | None) -> Integration:
    """Kueue among the scheduling systems, holding MultiKueue's copies after the outages
    ``contact`` records (:class:`WorkerLost`)."""
    start = partial(Kueue.start, worker_lost=worker_lost, contact=contact)
    return replace(INTEGRATION, start=start)
