"""Simulated progress reporters for the ``progress`` scenario.

One listening socket per running Worker 0 pod, bound to that pod's own (loopback) IP
and its ``MSOP_PROGRESS_PORT``, answering ``GET /progress`` the way ``msop.integrations``
would: a version-1 report naming the pod, with a ``seq`` that grows on every answer (the
worst case for the operator: every poll brings a new report, so a status write) and a
percentage that advances. It never binds a wildcard address: a pod IP that is not a
loopback one is skipped, so nothing listens on the machine's external interfaces.

A reporter's ``mode`` says how it answers: ``answer``; ``silent`` (accepts, reads the
request and never answers: a hung process or a black-holed node, the poller's timeout
ends it); a ``refuse`` reporter has no socket at all (the connection is refused).

The HTTP handling is a minimal HTTP/1.1 server over ``asyncio.Protocol`` (one request per
connection, ``Connection: close``, as the poller asks). :func:`report_body` and
:func:`response_for` are pure.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import resource
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from msop.api import constants as c
from msop.msjob import desired
from msop.msjob.podstate import slot_of

JSON = dict[str, Any]
MAX_REQUEST_BYTES = 8192
TOTAL_STEPS = 100


def report_body(pod: str, uid: str, seq: int, interval: float) -> bytes:
    """The version-1 report of answer number ``seq`` (1, 2, ...): one more step each
    time (so one more percent, up to 99), an epoch every 10 steps, a falling loss."""
    step = min(seq, TOTAL_STEPS - 1)
    body = {
        "version": 1,
        "pod": {"name": pod, "uid": uid},
        "seq": seq,
        "age": 0.5,
        "step": step,
        "totalSteps": TOTAL_STEPS,
        "epoch": step // 10,
        "totalEpochs": TOTAL_STEPS // 10,
        "estimatedRemainingSeconds": round((TOTAL_STEPS - step) * interval),
        "metrics": [
            {"name": "loss", "value": f"{1.0 / (1 + seq):.4f}"},
            {"name": "accuracy", "value": f"{1 - 1.0 / (1 + seq):.4f}"},
        ],
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _response(status: str, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def response_for(request: bytes, body: bytes) -> bytes:
    """The answer to one HTTP request head: ``body`` for ``GET /progress``, 404 for
    another path, 405 for another method, 400 for garbage."""
    line = request.split(b"\r\n", 1)[0].split()
    if len(line) != 3 or not line[2].startswith(b"HTTP/1."):
        return _response("400 Bad Request", b"", "text/plain")
    method, target = line[0], line[1].split(b"?", 1)[0]
    if method != b"GET":
        return _response("405 Method Not Allowed", b"", "text/plain")
    if target != b"/progress":
        return _response("404 Not Found", b"", "text/plain")
    return _response("200 OK", body)


@dataclass
class Reporter:
    """The simulated reporter of one Worker 0 pod."""

    pod: str
    uid: str
    ip: str
    port: int
    interval: float
    mode: str = "answer"
    seq: int = 0
    requests: list[float] = field(default_factory=list)
    """Wall-clock time (``time.time()``) of every complete request received."""
    answers: list[float] = field(default_factory=list)
    """Wall-clock time of every report sent."""
    server: asyncio.AbstractServer | None = None

    def respond(self, request: bytes) -> bytes | None:
        """The bytes to send for ``request``, or None to stay silent."""
        now = time.time()
        self.requests.append(now)
        if self.mode != "answer":
            return None
        self.seq += 1
        self.answers.append(now)
        return response_for(request, report_body(self.pod, self.uid, self.seq, self.interval))


class _Connection(asyncio.Protocol):
    def __init__(self, reporter: Reporter) -> None:
        self.reporter = reporter
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data
        if b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_REQUEST_BYTES:
                self.transport.close()
            return
        request, self.buf = self.buf, b""
        answer = self.reporter.respond(request)
        if answer is not None:
            self.transport.write(answer)
            self.transport.close()


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's open-file limit to at least ``wanted`` (the hard limit too,
    which root may); return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return soft
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
        except (ValueError, OSError):
            wanted = hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return wanted


def worker0_address(pod: JSON) -> tuple[str, int] | None:
    """``(podIP, progress port)`` of a Running Worker 0 pod with a loopback IP, else None."""
    status = pod.get("status") or {}
    if slot_of(pod) != (c.WORKER, 0) or status.get("phase") != "Running":
        return None
    ip, port = status.get("podIP"), desired.progress_port(pod)
    if not ip or port is None:
        return None
    try:
        if not ipaddress.ip_address(ip).is_loopback:
            return None  # never listen on anything but loopback
    except ValueError:
        return None
    return str(ip), port


class Reporters:
    """Reporters for the Worker 0 pods a watch reports (``__call__`` is a
    :func:`bench.observe.watch_forever` handler)."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.by_pod: dict[str, Reporter] = {}
        self.skipped: set[str] = set()
        """Worker 0 pods without a usable loopback address (not listened for)."""
        self.errors: list[str] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def __call__(self, type_: str, obj: JSON, now: float) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if type_ == "DELETED" or name in self.by_pod:
            return
        if slot_of(obj) != (c.WORKER, 0):
            return
        address = worker0_address(obj)
        if address is None:
            if (obj.get("status") or {}).get("phase") == "Running":
                self.skipped.add(name)
            return
        rep = Reporter(name, str(meta.get("uid", "")), *address, interval=self.interval)
        self.by_pod[name] = rep
        task = asyncio.create_task(self._listen(rep))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _listen(self, rep: Reporter) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((rep.ip, rep.port))
            sock.listen(64)
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            rep.server = await loop.create_server(lambda: _Connection(rep), sock=sock)
        except OSError as e:
            sock.close()
            self.errors.append(f"{rep.pod} {rep.ip}:{rep.port}: {e}")

    def listening(self) -> int:
        return sum(1 for r in self.by_pod.values() if r.server is not None)

    def answered(self) -> int:
        """Reporters that have sent at least one report."""
        return sum(1 for r in self.by_pod.values() if r.answers)

    async def set_mode(self, pods: list[str], mode: str) -> None:
        """``refuse``: close the pods' listening sockets; ``answer``/``silent``: (re)open
        them and answer so."""
        for name in pods:
            rep = self.by_pod[name]
            rep.mode = mode
            if mode == "refuse":
                if rep.server is not None:
                    rep.server.close()
                    await rep.server.wait_closed()
                    rep.server = None
            elif rep.server is None:
                await self._listen(rep)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for rep in self.by_pod.values():
            if rep.server is not None:
                rep.server.close()
        for rep in self.by_pod.values():
            if rep.server is not None:
                await rep.server.wait_closed()
                rep.server = None
