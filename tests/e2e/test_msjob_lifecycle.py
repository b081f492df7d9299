"""The MSJob controller end to end: samples and policies, through kubectl, with the
operator running as a process and pods driven by the kubelet stand-in."""

from __future__ import annotations

from msop.testing import KubeletStandIn, LocalCluster, OperatorProcess
from tests.e2e.msjobs import (
    apply,
    env_of,
    event_reasons,
    get,
    job_pods,
    sample,
    wait_condition,
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
    assert {"MSJobRunning", "MSJobSucceeded", "SuccessfulCreatePod"} <= event_reasons(
        cluster, namespace, name
    )
    # cleanPodPolicy None: every pod is kept.
    assert len(job_pods(cluster, namespace, name)) == 5
    table = cluster.kubectl("get", "msjobs", "-n", namespace).stdout
    assert "Succeeded" in table and name in table
