"""A monotonic clock that moves only when a test says so."""

from __future__ import annotations


class FakeClock:
    """``clock()`` returns ``now``; ``advance(s)`` (or assigning ``now``) moves it."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
