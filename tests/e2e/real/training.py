"""Helpers of the real tier's training tests: apply objects, launch a sample, read the
records the training scripts print, wait for an epoch, kill a training process."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from msop.integrations.wire import KEPT_RUN_BEGIN, KEPT_RUN_END
from testbed.examples import MINDSPORE_EXAMPLE, mindspore_example
from testbed.examples import MINDSPORE_JOB as NAME
from testbed.paths import CACHE
from testbed.realnode import NodeImages, RealCluster
from tests.e2e.msjobs import (
    get,
    wait_for,
)
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.reliability import audit_events

JSON = dict[str, Any]


CLUSTER_ENV = ("MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_SERVER_NUM",
               "MS_NODE_ID")  # fmt: skip


def apply(cluster: RealCluster, ns: str, *objs: JSON) -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": list(objs)}
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(listed))


def launch(
    cluster: RealCluster,
    ns: str,
    images: NodeImages,
    checkpoints: Path,
    spec: JSON | None = None,
    **env: str,
) -> None:
    """Apply the example (its ConfigMap and MSJob) with ``env`` on every replica (and
    ``spec`` merged into the MSJob's spec)."""
    config_map, job = mindspore_example(
        cluster, images.mindspore.ref, checkpoints, MINDSPORE_EXAMPLE, **env
    )
    job["spec"].update(spec or {})
    apply(cluster, ns, config_map, job)


def records(cluster: RealCluster, ns: str, pod: str, previous: bool = False) -> list[JSON]:
    """The JSON lines train.py printed in ``pod`` (MindSpore's own log lines skipped)."""
    args = ["logs", "-n", ns, pod, "-c", "mindspore", *(["--previous"] if previous else [])]
    proc = cluster.kubectl(*args, check=False)
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def msop(cluster: RealCluster, *args: str) -> str:
    """What ``msop ARGS`` prints, run as a user runs it; it must exit 0."""
    proc = subprocess.run(
        [sys.executable, "-m", "msop.cli", *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def kept_runs(cluster: RealCluster, ns: str, job: str) -> dict[str, list[str]]:
    """``msop logs JOB --previous --prefix`` as a user runs it, by pod: after a restart in
    place, the stopped run each pod's msop-agent kept (the kubelet removed the containers
    and their logs), its opening and closing lines included."""
    out: dict[str, list[str]] = {}
    for line in msop(cluster, "logs", job, "--previous", "--prefix", "-n", ns).splitlines():
        pod, _, text = line.partition("] ")
        out.setdefault(pod.removeprefix("["), []).append(text)
    return out


def agent_log_outline(cluster: RealCluster, ns: str, pod: str) -> str:
    """Where the kept-run markers stand in the pod's msop-agent log, with its container
    status: what a failed check of the kept runs needs to tell a cut block from a lost
    one."""
    proc = cluster.kubectl("logs", pod, "-n", ns, "-c", "msop-agent", check=False)
    lines = proc.stdout.splitlines()
    marks = [
        f"{i}: {line[:160]}"
        for i, line in enumerate(lines)
        if line.startswith((KEPT_RUN_BEGIN, KEPT_RUN_END)) or line.startswith("msop agent: ")
    ]
    status = cluster.kubectl(
        "get", "pod", pod, "-n", ns, "-o", "jsonpath={.status.initContainerStatuses}",
        check=False,
    ).stdout  # fmt: skip
    return (
        f"{len(lines)} lines; markers and agent lines: {marks[-40:]}; last lines: "
        f"{[line[:160] for line in lines[-3:]]}; status: {status}"
    )


def assert_every_stopped_run_kept(cluster: RealCluster, ns: str, job: str, pods: list[str]) -> None:
    """Every pod's stopped run is readable after the restart in place, and says where it
    comes from; the Workers' have what train.py printed before the restart."""
    kept = kept_runs(cluster, ns, job)
    missing = {p: agent_log_outline(cluster, ns, p) for p in pods if p not in kept}
    assert not missing and sorted(kept) == sorted(pods), (sorted(kept), missing)
    for pod, lines in kept.items():
        assert lines[0].startswith(KEPT_RUN_BEGIN + "mindspore "), (pod, lines[:2])
        assert lines[-1].startswith(KEPT_RUN_END + "mindspore "), (
            pod, lines[-2:], agent_log_outline(cluster, ns, pod))  # fmt: skip
        if "-worker-" in pod:
            assert any(line.startswith("{") for line in lines), (pod, lines[-20:])


def worker_records(cluster: RealCluster, ns: str, n: int) -> dict[str, list[JSON]]:
    return {f"{NAME}-worker-{i}": records(cluster, ns, f"{NAME}-worker-{i}") for i in range(n)}


def last_epoch(cluster: RealCluster, ns: str, pod: str) -> int:
    epochs = [r["epoch"] for r in records(cluster, ns, pod) if r.get("event") == "epoch"]
    return max(epochs, default=0)


def exit_codes(pods: dict[str, JSON]) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, pod in pods.items():
        states = [cs.get("state", {}) for cs in pod["status"].get("containerStatuses", [])]
        out[name] = next((s["terminated"]["exitCode"] for s in states if "terminated" in s), None)
    return out


def kill_training_process(cluster: RealCluster, ns: str, pod: str, sig: str = "KILL") -> None:
    """Send ``sig`` to the container's main process from the host, as the OOM killer
    (KILL) or the kubelet stopping a container (TERM) does. (The kernel ignores a SIGKILL
    that a container sends to its own PID 1.)"""
    obj = get(cluster, ns, "pod", pod)
    assert obj is not None
    cid = obj["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    tasks = cluster.ctr("tasks", "ls").stdout.splitlines()
    pid = next(int(line.split()[1]) for line in tasks if line.startswith(cid))
    subprocess.run(["kill", f"-{sig}", str(pid)], check=True)


def wait_training(cluster: RealCluster, ns: str, pod: str, epoch: int, logs: JobLogs) -> None:
    wait_for(f"{pod} past epoch {epoch}", lambda: last_epoch(cluster, ns, pod) >= epoch,
             timeout=180, interval=1, details=logs.tail)  # fmt: skip


PRINT_ENV = "env | grep '^MS_' | sort"


def real_job(base: JSON, image: str, commands: dict[str, str], workers: int) -> JSON:
    """The sample with an image that exists here and the given shell commands: no GPU
    limits, no hostPath data (what a user trying the operator on CPU changes)."""
    job: JSON = json.loads(json.dumps(base))
    specs = job["spec"]["msReplicaSpecs"]
    specs["Worker"]["replicas"] = workers
    for rtype, spec in specs.items():
        pod = spec["template"]["spec"]
        pod.pop("volumes", None)
        pod["terminationGracePeriodSeconds"] = 1
        for container in pod["containers"]:
            container["image"] = image
            container["command"] = ["sh", "-c", commands[rtype]]
            for key in ("volumeMounts", "resources"):
                container.pop(key, None)
    return job


def apply_job(cluster: RealCluster, ns: str, job: JSON) -> str:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job))
    return str(job["metadata"]["name"])


# --- what a restart costs (docs/performance.md: restarts in place vs recreation) ----------

RESTART_REPORT = CACHE / "e2e-logs" / "restart-report.json"


def started_after(lines: list[JSON], after: float) -> list[JSON]:
    """The records of the first run of the script that started after ``after`` (epoch
    seconds): a process that outlived the failure (a Worker whose Scheduler's pod was
    deleted trains on until restarted) logs steps after it too, and they do not count."""
    for i, r in enumerate(lines):
        if r.get("event") == "start" and r.get("time", 0) > after:
            return lines[i:]
    return []


def training_again(cluster: RealCluster, ns: str, pods: list[str], after: float) -> float | None:
    """When every one of ``pods`` logged a training step again in a run started after
    ``after`` (epoch seconds): the latest of their first such steps; None until all have."""
    firsts: list[float] = []
    for pod in pods:
        steps = [r["time"] for r in started_after(records(cluster, ns, pod), after)
                 if r.get("event") == "step"]  # fmt: skip
        if not steps:
            return None
        firsts.append(min(steps))
    return max(firsts)


def operator_writes(audit_log: Path, ns: str, since: float, until: float) -> dict[str, int]:
    """The operator's writes in ``ns`` between two instants, by ``verb resource``."""
    out: dict[str, int] = {}
    for ev in audit_events(audit_log):
        ref = ev.get("objectRef") or {}
        if ref.get("namespace") != ns or not str(ev.get("userAgent", "")).startswith("msop/"):
            continue
        if ev.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        at = datetime.fromisoformat(str(ev["requestReceivedTimestamp"]).replace("Z", "+00:00"))
        if since <= at.timestamp() <= until:
            what = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            key = f"{ev['verb']} {what}"
            out[key] = out.get(key, 0) + 1
    return out


def report_restart(mode: str, figures: JSON) -> None:
    """Add one restart's figures to the tier's report (printed at the end of the run)."""
    RESTART_REPORT.parent.mkdir(parents=True, exist_ok=True)
    report = json.loads(RESTART_REPORT.read_text()) if RESTART_REPORT.is_file() else {}
    report[mode] = figures
    RESTART_REPORT.write_text(json.dumps(report, indent=1, sort_keys=True))
