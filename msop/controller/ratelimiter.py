"""Rate limiters that decide how long a failed item waits before it is retried.

The semantics are client-go's ``workqueue`` rate limiters:

* :class:`ItemExponentialFailureRateLimiter` - per item, ``base * 2**failures``, capped at
  ``max_delay``. The n-th call to ``when(item)`` without a ``forget(item)`` in between returns
  ``base * 2**(n-1)``: 5 ms, 10 ms, 20 ms, ... up to 1000 s with the defaults.
* :class:`BucketRateLimiter` - one token bucket over all items (default 10 qps, burst 100):
  the first ``burst`` calls return 0, later ones are spaced ``1/qps`` apart. It reserves a token
  per call, like ``rate.Limiter.Reserve()``; it never forgets anything.
* :class:`MaxOfRateLimiter` - the largest delay of its children; ``forget`` forgets in all of
  them; ``num_requeues`` is the largest count.

:func:`default_controller_rate_limiter` is the limiter a controller uses when none is given:
max(exponential 5 ms..1000 s, bucket 10 qps / burst 100).

No method raises. ``when`` is not idempotent: each call counts as one more failure (or takes
one more token).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Protocol, TypeVar

from msop.kube.flowcontrol import TokenBucket

__all__ = [
    "BucketRateLimiter",
    "ItemExponentialFailureRateLimiter",
    "MaxOfRateLimiter",
    "RateLimiter",
    "default_controller_rate_limiter",
]

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    """Decides the delay before an item is retried (client-go ``TypedRateLimiter``)."""

    def when(self, item: T_contra) -> float:
        """Record one more failure of ``item`` and return the delay in seconds before a retry."""
        ...

    def forget(self, item: T_contra) -> None:
        """Stop tracking ``item`` (it succeeded); its next failure starts from scratch."""
        ...

    def num_requeues(self, item: T_contra) -> int:
        """Return how many failures of ``item`` are currently recorded."""
        ...


class ItemExponentialFailureRateLimiter(RateLimiter[T]):
    """Per-item exponential backoff: ``base_delay * 2**failures``, capped at ``max_delay``.

    Failure counts live in a dict until ``forget``; a controller forgets every key whose
    reconcile succeeded (including keys of deleted objects), so the map does not grow without
    bound in practice.
    """

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        if base_delay <= 0 or max_delay < base_delay:
            raise ValueError("need 0 < base_delay <= max_delay")
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        """Return ``base * 2**n`` for the n-th earlier failure (n from 0), at most ``max_delay``."""
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        if exp >= 64:  # 2**64 * base overflows any sane cap; avoid a float huge power
            return self.max_delay
        return min(self.base_delay * 2.0**exp, self.max_delay)

    def forget(self, item: T) -> None:
        """Reset the failure count of ``item``."""
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        """Return the number of failures recorded for ``item``."""
        return self._failures.get(item, 0)


class BucketRateLimiter(RateLimiter[T]):
    """An overall token bucket shared by all items (default 10 qps, burst 100).

    Uses :class:`msop.kube.flowcontrol.TokenBucket`; each ``when`` reserves one token and
    returns how long to wait for it.
    """

    def __init__(
        self,
        qps: float = 10.0,
        burst: int = 100,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bucket = TokenBucket(qps, burst, clock=clock)

    def when(self, item: T) -> float:
        """Reserve a token and return the delay until it is available (0 while in burst)."""
        return float(self.bucket.reserve())

    def forget(self, item: T) -> None:
        """No-op: the bucket is shared, nothing is tracked per item."""

    def num_requeues(self, item: T) -> int:
        """Always 0: the bucket does not count per item."""
        return 0


class MaxOfRateLimiter(RateLimiter[T]):
    """Combines limiters: the worst (largest) delay wins."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self.limiters = limiters

    def when(self, item: T) -> float:
        """Call ``when`` on every child (each records the failure) and return the maximum."""
        return max(limiter.when(item) for limiter in self.limiters)

    def forget(self, item: T) -> None:
        """Forget ``item`` in every child."""
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        """Return the largest count any child reports."""
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(
    *,
    base_delay: float = 0.005,
    max_delay: float = 1000.0,
    qps: float = 10.0,
    burst: int = 100,
    clock: Callable[[], float] = time.monotonic,
) -> MaxOfRateLimiter[T]:
    """Return max(per-item exponential ``base_delay..max_delay``, bucket ``qps``/``burst``)."""
    return MaxOfRateLimiter(
        ItemExponentialFailureRateLimiter(base_delay, max_delay),
        BucketRateLimiter(qps, burst, clock=clock),
    )
