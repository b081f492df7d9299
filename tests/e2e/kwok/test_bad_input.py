"""Bad input past admission: a create the API server refuses for its content fails the job
once (one Warning event, one log line, no retry, no reconcile error); counters exist at 0."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from testbed import LocalCluster, OperatorProcess
from tests.e2e.msjobs import apply, condition, events, get, job_pods, wait_condition, wait_for
from tests.e2e.reliability import metric, operator_calls

JSON = dict[str, Any]


def _job(name: str) -> JSON:
    """Valid for admission; the API server refuses its Worker pods: a volume mount that
    names no volume of the pod is pod validation, which the CRD does not repeat (a request
    above its limit no longer serves: admission refuses it now)."""

    def replica(replicas: int, mounts: list[JSON] | None = None) -> JSON:
        container: JSON = {"name": "mindspore", "image": "ms:1"}
        if mounts:
            container["volumeMounts"] = mounts
        return {"replicas": replicas, "template": {"spec": {"containers": [container]}}}

    worker = replica(2, [{"name": "data", "mountPath": "/data"}])
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name},
        "spec": {"msReplicaSpecs": {"Scheduler": replica(1), "Worker": worker}},
    }


def _log_lines(op: OperatorProcess, text: str) -> list[JSON]:
    lines = [json.loads(x) for x in op.log_path.read_text().splitlines() if x.startswith("{")]
    return [x for x in lines if text in str(x.get("event", ""))]


def test_a_create_the_api_server_refuses_fails_the_job_once(
    cluster: LocalCluster, namespace: str, operator: OperatorProcess
) -> None:
    name = "refused"
    apply(cluster, namespace, _job(name))
    job = wait_condition(cluster, namespace, name, "Failed")
    failed = condition(job, "Failed")
    assert failed is not None
    assert failed["reason"] == "Invalid", failed
    assert f'Pod "{name}-worker-0" is invalid' in failed["message"], failed
    assert "volumeMounts[0].name: Not found" in failed["message"], failed
    assert condition(job, "ReplicaFailure") is None
    assert job["status"].get("completionTime")
    # The finished job is cleaned up like any Failed one (cleanPodPolicy Running).
    wait_for("the Scheduler pod deleted", lambda: not job_pods(cluster, namespace, name))

    # Another event on the job: it is reconciled again and tries nothing.
    passes = metric(operator.metrics_url, "controller_runtime_reconcile_total")
    cluster.kubectl("annotate", "-n", namespace, "msjob", name, "poke=1")
    wait_for(
        "one more reconcile",
        lambda: metric(operator.metrics_url, "controller_runtime_reconcile_total") > passes,
    )
    creates = [
        e
        for e in operator_calls(cluster.audit_log, namespace, "create", "pods")
        if (e.get("objectRef") or {}).get("name", "").startswith(f"{name}-worker-")
    ]
    # Each Worker pod was tried once (a slow-start batch may hold both), none again.
    tries = Counter((e.get("objectRef") or {}).get("name") for e in creates)
    assert tries and set(tries.values()) == {1}, tries
    assert {(e.get("responseStatus") or {}).get("code") for e in creates} == {422}, creates

    warnings = [e for e in events(cluster, namespace, name) if e["type"] == "Warning"]
    assert [(e["reason"], e.get("count", 1)) for e in warnings] == [("FailedCreatePod", 1)]
    assert "volumeMounts[0].name: Not found" in warnings[0]["message"]
    lines = _log_lines(operator, "failed to create pod")
    assert len(lines) == 1, lines
    assert lines[0]["level"] == "warning" and lines[0]["name"] == name
    assert "the job fails" in lines[0]["outcome"]
    assert not _log_lines(operator, "reconciler error")
    assert metric(operator.metrics_url, "controller_runtime_reconcile_errors_total") == 0
    assert metric(operator.metrics_url, "msop_jobs_failed_total", job_namespace=namespace) == 1
    final = get(cluster, namespace, "msjob", name)
    assert final is not None and condition(final, "Failed") == failed  # written once


def test_job_counters_exist_at_zero_from_the_start(
    namespace: str, operator: OperatorProcess
) -> None:
    text = _scrape(operator)
    for counter in ("created", "succeeded", "failed", "restarted", "deleted"):
        assert f'msop_jobs_{counter}_total{{job_namespace="{namespace}"}} 0.0' in text, counter
    assert (
        f'training_operator_jobs_successful_total{{framework="mindspore",'
        f'job_namespace="{namespace}"}} 0.0' in text
    )


def _scrape(op: OperatorProcess) -> str:
    import urllib.request

    with urllib.request.urlopen(op.metrics_url, timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def test_created_counts_the_jobs_whose_created_condition_this_process_wrote(
    cluster: LocalCluster, namespace: str, start_operator: Any
) -> None:
    """After a restart the new process does not count again the jobs
    an earlier one marked Created; it counts the ones it marks itself."""
    first = start_operator()
    for name in ("one", "two"):
        apply(cluster, namespace, _valid(name))
    for name in ("one", "two"):
        wait_condition(cluster, namespace, name, "Created")
    created = "msop_jobs_created_total"
    ns = {"job_namespace": namespace}
    wait_for("both counted", lambda: metric(first.metrics_url, created, **ns) == 2)
    assert first.stop() == 0

    second = start_operator()
    wait_for(
        "the cache synced",
        lambda: metric(second.metrics_url, "msop_jobs", job_namespace=namespace) == 2,
    )
    apply(cluster, namespace, _valid("three"))
    wait_condition(cluster, namespace, "three", "Created")
    wait_for("three counted", lambda: metric(second.metrics_url, created, **ns) == 1)
    # one and two were reconciled by this process too (its initial list), and not counted.
    passes = "controller_runtime_reconcile_total"
    wait_for("every job reconciled", lambda: metric(second.metrics_url, passes) >= 3)
    assert metric(second.metrics_url, created, job_namespace=namespace) == 1
    kubeflow = "training_operator_jobs_created_total"
    assert metric(second.metrics_url, kubeflow, job_namespace=namespace) == 1


def _valid(name: str) -> JSON:
    job = _job(name)
    del job["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["volumeMounts"]
    return job
