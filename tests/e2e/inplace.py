"""Helpers of the kwok tests of restarts in place: nodes that declare the feature, and
when the API server received an audited request."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime

from testbed import LocalCluster

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
