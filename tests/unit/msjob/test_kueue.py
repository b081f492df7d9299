"""Kueue: the Workload of an MSJob, and what the planner does in each state of it
(created, pending, admitted with flavors, evicted, finished, reshaped, deleted)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from msop.api import constants as c
from msop.kube.errors import ApiError
from msop.kube.resources import Resource
from msop.msjob import kueue, kueue_workload
from msop.msjob.plan import Observed, Plan, plan
from tests.support.builders import NOW, T0, job, pod, queue, service
from tests.support.kueue import (
    FLAVORS,
    QUEUE,
    WorkloadApi,
    admitted,
    apply_decision,
    evicted,
    kueue_of,
    queued,
    queued_job,
    wl_of,
)

JSON = dict[str, Any]


def run(
    j: JSON,
    wl: JSON | None = None,
    pods: Sequence[JSON] = (),
    others: Sequence[JSON] = (),
    flavors: dict[str, JSON | None] | None = None,
    kueue_on: bool = True,
) -> Plan:
    seen = kueue.Seen(wl, list(others), FLAVORS if flavors is None else flavors)
    obs = Observed(j, list(pods), [service()], NOW, scheduling=[seen] if kueue_on else [])
    return plan(obs)


def test_the_workload_is_named_as_kueue_names_its_own() -> None:
    digest = hashlib.sha1(b"MSJob\nmindspore.gitee.com\ntrain\nuid-1").hexdigest()
    assert kueue_workload.workload_name("train", "uid-1") == f"msjob-train-{digest[:5]}"
    long = kueue_workload.workload_name("x" * 300, "u")
    assert len(long) == 253 and long.startswith("msjob-xxx")


def test_the_workload_has_a_pod_set_per_replica_type_and_the_job_as_owner() -> None:
    j = queued_job()
    w = kueue_workload.workload(j, active=True)
    assert w["spec"]["queueName"] == QUEUE
    assert [(p["name"], p["count"]) for p in w["spec"]["podSets"]] == [
        ("scheduler", 1),
        ("worker", 2),
    ]
    container = w["spec"]["podSets"][1]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "1"}}
    assert w["metadata"]["finalizers"] == [kueue_workload.FINALIZER]
    assert w["metadata"]["labels"][kueue_workload.JOB_UID_LABEL] == "u-1"
    owner = w["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("MSJob", "u-1", True)


def test_a_new_queued_job_gets_a_workload_and_no_pod() -> None:
    p = run(queued_job())
    assert queue(p).create_workload is not None and p.create_pods == []
    q = queued(p)
    assert q is not None and q["status"] == "True" and q["reason"] == kueue_workload.REASON_PENDING
    assert "startTime" not in (p.status or {})
    assert [e.reason for e in p.events] == [kueue_workload.REASON_PENDING]


def test_jobs_without_the_label_or_without_the_flag_are_untouched() -> None:
    plain = job({"Scheduler": (1, "Never"), "Worker": (2, "Never")})
    for p in (run(plain), run(queued_job(), kueue_on=False)):
        assert queue(p).create_workload is None
        assert len(p.create_pods) == 3


def test_a_pending_workload_holds_the_pods_and_says_what_quota_is_short() -> None:
    j = queued_job()
    wl = wl_of(j, ("QuotaReserved", "False", "Pending"))
    wl["status"]["conditions"][0]["message"] = "couldn't assign flavors: insufficient quota"
    p = run(j, wl)
    assert p.create_pods == [] and queue(p).create_workload is None
    q = queued(p)
    assert q is not None and "insufficient quota" in q["message"] and QUEUE in q["message"]


def test_an_admitted_workload_runs_the_pods_on_their_flavors() -> None:
    j = queued_job()
    svc = service()
    obs = Observed(j, [], [svc], NOW, scheduling=[kueue.Seen(admitted(j), flavors=FLAVORS)])
    p = plan(obs)
    by_name = {x["metadata"]["name"]: x for x in p.create_pods}
    assert set(by_name) == {"j-scheduler-0", "j-worker-0", "j-worker-1"}
    assert by_name["j-scheduler-0"]["spec"]["nodeSelector"] == {"pool": "a"}
    worker = by_name["j-worker-1"]
    assert worker["spec"]["nodeSelector"] == {"pool": "b"}
    assert worker["spec"]["tolerations"] == [{"key": "pool", "operator": "Equal", "value": "b"}]
    assert worker["metadata"]["labels"][kueue_workload.PODSET_LABEL] == "worker"
    q = queued(p)
    assert (
        q is not None and q["status"] == "False" and q["reason"] == kueue_workload.REASON_ADMITTED
    )
    assert "'cq'" in q["message"]
    assert p.status is not None and p.status["startTime"]


def test_the_templates_own_node_selector_is_kept_and_admission_check_updates_apply() -> None:
    j = queued_job()
    tmpl = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
    tmpl["nodeSelector"] = {"disk": "ssd"}
    wl = admitted(j)
    wl["status"]["admissionChecks"] = [
        {"name": "prov", "state": "Ready",
         "podSetUpdates": [{"name": "worker", "nodeSelector": {"zone": "z1"},
                            "annotations": {"note": "x"}}]},
    ]  # fmt: skip
    obs = Observed(j, [], [service()], NOW, scheduling=[kueue.Seen(wl, flavors=FLAVORS)])
    worker = next(x for x in plan(obs).create_pods if "worker-0" in
                  x["metadata"]["name"])  # fmt: skip
    assert worker["spec"]["nodeSelector"] == {"pool": "b", "zone": "z1", "disk": "ssd"}
    assert worker["metadata"]["annotations"]["note"] == "x"


def test_a_flavor_not_yet_in_the_cache_holds_the_pods_briefly() -> None:
    j = queued_job()
    p = run(j, admitted(j), flavors={"pool-a": FLAVORS["pool-a"]})
    assert p.create_pods == [] and p.requeue_after == 1.0


def test_an_evicted_job_stops_its_pods_then_hands_the_workload_back() -> None:
    j = queued_job(status={"conditions": [], "startTime": T0})
    wl = evicted(j)
    pods = [pod("Scheduler", 0), pod("Worker", 0), pod("Worker", 1)]
    p = run(j, wl, pods)
    assert len(p.delete_pods) == 3 and p.create_pods == []
    assert queue(p).workload_status is None  # the pods still hold what the quota counted
    q = queued(p)
    assert (
        q is not None
        and q["reason"] == kueue_workload.REASON_EVICTED
        and "Preempted" in q["message"]
    )
    assert "startTime" not in (p.status or {})

    p = run(j, wl, [])
    patch = queue(p).workload_status
    assert patch is not None and patch["status"]["admission"] is None
    assert patch["metadata"]["resourceVersion"] == "7"
    conds = {x["type"]: x for x in patch["status"]["conditions"]}
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == (
        "False",
        "Pending",
    )
    assert conds["Requeued"]["status"] == "True" and conds["Requeued"]["reason"] == "Preempted"
    assert conds["Admitted"]["status"] == "False"
    assert conds["Evicted"]["status"] == "True"  # Kueue's to clear


def test_an_eviction_is_not_a_failure_and_counts_no_restart() -> None:
    j = queued_job(status={"conditions": [], "replicaStatuses": {}})
    p = run(j, evicted(j), [pod("Worker", 0, phase="Failed", exit_code=137)])
    assert p.status is not None
    types = {x["type"] for x in p.status["conditions"] if x["status"] == "True"}
    assert c.FAILED not in types and c.RESTARTING not in types
    assert "restarts" not in (p.status["replicaStatuses"].get("Worker") or {})


def test_a_stopped_queue_that_deactivated_the_workload_is_not_requeued_as_preempted() -> None:
    j = queued_job()
    p = run(j, evicted(j, reason="Deactivated"), [])
    workload_status = queue(p).workload_status
    assert workload_status is not None
    conds = {x["type"]: x for x in workload_status["status"]["conditions"]}
    assert conds["Requeued"]["status"] == "False"


def test_suspending_a_queued_job_deactivates_its_workload_and_resuming_reactivates() -> None:
    j = queued_job(run_policy={"suspend": True})
    wl = admitted(j)
    p = run(j, wl, [pod("Worker", 0)])
    assert queue(p).patch_workload == {"spec": {"active": False}}
    assert len(p.delete_pods) == 1

    wl["spec"]["active"] = False
    wl["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "inactive",
         "lastTransitionTime": T0}
    )  # fmt: skip
    p = run(j, wl, [])
    assert queue(p).workload_status is not None  # quota released while suspended

    resumed = queued_job(status={"conditions": [
        {"type": c.SUSPENDED, "status": "True", "reason": "MSJobSuspended", "message": "s",
         "lastTransitionTime": T0, "lastUpdateTime": T0}]})  # fmt: skip
    idle = wl_of(resumed, ("QuotaReserved", "False", "Pending"))
    idle["spec"]["active"] = False
    p = run(resumed, idle, [])
    assert queue(p).patch_workload == {"spec": {"active": True}}
    assert p.create_pods == []


def _handed_back(j: JSON, evicted_reason: str, requeued: tuple[str, str, str], at: str) -> JSON:
    """An evicted Workload after msop handed it back: no quota, ``Evicted`` still True."""
    wl = wl_of(
        j, ("Evicted", "True", evicted_reason), requeued,
        ("QuotaReserved", "False", "Pending"), ("Admitted", "False", "NoReservation"),
    )  # fmt: skip
    next(x for x in wl["status"]["conditions"] if x["type"] == "Requeued")["lastTransitionTime"] = (
        at
    )
    qr = next(x for x in wl["status"]["conditions"] if x["type"] == "QuotaReserved")
    qr["message"] = "couldn't assign flavors to pod set worker: insufficient quota for cpu"
    return wl


LATER = "2026-01-01T11:59:30Z"
EARLIER = "2026-01-01T11:58:30Z"


def test_a_resumed_job_waits_for_quota_not_for_its_old_eviction() -> None:
    # Kueue keeps Evicted=True (Deactivated) after it requeues the reactivated Workload.
    j = queued_job()
    p = run(j, _handed_back(j, "Deactivated", ("Requeued", "True", "Reactivated"), LATER))
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PENDING, q
    assert "insufficient quota for cpu" in q["message"]


def test_the_pass_that_resumes_a_job_says_it_waits_not_that_it_was_evicted() -> None:
    resumed = queued_job(status={"conditions": [
        {"type": c.SUSPENDED, "status": "True", "reason": "MSJobSuspended", "message": "s",
         "lastTransitionTime": T0, "lastUpdateTime": T0}]})  # fmt: skip
    wl = _handed_back(resumed, "Deactivated", ("Requeued", "False", "Deactivated"), T0)
    wl["spec"]["active"] = False
    p = run(resumed, wl)
    assert queue(p).patch_workload == {"spec": {"active": True}}
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PENDING, q
    assert [e.reason for e in p.events if e.reason.startswith("Workload")] == [
        kueue_workload.REASON_PENDING
    ]
    # Active again before Kueue wrote its Requeued: the deactivation no longer explains it.
    wl["spec"]["active"] = True
    q = queued(run(queued_job(), wl))
    assert q is not None and q["reason"] == kueue_workload.REASON_PENDING, q


def test_a_preempted_job_handed_back_still_says_it_was_evicted() -> None:
    j = queued_job()
    p = run(j, _handed_back(j, "Preempted", ("Requeued", "True", "Preempted"), LATER))
    q = queued(p)
    assert (
        q is not None
        and q["reason"] == kueue_workload.REASON_EVICTED
        and "Preempted" in q["message"]
    )


@pytest.mark.parametrize(
    ("requeued", "reason"),
    [
        (("Requeued", "False", "PodsReadyTimeout"), kueue_workload.REASON_EVICTED),  # in backoff
        (("Requeued", "True", "BackoffFinished"), kueue_workload.REASON_PENDING),
    ],
)
def test_a_pods_ready_timeout_is_the_wait_until_kueue_requeues_after_backoff(
    requeued: tuple[str, str, str], reason: str
) -> None:
    j = queued_job()
    p = run(j, _handed_back(j, "PodsReadyTimeout", requeued, LATER))
    q = queued(p)
    assert q is not None and q["reason"] == reason


def test_a_requeue_older_than_the_eviction_does_not_hide_it() -> None:
    j = queued_job()
    # Reactivated once, then preempted (msop has not handed it back yet).
    wl = _handed_back(j, "Preempted", ("Requeued", "True", "Reactivated"), EARLIER)
    next(x for x in wl["status"]["conditions"] if x["type"] == "Evicted")["lastTransitionTime"] = (
        LATER
    )
    q = queued(run(j, wl))
    assert q is not None and q["reason"] == kueue_workload.REASON_EVICTED


def test_a_workload_deactivated_by_someone_else_keeps_the_job_queued() -> None:
    j = queued_job()
    wl = wl_of(j, ("QuotaReserved", "False", "Pending"))
    wl["spec"]["active"] = False
    p = run(j, wl)
    assert queue(p).patch_workload is None and p.create_pods == []
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_INACTIVE


def test_a_finished_job_finishes_its_workload_and_drops_the_finalizer() -> None:
    j = queued_job()
    wl = admitted(j)
    pods = [pod("Scheduler", 0), pod("Worker", 0, "Succeeded", 0), pod("Worker", 1, "Succeeded", 0)]
    p = run(j, wl, pods)
    assert p.status is not None
    assert any(x["type"] == c.SUCCEEDED for x in p.status["conditions"])
    workload_status = queue(p).workload_status
    assert workload_status is not None
    fin = next(x for x in workload_status["status"]["conditions"] if x["type"] == "Finished")
    assert (fin["status"], fin["reason"]) == ("True", "Succeeded")
    assert queue(p).release_workloads == [wl]
    assert kueue_workload.finalizer_patch(wl) == {
        "metadata": {"resourceVersion": "7", "finalizers": []}
    }


def test_a_scaled_job_admitted_for_the_old_size_is_stopped_and_queued_again() -> None:
    j = queued_job()
    wl = admitted(j)
    j["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 3
    p = run(j, wl, [pod("Worker", 0)])
    assert len(p.delete_pods) == 1 and queue(p).delete_workloads == []
    p = run(j, wl, [])
    assert queue(p).delete_workloads == [wl] and queue(p).release_workloads == [wl]
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PENDING


def test_a_pending_workload_follows_the_job_in_place() -> None:
    j = queued_job()
    wl = wl_of(j, ("QuotaReserved", "False", "Pending"))
    j["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 3
    p = run(j, wl)
    patch_workload = queue(p).patch_workload
    assert patch_workload is not None
    assert [x["count"] for x in patch_workload["spec"]["podSets"]] == [1, 3]
    j["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 2
    j["metadata"]["labels"][kueue_workload.QUEUE_LABEL] = "team-b"
    assert queue(run(j, wl)).patch_workload == {"spec": {"queueName": "team-b"}}


def test_a_queue_change_while_admitted_is_refused_with_a_warning() -> None:
    j = queued_job()
    wl = admitted(j)
    j["metadata"]["labels"][kueue_workload.QUEUE_LABEL] = "team-b"
    p = run(j, wl, [])
    assert queue(p).patch_workload is None
    assert [e.type for e in p.events if e.reason == "QueueNameChangeRefused"] == ["Warning"]
    assert p.create_pods  # it keeps running where it was admitted


def test_a_workload_deleted_under_the_job_stops_it_and_a_new_one_is_queued() -> None:
    j = queued_job()
    wl = admitted(j)
    wl["metadata"]["deletionTimestamp"] = T0
    p = run(j, wl, [pod("Worker", 0)])
    assert len(p.delete_pods) == 1 and queue(p).release_workloads == [wl]
    assert queue(p).create_workload is None
    p = run(j, None, [])
    assert queue(p).create_workload is not None


def test_workloads_left_by_an_earlier_spec_are_deleted_before_a_new_one() -> None:
    j = queued_job()
    stale = admitted(j)
    stale["metadata"]["name"] = "msjob-j-old"
    p = run(j, None, [], others=[stale])
    assert queue(p).delete_workloads == [stale] and queue(p).create_workload is None


def test_priority_comes_from_the_workload_priority_class_label_first() -> None:
    j = queued_job()
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "high"
    assert kueue_workload.priority_source(j) == ("PriorityClass", "high")
    j["metadata"]["labels"][kueue_workload.PRIORITY_CLASS_LABEL] = "urgent"
    assert kueue_workload.priority_source(j) == ("WorkloadPriorityClass", "urgent")
    assert kueue_workload.priority_ref("WorkloadPriorityClass", "urgent", 1000) == {
        "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                             "name": "urgent"},
        "priority": 1000,
    }  # fmt: skip


def test_a_running_job_keeps_the_admitted_reason_without_gang_scheduling() -> None:
    j = queued_job(status={"conditions": [
        {"type": c.QUEUED, "status": "False", "reason": kueue_workload.REASON_ADMITTED,
         "message": "m", "lastTransitionTime": T0, "lastUpdateTime": T0}]})  # fmt: skip
    pods = [pod("Scheduler", 0), pod("Worker", 0), pod("Worker", 1)]
    p = run(j, admitted(j), pods)
    assert p.status is not None
    assert any(x["type"] == c.RUNNING and x["status"] == "True" for x in p.status["conditions"])
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_ADMITTED


# --- the reconciler's Workload writes ----------------------------------------------------


def _decided(wl: JSON | None, **writes: Any) -> kueue.Decision:
    """A Decision about ``wl`` with the given writes."""
    d = kueue.Seen(wl).decide()
    for name, value in writes.items():
        setattr(d, name, value)
    return d


def test_the_workload_is_created_with_the_priority_of_its_class() -> None:
    j = queued_job()
    j["metadata"]["labels"][kueue_workload.PRIORITY_CLASS_LABEL] = "urgent"
    api = WorkloadApi(None)
    seen = asyncio.run(kueue_of(api).observe(j))
    assert api.calls == [("get", "WorkloadPriorityClass", "urgent")]
    assert seen is not None
    assert seen.priority == kueue_workload.priority_ref("WorkloadPriorityClass", "urgent", 1000)
    p = plan(Observed(j, [], [service()], NOW, scheduling=[seen]))
    created = queue(p).create_workload
    assert created is not None and created["spec"]["priority"] == 1000
    assert apply_decision(api, queue(p), j)
    assert api.calls[1][0:2] == ("create", "Workload")


def test_a_spec_patch_then_the_status_patch_on_the_newer_version_then_the_finalizer() -> None:
    j = queued_job()
    wl = admitted(j)
    d = _decided(
        wl,
        patch_workload={"spec": {"active": False}},
        workload_status=kueue_workload.finish_patch(wl, True, "done", T0),
        release_workloads=[wl],
    )
    api = WorkloadApi(wl)
    assert apply_decision(api, d, j)
    kinds = [(c_[0], c_[1]) for c_ in api.calls]
    assert kinds == [("patch", "Workload/"), ("patch", "Workload/status"), ("patch", "Workload/")]
    assert api.calls[1][2]["metadata"]["resourceVersion"] == "8"  # after the spec patch
    assert api.calls[2][2]["metadata"] == {"resourceVersion": "9", "finalizers": []}


def test_a_workload_that_moved_is_planned_again() -> None:
    j = queued_job()
    wl = evicted(j)
    d = _decided(wl, workload_status=kueue_workload.requeue_patch(wl, T0))
    assert not apply_decision(WorkloadApi(wl, conflict=True), d, j)


def test_a_missing_priority_class_holds_the_workload_and_says_which() -> None:
    j = queued_job()
    j["metadata"]["labels"][kueue_workload.PRIORITY_CLASS_LABEL] = "nope"

    class Missing(WorkloadApi):
        async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
            raise ApiError(404, "NotFound", f'"{name}" not found')

    seen = asyncio.run(kueue_of(Missing(None)).observe(j))
    assert seen is not None
    assert seen.priority == kueue_workload.MissingClass("WorkloadPriorityClass", "nope")
    p = plan(Observed(j, [], [service()], NOW, scheduling=[seen]))
    assert queue(p).create_workload is None and p.create_pods == []
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PRIORITY_CLASS_NOT_FOUND
    assert "WorkloadPriorityClass 'nope' does not exist" in q["message"]
    assert "has not looked at its Workload" not in q["message"]
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "PriorityClassNotFound")]
    assert p.requeue_after == 1.0  # looked up again, then less often
    later = plan(
        Observed({**j, "status": p.status}, [], [service()], NOW + timedelta(seconds=300),
                 scheduling=[seen]),
    )  # fmt: skip
    assert later.requeue_after == 60.0 and later.events == []


def test_pods_ready_follows_kueues_reasons() -> None:
    j = queued_job()
    wl = admitted(j)
    assert kueue_workload.pods_ready(wl, False)[:2] == ("False", "WaitForStart")
    assert kueue_workload.pods_ready(wl, True)[:2] == ("True", "Started")
    patch = kueue_workload.pods_ready_patch(wl, True, T0)
    assert patch is not None
    wl["status"]["conditions"] = patch["status"]["conditions"]
    assert kueue_workload.pods_ready_patch(wl, True, T0) is None  # already says so: no write
    assert kueue_workload.pods_ready(wl, False)[:2] == ("False", "WaitForRecovery")
    wl["status"]["conditions"][-1].update(status="False", reason="WaitForRecovery")
    assert kueue_workload.pods_ready(wl, True)[:2] == ("True", "Recovered")


def test_an_admitted_job_reports_pods_ready_once_every_pod_runs() -> None:
    j = queued_job()
    p = run(j, admitted(j), [pod("Scheduler", 0), pod("Worker", 0), pod("Worker", 1)])
    workload_status = queue(p).workload_status
    assert workload_status is not None
    ready = next(x for x in workload_status["status"]["conditions"] if x["type"] == "PodsReady")
    assert (ready["status"], ready["reason"]) == ("True", "Started")
    p = run(j, admitted(j), [pod("Scheduler", 0)])
    workload_status = queue(p).workload_status
    assert workload_status is not None
    ready = next(x for x in workload_status["status"]["conditions"] if x["type"] == "PodsReady")
    assert (ready["status"], ready["reason"]) == ("False", "WaitForStart")
