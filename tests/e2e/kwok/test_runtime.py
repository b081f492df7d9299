"""The generic runtime on a real control plane, through a toy controller written here.

The toy controller uses ``msop.controller`` and ``msop.informers`` alone: for every
ConfigMap without the ``toy.msop.io/copy-of`` label it keeps ``<name>-copy`` with the same
data, owned (controller reference) by the source.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from msop.controller import (
    Controller,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
    EventRecorder,
    LeaderElectionConfig,
    LeaderElectionLost,
    Manager,
    Request,
    Result,
)
from msop.controller.handler import request_for
from msop.informers import SharedInformer
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, is_already_exists
from msop.kube.resources import CONFIGMAPS, EVENTS, LEASES
from testbed import LocalCluster
from testbed.exposition import read_samples
from tests.e2e.leases import LeaseRecords, lease_time

COPY_OF = "toy.msop.io/copy-of"


class CopyReconciler:
    """Makes ``<name>-copy`` mirror the data of source ConfigMap ``<name>``."""

    def __init__(
        self, client: KubeClient, informer: SharedInformer, recorder: EventRecorder | None
    ) -> None:
        self.client = client
        self.informer = informer
        self.recorder = recorder
        self.calls: list[Request] = []

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        source = self.informer.store.get(f"{request.namespace}/{request.name}")
        if source is None or COPY_OF in (source["metadata"].get("labels") or {}):
            return Result()  # deleted (GC removes the copy) or not a source
        name = f"{request.name}-copy"
        desired: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": request.namespace,
                "labels": {COPY_OF: request.name},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "name": request.name,
                        "uid": source["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "data": dict(source.get("data") or {}),
        }
        current = self.informer.store.get(f"{request.namespace}/{name}")
        if current is None:
            try:
                await self.client.create(CONFIGMAPS, desired)
            except ApiError as e:
                if not is_already_exists(e):
                    raise
                return Result(requeue=True)  # cache is behind; look again
        elif (current.get("data") or {}) != desired["data"]:
            desired["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await self.client.replace(CONFIGMAPS, desired)
        if self.recorder is not None:
            self.recorder.event(source, "Normal", "Copied", f"copied into {name}")
        return Result()


def toy_manager(
    client: KubeClient,
    namespace: str,
    *,
    name: str,
    leader_election: LeaderElectionConfig | None = None,
) -> tuple[Manager, CopyReconciler]:
    """The ~10 lines a user writes to wire a controller into a manager."""
    mgr = Manager(
        client,
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        leader_election=leader_election,
        graceful_shutdown_timeout=5,
    )
    cms = mgr.informers.informer_for(CONFIGMAPS, namespace=namespace)
    reconciler = CopyReconciler(client, cms, mgr.event_recorder(f"toy-{name}"))
    ctrl = Controller(name, reconciler, max_concurrent_reconciles=2)
    # A source ConfigMap enqueues itself; a copy (labelled) enqueues its owner instead.
    not_a_copy = EnqueueRequestsFromMapFunc(
        lambda o: [] if COPY_OF in (o["metadata"].get("labels") or {}) else [request_for(o)]
    )
    ctrl.watch(cms, not_a_copy)
    ctrl.watch(cms, EnqueueRequestForOwner("v1", "ConfigMap"))
    mgr.add(ctrl)
    return mgr, reconciler


@pytest.fixture
async def kube(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_config(cluster.kubeconfig)
    try:
        yield client
    finally:
        await client.close()


async def eventually(what: str, check: Any, within: float = 30) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
            if last:
                return last
        except ApiError as e:
            last = e
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


async def copy_data(kube: KubeClient, ns: str, name: str) -> dict[str, str] | None:
    try:
        cm = await kube.get(CONFIGMAPS, f"{name}-copy", ns)
    except ApiError:
        return None
    data: dict[str, str] = cm.get("data") or {}
    return data


def source(ns: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def lease_config(ns: str, identity: str, *, release: bool = True) -> LeaderElectionConfig:
    return LeaderElectionConfig(
        name="toy-leader",
        namespace=ns,
        identity=identity,
        lease_duration=3,
        renew_deadline=2,
        retry_period=0.5,
        release_on_cancel=release,
    )


async def test_toy_controller_copies_and_follows_updates(kube: KubeClient, namespace: str) -> None:
    mgr, reconciler = toy_manager(kube, namespace, name="toy-copy")
    task = asyncio.create_task(mgr.run())
    try:
        # One object exists before the manager starts (initial list), one comes later.
        await kube.create(CONFIGMAPS, source(namespace, "early", {"a": "1"}), namespace)
        await mgr.wait_until_leader()
        await kube.create(CONFIGMAPS, source(namespace, "late", {"b": "2"}), namespace)
        for name, data in (("early", {"a": "1"}), ("late", {"b": "2"})):
            await eventually(
                f"{name}-copy", lambda n=name, d=data: _equals(copy_data(kube, namespace, n), d)
            )
        cm = await kube.get(CONFIGMAPS, "late", namespace)
        cm["data"] = {"b": "3", "c": "4"}
        await kube.replace(CONFIGMAPS, cm)
        await eventually(
            "update copied", lambda: _equals(copy_data(kube, namespace, "late"), cm["data"])
        )
        # Drift in the copy is repaired: the owner handler maps it back to the source.
        copy = await kube.get(CONFIGMAPS, "late-copy", namespace)
        copy["data"] = {"tampered": "yes"}
        await kube.replace(CONFIGMAPS, copy)
        await eventually(
            "drift repaired", lambda: _equals(copy_data(kube, namespace, "late"), cm["data"])
        )

        # Repeated events on one object aggregate into one Event with a count.
        async def aggregated() -> bool:
            events = await kube.list(
                EVENTS, namespace, field_selector="involvedObject.name=late,reason=Copied"
            )
            return len(events["items"]) == 1 and events["items"][0].get("count", 0) >= 2

        await eventually("aggregated event", aggregated)
        # The copy's own events map to its owner, never to the copy itself.
        assert Request(namespace, "late-copy") not in reconciler.calls
    finally:
        await stop(task)


async def _equals(aw: Any, expected: dict[str, str]) -> bool:
    return bool(await aw == expected)


async def test_leader_election_one_leader_kill_and_release(
    kube: KubeClient, namespace: str
) -> None:
    # A does not release its lease when cancelled: that is a crash as far as B can tell.
    a, rec_a = toy_manager(
        kube,
        namespace,
        name="toy-le-a",
        leader_election=lease_config(namespace, "replica-a", release=False),
    )
    b, rec_b = toy_manager(
        kube, namespace, name="toy-le-b", leader_election=lease_config(namespace, "replica-b")
    )
    records = await LeaseRecords.follow(kube, namespace, "toy-leader")
    task_a = asyncio.create_task(a.run())
    await a.wait_until_leader()
    task_b = asyncio.create_task(b.run())
    c_task: asyncio.Task[None] | None = None
    try:
        await b.wait_for_sync()
        await kube.create(CONFIGMAPS, source(namespace, "one", {"x": "1"}), namespace)
        await eventually(
            "copy by A", lambda: _equals(copy_data(kube, namespace, "one"), {"x": "1"})
        )
        await asyncio.sleep(1.5)  # several retry periods: B must stay a follower
        assert a.is_leader() and not b.is_leader()
        assert rec_a.calls and not rec_b.calls
        lease = await kube.get(LEASES, "toy-leader", namespace)
        assert lease["spec"]["holderIdentity"] == "replica-a"

        # Kill A without release: B takes over once A's lease has expired, not before.
        # Judged from the Lease's own times (written by A and B on this machine's clock):
        # B's acquireTime is at least a lease duration after A's last renewTime. Both are
        # MicroTimes (microseconds), so no allowance for a coarse resolution is needed.
        await stop(task_a)
        await asyncio.wait_for(b.wait_until_leader(), 60)  # a hang guard, not a bound
        taken = await eventually("the record after A's", lambda: records.record_after("replica-a"))
        assert taken["holderIdentity"] == "replica-b", records.specs
        last_renew = lease_time(records.last_of("replica-a"), "renewTime")
        gap = (lease_time(taken, "acquireTime") - last_renew).total_seconds()
        assert gap >= 3.0, f"B took over {gap:.2f}s after A's last renewal (lease 3s)"
        await kube.create(CONFIGMAPS, source(namespace, "two", {"y": "2"}), namespace)
        await eventually(
            "copy by B", lambda: _equals(copy_data(kube, namespace, "two"), {"y": "2"})
        )
        assert any(r.name == "two" for r in rec_b.calls)
        assert not any(r.name == "two" for r in rec_a.calls)
        lease = await kube.get(LEASES, "toy-leader", namespace)
        assert lease["spec"]["holderIdentity"] == "replica-b"
        assert lease["spec"]["leaseTransitions"] >= 1

        # Graceful stop of B releases the lease: C takes over at once, not after 3 s.
        c, _ = toy_manager(
            kube, namespace, name="toy-le-c", leader_election=lease_config(namespace, "replica-c")
        )
        c_task = asyncio.create_task(c.run())
        await c.wait_for_sync()
        await asyncio.sleep(1.0)
        assert not c.is_leader()
        b.stop()
        await task_b
        await asyncio.wait_for(c.wait_until_leader(), 60)  # a hang guard, not a bound
        release = await eventually("B's release", lambda: records.record_after("replica-b"))
        assert release["holderIdentity"] == "", f"B did not release: {records.specs}"
        taken = await eventually("the record after the release", lambda: records.record_after(""))
        assert taken["holderIdentity"] == "replica-c", records.specs
        # From the Lease's own times again: had C ignored the release, it would have
        # waited a lease duration (3 s) from when it saw the released record.
        released = lease_time(release, "renewTime")
        gap = (lease_time(taken, "acquireTime") - released).total_seconds()
        assert gap < 3.0, f"C took the lease {gap:.2f}s after the release: it waited for expiry"
    finally:
        await records.close()
        for t in (task_a, task_b, c_task):
            if t is not None and not t.done():
                await stop(t)


async def test_lost_lease_makes_run_raise(kube: KubeClient, namespace: str) -> None:
    mgr, _ = toy_manager(
        kube, namespace, name="toy-lost", leader_election=lease_config(namespace, "victim")
    )
    task = asyncio.create_task(mgr.run())
    try:
        await mgr.wait_until_leader()
        lease = await kube.get(LEASES, "toy-leader", namespace)
        lease["spec"]["holderIdentity"] = "intruder"
        await kube.replace(LEASES, lease)
        with pytest.raises(LeaderElectionLost):
            await asyncio.wait_for(task, 60)  # a hang guard, not a bound
        assert not mgr.is_leader()
    finally:
        if not task.done():
            await stop(task)


EXPECTED_METRICS = {
    "controller_runtime_reconcile_total",
    "controller_runtime_reconcile_errors_total",
    "controller_runtime_terminal_reconcile_errors_total",
    "controller_runtime_reconcile_panics_total",
    "controller_runtime_reconcile_time_seconds_bucket",
    "controller_runtime_max_concurrent_reconciles",
    "controller_runtime_active_workers",
    "workqueue_depth",
    "workqueue_adds_total",
    "workqueue_queue_duration_seconds_bucket",
    "workqueue_work_duration_seconds_bucket",
    "workqueue_retries_total",
    "workqueue_unfinished_work_seconds",
    "workqueue_longest_running_processor_seconds",
    "leader_election_master_status",
    "rest_client_requests_total",
}


async def test_metrics_endpoint_parses_and_has_runtime_names(
    kube: KubeClient, namespace: str
) -> None:
    mgr, _ = toy_manager(
        kube, namespace, name="toy-metrics", leader_election=lease_config(namespace, "m")
    )
    task = asyncio.create_task(mgr.run())
    try:
        await mgr.wait_until_leader()
        await kube.create(CONFIGMAPS, source(namespace, "m", {"k": "v"}), namespace)
        await eventually("copy", lambda: _equals(copy_data(kube, namespace, "m"), {"k": "v"}))
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{mgr.metrics_port}/metrics") as resp,
        ):
            assert resp.status == 200
            text = await resp.text()
        samples: dict[str, set[tuple[tuple[str, str], ...]]] = {}
        for s in read_samples(text):
            samples.setdefault(s.name, set()).add(tuple(sorted(s.labels.items())))
        missing = EXPECTED_METRICS - samples.keys()
        assert not missing, f"missing metrics: {sorted(missing)}"
        assert (("controller", "toy-metrics"), ("result", "success")) in samples[
            "controller_runtime_reconcile_total"
        ]
        assert (("name", "toy-metrics"),) in samples["workqueue_depth"]
        assert (("name", "toy-leader"),) in samples["leader_election_master_status"]
    finally:
        await stop(task)
