"""The one Prometheus registry every msop layer registers its metrics on.

msop does not use prometheus_client's global default registry: a library that is
imported into someone else's process must not add series to theirs. The manager's
``/metrics`` endpoint serves exactly this registry.

``register_process_metrics`` adds what only the operator process itself should export
(``msop run`` calls it once): the standard ``process_*`` series (resident memory, CPU
seconds, start time, open file descriptors), so that memory and restarts can be alerted
on from msop's own metrics, and ``msop_build_info``.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector

REGISTRY = CollectorRegistry(auto_describe=True)

__all__ = ["REGISTRY", "register_process_metrics"]

_registered = False


def register_process_metrics(version: str) -> None:
    """Export ``process_*`` and ``msop_build_info`` on :data:`REGISTRY` (idempotent)."""
    global _registered
    if _registered:
        return
    ProcessCollector(registry=REGISTRY)
    info = Gauge(
        "msop_build_info",
        "Always 1; the labels say which msop and Python this process runs.",
        ["version", "python"],
        registry=REGISTRY,
    )
    info.labels(version=version, python=platform.python_version()).set(1)
    _registered = True
