"""Kueue's objects in the kwok tier: a ClusterQueue with its LocalQueue, an MSJob's Workload,
and the wait that a queued job gets no pods (the Kueue and topology-aware tests)."""

from __future__ import annotations

import json
import time
from typing import Any

from testbed import LocalCluster
from tests.e2e.msjobs import condition, get, items, job_pods, wait_for

JSON = dict[str, Any]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def create(cluster: LocalCluster, obj: JSON, within: float = 30) -> None:
    """Apply ``obj``; a refusal (Kueue's webhooks, called by the API server, time out under
    the tier's load now and then) is tried again for ``within`` seconds, then raised with
    what kubectl said."""
    deadline = time.monotonic() + within
    while True:
        proc = cluster.kubectl("apply", "-f", "-", input=json.dumps(obj), check=False)
        if proc.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"kubectl apply of {obj['kind']} failed: {proc.stderr.strip()}")
        time.sleep(1)


def flavor(name: str, node_labels: JSON | None = None, toleration: JSON | None = None) -> JSON:
    """A ResourceFlavor: ``node_labels`` go to the nodeSelector of the pods it admits."""
    spec: JSON = {"nodeLabels": node_labels or {}}
    if toleration:
        spec["tolerations"] = [toleration]
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": name}, "spec": spec}  # fmt: skip


def queues(
    cluster: LocalCluster, ns: str, flavors: dict[str, str], preemption: JSON | None = None
) -> str:
    """A ClusterQueue with ``flavors`` (name -> CPU quota, in order) for CPU and memory,
    and a LocalQueue in ``ns`` pointing at it; returns the LocalQueue's name."""
    cq: JSON = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{ns}"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {"name": name, "resources": [{"name": "cpu", "nominalQuota": cpu},
                                                 {"name": "memory", "nominalQuota": "64Gi"}]}
                    for name, cpu in flavors.items()
                ],
            }],
        },
    }  # fmt: skip
    if preemption:
        cq["spec"]["preemption"] = preemption
    create(cluster, cq)
    create(cluster, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "team", "namespace": ns},
        "spec": {"clusterQueue": f"cq-{ns}"},
    })  # fmt: skip

    def active() -> bool:
        cq_obj = get(cluster, ns, "clusterqueue", f"cq-{ns}") or {}
        return condition(cq_obj, "Active") is not None and bool(
            (condition(cq_obj, "Active") or {}).get("status") == "True"
        )

    wait_for(f"ClusterQueue cq-{ns} active", active)
    return "team"


def workload(cluster: LocalCluster, ns: str, job: str) -> JSON | None:
    # By its group: where Kubernetes' Workload API is served, "workloads" is its kind.
    wls = items(cluster, ns, "workloads.kueue.x-k8s.io", f"training.kubeflow.org/job-name={job}")
    return wls[0] if len(wls) == 1 else None


def stays_without_pods(cluster: LocalCluster, ns: str, job: str, seconds: float = 4) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not job_pods(cluster, ns, job), f"{job} got pods while queued"
        time.sleep(0.5)
