"""Reliability scenarios that take minutes, marked ``slow``.

Sizes are chosen so each test stays within about three minutes on a 2-core CI machine
shared with other clusters; the figures each one measured are printed (``-s``) and
asserted where the scenario has a bound. Pods are ended by an async kubelet pass
(tests/e2e/reliability.py), kwok runs them.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import pytest

from msop.kube.client import KubeClient
from msop.kube.resources import LEASES
from testbed import LocalCluster, OperatorProcess
from tests.e2e.leases import LeaseRecords, lease_time
from tests.e2e.reliability import (
    assert_created_once,
    condition_types,
    create_all,
    delete_all_and_wait_gc,
    drive_to_success,
    expected_children,
    metric,
    msjob,
    operator_creates,
    rss_kib,
    tcp_connections,
    wait_until,
)

pytestmark = pytest.mark.slow


# --- 1. operator crash mid-burst -------------------------------------------------------

CRASH_JOBS = 200
CRASH_KILLS = 6
CRASH_SEED = 8


async def test_operator_sigkilled_mid_burst_loses_and_duplicates_nothing(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """200 MSJobs (every 4th with a Scheduler and its Service) are created over ~25 s while
    the operator is SIGKILLed 6 times at seeded random moments and restarted each time."""
    rng = random.Random(CRASH_SEED)
    names = [f"crash-{i:03d}" for i in range(CRASH_JOBS)]
    jobs = [msjob(n, scheduler=i % 4 == 0) for i, n in enumerate(names)]
    ops: list[OperatorProcess] = [start_operator("--max-concurrent-reconciles", "10")]
    kills = 0
    started = time.monotonic()

    async def burst() -> None:
        for i in range(0, len(jobs), 8):
            await create_all(client, namespace, jobs[i : i + 8])
            await asyncio.sleep(1.0)

    async def killer() -> None:
        nonlocal kills
        for _ in range(CRASH_KILLS):
            await asyncio.sleep(rng.uniform(1.5, 5.0))
            ops[-1].kill()
            kills += 1
            # Restart at once, without waiting to be ready: a crash-looping pod would too.
            op = await asyncio.to_thread(
                start_operator, "--max-concurrent-reconciles", "10", wait_ready=False
            )
            ops.append(op)

    driver_stop = asyncio.Event()

    async def kill_then_release() -> None:
        await killer()
        driver_stop.set()

    burst_task = asyncio.create_task(burst())
    kill_task = asyncio.create_task(kill_then_release())
    try:
        final = await drive_to_success(client, namespace, set(names), within=240, stop=driver_stop)
    finally:
        for t in (burst_task, kill_task):
            if not t.done():
                t.cancel()
        await asyncio.gather(burst_task, kill_task, return_exceptions=True)
    await asyncio.to_thread(ops[-1].wait_ready)
    elapsed = time.monotonic() - started
    assert kills >= 5 and ops[-1].alive()

    lost = {
        j["metadata"]["name"]: sorted(condition_types(j))
        for j in final
        if not {"Created", "Running", "Succeeded"} <= condition_types(j)
    }
    assert not lost, f"status transitions lost: {lost}"
    wrong = {
        j["metadata"]["name"]: j["status"].get("replicaStatuses")
        for j in final
        if (j["status"].get("replicaStatuses") or {}).get("Worker", {}).get("succeeded") != 1
    }
    assert not wrong, f"replica counts wrong: {wrong}"
    assert_created_once(
        cluster, namespace, expected_children(names, {n for i, n in enumerate(names) if i % 4 == 0})
    )
    await delete_all_and_wait_gc(cluster, client, namespace)
    print(
        f"\ncrash mid-burst: {CRASH_JOBS} jobs, {kills} SIGKILLs survived, 0 duplicate creates, "
        f"all Succeeded in {elapsed:.0f}s"
    )


# --- 5. leader failover under load -----------------------------------------------------

FAILOVER_JOBS = 80
LEASE_NAME = "msop.mindspore.gitee.com"  # the operator's default --leader-election-id
LEASE = (
    "--leader-election-lease-duration",
    "4",
    "--leader-election-renew-deadline",
    "3",
    "--leader-election-retry-period",
    "1",
)


def _is_leader(op: OperatorProcess) -> bool:
    try:
        return metric(op.metrics_url, "leader_election_master_status") >= 1
    except OSError:
        return False


def _reconciles(op: OperatorProcess) -> float:
    try:
        return metric(op.metrics_url, "controller_runtime_reconcile_total")
    except OSError:
        return 0.0


async def test_leader_failover_under_load_takes_over_within_the_lease(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """Two replicas with a 4 s Lease; the leader is SIGKILLed while 80 jobs are created;
    the follower acquires the Lease no sooner than a lease duration after the leader's
    last renewal and within it plus two retry periods (+1.5 s slack), judged from the
    Lease's own times; it reconciles only once it leads, and no pod or Service is
    created twice."""
    flags = ("--leader-elect", "--leader-election-namespace", namespace, *LEASE)
    a = start_operator(*flags, wait_ready=False)
    await wait_until("a leader", lambda: _is_leader(a), within=30)
    b = start_operator(*flags, wait_ready=False)
    await asyncio.sleep(2)
    assert not _is_leader(b)
    names = [f"lead-{i:03d}" for i in range(FAILOVER_JOBS)]
    jobs = [msjob(n, scheduler=i % 4 == 0) for i, n in enumerate(names)]
    await create_all(client, namespace, jobs[:40])
    await wait_until(
        "the leader to be busy creating",
        lambda: _some_created(cluster, namespace),
        within=30,
    )
    # The Lease's records from a watch: a GET just after the SIGKILL could come before a
    # renewal the leader had already sent, and so miss its last renewTime.
    records = await LeaseRecords.follow(client, namespace, LEASE_NAME)
    try:
        holder_a = (await client.get(LEASES, LEASE_NAME, namespace))["spec"]["holderIdentity"]
        a.kill()
        rest = asyncio.create_task(create_all(client, namespace, jobs[40:]))
        assert _reconciles(b) == 0, "the follower reconciled before it led"
        await wait_until(
            "a reconcile by the new leader", lambda: _reconciles(b) > 0, within=60, interval=0.1
        )
        assert _is_leader(b)
        taken = await wait_until(
            "the record after the dead leader's", lambda: records.record_after(holder_a), 30
        )
    finally:
        await records.close()
    assert taken["holderIdentity"] not in ("", holder_a), records.specs
    last_renew = lease_time(records.last_of(holder_a), "renewTime")
    takeover = (lease_time(taken, "acquireTime") - last_renew).total_seconds()
    await rest
    final = await drive_to_success(client, namespace, set(names), within=180)
    assert all({"Created", "Running", "Succeeded"} <= condition_types(j) for j in final)
    assert_created_once(
        cluster, namespace, expected_children(names, {n for i, n in enumerate(names) if i % 4 == 0})
    )
    print(f"\nleader failover: acquired {takeover:.1f}s after the last renewal (lease 4s)")
    # Both times are MicroTimes (microseconds): no allowance for a coarse resolution.
    assert takeover >= 4, f"acquired {takeover:.1f}s after the last renewal: before expiry"
    # At the latest: the follower sees the last renewal at its next try, waits the lease
    # out, and takes it at the try after (each try 1 s apart with up to 20% jitter); 1.5 s
    # for its requests and event loop on a loaded machine.
    bound = 4 + 2 * 1.2 + 1.5
    assert takeover <= bound, f"acquired {takeover:.1f}s after the last renewal (lease 4s)"


def _some_created(cluster: LocalCluster, ns: str) -> bool:
    return sum(operator_creates(cluster.audit_log, ns, ("pods",)).values()) >= 10


# --- 9. soak ---------------------------------------------------------------------------

#: The issue's target is 2,000; one lifecycle (create, run, succeed, delete, GC) costs
#: about 0.25 s here (400 took 103 s on the 2-core machine), so 2,000 take ~9 min.
#: `make test` runs 500 (about a minute, 10 batches of 50: each batch waits for its GC);
#: ``MSOP_SOAK_LIFECYCLES=2000`` runs the full soak (docs/development/testing.md, "The soak").
SOAK_LIFECYCLES = int(os.environ.get("MSOP_SOAK_LIFECYCLES", "500"))
SOAK_BATCH = 50


async def test_soak_lifecycles_back_to_back_no_leak(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """SOAK_LIFECYCLES (500 unless set) job lifecycles (create, run, succeed, delete) in batches of
    SOAK_BATCH; RSS after all is within 10% of RSS after the first 10%, and the number
    of open TCP connections stays bounded."""
    op = start_operator("--max-concurrent-reconciles", "10")
    assert op.proc is not None
    pid = op.proc.pid
    rss_after_first = 0
    conns: list[int] = []
    started = time.monotonic()
    batches = SOAK_LIFECYCLES // SOAK_BATCH
    for b in range(batches):
        names = [f"soak-{b:03d}-{i:02d}" for i in range(SOAK_BATCH)]
        await create_all(client, namespace, [msjob(n) for n in names])
        await drive_to_success(client, namespace, set(names), within=120)
        await delete_all_and_wait_gc(cluster, client, namespace)
        conns.append(tcp_connections(pid))
        if b + 1 == max(1, batches // 10):
            await asyncio.sleep(1)
            rss_after_first = rss_kib(pid)
    await asyncio.sleep(1)
    rss_end = rss_kib(pid)
    elapsed = time.monotonic() - started
    drift = (rss_end - rss_after_first) / rss_after_first
    print(
        f"\nsoak: {SOAK_LIFECYCLES} lifecycles in {elapsed:.0f}s; RSS {rss_after_first} KiB after "
        f"10% -> {rss_end} KiB at the end ({drift:+.1%}); TCP connections min {min(conns)} "
        f"max {max(conns)}"
    )
    assert drift <= 0.10, f"RSS grew {drift:.1%}"
    # Three watches plus the client's keep-alive pool: a steady number, not one that
    # grows with the jobs that came and went.
    assert max(conns) <= max(conns[:2]) + 4, f"open TCP connections per batch: {conns}"
