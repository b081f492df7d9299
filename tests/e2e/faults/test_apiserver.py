"""Fault 1: the API server SIGKILLed and restarted 5-8 s later, once in the middle of a
200-job burst and once while the 200 jobs complete."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any

from msop.api.resources import MSJOBS
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError
from testbed import LocalCluster
from tests.e2e.faults.checks import all_pods_made, final_checks, outage, picture, record
from tests.e2e.reliability import (
    create_all,
    has_true,
    msjob,
    succeed_running_workers,
    wait_until,
)

JOBS = 200
SEED = 25


async def _count(client: KubeClient, ns: str, condition: str) -> int:
    try:
        jobs = (await client.list(MSJOBS, ns))["items"]
    except ApiError:  # still coming back
        return -1
    return sum(1 for j in jobs if has_true(j, condition))


async def _kubelet(client: KubeClient, ns: str, stop: asyncio.Event) -> None:
    """End workers of Running jobs until stopped, riding out the outage."""
    done: set[str] = set()
    while not stop.is_set():
        with contextlib.suppress(ApiError):
            await succeed_running_workers(client, ns, done)
        await asyncio.sleep(1.0)


async def test_apiserver_sigkilled_mid_burst_and_while_jobs_complete(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    rng = random.Random(SEED)
    op = start_operator("--max-concurrent-reconciles", "10")
    assert op.proc is not None
    pid = op.proc.pid
    names = [f"as-{i:03d}" for i in range(JOBS)]
    sched = {n for i, n in enumerate(names) if i % 4 == 0}
    jobs = [msjob(n, scheduler=n in sched) for n in names]

    # 1a. Mid-burst: half the jobs in, the operator busy creating their pods.
    await create_all(client, namespace, jobs[: JOBS // 2], parallel=16)
    await wait_until(
        "the operator busy with the burst",
        lambda: _count(client, namespace, "Created"),
        within=60,
        interval=0.2,
    )
    down = rng.uniform(5, 8)
    back = await outage(cluster, "kube-apiserver", down)
    await create_all(client, namespace, jobs[JOBS // 2 :], parallel=16)
    await wait_until(
        "every pod made after the restart",
        lambda: all_pods_made(client, namespace, names, sched),
        within=120,
        explain=lambda: picture(client, namespace),
    )
    made = time.monotonic() - back
    await wait_until(
        f"all {JOBS} jobs Running after the restart",
        lambda: _all(client, namespace, "Running"),
        within=180,
        explain=lambda: picture(client, namespace),
    )
    burst_recovery = time.monotonic() - back

    # 1b. While the jobs complete: the kubelet ends workers; a quarter in, the API server
    # is killed again.
    stop = asyncio.Event()
    kubelet = asyncio.create_task(_kubelet(client, namespace, stop))
    try:
        await wait_until(
            "a quarter of the jobs Succeeded",
            lambda: _at_least(client, namespace, "Succeeded", JOBS // 4),
            within=120,
        )
        down2 = rng.uniform(5, 8)
        back2 = await outage(cluster, "kube-apiserver", down2)
        await wait_until(
            f"all {JOBS} jobs Succeeded after the second restart",
            lambda: _all(client, namespace, "Succeeded"),
            within=180,
            explain=lambda: picture(client, namespace),
        )
        completion_recovery = time.monotonic() - back2
    finally:
        stop.set()
        await kubelet
    figures = await final_checks(cluster, client, namespace, names, sched, [(op, pid)])
    record(
        "apiserver SIGKILL",
        jobs=JOBS,
        down_s=[round(down, 1), round(down2, 1)],
        all_pods_made_after_restart_s=round(made, 1),
        all_running_after_restart_s=round(burst_recovery, 1),
        all_succeeded_after_restart_s=round(completion_recovery, 1),
        **figures,
    )


async def _all(client: KubeClient, ns: str, condition: str) -> bool:
    return await _count(client, ns, condition) == JOBS


async def _at_least(client: KubeClient, ns: str, condition: str, n: int) -> bool:
    return await _count(client, ns, condition) >= n
