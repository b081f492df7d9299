"""Controller workers with a fake reconciler and an in-memory event source, on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import structlog

from msop.controller.clock import FakeClock
from msop.controller.controller import Controller
from msop.controller.handler import EnqueueRequestForObject, EnqueueRequestForOwner
from msop.controller.ratelimiter import ItemExponentialFailureRateLimiter
from msop.controller.reconcile import Request, Result, TerminalError
from msop.controller.workqueue import PRIORITY_LOW, WorkQueue
from msop.kube.errors import ApiError
from msop.metrics import REGISTRY

Fn = Callable[[Request], Awaitable[Result]]


class FakeSource:
    """An informer stand-in: records handlers, replays ``objects`` on registration."""

    def __init__(self, *objects: dict[str, Any]) -> None:
        self.objects = list(objects)
        self.handlers: list[tuple[Any, Any, Any]] = []

    def add_event_handler(
        self, on_add: Any = None, on_update: Any = None, on_delete: Any = None
    ) -> tuple[Any, Any, Any]:
        reg = (on_add, on_update, on_delete)
        self.handlers.append(reg)
        for obj in self.objects:
            on_add(obj, True)
        return reg

    def remove_event_handler(self, registration: Any) -> None:
        self.handlers.remove(registration)

    def add(self, obj: dict[str, Any]) -> None:
        for h in self.handlers:
            h[0](obj, False)

    def update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        for h in self.handlers:
            h[1](old, new)


class FakeReconciler:
    def __init__(self, fn: Fn | None = None) -> None:
        self.calls: list[Request] = []
        self.fn = fn
        self.called = asyncio.Event()

    async def reconcile(self, request: Request) -> Result:
        self.calls.append(request)
        self.called.set()
        if self.fn is not None:
            return await self.fn(request)
        return Result()


def obj(name: str, ns: str = "ns", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns, **meta}}


def make(name: str, fn: Fn | None = None, workers: int = 1) -> tuple[Controller, FakeReconciler]:
    r = FakeReconciler(fn)
    limiter: ItemExponentialFailureRateLimiter[Request] = ItemExponentialFailureRateLimiter(1, 60)
    c = Controller(
        name, r, max_concurrent_reconciles=workers, rate_limiter=limiter, clock=FakeClock()
    )
    return c, r


async def settle(c: Controller) -> None:
    """Let the workers run until nothing is ready or processing."""
    for _ in range(100):
        await asyncio.sleep(0)
        s = c.queue.statistics()
        if not s.ready and not s.processing:
            return
    raise AssertionError("controller did not settle")


async def run_for(c: Controller, body: Callable[[], Awaitable[None]]) -> None:
    task = asyncio.create_task(c.run())
    try:
        await asyncio.sleep(0)
        await body()
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def sample(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


async def test_initial_list_is_low_priority_and_success_forgets() -> None:
    c, r = make("t-success")
    src = FakeSource(obj("a"))
    c.watch(src, EnqueueRequestForObject())

    async def body() -> None:
        await settle(c)
        assert r.calls == [Request("ns", "a")]
        assert c.queue.num_requeues(Request("ns", "a")) == 0

    await run_for(c, body)
    assert src.handlers == []  # unregistered on stop
    assert sample("controller_runtime_reconcile_total", controller="t-success", result="success")


async def test_requeue_is_rate_limited_and_requeue_after_forgets() -> None:
    results = {"a": Result(requeue=True), "b": Result(requeue_after=30)}

    async def fn(req: Request) -> Result:
        return results[req.name]

    c, _r = make("t-requeue", fn)
    src = FakeSource()
    c.watch(src, EnqueueRequestForObject())

    async def body() -> None:
        src.add(obj("a"))
        src.add(obj("b"))
        await settle(c)
        assert c.queue.num_requeues(Request("ns", "a")) == 1
        assert c.queue.num_requeues(Request("ns", "b")) == 0
        assert c.queue.statistics().waiting == 2

    await run_for(c, body)
    for result in ("requeue", "requeue_after"):
        assert sample("controller_runtime_reconcile_total", controller="t-requeue", result=result)


async def test_error_requeues_terminal_error_does_not() -> None:
    async def fn(req: Request) -> Result:
        if req.name == "t":
            raise TerminalError("bad spec")
        raise ApiError(500, "InternalError", "boom")

    c, _r = make("t-errors", fn)
    src = FakeSource()
    c.watch(src, EnqueueRequestForObject())

    async def body() -> None:
        src.add(obj("t"))
        src.add(obj("e"))
        await settle(c)
        assert c.queue.num_requeues(Request("ns", "e")) == 1
        assert c.queue.num_requeues(Request("ns", "t")) == 0
        assert c.queue.statistics().waiting == 1

    await run_for(c, body)
    assert sample("controller_runtime_reconcile_errors_total", controller="t-errors") == 2
    assert sample("controller_runtime_terminal_reconcile_errors_total", controller="t-errors") == 1
    assert sample("controller_runtime_reconcile_panics_total", controller="t-errors") == 0


async def test_panic_does_not_kill_the_worker() -> None:
    async def fn(req: Request) -> Result:
        if req.name == "bug":
            raise KeyError("oops")
        return Result()

    c, r = make("t-panic", fn, workers=1)
    src = FakeSource()
    c.watch(src, EnqueueRequestForObject())

    async def body() -> None:
        src.add(obj("bug"))
        await settle(c)
        src.add(obj("fine"))
        await settle(c)
        assert [q.name for q in r.calls] == ["bug", "fine"]
        assert c.queue.num_requeues(Request("ns", "bug")) == 1

    await run_for(c, body)
    assert sample("controller_runtime_reconcile_panics_total", controller="t-panic") == 1


async def test_one_key_never_reconciled_concurrently() -> None:
    running: set[Request] = set()
    overlap = 0
    gate = asyncio.Event()

    async def fn(req: Request) -> Result:
        nonlocal overlap
        if req in running:
            overlap += 1
        running.add(req)
        await gate.wait()
        running.discard(req)
        return Result()

    c, r = make("t-concurrency", fn, workers=4)
    src = FakeSource()
    c.watch(src, EnqueueRequestForObject())

    async def body() -> None:
        src.add(obj("a"))
        src.add(obj("b"))
        for _ in range(5):
            await asyncio.sleep(0)
        assert c.active_workers == 2
        src.add(obj("a"))  # deferred: a is in flight
        for _ in range(5):
            await asyncio.sleep(0)
        assert c.active_workers == 2
        gate.set()
        await settle(c)
        assert sorted(q.name for q in r.calls) == ["a", "a", "b"]

    await run_for(c, body)
    assert overlap == 0
    assert sample("controller_runtime_max_concurrent_reconciles", controller="t-concurrency") == 4


async def test_log_context_is_bound_for_the_reconciler() -> None:
    seen: list[dict[str, Any]] = []

    async def fn(req: Request) -> Result:
        seen.append(structlog.contextvars.get_contextvars())
        return Result()

    c, _r = make("t-logctx", fn)
    src = FakeSource(obj("a", "x"))
    c.watch(src, EnqueueRequestForObject())
    await run_for(c, lambda: settle(c))
    assert seen[0]["controller"] == "t-logctx"
    assert (seen[0]["namespace"], seen[0]["name"]) == ("x", "a")
    assert len(seen[0]["reconcile_id"]) == 36
    assert "reconcile_id" not in structlog.contextvars.get_contextvars()


async def test_graceful_stop_finishes_in_flight_reconcile() -> None:
    gate = asyncio.Event()
    finished: list[str] = []

    async def fn(req: Request) -> Result:
        await gate.wait()
        finished.append(req.name)
        return Result()

    c, r = make("t-drain", fn)
    src = FakeSource()
    c.watch(src, EnqueueRequestForObject())
    task = asyncio.create_task(c.run())
    await asyncio.sleep(0)
    src.add(obj("a"))
    src.add(obj("b"))
    await r.called.wait()
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert finished == ["a"]  # in-flight finished, queued b not started


async def test_second_cancel_aborts_in_flight_reconcile() -> None:
    async def fn(req: Request) -> Result:
        await asyncio.Event().wait()
        return Result()

    c, r = make("t-abort", fn)
    src = FakeSource(obj("a"))
    c.watch(src, EnqueueRequestForObject())
    task = asyncio.create_task(c.run())
    await r.called.wait()
    task.cancel()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert c.active_workers == 0


async def test_owner_handler() -> None:
    c, r = make("t-owner")
    src = FakeSource()
    c.watch(src, EnqueueRequestForOwner("example.com/v1", "Toy"))
    owned_old = obj(
        "pod",
        generation=1,
        resourceVersion="1",
        ownerReferences=[
            {"apiVersion": "example.com/v2", "kind": "Toy", "name": "o", "controller": True}
        ],
    )
    owned_new = {"metadata": {**owned_old["metadata"], "resourceVersion": "2"}}

    async def body() -> None:
        src.update(owned_old, owned_new)  # another group version of the same kind
        await settle(c)
        assert r.calls == [Request("ns", "o")]

    await run_for(c, body)


def test_watch_after_run_and_bad_config_raise() -> None:
    with pytest.raises(ValueError):
        Controller("x", FakeReconciler(), max_concurrent_reconciles=0)
    with pytest.raises(ValueError):
        Controller("", FakeReconciler())
    with pytest.raises(ValueError):  # a given queue has its own rate limiter
        limiter: ItemExponentialFailureRateLimiter[Request] = ItemExponentialFailureRateLimiter(
            1, 60
        )
        Controller("x", FakeReconciler(), queue=WorkQueue("x"), rate_limiter=limiter)


def test_a_queue_made_first_is_the_one_the_controller_fills() -> None:
    # What the controller drives can read the queue's length from its construction on.
    queue: WorkQueue[Request] = WorkQueue("t-given")
    c = Controller("t-given", FakeReconciler(), queue=queue)
    assert c.queue is queue
    queue.add(Request("ns", "o"))
    assert len(c.queue) == 1


async def test_run_twice_raises() -> None:
    c, _ = make("t-twice")
    await run_for(c, lambda: asyncio.sleep(0))
    with pytest.raises(RuntimeError):
        await c.run()
    with pytest.raises(RuntimeError):
        c.watch(FakeSource(), EnqueueRequestForObject())


async def test_initial_list_enqueued_low() -> None:
    c, _ = make("t-low")
    src = FakeSource(obj("old"))
    c.watch(src, EnqueueRequestForObject())
    # Register without workers by using the watch adapter directly.
    w = c._watches[0]
    src.add_event_handler(w.on_add, w.on_update, w.on_delete)
    c.queue.add(Request("ns", "fresh"))
    assert c.queue.get_nowait() == Request("ns", "fresh")
    assert c.queue.get_nowait() == Request("ns", "old")
    assert PRIORITY_LOW < 0


async def test_a_stop_aware_reconciler_hears_of_the_stop_after_its_last_reconcile() -> None:
    order: list[str] = []

    class Aware(FakeReconciler):
        def stopped(self) -> None:
            order.append("stopped")

    async def fn(req: Request) -> Result:
        order.append(req.name)
        return Result()

    r = Aware(fn)
    c = Controller("t-stop-aware", r)
    c.watch(FakeSource(obj("a")), EnqueueRequestForObject())
    task = asyncio.create_task(c.run())
    await r.called.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert order == ["a", "stopped"]


async def test_a_batch_window_reconciles_a_burst_of_child_events_once() -> None:
    r = FakeReconciler()
    clock = FakeClock()
    limiter: ItemExponentialFailureRateLimiter[Request] = ItemExponentialFailureRateLimiter(1, 60)
    c = Controller("t-batch", r, rate_limiter=limiter, clock=clock)
    children, owners = FakeSource(), FakeSource()
    c.watch(children, EnqueueRequestForOwner("example.com/v1", "Toy"), batch_window=0.1)
    c.watch(owners, EnqueueRequestForObject())
    ref = {"apiVersion": "example.com/v1", "kind": "Toy", "name": "o", "controller": True}

    def child(name: str, rv: str) -> dict[str, Any]:
        return obj(name, resourceVersion=rv, ownerReferences=[ref])

    async def body() -> None:
        for i in range(6):  # six pods of one job change within the window
            children.update(child(f"p{i}", "1"), child(f"p{i}", "2"))
            clock.advance(0.01)
        await settle(c)
        assert r.calls == []  # still inside the window
        clock.advance(0.1)
        await settle(c)
        assert r.calls == [Request("ns", "o")]  # once for the six
        children.update(child("p0", "2"), child("p0", "3"))
        owners.add(obj("o"))  # the owner's own event is not delayed, and absorbs the child's
        await settle(c)
        assert r.calls == [Request("ns", "o")] * 2
        clock.advance(0.2)
        await settle(c)
        assert r.calls == [Request("ns", "o")] * 2

    await run_for(c, body)
