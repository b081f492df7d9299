"""The bench's control plane and operator: a LocalCluster with the CRD installed,
namespaces, and ``/proc`` readings of the operator process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from testbed import LocalCluster, OperatorProcess
from testbed.cluster import SHARDED_WATCH_GATE
from testbed.paths import CACHE, REPO
from testbed.ports import free_port

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: Every controller but those of Endpoints and EndpointSlices. Each of them, on every pod
#: event, matches the pod against every Service of its namespace: with a Service per job,
#: 10,000 jobs cost 10,000 selector matches per event, 60,000 pods several events each,
#: and two cores' controller-manager fell behind the pods. kwok's pods serve nothing, and
#: neither msop nor the raw baseline reads an Endpoints object.
CONTROLLERS = "*," + ",".join(
    f"-{c}-controller" for c in ("endpoints", "endpointslice", "endpointslice-mirroring")
)

#: The scheduler without PodTopologySpread's system default constraints. For a pod with no
#: spread constraints of its own, they derive one from the Services that select it (a scan
#: of every Service of its namespace) and score each node by counting the pods on it that
#: match (a scan of every pod bound anywhere): per pod, work in proportion to the cluster's
#: jobs, so the whole burst's grows with their square. At 10,000 jobs two cores scheduled
#: about 10 pods a second. kwok's nodes have no zones to spread across.
SCHEDULER_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "default-scheduler",
            "pluginConfig": [
                {
                    "name": "PodTopologySpread",
                    "args": {"defaultingType": "List", "defaultConstraints": []},
                }
            ],
        }
    ],
}

#: kube-apiserver's default Service range (10.0.0.0/24) holds 254 Services; the burst
#: needs 1,000 and the memory scenario 2,000. Its audit log is rotated at 100 MB by
#: default, which the 2,000-job scenario passes: the writes per job are read from the one
#: file, so let it grow to 4 GB. The sharded list and watch is on: the shards scenarios'
#: replicas then watch only their shards' MSJobs.
APISERVER_ARGS = {
    "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
    "kind": "KwokctlConfiguration",
    "componentsPatches": [
        {
            "name": "kube-apiserver",
            "extraArgs": [
                {"key": "service-cluster-ip-range", "value": "10.96.0.0/16"},
                {"key": "audit-log-maxsize", "value": "4096"},
                {"key": "feature-gates", "value": SHARDED_WATCH_GATE},
            ],
        },
        {
            "name": "kube-controller-manager",
            "extraArgs": [{"key": "controllers", "value": CONTROLLERS}],
        },
    ],
}


def binaries() -> Path:
    """Build (or reuse) the control-plane binaries; return their directory."""
    out = subprocess.run(
        [str(REPO / "hack/cluster/build.sh")], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip().splitlines()[-1])


def start_cluster(name: str, nodes: int) -> LocalCluster:
    """Start a cluster and install the MSJob CRD (Established before returning)."""
    workdir = CACHE / "kwok-bench"
    workdir.mkdir(parents=True, exist_ok=True)
    scheduler_config = workdir / f"{name}-scheduler.yaml"
    scheduler_config.write_text(json.dumps(SCHEDULER_CONFIG, indent=2))
    cluster = LocalCluster(
        name=name,
        bin_dir=binaries(),
        workdir=workdir,
        nodes=nodes,
        extra_options={"kubeSchedulerConfig": str(scheduler_config)},
        extra_config_docs=(APISERVER_ARGS,),
    )
    try:
        cluster.start()
        for crd in sorted((REPO / "config/crd/bases").glob("*.yaml")):
            cluster.kubectl("apply", "-f", str(crd))
            _wait_established(cluster, crd)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _wait_established(cluster: LocalCluster, crd: Path, timeout: float = 60) -> None:
    # `kubectl wait` fails outright while a new CRD has no status yet; poll instead.
    name = cluster.kubectl("get", "-f", str(crd), "-o", "name").stdout.strip()
    query = "jsonpath={.status.conditions[?(@.type=='Established')].status}"
    deadline = time.monotonic() + timeout
    while cluster.kubectl("get", name, "-o", query, check=False).stdout.strip() != "True":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} not Established within {timeout}s")
        time.sleep(0.2)


def server_version(cluster: LocalCluster) -> str:
    out = cluster.kubectl("version", "-o", "json").stdout
    info = json.loads(out).get("serverVersion", {})
    return str(info.get("gitVersion", "unknown"))


def kwok_version(cluster: LocalCluster) -> str:
    out = subprocess.run(
        [cluster.binary("kwok"), "--version"], capture_output=True, text=True, check=False
    )
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else ""


@dataclass(frozen=True)
class ProcSample:
    """One reading of a process: resident memory and CPU time so far."""

    rss_bytes: int
    cpu_seconds: float
    peak_rss_bytes: int = 0
    """VmHWM: the highest RSS of the process so far."""


def sample(pid: int) -> ProcSample:
    """Read VmRSS and VmHWM from ``/proc/<pid>/status`` and utime+stime from
    ``/proc/<pid>/stat``."""
    rss = peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return ProcSample(rss, (utime + stime) / CLOCK_TICKS, peak)


def machine() -> dict[str, object]:
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    cpu_model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu_model = line.split(":", 1)[1].strip()
            break
    return {
        "cores": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }


def start_operator(
    kubeconfig: str,
    log_path: Path,
    args: tuple[str, ...],
    profile_to: Path | None = None,
    profiler: str = "cprofile",
) -> OperatorProcess:
    """Start ``msop run`` and wait until ready.

    With ``profile_to``: ``profiler="cprofile"`` runs it under cProfile (main thread
    only; the profile is written when the operator exits on SIGTERM);
    ``profiler="py-spy"`` attaches ``py-spy record`` (every thread, sampled, collapsed
    stacks written when the operator exits; ``pip install -e '.[bench]'`` installs it).
    """
    op = OperatorProcess(kubeconfig=kubeconfig, log_path=log_path, args=args)
    if profile_to is None:
        return op.start(timeout=120)
    if profiler == "py-spy":
        spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
        if not Path(spy).exists():
            raise SystemExit("--profile py-spy: py-spy is not installed (pip install py-spy)")
        op.start(timeout=120)
        assert op.proc is not None
        subprocess.Popen(
            [spy, "record", "--pid", str(op.proc.pid), "--format", "raw", "--rate", "250",
             "--output", str(profile_to)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        return op
    op.metrics_port, op.health_port = free_port(), free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        op.proc = subprocess.Popen(
            [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "msop.cli", "run",
             "--kubeconfig", kubeconfig,
             "--metrics-bind-address", f"127.0.0.1:{op.metrics_port}", "--metrics-secure=false",
             "--health-probe-bind-address", f"127.0.0.1:{op.health_port}", *args],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    op.wait_ready(120)
    return op
