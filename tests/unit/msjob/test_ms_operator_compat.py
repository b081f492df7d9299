"""Switching from ms-operator and back: what msop creates is selected by ms-operator's
selectors, and a Scheduler Service ms-operator made is corrected in place, not replaced.

The facts of ms-operator (mindspore-ai/ms-operator, master e361e2b, its
``pkg/controllers/v1/msjob_controller.go`` on kubeflow/common v0.4.1): it lists a job's
pods and Services by four labels, labels each with eight, and its Scheduler Service
selects all eight and has one port per container port of the ``mindspore`` container.
"""

from __future__ import annotations

from typing import Any

from msop.msjob import desired
from msop.msjob.podstate import service_port
from tests.support.builders import JSON, job, names, pod, run, running_status

#: ms-operator's GenLabels: the selector it lists a job's pods and Services with.
MS_OPERATOR_LIST_SELECTOR = {
    "training.kubeflow.org/operator-name": "msjob-controller",
    "group-name": "mindspore.gitee.com",
    "training.kubeflow.org/job-name": "j",
    "job-name": "j",
}


def ms_operator_labels(rtype: str, index: int) -> dict[str, str]:
    """The eight labels ms-operator puts on a replica's pod and Service; its Service
    selects all of them."""
    return {
        **MS_OPERATOR_LIST_SELECTOR,
        "training.kubeflow.org/replica-type": rtype,
        "replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index),
        "replica-index": str(index),
    }


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def ms_operator_service(selector: dict[str, str] | None = None) -> JSON:
    """The Scheduler Service ms-operator creates: no targetPort, one port per container
    port (a user's ``metrics`` port first here), a ClusterIP, the MSJob as controller."""
    labels = ms_operator_labels("scheduler", 0)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "j-scheduler-0", "namespace": "ns", "uid": "svc-legacy",
            "labels": labels,
            "ownerReferences": [{"apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob",
                                 "name": "j", "uid": "u-1", "controller": True,
                                 "blockOwnerDeletion": True}],
        },
        "spec": {
            "type": "ClusterIP", "clusterIP": "10.96.0.9",
            "selector": labels if selector is None else selector,
            "ports": [{"name": "metrics", "port": 9090, "protocol": "TCP"},
                      {"name": "msjob-port", "port": 2222, "protocol": "TCP"}],
        },
    }  # fmt: skip


SCHED_JOB = {"Scheduler": (1, "Never"), "Worker": (2, "Never")}


def test_msops_pods_and_service_carry_every_label_ms_operator_selects_on() -> None:
    j = job(SCHED_JOB)
    for rtype, index in (("Scheduler", 0), ("Worker", 1)):
        p = desired.pod(j, rtype, index, sched_host="10.0.0.1")
        assert matches(ms_operator_labels(rtype.lower(), index), p["metadata"]["labels"])
    svc = desired.scheduler_service(j)
    assert matches(MS_OPERATOR_LIST_SELECTOR, svc["metadata"]["labels"])
    # ms-operator's Service selector selects msop's Scheduler pod (a rollback keeps it).
    sched = desired.pod(j, "Scheduler", 0, sched_host=None)
    assert matches(ms_operator_service()["spec"]["selector"], sched["metadata"]["labels"])


def test_msops_service_selector_selects_pods_of_every_msop_version_and_of_ms_operator() -> None:
    selector = desired.scheduler_service(job(SCHED_JOB))["spec"]["selector"]
    assert "group-name" not in selector and "job-name" not in selector  # older msop pods lack them
    assert matches(selector, ms_operator_labels("scheduler", 0))


def test_ms_operators_service_is_kept_with_its_cluster_ip() -> None:
    # Its selector selects msop's pods, and its msjob-port is the job's: nothing to do.
    pods = [pod("Scheduler", 0), pod("Worker", 0), pod("Worker", 1)]
    p = run(job(SCHED_JOB, status=running_status()), pods, [ms_operator_service()])
    assert not p.delete_services and not p.create_services and not p.patch_services
    assert service_port(ms_operator_service()) == 2222  # not the first port


def test_a_service_whose_selector_misses_msops_pods_is_corrected_in_place() -> None:
    # A selector with a label msop's pods do not carry (an older ms-operator layout).
    foreign = {**ms_operator_labels("scheduler", 0), "mindspore-job-role": "scheduler"}
    svc = ms_operator_service(selector=foreign)
    p = run(job(SCHED_JOB, status=running_status()),
            [pod("Scheduler", 0), pod("Worker", 0), pod("Worker", 1)], [svc])  # fmt: skip
    assert not p.delete_services and not p.create_services
    assert len(p.patch_services) == 1
    target, patch = p.patch_services[0]
    assert target is svc
    want = patch["spec"]["selector"]
    assert want["mindspore-job-role"] is None  # removed by the merge patch
    kept = {k: v for k, v in want.items() if v is not None}
    assert kept == desired.scheduler_service(job(SCHED_JOB))["spec"]["selector"]
    # The corrected selector selects msop's new pods and ms-operator's running ones alike.
    sched = desired.pod(job(SCHED_JOB), "Scheduler", 0, sched_host=None)
    assert matches(kept, sched["metadata"]["labels"])
    assert matches(kept, ms_operator_labels("scheduler", 0))


def test_a_service_without_a_selector_gets_msops() -> None:
    svc = ms_operator_service(selector={})
    pods = [pod("Scheduler", 0), pod("Worker", 0), pod("Worker", 1)]
    p = run(job(SCHED_JOB, status=running_status()), pods, [svc])
    assert [patch for _, patch in p.patch_services] == [
        {"spec": {"selector": desired.scheduler_service(job(SCHED_JOB))["spec"]["selector"]}}
    ]


def test_a_restart_keeps_the_corrected_service() -> None:
    # A member deleted from a running taken-over job: every pod is recreated; the Service
    # (and so MS_SCHED_HOST) stays.
    svc = ms_operator_service()
    p = run(job({"Scheduler": (1, "Never"), "Worker": (2, "Never")}, status=running_status()),
            [pod("Scheduler", 0), pod("Worker", 0)], [svc])  # fmt: skip
    assert names(p.delete_pods) == {"j-scheduler-0", "j-worker-0"}
    assert not p.delete_services and not p.patch_services
