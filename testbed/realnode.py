"""A real node: kubelet, containerd and kube-proxy joined to a local control plane.

``RealCluster`` is the real-node tier of the test harness. Everything runs on this
machine, inside one network namespace that the harness creates (``msop-real-<pid>``):

- the control plane (``LocalCluster`` with the kwok controller disabled, so no fake
  node fights the kubelet), its API server on the namespace's loopback;
- a bridge ``msop0`` (10.244.0.1/24) for pods, through the CNI ``bridge`` and
  ``host-local`` plugins, and Service IPs in 10.96.0.0/16 by kube-proxy (iptables);
- containerd (Debian's 1.6, ``cgroupfs``, ``overlayfs``) and runc;
- a kubelet built from ``hack/cluster``'s Go module, registered as :data:`NODE_NAME`
  with InternalIP 10.244.0.1, and kube-proxy from the same module.

The namespace has no interface but its loopback and the bridge, so nothing leaves this
machine and nothing listens on its external interfaces; forwarding out of the bridge is
dropped as well. Two TCP relays (``testbed.netns``) cross it: the host's loopback
to the API server (so kubectl and tests on the host use ``kubeconfig``), and inside the
namespace the bridge gateway to the API server, so pods reach the ``kubernetes``
Service. Images come from ``testbed.images`` and are imported into containerd.

The fixes this machine needs (docs/development/real-node.md): cgroup v1 (the kubelet's
``failCgroupV1: false``), no CAP_SYS_RESOURCE (containerd's ``restrict_oom_score_adj``
and the kubelet's ``oomScoreAdj: 0``), no systemd (every daemon is a child process).

``stop()`` tears everything down: pod processes (by their cgroups), mounts under the
work directory, the CNI network namespaces containerd made, the namespace (with its
bridge and iptables chains) and the work directory's runtime state.

Errors: ``ClusterStartError`` names the component that failed, with its log tail.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from testbed.cluster import (
    WORKLOAD_API_GATES,
    WORKLOAD_API_RUNTIME_CONFIG,
    ClusterStartError,
    LocalCluster,
)
from testbed.images import Image, ImageBuilder, ImageBuildError
from testbed.monitoring import prometheus_tools
from testbed.netns import NETNS_DIR, NetNamespace
from testbed.process import terminate

NODE_NAME = "msop-real-node"
BRIDGE = "msop0"
GATEWAY = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
SERVICE_RANGE = "10.96.0.0/16"
#: The ``kubernetes`` Service's ClusterIP (the first address of SERVICE_RANGE).
KUBERNETES_SERVICE_IP = "10.96.0.1"
CNI_BIN_DIR = "/usr/lib/cni"
NETNS_PREFIX = "msop-real-"


@dataclass
class Daemon:
    """A process the cluster started, with its log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(f"    {t}" for t in text.splitlines()[-lines:])

    def stop(self, timeout: float = 10) -> None:
        terminate(self.proc, timeout)


@dataclass
class RealCluster:
    """A control plane plus one real node, in a network namespace of its own.

    ``workdir`` holds everything: kwokctl's state, containerd's root and state, the
    kubelet's root, CNI state and every component's log (``<workdir>/logs``).
    """

    name: str
    bin_dir: Path
    node_bin_dir: Path
    workdir: Path
    images: Sequence[Image] = ()
    workload_api: bool = False
    """Serve Kubernetes' Workload API (its feature gates on every component that has them)."""
    netns: NetNamespace = field(init=False)
    control_plane: LocalCluster = field(init=False)
    host_api_port: int = field(default=0, init=False)
    """The host relay's port to the API server (``kubeconfig`` points at it)."""
    _daemons: list[Daemon] = field(default_factory=list, init=False)
    _cni_netns_before: set[str] = field(default_factory=set, init=False)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir).resolve()
        self.netns = NetNamespace(f"{NETNS_PREFIX}{os.getpid()}")
        self.control_plane = LocalCluster(
            name=self.name,
            bin_dir=self.bin_dir,
            workdir=self.workdir / "kwok",
            nodes=0,
            kwok_controller=False,
            command_prefix=self.netns.prefix(),
            extra_options={
                # The API server's certificate must hold every address a client uses:
                # the host relay (127.0.0.1), the gateway and the `kubernetes` Service.
                "kubeApiserverCertSANs": [GATEWAY, KUBERNETES_SERVICE_IP, "127.0.0.1"],
            },
            extra_config_docs=[self._components_patches()],
        )

    # -- paths -----------------------------------------------------------------------

    @property
    def kubeconfig(self) -> str:
        """For clients on this host: the API server through the host relay."""
        return self.control_plane.kubeconfig

    @property
    def inner_kubeconfig(self) -> str:
        """For clients inside the namespace: the API server on its loopback."""
        return str(self.control_plane.cluster_dir / "kubeconfig.yaml")

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    @property
    def pki(self) -> Path:
        return self.control_plane.cluster_dir / "pki"

    @property
    def containerd_socket(self) -> Path:
        return self.workdir / "containerd" / "containerd.sock"

    @property
    def audit_log(self) -> Path:
        return self.control_plane.audit_log

    def binary(self, name: str) -> str:
        return self.control_plane.binary(name)

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return self.control_plane.kubectl(*args, input=input, check=check, timeout=timeout)

    # -- start -----------------------------------------------------------------------

    def start(self, timeout: float = 180) -> None:
        """Bring up the namespace, control plane, containerd, kubelet and kube-proxy, and
        wait until the node is Ready and Services route. Raises ClusterStartError."""
        cleanup_stale()
        self.stop()
        shutil.rmtree(self.logs, ignore_errors=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        self._cni_netns_before = _cni_namespaces()
        self._network()
        self.control_plane.start(timeout)
        api = self.control_plane.api_port
        self._relay("relay-gateway", (GATEWAY, api), (f"127.0.0.1:{api}"), self.netns.path)
        self.host_api_port = self.expose(f"127.0.0.1:{api}")
        self._write_host_kubeconfig(self.host_api_port)
        self._containerd(timeout)
        for image in self.images:
            self.ctr("images", "import", str(image.archive))
        self._kubelet()
        self._kube_proxy()
        self._wait_node_ready(timeout)
        self._wait_services_routed(timeout)

    def _network(self) -> None:
        self.netns.create()
        steps = [
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
            ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"],
            ["sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"],
            # Nothing is forwarded out of the bridge (there is no other interface in the
            # namespace today; this keeps it so if one is ever added by mistake).
            ["iptables", "-N", "MSOP-ISOLATE"],
            ["iptables", "-A", "MSOP-ISOLATE", "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP"],
            ["iptables", "-I", "FORWARD", "1", "-j", "MSOP-ISOLATE"],
        ]
        for argv in steps:
            proc = self.netns.run(*argv, check=False)
            if proc.returncode != 0:
                raise ClusterStartError(
                    f"network namespace {self.netns.name}: {' '.join(argv)} failed: "
                    f"{proc.stderr.strip()}"
                )
        cni = self.workdir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        conf = {
            "cniVersion": "0.4.0",
            "name": "msop-real",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(cni / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }
        (cni / "net.d" / "10-msop.conflist").write_text(json.dumps(conf, indent=2))

    def _components_patches(self) -> dict[str, object]:
        pki = self.workdir / "kwok" / "clusters" / self.name / "pki"
        args = {
            "advertise-address": GATEWAY,
            "service-cluster-ip-range": SERVICE_RANGE,
            "kubelet-preferred-address-types": "InternalIP",
            "kubelet-client-certificate": str(pki / "admin.crt"),
            "kubelet-client-key": str(pki / "admin.key"),
        }
        manager = {"service-cluster-ip-range": SERVICE_RANGE}
        scheduler: dict[str, str] = {}
        if self.workload_api:
            gates = {"feature-gates": WORKLOAD_API_GATES}
            args |= gates | {"runtime-config": WORKLOAD_API_RUNTIME_CONFIG}
            manager |= gates
            scheduler |= gates
        patches = [("kube-apiserver", args), ("kube-controller-manager", manager)]
        if scheduler:
            patches.append(("kube-scheduler", scheduler))
        return {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "componentsPatches": [
                {"name": name, "extraArgs": [{"key": k, "value": v} for k, v in kv.items()]}
                for name, kv in patches
            ],
        }

    def expose(self, address: str) -> int:
        """Relay the host's loopback to ``address`` (HOST:PORT inside the namespace);
        returns the host port. The relay stops with the cluster."""
        return self._relay(f"relay-{address}", ("127.0.0.1", 0), address, None)

    def spawn(self, name: str, argv: Sequence[str]) -> Daemon:
        """Start ``argv`` inside the namespace, its output in ``<logs>/<name>.log``. The
        process is stopped with the cluster, or earlier by ``.stop()`` on the result."""
        return self._spawn(name, argv)

    def _spawn(self, name: str, argv: Sequence[str], in_netns: bool = True) -> Daemon:
        log = self.logs / f"{name}.log"
        out: IO[bytes] = log.open("ab")
        try:
            proc = subprocess.Popen(
                [*(self.netns.prefix() if in_netns else []), *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            out.close()
        daemon = Daemon(name, proc, log)
        self._daemons.append(daemon)
        return daemon

    def _relay(
        self, name: str, listen: tuple[str, int], connect: str, listen_netns: Path | None
    ) -> int:
        argv = [
            sys.executable, "-m", "testbed.netns", "forward",
            "--listen", f"{listen[0]}:{listen[1]}", "--connect", connect,
            "--connect-netns", str(self.netns.path),
        ]  # fmt: skip
        if listen_netns is not None:
            argv += ["--listen-netns", str(listen_netns)]
        log = self.logs / f"{name}.log"
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=log.open("ab"),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._daemons.append(Daemon(name, proc, log))
        assert proc.stdout is not None
        line = proc.stdout.readline().decode().strip()
        if not line.isdigit():
            raise ClusterStartError(self._diagnose(f"{name} did not start"))
        return int(line)

    def _write_host_kubeconfig(self, port: int) -> None:
        text = (self.control_plane.cluster_dir / "kubeconfig.yaml").read_text()
        api = self.control_plane.api_port
        text = text.replace(f"127.0.0.1:{api}", f"127.0.0.1:{port}")
        Path(self.kubeconfig).write_text(text)

    def _containerd(self, timeout: float) -> None:
        root = self.workdir / "containerd"
        config = root / "config.toml"
        root.mkdir(parents=True, exist_ok=True)
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        config.write_text(
            f"""version = 2
root = "{root / "root"}"
state = "{root / "state"}"
[grpc]
  address = "{self.containerd_socket}"
[ttrpc]
  address = "{self.containerd_socket}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "opt"}"
[{cri}]
  sandbox_image = "{_pause_ref(self.images)}"
  # No CAP_SYS_RESOURCE here: runc may not lower oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{self.workdir / "cni" / "net.d"}"
"""
        )
        daemon = self._spawn("containerd", ["containerd", "--config", str(config)])
        deadline = time.monotonic() + timeout
        while not self.containerd_socket.exists() or self.ctr("version", check=False).returncode:
            if not daemon.alive() or time.monotonic() > deadline:
                raise ClusterStartError(self._diagnose("containerd did not start"))
            time.sleep(0.2)

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this node's containerd, in the ``k8s.io`` namespace."""
        proc = subprocess.run(
            ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
        )
        if check and proc.returncode != 0:
            raise ClusterStartError(
                self._diagnose(f"ctr {' '.join(args)} failed: {proc.stderr.strip()}")
            )
        return proc

    @property
    def cgroup_root(self) -> str:
        """The cgroup (in every hierarchy) that holds this node's pods."""
        return self.netns.name

    def _kubelet(self) -> None:
        _make_cgroup(self.cgroup_root)
        root = self.workdir / "kubelet"
        root.mkdir(parents=True, exist_ok=True)
        kubeconfig = self._component_kubeconfig(root / "kubeconfig")
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": GATEWAY,
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.containerd_socket}",
            "cgroupDriver": "cgroupfs",
            # The pods' cgroups live under a root of this cluster's own, so teardown kills
            # only them, never another kubelet's pods on the same machine.
            "cgroupRoot": f"/{self.cgroup_root}",
            # This machine has cgroup v1; kubelet 1.35+ refuses it unless told.
            "failCgroupV1": False,
            # No CAP_SYS_RESOURCE: the kubelet may not lower its own oom_score_adj.
            "oomScoreAdj": 0,
            "failSwapOn": False,
            # Pods get an empty resolv.conf, not this machine's resolver.
            "resolvConf": "",
            # There is no registry to pull from again: never collect images.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "1%",
                "imagefs.available": "1%",
            },
            "serializeImagePulls": False,
            "registerNode": True,
            "maxPods": 50,
        }
        path = root / "config.yaml"
        path.write_text(json.dumps(config, indent=2))
        self._spawn(
            "kubelet",
            [
                str(self.node_bin_dir / "kubelet"),
                f"--config={path}",
                f"--kubeconfig={kubeconfig}",
                f"--root-dir={root / 'root'}",
                f"--cert-dir={root / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={GATEWAY}",
                "--v=1",
            ],
        )

    def _kube_proxy(self) -> None:
        root = self.workdir / "kube-proxy"
        root.mkdir(parents=True, exist_ok=True)
        kubeconfig = self._component_kubeconfig(root / "kubeconfig")
        self._spawn(
            "kube-proxy",
            [
                str(self.node_bin_dir / "kube-proxy"),
                f"--kubeconfig={kubeconfig}",
                "--proxy-mode=iptables",
                f"--hostname-override={NODE_NAME}",
                f"--cluster-cidr={POD_SUBNET}",
                # conntrack sysctls are not ours to change on this machine.
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                "--metrics-bind-address=127.0.0.1:10249",
                "--healthz-bind-address=127.0.0.1:10256",
                "--v=1",
            ],
        )

    def _component_kubeconfig(self, path: Path) -> Path:
        """A kubeconfig for a node component: the API server on the namespace's loopback,
        with kwokctl's admin certificate (a test node; no bootstrap tokens)."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.control_plane.api_port}",
                        "certificate-authority": str(self.pki / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": "node",
                    "user": {
                        "client-certificate": str(self.pki / "admin.crt"),
                        "client-key": str(self.pki / "admin.key"),
                    },
                }
            ],
            "contexts": [{"name": "node", "context": {"cluster": "local", "user": "node"}}],
            "current-context": "node",
        }
        path.write_text(json.dumps(config, indent=2))
        return path

    def _wait_node_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            proc = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
            if proc.returncode == 0:
                conds = json.loads(proc.stdout).get("status", {}).get("conditions", [])
                ready = [c for c in conds if c["type"] == "Ready"]
                if ready and ready[0]["status"] == "True":
                    return
                last = ready[0].get("message", "") if ready else "no Ready condition"
            else:
                last = proc.stderr.strip()
            time.sleep(0.5)
        raise ClusterStartError(self._diagnose(f"node not Ready within {timeout}s: {last}"))

    def _wait_services_routed(self, timeout: float) -> None:
        """kube-proxy has written the rule for the ``kubernetes`` Service."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_alive()
            rules = self.netns.run("iptables", "-t", "nat", "-S", "KUBE-SERVICES", check=False)
            if KUBERNETES_SERVICE_IP in rules.stdout:
                return
            time.sleep(0.5)
        raise ClusterStartError(self._diagnose("kube-proxy never programmed the Service IPs"))

    # -- health and diagnosis ----------------------------------------------------------

    def dead_components(self) -> list[str]:
        dead = self.control_plane.dead_components()
        return dead + [d.name for d in self._daemons if not d.alive()]

    def _check_alive(self) -> None:
        dead = self.dead_components()
        if dead:
            raise ClusterStartError(self._diagnose(f"{', '.join(dead)} exited"))

    def _diagnose(self, what: str) -> str:
        lines = [self.control_plane._diagnose(what)]
        for daemon in self._daemons:
            if not daemon.alive():
                lines.append(f"--- component {daemon.name} is NOT running ({daemon.log}):")
                lines.append(daemon.tail())
        if not any(not d.alive() for d in self._daemons):
            for daemon in self._daemons:
                if daemon.name in ("kubelet", "containerd", "kube-proxy"):
                    lines.append(f"--- {daemon.name} (running), last log lines ({daemon.log}):")
                    lines.append(daemon.tail(8))
        return "\n".join(lines)

    # -- stop ------------------------------------------------------------------------

    def stop(self) -> None:
        """Tear everything down. Never raises; safe to call twice."""
        for daemon in reversed(self._daemons):
            if daemon.name in ("kube-proxy", "kubelet"):
                daemon.stop()
        _kill_cgroup_tree(self.cgroup_root)
        for daemon in reversed(self._daemons):
            daemon.stop()
        self._daemons.clear()
        self.control_plane.stop()
        _kill_namespace_processes(self.netns.name)
        _unmount_under(self.workdir)
        for name in _cni_namespaces() - self._cni_netns_before:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)
        self.netns.delete()
        for sub in ("containerd", "kubelet", "kube-proxy", "cni"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)


@dataclass(frozen=True)
class NodeImages:
    """The images a real node gets: the sandbox, the Python base, the operator and
    MindSpore for CPU (the examples/mindspore image)."""

    pause: Image
    python: Image
    operator: Image
    mindspore: Image

    def all(self) -> tuple[Image, ...]:
        return (self.pause, self.python, self.operator, self.mindspore)


@dataclass(frozen=True)
class Prepared:
    """What ``prepare()`` built: binary directories, the Prometheus server, the images."""

    bin_dir: Path
    node_bin_dir: Path
    prometheus: Path
    images: NodeImages


def prepare(repo: Path, cache: Path) -> Prepared:
    """Everything a RealCluster needs, each step skipped when already done: the Debian
    packages (hack/realnode/ensure-packages.sh), the control-plane and node binaries
    (hack/cluster/build.sh), Prometheus (hack/prometheus/build.sh) and the images
    (testbed.images). Raises ClusterStartError naming the step that failed, with
    its output."""

    def step(argv: list[str], what: str) -> str:
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClusterStartError(f"{what} failed ({' '.join(argv)}):\n{proc.stderr[-4000:]}")
        return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""

    step([str(repo / "hack/realnode/ensure-packages.sh")], "installing the node's packages")
    bin_dir = step([str(repo / "hack/cluster/build.sh")], "building the control plane")
    node_dir = step([str(repo / "hack/cluster/build.sh"), "node"], "building kubelet")
    try:
        prom_dir = prometheus_tools()
    except RuntimeError as e:
        raise ClusterStartError(f"building Prometheus failed: {e}") from e
    builder = ImageBuilder(cache, repo)
    try:
        python = builder.python_base()
        images = NodeImages(
            builder.pause(), python, builder.operator(python), builder.mindspore(python)
        )
    except ImageBuildError as e:
        raise ClusterStartError(f"building the real tier's images failed:\n{e}") from e
    return Prepared(Path(bin_dir), Path(node_dir), prom_dir / "prometheus", images)


def write_overlay(
    directory: Path, image_ref: str, base: Path, components: Sequence[Path] = ()
) -> Path:
    """Write a kustomize overlay of ``base`` (config/default) that sets the operator image
    to ``image_ref`` and adds ``components`` (config/components/kueue, ...): what
    docs/tasks/install.md tells users to do for their registry. Returns the directory, for
    ``kubectl apply -k``."""
    directory.mkdir(parents=True, exist_ok=True)
    name, _, tag = image_ref.rpartition(":")
    overlay: dict[str, object] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(base, directory)],
        "images": [{"name": "msop", "newName": name, "newTag": tag}],
    }
    if components:
        overlay["components"] = [os.path.relpath(c, directory) for c in components]
    (directory / "kustomization.yaml").write_text(json.dumps(overlay, indent=2))
    return directory


def _pause_ref(images: Sequence[Image]) -> str:
    for image in images:
        if "/pause:" in image.ref:
            return image.ref
    raise ClusterStartError("no pause image among the images to import")


def _cni_namespaces() -> set[str]:
    with contextlib.suppress(OSError):
        return {p.name for p in NETNS_DIR.iterdir() if p.name.startswith("cni-")}
    return set()


def _hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies: each v1 controller's, or the v2 root."""
    base = Path("/sys/fs/cgroup")
    if (base / "cgroup.controllers").exists():
        return [base]
    return sorted(p for p in base.iterdir() if p.is_dir() and (p / "cgroup.procs").exists())


def _make_cgroup(name: str) -> None:
    """Create the cgroup ``name`` in every hierarchy (the kubelet's ``cgroupRoot`` must
    exist); a v1 cpuset gets its parent's CPUs and memory nodes, or it takes no task."""
    for hierarchy in _hierarchies():
        path = hierarchy / name
        path.mkdir(exist_ok=True)
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (path / knob).exists() and not (path / knob).read_text().strip():
                (path / knob).write_text((hierarchy / knob).read_text())


def _cgroup_dirs(root: Path) -> list[Path]:
    """``root`` and every cgroup under it, deepest first (``root`` last). A cgroup that
    goes away during the walk, as the kubelet removes those of ending containers, is
    skipped (``os.walk`` ignores the directories it cannot list)."""
    return [Path(d) for d, _, _ in os.walk(root, topdown=False)]


def _kill_cgroup_tree(name: str) -> None:
    """SIGKILL every process in the cgroup ``name`` of every hierarchy, then remove the
    cgroups, deepest first: the pods' processes outlive containerd's shims."""
    roots = [h / name for h in _hierarchies()]
    for _ in range(3):
        for root in roots:
            for cgroup in _cgroup_dirs(root):
                with contextlib.suppress(OSError, ValueError):
                    for pid in (cgroup / "cgroup.procs").read_text().split():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.2)
    for root in roots:
        for cgroup in _cgroup_dirs(root):
            with contextlib.suppress(OSError):
                cgroup.rmdir()


def _unmount_under(path: Path) -> None:
    """Unmount every mount point under ``path``, deepest first (lazily, so a busy one
    still goes)."""
    prefix = str(path) + "/"
    with contextlib.suppress(OSError):
        points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
        for point in sorted({p for p in points if p.startswith(prefix)}, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def _kill_namespace_processes(name: str) -> None:
    """SIGKILL whatever still runs in the network namespace ``name``."""
    proc = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    for pid in proc.stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)


def cleanup_stale() -> None:
    """Tear down real-node namespaces left by test processes that no longer run (killed
    before their ``stop()``): their processes, their pods and the namespace itself."""
    with contextlib.suppress(OSError):
        for entry in NETNS_DIR.iterdir():
            if not entry.name.startswith(NETNS_PREFIX):
                continue
            pid = entry.name.removeprefix(NETNS_PREFIX)
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                _kill_namespace_processes(entry.name)
                _kill_cgroup_tree(entry.name)
                NetNamespace(entry.name).delete()
                # The pods' namespaces (containerd 1.6 puts them in /run/netns): once their
                # processes are gone, nothing else uses an empty cni-* namespace.
                for name in _cni_namespaces():
                    pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True)
                    if not pids.stdout.strip():
                        NetNamespace(name).delete()
