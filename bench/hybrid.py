"""Scenario ``hybrid``: one node of a 1,000-pod job lost, restarted in place against
restarted by recreation: a failure should cost only what failed.

One MSJob of 1 Scheduler + 999 Workers (``restartScope: Job``, the default with a
Scheduler; Workers ``ExitCode``), one pod per rank: the Scheduler-and-Workers shape of
ms-operator's samples, whose pods msop creates and restarts one by one (an msrun job has
fewer, larger pods, and would hide the per-pod costs this scenario looks for). The kwok
nodes hold 8 pods each (``pods`` capacity 8, as 8 devices would), with one free slot in
the cluster for a replacement; one node holds a single pod, and that node is lost: the
node is deleted and its pod force-deleted (what the pod garbage collector does to the
pods of a node that is gone). Every node declares ``RestartAllContainersOnContainerExits``
and the operator runs with ``--agent-image``, as the kwok tests of restarts in place do;
every pod's agent, and the kubelet's part of a restart in place, are played by one
process, :mod:`testbed.agents`.

- **in place** (a hybrid restart): the lost pod is recreated, held at its barrier, and
  the 999 others are restarted in place by their agents, then released together;
- **recreation**: the same job with ``spec.restartInPlace: false``, on a fresh cluster:
  every pod is deleted and created again.

Measured from the failure (the bench's delete): when every pod runs its training again
(in place: the stand-in's last release; recreation: every pod Running with a new UID),
when the job's ``Restarting`` condition turns False, and the operator's writes in the
API server's audit log until then (plus 3 s), by verb and resource.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from pathlib import Path
from typing import Any

from bench.audit import WRITE_VERBS, completed_events, epoch, requests_of
from bench.burst import OPERATOR_USER_AGENT_PREFIX, bench_client, bounded
from bench.environment import sample, start_operator
from bench.observe import wait_until, watch_forever
from msop.api.resources import MSJOBS
from msop.kube import PODS, KubeClient, Resource
from msop.msjob.inplace.startup import FEATURE
from testbed import LocalCluster
from testbed.agents import StandInProcess
from testbed.cluster import create_namespace

JSON = dict[str, Any]
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACE = "bench-hybrid"
JOB = "hybrid"
PODS_PER_NODE = 8
SETTLE_S = 3.0
COMPONENTS = ("kube-apiserver", "etcd", "kwok-controller")
"""The control plane's processes whose CPU the report gives beside the operator's and the
stand-in's, to say which of them the restart waits for."""
MODES = ("in_place", "recreation")


def nodes_for(pods: int) -> int:
    """One node for the lone pod, then 8 pods a node with a free slot for the replacement."""
    return 1 + math.ceil(pods / PODS_PER_NODE)


def msjob(workers: int, *, in_place: bool) -> JSON:
    def replica(n: int, policy: str) -> JSON:
        container = {
            "name": "mindspore",
            "image": "mindspore/mindspore:2.2.0",
            "command": ["python", "/data/train.py"],
            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
        }
        spec = {"containers": [container], "terminationGracePeriodSeconds": 0}
        return {"replicas": n, "restartPolicy": policy, "template": {"spec": spec}}

    spec: JSON = {
        "runPolicy": {"backoffLimit": 10, "cleanPodPolicy": "None"},
        "msReplicaSpecs": {
            "Scheduler": replica(1, "Never"),
            "Worker": replica(workers, "ExitCode"),
        },
    }
    if not in_place:
        spec["restartInPlace"] = False
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": JOB, "namespace": NAMESPACE},
        "spec": spec,
    }


async def _shape_nodes(client: KubeClient, nodes: list[str]) -> None:
    """Node 0 holds one pod, the others 8; every node declares the feature."""

    async def one(name: str) -> None:
        pods = "1" if name == nodes[0] else str(PODS_PER_NODE)
        node = await client.get(NODES, name)
        capacity = {**node["status"]["capacity"], "pods": pods}
        allocatable = {**node["status"]["allocatable"], "pods": pods}
        body = {"status": {"capacity": capacity, "allocatable": allocatable,
                           "declaredFeatures": [FEATURE]}}  # fmt: skip
        await client.patch(NODES, name, body, subresource="status")

    await bounded(16, nodes, one)


class Pods:
    """The namespace's pods as last seen, by name."""

    def __init__(self) -> None:
        self.by_name: dict[str, JSON] = {}

    def __call__(self, type_: str, obj: JSON, _now: float) -> None:
        name = obj["metadata"]["name"]
        if type_ == "DELETED":
            if self.by_name.get(name, {}).get("metadata", {}).get("uid") == obj["metadata"]["uid"]:
                del self.by_name[name]
        else:
            self.by_name[name] = obj

    def running(self) -> dict[str, JSON]:
        return {n: p for n, p in self.by_name.items()
                if (p.get("status") or {}).get("phase") == "Running"
                and not p["metadata"].get("deletionTimestamp")}  # fmt: skip


class Job:
    """The job's ``Running`` and ``Restarting`` conditions as last seen."""

    def __init__(self) -> None:
        self.conditions: dict[str, JSON] = {}
        self.restarted_at: float | None = None

    def __call__(self, type_: str, obj: JSON, _now: float) -> None:
        conds = (obj.get("status") or {}).get("conditions") or []
        self.conditions = {c["type"]: c for c in conds}

    def running(self) -> bool:
        return (self.conditions.get("Running") or {}).get("status") == "True"

    def restarted(self) -> bool:
        r = self.conditions.get("Restarting")
        return r is not None and r["status"] == "False" and self.running()


def writes(audit_log: Path, since: float, until: float, keep: Path | None = None) -> JSON:
    """The operator's writes between ``since`` and ``until`` (epoch seconds); with
    ``keep``, the operator's lines of the audit log are copied there."""
    lines: list[str] = []
    deletes: list[str] = []
    with audit_log.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            if OPERATOR_USER_AGENT_PREFIX in line:
                lines.append(line)
            if '"delete"' in line and '"pods"' in line:
                deletes.append(line)
    if keep is not None:
        keep.parent.mkdir(parents=True, exist_ok=True)
        keep.write_text("".join(lines))
    reqs = [r for r in requests_of(lines, OPERATOR_USER_AGENT_PREFIX)
            if since <= r.time <= until and r.verb in WRITE_VERBS]  # fmt: skip
    by: dict[str, int] = {}
    codes: dict[str, int] = {}
    for r in reqs:
        key = f"{r.verb} {r.resource}"
        by[key] = by.get(key, 0) + 1
        codes[f"{key} {r.code}"] = codes.get(f"{key} {r.code}", 0) + 1
    pods = [r for r in reqs if r.resource == "pods"]
    events = sum(n for k, n in by.items() if k.split(" ")[1].startswith("events"))
    return {
        "by_verb_resource": dict(sorted(by.items())),
        "by_verb_resource_code": dict(sorted(codes.items())),
        "total": len(reqs),
        "excluding_events": len(reqs) - events,
        "pod_writes": len(pods),
        "pod_creates": sum(r.verb == "create" for r in pods),
        "pod_deletes": sum(r.verb == "delete" for r in pods),
        "created": sorted(r.name for r in pods if r.verb == "create")[:5],
        "pod_deletes_by_client": pod_deleters(deletes, since, until),
    }


def pod_deleters(lines: list[str], since: float, until: float) -> dict[str, int]:
    """Every client's pod deletes between ``since`` and ``until``, by user (and the first
    word of its user agent): who deleted what the operator had made."""
    by: dict[str, int] = {}
    for event in completed_events(lines, ""):
        t = epoch(event.get("requestReceivedTimestamp"))
        ref = event.get("objectRef") or {}
        if t is None or not since <= t <= until or event.get("verb") != "delete":
            continue
        if ref.get("resource") != "pods":
            continue
        user = (event.get("user") or {}).get("username", "?")
        agent = str(event.get("userAgent", "?")).split(" ", 1)[0]
        key = f"{user} ({agent})"
        by[key] = by.get(key, 0) + 1
    return dict(sorted(by.items(), key=lambda kv: -kv[1]))


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) each process has used so far; a process gone is left
    out."""
    out: dict[str, float] = {}
    for name, pid in pids.items():
        try:
            out[name] = sample(pid).cpu_seconds
        except (OSError, ValueError, IndexError):
            continue
    return out


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process used between two :func:`cpu_of`, rounded to 0.1 s."""
    return {n: round(after[n] - before[n], 1) for n in before if n in after}


async def run(cluster: LocalCluster, pods: int, mode: str, log_dir: Path, wait_s: float) -> JSON:
    """One job of ``pods`` pods on ``cluster`` (``nodes_for(pods)`` nodes), one node
    lost, restarted ``mode`` (``in_place`` or ``recreation``)."""
    in_place = mode == "in_place"
    create_namespace(cluster, NAMESPACE)
    client = await bench_client(cluster.kubeconfig, 32)
    stand_in: StandInProcess | None = None
    op = None
    seen, job = Pods(), Job()
    try:
        nodes = sorted(
            (n["metadata"]["name"] for n in (await client.list_all(NODES))["items"]),
            key=lambda n: int(n.rsplit("-", 1)[1]),
        )
        await _shape_nodes(client, nodes)
        if in_place:
            stand_in = StandInProcess(cluster.kubeconfig, NAMESPACE, log_dir / "hybrid-agents")
            await asyncio.to_thread(stand_in.start)
        op = await asyncio.to_thread(
            start_operator, cluster.kubeconfig, log_dir / f"operator-hybrid-{mode}.log",
            ("--namespace", NAMESPACE, "--agent-image=msop:kwok"),
        )  # fmt: skip
        assert op.proc is not None
        async with asyncio.TaskGroup() as tg:
            watchers = [
                tg.create_task(watch_forever(client, PODS, NAMESPACE, seen)),
                tg.create_task(watch_forever(client, MSJOBS, NAMESPACE, job)),
            ]
            await asyncio.sleep(1)
            t0 = time.monotonic()
            await client.create(MSJOBS, msjob(pods - 1, in_place=in_place), NAMESPACE)
            await wait_until("every pod Running", lambda: len(seen.running()) >= pods, wait_s)

            def adopted() -> bool:
                return stand_in is None or len(
                    {e["pod"] for e in stand_in.events("adopted")}
                ) >= pods  # fmt: skip

            await wait_until("every agent up", adopted, wait_s)
            await wait_until("the job Running", job.running, wait_s)
            up_s = time.monotonic() - t0
            before = {n: p["metadata"]["uid"] for n, p in seen.running().items()}
            lone = [n for n, p in seen.running().items() if p["spec"].get("nodeName") == nodes[0]]
            assert len(lone) == 1, f"node {nodes[0]} holds {lone}"
            lost = lone[0]
            pids = {"operator": op.proc.pid}
            if stand_in is not None and stand_in.proc is not None:
                pids["stand-in"] = stand_in.proc.pid
            for name in COMPONENTS:
                with contextlib.suppress(OSError, ValueError):
                    pids[name] = cluster.component_pid(name)
            cpu0 = cpu_of(pids)
            # The node is lost: gone from the API, its pod force-deleted.
            t_fail = time.time()
            await client.delete(NODES, nodes[0])
            await client.delete(PODS, lost, NAMESPACE, grace_period_seconds=0)

            def released() -> bool:
                if stand_in is not None:
                    started = {e["pod"] for e in stand_in.events("started") if e["t"] >= t_fail}
                    return len(started) >= pods
                now = seen.running()
                return len(now) >= pods and all(before.get(n) != p["metadata"]["uid"]
                                                for n, p in now.items())  # fmt: skip

            t_released: float | None = None
            t_job: float | None = None
            try:  # a restart that does not complete is a result too: its writes so far
                await wait_until("every pod released", released, wait_s)
                t_released = time.time()
                if stand_in is not None:  # its own record of the last release
                    t_released = max(e["t"] for e in stand_in.events("started") if e["t"] >= t_fail)
                await wait_until("the job restarted", job.restarted, wait_s)
                t_job = time.time()
            except TimeoutError as e:
                print(f"hybrid {mode}: {e}", flush=True)
            t_end = t_job or time.time()
            cpu = cpu_used(cpu0, cpu_of(pids))
            await asyncio.sleep(SETTLE_S)
            now = {n: p["metadata"]["uid"] for n, p in seen.running().items()}
            for w in watchers:
                w.cancel()
    finally:
        await client.close()
        if op is not None:
            op.stop(timeout=60)
        if stand_in is not None:
            stand_in.stop()
    restarted = len(stand_in.events("restart")) if stand_in is not None else 0
    return {
        "mode": mode,
        "pods": pods,
        "nodes": len(nodes),
        "lost_pod": lost,
        "job_running_s": up_s,
        "completed": t_job is not None,
        "failure_to_all_released_s": None if t_released is None else t_released - t_fail,
        "failure_to_job_restarted_s": None if t_job is None else t_job - t_fail,
        "pods_running": len(now),
        "operator_cpu_s": cpu.get("operator", 0.0),
        "cpu_s": cpu,
        "window_s": t_end - t_fail,
        "pods_new_uid": sum(before.get(n) != u for n, u in now.items()),
        "pods_restarted_in_place": restarted,
        "writes": writes(
            cluster.audit_log,
            t_fail,
            t_end + SETTLE_S,
            log_dir / f"audit-operator-hybrid-{mode}.jsonl",
        ),
    }


def summary(result: JSON) -> JSON:
    """The figures the report and the goals read: the in-place run against recreation."""
    ip, rc = result.get("in_place") or {}, result.get("recreation") or {}
    out: JSON = {}
    if ip:
        out.update(
            in_place_pod_writes=ip["writes"]["pod_writes"],
            in_place_released_s=ip["failure_to_all_released_s"],
            in_place_writes=ip["writes"]["excluding_events"],
        )
    if rc:
        out.update(
            recreation_pod_writes=rc["writes"]["pod_writes"],
            recreation_released_s=rc["failure_to_all_released_s"],
        )
    return out


def _cpu_shares(r: JSON) -> str:
    """`` (CPU over the 12.0 s: stand-in 9.1 s, kube-apiserver 5.0 s, ...)``: every process
    measured, busiest first; "" for a result without them."""
    cpu, window = r.get("cpu_s") or {}, r.get("window_s")
    if not cpu or not window:
        return ""
    shown = ", ".join(f"{n} {s:.1f} s" for n, s in sorted(cpu.items(), key=lambda kv: -kv[1]))
    return f" (CPU over the {window:.1f} s: {shown})"


def report_line(result: JSON) -> str:
    """One line: the two restarts side by side."""
    parts = []
    for mode in MODES:
        r = result.get(mode)
        if not r:
            continue
        w = r["writes"]
        if r.get("completed", True):
            took = (
                f"released in {r['failure_to_all_released_s']:.1f} s "
                f"(job restarted {r['failure_to_job_restarted_s']:.1f} s)"
            )
        else:
            took = f"NOT restarted within the wait ({r.get('pods_running')} pods Running)"
        parts.append(
            f"{mode.replace('_', ' ')}: {took}, "
            f"{w['pod_creates']} pod creates + {w['pod_deletes']} deletes "
            f"({w['pod_writes']} pod writes, {w['excluding_events']} writes excl. Events), "
            f"{r['pods_new_uid']} pods new, {r['pods_restarted_in_place']} restarted in place, "
            f"operator CPU {r['operator_cpu_s']:.1f} s" + _cpu_shares(r)
        )
    pods = next((r["pods"] for r in result.values() if isinstance(r, dict) and "pods" in r), 0)
    return f"hybrid, {pods} pods, one node lost: " + "; ".join(parts)
