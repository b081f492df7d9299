"""A real Volcano for the kwok tier: ``vc-scheduler`` and ``vc-controller-manager`` built
from the Go module ``volcano.sh/volcano`` (``hack/volcano/build.sh``), run as child
processes against a :class:`~testbed.cluster.LocalCluster`.

``Volcano.start()`` installs the module's CRDs (PodGroup, Queue, Command, HyperNode,
Numatopology, NodeShard), starts both with their health checks on loopback ports and no
leader election, and waits until the scheduler has created its ``default`` Queue and the
controller manager has opened it. The scheduler runs Volcano's default configuration
(actions ``enqueue, allocate, backfill``; plugins priority, gang, conformance, overcommit,
drf, predicates, proportion, nodeorder) with a 500 ms scheduling period. The controller
manager runs only the PodGroup and Queue controllers: MSJobs need no vcjob controller.

Volcano's admission webhook is not run (it needs a TLS endpoint the API server calls):
what it would have checked is listed in docs/tasks/gang-scheduling.md (What to know
about Volcano).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from testbed import addons
from testbed.cluster import Kubectl
from testbed.ports import free_port
from testbed.process import terminate

#: Fully qualified: with Kueue's CRDs installed, ``queue`` is Kueue's LocalQueue.
VOLCANO_QUEUES = "queues.scheduling.volcano.sh"


def build() -> Path:
    """Build (or reuse) Volcano; return the directory with the binaries and ``crds/``."""
    return addons.build("volcano", "Volcano")


@dataclass
class Volcano:
    """``vc-scheduler`` and ``vc-controller-manager`` for one cluster; see the module doc."""

    cluster: Kubectl
    bin_dir: Path
    log_dir: Path
    schedule_period: str = "500ms"
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    health_ports: dict[str, int] = field(default_factory=dict)

    def start(self, timeout: float = 90) -> None:
        addons.apply_crds(self.cluster, (self.bin_dir / "crds").glob("*.yaml"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        common = [
            "--kubeconfig", self.cluster.kubeconfig, "--leader-elect=false", "--enable-healthz",
            "--kube-api-qps", "200", "--kube-api-burst", "400",
        ]  # fmt: skip
        self._spawn(
            "vc-scheduler",
            *common,
            "--schedule-period", self.schedule_period,
            "--cache-dumper=false",
        )  # fmt: skip
        self._spawn(
            "vc-controller-manager", *common, "--controllers", "pg-controller,queue-controller"
        )
        self.wait_ready(timeout)

    def _spawn(self, name: str, *args: str) -> None:
        port = free_port()
        self.health_ports[name] = port
        log = (self.log_dir / f"{name}.log").open("ab")
        self.procs[name] = subprocess.Popen(
            [str(self.bin_dir / name), *args, "--healthz-address", f"127.0.0.1:{port}"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def _healthy(self, name: str) -> bool:
        return addons.http_ok(f"http://127.0.0.1:{self.health_ports[name]}/healthz")

    def wait_ready(self, timeout: float) -> None:
        """Both healthy, and the ``default`` Queue created by the scheduler and Open."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {proc.returncode}:\n{self.log_tail(name)}"
                    )
            if all(self._healthy(n) for n in self.procs) and self.queue_state("default") == "Open":
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"Volcano not ready within {timeout}s:\n"
            + "\n".join(f"--- {n}\n{self.log_tail(n)}" for n in self.procs)
        )

    def queue_state(self, name: str) -> str | None:
        proc = self.cluster.kubectl("get", VOLCANO_QUEUES, name, "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        state = (json.loads(proc.stdout).get("status") or {}).get("state")
        return state if isinstance(state, str) else None

    def log_tail(self, name: str, lines: int = 30) -> str:
        return addons.log_tail(self.log_dir / f"{name}.log", lines)

    def alive(self) -> bool:
        return bool(self.procs) and all(p.poll() is None for p in self.procs.values())

    def stop(self) -> None:
        for proc in self.procs.values():
            terminate(proc, 10)
        self.procs.clear()
