"""Client-side budgets: creates never wait behind Event (or status) writes.

A loopback HTTP server records the order in which requests arrive; the client runs at a
limit of 1 request per second with a burst of 1, so any request that had to wait behind
another budget's backlog would arrive after it. No timing is asserted, only order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from msop.api.resources import MSJOBS
from msop.controller.events import EventRecorder
from msop.kube import EVENTS, LEASES, PODS, SERVICES, KubeClient
from msop.kube.client import budget_of


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.arrived = asyncio.Condition()

    async def handler(self, request: web.Request) -> web.Response:
        async with self.arrived:
            self.seen.append((request.method, request.path))
            self.arrived.notify_all()
        body = await request.json() if request.can_read_body else {}
        return web.json_response(body if isinstance(body, dict) else {}, status=200)

    async def wait_for(self, n: int) -> None:
        async with self.arrived:
            await self.arrived.wait_for(lambda: len(self.seen) >= n)


@pytest.fixture
async def server(unused_tcp_port: int) -> AsyncIterator[tuple[Recorder, str]]:
    rec = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", rec.handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    try:
        yield rec, f"http://127.0.0.1:{unused_tcp_port}"
    finally:
        await runner.cleanup()


def _client(url: str) -> KubeClient:
    configuration = Configuration(host=url)
    return KubeClient.from_configuration(configuration, qps=1, burst=1)


POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}
JOB = {
    "apiVersion": "mindspore.gitee.com/v1",
    "kind": "MSJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
}


def test_budget_of() -> None:
    assert budget_of(EVENTS) == "events"
    assert budget_of(PODS) == budget_of(SERVICES) == budget_of(MSJOBS) == "default"
    assert budget_of(MSJOBS, "status") == budget_of(PODS, "status") == "status"
    assert budget_of(LEASES) == "leases"


async def test_pod_creates_go_out_before_a_backlog_of_events(
    server: tuple[Recorder, str],
) -> None:
    rec, url = server
    client = _client(url)
    recorder = EventRecorder(client, component="budget-test", host="h", writers=4)
    for i in range(20):
        recorder.event(JOB, "Normal", "Reason", f"event {i}")
    task = asyncio.create_task(recorder.run())
    try:
        # The first event spends the burst; the other writers now wait on tokens.
        await rec.wait_for(1)
        await client.create(PODS, POD, "ns")
    finally:
        task.cancel()
        await asyncio.sleep(0)
        task.cancel()  # do not flush the backlog
        await asyncio.gather(task, return_exceptions=True)
        await client.close()
    paths = [p for _, p in rec.seen]
    assert paths[0] == "/api/v1/namespaces/ns/events"
    # With one shared bucket the create would queue behind the 3 writers' reservations.
    assert paths[1] == "/api/v1/namespaces/ns/pods"
    assert recorder.abandoned > 0  # the backlog was still there when the creates went out


async def test_pod_creates_do_not_wait_behind_status_writes_and_leases_behind_neither(
    server: tuple[Recorder, str],
) -> None:
    rec, url = server
    client = _client(url)
    status = [
        asyncio.create_task(
            client.patch(MSJOBS, "j", {"status": {"n": i}}, "ns", subresource="status")
        )
        for i in range(5)
    ]
    try:
        await rec.wait_for(1)  # one status write spent the burst, four wait
        await client.create(PODS, POD, "ns")
        await client.get(LEASES, "lease", "ns")
        assert [m for m, _ in rec.seen] == ["PATCH", "POST", "GET"]
    finally:
        for t in status:
            t.cancel()
        await asyncio.gather(*status, return_exceptions=True)
        await client.close()
