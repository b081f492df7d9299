"""Every pod's msop agent, and the kubelet's part in a restart in place, in one process.

kwok runs no containers. :class:`~testbed.inplace.InPlaceKubelet` runs the real agent as
two processes per pod: faithful, and far too heavy for 1,000 pods. This stand-in serves
the same protocol for every pod of a namespace from one asyncio process, with one watch on
its pods:

- **the agent** is msop's own :class:`msop.integrations.agent.server.Agent` (its request
  parsing, its signature check against the public key in the pod's environment, its
  generations in ``state.json`` and ``released`` in the pod's own directory), served on
  the pod's IP and agent port by an asyncio server that speaks what
  :mod:`msop.integrations.podhttp` speaks (one request per connection,
  ``Connection: close``, the answer's ``then`` run once it was sent);
- **the barrier** is the real one's rules (:func:`msop.integrations.agent.barrier`'s
  entry and exit), woken by the releases the pod's agent accepts rather than polling;
- **the kubelet** reports what ``RestartAllContainers`` does, with the statuses of
  :mod:`testbed.inplace` (status-subresource patches): an agent that exits with the
  reserved code restarts its pod's containers (``restartCount`` + 1, ``lastState``
  ``RestartingAllContainers``, the barrier running), a barrier that returns starts the
  training container again, and a new pod made to replace a lost member
  (``MSOP_AGENT_HOLD=1``) is held at its barrier from its first start.

A pod is adopted once kwok runs it (``Running`` with a pod IP); a pod deleted, or
replaced by a new one of the same name, has its agent stopped. What happened is written
as JSON lines to ``--events`` (``adopted``, ``restart``, ``at-barrier``, ``started``) for
tests and the bench.

``python -m testbed.agents --kubeconfig K --namespace NS --workdir DIR --events FILE``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import aclosing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from msop.integrations import wire
from msop.integrations.agent.barrier import _enter, _leave
from msop.integrations.agent.config import load_config
from msop.integrations.agent.server import Agent
from msop.integrations.agent.state import StateDir
from msop.integrations.podhttp import Request, Response
from msop.kube import PODS, ApiError, ApiUnavailable, KubeClient
from msop.kube.objects import JSON
from msop.msjob.inplace.decisions import REMOVED_BY_RESTART
from testbed.inplace import (
    AGENT,
    MAIN,
    held_status,
    restarted_main,
    restarted_status,
    started_status,
)
from testbed.process import terminate

USER_AGENT: Final = "msop-testbed-kubelet/1"
"""Not the operator's (``msop/``): the audit log tells the two apart."""
MAX_HEAD: Final = 8192
BARRIER_POLL: Final = 5.0
"""Seconds between two looks of a waiting barrier at ``released`` when no release woke it
(the pod's releases come through its agent here, which wakes it at once)."""
PATCHES_IN_FLIGHT: Final = 64


class BadRequest(ValueError):
    """A request head this server does not take (400)."""


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """``(method, path without the query, headers in lower case)`` of a request head
    (without its blank line); BadRequest if it is not HTTP/1.x."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError as e:  # pragma: no cover - latin-1 decodes anything
        raise BadRequest(str(e)) from e
    line, *rest = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(f"not an HTTP/1.x request line: {line[:80]!r}")
    headers: dict[str, str] = {}
    for h in rest:
        if not h:
            continue
        name, sep, value = h.partition(":")
        if not sep:
            raise BadRequest(f"not a header: {h[:80]!r}")
        headers[name.strip().lower()] = value.strip()
    return parts[0], parts[1].split("?", 1)[0], headers


def agent_env(pod: JSON) -> dict[str, str] | None:
    """The environment msop gave the pod's agent (None: the pod has none)."""
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        if container.get("name") == AGENT:
            return {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}
    return None


def runs(pod: JSON) -> bool:
    """kwok runs the pod: it has an IP, it is Running and not being deleted."""
    status = pod.get("status") or {}
    return (
        status.get("phase") == "Running"
        and bool(status.get("podIP"))
        and not pod["metadata"].get("deletionTimestamp")
    )


@dataclass
class _Pod:
    name: str
    uid: str
    ip: str
    env: dict[str, str]
    directory: Path
    restarts: int = 0
    main: JSON = field(default_factory=dict)
    """The training container's last reported status (its ``lastState`` is kept)."""
    server: asyncio.Server | None = None
    agent: Agent | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    barrier: asyncio.Task[None] | None = None
    patching: asyncio.Lock = field(default_factory=asyncio.Lock)
    gone: bool = False


class AgentStandIn:
    """The agents and the kubelet's part for every pod of ``namespace`` (see the module)."""

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        workdir: Path,
        record: Callable[[JSON], None] = lambda _e: None,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.workdir = workdir
        self.record = record
        self.pods: dict[str, _Pod] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._patches = asyncio.Semaphore(PATCHES_IN_FLIGHT)

    def _event(self, kind: str, p: _Pod, **more: Any) -> None:
        self.record({"t": time.time(), "event": kind, "pod": p.name, "uid": p.uid, **more})

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # --- the watch -----------------------------------------------------------------------

    async def run(self) -> None:
        """List and watch the namespace's pods until cancelled."""
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    listed = await self.client.list_all(PODS, self.namespace)
                    for pod in listed["items"]:
                        await self._seen("ADDED", pod)
                    rv = str(listed["metadata"]["resourceVersion"])
                async with aclosing(
                    self.client.watch(PODS, self.namespace, resource_version=rv,
                                      timeout_seconds=300)
                ) as events:  # fmt: skip
                    async for event in events:
                        obj = event["object"]
                        rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
                        if event["type"] != "BOOKMARK":
                            await self._seen(event["type"], obj)
            except (ApiError, ApiUnavailable):
                rv = None
                await asyncio.sleep(0.2)

    async def _seen(self, kind: str, pod: JSON) -> None:
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        mine = self.pods.get(name)
        if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
            if mine is not None and mine.uid == uid:
                await self._forget(mine)
            return
        if (mine is None or mine.uid != uid) and runs(pod):
            env = agent_env(pod)
            if env is not None:
                if mine is not None:
                    await self._forget(mine)
                await self._adopt(pod, env)

    async def stop(self) -> None:
        for p in list(self.pods.values()):
            await self._forget(p)
        for task in list(self._tasks):
            task.cancel()

    # --- a pod's containers --------------------------------------------------------------

    async def _adopt(self, pod: JSON, env: dict[str, str]) -> None:
        """The pod's first start: the agent, then the barrier (which passes at once,
        unless the pod replaces a lost member: then it holds the pod, and says so)."""
        meta = pod["metadata"]
        directory = self.workdir / f"{meta['name']}-{meta['uid']}"  # the pod's emptyDir
        directory.mkdir(parents=True, exist_ok=True)
        env = {**env, wire.ENV_AGENT_DIR: str(directory)}
        p = _Pod(meta["name"], meta["uid"], pod["status"]["podIP"], env, directory)
        p.main = {"name": MAIN, "restartCount": 0}
        self.pods[p.name] = p
        await self._serve(p)
        config = load_config(env, serving=False)
        files = StateDir(directory, config.generation)
        target = _enter(files, lambda _line: None, config.hold)
        self._event("adopted", p, held=target is not None)
        if target is not None:
            await self._patch(p, held_status())
            self._event("at-barrier", p, generation=target)
            p.barrier = asyncio.get_running_loop().create_task(self._wait(p, files, target))

    async def _forget(self, p: _Pod) -> None:
        p.gone = True
        if self.pods.get(p.name) is p:
            del self.pods[p.name]
        self._stop_containers(p)
        shutil.rmtree(p.directory, ignore_errors=True)

    def _stop_containers(self, p: _Pod) -> None:
        if p.server is not None:
            p.server.close()
            p.server = None
        if p.barrier is not None:
            p.barrier.cancel()
            p.barrier = None

    async def _serve(self, p: _Pod) -> None:
        """Start the pod's agent (a new process of it: a fresh :class:`Agent`)."""
        config = load_config(p.env, serving=True)
        agent = Agent(config, log=lambda _line: None,
                      exit_process=lambda code: self._exited(p, agent, code))  # fmt: skip
        p.agent = agent

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._answer(p, agent, reader, writer)

        p.server = await asyncio.start_server(
            connection, host=p.ip, port=config.port, reuse_address=True, backlog=64
        )

    def _exited(self, p: _Pod, agent: Agent, code: int) -> None:
        """The agent ended with ``code``: the reserved one makes the kubelet restart
        every container of the pod."""
        if p.agent is not agent or p.gone:
            return
        if code == wire.AGENT_RESTART_EXIT_CODE:
            self._spawn(self._restart_all(p, 137, REMOVED_BY_RESTART))

    async def _restart_all(self, p: _Pod, code: int, reason: str) -> None:
        """Kill every container and start them again, in order: the agent, the barrier
        (which waits), then, once it returns, the training container. The status says
        so after the containers started, as a kubelet's next sync reports them."""
        self._stop_containers(p)
        p.agent = None
        p.restarts += 1
        self._event("restart", p, restarts=p.restarts, reason=reason)
        p.main = restarted_main(p.restarts, code, reason)
        if p.gone:
            return
        await self._serve(p)
        config = load_config(p.env, serving=False)
        files = StateDir(p.directory, config.generation)
        target = _enter(files, lambda _line: None, config.hold)
        if target is not None:  # always after a restart: the pod has a state.json
            p.barrier = asyncio.get_running_loop().create_task(self._wait(p, files, target))
        await self._patch(p, restarted_status(p.restarts, code, reason))
        if target is not None:
            self._event("at-barrier", p, generation=target)

    async def fail(self, name: str, code: int = 137) -> None:
        """The pod's training container exits with ``code``; its rule restarts the pod."""
        await self._restart_all(self.pods[name], code, "Error")

    async def _wait(self, p: _Pod, files: StateDir, target: int) -> None:
        """The barrier: until ``target`` is released; then the training container runs."""
        while True:
            released = files.released()
            if released is not None and released >= target and _leave(files, target):
                break
            p.wake.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(p.wake.wait(), BARRIER_POLL)
        p.barrier = None
        self._event("started", p, generation=target)
        await self._patch(p, started_status(p.restarts, p.main))

    async def _patch(self, p: _Pod, status: JSON) -> None:
        async with p.patching, self._patches:
            if p.gone:
                return
            try:
                await self.client.patch(
                    PODS, p.name, {"metadata": {"uid": p.uid}, "status": status},
                    self.namespace, subresource="status",
                )  # fmt: skip
            except ApiError as e:  # the pod is gone, or another of its name
                self._event("patch-failed", p, error=str(e)[:200])

    # --- HTTP ----------------------------------------------------------------------------

    async def _answer(
        self, p: _Pod, agent: Agent, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """One request, one answer, as the pod's HTTP server does (Connection: close)."""
        response: Response | None = None
        try:
            response = await asyncio.wait_for(self._read(agent, reader, writer), 5.0)
            writer.write(response.encode())
            await writer.drain()
            writer.write_eof()
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with suppress(ConnectionError):
                await writer.wait_closed()
        if response is not None and response.status == 200 and p.barrier is not None:
            p.wake.set()  # a release: the barrier looks
        if response is not None and response.then is not None:
            response.then()

    @staticmethod
    async def _read(
        agent: Agent, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Response:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return agent.error(431, "the request head is too large")
        if len(head) > MAX_HEAD:
            return agent.error(431, "the request head is too large")
        try:
            method, path, headers = parse_head(head[:-4])
        except BadRequest as e:
            return agent.error(400, str(e))
        refused = agent.route(method, path)
        if refused is not None:
            return refused
        body = b""
        if method in ("POST", "PUT", "PATCH"):
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                return agent.error(400, "Content-Length is not a number")
            if length > wire.AGENT_MAX_BODY:
                return agent.error(413, f"the body exceeds {wire.AGENT_MAX_BODY} bytes")
            body = await reader.readexactly(length)
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else ""
        return agent.respond(Request(method, path, body, client))


async def _main(args: argparse.Namespace) -> None:
    client = await KubeClient.from_config(
        args.kubeconfig, qps=1e6, burst=1_000_000, user_agent=USER_AGENT, max_connections=80
    )
    args.workdir.mkdir(parents=True, exist_ok=True)
    out = args.events.open("a", buffering=1)

    def record(event: JSON) -> None:
        out.write(json.dumps(event) + "\n")

    stand_in = AgentStandIn(client, args.namespace, args.workdir, record)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    watch = loop.create_task(stand_in.run())
    record({"t": time.time(), "event": "ready"})
    await stopping.wait()
    watch.cancel()
    await stand_in.stop()
    await client.close()
    out.close()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m testbed.agents", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--namespace", required=True)
    p.add_argument("--workdir", type=Path, required=True)
    p.add_argument("--events", type=Path, required=True)
    asyncio.run(_main(p.parse_args()))


if __name__ == "__main__":
    main()


@dataclass
class StandInProcess:
    """``python -m testbed.agents`` as a child process, for tests and the bench."""

    kubeconfig: str
    namespace: str
    workdir: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def events_path(self) -> Path:
        return self.workdir / "events.jsonl"

    def start(self, timeout: float = 30) -> StandInProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with (self.workdir / "stand-in.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "testbed.agents", "--kubeconfig", self.kubeconfig,
                 "--namespace", self.namespace, "--workdir", str(self.workdir / "pods"),
                 "--events", str(self.events_path)],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not any(e["event"] == "ready" for e in self.events()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the agents' stand-in did not start:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def events(self, kind: str | None = None) -> list[JSON]:
        """What it recorded so far (of ``kind``), in order."""
        try:
            lines = self.events_path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = [json.loads(line) for line in lines if line.endswith("}")]
        return [e for e in out if kind is None or e["event"] == kind]

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = (self.workdir / "stand-in.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> int:
        return 0 if self.proc is None else terminate(self.proc, 30)
