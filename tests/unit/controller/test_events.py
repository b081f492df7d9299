"""Event aggregation decisions (the pure correlator) and the recorder's queueing."""

from __future__ import annotations

from typing import Any

from msop.controller.events import EventCorrelator, EventKey, EventRecorder, involved_object


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


async def test_recorder_never_blocks_and_drops_when_full() -> None:
    rec = EventRecorder(client=None, component="c", host="h", max_pending=2)  # type: ignore[arg-type]
    obj = {"kind": "Pod", "metadata": {"name": "p"}}
    for _ in range(3):
        rec.event(obj, "Normal", "R", "m")
    assert rec.pending() == 2
    assert rec.dropped == 1


class RecordingClient:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    async def create(self, res: Any, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        self.calls.append(("create", body["count"], body["message"]))
        return body

    async def patch(self, res: Any, name: str, body: Any, namespace: str, **kw: Any) -> Any:
        self.calls.append(("patch", body["count"], name))
        return body


async def test_recorder_aggregates_and_flushes_on_first_cancel() -> None:
    import asyncio

    import pytest

    client = RecordingClient()
    rec = EventRecorder(client, component="c", host="h")  # type: ignore[arg-type]
    obj = {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u"}}
    task = asyncio.create_task(rec.run())
    await asyncio.sleep(0)  # the drain task waits for work
    for _ in range(3):
        rec.event(obj, "Warning", "Failed", "same")
    rec.event(obj, "Warning", "Failed", "different")
    task.cancel()  # stop before it wrote anything: the queued events are still written
    with pytest.raises(asyncio.CancelledError):
        await task
    # Repeats of one event are written in order (by one writer) and aggregate.
    assert ("create", 1, "different") in client.calls
    same = [c[:2] for c in client.calls if c != ("create", 1, "different")]
    assert same == [("create", 1), ("patch", 2), ("patch", 3)]
