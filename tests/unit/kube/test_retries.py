"""The API server's "try again later": 429 (API Priority and Fairness) and 500-504 with
``Retry-After`` are sent again after the time asked, with jitter, a bounded number of
times and counted; everything else is the caller's. A loopback HTTP server answers as
scripted; the waits are recorded, never slept."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from msop.kube import PODS, KubeClient
from msop.kube import client as client_module
from msop.kube.client import MAX_RETRY_AFTER, RETRY_JITTER
from msop.kube.errors import ApiError, is_too_many_requests
from msop.kube.transport import Transport, reset_on_close_socket
from msop.metrics import REGISTRY

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}}


class Script:
    """Answers each request with the next (status, Retry-After) and records the bodies;
    like the API server, it names each request with the ``Audit-ID`` the client sent, or
    one of its own, and echoes it."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, str | None]] = []
        self.bodies: list[bytes] = []
        self.audit_ids: list[str] = []

    async def handler(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.read())
        audit_id = request.headers.get("Audit-ID") or f"server-{len(self.bodies)}"
        self.audit_ids.append(audit_id)
        status, retry_after = self.answers.pop(0) if self.answers else (200, None)
        headers = {"Audit-Id": audit_id}
        if retry_after is not None:
            headers["Retry-After"] = retry_after
        if status == 200:
            return web.json_response({"kind": "Pod", "n": len(self.bodies)}, headers=headers)
        body = {"kind": "Status", "code": status, "reason": "TooManyRequests", "message": "x"}
        return web.json_response(body, status=status, headers=headers)


@pytest.fixture
async def script(unused_tcp_port: int) -> AsyncIterator[tuple[Script, KubeClient]]:
    s = Script()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", s.handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", unused_tcp_port).start()
    client = KubeClient.from_configuration(
        Configuration(host=f"http://127.0.0.1:{unused_tcp_port}")
    )
    try:
        yield s, client
    finally:
        await client.close()
        await runner.cleanup()


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    seen: list[float] = []

    async def record(seconds: float) -> None:
        seen.append(seconds)

    monkeypatch.setattr(client_module, "_sleep", record)
    yield seen


def _retries(code: str, verb: str, client: KubeClient) -> float:
    labels = {"code": code, "verb": verb, "host": client.host}
    return REGISTRY.get_sample_value("rest_client_request_retries_total", labels) or 0.0


async def test_429_is_sent_again_after_retry_after_with_jitter(
    script: tuple[Script, KubeClient], waits: list[float]
) -> None:
    s, client = script
    s.answers = [(429, "2"), (429, "1")]
    before = _retries("429", "POST", client)
    out = await client.create(PODS, POD, "ns")
    assert out["n"] == 3
    assert len(waits) == 2
    assert 2 <= waits[0] < 2 * (1 + RETRY_JITTER) and 1 <= waits[1] < 1 + RETRY_JITTER
    # The same request went out each time.
    assert s.bodies[0] == s.bodies[1] == s.bodies[2] and b'"name":"p"' in s.bodies[0]
    assert _retries("429", "POST", client) - before == 2


async def test_a_retry_names_the_refusal_it_answers_in_the_audit_log(
    script: tuple[Script, KubeClient], waits: list[float]
) -> None:
    """A refused create is audited without its name (APF reads no body): each retry
    carries the first attempt's audit ID and its number, so the log pairs them."""
    s, client = script
    s.answers = [(429, "1"), (503, "1")]
    await client.create(PODS, POD, "ns")
    await client.get(PODS, "p", "ns")
    assert s.audit_ids == ["server-1", "server-1-retry-1", "server-1-retry-2", "server-4"]


async def test_jitter_spreads_clients_refused_together(
    script: tuple[Script, KubeClient], waits: list[float]
) -> None:
    s, client = script
    s.answers = [(429, "1")] * 20
    await asyncio.gather(*(client.get(PODS, "p", "ns") for _ in range(20)))
    assert len(waits) == 20 and len(set(waits)) > 10, "every refused request waits the same"


async def test_retry_after_is_capped(script: tuple[Script, KubeClient], waits: list[float]) -> None:
    s, client = script
    s.answers = [(429, "3600")]
    await client.get(PODS, "p", "ns")
    assert MAX_RETRY_AFTER <= waits[0] < MAX_RETRY_AFTER * (1 + RETRY_JITTER)


@pytest.mark.parametrize(
    ("status", "retry_after"),
    [(429, None), (409, "1"), (403, "1"), (500, None), (505, "1"), (429, "soon")],
)
async def test_other_refusals_are_raised_at_once(
    script: tuple[Script, KubeClient], waits: list[float], status: int, retry_after: str | None
) -> None:
    s, client = script
    s.answers = [(status, retry_after)]
    with pytest.raises(ApiError) as e:
        await client.create(PODS, POD, "ns")
    assert e.value.status == status and not waits and len(s.bodies) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_server_errors_with_retry_after_are_retried(
    script: tuple[Script, KubeClient], waits: list[float], status: int
) -> None:
    s, client = script
    s.answers = [(status, "1")]
    assert (await client.get(PODS, "p", "ns"))["n"] == 2
    assert len(waits) == 1


async def test_gives_up_after_max_retries_with_the_last_refusal(
    script: tuple[Script, KubeClient], waits: list[float]
) -> None:
    s, client = script
    s.answers = [(429, "1")] * 50
    with pytest.raises(ApiError) as e:
        await client.delete(PODS, "p", "ns")
    assert is_too_many_requests(e.value) and e.value.retry_after == 1.0
    assert len(s.bodies) == client.max_retries + 1 == 11 and len(waits) == 10


async def test_a_closed_connection_is_reset_so_queued_bytes_are_dropped() -> None:
    """Every socket the transport opens closes with RST (SO_LINGER 0): the peer reads a
    reset, not an orderly end of stream (a FIN would follow any bytes still queued)."""
    accepted: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = (
        asyncio.get_running_loop().create_future()
    )

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
        writer.write(b"Content-Length: 2\r\nConnection: keep-alive\r\n\r\n{}")
        await writer.drain()
        accepted.set_result((reader, writer))

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    transport = Transport(Configuration(host=f"http://127.0.0.1:{port}"))
    try:
        resp = await transport.request(
            "GET",
            "/x",
            query=None,
            headers={},
            body=None,
            client_timeout=aiohttp.ClientTimeout(total=10),
        )
        await resp.read()
        resp.release()
        reader, writer = await accepted
        await transport.close()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(1), 10)
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


def test_reset_on_close_socket_sets_linger_zero() -> None:
    sock = reset_on_close_socket((socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 0)))
    try:
        raw: Any = sock.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8)
        assert raw == b"\x01\x00\x00\x00\x00\x00\x00\x00"
    finally:
        sock.close()
