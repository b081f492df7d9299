"""Reliability scenarios that take seconds to a minute each: API server
restart, watch expiry (410), stuck watch, status conflicts, quota refusals, hostile input.

Faults are real: the control plane is restarted with kwokctl, etcd is compacted through
its HTTP gateway, a TCP proxy (tests/e2e/tcpproxy.py) freezes or cuts the operator's
connections. Scenarios that change the API server's flags or the CRD run on a second,
small cluster of their own (``side_cluster``) so the shared one is never altered.
Figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import copy
import functools
import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from msop.api.resources import MSJOBS
from msop.kube.client import KubeClient
from msop.kube.resources import PODS, SERVICES
from msop.msjob.setup import RETRY_MAX_DELAY
from testbed import LocalCluster, OperatorProcess
from testbed.cluster import create_namespace
from testbed.paths import CACHE, REPO
from tests.e2e.msjobs import (
    condition,
    event_reasons,
    events,
    get,
    wait_condition,
    wait_events,
    wait_for,
)
from tests.e2e.reliability import (
    condition_types,
    create_all,
    has_true,
    metric,
    msjob,
    operator_calls,
    succeed_running_workers,
    wait_until,
)
from tests.e2e.sessions import build_binaries, install_crds

CRD = REPO / "config/crd/bases/mindspore.gitee.com_msjobs.yaml"


@pytest.fixture(scope="module")
def side_cluster() -> Iterator[LocalCluster]:
    """A small cluster of this module's own: its API server serves watches straight from
    etcd (no watch cache), so a compaction makes an old resourceVersion "410 Gone"; and
    its CRD may be swapped without disturbing the shared cluster."""
    c = LocalCluster(
        name=f"msop-rel-{os.getpid()}",
        bin_dir=build_binaries(),
        workdir=CACHE / "kwok",
        nodes=1,
        extra_kwokctl_args=("--extra-args", "kube-apiserver=watch-cache=false"),
    )
    try:
        c.start()
        install_crds(c)
        yield c
    finally:
        c.stop()


def operator_on(
    cluster: LocalCluster, ns: str, kubeconfig: str, *args: str, **env: str
) -> OperatorProcess:
    return OperatorProcess(
        kubeconfig=kubeconfig,
        log_path=REPO / ".cache" / "e2e-logs" / f"{ns}-{uuid.uuid4().hex[:4]}.log",
        args=("--namespace", ns, "--log-level", "debug", *args),
        env=env,
    )


def cluster_is_whole(cluster: LocalCluster) -> None:
    """Wait until a restarted control plane serves the next tests normally (the
    controller-manager creates a new namespace's default ServiceAccount)."""
    wait_for(
        "the API server back", lambda: cluster.kubectl("get", "ns", check=False).returncode == 0, 90
    )
    probe = create_namespace(cluster, prefix="rel")
    cluster.kubectl("delete", "namespace", probe, "--wait=false", check=False)


async def _phases(client: KubeClient, ns: str, phase: str, n: int) -> bool:
    pods = (await client.list(PODS, ns))["items"]
    return sum(1 for p in pods if p.get("status", {}).get("phase") == phase) >= n


def _create_ok(cluster: LocalCluster, ns: str, obj: dict[str, Any]) -> bool:
    proc = cluster.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(obj), check=False)
    return proc.returncode == 0


def _warnings(cluster: LocalCluster, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e for e in events(cluster, ns, name) if e["type"] == "Warning" and e["reason"] == reason
    ]


async def _job_has(client: KubeClient, ns: str, name: str, type_: str) -> bool:
    job: dict[str, Any] = await client.get(MSJOBS, name, ns)
    return has_true(job, type_)


async def _get_pod(client: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    pods = (await client.list(PODS, ns, field_selector=f"metadata.name={name}"))["items"]
    return pods[0] if pods else None


async def _absent(client: KubeClient, ns: str, name: str) -> bool:
    return await _get_pod(client, ns, name) is None


# --- 6. status conflicts ----------------------------------------------------------------


async def test_concurrent_writer_loses_no_status(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """Another writer patches the job's labels, annotations and a harmless spec field
    as fast as it can while the job runs to completion."""
    op = start_operator()
    job = msjob("busy", workers=3, scheduler=True)
    # AllWorkers: the job finishes only once every worker has succeeded, so the frozen
    # replica counts must say 3. (With the default policy the job finishes when Worker 0
    # succeeds; a worker ended a moment later is, by design, not counted.)
    job["spec"]["successPolicy"] = "AllWorkers"
    await create_all(client, namespace, [job])
    stop = asyncio.Event()
    writes = 0

    async def writer() -> None:
        nonlocal writes
        while not stop.is_set():
            patch = {
                "metadata": {"labels": {"writer": str(writes)}, "annotations": {"w": str(writes)}},
                "spec": {"runPolicy": {"ttlSecondsAfterFinished": 3600 + writes}},
            }
            await client.patch(MSJOBS, "busy", patch, namespace)
            writes += 1

    tasks = [asyncio.create_task(writer()) for _ in range(2)]
    try:
        await wait_until("busy Running", lambda: _job_has(client, namespace, "busy", "Running"), 60)
        done: set[str] = set()
        await wait_until(
            "busy Succeeded",
            lambda: _pass_then_check(client, namespace, "busy", done),
            within=60,
        )
        await asyncio.sleep(2)
    finally:
        stop.set()
        await asyncio.gather(*tasks)
    job = await client.get(MSJOBS, "busy", namespace)
    shown = json.dumps(job["status"], indent=1)
    assert {"Created", "Running", "Succeeded"} <= condition_types(job), shown
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 3, shown
    assert job["metadata"]["labels"]["writer"] == str(writes - 1) or writes > 0
    assert job["status"].get("completionTime")
    conflicts = op.log_path.read_text().count("status write conflicted")
    requeues = metric(op.metrics_url, "controller_runtime_reconcile_total", result="requeue")
    print(
        f"\nstatus conflicts: {writes} concurrent writes, {conflicts} status conflicts "
        f"retried, reconcile requeues {requeues:.0f}; no transition lost"
    )
    assert conflicts >= 1 and requeues >= 1, "no conflict happened: the test proved nothing"


async def _pass_then_check(client: KubeClient, ns: str, name: str, done: set[str]) -> bool:
    await succeed_running_workers(client, ns, done)
    return await _job_has(client, ns, name, "Succeeded")


# --- 7. the cluster says no -------------------------------------------------------------

#: Long enough to see a hot loop (hundreds of creates), not so long that the retry after the
#: quota is raised waits out a long backoff.
QUOTA_WINDOW = 30.0


async def test_pod_quota_refusals_are_reported_and_retried_without_a_hot_loop(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """``pods: 1``: the second worker is refused (403). The job says why (condition and
    Warning event); the operator retries with backoff, bounded calls per minute; once
    the quota is raised, the job runs."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "pods"},
        "spec": {"hard": {"pods": "1"}},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(quota))
    wait_for(
        "the quota counted",
        lambda: (
            (get(cluster, namespace, "resourcequota", "pods") or {}).get("status", {}).get("hard")
        ),
        30,
    )
    op = start_operator()
    await create_all(client, namespace, [msjob("quota", workers=2)])
    job = await asyncio.to_thread(
        wait_for,
        "the ReplicaFailure condition",
        lambda: condition(get(cluster, namespace, "msjob", "quota"), "ReplicaFailure"),
        60,
    )
    assert job["reason"] == "Forbidden", job
    assert "exceeded quota" in job["message"], job
    evs = wait_events(cluster, namespace, "quota", "FailedCreatePod")
    warnings = [e for e in evs if e["reason"] == "FailedCreatePod"]
    assert warnings and warnings[0]["type"] == "Warning"
    t0 = len(operator_calls(cluster.audit_log, namespace, "create", "pods"))
    await asyncio.sleep(QUOTA_WINDOW)
    attempts = len(operator_calls(cluster.audit_log, namespace, "create", "pods")) - t0
    refused = sum(
        (e.get("responseStatus") or {}).get("code") == 403
        for e in operator_calls(cluster.audit_log, namespace, "create", "pods")
    )
    per_minute = attempts * 60 / QUOTA_WINDOW
    print(
        f"\nquota: {per_minute:.0f} pod create attempts/min while refused ({refused} refusals "
        f"in all)"
    )
    assert per_minute <= 20, f"{attempts} pod creates in {QUOTA_WINDOW}s: a hot loop"
    # The cluster's policy said no, not the operator's trouble: retried, not an error (the
    # MsopReconcileErrors alert stays quiet), and one warning line per refusal, no error line.
    assert metric(op.metrics_url, "controller_runtime_reconcile_errors_total") == 0
    assert metric(op.metrics_url, "controller_runtime_reconcile_total", result="requeue") >= 1
    log = op.log_path.read_text()
    assert "reconciler error" not in log
    assert "refused by a cluster policy" in log
    quota["spec"] = {"hard": {"pods": "10"}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(quota))
    raised = time.monotonic()
    # Nothing the operator watches changes: the job's retry backoff (capped at
    # RETRY_MAX_DELAY) decides when it tries again.
    await wait_until(
        "both pods", lambda: _count_pods(client, namespace, 2), within=RETRY_MAX_DELAY + 30
    )
    await wait_until("quota Running", lambda: _job_has(client, namespace, "quota", "Running"), 60)
    print(f"quota raised: the job proceeded {time.monotonic() - raised:.0f}s later")
    final = await client.get(MSJOBS, "quota", namespace)
    assert "ReplicaFailure" not in condition_types(final), final["status"]
    assert "FailedCreatePod" in event_reasons(cluster, namespace, "quota")


async def _count_pods(client: KubeClient, ns: str, n: int) -> bool:
    return len((await client.list(PODS, ns))["items"]) >= n


# --- 8. hostile and extreme input -----------------------------------------------------


def test_name_too_long_for_pod_names_is_rejected_at_admission(
    cluster: LocalCluster, namespace: str
) -> None:
    name = "x" * 55  # + "-worker-0" = 64 characters
    proc = cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(msjob(name)), check=False
    )
    assert proc.returncode != 0
    assert "63 characters" in proc.stderr, proc.stderr
    assert get(cluster, namespace, "msjob", name) is None


async def test_a_thousand_workers(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """One MSJob with 1,000 workers: every pod is created, once, and the job Runs."""
    start_operator("--kube-api-qps", "200", "--kube-api-burst", "400")
    started = time.monotonic()
    await create_all(client, namespace, [msjob("big", workers=1000)])
    await wait_until(
        "1,000 pods", lambda: _count_pods(client, namespace, 1000), within=180, interval=2
    )
    created = time.monotonic() - started
    await wait_until("big Running", lambda: _job_has(client, namespace, "big", "Running"), 180, 2)
    job = await client.get(MSJOBS, "big", namespace)
    creates = [
        e
        for e in operator_calls(cluster.audit_log, namespace, "create", "pods")
        if (e.get("responseStatus") or {}).get("code") == 201
    ]
    assert len(creates) == 1000
    print(
        f"\n1,000 workers: created in {created:.0f}s, Running after "
        f"{time.monotonic() - started:.0f}s ({job['status'].get('workers')})"
    )


async def test_template_labels_kept_owner_and_namespace_overridden(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    other = create_namespace(cluster, prefix="rel")
    try:
        start_operator()
        job = msjob("tpl", workers=2, scheduler=True, labels={"team": "Research_A.b-1", "x": ""})
        for spec in job["spec"]["msReplicaSpecs"].values():
            meta = spec["template"]["metadata"]
            meta["namespace"] = other
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": "thief",
                    "controller": True,
                    "uid": "00000000-0000-0000-0000-000000000001",
                }
            ]
        await create_all(client, namespace, [job])
        uid = (await client.get(MSJOBS, "tpl", namespace))["metadata"]["uid"]
        await wait_until("3 pods", lambda: _count_pods(client, namespace, 3), 60)
        for pod in (await client.list(PODS, namespace))["items"]:
            labels = pod["metadata"]["labels"]
            assert labels["team"] == "Research_A.b-1" and labels["x"] == "", labels
            assert pod["metadata"]["namespace"] == namespace
            refs = pod["metadata"]["ownerReferences"]
            assert [(r["kind"], r["uid"]) for r in refs] == [("MSJob", uid)], refs
        for res in (PODS, SERVICES):
            assert (await client.list(res, other))["items"] == []
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)


def permissive(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD with an 'older', permissive schema: anything goes."""
    out = copy.deepcopy(crd)
    for v in out["spec"]["versions"]:
        v["schema"] = {
            "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        }
        v.get("subresources", {}).pop("scale", None)
    return out


async def test_malformed_jobs_fail_with_a_reason_never_crash(side_cluster: LocalCluster) -> None:
    """MSJobs written under a permissive schema (replicas "abc", no mindspore container)
    are read back under the real one. Each gets an InvalidSpec Warning event; the one the
    API server still lets us write status for gets Failed/InvalidSpec; the one whose
    status it refuses (422: the object fails the current schema) is not retried in a
    loop. The operator stays up and a good job next to them is reconciled."""
    c = side_cluster
    ns = create_namespace(c, prefix="rel")
    real = yaml.safe_load(CRD.read_text())
    bad_replicas = msjob("bad-replicas")
    bad_replicas["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = "abc"
    no_container = msjob("no-mindspore")
    no_container["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "name"
    ] = "x"
    try:
        c.kubectl("replace", "-f", "-", input=json.dumps(permissive(real)))
        for job in (bad_replicas, no_container):
            wait_for(
                f"{job['metadata']['name']} accepted under the permissive schema",
                functools.partial(_create_ok, c, ns, job),
                30,
            )
    finally:
        c.kubectl("replace", "-f", "-", input=json.dumps(real))
    op = operator_on(c, ns, c.kubeconfig)
    await asyncio.to_thread(op.start)
    try:
        c.kubectl("create", "-n", ns, "-f", "-", input=json.dumps(msjob("good")))
        for name in ("bad-replicas", "no-mindspore"):
            evs = await asyncio.to_thread(
                wait_for,
                f"an InvalidSpec Warning on {name}",
                functools.partial(_warnings, c, ns, name, "InvalidSpec"),
                60,
            )
            print(f"\nmalformed {name}: Warning InvalidSpec: {evs[0]['message']}")
        job = await asyncio.to_thread(wait_condition, c, ns, "no-mindspore", "Failed", 60)
        failed = condition(job, "Failed")
        assert failed and failed["reason"] == "InvalidSpec", failed
        await asyncio.to_thread(wait_condition, c, ns, "good", "Created", 60)
        await asyncio.sleep(5)
        writes = [
            e
            for e in operator_calls(c.audit_log, ns, "patch", "msjobs", subresource="status")
            if (e.get("objectRef") or {}).get("name") == "bad-replicas"
        ]
        print(f"malformed bad-replicas: {len(writes)} status writes refused (422), then no retry")
        assert 1 <= len(writes) <= 3, len(writes)
        assert op.alive(), op.log_tail()
    finally:
        code = await asyncio.to_thread(op.stop)
        c.kubectl("delete", "namespace", ns, "--wait=false", check=False)
    assert code == 0, op.log_tail()
