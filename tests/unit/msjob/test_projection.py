"""The cached projection of pods and Services (msop.msjob.projection) keeps
everything the planner reads: plans from projected objects equal plans from full ones."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from msop.controller.handler import only_version_changed
from msop.controller.reconcile import Request
from msop.msjob.plan import Plan
from msop.msjob.projection import pod_projection, service_projection
from msop.msjob.setup import CHANGED_OWNER
from tests.support.builders import T0, finished, job, pod, run, running_status, service

JSON = dict[str, Any]


def as_served(p: JSON) -> JSON:
    """``p`` with the bulk the API server adds and the planner never reads."""
    out = copy.deepcopy(p)
    out["metadata"]["managedFields"] = [{"manager": "msop", "fieldsV1": {"f:spec": {}}}]
    out["metadata"]["resourceVersion"] = "42"
    spec = out.setdefault("spec", {})
    spec.update(
        nodeName="kwok-node-0",
        serviceAccountName="default",
        tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                      "effect": "NoExecute", "tolerationSeconds": 300}],
        volumes=[{"name": "kube-api-access-x", "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
    )  # fmt: skip
    status = out.setdefault("status", {})
    status.update(
        podIP="10.0.0.9",
        hostIP="10.1.0.1",
        qosClass="BestEffort",
        conditions=[{"type": "Ready", "status": "True", "lastTransitionTime": T0}],
    )
    for cs in status.get("containerStatuses") or []:
        cs.update(image="ms:1", imageID="", ready=True, started=True, containerID="kwok://x")
    return out


def summary(p: Plan) -> JSON:
    def names(objs: list[JSON]) -> list[str]:
        return [o["metadata"]["name"] for o in objs]

    return {
        "status": p.status,
        "status_first": p.status_first,
        "create_services": p.create_services,
        "create_pods": p.create_pods,
        "delete_pods": names(p.delete_pods),
        "force_delete_pods": names(p.force_delete_pods),
        "delete_services": names(p.delete_services),
        "delete_job": p.delete_job,
        "events": p.events,
        "requeue_after": p.requeue_after,
        "transitions": p.transitions,
    }


THREE = {"Scheduler": (1, "Never"), "PS": (1, "Never"), "Worker": (2, "Never")}
CASES = {
    "pending": (job(THREE), [pod("Scheduler", 0, "Pending")]),
    "running": (
        job(THREE),
        [pod("Scheduler", 0), pod("PS", 0), pod("Worker", 0), pod("Worker", 1)],
    ),
    "worker 0 succeeded": (
        job(THREE, status=running_status()),
        [
            pod("Scheduler", 0),
            pod("PS", 0),
            pod("Worker", 0, "Succeeded", exit_code=0),
            pod("Worker", 1),
        ],
    ),
    "exit code restart": (
        job({"Scheduler": (1, "Never"), "Worker": (2, "ExitCode")}, status=running_status()),
        [pod("Scheduler", 0), pod("Worker", 0, "Failed", exit_code=137), pod("Worker", 1)],
    ),
    "kubelet restarts over the backoff limit": (
        job(
            {"Scheduler": (1, "Never"), "Worker": (2, "OnFailure")},
            run_policy={"backoffLimit": 1},
            status=running_status(),
        ),
        [pod("Scheduler", 0), pod("Worker", 0, restarts=3), pod("Worker", 1)],
    ),
    "terminating": (
        job(THREE),
        [pod("Scheduler", 0), pod("Worker", 0, deleting="2025-01-01T00:00:00Z")],
    ),
    "finished, clean up running": (
        job(THREE, run_policy={"cleanPodPolicy": "Running"}, status=finished()),
        [pod("Scheduler", 0), pod("PS", 0, "Succeeded", exit_code=0), pod("Worker", 0)],
    ),
    "out of range": (job(THREE), [pod("Scheduler", 0), pod("Worker", 5)]),
    "restartScope Job: a killed worker": (
        job({"Scheduler": (1, "Never"), "Worker": (2, "ExitCode")}, status=running_status()),
        [
            pod("Scheduler", 0, size=(2, 0)),
            pod("Worker", 0, "Failed", exit_code=137, size=(2, 0)),
            pod("Worker", 1, "Failed", exit_code=1, size=(2, 0)),
        ],
    ),
    "restartScope Job: scaled while running": (
        job({"Scheduler": (1, "Never"), "Worker": (3, "Never")}, status=running_status()),
        [
            pod("Scheduler", 0, size=(2, 0)),
            pod("Worker", 0, size=(2, 0)),
            pod("Worker", 1, size=(2, 0)),
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_plans_from_projected_objects_equal_plans_from_full_ones(case: str) -> None:
    j, pods = CASES[case]
    full_pods = [as_served(p) for p in pods]
    full_services = [as_served(service())]
    full = run(j, full_pods, full_services)
    projected = run(
        j,
        [pod_projection(copy.deepcopy(p)) for p in full_pods],
        [service_projection(copy.deepcopy(s)) for s in full_services],
    )
    assert summary(projected) == summary(full)


def test_projection_drops_the_bulk_and_tolerates_odd_objects() -> None:
    full = as_served(pod("Worker", 0, "Failed", exit_code=3, restarts=2))
    small = pod_projection(copy.deepcopy(full))
    assert "managedFields" not in small["metadata"]
    assert small["spec"] == {"nodeName": "kwok-node-0"}
    assert small["status"]["containerStatuses"] == [
        {"name": "mindspore", "restartCount": 2, "state": {"terminated": {"exitCode": 3}}}
    ]
    assert small["metadata"]["ownerReferences"] == full["metadata"]["ownerReferences"]
    assert len(repr(small)) < len(repr(full)) / 2
    assert pod_projection({"metadata": {"name": "x"}, "status": None}) == {
        "metadata": {"name": "x"},
        "status": {},
    }
    assert service_projection({})["spec"] == {}


def test_only_a_pod_scheduled_that_is_not_true_is_kept() -> None:
    waiting = pod("Worker", 0, "Pending")
    unplaced = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available.", "lastProbeTime": None}  # fmt: skip
    waiting["status"]["conditions"] = [unplaced, {"type": "Ready", "status": "False"}]
    assert pod_projection(waiting)["status"]["conditions"] == [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available."}
    ]  # fmt: skip
    placed = pod("Worker", 0)
    placed["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    assert "conditions" not in pod_projection(placed)["status"]


def test_a_change_the_projection_leaves_out_reconciles_nothing() -> None:
    """The node lifecycle marking a node's pods not ready changes only their Ready
    condition: projected, the update differs in its resourceVersion alone, and the pod
    watch's handler drops it; a change the planner reads passes."""
    served = as_served(pod("Worker", 0))
    not_ready = copy.deepcopy(served)
    not_ready["metadata"]["resourceVersion"] = "43"
    not_ready["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    old, new = pod_projection(served), pod_projection(not_ready)
    assert only_version_changed(old, new)
    queue: list[Request] = []

    class Queue:
        def add(self, item: Request, *, priority: int = 0) -> None:
            queue.append(item)

    CHANGED_OWNER.update(old, new, Queue())
    assert queue == []
    failed = copy.deepcopy(not_ready)
    failed["status"]["phase"] = "Failed"
    CHANGED_OWNER.update(new, pod_projection(failed), Queue())
    assert queue == [Request("ns", "j")]  # the job that controls the pod
