"""A local Kubernetes control plane for tests, demos and benchmarks.

``LocalCluster`` drives ``kwokctl --runtime=binary`` with binaries built by
``hack/cluster/build.sh``: etcd, kube-apiserver (with RBAC authorization and an audit
log), kube-controller-manager (so ownerReference garbage collection works),
kube-scheduler, and kwok-controller simulating a few fake nodes that have CPU, memory
and ``nvidia.com/gpu`` capacity. Nothing is downloaded: kwokctl is pointed at every
binary it needs.

Errors: :class:`ClusterStartError` names the component that failed and carries the
tail of its log. Every other failure of a ``kubectl`` call raises
:class:`subprocess.CalledProcessError` with the command's stderr.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml

from testbed.ports import free_port

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok-controller",
)

#: Kubernetes' Workload API of 1.36 (gang scheduling, workload-aware preemption): the
#: feature gates of the API server, the scheduler and the controller-manager, and the
#: API version the API server must serve.
WORKLOAD_API_GATES = "GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true"
WORKLOAD_API_RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha2=true"

#: The API server's sharded list and watch (KEP-5866, alpha in 1.36): it honours a
#: ``shardSelector`` (a range of hashes of ``metadata.uid``) on lists and watches.
SHARDED_WATCH_GATE = "ShardedListAndWatch=true"


def apiserver_feature_gates(gates: str) -> dict[str, object]:
    """A kwokctl configuration document that turns the feature ``gates`` on in the API
    server (``LocalCluster(extra_config_docs=[...])``)."""
    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "componentsPatches": [
            {"name": "kube-apiserver", "extraArgs": [{"key": "feature-gates", "value": gates}]}
        ],
    }


#: Capacity of every fake node; the GPU samples request ``nvidia.com/gpu``.
NODE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "2000", "nvidia.com/gpu": "8"}

#: Audit every request at Metadata level: tests and benchmarks count the operator's
#: API calls (by verb, resource, name and user agent) from this log.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-scheduler", "system:kube-controller-manager", "system:apiserver"]
- level: None
  resources: [{group: "coordination.k8s.io", resources: ["leases"]}]
  userGroups: ["system:nodes"]
- level: Metadata
"""


_PORT_OPTIONS = (
    "kubeApiserverPort",
    "etcdPort",
    "etcdPeerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
    "kwokControllerPort",
)


def fake_node(
    name: str,
    cidr: str,
    capacity: dict[str, str],
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, object]:
    """A Node that kwok-controller plays (its annotation), Ready once kwok sees it. Pods
    get IPs from ``cidr``: a loopback range (:func:`pod_cidr`) keeps anything that
    connects to a simulated pod (the progress poller) on this machine, and lets the
    bench's simulated reporters answer there."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                **(labels or {}),
            },
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], **({"taints": taints} if taints else {})},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class Kubectl(Protocol):
    """A cluster the harness acts on (:class:`LocalCluster`, ``RealCluster``): its
    kubeconfig, and kubectl run against it (CalledProcessError when ``check`` and it
    fails)."""

    @property
    def kubeconfig(self) -> str: ...

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]: ...


def create_namespace(
    cluster: Kubectl, name: str | None = None, *, prefix: str = "ns", timeout: float = 60
) -> str:
    """Create namespace ``name`` (or ``<prefix>-<8 hex>``) and wait until the
    controller-manager has filled it: its default ServiceAccount (pods are admitted only
    then) and its ``kube-root-ca.crt`` ConfigMap (a kubelet mounts it into every pod's
    token volume; and a test that lists or watches the namespace's ConfigMaps must not see
    it arrive later). Returns the name."""
    name = name or f"{prefix}-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    deadline = time.monotonic() + timeout
    filled = ("get", "serviceaccount/default", "configmap/kube-root-ca.crt", "-n", name)
    while cluster.kubectl(*filled, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"namespace {name}: no default ServiceAccount or kube-root-ca.crt within {timeout}s"
            )
        time.sleep(0.2)
    return name


def namespace_for_a_test(
    cluster: Kubectl, *, prefix: str = "ns", timeout: float = 60
) -> Iterator[str]:
    """A pytest fixture's body: a new namespace (:func:`create_namespace`), deleted after
    the test without waiting for its objects to go (``yield from`` it)."""
    name = create_namespace(cluster, prefix=prefix, timeout=timeout)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message names the failed component and its log."""


#: Fake nodes per pytest-xdist worker: the clusters of two workers (each has its own) give
#: their pods addresses apart, as the processes that play a pod listen on its address.
NODES_PER_WORKER = 75


def pod_cidr(node: int) -> str:
    """The pod IP range of fake node ``node``: ``127.<100 + node>.0.0/16``, on loopback
    (shifted by :data:`NODES_PER_WORKER` per pytest-xdist worker after the first)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    octet = 100 + node + NODES_PER_WORKER * int(worker.removeprefix("gw") or 0)
    if not 0 <= octet <= 255:
        raise ValueError(f"fake node {node} has no pod range left (127.{octet}.0.0/16)")
    return f"127.{octet}.0.0/16"


@dataclass
class LocalCluster:
    """One kwokctl cluster. ``start()`` creates it, ``stop()`` deletes it.

    ``workdir`` holds kwokctl's state (``KWOK_WORKDIR``); the kubeconfig is written to
    ``<workdir>/<name>.kubeconfig``, and the apiserver audit log to
    ``<workdir>/clusters/<name>/logs/audit.log``.
    """

    name: str
    bin_dir: Path
    workdir: Path
    nodes: int = 4
    kube_version: str = "v1.36.3"
    etcd_version: str = "3.6.10"
    extra_kwokctl_args: Sequence[str] = field(default_factory=tuple)
    extra_config_docs: Sequence[Mapping[str, object]] = field(default_factory=tuple)
    """More documents for kwokctl's ``--config`` file: Stages, or a KwokctlConfiguration
    that kwokctl strategic-merges into ours (e.g. ``componentsPatches``)."""
    kwok_controller: bool = True
    """False: no kwok-controller, so real kubelets own their nodes (the real-node tier)."""
    extra_options: Mapping[str, object] = field(default_factory=dict)
    """More KwokctlConfiguration options (e.g. ``kubeApiserverCertSANs``)."""
    command_prefix: Sequence[str] = field(default_factory=tuple)
    """Argv prefix for kwokctl (e.g. ``nsenter --net=...``): the components it starts
    inherit it, so they run in a network namespace."""
    ports: dict[str, int] = field(default_factory=dict, init=False)
    """The ports chosen for this start (kwokctl option name -> port)."""
    _restarted: dict[str, subprocess.Popen[bytes]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        # kwokctl resolves binaries and data under its workdir; relative paths break it.
        self.workdir = Path(self.workdir).resolve()
        self.bin_dir = Path(self.bin_dir).resolve()

    @property
    def kubeconfig(self) -> str:
        return str(self.workdir / f"{self.name}.kubeconfig")

    @property
    def components(self) -> tuple[str, ...]:
        return COMPONENTS if self.kwok_controller else COMPONENTS[:-1]

    @property
    def api_port(self) -> int:
        """The API server's secure port on its loopback (set by ``start()``)."""
        return self.ports["kubeApiserverPort"]

    @property
    def cluster_dir(self) -> Path:
        return self.workdir / "clusters" / self.name

    @property
    def audit_log(self) -> Path:
        return self.cluster_dir / "logs" / "audit.log"

    def binary(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.workdir)
        # kwokctl must never try to fetch anything.
        env["KWOK_QUIET_PULL"] = "true"
        return env

    def _write_config(self) -> Path:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ports = {opt: free_port() for opt in _PORT_OPTIONS}
        policy = self.workdir / f"{self.name}-audit-policy.yaml"
        policy.write_text(AUDIT_POLICY)
        options = {
            "runtime": "binary",
            "kubeVersion": self.kube_version,
            "etcdVersion": self.etcd_version,
            "bindAddress": "127.0.0.1",
            "securePort": True,
            "kubeAuthorization": True,
            "kubeAdmission": True,
            "kubeAuditPolicy": str(policy),
            "disableQPSLimits": True,
            # kwok only plays pods on nodes whose Lease it holds; after a restart it waits
            # for the old Leases to expire, so keep them short.
            "nodeLeaseDurationSeconds": 10,
            "kubeApiserverBinary": self.binary("kube-apiserver"),
            "kubeControllerManagerBinary": self.binary("kube-controller-manager"),
            "kubeSchedulerBinary": self.binary("kube-scheduler"),
            "kubectlBinary": self.binary("kubectl"),
            "etcdBinary": self.binary("etcd"),
            "kwokControllerBinary": self.binary("kwok"),
            # kwokctl counts ports down from 32765 and two clusters created at once can
            # pick the same; ephemeral ports from the kernel do not collide.
            **self.ports,
            **({} if self.kwok_controller else {"disable": ["kwok-controller"]}),
            **self.extra_options,
        }
        config = {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
        }
        path = self.workdir / f"{self.name}-kwokctl.yaml"
        path.write_text(
            "\n---\n".join(json.dumps(d, indent=2) for d in (config, *self.extra_config_docs))
        )
        return path

    def kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command_prefix, self.binary("kwokctl"), "--name", self.name, *args],
            env=self._env(),
            capture_output=True,
            text=True,
            check=check,
        )

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this cluster; raise CalledProcessError on failure."""
        proc = subprocess.run(
            [self.binary("kubectl"), "--kubeconfig", self.kubeconfig, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, output=proc.stdout, stderr=proc.stderr
            )
        return proc

    def exists(self) -> bool:
        return (self.cluster_dir / "kwok.yaml").exists()

    def start(self, timeout: float = 180) -> None:
        """Create the cluster, add the fake nodes and wait until they are Ready.

        Raises ClusterStartError naming the component that failed, with its log tail.
        """
        missing = [
            b
            for b in (*COMPONENTS[:-1], "kwok", "kwokctl", "kubectl")
            if not os.access(self.binary(b), os.X_OK)
        ]
        if missing:
            raise ClusterStartError(f"missing binaries in {self.bin_dir}: {', '.join(missing)}")
        if self.exists():
            self.stop()
        config = self._write_config()
        proc = subprocess.run(
            [
                *self.command_prefix,
                self.binary("kwokctl"),
                "create",
                "cluster",
                "--name",
                self.name,
                "--config",
                str(config),
                "--wait",
                f"{int(timeout)}s",
                *self.extra_kwokctl_args,
            ],
            env=self._env(),
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise ClusterStartError(self._diagnose(proc.stdout + proc.stderr))
        self.publish_kubeconfig()
        if self.nodes:
            self.kubectl("apply", "-f", "-", input=json.dumps(self._node_list()))
            self._wait_nodes_ready(timeout)

    def publish_kubeconfig(self) -> None:
        """Write :attr:`kubeconfig`, the one clients on this host use."""
        shutil.copyfile(self.cluster_dir / "kubeconfig.yaml", self.kubeconfig)

    def wait_healthy(self, timeout: float = 120) -> None:
        """Wait until the cluster serves pods end to end again (e.g. after a restart):
        nodes Ready, the scheduler (which must first re-acquire its lease) places a probe
        pod and kwok runs it. Raises ClusterStartError naming the failed component."""
        self._wait_nodes_ready(timeout)
        probe = f"healthz-probe-{os.getpid()}-{int(time.monotonic() * 1000) % 100000}"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": probe, "namespace": "default"},
            "spec": {
                "containers": [{"name": "probe", "image": "probe"}],
                "terminationGracePeriodSeconds": 0,
            },
        }
        deadline = time.monotonic() + timeout
        while self.kubectl("create", "-f", "-", input=json.dumps(pod), check=False).returncode:
            if time.monotonic() > deadline:
                raise ClusterStartError(self._diagnose("cannot create a probe pod"))
            time.sleep(0.5)
        try:
            phase = ""
            while time.monotonic() < deadline:
                dead = self.dead_components()
                if dead:
                    raise ClusterStartError(self._diagnose(f"{', '.join(dead)} exited"))
                proc = self.kubectl(
                    "get", "pod", probe, "-n", "default", "-o", "jsonpath={.status.phase}",
                    check=False,
                )  # fmt: skip
                phase = proc.stdout.strip()
                if phase == "Running":
                    return
                time.sleep(0.5)
            raise ClusterStartError(
                self._diagnose(f"probe pod not Running within {timeout}s (phase {phase!r})")
            )
        finally:
            self.kubectl("delete", "pod", probe, "-n", "default", "--wait=false", check=False)

    def restart(self, downtime: float = 1.0, timeout: float = 120) -> None:
        """Stop every component, wait ``downtime`` seconds, start them and wait until the
        cluster is healthy again (``wait_healthy``)."""
        self.kwokctl("stop", "cluster")
        try:
            time.sleep(downtime)
        finally:
            self.kwokctl("start", "cluster")
        self.wait_healthy(timeout)

    def component_pid(self, name: str) -> int:
        """The pid of component ``name`` (kwokctl's pid file)."""
        return int((self.cluster_dir / "pids" / f"{name}.pid").read_text().strip())

    def kill_component(self, name: str, timeout: float = 30) -> None:
        """SIGKILL one component (``kube-apiserver``, ``etcd`` ...), as a crash or an OOM
        kill would, and wait until it is gone. The others keep running."""
        pid = self.component_pid(name)
        child = self._restarted.pop(name, None)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if child is not None:
            child.wait(timeout)
            return
        deadline = time.monotonic() + timeout
        while _running(pid):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} (pid {pid}) still running {timeout}s after SIGKILL")
            time.sleep(0.05)

    def start_component(self, name: str) -> None:
        """Start one component again with the command line kwokctl gave it (its
        ``kwok.yaml``), logging to its log and writing its pid file, and return at once.
        (``kwokctl start cluster`` cannot do this: it waits for, and then stops, what it
        did not start.)"""
        spec = self._component_spec(name)
        log = (self.cluster_dir / "logs" / f"{name}.log").open("ab")
        try:
            proc = subprocess.Popen(
                [spec["binary"], *spec.get("args", [])],
                cwd=spec.get("workDir") or self.cluster_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        self._restarted[name] = proc
        (self.cluster_dir / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")

    def _component_spec(self, name: str) -> dict[str, Any]:
        for doc in yaml.safe_load_all((self.cluster_dir / "kwok.yaml").read_text()):
            if doc and doc.get("kind") == "KwokctlConfiguration":
                for comp in doc.get("components") or []:
                    if comp.get("name") == name:
                        spec: dict[str, Any] = comp
                        return spec
        raise KeyError(f"no component {name!r} in {self.cluster_dir / 'kwok.yaml'}")

    def _node_list(self) -> dict[str, object]:
        items = [
            fake_node(
                f"kwok-node-{i}", pod_cidr(i), NODE_CAPACITY, {"nvidia.com/gpu.present": "true"}
            )
            for i in range(self.nodes)
        ]
        return {"apiVersion": "v1", "kind": "List", "items": items}

    def _wait_nodes_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            dead = self.dead_components()
            if dead:
                raise ClusterStartError(self._diagnose(f"{', '.join(dead)} exited"))
            proc = self.kubectl("get", "nodes", "-o", "json", check=False)
            if proc.returncode == 0:
                nodes = json.loads(proc.stdout)["items"]
                ready = [
                    n
                    for n in nodes
                    if any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in n.get("status", {}).get("conditions", [])
                    )
                ]
                if len(ready) >= self.nodes:
                    return
                last = f"{len(ready)}/{self.nodes} nodes Ready"
            else:
                last = proc.stderr.strip()
            time.sleep(0.5)
        raise ClusterStartError(self._diagnose(f"nodes not Ready within {timeout}s: {last}"))

    def dead_components(self) -> list[str]:
        """The components whose process is not running (per kwokctl's pid files)."""
        dead = []
        for comp in self.components:
            pidfile = self.cluster_dir / "pids" / f"{comp}.pid"
            try:
                os.kill(int(pidfile.read_text().strip()), 0)
            except (OSError, ValueError):
                dead.append(comp)
        return dead

    def _diagnose(self, what: str) -> str:
        """Say which component is down, with the tail of its log."""
        lines = [f"cluster {self.name!r} failed to start: {what.strip()[-2000:]}"]
        logs = self.cluster_dir / "logs"
        for comp in self.dead_components():
            log = logs / f"{comp}.log"
            tail = log.read_text(errors="replace").splitlines()[-15:] if log.exists() else []
            lines.append(f"--- component {comp} is NOT running; last log lines ({log}):")
            lines.extend(f"    {t}" for t in tail)
        return "\n".join(lines)

    def stop(self) -> None:
        """Delete the cluster and its processes. Never raises."""
        self.kwokctl("delete", "cluster", check=False)
        # kwokctl does not stop what start_component started (it would outlive the run).
        for proc in self._restarted.values():
            proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(30)
        self._restarted.clear()
        Path(self.kubeconfig).unlink(missing_ok=True)
