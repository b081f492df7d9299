"""The MSJob side of shards: children labelled at creation, the gate that runs only the
jobs of ready shards and stops a dropped shard's reconciles, the per-shard caches that join
and leave the controller's unions, and children without a label still read (adopted)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog.testing

from msop.api import constants as c
from msop.api.resources import MSJOBS
from msop.controller.handler import EnqueueRequestForObject, EnqueueRequestForOwner
from msop.controller.leaderelection import LeaderElectionConfig
from msop.controller.manager import Manager
from msop.controller.reconcile import Request, Result
from msop.controller.shardelection import ShardElection, ShardingConfig
from msop.controller.shards import shard_of, shard_range_selector, uid_hash
from msop.informers import SharedInformer
from msop.informers.store import BY_CONTROLLER_UID
from msop.informers.union import InformerUnion
from msop.kube import PODS, SERVICES, KubeClient
from msop.kube.errors import ApiError
from msop.kube.resources import LEASES, NODES, Resource
from msop.msjob import metrics
from msop.msjob.settings import Settings
from msop.msjob.setup import setup
from msop.msjob.sharding import JobShards, OwnedJobs, OwnedOnly, ShardGate, server_splits
from tests.support import builders as b
from tests.support.clients import NoApiServer

SHARDS = 4


def uid_in(shard: int, start: int = 0) -> str:
    """A UID that hashes to ``shard``."""
    i = start
    while shard_of(f"uid-{i}", SHARDS) != shard:
        i += 1
    return f"uid-{i}"


class Static(SharedInformer):
    """An informer filled by the test: synced at once, never lists."""

    def __init__(self, res: Resource, *objs: dict[str, Any], selector: str | None = None) -> None:
        super().__init__(KubeClient.__new__(KubeClient), res, label_selector=selector)
        self.replace(list(objs), "1")

    async def run(self) -> None:
        await asyncio.Future()


def msjob(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": "1"}}


def child(name: str, job_uid: str, shard: int | None) -> dict[str, Any]:
    labels = {c.LABEL_OPERATOR_NAME: c.OPERATOR_NAME}
    if shard is not None:
        labels[c.LABEL_SHARD] = str(shard)
    return {
        "metadata": {
            "namespace": "ns", "name": name, "uid": f"uid-{name}", "resourceVersion": "1",
            "labels": labels,
            "ownerReferences": [{"uid": job_uid, "controller": True, "kind": c.KIND,
                                 "apiVersion": c.API_VERSION, "name": "j"}],
        }
    }  # fmt: skip


def test_children_carry_their_jobs_shard_from_creation_and_no_label_without_shards() -> None:
    j = b.job()
    sharded = b.run(j, shard_of=functools.partial(shard_of, shards=SHARDS))
    plain = b.run(j)
    want = str(shard_of(j["metadata"]["uid"], SHARDS))
    assert sharded.create_pods and plain.create_pods
    for obj in sharded.create_pods + sharded.create_services:
        assert obj["metadata"]["labels"][c.LABEL_SHARD] == want
    for obj in plain.create_pods + plain.create_services:
        assert c.LABEL_SHARD not in obj["metadata"]["labels"]
    # Apart from the label, the same objects.
    for a, p in zip(sharded.create_pods, plain.create_pods, strict=True):
        labels = dict(a["metadata"]["labels"])
        del labels[c.LABEL_SHARD]
        assert {**a, "metadata": {**a["metadata"], "labels": labels}} == p


class World:
    """Two jobs in two shards, an unlabelled pod (made without shards) of the first."""

    def __init__(self) -> None:
        self.mine, self.other = 1, 2
        self.uid_mine, self.uid_other = uid_in(self.mine), uid_in(self.other)
        self.jobs = Static(MSJOBS, msjob("mine", self.uid_mine), msjob("other", self.uid_other))
        legacy_selector = "!" + c.LABEL_SHARD
        self.pods = InformerUnion([Static(PODS, child("mine-old", self.uid_mine, None),
                                          child("other-old", self.uid_other, None),
                                          selector=legacy_selector)])  # fmt: skip
        self.services = InformerUnion([Static(SERVICES, selector=legacy_selector)])
        self.enqueued: list[Request] = []
        self.forgotten: list[Request] = []
        self.made: list[tuple[Resource, str]] = []
        self.shards = JobShards(
            SHARDS, [self.jobs],
            [(PODS, self.pods, "base"), (SERVICES, self.services, "base")],
            self.make, self.enqueued.append, self.forget,
        )  # fmt: skip

    def forget(self, request: Request) -> int:
        """The reconciler's: drops the job's memory, says how many Events of writes in
        doubt go with it (2 here)."""
        self.forgotten.append(request)
        return 2

    def make(self, res: Resource, selector: str) -> list[SharedInformer]:
        self.made.append((res, selector))
        shard = int(selector.rsplit("=", 1)[1])
        objs = [child("mine-new", self.uid_mine, shard)] if res == PODS and shard == 1 else []
        return [Static(res, *objs, selector=selector)]


async def test_adopting_a_shard_watches_its_children_and_enqueues_its_jobs_only() -> None:
    w = World()
    runner = asyncio.create_task(w.shards.run())
    try:
        await w.shards.adopt(w.mine)
        assert w.shards.ready() == {w.mine}
        assert w.made == [(PODS, f"base,{c.LABEL_SHARD}=1"), (SERVICES, f"base,{c.LABEL_SHARD}=1")]
        assert w.enqueued == [Request("ns", "mine")]
        # The job's children: the labelled one from the shard's cache, the unlabelled one
        # (adopted) from the cache of children without a shard.
        names = sorted(
            p["metadata"]["name"] for p in w.pods.by_index(BY_CONTROLLER_UID, w.uid_mine)
        )
        assert names == ["mine-new", "mine-old"]
        assert w.shards.owns(Request("ns", "mine")) and not w.shards.owns(Request("ns", "other"))
        assert w.shards.owns(Request("ns", "gone"))  # not cached: its reconcile only forgets
        assert list(w.shards.counts()) == [(w.mine, 1, 0)]
        queued = [Request("ns", "mine"), Request("ns", "other"), Request("ns", "gone")]
        assert list(w.shards.counts(queued)) == [(w.mine, 1, 1)]

        with structlog.testing.capture_logs() as logged:
            await w.shards.release(w.mine)
        assert w.shards.ready() == set()
        # What the reconciler remembers of the shard's jobs goes: a write cancelled by the
        # hand-over may never show, and the next hold starts from the cluster alone. The
        # Events of its writes in doubt go too, and are said to go, as at a stop.
        assert w.forgotten == [Request("ns", "mine")]
        said = [e for e in logged if e["event"].startswith("events not written")]
        assert [(e["shard"], e["count"]) for e in said] == [(w.mine, 2)]
        assert len(w.pods.members) == 1  # the shard's cache left the union
        names = sorted(
            p["metadata"]["name"] for p in w.pods.by_index(BY_CONTROLLER_UID, w.uid_mine)
        )
        assert names == ["mine-old"]
        assert not w.shards.owns(Request("ns", "mine"))
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


class Inner:
    def __init__(self) -> None:
        self.started: list[Request] = []
        self.finished: list[Request] = []
        self.gate = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.started.append(request)
        await self.gate.wait()
        self.finished.append(request)
        return Result(requeue_after=5)


async def test_the_gate_runs_only_ready_shards_and_a_drop_cancels_their_reconciles() -> None:
    w = World()
    inner = Inner()
    gate = ShardGate(inner, w.shards)
    runner = asyncio.create_task(w.shards.run())
    try:
        assert await gate.reconcile(Request("ns", "mine")) == Result()
        assert inner.started == []  # not ready here: not reconciled
        await w.shards.adopt(w.mine)
        running = asyncio.create_task(gate.reconcile(Request("ns", "mine")))
        await asyncio.sleep(0.01)
        assert inner.started == [Request("ns", "mine")]
        w.shards.drop(w.mine)  # the Lease is lost: at once, no waiting
        assert await running == Result()
        assert inner.finished == []  # cancelled mid-way: nothing after the drop
        assert await gate.reconcile(Request("ns", "mine")) == Result()
        assert len(inner.started) == 1
        # A job not in the cache passes (its reconcile forgets, writes nothing).
        inner.gate.set()
        assert await gate.reconcile(Request("ns", "gone")) == Result(requeue_after=5)
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


async def test_the_gate_passes_its_own_cancellation_on() -> None:
    w = World()
    inner = Inner()
    gate = ShardGate(inner, w.shards)
    runner = asyncio.create_task(w.shards.run())
    try:
        await w.shards.adopt(w.mine)
        running = asyncio.create_task(gate.reconcile(Request("ns", "mine")))
        await asyncio.sleep(0.01)
        running.cancel()  # the controller stops: not swallowed as a dropped shard
        with pytest.raises(asyncio.CancelledError):
            await running
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


def test_only_keys_of_owned_shards_reach_the_queue() -> None:
    added: list[Request] = []

    class Queue:
        def add(self, item: Request, *, priority: int = 0) -> None:
            added.append(item)

    handler = OwnedOnly(EnqueueRequestForObject(), lambda r, obj: r.name == "mine")
    handler.create(msjob("mine", "u1"), Queue())
    handler.create(msjob("other", "u2"), Queue())
    handler.update(msjob("other", "u2"), msjob("other", "u2"), Queue())
    handler.delete(msjob("mine", "u1"), Queue())
    assert added == [Request("ns", "mine"), Request("ns", "mine")]


def test_setup_with_shards_watches_unlabelled_children_and_gates_the_reconciler() -> None:
    manager = Manager(NoApiServer(), metrics_bind_address="0", health_probe_bind_address="0")
    election = LeaderElectionConfig(name="msop", namespace="ns", identity="a")
    controller = setup(
        manager, Settings(progress_port=0, sharding=ShardingConfig(SHARDS, election))
    )
    assert isinstance(controller.reconciler, ShardGate)
    selectors = {(i.resource.kind, i.label_selector) for i in manager.informers.informers()}
    base = f"{c.LABEL_OPERATOR_NAME}={c.OPERATOR_NAME}"
    assert selectors == {
        ("MSJob", None), ("Pod", f"{base},!{c.LABEL_SHARD}"),
        ("Service", f"{base},!{c.LABEL_SHARD}"), ("Node", None),
    }  # fmt: skip
    # The nodes are every shard's; a node's events enqueue only the jobs held here.
    [node_watch] = [w for w in controller._watches if getattr(w.source, "resource", None) == NODES]
    assert isinstance(node_watch.handler, OwnedOnly)
    runnables = [type(e.runnable) for e in manager._entries]
    assert ShardElection in runnables and JobShards in runnables

    plain = Manager(NoApiServer(), metrics_bind_address="0", health_probe_bind_address="0")
    one = ShardingConfig(1, election)
    assert not isinstance(
        setup(plain, Settings(progress_port=0, sharding=one)).reconciler, ShardGate
    )


async def test_job_metrics_count_only_the_jobs_of_held_shards() -> None:
    w = World()
    w.jobs.add_indexers({metrics.BY_JOB_STATE: metrics.job_state_index})
    held = w.shards.held(w.jobs.store)
    assert list(metrics.state_counts(w.jobs.store)) == [("ns", "None", 2)]
    assert list(metrics.state_counts(held)) == []
    assert not w.shards.owns_object(msjob("mine", w.uid_mine))
    runner = asyncio.create_task(w.shards.run())
    try:
        await w.shards.adopt(w.mine)
        held = w.shards.held(w.jobs.store)  # a fresh view: a view's keys live a second
        assert list(metrics.state_counts(held)) == [("ns", "None", 1)]
        assert w.shards.owns_object(msjob("mine", w.uid_mine))
        assert not w.shards.owns_object(msjob("other", w.uid_other))
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


class SplitWorld(World):
    """As :class:`World`, where the API server splits the MSJobs: the jobs' cache is a
    union, empty until a shard's informers (by its hash range) join it."""

    def __init__(self) -> None:
        super().__init__()
        self.all_jobs = [msjob("mine", self.uid_mine), msjob("other", self.uid_other)]
        self.job_union = InformerUnion()
        self.job_selectors: list[str] = []
        self.shards = JobShards(
            SHARDS, [self.job_union],
            [(PODS, self.pods, "base"), (SERVICES, self.services, "base")],
            self.make, self.enqueued.append, self.forget,
            split_jobs=(self.job_union, self.make_jobs),
        )  # fmt: skip

    def make_jobs(self, selector: str) -> list[SharedInformer]:
        """The server's answer: the jobs whose UID's hash is in the selector's range."""
        self.job_selectors.append(selector)
        start, end = (int(h, 16) for h in selector.split("'")[1::2])
        objs = [j for j in self.all_jobs if start <= uid_hash(j["metadata"]["uid"]) < end]
        inf = Static(MSJOBS, *objs)
        inf.shard_selector = selector
        return [inf]


async def test_where_the_server_splits_jobs_a_replica_caches_only_its_shards_jobs() -> None:
    w = SplitWorld()
    runner = asyncio.create_task(w.shards.run())
    try:
        assert not w.shards.owns_object(msjob("mine", w.uid_mine))
        assert w.job_union.get("mine", "ns") is None  # nothing cached before a shard is held
        await w.shards.adopt(w.mine)
        assert w.job_selectors == [shard_range_selector(w.mine, SHARDS)]
        assert w.enqueued == [Request("ns", "mine")]
        assert w.job_union.get("mine", "ns") is not None
        assert w.job_union.get("other", "ns") is None  # another shard's: never listed here
        assert w.shards.owns(Request("ns", "mine"))
        assert w.shards.jobs_of(w.mine) == [Request("ns", "mine")]
        assert list(w.shards.counts()) == [(w.mine, 1, 0)]
        await w.shards.release(w.mine)
        # The shard's jobs were forgotten although their cache left with the shard.
        assert w.forgotten == [Request("ns", "mine")]
        assert w.job_union.members == [] and w.job_union.get("mine", "ns") is None
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


class SplittingServer(NoApiServer):
    """Answers the probe list as a server with (or without) the ``ShardedListAndWatch``
    gate does: the selector echoed in ``metadata.shardInfo``, or ignored."""

    def __init__(self, splits: bool | Exception) -> None:
        super().__init__()
        self.splits = splits
        self.asked: list[dict[str, Any]] = []

    async def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        self.asked.append({"res": res, "namespace": namespace, **kw})
        if isinstance(self.splits, Exception):
            raise self.splits
        meta: dict[str, Any] = {"resourceVersion": "5"}
        if self.splits:
            meta["shardInfo"] = {"selector": kw["shard_selector"]}
        return {"metadata": meta, "items": []}


async def test_a_replica_asks_the_api_server_once_whether_it_splits_watches() -> None:
    server = SplittingServer(True)
    assert await server_splits(server, "msop-system")
    [asked] = server.asked  # of the Leases: 1.36 leaves shardInfo out of an MSJob list
    assert asked["res"] == LEASES and asked["namespace"] == "msop-system"
    assert asked["limit"] == 1
    whole = "shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')"
    assert asked["shard_selector"] == whole
    assert not await server_splits(SplittingServer(False), "msop-system")
    refused = ApiError(400, "BadRequest", "invalid shard selector")
    assert not await server_splits(SplittingServer(refused), "msop-system")


def test_setup_where_the_server_splits_jobs_has_no_informer_of_every_job() -> None:
    manager = Manager(NoApiServer(), metrics_bind_address="0", health_probe_bind_address="0")
    election = LeaderElectionConfig(name="msop", namespace="ns", identity="a")
    sharding = ShardingConfig(SHARDS, election, server_split=True)
    controller = setup(manager, Settings(progress_port=0, sharding=sharding))
    assert isinstance(controller.reconciler, ShardGate)
    kinds = {i.resource.kind for i in manager.informers.informers()}
    assert "MSJob" not in kinds
    [shards] = [e.runnable for e in manager._entries if isinstance(e.runnable, JobShards)]
    assert shards.split_jobs is not None
    union, make_jobs = shards.split_jobs
    assert shards.jobs == [union]
    [inf] = make_jobs(shard_range_selector(3, SHARDS))
    assert inf.resource == MSJOBS and inf.shard_selector == shard_range_selector(3, SHARDS)


def workload(job: str, job_uid: str) -> dict[str, Any]:
    """A child that is not cached by shard (a Kueue Workload): every replica sees it."""
    return {**child(f"{job}-wl", job_uid, None), "kind": "Workload"}


class Added(list[Request]):
    """A queue that keeps what is added to it."""

    def add(self, item: Request, *, priority: int = 0) -> None:
        self.append(item)


@contextlib.asynccontextmanager
async def holding(w: World, shard: int) -> AsyncIterator[None]:
    """``w``'s shards running, ``shard`` adopted."""
    runner = asyncio.create_task(w.shards.run())
    try:
        await w.shards.adopt(shard)
        yield
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


@pytest.mark.parametrize("split", [False, True])
async def test_a_gone_jobs_children_are_reconciled_by_its_shards_holder_alone(split: bool) -> None:
    """A job no longer cached (deleted; or, where the server splits the jobs, another
    replica's): its children's events reach only the holder of its shard, which the UID
    in their controller reference tells. So one replica, not every one, lets a deleted
    job's Workloads go."""
    w = SplitWorld() if split else World()
    async with holding(w, w.mine):
        added = Added()
        handler = OwnedOnly(EnqueueRequestForOwner(c.API_VERSION, c.KIND), w.shards.owns)
        for gone, uid in (("gone-mine", uid_in(w.mine, 1000)), ("gone-other", uid_in(w.other))):
            wl = workload(gone, uid)
            wl["metadata"]["ownerReferences"][0]["name"] = gone
            handler.update(wl, wl, added)
        assert added == [Request("ns", "gone-mine")]
        # With nothing to tell the shard (a node's event), a job not cached passes where
        # every job is cached (its reconcile only forgets), not where the server splits.
        assert w.shards.owns(Request("ns", "unknown")) is (not split)
        assert w.shards.owns(Request("ns", "mine")) and not w.shards.owns(Request("ns", "other"))


async def test_job_events_reach_the_holder_of_the_jobs_shard_deletes_included() -> None:
    w = World()
    async with holding(w, w.mine):
        added = Added()
        handler = OwnedJobs(EnqueueRequestForObject(), w.shards)
        mine, other = msjob("mine", w.uid_mine), msjob("other", w.uid_other)
        for job in (mine, other):
            handler.create(job, added)
            handler.update(job, job, added)
        # Deleted jobs are gone from the cache: the event's job says whose they are.
        handler.delete(msjob("mine-deleted", uid_in(w.mine, 500)), added)
        handler.delete(msjob("other-deleted", uid_in(w.other, 500)), added)
        assert [r.name for r in added] == ["mine", "mine", "mine-deleted"]
