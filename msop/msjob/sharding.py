"""MSJobs split across replicas (``msop run --shards N``): the domain's side of
:mod:`msop.controller.shardelection`.

A job belongs to shard ``shard_of(metadata.uid, N)`` (:mod:`msop.controller.shards`). Its
pods and Services carry that shard in the label ``msop.mindspore.gitee.com/shard`` from
their creation (:class:`~msop.msjob.passes.PlanningPass`), so that a replica watches only
the children of the shards it holds:

* where the API server splits lists and watches by shard (KEP-5866's ``shardSelector``,
  alpha in Kubernetes 1.36 behind the ``ShardedListAndWatch`` gate; :func:`server_splits`
  asks it once at start), a replica caches only the MSJobs of the shards it holds: one
  MSJob informer per held shard and watched namespace, selecting the shard's hash range
  (:func:`~msop.controller.shards.shard_range_selector`), joined to the jobs' union with
  the children's. Elsewhere every replica caches every MSJob (small, encoded): it needs a
  job's UID to know its shard, and the jobs of a shard it takes must be there at once;
* :meth:`JobShards.adopt` starts, for the shard, one pod and one Service informer per
  watched namespace, selecting ``operator-name=msjob-controller,
  msop.mindspore.gitee.com/shard=<i>`` (and the shard's MSJob informers where the server
  splits them); once they synced it joins them to the controller's unions
  (:class:`~msop.informers.union.InformerUnion`), marks the shard ready and enqueues its
  jobs; :meth:`JobShards.release` stops them;
* children made by an msop without shards (no shard label: an upgrade, or a move from
  ``--shards 1``) stay in one more informer per resource, selecting ``!shard``, that every
  replica keeps in its unions. They are read and managed (adopted) like the labelled ones
  by the replica that holds their job's shard; the others only drop their events. It
  empties as those jobs end.

:class:`ShardGate` wraps the reconciler: a job whose shard is not ready here is not
reconciled (its key is forgotten), and the reconciles of a shard are cancelled the moment
it is dropped (:meth:`JobShards.drop`): that is how "no writes after the Lease is lost"
holds per shard. :class:`OwnedOnly` keeps such keys out of the queue in the first place.
A key whose job is not in the cache (deleted) passes: its reconcile only forgets.
"""

from __future__ import annotations

import asyncio
import builtins
import time
from collections.abc import Callable, Iterable, Iterator

import structlog

from msop.api import constants as c
from msop.controller.handler import EventHandler, Obj, RequestQueue
from msop.controller.reconcile import Reconciler, Request, Result, StopAware
from msop.controller.shards import shard_of, shard_range_selector
from msop.controller.workqueue import PRIORITY_NORMAL
from msop.informers.informer import SharedInformer
from msop.informers.union import InformerUnion
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError
from msop.kube.resources import LEASES, Resource
from msop.msjob.metrics import SHARD_RECONCILES, StateIndex

__all__ = [
    "BY_SHARD",
    "JobShards",
    "OwnedJobs",
    "OwnedOnly",
    "ShardGate",
    "server_splits",
    "shard_selector",
    "unsharded_selector",
]

log = structlog.get_logger("msop.msjob.sharding")

#: The jobs cache's index of jobs by shard.
BY_SHARD = "msop-shard"


def shard_selector(base: str, shard: int) -> str:
    """``base`` narrowed to the children of one shard."""
    return f"{base},{c.LABEL_SHARD}={shard}"


def unsharded_selector(base: str) -> str:
    """``base`` narrowed to children without a shard label (made without shards)."""
    return f"{base},!{c.LABEL_SHARD}"


InformerMaker = Callable[[Resource, str], list[SharedInformer]]
"""Builds (does not start) the informers of one resource and selector, one per watched
namespace."""

JobsMaker = Callable[[str], list[SharedInformer]]
"""Builds (does not start) the MSJob informers of one ``shardSelector``, one per watched
namespace."""

JobsCache = SharedInformer | InformerUnion
"""The jobs' cache: an informer per watched namespace, or the union of the held shards'
informers (the server splits the MSJobs)."""


async def server_splits(client: KubeClient, lease_namespace: str) -> bool:
    """Whether the API server splits lists and watches by shard (its ``shardSelector``,
    gate ``ShardedListAndWatch``).

    Asked of the shards' Leases (a replica lists them anyway): a list with the selector
    of every hash is answered with ``metadata.shardInfo`` only by a server that applied
    it; one without the gate ignores the parameter. Not of the MSJobs themselves: 1.36
    filters a custom resource's lists and watches by the selector like any other's, but
    leaves ``shardInfo`` out of their answers. An error says no: the split by labels
    works everywhere."""
    try:
        listed = await client.list(
            LEASES, lease_namespace, limit=1, shard_selector=shard_range_selector(0, 1)
        )
    except ApiError as e:
        log.warning("cannot ask whether the API server splits watches", error=str(e))
        return False
    return bool((listed.get("metadata") or {}).get("shardInfo"))


class JobShards:
    """The :class:`~msop.controller.shardelection.ShardOwner` of the MSJob controller, and
    a runnable that runs the shards' informers (see the module docstring).

    ``jobs``: the jobs' caches; ``children``: (resource, union, base selector) per child
    resource; ``enqueue``: adds a job's key to the controller's queue; ``forget``: drops
    what the reconciler remembers of a job, for the jobs of a shard handed over (its
    memory would be stale the next time this replica holds them), and says how many
    Events of writes in doubt go with it. ``split_jobs``: where the server splits the
    MSJobs, the jobs' union (the one cache in ``jobs``) and how to make a shard's
    informers."""

    name = "job-shards"

    def __init__(
        self,
        shards: int,
        jobs: list[JobsCache],
        children: list[tuple[Resource, InformerUnion, str]],
        make: InformerMaker,
        enqueue: Callable[[Request], None],
        forget: Callable[[Request], int] = lambda _: 0,
        split_jobs: tuple[InformerUnion, JobsMaker] | None = None,
    ) -> None:
        self.shards = shards
        self.jobs = jobs
        self.children = children
        self.make = make
        self.enqueue = enqueue
        self.forget = forget
        self.split_jobs = split_jobs
        self._ready: set[int] = set()
        self._inflight: dict[int, set[asyncio.Task[Result]]] = {}
        self._informers: dict[int, list[tuple[InformerUnion, SharedInformer]]] = {}
        self._tasks: dict[int, list[asyncio.Task[None]]] = {}
        self._tg: asyncio.TaskGroup | None = None
        self._running = asyncio.Event()
        for inf in jobs:
            inf.add_indexers({BY_SHARD: self._job_shard_index})

    def _job_shard_index(self, job: Obj) -> list[str]:
        uid = (job.get("metadata") or {}).get("uid")
        return [str(shard_of(str(uid), self.shards))] if uid else []

    # -- questions -----------------------------------------------------------------------

    def ready(self) -> frozenset[int]:
        """The shards whose jobs this replica reconciles now."""
        return frozenset(self._ready)

    def shard_of_request(self, request: Request) -> int | None:
        """The shard of the job ``request`` names, None if it is not in the cache."""
        for inf in self.jobs:
            if inf.namespace not in (None, request.namespace):
                continue
            job = inf.store.get_by_name(request.namespace, request.name)
            if job is not None:
                return shard_of(str(job["metadata"]["uid"]), self.shards)
        return None

    def owns(self, request: Request, obj: Obj | None = None) -> bool:
        """Whether this replica reconciles ``request`` now.

        A job not in the cache (deleted, or, where the server splits the jobs, of a shard
        not held here) has its shard told by ``obj``, the object whose event named it,
        where that is one of its children (pod, Service, PodGroup, Workload): the UID in
        its controller reference. Then only the holder of that shard reconciles it (its
        reconcile forgets the job and lets the job's Workloads go): one writer, as for
        every other job. Without that, it passes where every job is cached (its reconcile
        only forgets), and not where the server splits them (another replica's job)."""
        shard = self.shard_of_request(request)
        if shard is None and obj is not None:
            shard = self._owner_shard(obj, request)
        if shard is None:
            return self.split_jobs is None
        return shard in self._ready

    def _owner_shard(self, obj: Obj, request: Request) -> int | None:
        """The shard of ``request``'s job as ``obj``'s controller reference to it says."""
        meta = obj.get("metadata") or {}
        if meta.get("namespace") != request.namespace:
            return None
        for ref in meta.get("ownerReferences") or ():
            if (
                ref.get("controller")
                and ref.get("kind") == c.KIND
                and ref.get("name") == request.name
                and ref.get("uid")
            ):
                return shard_of(str(ref["uid"]), self.shards)
        return None

    def owns_object(self, job: Obj) -> bool:
        """Whether ``job`` (an MSJob, also one just deleted) is of a shard ready here."""
        uid = (job.get("metadata") or {}).get("uid")
        return bool(uid) and shard_of(str(uid), self.shards) in self._ready

    def held(self, store: StateIndex) -> StateIndex:
        """``store``'s indexes narrowed to the jobs of the shards ready here: the job
        metrics of the replicas add up to every job once."""
        return _HeldIndex(store, self)

    def jobs_of(self, shard: int) -> builtins.list[Request]:
        """The keys of the cached jobs of ``shard``."""
        out = []
        for inf in self.jobs:
            for key in inf.store.index_keys(BY_SHARD, str(shard)):
                namespace, _, name = key.rpartition("/")
                out.append(Request(namespace, name))
        return out

    def counts(self, queued: Iterable[Request] = ()) -> Iterator[tuple[int, int, int]]:
        """(shard, cached jobs, of them in ``queued``) for the shards ready here."""
        waiting: dict[int, int] = {}
        for request in queued:
            shard = self.shard_of_request(request)
            if shard is not None:
                waiting[shard] = waiting.get(shard, 0) + 1
        for shard in sorted(self._ready):
            jobs = sum(len(inf.store.index_keys(BY_SHARD, str(shard))) for inf in self.jobs)
            yield shard, jobs, waiting.get(shard, 0)

    # -- ShardOwner ------------------------------------------------------------------------

    def drop(self, shard: int) -> None:
        if shard in self._ready:
            log.info("shard dropped: its reconciles stop", shard=shard)
        self._ready.discard(shard)
        for task in self._inflight.get(shard, ()):
            task.cancel()

    async def adopt(self, shard: int) -> None:
        await self._running.wait()
        assert self._tg is not None
        made: list[tuple[InformerUnion, SharedInformer]] = []
        tasks: list[asyncio.Task[None]] = []
        self._informers[shard], self._tasks[shard] = made, tasks
        wanted = [
            (union, inf)
            for res, union, base in self.children
            for inf in self.make(res, shard_selector(base, shard))
        ]
        if self.split_jobs is not None:
            jobs, make_jobs = self.split_jobs
            wanted += [(jobs, inf) for inf in make_jobs(shard_range_selector(shard, self.shards))]
        for union, inf in wanted:
            made.append((union, inf))
            tasks.append(self._tg.create_task(inf.run(), name=f"shard-{shard} {inf.resource}"))
        for _, inf in made:
            await inf.wait_for_sync()
        # One loop turn from here: ready, the children's events, the jobs enqueued.
        self._ready.add(shard)
        for union, inf in made:
            union.attach(inf)
        for request in self.jobs_of(shard):
            self.enqueue(request)
        log.info("shard adopted", shard=shard, jobs=len(self.jobs_of(shard)))

    async def release(self, shard: int) -> None:
        self.drop(shard)
        inflight = self._inflight.get(shard)
        if inflight:
            await asyncio.wait(set(inflight))
        # Its jobs before their informers go (with the server's split they go with them).
        jobs = self.jobs_of(shard)
        for union, inf in self._informers.pop(shard, []):
            union.detach(inf)
        unwritten = sum(self.forget(request) for request in jobs)
        if unwritten:
            # As at a stop: the Events of writes whose answers never came (the Lease was
            # lost mid-write) cannot be announced by anyone (the next holder sees them
            # stored, or not, and announces nothing); said, not lost silently.
            log.warning(
                "events not written: writes still in doubt when the shard was let go",
                shard=shard, count=unwritten,
            )  # fmt: skip
        tasks = self._tasks.pop(shard, [])
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    # -- runnable --------------------------------------------------------------------------

    async def run(self) -> None:
        """Run the shards' informers until cancelled."""
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            self._running.set()
            try:
                await asyncio.Future()
            finally:
                self._running.clear()
                self._tg = None

    # -- the gate's bookkeeping ------------------------------------------------------------

    def track(self, shard: int, task: asyncio.Task[Result]) -> None:
        """Count ``task`` among the reconciles of ``shard`` until it ends."""
        tasks = self._inflight.setdefault(shard, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)


class _HeldIndex:
    """A :class:`~msop.msjob.metrics.StateIndex` of the jobs in ready shards only. The set
    of their keys is made once per second at most (a scrape reads many index values)."""

    def __init__(self, store: StateIndex, shards: JobShards) -> None:
        self.store = store
        self.shards = shards
        self._keys: set[str] = set()
        self._made = -1.0

    def _held_keys(self) -> set[str]:
        now = time.monotonic()
        if now - self._made > 1.0:
            self._keys = {
                key
                for shard in self.shards.ready()
                for key in self.store.index_keys(BY_SHARD, str(shard))
            }
            self._made = now
        return self._keys

    def index_keys(self, index_name: str, value: str) -> builtins.list[str]:
        held = self._held_keys()
        return [k for k in self.store.index_keys(index_name, value) if k in held]

    def index_values(self, index_name: str) -> builtins.list[str]:
        return [v for v in self.store.index_values(index_name) if self.index_keys(index_name, v)]


class ShardGate:
    """A :class:`~msop.controller.reconcile.Reconciler` that runs ``inner`` only for the
    jobs of the shards ready here (see the module docstring). A reconcile cancelled
    because its shard was dropped ends with an empty Result (the key is forgotten: the
    next holder reconciles the job from the cluster's state)."""

    def __init__(self, inner: Reconciler, shards: JobShards) -> None:
        self.inner = inner
        self.shards = shards
        self._counters = [SHARD_RECONCILES.labels(str(i)) for i in range(shards.shards)]

    async def reconcile(self, request: Request) -> Result:
        shard = self.shards.shard_of_request(request)
        if shard is None:
            return await self.inner.reconcile(request)
        if shard not in self.shards.ready():
            return Result()
        self._counters[shard].inc()
        task = asyncio.ensure_future(self.inner.reconcile(request))
        self.shards.track(shard, task)
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            log.info("reconcile cancelled: the job's shard was dropped", shard=shard)
            return Result()

    def stopped(self) -> None:
        if isinstance(self.inner, StopAware):
            self.inner.stopped()


Owns = Callable[[Request, Obj], bool]
"""Whether a key, named by an event of this object, is reconciled here."""


class _OwnedQueue:
    def __init__(self, queue: RequestQueue, owns: Owns, objs: tuple[Obj, ...]) -> None:
        self.queue = queue
        self.owns = owns
        self.objs = objs

    def add(self, item: Request, *, priority: int = PRIORITY_NORMAL) -> None:
        if any(self.owns(item, obj) for obj in self.objs):
            self.queue.add(item, priority=priority)


class OwnedOnly:
    """An :class:`~msop.controller.handler.EventHandler` that passes on only the keys
    ``owns`` accepts (given the event's object; either version of an update's)."""

    def __init__(self, inner: EventHandler, owns: Owns) -> None:
        self.inner = inner
        self.owns = owns

    def create(self, obj: Obj, queue: RequestQueue, *, initial: bool = False) -> None:
        self.inner.create(obj, _OwnedQueue(queue, self.owns, (obj,)), initial=initial)

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        self.inner.update(old, new, _OwnedQueue(queue, self.owns, (new, old)))

    def delete(self, obj: Obj, queue: RequestQueue) -> None:
        self.inner.delete(obj, _OwnedQueue(queue, self.owns, (obj,)))


class OwnedJobs:
    """An :class:`~msop.controller.handler.EventHandler` of MSJob events that passes on
    only those of jobs of the shards ready here, by the event's job itself (a deleted job
    is no longer in the cache: only the holder of its shard hears of it)."""

    def __init__(self, inner: EventHandler, shards: JobShards) -> None:
        self.inner = inner
        self.shards = shards

    def create(self, obj: Obj, queue: RequestQueue, *, initial: bool = False) -> None:
        if self.shards.owns_object(obj):
            self.inner.create(obj, queue, initial=initial)

    def update(self, old: Obj, new: Obj, queue: RequestQueue) -> None:
        if self.shards.owns_object(new):
            self.inner.update(old, new, queue)

    def delete(self, obj: Obj, queue: RequestQueue) -> None:
        if self.shards.owns_object(obj):
            self.inner.delete(obj, queue)
