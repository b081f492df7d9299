"""Quotas and queues on a real Kueue (the manager built from the Go module, hack/kueue):
MSJobs admitted, queued, placed on their flavors, preempted and resumed.

Each test gets a pool of kwok nodes of its own (tainted, so that only its jobs land
there), its own ResourceFlavors, ClusterQueue and LocalQueue, and an operator run with
``--enable-kueue``. A job is a Scheduler (1 CPU) and two Workers (1 CPU each): 3 CPUs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testbed import KubeletStandIn, LocalCluster
from testbed.kueue import Kueue, build
from testbed.paths import REPO
from tests.e2e.kueues import (
    QUEUE_LABEL,
    create,
    flavor,
    queues,
    stays_without_pods,
    workload,
)
from tests.e2e.msjobs import (
    apply,
    bound,
    condition,
    event_count,
    finish,
    get,
    items,
    job_pods,
    queued,
    state_column,
    wait_bound,
    wait_condition,
    wait_for,
    wait_queued,
)
from tests.e2e.sessions import POOL_LABEL, Pool, run_addon

JSON = dict[str, Any]
PODS_READY_TIMEOUT = "20s"


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster) -> Iterator[Kueue]:
    # The rule that refuses a queue change while admitted (config/admission).
    cluster.kubectl("apply", "-k", str(REPO / "config/admission"))
    # waitForPodsReady on, as production clusters run it: a Workload whose pods do not all
    # run within PODS_READY_TIMEOUT is evicted, so msop must report PodsReady.
    yield from run_addon(
        "Kueue", build,
        lambda bin_dir, logs: Kueue(cluster, bin_dir, logs, pods_ready_timeout=PODS_READY_TIMEOUT),
    )  # fmt: skip


@pytest.fixture
def kueue_objects(cluster: LocalCluster, namespace: str) -> Iterator[None]:
    """Removes the test's cluster-scoped Kueue objects afterwards."""
    yield
    cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=true", check=False)
    cluster.kubectl("delete", "clusterqueue", f"cq-{namespace}", "--wait=false", check=False)
    cluster.kubectl("delete", "resourceflavors", "-l", f"{POOL_LABEL}={namespace}",
                    "--wait=false", check=False)  # fmt: skip
    cluster.kubectl("delete", "workloadpriorityclasses", "-l", f"{POOL_LABEL}={namespace}",
                    check=False)  # fmt: skip


def queued_job(name: str, ns: str, queue: str, *, pool_value: str | None = None,
               priority: str | None = None) -> JSON:  # fmt: skip
    """A Scheduler and two Workers of 1 CPU each, in ``queue``; ``pool_value``: the pods
    select the pool's nodes themselves (without it, the flavor places them)."""
    tmpl: JSON = {
        "containers": [{"name": "mindspore", "image": "mindspore:e2e",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    }  # fmt: skip
    if pool_value is not None:
        tmpl["nodeSelector"] = {POOL_LABEL: pool_value}
        tmpl["tolerations"] = [{"key": POOL_LABEL, "operator": "Equal", "value": pool_value}]
    labels = {QUEUE_LABEL: queue}
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    replica = {"restartPolicy": "Never", "template": {"spec": tmpl}}
    return {
        "apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": 0},
            "msReplicaSpecs": {"Scheduler": {"replicas": 1, **replica},
                               "Worker": {"replicas": 2, **replica}},
        },
    }  # fmt: skip


def wl_true(wl: JSON | None, type_: str) -> bool:
    return (condition(wl, type_) or {}).get("status") == "True"


def test_quota_for_one_job_queues_the_second_until_the_first_ends(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str,
    kubelet: KubeletStandIn, pool: Pool, kueue_objects: None,
) -> None:  # fmt: skip
    pool(nodes=2, devices=0)
    create(cluster, flavor(f"default-{namespace}") | {"metadata": {
        "name": f"default-{namespace}", "labels": {POOL_LABEL: namespace}}})  # fmt: skip
    queue = queues(cluster, namespace, {f"default-{namespace}": "3"})
    start_operator("--enable-kueue")
    apply(cluster, namespace, queued_job("first", namespace, queue, pool_value=namespace))
    wait_bound(cluster, namespace, "first", 3)
    wait_condition(cluster, namespace, "first", "Running")
    wl = workload(cluster, namespace, "first") or {}
    assert wl["metadata"]["name"].startswith("msjob-first-")
    assert wl["metadata"]["ownerReferences"][0]["kind"] == "MSJob"
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("scheduler", 1), ("worker", 2)]  # fmt: skip
    assert wl_true(wl, "Admitted")
    ready = wait_for(
        "PodsReady on the Workload",
        lambda: (c := condition(workload(cluster, namespace, "first"), "PodsReady"))
        and c["status"] == "True" and c,
    )  # fmt: skip
    assert ready["reason"] == "Started"
    q = queued(cluster, namespace, "first") or {}
    assert (q.get("status"), q.get("reason")) == ("False", "WorkloadAdmitted")

    refused = cluster.kubectl("label", "msjob", "first", "-n", namespace,
                              f"{QUEUE_LABEL}=elsewhere", "--overwrite", check=False)  # fmt: skip
    assert refused.returncode != 0
    assert "metadata.labels[kueue.x-k8s.io/queue-name]: cannot change" in refused.stderr
    assert "is forbidden: ValidatingAdmissionPolicy" in refused.stderr, refused.stderr
    assert ": :" not in refused.stderr  # no empty field path before the message

    apply(cluster, namespace, queued_job("second", namespace, queue, pool_value=namespace))
    q = wait_queued(cluster, namespace, "second", "WorkloadPending")
    assert "'team'" in q["message"]
    wait_for(
        "Kueue's verdict in the condition",
        lambda: "quota" in str((queued(cluster, namespace, "second") or {}).get("message")),
    )
    stays_without_pods(cluster, namespace, "second")
    assert state_column(cluster, namespace, "second") == "Queued"
    second = get(cluster, namespace, "msjob", "second") or {}
    assert not second["spec"]["runPolicy"].get("suspend")  # the user's spec is not rewritten
    assert "startTime" not in second.get("status", {})
    assert event_count(cluster, namespace, "second", "WorkloadPending") == 1

    finish(kubelet, cluster, namespace, "first", 2)
    wait_for("the first Workload finished and released",
             lambda: (w := workload(cluster, namespace, "first")) is not None
             and wl_true(w, "Finished") and not w["metadata"].get("finalizers"))  # fmt: skip
    wait_bound(cluster, namespace, "second", 3)
    wait_condition(cluster, namespace, "second", "Running")
    assert state_column(cluster, namespace, "second") == "Running"


def test_the_pods_of_an_admitted_job_land_on_the_assigned_flavors_nodes(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    kueue_objects: None,
) -> None:  # fmt: skip
    """Two node pools, a flavor each; the first flavor has room for one pod only, so the
    Scheduler gets it and the Workers the second."""
    small, large = f"small-{namespace}", f"large-{namespace}"
    nodes = {
        small: pool(nodes=1, devices=0, labels={"msop-e2e/flavor": small}),
        large: pool(nodes=2, devices=0, labels={"msop-e2e/flavor": large}),
    }
    toleration = {"key": POOL_LABEL, "operator": "Equal", "value": namespace}
    for name in (small, large):
        f = flavor(name, {"msop-e2e/flavor": name}, toleration)
        f["metadata"]["labels"] = {POOL_LABEL: namespace}
        create(cluster, f)
    queue = queues(cluster, namespace, {small: "1", large: "8"})
    start_operator("--enable-kueue")
    apply(cluster, namespace, queued_job("placed", namespace, queue))
    placed = wait_bound(cluster, namespace, "placed", 3)
    wl = workload(cluster, namespace, "placed") or {}
    assigned = {
        a["name"]: a["flavors"]["cpu"] for a in wl["status"]["admission"]["podSetAssignments"]
    }
    assert assigned == {"scheduler": small, "worker": large}
    for pod_name, node in placed.items():
        pod_set = "scheduler" if "-scheduler-" in pod_name else "worker"
        assert node in nodes[assigned[pod_set]], (pod_name, node, nodes)
        pod = job_pods(cluster, namespace, "placed")[pod_name]
        assert pod["spec"]["nodeSelector"] == {"msop-e2e/flavor": assigned[pod_set]}
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == pod_set
    job = get(cluster, namespace, "msjob", "placed") or {}
    for spec in job["spec"]["msReplicaSpecs"].values():
        assert "nodeSelector" not in spec["template"]["spec"]  # the user's spec untouched


def test_a_higher_priority_job_preempts_a_running_one_which_later_completes(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str,
    kubelet: KubeletStandIn, pool: Pool, kueue_objects: None,
) -> None:  # fmt: skip
    pool(nodes=2, devices=0)
    name = f"default-{namespace}"
    create(cluster, flavor(name) | {"metadata": {"name": name, "labels": {POOL_LABEL: namespace}}})
    for level, value in (("low", 100), ("high", 1000)):
        create(cluster, {
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"{namespace}-{level}", "labels": {POOL_LABEL: namespace}},
            "value": value,
        })  # fmt: skip
    queue = queues(cluster, namespace, {name: "3"},
                   preemption={"withinClusterQueue": "LowerPriority"})  # fmt: skip
    start_operator("--enable-kueue")
    apply(cluster, namespace, queued_job("victim", namespace, queue, pool_value=namespace,
                                         priority=f"{namespace}-low"))  # fmt: skip
    wait_bound(cluster, namespace, "victim", 3)
    wait_condition(cluster, namespace, "victim", "Running")
    first_uids = {p["metadata"]["uid"] for p in job_pods(cluster, namespace, "victim").values()}
    assert (workload(cluster, namespace, "victim") or {})["spec"]["priority"] == 100

    apply(cluster, namespace, queued_job("urgent", namespace, queue, pool_value=namespace,
                                         priority=f"{namespace}-high"))  # fmt: skip
    q = wait_queued(cluster, namespace, "victim", "WorkloadEvicted")
    assert "Preempted" in q["message"]
    wait_for("the victim's pods gone", lambda: not job_pods(cluster, namespace, "victim"))
    wait_bound(cluster, namespace, "urgent", 3)
    wait_condition(cluster, namespace, "urgent", "Running")
    wl = workload(cluster, namespace, "victim") or {}
    assert not wl_true(wl, "QuotaReserved") and wl_true(wl, "Requeued")
    assert not bound(cluster, namespace, "victim")

    finish(kubelet, cluster, namespace, "urgent", 2)
    placed = wait_bound(cluster, namespace, "victim", 3)
    assert not first_uids & {
        p["metadata"]["uid"] for p in job_pods(cluster, namespace, "victim").values()
    }
    assert placed
    wait_condition(cluster, namespace, "victim", "Running")
    finish(kubelet, cluster, namespace, "victim", 2)
    job = get(cluster, namespace, "msjob", "victim") or {}
    assert not condition(job, "Failed")
    assert all(not s.get("restarts") for s in job["status"]["replicaStatuses"].values())
    assert event_count(cluster, namespace, "victim", "WorkloadEvicted") == 1


def test_suspend_releases_the_quota_and_resume_queues_again(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    kueue_objects: None,
) -> None:  # fmt: skip
    pool(nodes=2, devices=0)
    name = f"default-{namespace}"
    create(cluster, flavor(name) | {"metadata": {"name": name, "labels": {POOL_LABEL: namespace}}})
    queue = queues(cluster, namespace, {name: "3"})
    start_operator("--enable-kueue")
    apply(cluster, namespace, queued_job("paused", namespace, queue, pool_value=namespace))
    wait_bound(cluster, namespace, "paused", 3)
    apply(cluster, namespace, queued_job("next", namespace, queue, pool_value=namespace))
    wait_queued(cluster, namespace, "next", "WorkloadPending")

    cluster.kubectl("patch", "msjob", "paused", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":true}}}')  # fmt: skip
    wait_condition(cluster, namespace, "paused", "Suspended")
    wait_bound(cluster, namespace, "next", 3)  # the suspended job's quota went to it
    wl = workload(cluster, namespace, "paused") or {}
    assert wl["spec"]["active"] is False and not wl_true(wl, "QuotaReserved")
    # Suspended, it holds no quota: it may move to another queue (and back).
    for queue_name in ("elsewhere", queue):
        cluster.kubectl("label", "msjob", "paused", "-n", namespace, f"{QUEUE_LABEL}={queue_name}",
                        "--overwrite")  # fmt: skip

    # Resumed while "next" holds the quota: it waits for quota, and says so (Kueue keeps
    # the Workload's Evicted=True/Deactivated after requeuing it as Reactivated).
    evictions = event_count(cluster, namespace, "paused", "WorkloadEvicted")
    cluster.kubectl("patch", "msjob", "paused", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":false}}}')  # fmt: skip
    wait_for(
        "Kueue requeued the reactivated Workload",
        lambda: (
            (condition(workload(cluster, namespace, "paused"), "Requeued") or {}).get("reason")
            == "Reactivated"
        ),
    )
    wait_queued(cluster, namespace, "paused", "WorkloadPending")
    wait_for(
        "Kueue's quota message in Queued",
        lambda: "insufficient" in (queued(cluster, namespace, "paused") or {}).get("message", ""),
    )
    q = queued(cluster, namespace, "paused") or {}
    assert q.get("reason") == "WorkloadPending", q
    assert event_count(cluster, namespace, "paused", "WorkloadEvicted") == evictions
    stays_without_pods(cluster, namespace, "paused", seconds=2)

    cluster.kubectl("delete", "msjob", "next", "-n", namespace)
    wait_bound(cluster, namespace, "paused", 3, timeout=90)
    assert (workload(cluster, namespace, "paused") or {})["spec"]["active"] is True
    cluster.kubectl("delete", "msjob", "paused", "-n", namespace)
    wait_for(
        "the Workload gone with its job",
        lambda: not items(cluster, namespace, "workloads"),
    )


def test_pods_that_never_run_are_evicted_by_kueues_pods_ready_timeout(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    kueue_objects: None,
) -> None:  # fmt: skip
    """The job's pods select a node that does not exist: they stay Pending, the Workload's
    PodsReady stays False (WaitForStart), and Kueue evicts it after its timeout; msop
    deletes the pods and the job waits in the queue again, not failed."""
    pool(nodes=1, devices=0)
    name = f"default-{namespace}"
    create(cluster, flavor(name) | {"metadata": {"name": name, "labels": {POOL_LABEL: namespace}}})
    queue = queues(cluster, namespace, {name: "3"})
    start_operator("--enable-kueue")
    apply(cluster, namespace, queued_job("stuck", namespace, queue, pool_value="nowhere"))
    wait_for("the stuck job's pods", lambda: len(job_pods(cluster, namespace, "stuck")) == 3)
    pending = condition(workload(cluster, namespace, "stuck"), "PodsReady") or {}
    assert (pending.get("status"), pending.get("reason")) == ("False", "WaitForStart")
    q = wait_queued(cluster, namespace, "stuck", "WorkloadEvicted", timeout=90)
    assert "PodsReadyTimeout" in q["message"]
    wait_for("the stuck job's pods deleted", lambda: not job_pods(cluster, namespace, "stuck"))
    job = get(cluster, namespace, "msjob", "stuck") or {}
    assert condition(job, "Failed") is None
