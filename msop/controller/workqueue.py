"""A rate-limited, delaying priority work queue with client-go ``workqueue`` semantics.

Contract (the same as client-go's ``workqueue.Type`` + delaying + rate limiting queues, with the
priorities of controller-runtime's ``priorityqueue``):

* **Duplicates collapse.** An item is at most once in the queue. Adding an item that is already
  waiting to be handed out does nothing, except that a *higher* priority raises it.
* **One worker per item.** Between ``get()`` returning an item and ``done(item)``, the item is
  *processing*; re-adding it then marks it dirty, and it re-enters the queue only at
  ``done(item)``. So no two workers ever hold the same item.
* **Priority.** ``get()`` hands out the highest priority first, FIFO within one priority.
  :data:`PRIORITY_NORMAL` is 0; initial-list and resync events use :data:`PRIORITY_LOW`.
* **Delays.** ``add_after(item, d)`` adds the item after ``d`` seconds; several pending delays
  for one item keep the earliest time and the highest priority; an immediate ``add`` wins over
  a pending delay (the item is handed out once).
* **Rate limiting.** ``add_rate_limited(item)`` is ``add_after(item, limiter.when(item))``;
  ``forget(item)`` resets the limiter; ``num_requeues(item)`` reads it.
* **Shutdown.** After ``shutdown()`` adds are ignored, pending delays are dropped, ``get()``
  still returns the items already queued and then raises :class:`ShutDown`.
  ``shutdown_with_drain()`` additionally waits until every processing item is ``done``.

Everything runs on one event loop thread; methods other than ``get`` and
``shutdown_with_drain`` never block. Time comes from an injectable :class:`~.clock.Clock`.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from msop.controller import metrics
from msop.controller.clock import Clock, MonotonicClock, TimerHandle
from msop.controller.ratelimiter import RateLimiter, default_controller_rate_limiter

__all__ = [
    "PRIORITY_LOW",
    "PRIORITY_NORMAL",
    "QueueEmpty",
    "QueueStatistics",
    "ShutDown",
    "WorkQueue",
]

PRIORITY_LOW = -100
"""Priority of initial-list and resync events (controller-runtime's ``handler.LowPriority``)."""

PRIORITY_NORMAL = 0
"""Priority of everything else."""

T = TypeVar("T", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``get()`` once the queue is shut down and holds no more ready items."""


class QueueEmpty(Exception):
    """Raised by ``get_nowait()`` when no item is ready."""


@dataclass(frozen=True)
class QueueStatistics:
    """A point-in-time snapshot of a queue (``WorkQueue.statistics()``)."""

    name: str
    """The queue's name (also its metrics label)."""
    ready: int
    """Items that ``get()`` can hand out now (``len(queue)``)."""
    deferred: int
    """Items re-added while processing; they become ready at ``done()``."""
    waiting: int
    """Items scheduled by ``add_after`` / ``add_rate_limited`` that are not due yet."""
    processing: int
    """Items handed out by ``get()`` and not yet ``done()``."""
    depth: int
    """Items added and not yet handed out (``ready + deferred``; ``workqueue_depth``)."""
    longest_processing_seconds: float
    """How long the oldest processing item has been processing (0 if none)."""
    shutting_down: bool
    """Whether ``shutdown()`` was called."""


class WorkQueue(Generic[T]):
    """The controller work queue; see the module docstring for the contract.

    ``name`` labels the ``workqueue_*`` metrics; an empty name disables metrics.
    ``rate_limiter`` defaults to :func:`~.ratelimiter.default_controller_rate_limiter` on the
    queue's clock.
    """

    def __init__(
        self,
        name: str = "",
        *,
        rate_limiter: RateLimiter[T] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._name = name
        self._clock: Clock = clock or MonotonicClock()
        self.rate_limiter: RateLimiter[T] = rate_limiter or default_controller_rate_limiter(
            clock=self._clock.now
        )
        self._seq = itertools.count()
        # item -> priority, for every item added and not yet handed out (ready or deferred).
        self._dirty: dict[T, int] = {}
        # Ready heap of (-priority, seq, item); _ready_seq holds each ready item's live entry.
        self._ready: list[tuple[int, int, T]] = []
        self._ready_seq: dict[T, int] = {}
        # item -> start time, for items handed out and not done.
        self._processing: dict[T, float] = {}
        # Delayed items: item -> (ready_at, priority, seq), and a heap with lazy deletion.
        self._waiting: dict[T, tuple[float, int, int]] = {}
        self._waiting_heap: list[tuple[float, int, T]] = []
        self._timer: TimerHandle | None = None
        self._timer_at = 0.0
        self._add_times: dict[T, float] = {}
        self._getters: list[asyncio.Future[None]] = []
        self._drainers: list[asyncio.Future[None]] = []
        self._shutting_down = False
        if name:
            metrics.track_queue(self)
            # Export zero-valued series at once, so dashboards see the queue before any
            # add; the children are looked up once, not on every add and get.
            self._m_adds = metrics.WORKQUEUE_ADDS.labels(name)
            self._m_retries = metrics.WORKQUEUE_RETRIES.labels(name)
            self._m_queue_duration = metrics.WORKQUEUE_QUEUE_DURATION.labels(name)
            self._m_work_duration = metrics.WORKQUEUE_WORK_DURATION.labels(name)

    # -- introspection ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's name (the ``name`` label of its metrics)."""
        return self._name

    @property
    def is_shutting_down(self) -> bool:
        """Whether ``shutdown()`` or ``shutdown_with_drain()`` was called."""
        return self._shutting_down

    def __len__(self) -> int:
        """Return the number of items ready to be handed out (deferred and delayed excluded)."""
        return len(self._ready_seq)

    def statistics(self) -> QueueStatistics:
        """Return a snapshot of the queue's sizes."""
        now = self._clock.now()
        return QueueStatistics(
            name=self._name,
            ready=len(self._ready_seq),
            deferred=len(self._dirty) - len(self._ready_seq),
            waiting=len(self._waiting),
            processing=len(self._processing),
            depth=len(self._dirty),
            longest_processing_seconds=max(
                (now - t for t in self._processing.values()), default=0.0
            ),
            shutting_down=self._shutting_down,
        )

    def queued(self) -> list[T]:
        """The items ``workqueue_depth`` counts (added, not yet handed out), in no order."""
        return list(self._dirty)

    def metric_gauges(self) -> tuple[int, float, float]:
        """Return (depth, unfinished work seconds, longest running processor seconds)."""
        now = self._clock.now()
        ages = [now - t for t in self._processing.values()]
        return len(self._dirty), sum(ages), max(ages, default=0.0)

    # -- adding ----------------------------------------------------------------------------

    def add(self, item: T, *, priority: int = PRIORITY_NORMAL) -> None:
        """Mark ``item`` as needing processing; see the module docstring. Ignored after shutdown."""
        if self._shutting_down:
            return
        self._drop_waiting(item)
        current = self._dirty.get(item)
        if current is not None:
            if priority > current:
                self._dirty[item] = priority
                if item in self._ready_seq:
                    self._push_ready(item, priority)
            return
        if self._name:
            self._m_adds.inc()
        self._add_times.setdefault(item, self._clock.now())
        self._dirty[item] = priority
        if item in self._processing:
            return
        self._push_ready(item, priority)
        self._wake_getters()

    def add_after(self, item: T, delay: float, *, priority: int = PRIORITY_NORMAL) -> None:
        """Add ``item`` once ``delay`` seconds have passed (``delay <= 0``: now).

        With several pending delays for one item the earliest time and highest priority win.
        If the item is already queued (ready or deferred) only its priority may rise.
        Ignored after shutdown.
        """
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item, priority=priority)
            return
        if item in self._dirty:
            if priority > self._dirty[item]:
                self.add(item, priority=priority)
            return
        ready_at = self._clock.now() + delay
        existing = self._waiting.get(item)
        if existing is not None:
            if existing[0] <= ready_at and existing[1] >= priority:
                return
            ready_at = min(ready_at, existing[0])
            priority = max(priority, existing[1])
        seq = next(self._seq)
        self._waiting[item] = (ready_at, priority, seq)
        heapq.heappush(self._waiting_heap, (ready_at, seq, item))
        self._arm_timer()

    def add_rate_limited(self, item: T, *, priority: int = PRIORITY_NORMAL) -> None:
        """Add ``item`` after the rate limiter's delay; counts one retry. Ignored after shutdown."""
        if self._shutting_down:
            return
        if self._name:
            self._m_retries.inc()
        self.add_after(item, self.rate_limiter.when(item), priority=priority)

    def forget(self, item: T) -> None:
        """Tell the rate limiter ``item`` succeeded: its backoff starts over. Never raises."""
        self.rate_limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """Return how many rate-limited retries of ``item`` are recorded since the last forget."""
        return self.rate_limiter.num_requeues(item)

    # -- taking ----------------------------------------------------------------------------

    async def get(self) -> T:
        """Wait for the highest-priority ready item, mark it processing and return it.

        Raises :class:`ShutDown` once the queue is shut down and no item is ready. The caller
        must call ``done(item)`` when finished, whatever the outcome.
        """
        while not self._ready_seq:
            if self._shutting_down:
                raise ShutDown
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._getters:
                    self._getters.remove(waiter)
        return self._take()

    def get_nowait(self) -> T:
        """Like ``get()`` but raise :class:`QueueEmpty` instead of waiting."""
        if not self._ready_seq:
            if self._shutting_down:
                raise ShutDown
            raise QueueEmpty
        return self._take()

    def done(self, item: T) -> None:
        """Finish processing ``item``; if it was re-added meanwhile, queue it again.

        Calling ``done`` for an item that is not processing does nothing.
        """
        started = self._processing.pop(item, None)
        if started is None:
            return
        if self._name:
            self._m_work_duration.observe(self._clock.now() - started)
        priority = self._dirty.get(item)
        if priority is not None:
            self._push_ready(item, priority)
            self._wake_getters()
        if not self._processing:
            _wake(self._drainers)

    # -- shutdown --------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop accepting adds and drop pending delays; waiting ``get()`` calls raise ShutDown
        once the ready items are gone. Idempotent."""
        self._shutting_down = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting.clear()
        self._waiting_heap.clear()
        _wake(self._getters)

    async def shutdown_with_drain(self) -> None:
        """``shutdown()``, then wait until every processing item is ``done()``."""
        self.shutdown()
        while self._processing:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._drainers.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._drainers:
                    self._drainers.remove(waiter)

    # -- internals -------------------------------------------------------------------------

    def _push_ready(self, item: T, priority: int) -> None:
        seq = next(self._seq)
        self._ready_seq[item] = seq
        heapq.heappush(self._ready, (-priority, seq, item))

    def _take(self) -> T:
        while True:
            _, seq, item = heapq.heappop(self._ready)
            if self._ready_seq.get(item) == seq:
                break
        del self._ready_seq[item]
        del self._dirty[item]
        now = self._clock.now()
        self._processing[item] = now
        added = self._add_times.pop(item, None)
        if self._name and added is not None:
            self._m_queue_duration.observe(now - added)
        return item

    def _wake_getters(self) -> None:
        _wake(self._getters)

    def _drop_waiting(self, item: T) -> None:
        # The heap entry stays and is skipped when popped (lazy deletion).
        self._waiting.pop(item, None)

    def _arm_timer(self) -> None:
        while self._waiting_heap:
            ready_at, seq, item = self._waiting_heap[0]
            entry = self._waiting.get(item)
            if entry is not None and entry[2] == seq:
                break
            heapq.heappop(self._waiting_heap)
        else:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            return
        if self._timer is not None and self._timer_at <= ready_at:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = ready_at
        self._timer = self._clock.call_at(ready_at, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = self._clock.now()
        while self._waiting_heap and self._waiting_heap[0][0] <= now:
            _, seq, item = heapq.heappop(self._waiting_heap)
            entry = self._waiting.get(item)
            if entry is None or entry[2] != seq:
                continue
            del self._waiting[item]
            self.add(item, priority=entry[1])
        self._arm_timer()


def _wake(waiters: list[asyncio.Future[None]]) -> None:
    for waiter in waiters:
        if not waiter.done():
            waiter.set_result(None)
    waiters.clear()
