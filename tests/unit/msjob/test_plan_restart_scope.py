"""The planner's ``restartScope: Job`` rules: a MindSpore cluster fails, restarts and
resizes as a whole (see msop.msjob.plan, rule 7)."""

from __future__ import annotations

from typing import Any

import pytest

from msop.api.defaults import apply_defaults
from msop.msjob import desired
from msop.msjob.plan import Plan
from tests.support.builders import (
    T0,
    cond,
    job,
    must_cond,
    names,
    pod,
    run,
    running_status,
    service,
)

JSON = dict[str, Any]
EVERY_POD = {"j-scheduler-0", "j-worker-0", "j-worker-1"}


def cluster(policy: str = "ExitCode", workers: int = 2, **spec: Any) -> JSON:
    return job({"Scheduler": (1, "Never"), "Worker": (workers, policy)}, **spec)


def failed(rtype: str, index: int, code: int | None, at: str, reason: str = "Error") -> JSON:
    p = pod(rtype, index, "Failed", exit_code=code, size=(2, 0))
    if code is None:
        p["status"] = {"phase": "Failed", "reason": "Evicted", "message": "low on memory"}
    else:
        term = p["status"]["containerStatuses"][0]["state"]["terminated"]
        term.update(finishedAt=at, reason=reason)
    return p


def members(*overrides: JSON, size: tuple[int, int] = (2, 0), phase: str = "Running") -> list[JSON]:
    """Scheduler + 2 Workers, with ``overrides`` replacing the pods of the same name."""
    by_name = {
        p["metadata"]["name"]: p
        for p in (pod("Scheduler", 0, phase, size=size), *(pod("Worker", i, phase, size=size)
                                                             for i in range(2)))
    }  # fmt: skip
    for p in overrides:
        by_name[p["metadata"]["name"]] = p
    return list(by_name.values())


def restarts(p: Plan) -> int:
    assert p.status is not None
    return sum(e.get("restarts", 0) for e in p.status["replicaStatuses"].values())


@pytest.mark.parametrize(
    ("spec", "scope"),
    [
        ({"Scheduler": (1, "Never"), "Worker": (2, "Never")}, "Job"),
        ({"Scheduler": (1, "Never"), "PS": (1, "Never"), "Worker": (2, "Never")}, "Job"),
        ({"Worker": (2, "Never")}, "Pod"),
        ({"Scheduler": (0, "Never"), "Worker": (2, "Never")}, "Pod"),
    ],
)
def test_default_scope_follows_the_job_shape(spec: dict[str, Any], scope: str) -> None:
    assert apply_defaults(job(spec))["spec"]["restartScope"] == scope


def test_elastic_and_explicit_choices_are_kept() -> None:
    assert apply_defaults(cluster(enableDynamicWorker=True))["spec"]["restartScope"] == "Pod"
    assert apply_defaults(cluster(restartScope="Pod"))["spec"]["restartScope"] == "Pod"
    assert apply_defaults(job(restartScope="Job"))["spec"]["restartScope"] == "Job"


@pytest.mark.parametrize("policy", ["OnFailure", "Always", "ExitCode"])
def test_the_kubelet_never_restarts_a_cluster_member_in_place(policy: str) -> None:
    p = run(cluster(policy), [pod("Scheduler", 0, size=(2, 0))], [service()])
    assert {x["spec"]["restartPolicy"] for x in p.create_pods} == {"Never"}


def test_a_killed_worker_restarts_every_pod_and_counts_once() -> None:
    killed = failed("Worker", 1, 137, "2026-01-01T11:59:30Z", reason="OOMKilled")
    p = run(cluster(run_policy={"backoffLimit": 3}, status=running_status()),
            members(killed), [service()])  # fmt: skip
    assert names(p.delete_pods) == EVERY_POD
    assert not p.create_pods and not p.delete_services  # the Service (MS_SCHED_HOST) stays
    assert p.status_first
    assert restarts(p) == 1
    restarting = cond(p, "Restarting")
    assert restarting is not None and restarting["status"] == "True"
    assert "pod ns/j-worker-1 exited with code 137 (OOMKilled)" in restarting["message"]
    assert "restart 1 of 3" in restarting["message"]
    assert must_cond(p, "Running")["status"] == "False"
    reasons = {(e.type, e.reason) for e in p.events}
    assert ("Warning", "MSJobRestarting") in reasons
    assert ("Normal", "ExitedWithCode") in reasons
    assert "Pod ns/j-worker-1 exited with code 137" in {e.message for e in p.events}


def test_follow_on_exits_of_the_peers_are_not_a_failure_of_the_job() -> None:
    pods = members(
        failed("Worker", 1, 137, "2026-01-01T11:59:00Z"),
        failed("Worker", 0, 1, "2026-01-01T11:59:30Z"),
        failed("Scheduler", 0, 1, "2026-01-01T11:59:31Z"),
    )
    p = run(cluster(status=running_status()), pods, [service()])
    assert cond(p, "Failed") is None
    assert names(p.delete_pods) == EVERY_POD
    assert "j-worker-1 exited with code 137" in must_cond(p, "Restarting")["message"]


def test_a_script_error_first_fails_the_job_naming_pod_code_and_reason() -> None:
    pods = members(
        failed("Worker", 0, 1, "2026-01-01T11:59:00Z"),
        failed("Worker", 1, 137, "2026-01-01T11:59:40Z"),
    )
    p = run(cluster(status=running_status()), pods, [service()])
    failure = cond(p, "Failed")
    assert failure is not None and failure["reason"] == "MSJobFailed"
    assert "pod ns/j-worker-0 exited with code 1 (Error)" in failure["message"]
    assert restarts(p) == 0 and not p.create_pods
    assert [e.reason for e in p.events if e.type == "Warning"] == ["MSJobFailed"]


def test_backoff_limit_bounds_cluster_restarts_and_says_how_many_were_done() -> None:
    status = running_status(replicaStatuses={"Worker": {"restarts": 2}})
    p = run(cluster(run_policy={"backoffLimit": 2}, status=status),
            members(failed("Worker", 0, 137, T0)), [service()])  # fmt: skip
    failure = cond(p, "Failed")
    assert failure is not None and failure["reason"] == "BackoffLimitExceeded"
    assert "after 2 restart(s) of the job (backoffLimit 2)" in failure["message"]
    assert restarts(p) == 2  # what status says is what the message says
    assert names(p.delete_pods) == EVERY_POD and p.delete_services


def test_an_evicted_member_is_retryable_under_exit_code() -> None:
    p = run(cluster(status=running_status()), members(failed("Worker", 0, None, T0)),
            [service()])  # fmt: skip
    assert (
        "failed without an exit code (Evicted: low on memory)"
        in must_cond(p, "Restarting")["message"]
    )


@pytest.mark.parametrize(("policy", "restarted"), [("OnFailure", True), ("Never", False)])
def test_the_replica_policy_says_which_failures_are_retryable(policy: str, restarted: bool) -> None:
    p = run(cluster(policy, status=running_status()), members(failed("Worker", 0, 1, T0)),
            [service()])  # fmt: skip
    assert (cond(p, "Restarting") is not None) is restarted
    assert (cond(p, "Failed") is not None) is not restarted


def test_no_member_is_created_while_an_old_one_is_terminating() -> None:
    status = running_status(replicaStatuses={"Worker": {"restarts": 1}})
    going = pod("Worker", 1, deleting="2026-01-01T11:59:59Z", size=(2, 0))
    p = run(cluster(status=status), [going], [service()])
    assert not p.create_pods
    p = run(cluster(status=status), [], [service()])
    assert names(p.create_pods) == EVERY_POD
    envs = {x["metadata"]["name"]: desired.cluster_size_env(x) for x in p.create_pods}
    assert set(map(str, envs.values())) == {str({"MS_WORKER_NUM": "2", "MS_SERVER_NUM": "0"})}


def test_a_finished_training_is_never_restarted_for_a_crash_after_it() -> None:
    done = pod("Worker", 0, "Succeeded", exit_code=0, size=(2, 0))
    p = run(cluster(status=running_status()),
            members(done, failed("Worker", 1, 139, T0, reason="Error")), [service()])  # fmt: skip
    assert must_cond(p, "Succeeded")["status"] == "True"
    assert cond(p, "Restarting") is None and restarts(p) == 0


def test_scaling_a_running_cluster_restarts_every_pod_with_the_new_size() -> None:
    j = cluster(workers=3, status=running_status())
    p = run(j, members(), [service()])
    assert names(p.delete_pods) == EVERY_POD and not p.create_pods
    assert restarts(p) == 0  # asked for, not a failure
    restarting = cond(p, "Restarting")
    assert restarting is not None and restarting["reason"] == "MSJobResizing"
    assert "MS_WORKER_NUM 2 -> 3" in restarting["message"]
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "MSJobResizing")]


def test_scaling_a_cluster_that_has_not_started_just_replaces_its_pods() -> None:
    p = run(cluster(workers=3), members(phase="Pending"), [service()])
    assert names(p.delete_pods) == EVERY_POD
    assert cond(p, "Restarting") is None and not p.events


def test_a_member_deleted_from_a_running_cluster_restarts_the_rest() -> None:
    pods = [x for x in members() if x["metadata"]["name"] != "j-worker-1"]
    p = run(cluster(status=running_status()), pods, [service()])
    assert names(p.delete_pods) == {"j-scheduler-0", "j-worker-0"} and not p.create_pods
    assert must_cond(p, "Restarting")["reason"] == "MSJobMemberLost"


def test_recovery_closes_restarting_with_a_true_message_and_running_stays_last() -> None:
    status = running_status(replicaStatuses={"Worker": {"restarts": 1}})
    status["conditions"][1]["status"] = "False"
    status["conditions"].append(
        {"type": "Restarting", "status": "True", "reason": "MSJobRestarting",
         "message": "MSJob ns/j is restarting all its pods because ...",
         "lastUpdateTime": T0, "lastTransitionTime": T0}
    )  # fmt: skip
    p = run(cluster(status=status), members(), [service()])
    assert p.status is not None
    assert p.status["conditions"][-1]["type"] == "Running"
    restarting = cond(p, "Restarting")
    assert restarting is not None and restarting["status"] == "False"
    assert "no longer restarting" in restarting["message"]
    # Why it restarted outlives the restart (the pods that failed are gone).
    assert restarting["message"].endswith(
        "The last restart: MSJob ns/j is restarting all its pods because ..."
    )
    assert restarts(p) == 1
    assert restarting["reason"] == "MSJobRestarted"


def test_the_end_of_a_resize_says_it_was_a_resize() -> None:
    # A scale is no failure: msop status must not show it as the job's last failure.
    status = running_status()
    status["conditions"][1]["status"] = "False"
    status["conditions"].append(
        {"type": "Restarting", "status": "True", "reason": "MSJobResizing",
         "message": "MSJob ns/j is restarting all its pods so that every one has the new "
                    "cluster size (MS_WORKER_NUM 2 -> 3)",
         "lastUpdateTime": T0, "lastTransitionTime": T0}
    )  # fmt: skip
    p = run(cluster(status=status), members(), [service()])
    restarting = cond(p, "Restarting")
    assert restarting is not None and restarting["status"] == "False"
    assert restarting["reason"] == "MSJobResized"
    assert "new cluster size" in restarting["message"]


# --- the failed run's last words ---------------------------------------------------------

TRACEBACK = "\n".join(
    [f"epoch {i} loss 0.{9 - i}" for i in range(8)]
    + [
        "Traceback (most recent call last):",
        '  File "/opt/train/train.py", line 42, in <module>',
        "    main()",
        '  File "/opt/train/train.py", line 37, in main',
        '    raise ValueError("bad batch")',
        "ValueError: bad batch",
    ]
)


def crashed(message: str, code: int = 1, at: str = "2026-01-01T11:59:00Z") -> JSON:
    p = failed("Worker", 1, code, at)
    p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message + "\n"
    return p


def test_the_mindspore_container_keeps_its_log_tail_unless_the_template_says_otherwise() -> None:
    j = cluster()
    made = desired.pod(j, "Worker", 0, sched_host="10.0.0.1")
    assert made["spec"]["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"
    own = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    own["terminationMessagePolicy"] = "File"
    own_sidecar = {"name": "sidecar", "image": "s:1"}
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"].append(own_sidecar)
    made = desired.pod(j, "Worker", 0, sched_host="10.0.0.1")
    assert made["spec"]["containers"][0]["terminationMessagePolicy"] == "File"
    assert "terminationMessagePolicy" not in made["spec"]["containers"][1]


def test_a_failure_that_fails_the_job_keeps_the_end_of_its_output() -> None:
    p = run(cluster(status=running_status()), members(crashed(TRACEBACK)), [service()])
    failure = cond(p, "Failed")
    assert failure is not None and failure["reason"] == "MSJobFailed"
    first, _, said = failure["message"].partition("\nThe last output of pod ns/j-worker-1:\n")
    assert first.endswith("which restartPolicy ExitCode of Worker does not retry.")
    lines = said.split("\n")
    assert len(lines) == 10 and lines[-1] == "ValueError: bad batch"
    assert lines[0] == "epoch 4 loss 0.5"
    warning = next(e for e in p.events if e.reason == "MSJobFailed")
    assert warning.message == failure["message"]


def test_a_restart_and_the_last_restart_keep_it_too() -> None:
    p = run(cluster(run_policy={"backoffLimit": 3}, status=running_status()),
            members(crashed(TRACEBACK, code=137)), [service()])  # fmt: skip
    assert must_cond(p, "Restarting")["message"].endswith("ValueError: bad batch")
    status = running_status(replicaStatuses={"Worker": {"restarts": 3}})
    p = run(cluster(run_policy={"backoffLimit": 3}, status=status),
            members(crashed(TRACEBACK, code=137)), [service()])  # fmt: skip
    failure = cond(p, "Failed")
    assert failure is not None and failure["reason"] == "BackoffLimitExceeded"
    assert failure["message"].endswith("ValueError: bad batch")
    assert names(p.delete_pods) == EVERY_POD  # gone: the message is what is left


def test_a_long_tail_is_cut_at_the_front() -> None:
    long = "\n".join("x" * 300 for _ in range(9)) + "\nValueError: " + "y" * 50
    p = run(cluster(status=running_status()), members(crashed(long)), [service()])
    said = must_cond(p, "Failed")["message"].split("The last output of pod ns/j-worker-1:\n")[1]
    assert len(said) == 1000 and said.startswith("...") and said.endswith("y" * 50)


def test_a_one_line_message_stays_inline_and_a_report_is_not_output() -> None:
    one_line = crashed("msrun: local worker 1 (rank 1) exited with code 1")
    p = run(cluster(status=running_status()), members(one_line), [service()])
    message = must_cond(p, "Failed")["message"]
    assert "exited with code 1 (Error): msrun: local worker 1 (rank 1)" in message
    assert "last output" not in message
    p = run(cluster(status=running_status()),
            members(crashed('{"version": 1,\n"step": 3}')), [service()])  # fmt: skip
    assert "last output" not in must_cond(p, "Failed")["message"]
