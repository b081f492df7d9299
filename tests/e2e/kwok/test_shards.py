"""Shards on the kwok tier: three replicas, ``--shards 6``, a burst of MSJobs, one replica
SIGKILLed mid-burst.

Each replica reaches the API server through a TCP proxy of its own that connects from its
own loopback address (127.0.0.2, .3, .4), so the audit log's ``sourceIPs`` says which
replica made each request. Checks: each replica holds 2 shards; every pod and Service is
created once; no job's children or status are written by two replicas, except a dead
replica's jobs, handed over once; every pod carries its job's shard; the replicas list and
watch pods of single shards only (or the unlabelled ones), and MSJobs by single shards'
hash ranges (this tier's API server splits lists and watches by shard); the dead
replica's jobs all reach Running within the Lease duration plus a pass, and the survivors
hold 3 shards each.
A second scenario scales the replicas 3 -> 2 (SIGTERM) -> 4 under a burst: every shard is
held by one replica at every sample, nothing is created twice, every job succeeds. A third
goes from one operator without shards to two replicas with
``--shards 4`` under running jobs: their unlabelled pods and Services are adopted, nothing
is created twice, every job succeeds. A fourth goes from ``--shards 4`` to 6 to 3 under
running jobs: their children are moved to their jobs' new shards, nothing is created twice,
no restart is counted, every job succeeds. Figures are printed (``-s``).
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

from msop.api import constants as c
from msop.api.resources import MSJOBS
from msop.controller.shards import shard_of, shard_range_selector
from msop.kube.client import KubeClient
from msop.kube.resources import PODS, SERVICES
from testbed import LocalCluster, OperatorProcess
from tests.e2e.reliability import (
    apiserver_address,
    assert_created_once,
    audit_events,
    create_all,
    delete_all_and_wait_gc,
    drive_to_success,
    expected_children,
    has_true,
    held,
    job_of,
    msjob,
    proxied_kubeconfig,
    wait_until,
)
from tests.e2e.tcpproxy import TcpProxy

SHARDS = 6
JOBS = 120
LEASE = 6.0
#: What a pass may take once the shard is taken: its caches filled, its jobs reconciled
#: (two cores, three operators and the control plane on them).
PASS = 20.0
TIMING = (
    "--leader-election-lease-duration", str(LEASE),
    "--leader-election-renew-deadline", "4",
    "--leader-election-retry-period", "1",
)  # fmt: skip
SOURCES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
#: The log line of the MSJob controller's start.
CONTROLLER_STARTED = {"event": "starting runnable", "runnable": "msjob"}
WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def logged(op: OperatorProcess, **fields: str) -> list[str]:
    """The timestamps (ISO 8601, UTC: they sort as times) of ``op``'s log lines with
    ``fields``."""
    lines = op.log_path.read_text(errors="replace").splitlines()
    return [
        str(record.get("timestamp"))
        for record in (json.loads(line) for line in lines if line.startswith("{"))
        if all(record.get(k) == v for k, v in fields.items())
    ]


def source_of(event: dict[str, Any]) -> str | None:
    return next((ip for ip in event.get("sourceIPs") or [] if ip in SOURCES), None)


async def test_three_replicas_share_six_shards_and_take_over_a_killed_ones(
    cluster: LocalCluster,
    namespace: str,
    start_operator: Any,
    client: KubeClient,
    tmp_path: Path,
) -> None:
    host, port = apiserver_address(cluster)
    proxies = [TcpProxy(host, port, source=s) for s in SOURCES]
    ops: list[OperatorProcess] = []
    for proxy in proxies:
        await proxy.__aenter__()
    try:
        await _scenario(cluster, namespace, start_operator, client, tmp_path, proxies, ops)
    finally:
        # The operators stop while their proxies still carry them (they release their
        # Leases and exit 0), then the proxies close.
        codes = [await asyncio.to_thread(op.stop) for op in ops if op.alive()]
        for proxy in proxies:
            await proxy.__aexit__(None, None, None)
    assert codes == [0, 0], codes


async def _scenario(
    cluster: LocalCluster,
    namespace: str,
    start_operator: Any,
    client: KubeClient,
    tmp_path: Path,
    proxies: list[TcpProxy],
    ops: list[OperatorProcess],
) -> None:
    configs = []
    for i, proxy in enumerate(proxies):
        path = tmp_path / f"replica-{i}.kubeconfig"
        proxied_kubeconfig(cluster, proxy.port, path)
        configs.append(path)
    flags = ("--leader-elect", "--leader-election-namespace", namespace, "--shards", str(SHARDS))
    for path in configs:  # one after another: each gets a log of its own
        ops.append(await asyncio.to_thread(start_operator, *flags, *TIMING, kubeconfig=str(path)))
    by_source = dict(zip(SOURCES, ops, strict=True))

    def split() -> list[set[int]]:
        return [held(op) for op in ops]

    def settled(alive: list[OperatorProcess], each: int) -> bool:
        sets = [held(op) for op in alive]
        return all(len(s) == each for s in sets) and set().union(*sets) == set(range(SHARDS))

    await wait_until("2 shards per replica", lambda: settled(ops, 2), within=60)
    before = split()
    victim, victim_source = ops[0], SOURCES[0]
    victim_shards = before[0]
    # The audit log is read off the event loop: the loop carries the replicas' proxies, and
    # reading the whole tier's log in it stalled their Lease renewals past the deadline.
    since = len(await asyncio.to_thread(audit_events, cluster.audit_log))

    names = [f"sh-{i:03d}" for i in range(JOBS)]
    with_scheduler = {n for i, n in enumerate(names) if i % 4 == 0}
    jobs = [msjob(n, scheduler=n in with_scheduler) for n in names]
    killed_at = 0.0
    for i in range(0, JOBS, 10):
        await create_all(client, namespace, jobs[i : i + 10])
        if i == JOBS // 2:
            victim.kill()
            killed_at = time.monotonic()
        await asyncio.sleep(0.3)

    running_at: dict[str, float] = {}
    uids: dict[str, str] = {}

    async def all_running() -> bool:
        for job in (await client.list(MSJOBS, namespace))["items"]:
            name = job["metadata"]["name"]
            uids[name] = job["metadata"]["uid"]
            if has_true(job, "Running"):
                running_at.setdefault(name, time.monotonic())
        return len(running_at) == JOBS

    await wait_until("every job Running", all_running, within=LEASE + PASS + 60, interval=0.5)
    orphans = [n for n in names if shard_of(uids[n], SHARDS) in victim_shards]
    taken_over = max(running_at[n] for n in orphans) - killed_at
    assert orphans and taken_over < LEASE + PASS, (
        f"the killed replica's {len(orphans)} jobs were all Running {taken_over:.1f}s after "
        f"the kill (Lease {LEASE}s + a pass {PASS}s)"
    )
    await wait_until("3 shards per survivor", lambda: settled(ops[1:], 3), within=30)

    # Every pod and Service once, labelled with its job's shard.
    await asyncio.to_thread(
        assert_created_once, cluster, namespace, expected_children(names, with_scheduler)
    )
    for pod in (await client.list(PODS, namespace))["items"]:
        job = pod["metadata"]["labels"][c.LABEL_JOB_NAME]
        assert pod["metadata"]["labels"][c.LABEL_SHARD] == str(shard_of(uids[job], SHARDS))

    # One writer per job: the holder of its shard; a killed replica's jobs change hands once.
    writers: dict[str, list[tuple[str, str]]] = {}
    events = (await asyncio.to_thread(audit_events, cluster.audit_log))[since:]
    for ev in events:
        ref = ev.get("objectRef") or {}
        source = source_of(ev)
        if ev.get("verb") not in WRITES or ref.get("namespace") != namespace or source is None:
            continue
        job = job_of(ref)
        if job in uids:
            writers.setdefault(job, []).append((ev["requestReceivedTimestamp"], source))
    assert set(writers) == set(names)
    for job, writes in writers.items():
        runs = [
            s for i, (_, s) in enumerate(sorted(writes)) if i == 0 or s != sorted(writes)[i - 1][1]
        ]
        shard = shard_of(uids[job], SHARDS)
        if shard in victim_shards:
            assert len(runs) <= 2 and (len(runs) == 1 or runs[0] == victim_source), (job, runs)
        else:
            (only,) = runs
            assert shard in held(by_source[only]), (job, shard, only)

    # Pods are listed and watched per shard (or without a shard label), never all at once;
    # the survivors listed the pods of the killed replica's shards when they took them.
    listed: set[int] = set()
    for ev in events:
        ref = ev.get("objectRef") or {}
        if ev.get("verb") in ("list", "watch") and ref.get("resource") == "pods" and source_of(ev):
            query = urllib.parse.parse_qs(urllib.parse.urlparse(ev["requestURI"]).query)
            selector = query.get("labelSelector", [""])[0]
            assert c.LABEL_SHARD in selector, (source_of(ev), ev["requestURI"])
            one = selector.rpartition(f"{c.LABEL_SHARD}=")[2]
            if ev.get("verb") == "list" and one.isdigit() and source_of(ev) != victim_source:
                listed.add(int(one))
    assert victim_shards <= listed, (sorted(victim_shards), sorted(listed))

    # This tier's API server splits lists and watches by shard: the replicas list and
    # watch the MSJobs of single shards, by their hash ranges, never all of them; the
    # survivors listed the killed replica's shards' jobs when they took them.
    ranges = {shard_range_selector(i, SHARDS): i for i in range(SHARDS)}
    jobs_listed: set[int] = set()
    for ev in events:
        ref = ev.get("objectRef") or {}
        verb = ev.get("verb")
        if verb in ("list", "watch") and ref.get("resource") == "msjobs" and source_of(ev):
            query = urllib.parse.parse_qs(urllib.parse.urlparse(ev["requestURI"]).query)
            selector = query.get("shardSelector", [""])[0]
            assert selector in ranges, (source_of(ev), ev["requestURI"])
            if verb == "list" and source_of(ev) != victim_source:
                jobs_listed.add(ranges[selector])
    assert victim_shards <= jobs_listed, (sorted(victim_shards), sorted(jobs_listed))

    print(
        f"\nshards: {JOBS} jobs over {SHARDS} shards on 3 replicas {before}; SIGKILL of one "
        f"holding {sorted(victim_shards)}: its {len(orphans)} jobs all Running "
        f"{taken_over:.1f}s after the kill (Lease {LEASE}s); survivors now {split()[1:]}"
    )
    await delete_all_and_wait_gc(cluster, client, namespace)


async def test_from_one_operator_to_four_shards_adopts_the_running_jobs(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    names = [f"up-{i:02d}" for i in range(24)]
    with_scheduler = {n for i, n in enumerate(names) if i % 4 == 0}
    single: OperatorProcess = await asyncio.to_thread(start_operator)
    await create_all(client, namespace, [msjob(n, scheduler=n in with_scheduler) for n in names])

    async def all_running() -> bool:
        jobs = (await client.list(MSJOBS, namespace))["items"]
        return sum(1 for j in jobs if has_true(j, "Running")) == len(names)

    await wait_until("every job Running on one operator", all_running, within=90)
    assert await asyncio.to_thread(single.stop) == 0
    pods = (await client.list(PODS, namespace))["items"]
    assert pods and all(c.LABEL_SHARD not in p["metadata"]["labels"] for p in pods)

    flags = ("--leader-elect", "--leader-election-namespace", namespace, "--shards", "4")
    ops = [await asyncio.to_thread(start_operator, *flags, *TIMING) for _ in range(2)]
    await wait_until(
        "2 shards per replica",
        lambda: (
            [len(held(op)) for op in ops] == [2, 2] and held(ops[0]) | held(ops[1]) == set(range(4))
        ),
        within=60,
    )
    final = await drive_to_success(client, namespace, set(names), within=120)
    wrong = {
        j["metadata"]["name"]: j["status"].get("replicaStatuses")
        for j in final
        if (j["status"].get("replicaStatuses") or {}).get("Worker", {}).get("succeeded") != 1
    }
    assert not wrong, f"replica counts wrong: {wrong}"
    # Adopted as they were: nothing created again, no label written.
    assert_created_once(cluster, namespace, expected_children(names, with_scheduler))
    pods = (await client.list(PODS, namespace))["items"]
    assert all(c.LABEL_SHARD not in p["metadata"]["labels"] for p in pods)
    print(f"\n1 -> 4 shards: {len(names)} running jobs adopted by 2 replicas, all Succeeded")
    await delete_all_and_wait_gc(cluster, client, namespace)


async def test_from_four_shards_to_six_and_to_three_moves_the_running_jobs(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    """--shards 4 -> 6 (Recreate) -> 3 (rolling) -> 1 (rolling) with every job running:
    each time most jobs change shard and their children carry the old one; the new holders
    move them (a label patch), adopt them as they are, and count no restart. 6 -> 3 leaves
    labels 3-5, which no replica watches under 3 shards; during the rolling update the new
    replicas hold nothing while the old ones run. The single leader starts its controllers
    only after the sharded replicas handed every shard over, and manages the labelled
    children as they are."""
    names = [f"re-{i:02d}" for i in range(24)]
    with_scheduler = {n for i, n in enumerate(names) if i % 4 == 0}
    base = ("--leader-elect", "--leader-election-namespace", namespace, *TIMING)

    async def run_with(shards: int, replicas: int) -> list[OperatorProcess]:
        flags = (*base, "--shards", str(shards))
        ops = [await asyncio.to_thread(start_operator, *flags) for _ in range(replicas)]
        await wait_until(
            f"{shards} shards held by {replicas} replicas",
            lambda: set().union(*(held(op) for op in ops)) == set(range(shards)),
            within=60,
        )
        return ops

    async def settled(shards: int) -> None:
        async def filed() -> bool:
            jobs = {
                j["metadata"]["name"]: j for j in (await client.list(MSJOBS, namespace))["items"]
            }
            if sum(1 for j in jobs.values() if has_true(j, "Running")) != len(names):
                return False
            pods = (await client.list(PODS, namespace))["items"]
            services = (await client.list(SERVICES, namespace))["items"]
            if len(pods) != len(names) + len(with_scheduler):
                return False
            return all(
                o["metadata"]["labels"].get(c.LABEL_SHARD) == str(shard_of(
                    jobs[o["metadata"]["labels"][c.LABEL_JOB_NAME]]["metadata"]["uid"], shards))
                for o in [*pods, *services]
            )  # fmt: skip

        await wait_until(f"every job Running, its pods filed under shard mod {shards}",
                         filed, within=90)  # fmt: skip

    ops = await run_with(4, 2)
    await create_all(client, namespace, [msjob(n, scheduler=n in with_scheduler) for n in names])
    await settled(4)
    jobs = (await client.list(MSJOBS, namespace))["items"]
    uids = [j["metadata"]["uid"] for j in jobs]
    moved = {n: sum(1 for u in uids if shard_of(u, 4) != shard_of(u, n)) for n in (6, 3)}
    assert moved[6] and moved[3]  # the move is exercised
    # 4 -> 6 as the Deployment's Recreate strategy does it: the old replicas stop first.
    for op in ops:
        assert await asyncio.to_thread(op.stop) == 0
    ops = await run_with(6, 3)
    await settled(6)
    print(f"\n4 -> 6 shards (Recreate): {len(names)} running jobs filed again")
    # 6 -> 3 as a rolling update does it: the new replicas start while the old ones run,
    # and hold nothing until those are gone.
    flags = (*base, "--shards", "3")
    new = [await asyncio.to_thread(start_operator, *flags) for _ in range(2)]
    await asyncio.sleep(3 * 1.0)  # three retry periods
    assert [held(op) for op in new] == [set(), set()]
    assert set().union(*(held(op) for op in ops)) == set(range(6))
    for op in ops:
        assert await asyncio.to_thread(op.stop) == 0
    await wait_until("3 shards held by the new replicas",
                     lambda: set().union(*(held(op) for op in new)) == set(range(3)),
                     within=60)  # fmt: skip
    ops = new
    await settled(3)
    print(f"6 -> 3 shards (rolling): {len(names)} running jobs filed again")
    # 3 -> 1 as a rolling update does it: the single leader starts (and is ready: the
    # start waits for /readyz) while the sharded replicas run; they hand every shard
    # over before its controllers start, and take none back while it leads.
    single = await asyncio.to_thread(start_operator, *base)
    await wait_until("the sharded replicas let go",
                     lambda: not set().union(*(held(op) for op in ops)), within=30)  # fmt: skip
    await wait_until("the single leader's controller started",
                     lambda: bool(logged(single, **CONTROLLER_STARTED)), within=30)  # fmt: skip
    started = min(logged(single, **CONTROLLER_STARTED))
    handed = [t for op in ops for t in logged(op, event="shard handed over")]
    assert len(handed) >= 3 and max(handed) <= started
    await asyncio.sleep(3 * 1.0)  # three retry periods
    assert not set().union(*(held(op) for op in ops))
    for op in ops:
        assert await asyncio.to_thread(op.stop) == 0
    ops = [single]
    print(f"3 -> 1 (rolling): the single leader's controller started at {started}, the last "
          f"shard was handed over at {max(handed)}")  # fmt: skip
    final = await drive_to_success(client, namespace, set(names), within=120)
    restarted = {
        j["metadata"]["name"]: j["status"]["replicaStatuses"]
        for j in final
        if any(r.get("restarts") for r in j["status"]["replicaStatuses"].values())
    }
    assert not restarted, f"restarts charged for children moved: {restarted}"
    assert_created_once(cluster, namespace, expected_children(names, with_scheduler))
    for op in ops:
        assert await asyncio.to_thread(op.stop) == 0
    await delete_all_and_wait_gc(cluster, client, namespace)


async def test_replicas_scale_3_to_2_to_4_under_load(
    cluster: LocalCluster, namespace: str, start_operator: Any, client: KubeClient
) -> None:
    flags = ("--leader-elect", "--leader-election-namespace", namespace, "--shards", str(SHARDS))
    ops = [await asyncio.to_thread(start_operator, *flags, *TIMING) for _ in range(3)]
    doubly: list[dict[int, int]] = []
    last_double: set[int] = set()

    def settled(alive: list[OperatorProcess], most: int) -> bool:
        nonlocal last_double
        sets = [held(op) for op in alive]  # scraped one after another, not at one instant:
        counts = {s: sum(s in h for h in sets) for s in range(SHARDS)}
        double = {s for s, n in counts.items() if n > 1}
        if double & last_double:  # so only a double holding seen twice in a row counts
            doubly.append(counts)
        last_double = double
        return all(n == 1 for n in counts.values()) and all(len(h) <= most for h in sets)

    await wait_until("2 shards per replica", lambda: settled(ops, 2), within=60)
    names = [f"sc-{i:03d}" for i in range(90)]
    with_scheduler = {n for i, n in enumerate(names) if i % 4 == 0}
    jobs = [msjob(n, scheduler=n in with_scheduler) for n in names]
    stop_driver = asyncio.Event()

    async def burst_and_scale() -> None:
        for i in range(0, len(jobs), 10):
            await create_all(client, namespace, jobs[i : i + 10])
            if i == 30:
                assert await asyncio.to_thread(ops[0].stop) == 0  # 3 -> 2, gracefully
                await wait_until("3 shards per replica", lambda: settled(ops[1:], 3), within=30)
            if i == 60:  # 2 -> 4
                ops.extend(
                    [await asyncio.to_thread(start_operator, *flags, *TIMING) for _ in range(2)]
                )
                await wait_until("at most 2 shards each", lambda: settled(ops[1:], 2), within=60)
            await asyncio.sleep(0.3)
        stop_driver.set()

    scaling = asyncio.create_task(burst_and_scale())
    try:
        final = await drive_to_success(client, namespace, set(names), within=240, stop=stop_driver)
    finally:
        if not scaling.done():
            scaling.cancel()
        await asyncio.gather(scaling, return_exceptions=True)
    scaling.result()
    assert not doubly, f"a shard held by two replicas at once: {doubly[:3]}"
    wrong = {
        j["metadata"]["name"]: j["status"].get("replicaStatuses")
        for j in final
        if (j["status"].get("replicaStatuses") or {}).get("Worker", {}).get("succeeded") != 1
    }
    assert not wrong, f"replica counts wrong: {wrong}"
    assert_created_once(cluster, namespace, expected_children(names, with_scheduler))
    now = [sorted(held(o)) for o in ops[1:]]
    print(f"\nscale 3 -> 2 -> 4: {len(names)} jobs, all Succeeded; shards now {now}")
    await delete_all_and_wait_gc(cluster, client, namespace)
