"""Restarts in place (msop.msjob.inplace, restarts.py): what a restartScope Job cluster's
pods carry, and the planner's choice between a restart in place and a recreation."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from msop.kube.objects import format_time
from msop.msjob import nodehealth
from msop.msjob.inplace import pods as inplace
from msop.msjob.inplace.pods import KEEPER_LAUNCH, InPlace
from msop.msjob.plan import Plan
from msop.msjob.projection import pod_projection
from tests.support.builders import (
    NOW,
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
ON = InPlace(image="msop:0.1.0", public_key="04" + "ab" * 64, timeout=120.0)
EVERY_POD = {"j-scheduler-0", "j-worker-0", "j-worker-1"}
KILLED_AT = format_time(NOW - timedelta(seconds=5))


def cluster(policy: str = "ExitCode", **spec: Any) -> JSON:
    return job({"Scheduler": (1, "Never"), "Worker": (2, policy)}, **spec)


def member(
    rtype: str,
    index: int,
    *,
    generation: int = 0,
    restarts: int = 0,
    state: str = "running",
    code: int = 137,
    last: int | None = None,
    barrier: str | None = None,
    phase: str = "Running",
    agent: bool = True,
) -> JSON:
    """A running member of the cluster made with the agent at ``generation``; its
    training container ``state`` (running, terminated with ``code``, waiting), its last
    run's exit code ``last``, and its barrier's state."""
    p = pod(rtype, index, phase, size=(2, 0))
    if agent:
        env = [
            {"name": "MSOP_AGENT_PORT", "value": "28090"},
            {"name": "MSOP_AGENT_GENERATION", "value": str(generation)},
        ]
        p["spec"]["initContainers"] = [{"name": "msop-agent", "env": env}]
    p["status"]["podIP"] = f"10.1.0.{index + (10 if rtype == 'Worker' else 0)}"
    cs = p["status"]["containerStatuses"][0]
    cs["restartCount"] = restarts
    if state == "terminated":
        cs["state"] = {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": KILLED_AT}}
    elif state == "waiting":
        cs["state"] = {"waiting": {"reason": "PodInitializing"}}
    else:
        cs["state"] = {"running": {"startedAt": T0}}
    if last is not None:
        cs["lastState"] = {
            "terminated": {"exitCode": last, "reason": "Error", "finishedAt": KILLED_AT}
        }
    if barrier is not None:
        p["status"]["initContainerStatuses"] = [{"name": "msop-barrier", "state": {barrier: {}}}]
    return p


def members(*overrides: JSON, **kw: Any) -> list[JSON]:
    made = (member("Scheduler", 0, **kw), member("Worker", 0, **kw), member("Worker", 1, **kw))
    pods = {p["metadata"]["name"]: p for p in made}
    for p in overrides:
        pods[p["metadata"]["name"]] = p
    return list(pods.values())


def restarting(restarts: int = 1, seconds_ago: float = 10.0, **extra: Any) -> JSON:
    """The status of a job restarting in place for the ``restarts``-th time."""
    status = running_status(replicaStatuses={"Worker": {"restarts": restarts}}, **extra)
    at = format_time(NOW - timedelta(seconds=seconds_ago))
    status["conditions"][1].update(status="False", reason="MSJobRestartingInPlace")
    status["conditions"].append(
        {"type": "Restarting", "status": "True", "reason": "MSJobRestartingInPlace",
         "message": "MSJob ns/j is restarting all its pods in place because pod ns/j-worker-1 "
         "exited with code 137 (Error) (restart 1).",
         "lastUpdateTime": at, "lastTransitionTime": at}
    )  # fmt: skip
    return status


def agent_env(made: JSON) -> dict[str, str]:
    (agent,) = [c for c in made["spec"]["initContainers"] if c["name"] == "msop-agent"]
    return {e["name"]: e["value"] for e in agent["env"]}


def asked(p: Plan, action: str) -> set[str]:
    return {r.pod["metadata"]["name"] for r in p.agent_requests if r.action == action}


def generations(p: Plan) -> set[int]:
    return {r.generation for r in p.agent_requests}


def restarts(p: Plan) -> int:
    assert p.status is not None
    return sum(e.get("restarts", 0) for e in p.status["replicaStatuses"].values())


# --- what the pods carry ----------------------------------------------------------------


def new_pods(j: JSON, **opts: Any) -> dict[str, JSON]:
    p = run(j, [], [service()], **opts)
    return {x["metadata"]["name"]: x for x in p.create_pods}


@pytest.mark.parametrize(
    ("policy", "codes"),
    [("ExitCode", {"operator": "NotIn", "values": list(range(128))}),
     ("OnFailure", {"operator": "NotIn", "values": [0]}),
     ("Always", {"operator": "NotIn", "values": [0]})],
)  # fmt: skip
def test_each_member_gets_the_agent_the_barrier_and_its_policys_rule(
    policy: str, codes: JSON
) -> None:
    j = cluster(policy, status=running_status(replicaStatuses={"Worker": {"restarts": 2}}))
    j["metadata"]["uid"] = "job-uid"
    worker = new_pods(j, in_place=ON)["j-worker-1"]["spec"]
    agent, barrier = worker["initContainers"][:2]
    assert (agent["name"], barrier["name"]) == ("msop-agent", "msop-barrier")
    assert agent["restartPolicy"] == "Always"
    assert agent["restartPolicyRules"] == [
        {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [75]}}
    ]
    assert "restartPolicy" not in barrier
    env = {e["name"]: e["value"] for e in agent["env"]}
    assert env == {
        "MSOP_AGENT_PORT": "28090", "MSOP_AGENT_JOB": "job-uid",
        "MSOP_AGENT_KEY": ON.public_key, "MSOP_AGENT_GENERATION": "2",
        "MSOP_AGENT_DIR": "/var/run/msop-agent", "MSOP_AGENT_STOP_GRACE": "1",
    }  # fmt: skip
    assert agent["image"] == barrier["image"] == "msop:0.1.0"
    assert agent["ports"][0]["containerPort"] == 28090
    main = worker["containers"][0]
    assert main["restartPolicy"] == "Never"
    assert main["restartPolicyRules"] == [{"action": "RestartAllContainers", "exitCodes": codes}]
    assert {"name": "msop-agent", "emptyDir": {}} in worker["volumes"]
    assert worker["restartPolicy"] == "Never"


def test_the_stop_grace_of_a_restart_in_place_is_the_jobs_not_the_pods_grace_period() -> None:
    j = cluster()
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["terminationGracePeriodSeconds"] = 45

    def grace(job: JSON) -> set[str]:
        pods = new_pods(job, in_place=ON)
        return {
            {e["name"]: e["value"] for e in p["spec"]["initContainers"][0]["env"]}[
                "MSOP_AGENT_STOP_GRACE"
            ]
            for p in pods.values()
        }

    assert grace(j) == {"1"}  # a deletion's 45 s are not a restart's
    j["spec"]["restartInPlaceGracePeriodSeconds"] = 20
    assert grace(j) == {"20"}


def test_the_training_command_runs_under_the_keeper_of_its_output() -> None:
    j = cluster()
    specs = j["spec"]["msReplicaSpecs"]
    specs["Worker"]["template"]["spec"]["containers"][0].update(
        command=["python", "train.py"], args=["--epochs", "3"],
        volumeMounts=[{"name": "data", "mountPath": "/data"}],
    )  # fmt: skip
    specs["Scheduler"]["template"]["spec"]["containers"][0].pop("command", None)
    pods = new_pods(j, in_place=ON)
    main = pods["j-worker-0"]["spec"]["containers"][0]
    assert main["command"] == [
        "/bin/sh", "-c", KEEPER_LAUNCH, "msop-keeper", "/var/run/msop-keeper", "mindspore",
        "--", "python", "train.py", "--epochs", "3",
    ]  # fmt: skip
    assert "args" not in main
    assert main["volumeMounts"] == [
        {"name": "data", "mountPath": "/data"},
        {"name": "msop-agent", "mountPath": "/var/run/msop-keeper", "subPath": "runs"},
    ]
    # No command: the image's entrypoint, which msop cannot see, runs as it is.
    scheduler = pods["j-scheduler-0"]["spec"]["containers"][0]
    assert "command" not in scheduler and "volumeMounts" not in scheduler
    # Without restart in place nothing is wrapped.
    plain = new_pods(j)["j-worker-0"]["spec"]["containers"][0]
    assert plain["command"] == ["python", "train.py"] and plain["args"] == ["--epochs", "3"]


def test_the_agent_goes_before_the_templates_own_init_containers() -> None:
    j = cluster()
    for spec in j["spec"]["msReplicaSpecs"].values():
        spec["template"]["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    pods = new_pods(j, in_place=ON)
    for p in pods.values():
        assert [c["name"] for c in p["spec"]["initContainers"]] == [
            "msop-agent", "msop-barrier", "fetch"
        ]  # fmt: skip


def test_a_guaranteed_pod_stays_guaranteed() -> None:
    j = cluster()
    fixed = {"cpu": "2", "memory": "4Gi"}
    for spec in j["spec"]["msReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {
            "requests": dict(fixed), "limits": dict(fixed)
        }  # fmt: skip
    for p in new_pods(j, in_place=ON).values():
        for c in p["spec"]["initContainers"][:2]:
            assert c["resources"]["requests"] == c["resources"]["limits"]
    burstable = new_pods(cluster(), in_place=ON)["j-worker-0"]["spec"]["initContainers"][0]
    assert "cpu" not in burstable["resources"]["limits"]


@pytest.mark.parametrize(
    ("j", "opts"),
    [
        (cluster(), {}),  # --restart-in-place=false
        (cluster(), {"in_place": InPlace("i", "k", unavailable="node(s) n1 do not declare it")}),
        (cluster(restartScope="Pod"), {"in_place": ON}),
        (cluster(enableDynamicWorker=True, restartScope="Job"), {"in_place": ON}),
        (job({"Scheduler": (1, "Never"), "Worker": (2, "Never")}), {"in_place": ON}),
    ],
    ids=["off", "unsupported", "pod-scope", "elastic", "never-retried"],
)
def test_no_agent_where_no_restart_in_place_can_happen(j: JSON, opts: JSON) -> None:
    for p in new_pods(j, **opts).values():
        assert "initContainers" not in p["spec"]
        assert "restartPolicyRules" not in p["spec"]["containers"][0]


def test_a_replica_that_is_never_retried_is_restarted_with_its_peers_only() -> None:
    pods = new_pods(cluster(), in_place=ON)
    scheduler = pods["j-scheduler-0"]["spec"]  # its policy is Never
    assert scheduler["initContainers"][0]["name"] == "msop-agent"
    assert "restartPolicyRules" not in scheduler["containers"][0]
    assert "restartPolicyRules" in pods["j-worker-0"]["spec"]["containers"][0]


# --- the decision ---------------------------------------------------------------------


def test_a_killed_worker_restarts_every_pod_in_place_and_counts_once() -> None:
    killed = member("Worker", 1, state="terminated", code=137)
    p = run(cluster(run_policy={"backoffLimit": 3}, status=running_status()),
            members(killed), [service()], in_place=ON)  # fmt: skip
    assert not p.delete_pods and not p.create_pods
    assert p.status_first
    assert restarts(p) == 1
    c = cond(p, "Restarting")
    assert c is not None and c["status"] == "True" and c["reason"] == "MSJobRestartingInPlace"
    assert "in place because pod ns/j-worker-1 exited with code 137" in c["message"]
    assert "restart 1 of 3" in c["message"]
    assert must_cond(p, "Running")["status"] == "False"
    assert asked(p, "restart") == EVERY_POD and generations(p) == {1}
    assert ("Warning", "MSJobRestartingInPlace") in {(e.type, e.reason) for e in p.events}
    assert p.requeue_after is not None and p.requeue_after <= 1.0


def test_the_failed_pod_already_restarting_is_not_asked_again() -> None:
    # The kubelet acted first: the failed pod's containers were removed and it waits.
    killed = member("Worker", 1, restarts=1, state="waiting", last=137, barrier="running")
    p = run(cluster(status=running_status()), members(killed), [service()], in_place=ON)
    assert must_cond(p, "Restarting")["reason"] == "MSJobRestartingInPlace"
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-0"}


def test_the_backoff_limit_still_fails_the_job() -> None:
    killed = member("Worker", 1, generation=2, state="terminated")
    status = running_status(replicaStatuses={"Worker": {"restarts": 2}})
    p = run(cluster(run_policy={"backoffLimit": 2}, status=status),
            members(killed, generation=2), [service()], in_place=ON)  # fmt: skip
    assert must_cond(p, "Failed")["reason"] == "BackoffLimitExceeded"
    assert names(p.delete_pods) == EVERY_POD and not p.agent_requests


def test_a_script_error_keeps_the_failed_pod_and_its_log() -> None:
    # Exit 1 under ExitCode: permanent, the job fails. The failed pod's phase is still
    # Running (the kubelet is stopping its agent sidecar), but it is finished: the default
    # cleanPodPolicy Running keeps it, with its log, as it keeps a Failed pod.
    failed = member("Worker", 1, state="terminated", code=1)
    p = run(cluster(status=running_status()), members(failed), [service()], in_place=ON)
    assert must_cond(p, "Failed")["reason"] == "MSJobFailed"
    assert names(p.delete_pods) == EVERY_POD - {"j-worker-1"}


def test_a_restart_that_completed_is_not_seen_again() -> None:
    # Restarted once in place: every training container ran again (restartCount 1), the
    # job is Running; the last run's exit code stays in lastState.
    pods = members(restarts=1, last=137)
    status = running_status(replicaStatuses={"Worker": {"restarts": 1}})
    p = run(cluster(status=status), pods, [service()], in_place=ON)
    assert p.status is None or cond(p, "Restarting") is None
    assert not p.agent_requests and not p.delete_pods


def test_a_second_failure_is_a_second_restart() -> None:
    again = member("Worker", 0, restarts=2, state="waiting", last=137, barrier="running")
    status = running_status(replicaStatuses={"Worker": {"restarts": 1}})
    p = run(cluster(status=status), members(again, restarts=1, last=137), [service()],
            in_place=ON)  # fmt: skip
    assert restarts(p) == 2
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-1"} and generations(p) == {2}


# --- under way --------------------------------------------------------------------------


def test_agents_that_have_not_restarted_their_pod_are_asked_again() -> None:
    pods = members(
        member("Worker", 1, restarts=1, state="waiting", last=137, barrier="running"),
        member("Worker", 0, restarts=1, state="waiting", last=137, barrier="running"),
    )
    p = run(cluster(status=restarting()), pods, [service()], in_place=ON)
    assert asked(p, "restart") == {"j-scheduler-0"} and not asked(p, "release")
    assert restarts(p) == 1  # counted once
    assert not p.delete_pods and p.requeue_after is not None and p.requeue_after <= 1.0


def test_the_barrier_is_released_once_every_pod_waits_there() -> None:
    pods = members(restarts=1, state="waiting", last=137, barrier="running")
    p = run(cluster(status=restarting()), pods, [service()], in_place=ON)
    assert asked(p, "release") == EVERY_POD and not asked(p, "restart")
    assert generations(p) == {1}


def test_a_release_that_missed_a_pod_is_sent_again() -> None:
    pods = members(
        member("Worker", 0, restarts=1, state="waiting", last=137, barrier="running"),
        restarts=1, last=137, barrier="terminated",
    )  # fmt: skip
    p = run(cluster(status=restarting()), pods, [service()], in_place=ON)
    assert asked(p, "release") == {"j-worker-0"}


def test_running_again_ends_the_restart() -> None:
    pods = members(restarts=1, last=137, barrier="terminated")
    p = run(cluster(status=restarting()), pods, [service()], in_place=ON)
    assert must_cond(p, "Running")["status"] == "True"
    done = cond(p, "Restarting")
    assert done is not None and done["status"] == "False"
    assert not p.agent_requests and not p.delete_pods


@pytest.mark.parametrize(
    ("change", "gone"),
    [
        (lambda pods: pods[1:], "j-scheduler-0"),
        (lambda pods: [*pods[:2], member("Worker", 1, phase="Failed", state="terminated",
                                         code=1)], "j-worker-1"),
    ],
    ids=["deleted", "failed"],
)  # fmt: skip
def test_a_pod_gone_or_failed_before_the_release_is_replaced_alone(change: Any, gone: str) -> None:
    pods = change(members(restarts=1, state="waiting", last=137, barrier="running"))
    p = run(cluster(status=restarting()), pods, [service()], in_place=ON)
    if gone in names(pods):  # failed as a whole: deleted, made again once gone
        assert names(p.delete_pods) == {gone} and not p.create_pods
    else:
        assert not p.delete_pods and names(p.create_pods) == {gone}
        env = agent_env(p.create_pods[0])
        assert env["MSOP_AGENT_GENERATION"] == "1" and env["MSOP_AGENT_HOLD"] == "1"
    assert must_cond(p, "Restarting")["reason"] == "MSJobRestartingInPlace"
    assert restarts(p) == 1  # nothing ran at generation 1 yet: the same restart
    assert not asked(p, "release")  # not before the replacement waits with the others


def test_a_restart_past_its_timeout_falls_back_naming_the_laggards() -> None:
    pods = members(member("Scheduler", 0), restarts=1, state="waiting", last=137,
                   barrier="running")  # fmt: skip
    p = run(cluster(status=restarting(seconds_ago=122)), pods, [service()], in_place=ON)
    assert names(p.delete_pods) == EVERY_POD
    message = must_cond(p, "Restarting")["message"]
    within = "within 120s and the members' 1s grace (not restarted: j-scheduler-0)"
    assert f"did not complete {within}" in message


def test_until_the_timeout_it_waits() -> None:
    pods = members(member("Scheduler", 0), restarts=1, state="waiting", last=137,
                   barrier="running")  # fmt: skip
    p = run(cluster(status=restarting(seconds_ago=119)), pods, [service()], in_place=ON)
    assert not p.delete_pods and p.requeue_after == pytest.approx(1.0)


# --- when it recreates, it says why -------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "opts", "why"),
    [
        (members(member("Worker", 1, state="terminated")), {},
         "restarts in place are turned off (msop run --restart-in-place=false)"),
        (members(member("Worker", 1, state="terminated")),
         {"in_place": InPlace("i", "k", unavailable="node(s) n1 do not declare it")},
         "node(s) n1 do not declare it"),
        (members(member("Worker", 1, state="terminated"), agent=False), {"in_place": ON},
         "pod j-scheduler-0 was created without the msop agent"),
        (members(member("Worker", 1, phase="Failed", state="terminated"),
                 member("Worker", 0, phase="Failed", state="terminated", code=1),
                 member("Scheduler", 0, phase="Failed", state="terminated", code=1)),
         {"in_place": ON}, "no pod of the job is left to restart in place"),
    ],
    ids=["off", "unsupported", "no-agent", "every-pod-failed"],
)  # fmt: skip
def test_a_recreation_says_why_not_in_place(pods: list[JSON], opts: JSON, why: str) -> None:
    for member_ in pods:
        if member_["metadata"]["name"] == "j-worker-1" and "initContainers" not in member_["spec"]:
            member_["status"]["phase"] = "Failed"  # without its rule, the failed pod fails
    p = run(cluster(status=running_status()), pods, [service()], **opts)
    assert names(p.delete_pods) == EVERY_POD
    c = cond(p, "Restarting")
    assert c is not None and c["reason"] == "MSJobRestarting"
    assert why in c["message"]
    assert restarts(p) == 1


def test_a_pod_scope_job_keeps_its_rules() -> None:
    killed = pod("Worker", 1, "Failed", exit_code=137, size=(2, 0))
    p = run(cluster(restartScope="Pod", status=running_status()),
            [pod("Scheduler", 0, size=(2, 0)), pod("Worker", 0, size=(2, 0)), killed],
            [service()], in_place=ON)  # fmt: skip
    assert names(p.delete_pods) == {"j-worker-1"} and not p.agent_requests


def test_the_cache_keeps_what_the_decision_reads() -> None:
    pods = members(restarts=1, state="waiting", last=137, barrier="running")
    full = run(cluster(status=restarting()), pods, [service()], in_place=ON)
    lean = run(cluster(status=restarting()), [pod_projection(x) for x in pods], [service()],
               in_place=ON)  # fmt: skip
    assert asked(full, "release") == asked(lean, "release") == EVERY_POD
    made = new_pods(cluster(), in_place=ON)["j-worker-0"]
    kept = pod_projection(made)
    assert inplace.agent_of(kept) == inplace.agent_of(made) == inplace.Agent(28090, 0)


def test_a_container_the_kubelet_removed_before_reporting_has_no_made_up_code() -> None:
    # RestartAllContainers removed it first: the kubelet says 137 for any such container.
    killed = member("Worker", 1, restarts=1, state="waiting", last=137, barrier="running")
    last = killed["status"]["containerStatuses"][0]["lastState"]["terminated"]
    last.update(reason="RestartingAllContainers", message="The container is removed")
    p = run(cluster(status=running_status()), members(killed), [service()], in_place=ON)
    message = must_cond(p, "Restarting")["message"]
    assert "pod ns/j-worker-1 failed without an exit code (RestartedInPlace" in message
    assert "137" not in message and "ExitedWithCode" not in {e.reason for e in p.events}
    assert restarts(p) == 1 and asked(p, "restart") == {"j-scheduler-0", "j-worker-0"}


# --- a hybrid restart: the lost pods recreated, the others restarted in place -------------


def replacement(
    rtype: str, index: int, *, generation: int = 1, barrier: str | None = "running",
    phase: str = "Running", since: str = KILLED_AT,
) -> JSON:  # fmt: skip
    """A pod made to replace a lost member at ``generation``, held at its barrier
    (``barrier="running"``, waiting there since ``since``), or Pending before that."""
    state = "running" if barrier == "terminated" else "waiting"
    made = member(rtype, index, generation=generation, state=state, barrier=barrier,
                  phase=phase)  # fmt: skip
    made["metadata"]["uid"] = f"new-{rtype}-{index}"
    if barrier == "running":
        made["status"]["initContainerStatuses"][0]["state"] = {"running": {"startedAt": since}}
    if phase == "Pending":
        made["status"].pop("podIP")
    return made


def without(pods: list[JSON], name: str) -> list[JSON]:
    return [x for x in pods if x["metadata"]["name"] != name]


def main_env(made: JSON) -> dict[str, Any]:
    env = made["spec"]["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


@pytest.mark.parametrize("gone", ["j-worker-1", "j-scheduler-0"])
def test_a_member_deleted_is_recreated_alone_and_the_others_restart_in_place(gone: str) -> None:
    j = cluster(run_policy={"backoffLimit": 3}, status=running_status())
    # 1. Deleted (kubectl delete pod, its node lost): counted, the others asked at once,
    #    its replacement made for the new generation, held at its barrier.
    p = run(j, without(members(), gone), [service()], in_place=ON)
    assert p.status_first and restarts(p) == 1
    assert not p.delete_pods and names(p.create_pods) == {gone}
    assert not p.create_services and not p.delete_services  # the same ClusterIP
    assert asked(p, "restart") == EVERY_POD - {gone} and generations(p) == {1}
    c = must_cond(p, "Restarting")
    assert c["reason"] == "MSJobRestartingInPlace"
    assert f"pod(s) {gone} of the running cluster are gone (restart 1 of 3)" in c["message"]
    assert "recreated and the other pods restarted in place" in c["message"]
    assert ("Warning", "MSJobMemberLost") in {(e.type, e.reason) for e in p.events}
    made = p.create_pods[0]
    assert agent_env(made)["MSOP_AGENT_HOLD"] == "1"
    assert agent_env(made)["MSOP_AGENT_GENERATION"] == "1"
    # Its training environment is its predecessor's (same slot, same MS_* values).
    before = next(x for x in new_pods(cluster(), in_place=ON).values()
                  if x["metadata"]["name"] == gone)  # fmt: skip
    assert main_env(made) == main_env(before)
    if gone == "j-scheduler-0":
        assert main_env(made)["MS_SCHED_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    else:
        assert main_env(made)["MS_SCHED_HOST"] == "10.0.0.1"

    status = restarting(restarts=1)
    kept = members(restarts=1, state="waiting", last=137, barrier="running")
    rtype, index = ("Worker", 1) if gone == "j-worker-1" else ("Scheduler", 0)
    # 2. The kept pods wait at the barrier, the replacement is not there yet: no release.
    pending = replacement(rtype, index, barrier=None, phase="Pending")
    p = run(cluster(status=status), [*without(kept, gone), pending], [service()], in_place=ON)
    assert not p.agent_requests and not p.create_pods and not p.delete_pods
    # 3. It waits there too: all are released together.
    p = run(cluster(status=status), [*without(kept, gone), replacement(rtype, index)],
            [service()], in_place=ON)  # fmt: skip
    assert asked(p, "release") == EVERY_POD and generations(p) == {1}
    # 4. Every training container runs again: Running, one restart counted.
    ran = members(restarts=1, last=137, barrier="terminated")
    p = run(cluster(status=status), [*without(ran, gone), replacement(
        rtype, index, barrier="terminated")], [service()], in_place=ON)  # fmt: skip
    assert must_cond(p, "Running")["status"] == "True"
    assert must_cond(p, "Restarting")["status"] == "False"
    assert restarts(p) == 1 and not p.agent_requests


def test_a_replacement_that_says_it_runs_before_any_release_is_not_believed() -> None:
    # Its barrier holds it until the release: a status that says otherwise (kwok's, say)
    # does not let the kept pods go before it has been seen at its barrier.
    kept = members(restarts=1, state="waiting", last=137, barrier="running")
    lying = replacement("Worker", 1, barrier="terminated")
    p = run(cluster(status=restarting()), [*without(kept, "j-worker-1"), lying], [service()],
            in_place=ON)  # fmt: skip
    assert not p.agent_requests
    assert p.status is None or must_cond(p, "Restarting")["status"] == "True"


def test_an_evicted_pod_is_recreated_alone() -> None:
    evicted = member("Worker", 0, phase="Failed", state="waiting")
    evicted["status"].update(reason="Evicted", message="The node was low on memory.")
    p = run(cluster(status=running_status()), members(evicted), [service()], in_place=ON)
    assert names(p.delete_pods) == {"j-worker-0"} and not p.create_pods  # once gone
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-1"}
    c = must_cond(p, "Restarting")
    assert c["reason"] == "MSJobRestartingInPlace" and restarts(p) == 1
    assert "failed without an exit code (Evicted" in c["message"]
    assert "pod(s) j-worker-0 are recreated and the other pods restarted in place" in c["message"]
    # Once it is gone, it is made again, held, and nothing more is counted.
    kept = members(restarts=1, state="waiting", last=137, barrier="running")
    p = run(cluster(status=restarting()), without(kept, "j-worker-0"), [service()], in_place=ON)
    assert names(p.create_pods) == {"j-worker-0"} and restarts(p) == 1
    assert agent_env(p.create_pods[0])["MSOP_AGENT_HOLD"] == "1"


def test_a_pod_lost_at_the_barrier_joins_the_restart_under_way() -> None:
    at_barrier = members(restarts=1, state="waiting", last=137, barrier="running")
    p = run(cluster(status=restarting()), without(at_barrier, "j-worker-0"), [service()],
            in_place=ON)  # fmt: skip
    assert names(p.create_pods) == {"j-worker-0"} and not p.delete_pods
    assert restarts(p) == 1 and not asked(p, "release")
    # Terminating (its node lost): it holds its slot until it is gone.
    going = members(member("Worker", 0, restarts=1, state="waiting", last=137,
                           barrier="running"), restarts=1, state="waiting", last=137,
                    barrier="running")  # fmt: skip
    going[1]["metadata"]["deletionTimestamp"] = KILLED_AT
    p = run(cluster(status=restarting()), going, [service()], in_place=ON)
    assert not p.create_pods and not p.delete_pods and not asked(p, "release")
    assert must_cond(p, "Restarting")["reason"] == "MSJobRestartingInPlace"


def test_a_second_failure_before_the_release_is_the_same_restart() -> None:
    # The first failure restarted the job (generation 1); before the release, a kept pod
    # is evicted: it is replaced too, and no second restart is counted.
    evicted = member("Worker", 0, phase="Failed", state="waiting")
    evicted["status"]["reason"] = "Evicted"
    kept = members(evicted, restarts=1, state="waiting", last=137, barrier="running")
    p = run(cluster(run_policy={"backoffLimit": 1}, status=restarting()), kept, [service()],
            in_place=ON)  # fmt: skip
    assert names(p.delete_pods) == {"j-worker-0"} and restarts(p) == 1
    assert cond(p, "Failed") is None
    assert must_cond(p, "Restarting")["reason"] == "MSJobRestartingInPlace"


def test_a_failure_after_the_release_is_a_new_restart() -> None:
    # Released: the Scheduler and Worker 0 run again at generation 1; Worker 1's training
    # then fails again and its rule restarts it (its second restart in place).
    again = member("Worker", 1, restarts=2, state="waiting", last=137, barrier="running")
    ran = members(again, restarts=1, last=137, barrier="terminated")
    p = run(cluster(status=restarting()), ran, [service()], in_place=ON)
    assert restarts(p) == 2 and p.status_first
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-0"} and generations(p) == {2}
    c = must_cond(p, "Restarting")
    assert c["lastTransitionTime"] == format_time(NOW)  # its own time runs from now
    assert "Restarting" in p.transitions  # counted by the job metrics, too


def test_a_pod_lost_after_the_release_is_a_new_restart_counted() -> None:
    ran = members(restarts=1, last=137, barrier="terminated")
    p = run(cluster(run_policy={"backoffLimit": 3}, status=restarting()),
            without(ran, "j-worker-1"), [service()], in_place=ON)  # fmt: skip
    assert restarts(p) == 2
    assert names(p.create_pods) == {"j-worker-1"}
    assert agent_env(p.create_pods[0])["MSOP_AGENT_GENERATION"] == "2"
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-0"} and generations(p) == {2}
    assert "(restart 2 of 3)" in must_cond(p, "Restarting")["message"]


def test_a_replacement_that_cannot_be_scheduled_is_waited_for_saying_why() -> None:
    pending = replacement("Worker", 1, barrier=None, phase="Pending")
    pending["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/3 nodes are available: 3 Insufficient cpu."}
    ]  # fmt: skip
    kept = members(restarts=1, state="waiting", last=137, barrier="running")
    pods = [*without(kept, "j-worker-1"), pending]
    # Long past --restart-in-place-timeout: recreating every pod would not find room either.
    status = restarting(seconds_ago=600)
    p = run(cluster(status=status), pods, [service()], in_place=ON)
    assert not p.delete_pods and not p.create_pods and not p.agent_requests
    c = must_cond(p, "Restarting")
    assert c["reason"] == "MSJobRestartingInPlace"
    assert c["message"].startswith("MSJob ns/j is restarting all its pods in place because")
    assert ("It waits for pod j-worker-1, which cannot be scheduled: 0/3 nodes are "
            "available: 3 Insufficient cpu.") in c["message"]  # fmt: skip
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "MSJobReplacementUnschedulable")]
    assert p.requeue_after is None  # no polling: its own status change brings the next pass
    # Said once: the next pass, with the message stored, records nothing.
    status["conditions"][-1]["message"] = c["message"]
    again = run(cluster(status=status), pods, [service()], in_place=ON)
    assert not again.events
    assert (
        must_cond(again, "Restarting")["lastUpdateTime"]
        == status["conditions"][-1]["lastUpdateTime"]
    )
    # Projected by the cache, the pods say the same.
    lean = run(cluster(status=restarting(seconds_ago=600)), [pod_projection(x) for x in pods],
               [service()], in_place=ON)  # fmt: skip
    assert must_cond(lean, "Restarting")["message"] == c["message"]
    # Placed at last, it reaches its barrier: the timeout runs from then, and they go.
    arrived = replacement("Worker", 1, since=format_time(NOW - timedelta(seconds=1)))
    p = run(cluster(status=status), [*without(kept, "j-worker-1"), arrived], [service()],
            in_place=ON)  # fmt: skip
    assert asked(p, "release") == EVERY_POD and not p.delete_pods
    assert "It waits for" not in must_cond(p, "Restarting")["message"]


def test_kept_pods_that_do_not_restart_still_time_out_with_a_replacement() -> None:
    kept = members(member("Scheduler", 0), restarts=1, state="waiting", last=137,
                   barrier="running")  # fmt: skip
    pods = [*without(kept, "j-worker-1"), replacement("Worker", 1)]
    p = run(cluster(status=restarting(seconds_ago=121)), pods, [service()], in_place=ON)
    assert names(p.delete_pods) == EVERY_POD
    assert "not restarted: j-scheduler-0" in must_cond(p, "Restarting")["message"]


# --- backoffLimit: a budget that cannot be reset ------------------------------------------


@pytest.mark.parametrize("opts", [{"in_place": ON}, {}], ids=["hybrid", "recreated"])
def test_a_pod_deleted_again_and_again_exhausts_backoff_limit(opts: JSON) -> None:
    # The count is in the job's status, the only memory: a new operator (a restart, a
    # new leader) plans from it, and deleting pods does not reset it.
    for done in range(3):
        status = running_status(replicaStatuses={"Worker": {"restarts": done}} if done else {})
        p = run(cluster(run_policy={"backoffLimit": 2}, status=status),
                without(members(generation=done), "j-worker-0"), [service()], **opts)  # fmt: skip
        if done < 2:
            assert restarts(p) == done + 1 and p.status_first
            assert cond(p, "Failed") is None
            continue
        failed = must_cond(p, "Failed")
        assert failed["reason"] == "BackoffLimitExceeded"
        assert (
            "pod(s) j-worker-0 of the running cluster are gone after 2 restart(s)"
            in (failed["message"])
        )
        assert names(p.delete_pods) == EVERY_POD - {"j-worker-0"}
        assert not p.create_pods and not p.agent_requests


def test_a_lost_member_without_a_limit_is_counted_all_the_same() -> None:
    status = running_status(replicaStatuses={"Scheduler": {"restarts": 4}})
    p = run(cluster(status=status), without(members(generation=4), "j-worker-1"), [service()],
            in_place=ON)  # fmt: skip
    assert restarts(p) == 5
    assert "(restart 5)" in must_cond(p, "Restarting")["message"]


# --- lost from the first sign: the node not ready, a NoExecute taint, a bad device -------

NODE_OF = {"j-scheduler-0": "n0", "j-worker-0": "n1", "j-worker-1": "n2"}
UNREACHABLE = "node.kubernetes.io/unreachable"


def ago(seconds: float) -> str:
    return format_time(NOW - timedelta(seconds=seconds))


def node(name: str, ready: str = "True", since: float = 3600.0, *taints: JSON) -> JSON:
    """A node whose Ready has been ``ready`` for ``since`` seconds, with ``taints``."""
    made: JSON = {
        "metadata": {"name": name, "resourceVersion": "7"},
        "status": {"conditions": [
            {"type": "MemoryPressure", "status": "False", "lastTransitionTime": ago(9999)},
            {"type": "Ready", "status": ready, "lastTransitionTime": ago(since),
             "lastHeartbeatTime": ago(1)},
        ]},
    }  # fmt: skip
    if taints:
        made["spec"] = {"taints": list(taints)}
    return made


def taint(key: str, seconds_ago: float, effect: str = "NoExecute", value: str = "") -> JSON:
    return {"key": key, "effect": effect, "timeAdded": ago(seconds_ago),
            **({"value": value} if value else {})}  # fmt: skip


def placed(pods: list[JSON]) -> list[JSON]:
    for x in pods:
        x["spec"]["nodeName"] = NODE_OF[x["metadata"]["name"]]
    return pods


def healthy(**sick: JSON) -> dict[str, JSON]:
    """Every node Ready, but those given by name."""
    return {n: sick.get(n) or node(n) for n in ("n0", "n1", "n2")}


def test_a_node_not_ready_past_the_grace_recreates_its_pod_alone() -> None:
    j = cluster(run_policy={"backoffLimit": 3}, status=running_status())
    down = node("n2", "Unknown", 12, taint(UNREACHABLE, 11))
    p = run(j, placed(members()), [service()], in_place=ON, nodes=healthy(n2=down))
    assert p.status_first and restarts(p) == 1
    assert names(p.delete_pods) == {"j-worker-1"} and not p.create_pods  # once gone
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-0"} and generations(p) == {1}
    c = must_cond(p, "Restarting")
    assert c["reason"] == "MSJobRestartingInPlace"
    said = (
        "pod ns/j-worker-1 on node n2 is lost: node unreachable (Ready Unknown) for 12s "
        "(taint node.kubernetes.io/unreachable:NoExecute) (restart 1 of 3)"
    )
    assert said in c["message"], c["message"]
    assert "recreated and the other pods restarted in place" in c["message"]
    [event] = [e for e in p.events if e.reason == "MSJobMemberLost"]
    assert event.type == "Warning" and event.message == c["message"]
    # Its node never confirms the kill: force-deleted once past its deletion deadline,
    # not 5 minutes later; and once gone, made again and held, nothing more counted.
    going = placed(members(restarts=1, state="waiting", last=137, barrier="running"))
    going[2]["metadata"]["deletionTimestamp"] = ago(1)
    p = run(cluster(status=restarting()), going, [service()], in_place=ON,
            nodes=healthy(n2=down))  # fmt: skip
    assert names(p.force_delete_pods) == {"j-worker-1"} and restarts(p) == 1
    p = run(cluster(status=restarting()), without(going, "j-worker-1"), [service()],
            in_place=ON, nodes=healthy(n2=down))  # fmt: skip
    assert names(p.create_pods) == {"j-worker-1"} and restarts(p) == 1


@pytest.mark.parametrize("grace", [10.0, 0.0], ids=["default", "first-sign"])
def test_a_ready_that_flaps_within_the_grace_costs_nothing(grace: float) -> None:
    j = cluster(status=running_status())
    blip = node("n1", "False", 3, taint("node.kubernetes.io/not-ready", 2))
    p = run(j, placed(members()), [service()], in_place=ON, nodes=healthy(n1=blip),
            node_lost_after=grace)  # fmt: skip
    if grace == 0.0:  # at the first sign
        assert names(p.delete_pods) == {"j-worker-0"} and restarts(p) == 1
        return
    assert not p.delete_pods and not p.agent_requests and cond(p, "Restarting") is None
    assert p.requeue_after == pytest.approx(7.0)  # looks again when it would count
    # Ready again: nothing, whatever it was before.
    back = node("n1", "True", 1)
    p = run(j, placed(members()), [service()], in_place=ON, nodes=healthy(n1=back))
    assert not p.delete_pods and not p.agent_requests and p.requeue_after is None


def test_the_templates_own_toleration_is_followed() -> None:
    def tolerating(**toleration: Any) -> JSON:
        j = cluster(status=running_status())
        spec = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
        spec["tolerations"] = [{"key": UNREACHABLE, "operator": "Exists",
                                "effect": "NoExecute", **toleration}]  # fmt: skip
        return j

    def down(seconds: float) -> dict[str, JSON]:
        return healthy(n2=node("n2", "Unknown", seconds, taint(UNREACHABLE, seconds)))

    pods = placed(members())
    p = run(tolerating(tolerationSeconds=60), pods, [service()], in_place=ON, nodes=down(30))
    assert not p.delete_pods and p.requeue_after == pytest.approx(30.0)
    p = run(tolerating(tolerationSeconds=60), pods, [service()], in_place=ON, nodes=down(61))
    assert names(p.delete_pods) == {"j-worker-1"}
    assert "which its template tolerates for 60s" in must_cond(p, "Restarting")["message"]
    # Without tolerationSeconds it tolerates the taint for ever: the pod stays.
    p = run(tolerating(), pods, [service()], in_place=ON, nodes=down(3600))
    assert not p.delete_pods and p.requeue_after is None
    # The toleration the API server adds to every pod (300 s) is not the user's word.
    admitted = placed(members())
    for x in admitted:
        x["spec"]["tolerations"] = [{"key": UNREACHABLE, "operator": "Exists",
                                     "effect": "NoExecute", "tolerationSeconds": 300}]  # fmt: skip
    p = run(cluster(status=running_status()), admitted, [service()], in_place=ON, nodes=down(11))
    assert names(p.delete_pods) == {"j-worker-1"}


def test_a_noexecute_taint_the_pod_does_not_tolerate_loses_it_at_once() -> None:
    j = cluster(status=running_status())
    drained = node("n1", "True", 3600, taint("maintenance", 1, value="now"),
                   taint("other", 1, effect="NoSchedule"))  # fmt: skip
    p = run(j, placed(members()), [service()], in_place=ON, nodes=healthy(n1=drained))
    assert names(p.delete_pods) == {"j-worker-0"}
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-1"}
    assert ("pod ns/j-worker-0 on node n1 is lost: node has taint maintenance=now:NoExecute "
            "(not tolerated, added 1s ago)") in must_cond(p, "Restarting")["message"]  # fmt: skip
    # Tolerated for a while (the pod's own toleration, from a flavor or a webhook): then.
    tolerant = placed(members())
    tolerant[1]["spec"]["tolerations"] = [{"key": "maintenance", "operator": "Exists",
                                           "tolerationSeconds": 20}]  # fmt: skip
    p = run(j, tolerant, [service()], in_place=ON, nodes=healthy(n1=drained))
    assert not p.delete_pods and p.requeue_after == pytest.approx(19.0)


def test_an_unhealthy_device_loses_its_pod() -> None:
    sick = placed(members())
    sick[2]["status"]["containerStatuses"][0]["allocatedResourcesStatus"] = [
        {"name": "nvidia.com/gpu", "resources": [
            {"resourceID": "gpu-0", "health": "Healthy"},
            {"resourceID": "gpu-3", "health": "Unhealthy"}]},
    ]  # fmt: skip
    p = run(cluster(status=running_status()), sick, [service()], in_place=ON, nodes=healthy())
    assert names(p.delete_pods) == {"j-worker-1"}
    assert asked(p, "restart") == {"j-scheduler-0", "j-worker-0"}
    assert ("pod ns/j-worker-1 on node n2 is lost: device nvidia.com/gpu gpu-3 of container "
            "mindspore is Unhealthy") in must_cond(p, "Restarting")["message"]  # fmt: skip
    # The cache keeps what this reads: the same plan from the projected pods and nodes.
    nodes = healthy()
    lean = run(cluster(status=running_status()), [pod_projection(x) for x in sick],
               [service()], in_place=ON,
               nodes={n: nodehealth.node_projection(x) for n, x in nodes.items()})  # fmt: skip
    assert lean.status == p.status and names(lean.delete_pods) == names(p.delete_pods)
    assert asked(lean, "restart") == asked(p, "restart")


def test_a_second_sign_during_a_hybrid_restart_joins_it() -> None:
    kept = placed(members(restarts=1, state="waiting", last=137, barrier="running"))
    down = node("n1", "False", 30, taint("node.kubernetes.io/not-ready", 29))
    p = run(cluster(run_policy={"backoffLimit": 1}, status=restarting()), kept, [service()],
            in_place=ON, nodes=healthy(n1=down))  # fmt: skip
    assert names(p.delete_pods) == {"j-worker-0"} and restarts(p) == 1
    assert cond(p, "Failed") is None and not asked(p, "release")
    [event] = [e for e in p.events if e.reason == "MSJobPodLost"]
    assert event.message.startswith("MSJob ns/j: pod ns/j-worker-0 on node n1 is lost: node "
                                    "NotReady for 30s")  # fmt: skip
    assert "recreated within the restart in place under way" in event.message
    # A pod that says it runs again at the new generation does not end the restart while
    # its node says it is lost.
    ran = placed(members(restarts=1, last=137, barrier="terminated", generation=1))
    p = run(cluster(status=restarting()), ran, [service()], in_place=ON, nodes=healthy(n1=down))
    assert names(p.delete_pods) == {"j-worker-0"}


@pytest.mark.parametrize("scope", ["Job", "Pod"])
def test_without_restart_in_place_the_message_names_the_node(scope: str) -> None:
    j = cluster(status=running_status(), restartScope=scope)
    down = node("n2", "False", 20)
    p = run(j, placed(members()), [service()], nodes=healthy(n2=down))
    said = "pod ns/j-worker-1 on node n2 is lost: node NotReady for 20s"
    if scope == "Job":  # every pod recreated, counted, as for a pod deleted
        assert names(p.delete_pods) == EVERY_POD and restarts(p) == 1
        [event] = [e for e in p.events if e.reason == "MSJobMemberLost"]
        assert said in event.message and said in must_cond(p, "Restarting")["message"]
        return
    # restartScope Pod: deleted and made again once gone, as the taint manager's eviction
    # would have it, without its 5 minutes.
    assert names(p.delete_pods) == {"j-worker-1"}
    [event] = [e for e in p.events if e.reason == "MSJobPodLost"]
    assert said in event.message and "deleted and created again" in event.message
