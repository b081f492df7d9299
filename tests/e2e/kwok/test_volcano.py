"""Gang scheduling on a real Volcano (vc-scheduler and vc-controller-manager built from
the Go module, hack/volcano): MSJobs start whole or not at all.

Each test gets a pool of kwok nodes of its own with ``huawei.com/Ascend910`` devices
(tainted, so that only its jobs land there) and jobs of a Scheduler and Workers that take
one device each. The devices are the scarce resource; CPU and memory are plentiful.
The hybrid restart's test (a pod deleted from a job restarted in place) takes the job of
the tests of restarts in place (tests/e2e/inplace.py) on the shared kwok nodes instead.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import KubeletStandIn, LocalCluster
from testbed.inplace import InPlaceKubelet
from testbed.volcano import VOLCANO_QUEUES, Volcano, build
from tests.e2e.inplace import NAME, recreated_alone, start, when
from tests.e2e.msjobs import (
    apply,
    bound,
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
from tests.e2e.reliability import operator_calls
from tests.e2e.sessions import DEVICE, POOL_LABEL, Pool, run_addon

JSON = dict[str, Any]


@pytest.fixture(scope="module")
def volcano(cluster: LocalCluster) -> Iterator[Volcano]:
    yield from run_addon("Volcano", build, lambda bin_dir, logs: Volcano(cluster, bin_dir, logs))


def gang_job(
    name: str,
    namespace: str,
    workers: int = 3,
    policy: JSON | None = None,
    restart: str = "Never",
    **spec: Any,
) -> JSON:
    placement = {
        "nodeSelector": {POOL_LABEL: namespace},
        "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": namespace}],
    }

    def template(resources: JSON) -> JSON:
        container = {"name": "mindspore", "image": "mindspore:e2e", "resources": resources}
        return {"spec": {"containers": [container], **placement}}

    run_policy: JSON = {"cleanPodPolicy": "All"}
    if policy is not None:
        run_policy["schedulingPolicy"] = policy
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": run_policy,
            "msReplicaSpecs": {
                "Scheduler": {
                    "replicas": 1,
                    "restartPolicy": restart,
                    "template": template({"requests": {"cpu": "100m", "memory": "128Mi"}}),
                },
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": restart,
                    "template": template(
                        {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {DEVICE: "1"}}
                    ),
                },
            },
            **spec,
        },
    }


def stays_unplaced(cluster: LocalCluster, ns: str, job: str, seconds: float = 6) -> None:
    """No pod of ``job`` gets a node for ``seconds`` (several Volcano sessions)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not bound(cluster, ns, job), f"{job} got pods placed: {bound(cluster, ns, job)}"
        time.sleep(0.5)


def test_a_second_job_gets_no_pod_until_the_first_finishes_then_runs_whole(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str,
    kubelet: KubeletStandIn, pool: Pool,
) -> None:  # fmt: skip
    """Room for one job of 4 pods (3 devices of 4): the second gets none, not 3 of 4."""
    pool(nodes=2, devices=2)
    start_operator("--enable-gang-scheduling")
    apply(cluster, namespace, gang_job("first", namespace))
    wait_bound(cluster, namespace, "first", 4)
    pg = get(cluster, namespace, "podgroup", "first")
    assert pg is not None
    assert pg["spec"]["minMember"] == 4
    assert pg["spec"]["minResources"] == {"cpu": "3100m", "memory": "3200Mi", DEVICE: "3"}
    assert pg["metadata"]["ownerReferences"][0]["kind"] == "MSJob"
    for p in job_pods(cluster, namespace, "first").values():
        assert p["spec"]["schedulerName"] == "volcano"
        annotations = p["metadata"]["annotations"]
        assert annotations["scheduling.k8s.io/group-name"] == "first"
        assert annotations["volcano.sh/task-spec"] in ("scheduler", "worker")
    wait_condition(cluster, namespace, "first", "Running")
    assert (queued(cluster, namespace, "first") or {}).get("reason") == "GangScheduled"

    apply(cluster, namespace, gang_job("second", namespace))
    wait_queued(cluster, namespace, "second", "PodGroupPending")
    stays_unplaced(cluster, namespace, "second")
    assert state_column(cluster, namespace, "second") == "Queued"
    assert event_count(cluster, namespace, "second", "PodGroupPending") == 1
    assert (get(cluster, namespace, "podgroup", "second") or {})["status"]["phase"] == "Pending"

    finish(kubelet, cluster, namespace, "first", 3)
    placed = wait_bound(cluster, namespace, "second", 4)
    assert len(set(placed.values())) == 2
    wait_condition(cluster, namespace, "second", "Running")
    q = queued(cluster, namespace, "second")
    assert q is not None and q["status"] == "False" and q["reason"] == "GangScheduled"
    assert state_column(cluster, namespace, "second") == "Running"
    wait_for(
        "the first job's PodGroup deleted",
        lambda: get(cluster, namespace, "podgroup", "first") is None,
    )


def test_without_gang_scheduling_the_second_job_is_placed_in_part(
    cluster: LocalCluster, start_operator: Any, namespace: str, pool: Pool
) -> None:
    """The same two jobs with the default scheduler: the second holds a device it cannot
    use, which is what gang scheduling prevents."""
    pool(nodes=2, devices=2)
    start_operator()
    apply(cluster, namespace, gang_job("first", namespace))
    wait_bound(cluster, namespace, "first", 4)
    apply(cluster, namespace, gang_job("second", namespace))
    wait_for("the second job's 4 pods", lambda: len(job_pods(cluster, namespace, "second")) == 4)
    placed = wait_bound(cluster, namespace, "second", 2)  # its Scheduler and one Worker
    time.sleep(3)
    assert len(bound(cluster, namespace, "second")) == 2
    workers = [n for n in placed if "-worker-" in n]
    assert len(workers) == 1, placed
    # Leave no unschedulable pods behind for the tests after this one.
    cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=false")
    cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force")
    wait_for("the pods gone", lambda: not items(cluster, namespace, "pods"))


def test_min_available_starts_the_job_when_that_many_fit(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str, pool: Pool
) -> None:
    pool(nodes=2, devices=2)
    start_operator("--enable-gang-scheduling")
    apply(cluster, namespace, gang_job("partial", namespace, workers=5, policy={"minAvailable": 5}))
    wait_bound(cluster, namespace, "partial", 5)
    pg = get(cluster, namespace, "podgroup", "partial") or {}
    assert pg["spec"]["minMember"] == 5 and pg["spec"]["minResources"][DEVICE] == "4"
    wait_for("the PodGroup Running", lambda: (get(cluster, namespace, "podgroup", "partial") or {})
             .get("status", {}).get("phase") == "Running")  # fmt: skip
    wait_for(
        "Queued False",
        lambda: (queued(cluster, namespace, "partial") or {}).get("status") == "False",
    )
    time.sleep(2)
    assert len(bound(cluster, namespace, "partial")) == 5
    assert len(job_pods(cluster, namespace, "partial")) == 6


def test_a_queue_capability_holds_jobs_beyond_it(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str, pool: Pool
) -> None:
    pool(nodes=3, devices=2)  # 6 devices: the queue, not the cluster, is the limit
    queue = f"q-{namespace}"
    cluster.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
        "metadata": {"name": queue},
        "spec": {"weight": 1, "reclaimable": False, "capability": {DEVICE: "3"}},
    }))  # fmt: skip
    try:
        wait_for(f"queue {queue} Open", lambda: volcano.queue_state(queue) == "Open")
        start_operator("--enable-gang-scheduling")
        for name in ("first", "second"):
            apply(cluster, namespace, gang_job(name, namespace, policy={"queue": queue}))
        wait_bound(cluster, namespace, "first", 4)
        q = wait_queued(cluster, namespace, "second", "PodGroupPending")
        assert f"queue '{queue}'" in q["message"] and f"{DEVICE}=3" in q["message"]
        stays_unplaced(cluster, namespace, "second")

        cluster.kubectl("delete", "msjob", "first", "-n", namespace)
        wait_bound(cluster, namespace, "second", 4)
        wait_for("no PodGroup left by the deleted job",
                 lambda: get(cluster, namespace, "podgroup", "first") is None)  # fmt: skip
    finally:
        cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", VOLCANO_QUEUES, queue, "--wait=false", check=False)


def test_a_higher_priority_job_goes_first(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str,
    kubelet: KubeletStandIn, pool: Pool,
) -> None:  # fmt: skip
    pool(nodes=2, devices=2)
    classes = {"low": 10, "high": 1000}
    for level, value in classes.items():
        cluster.kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": f"{namespace}-{level}"}, "value": value,
        }))  # fmt: skip
    try:
        start_operator("--enable-gang-scheduling")
        apply(cluster, namespace, gang_job("blocker", namespace))
        wait_bound(cluster, namespace, "blocker", 4)
        for level in ("low", "high"):  # the low one first: priority, not age, decides
            policy = {"priorityClass": f"{namespace}-{level}"}
            apply(cluster, namespace, gang_job(level, namespace, policy=policy))
            wait_queued(cluster, namespace, level, "PodGroupPending")
        pg = get(cluster, namespace, "podgroup", "high") or {}
        assert pg["spec"]["priorityClassName"] == f"{namespace}-high"

        finish(kubelet, cluster, namespace, "blocker", 3)
        wait_bound(cluster, namespace, "high", 4)
        stays_unplaced(cluster, namespace, "low", seconds=4)
        assert (queued(cluster, namespace, "low") or {}).get("status") == "True"
    finally:
        for level in classes:
            cluster.kubectl("delete", "priorityclass", f"{namespace}-{level}", check=False)


def test_a_job_restarted_whole_is_placed_as_a_gang_again(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str,
    kubelet: KubeletStandIn, pool: Pool,
) -> None:  # fmt: skip
    """A job restarted under ``restartScope: Job`` frees its devices and competes with a
    waiting job for them: one of the two gets all it needs, the other none."""
    pool(nodes=2, devices=2)
    start_operator("--enable-gang-scheduling")
    apply(cluster, namespace, gang_job("again", namespace, restart="ExitCode", restartScope="Job"))
    wait_bound(cluster, namespace, "again", 4)
    uids = {p["metadata"]["uid"] for p in job_pods(cluster, namespace, "again").values()}
    wait_condition(cluster, namespace, "again", "Running")
    apply(cluster, namespace, gang_job("waiting", namespace))
    wait_queued(cluster, namespace, "waiting", "PodGroupPending")

    kubelet.fail(namespace, "again-worker-1", exit_code=137, reason="OOMKilled")
    wait_for("the old pods gone", lambda: not uids & {
        p["metadata"]["uid"] for p in job_pods(cluster, namespace, "again").values()
    })  # fmt: skip

    def one_whole() -> tuple[str, str] | None:
        counts = {j: len(bound(cluster, namespace, j)) for j in ("again", "waiting")}
        whole = [j for j, n in counts.items() if n == 4]
        return (whole[0], next(j for j in counts if j != whole[0])) if whole else None

    winner, loser = wait_for("one of the two jobs placed whole", one_whole, timeout=90)
    stays_unplaced(cluster, namespace, loser)
    job = get(cluster, namespace, "msjob", "again") or {}
    assert job["status"]["replicaStatuses"]["Worker"].get("restarts", 0) >= 1

    finish(kubelet, cluster, namespace, winner, 3)
    wait_bound(cluster, namespace, loser, 4, timeout=90)
    wait_condition(cluster, namespace, loser, "Running")


def test_scale_suspend_and_delete_keep_the_podgroup_right(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str, pool: Pool
) -> None:
    pool(nodes=2, devices=2)
    start_operator("--enable-gang-scheduling")
    apply(cluster, namespace, gang_job("elastic", namespace, workers=2))
    wait_bound(cluster, namespace, "elastic", 3)

    cluster.kubectl("scale", "msjob", "elastic", "-n", namespace, "--replicas=4")

    def resized() -> JSON | None:
        pg = get(cluster, namespace, "podgroup", "elastic")
        spec = (pg or {}).get("spec") or {}
        return pg if spec.get("minMember") == 5 and spec["minResources"][DEVICE] == "4" else None

    wait_for("the PodGroup resized", resized)
    wait_bound(cluster, namespace, "elastic", 5, timeout=90)

    cluster.kubectl("patch", "msjob", "elastic", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":true}}}')  # fmt: skip
    wait_condition(cluster, namespace, "elastic", "Suspended")
    wait_for("pods and PodGroup gone", lambda: not job_pods(cluster, namespace, "elastic")
             and get(cluster, namespace, "podgroup", "elastic") is None)  # fmt: skip

    cluster.kubectl("patch", "msjob", "elastic", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":false}}}')  # fmt: skip
    wait_bound(cluster, namespace, "elastic", 5, timeout=90)
    assert (get(cluster, namespace, "podgroup", "elastic") or {})["spec"]["minMember"] == 5

    cluster.kubectl("delete", "msjob", "elastic", "-n", namespace)
    wait_for("no PodGroup left", lambda: get(cluster, namespace, "podgroup", "elastic") is None)


def test_a_pod_deleted_from_a_gang_restarted_in_place_is_placed_alone(
    cluster: LocalCluster, volcano: Volcano, start_operator: Any, namespace: str,
    declared: None, kubelet_in_place: InPlaceKubelet,
) -> None:  # fmt: skip
    """A hybrid restart under Volcano: the PodGroup stays, the replacement of the deleted
    Worker is placed by Volcano alone while the other pods stay bound and restart in place
    (the gang is not rebuilt), and the job runs again with only that pod new."""
    op = start_operator("--agent-image=msop:kwok", "--enable-gang-scheduling")
    before = start(cluster, namespace, kubelet_in_place)
    group = (get(cluster, namespace, "podgroup", NAME) or {})["metadata"]["uid"]
    lost = f"{NAME}-worker-1"
    deleted_at = time.time()
    cluster.kubectl("delete", "pod", "-n", namespace, lost, "--wait=false")
    recreated_alone(cluster, namespace, kubelet_in_place, op, before, lost, deleted_at)
    assert (get(cluster, namespace, "podgroup", NAME) or {})["metadata"]["uid"] == group
    pods = job_pods(cluster, namespace, NAME)
    assert {p["spec"].get("schedulerName") for p in pods.values()} == {"volcano"}
    assert all(p["spec"].get("nodeName") for p in pods.values())
    writes = [(verb, c["objectRef"].get("name"))
              for verb in ("create", "update", "patch", "delete")
              for c in operator_calls(cluster.audit_log, namespace, verb, "pods")
              if when(c) >= deleted_at]  # fmt: skip
    assert writes == [("create", lost)]
