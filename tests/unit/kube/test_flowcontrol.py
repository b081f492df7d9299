"""TokenBucket with an injected clock."""

from __future__ import annotations

import asyncio
import math

import pytest

from msop.kube.flowcontrol import TokenBucket, client_limit
from tests.support.clocks import FakeClock


def test_burst_is_free_then_waits_grow_by_one_over_qps() -> None:
    clock = FakeClock(100.0)
    tb = TokenBucket(qps=10, burst=3, clock=clock)
    assert [tb.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert tb.reserve() == pytest.approx(0.1)
    assert tb.reserve() == pytest.approx(0.2)
    assert tb.tokens() == pytest.approx(-2.0)


def test_refill_is_capped_at_burst() -> None:
    clock = FakeClock(100.0)
    tb = TokenBucket(qps=2, burst=2, clock=clock)
    tb.reserve()
    tb.reserve()
    clock.now += 0.5
    assert tb.tokens() == pytest.approx(1.0)
    clock.now += 100
    assert tb.tokens() == pytest.approx(2.0)


def test_reservations_during_debt_are_paid_back_by_time() -> None:
    clock = FakeClock(100.0)
    tb = TokenBucket(qps=1, burst=1, clock=clock)
    assert tb.reserve() == 0.0
    assert tb.reserve() == pytest.approx(1.0)
    clock.now += 1.0
    assert tb.reserve() == pytest.approx(1.0)
    clock.now += 5.0
    assert tb.reserve() == 0.0


def test_clock_going_backwards_does_not_mint_tokens() -> None:
    clock = FakeClock(100.0)
    tb = TokenBucket(qps=1, burst=1, clock=clock)
    tb.reserve()
    clock.now -= 10
    assert tb.tokens() == pytest.approx(0.0)
    clock.now += 10.5
    assert tb.tokens() == pytest.approx(0.5)


def test_cancel_returns_a_token() -> None:
    clock = FakeClock(100.0)
    tb = TokenBucket(qps=1, burst=1, clock=clock)
    tb.reserve()
    assert tb.reserve() == pytest.approx(1.0)
    tb.cancel()
    assert tb.reserve() == pytest.approx(1.0)


def test_infinite_qps_never_waits() -> None:
    tb = TokenBucket(qps=math.inf, burst=1)
    assert all(tb.reserve() == 0.0 for _ in range(1000))


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_invalid_parameters(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=qps, burst=burst)


async def test_wait_sleeps_for_the_reserved_delay() -> None:
    tb = TokenBucket(qps=50, burst=1)
    assert await tb.wait() == 0.0
    loop = asyncio.get_running_loop()
    start = loop.time()
    waited = await tb.wait()
    assert waited == pytest.approx(0.02, abs=0.005)
    assert loop.time() - start >= 0.015


async def test_cancelled_wait_gives_the_token_back() -> None:
    tb = TokenBucket(qps=1, burst=1)
    tb.reserve()
    task = asyncio.create_task(tb.wait())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tb.tokens() == pytest.approx(0.0, abs=0.05)


@pytest.mark.parametrize(
    ("qps", "burst", "expected"),
    [
        (-1, 0, (math.inf, 1)),  # no client-side limit: APF shapes the traffic
        (-0.5, 50, (math.inf, 50)),  # any negative, as controller-runtime reads it
        (0, 0, (5.0, 10)),  # client-go's defaults
        (0, 3, (5.0, 3)),
        (20, 0, (20.0, 10)),
        (20, 30, (20.0, 30)),
    ],
)
def test_client_limit_reads_qps_and_burst_as_client_go_users_expect(
    qps: float, burst: int, expected: tuple[float, int]
) -> None:
    assert client_limit(qps, burst) == expected


def test_no_limit_never_makes_a_caller_wait() -> None:
    tb = TokenBucket(*client_limit(-1, 0), clock=FakeClock(100.0))
    assert [tb.reserve() for _ in range(10_000)] == [0.0] * 10_000


def test_nan_is_refused() -> None:
    with pytest.raises(ValueError, match="qps"):
        client_limit(math.nan, 0)
