"""Prometheus metrics of the runtime, named and labelled like controller-runtime and client-go.

Everything is registered on :data:`msop.metrics.REGISTRY`, so existing dashboards and alerts for
Go controllers work unchanged:

* workqueue (label ``name``): ``workqueue_adds_total``, ``workqueue_retries_total``,
  ``workqueue_queue_duration_seconds``, ``workqueue_work_duration_seconds`` and, computed at
  scrape time from the live queues, ``workqueue_depth``, ``workqueue_unfinished_work_seconds``
  and ``workqueue_longest_running_processor_seconds``;
* controller (label ``controller``): ``controller_runtime_reconcile_total{controller,result}``,
  ``controller_runtime_reconcile_errors_total``,
  ``controller_runtime_terminal_reconcile_errors_total``,
  ``controller_runtime_reconcile_panics_total``, ``controller_runtime_reconcile_time_seconds``,
  ``controller_runtime_max_concurrent_reconciles``, ``controller_runtime_active_workers``;
* leader election: ``leader_election_master_status{name}``; with shards (msop's own),
  ``msop_shard_owned{shard}``: 1 while this replica holds the shard;
* events (msop's own, label ``component``): ``msop_events_written_total{component,action}``
  (``create`` a new Event, ``patch`` an aggregated one) and
  ``msop_events_dropped_total{component,reason}`` (``queue_full``, ``shutdown``,
  ``write_failed``) and ``msop_events_pending{component}`` (queued, deferred, waiting to be
  tried again or in flight: 0 once every Event so far is written or given up).

Only queues with a non-empty name report metrics (as in client-go).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Protocol

from msop.metrics import REGISTRY, Collector, Counter, Gauge, GaugeMetricFamily, Histogram

__all__ = [
    "ACTIVE_WORKERS",
    "EVENTS_DROPPED",
    "EVENTS_WRITTEN",
    "LEADER_ELECTION_MASTER_STATUS",
    "MAX_CONCURRENT_RECONCILES",
    "RECONCILE_ERRORS",
    "RECONCILE_PANICS",
    "RECONCILE_TIME",
    "RECONCILE_TOTAL",
    "SHARD_OWNED",
    "TERMINAL_RECONCILE_ERRORS",
    "WORKQUEUE_ADDS",
    "WORKQUEUE_QUEUE_DURATION",
    "WORKQUEUE_RETRIES",
    "WORKQUEUE_WORK_DURATION",
    "track_queue",
]

# 10 ns .. 1000 s, as controller-runtime's workqueue metrics provider.
_QUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))

# controller-runtime's reconcile_time_seconds buckets.
_RECONCILE_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5),
    *(0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0),
    *(6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0),
)

WORKQUEUE_ADDS = Counter(
    "workqueue_adds_total",
    "Total number of adds handled by workqueue",
    ["name"],
    registry=REGISTRY,
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries_total",
    "Total number of retries handled by workqueue",
    ["name"],
    registry=REGISTRY,
)
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes",
    ["name"],
    buckets=_QUEUE_BUCKETS,
    registry=REGISTRY,
)

RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total",
    "Total number of reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics_total",
    "Total number of reconciliation panics (unexpected exceptions) per controller",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
    registry=REGISTRY,
)
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
    registry=REGISTRY,
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers",
    "Number of currently used workers per controller",
    ["controller"],
    registry=REGISTRY,
)
SHARD_OWNED = Gauge(
    "msop_shard_owned",
    "1 while this replica holds the shard's Lease and reconciles its objects, else 0 "
    "(msop run --shards above 1).",
    ["shard"],
    registry=REGISTRY,
)

LEADER_ELECTION_MASTER_STATUS = Gauge(
    "leader_election_master_status",
    "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, "
    "1 indicates master. 'name' is the string used to identify the lease.",
    ["name"],
    registry=REGISTRY,
)
EVENTS_WRITTEN = Counter(
    "msop_events_written_total",
    "Kubernetes Events written by the event recorder: action=create for a new Event, "
    "patch for a repeat aggregated into an existing one (count and lastTimestamp)",
    ["component", "action"],
    registry=REGISTRY,
)
EVENTS_DROPPED = Counter(
    "msop_events_dropped_total",
    "Kubernetes Events the event recorder could not write: reason=queue_full (the pending "
    "queue was at its bound), shutdown (still pending when the shutdown deadline came), "
    "write_failed (the API server refused or did not answer)",
    ["component", "reason"],
    registry=REGISTRY,
)
EVENTS_PENDING = Gauge(
    "msop_events_pending",
    "Kubernetes Events the event recorder has not written yet: queued, deferred while a "
    "burst of creates lasts, waiting to be tried again after a failure, or in flight",
    ["component"],
    registry=REGISTRY,
)


class QueueGauges(Protocol):
    """What the scrape-time collector reads from a live queue."""

    @property
    def name(self) -> str: ...

    def metric_gauges(self) -> tuple[int, float, float]:
        """Return (depth, unfinished work seconds, longest running processor seconds)."""
        ...


class _QueueCollector(Collector):
    """Computes the workqueue gauges from the live queues at scrape time."""

    def __init__(self) -> None:
        self.queues: weakref.WeakSet[QueueGauges] = weakref.WeakSet()

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield from self._families()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth, unfinished, longest = self._families()
        for queue in list(self.queues):
            d, u, lr = queue.metric_gauges()
            depth.add_metric([queue.name], d)
            unfinished.add_metric([queue.name], u)
            longest.add_metric([queue.name], lr)
        yield from (depth, unfinished, longest)

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
        return (
            GaugeMetricFamily("workqueue_depth", "Current depth of workqueue", labels=["name"]),
            GaugeMetricFamily(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been "
                "observed by work_duration. Large values indicate stuck threads.",
                labels=["name"],
            ),
            GaugeMetricFamily(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                labels=["name"],
            ),
        )


_QUEUES = _QueueCollector()
REGISTRY.register(_QUEUES)


def track_queue(queue: QueueGauges) -> None:
    """Report ``queue``'s gauges at every scrape for as long as the queue object lives."""
    _QUEUES.queues.add(queue)
