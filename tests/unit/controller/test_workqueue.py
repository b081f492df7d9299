"""WorkQueue: client-go semantics plus controller-runtime priorities, on a fake clock."""

from __future__ import annotations

import asyncio

import pytest

from msop.controller.clock import FakeClock
from msop.controller.ratelimiter import ItemExponentialFailureRateLimiter
from msop.controller.workqueue import (
    PRIORITY_LOW,
    QueueEmpty,
    ShutDown,
    WorkQueue,
)


def make(name: str = "") -> tuple[WorkQueue[str], FakeClock]:
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000)
    return WorkQueue(name, rate_limiter=limiter, clock=clock), clock


def drain(q: WorkQueue[str]) -> list[str]:
    out: list[str] = []
    while True:
        try:
            item = q.get_nowait()
        except QueueEmpty:
            return out
        out.append(item)
        q.done(item)


def test_fifo_and_duplicates_collapse() -> None:
    q, _ = make()
    for item in ["a", "b", "a", "c", "b"]:
        q.add(item)
    assert len(q) == 3
    assert drain(q) == ["a", "b", "c"]
    assert len(q) == 0


def test_readd_while_processing_is_deferred_until_done() -> None:
    q, _ = make()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a")
    q.add("a")
    assert len(q) == 0  # not handed to a second worker
    stats = q.statistics()
    assert (stats.processing, stats.deferred, stats.depth) == (1, 1, 1)
    with pytest.raises(QueueEmpty):
        q.get_nowait()
    q.done("a")
    assert len(q) == 1
    assert q.get_nowait() == "a"
    q.done("a")
    assert len(q) == 0
    q.done("a")  # done for an item not processing: ignored


def test_done_without_readd_does_not_requeue() -> None:
    q, _ = make()
    q.add("a")
    item = q.get_nowait()
    q.done(item)
    assert len(q) == 0
    assert q.statistics().processing == 0


async def test_one_key_never_processed_concurrently() -> None:
    q, _ = make()
    active: set[str] = set()
    overlaps = 0
    handled: list[str] = []
    finished = asyncio.Event()

    async def worker() -> None:
        nonlocal overlaps
        while True:
            try:
                item = await q.get()
            except ShutDown:
                return
            if item in active:
                overlaps += 1
            active.add(item)
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            q.add(item) if len(handled) < 40 else None
            handled.append(item)
            active.discard(item)
            q.done(item)
            if len(handled) >= 40 and not q.statistics().depth and not q.statistics().processing:
                finished.set()

    async with asyncio.TaskGroup() as tg:
        for _ in range(4):
            tg.create_task(worker())
        for _ in range(5):
            q.add("k")
            q.add("j")
            await asyncio.sleep(0)
        await finished.wait()
        q.shutdown()
    assert overlaps == 0
    assert set(handled) == {"k", "j"}


async def test_get_blocks_until_add_and_shutdown_wakes_getters() -> None:
    q, _ = make()
    got: list[str] = []

    async def getter() -> None:
        got.append(await q.get())

    async with asyncio.TaskGroup() as tg:
        t = tg.create_task(getter())
        await asyncio.sleep(0)
        assert not t.done()
        q.add("x")
    assert got == ["x"]

    async def shut_getter() -> None:
        with pytest.raises(ShutDown):
            await q.get()

    async with asyncio.TaskGroup() as tg:
        tg.create_task(shut_getter())
        await asyncio.sleep(0)
        q.shutdown()


async def test_cancelled_getter_leaves_no_waiter_behind() -> None:
    q, _ = make()
    task = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    q.add("a")
    assert q.get_nowait() == "a"


def test_priority_order_and_fifo_within_priority() -> None:
    q, _ = make()
    q.add("low1", priority=PRIORITY_LOW)
    q.add("n1")
    q.add("low2", priority=PRIORITY_LOW)
    q.add("high", priority=10)
    q.add("n2")
    assert drain(q) == ["high", "n1", "n2", "low1", "low2"]


def test_readding_with_higher_priority_raises_it_lower_does_not() -> None:
    q, _ = make()
    q.add("a", priority=PRIORITY_LOW)
    q.add("b", priority=PRIORITY_LOW)
    q.add("c")
    q.add("b", priority=5)  # raised above c
    q.add("c", priority=PRIORITY_LOW)  # not lowered
    assert len(q) == 3
    assert drain(q) == ["b", "c", "a"]


def test_deferred_item_keeps_highest_priority() -> None:
    q, _ = make()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a", priority=PRIORITY_LOW)
    q.add("a", priority=7)
    q.add("b", priority=3)
    q.done("a")
    assert drain(q) == ["a", "b"]


def test_add_after_waits_for_the_clock() -> None:
    q, clock = make()
    q.add_after("a", 10)
    assert len(q) == 0
    assert q.statistics().waiting == 1
    clock.advance(9.9)
    assert len(q) == 0
    clock.advance(0.1)
    assert len(q) == 1
    assert q.statistics().waiting == 0
    assert drain(q) == ["a"]


def test_add_after_keeps_the_earliest_time() -> None:
    q, clock = make()
    q.add_after("a", 10)
    q.add_after("a", 3)
    q.add_after("a", 20)
    assert q.statistics().waiting == 1
    clock.advance(3)
    assert drain(q) == ["a"]
    clock.advance(100)
    assert len(q) == 0  # the later delays were merged, not kept


def test_add_after_orders_several_items_by_time() -> None:
    q, clock = make()
    q.add_after("late", 5)
    q.add_after("early", 1)
    q.add_after("mid", 3)
    clock.advance(10)
    assert drain(q) == ["early", "mid", "late"]


def test_add_after_non_positive_adds_now_and_add_beats_pending_delay() -> None:
    q, clock = make()
    q.add_after("a", 0)
    q.add_after("b", -1)
    assert len(q) == 2
    q.add_after("c", 10)
    q.add("c")
    assert drain(q) == ["a", "b", "c"]
    clock.advance(20)
    assert len(q) == 0


def test_add_after_for_queued_item_is_noop_but_may_raise_priority() -> None:
    q, clock = make()
    q.add("a", priority=PRIORITY_LOW)
    q.add("b")
    q.add_after("a", 5, priority=3)
    assert drain(q) == ["a", "b"]
    clock.advance(10)
    assert len(q) == 0


def test_delayed_item_keeps_highest_priority() -> None:
    q, clock = make()
    q.add_after("a", 5, priority=PRIORITY_LOW)
    q.add_after("a", 8, priority=4)
    q.add("b")
    clock.advance(5)
    assert drain(q) == ["a", "b"]


async def test_get_wakes_when_delay_expires() -> None:
    q, clock = make()
    task = asyncio.create_task(q.get())
    q.add_after("a", 1)
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(1)
    assert await task == "a"


def test_rate_limited_backoff_sequence_and_forget() -> None:
    q, clock = make()
    for expected in [0.005, 0.01, 0.02, 0.04, 0.08]:
        q.add_rate_limited("a")
        clock.advance(expected * 0.99)
        assert len(q) == 0
        clock.advance(expected * 0.02)
        assert len(q) == 1
        assert q.get_nowait() == "a"
        q.done("a")
    assert q.num_requeues("a") == 5
    q.forget("a")
    assert q.num_requeues("a") == 0
    q.add_rate_limited("a")
    clock.advance(0.0051)
    assert len(q) == 1


def test_rate_limited_backoff_is_capped() -> None:
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(1, 8)
    q: WorkQueue[str] = WorkQueue(rate_limiter=limiter, clock=clock)
    for _ in range(10):
        q.add_rate_limited("a")
        clock.advance(7.99)
        was_ready = len(q) > 0
        clock.advance(0.01)
        assert len(q) == 1
        assert q.get_nowait() == "a"
        q.done("a")
    assert not was_ready  # the last delay was the 8 s cap


def test_shutdown_ignores_adds_and_hands_out_remaining() -> None:
    q, clock = make()
    q.add("a")
    q.add_after("later", 1)
    q.shutdown()
    q.add("b")
    q.add_rate_limited("c")
    clock.advance(5)
    assert q.is_shutting_down
    assert q.get_nowait() == "a"
    with pytest.raises(ShutDown):
        q.get_nowait()
    q.done("a")


async def test_shutdown_with_drain_waits_for_processing() -> None:
    q, _ = make()
    q.add("a")
    q.add("b")
    a = await q.get()
    b = await q.get()
    drained = asyncio.create_task(q.shutdown_with_drain())
    await asyncio.sleep(0)
    assert not drained.done()
    q.done(a)
    await asyncio.sleep(0)
    assert not drained.done()
    q.done(b)
    await drained
    with pytest.raises(ShutDown):
        await q.get()


async def test_shutdown_with_drain_returns_at_once_when_idle() -> None:
    q, _ = make()
    await q.shutdown_with_drain()
    assert q.is_shutting_down


def test_statistics_and_metric_gauges() -> None:
    q, clock = make()
    q.add("a")
    q.add("b")
    q.add_after("c", 5)
    assert q.get_nowait() == "a"
    q.add("a")
    clock.advance(2)
    s = q.statistics()
    assert (s.ready, s.deferred, s.waiting, s.processing, s.depth) == (1, 1, 1, 1, 2)
    assert s.longest_processing_seconds == 2
    assert q.metric_gauges() == (2, 2.0, 2.0)


def test_named_queue_reports_metrics() -> None:
    from msop.metrics import REGISTRY

    q, clock = make("test_named_queue_reports_metrics")
    q.add("a")
    q.add("a")
    q.add_rate_limited("b")
    clock.advance(1)
    item = q.get_nowait()
    clock.advance(0.5)
    q.done(item)

    def val(metric: str) -> float | None:
        return REGISTRY.get_sample_value(metric, {"name": q.name})

    assert val("workqueue_adds_total") == 2
    assert val("workqueue_retries_total") == 1
    assert val("workqueue_depth") == 1
    assert val("workqueue_queue_duration_seconds_count") == 1
    assert val("workqueue_queue_duration_seconds_sum") == pytest.approx(1)
    assert val("workqueue_work_duration_seconds_sum") == pytest.approx(0.5)
    assert val("workqueue_unfinished_work_seconds") == 0
    assert val("workqueue_longest_running_processor_seconds") == 0
