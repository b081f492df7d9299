"""Scenarios 1, 2, 3 and 5 on one cluster: the operator's burst and full lifecycle, the
raw-create limit, the operator's API requests (audit log) and its CPU per lifecycle."""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.request
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import workload
from bench.audit import READ_VERBS, WRITE_VERBS, count_file
from bench.environment import sample, start_operator
from bench.observe import ConditionTimes, FirstSeen, wait_until, watch_forever
from bench.stats import ratio, summarize
from msop.api.resources import MSJOBS
from msop.cli.flags import parse_args
from msop.controller.shards import shard_of
from msop.kube import PODS, SERVICES, KubeClient
from msop.kube.errors import ApiError, ApiUnavailable, is_already_exists
from msop.kube.flowcontrol import client_limit
from msop.kube.resources import Resource
from testbed import LocalCluster
from testbed.cluster import create_namespace
from testbed.exposition import read_samples
from testbed.kubelet import succeeded_status

JSON = dict[str, Any]
PODS_PER_JOB = 6  # 1 Scheduler + 1 PS + 4 Workers
OPERATOR_NS = "bench-burst"
RAW_NS = "bench-raw"
BENCH_USER_AGENT = "msop-bench/1"
OPERATOR_USER_AGENT_PREFIX = "msop/"


async def bench_client(kubeconfig: str, concurrency: int) -> KubeClient:
    """A client with no client-side throttling; concurrency is bounded by the callers."""
    return await KubeClient.from_config(
        kubeconfig,
        qps=1e6,
        burst=1_000_000,
        user_agent=BENCH_USER_AGENT,
        max_connections=concurrency + 16,
    )


#: Tries of one bench write the API server timed out or refused for now (504, 429, 5xx,
#: no answer), 0.5 s, 1 s, 2 s ... (at most 5 s) apart: past tens of thousands of pods
#: the two-core API server answers a few creates 504, and one lost a 70-minute run.
WRITE_TRIES = 8


def _passes(e: ApiError) -> bool:
    return isinstance(e, ApiUnavailable) or e.status == 429 or e.status >= 500


async def _surely(
    write: Callable[[], Awaitable[JSON | None]],
    stored: Callable[[], Awaitable[JSON]] | None = None,
) -> JSON | None:
    """``write()``, tried again while the API server's answer is a failure that passes
    (:func:`_passes`), up to :data:`WRITE_TRIES` times with a growing pause. ``stored``:
    where a retry is answered 409 AlreadyExists (the first try was stored though its
    answer was lost), what it stored."""
    for attempt in range(WRITE_TRIES):
        try:
            return await write()
        except ApiError as e:
            if attempt and stored is not None and is_already_exists(e):
                return await stored()
            if not _passes(e) or attempt == WRITE_TRIES - 1:
                raise
        await asyncio.sleep(min(5.0, 0.5 * 2**attempt))
    raise AssertionError("unreachable")


async def create_surely(client: KubeClient, res: Resource, obj: JSON, ns: str) -> JSON:
    """Create ``obj``, trying again while the API server's answer is a failure that
    passes; a create that was stored although its answer was lost is found (409
    AlreadyExists on a retry: the stored object is read and returned)."""

    async def create() -> JSON:
        created: JSON = await client.create(res, obj, ns)
        return created

    async def stored() -> JSON:
        found: JSON = await client.get(res, obj["metadata"]["name"], ns)
        return found

    made = await _surely(create, stored)
    assert made is not None
    return made


async def patch_surely(
    client: KubeClient,
    res: Resource,
    name: str,
    body: JSON,
    ns: str,
    subresource: str | None = None,
) -> None:
    """A merge patch (the same each time), tried again as :func:`create_surely` does."""

    async def patch() -> None:
        await client.patch(res, name, body, ns, subresource=subresource)

    await _surely(patch)


async def _wait_or_miss(
    what: str, done: Callable[[], bool], wait_s: float, missed: list[str]
) -> float | None:
    """:func:`wait_until`, but a timeout is noted in ``missed`` (None returned) and the
    scenario goes on. Every job Running, then Succeeded, goes at the pace of kwok and the
    scheduler as much as the operator's (at 10,000 jobs, two cores made ~100 jobs a minute
    Running): the figures measured before and after (every object made, CPU, memory,
    Events, the raw baseline) must not be lost to them."""
    try:
        return await wait_until(what, done, wait_s)
    except TimeoutError:
        missed.append(what)
        return None


async def bounded(n: int, items: list[Any], fn: Callable[[Any], Awaitable[None]]) -> None:
    """Run ``fn`` over ``items`` with at most ``n`` in flight; the first error propagates."""
    sem = asyncio.Semaphore(n)

    async def one(item: Any) -> None:
        async with sem:
            await fn(item)

    async with asyncio.TaskGroup() as tg:
        for item in items:
            tg.create_task(one(item))


def _metric_by_label(text: str, name: str, label: str) -> dict[str, float]:
    """The samples named ``name`` summed by the value of ``label`` (``""`` for a sample
    without it)."""
    out: dict[str, float] = {}
    for s in read_samples(text):
        if s.name == name:
            key = s.labels.get(label, "")
            out[key] = out.get(key, 0.0) + s.value
    return out


def _scrape(metrics_url: str) -> str:
    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        text: str = resp.read().decode()
    return text


def namespace_exists(cluster: LocalCluster, name: str) -> bool:
    return cluster.kubectl("get", "namespace", name, check=False).returncode == 0


def _operator_metrics(metrics_url: str) -> JSON:
    """Reconciles by result, the event recorder's counters, what the API server sent
    (objects by resource, watched and listed) and the progress polls by result, from
    /metrics."""
    text = _scrape(metrics_url)
    return {
        "reconciles": _metric_by_label(text, "controller_runtime_reconcile_total", "result"),
        "events_written": _metric_by_label(text, "msop_events_written_total", "action"),
        "events_dropped": _metric_by_label(text, "msop_events_dropped_total", "reason"),
        "watch_restarts": _metric_by_label(text, "informer_watch_restarts_total", "reason"),
        "watch_events": _metric_by_label(text, "informer_watch_events_total", "resource"),
        "listed_objects": _metric_by_label(text, "informer_listed_objects_total", "resource"),
        "progress_polls": _metric_by_label(text, "msop_progress_polls_total", "result"),
    }


def _held_shards(metrics_url: str) -> set[int]:
    """The shards an operator holds (``msop_shard_owned``); empty if it cannot say."""
    try:
        text = _scrape(metrics_url)
    except OSError:
        return set()
    return {
        int(s.labels["shard"])
        for s in read_samples(text)
        if s.name == "msop_shard_owned" and s.value == 1
    }


def _sum_by_key(parts: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


def sharded_args(replicas: int) -> tuple[str, ...]:
    """The flags of one of ``replicas`` operators splitting the jobs into as many shards
    (none for one)."""
    if replicas <= 1:
        return ()
    return ("--leader-elect", "--leader-election-namespace", OPERATOR_NS,
            "--shards", str(replicas))  # fmt: skip


def _terminated_watchers(cluster: LocalCluster) -> dict[str, float]:
    """The API server's ``apiserver_terminated_watchers_total`` by resource: watches its
    watch cache closed because their client did not read the events fast enough (any
    client: the bench's own watches too)."""
    text = cluster.kubectl("get", "--raw", "/metrics").stdout
    return _metric_by_label(text, "apiserver_terminated_watchers_total", "resource")


def _stop_and_time(op: Any, log_path: Path) -> JSON:
    """SIGTERM the operator and time its exit; what its log says about pending events."""
    t0 = time.monotonic()
    code = op.stop(timeout=120)
    took = time.monotonic() - t0
    text = log_path.read_text(errors="replace")
    abandoned = 0
    for line in text.splitlines():
        if "events not written: shutdown deadline reached" in line:
            abandoned += int(line.split('"count": ', 1)[1].split(",", 1)[0].split("}", 1)[0])
    return {
        "sigterm_to_exit_s": took,
        "exit_code": code,
        "manager_stopped_logged": '"manager stopped"' in text,
        "events_abandoned_at_shutdown": abandoned,
    }


def _latencies(seen: FirstSeen, svcs: FirstSeen, started: dict[str, float]) -> list[float]:
    pods = seen.per_job_last_seen()
    services = svcs.per_job_last_seen()
    out = []
    for job, t0 in started.items():
        _, p_last = pods[job]
        _, s_last = services[job]
        out.append(max(p_last, s_last) - t0)
    return out


#: What ``--profile <profiler>`` writes, under logs/, for the first operator of a scenario.
PROFILE_SUFFIXES = {"cprofile": ".prof", "py-spy": ".pyspy.txt"}


def profile_file(label: str, profiler: str) -> str:
    """The profile of scenario ``label``'s (first) operator: e.g. ``operator-burst.prof``."""
    return f"operator-{label}{PROFILE_SUFFIXES[profiler]}"


async def run_operator_burst(
    cluster: LocalCluster,
    jobs: int,
    concurrency: int,
    operator_args: list[str],
    log_dir: Path,
    wait_s: float,
    profile: str | None = None,
    label: str = "burst",
    replicas: int = 1,
    kill_one: bool = False,
) -> JSON:
    """The burst against ``replicas`` operators (above 1: as many shards, one each).

    ``kill_one``: SIGKILL the last replica once the MSJobs are created, mid-burst, and
    time the failover (:func:`_fail_over`); the CPU and metrics are the survivors'."""
    create_namespace(cluster, OPERATOR_NS)
    logs = [log_dir / f"operator-{label}{'' if i == 0 else f'-{i}'}.log" for i in range(replicas)]
    ops = [
        start_operator(
            cluster.kubeconfig,
            logs[i],
            ("--namespace", OPERATOR_NS, *operator_args, *sharded_args(replicas)),
            profile_to=log_dir / profile_file(label, profile) if profile and i == 0 else None,
            profiler=profile or "cprofile",
        )
        for i in range(replicas)
    ]
    if replicas > 1:
        await wait_until(
            "every shard held, one each",
            lambda: [len(_held_shards(o.metrics_url)) for o in ops] == [1] * replicas,
            120,
        )
    pids = []
    for o in ops:
        assert o.proc is not None
        pids.append(o.proc.pid)
    op = ops[0]
    client = await bench_client(cluster.kubeconfig, concurrency)
    pods, services, conds = FirstSeen(), FirstSeen(), ConditionTimes()
    names = [f"job-{i:05d}" for i in range(jobs)]
    created: dict[str, float] = {}
    uids: dict[str, str] = {}
    alive = ops[:-1] if kill_one else ops
    failover: asyncio.Task[JSON] | None = None
    try:
        async with asyncio.TaskGroup() as tg:
            watchers = [
                tg.create_task(watch_forever(client, PODS, OPERATOR_NS, pods)),
                tg.create_task(watch_forever(client, SERVICES, OPERATOR_NS, services)),
                tg.create_task(watch_forever(client, MSJOBS, OPERATOR_NS, conds)),
            ]
            await asyncio.sleep(1)  # the watches are open
            idles = [sample(p) for p in pids]
            idle = idles[0]

            async def create(name: str) -> None:
                made = await create_surely(
                    client, MSJOBS, workload.msjob(name, OPERATOR_NS), OPERATOR_NS
                )
                created[name] = time.monotonic()
                uids[name] = made["metadata"]["uid"]

            terminated0 = await asyncio.to_thread(_terminated_watchers, cluster)
            t0 = time.monotonic()
            await bounded(concurrency, names, create)
            t_created = time.monotonic()
            failover = tg.create_task(_fail_over(ops)) if kill_one else None
            t_exist = await wait_until(
                "every job's pods and Service",
                lambda: len(pods.times) >= jobs * PODS_PER_JOB and len(services.times) >= jobs,
                wait_s,
            )
            missed: list[str] = []
            t_running = await _wait_or_miss(
                "every job Running", lambda: len(conds.first["Running"]) >= jobs, wait_s, missed
            )
            stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            body = succeeded_status({"spec": workload.template_spec()}, stamp)

            async def complete(name: str) -> None:
                await patch_surely(client, PODS, name, body, OPERATOR_NS, subresource="status")

            t_complete = time.monotonic()
            await bounded(concurrency, sorted(pods.times), complete)
            t_patched = time.monotonic()
            t_succeeded = await _wait_or_miss(
                "every job Succeeded", lambda: len(conds.first["Succeeded"]) >= jobs, wait_s, missed
            )
            await asyncio.sleep(3)  # let trailing reconciles (and their writes) finish
            ends = [sample(p) for p in pids[: len(alive)]]
            end = ends[0]
            cpu1 = sum(x.cpu_seconds for x in ends)
            rss = end.rss_bytes
            each = [await asyncio.to_thread(_operator_metrics, o.metrics_url) for o in alive]
            metrics = {k: _sum_by_key([m[k] for m in each]) for k in each[0]}
            terminated1 = await asyncio.to_thread(_terminated_watchers, cluster)
            for w in watchers:
                w.cancel()
    finally:
        await client.close()
        for other, path in zip(ops[1:], logs[1:], strict=True):
            _stop_and_time(other, path)
        shutdown = _stop_and_time(op, logs[0])
    latencies = _latencies(pods, services, created)
    cpu = cpu1 - sum(x.cpu_seconds for x in idles[: len(alive)])
    per_replica = [
        {
            "cpu_s": e.cpu_seconds - i.cpu_seconds,
            "rss_mib_peak": e.peak_rss_bytes / 2**20,
            "rss_mib_idle": i.rss_bytes / 2**20,
            "pod_objects_received": m["watch_events"].get("pods", 0.0)
            + m["listed_objects"].get("pods", 0.0),
            "objects_received": sum(m["watch_events"].values()) + sum(m["listed_objects"].values()),
            "reconciles": sum(m["reconciles"].values()),
        }
        for i, e, m in zip(idles[: len(alive)], ends, each, strict=True)
    ]
    return {
        "replicas": replicas,
        "per_replica": per_replica,
        "jobs": jobs,
        "pods": jobs * PODS_PER_JOB,
        "services": jobs,
        "concurrency": concurrency,
        "operator_args": operator_args,
        "creates_sent_s": t_created - t0,
        "all_objects_exist_s": t_exist - t0,
        "all_running_s": None if t_running is None else t_running - t0,
        "completion_patches_s": t_patched - t_complete,
        "all_succeeded_after_completion_s": (
            None if t_succeeded is None else t_succeeded - t_complete
        ),
        "jobs_running": len(conds.first["Running"]),
        "jobs_succeeded": len(conds.first["Succeeded"]),
        "waits_timed_out": missed,
        "job_latency_s": summarize(latencies),
        "job_latencies": sorted(latencies),
        "operator_cpu_s": cpu,
        "operator_cpu_ms_per_lifecycle": 1000 * cpu / jobs,
        "operator_cpu_s_per_1000_lifecycles": 1000 * cpu / jobs,
        "operator_rss_mib_after": rss / 2**20,
        "operator_rss_mib_idle": idle.rss_bytes / 2**20,
        "operator_rss_mib_peak": max(e.peak_rss_bytes for e in ends) / 2**20,
        "events_written": metrics["events_written"],
        "events_dropped_by_reason": metrics["events_dropped"],
        "events_dropped": sum(metrics["events_dropped"].values()),
        "reconciles": metrics["reconciles"],
        "reconciles_per_job": sum(metrics["reconciles"].values()) / jobs,
        "progress_polls": metrics["progress_polls"],
        "progress_polls_per_job": sum(metrics["progress_polls"].values()) / jobs,
        "watch_restarts_by_reason": metrics["watch_restarts"],
        "apiserver_terminated_watchers": {
            r: n - terminated0.get(r, 0.0) for r, n in terminated1.items()
        },
        "shutdown": shutdown,
        "failover": (
            None if failover is None else _failover_report(failover.result(), pods, uids, replicas)
        ),
    }


#: The replicas' Lease duration: msop's default (``--leader-election-lease-duration``).
LEASE_DURATION_S = 15.0


async def _fail_over(ops: list[Any], wait_s: float = 300.0) -> JSON:
    """SIGKILL the last of ``ops``; return its shards, the kill's moment and when the
    others held every shard (scraped every 0.5 s)."""
    victim, survivors = ops[-1], ops[:-1]
    shards = _held_shards(victim.metrics_url)
    victim.kill()
    t_kill = time.monotonic()
    every = set(range(len(ops)))
    while set().union(*(_held_shards(o.metrics_url) for o in survivors)) != every:
        if time.monotonic() - t_kill > wait_s:
            raise TimeoutError(f"the survivors hold no shard of the killed replica after {wait_s}s")
        await asyncio.sleep(0.5)
    return {"killed_shards": sorted(shards), "t_kill": t_kill, "t_taken": time.monotonic()}


def _failover_report(kill: JSON, pods: FirstSeen, uids: dict[str, str], shards: int) -> JSON:
    """From the kill: when the dead replica's shards were taken, and when the last pod of
    their jobs and of the others' jobs first existed."""
    last = pods.per_job_last_seen()
    dead = [j for j, uid in uids.items() if shard_of(uid, shards) in kill["killed_shards"]]
    others = [j for j in uids if j not in set(dead)]
    t_kill = kill["t_kill"]
    return {
        "killed_shards": kill["killed_shards"],
        "lease_duration_s": LEASE_DURATION_S,
        "shards_taken_after_kill_s": kill["t_taken"] - t_kill,
        "dead_shards_jobs": len(dead),
        "dead_shards_all_pods_after_kill_s": max(last[j][1] for j in dead) - t_kill,
        "other_shards_all_pods_after_kill_s": max(last[j][1] for j in others) - t_kill,
    }


async def run_raw(cluster: LocalCluster, jobs: int, concurrency: int, wait_s: float) -> JSON:
    """Create the same Services and pods directly: per job, the Service first (its
    ClusterIP goes into the pods' environment), then its pods; at most ``concurrency``
    requests in flight in total."""
    if not namespace_exists(cluster, RAW_NS):
        create_namespace(cluster, RAW_NS)
    client = await bench_client(cluster.kubeconfig, concurrency)
    pods, services = FirstSeen(), FirstSeen()
    sem = asyncio.Semaphore(concurrency)
    started: dict[str, float] = {}
    names = [f"job-{i:05d}" for i in range(jobs)]

    async def one_job(name: str) -> None:
        job = workload.msjob(name, RAW_NS)
        async with sem:
            started[name] = time.monotonic()
            svc = await create_surely(
                client, SERVICES, workload.orphaned(workload.service_for(job), RAW_NS), RAW_NS
            )
        ip = svc["spec"]["clusterIP"]

        async def create_pod(pod: JSON) -> None:
            async with sem:
                await create_surely(client, PODS, workload.orphaned(pod, RAW_NS), RAW_NS)

        async with asyncio.TaskGroup() as tg:
            for pod in workload.pods_for(job, ip):
                tg.create_task(create_pod(pod))

    try:
        async with asyncio.TaskGroup() as tg:
            watchers = [
                tg.create_task(watch_forever(client, PODS, RAW_NS, pods)),
                tg.create_task(watch_forever(client, SERVICES, RAW_NS, services)),
            ]
            await asyncio.sleep(1)
            t0 = time.monotonic()
            async with asyncio.TaskGroup() as jobs_tg:
                for name in names:
                    jobs_tg.create_task(one_job(name))
            t_created = time.monotonic()
            t_exist = await wait_until(
                "every raw pod and Service",
                lambda: len(pods.times) >= jobs * PODS_PER_JOB and len(services.times) >= jobs,
                wait_s,
            )
            for w in watchers:
                w.cancel()
    finally:
        await client.close()
    latencies = _latencies(pods, services, started)
    return {
        "creates_returned_s": t_created - t0,
        "all_objects_exist_s": t_exist - t0,
        "job_latency_s": summarize(latencies),
        "job_latencies": sorted(latencies),
    }


def raw_server_latency(audit_log: Path) -> list[dict[str, object]]:
    """The baseline's creates as the API server timed them (the bench's user agent)."""
    rows = count_file(audit_log, BENCH_USER_AGENT).as_rows()
    return [r for r in rows if r["verb"] == "create"]


def api_efficiency(audit_log: Path, jobs: int, keep: Path | None = None) -> JSON:
    """The operator's requests over the burst run, from the audit log (its lines are
    copied to ``keep``)."""
    counts = count_file(audit_log, OPERATOR_USER_AGENT_PREFIX, keep)
    creates = counts.total(frozenset({"create"}), "pods") + counts.total(
        frozenset({"create"}), "services"
    )
    status_writes = counts.total(WRITE_VERBS, "msjobs.mindspore.gitee.com/status")
    events = counts.total(WRITE_VERBS, "events") + counts.total(WRITE_VERBS, "events.events.k8s.io")
    writes = counts.total(WRITE_VERBS)
    # The floor: each object created once, and two status writes (Created and Running are
    # one write when a job's pods run before its status is first written; Succeeded).
    minimum = jobs * (PODS_PER_JOB + 1 + 2)
    # Fewer creates than objects made: the API server rotated its audit log during the
    # run (24,000 pods at N=2,000), so per-job figures would only be too low.
    complete = creates >= jobs * (PODS_PER_JOB + 1)

    def per_job(n: int) -> float | None:
        return n / jobs if complete else None

    return {
        "audit_complete": complete,
        "requests": counts.as_rows(),
        "writes_total": writes,
        "writes_excluding_events": writes - events,
        "event_writes": events,
        "object_creates": creates,
        "status_writes": status_writes,
        "minimum_writes": minimum,
        "writes_per_job": per_job(writes - events),
        "minimum_writes_per_job": minimum / jobs,
        "status_writes_per_job": per_job(status_writes),
        "event_writes_per_job": per_job(events),
        "reads_get_list": counts.total(READ_VERBS),
        "watches": counts.total(frozenset({"watch"})),
    }


def client_limit_floor_s(operator_args: list[str], creates: int) -> float | None:
    """The least time any client takes to send ``creates`` requests of one budget under
    the operator's ``--kube-api-qps``/``--kube-api-burst`` (a token bucket: ``burst`` at
    once, then ``qps`` a second; pods and Services share the ``default`` budget), or None
    when the flags set no client-side limit."""
    args = parse_args(["run", *operator_args])
    qps, burst = client_limit(args.kube_api_qps, args.kube_api_burst)
    if math.isinf(qps):
        return None
    return max(0, creates - burst) / qps


async def run(
    cluster: LocalCluster,
    jobs: int,
    concurrency: int,
    operator_args: list[str],
    log_dir: Path,
    wait_s: float,
    profile: str | None = None,
    label: str = "burst",
    raw_concurrency: int | None = None,
    replicas: int = 1,
    kill_one: bool = False,
) -> JSON:
    """One burst scenario on ``cluster``: the operator (``replicas`` of it, sharded), then
    the raw baseline at ``raw_concurrency`` requests in flight (default ``concurrency``).
    Both namespaces are made first: once tens of thousands of pods exist, the
    controller-manager may take minutes to fill a new namespace."""
    create_namespace(cluster, RAW_NS)
    operator = await run_operator_burst(
        cluster,
        jobs,
        concurrency,
        operator_args,
        log_dir,
        wait_s,
        profile,
        label,
        replicas,
        kill_one,
    )
    # Kept at once: a failure of the raw baseline, after the operator's long run, must
    # not lose the operator's figures.
    (log_dir / f"operator-{label}.json").write_text(json.dumps(operator, default=str))
    raw = await run_raw(cluster, jobs, raw_concurrency or concurrency, wait_s)
    raw["concurrency"] = raw_concurrency or concurrency
    suffix = "" if label == "burst" else f"-{label}"
    api = api_efficiency(cluster.audit_log, jobs, log_dir / f"audit-operator{suffix}.jsonl")
    raw["server_latency"] = raw_server_latency(cluster.audit_log)
    # Under a client-side limit no client can create the objects faster than its flags
    # allow: the time is judged against that floor too (it may be many times raw creates).
    floor = client_limit_floor_s(operator_args, jobs * (PODS_PER_JOB + 1))
    return {
        "operator": operator,
        "raw": raw,
        "ratio_operator_to_raw": ratio(operator["all_objects_exist_s"], raw["all_objects_exist_s"]),
        "client_limit_floor_s": floor,
        "ratio_operator_to_floor": (
            None if floor is None else ratio(operator["all_objects_exist_s"], floor)
        ),
        "ratio_floor_to_raw": None if floor is None else ratio(floor, raw["all_objects_exist_s"]),
        "api": api,
    }
