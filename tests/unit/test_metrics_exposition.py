"""``/metrics``: msop's registry and collectors through prometheus_client's own exposition,
in the format and encoding the scraper asks for (Prometheus text, OpenMetrics, gzip), and
every series parses back.
"""

from __future__ import annotations

import gzip
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
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry

from msop import __version__
from msop.controller.health import Request as HttpRequest
from msop.controller.health import Response, Routes, metrics_routes
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


def _get(registry: CollectorRegistry, **headers: str) -> Response:
    routes: Routes = {}
    metrics_routes(routes, registry)
    request = HttpRequest(
        "GET", "/metrics", {}, {k.replace("_", "-"): v for k, v in headers.items()}
    )
    return routes["/metrics"](request)


def _header(response: Response, name: str) -> str | None:
    return next((v for k, v in response.headers if k.lower() == name), None)


def test_the_text_format_by_default() -> None:
    response = _get(_registry())
    assert response.status == 200 and response.content_type.startswith("text/plain")
    assert _header(response, "content-encoding") is None
    families = {f.name: f for f in text_string_to_metric_families(response.body.decode())}
    assert families["things"].type == "counter"
    assert b"_created{" in response.body and b"+Inf" in response.body
    assert b'\\"quoted\\"' in response.body


def test_openmetrics_when_prometheus_asks_for_it() -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = _get(_registry(), accept=accept)
    assert response.content_type.startswith("application/openmetrics-text")
    assert response.body.endswith(b"# EOF\n")
    families = {f.name: f for f in om_families(response.body.decode())}
    assert families["things"].type == "counter" and families["build"].type == "info"


def test_gzip_when_the_scraper_accepts_it() -> None:
    registry = _registry()
    plain = _get(registry)
    zipped = _get(registry, accept_encoding="gzip")
    assert _header(zipped, "content-encoding") == "gzip"
    assert gzip.decompress(zipped.body) == plain.body
    assert _header(_get(_registry(), accept_encoding="identity"), "content-encoding") is None


class _Queue:
    name = 'work "q"'

    def metric_gauges(self) -> tuple[int, float, float]:
        return (3, 1.5, 0.25)


class _Reports:
    def reports(self) -> Iterable[tuple[Request, Mapping[str, Any]]]:
        yield Request("ns", "job-a"), {"percentComplete": 42}
        yield Request("ns", "job-b"), {}


def test_msops_registry_and_collectors_render_in_both_formats() -> None:
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
        text = _get(registry).body.decode()
        assert list(text_string_to_metric_families(text))
        om = _get(registry, accept="application/openmetrics-text;version=1.0.0").body.decode()
        assert list(om_families(om))
    assert b"workqueue_depth" in generate_latest(REGISTRY)
    assert 'msop_jobs{job_namespace="a",state="Running"} 2.0' in _get(r).body.decode()


def test_content_type_is_prometheus_clients() -> None:
    assert CONTENT_TYPE_LATEST == prometheus_client.exposition.CONTENT_TYPE_LATEST
