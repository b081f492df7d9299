"""The probe and metrics HTTP server: responses, and how it parses requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from msop.controller.health import Checks, HttpServer, Routes, health_routes, metrics_routes


@pytest.fixture
async def server() -> AsyncIterator[HttpServer]:
    registry = CollectorRegistry()
    Counter("things", "Things.", registry=registry).inc()
    routes: Routes = {}
    metrics_routes(routes, registry)
    health_routes(routes, Checks({"ping": lambda: True}), Checks({"synced": lambda: False}))
    s = HttpServer(routes, "127.0.0.1", 0)
    await s.start()
    yield s
    await s.stop()


async def exchange(port: int, data: bytes, *, eof: bool = False) -> bytes:
    """Send ``data`` (then end the stream if ``eof``), read until the server closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    if eof:
        writer.write_eof()
    try:
        return await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()


def split(response: bytes) -> tuple[str, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines)
    return status, {k.lower(): v for k, v in headers.items()}, body


async def test_probes_and_metrics(server: HttpServer) -> None:
    status, headers, body = split(
        await exchange(server.port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    )
    assert (status, body) == ("HTTP/1.1 200 OK", b"ok")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert headers["content-length"] == "2"
    status, _, body = split(
        await exchange(server.port, b"GET /readyz?verbose HTTP/1.1\r\nConnection: close\r\n\r\n")
    )
    assert status == "HTTP/1.1 500 Internal Server Error"
    assert body == b"[-]synced failed\ncheck failed"
    status, headers, body = split(
        await exchange(server.port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    )
    assert status == "HTTP/1.1 200 OK"
    assert headers["content-type"] == CONTENT_TYPE_LATEST
    assert b"things_total 1.0" in body


async def test_head_has_headers_but_no_body(server: HttpServer) -> None:
    response = await exchange(server.port, b"HEAD /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")
    status, headers, body = split(response)
    assert (status, headers["content-length"], body) == ("HTTP/1.1 200 OK", "2", b"")


async def test_unknown_path_and_method(server: HttpServer) -> None:
    status, headers, body = split(
        await exchange(server.port, b"GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n")
    )
    assert (status, body) == ("HTTP/1.1 404 Not Found", b"404: Not Found")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    status, headers, body = split(
        await exchange(
            server.port,
            b"POST /healthz HTTP/1.1\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        )
    )
    assert (status, body) == ("HTTP/1.1 405 Method Not Allowed", b"405: Method Not Allowed")
    assert headers["allow"] == "GET, HEAD"


@pytest.mark.parametrize(
    "request_",
    [
        b"GARBAGE\r\n\r\n",
        b"GET /healthz\r\n\r\n",
        b"GET /healthz HTTP/2.0\r\n\r\n",
        b"GET healthz HTTP/1.1\r\n\r\n",
        b"get /healthz HTTP/1.1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nno-colon\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nContent-Length: x\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n",
    ],
)
async def test_bad_request_closes(server: HttpServer, request_: bytes) -> None:
    # Even with keep-alive asked for, the server answers 400 and closes (read() returns).
    status, headers, body = split(await exchange(server.port, request_))
    assert (status, body) == ("HTTP/1.1 400 Bad Request", b"400: Bad Request")
    assert headers["connection"] == "close"


async def test_keep_alive_serves_several_requests(server: HttpServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        for _ in range(3):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"Connection: keep-alive" in head
            assert await reader.readexactly(2) == b"ok"
        # Pipelined: two requests in one write, two responses in order.
        writer.write(
            b"GET /nope HTTP/1.1\r\n\r\nGET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"
        )
        rest = await asyncio.wait_for(reader.read(), 5)
        assert rest.startswith(b"HTTP/1.1 404 Not Found\r\n")
        assert rest.endswith(b"\r\n\r\nok")
    finally:
        writer.close()


async def test_http10_closes_unless_keep_alive(server: HttpServer) -> None:
    status, headers, body = split(await exchange(server.port, b"GET /healthz HTTP/1.0\r\n\r\n"))
    assert (status, headers["connection"], body) == ("HTTP/1.1 200 OK", "close", b"ok")
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert b"Connection: keep-alive" in head
    finally:
        writer.close()


async def test_percent_encoded_path_and_eof(server: HttpServer) -> None:
    status, _, body = split(
        await exchange(server.port, b"GET /health%7A HTTP/1.1\r\nConnection: close\r\n\r\n")
    )
    assert (status, body) == ("HTTP/1.1 200 OK", b"ok")
    assert await exchange(server.port, b"", eof=True) == b""  # nothing, then EOF
    assert await exchange(server.port, b"GET /heal", eof=True) == b""  # cut off mid-request


async def test_stop_closes_idle_connections_and_port() -> None:
    s = HttpServer({}, "127.0.0.1", 0)
    await s.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", s.port)
    await asyncio.sleep(0.05)
    await asyncio.wait_for(s.stop(), 5)
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    await s.stop()  # idempotent
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", s.port)


async def test_port_taken() -> None:
    a = HttpServer({}, "127.0.0.1", 0)
    await a.start()
    try:
        with pytest.raises(OSError):
            await HttpServer({}, "127.0.0.1", a.port).start()
    finally:
        await a.stop()
