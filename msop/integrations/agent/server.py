"""``serve``: the msop-agent sidecar. :class:`Agent` answers the requests (without the
HTTP); :func:`serve` runs it behind ``http.server`` on the pod's port until SIGTERM or an
accepted restart (the process then exits with ``AGENT_RESTART_EXIT_CODE``)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from msop.integrations import signature
from msop.integrations.agent.config import HEX, Config
from msop.integrations.agent.state import State, StateDir, log
from msop.integrations.listener import listen
from msop.integrations.wire import (
    AGENT_MAX_BODY,
    AGENT_RELEASE,
    AGENT_RELEASE_PATH,
    AGENT_RESTART,
    AGENT_RESTART_EXIT_CODE,
    AGENT_RESTART_PATH,
    AGENT_SIGNATURE_HEX,
    AGENT_STATE_PATH,
    AGENT_VERSION,
    MAX_GENERATION,
    signed_message,
    valid_generation,
)

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Agent", "Reply", "serve"]

IO_TIMEOUT: Final = 5.0
"""Seconds a client may leave its socket idle."""
_LISTEN_BACKLOG = 5
_MAX_CONNECTIONS = 16
_DRAIN_BYTES = 65536
_DRAIN_SECONDS = 1.0
_JSON_SEPARATORS = (",", ":")


@dataclass(frozen=True)
class Reply:
    """An answer: the status, the JSON object, and whether the process must then exit with
    ``AGENT_RESTART_EXIT_CODE`` (after the answer has reached the client)."""

    status: int
    body: Mapping[str, Any]
    restart: bool = False


_ROUTES: Final = {
    AGENT_STATE_PATH: "GET",
    AGENT_RESTART_PATH: "POST",
    AGENT_RELEASE_PATH: "POST",
}


def _error(status: int, message: str) -> Reply:
    return Reply(status, {"v": AGENT_VERSION, "error": message})


def _parse_request(body: bytes) -> tuple[int, bytes] | Reply:
    """``(generation, signature)`` from a POST body, or the 400 reply saying what is wrong."""
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return _error(400, "the body is not JSON")
    if not isinstance(obj, dict):
        return _error(400, "the body is not a JSON object")
    generation, signature = obj.get("generation"), obj.get("signature")
    if not valid_generation(generation):
        return _error(400, f"generation must be an integer in [0, {MAX_GENERATION}]")
    if not (
        isinstance(signature, str)
        and len(signature) == AGENT_SIGNATURE_HEX
        and set(signature) <= HEX
    ):
        return _error(400, f"signature must be {AGENT_SIGNATURE_HEX} hex digits")
    assert isinstance(generation, int)
    return generation, bytes.fromhex(signature)


class Agent:
    """What ``serve`` answers, without the HTTP: :meth:`route`, then :meth:`handle`.

    ``exit_process`` ends the process after a restart's answer went out
    (:meth:`exit_for_restart`); tests pass another.
    """

    def __init__(
        self,
        config: Config,
        *,
        log: Callable[[str], None] = log,
        exit_process: Callable[[int], object] = os._exit,
    ) -> None:
        self.config = config
        self.files = StateDir(config.directory, config.generation, log)
        self._log = log
        self._exit = exit_process
        # Held from an accepted restart to the end of the process: one restart per process.
        self._restart_lock = threading.Lock()
        self._release_lock = threading.Lock()

    def route(self, method: str, path: str) -> Reply | None:
        """404 for an unknown path, 405 for a wrong method, None if the request is one."""
        want = _ROUTES.get(path)
        if want is None:
            return _error(404, f"no such path; try {AGENT_STATE_PATH}")
        if method != want:
            return _error(405, f"{path} takes {want}")
        return None

    def handle(self, method: str, path: str, body: bytes = b"", client: str = "") -> Reply:
        """The reply to a request (with its whole body, at most ``AGENT_MAX_BODY`` bytes)."""
        refused = self.route(method, path)
        if refused is not None:
            return refused
        if path == AGENT_STATE_PATH:
            return Reply(200, self.state())
        parsed = _parse_request(body)
        if isinstance(parsed, Reply):
            return parsed
        generation, sig = parsed
        action = AGENT_RESTART if path == AGENT_RESTART_PATH else AGENT_RELEASE
        message = signed_message(action, self.config.job, generation)
        if not signature.verify(self.config.key, message, sig):
            return _error(
                403, f"the signature is not msop's for {action} of this job at {generation}"
            )
        if action == AGENT_RESTART:
            return self._restart(generation, client)
        return self._release(generation, client)

    def state(self, current: State | None = None) -> dict[str, Any]:
        """The object of ``GET /state``."""
        state = self.files.current() if current is None else current
        return {
            "v": AGENT_VERSION,
            "job": self.config.job,
            "generation": state.generation,
            "released": self.files.released(),
            "waiting": state.waiting,
        }

    def exit_for_restart(self) -> None:
        """End the process with the code whose rule restarts every container of the pod."""
        self._log(
            f"exiting with {AGENT_RESTART_EXIT_CODE}: the kubelet restarts the pod's containers"
        )
        self._exit(AGENT_RESTART_EXIT_CODE)

    def _restart(self, generation: int, client: str) -> Reply:
        self._restart_lock.acquire()  # a second request waits here until the process ends
        accepted = False
        try:
            with self.files.lock():
                current = self.files.current()
                if generation <= current.generation:
                    return Reply(200, {**self.state(current), "restarting": False})
                new = State(generation, requested=True)
                self.files.write(new)
            accepted = True
            self._log(
                f"restart to generation {generation} (was {current.generation}) requested"
                f"{_by(client)}"
            )
            return Reply(202, {**self.state(new), "restarting": True}, restart=True)
        finally:
            if not accepted:
                self._restart_lock.release()

    def _release(self, generation: int, client: str) -> Reply:
        with self._release_lock:
            old = self.files.released()
            if old is None or generation > old:
                self.files.write_released(generation)
                self._log(f"generation {generation} released (was {old}){_by(client)}")
        return Reply(200, self.state())


def _by(client: str) -> str:
    return f" by {client}" if client else ""


# --- serve: the HTTP server ---------------------------------------------------------------


def _handler_class(agent: Agent) -> type[BaseHTTPRequestHandler]:
    """The request handler of ``serve`` for ``agent`` (imports the HTTP server)."""
    from http.server import BaseHTTPRequestHandler

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "msop-agent"
        sys_version = ""
        timeout = IO_TIMEOUT  # the socket's; a silent client is dropped

        def do_GET(self) -> None:
            _respond(self, agent)

        do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_GET

        def log_message(self, format: str, *args: Any) -> None:
            pass  # one line per change of state is the agent's own; polls are not logged

    return Handler


def _respond(handler: BaseHTTPRequestHandler, agent: Agent) -> None:
    """Answer one request; after an accepted restart, end the process."""
    path = handler.path.split("?", 1)[0]
    reply = agent.route(handler.command, path)
    body = b""
    if reply is None and handler.command == "POST":
        body, reply = _read_body(handler)
    if reply is None:
        try:
            reply = agent.handle(handler.command, path, body, str(handler.client_address[0]))
        except OSError as exc:  # the emptyDir: full, or gone
            log(f"cannot answer {handler.command} {path}: {exc}")
            reply = _error(500, f"cannot read or write the state: {exc}")
    try:
        _send(handler, reply, path)
        if reply.status == 413 or reply.restart:
            _close_gently(handler.connection)
    finally:
        if reply.restart:
            agent.exit_for_restart()


def _read_body(handler: BaseHTTPRequestHandler) -> tuple[bytes, Reply | None]:
    if handler.headers.get("Transfer-Encoding"):
        return b"", _error(400, "send the body with a Content-Length")
    text = handler.headers.get("Content-Length", "")
    if not (text.isascii() and text.isdigit()):
        return b"", _error(400, "a POST needs a Content-Length")
    length = int(text)
    if length > AGENT_MAX_BODY:
        return b"", _error(413, f"the body is over {AGENT_MAX_BODY} bytes")
    body = handler.rfile.read(length)
    if len(body) < length:
        return b"", _error(400, "the body ended early")
    return body, None


def _send(handler: BaseHTTPRequestHandler, reply: Reply, path: str) -> None:
    data = json.dumps(reply.body, separators=_JSON_SEPARATORS).encode() + b"\n"
    handler.send_response(reply.status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.send_header("Cache-Control", "no-store")
    handler.send_header("Connection", "close")
    if reply.status == 405:
        handler.send_header("Allow", _ROUTES[path])
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(data)
    handler.wfile.flush()
    handler.close_connection = True


def _close_gently(sock: socket.socket) -> None:
    """Send FIN, then read what the client still sends until it closes (a little, briefly):
    closing a socket with unread input sends a reset, which can destroy the answer before
    the client has read it."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(_DRAIN_SECONDS)
        deadline, drained = time.monotonic() + _DRAIN_SECONDS, 0
        while drained < _DRAIN_BYTES and time.monotonic() < deadline:
            chunk = sock.recv(4096)
            if not chunk:
                break
            drained += len(chunk)


def _server_class() -> type[ThreadingHTTPServer]:
    from http.server import ThreadingHTTPServer

    class Server(ThreadingHTTPServer):
        """At most ``_MAX_CONNECTIONS`` connections at once (each costs a thread, and a
        request a signature check); more are closed at once."""

        daemon_threads = True
        _slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)

        def process_request(self, request: Any, client_address: Any) -> None:
            if not self._slots.acquire(blocking=False):
                self.shutdown_request(request)
                return
            try:
                super().process_request(request, client_address)
            except BaseException:
                self._slots.release()
                raise

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                self._slots.release()

    return Server


def _bind(
    host: str | None, port: int, handler: type[BaseHTTPRequestHandler]
) -> ThreadingHTTPServer:
    """The server on the pod's listening socket (:func:`~msop.integrations.listener.listen`:
    ``host``, or every address), without HTTPServer's own bind and its reverse DNS lookup."""
    sock = listen(port, host=host, backlog=_LISTEN_BACKLOG)
    server_class = _server_class()
    server_class.address_family = sock.family
    try:
        server = server_class(sock.getsockname()[:2], handler, bind_and_activate=False)
    except BaseException:
        sock.close()
        raise
    server.socket.close()
    server.socket = sock
    server.server_address = sock.getsockname()
    server.server_name, server.server_port = str(server.server_address[0]), server.server_address[1]
    return server


class _Stop(Exception):
    """SIGTERM: the pod is going away."""


def _stop(_signum: int, _frame: object) -> None:
    raise _Stop


def serve(config: Config, host: str | None = None) -> int:
    """Run the sidecar's server until SIGTERM (0), or until a restart (the process exits
    75). 1 if the port cannot be bound."""
    agent = Agent(config)
    try:
        server = _bind(host, config.port, _handler_class(agent))
    except OSError as exc:
        log(f"cannot serve on port {config.port}: {exc}")
        return 1
    state = agent.files.current()
    log(
        f"serving job {config.job} on port {config.port}, at generation {state.generation}"
        f" (released: {agent.files.released()})"
    )
    signal.signal(signal.SIGTERM, _stop)
    try:
        server.serve_forever()
    except (_Stop, KeyboardInterrupt):
        pass
    finally:
        server.server_close()
    return 0
