"""The one Prometheus registry every msop layer registers its metrics on.

msop does not use prometheus_client's global default registry: a library that is
imported into someone else's process must not add series to theirs. The manager's
``/metrics`` endpoint serves exactly this registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

REGISTRY = CollectorRegistry(auto_describe=True)

__all__ = ["REGISTRY"]
