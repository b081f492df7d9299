"""Run ``msop run`` as a child process, the way a Deployment runs it, for tests and demos.

``OperatorProcess.start()`` picks free loopback ports for ``/metrics`` and the probes,
starts the operator with JSON logs going to ``log_path``, and waits until ``/readyz``
answers 200 (caches synced). ``stop()`` sends SIGTERM and waits; ``kill()`` sends
SIGKILL. A start that fails raises ``RuntimeError`` with the tail of the log.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.ports import free_port
from tests.harness.process import terminate


@dataclass
class OperatorProcess:
    """One ``msop run`` child process; see the module docstring."""

    kubeconfig: str
    log_path: Path
    args: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    metrics_port: int = 0
    health_port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    command_prefix: Sequence[str] = ()
    """Argv before the operator's (e.g. ``nsenter --net=...`` to run it in a network
    namespace; its ports are then that namespace's, see ``probe_ports``)."""
    probe_ports: tuple[int, int] | None = None
    """Where this host reaches ``/metrics`` and the probes, when not at the ports the
    operator binds (a relay into its namespace); set by the caller after ``start()``."""

    @property
    def _metrics_reach(self) -> int:
        return self.probe_ports[0] if self.probe_ports else self.metrics_port

    @property
    def _health_reach(self) -> int:
        return self.probe_ports[1] if self.probe_ports else self.health_port

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self._metrics_reach}/metrics"

    def ready(self) -> bool:
        """``/readyz`` answers 200 now."""
        return self._get("/readyz") == 200

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self._health_reach}{path}", timeout=2
            ) as resp:
                status: int = resp.status
                return status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError:
            return 0

    def start(self, timeout: float = 60, wait_ready: bool = True) -> OperatorProcess:
        self.metrics_port = free_port()
        self.health_port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        cmd = [
            *self.command_prefix,
            sys.executable, "-m", "msop.cli", "run",
            "--kubeconfig", self.kubeconfig,
            "--metrics-bind-address", f"127.0.0.1:{self.metrics_port}",
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            *self.args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        log.close()
        if wait_ready:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait for ``/readyz`` = 200; RuntimeError with the log tail if it exits or times out."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"msop exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._get("/readyz") == 200:
                return
            time.sleep(0.1)
        raise RuntimeError(f"msop not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM and wait; return the exit code (SIGKILL after ``timeout``)."""
        if self.proc is None:
            return 0
        return terminate(self.proc, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
