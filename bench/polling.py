"""Scenario ``progress``: what 1,000 reporting jobs cost the operator.

N MSJobs of the smallest shape (1 Worker, no Scheduler: one pod each) run on kwok; the
operator runs with its default flags (``--progress-interval`` aside, when given). The
bench process plays every Worker 0's progress reporter (:mod:`bench.reporters`): one
socket per pod on its loopback pod IP, a new report (new ``seq``) on every poll, which
is the worst case: every poll then costs a status write. The operator is a separate
process, and its CPU (utime + stime from ``/proc``) is what is measured; the bench's
own CPU is reported beside it.

Phases, each measured over a window that starts and ends with a snapshot (operator CPU
and RSS, its ``/metrics``):

0. ``startup``: from the first create until every job is Running, every reporter has
   answered once and the operator has written no Event for a while.
1. ``steady``: all reporters answer; the window opens where ``startup`` ends and lasts
   ``steady_intervals`` poll intervals.
2. ``refused_transition`` and ``refused``: the reporters of half the jobs close their
   sockets (connection refused). The poller retries them after 5, 10, 20 s..., then
   once per 4 intervals (``UNANSWERED_MAX_INTERVALS``); ``refused_transition`` covers
   that back-off, ``refused`` the steady state after it (8 intervals: two polls each).
3. ``silent``: the same half listen again but never answer (a hung reporter, or a
   black-holed node): each of their polls runs into the poller's timeout.

From the bench's side every request each reporter received is timed, so the gaps
between two polls of one job are exact; the API server's audit log gives every status
write of the operator with its time and job. :func:`analyse_window` and the helpers
above it are pure.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import resource
import time
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import workload
from bench.audit import WRITE_VERBS, Request, requests_of
from bench.burst import OPERATOR_USER_AGENT_PREFIX, _stop_and_time, bench_client, bounded
from bench.environment import sample, start_operator
from bench.observe import ConditionTimes, wait_until, watch_forever
from bench.reporters import Reporters, raise_fd_limit
from bench.stats import summarize
from msop.api import constants as c
from msop.api.naming import object_name
from msop.api.resources import MSJOBS
from msop.kube import PODS
from msop.kube.flowcontrol import client_limit
from msop.msjob.poller import UNANSWERED_MAX_INTERVALS, retry_after
from testbed import LocalCluster
from testbed.cluster import create_namespace
from testbed.exposition import read_samples

JSON = dict[str, Any]
NAMESPACE = "bench-progress"
STATUS_RESOURCE = f"msjobs.{c.GROUP}/status"
LEASE_RESOURCE = "leases.coordination.k8s.io"
#: The poller's defaults (msop.msjob.poller): jitter of the interval, and
#: the timeout of one poll.
JITTER = 0.1
POLL_TIMEOUT_S = 2.0
#: Seconds between two readings of the operator's ``/metrics`` (workqueue depth) and RSS
#: during a window, as a Prometheus scrape would (its cost is in the CPU figures).
SAMPLE_EVERY_S = 10.0

Metrics = dict[str, list[tuple[dict[str, str], float]]]


def parse_metrics(text: str) -> Metrics:
    """Prometheus text exposition -> {sample name: [(labels, value)]}. Raises ValueError on
    a line the text format's parser cannot read."""
    out: Metrics = defaultdict(list)
    for s in read_samples(text):
        out[s.name].append((s.labels, s.value))
    return dict(out)


def metric_total(metrics: Metrics, name: str, **match: str) -> float:
    """The sum of ``name``'s samples whose labels include ``match``."""
    return sum(
        v
        for labels, v in metrics.get(name, [])
        if all(labels.get(k) == x for k, x in match.items())
    )


def metric_by_label(metrics: Metrics, name: str, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, v in metrics.get(name, []):
        key = labels.get(label, "")
        out[key] = out.get(key, 0.0) + v
    return out


def gaps_between(times: Iterable[float], t0: float, t1: float) -> list[float]:
    """Gaps between consecutive times inside ``[t0, t1]``."""
    inside = sorted(t for t in times if t0 <= t <= t1)
    return [b - a for a, b in itertools.pairwise(inside)]


def poll_stats(
    times_by_pod: dict[str, list[float]], pods: Iterable[str], t0: float, t1: float, interval: float
) -> JSON:
    """How often ``pods`` were asked within ``[t0, t1]``: requests, the gaps between two
    polls of one pod, polls per job-interval from the mean gap (exact whatever the phase
    of each job's polls relative to the window) and at the shortest gap."""
    gaps: list[float] = []
    requests = 0
    pods = list(pods)
    for pod in pods:
        times = times_by_pod.get(pod, [])
        requests += sum(1 for t in times if t0 <= t <= t1)
        gaps += gaps_between(times, t0, t1)
    out: JSON = {"pods": len(pods), "requests": requests, "gap_s": summarize(gaps)}
    if gaps:
        out["per_job_interval"] = interval * len(gaps) / sum(gaps)
        out["per_job_interval_at_shortest_gap"] = interval / min(gaps)
        out["longest_gap_s"] = max(gaps)
    return out


def write_stats(
    writes: list[Request],
    t0: float,
    t1: float,
    interval: float,
    answers_by_pod: dict[str, list[float]],
) -> JSON:
    """The status writes of MSJobs within ``[t0, t1]`` against the reports the jobs'
    reporters sent (``answers_by_pod``: when each report went out):

    - ``count``, ``per_second``, and ``per_job_interval`` from each job's gaps (as for
      polls, exact whatever the phase of the job relative to the window);
    - ``per_report``: for each report sent within the window, the status writes of its
      job after it and before the job's next report (wherever they fall), on average;
    - ``unprompted``: writes within the window with no new report of the job since the
      job's previous status write (anything but a progress write would be one);
    - ``poll_to_write_s``: from the report to the write that followed it.
    """
    status = sorted(
        (w for w in writes if w.resource == STATUS_RESOURCE and w.verb in WRITE_VERBS),
        key=lambda w: w.time,
    )
    all_by_job: defaultdict[str, list[float]] = defaultdict(list)
    for w in status:
        all_by_job[w.name].append(w.time)
    inside = [w for w in status if t0 <= w.time <= t1]
    gaps: list[float] = []
    delays: list[float] = []
    unprompted = 0
    reports = matched = 0
    jobs_written = 0
    most = 0
    for job, times in all_by_job.items():
        answers = sorted(answers_by_pod.get(object_name(job, c.WORKER, 0), []))
        in_window = [t for t in times if t0 <= t <= t1]
        if in_window:
            jobs_written += 1
            most = max(most, len(in_window))
        gaps += gaps_between(times, t0, t1)
        for i, t in enumerate(times):
            if not t0 <= t <= t1:
                continue
            k = bisect.bisect_right(answers, t)
            if k:
                delays.append(t - answers[k - 1])
            previous = times[i - 1] if i else float("-inf")
            if not k or answers[k - 1] <= previous:
                unprompted += 1
        for k, a in enumerate(answers):
            if not t0 <= a <= t1:
                continue
            reports += 1
            following = answers[k + 1] if k + 1 < len(answers) else float("inf")
            lo, hi = bisect.bisect_right(times, a), bisect.bisect_left(times, following)
            matched += hi - lo
    seconds = max(t1 - t0, 1e-9)
    out: JSON = {
        "count": len(inside),
        "failed": sum(1 for w in inside if w.code >= 400),
        "jobs_written": jobs_written,
        "per_second": len(inside) / seconds,
        "most_for_one_job": most,
        "reports_sent": reports,
        "per_report": matched / reports if reports else None,
        "unprompted": unprompted,
        "gap_s": summarize(gaps),
        "poll_to_write_s": summarize(delays),
    }
    if gaps:
        out["per_job_interval"] = interval * len(gaps) / sum(gaps)
        out["per_job_interval_at_shortest_gap"] = interval / min(gaps)
    return out


def other_writes(writes: list[Request], t0: float, t1: float) -> tuple[dict[str, int], int]:
    """Writes within ``[t0, t1]`` other than MSJob status writes and Lease renewals, by
    ``verb resource``; and the number of Lease writes."""
    others: Counter[str] = Counter()
    leases = 0
    for w in writes:
        if not t0 <= w.time <= t1 or w.verb not in WRITE_VERBS:
            continue
        if w.resource == LEASE_RESOURCE:
            leases += 1
        elif w.resource != STATUS_RESOURCE:
            others[f"{w.verb} {w.resource}"] += 1
    return dict(others), leases


@dataclass(frozen=True)
class Snapshot:
    """The operator (and the bench) at one moment."""

    wall: float
    cpu_s: float
    rss_bytes: int
    peak_rss_bytes: int
    bench_cpu_s: float
    metrics: Metrics


def _delta(end: Metrics, start: Metrics, name: str, **match: str) -> float:
    return metric_total(end, name, **match) - metric_total(start, name, **match)


def analyse_window(
    start: Snapshot,
    end: Snapshot,
    *,
    jobs: int,
    interval: float,
    groups: dict[str, list[str]],
    polls_by_pod: dict[str, list[float]],
    answers_by_pod: dict[str, list[float]],
    writes: list[Request],
    samples: list[tuple[float, float, int]],
) -> JSON:
    """Everything measured between two snapshots. ``groups``: name -> the Worker 0 pods
    that behaved so during the window (``answering``, ``refused``, ``silent``);
    ``polls_by_pod``/``answers_by_pod``: when each reporter was asked / sent a report;
    ``samples``: (time, workqueue depth, RSS bytes) readings taken during the run.

    A refused connection never reaches the bench, so the polls of the jobs that do not
    answer (``down_polls_per_job_interval``) come from the operator's ``unreachable``
    count: exact in total, but counted over a window whose edges may cut a job's polls
    either side."""
    t0, t1 = start.wall, end.wall
    seconds = t1 - t0
    job_intervals = jobs * seconds / interval
    cpu = end.cpu_s - start.cpu_s
    polls = {
        r: v - metric_by_label(start.metrics, "msop_progress_polls_total", "result").get(r, 0.0)
        for r, v in metric_by_label(end.metrics, "msop_progress_polls_total", "result").items()
    }
    polls_total = sum(polls.values())
    status = write_stats(writes, t0, t1, interval, answers_by_pod)
    down = sum(len(pods) for name, pods in groups.items() if name != "answering")
    others, leases = other_writes(writes, t0, t1)
    qd_n = _delta(end.metrics, start.metrics, "workqueue_queue_duration_seconds_count")
    qd_s = _delta(end.metrics, start.metrics, "workqueue_queue_duration_seconds_sum")
    wd_n = _delta(end.metrics, start.metrics, "workqueue_work_duration_seconds_count")
    wd_s = _delta(end.metrics, start.metrics, "workqueue_work_duration_seconds_sum")
    inside = [s for s in samples if t0 <= s[0] <= t1]
    reports = polls.get("report", 0.0)
    reconciles = _delta(end.metrics, start.metrics, "controller_runtime_reconcile_total")
    return {
        "start": t0,
        "end": t1,
        "seconds": seconds,
        "job_intervals": job_intervals,
        "operator_cpu_s": cpu,
        "operator_cpu_per_s": cpu / seconds,
        "operator_cpu_ms_per_job_interval": 1000 * cpu / job_intervals,
        "operator_cpu_ms_per_poll": 1000 * cpu / polls_total if polls_total else None,
        "bench_cpu_per_s": (end.bench_cpu_s - start.bench_cpu_s) / seconds,
        "rss_mib_start": start.rss_bytes / 2**20,
        "rss_mib_end": end.rss_bytes / 2**20,
        "rss_mib_max": max([end.rss_bytes, start.rss_bytes, *(s[2] for s in inside)]) / 2**20,
        "rss_growth_mib": (end.rss_bytes - start.rss_bytes) / 2**20,
        "peak_rss_mib": end.peak_rss_bytes / 2**20,
        "polls_by_result": polls,
        "polls": polls_total,
        "polls_per_job_interval": polls_total / job_intervals,
        "down_polls_per_job_interval": (
            polls.get("unreachable", 0.0) / (down * seconds / interval) if down else None
        ),
        "by_group": {
            name: poll_stats(polls_by_pod, pods, t0, t1, interval) for name, pods in groups.items()
        },
        "status_writes": status,
        "status_writes_per_report": status["per_report"],
        "other_writes": others,
        "other_writes_total": sum(others.values()),
        "lease_writes": leases,
        "reconciles": reconciles,
        "reconciles_per_report": reconciles / reports if reports else None,
        "workqueue": {
            "adds": _delta(end.metrics, start.metrics, "workqueue_adds_total"),
            "queue_wait_mean_s": qd_s / qd_n if qd_n else None,
            "work_mean_s": wd_s / wd_n if wd_n else None,
            "depth_max": max((s[1] for s in inside), default=None),
        },
        "progress_series_end": len(end.metrics.get("msop_job_progress_ratio", [])),
    }


def settle_seconds(interval: float) -> float:
    """From the moment reporters stop answering until the poller asks them at its
    steadiest (``UNANSWERED_MAX_INTERVALS`` apart): their next poll (within an interval
    plus jitter), then the retries after 5, 10, 20 s... as long as those are shorter; a
    few seconds more."""
    longest = UNANSWERED_MAX_INTERVALS * interval
    backoff, failures = 0.0, 1
    while (wait := retry_after(failures, longest)) < longest:
        backoff += (1 + JITTER) * wait
        failures += 1
    return (1 + JITTER) * interval + backoff + POLL_TIMEOUT_S + 3


def judge_fields(
    steady: JSON, refused: JSON | None, silent: JSON | None, jobs: int, interval: float
) -> JSON:
    """The figures that bench.report's targets judge (see TARGETS there)."""
    out: JSON = {
        "polls_per_job_interval": steady["by_group"]["answering"].get("per_job_interval"),
        "polls_per_job_interval_at_shortest_gap": steady["by_group"]["answering"].get(
            "per_job_interval_at_shortest_gap"
        ),
        "status_writes_per_job_interval": steady["status_writes"].get("per_job_interval"),
        "status_writes_per_report": steady["status_writes_per_report"],
        "unprompted_status_writes": steady["status_writes"]["unprompted"],
        "other_writes": steady["other_writes_total"],
        "cpu_ms_per_job_interval": steady["operator_cpu_ms_per_job_interval"],
        "rss_growth_mib": steady["rss_growth_mib"],
        "progress_series_per_job": steady["progress_series_end"] / jobs,
    }
    # The longest gap between two polls of an answering job may be the longest wait
    # (interval + jitter) plus a poll's timeout and the poller's 1 s tick: more means it
    # fell behind.
    pace = (1 + JITTER) * interval + POLL_TIMEOUT_S + 1
    for label, window in (("refused", refused), ("silent", silent)):
        if window is None:
            continue
        base = steady["operator_cpu_per_s"]
        out[f"cpu_{label}_over_steady"] = window["operator_cpu_per_s"] / base if base else None
        out[f"{label}_polls_per_job_interval"] = window["down_polls_per_job_interval"]
        up = window["by_group"].get("answering", {})
        gap = up.get("longest_gap_s")
        out[f"{label}_answering_longest_gap_over_pace"] = gap / pace if gap else None
    return out


# --- the run -------------------------------------------------------------------------------


def _bench_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return str(resp.read().decode())


# The page is parsed in a thread: prometheus_client's parser takes about 20 us a series
# (80 ms for 4,000 jobs' series), and the simulated reporters answer polls on the loop.
def _read_metrics(url: str) -> Metrics:
    return parse_metrics(_scrape(url))


async def _snapshot(pid: int, metrics_url: str) -> Snapshot:
    text = await asyncio.to_thread(_scrape, metrics_url)
    s = sample(pid)
    wall, bench_cpu = time.time(), _bench_cpu()
    metrics = await asyncio.to_thread(parse_metrics, text)
    return Snapshot(wall, s.cpu_seconds, s.rss_bytes, s.peak_rss_bytes, bench_cpu, metrics)


async def _sampler(pid: int, metrics_url: str, out: list[tuple[float, float, int]]) -> None:
    while True:
        await asyncio.sleep(SAMPLE_EVERY_S)
        try:
            metrics = await asyncio.to_thread(_read_metrics, metrics_url)
        except OSError:
            continue
        depth = metric_total(metrics, "workqueue_depth")
        out.append((time.time(), depth, sample(pid).rss_bytes))


async def _wait_quiet(metrics_url: str, wait_s: float, every: float = 2.5) -> None:
    """Wait until the start of the jobs is behind the operator (every job is Running
    already): no Event written since the previous reading. (Not an empty workqueue: when
    jobs report faster than the status budget writes, it never empties.)"""
    deadline = time.monotonic() + wait_s
    previous = -1.0
    while True:
        metrics = await asyncio.to_thread(_read_metrics, metrics_url)
        events = metric_total(metrics, "msop_events_written_total")
        if events == previous:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the operator did not settle within {wait_s:.0f}s")
        previous = events
        await asyncio.sleep(every)


#: The operator's default ``--kube-api-qps`` (no client-side limit). With a limit it takes
#: progress reports at half of it at most.
OPERATOR_QPS = -1.0


def effective_interval(interval: float, jobs: int, qps: float = OPERATOR_QPS) -> float:
    """The poll interval the operator keeps with ``jobs`` reporting jobs: the flag's, or
    longer when reports at that pace would outrun half of a client-side status budget."""
    return max(interval, jobs / (client_limit(qps, 0)[0] / 2))


async def run(
    cluster: LocalCluster,
    jobs: int,
    interval: float,
    log_dir: Path,
    wait_s: float,
    concurrency: int = 50,
    steady_intervals: int = 4,
    down_intervals: int = int(UNANSWERED_MAX_INTERVALS) * 2,
    unreachable: bool = True,
) -> JSON:
    fd_limit = raise_fd_limit(2 * jobs + 1024)
    create_namespace(cluster, NAMESPACE)
    operator_args = ["--namespace", NAMESPACE]
    if interval != 30:
        operator_args += ["--progress-interval", f"{interval:g}"]
    log_path = log_dir / "operator-progress.log"
    op = start_operator(cluster.kubeconfig, log_path, tuple(operator_args))
    assert op.proc is not None
    pid = op.proc.pid
    client = await bench_client(cluster.kubeconfig, concurrency)
    reporters = Reporters(interval)
    # Windows, job-intervals and paces are measured against the interval the operator
    # keeps, which stretches past the flag's when progress would outrun its budget.
    flag_interval, interval = interval, effective_interval(interval, jobs)
    conds = ConditionTimes()
    names = [f"job-{i:05d}" for i in range(jobs)]
    pods = sorted(object_name(n, c.WORKER, 0) for n in names)
    samples: list[tuple[float, float, int]] = []
    snaps: dict[str, Snapshot] = {}
    marks: JSON = {}
    try:
        async with asyncio.TaskGroup() as tg:
            watchers = [
                tg.create_task(watch_forever(client, PODS, NAMESPACE, reporters)),
                tg.create_task(watch_forever(client, MSJOBS, NAMESPACE, conds)),
            ]
            await asyncio.sleep(1)
            idle = sample(pid)
            snaps["startup_start"] = await _snapshot(pid, op.metrics_url)
            sampler = tg.create_task(_sampler(pid, op.metrics_url, samples))
            t0 = time.monotonic()

            async def create(name: str) -> None:
                job = workload.msjob(name, NAMESPACE, ps=0, workers=1, scheduler=False)
                await client.create(MSJOBS, job)

            await bounded(concurrency, names, create)
            marks["creates_sent_s"] = time.monotonic() - t0
            await wait_until(
                "every Worker 0 running, its reporter listening",
                lambda: (
                    reporters.listening() + len(reporters.errors) + len(reporters.skipped) >= jobs
                ),
                wait_s,
            )
            marks["all_listening_s"] = time.monotonic() - t0
            running = sample(pid)
            if reporters.errors or reporters.skipped:
                raise RuntimeError(
                    f"reporters not listening: {sorted(reporters.skipped)[:5]} "
                    f"{reporters.errors[:5]}"
                )
            await wait_until(
                "a first report from every reporter", lambda: reporters.answered() >= jobs, wait_s
            )
            marks["all_reported_once_s"] = time.monotonic() - t0
            marks["jobs_running_at_first_reports"] = len(conds.first["Running"])
            await wait_until(
                "every MSJob Running", lambda: len(conds.first["Running"]) >= jobs, wait_s
            )
            marks["all_jobs_running_s"] = time.monotonic() - t0
            await _wait_quiet(op.metrics_url, wait_s)
            marks["startup_settled_s"] = time.monotonic() - t0
            snaps["startup_end"] = snaps["steady_start"] = await _snapshot(pid, op.metrics_url)
            await asyncio.sleep(steady_intervals * interval)
            snaps["steady_end"] = await _snapshot(pid, op.metrics_url)
            print(f"progress: steady window done ({time.monotonic() - t0:.0f}s)", flush=True)
            if unreachable:
                down = pods[::2]
                await reporters.set_mode(down, "refuse")
                snaps["refused_transition_start"] = await _snapshot(pid, op.metrics_url)
                await asyncio.sleep(settle_seconds(interval))
                snaps["refused_start"] = await _snapshot(pid, op.metrics_url)
                await asyncio.sleep(down_intervals * interval)
                snaps["refused_end"] = await _snapshot(pid, op.metrics_url)
                await reporters.set_mode(down, "silent")
                snaps["silent_start"] = await _snapshot(pid, op.metrics_url)
                await asyncio.sleep(down_intervals * interval)
                snaps["silent_end"] = await _snapshot(pid, op.metrics_url)
                print(f"progress: unreachable phases done ({time.monotonic() - t0:.0f}s)",
                      flush=True)  # fmt: skip
            sampler.cancel()
            for w in watchers:
                w.cancel()
    finally:
        await client.close()
        shutdown = _stop_and_time(op, log_path)
        await reporters.close()

    with cluster.audit_log.open(encoding="utf-8", errors="replace") as f:
        lines = [line for line in f if OPERATOR_USER_AGENT_PREFIX in line]
    (log_dir / "audit-operator-progress.jsonl").write_text("".join(lines))
    writes = [r for r in requests_of(lines, OPERATOR_USER_AGENT_PREFIX) if r.verb in WRITE_VERBS]
    polls_by_pod = {name: rep.requests for name, rep in reporters.by_pod.items()}
    answers_by_pod = {name: rep.answers for name, rep in reporters.by_pod.items()}
    (log_dir / "progress-polls.json").write_text(
        json.dumps({"requests": polls_by_pod, "answers": answers_by_pod})
    )

    def window(start: str, end: str, groups: dict[str, list[str]]) -> JSON:
        return analyse_window(snaps[start], snaps[end], jobs=jobs, interval=interval,
                              groups=groups, polls_by_pod=polls_by_pod,
                              answers_by_pod=answers_by_pod, writes=writes,
                              samples=samples)  # fmt: skip

    windows: JSON = {
        "startup": window("startup_start", "startup_end", {"answering": pods}),
        "steady": window("steady_start", "steady_end", {"answering": pods}),
    }
    if unreachable:
        up, down = pods[1::2], pods[::2]
        windows["refused_transition"] = window(
            "refused_transition_start", "refused_start",
            {"answering": up, "refused": down},
        )  # fmt: skip
        windows["refused"] = window("refused_start", "refused_end",
                                    {"answering": up, "refused": down})  # fmt: skip
        windows["silent"] = window("silent_start", "silent_end",
                                   {"answering": up, "silent": down})  # fmt: skip
    return {
        "jobs": jobs,
        "pods": jobs,
        "interval_s": interval,
        "flag_interval_s": flag_interval,
        "operator_args": operator_args,
        "fd_limit": fd_limit,
        "steady_intervals": steady_intervals,
        "down_intervals": down_intervals if unreachable else 0,
        **marks,
        "operator_rss_mib_idle": idle.rss_bytes / 2**20,
        "operator_rss_mib_all_running": running.rss_bytes / 2**20,
        "operator_cpu_s_to_all_running": running.cpu_seconds - idle.cpu_seconds,
        "windows": windows,
        "judged": judge_fields(
            windows["steady"], windows.get("refused"), windows.get("silent"), jobs, interval
        ),
        "shutdown": shutdown,
    }
