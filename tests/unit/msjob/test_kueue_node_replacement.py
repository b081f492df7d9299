"""Kueue's failed-node replacement for MSJobs placed by topology: the places of a
Workload's topology assignment, which of them no pod holds, and the missing pods held
while such a place is on a lost node (named in ``status.unhealthyNodes``, gone from the
node cache, or not ready) until Kueue has moved it."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence
from typing import Any

import pytest

from msop.api import constants as c
from msop.msjob import kueue, kueue_workload, topology
from msop.msjob.plan import Observed, Plan, plan
from msop.msjob.projection import pod_projection
from tests.support.builders import NOW, pod, service
from tests.support.kueue import FLAVORS, assignment_of, queued, tas_job, wl_of

JSON = dict[str, Any]
HOST = topology.HOSTNAME
REASON = kueue.REASON_NODE_REPLACEMENT
READY: JSON = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
NOT_READY: JSON = {"status": {"conditions": [
    {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"},
]}}  # fmt: skip


def admitted(j: JSON, hosts: list[str], unhealthy: Sequence[str] = ()) -> JSON:
    """``j``'s Workload admitted, its Workers placed on ``hosts`` (one each), Kueue
    replacing ``unhealthy``."""
    admission = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "scheduler", "flavors": {"cpu": "pool-a"}, "count": 1},
            {"name": "worker", "flavors": {"cpu": "pool-b"}, "count": 2,
             "topologyAssignment": assignment_of(hosts)},
        ],
    }  # fmt: skip
    wl = wl_of(
        j, ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
        admission=admission,
    )  # fmt: skip
    if unhealthy:
        wl["status"]["unhealthyNodes"] = [{"name": n} for n in unhealthy]
    return wl


def worker(index: int, host: str, *, bound: bool = True) -> JSON:
    """A Worker the ungater sent to ``host`` (bound there unless ``bound`` is False)."""
    p = pod("Worker", index)
    p["metadata"]["labels"][kueue_workload.PODSET_LABEL] = "worker"
    p["spec"]["nodeSelector"] = {"pool": "b", HOST: host}
    if bound:
        p["spec"]["nodeName"] = host
    return p


def run(
    j: JSON, wl: JSON, pods: Sequence[JSON], nodes: dict[str, JSON | None] | None = None
) -> Plan:
    seen = kueue.Seen(wl, [], FLAVORS, nodes=nodes)
    return plan(Observed(j, list(pods), [service()], NOW, scheduling=[seen]))


def created(p: Plan) -> list[str]:
    return sorted(x["metadata"]["name"] for x in p.create_pods)


# --- the places of an assignment -------------------------------------------------------------


def test_the_places_of_an_assignment_are_read_from_kueues_slices() -> None:
    ta: JSON = {
        "levels": ["rack", HOST],
        "slices": [
            {"domainCount": 2,
             "valuesPerLevel": [
                 {"universal": "r1"},
                 {"individual": {"prefix": "n-", "roots": ["a", "b"], "suffix": "-x"}},
             ],
             "podCounts": {"individual": [2, 1]}},
            {"domainCount": 1,
             "valuesPerLevel": [{"universal": "r2"}, {"universal": "n-c-x"}],
             "podCounts": {"universal": 3}},
        ],
    }  # fmt: skip
    assert topology.node_places({"topologyAssignment": ta}) == {
        "n-a-x": 2, "n-b-x": 1, "n-c-x": 3}  # fmt: skip
    above_nodes = {"levels": ["rack"], "slices": ta["slices"][1:]}
    assert topology.node_places({"topologyAssignment": above_nodes}) == {}
    assert topology.node_places({"name": "worker", "count": 2}) == {}


def test_a_place_is_held_by_a_pod_bound_or_sent_there_not_by_a_gated_one() -> None:
    psa = {"topologyAssignment": assignment_of(["b1-r2-n0", "b1-r2-n1", "b1-r2-n2"])}
    gated = pod("Worker", 2)
    pods = [worker(0, "b1-r2-n0"), worker(1, "b1-r2-n1", bound=False), gated]
    assert topology.free_places(psa, pods) == ["b1-r2-n2"]
    assert topology.free_places(psa, []) == ["b1-r2-n0", "b1-r2-n1", "b1-r2-n2"]


def test_the_cache_keeps_the_host_the_ungater_selected() -> None:
    p = worker(1, "b1-r2-n1", bound=False)
    kept = pod_projection(copy.deepcopy(p))
    assert kept["spec"]["nodeSelector"] == {HOST: "b1-r2-n1"}  # not the flavor's labels
    assert topology.pod_host(kept) == "b1-r2-n1"
    assert "nodeSelector" not in (pod_projection(pod("Worker", 0)).get("spec") or {})


# --- the missing pods wait for Kueue to move the place ---------------------------------------


def test_a_missing_pod_waits_while_its_place_is_on_a_node_kueue_replaces() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"], unhealthy=["b1-r2-n1"])
    p = run(j, wl, [pod("Scheduler", 0), worker(0, "b1-r2-n0")])
    assert created(p) == []
    q = queued(p)
    assert q is not None and (q["status"], q["reason"]) == ("True", REASON), q
    assert "b1-r2-n1 (Kueue is replacing it; pod set worker)" in q["message"]
    assert p.requeue_after is not None and p.requeue_after <= 5.0


def test_once_kueue_has_moved_the_place_the_pod_is_created_gated() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"], unhealthy=["b1-r2-n1"])
    waiting = run(j, wl, [pod("Scheduler", 0), worker(0, "b1-r2-n0")])
    assert waiting.status is not None
    j["status"] = waiting.status
    moved = admitted(j, ["b1-r2-n0", "b1-r2-n2"])
    p = run(j, moved, [pod("Scheduler", 0), worker(0, "b1-r2-n0")])
    assert created(p) == ["j-worker-1"]
    (new,) = p.create_pods
    assert [g["name"] for g in new["spec"]["schedulingGates"]] == [topology.GATE]
    q = queued(p)
    assert q is not None and (q["status"], q["reason"]) == ("False", "WorkloadAdmitted"), q
    assert "moved the places" in q["message"]


@pytest.mark.parametrize(
    ("node", "why"),
    [(None, "not in the cluster"), (NOT_READY, "not ready")],
    ids=["deleted", "not-ready"],
)
def test_a_place_on_a_node_the_cache_says_is_lost_waits_before_kueue_says_so(
    node: JSON | None, why: str
) -> None:
    """The pod went before Kueue wrote ``unhealthyNodes`` (or before the cache saw it):
    the node cache alone holds the pod, so that the ungater cannot send it to the lost
    node."""
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"])
    nodes = {"b1-r2-n0": READY, "b1-r2-n1": node}
    p = run(j, wl, [pod("Scheduler", 0), worker(0, "b1-r2-n0")], nodes)
    assert created(p) == []
    q = queued(p)
    assert q is not None and q["reason"] == REASON and f"b1-r2-n1 ({why}" in q["message"]


def test_a_place_on_a_ready_node_or_with_nodes_not_watched_does_not_wait() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"])
    pods = [pod("Scheduler", 0), worker(0, "b1-r2-n0")]
    ready: dict[str, JSON | None] = {"b1-r2-n0": READY, "b1-r2-n1": READY}
    assert created(run(j, wl, pods, ready)) == ["j-worker-1"]
    assert created(run(j, wl, pods, None)) == ["j-worker-1"]


def test_a_lost_node_holding_a_pod_that_runs_holds_nothing() -> None:
    """The node is NotReady but its pod is there (its template tolerates it, or it is
    not lost yet): no pod is missing there, and the others are created."""
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"])
    nodes: dict[str, JSON | None] = {"b1-r2-n0": READY, "b1-r2-n1": NOT_READY}
    p = run(j, wl, [worker(0, "b1-r2-n0"), worker(1, "b1-r2-n1")], nodes)
    assert created(p) == ["j-scheduler-0"]
    q = queued(p)
    assert q is not None and q["reason"] == "WorkloadAdmitted"


def test_the_workload_is_left_as_kueue_wrote_it() -> None:
    """Nothing of the wait is written to the Workload: Kueue owns the assignment and
    ``unhealthyNodes``."""
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"], unhealthy=["b1-r2-n1"])
    (decision,) = run(j, wl, [pod("Scheduler", 0), worker(0, "b1-r2-n0")]).scheduling
    assert isinstance(decision, kueue.Decision)
    assert decision.patch_workload is None and decision.create_workload is None
    assert decision.delete_workloads == [] and decision.release_workloads == []
    # At most PodsReady, as in any pass.
    status = (decision.workload_status or {}).get("status") or {}
    assert set(status) <= {"conditions"}, status


# --- what the operator reads -----------------------------------------------------------------


def test_kueue_reads_the_nodes_of_the_assignment_from_the_node_cache() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    j["metadata"]["uid"] = "job-uid"
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"])
    wl["metadata"]["name"] = kueue_workload.workload_name("j", "job-uid")
    cache = {"b1-r2-n0": {"metadata": {"name": "b1-r2-n0"}, **READY}}
    system = kueue.Kueue(
        None,  # type: ignore[arg-type]  # nothing is read live for an admitted job
        owned_by=lambda uid: [wl],
        in_namespace=lambda ns: [wl],
        flavor=FLAVORS.get,
        nodes=cache.get,
    )
    seen = asyncio.run(system.observe(j))
    assert seen is not None
    assert seen.nodes == {"b1-r2-n0": cache["b1-r2-n0"], "b1-r2-n1": None}
    unwatched = kueue.Kueue(
        None,  # type: ignore[arg-type]
        owned_by=lambda uid: [wl], in_namespace=lambda ns: [wl], flavor=FLAVORS.get,
    )  # fmt: skip
    seen = asyncio.run(unwatched.observe(j))
    assert seen is not None and seen.nodes is None


def test_the_message_names_what_to_look_at() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted(j, ["b1-r2-n0", "b1-r2-n1"], unhealthy=["b1-r2-n1"])
    q = queued(run(j, wl, [pod("Scheduler", 0), worker(0, "b1-r2-n0")])) or {}
    assert q["message"].startswith(
        f"MSJob ns/j: the topology assignment of its Workload {wl['metadata']['name']}"
    )
    assert "TASFailedNodeReplacement" in q["message"]
    assert q["type"] == c.QUEUED
