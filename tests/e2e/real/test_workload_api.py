"""Gang scheduling with Kubernetes' own Workload API on the real node.

The tier's control plane serves the API (``scheduling.k8s.io/v1alpha2``, its feature gates
on the API server, the scheduler and the controller-manager), and the installed msop runs
with its default ``--gang-scheduler=auto``, which finds it: every job of the tier is placed
as a gang by the real kube-scheduler.

- ``test_a_gang_that_does_not_fit_waits_whole_then_trains``: a real MindSpore job of three
  pods (Scheduler and two Workers) on a node with room for two of them: none is bound and
  ``Queued`` says the scheduler cannot place the gang whole; once room appears all three
  are bound together, the job trains as one MindSpore cluster and Succeeds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.examples import MINDSPORE_JOB as NAME
from testbed.examples import mindspore_example
from testbed.realnode import NodeImages, RealCluster
from tests.e2e.msjobs import bound, get, job_pods, wait_condition, wait_for, wait_queued
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.real.training import apply, worker_records

JSON = dict[str, Any]
HOLDER = "room-holder"


@pytest.fixture
def logs(installed: RealCluster, namespace: str) -> Iterator[JobLogs]:
    with JobLogs(installed, namespace, NAME) as followed:
        yield followed


def millicpu(quantity: str) -> int:
    """A CPU quantity ("2", "1500m", "0.5") in millicores."""
    if quantity.endswith("m"):
        return int(quantity[:-1])
    return int(float(quantity) * 1000)


def pod_request(pod: JSON) -> int:
    """The CPU a pod asks the scheduler for: its containers and sidecars together, or its
    largest plain init container if that is more."""
    spec = pod["spec"]

    def cpu(container: JSON) -> int:
        return millicpu(container.get("resources", {}).get("requests", {}).get("cpu", "0"))

    sidecars = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    inits = [c for c in spec.get("initContainers", []) if c.get("restartPolicy") != "Always"]
    running = sum(cpu(c) for c in (*spec["containers"], *sidecars))
    return max([running, *(cpu(c) for c in inits)])


def free_millicpu(cluster: RealCluster) -> tuple[str, int]:
    """The real node's name and the CPU no live pod on it has asked for."""
    node = json.loads(cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"][0]
    name = node["metadata"]["name"]
    pods = json.loads(
        cluster.kubectl(
            "get", "pods", "-A", "-o", "json", f"--field-selector=spec.nodeName={name}"
        ).stdout
    )["items"]
    asked = sum(
        pod_request(p) for p in pods if p["status"].get("phase") not in ("Succeeded", "Failed")
    )
    return name, millicpu(node["status"]["allocatable"]["cpu"]) - asked


def test_a_gang_that_does_not_fit_waits_whole_then_trains(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    node, free = free_millicpu(cluster)
    each = free // 4
    assert each >= 100, f"the node has {free}m CPU free: too little to test a gang"
    # A pod of the test takes all but two and a half of the job's pods' worth.
    holder = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": HOLDER},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "pause", "image": images.pause.ref,
                            "resources": {"requests": {"cpu": f"{free - (5 * each) // 2}m"}}}],
        },
    }  # fmt: skip
    apply(cluster, namespace, holder)
    wait_for(f"{HOLDER} running",
             lambda: ((get(cluster, namespace, "pod", HOLDER) or {}).get("status") or {})
             .get("phase") == "Running", timeout=60)  # fmt: skip

    config_map, job = mindspore_example(cluster, images.mindspore.ref, checkpoints, STEP_DELAY="0")
    for spec in job["spec"]["msReplicaSpecs"].values():
        for container in spec["template"]["spec"]["containers"]:
            container.setdefault("resources", {}).setdefault("requests", {})["cpu"] = f"{each}m"
    apply(cluster, namespace, config_map, job)

    # Room for two of three: the scheduler binds none, and the job says why.
    wait = wait_queued(cluster, namespace, NAME, "Unschedulable", timeout=120)
    assert "gang of 3 pods" in wait["message"], wait
    pods = wait_for("three pods", lambda: len(p := job_pods(cluster, namespace, NAME)) == 3 and p)
    for pod in pods.values():
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": NAME}
    workload = get(cluster, namespace, "workloads.scheduling.k8s.io", NAME) or {}
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {
        "gang": {"minCount": 3}
    }, workload
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the scheduler retries: still none of the three
        assert bound(cluster, namespace, NAME) == {}
        time.sleep(1)

    # Room appears: the three are bound together and train as one cluster.
    cluster.kubectl("delete", "pod", HOLDER, "-n", namespace, "--grace-period=0", "--force")
    wait_for("the gang bound whole", lambda: len(bound(cluster, namespace, NAME)) == 3,
             timeout=120)  # fmt: skip
    wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)
    ranks = {
        next(r for r in lines if r["event"] == "fresh")["rank"]
        for lines in worker_records(cluster, namespace, 2).values()
    }
    assert ranks == {0, 1}
