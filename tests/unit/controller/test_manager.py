"""Manager without a cluster: endpoints, runnable lifecycle, graceful stop, failures.

No informers and no leader election are configured, so no API server is needed; the
client is never used.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from msop.controller.delegatedauth import AuthOptions
from msop.controller.health import parse_bind_address
from msop.controller.manager import Manager, SecureServing
from tests.support.clients import NoApiServer
from tests.support.managers import Sleeper, manager


class Crasher:
    name = "crasher"

    async def run(self) -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")


class Stubborn:
    """Ignores the first cancellation (like a long reconcile), obeys the second."""

    name = "stubborn"

    def __init__(self) -> None:
        self.cancels = 0
        self.started = asyncio.Event()

    async def run(self) -> None:
        self.started.set()
        while True:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancels += 1
                if self.cancels >= 2:
                    raise


async def fake_api_server(method: str, handler: Any, port: int) -> tuple[Any, Any]:
    """An API server stand-in on loopback answering every path with ``handler``, and a
    ``KubeClient`` of it; the caller cleans the runner up."""
    from aiohttp import web
    from kubernetes_asyncio.client import Configuration

    from msop.kube import KubeClient

    app = web.Application()
    app.router.add_route(method, "/{tail:.*}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, KubeClient.from_configuration(Configuration(host=f"http://127.0.0.1:{port}"))


def test_parse_bind_address() -> None:
    assert parse_bind_address(":8080") == ("0.0.0.0", 8080)
    assert parse_bind_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_bind_address("0") is None
    with pytest.raises(ValueError):
        parse_bind_address("nonsense")


async def test_endpoints_runnables_and_graceful_stop() -> None:
    m = manager()
    leader, plain = Sleeper("leader"), Sleeper("plain")
    m.add(leader)
    m.add(plain, needs_leader_election=False)
    task = asyncio.create_task(m.run())
    await m.wait_until_leader()
    await leader.started.wait()
    await plain.started.wait()
    assert m.is_leader()
    async with aiohttp.ClientSession() as http:
        for path in ("/healthz", "/readyz"):
            async with http.get(f"http://127.0.0.1:{m.health_port}{path}") as r:
                assert (r.status, await r.text()) == (200, "ok")
        async with http.get(f"http://127.0.0.1:{m.health_port}/readyz?verbose") as r:
            assert "[+]informers-synced ok" in await r.text()
        async with http.get(f"http://127.0.0.1:{m.metrics_port}/metrics") as r:
            assert r.status == 200
            names = {f.name for f in text_string_to_metric_families(await r.text())}
            assert "workqueue_depth" in names
    with pytest.raises(RuntimeError):
        m.add(Sleeper("late"))
    m.stop()
    await task  # returns normally: exit code 0
    assert leader.finished_cleanly and plain.finished_cleanly
    assert not m.is_leader()
    with pytest.raises(RuntimeError):
        await m.run()


async def test_failing_runnable_stops_manager_and_propagates() -> None:
    m = manager()
    other = Sleeper("other")
    m.add(other)
    m.add(Crasher())
    with pytest.raises(ValueError, match="boom"):
        await m.run()
    assert other.finished_cleanly


async def test_graceful_timeout_hard_cancels_stubborn_runnable() -> None:
    m = manager(graceful_shutdown_timeout=0.01)
    s = Stubborn()
    m.add(s)
    task = asyncio.create_task(m.run())
    await s.started.wait()
    m.stop()
    await task
    assert s.cancels == 2


async def test_cancelling_run_is_graceful_and_reraises() -> None:
    m = manager()
    s = Sleeper("s")
    m.add(s)
    task = asyncio.create_task(m.run())
    await s.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert s.finished_cleanly


async def test_unready_check_fails_readyz() -> None:
    m = manager()
    m.readyz.add("never", lambda: False)
    task = asyncio.create_task(m.run())
    await m.wait_for_sync()
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{m.health_port}/readyz") as r,
    ):
        assert r.status == 500
        assert "[-]never failed" in await r.text()
    m.stop()
    await task


async def test_stop_is_bounded_by_the_grace_period_whatever_the_event_backlog(
    unused_tcp_port: int,
) -> None:
    """An API server that never answers Event writes: the backlog cannot drain, yet
    ``run()`` returns normally (exit 0) and the events it could not write are counted
    and logged in one line. (The bound on the wait below is only there so that a
    regression fails instead of hanging; nothing about speed is asserted.)"""
    from aiohttp import web
    from structlog.testing import capture_logs

    arrived = asyncio.Event()

    async def never_answers(request: web.Request) -> web.Response:
        arrived.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    runner, client = await fake_api_server("*", never_answers, unused_tcp_port)
    m = Manager(
        client,
        metrics_bind_address="0",
        health_probe_bind_address="0",
        graceful_shutdown_timeout=1.0,
    )
    recorder = m.event_recorder("shutdown-test")
    job = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "n", "uid": "u"},
    }
    for i in range(50):
        recorder.event(job, "Normal", "Reason", f"event {i}")
    try:
        with capture_logs() as logged:
            task = asyncio.create_task(m.run())
            await arrived.wait()  # the writers are stuck in their first writes
            m.stop()
            await asyncio.wait_for(task, timeout=60)  # returns normally: exit code 0
    finally:
        await client.close()
        await runner.cleanup()
    assert recorder.abandoned == 50  # 46 pending and 4 in flight, none written
    lines = [e for e in logged if e["event"] == "events not written: shutdown deadline reached"]
    assert [e["count"] for e in lines] == [50]
    assert logged[-1]["event"] == "manager stopped"


def test_secure_metrics_need_a_port_of_their_own() -> None:
    with pytest.raises(ValueError, match="port of their own"):
        Manager(
            NoApiServer(),
            metrics_bind_address="127.0.0.1:8443",
            health_probe_bind_address="127.0.0.1:8443",
            secure_metrics=SecureServing(),
        )


async def test_secure_metrics_ask_the_api_server_once_per_token_and_never_when_idle(
    unused_tcp_port: int,
) -> None:
    """/metrics over HTTPS, reviewed through a real KubeClient by a stand-in API server
    that counts every request: none while nobody scrapes, two for a new token, none
    for the next scrapes with it; the probes stay plain HTTP on their own port; an API
    server that is gone makes a new token's scrape a 503, and the process lives on."""
    from aiohttp import web

    requests: list[str] = []
    users = {"prometheus-token": "prometheus", "viewer-token": "viewer"}

    async def api(request: web.Request) -> web.Response:
        requests.append(f"{request.method} {request.path}")
        body = await request.json()
        if request.path.endswith("/tokenreviews"):
            user = users.get(body["spec"]["token"])
            body["status"] = {"authenticated": False}
            if user is not None:
                body["status"] = {"authenticated": True, "user": {"username": user}}
        else:
            body["status"] = {"allowed": body["spec"]["user"] == "prometheus"}
        return web.json_response(body, status=201)

    runner, client = await fake_api_server("POST", api, unused_tcp_port)
    m = Manager(
        client,
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        secure_metrics=SecureServing(auth=AuthOptions(timeout=2)),
    )
    task = asyncio.create_task(m.run())
    insecure = ssl.create_default_context()
    insecure.check_hostname, insecure.verify_mode = False, ssl.CERT_NONE

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    try:
        await m.wait_for_sync()
        assert m.metrics_port != m.health_port
        metrics = f"https://127.0.0.1:{m.metrics_port}/metrics"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=insecure)) as http:
            async with http.get(f"http://127.0.0.1:{m.health_port}/readyz") as r:
                assert r.status == 200
            async with http.get(f"https://127.0.0.1:{m.metrics_port}/healthz") as r:
                assert r.status == 404
            assert requests == []  # nothing at start, nothing while idle
            async with http.get(metrics) as r:
                assert r.status == 401
            async with http.get(metrics, headers=bearer("forged")) as r:
                assert r.status == 401
            async with http.get(metrics, headers=bearer("viewer-token")) as r:
                assert r.status == 403
            assert len(requests) == 3
            for _ in range(3):
                async with http.get(metrics, headers=bearer("prometheus-token")) as r:
                    assert r.status == 200
                    assert "workqueue_depth" in await r.text()
            assert requests[3:] == [
                "POST /apis/authentication.k8s.io/v1/tokenreviews",
                "POST /apis/authorization.k8s.io/v1/subjectaccessreviews",
            ]
            await runner.cleanup()  # the API server goes away
            async with http.get(metrics, headers=bearer("new-token")) as r:
                assert r.status == 503
                assert "could not review the token" in await r.text()
            async with http.get(metrics, headers=bearer("prometheus-token")) as r:
                assert r.status == 200  # still cached
        assert not task.done()
    finally:
        m.stop()
        await task
        await client.close()
        await runner.cleanup()


def test_an_event_recorder_is_made_whole_by_its_first_call() -> None:
    m = manager()
    busy = lambda: True  # noqa: E731
    recorder = m.event_recorder("made-whole", busy=busy)
    assert recorder.busy is busy
    assert m.event_recorder("made-whole") is recorder
    with pytest.raises(ValueError):  # not rewired after it is made
        m.event_recorder("made-whole", busy=lambda: False)
    assert recorder.busy is busy


class Gate:
    """A guard the test clears."""

    name = "gate"

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.started = asyncio.Event()

    def clear(self) -> bool:
        return self.opened.is_set()

    async def wait_until_clear(self) -> None:
        await self.opened.wait()

    async def run(self) -> None:
        self.started.set()
        await self.opened.wait()


async def test_a_guard_once_leading_holds_the_leader_runnables_but_not_readiness() -> None:
    m = manager()
    gate, leader, plain = Gate(), Sleeper("leader"), Sleeper("plain")
    m.add_guard(gate, once_leading=True)
    m.add(leader)
    m.add(plain, needs_leader_election=False)
    task = asyncio.create_task(m.run())
    await gate.started.wait()
    await plain.started.wait()
    await asyncio.sleep(0.05)
    assert not leader.started.is_set() and not m.is_leader()
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{m.health_port}/readyz?verbose") as r,
    ):
        assert r.status == 200  # ready while it waits: a rolling update goes on
        assert "gate" not in await r.text()
    gate.opened.set()
    await asyncio.wait_for(m.wait_until_leader(), 5)
    await leader.started.wait()
    m.stop()
    await task
    assert leader.finished_cleanly and plain.finished_cleanly
    with pytest.raises(RuntimeError):
        m.add_guard(Gate(), once_leading=True)


async def test_stopping_while_a_guard_once_leading_waits_returns_cleanly() -> None:
    m = manager()
    gate, leader = Gate(), Sleeper("leader")
    m.add_guard(gate, once_leading=True)
    m.add(leader)
    task = asyncio.create_task(m.run())
    await gate.started.wait()
    m.stop()
    await asyncio.wait_for(task, 5)
    assert not leader.started.is_set()
