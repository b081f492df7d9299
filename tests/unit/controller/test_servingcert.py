"""TLS serving: the generated certificate (checked by OpenSSL, not by our own code), a
certificate from a directory and its rotation, and the health server over TLS with real
HTTPS requests on loopback."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, Counter

from msop.controller import selfsigned
from msop.controller.health import (
    Guard,
    HttpServer,
    Request,
    Response,
    Routes,
    metrics_routes,
)
from msop.controller.servingcert import CERT_FILE, KEY_FILE, ServingCert

#: X509_V_FLAG_CHECK_SS_SIGNATURE: OpenSSL skips the signature of a self-signed trust
#: anchor unless told; with it, a handshake proves our ECDSA signature right.
CHECK_SELF_SIGNATURE = ssl.VerifyFlags(0x4000)


def write_cert(directory: Path, hosts: list[str]) -> tuple[bytes, bytes]:
    cert, key = selfsigned.generate(hosts)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CERT_FILE).write_bytes(cert)
    (directory / KEY_FILE).write_bytes(key)
    return cert, key


def trusting(cafile: Path) -> ssl.SSLContext:
    """A client context that trusts ``cafile`` alone and checks its signature."""
    context = ssl.create_default_context(cafile=str(cafile))
    context.verify_flags |= CHECK_SELF_SIGNATURE
    return context


def skip_verify() -> ssl.SSLContext:
    """What Prometheus's ``insecureSkipVerify: true`` amounts to."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def peer_cert(port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> bytes:
    """The DER certificate the server at ``port`` presents (to ``host``: an IP address
    sends no SNI)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=host)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        assert der is not None
        return bytes(der)
    finally:
        writer.close()


def tls_server(tls: ServingCert, guard: Guard | None = None) -> HttpServer:
    registry = CollectorRegistry()
    Counter("scrapes", "Scrapes.", registry=registry).inc()
    routes: Routes = {}
    metrics_routes(routes, registry)
    return HttpServer(routes, "127.0.0.1", 0, tls=tls.context, guard=guard)


@pytest.fixture
async def generated() -> AsyncIterator[HttpServer]:
    server = tls_server(ServingCert.self_signed())
    await server.start()
    yield server
    await server.stop()


def test_generate_refuses_impossible_arguments() -> None:
    with pytest.raises(ValueError):
        selfsigned.generate([])
    with pytest.raises(ValueError):
        selfsigned.generate(["x"], validity=timedelta(0))


def test_openssl_refuses_a_key_that_is_not_the_certificates(tmp_path: Path) -> None:
    cert, _ = selfsigned.generate(["localhost"])
    _, other_key = selfsigned.generate(["localhost"])
    (tmp_path / CERT_FILE).write_bytes(cert)
    (tmp_path / KEY_FILE).write_bytes(other_key)
    with pytest.raises(OSError, match=str(tmp_path)):
        ServingCert.load(tmp_path)


async def test_a_generated_certificate_serves_https(generated: HttpServer) -> None:
    connector = aiohttp.TCPConnector(ssl=skip_verify())
    async with (
        aiohttp.ClientSession(connector=connector) as http,
        http.get(f"https://127.0.0.1:{generated.port}/metrics") as resp,
    ):
        assert resp.status == 200
        assert "scrapes_total 1.0" in await resp.text()
    # HTTP/1.1 only, though a client (Go's, Prometheus's) offers h2 first.
    client = skip_verify()
    client.set_alpn_protocols(["h2", "http/1.1"])
    _, writer = await asyncio.open_connection("127.0.0.1", generated.port, ssl=client)
    ssl_object = writer.get_extra_info("ssl_object")
    assert ssl_object.selected_alpn_protocol() == "http/1.1"
    assert ssl_object.version() in ("TLSv1.2", "TLSv1.3")
    writer.close()


async def test_plain_http_to_the_tls_port_gets_no_answer(generated: HttpServer) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", generated.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
    await writer.drain()
    try:
        data = await asyncio.wait_for(reader.read(), 15)
    except ConnectionError:
        data = b""
    finally:
        writer.close()
    assert b"scrapes_total" not in data and not data.startswith(b"HTTP/1.1 200")


async def test_a_certificate_from_a_directory_verifies(tmp_path: Path) -> None:
    write_cert(tmp_path, ["localhost", "127.0.0.1"])
    server = tls_server(ServingCert.load(tmp_path))
    await server.start()
    try:
        connector = aiohttp.TCPConnector(ssl=trusting(tmp_path / CERT_FILE))
        async with aiohttp.ClientSession(connector=connector) as http:
            for host in ("localhost", "127.0.0.1"):
                async with http.get(f"https://{host}:{server.port}/metrics") as resp:
                    assert resp.status == 200
        # A certificate for another name is refused by a verifying client.
        write_cert(tmp_path / "other", ["elsewhere"])
        with pytest.raises(ssl.SSLError):
            await peer_cert(server.port, trusting(tmp_path / "other" / CERT_FILE), "localhost")
    finally:
        await server.stop()


async def test_a_bad_signature_is_caught_by_the_check(tmp_path: Path) -> None:
    """The check the test above relies on does look at the signature."""
    cert, key = selfsigned.generate(["localhost"])
    der = bytearray(ssl.PEM_cert_to_DER_cert(cert.decode()))
    der[-5] ^= 1  # inside the signature's s
    (tmp_path / CERT_FILE).write_text(ssl.DER_cert_to_PEM_cert(bytes(der)))
    (tmp_path / KEY_FILE).write_bytes(key)
    server = tls_server(ServingCert.load(tmp_path))
    await server.start()
    try:
        with pytest.raises(ssl.SSLError, match="signature"):
            await peer_cert(server.port, trusting(tmp_path / CERT_FILE), "localhost")
    finally:
        await server.stop()


async def test_a_rotated_certificate_is_served_to_the_next_connections(tmp_path: Path) -> None:
    # The layout of a mounted Secret: tls.crt -> ..data/tls.crt, ..data -> a dated dir.
    first = tmp_path / "..2026_01_01"
    write_cert(first, ["localhost"])
    (tmp_path / "..data").symlink_to(first.name)
    for name in (CERT_FILE, KEY_FILE):
        (tmp_path / name).symlink_to(f"..data/{name}")
    tls = ServingCert.load(tmp_path)
    server = tls_server(tls)
    await server.start()
    try:
        old = await peer_cert(server.port, skip_verify())
        assert old == ssl.PEM_cert_to_DER_cert((first / CERT_FILE).read_text())
        assert tls.refresh() is False  # unchanged

        second = tmp_path / "..2026_02_01"
        write_cert(second, ["localhost"])
        (tmp_path / "..data_tmp").symlink_to(second.name)
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")  # the kubelet's swap

        # The next handshake looks at the files: it and every later one get the new
        # certificate, with or without SNI.
        new = ssl.PEM_cert_to_DER_cert((second / CERT_FILE).read_text())
        assert await peer_cert(server.port, skip_verify()) == new
        assert await peer_cert(server.port, skip_verify(), "localhost") == new
    finally:
        await server.stop()


async def test_a_broken_rotation_keeps_the_certificate_in_use(tmp_path: Path) -> None:
    write_cert(tmp_path, ["localhost"])
    tls = ServingCert.load(tmp_path)
    server = tls_server(tls)
    await server.start()
    try:
        before = await peer_cert(server.port, skip_verify())
        (tmp_path / KEY_FILE).write_bytes(selfsigned.generate(["localhost"])[1])  # half-done
        assert tls.refresh() is False
        (tmp_path / CERT_FILE).unlink()
        assert tls.refresh() is False
        assert await peer_cert(server.port, skip_verify()) == before
    finally:
        await server.stop()


def test_a_generated_certificate_names_this_host_when_it_can(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from msop.controller.servingcert import default_hosts

    monkeypatch.setattr(socket, "gethostname", lambda: "msop-controller-manager-7d9f-x2x")
    assert default_hosts()[0] == "msop-controller-manager-7d9f-x2x"
    monkeypatch.setattr(socket, "gethostname", lambda: "höst_1")
    assert default_hosts() == ["localhost", "127.0.0.1", "::1"]
    ServingCert.self_signed()  # whatever the host is called


def test_a_missing_directory_names_itself(tmp_path: Path) -> None:
    with pytest.raises(OSError, match=f"tls.crt and tls.key from {tmp_path / 'none'}"):
        ServingCert.load(tmp_path / "none")


async def test_a_guard_answers_before_the_handler_and_unknown_paths_stay_404() -> None:
    seen: list[str] = []

    async def guard(request: Request) -> Response | None:
        seen.append(request.path)
        if request.headers.get("authorization") == "Bearer ok":
            return None
        return Response(401, b"Unauthorized", headers=(("WWW-Authenticate", "Bearer"),))

    server = tls_server(ServingCert.self_signed(), guard)
    await server.start()
    base = f"https://127.0.0.1:{server.port}"
    try:
        connector = aiohttp.TCPConnector(ssl=skip_verify())
        async with aiohttp.ClientSession(connector=connector) as http:
            async with http.get(f"{base}/metrics") as resp:
                assert resp.status == 401 and resp.headers["WWW-Authenticate"] == "Bearer"
            headers = {"Authorization": "Bearer ok"}
            async with http.get(f"{base}/metrics", headers=headers) as resp:
                assert resp.status == 200
            for path in ("/healthz", "/readyz", "/"):
                async with http.get(f"{base}{path}", headers=headers) as resp:
                    assert resp.status == 404, path
        assert seen == ["/metrics", "/metrics"]
    finally:
        await server.stop()


async def test_a_guard_that_raises_is_a_500() -> None:
    async def guard(request: Request) -> Response | None:
        raise RuntimeError("a bug")

    server = tls_server(ServingCert.self_signed(), guard)
    await server.start()
    try:
        connector = aiohttp.TCPConnector(ssl=skip_verify())
        async with (
            aiohttp.ClientSession(connector=connector) as http,
            http.get(f"https://127.0.0.1:{server.port}/metrics") as resp,
        ):
            assert resp.status == 500
    finally:
        await server.stop()
