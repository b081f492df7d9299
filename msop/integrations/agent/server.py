"""``serve``: the msop-agent sidecar. :class:`Agent` answers the requests (a
:class:`~msop.integrations.podhttp.Handler`); :func:`serve` runs it on the pod's port, with
the pod's one HTTP server (:mod:`msop.integrations.podhttp`), until SIGTERM or an accepted
restart (the process then exits with ``AGENT_RESTART_EXIT_CODE`` once the answer has reached
the client)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from msop.integrations import signature
from msop.integrations.agent.config import HEX, Config
from msop.integrations.agent.runs import request_stop, show_stopped_run, wait_run_ended
from msop.integrations.agent.state import State, StateDir, log
from msop.integrations.podhttp import Limits, Request, Response, Server, listen
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
    KUBELET_RESTART_GRACE,
    MAX_GENERATION,
    signed_message,
    valid_generation,
)

__all__ = ["Agent", "Reply", "serve"]

IO_TIMEOUT: Final = 5.0
"""Seconds a client has to send its request and read the answer."""
STOPPED_RUN_WAIT: Final = 30.0
"""Seconds the sidecar, started again by a restart it asked for, waits for the stopped
training container's keeper to end before it shows the stopped run."""
_LISTEN_BACKLOG = 5
_MAX_CONNECTIONS = 16
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
    """What ``serve`` answers: :meth:`handle` without the HTTP, and the
    :class:`~msop.integrations.podhttp.Handler` methods around it.

    One restart per process: once a restart is accepted, the process ends as soon as its
    answer reached the client (``exit_process``, which tests replace); until then a request
    to restart to a newer generation gets 503.
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
        self._restarting: int | None = None
        """The generation of the restart accepted by this process."""
        self._lock = threading.Lock()  # handle() may be called from several threads

    # -- podhttp.Handler ------------------------------------------------------------------

    def route(self, method: str, path: str) -> Response | None:
        """404 for an unknown path, 405 for a wrong method, None if the request is one."""
        refused = self._refusal(method, path)
        return None if refused is None else _http(refused, path)

    def respond(self, request: Request) -> Response:
        try:
            reply = self.handle(request.method, request.path, request.body, request.client)
        except OSError as exc:  # the emptyDir: full, or gone
            self._log(f"cannot answer {request.method} {request.path}: {exc}")
            reply = _error(500, f"cannot read or write the state: {exc}")
        return _http(reply, request.path, self.exit_for_restart if reply.restart else None)

    def error(self, status: int, message: str) -> Response:
        return _http(_error(status, message), "")

    # -- the requests ---------------------------------------------------------------------

    def handle(self, method: str, path: str, body: bytes = b"", client: str = "") -> Reply:
        """The reply to a request (with its whole body, at most ``AGENT_MAX_BODY`` bytes)."""
        refused = self._refusal(method, path)
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
        with self._lock:
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
        """End the process with the code whose rule restarts every container of the pod;
        first, if the stop grace is longer than the kubelet gives, wait (that long, at
        most) for the training's run to end, so that the grace is honoured."""
        grace = self.config.stop_grace
        if grace > KUBELET_RESTART_GRACE and not wait_run_ended(self.config.directory, grace + 1):
            self._log(f"the training's run did not end within {grace:g}s")
        self._log(
            f"exiting with {AGENT_RESTART_EXIT_CODE}: the kubelet restarts the pod's containers"
        )
        self._exit(AGENT_RESTART_EXIT_CODE)

    def _refusal(self, method: str, path: str) -> Reply | None:
        want = _ROUTES.get(path)
        if want is None:
            return _error(404, f"no such path; try {AGENT_STATE_PATH}")
        if method != want:
            return _error(405, f"{path} takes {want}")
        return None

    def _restart(self, generation: int, client: str) -> Reply:
        with self.files.lock():
            current = self.files.current()
            if generation <= current.generation:
                return Reply(200, {**self.state(current), "restarting": False})
            if self._restarting is not None:
                return _error(
                    503, f"restarting to generation {self._restarting}; ask the restarted agent"
                )
            new = State(generation, requested=True)
            self.files.write(new)
        self._restarting = generation
        try:
            request_stop(self.config.directory, generation, self.config.stop_grace)
        except OSError as exc:  # the kubelet's own stop follows the exit all the same
            self._log(f"cannot ask the keeper to stop the run: {exc}")
        self._log(
            f"restart to generation {generation} (was {current.generation}) requested{_by(client)}"
        )
        return Reply(202, {**self.state(new), "restarting": True}, restart=True)

    def _release(self, generation: int, client: str) -> Reply:
        old = self.files.released()
        if old is None or generation > old:
            self.files.write_released(generation)
            self._log(f"generation {generation} released (was {old}){_by(client)}")
        return Reply(200, self.state())


def _by(client: str) -> str:
    return f" by {client}" if client else ""


def _http(reply: Reply, path: str, then: Callable[[], None] | None = None) -> Response:
    body = json.dumps(reply.body, separators=_JSON_SEPARATORS).encode() + b"\n"
    allow = _ROUTES.get(path) if reply.status == 405 else None
    return Response(reply.status, body, allow=allow, then=then)


# --- serve ----------------------------------------------------------------------------------


def serve(config: Config, host: str | None = None) -> int:
    """Run the sidecar's server until SIGTERM (0), or until a restart (the process exits
    75). 1 if the port cannot be bound."""
    agent = Agent(config)
    # Before the barrier can be released. After a restart this sidecar asked for, the old
    # training container may still be stopping: wait for its keeper to end.
    requested = agent.files.current().requested
    show_stopped_run(config.directory, log=log, wait=STOPPED_RUN_WAIT if requested else 0.0)
    try:
        sock = listen(config.port, host=host, backlog=_LISTEN_BACKLOG)
    except OSError as exc:
        log(f"cannot serve on port {config.port}: {exc}")
        return 1
    limits = Limits(IO_TIMEOUT, _MAX_CONNECTIONS, max_body=AGENT_MAX_BODY)
    server = Server(sock, agent, limits, log=log, name="msop-agent")
    state = agent.files.current()
    log(
        f"serving job {config.job} on port {config.port}, at generation {state.generation}"
        f" (released: {agent.files.released()})"
    )
    signal.signal(signal.SIGTERM, lambda _signum, _frame: server.stop())
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0
