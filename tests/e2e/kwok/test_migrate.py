"""Switching from the Go ms-operator under running jobs, as docs/tasks/migrate.md says.

ms-operator's Go module is not served by the module proxy, so it cannot run here: the test
lays out what it leaves behind, from the facts of its source (mindspore-ai/ms-operator,
master e361e2b): its CRD (``data/ms-operator-crd.yaml``, applied as its manifests would),
a running job's pods and Scheduler Service with its names, eight labels, selector, ports,
owner references and ``MS_*`` environment, the job status as it writes it, a job it
finished, and its leader-election Lease, renewed while "it runs". Then the guide's steps:
ms-operator stopped (the Lease no longer renewed), msop's CRD applied over its own, msop
started.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from testbed import KubeletStandIn, LocalCluster
from testbed.paths import REPO
from tests.e2e.msjobs import (
    apply,
    condition,
    get,
    items,
    job_pods,
    wait_condition,
    wait_events,
    wait_for,
)
from tests.e2e.reliability import audit_events

JSON = dict[str, Any]
DATA = Path(__file__).parent / "data"
MSOP_CRD = REPO / "config/crd/bases/mindspore.gitee.com_msjobs.yaml"
LEASE_NS, LEASE = "ms-operator-system", "4725f7c4.gitee.com"
#: ms-operator's GenLabels: how it lists a job's pods and Services.
LIST_LABELS = ("training.kubeflow.org/operator-name", "group-name",
               "training.kubeflow.org/job-name", "job-name")  # fmt: skip


def labels(job: str, rtype: str, index: int) -> dict[str, str]:
    """The eight labels ms-operator puts on a replica's pod and Service."""
    return {
        "training.kubeflow.org/operator-name": "msjob-controller",
        "group-name": "mindspore.gitee.com",
        "training.kubeflow.org/job-name": job, "job-name": job,
        "training.kubeflow.org/replica-type": rtype, "replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index), "replica-index": str(index),
    }  # fmt: skip


def owner(job: JSON) -> list[JSON]:
    return [{"apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob",
             "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}]  # fmt: skip


def msjob(name: str, workers: int) -> JSON:
    replica = {"restartPolicy": "Never", "template": {"spec": {"containers": [
        {"name": "mindspore", "image": "mindspore:e2e",
         "ports": [{"name": "msjob-port", "containerPort": 2222}]}]}}}  # fmt: skip
    return {
        "apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob",
        "metadata": {"name": name},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"},
                 "msReplicaSpecs": {"Scheduler": {"replicas": 1, **replica},
                                    "Worker": {"replicas": workers, **replica}}},
    }  # fmt: skip


def write_status(cluster: LocalCluster, ns: str, name: str, status: JSON) -> None:
    cluster.kubectl("patch", "msjob", name, "-n", ns, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": status}))  # fmt: skip


def ms_operator_status(now: str, active: dict[str, int], done: bool = False) -> JSON:
    conds = [{"type": "Created", "status": "True", "reason": "MSJobCreated",
              "message": "MSJob j is created.", "lastUpdateTime": now, "lastTransitionTime": now},
             {"type": "Running", "status": "False" if done else "True",
              "reason": "MSJobRunning", "message": "MSJob j is running.",
              "lastUpdateTime": now, "lastTransitionTime": now}]  # fmt: skip
    status: JSON = {"conditions": conds, "startTime": now,
                    "replicaStatuses": {t: {"active": n} for t, n in active.items()}}  # fmt: skip
    if done:
        conds.append({"type": "Succeeded", "status": "True", "reason": "MSJobSucceeded",
                      "message": "MSJob j is successfully completed.",
                      "lastUpdateTime": now, "lastTransitionTime": now})  # fmt: skip
        status["completionTime"] = now
        status["replicaStatuses"] = {t: {"succeeded": n} for t, n in active.items()}
    return status


def lay_out_running_job(
    cluster: LocalCluster, kubelet: KubeletStandIn, ns: str, name: str, workers: int
) -> tuple[JSON, JSON]:
    """A job as ms-operator runs it: its Service first, then its pods with the Service's
    ClusterIP as MS_SCHED_HOST, all Running, and its status. Returns (job, Service)."""
    apply(cluster, ns, msjob(name, workers))
    job = get(cluster, ns, "msjob", name) or {}
    svc_labels = labels(name, "scheduler", 0)
    svc: JSON = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": f"{name}-scheduler-0", "labels": svc_labels,
                     "ownerReferences": owner(job)},
        "spec": {"selector": svc_labels, "ports": [{"name": "msjob-port", "port": 2222}]},
    }  # fmt: skip
    apply(cluster, ns, svc)
    svc = get(cluster, ns, "service", f"{name}-scheduler-0") or {}
    ip = svc["spec"]["clusterIP"]
    for rtype, index in [("scheduler", 0), *(("worker", i) for i in range(workers))]:
        host: JSON = {"name": "MS_SCHED_HOST", "value": ip}
        if rtype == "scheduler":
            host = {"name": "MS_SCHED_HOST",
                    "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}  # fmt: skip
        role = {"scheduler": "MS_SCHED", "worker": "MS_WORKER"}[rtype]
        node_id = {"name": "MS_NODE_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        env = [host, node_id, {"name": "MS_SCHED_PORT", "value": "2222"},
               {"name": "MS_SERVER_NUM", "value": "0"},
               {"name": "MS_WORKER_NUM", "value": str(workers)},
               {"name": "MS_ROLE", "value": role}]  # fmt: skip
        apply(cluster, ns, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{rtype}-{index}", "labels": labels(name, rtype, index),
                         "ownerReferences": owner(job)},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "mindspore", "image": "mindspore:e2e", "env": env,
                 "ports": [{"name": "msjob-port", "containerPort": 2222}]}]},
        })  # fmt: skip
        kubelet.run(ns, f"{name}-{rtype}-{index}")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_status(cluster, ns, name, ms_operator_status(now, {"Scheduler": 1, "Worker": workers}))
    return job, svc


class RenewedLease:
    """ms-operator's leader-election Lease, renewed every 2 s while it "runs"."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._renew, daemon=True)

    def _write(self) -> None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": LEASE_NS},
            "spec": {"holderIdentity": "ms-operator-controller-manager-7c9d_1f2e",
                     "leaseDurationSeconds": 15, "acquireTime": now, "renewTime": now},
        }))  # fmt: skip

    def _renew(self) -> None:
        while not self.stopped.wait(2):
            self._write()

    def start(self) -> None:
        if self.cluster.kubectl("get", "ns", LEASE_NS, check=False).returncode != 0:
            self.cluster.kubectl("create", "ns", LEASE_NS)
        self._write()
        self.thread.start()

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


@pytest.fixture
def ms_operator_crd(cluster: LocalCluster) -> Iterator[None]:
    """ms-operator's CRD in place of msop's, as its manifests apply it; msop's again
    afterwards whatever happens (the session's other tests need it)."""
    cluster.kubectl("replace", "--save-config", "-f", str(DATA / "ms-operator-crd.yaml"))
    try:
        yield
    finally:
        cluster.kubectl("apply", "-f", str(MSOP_CRD))
        cluster.kubectl("delete", "ns", LEASE_NS, "--wait=false", check=False)


def writes_by_msop(cluster: LocalCluster, ns: str, since: str) -> list[tuple[str, str, str]]:
    """Pod and Service creates and deletes msop made in ``ns`` since ``since``."""
    return [
        (ev["verb"], ev["objectRef"]["resource"], ev["objectRef"].get("name", ""))
        for ev in audit_events(cluster.audit_log)
        if ev.get("stageTimestamp", "") >= since
        and ev.get("verb") in ("create", "delete")
        and (ev.get("objectRef") or {}).get("namespace") == ns
        and (ev.get("objectRef") or {}).get("resource") in ("pods", "services")
        and not (ev.get("objectRef") or {}).get("subresource")
        and str(ev.get("userAgent", "")).startswith("msop/")
    ]


def test_a_takeover_keeps_running_jobs_and_survives_a_restart_and_a_scale(
    cluster: LocalCluster, kubelet: KubeletStandIn, namespace: str, start_operator: Any,
    ms_operator_crd: None,
) -> None:  # fmt: skip
    ns = namespace
    lease = RenewedLease(cluster)
    lease.start()
    try:
        _, svc = lay_out_running_job(cluster, kubelet, ns, "legacy", workers=2)
        before = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, ns, "legacy").items()}
        apply(cluster, ns, msjob("done", 1))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_status(cluster, ns, "done", ms_operator_status(now, {"Worker": 1}, done=True))
        done_before = (get(cluster, ns, "msjob", "done") or {})["status"]

        # The guide: msop's CRD over ms-operator's, then msop, while ms-operator still runs.
        cluster.kubectl("apply", "-f", str(MSOP_CRD))
        since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        op = start_operator(wait_ready=False)
        wait_for(
            "msop to say it waits for ms-operator's Lease",
            lambda: "waiting for the legacy operator's Lease to lapse" in op.log_path.read_text(),
        )
        time.sleep(3)
        assert not op.ready()  # /readyz: legacy-operator-lease
        assert "workers" not in ((get(cluster, ns, "msjob", "legacy") or {}).get("status") or {})
    finally:
        lease.stop()  # ms-operator stopped: its Lease lapses 15 s after its last renewal

    op.wait_ready(timeout=60)
    wait_for(
        "msop's status of the taken-over job",
        lambda: (
            ((get(cluster, ns, "msjob", "legacy") or {}).get("status") or {}).get("workers")
            == "2/2"
        ),
    )
    legacy = get(cluster, ns, "msjob", "legacy") or {}
    assert (condition(legacy, "Running") or {}).get("status") == "True"
    pods = job_pods(cluster, ns, "legacy")
    assert {n: p["metadata"]["uid"] for n, p in pods.items()} == before  # adopted as they are
    kept = get(cluster, ns, "service", "legacy-scheduler-0") or {}
    assert kept["metadata"]["uid"] == svc["metadata"]["uid"]
    assert writes_by_msop(cluster, ns, since) == []
    done_now = (get(cluster, ns, "msjob", "done") or {})["status"]
    for key in ("conditions", "replicaStatuses", "startTime", "completionTime"):
        assert done_now[key] == done_before[key], key  # left alone (msop notes only its pass)
    assert not job_pods(cluster, ns, "done")

    # A member lost after the takeover: the whole job restarts behind the same Service.
    cluster.kubectl("delete", "pod", "legacy-worker-1", "-n", ns, "--wait=false")
    wait_events(cluster, ns, "legacy", "MSJobMemberLost")

    def restarted() -> dict[str, JSON] | None:
        now = job_pods(cluster, ns, "legacy")
        fresh = {n: p for n, p in now.items() if p["metadata"]["uid"] != before.get(n)}
        return fresh if len(fresh) == 3 else None

    fresh = wait_for("every pod recreated", restarted, timeout=90)
    for name in fresh:
        kubelet.run(ns, name)
    svc_now = get(cluster, ns, "service", "legacy-scheduler-0") or {}
    assert svc_now["metadata"]["uid"] == svc["metadata"]["uid"]
    ip = svc["spec"]["clusterIP"]
    assert svc_now["spec"]["clusterIP"] == ip
    env = {e["name"]: e.get("value") for e in
           fresh["legacy-worker-0"]["spec"]["containers"][0]["env"]}  # fmt: skip
    assert env["MS_SCHED_HOST"] == ip
    # What the EndpointSlice controller selects: the new Scheduler, and only it (kwok's pod
    # IPs are loopback addresses, which an EndpointSlice refuses, so the slice stays empty
    # here; the real tier sees MindSpore connect through it).
    selector = ",".join(f"{k}={v}" for k, v in svc_now["spec"]["selector"].items())
    behind = items(cluster, ns, "pods", selector)
    assert [p["metadata"]["uid"] for p in behind] == [
        fresh["legacy-scheduler-0"]["metadata"]["uid"]
    ]
    # What msop created carries what ms-operator lists and selects by (a rollback keeps it).
    for pod in fresh.values():
        assert all(k in pod["metadata"]["labels"] for k in LIST_LABELS), pod["metadata"]["labels"]
    sched_labels = kubelet.get(ns, "legacy-scheduler-0")["metadata"]["labels"]
    assert all(sched_labels.get(k) == v for k, v in labels("legacy", "scheduler", 0).items())

    # A scale of the taken-over job: every pod made anew for 3 Workers, the same Service.
    wait_condition(cluster, ns, "legacy", "Running")
    second = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, ns, "legacy").items()}
    cluster.kubectl("scale", "msjob", "legacy", "-n", ns, "--replicas=3")

    def resized() -> dict[str, JSON] | None:
        now = job_pods(cluster, ns, "legacy")
        fresh = {n: p for n, p in now.items() if p["metadata"]["uid"] != second.get(n)}
        return fresh if len(fresh) == 4 else None

    for name, pod in wait_for("4 pods for 3 Workers", resized, timeout=90).items():
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["MS_WORKER_NUM"] == "3"
        if name != "legacy-scheduler-0":
            assert env["MS_SCHED_HOST"] == ip
        kubelet.run(ns, name)
    svc_now = get(cluster, ns, "service", "legacy-scheduler-0") or {}
    assert (svc_now["metadata"]["uid"], svc_now["spec"]["clusterIP"]) == (
        svc["metadata"]["uid"], ip,
    )  # fmt: skip

    # The job goes on to its end by msop's rules; a new job runs.
    wait_condition(cluster, ns, "legacy", "Running")
    kubelet.succeed(ns, "legacy-worker-0")
    wait_condition(cluster, ns, "legacy", "Succeeded")
    apply(cluster, ns, msjob("after", 1))
    wait_for("the new job's pods", lambda: len(job_pods(cluster, ns, "after")) == 2)
