"""Restarts in place on kwok nodes: the pods' real msop agents, and a kubelet's part played.

kwok runs no containers, so no kubelet restarts a pod's containers in place. This plays
what one would, around the real agent (``python -m msop.integrations.agent``), so that the
kwok tier tests the operator's side for real: its signed requests over HTTP, the agents'
answers, and what the operator makes of the pod statuses a kubelet reports.

For each adopted pod, :class:`InPlaceKubelet` runs the agent's ``serve`` on the pod's IP
(kwok gives pods loopback addresses, see ``fake_node``) with the environment the operator
gave the pod, and its ``barrier`` once (the pod's first start). A pod made to replace a
lost member (``MSOP_AGENT_HOLD=1``) is held there: its status says so (the barrier
running, the training container waiting) until the operator releases it, whatever kwok
first said of it. Then, as the kubelet would (``RestartAllContainers``):

- ``fail(pod, code)``: the training container exits with ``code`` and the pod's rule
  restarts all its containers: the status shows the container waiting with the exit in
  ``lastState`` and ``restartCount`` + 1; the agent and the barrier start again;
- an agent that exits with the reserved code (the operator asked it to) restarts its
  pod's containers the same way (``lastState``: ``RestartingAllContainers``);
- a barrier that returns (the operator released it) starts the training container again:
  running, the barrier terminated.

A background thread watches the processes. Status changes are status-subresource patches,
as a kubelet sends them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from msop.integrations import wire
from msop.kube.objects import JSON
from msop.msjob.inplace.pods import BARRIER_CONTAINER
from testbed.cluster import Kubectl

MAIN = "mindspore"
AGENT = wire.AGENT_CONTAINER
BARRIER = BARRIER_CONTAINER


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the statuses a kubelet reports (shared with testbed.agents) ---------------------------


def pod_status(restarts: int, main: JSON, barrier: JSON) -> JSON:
    """The pod's ``status`` with the training container ``main``, the agent running and
    the barrier in state ``barrier``, after ``restarts`` restarts of all containers."""
    return {
        "containerStatuses": [main],
        "initContainerStatuses": [
            {"name": AGENT, "restartCount": restarts, "ready": True,
             "started": True, "state": {"running": {"startedAt": _now()}}},
            {"name": BARRIER, "restartCount": restarts, "ready": False, "state": barrier},
        ],
    }  # fmt: skip


def held_status() -> JSON:
    """A new pod held at its barrier (it replaces a lost member)."""
    main = {"name": MAIN, "restartCount": 0, "ready": False,
            "state": {"waiting": {"reason": "PodInitializing"}}}  # fmt: skip
    return pod_status(0, main, {"running": {"startedAt": _now()}})


def restarted_main(restarts: int, code: int, reason: str) -> JSON:
    """The training container just removed by a restart of all containers (it ended with
    ``code``, ``reason``): waiting while the barrier runs."""
    return {
        "name": MAIN, "restartCount": restarts, "ready": False,
        "state": {"waiting": {"reason": "PodInitializing"}},
        "lastState": {"terminated": {"exitCode": code, "reason": reason,
                                     "startedAt": _now(), "finishedAt": _now()}},
    }  # fmt: skip


def restarted_status(restarts: int, code: int, reason: str) -> JSON:
    """All containers restarted (the ``restarts``-th time): the barrier waits."""
    main = restarted_main(restarts, code, reason)
    return pod_status(restarts, main, {"running": {"startedAt": _now()}})


def started_status(restarts: int, main: JSON) -> JSON:
    """The barrier returned: the training container ``main`` (its last status) runs."""
    main = {**main, "state": {"running": {"startedAt": _now()}}, "ready": True}
    return pod_status(restarts, main, {"terminated": {"exitCode": 0, "reason": "Completed"}})


@dataclass
class _Pod:
    name: str
    ip: str
    env: dict[str, str]
    serve: subprocess.Popen[bytes] | None = None
    barrier: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    held: bool = False
    """Made to replace a lost member: its first start waits at the barrier."""
    log: list[str] = field(default_factory=list)


class InPlaceKubelet:
    def __init__(self, cluster: Kubectl, namespace: str, workdir: Path) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.workdir = workdir
        self.pods: dict[str, _Pod] = {}
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()
        self.restarted_by_agent: list[str] = []
        """Pods whose agent asked for a restart of all their containers, in order."""

    # --- the pods -----------------------------------------------------------------------
    def adopt(self, pod: JSON) -> None:
        """Run the pod's agent (its first start: the barrier passes at once, unless the
        pod replaces a lost member: then it waits, and the status says so). A pod of the
        same name adopted before (the one it replaces) is stopped first."""
        name = pod["metadata"]["name"]
        (agent,) = [c for c in pod["spec"]["initContainers"] if c["name"] == AGENT]
        env = {e["name"]: e["value"] for e in agent["env"]}
        directory = self.workdir / f"{name}-{pod['metadata']['uid']}"  # its own emptyDir
        env[wire.ENV_AGENT_DIR] = str(directory)
        directory.mkdir(parents=True, exist_ok=True)
        p = _Pod(name, pod["status"]["podIP"], env, held=env.get(wire.ENV_AGENT_HOLD) == "1")
        with self.lock:
            old = self.pods.pop(name, None)
            if old is not None:
                self._kill(old)
            self.pods[name] = p
            if p.held:
                self._serve(p)
                self._patch(p, held_status())
                self._barrier(p)
                return
            self._barrier(p).wait(timeout=30)
            self._serve(p)

    def fail(self, name: str, code: int = 137, *, restart: bool = True) -> None:
        """The pod's training container exits with ``code``; its rule restarts the pod
        (``restart=False``: only the status says so, no process starts again)."""
        with self.lock:
            self._restart_all(self.pods[name], code, "Error", start=restart)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        with self.lock:
            for p in self.pods.values():
                self._kill(p)

    @staticmethod
    def _kill(p: _Pod) -> None:
        for proc in (p.serve, p.barrier):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()

    # --- what a kubelet does ------------------------------------------------------------
    def _run(self, p: _Pod, *argv: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, **p.env, "PYTHONPATH": os.pathsep.join(sys.path)}
        with open(self.workdir / f"{p.name}.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "msop.integrations.agent", *argv],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip

    def _serve(self, p: _Pod) -> None:
        p.serve = self._run(p, "serve", "--host", p.ip)

    def _barrier(self, p: _Pod) -> subprocess.Popen[bytes]:
        p.barrier = self._run(p, "barrier")
        return p.barrier

    def _restart_all(self, p: _Pod, code: int, reason: str, *, start: bool = True) -> None:
        """Kill every container of the pod and start them again, in order: the agent, the
        barrier (which waits), then (once it returns) the training container."""
        if p.serve is not None and p.serve.poll() is None:
            p.serve.kill()
            p.serve.wait()
        p.restarts += 1
        self._patch(p, restarted_status(p.restarts, code, reason))
        if start:
            self._serve(p)
            self._barrier(p)

    def _started(self, p: _Pod) -> None:
        pod = self._get(p.name)
        (main,) = [c for c in pod["status"]["containerStatuses"] if c["name"] == MAIN]
        self._patch(p, started_status(p.restarts, main))

    def _get(self, name: str) -> JSON:
        out = self.cluster.kubectl("get", "pod", "-n", self.namespace, name, "-o", "json")
        pod: JSON = json.loads(out.stdout)
        return pod

    def _patch(self, p: _Pod, status: JSON) -> None:
        self.cluster.kubectl(
            "patch", "pod", "-n", self.namespace, p.name, "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip

    def _watch(self) -> None:
        while not self.stopping.wait(0.1):
            with self.lock:
                for p in list(self.pods.values()):
                    try:
                        self._step(p)
                    except subprocess.CalledProcessError as e:
                        p.log.append(f"{e}: {e.stderr}")

    def _step(self, p: _Pod) -> None:
        if p.serve is not None and p.serve.poll() == wire.AGENT_RESTART_EXIT_CODE:
            p.serve = None
            self.restarted_by_agent.append(p.name)
            self._restart_all(p, 137, "RestartingAllContainers")
        elif p.barrier is not None and p.barrier.poll() == 0 and (p.restarts or p.held):
            p.barrier = None
            self._started(p)

    def logs(self) -> str:
        out = []
        for path in sorted(self.workdir.glob("*.log")):
            out.append(f"--- {path.name}\n{path.read_text(errors='replace')[-2000:]}")
        return "\n".join(out)


def wait(predicate: object, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.2)
    raise TimeoutError(what)
