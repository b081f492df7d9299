"""Clocks for the runtime: the real monotonic clock and a manually advanced fake for tests.

The workqueue and the rate limiters never read ``time`` directly; they take a :class:`Clock`.
A clock tells the time (``now()``, seconds, monotonic) and schedules plain callbacks at an
absolute time (``call_at``). Callbacks are not tasks: nothing is left running when the owner
cancels the returned handle, so no task escapes structured concurrency.

:class:`FakeClock` never moves by itself. ``advance(seconds)`` moves it and runs, in time order,
every callback that became due. Tests use it so that no assertion depends on wall-clock time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "FakeClock", "MonotonicClock", "TimerHandle"]


class TimerHandle(Protocol):
    """A scheduled callback; ``cancel()`` prevents it from running (idempotent)."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic time in seconds plus one-shot callbacks at an absolute time."""

    def now(self) -> float:
        """Return the current monotonic time in seconds."""
        ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Run ``callback`` once, on the event loop, when ``now() >= when``."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic`` and the running event loop's timers.

    ``call_at`` must be called from inside a running event loop.
    """

    def now(self) -> float:
        """Return ``time.monotonic()``."""
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Schedule ``callback`` with ``loop.call_later`` (never earlier than ``when``)."""
        delay = max(0.0, when - self.now())
        return asyncio.get_running_loop().call_later(delay, callback)


class _FakeHandle:
    __slots__ = ("cancelled",)

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    """A clock that moves only when told to; for deterministic tests.

    ``call_at`` callbacks run synchronously inside :meth:`advance`, in order of due time
    (ties in scheduling order). A callback scheduled for a time already reached runs at the
    next :meth:`advance` call (``advance(0)`` is allowed).
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._seq = itertools.count()
        self._timers: list[tuple[float, int, _FakeHandle, Callable[[], None]]] = []

    def now(self) -> float:
        """Return the fake time."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        """Remember ``callback`` until :meth:`advance` reaches ``when``."""
        handle = _FakeHandle()
        heapq.heappush(self._timers, (when, next(self._seq), handle, callback))
        return handle

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0) and run the callbacks that became due."""
        if seconds < 0:
            raise ValueError("a monotonic clock cannot go back")
        self._now += seconds
        while self._timers and self._timers[0][0] <= self._now:
            _, _, handle, callback = heapq.heappop(self._timers)
            if not handle.cancelled:
                callback()

    def pending_timers(self) -> int:
        """Return how many scheduled, not cancelled callbacks are waiting."""
        return sum(1 for t in self._timers if not t[2].cancelled)
