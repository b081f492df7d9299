"""Helpers of the kwok tests of restarts in place: nodes that declare the feature, when
the API server received an audited request, and the job of those tests (``NAME``) with
its start and its hybrid restart (``recreated_alone``), shared with test_volcano.py."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from testbed import LocalCluster
from testbed.inplace import InPlaceKubelet
from testbed.operator import OperatorProcess
from tests.e2e.msjobs import (
    apply,
    condition,
    events,
    get,
    job_pods,
    must_condition,
    wait_condition,
    wait_for,
)
from tests.e2e.reliability import operator_calls

JSON = dict[str, Any]

FEATURE = "RestartAllContainersOnContainerExits"


def declare(cluster: LocalCluster, features: list[str] | None) -> None:
    """Every node's ``status.declaredFeatures`` (None: none)."""
    nodes = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    for node in nodes:
        cluster.kubectl(
            "patch", "node", node["metadata"]["name"], "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"declaredFeatures": features}}),
        )  # fmt: skip


def when(audit_event: dict[str, object]) -> float:
    """When the API server received the request (seconds since the epoch)."""
    at = str(audit_event["requestReceivedTimestamp"]).replace("Z", "+00:00")
    return datetime.fromisoformat(at).timestamp()


def msjob(
    name: str,
    workers: int,
    container: Mapping[str, object],
    affinity: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """A job restarted in place: 1 Scheduler (``Never``) and ``workers`` Workers
    (``ExitCode``), every pod with ``container`` (and ``affinity``)."""
    pod: dict[str, object] = {"containers": [dict(container)]}
    if affinity is not None:
        pod["affinity"] = dict(affinity)

    def replica(n: int, restart: str) -> dict[str, object]:
        return {"replicas": n, "restartPolicy": restart, "template": {"spec": dict(pod)}}

    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"backoffLimit": 3},
            "msReplicaSpecs": {
                "Scheduler": replica(1, "Never"),
                "Worker": replica(workers, "ExitCode"),
            },
        },
    }


NAME = "inplace"
EVERY_POD = {f"{NAME}-scheduler-0", f"{NAME}-worker-0", f"{NAME}-worker-1"}


RESTRICTED = {
    "runAsNonRoot": True, "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
}  # fmt: skip


#: Every pod of the job on a node of its own (a node lost takes one pod).
ONE_PER_NODE = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
    "labelSelector": {"matchLabels": {"training.kubeflow.org/job-name": NAME}},
    "topologyKey": "kubernetes.io/hostname",
}]}}  # fmt: skip


def job() -> dict[str, object]:
    container = {"name": "mindspore", "image": "ms:kwok", "securityContext": RESTRICTED}
    return msjob(NAME, 2, container, affinity=ONE_PER_NODE)


def start(
    cluster: LocalCluster, namespace: str, kubelet: InPlaceKubelet,
    manifest: dict[str, object] | None = None,
) -> dict[str, str]:  # fmt: skip
    """Apply the job (``manifest``, else :func:`job`), wait until kwok runs its pods,
    adopt them; their UIDs by name."""
    apply(cluster, namespace, manifest if manifest is not None else job())
    pods = wait_for(
        "the job's three pods Running",
        lambda: (p := job_pods(cluster, namespace, NAME)) and len(p) == 3
        and all(x["status"].get("phase") == "Running" and x["status"].get("podIP")
                for x in p.values()) and p,
        timeout=60,
    )  # fmt: skip
    for pod in pods.values():
        kubelet.adopt(pod)
    wait_condition(cluster, namespace, NAME, "Running", timeout=30)
    return {name: pod["metadata"]["uid"] for name, pod in pods.items()}


def uids(cluster: LocalCluster, namespace: str) -> dict[str, str]:
    return {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, NAME).items()}


def restarts(cluster: LocalCluster, namespace: str) -> int:
    stored = get(cluster, namespace, "msjob", NAME) or {}
    counts = stored.get("status", {}).get("replicaStatuses", {})
    return sum(e.get("restarts", 0) for e in counts.values())


def recreated_alone(
    cluster: LocalCluster, namespace: str, kubelet: InPlaceKubelet, op: OperatorProcess,
    before: dict[str, str], lost: str, since: float,
) -> JSON:  # fmt: skip
    """A hybrid restart after ``lost`` was lost (at ``since``): its replacement (a new UID,
    made for generation 1 and held at its barrier) is adopted, the others are restarted in
    place by their agents, the job runs again with one restart counted, and the operator
    created ``lost`` alone. Returns the ``Restarting`` condition seen while it waited."""

    def replaced() -> JSON | None:
        pod = job_pods(cluster, namespace, NAME).get(lost)
        new = pod and pod["metadata"]["uid"] != before[lost] and pod["status"].get("podIP")
        return pod if new else None

    new = wait_for("its replacement", replaced, timeout=60,
                   details=lambda: op.log_tail())  # fmt: skip
    (agent,) = [c for c in new["spec"]["initContainers"] if c["name"] == "msop-agent"]
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env["MSOP_AGENT_GENERATION"] == "1" and env["MSOP_AGENT_HOLD"] == "1"
    # Held until its barrier is seen (the stand-in's status): the restart waits for it.
    job = get(cluster, namespace, "msjob", NAME) or {}
    restarting = must_condition(job, "Restarting")
    assert restarting["status"] == "True", restarting
    assert restarting["reason"] == "MSJobRestartingInPlace", restarting
    kubelet.adopt(new)

    def again() -> bool:
        now = get(cluster, namespace, "msjob", NAME)
        done = condition(now, "Restarting")
        return bool(done and done["status"] == "False"
                    and must_condition(now, "Running")["status"] == "True")  # fmt: skip

    wait_for("the job Running again", again, timeout=60,
             details=lambda: op.log_tail() + kubelet.logs())  # fmt: skip
    # Only the lost pod is new; the others were restarted in place by their agents.
    now = uids(cluster, namespace)
    assert {n for n in now if now[n] != before[n]} == {lost}
    assert sorted(kubelet.restarted_by_agent) == sorted(EVERY_POD - {lost})
    creates = [c["objectRef"].get("name") for c in operator_calls(
        cluster.audit_log, namespace, "create", "pods") if when(c) >= since]  # fmt: skip
    assert creates == [lost]
    assert restarts(cluster, namespace) == 1
    reasons = {(e["type"], e["reason"]) for e in events(cluster, namespace, NAME)}
    assert ("Warning", "MSJobMemberLost") in reasons
    assert ("Warning", "MSJobRestarting") not in reasons  # never a recreation of all
    return restarting
