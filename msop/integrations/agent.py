"""The restart agent: restarts every container of a training pod in place, when msop asks.

When one pod of an MSJob fails, every process of the job has to start over together (the
collective communication of the survivors cannot take a new peer in). Deleting and
recreating the pods is slow (scheduling, image checks, volumes, a new IP), so msop restarts
them in place instead, with Kubernetes 1.36's container ``restartPolicyRules``: a container
that exits with a code matching a ``RestartAllContainers`` rule makes the kubelet kill every
container of its pod and start them again, init containers first, in order; the pod keeps
its UID, IP and emptyDir volumes. msop gives every pod of such a job two containers running
this module, both mounting one emptyDir at ``$MSOP_AGENT_DIR``:

- ``msop-agent``, a native sidecar (an init container with ``restartPolicy: Always``) that
  runs ``serve``: a small HTTP server at the pod's IP. Its rule matches exit code
  ``AGENT_RESTART_EXIT_CODE`` (75), so when msop tells it the job's restart generation moved
  on (``POST /restart``) it exits with 75, and the kubelet restarts the whole pod;
- ``msop-barrier``, a regular init container after it, which runs ``barrier``: it waits until
  msop releases the pod's generation (``POST /release``), which msop does once every pod of
  the job has restarted, so that no training process starts before all were restarted.
  It is a container of its own because init containers run again only when the pod starts
  and on a restart of all containers, never when the sidecar alone restarts.

Why signatures: the pods have no API credentials to check who is calling, and anything in
the cluster network can reach the port. msop signs each request with its private P-256 key
(ECDSA, SHA-256, from ``cryptography``: :mod:`msop.integrations.signature`); the agent
holds only the public key (``$MSOP_AGENT_KEY``). The signed message names the action, the
job's UID and the generation (:func:`signed_message`), so a request cannot be replayed on
another job, turned into the other action, or moved to another generation; a replay of the
same request finds the pod at that generation already and does nothing. It names no pod:
msop signs once per job, action and generation, and sends the same request to every pod.

Generations: the pod's state is ``state.json`` in ``$MSOP_AGENT_DIR``,
``{"generation": g, "requested": bool, "waiting": bool}``, plus ``released``, the highest
generation msop released (absent: none). Both files are replaced atomically (a temporary
file and :func:`os.replace`), so a reader sees the old file or the new one; the
read-modify-writes of ``state.json`` by the two containers take an ``flock`` on ``.lock``.

- The barrier, on the pod's first start (no ``state.json``), writes the generation msop
  created the pod with (``$MSOP_AGENT_GENERATION``) and exits at once.
- ``POST /restart`` with a generation above the pod's writes it with ``requested: true``,
  answers 202 and exits 75. The barrier that runs next keeps that generation and waits.
- A pod whose own training container failed restarts without asking anyone (``requested``
  is false): its barrier moves it to the next generation and waits. msop sees a pod ahead
  of the job, moves the job to that generation, and asks the other pods (to whom that
  generation is news) to restart.
- A barrier interrupted while waiting (the pod restarted before its release, with no
  request) waits for the same generation again: nothing ran at it, so nothing failed.
- A restart accepted while the barrier waits keeps the barrier waiting, even once its own
  generation is released: the restart of every container follows, and runs it again.
- The sidecar restarting alone (it crashed) reads the files and changes nothing.
- A ``state.json`` that does not parse (our writes are atomic: only a disk fault or a
  hand edit can do that) is logged and read as ``{"generation": max(env, released),
  "requested": false}``: the pod did run before, at least at the generation it was last
  released for, so the barrier treats the restart as a failure of the pod, at the next
  generation, and waits for msop rather than letting training start uncoordinated.

The barrier has no timeout of its own: msop bounds the wait and falls back to deleting the
pod.

The standard library and ``cryptography`` (the agent runs from the operator's image, never
a training image), and nothing of msop but the contract (:mod:`msop.integrations.wire`)
and the signatures (:mod:`msop.integrations.signature`). Importing it has no side effect
and does not load the HTTP server (``http.server`` costs 2.5 MiB of resident memory), so
the operator can import :func:`signed_message` from here.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from msop.integrations import signature
from msop.integrations.wire import (
    AGENT_RELEASE_PATH,
    AGENT_RESTART_EXIT_CODE,
    AGENT_RESTART_PATH,
    AGENT_STATE_PATH,
    AGENT_VERSION,
    ENV_AGENT_DIR,
    ENV_AGENT_GENERATION,
    ENV_AGENT_JOB,
    ENV_AGENT_KEY,
    ENV_AGENT_PORT,
)

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = [
    "AGENT_RESTART_EXIT_CODE",
    "CONFIG_EXIT_CODE",
    "RELEASE",
    "RESTART",
    "Agent",
    "Config",
    "ConfigError",
    "Reply",
    "State",
    "StateDir",
    "barrier",
    "load_config",
    "main",
    "serve",
    "signed_message",
]

RESTART: Final = "restart"
RELEASE: Final = "release"
CONFIG_EXIT_CODE: Final = 2
"""A missing or invalid environment variable: not the reserved restart code."""
STATE_FILE: Final = "state.json"
RELEASED_FILE: Final = "released"
LOCK_FILE: Final = ".lock"
MAX_BODY: Final = 4096
"""Bytes of a request body; more is refused with 413."""
IO_TIMEOUT: Final = 5.0
"""Seconds a client may leave its socket idle."""
POLL: Final = 0.1
"""Seconds between two looks of the barrier at ``released``."""
MAX_GENERATION: Final = 2**63 - 1
_MAX_JOB = 128
_MAX_CONNECTIONS = 16
_DRAIN_BYTES = 65536
_DRAIN_SECONDS = 1.0
_SIGNATURE_HEX = 2 * signature.SIGNATURE_SIZE
_HEX = frozenset("0123456789abcdefABCDEF")
_JSON_SEPARATORS = (",", ":")


def signed_message(action: str, job_uid: str, generation: int) -> bytes:
    """The exact bytes msop signs for a request: see ``AGENT_VERSION`` in the wire module.

    ValueError for an unknown action, a job UID that is empty, not printable ASCII or holds
    a space, or a generation that is not an integer in [0, 2**63-1].
    """
    if action not in (RESTART, RELEASE):
        raise ValueError(f"unknown action {action!r}")
    if not _valid_job(job_uid):
        raise ValueError(f"not a job UID: {job_uid!r}")
    if not _valid_generation(generation):
        raise ValueError(f"not a generation: {generation!r}")
    return f"msop-agent/{AGENT_VERSION} {action} {job_uid} {generation}".encode("ascii")


def _valid_job(job_uid: object) -> bool:
    return (
        isinstance(job_uid, str)
        and 0 < len(job_uid) <= _MAX_JOB
        and job_uid.isascii()
        and job_uid.isprintable()
        and " " not in job_uid
    )


def _valid_generation(generation: object) -> bool:
    return (
        isinstance(generation, int)
        and not isinstance(generation, bool)
        and 0 <= generation <= MAX_GENERATION
    )


def _log(line: str) -> None:
    print(f"msop agent: {line}", file=sys.stderr, flush=True)


# --- configuration ----------------------------------------------------------------------


class ConfigError(Exception):
    """A missing or invalid environment variable; the message is one line."""


@dataclass(frozen=True)
class Config:
    """The agent's environment. ``job``, ``key`` and ``port`` only ``serve`` needs."""

    directory: Path
    generation: int
    job: str = ""
    key: bytes = b""
    port: int = 0


def _required(env: Mapping[str, str], name: str) -> str:
    value = env.get(name, "")
    if not value:
        raise ConfigError(f"{name} is not set")
    return value


def _digits(env: Mapping[str, str], name: str, limit: int) -> int:
    text = _required(env, name)
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= limit):
        raise ConfigError(f"{name}={text!r} is not an integer in [0, {limit}]")
    return int(text)


def _directory(env: Mapping[str, str]) -> Path:
    path = Path(_required(env, ENV_AGENT_DIR))
    if not path.is_dir():
        raise ConfigError(f"{ENV_AGENT_DIR}={str(path)!r} is not a directory")
    return path


def _port(env: Mapping[str, str]) -> int:
    port = _digits(env, ENV_AGENT_PORT, 65535)
    if port == 0:
        raise ConfigError(f"{ENV_AGENT_PORT}=0: the agent needs a fixed port")
    return port


def _job(env: Mapping[str, str]) -> str:
    job = _required(env, ENV_AGENT_JOB)
    if not _valid_job(job):
        raise ConfigError(f"{ENV_AGENT_JOB}={job!r} is not a job UID")
    return job


def _key(env: Mapping[str, str]) -> bytes:
    text = _required(env, ENV_AGENT_KEY)
    key = bytes.fromhex(text) if set(text) <= _HEX and len(text) % 2 == 0 else b""
    if not signature.is_public_key(key):
        raise ConfigError(
            f"{ENV_AGENT_KEY} is not a P-256 public key (130 hex digits of an uncompressed point)"
        )
    return key


def load_config(env: Mapping[str, str], *, serving: bool) -> Config:
    """The configuration from ``env``; ConfigError names the first variable that is wrong."""
    directory = _directory(env)
    generation = _digits(env, ENV_AGENT_GENERATION, MAX_GENERATION)
    if not serving:
        return Config(directory, generation)
    return Config(directory, generation, job=_job(env), key=_key(env), port=_port(env))


# --- the state files --------------------------------------------------------------------


@dataclass(frozen=True)
class State:
    """``state.json``: the pod's generation, and how it got there."""

    generation: int
    requested: bool = False
    """The sidecar asked for the restart that comes (``POST /restart``)."""
    waiting: bool = False
    """The barrier is waiting for the release of ``generation``."""

    def to_json(self) -> bytes:
        obj = {"generation": self.generation, "requested": self.requested, "waiting": self.waiting}
        return json.dumps(obj, separators=_JSON_SEPARATORS).encode() + b"\n"

    @classmethod
    def parse(cls, data: bytes) -> State | None:
        """The state in ``data``, or None if it is not one."""
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        generation, requested, waiting = (
            obj.get(k) for k in ("generation", "requested", "waiting")
        )
        if not _valid_generation(generation):
            return None
        if not isinstance(requested, bool) or not isinstance(waiting, bool):
            return None
        assert isinstance(generation, int)
        return cls(generation, requested, waiting)


class StateDir:
    """``$MSOP_AGENT_DIR``: ``state.json``, ``released`` and the lock that orders writers.

    Every read goes to the file (the other container may have changed it); every write
    replaces the file whole. A file that does not parse is logged once per process.
    """

    def __init__(self, path: Path, env_generation: int, log: Callable[[str], None] = _log) -> None:
        self.path = path
        self.env_generation = env_generation
        self._log = log
        self._warned: set[str] = set()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """An exclusive ``flock`` for a read-modify-write of ``state.json``: the sidecar and
        the barrier share the directory, and the lock, across their containers."""
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def read(self) -> State | None:
        """The pod's state; None before the barrier's first run. A corrupt file reads as
        :meth:`fallback` (see the module docstring)."""
        data = self._read(STATE_FILE)
        if data is None:
            return None
        state = State.parse(data)
        if state is None:
            fallback = self.fallback()
            self._warn(STATE_FILE, f"{STATE_FILE} is corrupt ({data[:80]!r}); read as {fallback}")
            return fallback
        return state

    def current(self) -> State:
        """The pod's state, or the environment's generation before the barrier's first run."""
        state = self.read()
        return State(self.env_generation) if state is None else state

    def fallback(self) -> State:
        released = self.released()
        return State(max(self.env_generation, -1 if released is None else released))

    def write(self, state: State) -> None:
        self._write(STATE_FILE, state.to_json())

    def released(self) -> int | None:
        """The highest released generation, or None (none yet, or a corrupt file)."""
        data = self._read(RELEASED_FILE)
        if data is None:
            return None
        text = data.decode("ascii", "replace").strip()
        if (
            not (text.isascii() and text.isdigit() and len(text) <= 19)
            or int(text) > MAX_GENERATION
        ):
            self._warn(RELEASED_FILE, f"{RELEASED_FILE} is corrupt ({data[:80]!r}); read as none")
            return None
        return int(text)

    def write_released(self, generation: int) -> None:
        self._write(RELEASED_FILE, f"{generation}\n".encode())

    def _read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None

    def _write(self, name: str, data: bytes) -> None:
        # No fsync: the files need to survive container restarts, not the node; a node that
        # goes down takes the pod with it.
        tmp = self.path / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.path / name)

    def _warn(self, key: str, line: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._log(line)


# --- serve: the requests ------------------------------------------------------------------


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
    if not _valid_generation(generation):
        return _error(400, f"generation must be an integer in [0, {MAX_GENERATION}]")
    if not (
        isinstance(signature, str) and len(signature) == _SIGNATURE_HEX and set(signature) <= _HEX
    ):
        return _error(400, f"signature must be {_SIGNATURE_HEX} hex digits")
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
        log: Callable[[str], None] = _log,
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
        """The reply to a request (with its whole body, at most ``MAX_BODY`` bytes)."""
        refused = self.route(method, path)
        if refused is not None:
            return refused
        if path == AGENT_STATE_PATH:
            return Reply(200, self.state())
        parsed = _parse_request(body)
        if isinstance(parsed, Reply):
            return parsed
        generation, sig = parsed
        action = RESTART if path == AGENT_RESTART_PATH else RELEASE
        message = signed_message(action, self.config.job, generation)
        if not signature.verify(self.config.key, message, sig):
            return _error(
                403, f"the signature is not msop's for {action} of this job at {generation}"
            )
        if action == RESTART:
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
            _log(f"cannot answer {handler.command} {path}: {exc}")
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
    if length > MAX_BODY:
        return b"", _error(413, f"the body is over {MAX_BODY} bytes")
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
    from socketserver import TCPServer

    class Server(ThreadingHTTPServer):
        """At most ``_MAX_CONNECTIONS`` connections at once (each costs a thread, and a
        request a signature check); more are closed at once. Binds without the reverse
        DNS lookup of HTTPServer.server_bind, and dual-stack on ``::``."""

        daemon_threads = True
        _slots = threading.BoundedSemaphore(_MAX_CONNECTIONS)

        def server_bind(self) -> None:
            if self.address_family == socket.AF_INET6:
                with contextlib.suppress(OSError):
                    self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            TCPServer.server_bind(self)
            self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

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
    """The server on ``host``, or on every address: dual-stack ``::`` where the pod has IPv6
    (an IPv6-only cluster gives pods only IPv6 addresses), else ``0.0.0.0``."""
    server = _server_class()
    if host is not None:
        server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return server((host, port), handler)
    if socket.has_dualstack_ipv6():
        server.address_family = socket.AF_INET6
        try:
            return server(("::", port), handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            # IPv6 disabled in this pod's network namespace: IPv4 only.
    server.address_family = socket.AF_INET
    return server(("0.0.0.0", port), handler)


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
        _log(f"cannot serve on port {config.port}: {exc}")
        return 1
    state = agent.files.current()
    _log(
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


# --- barrier ------------------------------------------------------------------------------


def _enter(files: StateDir, say: Callable[[str], None]) -> int | None:
    """The generation to wait for, written with ``waiting: true``; None on the first start."""
    with files.lock():
        state = files.read()
        if state is None:
            files.write(State(files.env_generation))
            say(
                f"first start of the pod, at generation {files.env_generation}: nothing to wait for"
            )
            return None
        if state.requested:
            target, why = state.generation, "msop asked for this restart"
        elif state.waiting:
            target, why = state.generation, "the pod restarted before its release"
        else:
            target, why = state.generation + 1, "a container of this pod failed"
        files.write(State(target, waiting=True))
    say(f"waiting for msop to release generation {target} ({why})")
    return target


def _leave(files: StateDir, target: int) -> bool:
    """Clear ``waiting`` if the state is still the barrier's own; False if the sidecar
    accepted a newer restart meanwhile (the restart of every container that follows runs
    the barrier again, so it must not let the training start now)."""
    with files.lock():
        if files.read() != State(target, waiting=True):
            return False
        files.write(State(target))
        return True


def _say(line: str) -> None:
    print(f"msop barrier: {line}", flush=True)


def barrier(config: Config, *, poll: float = POLL, say: Callable[[str], None] = _say) -> int:
    """Run the init container: wait until msop released the pod's generation, then exit 0."""
    files = StateDir(config.directory, config.generation)
    target = _enter(files, say)
    if target is None:
        return 0
    superseded = False
    while True:
        released = files.released()
        if released is not None and released >= target:
            if _leave(files, target):
                say(f"generation {target} released: the training may start")
                return 0
            if not superseded:
                superseded = True
                say("a newer restart was accepted meanwhile: waiting for it")
        time.sleep(poll)


# --- the command --------------------------------------------------------------------------

_DESCRIPTION = f"""\
msop's restart agent for the pods of an MSJob (see the module msop.integrations.agent).

serve    the msop-agent sidecar: HTTP on ${ENV_AGENT_PORT}.
           GET  {AGENT_STATE_PATH}    {{"v", "job", "generation", "released", "waiting"}}
           POST {AGENT_RESTART_PATH}  {{"generation": G, "signature": HEX}}: if G is above the pod's
                     generation, record it, answer 202, exit {AGENT_RESTART_EXIT_CODE} (the pod's
                     RestartAllContainers rule restarts every container in place)
           POST {AGENT_RELEASE_PATH}  {{"generation": G, "signature": HEX}}: let the barrier pass
                     for every generation up to G
         signature: ECDSA P-256/SHA-256 by msop's key, r||s in 128 hex digits, over
         "msop-agent/{AGENT_VERSION} <restart|release> <job uid> <G>"; a bad one gets 403.
barrier  the msop-barrier init container: on the pod's first start exit 0; after a restart
         wait until msop released the pod's generation, then exit 0.

environment: {ENV_AGENT_DIR} (the shared emptyDir), {ENV_AGENT_GENERATION} (the job's
generation when the pod was made), and for serve {ENV_AGENT_PORT}, {ENV_AGENT_JOB} (the job's
UID), {ENV_AGENT_KEY} (msop's public key, 130 hex digits). A missing or bad one exits
{CONFIG_EXIT_CODE}.
"""


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m msop.integrations.agent",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serving = commands.add_parser("serve", help="run the msop-agent sidecar")
    serving.add_argument(
        "--host", help="the address to listen on (default: every address, IPv6 and IPv4)"
    )
    commands.add_parser("barrier", help="run the msop-barrier init container")
    args = parser.parse_args(argv)
    try:
        config = load_config(os.environ, serving=args.command == "serve")
    except ConfigError as exc:
        print(f"msop agent {args.command}: {exc}", file=sys.stderr, flush=True)
        return CONFIG_EXIT_CODE
    if args.command == "serve":
        return serve(config, args.host)
    return barrier(config)


if __name__ == "__main__":
    sys.exit(main())
