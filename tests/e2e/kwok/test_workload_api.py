"""Gang scheduling with Kubernetes' own Workload API (scheduling.k8s.io/v1alpha2), no
add-on: a control plane of its own with the GenericWorkload, GangScheduling and
WorkloadAwarePreemption feature gates on (the API server, the scheduler and the
controller-manager) and the API served (``--runtime-config``). ``msop run`` with its
default ``--gang-scheduler=auto`` finds the API and gives every job a Workload and a
PodGroup; the real kube-scheduler places the pods whole or not at all.

- A job of 64 pods on room for 63 binds none, and ``Queued`` says why; one more slot
  and all 64 are bound; the job's deletion takes both objects.
- Two jobs that each fit alone but not together: one runs whole, the other waits whole.
- A restart of the job (its pods made again) keeps both objects; a scale makes them again
  for the new gang; suspend deletes them, resume makes them again.
- A higher-priority gang preempts every pod of a lower one (``disruptionMode:
  PodGroup``), where pod-by-pod preemption would take two of its three.
- With a real Kueue (``--enable-kueue``): Kueue admits, the Workload API places. A job
  Kueue holds back has no gang objects and no pod; an admitted gang that does not fit
  waits whole; the next job is admitted when the first ends, and placed whole.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed import KubeletStandIn, LocalCluster
from testbed.cluster import WORKLOAD_API_GATES as GATES
from testbed.cluster import (
    WORKLOAD_API_RUNTIME_CONFIG,
    fake_node,
    namespace_for_a_test,
    pod_cidr,
)
from testbed.kueue import Kueue, build
from testbed.paths import CACHE
from tests.e2e.kueues import QUEUE_LABEL, create, flavor, queues, stays_without_pods, workload
from tests.e2e.msjobs import (
    apply,
    bound,
    finish,
    get,
    items,
    job_pods,
    queued,
    wait_for,
    wait_queued,
)
from tests.e2e.sessions import (
    OperatorFactory,
    build_binaries,
    install_crds,
    operator_factory,
    run_addon,
    run_session_cluster,
)

JSON = dict[str, Any]
TEST_LABEL = "msop.e2e/test"
"""The label of a test's nodes (the test's namespace), which its pods select."""


def gated(name: str) -> JSON:
    """kwokctl's components with the gates on and the API served."""

    def args(**kv: str) -> list[JSON]:
        return [{"key": k, "value": v} for k, v in kv.items()]

    return {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokctlConfiguration",
        "componentsPatches": [
            {"name": "kube-apiserver", "extraArgs": args(
                **{"feature-gates": GATES, "runtime-config": WORKLOAD_API_RUNTIME_CONFIG})},
            {"name": "kube-scheduler", "extraArgs": args(**{"feature-gates": GATES})},
            {"name": "kube-controller-manager", "extraArgs": args(**{"feature-gates": GATES})},
        ],
    }  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A control plane of its own (the session's has the gates off), with no node: each
    test adds the ones it needs."""
    c = LocalCluster(
        name=f"msop-wlapi-{os.getpid()}", bin_dir=build_binaries(), workdir=CACHE / "kwok",
        nodes=0, extra_config_docs=[gated("wlapi")],
    )  # fmt: skip
    yield from run_session_cluster(c, install_crds)


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    yield from namespace_for_a_test(cluster, prefix="wl", timeout=30)


@pytest.fixture
def start_operator(cluster: LocalCluster, namespace: str) -> Iterator[OperatorFactory]:
    with operator_factory(cluster.kubeconfig, namespace) as start:
        yield start


AddNode = Callable[..., None]


@pytest.fixture
def add_node(cluster: LocalCluster, namespace: str) -> Iterator[AddNode]:
    """``add_node(name, cpu, pods=110)``: a kwok node of ``cpu`` CPUs and room for
    ``pods`` pods, for this test; its nodes are deleted afterwards."""
    made: list[str] = []

    def add(name: str, cpu: str, pods: int = 110) -> None:
        capacity = {"cpu": cpu, "memory": "32Gi", "pods": str(pods)}
        labels = {TEST_LABEL: namespace}
        node = fake_node(f"{namespace}-{name}", pod_cidr(60 + len(made)), capacity, labels, [])
        cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
        made.append(f"{namespace}-{name}")
        cluster.kubectl("wait", "--for=condition=Ready", "--timeout=60s", f"node/{made[-1]}")

    yield add
    cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
                    check=False)  # fmt: skip
    if made:  # gone before the next test: its pods must never be bound to them
        cluster.kubectl("delete", "node", *made, "--timeout=60s", check=False)


def job(
    name: str, namespace: str, priority: str | None = None, workers: int = 2, cpu: str = "3"
) -> JSON:
    """A Scheduler and two Workers of 3 CPUs each: two fit on a node of 8 CPUs, not three.
    Its pods go only to this test's nodes. ``priority``: the PriorityClass of its pods and
    of its gang."""
    container = {"name": "mindspore", "image": "mindspore:e2e",
                 "resources": {"requests": {"cpu": cpu}}}  # fmt: skip
    pod_spec: JSON = {"containers": [container], "nodeSelector": {TEST_LABEL: namespace}}
    spec: JSON = {}
    if priority is not None:
        pod_spec["priorityClassName"] = priority
        spec["runPolicy"] = {"schedulingPolicy": {"priorityClass": priority}}
    template = {"spec": pod_spec}
    return {
        "apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob", "metadata": {"name": name},
        "spec": {**spec, "msReplicaSpecs": {
            "Scheduler": {"replicas": 1, "restartPolicy": "Never", "template": template},
            "Worker": {"replicas": workers, "restartPolicy": "Never", "template": template},
        }},
    }  # fmt: skip


def test_a_gang_that_does_not_fit_waits_whole_then_binds_whole(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, add_node: AddNode
) -> None:
    # 64 pods (a Scheduler and 63 Workers) and room for 63.
    add_node("a", "64", pods=63)
    op = start_operator()
    assert wait_for("the start-up line", lambda: "Workload API" in op.log_path.read_text())
    apply(cluster, namespace, job("gang", namespace, workers=63, cpu="100m"))
    wait_for("64 pods", lambda: len(job_pods(cluster, namespace, "gang")) == 64)
    for pod in job_pods(cluster, namespace, "gang").values():
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "gang"}
    workload = get(cluster, namespace, "workloads.scheduling.k8s.io", "gang")
    assert workload is not None
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {
        "gang": {"minCount": 64}
    }
    assert workload["metadata"]["ownerReferences"][0]["kind"] == "MSJob"
    # Room for 63 of 64: none is bound, and the job says why.
    wait = wait_queued(cluster, namespace, "gang", "Unschedulable", timeout=90)
    assert "cannot place its gang of 64 pods whole yet" in wait["message"], wait
    assert bound(cluster, namespace, "gang") == {}
    # One more slot: the whole gang is bound.
    add_node("b", "64", pods=1)
    wait_for("all 64 bound", lambda: len(bound(cluster, namespace, "gang")) == 64, timeout=120)

    def placed() -> bool:
        q = queued(cluster, namespace, "gang")
        return q is not None and q["status"] == "False"

    wait_for("Queued False", placed, timeout=60)
    # Deleted with the job (the garbage collector, through their owner references).
    cluster.kubectl("delete", "msjob", "gang", "-n", namespace, "--wait=false")
    for kind in ("workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io"):
        gone = functools.partial(absent, cluster, namespace, kind, "gang")
        wait_for(f"the {kind} deleted", gone, timeout=90)


def absent(cluster: LocalCluster, namespace: str, kind: str, name: str) -> bool:
    return get(cluster, namespace, kind, name) is None


def test_two_gangs_that_fit_one_at_a_time_never_share_the_room(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, add_node: AddNode
) -> None:
    # Room for three pods of 3 CPUs (two on a node of 8, one on a node of 4): each job of
    # three fits alone, not both. One runs whole, the other waits whole, never a part of
    # each.
    add_node("a", "8")
    add_node("b", "4")
    start_operator()
    for name in ("first", "second"):
        apply(cluster, namespace, job(name, namespace))

    def split() -> tuple[int, int] | None:
        counts = (len(bound(cluster, namespace, "first")), len(bound(cluster, namespace, "second")))
        return counts if sum(counts) == 3 else None

    counts = wait_for("one gang bound", split, timeout=120)
    assert sorted(counts) == [0, 3], counts
    waiting = "first" if counts[0] == 0 else "second"
    wait_queued(cluster, namespace, waiting, "Unschedulable", timeout=90)
    # Whatever the scheduler retries meanwhile, the waiting gang stays whole-or-nothing.
    assert len(bound(cluster, namespace, waiting)) == 0
    # The placed job is deleted: its room goes to the other gang, whole.
    placed = "second" if waiting == "first" else "first"
    cluster.kubectl("delete", "msjob", placed, "-n", namespace, "--wait=false")
    selector = f"training.kubeflow.org/job-name={placed}"
    cluster.kubectl("delete", "pods", "-n", namespace, "-l", selector, "--grace-period=0",
                    "--force")  # fmt: skip
    wait_for(f"{waiting} bound whole", lambda: len(bound(cluster, namespace, waiting)) == 3,
             timeout=120)  # fmt: skip


def min_count(cluster: LocalCluster, namespace: str, kind: str, name: str) -> int | None:
    obj = get(cluster, namespace, kind, name)
    if obj is None or obj["metadata"].get("deletionTimestamp"):
        return None
    spec = obj["spec"]
    policy = spec["podGroupTemplates"][0] if kind.startswith("workloads") else spec
    return int(policy["schedulingPolicy"]["gang"]["minCount"])


def test_scale_rebuilds_the_group_and_suspend_releases_it(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, add_node: AddNode
) -> None:
    add_node("a", "16")
    start_operator()
    apply(cluster, namespace, job("elastic", namespace))
    wait_for("three bound", lambda: len(bound(cluster, namespace, "elastic")) == 3, timeout=90)
    kinds = ("workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io")
    assert [min_count(cluster, namespace, k, "elastic") for k in kinds] == [3, 3]
    # Two Workers more: both objects are made again for a gang of 5 (their policy is
    # immutable), and the five pods are placed together.
    cluster.kubectl("scale", "msjob", "elastic", "-n", namespace, "--replicas=4")

    def rebuilt() -> bool:
        return [min_count(cluster, namespace, k, "elastic") for k in kinds] == [5, 5]

    wait_for("a gang of 5", rebuilt, timeout=90)
    wait_for("five bound", lambda: len(bound(cluster, namespace, "elastic")) == 5, timeout=90)
    for pod in job_pods(cluster, namespace, "elastic").values():
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "elastic"}
    # Suspended: the pods go, and so do the Workload and the PodGroup.
    cluster.kubectl("patch", "msjob", "elastic", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":true}}}')  # fmt: skip
    for kind in kinds:
        gone = functools.partial(absent, cluster, namespace, kind, "elastic")
        wait_for(f"the {kind} deleted", gone, timeout=90)
    # Resumed: made again, and the gang is placed again.
    cluster.kubectl("patch", "msjob", "elastic", "-n", namespace, "--type=merge",
                    "-p", '{"spec":{"runPolicy":{"suspend":false}}}')  # fmt: skip
    wait_for("five bound again", lambda: len(bound(cluster, namespace, "elastic")) == 5,
             timeout=90)  # fmt: skip
    assert [min_count(cluster, namespace, k, "elastic") for k in kinds] == [5, 5]


def test_a_higher_priority_gang_preempts_a_whole_lower_one(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, add_node: AddNode
) -> None:
    # 13 CPUs: the lower gang takes 9, the higher needs 9. Preempting pods one by one
    # would take two of the lower gang's three and leave it broken in two;
    # WorkloadAwarePreemption (alpha in 1.36) preempts the lower gang whole.
    for name, value in ((f"{namespace}-low", 10), (f"{namespace}-high", 1000)):
        pc = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
              "metadata": {"name": name}, "value": value}  # fmt: skip
        cluster.kubectl("apply", "-f", "-", input=json.dumps(pc))
    add_node("a", "13")
    start_operator()
    apply(cluster, namespace, job("low", namespace, f"{namespace}-low"))
    wait_for("low bound", lambda: len(bound(cluster, namespace, "low")) == 3, timeout=90)
    low_pods = set(job_pods(cluster, namespace, "low"))
    apply(cluster, namespace, job("high", namespace, f"{namespace}-high"))
    wait_for("high bound whole", lambda: len(bound(cluster, namespace, "high")) == 3, timeout=120)

    def preempted() -> set[str]:
        events = items(cluster, namespace, "events", None)
        return {e["involvedObject"]["name"] for e in events if e.get("reason") == "Preempted"}

    def said() -> str:
        events = items(cluster, namespace, "events", None)
        return "\n".join(f"{e['involvedObject']['name']} {e.get('reason')} {e.get('message')}"
                         for e in events)  # fmt: skip

    assert wait_for("the lower gang preempted", lambda: preempted() >= low_pods, timeout=30,
                    details=said)  # fmt: skip


def test_a_restart_of_the_job_keeps_its_group_and_is_placed_whole_again(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, add_node: AddNode
) -> None:
    add_node("a", "16")
    start_operator()
    restarting = job("again", namespace)
    restarting["spec"]["msReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    apply(cluster, namespace, restarting)
    wait_for("three bound", lambda: len(bound(cluster, namespace, "again")) == 3, timeout=90)
    kinds = ("workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io")
    uids = [(get(cluster, namespace, k, "again") or {})["metadata"]["uid"] for k in kinds]
    before = {p["metadata"]["uid"] for p in job_pods(cluster, namespace, "again").values()}
    KubeletStandIn(cluster).run(namespace, "again-worker-1")
    KubeletStandIn(cluster).fail(namespace, "again-worker-1", exit_code=137)

    def recreated() -> bool:
        pods = job_pods(cluster, namespace, "again")
        live = {p["metadata"]["uid"] for p in pods.values()}
        return len(pods) == 3 and not live & before and len(bound(cluster, namespace, "again")) == 3

    wait_for("every pod made again and bound", recreated, timeout=120)
    assert [(get(cluster, namespace, k, "again") or {})["metadata"]["uid"] for k in kinds] == uids
    for pod in job_pods(cluster, namespace, "again").values():
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "again"}


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster) -> Iterator[Kueue]:
    """A real Kueue on this gated control plane."""
    yield from run_addon(
        "Kueue", build, lambda bin_dir, logs: Kueue(cluster, bin_dir, logs)
    )  # fmt: skip


GANG_KINDS = ("workloads.scheduling.k8s.io", "podgroups.scheduling.k8s.io")


def test_kueue_admits_and_the_workload_api_places_the_gang(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, add_node: AddNode,
    kueue: Kueue,
) -> None:  # fmt: skip
    # Kueue's quota: one job (9 CPUs) at a time. The room: a node of 8 CPUs, two of a
    # job's three pods.
    add_node("a", "8")
    name = f"default-{namespace}"
    create(cluster, flavor(name) | {"metadata": {"name": name, "labels": {TEST_LABEL: namespace}}})
    queue = queues(cluster, namespace, {name: "9"})
    try:
        start_operator("--enable-kueue")
        for job_name in ("first", "second"):
            queued_job = job(job_name, namespace)
            queued_job["metadata"]["labels"] = {QUEUE_LABEL: queue}
            apply(cluster, namespace, queued_job)
            if job_name == "first":
                # Admitted by Kueue, then the gang's objects and pods: none of the three
                # is bound, and Queued says it is the scheduler that waits now.
                wait = wait_queued(cluster, namespace, "first", "Unschedulable", timeout=90)
                assert "gang of 3 pods" in wait["message"], wait
                admitted = workload(cluster, namespace, "first") or {}
                assert any(
                    c["type"] == "Admitted" and c["status"] == "True"
                    for c in admitted.get("status", {}).get("conditions", [])
                ), admitted
                assert [min_count(cluster, namespace, k, "first") for k in GANG_KINDS] == [3, 3]
                assert bound(cluster, namespace, "first") == {}
        # The second waits for Kueue's quota: no gang objects, no pods.
        q = wait_queued(cluster, namespace, "second", "WorkloadPending")
        assert "'team'" in q["message"], q
        stays_without_pods(cluster, namespace, "second")
        assert all(absent(cluster, namespace, k, "second") for k in GANG_KINDS)
        # Room for the first gang: all three bound at once.
        add_node("b", "8")
        wait_for("first bound whole", lambda: len(bound(cluster, namespace, "first")) == 3,
                 timeout=120)  # fmt: skip
        # The first ends: Kueue admits the second, and the scheduler places it whole.
        finish(KubeletStandIn(cluster), cluster, namespace, "first", 2)
        wait_for("second bound whole", lambda: len(bound(cluster, namespace, "second")) == 3,
                 timeout=120)  # fmt: skip
        assert [min_count(cluster, namespace, k, "second") for k in GANG_KINDS] == [3, 3]
        for pod in job_pods(cluster, namespace, "second").values():
            assert pod["spec"]["schedulingGroup"] == {"podGroupName": "second"}
    finally:
        cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=true", check=False)
        cluster.kubectl("delete", "clusterqueue", f"cq-{namespace}", "--wait=false", check=False)
        cluster.kubectl("delete", "resourceflavor", name, "--wait=false", check=False)
