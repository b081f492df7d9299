"""The one Prometheus registry every msop layer registers its metrics on.

msop does not use prometheus_client's global default registry: a library that is
imported into someone else's process must not add series to theirs. The manager's
``/metrics`` endpoint serves exactly this registry.

``register_process_metrics`` adds what only the operator process itself should export
(``msop run`` calls it once): the standard ``process_*`` series (resident memory, CPU
seconds, start time, open file descriptors), so that memory and restarts can be alerted
on from msop's own metrics, and ``msop_build_info``.

``/metrics`` is rendered by prometheus_client's own exposition (:mod:`msop.controller.health`
negotiates the format and compression as Prometheus asks); :func:`generate_latest`
renders msop's registry with it in the text format (:data:`CONTENT_TYPE_LATEST`).
"""

from __future__ import annotations

import platform

from prometheus_client import exposition
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics import Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

REGISTRY = CollectorRegistry(auto_describe=True)

__all__ = [
    "CONTENT_TYPE_LATEST",
    "REGISTRY",
    "Collector",
    "CollectorRegistry",
    "Counter",
    "CounterMetricFamily",
    "Gauge",
    "GaugeMetricFamily",
    "Histogram",
    "Metric",
    "generate_latest",
    "register_process_metrics",
]

_registered = False


def register_process_metrics(version: str) -> None:
    """Export ``process_*`` and ``msop_build_info`` on :data:`REGISTRY` (idempotent)."""
    global _registered
    if _registered:
        return
    from prometheus_client.process_collector import ProcessCollector

    ProcessCollector(registry=REGISTRY)
    info = Gauge(
        "msop_build_info",
        "Always 1; the labels say which msop and Python this process runs.",
        ["version", "python"],
        registry=REGISTRY,
    )
    info.labels(version=version, python=platform.python_version()).set(1)
    _registered = True


def generate_latest(registry: Collector = REGISTRY) -> bytes:
    """``registry`` (default: msop's own) in the Prometheus text format, by
    prometheus_client's exposition."""
    return exposition.generate_latest(registry)
