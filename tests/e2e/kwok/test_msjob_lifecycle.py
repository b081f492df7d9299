"""The MSJob controller end to end: samples and policies, through kubectl, with the
operator running as a process and pods driven by the kubelet stand-in."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from msop.kube.objects import parse_time
from testbed import KubeletStandIn, LocalCluster, OperatorProcess
from tests.e2e.msjobs import (
    apply,
    condition,
    env_of,
    event_reasons,
    get,
    is_true,
    job_pods,
    must_condition,
    sample,
    wait_condition,
    wait_events,
    wait_for,
    wait_pods,
)


def test_dataparallel_sample_runs_to_success(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    job = sample("ms_wide_deep_dataparallel.yaml")
    name = job["metadata"]["name"]
    apply(cluster, namespace, job)
    wait_condition(cluster, namespace, name, "Created")
    workers = {f"{name}-worker-{i}" for i in range(4)}
    pods = wait_pods(cluster, namespace, name, {f"{name}-scheduler-0", *workers})
    svc = get(cluster, namespace, "service", f"{name}-scheduler-0")
    assert svc is not None
    cluster_ip = svc["spec"]["clusterIP"]
    assert svc["spec"]["ports"][0]["name"] == "msjob-port"

    sched_env = env_of(pods[f"{name}-scheduler-0"])
    assert sched_env["MS_ROLE"] == "MS_SCHED"
    assert sched_env["MS_SCHED_HOST"] == {
        "fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}
    }
    for w in sorted(workers):
        env = env_of(pods[w])
        assert env["MS_ROLE"] == "MS_WORKER"
        assert env["MS_SCHED_HOST"] == cluster_ip
        assert env["MS_SCHED_PORT"] == "2222"
        assert env["MS_WORKER_NUM"] == "4"
        assert env["MS_SERVER_NUM"] == "0"
        assert env["MS_NODE_ID"] == w
        assert env["GLOG_v"] == "1"  # the user's own variables are kept
        labels = pods[w]["metadata"]["labels"]
        assert labels["training.kubeflow.org/replica-type"] == "worker"
        assert labels["replica-type"] == "worker"
        assert labels["replica-index"] == w.rsplit("-", 1)[1]
        ref = pods[w]["metadata"]["ownerReferences"][0]
        assert ref["kind"] == "MSJob" and ref["controller"] and ref["blockOwnerDeletion"]
        assert pods[w]["spec"]["restartPolicy"] == "Never"

    for p in pods:
        kubelet.run(namespace, p)
    running = wait_condition(cluster, namespace, name, "Running")
    assert running["status"]["workers"] == "4/4"

    for w in sorted(workers):
        kubelet.succeed(namespace, w)
    done = wait_condition(cluster, namespace, name, "Succeeded")
    status = done["status"]
    assert status["conditions"][-1]["type"] == "Succeeded"
    assert status["replicaStatuses"]["Worker"]["succeeded"] == 4
    assert status["completionTime"]
    evs = wait_events(
        cluster, namespace, name, "MSJobRunning", "MSJobSucceeded", "SuccessfulCreatePod"
    )
    # One event for the pass that created the pods, naming every pod (not one per pod).
    created = [e for e in evs if e["reason"] == "SuccessfulCreatePod"]
    assert len(created) == 1, created
    assert created[0]["message"].startswith("Created pods: ")
    named = set(created[0]["message"].removeprefix("Created pods: ").split(", "))
    assert named == {f"{name}-scheduler-0", *workers}
    # cleanPodPolicy None: every pod is kept.
    assert len(job_pods(cluster, namespace, name)) == 5
    table = cluster.kubectl("get", "msjobs", "-n", namespace).stdout
    assert "Succeeded" in table and name in table


def _job(
    name: str, run_policy: dict[str, object] | None = None, **replicas: tuple[int, str]
) -> dict[str, Any]:
    """A small MSJob: replicas=(count, restartPolicy) per type, e.g. Worker=(2, "Never")."""
    specs = {}
    for rtype, (count, policy) in replicas.items():
        specs[rtype] = {
            "replicas": count,
            "restartPolicy": policy,
            "template": {"spec": {"containers": [{"name": "mindspore", "image": "mindspore:e2e"}]}},
        }
    spec: dict[str, object] = {"msReplicaSpecs": specs}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def _run_all(
    kubelet: KubeletStandIn, cluster: LocalCluster, ns: str, job: str, names: set[str]
) -> None:
    wait_pods(cluster, ns, job, names)
    for n in sorted(names):
        kubelet.run(ns, n)


SAMPLES = {
    "ms_wide_deep_standalone.yaml": {"Worker": 1},
    "ms_wide_deep_dataparallel.yaml": {"Scheduler": 1, "Worker": 4},
    "ms_wide_deep_ps_standalone.yaml": {"Scheduler": 1, "PS": 2, "Worker": 1},
    "ms_wide_deep_ps_distribute.yaml": {"Scheduler": 1, "PS": 2, "Worker": 4},
}


@pytest.mark.parametrize("file", sorted(SAMPLES))
def test_ms_operator_samples_run_unchanged_to_success(
    file: str,
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    kubelet: KubeletStandIn,
) -> None:
    job = sample(file)
    name = job["metadata"]["name"]
    apply(cluster, namespace, job)
    names = {f"{name}-{rt.lower()}-{i}" for rt, n in SAMPLES[file].items() for i in range(n)}
    _run_all(kubelet, cluster, namespace, name, names)
    pods = job_pods(cluster, namespace, name)
    if "Scheduler" in SAMPLES[file]:
        ps_env = [env_of(pods[f"{name}-ps-{i}"]) for i in range(SAMPLES[file].get("PS", 0))]
        for env in ps_env:
            assert env["MS_ROLE"] == "MS_PSERVER"
            assert env["MS_SERVER_NUM"] == str(SAMPLES[file].get("PS", 0))
    else:
        # Standalone training gets no cluster variables, like ms-operator.
        assert not any(k.startswith("MS_") for k in env_of(pods[f"{name}-worker-0"]))
    wait_condition(cluster, namespace, name, "Running")
    for i in range(SAMPLES[file]["Worker"]):
        kubelet.succeed(namespace, f"{name}-worker-{i}")
    wait_condition(cluster, namespace, name, "Succeeded")


def _restarted(cluster: LocalCluster, namespace: str) -> dict[str, Any] | None:
    """The job once it has restarted: Restarting is True, or already False again
    (reason MSJobRestarted) because the replacement runs."""
    job = get(cluster, namespace, "msjob", "ec")
    cond = condition(job, "Restarting")
    return job if cond and cond["reason"] in ("MSJobRestarting", "MSJobRestarted") else None


def test_exitcode_137_restarts_the_pod_then_succeeds(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("ec", {"backoffLimit": 3}, Worker=(2, "ExitCode")))
    _run_all(kubelet, cluster, namespace, "ec", {"ec-worker-0", "ec-worker-1"})
    wait_condition(cluster, namespace, "ec", "Running")
    old_uid = kubelet.get(namespace, "ec-worker-1")["metadata"]["uid"]
    kubelet.fail(namespace, "ec-worker-1", exit_code=137)
    # kwok runs the replacement at once, so Restarting may already be over: look for its trace.
    restarting = wait_for("the Restarting condition", lambda: _restarted(cluster, namespace))
    assert restarting["status"]["replicaStatuses"]["Worker"]["restarts"] == 1

    def recreated() -> bool:
        pod = get(cluster, namespace, "pod", "ec-worker-1")
        return pod is not None and pod["metadata"]["uid"] != old_uid

    wait_for("ec-worker-1 to be recreated", recreated)
    kubelet.run(namespace, "ec-worker-1")
    running = wait_condition(cluster, namespace, "ec", "Running")
    assert not is_true(running, "Restarting")
    kubelet.succeed(namespace, "ec-worker-1")
    kubelet.succeed(namespace, "ec-worker-0")  # worker 0 done => the job succeeded
    wait_condition(cluster, namespace, "ec", "Succeeded")
    wait_events(cluster, namespace, "ec", "ExitedWithCode", "MSJobRestarting")


def test_exitcode_1_is_a_permanent_failure(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("ec1", Worker=(2, "ExitCode")))
    _run_all(kubelet, cluster, namespace, "ec1", {"ec1-worker-0", "ec1-worker-1"})
    kubelet.fail(namespace, "ec1-worker-0", exit_code=1)
    failed = wait_condition(cluster, namespace, "ec1", "Failed")
    cond = condition(failed, "Failed")
    assert (
        cond and cond["reason"] == "MSJobFailed" and "1 Worker replica(s) failed" in cond["message"]
    )
    assert "restarts" not in failed["status"]["replicaStatuses"]["Worker"]
    # cleanPodPolicy Running (default): the still-running worker is deleted, the failed one kept.
    wait_for(
        "running pod cleanup", lambda: set(job_pods(cluster, namespace, "ec1")) == {"ec1-worker-0"}
    )
    wait_events(cluster, namespace, "ec1", "MSJobFailed")


def test_onfailure_restarts_beyond_backoff_limit_fail_the_job(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("bo", {"backoffLimit": 2}, Worker=(2, "OnFailure")))
    _run_all(kubelet, cluster, namespace, "bo", {"bo-worker-0", "bo-worker-1"})
    assert kubelet.get(namespace, "bo-worker-0")["spec"]["restartPolicy"] == "OnFailure"
    kubelet.restart(namespace, "bo-worker-0", exit_code=1, times=2)
    wait_condition(cluster, namespace, "bo", "Running")
    kubelet.restart(namespace, "bo-worker-1", exit_code=1)
    failed = wait_condition(cluster, namespace, "bo", "Failed")
    assert must_condition(failed, "Failed")["reason"] == "BackoffLimitExceeded"
    # Backoff failures delete every pod, whatever the cleanPodPolicy.
    wait_for("all pods deleted", lambda: not job_pods(cluster, namespace, "bo"))


def test_active_deadline_fails_the_job_on_time(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("dl", {"activeDeadlineSeconds": 3}, Worker=(1, "Never")))
    _run_all(kubelet, cluster, namespace, "dl", {"dl-worker-0"})
    # No pod event happens after Running: only a precise requeue can fire the deadline.
    failed = wait_condition(cluster, namespace, "dl", "Failed", timeout=60)
    cond = condition(failed, "Failed")
    assert cond and cond["reason"] == "DeadlineExceeded"
    # Judged from the job's own times: never before startTime + 3 s, and near it (nothing
    # but the precise requeue wakes the job; without it the job would wait for the next
    # resync, hours away). Both times are whole seconds (RFC 3339, truncated): the operator
    # counts from the stored startTime, so truncating the Failed time cannot take it below
    # startTime + 3; above, 1 s allows for the two times' resolution and 6 s for a loaded
    # machine.
    started = parse_time(failed["status"]["startTime"])
    ended = parse_time(cond["lastTransitionTime"])
    assert started and ended
    took = (ended - started).total_seconds()
    assert 3 <= took <= 3 + 1 + 6, f"failed {took:.0f}s after startTime (deadline 3s)"
    wait_for("pods deleted", lambda: not job_pods(cluster, namespace, "dl"))


def test_ttl_deletes_the_finished_job_and_gc_removes_its_pods(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(
        cluster,
        namespace,
        _job("ttl", {"ttlSecondsAfterFinished": 2, "cleanPodPolicy": "None"}, Worker=(1, "Never")),
    )
    _run_all(kubelet, cluster, namespace, "ttl", {"ttl-worker-0"})
    kubelet.succeed(namespace, "ttl-worker-0")
    wait_condition(cluster, namespace, "ttl", "Succeeded")
    wait_for(
        "the job to be deleted", lambda: get(cluster, namespace, "msjob", "ttl") is None, timeout=30
    )
    wait_for("GC to delete the pod", lambda: not job_pods(cluster, namespace, "ttl"), timeout=90)


@pytest.mark.parametrize(
    ("policy", "kept"),
    [("All", set()), ("Running", {"cp-worker-0"}), ("None", {"cp-worker-0", "cp-worker-1"})],
)
def test_clean_pod_policy(
    policy: str,
    kept: set[str],
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    kubelet: KubeletStandIn,
) -> None:
    apply(cluster, namespace, _job("cp", {"cleanPodPolicy": policy}, Worker=(2, "Never")))
    _run_all(kubelet, cluster, namespace, "cp", {"cp-worker-0", "cp-worker-1"})
    kubelet.succeed(namespace, "cp-worker-0")  # worker 0 done => job Succeeded; worker 1 still runs
    wait_condition(cluster, namespace, "cp", "Succeeded")
    wait_for(
        f"pods {sorted(kept)} to remain", lambda: set(job_pods(cluster, namespace, "cp")) == kept
    )
    time.sleep(1)
    assert set(job_pods(cluster, namespace, "cp")) == kept


def test_suspend_and_resume(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("sus", None, Scheduler=(1, "Never"), Worker=(2, "Never")))
    names = {"sus-scheduler-0", "sus-worker-0", "sus-worker-1"}
    _run_all(kubelet, cluster, namespace, "sus", names)
    first = wait_condition(cluster, namespace, "sus", "Running")
    cluster.kubectl(
        "patch",
        "msjob",
        "sus",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"suspend":true}}}',
    )
    suspended = wait_condition(cluster, namespace, "sus", "Suspended")
    assert not is_true(suspended, "Running")
    wait_for(
        "pods and service deleted",
        lambda: (
            not job_pods(cluster, namespace, "sus")
            and get(cluster, namespace, "service", "sus-scheduler-0") is None
        ),
    )
    time.sleep(1.1)  # startTime has second resolution
    cluster.kubectl(
        "patch",
        "msjob",
        "sus",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"runPolicy":{"suspend":false}}}',
    )
    _run_all(kubelet, cluster, namespace, "sus", names)
    resumed = wait_condition(cluster, namespace, "sus", "Running")
    cond = condition(resumed, "Suspended")
    assert cond and cond["status"] == "False" and cond["reason"] == "MSJobResumed"
    assert resumed["status"]["startTime"] > first["status"]["startTime"]
    wait_events(cluster, namespace, "sus", "MSJobSuspended", "MSJobResumed")


def test_kubectl_scale_up_and_down(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("sc", None, Worker=(2, "Never")))
    _run_all(kubelet, cluster, namespace, "sc", {"sc-worker-0", "sc-worker-1"})
    cluster.kubectl("scale", "msjob/sc", "-n", namespace, "--replicas=4")
    wait_pods(cluster, namespace, "sc", {f"sc-worker-{i}" for i in range(4)})
    for i in range(4):
        kubelet.run(namespace, f"sc-worker-{i}")
    job = wait_for(
        "4/4 workers",
        lambda: (
            (j := get(cluster, namespace, "msjob", "sc"))
            and j.get("status", {}).get("workers") == "4/4"
            and j
        ),
    )
    assert job["status"]["replicaStatuses"]["Worker"]["selector"] == (
        "training.kubeflow.org/job-name=sc,training.kubeflow.org/replica-type=worker"
    )
    cluster.kubectl("scale", "msjob/sc", "-n", namespace, "--replicas=1")
    wait_for(
        "scale down to worker 0", lambda: set(job_pods(cluster, namespace, "sc")) == {"sc-worker-0"}
    )
    scale = json.loads(
        cluster.kubectl(
            "get", "--raw", f"/apis/mindspore.gitee.com/v1/namespaces/{namespace}/msjobs/sc/scale"
        ).stdout
    )
    assert scale["spec"]["replicas"] == 1


def test_replicas_zero_is_stable(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, namespace, _job("zero", None, Worker=(0, "Never")))
    wait_condition(cluster, namespace, "zero", "Created")
    time.sleep(2)
    assert not job_pods(cluster, namespace, "zero")
    assert "SuccessfulCreatePod" not in event_reasons(cluster, namespace, "zero")


def test_deleting_a_running_job_garbage_collects_everything(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    apply(cluster, namespace, _job("gone", None, Scheduler=(1, "Never"), Worker=(2, "Never")))
    _run_all(
        kubelet, cluster, namespace, "gone", {"gone-scheduler-0", "gone-worker-0", "gone-worker-1"}
    )
    wait_condition(cluster, namespace, "gone", "Running")
    cluster.kubectl("delete", "msjob", "gone", "-n", namespace, "--wait=false")
    wait_for(
        "GC of pods and service",
        lambda: (
            not job_pods(cluster, namespace, "gone")
            and get(cluster, namespace, "service", "gone-scheduler-0") is None
        ),
        timeout=90,
    )


def test_restart_scope_job_restarts_and_resizes_the_whole_cluster(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    """A job with a Scheduler restarts as a whole (restartScope Job, its default): one
    killed Worker recreates every pod, counted once; a scale of the running job recreates
    every pod with the new MS_WORKER_NUM. (The peers' follow-on exits are in the planner's
    unit tests and, for real, in tests/e2e/real/test_mindspore.py: here the stand-in
    would fail the recreated pod of the same name.)"""
    job = _job("js", {"backoffLimit": 2}, Scheduler=(1, "ExitCode"), Worker=(2, "ExitCode"))
    for spec in job["spec"]["msReplicaSpecs"].values():
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = 1  # kwok honours it
    apply(cluster, namespace, job)
    members = {"js-scheduler-0", "js-worker-0", "js-worker-1"}
    _run_all(kubelet, cluster, namespace, "js", members)
    wait_condition(cluster, namespace, "js", "Running")
    before = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, "js").items()}

    kubelet.fail(namespace, "js-worker-1", exit_code=137, reason="OOMKilled")

    def recreated(names: set[str], old: dict[str, str]) -> dict[str, Any] | None:
        pods = job_pods(cluster, namespace, "js")
        fresh = set(pods) == names and all(
            p["metadata"]["uid"] != old.get(n) and not p["metadata"].get("deletionTimestamp")
            for n, p in pods.items()
        )
        return pods if fresh else None

    pods = wait_for("every pod recreated", lambda: recreated(members, before), timeout=60)
    stored = get(cluster, namespace, "msjob", "js")
    assert stored is not None and condition(stored, "Failed") is None
    assert stored["status"]["replicaStatuses"]["Worker"]["restarts"] == 1
    # kwok runs the new pods at once, so Restarting may already be False again.
    restarting = condition(stored, "Restarting")
    assert restarting is not None and restarting["reason"] in ("MSJobRestarting", "MSJobRestarted")
    said = [
        e["message"]
        for e in wait_events(cluster, namespace, "js", "MSJobRestarting")
        if e["reason"] == "MSJobRestarting"
    ]
    assert len(said) == 1 and "js-worker-1 exited with code 137 (OOMKilled)" in said[0], said
    assert {env_of(p)["MS_WORKER_NUM"] for p in pods.values()} == {"2"}

    _run_all(kubelet, cluster, namespace, "js", members)
    running = wait_condition(cluster, namespace, "js", "Running")
    assert must_condition(running, "Restarting")["status"] == "False"
    before = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, "js").items()}

    cluster.kubectl("scale", "msjob/js", "-n", namespace, "--replicas=3")
    grown = members | {"js-worker-2"}
    pods = wait_for("every pod recreated at size 3", lambda: recreated(grown, before), timeout=60)
    assert {env_of(p)["MS_WORKER_NUM"] for p in pods.values()} == {"3"}
    _run_all(kubelet, cluster, namespace, "js", grown)
    wait_condition(cluster, namespace, "js", "Running")
    for i in (2, 1, 0):  # worker 0 last: its success ends the job (successPolicy "")
        kubelet.succeed(namespace, f"js-worker-{i}")
    done = wait_condition(cluster, namespace, "js", "Succeeded")
    assert done["status"]["replicaStatuses"]["Worker"]["restarts"] == 1  # the resize is free
    evs = wait_events(
        cluster, namespace, "js", "MSJobRestarting", "MSJobResizing", "ExitedWithCode"
    )
    assert "MSJobFailed" not in {e["reason"] for e in evs}


def test_restart_scope_job_restarts_are_bounded_by_backoff_limit(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    """restartScope Job: each whole-job restart counts once; the failure after the last
    allowed one fails the job, naming the pod and how many restarts were done."""
    job = _job("jb", {"backoffLimit": 1}, Scheduler=(1, "ExitCode"), Worker=(1, "ExitCode"))
    for spec in job["spec"]["msReplicaSpecs"].values():
        spec["template"]["spec"]["terminationGracePeriodSeconds"] = 1
    apply(cluster, namespace, job)
    members = {"jb-scheduler-0", "jb-worker-0"}
    for _ in range(2):
        _run_all(kubelet, cluster, namespace, "jb", members)
        wait_condition(cluster, namespace, "jb", "Running")
        old = kubelet.get(namespace, "jb-worker-0")["metadata"]["uid"]
        kubelet.fail(namespace, "jb-worker-0", exit_code=137)

        def moved_on(old: str = old) -> bool:
            if is_true(get(cluster, namespace, "msjob", "jb"), "Failed"):
                return True
            pod = get(cluster, namespace, "pod", "jb-worker-0")
            return pod is not None and pod["metadata"]["uid"] != old

        wait_for("the worker recreated, or the job failed", moved_on)
    failed = wait_condition(cluster, namespace, "jb", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "BackoffLimitExceeded", cond
    assert "pod " + namespace + "/jb-worker-0 exited with code 137" in cond["message"]
    assert "after 1 restart(s) of the job (backoffLimit 1)" in cond["message"]
    assert failed["status"]["replicaStatuses"]["Worker"]["restarts"] == 1
    reasons = [
        e["reason"]
        for e in wait_events(cluster, namespace, "jb", "MSJobRestarting", "BackoffLimitExceeded")
    ]
    assert reasons.count("MSJobRestarting") == 1 and reasons.count("BackoffLimitExceeded") == 1
