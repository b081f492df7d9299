"""Topology-aware scheduling on a real Kueue (hack/kueue; TAS is beta and on by default in
Kueue 0.17): msrun MSJobs whose Worker template asks for a rack land where Kueue's
topology assignment says, worker i on the i-th place of it.

A Worker whose node is lost under a job restarted in place is replaced where Kueue's
failed-node replacement (``status.unhealthyNodes``) puts it, alone, without the
Workload being admitted again.

Each test gets kwok nodes of its own labelled with a block, a rack and (as every kwok
node) ``kubernetes.io/hostname``, a ``Topology`` of those three levels, a ResourceFlavor
on that topology selecting the test's nodes (and tolerating their taint), a ClusterQueue
with ample quota (only the topology limits where jobs go) and an operator run with
``--enable-kueue``. A Worker asks for 10 of a node's 16 CPUs: one Worker per node.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from testbed import LocalCluster
from testbed.inplace import InPlaceKubelet
from testbed.kueue import Kueue, build
from tests.e2e.inplace import (
    FEATURE,
    NAME,
    ONE_PER_NODE,
    RESTRICTED,
    declare,
    msjob,
    recreated_alone,
    start,
    when,
)
from tests.e2e.kueues import QUEUE_LABEL, create, queues, stays_without_pods, workload
from tests.e2e.msjobs import apply, job_pods, queued, wait_bound, wait_for, wait_queued
from tests.e2e.reliability import operator_calls
from tests.e2e.sessions import POOL_LABEL, Pool, run_addon

JSON = dict[str, Any]
BLOCK, RACK, HOST = "msop-e2e/block", "msop-e2e/rack", "kubernetes.io/hostname"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
GATE = "kueue.x-k8s.io/topology"
INDEX_LABEL = "training.kubeflow.org/replica-index"


@pytest.fixture(scope="module")
def kueue(cluster: LocalCluster) -> Iterator[Kueue]:
    yield from run_addon(
        "Kueue", build, lambda bin_dir, logs: Kueue(cluster, bin_dir, logs, name="kueue-tas")
    )


@pytest.fixture
def tas_objects(cluster: LocalCluster, namespace: str) -> Iterator[None]:
    """Removes the test's jobs and cluster-scoped Kueue objects afterwards (before the
    pool's nodes go: request it after ``pool``)."""
    yield
    cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=true", check=False)
    cluster.kubectl("delete", "clusterqueue", f"cq-{namespace}", "--wait=false", check=False)
    for kind in ("resourceflavors", "topologies.kueue.x-k8s.io"):
        cluster.kubectl("delete", kind, "-l", f"{POOL_LABEL}={namespace}", "--wait=false",
                        check=False)  # fmt: skip


def racks(pool: Pool, layout: dict[str, int]) -> dict[str, str]:
    """``layout``: rack -> node count, all in block ``b1``; returns node -> rack."""
    out: dict[str, str] = {}
    for rack, count in layout.items():
        for node in pool(nodes=count, devices=0, labels={BLOCK: "b1", RACK: rack}):
            out[node] = rack
    return out


def topology_queue(cluster: LocalCluster, ns: str) -> tuple[str, str]:
    """The Topology, its ResourceFlavor and the queues; returns (LocalQueue, Topology)."""
    topo, name = f"topo-{ns}", f"tas-{ns}"
    mine = {POOL_LABEL: ns}
    create(cluster, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
        "metadata": {"name": topo, "labels": mine},
        "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]},
    })  # fmt: skip
    create(cluster, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": mine},
        "spec": {
            "nodeLabels": {POOL_LABEL: ns},
            "topologyName": topo,
            "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": ns,
                             "effect": "NoSchedule"}],
        },
    })  # fmt: skip
    return queues(cluster, ns, {name: "100"}), topo


def msrun_job(name: str, queue: str, workers: int, annotation: str, level: str = RACK) -> JSON:
    """``workers`` msrun Workers of 10 CPUs, their template annotated ``annotation: level``."""
    container = {"name": "mindspore", "image": "mindspore:e2e",
                 "resources": {"requests": {"cpu": "10", "memory": "1Gi"}}}  # fmt: skip
    return {
        "apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "msrun": {"localWorkers": 1},
            "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": 0},
            "msReplicaSpecs": {"Worker": {
                "replicas": workers, "restartPolicy": "Never",
                "template": {"metadata": {"annotations": {annotation: level}},
                             "spec": {"containers": [container]}},
            }},
        },
    }  # fmt: skip


def hosts_by_rank(wl: JSON, pod_set: str = "worker") -> list[str]:
    """A pod set's topology assignment, one host per pod, in Kueue's order (the order its
    ungater gives pods by their replica index)."""
    psa = next(a for a in wl["status"]["admission"]["podSetAssignments"] if a["name"] == pod_set)
    ta = psa["topologyAssignment"]
    level = ta["levels"].index(HOST)
    out: list[str] = []
    for piece in ta["slices"]:
        values, counts = piece["valuesPerLevel"][level], piece["podCounts"]
        for i in range(piece["domainCount"]):
            if "universal" in values:
                host = values["universal"]
            else:
                ind = values["individual"]
                host = ind.get("prefix", "") + ind["roots"][i] + ind.get("suffix", "")
            n = counts["universal"] if "universal" in counts else counts["individual"][i]
            out += [host] * n
    return out


def placed_in_rank_order(cluster: LocalCluster, ns: str, job: str, workers: int) -> list[str]:
    """Waits for the job's Workers to be bound; checks each went where Kueue's assignment
    puts its replica index, through the ungater (gate gone, host in its nodeSelector);
    returns their nodes by index."""
    bound = wait_bound(cluster, ns, job, workers, timeout=90)
    wl = workload(cluster, ns, job) or {}
    hosts = hosts_by_rank(wl)
    pods = job_pods(cluster, ns, job)
    nodes = [bound[f"{job}-worker-{i}"] for i in range(workers)]
    detail = json.dumps({"assignment": hosts, "bound": nodes})
    assert nodes == hosts, detail
    for i in range(workers):
        pod = pods[f"{job}-worker-{i}"]
        assert pod["metadata"]["labels"][INDEX_LABEL] == str(i)
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]
        assert GATE not in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        assert pod["spec"]["nodeSelector"].get(HOST) == hosts[i], pod["spec"]["nodeSelector"]
        assert pod["spec"]["nodeSelector"].get(POOL_LABEL) == ns  # the flavor's, from msop
    return nodes


def test_a_job_that_requires_a_rack_lands_whole_on_one_rack_in_kueues_order(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    tas_objects: None,
) -> None:  # fmt: skip
    """Rack r1 has two nodes, r2 one: two Workers that require a rack can only go to r1
    (the default scheduler alone would as well spread them over both)."""
    rack_of = racks(pool, {"r1": 2, "r2": 1})
    queue, _ = topology_queue(cluster, namespace)
    start_operator("--enable-kueue")
    apply(cluster, namespace, msrun_job("tight", queue, 2, REQUIRED))
    nodes = placed_in_rank_order(cluster, namespace, "tight", 2)
    assert {rack_of[n] for n in nodes} == {"r1"}
    assert sorted(nodes) == sorted(n for n, r in rack_of.items() if r == "r1")
    wl = workload(cluster, namespace, "tight") or {}
    assert wl["spec"]["podSets"][0]["topologyRequest"] == {
        "required": RACK, "podIndexLabel": INDEX_LABEL}  # fmt: skip
    q = queued(cluster, namespace, "tight") or {}
    assert (q.get("status"), q.get("reason")) == ("False", "WorkloadAdmitted")


def test_a_job_that_fits_no_rack_stays_queued_with_kueues_reason(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    tas_objects: None,
) -> None:  # fmt: skip
    """Three nodes in all, but no rack with three: three Workers that require a rack wait,
    with no pod, and the job's Queued condition carries Kueue's topology message."""
    racks(pool, {"r1": 2, "r2": 1})
    queue, topo = topology_queue(cluster, namespace)
    start_operator("--enable-kueue")
    apply(cluster, namespace, msrun_job("wide", queue, 3, REQUIRED))
    wait_queued(cluster, namespace, "wide", "WorkloadPending")
    q = wait_for(
        "Kueue's topology verdict in the Queued condition",
        lambda: (
            (now := queued(cluster, namespace, "wide") or {})
            and topo in now.get("message", "")
            and "fit" in now.get("message", "")
            and now
        ),
    )  # fmt: skip
    assert q["status"] == "True" and q["reason"] == "WorkloadPending", q
    stays_without_pods(cluster, namespace, "wide")
    wl = workload(cluster, namespace, "wide") or {}
    assert not (wl.get("status") or {}).get("admission"), wl.get("status")


def test_a_job_that_prefers_a_rack_it_outgrows_spreads_over_the_fewest_racks(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    tas_objects: None,
) -> None:  # fmt: skip
    """Racks of two, two and one node: three Workers that prefer a rack do not fit one, so
    Kueue places them in their block over two racks, not three."""
    rack_of = racks(pool, {"r1": 2, "r2": 2, "r3": 1})
    queue, _ = topology_queue(cluster, namespace)
    start_operator("--enable-kueue")
    apply(cluster, namespace, msrun_job("spread", queue, 3, PREFERRED))
    nodes = placed_in_rank_order(cluster, namespace, "spread", 3)
    assert len(set(nodes)) == 3
    assert len({rack_of[n] for n in nodes}) == 2, {n: rack_of[n] for n in nodes}
    wl = workload(cluster, namespace, "spread") or {}
    assert wl["spec"]["podSets"][0]["topologyRequest"] == {
        "preferred": RACK, "podIndexLabel": INDEX_LABEL}  # fmt: skip


class WorkloadVersions:
    """Every version of the namespace's Kueue Workloads, from ``kubectl get --watch``
    (Kueue clears ``status.unhealthyNodes`` as soon as it has found the replacement: a
    poll could miss it)."""

    def __init__(self, cluster: LocalCluster, namespace: str) -> None:
        self.seen: list[JSON] = []
        self.proc = subprocess.Popen(
            [cluster.binary("kubectl"), "--kubeconfig", cluster.kubeconfig, "get",
             "workloads.kueue.x-k8s.io", "-n", namespace, "--watch", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        decoder, buf = json.JSONDecoder(), ""
        for line in self.proc.stdout:
            buf += line
            while buf.strip():
                try:
                    obj, end = decoder.raw_decode(buf.lstrip())
                except ValueError:
                    break
                self.seen.append(obj)
                buf = buf.lstrip()[end:]

    def stop(self) -> list[JSON]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return list(self.seen)


def where(cluster: LocalCluster, namespace: str, versions: list[JSON]) -> str:
    """The job's pods (node, selected host, gates, phase) and each Workload version's
    assignment and unhealthy nodes, for a failure's message."""
    pods = {
        n: (p["spec"].get("nodeName"), (p["spec"].get("nodeSelector") or {}).get(HOST),
            [g["name"] for g in p["spec"].get("schedulingGates") or []],
            p["status"].get("phase"))
        for n, p in job_pods(cluster, namespace, NAME).items()
    }  # fmt: skip
    seen = []
    for v in versions:
        status = v.get("status") or {}
        admission = status.get("admission") or {}
        seen.append((
            v["metadata"].get("resourceVersion"), status.get("unhealthyNodes"),
            [(a["name"], hosts_by_rank({"status": {"admission": admission}}, a["name"]))
             for a in admission.get("podSetAssignments") or [] if a.get("topologyAssignment")],
        ))  # fmt: skip
    return json.dumps({"pods": pods, "workloads": seen}, indent=1)


def tas_inplace_job(queue: str) -> JSON:
    """The restart-in-place job of tests/e2e/inplace.py (a Scheduler and two Workers, one
    pod a node) queued in ``queue``, every template requiring rack placement and asking
    for 10 of a node's 16 CPUs."""
    container = {"name": "mindspore", "image": "ms:kwok", "securityContext": RESTRICTED,
                 "resources": {"requests": {"cpu": "10", "memory": "1Gi"}}}  # fmt: skip
    job: JSON = msjob(NAME, 2, container, affinity=ONE_PER_NODE)
    job["metadata"]["labels"] = {QUEUE_LABEL: queue}
    job["spec"]["restartScope"] = "Job"
    for spec in job["spec"]["msReplicaSpecs"].values():
        spec["template"]["metadata"] = {"annotations": {REQUIRED: RACK}}
    return job


def admitted_at(wl: JSON) -> str:
    (cond,) = [c for c in wl["status"]["conditions"] if c["type"] == "Admitted"]
    assert cond["status"] == "True", cond
    return str(cond["lastTransitionTime"])


#: How a test loses a node: ``lose(node, pod)`` at the start of the loss; returns the
#: pod writes the operator makes besides creating the pod again.
Lose = Callable[[str, str], list[str]]


def test_a_worker_whose_node_is_deleted_is_replaced_alone_where_kueue_puts_it(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    tas_objects: None, kubelet_in_place: InPlaceKubelet,
) -> None:  # fmt: skip
    """Rack r1 has four nodes, the job three pods that require a rack: one node is spare.
    Worker 1's node is deleted and its pod force-deleted at once (the pod garbage
    collector would, later). Kueue names the node in the Workload's
    ``status.unhealthyNodes`` and moves its place in the topology assignment to the spare
    node, without admitting the Workload again; msop recreates that pod alone (its one
    pod write), gated, once the place has moved, Kueue's ungater sends it to the spare
    node, and the other pods keep their UIDs and restart in place."""

    def lose(node: str, pod: str) -> list[str]:
        cluster.kubectl("delete", "node", node, "--wait=false")
        cluster.kubectl("delete", "pod", "-n", namespace, pod, "--grace-period=0", "--force")
        return []  # the operator deletes nothing

    _node_lost_under_tas(cluster, namespace, pool, kubelet_in_place, start_operator, [], lose)


def test_a_worker_whose_node_goes_not_ready_is_replaced_alone_where_kueue_puts_it(
    cluster: LocalCluster, kueue: Kueue, start_operator: Any, namespace: str, pool: Pool,
    tas_objects: None, kubelet_in_place: InPlaceKubelet,
    node_lost: Callable[[str], Callable[[], None]],
) -> None:  # fmt: skip
    """The same with Worker 1's node NotReady (kwok, every node's kubelet, frozen): the
    operator deletes the pod after ``--node-lost-after``; Kueue counts the node as failed
    once that pod terminates (``TASReplaceNodeOnPodTermination``) and moves its place;
    kwok plays again (the node Ready, but no longer in the assignment), confirms the
    deletion, and the pod is created again on the spare node."""

    def lose(node: str, pod: str) -> list[str]:
        back = node_lost(node)
        wait_for(
            "Kueue moving the place off the NotReady node",
            lambda: node not in hosts_by_rank(workload(cluster, namespace, NAME) or {}),
            timeout=40,
        )  # fmt: skip
        back()
        return [pod]  # the operator deletes the lost pod

    _node_lost_under_tas(cluster, namespace, pool, kubelet_in_place, start_operator,
                         ["--node-lost-after=2s"], lose)  # fmt: skip


def _node_lost_under_tas(
    cluster: LocalCluster, namespace: str, pool: Pool, kubelet: InPlaceKubelet,
    start_operator: Any, flags: list[str], lose: Lose,
) -> None:  # fmt: skip
    """The job on a rack of four nodes, the operator started once every node (the
    pool's too) declares restarts in place; then the loss, and what must follow."""
    rack_of = racks(pool, {"r1": 4})
    queue, _ = topology_queue(cluster, namespace)
    declare(cluster, [FEATURE])
    try:
        op = start_operator("--enable-kueue", "--agent-image=msop:kwok", *flags)
        _replaced(cluster, namespace, rack_of, kubelet, op, queue, lose)
    finally:
        declare(cluster, None)


def _replaced(
    cluster: LocalCluster, namespace: str, rack_of: dict[str, str], kubelet: InPlaceKubelet,
    op: Any, queue: str, lose: Lose,
) -> None:  # fmt: skip
    before = start(cluster, namespace, kubelet, tas_inplace_job(queue))
    wl = workload(cluster, namespace, NAME) or {}
    old_hosts = hosts_by_rank(wl)
    lost = f"{NAME}-worker-1"
    pods = job_pods(cluster, namespace, NAME)
    node = pods[lost]["spec"]["nodeName"]
    assert old_hosts[1] == node, (old_hosts, node)
    used = {p["spec"]["nodeName"] for p in pods.values()}
    (spare,) = set(rack_of) - used
    versions = WorkloadVersions(cluster, namespace)
    try:
        time.sleep(1)  # the watch's first list
        lost_at = time.time()
        deleted = lose(node, lost)
        recreated_alone(cluster, namespace, kubelet, op, before, lost, lost_at)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{where(cluster, namespace, versions.seen)}") from None
    finally:
        seen = versions.stop()
    # The operator wrote one pod: the lost one, created again (and deleted it if it was
    # still there); nothing else was deleted or patched.
    writes = [(verb, c["objectRef"].get("name"))
              for verb in ("create", "update", "patch", "delete")
              for c in operator_calls(cluster.audit_log, namespace, verb, "pods")
              if when(c) >= lost_at]  # fmt: skip
    assert writes == [("create", lost)] + [("delete", n) for n in deleted], writes
    # Kueue named the node, and replaced it in place: the same Workload, admitted all
    # along (never evicted, never without its admission), its assignment updated.
    now = workload(cluster, namespace, NAME) or {}
    assert now["metadata"]["uid"] == wl["metadata"]["uid"]
    assert admitted_at(now) == admitted_at(wl)
    assert now["status"]["admission"]["clusterQueue"] == wl["status"]["admission"]["clusterQueue"]
    unhealthy = [[n.get("name") for n in (v.get("status") or {}).get("unhealthyNodes") or []]
                 for v in seen]  # fmt: skip
    assert [node] in unhealthy, unhealthy
    assert not (now["status"].get("unhealthyNodes")), now["status"]
    for v in seen:
        status = v.get("status") or {}
        conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
        assert status.get("admission") and conds.get("Admitted") == "True", status
        assert conds.get("Evicted") != "True", status
    new_hosts = hosts_by_rank(now)
    assert node not in new_hosts and spare in new_hosts, (old_hosts, new_hosts)
    assert sorted(new_hosts) == sorted([old_hosts[0], spare]), (old_hosts, new_hosts)
    # The new pod went where the updated assignment has room: the spare node, through
    # Kueue's ungater (gate gone, host in its nodeSelector); the others stayed.
    pods = job_pods(cluster, namespace, NAME)
    new = pods[lost]
    assert new["spec"]["nodeName"] == spare, new["spec"]
    assert new["spec"]["nodeSelector"].get(HOST) == spare, new["spec"]["nodeSelector"]
    assert GATE not in [g["name"] for g in new["spec"].get("schedulingGates") or []]
    assert new["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == now["metadata"]["name"]
    for name, pod in pods.items():
        if name != lost:
            assert pod["metadata"]["uid"] == before[name]
            assert pod["spec"]["nodeName"] in used - {node}
