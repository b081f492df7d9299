"""How long the API server did not answer: the outages a client's transport records (a
refused connection, a broken watch, then the first answer). Loopback servers only."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from msop.kube import PODS, KubeClient
from msop.kube.contact import Contact, Outage
from msop.kube.errors import ApiError, ApiUnavailable
from testbed.ports import free_port

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


class Wall:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t


def test_an_outage_runs_from_the_first_unanswered_request_to_the_next_answer() -> None:
    wall = Wall()
    contact = Contact(now=wall)
    contact.answered()
    assert contact.outages() == [] and contact.lost_since is None
    contact.unanswered()
    wall.t = T0 + timedelta(seconds=5)
    contact.unanswered()  # the same outage: its start stays the first failure
    assert contact.lost_since == T0
    wall.t = T0 + timedelta(minutes=16)
    contact.answered()
    contact.answered()  # one outage, recorded once
    assert contact.outages() == [Outage(T0, T0 + timedelta(minutes=16))]
    assert contact.outages()[0].seconds == 960.0
    assert contact.lost_since is None


def test_an_outage_an_earlier_process_saw_is_inherited() -> None:
    wall = Wall()
    contact = Contact(now=wall)
    wall.t = T0 + timedelta(minutes=20)
    contact.missed(T0)  # the Lease taken over was last renewed at T0
    contact.missed(T0 + timedelta(hours=1))  # a renewal "from the future": no outage
    assert contact.outages() == [Outage(T0, T0 + timedelta(minutes=20))]


def test_only_the_last_outages_are_kept() -> None:
    wall = Wall()
    contact = Contact(now=wall, keep=2)
    for i in range(3):
        wall.t = T0 + timedelta(minutes=2 * i)
        contact.unanswered()
        wall.t += timedelta(minutes=1)
        contact.answered()
    assert [o.start for o in contact.outages()] == [
        T0 + timedelta(minutes=2),
        T0 + timedelta(minutes=4),
    ]


async def test_a_client_records_a_refused_connection_and_a_broken_watch() -> None:
    port = free_port()
    client = KubeClient.from_configuration(Configuration(host=f"http://127.0.0.1:{port}"))
    contact = client.transport.contact
    # The ready gate would hold the next request for its probe: not what is tested here.
    client.transport.gate.max_hold = 0.0
    stream_started = asyncio.Event()
    cut = asyncio.Event()

    async def handle(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch"):
            resp = web.StreamResponse()
            await resp.prepare(request)
            await resp.write(b'{"type":"BOOKMARK","object":{"metadata":{}}}\n')
            stream_started.set()
            await cut.wait()
            assert request.transport is not None
            request.transport.abort()  # the connection drops mid-stream
            return resp
        if request.path == "/readyz":
            return web.Response(text="ok")
        return web.json_response({"kind": "Status", "code": 404}, status=404)

    runner: web.AppRunner | None = None
    try:
        assert contact.lost_since is None
        with pytest.raises(ApiUnavailable):  # nobody listens yet
            await client.list(PODS, "ns")
        lost = contact.lost_since
        assert lost is not None and contact.outages() == []
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        with pytest.raises(ApiError) as answer:
            await client.list(PODS, "ns")
        assert answer.value.status == 404  # an error, but an answer: the outage is over
        [outage] = contact.outages()
        assert outage.start == lost and outage.end >= lost and contact.lost_since is None

        async def watch() -> None:
            async for _ in client.watch(PODS, "ns", resource_version="1"):
                pass

        watching = asyncio.create_task(watch())
        await asyncio.wait_for(stream_started.wait(), 5)
        assert contact.lost_since is None  # the watch was answered
        cut.set()
        with pytest.raises(ApiUnavailable):
            await asyncio.wait_for(watching, 5)
        assert contact.lost_since is not None and len(contact.outages()) == 1
    finally:
        await client.close()
        if runner is not None:
            await runner.cleanup()
