"""msrun jobs (``spec.msrun``): Worker pods only, several MindSpore workers per pod, the
Scheduler started by msrun in Worker 0's pod and found by the others through a Service.
The API (defaults, validation), the pods msop creates, and the planner's rules for them."""

from __future__ import annotations

from typing import Any

import pytest

from msop.api import MSJob, validate, validate_admission
from msop.api.defaults import apply_defaults
from msop.api.validation import beyond_admission
from msop.msjob import desired
from msop.msjob.inplace.pods import InPlace
from tests.support.builders import cond, job, names, run, running_status

JSON = dict[str, Any]


def msrun_job(workers: int = 2, local: int | None = 2, **spec: Any) -> JSON:
    msrun: JSON = {} if local is None else {"localWorkers": local}
    return job({"Worker": (workers, "ExitCode")}, msrun={**msrun, **spec.pop("msrun", {})}, **spec)


def env_of(p: JSON) -> dict[str, Any]:
    main = next(c for c in p["spec"]["containers"] if c["name"] == "mindspore")
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in main.get("env", [])}


def rendezvous_service(ip: str = "10.0.0.9", port: int = 8118) -> JSON:
    s = desired.scheduler_service(msrun_job())
    s["metadata"]["uid"] = "svc-uid"
    s["spec"]["clusterIP"] = ip
    s["spec"]["ports"][0]["port"] = port
    return s


def msrun_pod(index: int, phase: str = "Running", code: int | None = None, **kw: Any) -> JSON:
    p = desired.pod(msrun_job(**kw), "Worker", index, sched_host="10.0.0.9")
    p["metadata"]["uid"] = f"pod-{index}"
    p["metadata"]["creationTimestamp"] = "2026-01-01T11:00:00Z"
    cs: JSON = {"name": "mindspore", "restartCount": 0, "state": {"running": {}}}
    if code is not None:
        cs["state"] = {"terminated": {"exitCode": code, "reason": "Error",
                                      "finishedAt": "2026-01-01T11:59:00Z"}}  # fmt: skip
    p["status"] = {"phase": phase, "podIP": f"10.244.0.{index + 10}", "containerStatuses": [cs]}
    return p


# --- the API -----------------------------------------------------------------------------------


def test_local_workers_default_to_the_accelerators_of_the_mindspore_container() -> None:
    j = msrun_job(local=None)
    main = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    main["resources"] = {"limits": {"huawei.com/Ascend910": 8, "cpu": "16", "memory": "64Gi"}}
    assert MSJob(j).local_workers == 8
    assert validate_admission(j) == []
    main["resources"] = {"limits": {"nvidia.com/gpu": "4"}}
    assert MSJob(j).local_workers == 4
    assert MSJob(msrun_job(local=3)).local_workers == 3
    assert MSJob(job()).local_workers is None  # not an msrun job


def test_an_msrun_job_restarts_as_a_whole_by_default() -> None:
    assert apply_defaults(msrun_job())["spec"]["restartScope"] == "Job"


def test_without_a_count_admission_accepts_it_and_the_operator_refuses_it() -> None:
    # A CEL rule over every container's limits would cost more than the API server allows.
    j = msrun_job(local=None)
    assert validate_admission(j) == []
    for errors in (validate(j), beyond_admission(j)):
        assert [e.path for e in errors] == ["spec.msrun.localWorkers"], errors
        assert "accelerator limit" in errors[0].message
    main = j["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    main["resources"] = {"limits": {"amd.com/gpu": 2}}
    assert validate(j) == []


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda j: j["spec"]["msReplicaSpecs"].update(Scheduler={
            **j["spec"]["msReplicaSpecs"]["Worker"], "replicas": 1}),
         "spec.msReplicaSpecs.Scheduler", "msrun starts the Scheduler"),
        (lambda j: j["spec"]["msReplicaSpecs"].update(PS=j["spec"]["msReplicaSpecs"]["Worker"]),
         "spec.msReplicaSpecs.PS", "no parameter servers"),
        (lambda j: j["spec"].update(enableDynamicWorker=True),
         "spec.enableDynamicWorker", "one cluster"),
        (lambda j: j["spec"].update(restartScope="Pod"), "spec.restartScope", "rejoin"),
        (lambda j: j["spec"]["msrun"].update(localWorkers=0),
         "spec.msrun.localWorkers", "greater than or equal to 1"),
        (lambda j: j["spec"]["msrun"].update(masterPort=80),
         "spec.msrun.masterPort", "greater than or equal to 1024"),
        (lambda j: j["spec"]["msrun"].update(workers=2), "spec.msrun.workers", "unknown field"),
    ],
)  # fmt: skip
def test_what_an_msrun_job_may_not_say(change: Any, field: str, words: str) -> None:
    j = msrun_job()
    change(j)
    for errors in (validate(j), validate_admission(j)):
        assert [e.path for e in errors] == [field], errors
        assert words in errors[0].message


# --- what msop creates -------------------------------------------------------------------------


def test_worker_0_is_the_rendezvous_behind_a_service_on_the_master_port() -> None:
    j = msrun_job(msrun={"masterPort": 9000})
    assert desired.rendezvous(j) == ("Worker", 0)
    svc = desired.scheduler_service(j)
    assert svc["metadata"]["name"] == "j-worker-0"
    assert svc["spec"]["selector"]["training.kubeflow.org/replica-index"] == "0"
    assert svc["spec"]["selector"]["training.kubeflow.org/replica-type"] == "worker"
    assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(9000, 9000)]


def test_each_pod_gets_what_msrun_needs() -> None:
    j = msrun_job(workers=3, local=2)
    zero = env_of(desired.pod(j, "Worker", 0, sched_host=None))
    two = env_of(desired.pod(j, "Worker", 2, sched_host="10.0.0.9"))
    assert zero["MS_SCHED_HOST"] == {"fieldRef": {"fieldPath": "status.podIP"}}  # its own IP
    assert two["MS_SCHED_HOST"] == "10.0.0.9"  # the Service's ClusterIP: no DNS
    for env, rank in ((zero, "0"), (two, "2")):
        assert env["MS_SCHED_PORT"] == "8118"
        assert env["MS_WORKER_NUM"] == "6" and env["MS_LOCAL_WORKER"] == "2"
        assert env["MS_NODE_RANK"] == rank
        assert env["MSOP_TERMINATION_FILE"] == "/dev/termination-log"
        assert "MS_ROLE" not in env and "MS_NODE_ID" not in env  # msrun sets them per process
    with pytest.raises(ValueError, match="Service of Worker 0 has no ClusterIP"):
        desired.pod(j, "Worker", 1, sched_host=None)


def test_rank_0_pod_also_gets_the_progress_variables() -> None:
    env = env_of(desired.pod(msrun_job(), "Worker", 0, sched_host=None, progress_port=28080))
    assert env["MSOP_PROGRESS_PORT"] == "28080" and env["MS_NODE_RANK"] == "0"


# --- the planner -------------------------------------------------------------------------------


def test_worker_0_and_its_service_come_first_the_others_wait_for_the_cluster_ip() -> None:
    j = msrun_job(workers=3)
    first = run(j)
    assert names(first.create_services) == {"j-worker-0"}
    assert names(first.create_pods) == {"j-worker-0"}
    ready = run(j, [msrun_pod(0, workers=3)], [rendezvous_service()])
    assert names(ready.create_pods) == {"j-worker-1", "j-worker-2"}


def test_a_service_on_another_port_is_replaced() -> None:
    p = run(msrun_job(msrun={"masterPort": 9000}), [msrun_pod(0)], [rendezvous_service()])
    assert names(p.delete_services) == {"j-worker-0"} and not p.create_pods


def test_a_local_worker_killed_by_a_signal_restarts_every_pod_and_says_which() -> None:
    killed = msrun_pod(1, "Failed", 137)
    killed["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "msrun: local worker 1 (rank 3) was killed by signal 9 (SIGKILL)\n"
    )
    # Its peer failed later, with the code 1 that a lost peer gives: the first failure decides.
    peer = msrun_pod(0, "Failed", 1)
    peer["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = (
        "2026-01-01T11:59:20Z"
    )
    p = run(msrun_job(run_policy={"backoffLimit": 2}, status=running_status()), [peer, killed],
            [rendezvous_service()])  # fmt: skip
    assert names(p.delete_pods) == {"j-worker-0", "j-worker-1"}
    restarting = cond(p, "Restarting")
    assert restarting is not None
    assert (
        "pod ns/j-worker-1 exited with code 137 (Error): msrun: local worker 1 (rank 3) was "
        "killed by signal 9 (SIGKILL) (restart 1 of 2)"
    ) in restarting["message"]
    assert any("local worker 1 (rank 3)" in e.message for e in p.events)


def test_a_script_error_fails_the_job_naming_the_pod_and_the_worker() -> None:
    broken = msrun_pod(0, "Failed", 1)
    broken["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = (
        "msrun: local worker 0 (rank 0) exited with code 1"
    )
    p = run(msrun_job(status=running_status()), [broken, msrun_pod(1)], [rendezvous_service()])
    failed = cond(p, "Failed")
    assert failed is not None and failed["status"] == "True"
    assert (
        "pod ns/j-worker-0 exited with code 1 (Error): msrun: local worker 0 (rank 0)"
        in (failed["message"])
    )


def test_a_progress_report_in_the_termination_message_is_not_a_reason() -> None:
    broken = msrun_pod(0, "Failed", 1)
    broken["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = '{"version": 1}'
    p = run(msrun_job(status=running_status()), [broken, msrun_pod(1)], [rendezvous_service()])
    failed = cond(p, "Failed")
    assert failed is not None and "exited with code 1 (Error), which" in failed["message"]


def test_scaling_restarts_every_pod_with_the_new_total() -> None:
    old = [msrun_pod(0), msrun_pod(1)]  # created for 2 pods x 2 workers: MS_WORKER_NUM 4
    p = run(msrun_job(workers=3, status=running_status()), old, [rendezvous_service()])
    assert names(p.delete_pods) == {"j-worker-0", "j-worker-1"}
    resizing = cond(p, "Restarting")
    assert resizing is not None and "MS_WORKER_NUM 4 -> 6" in resizing["message"]


@pytest.mark.parametrize("gone", [0, 2])
def test_a_lost_msrun_pod_is_recreated_alone_with_its_node_rank(gone: int) -> None:
    on = InPlace(image="msop:0.1.0", public_key="04" + "ab" * 64)
    j = msrun_job(workers=3, status=running_status())
    made = {x["metadata"]["name"]: x for x in run(msrun_job(workers=3), [], [rendezvous_service()],
            in_place=on).create_pods}  # fmt: skip
    pods = []
    for name, pod in made.items():
        pod["metadata"]["uid"] = f"uid-{name}"
        pod["status"] = {"phase": "Running", "podIP": "10.244.0.9",
                         "containerStatuses": [{"name": "mindspore", "restartCount": 0,
                                                "state": {"running": {}}}]}  # fmt: skip
        pods.append(pod)
    lost = f"j-worker-{gone}"
    p = run(j, [x for x in pods if x["metadata"]["name"] != lost], [rendezvous_service()],
            in_place=on)  # fmt: skip
    assert names(p.create_pods) == {lost} and not p.delete_pods
    assert {r.pod["metadata"]["name"] for r in p.agent_requests} == set(made) - {lost}
    assert env_of(p.create_pods[0]) == env_of(made[lost])  # MS_NODE_RANK, MS_SCHED_HOST...
    assert env_of(p.create_pods[0])["MS_NODE_RANK"] == str(gone)
    restarting = cond(p, "Restarting")
    assert restarting is not None and restarting["reason"] == "MSJobRestartingInPlace"
