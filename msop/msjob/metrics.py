"""MSJob lifecycle metrics, counted once per transition (not once per reconcile pass).

A transition is counted after the status write that records it succeeded; the write is
guarded (a JSON patch that tests the status it replaces), so two passes, or two processes,
can never both record the same transition.

What a counter means across restarts: **the transitions this process wrote.**
``msop_jobs_created_total`` counts the jobs whose ``Created`` condition this process
wrote, ``..._failed_total`` the ``Failed`` conditions it wrote, and so on. After a crash
or a leader change the new process does not count again what an earlier one recorded
(a job whose ``Created`` condition is already there is not "created" again), so the
counters of all processes together count every transition once; each process starts at
0, which Prometheus' ``increase()`` and ``rate()`` treat as a counter reset.
``..._deleted_total`` counts the deletions this process's informer saw.

Every counter of a namespace exists (at 0) from the moment the namespace is watched
(``--namespace``) or its first MSJob is seen, so ``rate()`` and alerts have a series
before the first transition.

Labels name a job's namespace ``job_namespace`` and its name ``job_name``, as
training-operator names ``job_namespace``: Prometheus attaches ``job``, ``instance`` and,
with Kubernetes service discovery or a ServiceMonitor, the target's ``namespace`` (msop's
own) to every scraped series and keeps an exposed label of the same name only as
``exported_<label>``, so a series labelled ``namespace`` would name msop's namespace in
every alert, and two jobs of one name in two namespaces would merge.

Each counter exists under msop's name (label ``job_namespace``) and under the
training-operator name (labels ``job_namespace`` and ``framework="mindspore"``), so
existing Kubeflow dashboards keep working. ``msop_jobs`` is a gauge of the jobs in the
cache by their current state (the type of their last condition), computed at scrape time.

Training progress: ``msop_progress_polls_total{result}`` counts the progress poller's
polls, and ``msop_job_progress_ratio{job_namespace,job_name}`` is the fraction done that
each running job last reported (only when it reports its totals), and
``msop_job_progress_last_report_timestamp_seconds`` when it last reported a new snapshot
(whatever it reports), computed at scrape time from the pollers registered in
:data:`PROGRESS` (so a series lives only as long as its job's Worker 0 runs).

For alerts about jobs, :data:`JOBS` serves per unfinished job ``msop_job_restarts_total``
and, while it is Queued, ``msop_job_queued_since_timestamp_seconds``, from an index of the
MSJob cache (a scrape decodes no job; the series end with the job).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from msop.api import constants as c
from msop.api.conditions import get_condition, is_finished, latest_condition_type
from msop.controller.reconcile import Request
from msop.kube.objects import parse_time
from msop.metrics import (
    REGISTRY,
    Collector,
    Counter,
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)

FRAMEWORK = "mindspore"
#: The label names of a job's namespace and name on every series about MSJobs.
JOB_NAMESPACE = "job_namespace"
JOB_NAME = "job_name"

# transition -> (msop counter name, training-operator counter name)
_NAMES = {
    "created": ("msop_jobs_created_total", "training_operator_jobs_created_total"),
    "succeeded": ("msop_jobs_succeeded_total", "training_operator_jobs_successful_total"),
    "failed": ("msop_jobs_failed_total", "training_operator_jobs_failed_total"),
    "restarted": ("msop_jobs_restarted_total", "training_operator_jobs_restarted_total"),
    "deleted": ("msop_jobs_deleted_total", "training_operator_jobs_deleted_total"),
}

_OURS = {
    what: Counter(
        ours.removesuffix("_total"),
        f"MSJobs {what}, counted once per job transition.",
        [JOB_NAMESPACE],
        registry=REGISTRY,
    )
    for what, (ours, _) in _NAMES.items()
}
_KUBEFLOW = {
    what: Counter(
        theirs.removesuffix("_total"),
        f"MSJobs {what} (training-operator compatible name).",
        [JOB_NAMESPACE, "framework"],
        registry=REGISTRY,
    )
    for what, (_, theirs) in _NAMES.items()
}

#: Condition type (as in Plan.transitions) -> counter.
BY_CONDITION = {
    c.CREATED: "created",
    c.SUCCEEDED: "succeeded",
    c.FAILED: "failed",
    c.RESTARTING: "restarted",
}


_touched: set[str] = set()


def touch(namespace: str) -> None:
    """Make every job counter of ``namespace`` exist, at 0 until its first transition."""
    if namespace in _touched:
        return
    _touched.add(namespace)
    for what in _NAMES:
        _OURS[what].labels(namespace)
        _KUBEFLOW[what].labels(namespace, FRAMEWORK)


def count(what: str, namespace: str, n: int = 1) -> None:
    """Count ``n`` job transitions of kind ``what`` (created, succeeded, failed, ...)."""
    _OURS[what].labels(namespace).inc(n)
    _KUBEFLOW[what].labels(namespace, FRAMEWORK).inc(n)


def count_transitions(transitions: Iterable[str], namespace: str) -> None:
    for t in transitions:
        what = BY_CONDITION.get(t)
        if what:
            count(what, namespace)


BY_JOB_STATE = "msop-job-state"
"""Name of the MSJob cache index by ``namespace/state`` that ``msop_jobs`` counts."""


def job_state_index(job: Mapping[str, Any]) -> list[str]:
    """Index function: the job's ``namespace/state`` (``None`` before its first status)."""
    ns = str((job.get("metadata") or {}).get("namespace", ""))
    return [f"{ns}/{latest_condition_type(job.get('status') or {}) or 'None'}"]


class StateIndex(Protocol):
    def index_values(self, index_name: str) -> list[str]: ...
    def index_keys(self, index_name: str, value: str) -> list[str]: ...


def state_counts(store: StateIndex) -> Iterator[tuple[str, str, int]]:
    """``(namespace, state, jobs)`` from a cache indexed with :func:`job_state_index`:
    a scrape counts index entries and decodes no job."""
    for value in store.index_values(BY_JOB_STATE):
        ns, _, state = value.rpartition("/")
        yield ns, state, len(store.index_keys(BY_JOB_STATE, value))


class JobStateCollector(Collector):
    """``msop_jobs{job_namespace,state}``: jobs by the type of their latest condition
    (``None`` before the first status write), from the sources registered with ``add``:
    each yields ``(namespace, state, count)`` (:func:`state_counts`)."""

    def __init__(self) -> None:
        self._sources: list[Callable[[], Iterable[tuple[str, str, int]]]] = []

    def add(self, source: Callable[[], Iterable[tuple[str, str, int]]]) -> None:
        self._sources.append(source)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "msop_jobs", "MSJobs in the cache by current state.", labels=[JOB_NAMESPACE, "state"]
        )
        counts: dict[tuple[str, str], int] = {}
        for source in self._sources:
            for ns, state, n in source():
                counts[(ns, state)] = counts.get((ns, state), 0) + n
        for (ns, state), n in sorted(counts.items()):
            family.add_metric([ns, state], n)
        yield family


JOB_STATES = JobStateCollector()
REGISTRY.register(JOB_STATES)


BY_JOB_ALERTING = "msop-job-alerting"
"""Name of the MSJob cache index that the per-job series of :class:`JobCollector` are
read from: one value per unfinished job, ``namespace/name/restarts/queued-since``."""


def job_alerting_index(job: Mapping[str, Any]) -> list[str]:
    """Index function: ``namespace/name/<restarts>/<Queued since, or "">`` of an
    unfinished job (restarts: the operator's, summed over its replica types); none of a
    finished one, whose series end with it."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    if is_finished(status):
        return []
    restarts = sum(
        int(rs.get("restarts") or 0)
        for rs in (status.get("replicaStatuses") or {}).values()
        if isinstance(rs, dict)
    )
    queued = get_condition(status, c.QUEUED) or {}
    since = queued.get("lastTransitionTime") if queued.get("status") == c.CONDITION_TRUE else ""
    return [f"{meta.get('namespace', '')}/{meta.get('name', '')}/{restarts}/{since or ''}"]


def alerting_values(store: StateIndex) -> Iterator[tuple[str, str, int, str]]:
    """``(namespace, name, restarts, queued-since)`` from a cache indexed with
    :func:`job_alerting_index`: a scrape reads index values and decodes no job."""
    for value in store.index_values(BY_JOB_ALERTING):
        ns, name, restarts, since = value.split("/", 3)
        yield ns, name, int(restarts), since


class JobCollector(Collector):
    """Per unfinished MSJob, for alerts about jobs (a series ends with its job):
    ``msop_job_restarts_total{job_namespace,job_name}`` (the restarts the operator made, from
    ``status.replicaStatuses``) and, while the job waits in a queue (``Queued`` True),
    ``msop_job_queued_since_timestamp_seconds{job_namespace,job_name}``."""

    def __init__(self) -> None:
        self._sources: list[Callable[[], Iterable[tuple[str, str, int, str]]]] = []

    def add(self, source: Callable[[], Iterable[tuple[str, str, int, str]]]) -> None:
        self._sources.append(source)

    def collect(self) -> Iterator[Metric]:
        restarts = CounterMetricFamily(
            "msop_job_restarts",
            "Restarts the operator made of each unfinished MSJob (status.replicaStatuses "
            "restarts, summed); the series ends with the job.",
            labels=[JOB_NAMESPACE, JOB_NAME],
        )
        queued = GaugeMetricFamily(
            "msop_job_queued_since_timestamp_seconds",
            "Since when each waiting MSJob has been Queued (gang scheduling or Kueue), as a "
            "Unix time; only while it waits.",
            labels=[JOB_NAMESPACE, JOB_NAME],
        )
        for source in self._sources:
            for ns, name, n, since in source():
                restarts.add_metric([ns, name], n)
                at = parse_time(since) if since else None
                if at is not None:
                    queued.add_metric([ns, name], at.timestamp())
        yield restarts
        yield queued


JOBS = JobCollector()
REGISTRY.register(JOBS)


#: Results of a progress poll, the ``result`` label of ``msop_progress_polls_total``.
POLL_RESULTS = ("report", "unchanged", "empty", "unreachable", "rejected", "invalid")
POLLS = Counter(
    "msop_progress_polls",
    "Progress polls of Worker 0 pods, by result: report (a new report was stored), "
    "unchanged (same seq as before), empty (no report yet), unreachable (no answer, refused "
    "or timed out), rejected (the answer names another pod), invalid (not a version-1 "
    "report).",
    ["result"],
    registry=REGISTRY,
)
for _result in POLL_RESULTS:
    POLLS.labels(_result)


class Reports(Protocol):
    def reports(self) -> Iterable[tuple[Request, Mapping[str, Any]]]: ...


class ProgressCollector(Collector):
    """``msop_job_progress_ratio{job_namespace,job_name}`` (when the job reports its totals)
    and ``msop_job_progress_last_report_timestamp_seconds{job_namespace,job_name}`` (of
    every report) from the registered progress pollers."""

    def __init__(self) -> None:
        self._sources: list[Reports] = []

    def add(self, source: Reports) -> None:
        self._sources.append(source)

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "msop_job_progress_ratio",
            "Fraction of training done (0-1) that Worker 0 last reported, for each running "
            "MSJob that reports progress with its total steps or epochs.",
            labels=[JOB_NAMESPACE, JOB_NAME],
        )
        reported = GaugeMetricFamily(
            "msop_job_progress_last_report_timestamp_seconds",
            "When Worker 0 of each running MSJob that reports progress last reported a new "
            "snapshot (its lastReportTime), as a Unix time, with or without totals: a "
            "training that stops moving stops renewing it.",
            labels=[JOB_NAMESPACE, JOB_NAME],
        )
        for source in self._sources:
            for job, progress in source.reports():
                percent = progress.get("percentComplete")
                if isinstance(percent, int):
                    family.add_metric([job.namespace, job.name], percent / 100)
                at = parse_time(progress.get("lastReportTime"))
                if at is not None:
                    reported.add_metric([job.namespace, job.name], at.timestamp())
        yield family
        yield reported


PROGRESS = ProgressCollector()
REGISTRY.register(PROGRESS)


# --- shards (msop run --shards N, N > 1) ----------------------------------------------------

SHARD_RECONCILES = Counter(
    "msop_shard_reconciles_total",
    "Reconciles this replica ran, by the shard of the job (with --shards above 1).",
    ["shard"],
    registry=REGISTRY,
)


class ShardJobsCollector(Collector):
    """``msop_shard_jobs{shard}`` and ``msop_shard_queue_depth{shard}``: the MSJobs of each
    shard this replica holds, and how many of them wait in its queue, computed at scrape
    time (:mod:`msop.msjob.sharding`); sources yield ``(shard, jobs, queued)``."""

    def __init__(self) -> None:
        self._sources: list[Callable[[], Iterable[tuple[int, int, int]]]] = []

    def add(self, source: Callable[[], Iterable[tuple[int, int, int]]]) -> None:
        """Report what ``source`` yields at every scrape."""
        self._sources.append(source)

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "msop_shard_jobs",
            "MSJobs of each shard this replica holds (with --shards above 1); summed over "
            "the replicas, every job once.",
            labels=["shard"],
        )
        queued = GaugeMetricFamily(
            "msop_shard_queue_depth",
            "MSJobs of each shard this replica holds that wait in its work queue (the "
            "shard's part of workqueue_depth; with --shards above 1).",
            labels=["shard"],
        )
        for source in self._sources:
            for shard, n, waiting in source():
                jobs.add_metric([str(shard)], n)
                queued.add_metric([str(shard)], waiting)
        yield jobs
        yield queued


SHARD_JOBS = ShardJobsCollector()
REGISTRY.register(SHARD_JOBS)
