"""Kubernetes Events (``v1``) from reconcilers, aggregated like client-go's EventCorrelator.

:class:`EventRecorder` is what reconcilers use:

* ``recorder.event(obj, "Normal" | "Warning", reason, message)`` never blocks and never
  raises. It puts the event on a bounded pending queue (default 16,384 distinct events,
  about 0.75 KiB each: 12 MiB at most).
* **Nothing is lost to a burst.** An event identical to one still pending (same object,
  type, reason and message) is folded into it (its count goes up, no new queue entry), so
  the queue holds distinct events only. Only when ``max_pending`` distinct events wait is a
  new one dropped, as a last resort: counted in ``msop_events_dropped_total{reason=
  "queue_full"}`` and logged once per ``log_interval`` (10 s) with the number dropped, never
  once per event.
* **An API server outage loses no Event.** A write that fails for a reason that passes
  (no answer, a timeout, 5xx, 429 once the client's own retries are spent) is tried
  again by its writer after 0.5 s, 1 s, 2 s ... (at most 10 s apart), up to
  ``max_tries`` (12, as client-go's broadcaster) times in all. A retried create keeps its
  Event name, so a create that was stored although its answer was lost is not stored
  twice (the retry finds it: 409 AlreadyExists counts as written). Events that still fail,
  and refusals that do not pass (403, 422 ...), are counted as
  ``msop_events_dropped_total{reason="write_failed"}``. ``msop_events_pending`` says
  how many are not written yet (queued, deferred, waiting to be tried again or in flight).
* ``await recorder.run()`` drains the queue and writes; the manager owns this task
  (``Manager.event_recorder()`` registers it). Write errors are logged and swallowed.
* **Bounded shutdown.** The first cancellation of ``run()`` flushes what is pending
  (events of the last reconciles still join); a second cancellation - the manager's
  deadline - stops at once, and what was still pending (or in flight) is counted
  (``reason="shutdown"``) and logged in one line.
* **Aggregation.** The same (involved object, type, reason, message, source) seen again
  within ``window`` seconds (default 10 minutes) PATCHes the existing Event's ``count`` and
  ``lastTimestamp`` instead of creating a new Event. If the Event is gone (expired by the API
  server's TTL) a new one is created. The memory of recent events is a bounded LRU
  (``cachetools.LRUCache``, default 4096 entries), so it cannot grow without bound.
* **The work before its announcements.** An event queued with ``deferrable=True`` (the
  reconciler's ``SuccessfulCreatePod``/``SuccessfulCreateService``) waits while ``busy()``
  says the controller is in a burst (setup: more reconciles ready in its queue than it has
  workers), ``max_defer`` (30 s) at most, so that in
  a burst the API server's time goes to the pods and Services rather than to announcing
  them; it is written as soon as the queue is empty, or its time is up. Every other event
  is written first, in order, as it comes; a Warning is never deferred, and a graceful
  stop writes the deferred events with the rest.
* **Its own budget.** Event writes take their tokens from the client's ``events`` budget
  (see :class:`~msop.kube.client.KubeClient`), so a backlog of events never delays the
  creates and status writes of reconciles, as client-go's event broadcaster has its own
  client.

:class:`EventCorrelator` is the pure decision part (no I/O), unit-tested on its own.
:class:`Recorder` is what a reconciler records through (an :class:`EventRecorder`, or a
test's fake); :class:`EventWriter` what the recorder writes through (a ``KubeClient``).
"""

from __future__ import annotations

import asyncio
import socket
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import structlog
from cachetools import LRUCache

from msop.controller.metrics import EVENTS_DROPPED, EVENTS_PENDING, EVENTS_WRITTEN
from msop.kube.errors import ApiError, ApiUnavailable, is_already_exists, is_not_found
from msop.kube.objects import EventType, format_time
from msop.kube.resources import EVENTS, Resource
from msop.kube.writer import Creator, PatchType

__all__ = [
    "Correlation",
    "EventCorrelator",
    "EventKey",
    "EventRecorder",
    "EventType",
    "EventWriter",
    "Recorder",
]


log = structlog.get_logger("msop.controller.events")

#: Seconds between two looks at ``busy()`` while a deferred event waits.
DEFER_RECHECK = 0.25


class Recorder(Protocol):
    """What a reconciler records Events through: :meth:`EventRecorder.event`."""

    def event(
        self,
        obj: Mapping[str, Any],
        type: EventType,
        reason: str,
        message: str,
        /,
        *,
        deferrable: bool = False,
    ) -> None:
        """Queue an Event about ``obj``; returns at once and never raises."""
        ...


class EventWriter(Creator, Protocol):
    """The writes of v1 Events the recorder makes (a ``KubeClient`` makes them): a create
    (``is_already_exists`` when taken) and a merge patch of an Event's count and last
    timestamp. Narrower than :class:`~msop.kube.writer.Writer`: no delete, no subresource."""

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
    ) -> dict[str, Any]:
        """PATCH an Event; returns the Event stored."""
        ...


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
    return format_time(moment)


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


@dataclass
class _Pending:
    """An event waiting to be written; ``count`` occurrences folded into one."""

    ref: dict[str, Any]
    count: int
    first: float
    """Wall time of the first occurrence."""
    last: float
    """Wall time of the latest occurrence."""
    queued: float = 0.0
    """Monotonic time it was queued (how long a deferred event may still wait)."""
    name: str | None = None
    """The Event's name once a create was tried (a retry creates the same name)."""
    tries: int = 0
    """Writes tried so far."""


def _passes(e: BaseException) -> bool:
    """A write failure worth trying again: no answer, 5xx or 429."""
    if isinstance(e, ApiUnavailable):
        return True
    return isinstance(e, ApiError) and (e.status >= 500 or e.status == 429)


#: How a write waits before its retry (a seam for tests).
_sleep = asyncio.sleep


def _retry_delay(tries: int) -> float:
    return float(min(0.5 * 2 ** (tries - 1), 10.0))


#: Distinct Events that may wait to be written at once. A burst of 10,000 jobs (60,000 pods)
#: on the bench's two-core cluster had about 5,000 waiting at its peak (with a bound of
#: 4,096 it dropped 890 of them); one waiting Event takes about 0.75 KiB (tracemalloc), so
#: this bound costs 12 MiB at most.
MAX_PENDING = 16_384


class EventRecorder:
    """Writes v1 Events for ``component`` (the ``source.component``); see the module docstring.

    ``host`` defaults to this machine's hostname. ``clock`` (monotonic) drives the
    aggregation window and the drop log interval; ``wall`` supplies event timestamps.
    """

    def __init__(
        self,
        client: EventWriter,
        component: str,
        host: str | None = None,
        *,
        max_pending: int = MAX_PENDING,
        writers: int = 4,
        max_defer: float = 30.0,
        window: float = 600.0,
        cache_size: int = 4096,
        log_interval: float = 10.0,
        max_tries: int = 12,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        busy: Callable[[], bool] | None = None,
    ) -> None:
        self.client = client
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self.correlator = EventCorrelator(window=window, maxsize=cache_size)
        self.writers = max(1, writers)
        # One ordered map per writer (insertion order = FIFO); an event goes to the shard
        # its key hashes to, so repeats of one event are written in order by one writer
        # and aggregate instead of racing to create two Events.
        self._shards: list[dict[EventKey, _Pending]] = [{} for _ in range(self.writers)]
        # Deferrable events wait in maps of their own, behind the shard's other events.
        self._deferred: list[dict[EventKey, _Pending]] = [{} for _ in range(self.writers)]
        self.busy = busy
        """While it returns True, deferrable events wait (``max_defer`` s at most)."""
        self.max_defer = max_defer
        self._wakes = [asyncio.Event() for _ in range(self.writers)]
        self._pending = 0
        self._in_flight = 0
        self._flushing = False
        self.max_pending = max_pending
        self.log_interval = log_interval
        self.max_tries = max(1, max_tries)
        self.retried = 0
        """Writes tried again after a failure that passes."""
        self._clock = clock
        self._wall = wall
        self.dropped = 0
        """Events dropped because the queue was full."""
        self.failed = 0
        """Events whose write failed."""
        self.abandoned = 0
        """Events still pending (or in flight) when a shutdown deadline stopped the writers."""
        self.folded = 0
        """Occurrences folded into an identical pending event (no queue entry of their own)."""
        self._dropped_reported = 0
        self._m_dropped = {
            r: EVENTS_DROPPED.labels(component, r)
            for r in ("queue_full", "shutdown", "write_failed")
        }
        self._m_written = {a: EVENTS_WRITTEN.labels(component, a) for a in ("create", "patch")}
        # The gauge reads the live recorder at scrape time; a weak reference, so a gauge
        # left behind by a recorder that is gone reads 0 instead of keeping it alive.
        me = weakref.ref(self)

        def unwritten() -> float:
            recorder = me()
            return 0.0 if recorder is None else float(recorder.unwritten())

        EVENTS_PENDING.labels(component).set_function(unwritten)

    def _key(self, ref: Mapping[str, Any], type_: str, reason: str, message: str) -> EventKey:
        return EventKey(
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

    def event(
        self,
        obj: Mapping[str, Any],
        type: EventType,
        reason: str,
        message: str,
        *,
        deferrable: bool = False,
    ) -> None:
        """Queue an Event about ``obj``; returns at once. Never raises. A ``deferrable``
        Normal event may wait while ``busy()`` (see the module docstring)."""
        try:
            ref = involved_object(obj)
            key = self._key(ref, type, reason, message)
            index = hash(key) % self.writers
            later = self._deferred[index]
            shard = later if deferrable and type != "Warning" else self._shards[index]
            now = self._wall()
            pending = self._shards[index].get(key) or later.get(key)
            if pending is not None:
                pending.count += 1
                pending.last = now
                self.folded += 1
                return
            if self._pending >= self.max_pending:
                self.dropped += 1
                self._m_dropped["queue_full"].inc()
                return
            shard[key] = _Pending(ref, 1, now, now, queued=self._clock())
            self._pending += 1
            self._wakes[index].set()
        except Exception:
            log.exception("could not queue event", reason=reason)

    def pending(self) -> int:
        """Distinct events queued and not yet written (in-flight writes not included)."""
        return self._pending

    def unwritten(self) -> int:
        """Distinct events not written yet: queued, deferred, waiting to be tried again, or
        in flight (``msop_events_pending``)."""
        return self._pending + self._in_flight

    async def run(self) -> None:
        """Write queued events until cancelled, ``writers`` at a time (a burst of pod
        creates makes events faster than one round trip each). Write errors are logged
        and swallowed.

        On the first cancellation it still writes what is queued (the events of the last
        reconciles before a graceful stop) and returns by raising CancelledError once the
        queue is empty; a second cancellation stops at once and counts what is left.
        """
        writers = [
            asyncio.create_task(self._writer(i), name=f"event-writer-{i}")
            for i in range(self.writers)
        ]
        reporter = asyncio.create_task(self._report_drops(), name="event-drop-reporter")
        try:
            try:
                # asyncio.wait, not gather: cancelling this task must not cancel the writers.
                await asyncio.wait(writers)
            except asyncio.CancelledError:
                self._flushing = True
                for wake in self._wakes:
                    wake.set()
                if self._pending or self._in_flight:
                    log.info("flushing pending events", pending=self._pending)
                await asyncio.wait(writers)  # a second cancellation ends the flush
                raise
        finally:
            reporter.cancel()
            for task in writers:
                task.cancel()
            left = self._pending + self._in_flight  # before the writers unwind
            await asyncio.gather(reporter, *writers, return_exceptions=True)
            if left:
                self.abandoned += left
                self._m_dropped["shutdown"].inc(left)
                for shard in (*self._shards, *self._deferred):
                    shard.clear()
                self._pending = 0
                log.warning("events not written: shutdown deadline reached", count=left)
            self._log_drops()

    async def _report_drops(self) -> None:
        while True:
            await asyncio.sleep(self.log_interval)
            self._log_drops()

    def _log_drops(self) -> None:
        """One warning line for the events dropped (queue full) since the last one."""
        new = self.dropped - self._dropped_reported
        if new:
            self._dropped_reported = self.dropped
            log.warning(
                "event queue full; events dropped",
                count=new,
                total=self.dropped,
                max_pending=self.max_pending,
            )

    def _deferral_left(self, item: _Pending) -> float:
        """Seconds a deferred event waits before the next look (0: write it now)."""
        if self._flushing or self.busy is None or not self.busy():
            return 0.0
        left = item.queued + self.max_defer - self._clock()
        return min(DEFER_RECHECK, left) if left > 0 else 0.0

    async def _writer(self, index: int) -> None:
        shard, later, wake = self._shards[index], self._deferred[index], self._wakes[index]
        while True:
            if shard:
                source = shard
            elif later:
                wait = self._deferral_left(next(iter(later.values())))
                if wait > 0:
                    # A new event (or a stop) ends the wait early. Not asyncio.wait_for:
                    # on 3.11 it can swallow a cancellation that comes as the wake is set
                    # (a stop sets every wake, then cancels), and the writer would go on.
                    wake.clear()
                    timer = asyncio.get_running_loop().call_later(wait, wake.set)
                    try:
                        await wake.wait()
                    finally:
                        timer.cancel()
                    continue
                source = later
            else:
                if self._flushing:
                    return
                wake.clear()
                await wake.wait()
                continue
            key = next(iter(source))
            item = source.pop(key)
            self._pending -= 1
            self._in_flight += 1
            try:
                await self._write_logged(key, item)
            finally:
                self._in_flight -= 1

    async def _write_logged(self, key: EventKey, item: _Pending) -> None:
        while True:
            item.tries += 1
            try:
                await self._write(key, item)
                return
            except Exception as e:
                if _passes(e) and item.tries < self.max_tries:
                    self.retried += 1
                    log.debug("event write failed; retrying", reason=key.reason, error=str(e))
                    await _sleep(_retry_delay(item.tries))
                    continue
                self.failed += 1
                self._m_dropped["write_failed"].inc()
                log.warning("could not write event", reason=key.reason, error=str(e))
                return

    async def _write(self, key: EventKey, item: _Pending) -> None:
        ref = item.ref
        now = self._clock()
        last = _timestamp(item.last)
        decision = self.correlator.observe(key, now)
        namespace = ref.get("namespace") or "default"
        if decision.action == "patch" and decision.name is not None:
            count = decision.count - 1 + item.count
            try:
                await self.client.patch(
                    EVENTS,
                    decision.name,
                    {"count": count, "lastTimestamp": last},
                    namespace,
                    patch_type="merge",
                )
            except Exception as e:
                if not is_not_found(e):
                    raise
                self.correlator.forget(key)
            else:
                self.correlator.record(
                    key, decision.name, count, decision.first_timestamp or last, now
                )
                self._m_written["patch"].inc()
                return
        if item.name is None:
            item.name = f"{ref['name']}.{time.time_ns():x}"
        name = item.name
        first = _timestamp(item.first)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ref,
            "type": key.type,
            "reason": key.reason,
            "message": key.message,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
            "firstTimestamp": first,
            "lastTimestamp": last,
            "count": item.count,
        }
        try:
            await self.client.create(EVENTS, body, namespace)
        except ApiError as e:
            # A retry of a create that was stored although its answer was lost.
            if not (is_already_exists(e) and item.tries > 1):
                raise
        self.correlator.record(key, name, item.count, first, now)
        self._m_written["create"].inc()
