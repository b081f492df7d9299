"""The reflector: keeps a sink in step with the API server by list, then watch.

Cycle (client-go's ``Reflector.ListAndWatch``, re-implemented):

1. **List** every object (paginated) and hand the snapshot to the sink's ``replace``.
2. **Watch** from the list's resourceVersion with ``allowWatchBookmarks=true`` and a
   server-side ``timeoutSeconds`` drawn from [300, 600) so that many clients do not
   reconnect in lockstep. Each event goes to the sink; each event and bookmark advances
   :attr:`Reflector.last_sync_resource_version`.
3. When the server ends the stream, watch again from the last resourceVersion.
4. **410 Gone / "too old resource version"**: the history we need is compacted; list
   again. The sink diffs the new snapshot against its cache (see :func:`relist_deltas`)
   and reports vanished objects as :class:`DeletedFinalStateUnknown`.
5. **Stuck watch**: if neither an event nor a bookmark (the server sends one about every
   minute) arrives within ``stall_timeout``, the stream is declared stuck, logged,
   counted in ``informer_watch_restarts_total{reason="stalled"}`` and replaced.
6. **Errors** (connection failures, 5xx, 429, 403 ...) are logged and retried after an
   exponential backoff with jitter (0.8 s doubling to 30 s, reset after 2 healthy
   minutes). Connection failures re-watch from the last resourceVersion; API errors
   relist. Nothing is raised to the caller: :meth:`Reflector.run` only ends by
   cancellation, which is the normal way to stop it.

The pure parts - :func:`backoff_delay`, :class:`Backoff`, :func:`relist_deltas`,
:func:`watch_timeout` - are separately testable.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import structlog

from msop.informers.metrics import (
    LISTED_OBJECTS_TOTAL,
    LISTS_TOTAL,
    WATCH_EVENTS_TOTAL,
    WATCH_RESTARTS_TOTAL,
    WATCHING,
)
from msop.informers.store import (
    Obj,
)
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, ApiTimeout, ApiUnavailable, is_gone
from msop.kube.resources import Resource

__all__ = [
    "Backoff",
    "Reflector",
    "ReflectorOptions",
    "ReflectorSink",
    "backoff_delay",
    "watch_timeout",
]

log = structlog.get_logger("msop.informers.reflector")


@dataclass(frozen=True)
class ReflectorOptions:
    """Tuning of one reflector; the defaults follow client-go."""

    page_size: int = 100
    """``limit`` of each page of the list."""
    watch_timeout_min: float = 300.0
    """Lower bound of the server-side watch timeout; the value is drawn from [min, 2*min)."""
    stall_timeout: float = 90.0
    """Seconds without any event or bookmark after which a watch counts as stuck
    (bookmarks arrive about every 60 s, so 90 s tolerates one late bookmark)."""
    backoff_initial: float = 0.8
    """First retry delay after an error (before jitter)."""
    backoff_factor: float = 2.0
    """Multiplier of the delay per consecutive error."""
    backoff_cap: float = 30.0
    """Upper bound of any delay, jitter included."""
    backoff_jitter: float = 1.0
    """A delay ``d`` becomes ``d * (1 + jitter * random())``, then capped."""
    backoff_reset_after: float = 120.0
    """Seconds without errors after which the delay starts again from ``backoff_initial``."""
    min_healthy_watch: float = 1.0
    """A watch closed by the server sooner than this with no event counts as an error (so a
    server that ends every watch at once does not cause a hot loop)."""


def backoff_delay(
    attempt: int, *, initial: float, factor: float, cap: float, jitter: float, rand: float
) -> float:
    """Delay before retry number ``attempt`` (0-based): ``initial*factor**attempt``,
    jittered by ``rand`` in [0, 1), capped at ``cap``."""
    base = initial * factor ** min(attempt, 64)
    return min(cap, base * (1.0 + jitter * rand))


class Backoff:
    """Exponential backoff that resets after a quiet period (client-go's backoff manager).

    :meth:`next` returns the next delay. If more than ``reset_after`` seconds passed since
    the previous call, the sequence starts over.
    """

    def __init__(
        self,
        options: ReflectorOptions,
        *,
        clock: Callable[[], float] = time.monotonic,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._o = options
        self._clock = clock
        self._rand = rand
        self._attempt = 0
        self._last: float | None = None

    def next(self) -> float:
        """Return the delay to sleep before the next retry, and advance."""
        now = self._clock()
        if self._last is not None and now - self._last > self._o.backoff_reset_after:
            self._attempt = 0
        self._last = now
        delay = backoff_delay(
            self._attempt,
            initial=self._o.backoff_initial,
            factor=self._o.backoff_factor,
            cap=self._o.backoff_cap,
            jitter=self._o.backoff_jitter,
            rand=self._rand(),
        )
        self._attempt += 1
        return delay


def watch_timeout(minimum: float, rand: float) -> int:
    """Server-side ``timeoutSeconds`` in [minimum, 2*minimum) for ``rand`` in [0, 1)."""
    return max(1, int(minimum * (1.0 + rand)))


class ReflectorSink(Protocol):
    """Where a reflector delivers what it sees. Calls are synchronous and must not raise."""

    def replace(
        self, items: list[Any], resource_version: str, *, transformed: bool = False
    ) -> None:
        """A complete list: the sink's content must become exactly ``items``;
        ``transformed``: they already went through the reflector's ``list_transform``
        (and are whatever it returns)."""

    def watch_event(self, event_type: str, obj: Obj) -> None:
        """One ADDED, MODIFIED or DELETED watch event with its object."""

    def bookmark(self, resource_version: str) -> None:
        """A BOOKMARK: nothing changed up to ``resource_version``."""


_Reason = Literal["closed", "stalled", "expired", "error"]


@dataclass
class ReflectorStatistics:
    """Counters of one reflector, for ``statistics()`` views."""

    lists: int = 0
    watches: int = 0
    events: int = 0
    bookmarks: int = 0
    restarts: Counter[str] = field(default_factory=Counter)
    last_error: str | None = None


class Reflector:
    """List+watch one resource (optionally one namespace and selectors) into a sink.

    ``run()`` loops until cancelled and never raises anything else (see module doc).
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        sink: ReflectorSink,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        shard_selector: str | None = None,
        options: ReflectorOptions | None = None,
        list_transform: Callable[[Obj], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self._clock = clock
        self.resource = resource
        self.sink = sink
        # Applied to listed objects page by page: the parsed pages of a long list are
        # freed as they go instead of all being held until the sink slims them down. It
        # may return any form the sink's ``replace(..., transformed=True)`` accepts.
        self.list_transform = list_transform
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.shard_selector = shard_selector
        self.options = options or ReflectorOptions()
        self.last_sync_resource_version = ""
        """resourceVersion of the last list, event or bookmark applied to the sink."""
        self.stats = ReflectorStatistics()
        self._label = str(resource)
        self._events_received = WATCH_EVENTS_TOTAL.labels(self._label)
        self._open = False
        """Whether its watch is open (``informer_watching``)."""
        self._log = log.bind(resource=self._label, namespace=namespace)

    async def run(self) -> None:
        """List and watch until cancelled."""
        WATCHING.start(self, self._label, lambda: self._open)
        try:
            await self._run()
        finally:
            self._open = False
            WATCHING.stop(self)

    async def _run(self) -> None:
        backoff = Backoff(self.options, clock=self._clock)
        need_list = True
        previous: _Reason | None = None
        while True:
            if need_list:
                try:
                    await self._list()
                    need_list = False
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self._error("list failed", e)
                    await asyncio.sleep(backoff.next())
                    continue
            try:
                reason, relist = await self._watch()
            finally:
                self._open = False
            self.stats.restarts[reason] += 1
            WATCH_RESTARTS_TOTAL.labels(self._label, reason).inc()
            need_list = relist
            # A relist normally fixes an expired watch; expiring again straight after one
            # means something is off (e.g. compaction racing us), so do not spin on it.
            expired_twice = reason == "expired" and previous == "expired"
            previous = reason
            if reason == "error" or expired_twice:
                await asyncio.sleep(backoff.next())

    def _error(self, what: str, e: BaseException) -> None:
        self.stats.last_error = f"{what}: {e!r}"
        if isinstance(e, ApiError):
            self._log.warning(what, error=str(e), status=e.status, reason=e.reason)
        else:
            self._log.exception(what, error=repr(e))

    async def _list(self) -> None:
        result = await self.client.list_all(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            shard_selector=self.shard_selector,
            limit=self.options.page_size,
            transform=self.list_transform,
        )
        rv = str(result.get("metadata", {}).get("resourceVersion", ""))
        self.stats.lists += 1
        LISTS_TOTAL.labels(self._label).inc()
        LISTED_OBJECTS_TOTAL.labels(self._label).inc(len(result["items"]))
        if self.list_transform is None:
            self.sink.replace(result["items"], rv)
        else:
            self.sink.replace(result["items"], rv, transformed=True)
        self.last_sync_resource_version = rv
        self._log.debug("listed", count=len(result["items"]), resource_version=rv)

    async def _watch(self) -> tuple[_Reason, bool]:
        """One watch stream; returns (restart reason, whether a relist is needed)."""
        o = self.options
        started = self._clock()
        received = 0
        self.stats.watches += 1
        stream = self.client.watch(
            self.resource,
            self.namespace,
            resource_version=self.last_sync_resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            shard_selector=self.shard_selector,
            timeout_seconds=watch_timeout(o.watch_timeout_min, random.random()),
            allow_bookmarks=True,
            read_timeout=o.stall_timeout,
        )
        self._open = True
        try:
            async with aclosing(stream):
                async for event in stream:
                    received += 1
                    self._handle(event)
        except asyncio.CancelledError:
            raise
        except ApiTimeout:
            self._log.warning(
                "watch stalled; restarting",
                stall_timeout=o.stall_timeout,
                resource_version=self.last_sync_resource_version,
            )
            return "stalled", False
        except ApiUnavailable as e:
            self._error("watch connection failed", e)
            return "error", False
        except ApiError as e:
            if is_gone(e):
                self._log.info("watch expired; relisting", message=e.message)
                return "expired", True
            self._error("watch failed", e)
            return "error", True
        except Exception as e:
            self._error("watch event could not be applied", e)
            return "error", True
        if received == 0 and self._clock() - started < o.min_healthy_watch:
            self._error("watch closed at once", RuntimeError("empty watch"))
            return "error", False
        return "closed", False

    def _handle(self, event: dict[str, Any]) -> None:
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without object: {event_type}")
        rv = obj.get("metadata", {}).get("resourceVersion")
        if event_type == "BOOKMARK":
            self.stats.bookmarks += 1
            if rv:
                self.sink.bookmark(rv)
        elif event_type in ("ADDED", "MODIFIED", "DELETED"):
            self.stats.events += 1
            self._events_received.inc()
            self.sink.watch_event(event_type, obj)
        else:
            self._log.warning("unknown watch event type", type=event_type)
            return
        if rv:
            self.last_sync_resource_version = rv
