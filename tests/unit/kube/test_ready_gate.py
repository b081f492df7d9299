"""The ready gate: an API server that refuses connections holds requests until its
/readyz says 200, instead of failing every request during a restart (and during the
authorizer's warm-up just after it). Loopback servers only."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from msop.kube import PODS, KubeClient
from msop.kube.errors import ApiUnavailable
from msop.kube.transport import ReadyGate, server_unreachable
from msop.metrics import REGISTRY
from testbed.ports import free_port


class Probe:
    """Answers the gate's probes with scripted statuses (an int, or an exception)."""

    def __init__(self, *answers: int | BaseException) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.headers: list[Mapping[str, str]] = []

    async def __call__(self, headers: Mapping[str, str]) -> int:
        self.calls += 1
        self.headers.append(headers)
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def test_requests_wait_until_readyz_says_200() -> None:
    probe = Probe(aiohttp.ClientConnectionError("refused"), 503, 403, 200)
    gate = ReadyGate(probe, max_hold=5, interval=0.01, max_interval=0.02)
    assert gate.is_open and await gate.wait() == 0.0
    assert gate.trip({"Authorization": "Bearer t"}) is True
    assert gate.trip({}) is False  # one probe at a time
    assert not gate.is_open
    released_at: list[int] = []  # the probe calls made when each waiter went on

    async def waiter() -> float:
        waited = await gate.wait()
        released_at.append(probe.calls)
        return waited

    waited = await asyncio.gather(*(waiter() for _ in range(3)))
    assert gate.is_open and probe.calls == 4 and gate.trips == 1
    assert released_at == [4, 4, 4]  # held through refused, 503 and 403; the 200 let go
    assert all(w > 0 for w in waited)
    assert probe.headers[0] == {"Authorization": "Bearer t"}


async def test_a_server_that_never_says_ready_costs_at_most_max_hold() -> None:
    probe = Probe(*([403] * 1000))
    gate = ReadyGate(probe, max_hold=0.2, interval=0.01, max_interval=0.05)
    gate.trip({})
    waited = await gate.wait()
    # Released by max_hold, not by a 200 (none was answered), and the probe gives up too.
    assert waited > 0 and probe.calls > 1 and len(probe.answers) == 1000 - probe.calls
    await asyncio.sleep(0.1)
    assert gate.is_open  # the probe gave up: requests go through, the next failure trips it
    assert gate.trip({}) is True and gate.trips == 2
    await gate.close()
    assert gate.is_open and await gate.wait() == 0.0


def test_only_refused_or_dropped_connections_trip_the_gate() -> None:
    key = type("Key", (), {"ssl": True, "host": "h", "port": 1})()
    assert server_unreachable(aiohttp.ServerDisconnectedError())
    assert server_unreachable(ConnectionRefusedError())
    assert server_unreachable(aiohttp.ClientConnectorError(key, ConnectionRefusedError()))
    assert not server_unreachable(TimeoutError())  # a partition: waiting on /readyz won't help
    assert not server_unreachable(aiohttp.ClientPayloadError("bad body"))
    assert not server_unreachable(
        aiohttp.ClientConnectorCertificateError(key, ValueError("bad cert"))
    )


def _count(name: str, host: str) -> float:
    return REGISTRY.get_sample_value(name, {"host": host}) or 0.0


@pytest.mark.parametrize("readyz", [200])
async def test_a_restarted_api_server_is_waited_for_not_failed_on(readyz: int) -> None:
    port = free_port()
    client = KubeClient.from_configuration(Configuration(host=f"http://127.0.0.1:{port}"))
    host = client.host
    tripped0 = _count("msop_apiserver_unreachable_total", host)
    held0 = _count("msop_apiserver_held_requests_total", host)
    seen: list[str] = []
    ready = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        if request.path == "/readyz":
            if not ready.is_set():
                return web.Response(status=500, text="[-]informer-sync failed")
            return web.Response(text="ok")
        if not ready.is_set():
            return web.json_response({"kind": "Status", "code": 403}, status=403)
        return web.json_response({"kind": "PodList", "items": []})

    runner: web.AppRunner | None = None
    try:
        with pytest.raises(ApiUnavailable):  # nobody listens: refused, the gate closes
            await client.list(PODS, "ns")
        assert not client.transport.gate.is_open
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        request = asyncio.create_task(client.list(PODS, "ns"))
        await asyncio.sleep(0.6)  # the server is up but not ready: the request waits
        assert not request.done() and "/api/v1/namespaces/ns/pods" not in seen
        assert "/readyz" in seen
        ready.set()
        assert (await asyncio.wait_for(request, 5))["items"] == []
        assert seen.count("/api/v1/namespaces/ns/pods") == 1  # sent once, when ready
        assert _count("msop_apiserver_unreachable_total", host) == tripped0 + 1
        assert _count("msop_apiserver_held_requests_total", host) == held0 + 1
    finally:
        await client.close()
        if runner is not None:
            await runner.cleanup()
