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

__all__ = ["DEFAULT_BURST", "DEFAULT_QPS", "TokenBucket", "client_limit"]

DEFAULT_QPS = 5.0
"""client-go's ``rest.DefaultQPS``: what a ``qps`` of 0 means."""
DEFAULT_BURST = 10
"""client-go's ``rest.DefaultBurst``: what a ``burst`` of 0 means."""


def client_limit(qps: float, burst: int) -> tuple[float, int]:
    """The (qps, burst) of a client's token buckets from its settings, read as client-go
    and controller-runtime users expect: a negative ``qps`` (``-1``) means no client-side
    limit (``math.inf``: the API server's Priority and Fairness shapes the traffic), 0
    means client-go's default (5/s), a positive value is the limit. A ``burst`` of 0 (or
    less) means client-go's default (10)."""
    if math.isnan(qps):
        raise ValueError("qps must be a number")
    if qps < 0:
        return math.inf, max(burst, 1)
    return (qps or DEFAULT_QPS), (burst if burst > 0 else DEFAULT_BURST)


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
