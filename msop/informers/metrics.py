"""Informer metrics on :data:`msop.metrics.REGISTRY`.

- ``informer_watch_restarts_total{resource,reason}``: a watch ended and a new one was
  started (or a relist was needed). ``reason`` is one of :data:`RESTART_REASONS`.
- ``informer_lists_total{resource}``: full lists (initial list and relists).
- ``informer_watching{resource}``: 1 while the reflector's watch is open, so its cache
  follows the API server; 0 while it lists, or waits to retry after a failure.
"""

from __future__ import annotations

from msop.metrics import REGISTRY, Counter, Gauge

__all__ = ["LISTS_TOTAL", "RESTART_REASONS", "WATCHING", "WATCH_RESTARTS_TOTAL"]

RESTART_REASONS = ("closed", "stalled", "expired", "error")
"""closed: the server ended the stream (its timeoutSeconds, normal); stalled: nothing
arrived within the stall bound; expired: 410 Gone, a relist follows; error: the watch
failed otherwise (connection, server error), retried after backoff."""

WATCH_RESTARTS_TOTAL = Counter(
    "informer_watch_restarts",
    "Watches restarted by informer reflectors, by resource and reason.",
    ["resource", "reason"],
    registry=REGISTRY,
)

LISTS_TOTAL = Counter(
    "informer_lists",
    "Full lists (initial and relists) done by informer reflectors.",
    ["resource"],
    registry=REGISTRY,
)

WATCHING = Gauge(
    "informer_watching",
    "1 while the informer's watch on the resource is open (its cache follows the API "
    "server); 0 while it lists, or waits to retry after a failed list or watch.",
    ["resource"],
    registry=REGISTRY,
)
