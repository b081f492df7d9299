"""MultiKueue: a job dispatched from the manager cluster (``spec.managedBy:
kueue.x-k8s.io/multikueue``) is only queued there, and its copy on a worker cluster runs
under the Workload MultiKueue pre-built for it."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from msop.api import constants as c
from msop.api.validation import validate
from msop.kube.contact import Outage
from msop.kube.objects import format_time
from msop.msjob import gang, kueue, kueue_workload
from msop.msjob.plan import Observed, Plan, plan
from msop.msjob.scheduling import Seen
from msop.msjob.settings import WorkerLost
from tests.support.builders import NOW, T0, pod, queue, service, status_of
from tests.support.kueue import (
    ADMISSION,
    FLAVORS,
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
WORKER = "worker-2"


def dispatched_job(**kw: Any) -> JSON:
    j = queued_job(**kw)
    j["spec"]["managedBy"] = c.MANAGED_BY_MULTIKUEUE
    return j


def on_worker(wl: JSON, cluster: str = WORKER) -> JSON:
    wl["status"]["clusterName"] = cluster
    return wl


def run(j: JSON, wl: JSON | None = None, *, pods: list[JSON] | None = None) -> Plan:
    seen = asyncio.run(
        kueue.Kueue(
            WorkloadApi(wl),
            owned_by=lambda uid: [wl] if wl is not None else [],
            in_namespace=lambda ns: [wl] if wl is not None else [],
            flavor=FLAVORS.get,
        ).observe(j)
    )
    scheduling: list[Seen] = [seen] if seen is not None else []
    return plan(Observed(j, pods or [], [service()], NOW, scheduling=scheduling))


# --- the API --------------------------------------------------------------------------------


def test_managed_by_is_read_from_spec_then_from_run_policy() -> None:
    from msop.api.types import MSJob

    j = queued_job()
    assert MSJob(j).spec.managed_by is None
    j["spec"]["runPolicy"] = {"managedBy": "example.com/other"}
    assert MSJob(j).spec.managed_by == "example.com/other"
    j["spec"]["runPolicy"] = {}
    j["spec"]["managedBy"] = c.MANAGED_BY_MULTIKUEUE
    assert MSJob(j).spec.managed_by == c.MANAGED_BY_MULTIKUEUE


def test_multikueue_in_run_policy_is_refused_and_names_the_field() -> None:
    j = queued_job()
    j["spec"]["runPolicy"] = {"managedBy": c.MANAGED_BY_MULTIKUEUE}
    errors = validate(j)
    assert [e.path for e in errors] == ["spec.runPolicy.managedBy"]
    assert "spec.managedBy" in errors[0].message


def test_the_two_managed_by_fields_must_agree() -> None:
    j = dispatched_job()
    j["spec"]["runPolicy"] = {"managedBy": c.MANAGED_BY_MSOP}
    assert [e.path for e in validate(j)] == ["spec.managedBy"]
    j["spec"]["runPolicy"] = {"managedBy": c.MANAGED_BY_MULTIKUEUE}
    assert [e.path for e in validate(j)] == ["spec.runPolicy.managedBy"]
    j = queued_job()
    j["spec"]["managedBy"] = "x" * 64
    assert [e.path for e in validate(j)] == ["spec.managedBy"]
    j["spec"]["managedBy"] = 5
    assert [e.path for e in validate(j)] == ["spec.managedBy"]


# --- the manager cluster --------------------------------------------------------------------


def test_a_dispatched_job_gets_a_workload_and_a_status_but_never_a_pod() -> None:
    j = dispatched_job()
    p = run(j)
    assert queue(p).create_workload is not None
    assert p.create_pods == [] and p.create_services == []
    waiting = queued(p)
    assert waiting is not None and waiting["reason"] == kueue_workload.REASON_PENDING
    created = next(x for x in status_of(p)["conditions"] if x["type"] == c.CREATED)
    assert created["status"] == "True"


def test_a_dispatched_job_waits_with_the_admission_checks_message() -> None:
    j = dispatched_job()
    wl = wl_of(j, ("QuotaReserved", "True", "QuotaReserved"), admission=ADMISSION)
    wl["status"]["admissionChecks"] = [
        {"name": "multikueue", "state": "Pending", "message": "no worker has quota"},
    ]
    p = run(j, wl)
    q = queued(p)
    assert q is not None and q["status"] == "True"
    assert "multikueue: no worker has quota" in q["message"]
    assert p.create_pods == []


WORKER_SAYS = 'The workload got no reservation on "w1": requests must not exceed its limits'


def test_an_evicted_dispatched_job_says_what_its_admission_check_said() -> None:
    """MultiKueue's check in Retry evicts the manager's Workload with Kueue's own words
    ("At least one admission check is false"); the check's message says why."""
    j = dispatched_job()
    wl = wl_of(j, ("Evicted", "True", "AdmissionCheck"))
    wl["status"]["conditions"][0]["message"] = "At least one admission check is false"
    wl["status"]["admissionChecks"] = [
        {"name": "multikueue", "state": "Retry", "message": WORKER_SAYS},
    ]
    q = queued(run(j, wl))
    assert q is not None and q["reason"] == kueue_workload.REASON_EVICTED
    assert "At least one admission check is false" in q["message"]
    assert f"multikueue (Retry): {WORKER_SAYS}" in q["message"]


def test_a_dispatched_job_without_quota_names_its_checks_and_their_messages() -> None:
    j = dispatched_job()
    wl = wl_of(j, ("QuotaReserved", "False", "Pending"))
    wl["status"]["admissionChecks"] = [
        {"name": "multikueue", "state": "Pending", "message": WORKER_SAYS},
        {"name": "provisioning", "state": "Ready", "message": "done"},
    ]
    q = queued(run(j, wl))
    assert q is not None and q["reason"] == kueue_workload.REASON_PENDING
    assert "QuotaReserved Pending" in q["message"]
    assert f"(multikueue: {WORKER_SAYS})" in q["message"]
    assert "provisioning" not in q["message"]


def test_an_inactive_workload_names_the_rejecting_check_and_its_message() -> None:
    j = dispatched_job()
    wl = wl_of(j)
    wl["spec"]["active"] = False
    wl["status"]["admissionChecks"] = [
        {"name": "multikueue", "state": "Rejected", "message": WORKER_SAYS},
    ]
    q = queued(run(j, wl))
    assert q is not None and q["reason"] == kueue_workload.REASON_INACTIVE
    assert f"multikueue (Rejected): {WORKER_SAYS}" in q["message"]


def test_once_on_a_worker_the_status_is_the_workers_and_nothing_is_written_here() -> None:
    j = dispatched_job()
    j["status"] = {"conditions": [{"type": c.RUNNING, "status": "True", "reason": "MSJobRunning",
                                   "message": "copied", "lastTransitionTime": T0}]}  # fmt: skip
    p = run(j, on_worker(admitted(j)))
    assert p.status is None and p.events == [] and p.transitions == []
    assert p.create_pods == [] and p.create_services == [] and p.delete_pods == []
    d = queue(p)
    # Nothing runs here: PodsReady belongs to the worker's Workload.
    assert d.workload_status is None and d.placements == {}


def test_the_dispatch_is_announced_while_the_status_is_still_the_managers_wait() -> None:
    j = dispatched_job()
    waiting = run(j)  # the status msop writes here while the job waits
    assert waiting.status is not None
    j["status"] = waiting.status
    p = run(j, on_worker(admitted(j)))
    assert p.status is None
    [event] = p.events
    assert event.reason == kueue_workload.REASON_DISPATCHED and f"'{WORKER}'" in event.message
    # Once the worker's status is copied here, nothing more is said.
    j["status"] = {"conditions": [{"type": c.QUEUED, "status": "False",
                                   "reason": kueue_workload.REASON_ADMITTED, "message": "there",
                                   "lastTransitionTime": T0}]}  # fmt: skip
    assert run(j, on_worker(admitted(j))).events == []


def test_a_dispatched_job_that_finished_there_releases_its_workload_here() -> None:
    j = dispatched_job()
    j["status"] = {"conditions": [{"type": c.SUCCEEDED, "status": "True",
                                   "reason": "MSJobSucceeded", "message": "done",
                                   "lastTransitionTime": T0}],
                   "completionTime": T0}  # fmt: skip
    j["spec"]["runPolicy"] = {"ttlSecondsAfterFinished": 0}
    wl = on_worker(admitted(j))
    p = run(j, wl)
    assert p.status is None
    d = queue(p)
    assert d.workload_status is not None  # marked Finished (MultiKueue may have done it too)
    assert [w["metadata"]["name"] for w in d.release_workloads] == [wl["metadata"]["name"]]
    assert p.delete_job  # the TTL applies on the manager as well


def test_suspending_a_dispatched_job_deactivates_its_workload() -> None:
    j = dispatched_job()
    j["spec"]["runPolicy"] = {"suspend": True}
    p = run(j, on_worker(admitted(j)))
    assert queue(p).patch_workload == {"spec": {"active": False}}
    assert p.status is None  # still on the worker until Kueue evicts it


def test_an_evicted_dispatched_job_is_handed_back_to_kueue_and_says_so() -> None:
    j = dispatched_job()
    wl = evicted(j, "Deactivated")
    wl["spec"]["active"] = False
    j["spec"]["runPolicy"] = {"suspend": True}
    p = run(j, wl)
    assert queue(p).workload_status is not None  # requeued: no admission any more
    assert p.status is not None
    suspended = next(x for x in p.status["conditions"] if x["type"] == c.SUSPENDED)
    assert suspended["status"] == "True"


def test_a_dispatched_job_without_a_queue_or_kueue_is_left_alone() -> None:
    j = dispatched_job()
    j["metadata"]["labels"] = {}
    assert asyncio.run(kueue_of(WorkloadApi(None)).observe(j)) is None
    p = plan(Observed(j, [], [], NOW))
    assert p.status is None and p.create_pods == [] and p.create_services == []


def test_volcano_leaves_a_dispatched_job_to_the_worker_cluster() -> None:
    volcano = gang.Volcano(lambda name, ns: None)
    assert asyncio.run(volcano.observe(dispatched_job())) is None
    assert asyncio.run(volcano.observe(queued_job())) is not None


def test_an_invalid_dispatched_job_fails_here_with_no_workload() -> None:
    j = dispatched_job()
    j["spec"]["runPolicy"] = {"managedBy": c.MANAGED_BY_MSOP}
    p = run(j)
    assert p.status is not None
    failed = next(x for x in p.status["conditions"] if x["type"] == c.FAILED)
    assert failed["reason"] == "InvalidSpec" and "spec.managedBy" in failed["message"]
    assert queue(p).create_workload is None


# --- the worker cluster ---------------------------------------------------------------------


def worker_copy(wl_name: str) -> JSON:
    """The job as MultiKueue creates it on a worker: no managedBy, its labels plus the
    pre-built Workload's name and the origin; a uid of its own."""
    j = queued_job()
    j["metadata"]["uid"] = "worker-uid"
    j["metadata"]["labels"].update(
        {kueue_workload.PREBUILT_LABEL: wl_name, kueue_workload.ORIGIN_LABEL: "mk"}
    )
    return j


def prebuilt(manager_job: JSON, *conditions: tuple[str, str, str], **status: Any) -> JSON:
    """The Workload MultiKueue creates on a worker: the manager's, without owners or
    finalizers."""
    wl = wl_of(manager_job, *conditions, **status)
    wl["metadata"].pop("ownerReferences")
    wl["metadata"].pop("finalizers")
    return wl


def test_the_copy_adopts_its_prebuilt_workload_and_runs_when_admitted() -> None:
    manager = dispatched_job()
    wl = prebuilt(manager, ("QuotaReserved", "True", "QuotaReserved"),
                  ("Admitted", "True", "Admitted"), admission=ADMISSION)  # fmt: skip
    j = worker_copy(wl["metadata"]["name"])
    p = run(j, wl)
    d = queue(p)
    assert d.create_workload is None
    assert d.adopt_workload is not None
    meta = d.adopt_workload["metadata"]
    assert meta["ownerReferences"][0]["uid"] == "worker-uid"
    assert meta["labels"] == {kueue_workload.JOB_UID_LABEL: "worker-uid"}
    assert meta["resourceVersion"] == "7"
    # The Scheduler Service is there: every pod goes out, on its flavor.
    assert len(p.create_pods) == 3
    assert all(x["spec"]["nodeSelector"].get("pool") in ("a", "b") for x in p.create_pods)


def test_the_copy_never_creates_a_workload_of_its_own() -> None:
    j = worker_copy("msjob-train-abcde")
    p = run(j, None)
    d = queue(p)
    assert d.create_workload is None and p.create_pods == []
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PREBUILT_MISSING
    assert "msjob-train-abcde" in q["message"]
    assert p.requeue_after is not None


def test_a_prebuilt_workload_controlled_by_another_object_is_not_taken() -> None:
    manager = dispatched_job()
    wl = prebuilt(manager)
    wl["metadata"]["ownerReferences"] = [{"uid": "someone-else", "controller": True}]
    j = worker_copy(wl["metadata"]["name"])
    p = run(j, wl)
    assert queue(p).adopt_workload is None and p.create_pods == []
    assert any(e.type == "Warning" for e in p.events)


def test_a_prebuilt_workload_that_does_not_describe_the_copy_holds_it() -> None:
    manager = dispatched_job()
    wl = prebuilt(manager, ("QuotaReserved", "True", "QuotaReserved"),
                  ("Admitted", "True", "Admitted"), admission=ADMISSION)  # fmt: skip
    j = worker_copy(wl["metadata"]["name"])
    j["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 3
    p = run(j, wl, pods=[pod("Worker", 0, "Running")])
    q = queued(p)
    assert q is not None and q["reason"] == kueue_workload.REASON_PREBUILT_MISMATCH
    assert p.create_pods == [] and len(p.delete_pods) == 1
    assert queue(p).delete_workloads == []  # the Workload is MultiKueue's to replace


def test_the_adoption_patch_then_the_status_patch_on_the_adopted_version() -> None:
    manager = dispatched_job()
    wl = prebuilt(manager, ("QuotaReserved", "True", "QuotaReserved"),
                  ("Admitted", "True", "Admitted"), admission=ADMISSION)  # fmt: skip
    j = worker_copy(wl["metadata"]["name"])
    d = queue(run(j, wl))
    d.workload_status = kueue_workload.pods_ready_patch(wl, True, T0)
    api = WorkloadApi(wl)
    assert apply_decision(api, d, j)
    assert [x[:2] for x in api.calls] == [("patch", "Workload/"), ("patch", "Workload/status")]
    assert api.calls[1][2]["metadata"]["resourceVersion"] == "8"


def test_the_adoption_that_conflicts_is_planned_again() -> None:
    manager = dispatched_job()
    wl = prebuilt(manager)
    j = worker_copy(wl["metadata"]["name"])
    d = queue(run(j, wl))
    assert d.adopt_workload is not None
    assert not apply_decision(WorkloadApi(wl, conflict=True), d, j)


# --- the worker cluster, lost to the manager and back ----------------------------------------

LOST = WorkerLost(timeout=900.0, hold=420.0)
# The API server did not answer from 20 to 4 minutes ago: 16 minutes, past the timeout.
OUTAGE = Outage(NOW - timedelta(minutes=20), NOW - timedelta(minutes=4))


def run_lost(
    j: JSON,
    wl: JSON,
    *,
    pods: list[JSON],
    outages: list[Outage],
    worker_lost: WorkerLost = LOST,
    now: datetime = NOW,
) -> Plan:
    seen = asyncio.run(
        kueue.Kueue(
            WorkloadApi(wl),
            owned_by=lambda uid: [wl],
            in_namespace=lambda ns: [wl],
            flavor=FLAVORS.get,
            worker_lost=worker_lost,
            outages=lambda: outages,
        ).observe(j)
    )
    assert seen is not None
    return plan(Observed(j, pods, [service()], now, scheduling=[seen]))


def admitted_copy(restart_policy: str = "Never") -> tuple[JSON, JSON]:
    """A copy made an hour ago, its pre-built Workload adopted and admitted."""
    manager = dispatched_job()
    wl = prebuilt(manager, ("QuotaReserved", "True", "QuotaReserved"),
                  ("Admitted", "True", "Admitted"), admission=ADMISSION)  # fmt: skip
    j = worker_copy(wl["metadata"]["name"])
    j["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(hours=1))
    j["spec"]["msReplicaSpecs"]["Worker"]["restartPolicy"] = restart_policy
    wl["metadata"]["ownerReferences"] = [{"uid": "worker-uid", "controller": True}]
    return j, wl


def three_pods(worker0: str = "Running", exit_code: int | None = None) -> list[JSON]:
    return [
        pod("Scheduler", 0),
        pod("Worker", 0, worker0, exit_code=exit_code),
        pod("Worker", 1),
    ]


def test_after_a_long_outage_a_copy_stops_its_pods_and_creates_none() -> None:
    j, wl = admitted_copy()
    pods = [pod("Scheduler", 0), pod("Worker", 1)]  # Worker 0 went while the server was away
    p = run_lost(j, wl, pods=pods, outages=[OUTAGE])
    assert p.create_pods == [] and p.create_services == []
    assert [x["metadata"]["name"] for x in p.delete_pods] == ["j-scheduler-0", "j-worker-1"]
    q = queued(p)
    assert q is not None and q["status"] == "True"
    assert q["reason"] == kueue_workload.REASON_WORKER_LOST
    assert "16m0s" in q["message"] and "'mk'" in q["message"]
    assert format_time(NOW + timedelta(minutes=3)) in q["message"]  # the hold's end
    assert [(e.type, e.reason) for e in p.events] == [
        ("Warning", kueue_workload.REASON_WORKER_LOST)
    ]
    # Looked at again when the hold ends (sooner if MultiKueue deletes the copy).
    assert p.requeue_after == 180.0
    # Planned again while held (the pods going): the Event is not repeated.
    j["status"] = status_of(p)
    again = run_lost(j, wl, pods=[], outages=[OUTAGE])
    assert again.events == [] and again.create_pods == [] and again.create_services == []


def test_after_a_long_outage_a_copy_is_not_restarted() -> None:
    j, wl = admitted_copy("OnFailure")
    pods = three_pods("Failed", exit_code=1)  # retryable: would restart every pod
    held = run_lost(j, wl, pods=pods, outages=[OUTAGE])
    assert held.create_pods == [] and held.agent_requests == []
    held_status = status_of(held)
    assert "restarts" not in held_status.get("replicaStatuses", {}).get("Worker", {})
    assert not any(x["type"] == c.RESTARTING for x in held_status["conditions"])
    # The same copy, with no outage behind it, restarts.
    restarted = run_lost(j, wl, pods=pods, outages=[])
    assert len(restarted.delete_pods) == 3
    assert any(
        x["type"] == c.RESTARTING and x["status"] == "True"
        for x in status_of(restarted)["conditions"]
    )


def test_the_hold_ends_and_the_copy_runs_as_before() -> None:
    j, wl = admitted_copy()
    pods = [pod("Scheduler", 0), pod("Worker", 1)]
    later = NOW + timedelta(minutes=3)  # OUTAGE.end + hold
    p = run_lost(j, wl, pods=pods, outages=[OUTAGE], now=later)
    assert [x["metadata"]["name"] for x in p.create_pods] == ["j-worker-0"]


def test_short_outages_off_or_copies_made_after_hold_nothing() -> None:
    j, wl = admitted_copy()
    pods = [pod("Scheduler", 0), pod("Worker", 1)]
    short = Outage(NOW - timedelta(minutes=10), NOW - timedelta(minutes=4))  # 6 minutes
    assert len(run_lost(j, wl, pods=pods, outages=[short]).create_pods) == 1
    off = WorkerLost(timeout=0.0, hold=420.0)
    assert len(run_lost(j, wl, pods=pods, outages=[OUTAGE], worker_lost=off).create_pods) == 1
    # Dispatched here after the outage (by the manager that got the worker back).
    j["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(minutes=2))
    assert len(run_lost(j, wl, pods=pods, outages=[OUTAGE]).create_pods) == 1
    # A job submitted to this cluster itself is not MultiKueue's copy.
    own = queued_job()
    own["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(hours=1))
    own_wl = wl_of(own, ("QuotaReserved", "True", "QuotaReserved"),
                   ("Admitted", "True", "Admitted"), admission=ADMISSION)  # fmt: skip
    assert len(run_lost(own, own_wl, pods=pods, outages=[OUTAGE]).create_pods) == 1


def test_a_held_copy_whose_workload_is_evicted_stops_its_pods() -> None:
    j, wl = admitted_copy()
    wl["status"]["conditions"].append(
        {"type": "Evicted", "status": "True", "reason": "Deactivated", "message": "by manager",
         "lastTransitionTime": T0}
    )  # fmt: skip
    p = run_lost(j, wl, pods=three_pods(), outages=[OUTAGE])
    assert len(p.delete_pods) == 3 and p.create_pods == []
    q = queued(p)
    assert q is not None and q["reason"] != kueue_workload.REASON_WORKER_LOST


def test_the_latest_long_outage_holds_a_copy() -> None:
    j, _ = admitted_copy()
    older = Outage(NOW - timedelta(minutes=50), NOW - timedelta(minutes=30))
    short = Outage(NOW - timedelta(minutes=2), NOW - timedelta(minutes=1))
    lost = kueue_workload.lost_worker(j, [older, OUTAGE, short], timeout=900.0, hold=420.0)
    assert lost is not None and (lost.start, lost.end) == (OUTAGE.start, OUTAGE.end)
    assert lost.until == OUTAGE.end + timedelta(seconds=420)
