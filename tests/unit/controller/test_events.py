"""Event aggregation decisions (the pure correlator) and the recorder's queueing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
import structlog

from msop.controller import events as events_module
from msop.controller.events import EventCorrelator, EventKey, EventRecorder, involved_object
from msop.kube.errors import ApiError, ApiTimeout, ApiUnavailable
from msop.kube.resources import Resource
from msop.kube.writer import PatchType
from msop.metrics import REGISTRY


def key(message: str = "m", uid: str = "u1") -> EventKey:
    return EventKey("v1", "Pod", "ns", "p", uid, "Warning", "Failed", message, "c", "h")


def test_first_event_creates_repeats_patch_with_growing_count() -> None:
    c = EventCorrelator(window=600)
    d = c.observe(key(), 0)
    assert (d.action, d.count) == ("create", 1)
    c.record(key(), "p.1", 1, "T0", 0)
    d = c.observe(key(), 10)
    assert (d.action, d.count, d.name, d.first_timestamp) == ("patch", 2, "p.1", "T0")
    c.record(key(), "p.1", 2, "T0", 10)
    assert c.observe(key(), 20).count == 3


def test_different_message_or_object_is_a_new_event() -> None:
    c = EventCorrelator()
    c.record(key(), "p.1", 1, "T0", 0)
    assert c.observe(key("other"), 1).action == "create"
    assert c.observe(key(uid="u2"), 1).action == "create"


def test_outside_window_creates_again() -> None:
    c = EventCorrelator(window=600)
    c.record(key(), "p.1", 5, "T0", 0)
    assert c.observe(key(), 600).action == "patch"
    assert c.observe(key(), 601).action == "create"


def test_lru_is_bounded_and_forget() -> None:
    c = EventCorrelator(maxsize=2)
    for i in range(3):
        c.record(key(str(i)), f"p.{i}", 1, "T", 0)
    assert len(c) == 2
    assert c.observe(key("0"), 1).action == "create"  # evicted
    c.forget(key("2"))
    assert c.observe(key("2"), 1).action == "create"


def test_involved_object_reference() -> None:
    obj: dict[str, Any] = {
        "apiVersion": "example.com/v1",
        "kind": "Toy",
        "metadata": {"name": "t", "namespace": "ns", "uid": "u", "resourceVersion": "7"},
    }
    assert involved_object(obj) == {
        "apiVersion": "example.com/v1",
        "kind": "Toy",
        "name": "t",
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "7",
    }


def drops(component: str, reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "msop_events_dropped_total", {"component": component, "reason": reason}
    )
    return value or 0.0


async def test_recorder_never_blocks_and_drops_distinct_events_beyond_the_bound() -> None:
    rec = EventRecorder(client=RecordingClient(), component="c-full", host="h", max_pending=2)
    obj = {"kind": "Pod", "metadata": {"name": "p"}}
    for i in range(3):
        rec.event(obj, "Normal", "R", f"m{i}")
    assert rec.pending() == 2
    assert rec.dropped == 1
    assert drops("c-full", "queue_full") == 1


async def test_identical_pending_events_fold_into_one_entry_and_are_never_dropped() -> None:
    """A burst of the same event needs one queue slot, however long the burst."""
    rec = EventRecorder(client=RecordingClient(), component="c-fold", host="h", max_pending=2)
    obj = {"kind": "Pod", "metadata": {"name": "p", "uid": "u"}}
    for _ in range(1000):
        rec.event(obj, "Normal", "R", "same")
    rec.event(obj, "Normal", "R", "other")
    assert (rec.pending(), rec.dropped, rec.folded) == (2, 0, 999)
    assert drops("c-fold", "queue_full") == 0


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []
        self.bodies: list[dict[str, Any]] = []
        self.wrote = asyncio.Condition()

    async def _called(self, call: tuple[str, Any, Any]) -> None:
        async with self.wrote:
            self.calls.append(call)
            self.wrote.notify_all()

    async def wait_calls(self, n: int) -> None:
        async with self.wrote:
            await self.wrote.wait_for(lambda: len(self.calls) >= n)

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        await self._called(("create", body["count"], body["message"]))
        self.bodies.append(dict(body))
        return dict(body)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
    ) -> dict[str, Any]:
        await self._called(("patch", patch["count"], name))
        return dict(patch)


OBJ = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}


async def test_recorder_aggregates_and_flushes_on_first_cancel() -> None:
    client = RecordingClient()
    wall = iter(range(100, 200))
    rec = EventRecorder(client, component="c", host="h", wall=lambda: float(next(wall)))
    task = asyncio.create_task(rec.run())
    await asyncio.sleep(0)  # the writers wait for work
    for _ in range(3):
        rec.event(OBJ, "Warning", "Failed", "same")
    rec.event(OBJ, "Warning", "Failed", "different")
    task.cancel()  # stop before it wrote anything: the queued events are still written
    with pytest.raises(asyncio.CancelledError):
        await task
    # Three occurrences still pending were folded into one Event with count 3 that spans
    # the first and the last occurrence.
    assert sorted(client.calls) == [("create", 1, "different"), ("create", 3, "same")]
    same = next(b for b in client.bodies if b["message"] == "same")
    assert (same["firstTimestamp"], same["lastTimestamp"]) == (
        "1970-01-01T00:01:40Z",
        "1970-01-01T00:01:42Z",
    )
    assert rec.abandoned == 0


async def test_repeats_after_a_write_patch_the_count_with_every_folded_occurrence() -> None:
    client = RecordingClient()
    rec = EventRecorder(client, component="c", host="h", writers=1)
    task = asyncio.create_task(rec.run())
    rec.event(OBJ, "Normal", "R", "m")
    await client.wait_calls(1)
    for _ in range(4):
        rec.event(OBJ, "Normal", "R", "m")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [c[:2] for c in client.calls] == [("create", 1), ("patch", 5)]


class BlockedClient(RecordingClient):
    """An API server that never answers event writes."""

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        await self._called(("create", body["count"], body["message"]))
        await asyncio.Event().wait()
        return dict(body)


async def test_second_cancel_abandons_the_backlog_and_counts_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A backlog that cannot drain: the flush is cut at the second cancellation, the
    recorder returns at once and counts every event it did not write."""
    client = BlockedClient()
    rec = EventRecorder(client, component="c-shutdown", host="h", writers=2)
    task = asyncio.create_task(rec.run())
    for i in range(10):
        rec.event(OBJ, "Normal", "R", f"m{i}")
    await client.wait_calls(2)  # both writers stuck in a write
    # Pending counts the 8 queued and the 2 in flight; the gauge reads it at scrape time.
    assert (rec.pending(), rec.unwritten()) == (8, 10)
    assert REGISTRY.get_sample_value("msop_events_pending", {"component": "c-shutdown"}) == 10
    task.cancel()  # graceful: starts flushing, cannot finish
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    task.cancel()  # the deadline
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rec.abandoned == 10  # 8 pending + 2 in flight
    assert drops("c-shutdown", "shutdown") == 10
    assert rec.pending() == 0
    assert REGISTRY.get_sample_value("msop_events_pending", {"component": "c-shutdown"}) == 0


async def test_drops_are_logged_once_per_interval_not_per_event() -> None:
    with structlog.testing.capture_logs() as logged:
        rec = EventRecorder(
            client=RecordingClient(),
            component="c-log",
            host="h",
            max_pending=1,
            log_interval=0.01,
        )
        task = asyncio.create_task(rec.run())
        await asyncio.sleep(0)
        # Fill the queue faster than the writer can empty it (no await in between).
        for i in range(50):
            rec.event(OBJ, "Normal", "R", f"m{i}")
        await asyncio.sleep(0.05)  # several intervals pass
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    lines = [e for e in logged if e["event"] == "event queue full; events dropped"]
    assert len(lines) == 1
    assert lines[0]["count"] == 49


class FlakyClient(RecordingClient):
    """Fails the first ``fail`` creates with ``error``; ``stored_anyway`` creates that fail
    were stored all the same (their answer was lost), like a real outage can do."""

    def __init__(self, fail: int, error: Exception, stored_anyway: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.error = error
        self.stored_anyway = stored_anyway
        self.stored: dict[str, dict[str, Any]] = {}

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        await self._called(("create", body["count"], body["metadata"]["name"]))
        name = body["metadata"]["name"]
        if name in self.stored:
            raise ApiError(409, "AlreadyExists", f"events {name!r} already exists")
        if self.fail > 0:
            self.fail -= 1
            if self.stored_anyway:
                self.stored[name] = dict(body)
            raise self.error
        self.stored[name] = dict(body)
        return dict(body)


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def record(seconds: float) -> None:
        delays.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(events_module, "_sleep", record)
    return delays


async def _write_one(client: RecordingClient, **kw: Any) -> EventRecorder:
    rec = EventRecorder(client, component="c-retry", host="h", writers=1, **kw)
    task = asyncio.create_task(rec.run())
    await asyncio.sleep(0)  # the writers wait for work
    rec.event(OBJ, "Normal", "MSJobRunning", "running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return rec


@pytest.mark.parametrize(
    "error",
    [
        ApiUnavailable("POST events: connection refused"),
        ApiTimeout("POST events: timed out"),
        ApiError(503, "ServiceUnavailable", "etcd"),
        ApiError(429, "TooManyRequests", "slow down"),
    ],
)
async def test_an_outage_loses_no_event_and_stores_it_once(
    no_backoff: list[float], error: Exception
) -> None:
    client = FlakyClient(fail=4, error=error)
    rec = await _write_one(client)
    assert len(client.stored) == 1 and rec.failed == 0 and rec.retried == 4
    # Every try used the same name, and waited longer each time.
    assert {c[2] for c in client.calls} == set(client.stored)
    assert no_backoff == sorted(no_backoff) and no_backoff[0] == 0.5


async def test_a_create_stored_without_an_answer_is_not_stored_twice(
    no_backoff: list[float],
) -> None:
    client = FlakyClient(fail=1, error=ApiUnavailable("reset"), stored_anyway=True)
    rec = await _write_one(client)
    assert len(client.stored) == 1 and len(client.calls) == 2
    assert rec.failed == 0


async def test_refusals_that_do_not_pass_are_not_retried(no_backoff: list[float]) -> None:
    client = FlakyClient(fail=1, error=ApiError(403, "Forbidden", "namespace terminating"))
    rec = await _write_one(client)
    assert not client.stored and len(client.calls) == 1 and rec.failed == 1 and not no_backoff


async def test_gives_up_after_max_tries(no_backoff: list[float]) -> None:
    client = FlakyClient(fail=100, error=ApiUnavailable("down"))
    rec = await _write_one(client, max_tries=5)
    assert len(client.calls) == 5 and rec.failed == 1 and max(no_backoff) <= 10


@pytest.fixture
def quick_recheck(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events_module, "DEFER_RECHECK", 0.005)


async def test_deferrable_events_wait_while_busy_behind_every_other_event(
    quick_recheck: None,
) -> None:
    client = RecordingClient()
    now = [0.0]
    busy = [True]
    rec = EventRecorder(
        client, component="c", host="h", writers=1, clock=lambda: now[0], busy=lambda: busy[0]
    )
    task = asyncio.create_task(rec.run())
    rec.event(OBJ, "Normal", "SuccessfulCreatePod", "Created pod: a", deferrable=True)
    rec.event(OBJ, "Normal", "MSJobRunning", "running")
    rec.event(OBJ, "Warning", "FailedCreatePod", "quota", deferrable=True)  # never deferred
    await client.wait_calls(2)
    for _ in range(20):
        await asyncio.sleep(0.005)  # several looks at busy()
    assert [c[2] for c in client.calls] == ["running", "quota"]
    assert rec.pending() == 1
    rec.event(OBJ, "Normal", "SuccessfulCreatePod", "Created pod: a", deferrable=True)
    assert rec.folded == 1  # a repeat folds into the deferred one
    busy[0] = False  # the queue is empty: the announcement goes out
    await client.wait_calls(3)
    assert client.calls[2] == ("create", 2, "Created pod: a")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_deferred_event_waits_max_defer_at_most(quick_recheck: None) -> None:
    client = RecordingClient()
    now = [0.0]
    rec = EventRecorder(
        client, component="c", host="h", writers=1, max_defer=30, clock=lambda: now[0],
        busy=lambda: True,  # a queue that never empties
    )  # fmt: skip
    task = asyncio.create_task(rec.run())
    rec.event(OBJ, "Normal", "SuccessfulCreateService", "Created service: s", deferrable=True)
    now[0] = 29.0
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert client.calls == []
    now[0] = 30.0
    await client.wait_calls(1)
    assert client.calls == [("create", 1, "Created service: s")]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_graceful_stop_writes_the_deferred_events() -> None:
    client = RecordingClient()
    rec = EventRecorder(client, component="c", host="h", busy=lambda: True)
    task = asyncio.create_task(rec.run())
    await asyncio.sleep(0)
    for i in range(3):
        rec.event(OBJ, "Normal", "SuccessfulCreatePod", f"Created pod: p{i}", deferrable=True)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(c[2] for c in client.calls) == [f"Created pod: p{i}" for i in range(3)]
    assert rec.abandoned == 0


async def test_a_stop_at_once_ends_a_writer_waiting_on_a_deferred_event() -> None:
    """A lost Lease: the manager cancels the recorder (the flush starts, every wake set)
    and, its grace being 0, cancels it again at once. The writer that waited on a
    deferred event must stop then, not go on to write it against an API server that
    never answers (asyncio.wait_for on 3.11 swallowed that second cancellation)."""
    client = BlockedClient()
    rec = EventRecorder(client, component="c-cut", host="h", writers=1, busy=lambda: True)
    task = asyncio.create_task(rec.run())
    rec.event(OBJ, "Normal", "SuccessfulCreatePod", "Created pod: a", deferrable=True)
    await asyncio.sleep(0.01)  # the writer waits on it
    task.cancel()  # graceful: the flush starts
    _, pending = await asyncio.wait([task], timeout=0)  # as the manager's _stop_tasks
    assert pending
    task.cancel()  # the deadline: at once
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await task
    assert rec.abandoned == 1  # pending or in flight when cut
