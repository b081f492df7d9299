"""Client-side flow control: a token bucket.

:class:`TokenBucket` holds up to ``burst`` tokens and refills at ``qps`` tokens per second.
Each request takes one token; when none is left the caller waits until one would have
been refilled. Like ``golang.org/x/time/rate``, :meth:`TokenBucket.reserve` takes the
token *now* (the balance may go negative) and returns how long the caller must wait, so
concurrent callers queue up fairly without a lock.

The class is pure except for :meth:`TokenBucket.wait`; inject ``clock`` to unit-test it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """A token bucket of ``burst`` tokens refilled at ``qps`` per second.

    ``qps=math.inf`` disables limiting (every reservation waits 0 s). Raises
    :class:`ValueError` for ``qps <= 0`` or ``burst < 1``. The bucket starts full.
    """

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be > 0, got {qps}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def _advance(self, now: float) -> None:
        elapsed = max(0.0, now - self._last)
        self._last = max(self._last, now)
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)

    def tokens(self) -> float:
        """The current balance (negative while callers are waiting on reservations)."""
        if math.isinf(self.qps):
            return float(self.burst)
        self._advance(self._clock())
        return self._tokens

    def reserve(self) -> float:
        """Take one token and return the seconds the caller must wait before acting (>= 0)."""
        if math.isinf(self.qps):
            return 0.0
        self._advance(self._clock())
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    def cancel(self) -> None:
        """Give back one reserved token (e.g. the waiter was cancelled). Never exceeds burst."""
        if not math.isinf(self.qps):
            self._advance(self._clock())
            self._tokens = min(float(self.burst), self._tokens + 1.0)

    async def wait(self) -> float:
        """Reserve a token and sleep until it may be used; return the seconds waited.

        On cancellation the token is returned to the bucket and CancelledError propagates.
        """
        delay = self.reserve()
        if delay <= 0:
            return 0.0
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancel()
            raise
        return delay
