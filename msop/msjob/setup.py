"""Wiring of the MSJob controller: which caches it reads and which events wake it.

- MSJobs: all of them in the watched namespaces; any event enqueues the job.
- Pods and Services: only those labelled
  ``training.kubeflow.org/operator-name=msjob-controller``, so the caches hold the
  operator's own objects and not every pod in the cluster; an event enqueues the
  controller owner (an MSJob). The same events lower the reconciler's expectations.
- The enabled scheduling systems (:mod:`.systems`), each with the caches it asks for
  (:class:`.scheduling.Caches`): its own objects, labelled the same way, whose events
  enqueue the owning MSJob (Kueue's Workloads, Volcano's PodGroups), and cluster-scoped
  objects whose events wake no job (Kueue's ResourceFlavors).
- Nodes (``--node-lost-after``, unless off): all of them, cluster-scoped, each kept as a
  projection of its health (:func:`.nodehealth.node_projection`); a change of that
  health enqueues only the jobs with a pod on the node (the pods cache's index by node),
  and with shards only those of the shards held here. A heartbeat changes nothing kept.
- Worker 0 pods that run also feed the progress poller (``poller.py``, leader only),
  which enqueues a job when its reporter has something new.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from msop.api import constants as c
from msop.api.resources import MSJOBS
from msop.controller.controller import Controller, EventSource
from msop.controller.expectations import Expectations
from msop.controller.handler import (
    ChangedOnly,
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EventHandler,
    Obj,
    RequestQueue,
    request_for,
)
from msop.controller.manager import Manager
from msop.controller.ratelimiter import default_controller_rate_limiter
from msop.controller.reconcile import Reconciler, Request
from msop.controller.shardelection import ShardElection, ShardingConfig
from msop.controller.shards import shard_of
from msop.controller.workqueue import WorkQueue
from msop.informers.factory import InformerFactory
from msop.informers.informer import SharedInformer
from msop.informers.lister import Lister, MultiNamespaceLister, Reader
from msop.informers.store import (
    BY_CONTROLLER_UID,
    BY_NAMESPACE,
    Transform,
    make_transform,
    split_key,
)
from msop.informers.union import InformerUnion
from msop.kube.contact import Outage
from msop.kube.objects import JSON
from msop.kube.resources import NODES, PODS, SERVICES, Resource
from msop.msjob import metrics, nodehealth, systems
from msop.msjob.passes import Options
from msop.msjob.poller import ProgressPoller
from msop.msjob.projection import pod_projection, service_projection
from msop.msjob.reconciler import ChildKey, MSJobReconciler
from msop.msjob.settings import Settings
from msop.msjob.sharding import (
    JobsCache,
    JobShards,
    OwnedJobs,
    OwnedOnly,
    ShardGate,
    unsharded_selector,
)

log = structlog.get_logger("msop.msjob.setup")

CONTROLLER_NAME = "msjob"
EVENT_COMPONENT = "msjob-controller"
CHILD_SELECTOR = f"{c.LABEL_OPERATOR_NAME}={c.OPERATOR_NAME}"
#: Upper bound (seconds) of the per-job retry backoff after a failed reconcile.
RETRY_MAX_DELAY = 60.0
#: Maps a child (pod, Service, PodGroup, Workload) to the MSJob that controls it.
OWNER = EnqueueRequestForOwner(c.API_VERSION, c.KIND)
#: The same for the projected caches (pods, Services), but not for an update that changed
#: nothing they keep: the reconcile would read what the last one read.
CHANGED_OWNER = ChangedOnly(OWNER)


class _JobEvents(EnqueueRequestForObject):
    """An MSJob's events, except the update our own status write made: the pass that wrote
    it had planned from everything else (a third of the reconciles of a job's life)."""

    def __init__(self, own_write: Callable[[Request, str], bool]) -> None:
        self.own_write = own_write

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        rv = new["metadata"].get("resourceVersion")
        changed = rv and rv != old["metadata"].get("resourceVersion")
        if changed and self.own_write(request_for(new), rv):
            return
        super().update(old, new, queue)


#: Seconds a job's reconcile waits after a change of one of its pods, so that the changes
#: of its pods that come together (created, bound, started, finished within a moment) are
#: reconciled once, not once each. The make bench burst of 500 jobs measured 7.85
#: reconciles per job lifecycle without a window, 6.3-7.0 with 0.1 s and 5.9 with 0.5 s;
#: but with 0.5 s the faults tier's etcd compaction test lost the Event of a recreated pod
#: in 2 of 4 runs (not understood yet), so it stays at 0.1 s.
POD_BATCH_WINDOW = 0.1

#: The same for a job's Services: short, because in a burst a job's pods are created in
#: the reconcile its Service's watch event causes.
SERVICE_BATCH_WINDOW = 0.1


def _observe(informer: EventSource, expectations: Expectations[ChildKey], res: Resource) -> None:
    """Lower expectations as our own creates and deletes reach this cache."""

    def on_add(obj: Obj, initial: bool) -> None:
        for job in OWNER.requests(obj):
            expectations.creation_observed((job, res), obj["metadata"]["name"])

    def on_delete(obj: Obj) -> None:
        for job in OWNER.requests(obj):
            expectations.deletion_observed((job, res), obj["metadata"]["name"])

    informer.add_event_handler(on_add=on_add, on_delete=on_delete)


def _job_caches(
    split: InformerUnion | None, make: Callable[[], list[SharedInformer]]
) -> tuple[list[JobsCache], Reader]:
    """The jobs' caches and their reader: the union ``split`` of the held shards'
    informers, or one informer per watched namespace (``make``)."""
    if split is not None:
        return [split], split
    found = make()
    return list(found), _reader(found)


def _reader(informers: list[SharedInformer]) -> Reader:
    if len(informers) == 1 and informers[0].namespace is None:
        return Lister(informers[0])
    return MultiNamespaceLister(informers)


@dataclass(frozen=True)
class _Children:
    """A cache of the operator's own objects of one resource, as a scheduling system
    reads it (:class:`.scheduling.Children`)."""

    reader: Reader

    def get(self, name: str, namespace: str) -> JSON | None:
        found: JSON | None = self.reader.get(name, namespace)
        return found

    def owned_by(self, uid: str) -> list[JSON]:
        return self.reader.by_index(BY_CONTROLLER_UID, uid)

    def in_namespace(self, namespace: str) -> list[JSON]:
        return self.reader.by_index(BY_NAMESPACE, namespace)


class _Caches:
    """The caches the scheduling systems ask for (:class:`.scheduling.Caches`); the
    informers of their own objects are ``watched``: each event enqueues the owning job."""

    def __init__(
        self,
        factory: InformerFactory,
        informers: Callable[[Resource, str | None, Transform | None], list[SharedInformer]],
        transform: Transform,
        nodes: Callable[[str], JSON | None] | None = None,
    ) -> None:
        self.factory = factory
        self.informers = informers
        self.transform = transform
        self.node_cache = nodes
        self.watched: list[SharedInformer] = []

    def children(self, resource: Resource) -> _Children:
        found = self.informers(resource, CHILD_SELECTOR, self.transform)
        self.watched += found
        return _Children(_reader(found))

    def cluster(self, resource: Resource) -> Callable[[str], JSON | None]:
        return Lister(self.factory.informer_for(resource)).get

    def nodes(self) -> Callable[[str], JSON | None] | None:
        return self.node_cache


#: The pods cache's index of pods by ``spec.nodeName``.
BY_NODE = "msop-node"


def pod_node_index(pod: Obj) -> list[str]:
    name = (pod.get("spec") or {}).get("nodeName")
    return [str(name)] if name else []


class _NodeEvents:
    """A node's events enqueue the jobs with a pod on it (``pods``: the pods cache), and
    only when what the planner reads of the node (:func:`.nodehealth.health`) changed:
    not on the initial list (every job is planned then anyway), not on a heartbeat."""

    def __init__(self, pods: Reader) -> None:
        self.pods = pods

    def _enqueue(self, node: Obj, queue: RequestQueue) -> None:
        name = str((node.get("metadata") or {}).get("name") or "")
        seen: set[Request] = set()
        for pod in self.pods.by_index(BY_NODE, name):
            for request in OWNER.requests(pod):
                if request not in seen:
                    seen.add(request)
                    queue.add(request)

    def create(self, obj: Obj, queue: RequestQueue, *, initial: bool = False) -> None:
        if not initial:
            self._enqueue(obj, queue)

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        if nodehealth.health(old) != nodehealth.health(new):
            self._enqueue(new, queue)

    def delete(self, obj: Obj, queue: RequestQueue) -> None:
        self._enqueue(obj, queue)


@dataclass(frozen=True)
class _Nodes:
    """The node cache (None: ``--node-lost-after=off``, no node is known)."""

    informer: SharedInformer | None

    def get(self, name: str) -> JSON | None:
        if self.informer is None:
            return None
        found: JSON | None = Lister(self.informer).get(name)
        return found

    def watch(self, watch: Callable[[EventSource, EventHandler], None], pods: Reader) -> None:
        if self.informer is not None:
            watch(self.informer, _NodeEvents(pods))


def _node_cache(factory: InformerFactory, settings: Settings) -> _Nodes:
    """The nodes, unless ``--node-lost-after=off``: cluster-scoped, shared by every
    shard, each kept as its health (a hundred bytes or so, encoded)."""
    if settings.node_lost_after is None:
        return _Nodes(None)
    return _Nodes(factory.informer_for(NODES, transform=nodehealth.node_projection, compact=True))


RECHECK_IN_PLACE_SECONDS = 300.0


class _InPlaceRecheck:
    """Says again, every few minutes, whether the cluster can restart pods in place; new
    pods follow (:mod:`.agents`)."""

    def __init__(self, reconciler: MSJobReconciler, check: Callable[[], Awaitable[str]]) -> None:
        self.reconciler = reconciler
        self.check = check

    async def run(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_IN_PLACE_SECONDS)
            try:
                why = await self.check()
            except Exception as e:
                log.warning("cannot check restarts in place", error=str(e))
                continue
            opts = self.reconciler.options
            if opts.in_place is not None and opts.in_place.unavailable != why:
                log.info("restarts in place", available=not why, why_not=why or None)
                in_place = dataclasses.replace(opts.in_place, unavailable=why)
                self.reconciler.options = dataclasses.replace(opts, in_place=in_place)


def setup(manager: Manager, settings: Settings) -> Controller:
    """Create the MSJob controller, its informers and event recorder, and add it to
    ``manager``. Returns the controller (already added)."""
    namespaces: list[str | None] = list(settings.namespaces) or [None]
    factory = manager.informers

    def informers(
        res: Resource, selector: str | None, transform: Transform | None = None
    ) -> list[SharedInformer]:
        return [
            factory.informer_for(res, ns, selector, transform=transform, compact=True)
            for ns in namespaces
        ]

    # Every cache of the controller is kept encoded (EncodedStore): a reconcile reads one
    # job and its few children, and a projected pod takes ~2.5 KB as dicts but ~0.1 KB
    # encoded (a job ~8 KB vs ~0.1 KB); offline, 2,000 jobs with 10,000 pods went from
    # 6.8 to 2.3 KB of RSS per cached pod.
    # managedFields and kubectl's last-applied copy go (half a job's JSON, parsed on
    # every read otherwise); strings are not interned: the cache holds them encoded.
    lean = make_transform(intern=False)
    sharding = settings.sharding if settings.sharding and settings.sharding.shards > 1 else None
    # Where the API server splits the MSJobs by shard, a replica caches only its shards'
    # (sharding.py): their informers join this union as the shards are taken.
    split = InformerUnion() if sharding is not None and sharding.server_split else None
    jobs, job_reader = _job_caches(split, lambda: informers(MSJOBS, None, lean))
    # Only the fields the planner reads are cached (see projection.py): the bench measured
    # ~25 KB per full pod in the cache.
    pods = _child_caches(informers, PODS, pod_projection, sharded=sharding is not None)
    services = _child_caches(informers, SERVICES, service_projection, sharded=bool(sharding))
    nodes = _node_cache(factory, settings)
    # The scheduling systems, in the order they decide (Kueue, then Volcano), each with
    # the caches it asks for.
    caches = _Caches(factory, informers, lean, nodes.get if nodes.informer is not None else None)
    enabled = systems.enabled(
        kueue_enabled=settings.kueue,
        gang_scheduling=settings.gang_scheduling,
        workload_api=settings.workload_api,
        worker_lost=settings.worker_lost,
        contact=manager.client.contact,
    )
    scheduling = [integration.start(manager.client, caches) for integration in enabled]

    expectations: Expectations[ChildKey] = Expectations()
    poller: ProgressPoller | None = None
    if settings.progress_port:
        poller = ProgressPoller(
            interval=settings.progress_interval,
            max_reports_per_second=settings.progress_writes_per_second,
        )
    # The controller's queue comes first: the reconciler and the Event recorder read its
    # length.
    queue: WorkQueue[Request] = WorkQueue(
        CONTROLLER_NAME,
        # A refused create (quota, admission) is retried with backoff; nothing we watch
        # says when the cluster changes its mind, so cap the backoff at a minute as the
        # Kubernetes Job controller does (MaxJobApiBackOff), not controller-runtime's
        # 1000 s: a raised quota is picked up within a minute, still one call a minute.
        rate_limiter=default_controller_rate_limiter(max_delay=RETRY_MAX_DELAY),
    )
    workers = settings.max_concurrent_reconciles
    reconciler = MSJobReconciler(
        manager.client,
        jobs=job_reader,
        pods=pods.reader,
        services=services.reader,
        scheduling=scheduling,
        # A burst's creates before their announcements (SuccessfulCreate* are
        # deferrable): a burst is more reconciles ready than workers to take them, not
        # any one waiting (in a busy cluster some usually are, and every announcement
        # would wait its 30 s).
        recorder=manager.event_recorder(EVENT_COMPONENT, busy=lambda: len(queue) >= workers),
        expectations=expectations,
        options=Options(
            progress_port=settings.progress_port,
            in_place=settings.in_place,
            shard_of=functools.partial(shard_of, shards=sharding.shards) if sharding else None,
            node_lost_after=settings.node_lost_after or 0.0,
        ),
        nodes=nodes.get,
        progress=poller.get if poller is not None else None,
        backlog=lambda: len(queue),
        agents=settings.agents,
    )
    shards: JobShards | None = None
    gated: Reconciler = reconciler
    if sharding is not None:
        assert isinstance(pods.reader, InformerUnion)
        assert isinstance(services.reader, InformerUnion)
        shards = _shards(
            manager, sharding, namespaces, jobs, pods.reader, services.reader, queue, split, lean
        )
        shards.forget = reconciler.forget
        gated = ShardGate(reconciler, shards)
    controller = Controller(CONTROLLER_NAME, gated, max_concurrent_reconciles=workers, queue=queue)

    def watch(source: EventSource, handler: EventHandler, batch_window: float = 0.0) -> None:
        if shards is not None:
            handler = OwnedOnly(handler, shards.owns)
        controller.watch(source, handler, batch_window=batch_window)

    for ns in settings.namespaces:
        metrics.touch(ns)
    _watch_jobs(jobs, controller.watch, reconciler, shards)
    for source in pods.sources:
        watch(source, CHANGED_OWNER, batch_window=POD_BATCH_WINDOW)
        _observe(source, expectations, PODS)
    for source in services.sources:
        watch(source, CHANGED_OWNER, batch_window=SERVICE_BATCH_WINDOW)
        _observe(source, expectations, SERVICES)
    for inf in caches.watched:
        watch(inf, OWNER)
    nodes.watch(watch, pods.reader)
    manager.add(controller)
    _replan_after_outages(manager, settings, jobs, queue)
    if settings.recheck_in_place is not None:
        manager.add(_InPlaceRecheck(reconciler, settings.recheck_in_place))
    if poller is not None:
        _follow_progress(manager, controller, poller, pods.sources)
    return controller


def _replan_after_outages(
    manager: Manager, settings: Settings, jobs: list[JobsCache], queue: WorkQueue[Request]
) -> None:
    """After a long outage MultiKueue's copies are held (kueue.py): plan every job again
    as soon as the API server answers, not at its next event (a relist that finds the
    cache unchanged sends none)."""
    if settings.kueue and settings.worker_lost.timeout > 0:
        manager.client.contact.subscribe(
            functools.partial(_plan_all_after, settings.worker_lost.timeout, jobs, queue)
        )


def _watch_jobs(
    jobs: list[JobsCache],
    watch: Callable[[EventSource, EventHandler], None],
    reconciler: MSJobReconciler,
    shards: JobShards | None,
) -> None:
    """Every MSJob event enqueues the job (with shards, of the shards held here, by the
    job itself); the job metrics read the jobs caches (with shards, only the jobs of the
    shards held here: the replicas add up to every job once)."""

    def view(store: metrics.StateIndex) -> metrics.StateIndex:
        return shards.held(store) if shards is not None else store

    def deleted(obj: Obj) -> None:
        if shards is None or shards.owns_object(obj):
            metrics.count("deleted", str(obj["metadata"].get("namespace", "")))

    handler: EventHandler = _JobEvents(reconciler.caused_by_own_write)
    if shards is not None:
        handler = OwnedJobs(handler, shards)
    for inf in jobs:
        watch(inf, handler)
        inf.add_indexers(
            {
                metrics.BY_JOB_STATE: metrics.job_state_index,
                metrics.BY_JOB_ALERTING: metrics.job_alerting_index,
            }
        )
        metrics.JOB_STATES.add(functools.partial(metrics.state_counts, view(inf.store)))
        metrics.JOBS.add(functools.partial(metrics.alerting_values, view(inf.store)))
        inf.add_event_handler(
            on_add=lambda obj, initial: metrics.touch(str(obj["metadata"].get("namespace", ""))),
            on_delete=deleted,
        )


@dataclass(frozen=True)
class _ChildCaches:
    """How the controller reads and watches one kind of its children."""

    reader: Reader
    sources: list[EventSource]


def _child_caches(
    informers: Callable[[Resource, str | None, Transform | None], list[SharedInformer]],
    res: Resource,
    projection: Transform,
    *,
    sharded: bool,
) -> _ChildCaches:
    """Without shards: the operator's children, one informer per namespace. With shards:
    a union of those without a shard label (made without shards), which each held
    shard's own informers join (sharding.py)."""
    if not sharded:
        found = _indexed(res, informers(res, CHILD_SELECTOR, projection))
        return _ChildCaches(_reader(found), list(found))
    union = InformerUnion(
        _indexed(res, informers(res, unsharded_selector(CHILD_SELECTOR), projection))
    )
    return _ChildCaches(union, [union])


def _indexed(res: Resource, found: list[SharedInformer]) -> list[SharedInformer]:
    """Pods are indexed by node too (a node's events enqueue the jobs with pods on it)."""
    if res == PODS:
        for inf in found:
            inf.add_indexers({BY_NODE: pod_node_index})
    return found


def _shards(
    manager: Manager,
    sharding: ShardingConfig,
    namespaces: list[str | None],
    jobs: list[JobsCache],
    pods: InformerUnion,
    services: InformerUnion,
    queue: WorkQueue[Request],
    split: InformerUnion | None,
    lean: Transform,
) -> JobShards:
    """The shards' owner and election, added to ``manager`` (neither needs the leader:
    the shards' Leases are the election). ``split``: the jobs' union, where the API
    server splits the MSJobs by shard."""

    def make(res: Resource, selector: str) -> list[SharedInformer]:
        projection = pod_projection if res == PODS else service_projection
        options = manager.informers.options
        return _indexed(res, [
            SharedInformer(
                manager.client,
                res,
                namespace=ns,
                label_selector=selector,
                transform=projection,
                options=options,
                compact=True,
            )
            for ns in namespaces
        ])  # fmt: skip

    def make_jobs(selector: str) -> list[SharedInformer]:
        options = manager.informers.options
        return [
            SharedInformer(
                manager.client, MSJOBS, namespace=ns, shard_selector=selector,
                transform=lean, options=options, compact=True,
            )
            for ns in namespaces
        ]  # fmt: skip

    children = [(PODS, pods, CHILD_SELECTOR), (SERVICES, services, CHILD_SELECTOR)]
    shards = JobShards(
        sharding.shards, jobs, children, make, queue.add,
        split_jobs=(split, make_jobs) if split is not None else None,
    )  # fmt: skip
    metrics.SHARD_JOBS.add(lambda: shards.counts(queue.queued()))
    manager.add(shards, needs_leader_election=False)
    manager.add(ShardElection(manager.client, sharding, shards), needs_leader_election=False)
    return shards


def _plan_all_after(
    timeout: float, jobs: list[JobsCache], queue: WorkQueue[Request], outage: Outage
) -> None:
    """An outage of at least ``timeout`` seconds ended: every cached job is planned again."""
    if outage.seconds < timeout:
        return
    for inf in jobs:
        cached = inf.store.keys()
        for key in cached:
            namespace, name = split_key(key)
            queue.add(Request(namespace or "", name))


def _follow_progress(
    manager: Manager, controller: Controller, poller: ProgressPoller, pods: list[EventSource]
) -> None:
    for inf in pods:
        poller.follow(inf)
    # A new report is an update of Worker 0 whose object did not change, which the
    # handler enqueues at low priority (like a resync): a progress write never delays
    # creating pods or reporting a condition.
    controller.watch(poller, OWNER)
    metrics.PROGRESS.add(poller)
    manager.add(poller)
