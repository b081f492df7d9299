"""Topology-aware scheduling on a real Kueue (hack/kueue; TAS is beta and on by default in
Kueue 0.17): msrun MSJobs whose Worker template asks for a rack land where Kueue's
topology assignment says, worker i on the i-th place of it.

Each test gets kwok nodes of its own labelled with a block, a rack and (as every kwok
node) ``kubernetes.io/hostname``, a ``Topology`` of those three levels, a ResourceFlavor
on that topology selecting the test's nodes (and tolerating their taint), a ClusterQueue
with ample quota (only the topology limits where jobs go) and an operator run with
``--enable-kueue``. A Worker asks for 10 of a node's 16 CPUs: one Worker per node.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from testbed import LocalCluster
from testbed.kueue import Kueue, build
from tests.e2e.kueues import QUEUE_LABEL, create, queues, stays_without_pods, workload
from tests.e2e.msjobs import apply, job_pods, queued, wait_bound, wait_for, wait_queued
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


def hosts_by_rank(wl: JSON) -> list[str]:
    """The worker pod set's topology assignment, one host per pod, in Kueue's order (the
    order its ungater gives pods by their replica index)."""
    psa = next(a for a in wl["status"]["admission"]["podSetAssignments"] if a["name"] == "worker")
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
