"""Informer metrics on :data:`msop.metrics.REGISTRY`.

- ``informer_watch_restarts_total{resource,reason}``: a watch ended and a new one was
  started (or a relist was needed). ``reason`` is one of :data:`RESTART_REASONS`.
- ``informer_lists_total{resource}``: full lists (initial list and relists).
- ``informer_watch_events_total{resource}``: objects received by watches (added, modified,
  deleted; not bookmarks), and ``informer_listed_objects_total{resource}``: objects
  received by lists. Together: what the API server sent this replica (with shards, only
  its shards' children).
- ``informer_watching{resource}``: 1 while every running reflector of the resource (one
  per namespace, label selector or shard) has its watch open, so their caches follow the
  API server; 0 while one of them lists or waits to retry after a failure, and once none
  runs. Computed at scrape time (:data:`WATCHING`): a reflector that stops for good (a
  shard handed over) leaves the others' verdict alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from msop.metrics import REGISTRY, Collector, Counter, GaugeMetricFamily

__all__ = [
    "LISTED_OBJECTS_TOTAL",
    "LISTS_TOTAL",
    "RESTART_REASONS",
    "WATCHING",
    "WATCH_EVENTS_TOTAL",
    "WATCH_RESTARTS_TOTAL",
]

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

WATCH_EVENTS_TOTAL = Counter(
    "informer_watch_events",
    "Objects received by informer watches (added, modified, deleted; not bookmarks).",
    ["resource"],
    registry=REGISTRY,
)

LISTED_OBJECTS_TOTAL = Counter(
    "informer_listed_objects",
    "Objects received by informer lists (initial and relists).",
    ["resource"],
    registry=REGISTRY,
)


class Watching(Collector):
    """``informer_watching``, from the running reflectors at each scrape."""

    def __init__(self) -> None:
        self._running: dict[object, tuple[str, Callable[[], bool]]] = {}
        self._seen: set[str] = set()

    def start(self, reflector: object, resource: str, watching: Callable[[], bool]) -> None:
        """``reflector`` of ``resource`` runs; ``watching`` says whether its watch is open."""
        self._running[reflector] = (resource, watching)
        self._seen.add(resource)

    def stop(self, reflector: object) -> None:
        self._running.pop(reflector, None)

    def value(self, resource: str) -> int:
        """1 if every running reflector of ``resource`` watches (and one runs), else 0."""
        states = [w() for r, w in list(self._running.values()) if r == resource]
        return int(bool(states) and all(states))

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for resource in sorted(self._seen):
            family.add_metric([resource], self.value(resource))
        yield family

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            "informer_watching",
            "1 while every informer of the resource has its watch open (their caches follow "
            "the API server); 0 while one lists or waits to retry after a failed list or "
            "watch, or none runs.",
            labels=["resource"],
        )


WATCHING = Watching()
REGISTRY.register(WATCHING)
