"""Informers against the real API server: convergence, cut connections, stuck watches."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

import pytest

from msop.informers import (
    DeletedFinalStateUnknown,
    InformerFactory,
    ReflectorOptions,
    SharedInformer,
)
from msop.kube import CONFIGMAPS, ApiError, KubeClient, is_not_found
from msop.metrics import REGISTRY


@pytest.fixture
async def client(cluster: Any) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_config(cluster.kubeconfig, user_agent="msop-e2e") as c:
        yield c


async def eventually(predicate: Callable[[], bool], within: float = 15.0) -> None:
    """Poll ``predicate`` until true; TimeoutError after ``within`` seconds."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - polling a plain predicate is the point
            await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def running(factory: InformerFactory) -> AsyncIterator[None]:
    async with asyncio.TaskGroup() as tg:
        task = tg.create_task(factory.run())
        try:
            await factory.wait_for_sync(timeout=30)
            yield
        finally:
            task.cancel()


def cm(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


class Recorder:
    """Keeps what handlers saw: the last state per key and the list of notifications."""

    def __init__(self, informer: SharedInformer) -> None:
        self.seen: dict[str, dict[str, Any]] = {}
        self.deleted: set[str] = set()
        self.log: list[tuple[Any, ...]] = []
        informer.add_event_handler(self.on_add, self.on_update, self.on_delete)

    @staticmethod
    def key(obj: dict[str, Any]) -> str:
        return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"

    def on_add(self, obj: dict[str, Any], is_initial_list: bool) -> None:
        self.seen[self.key(obj)] = obj
        self.deleted.discard(self.key(obj))
        self.log.append(("add", obj["metadata"]["name"], is_initial_list))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.seen[self.key(new)] = new
        self.log.append(("update", new["metadata"]["name"]))

    def on_delete(self, obj: dict[str, Any]) -> None:
        last = obj
        self.seen.pop(self.key(last), None)
        self.deleted.add(self.key(last))
        self.log.append(
            ("delete", last["metadata"]["name"], isinstance(obj, DeletedFinalStateUnknown))
        )


async def server_state(client: KubeClient, namespace: str) -> dict[str, str]:
    listed = await client.list_all(CONFIGMAPS, namespace)
    return {
        f"{o['metadata']['namespace']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"]
        for o in listed["items"]
    }


def restarts(resource: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "informer_watch_restarts_total", {"resource": resource, "reason": reason}
    )
    return value or 0.0


def watching(resource: str) -> float | None:
    return REGISTRY.get_sample_value("informer_watching", {"resource": resource})


async def test_informer_lists_watches_and_converges(client: KubeClient, namespace: str) -> None:
    await client.create(CONFIGMAPS, cm("before", namespace, a="1"))
    factory = InformerFactory(client)
    informer = factory.informer_for(CONFIGMAPS, namespace)
    rec = Recorder(informer)
    async with running(factory):
        assert ("add", "before", True) in rec.log
        assert informer.has_synced()
        cached = informer.store.get(f"{namespace}/before")
        assert cached is not None and "managedFields" not in cached["metadata"]

        created = await client.create(CONFIGMAPS, cm("x", namespace, a="1"))
        await eventually(lambda: f"{namespace}/x" in informer.store)
        assert ("add", "x", False) in rec.log

        await client.patch(CONFIGMAPS, "x", {"data": {"a": "2"}}, namespace)
        await eventually(
            lambda: (informer.store.get(f"{namespace}/x") or {}).get("data") == {"a": "2"}
        )
        assert ("update", "x") in rec.log
        assert rec.seen[f"{namespace}/x"]["data"] == {"a": "2"}

        await client.delete(CONFIGMAPS, "x", namespace, uid_precondition=created["metadata"]["uid"])
        await eventually(lambda: f"{namespace}/x" not in informer.store)
        assert ("delete", "x", False) in rec.log
        assert informer.statistics().events >= 3
        assert informer.last_sync_resource_version

        # the same scope gives the same informer; a late handler gets the cache replayed
        assert factory.informer_for(CONFIGMAPS, namespace) is informer
        late: list[tuple[str, bool]] = []
        informer.add_event_handler(
            on_add=lambda o, initial: late.append((o["metadata"]["name"], initial))
        )
        # (kube-root-ca.crt may or may not have been published into the namespace yet)
        assert ("before", True) in late and all(initial for _, initial in late)
        assert len(late) == len(informer.store)

        # an informer requested while the factory runs is started by it
        scoped = factory.informer_for(CONFIGMAPS, namespace, field_selector="metadata.name=before")
        await factory.wait_for_sync(timeout=10)
        assert [o["metadata"]["name"] for o in scoped.store.list()] == ["before"]
        await eventually(lambda: watching(str(CONFIGMAPS)) == 1)
    # a stopped informer no longer follows the API server
    assert watching(str(CONFIGMAPS)) == 0


async def test_cache_converges_after_watch_connections_are_cut(
    client: KubeClient, namespace: str
) -> None:
    options = ReflectorOptions(backoff_initial=0.1, backoff_cap=0.5)
    factory = InformerFactory(client, options=options)
    informer = factory.informer_for(CONFIGMAPS, namespace)
    rec = Recorder(informer)
    names = [f"cm-{i}" for i in range(12)]
    async with running(factory):
        before = informer.statistics().watch_restarts.get("error", 0)
        for round_ in range(4):
            for i, name in enumerate(names):
                if round_ == 0:
                    await client.create(CONFIGMAPS, cm(name, namespace, r="0"))
                elif (i + round_) % 5 == 0:
                    with contextlib.suppress(Exception):
                        await client.delete(CONFIGMAPS, name, namespace)
                else:
                    try:
                        await client.patch(
                            CONFIGMAPS, name, {"data": {"r": str(round_)}}, namespace
                        )
                    except Exception as e:
                        if not is_not_found(e):
                            raise
                        await client.create(CONFIGMAPS, cm(name, namespace, r=str(round_)))
                if i % 4 == 0:
                    cut_watch_connections(client)
        want = await server_state(client, namespace)
        await eventually(
            lambda: {k: o["metadata"]["resourceVersion"] for k, o in rec.seen.items()} == want,
            within=30,
        )
        cached = {k: o["metadata"]["resourceVersion"] for k, o in informer.store.items()}
        assert cached == want
        assert {f"{namespace}/{n}" for n in names} - set(want) <= rec.deleted
        assert informer.statistics().watch_restarts.get("error", 0) > before


def cut_watch_connections(client: KubeClient) -> None:
    """Drop every open connection of the client's HTTP pool (the watch among them)."""
    connector = client.transport.session.connector
    for proto in list(getattr(connector, "_acquired", ())):
        transport = proto.transport
        if transport is not None:
            transport.abort()


async def test_stuck_watch_is_restarted_and_cache_still_converges(
    client: KubeClient, namespace: str
) -> None:
    # An idle namespace sends nothing for ~60 s (until a bookmark), so a 1 s bound trips.
    factory = InformerFactory(client, options=ReflectorOptions(stall_timeout=1.0))
    informer = factory.informer_for(CONFIGMAPS, namespace, label_selector="stall=test")
    metric_before = restarts("configmaps", "stalled")
    async with running(factory):
        await eventually(lambda: informer.statistics().watch_restarts.get("stalled", 0) >= 2, 10)
        assert restarts("configmaps", "stalled") >= metric_before + 2
        body = cm("s", namespace, v="1")
        body["metadata"]["labels"] = {"stall": "test"}
        await client.create(CONFIGMAPS, body)
        await client.create(CONFIGMAPS, cm("unlabelled", namespace))
        await eventually(lambda: f"{namespace}/s" in informer.store)
        await asyncio.sleep(1.5)  # at least one more stall restart in between
        await client.patch(CONFIGMAPS, "s", {"data": {"v": "2"}}, namespace)
        await eventually(
            lambda: (informer.store.get(f"{namespace}/s") or {}).get("data") == {"v": "2"}
        )
        assert f"{namespace}/unlabelled" not in informer.store  # the selector scopes the cache
        assert informer.statistics().lists == 1  # stalls re-watch; they do not relist


async def test_watch_metrics_count_requests(client: KubeClient, namespace: str) -> None:
    before = (
        REGISTRY.get_sample_value(
            "rest_client_requests_total", {"code": "200", "method": "GET", "host": client.host}
        )
        or 0.0
    )
    factory = InformerFactory(client)
    factory.informer_for(CONFIGMAPS, namespace)
    async with running(factory):
        await asyncio.sleep(0.2)
    after = REGISTRY.get_sample_value(
        "rest_client_requests_total", {"code": "200", "method": "GET", "host": client.host}
    )
    assert after is not None and after >= before + 2  # the list and the watch


class GoneOnce(KubeClient):
    """A real client whose first watch is held open, then fails with 410 Expired.

    The API server's watch cache decides on its own when a resourceVersion is too old, so
    a real 410 cannot be produced on demand; everything but that one answer is real.
    """

    def __init__(self, base: KubeClient) -> None:
        super().__init__(base.transport, user_agent="msop-e2e-gone")
        self.release = asyncio.Event()
        self.failed = False

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncGenerator[dict[str, Any], None]:
        if not self.failed:
            await self.release.wait()
            self.failed = True
            raise ApiError(410, "Expired", "too old resource version: 1 (2)")
        async for event in super().watch(*args, **kwargs):
            yield event


async def test_relist_after_410_emits_tombstones_for_vanished_objects(
    client: KubeClient, namespace: str
) -> None:
    await client.create(CONFIGMAPS, cm("stays", namespace, v="1"))
    await client.create(CONFIGMAPS, cm("vanishes", namespace, v="1"))
    gone = GoneOnce(client)
    factory = InformerFactory(gone)
    informer = factory.informer_for(CONFIGMAPS, namespace)
    rec = Recorder(informer)
    async with running(factory):
        # while the (held) watch misses everything:
        await client.delete(CONFIGMAPS, "vanishes", namespace)
        await client.patch(CONFIGMAPS, "stays", {"data": {"v": "2"}}, namespace)
        await client.create(CONFIGMAPS, cm("appears", namespace))
        gone.release.set()
        await eventually(lambda: informer.statistics().lists == 2)
        assert ("delete", "vanishes", True) in rec.log  # DeletedFinalStateUnknown
        assert ("update", "stays") in rec.log
        assert ("add", "appears", False) in rec.log  # a relist add is not "initial"
        assert informer.statistics().watch_restarts["expired"] == 1
        # and the watch that follows the relist works
        await client.create(CONFIGMAPS, cm("later", namespace))
        await eventually(lambda: f"{namespace}/later" in informer.store)
        names = {o["metadata"]["name"] for o in informer.store.list()} - {"kube-root-ca.crt"}
        assert names == {"appears", "later", "stays"}


async def cluster_is_whole_again(cluster: Any) -> None:
    """Wait until the restarted control plane serves the next tests normally."""
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", probe)
    try:
        for _ in range(300):  # the controller-manager creates the default ServiceAccount
            if cluster.kubectl("get", "sa", "default", "-n", probe, check=False).returncode == 0:
                return
            await asyncio.sleep(0.2)
        pytest.fail("the control plane did not recover after the restart")
    finally:
        cluster.kubectl("delete", "namespace", probe, "--wait=false", check=False)


@pytest.mark.slow
async def test_cache_converges_across_an_apiserver_restart(
    cluster: Any, client: KubeClient, namespace: str
) -> None:
    options = ReflectorOptions(backoff_initial=0.2, backoff_cap=1.0)
    factory = InformerFactory(client, options=options)
    informer = factory.informer_for(CONFIGMAPS, namespace)
    rec = Recorder(informer)
    for i in range(5):
        await client.create(CONFIGMAPS, cm(f"r{i}", namespace, v="0"))
    async with running(factory):
        await client.patch(CONFIGMAPS, "r0", {"data": {"v": "1"}}, namespace)
        await client.delete(CONFIGMAPS, "r1", namespace)
        cluster.kwokctl("stop", "cluster")
        try:
            await asyncio.sleep(1.0)
        finally:
            cluster.kwokctl("start", "cluster")
        for attempt in range(100):  # the API server takes a moment to serve again
            try:
                await client.patch(CONFIGMAPS, "r2", {"data": {"v": "2"}}, namespace)
                break
            except ApiError:
                if attempt == 99:
                    raise
                await asyncio.sleep(0.2)
        await client.delete(CONFIGMAPS, "r3", namespace)
        await client.create(CONFIGMAPS, cm("r5", namespace))
        await cluster_is_whole_again(cluster)
        # Later tests need pods scheduled and run again (scheduler lease, kwok nodes).
        await asyncio.to_thread(cluster.wait_healthy)
        want = await server_state(client, namespace)
        await eventually(
            lambda: {k: o["metadata"]["resourceVersion"] for k, o in rec.seen.items()} == want,
            within=60,
        )
        assert {f"{namespace}/r1", f"{namespace}/r3"} <= rec.deleted
        restarts_seen = informer.statistics().watch_restarts
        assert restarts_seen.get("error", 0) + restarts_seen.get("expired", 0) >= 1
