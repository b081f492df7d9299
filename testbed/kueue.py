"""A real Kueue for the kwok tier: the manager built from the Go module
``sigs.k8s.io/kueue`` (``hack/kueue/build.sh``), run as a child process against a
:class:`~testbed.cluster.LocalCluster`.

``Kueue.start()`` installs the module's CRDs, writes a certificate for 127.0.0.1
(``certgen``), registers Kueue's own webhooks (those for its API: Workload, ClusterQueue,
ResourceFlavor, ...) with the API server at ``https://127.0.0.1:<port>``, and starts the
manager with a configuration that lists MSJob as an external framework
(``MSJob.v1.mindspore.gitee.com``), no leader election, health on a loopback port,
metrics and the visibility server off (both would listen on every interface). It is ready
when ``/readyz`` answers, which includes the webhook server.

For an API server inside a network namespace (the real tier's ``RealCluster``), Kueue
runs in that namespace (``spawn``), so that the API server reaches its webhooks on the
namespace's loopback, and its health port is relayed to this host's (``expose``).

The webhooks of Kueue's built-in job integrations (batch Job, Pod, JobSet, Kubeflow jobs,
...) are not registered: the tests submit only MSJobs, which Kueue manages through msop.
"""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed import addons
from testbed.cluster import Kubectl
from testbed.ports import free_port
from testbed.process import terminate

#: How Kueue's configuration names MSJob among its external frameworks (Kind.version.group).
EXTERNAL_FRAMEWORK = "MSJob.v1.mindspore.gitee.com"
NAMESPACE = "kueue-system"
#: Kueue's manager, without its internal certificate management, reads a certificate for
#: its metrics server from this fixed path even when metrics are off. It is given one in
#: a mount namespace of its own, whose /etc is an empty tmpfs: nothing of this machine's
#: /etc is read or written.
METRICS_CERTS = "/etc/kueue/metrics/certs"
_PRIVATE_ETC = (
    "set -e; certs=$1; shift; mount -t tmpfs -o mode=0755 msop-kueue-etc /etc; "
    f'mkdir -p {METRICS_CERTS}; cp "$certs/tls.crt" "$certs/tls.key" {METRICS_CERTS}/; '
    'exec "$@"'
)


def build() -> Path:
    """Build (or reuse) Kueue; return the directory with the binaries, ``crds/`` and
    ``webhooks.yaml``."""
    return addons.build("kueue", "Kueue")


def loopback_webhooks(manifests: str, port: int, ca_bundle: bytes, prefix: str) -> list[Any]:
    """Kueue's webhook configurations, reduced to the webhooks of Kueue's own API and
    pointed at ``https://127.0.0.1:<port><path>`` (the module's point at a Service)."""
    out = []
    for doc in yaml.safe_load_all(manifests):
        if not doc:
            continue
        hooks = []
        for hook in doc.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            if "kueue-x-k8s-io" not in path:
                continue
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
            }
            hooks.append(hook)
        doc["metadata"] = {"name": f"{prefix}-{doc['kind'].lower()}"}
        doc["webhooks"] = hooks
        out.append(doc)
    return out


@dataclass
class Kueue:
    """Kueue's manager for one cluster; see the module doc."""

    cluster: Kubectl
    bin_dir: Path
    log_dir: Path
    name: str = "kueue"
    feature_gates: str = "VisibilityOnDemand=false"
    pods_ready_timeout: str | None = None
    """Kueue's ``waitForPodsReady.timeout`` (e.g. ``"20s"``): an admitted Workload whose
    ``PodsReady`` is not True by then is evicted. None: off (Kueue's default)."""
    extra_config: dict[str, Any] = field(default_factory=dict)
    """More top-level fields of Kueue's Configuration (e.g. ``multiKueue``)."""
    spawn: Callable[[str, Sequence[str]], Any] | None = None
    """Start Kueue in the API server's network namespace: ``spawn(name, argv)`` returns an
    object with ``proc`` and ``log`` (``RealCluster.spawn``). None: a child process here."""
    expose: Callable[[str], int] | None = None
    """With ``spawn``: relay a host port to ``HOST:PORT`` in that namespace."""
    api_kubeconfig: str | None = None
    """With ``spawn``: the kubeconfig that reaches the API server from that namespace."""
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    health_port: int = 0
    health_host_port: int = 0
    webhook_port: int = 0
    webhook_configs: list[str] = field(default_factory=list)

    @property
    def work_dir(self) -> Path:
        return self.log_dir / self.name

    def config(self) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "host": "127.0.0.1",
                "port": self.webhook_port,
                "certDir": str(self.work_dir / "certs"),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "clientConnection": {"qps": 200, "burst": 400},
            "integrations": {
                "frameworks": ["batch/job"],
                "externalFrameworks": [EXTERNAL_FRAMEWORK],
            },
            **(
                {"waitForPodsReady": {"timeout": self.pods_ready_timeout}}
                if self.pods_ready_timeout
                else {}
            ),
            **self.extra_config,
        }

    def start(self, timeout: float = 90) -> None:
        addons.apply_crds(self.cluster, (self.bin_dir / "crds").glob("*.yaml"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        certs = self.work_dir / "certs"
        subprocess.run([str(self.bin_dir / "certgen"), str(certs)], check=True)
        self.cluster.kubectl("create", "namespace", NAMESPACE, check=False)
        self.health_port, self.webhook_port = free_port(), free_port()
        hooks = loopback_webhooks(
            (self.bin_dir / "webhooks.yaml").read_text(),
            self.webhook_port,
            (certs / "ca.crt").read_bytes(),
            f"msop-test-{self.name}",
        )
        config = self.work_dir / "config.yaml"
        config.write_text(json.dumps(self.config(), indent=2))
        argv = [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            _PRIVATE_ETC,
            "kueue-etc",
            str(certs),
            str(self.bin_dir / "kueue"),
            f"--config={config}",
            f"--feature-gates={self.feature_gates}",
            f"--kubeconfig={self.api_kubeconfig or self.cluster.kubeconfig}",
        ]
        self.health_host_port = self.health_port
        if self.spawn is not None:
            daemon = self.spawn(self.name, argv)
            self.proc, self.log_path = daemon.proc, Path(daemon.log)
            if self.expose is not None:
                self.health_host_port = self.expose(f"127.0.0.1:{self.health_port}")
        else:
            self.log_path = self.log_dir / f"{self.name}.log"
            log = self.log_path.open("ab")
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            log.close()
        # Registered once the manager runs: a webhook that fails closed with nobody behind
        # it would refuse every Kueue object in the meantime.
        self.wait_ready(timeout)
        for hook in hooks:
            self.cluster.kubectl("apply", "-f", "-", input=json.dumps(hook))
            self.webhook_configs.append(f"{hook['kind'].lower()}/{hook['metadata']['name']}")

    def _ready(self) -> bool:
        return addons.http_ok(f"http://127.0.0.1:{self.health_host_port}/readyz")

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"kueue exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"Kueue not ready within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return addons.log_tail(self.log_path or self.log_dir / f"{self.name}.log", lines)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        # The webhooks fail closed: without the manager they would refuse Kueue's objects.
        for ref in self.webhook_configs:
            self.cluster.kubectl("delete", ref, "--ignore-not-found", check=False)
        self.webhook_configs.clear()
        if self.proc is not None:
            terminate(self.proc, 10)
            self.proc = None
