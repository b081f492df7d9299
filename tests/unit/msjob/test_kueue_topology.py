"""Kueue's Topology-Aware Scheduling for MSJobs: the topology requests of the Workload's
pod sets (from the templates' annotations, refused as Kueue's job webhook refuses them),
the pods of a pod set placed by topology (gated for Kueue's ungater), and what the planner
does with gated pods (nothing)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from msop.api import constants as c
from msop.msjob import desired, kueue, kueue_workload, topology
from msop.msjob.plan import Observed, Plan, plan
from msop.msjob.projection import pod_projection
from msop.msjob.scheduling import Placement
from tests.support.builders import NOW, T0, job, pod, queue, running_status, service
from tests.support.kueue import FLAVORS, assignment_of, queued, queued_job, tas_job, wl_of

JSON = dict[str, Any]
INDEX = c.LABEL_REPLICA_INDEX
HOSTS = ["b1-r2-n0", "b1-r2-n1"]


def admitted_by_tas(j: JSON, **worker: Any) -> JSON:
    """``j``'s Workload admitted, the worker pod set with ``worker`` in its assignment."""
    admission = {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {"name": "scheduler", "flavors": {"cpu": "pool-a"}, "count": 1},
            {"name": "worker", "flavors": {"cpu": "pool-b"}, "count": 2, **worker},
        ],
    }
    return wl_of(
        j, ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
        admission=admission,
    )  # fmt: skip


def run(
    j: JSON, wl: JSON | None = None, pods: Sequence[JSON] = (), svc: JSON | None = None
) -> Plan:
    seen = kueue.Seen(wl, [], FLAVORS)
    return plan(Observed(j, list(pods), [svc or service()], NOW, scheduling=[seen]))


def created(p: Plan) -> dict[str, JSON]:
    return {x["metadata"]["name"]: x for x in p.create_pods}


def gates(pod_: JSON) -> list[str]:
    return [g["name"] for g in pod_["spec"].get("schedulingGates") or []]


# --- the request -----------------------------------------------------------------------------


def test_templates_without_topology_annotations_get_no_request() -> None:
    pod_sets = kueue_workload.workload(tas_job({"note": "x"}), active=True)["spec"]["podSets"]
    assert [ps.get("topologyRequest") for ps in pod_sets] == [None, None]


@pytest.mark.parametrize(
    ("annotations", "want"),
    [
        ({topology.REQUIRED: "cloud.example/rack"}, {"required": "cloud.example/rack"}),
        ({topology.PREFERRED: "cloud.example/rack"}, {"preferred": "cloud.example/rack"}),
        ({topology.UNCONSTRAINED: "true"}, {"unconstrained": True}),
        ({topology.UNCONSTRAINED: "false"}, {"unconstrained": False}),  # still TAS, as in Kueue
        (
            {topology.REQUIRED: "block", topology.SLICE_REQUIRED: "rack", topology.SLICE_SIZE: "2"},
            {"required": "block", "podSetSliceRequiredTopology": "rack", "podSetSliceSize": 2},
        ),
        (
            {topology.SLICE_REQUIRED: "rack", topology.SLICE_SIZE: "1"},
            {"podSetSliceRequiredTopology": "rack", "podSetSliceSize": 1},
        ),
    ],
)
def test_the_pod_set_asks_what_its_template_says_and_names_the_replica_index(
    annotations: dict[str, str], want: JSON
) -> None:
    j = tas_job(annotations)
    scheduler, worker = kueue_workload.workload(j, active=True)["spec"]["podSets"]
    assert worker["topologyRequest"] == {**want, "podIndexLabel": INDEX}
    assert "topologyRequest" not in scheduler
    assert worker["template"]["metadata"]["annotations"] == annotations
    assert topology.problems(j) == []
    p = run(j)
    create_workload = queue(p).create_workload
    assert create_workload is not None
    assert create_workload["spec"]["podSets"][1]["topologyRequest"]["podIndexLabel"] == (
        "training.kubeflow.org/replica-index"
    )


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        ({topology.REQUIRED: "rack", topology.PREFERRED: "rack"}, "at most one of"),
        ({topology.PREFERRED: "rack", topology.UNCONSTRAINED: "true"}, "at most one of"),
        ({topology.REQUIRED: "not a label!"}, "'not a label!' is not a node label name"),
        ({topology.PREFERRED: "example.com/" + "r" * 60}, "longer than the 63 characters"),
        ({topology.UNCONSTRAINED: "yes"}, "'yes' is not a boolean"),
        (
            {
                topology.REQUIRED: "block",
                topology.SLICE_REQUIRED: "rack",
                topology.SLICE_SIZE: "two",
            },
            "'two' is not an integer from 1 to the replica count (2)",
        ),
        ({topology.SLICE_REQUIRED: "rack", topology.SLICE_SIZE: "3"}, "'3' is not an integer"),
        ({topology.SLICE_REQUIRED: "rack", topology.SLICE_SIZE: "0"}, "'0' is not an integer"),
        ({topology.SLICE_REQUIRED: "rack", topology.SLICE_SIZE: "9" * 12}, "is not an integer"),
        ({topology.SLICE_REQUIRED: "rack"}, f"needs {topology.SLICE_SIZE}"),
        ({topology.SLICE_SIZE: "1"}, f"needs {topology.SLICE_REQUIRED}"),
        (
            {topology.REQUIRED: "rack", "kueue.x-k8s.io/podset-group-name": "g"},
            "kueue.x-k8s.io/podset-group-name is not supported by msop",
        ),
    ],
)
def test_annotations_kueue_would_refuse_hold_the_workload_with_a_warning(
    annotations: dict[str, str], says: str
) -> None:
    j = tas_job(annotations)
    kueue_workload.pod_sets(j)  # never raises on them: a reshape patches the pod sets
    p = run(j)
    assert queue(p).create_workload is None and p.create_pods == []
    q = queued(p)
    assert q is not None and (q["status"], q["reason"]) == ("True", topology.REASON_INVALID)
    assert says in q["message"] and "the Worker template" in q["message"], q["message"]
    assert q["message"].startswith("MSJob ns/j: ")
    warnings = [e for e in p.events if e.reason == topology.REASON_INVALID]
    assert [e.type for e in warnings] == ["Warning"]


def test_both_levels_follow_kueues_precedence_where_it_is_read() -> None:
    both = {"metadata": {"annotations": {topology.PREFERRED: "a", topology.REQUIRED: "b"}}}
    assert topology.request(both) == {"required": "b", "podIndexLabel": INDEX}


def test_a_fixed_template_gets_its_workload() -> None:
    bad = tas_job({topology.UNCONSTRAINED: "yes"})
    status = run(bad).status
    fixed = tas_job({topology.UNCONSTRAINED: "true"}, status=status)
    p = run(fixed)
    assert queue(p).create_workload is not None
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PENDING


def test_a_job_without_replicas_of_a_type_is_not_judged_by_its_template() -> None:
    j = tas_job({topology.UNCONSTRAINED: "yes"})
    j["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 0
    assert topology.problems(j) == []


# --- the pods ----------------------------------------------------------------------------------


def test_pods_placed_by_topology_are_created_gated_for_kueues_ungater() -> None:
    j = tas_job({topology.REQUIRED: "cloud.example/rack"})
    wl = admitted_by_tas(j, topologyAssignment=assignment_of(HOSTS))
    pods = created(run(j, wl))
    assert set(pods) == {"j-scheduler-0", "j-worker-0", "j-worker-1"}
    for i in range(2):
        worker = pods[f"j-worker-{i}"]
        assert gates(worker) == [topology.GATE]
        meta = worker["metadata"]
        assert meta["annotations"] == {
            topology.REQUIRED: "cloud.example/rack",  # the template's: Kueue's mark of a TAS pod
            topology.WORKLOAD_ANNOTATION: wl["metadata"]["name"],
        }
        assert meta["labels"][kueue_workload.PODSET_LABEL] == "worker"
        assert meta["labels"][INDEX] == str(i)  # the request's podIndexLabel: rank i
        # The flavor's labels only: the ungater adds the domain's when it removes the gate.
        assert worker["spec"]["nodeSelector"] == {"pool": "b"}
    scheduler = pods["j-scheduler-0"]
    assert gates(scheduler) == []
    assert topology.WORKLOAD_ANNOTATION not in (scheduler["metadata"].get("annotations") or {})


def test_an_admission_without_a_topology_assignment_gates_nothing() -> None:
    j = tas_job({topology.PREFERRED: "cloud.example/rack"})  # asked, but the flavor has no topology
    pods = created(run(j, admitted_by_tas(j)))
    assert len(pods) == 3
    for p in pods.values():
        assert gates(p) == []
        assert topology.WORKLOAD_ANNOTATION not in (p["metadata"].get("annotations") or {})


def test_a_pod_set_placed_by_topology_without_asking_is_marked_unconstrained() -> None:
    """Every flavor of the ClusterQueue has a topology: Kueue places the pod set anyway;
    its ungater looks only at pods with a topology annotation."""
    j = queued_job()
    wl = admitted_by_tas(j, topologyAssignment=assignment_of(HOSTS))
    worker = created(run(j, wl))["j-worker-0"]
    assert gates(worker) == [topology.GATE]
    assert worker["metadata"]["annotations"] == {
        topology.UNCONSTRAINED: "true",
        topology.WORKLOAD_ANNOTATION: wl["metadata"]["name"],
    }


def test_a_delayed_topology_request_gates_the_pods_until_kueue_assigns() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted_by_tas(j, delayedTopologyRequest="Pending")
    assert gates(created(run(j, wl))["j-worker-1"]) == [topology.GATE]


def test_an_admission_checks_update_is_applied_over_the_topology_placement() -> None:
    j = tas_job({topology.REQUIRED: "rack"})
    wl = admitted_by_tas(j, topologyAssignment=assignment_of(HOSTS))
    wl["status"]["admissionChecks"] = [
        {"name": "prov", "state": "Ready",
         "podSetUpdates": [{"name": "worker", "annotations": {"note": "x"}}]},
    ]  # fmt: skip
    placed = kueue_workload.placements(wl, FLAVORS)
    assert placed is not None
    worker = placed[c.WORKER]
    assert worker.scheduling_gates == [topology.GATE]
    assert worker.annotations == {topology.WORKLOAD_ANNOTATION: wl["metadata"]["name"], "note": "x"}
    assert placed[c.SCHEDULER].scheduling_gates == []


def test_the_gate_joins_the_templates_gates_once() -> None:
    j = job({"Worker": (1, "Never")})
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["schedulingGates"] = [
        {"name": "example.com/mine"}, {"name": topology.GATE}]  # fmt: skip
    both = Placement(scheduling_gates=[topology.GATE]) + Placement(
        scheduling_gates=["example.com/other", topology.GATE]
    )
    assert both.scheduling_gates == [topology.GATE, "example.com/other"]
    p = desired.pod(j, "Worker", 0, sched_host=None, placement=both)
    assert gates(p) == ["example.com/mine", topology.GATE, "example.com/other"]
    template = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
    assert len(template["schedulingGates"]) == 2  # the job is not written to


def test_msrun_ranks_follow_the_replica_index_the_ungater_orders_by() -> None:
    """msrun gives local worker k of pod i the rank i * localWorkers + k (its
    ``--node_rank``, msop's ``MS_NODE_RANK``): pod i on the i-th place of the assignment
    puts the ranks in topology order."""
    j = job({"Worker": (3, "ExitCode")}, msrun={"localWorkers": 2})
    j["metadata"]["labels"] = {kueue_workload.QUEUE_LABEL: "team-a"}
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["metadata"] = {
        "annotations": {topology.REQUIRED: "rack"}}  # fmt: skip
    wl = wl_of(
        j, ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
        admission={"clusterQueue": "cq", "podSetAssignments": [
            {"name": "worker", "flavors": {"cpu": "pool-b"}, "count": 3,
             "topologyAssignment": assignment_of(["b1-r2-n0", "b1-r2-n1", "b1-r2-n2"])}]},
    )  # fmt: skip
    assert wl["spec"]["podSets"][0]["topologyRequest"]["podIndexLabel"] == INDEX
    svc = desired.scheduler_service(j) | {"spec": {"clusterIP": "10.0.0.9", "ports": [
        {"name": "msjob-port", "port": 8118}]}}  # fmt: skip
    svc["metadata"]["uid"] = "svc-uid"
    pods = created(run(j, wl, svc=svc))
    assert len(pods) == 3
    for i in range(3):
        p = pods[f"j-worker-{i}"]
        env = {e["name"]: e.get("value") for e in p["spec"]["containers"][0]["env"]}
        assert env[c.ENV_NODE_RANK] == p["metadata"]["labels"][INDEX] == str(i)
        assert gates(p) == [topology.GATE]


# --- gated pods and the planner ------------------------------------------------------------


def gated(rtype: str, index: int) -> JSON:
    """A pod as the API server holds it while Kueue's gate is on it."""
    p = pod(rtype, index, phase="Pending")
    p["spec"]["schedulingGates"] = [{"name": topology.GATE}]
    p["status"] = {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                        "message": "Scheduling is blocked due to non-empty scheduling gates"}],
    }  # fmt: skip
    return p


def ungated(rtype: str, index: int) -> JSON:
    """The same pod once the ungater has removed the gate and placed it on a host."""
    p = pod(rtype, index)
    p["spec"]["nodeSelector"] = {"pool": "b", "kubernetes.io/hostname": HOSTS[index]}
    p["spec"]["nodeName"] = HOSTS[index]
    return p


@pytest.mark.parametrize("projected", [False, True], ids=["full", "cached"])
@pytest.mark.parametrize("worker", [gated, ungated], ids=["gated", "ungated"])
def test_pods_held_or_placed_by_the_ungater_are_left_alone(projected: bool, worker: Any) -> None:
    j = tas_job({topology.REQUIRED: "rack"}, status=running_status(replicaStatuses={}))
    wl = admitted_by_tas(j, topologyAssignment=assignment_of(HOSTS))
    pods = [pod("Scheduler", 0), worker("Worker", 0), worker("Worker", 1)]
    if projected:
        pods = [pod_projection(copy.deepcopy(x)) for x in pods]
    p = run(j, wl, pods)
    assert p.create_pods == [] and p.delete_pods == [] and p.force_delete_pods == []
    assert p.status is not None
    true = {x["type"] for x in p.status["conditions"] if x["status"] == "True"}
    assert not true & {c.FAILED, c.RESTARTING, c.SUCCEEDED}
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_ADMITTED
    assert p.status["replicaStatuses"]["Worker"].get("failed", 0) == 0
    assert "startTime" in p.status and p.status["startTime"] == T0
