"""Rate limiters: exponential sequence, cap, forget, bucket burst then qps, max-of."""

from __future__ import annotations

import pytest

from msop.controller.clock import FakeClock
from msop.controller.ratelimiter import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    default_controller_rate_limiter,
)


def test_exponential_sequence_doubles_from_5ms() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter()
    got = [rl.when("a") for _ in range(5)]
    assert got == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert rl.num_requeues("a") == 5


def test_exponential_is_capped_and_never_overflows() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000)
    got = [rl.when("a") for _ in range(200)]
    assert max(got) == 1000
    assert got[-1] == 1000
    # 0.005 * 2**17 = 655.36 < 1000 < 0.005 * 2**18
    assert got[17] == pytest.approx(655.36)
    assert got[18] == 1000


def test_exponential_is_per_item_and_forget_resets() -> None:
    rl: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1, 100)
    assert [rl.when("a"), rl.when("a"), rl.when("b")] == [1, 2, 1]
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    assert rl.when("a") == 1
    assert rl.num_requeues("b") == 1


def test_exponential_rejects_bad_config() -> None:
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter(0, 1)
    with pytest.raises(ValueError):
        ItemExponentialFailureRateLimiter(2, 1)


def test_bucket_burst_then_qps() -> None:
    clock = FakeClock()
    rl: BucketRateLimiter[str] = BucketRateLimiter(qps=10, burst=3, clock=clock.now)
    assert [rl.when(str(i)) for i in range(3)] == [0, 0, 0]
    assert rl.when("x") == pytest.approx(0.1)
    assert rl.when("y") == pytest.approx(0.2)
    clock.advance(10)  # refills to burst, no more
    assert [rl.when(str(i)) for i in range(3)] == [0, 0, 0]
    assert rl.when("z") == pytest.approx(0.1)
    assert rl.num_requeues("z") == 0
    rl.forget("z")  # no-op


def test_bucket_defaults_are_10qps_burst_100() -> None:
    clock = FakeClock()
    rl: BucketRateLimiter[int] = BucketRateLimiter(clock=clock.now)
    assert all(rl.when(i) == 0 for i in range(100))
    assert rl.when(100) == pytest.approx(0.1)


def test_max_of_takes_worst_and_forgets_everywhere() -> None:
    clock = FakeClock()
    exp: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1, 1000)
    bucket: BucketRateLimiter[str] = BucketRateLimiter(qps=1, burst=1, clock=clock.now)
    rl = MaxOfRateLimiter(exp, bucket)
    assert rl.when("a") == 1  # exp 1, bucket 0
    assert rl.when("a") == 2  # exp 2, bucket 1
    assert rl.when("b") == 2  # exp 1, bucket 2
    assert rl.num_requeues("a") == 2
    rl.forget("a")
    assert rl.num_requeues("a") == 0
    with pytest.raises(ValueError):
        MaxOfRateLimiter()


def test_default_controller_rate_limiter() -> None:
    clock = FakeClock()
    rl: MaxOfRateLimiter[str] = default_controller_rate_limiter(clock=clock.now)
    assert [rl.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    # 97 more distinct items exhaust the burst of 100; the next waits on the bucket.
    for i in range(97):
        rl.when(f"k{i}")
    assert rl.when("fresh") == pytest.approx(0.1)
