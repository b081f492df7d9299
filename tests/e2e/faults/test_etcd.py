"""Fault 2: etcd SIGKILLed and restarted mid-burst; etcd compacted while the operator
is cut off, so that every one of its watches resumes from a compacted resourceVersion
(410 Gone) and must relist."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msop.api.resources import MSJOBS
from msop.kube.client import KubeClient
from msop.kube.resources import PODS
from testbed import LocalCluster, OperatorProcess
from testbed.cluster import create_namespace
from testbed.paths import CACHE
from testbed.serviceaccount import service_account_kubeconfig
from tests.e2e.faults.checks import all_pods_made, final_checks, outage, picture, record
from tests.e2e.faults.cluster import fault_cluster, prepare
from tests.e2e.reliability import (
    TEST_AGENT,
    apiserver_address,
    create_all,
    etcd_compact,
    has_true,
    metric,
    msjob,
    proxied_kubeconfig,
    wait_until,
)
from tests.e2e.sessions import run_session_cluster
from tests.e2e.tcpproxy import TcpProxy

RESOURCES = ("msjobs.mindspore.gitee.com", "pods", "services")


async def test_etcd_sigkilled_mid_burst(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    op = start_operator("--max-concurrent-reconciles", "10")
    assert op.proc is not None
    pid = op.proc.pid
    names = [f"etcd-{i:03d}" for i in range(100)]
    sched = {n for i, n in enumerate(names) if i % 4 == 0}
    jobs = [msjob(n, scheduler=n in sched) for n in names]
    await create_all(client, namespace, jobs[:50], parallel=16)
    await wait_until(
        "the operator busy with the burst",
        lambda: _some_pods(client, namespace),
        within=60,
        interval=0.2,
    )
    back = await outage(cluster, "etcd", 5.0)
    # kwok, which plays the kubelets, does not always come through an etcd restart (in
    # one run of four it never ran 2 of 125 bound pods): it is not under test, so it is
    # started again, as a node agent would be.
    await asyncio.to_thread(cluster.kill_component, "kwok-controller")
    await asyncio.to_thread(cluster.start_component, "kwok-controller")
    await create_all(client, namespace, jobs[50:], parallel=16)
    await wait_until(
        "every pod made after etcd came back",
        lambda: all_pods_made(client, namespace, names, sched),
        within=120,
        explain=lambda: picture(client, namespace),
    )
    made = time.monotonic() - back
    await wait_until(
        "all 100 jobs Running after etcd came back",
        lambda: _all(client, namespace, names, "Running"),
        within=180,
        explain=lambda: picture(client, namespace),
    )
    recovery = time.monotonic() - back
    figures = await final_checks(cluster, client, namespace, names, sched, [(op, pid)])
    record("etcd SIGKILL", jobs=100, down_s=5.0, all_pods_made_after_restart_s=round(made, 1),
           all_running_after_restart_s=round(recovery, 1), **figures)  # fmt: skip


async def _some_pods(client: KubeClient, ns: str) -> bool:
    return len((await client.list(PODS, ns))["items"]) >= 5


async def _all(client: KubeClient, ns: str, names: list[str], condition: str) -> bool:
    try:
        jobs = (await client.list(MSJOBS, ns))["items"]
    except Exception:
        return False
    return sum(1 for j in jobs if has_true(j, condition)) == len(names)


@pytest.fixture(scope="module")
def uncached() -> Iterator[LocalCluster]:
    """A cluster whose API server serves watches straight from etcd (no watch cache), so
    that a compaction expires every resourceVersion before it (410 Gone)."""
    c = fault_cluster("msop-faults-nocache", "--extra-args", "kube-apiserver=watch-cache=false")
    yield from run_session_cluster(c, prepare)


async def test_compaction_expires_every_watch_and_nothing_is_lost(
    uncached: LocalCluster, tmp_path: Path
) -> None:
    """The operator is cut off (its connections closed, new ones held); meanwhile jobs are
    created, a worker pod and a whole job deleted, and etcd compacted. Each of its three
    watches resumes from a compacted revision, gets 410 and relists; the deleted pod is
    recreated, the deleted job leaves nothing, the new jobs run."""
    c = uncached
    ns = create_namespace(c, prefix="fault")
    sa = service_account_kubeconfig(c, tmp_path / "sa.kubeconfig")
    async with (
        TcpProxy(*apiserver_address(c)) as proxy,
        await KubeClient.from_config(c.kubeconfig, user_agent=TEST_AGENT) as client,
    ):
        kc = tmp_path / "proxied.kubeconfig"
        proxied_kubeconfig(c, proxy.port, kc, source=sa)
        op = OperatorProcess(
            kubeconfig=str(kc),
            log_path=CACHE / "e2e-logs" / f"{ns}-compaction.log",
            args=("--namespace", ns, "--log-level", "debug"),
        )
        await asyncio.to_thread(op.start)
        assert op.proc is not None
        try:
            before = [f"cb-{i:02d}" for i in range(10)]
            during = [f"cd-{i:02d}" for i in range(10)]
            await create_all(client, ns, [msjob(n, workers=2) for n in before])
            await wait_until(
                "the first jobs Running",
                lambda: _all(client, ns, before, "Running"),
                within=90,
            )
            expired0 = {r: _expired(op, r) for r in RESOURCES}
            lists0 = {
                r: metric(op.metrics_url, "informer_lists_total", resource=r) for r in RESOURCES
            }
            proxy.hold_new()
            proxy.cut()
            await client.delete(PODS, "cb-00-worker-1", ns, grace_period_seconds=0)
            await client.delete(MSJOBS, "cb-09", ns)
            await create_all(client, ns, [msjob(n, workers=2) for n in during])
            await wait_until(
                "cb-09's pods collected",
                lambda: _no_pods_of(client, ns, "cb-09"),
                within=60,
            )
            rev = await asyncio.to_thread(etcd_compact, c)
            cut_for = time.monotonic()
            proxy.thaw()
            await wait_until(
                "every watch expired (410) and relisted",
                lambda: all(_expired(op, r) > expired0[r] for r in RESOURCES),
                within=60,
            )
            relisted = time.monotonic() - cut_for
            lists = {
                r: metric(op.metrics_url, "informer_lists_total", resource=r) - lists0[r]
                for r in RESOURCES
            }
            assert all(n >= 1 for n in lists.values()), lists
            names = [n for n in before if n != "cb-09"] + during
            figures = await final_checks(
                c, client, ns, names, set(), [(op, op.proc.pid)], workers=2,
                recreated=frozenset({"pods/cb-00-worker-1"}), deleted_jobs=("cb-09",),
            )  # fmt: skip
            record(
                "etcd compaction (every watch 410)",
                compacted_revision=rev,
                watches_expired=len(RESOURCES),
                relisted_within_s=round(relisted, 1),
                jobs=len(names),
                **figures,
            )
        finally:
            proxy.thaw()
            await asyncio.to_thread(op.stop)
            c.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _expired(op: OperatorProcess, resource: str) -> float:
    return metric(op.metrics_url, "informer_watch_restarts_total", reason="expired",
                  resource=resource)  # fmt: skip


async def _no_pods_of(client: KubeClient, ns: str, job: str) -> bool:
    pods = (await client.list(PODS, ns))["items"]
    return not any(p["metadata"]["name"].startswith(f"{job}-") for p in pods)
