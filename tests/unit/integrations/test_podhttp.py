"""The pods' one HTTP server (msop.integrations.podhttp): its listening socket, and the
server itself over real sockets on 127.0.0.1 with a small handler."""

from __future__ import annotations

import errno
import http.client
import json
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest

from msop.integrations.podhttp import Limits, Request, Response, Server, listen
from testbed.netns import private_loopback
from testbed.paths import REPO

WAIT = 20.0


def test_on_one_address() -> None:
    with listen(0, host="127.0.0.1", backlog=4) as server:
        assert server.family == socket.AF_INET
        host, port = server.getsockname()
        assert host == "127.0.0.1"
        with socket.create_connection((host, port), timeout=5):
            conn, _ = server.accept()
            conn.close()


def test_a_port_in_use_raises_eaddrinuse() -> None:
    with listen(0, host="127.0.0.1", backlog=4) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as raised:
            listen(port, host="127.0.0.1", backlog=4).close()
        assert raised.value.errno == errno.EADDRINUSE


def test_by_default_every_address_ipv4_and_ipv6() -> None:
    # In a network namespace of its own (only its loopback): a unit test never listens on
    # this machine's interfaces.
    code = textwrap.dedent(
        """
        import json, socket
        from msop.integrations.podhttp import listen
        server = listen(0, backlog=4)
        port = server.getsockname()[1]
        reached = []
        for host in ("127.0.0.1", "::1"):
            with socket.create_connection((host, port), timeout=5):
                server.accept()[0].close()
                reached.append(host)
        print(json.dumps({"family": int(server.family), "reached": reached}))
        """
    )
    out = subprocess.run(
        private_loopback([sys.executable, "-c", code]), capture_output=True, text=True,
        timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result == {"family": int(socket.AF_INET6), "reached": ["127.0.0.1", "::1"]}


class Echo:
    """GET /hello and POST /echo; anything else 404; ``then`` of every answer counted."""

    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.thens = 0
        self.after_then = threading.Event()

    def route(self, method: str, path: str) -> Response | None:
        if path not in ("/hello", "/echo", "/boom"):
            return Response(404, b"no\n", "text/plain")
        return None

    def respond(self, request: Request) -> Response:
        self.requests.append(request)
        if request.path == "/boom":
            raise RuntimeError("boom")
        body = request.body if request.path == "/echo" else b"x" * 300_000
        return Response(200, body, "application/octet-stream", then=self.then)

    def error(self, status: int, message: str) -> Response:
        return Response(status, json.dumps({"error": message}).encode())

    def then(self) -> None:
        self.thens += 1
        self.after_then.set()


@pytest.fixture
def echo() -> Iterator[tuple[Echo, int, list[str]]]:
    handler = Echo()
    logged: list[str] = []
    limits = Limits(io_timeout=10, max_connections=4, max_body=1000)
    server = Server(listen(0, host="127.0.0.1", backlog=8), handler, limits, log=logged.append)
    server.start()
    yield handler, server.port, logged
    server.close()


def request(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    try:
        conn.request(method, path, body)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


Served = tuple[Echo, int, list[str]]


def test_a_large_answer_arrives_whole_then_then_runs_once(echo: Served) -> None:
    handler, port, _ = echo
    assert request(port, "GET", "/hello?q=1") == (200, b"x" * 300_000)
    assert handler.after_then.wait(WAIT) and handler.thens == 1
    assert handler.requests[0].path == "/hello" and handler.requests[0].client == "127.0.0.1"


def test_a_body_sent_in_pieces_is_read_whole(echo: Served) -> None:
    _, port, _ = echo
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\nhello")
        s.sendall(b"world")
        answer = recv_all(s)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nhelloworld")


def test_a_refused_request_with_an_unread_body_still_gets_its_answer(
    echo: Served,
) -> None:
    # The server answers 404 before reading the 200 kB body, then reads it away before it
    # closes: a close with unread input would reset the connection and lose the answer.
    _, port, _ = echo
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        s.sendall(b"POST /nothing HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + b"y" * 200_000)
        assert recv_all(s) == (
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n"
            b"Cache-Control: no-store\r\nConnection: close\r\n\r\nno\n"
        )


def test_bodies_over_the_limit_chunked_or_without_length_are_refused(
    echo: Served,
) -> None:
    handler, port, _ = echo
    assert request(port, "POST", "/echo", b"z" * 1001)[0] == 413
    assert request(port, "POST", "/echo", b"z" * 1000) == (200, b"z" * 1000)
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        assert recv_all(s).startswith(b"HTTP/1.1 400 ")
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        s.sendall(b"POST /echo HTTP/1.1\r\n\r\n")
        assert b"needs a Content-Length" in recv_all(s)
    assert [r.body for r in handler.requests] == [b"z" * 1000]


def test_a_handler_that_raises_gets_a_500_and_the_server_serves_on(
    echo: Served,
) -> None:
    _, port, logged = echo
    assert request(port, "GET", "/boom")[0] == 500
    assert any("boom" in line for line in logged)
    assert request(port, "POST", "/echo", b"ok") == (200, b"ok")


def test_run_in_the_calling_thread_ends_at_stop() -> None:
    limits = Limits(io_timeout=1, max_connections=1)
    server = Server(listen(0, host="127.0.0.1", backlog=1), Echo(), limits, log=print)
    port = server.port
    runner = threading.Thread(target=server.run)
    runner.start()
    assert request(port, "GET", "/else")[0] == 404
    server.stop()
    runner.join(WAIT)
    assert not runner.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=WAIT).close()


def recv_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)
