"""The one HTTP server of msop's processes in a training pod: the progress reporter's (a
daemon thread inside the training process) and the restart agent's (the sidecar's main
thread).

Both answer a few small requests from the operator, and both must stay up whatever a client
does, so the server is built for that and nothing more:

- one thread, non-blocking sockets and a selector: a silent or slow client costs a slot, never
  a thread, and never delays another client;
- at most ``max_connections`` clients at once (the others wait in the listen backlog), each
  with ``io_timeout`` seconds in total to send its request and read the answer, however slowly
  it trickles bytes, and at most ``max_head`` bytes of head and ``max_body`` of body: neither a
  silent client nor a flood can hold the server or grow its memory;
- one request per connection (``Connection: close``). After the answer the server half-closes
  and reads what the client still sends (a little, briefly) before it closes: closing a socket
  with unread input sends a reset, which can destroy the answer before the client read it.
  Only then does it run the answer's ``then`` (the agent's exit for a restart).

The application is a :class:`Handler`: :meth:`~Handler.route` refuses a wrong path or method
before any body is read, :meth:`~Handler.respond` answers a whole request, and
:meth:`~Handler.error` words the refusals of the server itself (400, 413, 431, 500).

:func:`listen` makes the listening socket: on one address, or on every address of the pod,
dual-stack ``::`` where the pod has IPv6 (an IPv6-only cluster gives pods only IPv6
addresses), else ``0.0.0.0`` (a pod whose network namespace has IPv6 disabled cannot bind
``::``).

Standard library only: it runs in training images.
"""

from __future__ import annotations

import contextlib
import errno
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Protocol

__all__ = ["Handler", "Limits", "Request", "Response", "Server", "listen"]

_REASONS: Final = {
    200: "OK",
    202: "Accepted",
    204: "No Content",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Content Too Large",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_WITH_BODY: Final = frozenset({"POST", "PUT", "PATCH"})
_ACCEPT_RETRY: Final = 0.5
"""Seconds before accepting again after an accept that failed in a way that could repeat at
once (EMFILE)."""
_DRAIN_SECONDS: Final = 1.0
_DRAIN_BYTES: Final = 65536
_STOP_JOIN_TIMEOUT: Final = 1.0
_ACCEPT, _WAKE = "accept", "wake"


def listen(port: int, *, host: str | None = None, backlog: int) -> socket.socket:
    """A listening TCP socket on ``host`` (an IPv4 or IPv6 address), or on every address
    when ``host`` is None. Port 0 picks a free one.

    Raises OSError (EADDRINUSE if the port is taken).
    """
    if host is not None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=backlog)
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            # IPv6 disabled in this pod's network namespace: IPv4 only.
    return socket.create_server(("0.0.0.0", port), backlog=backlog)


@dataclass(frozen=True)
class Request:
    """A whole request: its method, its path without the query string, the body (empty
    unless the method takes one), and the client's address."""

    method: str
    path: str
    body: bytes = b""
    client: str = ""


@dataclass(frozen=True)
class Response:
    """An answer. ``allow`` is the ``Allow`` header of a 405. ``then`` runs once the client
    has the whole answer and the connection is closed (or the client went away)."""

    status: int
    body: bytes = b""
    content_type: str = "application/json"
    allow: str | None = None
    then: Callable[[], None] | None = None

    def encode(self, *, head_only: bool = False) -> bytes:
        lines = [f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Unknown')}"]
        if self.status != 204:
            lines += [f"Content-Type: {self.content_type}", f"Content-Length: {len(self.body)}"]
        if self.allow is not None:
            lines.append(f"Allow: {self.allow}")
        lines += ["Cache-Control: no-store", "Connection: close", "", ""]
        head = "\r\n".join(lines).encode("ascii")
        return head if head_only or self.status == 204 else head + self.body


class Handler(Protocol):
    """What a server serves."""

    def route(self, method: str, path: str) -> Response | None:
        """The refusal of a request for a path or method that is not served (404, 405),
        decided before its body is read; None if it is served."""
        ...

    def respond(self, request: Request) -> Response:
        """The answer to a whole request that :meth:`route` let through."""
        ...

    def error(self, status: int, message: str) -> Response:
        """The answer to a request the server refuses itself: 400 (malformed), 413 (body
        over ``max_body``), 431 (head over ``max_head``), 500 (:meth:`respond` raised)."""
        ...


@dataclass(frozen=True)
class Limits:
    """What one client may cost: see the module docstring."""

    io_timeout: float
    max_connections: int
    max_head: int = 8192
    max_body: int = 0


@dataclass
class _Connection:
    client: str
    deadline: float
    data: bytearray = field(default_factory=bytearray)
    head: tuple[str, str, Mapping[str, str], int] | None = None
    """method, path, headers and where the body starts, once the head is complete"""
    reply: bytes | None = None
    then: Callable[[], None] | None = None
    draining: bool = False
    drained: int = 0


class Server:
    """:class:`Handler` served on a listening socket (see the module docstring).

    :meth:`start` serves from a daemon thread, :meth:`run` from the calling thread; either
    until :meth:`stop`. ``log`` gets one line when the server stops on an error and when
    :meth:`Handler.respond` raises.
    """

    def __init__(
        self,
        listener: socket.socket,
        handler: Handler,
        limits: Limits,
        *,
        log: Callable[[str], None],
        name: str = "msop-http",
    ) -> None:
        listener.setblocking(False)
        self._listener = listener
        self.port: int = listener.getsockname()[1]
        self._handler = handler
        self._limits = limits
        self._log = log
        self._name = name
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Serve from a daemon thread."""
        self._thread = threading.Thread(target=self.run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the serving loop to end; safe from any thread and from a signal handler."""
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def close(self) -> None:
        """Stop serving and close every socket; waits at most about a second for the thread."""
        self.stop()
        if self._thread is not None:
            self._thread.join(_STOP_JOIN_TIMEOUT)
        self._wake_w.close()

    def close_in_child(self) -> None:
        """In a forked child, where the serving thread does not exist: close the inherited
        sockets."""
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    def run(self) -> None:
        """Serve until :meth:`stop`; then close the listener and every connection."""
        sel = selectors.DefaultSelector()
        conns: dict[socket.socket, _Connection] = {}
        accepting = True
        retry_accept_at: float | None = None
        try:
            sel.register(self._listener, selectors.EVENT_READ, _ACCEPT)
            sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
            while True:
                waits = [c.deadline for c in conns.values()]
                if retry_accept_at is not None:
                    waits.append(retry_accept_at)
                timeout = max(0.0, min(waits) - time.monotonic()) if waits else None
                for key, mask in sel.select(timeout):
                    if key.data == _WAKE:
                        return
                    if key.data == _ACCEPT:
                        if not self._accept(sel, conns):
                            retry_accept_at = time.monotonic() + _ACCEPT_RETRY
                    else:
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        self._io(sel, conns, sock, mask)
                now = time.monotonic()
                self._expire(sel, conns, now)
                if retry_accept_at is not None and retry_accept_at <= now:
                    retry_accept_at = None
                want = len(conns) < self._limits.max_connections and retry_accept_at is None
                accepting = self._set_accepting(sel, accepting, want)
        except Exception as exc:
            self._log(f"the HTTP server on port {self.port} stopped: {exc!r}")
        finally:
            for sock in conns:  # an answer's ``then`` is not run: the server is going away
                sock.close()
            sel.close()
            self._listener.close()
            self._wake_r.close()

    # -- connections ----------------------------------------------------------------------

    def _expire(
        self, sel: selectors.BaseSelector, conns: dict[socket.socket, _Connection], now: float
    ) -> None:
        """Drop the connections whose deadline has passed."""
        for sock, conn in list(conns.items()):
            if conn.deadline <= now:
                self._drop(sel, conns, sock)

    def _set_accepting(self, sel: selectors.BaseSelector, accepting: bool, want: bool) -> bool:
        """Listen for new clients, or stop (too many connections, or accept failing)."""
        if want and not accepting:
            sel.register(self._listener, selectors.EVENT_READ, _ACCEPT)
        elif accepting and not want:
            sel.unregister(self._listener)
        return want

    def _accept(self, sel: selectors.BaseSelector, conns: dict[socket.socket, _Connection]) -> bool:
        """Accept one client; False on an error that could repeat at once (e.g. EMFILE)."""
        try:
            sock, address = self._listener.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return True
        except OSError:
            return False
        sock.setblocking(False)
        client = str(address[0]) if isinstance(address, tuple) and address else ""
        conns[sock] = _Connection(client, time.monotonic() + self._limits.io_timeout)
        sel.register(sock, selectors.EVENT_READ)
        return True

    def _drop(
        self,
        sel: selectors.BaseSelector,
        conns: dict[socket.socket, _Connection],
        sock: socket.socket,
    ) -> None:
        """Close a connection, then run its answer's ``then`` (once)."""
        conn = conns.pop(sock)
        sel.unregister(sock)
        sock.close()
        if conn.then is not None:
            then, conn.then = conn.then, None
            then()

    def _io(
        self,
        sel: selectors.BaseSelector,
        conns: dict[socket.socket, _Connection],
        sock: socket.socket,
        mask: int,
    ) -> None:
        conn = conns[sock]
        try:
            if conn.draining:
                data = sock.recv(4096)
                conn.drained += len(data)
                if not data or conn.drained >= _DRAIN_BYTES:
                    self._drop(sel, conns, sock)
                return
            if conn.reply is None and mask & selectors.EVENT_READ:
                data = sock.recv(4096)
                if not data:
                    self._drop(sel, conns, sock)
                    return
                conn.data += data
                answer = self._answer(conn)
                if answer is None:
                    return
                conn.reply, conn.then = answer
                sel.modify(sock, selectors.EVENT_WRITE)
            if conn.reply is not None:
                sent = sock.send(conn.reply)
                conn.reply = conn.reply[sent:]
                if not conn.reply:
                    sock.shutdown(socket.SHUT_WR)
                    conn.draining = True
                    conn.deadline = min(conn.deadline, time.monotonic() + _DRAIN_SECONDS)
                    sel.modify(sock, selectors.EVENT_READ)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._drop(sel, conns, sock)

    # -- requests -------------------------------------------------------------------------

    def _answer(self, conn: _Connection) -> tuple[bytes, Callable[[], None] | None] | None:
        """The encoded answer and its ``then`` once the request is complete; None while
        more is needed."""
        method = "GET"
        try:
            if conn.head is None:
                refusal = self._read_head(conn)
                if refusal is not None:
                    return refusal.encode(), refusal.then
                if conn.head is None:
                    return None
            method, path, headers, start = conn.head
            refused = self._handler.route(method, path)
            if refused is None:
                refused = self._body_refused(method, headers)
            if refused is not None:
                return refused.encode(head_only=method == "HEAD"), refused.then
            length = int(headers.get("content-length", "0")) if method in _WITH_BODY else 0
            if len(conn.data) - start < length:
                return None
            body = bytes(conn.data[start : start + length])
            try:
                response = self._handler.respond(Request(method, path, body, conn.client))
            except Exception as exc:
                self._log(f"cannot answer {method} {path}: {exc!r}")
                response = self._handler.error(500, "the server failed to answer")
        except Exception as exc:  # the handler's route or error raised: still answer
            self._log(f"cannot answer a request: {exc!r}")
            response = Response(500, b"", "text/plain")
        return response.encode(head_only=method == "HEAD"), response.then

    def _read_head(self, conn: _Connection) -> Response | None:
        """Parse the head into ``conn.head`` once it is complete; a refusal if it is bad."""
        data = conn.data
        end, sep = data.find(b"\r\n\r\n"), 4
        if end < 0:
            end, sep = data.find(b"\n\n"), 2
        if end < 0 or end > self._limits.max_head:
            if len(data) > self._limits.max_head:
                return self._handler.error(431, "the request's head is too large")
            return None
        lines = bytes(data[:end]).decode("latin-1").splitlines()
        parts = lines[0].split() if lines else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            return self._handler.error(400, "not an HTTP request")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if colon:
                headers[name.strip().lower()] = value.strip()
        conn.head = (parts[0], parts[1].split("?", 1)[0], headers, end + sep)
        return None

    def _body_refused(self, method: str, headers: Mapping[str, str]) -> Response | None:
        """The refusal of a request whose body cannot be read: chunked, of no or a bad
        length, or over ``max_body``."""
        if method not in _WITH_BODY:
            return None
        if "transfer-encoding" in headers:
            return self._handler.error(400, "send the body with a Content-Length")
        text = headers.get("content-length", "")
        if not (text.isascii() and text.isdigit()):
            return self._handler.error(400, f"a {method} needs a Content-Length")
        if int(text) > self._limits.max_body:
            return self._handler.error(413, f"the body is over {self._limits.max_body} bytes")
        return None
