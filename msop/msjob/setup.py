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
from msop.controller.controller import Controller
from msop.controller.expectations import Expectations
from msop.controller.handler import (
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    Obj,
    RequestQueue,
    request_for,
)
from msop.controller.manager import Manager
from msop.controller.ratelimiter import default_controller_rate_limiter
from msop.controller.reconcile import Request
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
from msop.kube.contact import Outage
from msop.kube.objects import JSON
from msop.kube.resources import PODS, SERVICES, Resource
from msop.msjob import metrics, systems
from msop.msjob.passes import Options
from msop.msjob.poller import ProgressPoller
from msop.msjob.projection import pod_projection, service_projection
from msop.msjob.reconciler import ChildKey, MSJobReconciler
from msop.msjob.settings import Settings

log = structlog.get_logger("msop.msjob.setup")

CONTROLLER_NAME = "msjob"
EVENT_COMPONENT = "msjob-controller"
CHILD_SELECTOR = f"{c.LABEL_OPERATOR_NAME}={c.OPERATOR_NAME}"
#: Upper bound (seconds) of the per-job retry backoff after a failed reconcile.
RETRY_MAX_DELAY = 60.0
#: Maps a child (pod, Service, PodGroup, Workload) to the MSJob that controls it.
OWNER = EnqueueRequestForOwner(c.API_VERSION, c.KIND)


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


def _observe(informer: SharedInformer, expectations: Expectations[ChildKey], res: Resource) -> None:
    """Lower expectations as our own creates and deletes reach this cache."""

    def on_add(obj: Obj, initial: bool) -> None:
        for job in OWNER.requests(obj):
            expectations.creation_observed((job, res), obj["metadata"]["name"])

    def on_delete(obj: Obj) -> None:
        for job in OWNER.requests(obj):
            expectations.deletion_observed((job, res), obj["metadata"]["name"])

    informer.add_event_handler(on_add=on_add, on_delete=on_delete)


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
    ) -> None:
        self.factory = factory
        self.informers = informers
        self.transform = transform
        self.watched: list[SharedInformer] = []

    def children(self, resource: Resource) -> _Children:
        found = self.informers(resource, CHILD_SELECTOR, self.transform)
        self.watched += found
        return _Children(_reader(found))

    def cluster(self, resource: Resource) -> Callable[[str], JSON | None]:
        return Lister(self.factory.informer_for(resource)).get


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
    jobs = informers(MSJOBS, None, lean)
    # Only the fields the planner reads are cached (see projection.py): the bench measured
    # ~25 KB per full pod in the cache.
    pods = informers(PODS, CHILD_SELECTOR, pod_projection)
    services = informers(SERVICES, CHILD_SELECTOR, service_projection)
    # The scheduling systems, in the order they decide (Kueue, then Volcano), each with
    # the caches it asks for.
    caches = _Caches(factory, informers, lean)
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
        jobs=_reader(jobs),
        pods=_reader(pods),
        services=_reader(services),
        scheduling=scheduling,
        # A burst's creates before their announcements (SuccessfulCreate* are
        # deferrable): a burst is more reconciles ready than workers to take them, not
        # any one waiting (in a busy cluster some usually are, and every announcement
        # would wait its 30 s).
        recorder=manager.event_recorder(EVENT_COMPONENT, busy=lambda: len(queue) >= workers),
        expectations=expectations,
        options=Options(progress_port=settings.progress_port, in_place=settings.in_place),
        progress=poller.get if poller is not None else None,
        backlog=lambda: len(queue),
        agents=settings.agents,
    )
    controller = Controller(
        CONTROLLER_NAME, reconciler, max_concurrent_reconciles=workers, queue=queue
    )
    for ns in settings.namespaces:
        metrics.touch(ns)
    for inf in jobs:
        controller.watch(inf, _JobEvents(reconciler.caused_by_own_write))
        inf.add_indexers(
            {
                metrics.BY_JOB_STATE: metrics.job_state_index,
                metrics.BY_JOB_ALERTING: metrics.job_alerting_index,
            }
        )
        metrics.JOB_STATES.add(functools.partial(metrics.state_counts, inf.store))
        metrics.JOBS.add(functools.partial(metrics.alerting_values, inf.store))
        inf.add_event_handler(
            on_add=lambda obj, initial: metrics.touch(str(obj["metadata"].get("namespace", ""))),
            on_delete=lambda obj: metrics.count(
                "deleted", str(obj["metadata"].get("namespace", ""))
            ),
        )
    for inf in pods:
        controller.watch(inf, OWNER, batch_window=POD_BATCH_WINDOW)
        _observe(inf, expectations, PODS)
    for inf in services:
        controller.watch(inf, OWNER, batch_window=SERVICE_BATCH_WINDOW)
        _observe(inf, expectations, SERVICES)
    for inf in caches.watched:
        controller.watch(inf, OWNER)
    manager.add(controller)
    if settings.kueue and settings.worker_lost.timeout > 0:
        # After a long outage MultiKueue's copies are held (kueue.py): plan every job again
        # as soon as the API server answers, not at its next event (a relist that finds
        # the cache unchanged sends none).
        manager.client.contact.subscribe(
            functools.partial(_plan_all_after, settings.worker_lost.timeout, jobs, queue)
        )
    if settings.recheck_in_place is not None:
        manager.add(_InPlaceRecheck(reconciler, settings.recheck_in_place))
    if poller is not None:
        _follow_progress(manager, controller, poller, pods)
    return controller


def _plan_all_after(
    timeout: float, jobs: list[SharedInformer], queue: WorkQueue[Request], outage: Outage
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
    manager: Manager, controller: Controller, poller: ProgressPoller, pods: list[SharedInformer]
) -> None:
    for inf in pods:
        poller.follow(inf)
    # A new report is an update of Worker 0 whose object did not change, which the
    # handler enqueues at low priority (like a resync): a progress write never delays
    # creating pods or reporting a condition.
    controller.watch(poller, OWNER)
    metrics.PROGRESS.add(poller)
    manager.add(poller)
