"""The one Prometheus registry every msop layer registers its metrics on.

msop does not use prometheus_client's global default registry: a library that is
imported into someone else's process must not add series to theirs. The manager's
``/metrics`` endpoint serves exactly this registry.

``register_process_metrics`` adds what only the operator process itself should export
(``msop run`` calls it once): the standard ``process_*`` series (resident memory, CPU
seconds, start time, open file descriptors), so that memory and restarts can be alerted
on from msop's own metrics, and ``msop_build_info``.

:func:`generate_latest` renders a registry in the Prometheus text format, byte for byte
as ``prometheus_client.generate_latest`` does (a unit test compares them). msop imports
prometheus_client's submodules only (metrics, metrics_core, registry, samples),
and msop's metric modules import the classes from here:
``prometheus_client/__init__.py`` imports its exposition module, which pulls in
http.server, wsgiref, email, gzip and urllib.request, about 1 MiB of the operator's RSS
for a function of thirty lines, so ``msop run`` registers prometheus_client as a lazy
package before anything imports it (:mod:`msop.bootstrap`). Elsewhere (the SDK in a
notebook) these imports run its package ``__init__`` as usual.
"""

from __future__ import annotations

import math
import platform
import re

from prometheus_client.metrics import Counter, Gauge, Histogram
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

REGISTRY = CollectorRegistry(auto_describe=True)

#: The ``Content-Type`` of :func:`generate_latest`'s output, as
#: ``prometheus_client.exposition.CONTENT_TYPE_LATEST`` (prometheus_client 0.26) says.
CONTENT_TYPE_LATEST = "text/plain; version=1.0.0; charset=utf-8"

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


# prometheus_client.validation's legacy name patterns ("$" also matches before a final
# newline, as there).
_METRIC_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _underscores(s: str, colon: bool) -> str:
    """A name with every character outside the legacy set replaced by ``_``."""
    return "".join(
        c
        if ("a" <= c <= "z" or "A" <= c <= "Z" or c == "_" or (colon and c == ":"))
        or ("0" <= c <= "9" and i > 0)
        else "_"
        for i, c in enumerate(s)
    )


def _metric_name(s: str) -> str:
    if not s or _METRIC_NAME_RE.match(s):
        return s
    return _underscores(s, colon=True)


def _label_name(s: str) -> str:
    if not s or (_LABEL_NAME_RE.match(s) and not s.startswith("__")):
        return s
    return _underscores(s, colon=False)


def _help(metric: Metric) -> str:
    return metric.documentation.replace("\\", r"\\").replace("\n", r"\n")


def _go_float(value: float) -> str:
    """A sample value as Go's strconv formats it (prometheus_client.utils.floatToGoString)."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    # Go switches to exponents sooner than Python (positive values matter: le, quantile).
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _sample_line(s: Sample) -> str:
    labels = ""
    if s.labels:
        pairs = ",".join(
            '{}="{}"'.format(
                _label_name(k), v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
            )
            for k, v in sorted(s.labels.items())
        )
        labels = "{" + pairs + "}"
    timestamp = ""
    if s.timestamp is not None:
        timestamp = f" {int(float(s.timestamp) * 1000):d}"  # milliseconds
    return f"{_metric_name(s.name)}{labels} {_go_float(s.value)}{timestamp}\n"


_OM_SUFFIXES = ("_created", "_gsum", "_gcount")
_TYPES = {"info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped"}


def generate_latest(registry: Collector = REGISTRY) -> bytes:
    """``registry`` in the Prometheus text format (``prometheus_client.generate_latest``
    with its default escaping): counters get ``_total``, and the OpenMetrics-only samples
    (``_created``, ``_gsum``, ``_gcount``) become gauges of their own after their metric.
    """
    output: list[str] = []
    for metric in registry.collect():
        try:
            mname = metric.name
            if metric.type == "counter":
                mname += "_total"
            elif metric.type == "info":
                mname += "_info"
            mtype = _TYPES.get(metric.type, metric.type)
            name = _metric_name(mname)
            output.append(f"# HELP {name} {_help(metric)}\n")
            output.append(f"# TYPE {name} {mtype}\n")
            om_samples: dict[str, list[str]] = {}
            for s in metric.samples:
                for suffix in _OM_SUFFIXES:
                    if s.name == metric.name + suffix:
                        om_samples.setdefault(suffix, []).append(_sample_line(s))
                        break
                else:
                    output.append(_sample_line(s))
        except Exception as exception:
            exception.args = (exception.args or ("",)) + (metric,)
            raise
        for suffix, lines in sorted(om_samples.items()):
            name = _metric_name(metric.name + suffix)
            output.append(f"# HELP {name} {_help(metric)}\n")
            output.append(f"# TYPE {name} gauge\n")
            output.extend(lines)
    return "".join(output).encode("utf-8")
