"""msop's text exposition is byte for byte prometheus_client's ``generate_latest``.

msop renders ``/metrics`` itself so that the operator never runs
``prometheus_client/__init__.py`` (which imports http.server, wsgiref, email...); the
output must not change for that.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import prometheus_client
import prometheus_client.exposition
from prometheus_client.metrics import Counter, Enum, Gauge, Histogram, Info, Summary
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from msop import __version__
from msop.controller.metrics import track_queue
from msop.controller.reconcile import Request
from msop.metrics import CONTENT_TYPE_LATEST, REGISTRY, generate_latest, register_process_metrics
from msop.msjob.metrics import JobStateCollector, ProgressCollector

NASTY = 'a "quoted" \\back\\slash\nnew line \u00e9'


class _Custom(Collector):
    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("custom_gauge", "Help with \\ and\nnewline.", labels=["l", "m"])
        g.add_metric(["x", NASTY], 1.5)
        g.add_metric(["y", ""], float("inf"))
        g.add_metric(["z", "w"], float("nan"), timestamp=1700000000.123)
        yield g
        c = CounterMetricFamily("custom_events", "Events.", labels=["kind"], created=12.5)
        c.add_metric(["a"], 3, created=100.25)
        yield c
        yield CounterMetricFamily("custom_plain", "No labels.", value=7)
        gh = GaugeHistogramMetricFamily(
            "custom_gh", "A gauge histogram.", buckets=[("1.0", 2), ("+Inf", 5)], gsum_value=9
        )
        yield gh
        u = UnknownMetricFamily("custom_unknown", "Unknown.", value=1e-9)
        yield u
        g2 = GaugeMetricFamily("custom_big", "Big and small numbers.", labels=["v"])
        for v in (1e21, 123456789.0, 0.1, -2.5, 0, 1e-7, -float("inf")):
            g2.add_metric([repr(v)], v)
        yield g2


def _registry() -> CollectorRegistry:
    r = CollectorRegistry(auto_describe=True)
    c = Counter("things", "Things done.", ["kind", "verb"], registry=r)
    c.labels("pod", "create").inc(3)
    c.labels(NASTY, "x").inc()
    Counter("unlabelled_things", "No labels here.", registry=r).inc(0.5)
    g = Gauge("level", "Current level\nwith a newline and a \\ backslash.", ["name"], registry=r)
    g.labels("q").set(-1.25)
    g.labels('"').set(1e-12)
    h = Histogram("latency_seconds", "Latency.", ["verb"], buckets=(0.005, 0.1, 1, 10), registry=r)
    for v in (0.001, 0.05, 0.5, 5, 50):
        h.labels("GET").observe(v)
    h.labels("PUT\n")
    Histogram("plain_seconds", "Default buckets.", registry=r).observe(0.3)
    Summary("sizes", "A summary.", ["k"], registry=r).labels("v").observe(4)
    Info("build", "Build info.", registry=r).info({"version": "1", "q": NASTY})
    Enum("phase", "Phase.", states=["a", "b"], registry=r).state("b")
    r.register(_Custom())
    return r


def test_output_is_prometheus_clients() -> None:
    r = _registry()
    ours = generate_latest(r)
    assert ours == prometheus_client.generate_latest(r)
    assert b"_created{" in ours and b"+Inf" in ours and b'\\"quoted\\"' in ours


class _Queue:
    name = 'work "q"'

    def metric_gauges(self) -> tuple[int, float, float]:
        return (3, 1.5, 0.25)


class _Reports:
    def reports(self) -> Iterable[tuple[Request, Mapping[str, Any]]]:
        yield Request("ns", "job-a"), {"percentComplete": 42}
        yield Request("ns", "job-b"), {}


def test_msops_registry_and_collectors_render_as_prometheus_client_renders_them() -> None:
    register_process_metrics(__version__)
    queue = _Queue()
    track_queue(queue)
    jobs = JobStateCollector()
    jobs.add(lambda: [("a", "None", 1), ("a", "Running", 2)])
    progress = ProgressCollector()
    progress.add(_Reports())
    r = CollectorRegistry()
    r.register(jobs)
    r.register(progress)
    for registry in (REGISTRY, r):
        ours = generate_latest(registry)
        theirs = prometheus_client.generate_latest(registry)
        # process_cpu_seconds_total and resident memory may move between the two calls.
        if registry is REGISTRY:
            ours, theirs = _without_process(ours), _without_process(theirs)
        assert ours == theirs
    assert b"workqueue_depth" in generate_latest(REGISTRY)


def _without_process(text: bytes) -> bytes:
    return b"\n".join(
        line if not line.startswith(b"process_") else line.rsplit(b" ", 1)[0]
        for line in text.split(b"\n")
    )


def test_content_type_is_prometheus_clients() -> None:
    assert CONTENT_TYPE_LATEST == prometheus_client.exposition.CONTENT_TYPE_LATEST
