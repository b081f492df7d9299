"""msop installed in the real cluster (`kubectl apply -k`): its namespace, Deployment and
Lease, and waiting until the Deployment is available."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from testbed.realnode import RealCluster

OPERATOR_NAMESPACE = "msop-system"


DEPLOYMENT = "msop-controller-manager"


LEASE = "msop.mindspore.gitee.com"


def wait_available(cluster: RealCluster, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        dep: dict[str, Any] = json.loads(
            cluster.kubectl(
                "get", "deployment", DEPLOYMENT, "-n", OPERATOR_NAMESPACE, "-o", "json"
            ).stdout
        )
        status = dep.get("status", {})
        conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
        if (
            conds.get("Available") == "True"
            and status.get("readyReplicas") == dep["spec"]["replicas"]
        ):
            return dep
        time.sleep(1)
    pods = cluster.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "wide", check=False
    ).stdout
    events = cluster.kubectl("get", "events", "-n", OPERATOR_NAMESPACE, check=False).stdout
    pytest.fail(
        f"Deployment {DEPLOYMENT} not Available within {timeout}s: {status}\n"
        f"{pods}\n{events[-3000:]}",
        pytrace=False,
    )
