"""The TCP relay of the real-node tier (testbed.netns forward), on loopback.

Without namespaces (they need root) the relay is the same program: it prints the port it
listens on, carries bytes both ways, passes a half-close on, closes a connection the
target refuses, and exits 0 on SIGTERM.
"""

from __future__ import annotations

import errno
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def echo_server() -> Iterator[int]:
    """A loopback server that echoes upper-cased bytes until the client half-closes."""
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data.upper())
                conn.sendall(b"|eof")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield srv.getsockname()[1]
    srv.close()


def start_relay(target: int) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.netns", "forward",
         "--listen", "127.0.0.1:0", "--connect", f"127.0.0.1:{target}"],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
        return b"".join(chunks)


def test_relay_carries_both_ways_and_passes_the_half_close_on(echo_server: int) -> None:
    proc, port = start_relay(echo_server)
    try:
        assert roundtrip(port, b"hello") == b"HELLO|eof"
        big = bytes(range(97, 123)) * 40_000  # ~1 MB, many reads and writes
        assert roundtrip(port, big) == big.upper() + b"|eof"
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0


def test_a_refused_target_closes_the_client_connection() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]  # nothing listens here once the socket closes
    proc, port = start_relay(closed_port)
    try:
        # The relay may close the connection before the client has even sent: then the
        # client's send or half-close fails as on any closed connection, instead of reading
        # an EOF. Either way nothing comes back.
        try:
            answer = roundtrip(port, b"anyone?")
        except (BrokenPipeError, ConnectionResetError):
            answer = b""
        except OSError as exc:
            if exc.errno != errno.ENOTCONN:
                raise
            answer = b""
        assert answer == b""
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
