"""msrun jobs on the local control plane (kwok nodes, the kubelet stand-in): the pods and
the Service msop creates for ``spec.msrun``, and how it reads the launcher's verdicts.
Real msrun runs in ``tests/e2e/real/test_msrun.py``."""

from __future__ import annotations

from typing import Any

from testbed import KubeletStandIn, LocalCluster, OperatorProcess
from tests.e2e.msjobs import (
    apply,
    condition,
    env_of,
    get,
    job_pods,
    sample,
    wait_condition,
    wait_events,
    wait_for,
    wait_pods,
)

JSON = dict[str, Any]


def cpu_job(name: str, pods: int = 2, local: int = 2, **spec: Any) -> JSON:
    container = {
        "name": "mindspore",
        "image": "mindspore:e2e",
        "command": ["python", "-m", "msop.integrations.msrun", "/code/train.py"],
    }
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name},
        "spec": {
            "msrun": {"localWorkers": local},
            "runPolicy": {"backoffLimit": 2},
            "msReplicaSpecs": {"Worker": {
                "replicas": pods, "restartPolicy": "ExitCode",
                "template": {"spec": {"terminationGracePeriodSeconds": 1,
                                      "containers": [container]}},
            }},
            **spec,
        },
    }  # fmt: skip


def test_the_ascend_sample_gets_one_rendezvous_and_msruns_variables(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str
) -> None:
    """4 pods of 8 NPUs: 32 workers, counted from the device limit; Worker 0 is the
    rendezvous, the others reach it through its Service's ClusterIP."""
    apply(cluster, namespace, sample("msjob_msrun_ascend.yaml"))
    name = "msjob-msrun-ascend"
    pods = wait_pods(cluster, namespace, name, {f"{name}-worker-{i}" for i in range(4)})
    svc = get(cluster, namespace, "service", f"{name}-worker-0")
    assert svc is not None
    assert svc["spec"]["ports"][0]["port"] == 8118
    assert svc["spec"]["selector"]["training.kubeflow.org/replica-type"] == "worker"
    assert svc["spec"]["selector"]["training.kubeflow.org/replica-index"] == "0"
    for i in range(4):
        env = env_of(pods[f"{name}-worker-{i}"])
        assert (env["MS_WORKER_NUM"], env["MS_LOCAL_WORKER"], env["MS_NODE_RANK"]) == (
            "32", "8", str(i),
        )  # fmt: skip
        assert env["MS_SCHED_PORT"] == "8118"
        want = {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}
        assert env["MS_SCHED_HOST"] == (want if i == 0 else svc["spec"]["clusterIP"])
        assert "MS_ROLE" not in env


def _fresh(cluster: LocalCluster, ns: str, job: str, old: dict[str, str]) -> dict[str, JSON] | None:
    pods = job_pods(cluster, ns, job)
    ok = set(pods) == set(old) and all(
        p["metadata"]["uid"] != old[n] and not p["metadata"].get("deletionTimestamp")
        for n, p in pods.items()
    )
    return pods if ok else None


def test_a_killed_local_worker_restarts_the_job_and_a_script_error_fails_it(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    members = {"mr-worker-0", "mr-worker-1"}
    apply(cluster, namespace, cpu_job("mr"))
    wait_pods(cluster, namespace, "mr", members)
    for n in sorted(members):
        kubelet.run(namespace, n)
    wait_condition(cluster, namespace, "mr", "Running")
    before = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, "mr").items()}

    # What the launcher leaves when a local worker was SIGKILLed (the OOM killer, say).
    verdict = "msrun: local worker 1 (rank 3) was killed by signal 9 (SIGKILL)\n"
    kubelet.fail(namespace, "mr-worker-1", exit_code=137, reason="OOMKilled", message=verdict)
    pods = wait_for("every pod recreated", lambda: _fresh(cluster, namespace, "mr", before),
                    timeout=60)  # fmt: skip
    assert {env_of(p)["MS_WORKER_NUM"] for p in pods.values()} == {"4"}
    said = [e["message"] for e in wait_events(cluster, namespace, "mr", "MSJobRestarting")
            if e["reason"] == "MSJobRestarting"]  # fmt: skip
    assert len(said) == 1, said
    assert (
        "mr-worker-1 exited with code 137 (OOMKilled): msrun: local worker 1 (rank 3) was "
        "killed by signal 9 (SIGKILL)"
    ) in said[0]

    for n in sorted(members):
        kubelet.run(namespace, n)
    wait_condition(cluster, namespace, "mr", "Running")
    kubelet.fail(namespace, "mr-worker-0", exit_code=1,
                 message="msrun: local worker 0 (rank 0) exited with code 1\n")  # fmt: skip
    job = wait_condition(cluster, namespace, "mr", "Failed")
    failed = condition(job, "Failed")
    assert failed is not None
    assert (
        "mr-worker-0 exited with code 1 (Error): msrun: local worker 0 (rank 0)"
        in (failed["message"])
    )
    assert job["status"]["replicaStatuses"]["Worker"]["restarts"] == 1


def test_a_job_with_no_way_to_count_its_workers_fails_at_once(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str
) -> None:
    """Neither localWorkers nor an accelerator limit: the CRD cannot afford the rule (it
    would look into every container's limits), so the API server accepts the job and the
    operator fails it, naming the field, with one Warning event and no pod."""
    job = cpu_job("uncounted")
    del job["spec"]["msrun"]["localWorkers"]
    apply(cluster, namespace, job)
    failed = condition(wait_condition(cluster, namespace, "uncounted", "Failed"), "Failed")
    assert failed is not None and failed["reason"] == "InvalidSpec", failed
    assert "spec.msrun.localWorkers" in failed["message"], failed
    evs = wait_events(cluster, namespace, "uncounted", "InvalidSpec")
    warnings = [e for e in evs if e["type"] == "Warning"]
    assert len(warnings) == 1 and "spec.msrun.localWorkers" in warnings[0]["message"], warnings
    assert job_pods(cluster, namespace, "uncounted") == {}
