"""Run ``msop run`` as a child process, the way a Deployment runs it, for tests and demos.

``OperatorProcess.start()`` picks free loopback ports for ``/metrics`` and the probes,
starts the operator with JSON logs going to ``log_path``, and waits until ``/readyz``
answers 200 (caches synced). ``stop()`` sends SIGTERM and waits; ``kill()`` sends
SIGKILL. A start that fails raises ``RuntimeError`` with the tail of the log.

``/metrics`` is plain HTTP here (``--metrics-secure=false``), so that tests and
benchmarks read it with a bare GET; ``metrics_secure=True`` starts the operator as a
cluster runs it, HTTPS with every scrape authenticated (``metrics_url`` is then https
and needs a bearer token).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.ports import free_port
from testbed.process import terminate


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
    metrics_secure: bool = False
    """``--metrics-secure``: HTTPS and authenticated scrapes, as in a cluster."""

    @property
    def _metrics_reach(self) -> int:
        return self.probe_ports[0] if self.probe_ports else self.metrics_port

    @property
    def _health_reach(self) -> int:
        return self.probe_ports[1] if self.probe_ports else self.health_port

    @property
    def metrics_url(self) -> str:
        scheme = "https" if self.metrics_secure else "http"
        return f"{scheme}://127.0.0.1:{self._metrics_reach}/metrics"

    def ready(self) -> bool:
        """``/readyz`` answers 200 now."""
        return self._get("/readyz") == 200

    def scrape(self, token: str | None = None, path: str = "/metrics") -> tuple[int, str]:
        """GET ``path`` of the metrics port (with ``Authorization: Bearer <token>``):
        ``(status, body)``. Over HTTPS the certificate is not verified (msop's own is
        self-signed), as Prometheus's ``insecure_skip_verify``. Raises OSError when
        nothing answers."""
        url = self.metrics_url.removesuffix("/metrics") + path
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10, context=context) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

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
            "--metrics-secure" if self.metrics_secure else "--metrics-secure=false",
            "--health-probe-bind-address", f"127.0.0.1:{self.health_port}",
            *self.args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        log.close()
        if wait_ready:
            try:
                self.wait_ready(timeout)
            except RuntimeError:
                # Not ready: it must not outlive the test that wanted it (a test that starts
                # it before its own cleanup is set up has nobody else to stop it).
                self.kill()
                raise
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
