"""Kubernetes Events (``v1``) from reconcilers, aggregated like client-go's EventCorrelator.

:class:`EventRecorder` is what reconcilers use:

* ``recorder.event(obj, "Normal" | "Warning", reason, message)`` never blocks and never
  raises. It puts the event on a bounded queue (default 1000); when the queue is full the
  event is dropped and a warning is logged (events are best-effort, as in Kubernetes).
* ``await recorder.run()`` drains the queue and writes; the manager owns this task
  (``Manager.event_recorder()`` registers it). Write errors are logged and swallowed.
* **Aggregation.** The same (involved object, type, reason, message, source) seen again
  within ``window`` seconds (default 10 minutes) PATCHes the existing Event's ``count`` and
  ``lastTimestamp`` instead of creating a new Event. If the Event is gone (expired by the API
  server's TTL) a new one is created. The memory of recent events is a bounded LRU
  (``cachetools.LRUCache``, default 4096 entries), so it cannot grow without bound.

:class:`EventCorrelator` is the pure decision part (no I/O), unit-tested on its own.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import structlog
from cachetools import LRUCache

from msop.kube.client import KubeClient
from msop.kube.errors import is_not_found
from msop.kube.resources import EVENTS

__all__ = ["Correlation", "EventCorrelator", "EventKey", "EventRecorder", "EventType"]

EventType = Literal["Normal", "Warning"]

log = structlog.get_logger("msop.controller.events")


@dataclass(frozen=True)
class EventKey:
    """What makes two events "the same" for aggregation."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str
    component: str
    host: str


@dataclass(frozen=True)
class Correlation:
    """The correlator's decision: create a new Event, or patch ``name`` to ``count``."""

    action: Literal["create", "patch"]
    count: int
    name: str | None = None
    """The existing Event to patch (``None`` for create)."""
    first_timestamp: str | None = None
    """The existing Event's ``firstTimestamp`` (``None`` for create)."""


@dataclass
class _Seen:
    name: str
    count: int
    first_timestamp: str
    last_seen: float


class EventCorrelator:
    """Decides create-or-patch for each event; remembers the last ``maxsize`` distinct events."""

    def __init__(self, *, window: float = 600.0, maxsize: int = 4096) -> None:
        self.window = window
        self._seen: LRUCache[EventKey, _Seen] = LRUCache(maxsize=maxsize)

    def observe(self, key: EventKey, now: float) -> Correlation:
        """Return what to write for ``key`` at monotonic time ``now`` (does not record it)."""
        seen = self._seen.get(key)
        if seen is None or now - seen.last_seen > self.window:
            return Correlation("create", 1)
        return Correlation("patch", seen.count + 1, seen.name, seen.first_timestamp)

    def record(
        self, key: EventKey, name: str, count: int, first_timestamp: str, now: float
    ) -> None:
        """Remember a successful write of Event ``name`` with ``count``."""
        self._seen[key] = _Seen(name, count, first_timestamp, now)

    def forget(self, key: EventKey) -> None:
        """Drop ``key`` (its Event vanished)."""
        self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)


def _timestamp(now: float | None = None) -> str:
    moment = datetime.now(UTC) if now is None else datetime.fromtimestamp(now, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def involved_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ``involvedObject`` reference for ``obj`` (apiVersion, kind, namespace, name, uid,
    resourceVersion)."""
    meta = obj.get("metadata") or {}
    ref = {
        "apiVersion": obj.get("apiVersion", ""),
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    return ref


class EventRecorder:
    """Writes v1 Events for ``component`` (the ``source.component``); see the module docstring.

    ``host`` defaults to this machine's hostname. ``clock`` (monotonic) drives the
    aggregation window; ``wall`` supplies event timestamps.
    """

    def __init__(
        self,
        client: KubeClient,
        component: str,
        host: str | None = None,
        *,
        max_pending: int = 1000,
        writers: int = 4,
        window: float = 600.0,
        cache_size: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.correlator = EventCorrelator(window=window, maxsize=cache_size)
        self.writers = max(1, writers)
        # One queue per writer; an event goes to the queue its (object, reason, message)
        # hashes to, so repeats of one event are written in order by one writer and
        # aggregate instead of racing to create two Events.
        self._queues: list[asyncio.Queue[tuple[dict[str, Any], str, str, str]]] = [
            asyncio.Queue() for _ in range(self.writers)
        ]
        self.max_pending = max_pending
        self._clock = clock
        self._wall = wall
        self.dropped = 0
        """Events dropped because the queue was full."""
        self.failed = 0
        """Events whose write failed."""

    def event(self, obj: Mapping[str, Any], type: EventType, reason: str, message: str) -> None:
        """Queue an Event about ``obj``; returns at once. Never raises."""
        try:
            if self.pending() >= self.max_pending:
                raise asyncio.QueueFull
            ref = involved_object(obj)
            shard = hash((ref.get("uid"), type, reason, message)) % self.writers
            self._queues[shard].put_nowait((ref, type, reason, message))
        except asyncio.QueueFull:
            self.dropped += 1
            log.warning("event queue full; event dropped", reason=reason, message=message)
        except Exception:
            log.exception("could not queue event", reason=reason)

    def pending(self) -> int:
        """Events queued and not yet written."""
        return sum(q.qsize() for q in self._queues)

    async def run(self) -> None:
        """Write queued events until cancelled, ``writers`` at a time (a burst of pod
        creates makes events faster than one round trip each). Write errors are logged
        and swallowed.

        On the first cancellation it still writes what is already queued (the events of
        the last reconciles before a graceful stop); a second cancellation abandons them.
        """
        async with asyncio.TaskGroup() as tg:
            for queue in self._queues:
                tg.create_task(self._drain(queue))

    async def _drain(self, queue: asyncio.Queue[tuple[dict[str, Any], str, str, str]]) -> None:
        try:
            while True:
                await self._write_logged(*await queue.get())
        except asyncio.CancelledError:
            while not queue.empty():
                await self._write_logged(*queue.get_nowait())
            raise

    async def _write_logged(
        self, ref: dict[str, Any], type_: str, reason: str, message: str
    ) -> None:
        try:
            await self._write(ref, type_, reason, message)
        except Exception as e:
            self.failed += 1
            log.warning("could not write event", reason=reason, error=str(e))

    async def _write(self, ref: dict[str, Any], type_: str, reason: str, message: str) -> None:
        key = EventKey(
            ref["apiVersion"],
            ref["kind"],
            ref.get("namespace", ""),
            ref["name"],
            ref["uid"],
            type_,
            reason,
            message,
            self.component,
            self.host,
        )
        now = self._clock()
        stamp = _timestamp(self._wall())
        decision = self.correlator.observe(key, now)
        namespace = ref.get("namespace") or "default"
        if decision.action == "patch" and decision.name is not None:
            try:
                await self.client.patch(
                    EVENTS,
                    decision.name,
                    {"count": decision.count, "lastTimestamp": stamp},
                    namespace,
                    patch_type="merge",
                )
            except Exception as e:
                if not is_not_found(e):
                    raise
                self.correlator.forget(key)
            else:
                self.correlator.record(
                    key, decision.name, decision.count, decision.first_timestamp or stamp, now
                )
                return
        name = f"{ref['name']}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "type": type_,
            "reason": reason,
            "message": message,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        await self.client.create(EVENTS, body, namespace)
        self.correlator.record(key, name, 1, stamp, now)
