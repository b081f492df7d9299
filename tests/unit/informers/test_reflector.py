"""Pure parts of the reflector: backoff schedule, watch timeouts, relist diff."""

from __future__ import annotations

import pytest

from msop.informers.reflector import (
    Backoff,
    ReflectorOptions,
    backoff_delay,
    watch_timeout,
)


def test_backoff_delay_doubles_from_0_8_and_caps_at_30() -> None:
    delays = [
        backoff_delay(i, initial=0.8, factor=2, cap=30, jitter=1.0, rand=0.0) for i in range(8)
    ]
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    # jitter stretches a delay by up to (1 + jitter) but never past the cap
    assert backoff_delay(0, initial=0.8, factor=2, cap=30, jitter=1.0, rand=0.5) == pytest.approx(
        1.2
    )
    assert backoff_delay(5, initial=0.8, factor=2, cap=30, jitter=1.0, rand=0.99) == 30.0
    assert backoff_delay(10_000, initial=0.8, factor=2, cap=30, jitter=1.0, rand=0.0) == 30.0


def test_backoff_resets_after_a_healthy_period() -> None:
    now = [0.0]
    b = Backoff(ReflectorOptions(), clock=lambda: now[0], rand=lambda: 0.0)
    seq = []
    for _ in range(4):
        seq.append(b.next())
        now[0] += 10
    assert seq == pytest.approx([0.8, 1.6, 3.2, 6.4])
    now[0] += 121
    assert b.next() == pytest.approx(0.8)
    now[0] += 119
    assert b.next() == pytest.approx(1.6)


def test_watch_timeout_is_in_5_to_10_minutes() -> None:
    assert watch_timeout(300, 0.0) == 300
    assert watch_timeout(300, 0.999999) == 599
    assert watch_timeout(0.1, 0.5) == 1
