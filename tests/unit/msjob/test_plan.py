"""Table-driven tests of the pure MSJob planner (msop.msjob.plan)."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from msop.api import naming
from msop.kube.objects import format_time
from msop.msjob.plan import Plan
from tests.support.builders import (
    JSON,
    NOW,
    T0,
    cond,
    finished,
    job,
    must_cond,
    names,
    pod,
    run,
    running_status,
    service,
    status_of,
    volcano,
)

# --- creation ----------------------------------------------------------------------------


def test_new_job_gets_created_condition_and_all_pods() -> None:
    p = run(job())
    assert names(p.create_pods) == {"j-worker-0", "j-worker-1"}
    assert must_cond(p, "Created")["status"] == "True"
    assert p.transitions == ["Created"]
    assert status_of(p)["startTime"] == format_time(NOW)
    assert status_of(p)["workers"] == "0/2"
    assert status_of(p)["observedGeneration"] == 1


def test_scheduler_service_comes_first_and_other_pods_wait_for_its_cluster_ip() -> None:
    j = job({"Scheduler": (1, "Never"), "Worker": (2, "Never")})
    first = run(j)
    assert names(first.create_services) == {"j-scheduler-0"}
    assert names(first.create_pods) == {"j-scheduler-0"}  # needs no ClusterIP: uses its podIP
    pending = run(j, [pod("Scheduler", 0)], [service(ip="")])
    assert not pending.create_pods and not pending.create_services
    ready = run(j, [pod("Scheduler", 0)], [service()])
    assert names(ready.create_pods) == {"j-worker-0", "j-worker-1"}
    env = {e["name"]: e.get("value") for e in ready.create_pods[0]["spec"]["containers"][0]["env"]}
    assert env["MS_SCHED_HOST"] == "10.0.0.1"


@pytest.mark.parametrize(
    ("existing", "replicas", "create", "delete"),
    [
        ([0, 1], 4, {"j-worker-2", "j-worker-3"}, set()),
        ([0, 1, 2, 3], 1, set(), {"j-worker-1", "j-worker-2", "j-worker-3"}),
        ([0, 1], 0, set(), {"j-worker-0", "j-worker-1"}),
        ([], 0, set(), set()),
    ],
    ids=["scale-up", "scale-down", "to-zero", "zero-is-stable"],
)
def test_diff_creates_missing_and_deletes_out_of_range(
    existing: list[int], replicas: int, create: set[str], delete: set[str]
) -> None:
    p = run(job({"Worker": (replicas, "Never")}, status=running_status()),
            [pod("Worker", i) for i in existing])  # fmt: skip
    assert names(p.create_pods) == create
    assert names(p.delete_pods) == delete


def test_terminating_pod_holds_its_slot() -> None:
    recent = format_time(NOW - timedelta(seconds=5))
    p = run(job(status=running_status()), [pod("Worker", 0), pod("Worker", 1, deleting=recent)])
    assert not p.create_pods and not p.delete_pods and not p.force_delete_pods
    assert p.requeue_after is not None and p.requeue_after > 0


def test_pod_stuck_terminating_on_a_lost_node_is_force_deleted() -> None:
    old = format_time(NOW - timedelta(seconds=301))
    p = run(job(status=running_status()), [pod("Worker", 0), pod("Worker", 1, deleting=old)])
    assert names(p.force_delete_pods) == {"j-worker-1"}
    assert any(e.reason == "ForceDeletedStuckPod" for e in p.events)


def test_template_cannot_choose_namespace_or_owner_and_labels_are_kept() -> None:
    j = job()
    tpl = j["spec"]["msReplicaSpecs"]["Worker"]["template"]
    tpl["metadata"] = {"namespace": "other", "labels": {"team": "A_b.c"},
                       "ownerReferences": [{"kind": "X"}]}  # fmt: skip
    tpl["spec"]["restartPolicy"] = "Always"
    p = run(j)
    made = p.create_pods[0]
    assert made["metadata"]["namespace"] == "ns"
    assert made["metadata"]["ownerReferences"] == [naming.owner_reference(j)]
    assert made["metadata"]["labels"]["team"] == "A_b.c"
    assert made["spec"]["restartPolicy"] == "Never"
    assert any(e.reason == "SettedPodTemplateRestartPolicy" for e in p.events)


# --- success ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "pods", "succeeded"),
    [
        ("", [pod("Worker", 0, "Succeeded", 0), pod("Worker", 1)], True),
        ("", [pod("Worker", 0), pod("Worker", 1, "Succeeded", 0)], False),
        ("AllWorkers", [pod("Worker", 0, "Succeeded", 0), pod("Worker", 1)], False),
        ("AllWorkers", [pod("Worker", 0, "Succeeded", 0), pod("Worker", 1, "Succeeded", 0)], True),
    ],
    ids=["worker0-done", "worker1-only", "allworkers-partial", "allworkers-done"],
)
def test_success_policy(policy: str, pods: list[JSON], succeeded: bool) -> None:
    p = run(job(status=running_status(), successPolicy=policy), pods)
    c = cond(p, "Succeeded")
    assert (c is not None and c["status"] == "True") is succeeded
    if succeeded:
        assert p.transitions == ["Succeeded"]
        assert status_of(p)["completionTime"] == format_time(NOW)
        assert must_cond(p, "Running")["status"] != "True"


def test_job_without_workers_succeeds_when_every_replica_succeeded() -> None:
    j = job({"Scheduler": (1, "Never"), "PS": (1, "Never")}, status=running_status())
    half = run(j, [pod("Scheduler", 0, "Succeeded", 0), pod("PS", 0)], [service()])
    assert cond(half, "Succeeded") is None if half.status else True
    done = run(j, [pod("Scheduler", 0, "Succeeded", 0), pod("PS", 0, "Succeeded", 0)], [service()])
    assert must_cond(done, "Succeeded")["status"] == "True"


def test_running_when_every_pod_runs_and_no_rewrite_when_nothing_changed() -> None:
    j = job()
    p = run(j, [pod("Worker", 0), pod("Worker", 1)])
    assert must_cond(p, "Running")["status"] == "True"
    again = copy.deepcopy(j)
    again["status"] = p.status
    assert run(again, [pod("Worker", 0), pod("Worker", 1)]).status is None


# --- failure and restarts ------------------------------------------------------------------


def test_never_failed_replica_fails_the_job_with_running_cleanup() -> None:
    pods = [pod("PS", 0, "Failed", 1), pod("Worker", 0), pod("Worker", 1, "Succeeded", 0)]
    p = run(job({"PS": (1, "Never"), "Worker": (2, "Never")}, status=running_status()), pods)
    c = cond(p, "Failed")
    assert c and c["reason"] == "MSJobFailed" and "1 PS replica(s) failed" in c["message"]
    assert names(p.delete_pods) == {"j-worker-0"}  # cleanPodPolicy Running: only active pods
    assert status_of(p)["replicaStatuses"]["PS"]["failed"] == 1


def test_elastic_worker_failure_does_not_fail_the_job() -> None:
    p = run(job(status=running_status(), enableDynamicWorker=True),
            [pod("Worker", 0), pod("Worker", 1, "Failed", 1)])  # fmt: skip
    assert p.status is None or cond(p, "Failed") is None
    assert not p.create_pods


@pytest.mark.parametrize(("code", "restart"), [(137, True), (128, True), (127, False), (1, False)])
def test_exit_code_policy(code: int, restart: bool) -> None:
    j = job({"Worker": (2, "ExitCode")}, status=running_status())
    p = run(j, [pod("Worker", 0), pod("Worker", 1, "Failed", code)])
    if restart:
        assert names(p.delete_pods) == {"j-worker-1"}
        assert p.status_first
        assert must_cond(p, "Restarting")["status"] == "True"
        assert must_cond(p, "Running")["status"] == "False"
        assert status_of(p)["replicaStatuses"]["Worker"]["restarts"] == 1
        assert {"ExitedWithCode", "MSJobRestarting"} <= {e.reason for e in p.events}
        assert "Restarting" in p.transitions
    else:
        assert must_cond(p, "Failed")["status"] == "True"
        assert "restarts" not in status_of(p)["replicaStatuses"]["Worker"]


def test_exit_code_restarts_count_toward_backoff_limit() -> None:
    status = running_status(replicaStatuses={"Worker": {"restarts": 2}})
    j = job({"Worker": (2, "ExitCode")}, {"backoffLimit": 2}, status=status)
    p = run(j, [pod("Worker", 0), pod("Worker", 1, "Failed", 137)])
    assert must_cond(p, "Failed")["reason"] == "BackoffLimitExceeded"
    assert names(p.delete_pods) == {"j-worker-0", "j-worker-1"}  # every pod, whatever the policy
    # The message says what status says: 2 recreations done, the third was not.
    message = must_cond(p, "Failed")["message"]
    assert "(backoffLimit 2): 2 pod recreation(s) so far; 1 more needed." in message, message
    assert p.status is not None and p.status["replicaStatuses"]["Worker"]["restarts"] == 2


@pytest.mark.parametrize(("restarts", "fails"), [(2, False), (3, True)])
def test_kubelet_restarts_count_toward_backoff_limit(restarts: int, fails: bool) -> None:
    j = job({"Worker": (2, "OnFailure")}, {"backoffLimit": 2}, status=running_status())
    p = run(j, [pod("Worker", 0, restarts=restarts), pod("Worker", 1)])
    failed = p.status is not None and cond(p, "Failed") is not None
    assert failed is fails


# --- run policy -----------------------------------------------------------------------------


@pytest.mark.parametrize(("elapsed", "fails"), [(59, False), (60, True), (61, True)])
def test_active_deadline_is_exact(elapsed: int, fails: bool) -> None:
    start = format_time(NOW - timedelta(seconds=elapsed))
    j = job(run_policy={"activeDeadlineSeconds": 60}, status=running_status(startTime=start))
    p = run(j, [pod("Worker", 0), pod("Worker", 1)])
    if fails:
        assert must_cond(p, "Failed")["reason"] == "DeadlineExceeded"
        assert names(p.delete_pods) == {"j-worker-0", "j-worker-1"}
    else:
        assert p.requeue_after == pytest.approx(60 - elapsed)


@pytest.mark.parametrize(
    ("policy", "deleted"),
    [("All", {"j-worker-0", "j-worker-1"}), ("Running", {"j-worker-1"}), ("None", set())],
)
def test_clean_pod_policy_on_success(policy: str, deleted: set[str]) -> None:
    j = job({"Scheduler": (1, "Never"), "Worker": (2, "Never")},
            {"cleanPodPolicy": policy}, status=running_status())  # fmt: skip
    pods = [pod("Scheduler", 0, "Succeeded", 0), pod("Worker", 0, "Succeeded", 0), pod("Worker", 1)]
    p = run(j, pods, [service()])
    assert names(p.delete_pods) - {"j-scheduler-0"} == deleted
    assert bool(p.delete_services) is (policy != "None")
    # The counts written with Succeeded say what the pods are once the cleanup is done: a
    # worker it deletes is not active (it did not succeed either).
    assert p.status is not None
    workers = p.status["replicaStatuses"]["Worker"]
    still_running = 0 if deleted else 1
    assert (workers["active"], workers["succeeded"]) == (still_running, 1)
    assert p.status["workers"] == f"{still_running}/2"


def test_ttl_requeues_precisely_then_deletes() -> None:
    done = finished(completionTime=format_time(NOW - timedelta(seconds=30)))
    early = run(job(run_policy={"ttlSecondsAfterFinished": 100}, status=done))
    assert early.requeue_after == pytest.approx(70) and not early.delete_job
    due = run(job(run_policy={"ttlSecondsAfterFinished": 30}, status=done))
    assert due.delete_job


def test_finished_job_never_recreates_pods_and_keeps_counts() -> None:
    counts = {"Worker": {"active": 0, "succeeded": 2, "failed": 0}}
    status = finished(replicaStatuses=counts, completionTime=T0)
    p = run(job(status=status), [])
    assert not p.create_pods
    assert p.status is None


def test_suspend_deletes_everything_and_resume_resets_start_time() -> None:
    j = job({"Scheduler": (1, "Never"), "Worker": (1, "Never")}, {"suspend": True},
            status=running_status())  # fmt: skip
    p = run(j, [pod("Scheduler", 0), pod("Worker", 0)], [service()])
    assert names(p.delete_pods) == {"j-scheduler-0", "j-worker-0"}
    assert names(p.delete_services) == {"j-scheduler-0"}
    assert must_cond(p, "Suspended")["status"] == "True"
    assert must_cond(p, "Running")["status"] == "False"
    assert not p.create_pods and p.requeue_after is None
    resumed = copy.deepcopy(j)
    resumed["spec"]["runPolicy"]["suspend"] = False
    resumed["status"] = p.status
    r = run(resumed)
    c = cond(r, "Suspended")
    assert c and c["status"] == "False" and c["reason"] == "MSJobResumed"
    assert status_of(r)["startTime"] == format_time(NOW)
    assert names(r.create_services) == {"j-scheduler-0"}


def test_suspended_job_ignores_its_deadline() -> None:
    start = format_time(NOW - timedelta(seconds=1000))
    j = job(run_policy={"suspend": True, "activeDeadlineSeconds": 10},
            status=running_status(startTime=start))  # fmt: skip
    assert cond(run(j), "Failed") is None


def test_job_managed_by_another_controller_is_left_alone() -> None:
    p = run(job(run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}))
    assert p == Plan()


def test_invalid_job_fails_with_reason_and_creates_nothing() -> None:
    j = job()
    j["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = "many"
    p = run(j)
    c = cond(p, "Failed")
    assert (
        c and c["reason"] == "InvalidSpec" and "spec.msReplicaSpecs.Worker.replicas" in c["message"]
    )
    assert not p.create_pods
    assert [e.type for e in p.events] == ["Warning"]


def test_gang_scheduling_creates_the_podgroup_and_holds_pods_until_inqueue() -> None:
    j = job({"Scheduler": (1, "Never"), "Worker": (2, "Never")},
            {"schedulingPolicy": {"queue": "q", "minAvailable": 2}})  # fmt: skip
    p = run(j, gang_scheduling=True)
    pod_group = volcano(p).create
    assert pod_group is not None and pod_group["spec"] == {
        "minMember": 2,
        "queue": "q",
    }
    assert not p.create_pods
    pending = run(j, pod_group={"status": {"phase": "Pending"}}, gang_scheduling=True)
    assert not pending.create_pods
    inqueue = run(j, pod_group={"status": {"phase": "Inqueue"}}, gang_scheduling=True)
    assert names(inqueue.create_pods) == {"j-scheduler-0"}
    assert inqueue.create_pods[0]["spec"]["schedulerName"] == "volcano"
