"""Pure parts of the reflector: backoff schedule, watch timeouts, relist diff; what it
counts of what it receives."""

from __future__ import annotations

from typing import Any, cast

import pytest

from msop.informers.metrics import LISTED_OBJECTS_TOTAL, WATCH_EVENTS_TOTAL
from msop.informers.reflector import (
    Backoff,
    Reflector,
    ReflectorOptions,
    backoff_delay,
    watch_timeout,
)
from msop.kube import KubeClient
from msop.kube.resources import Resource


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


class _Sink:
    def __init__(self) -> None:
        self.got: list[str] = []

    def replace(
        self, items: list[Any], resource_version: str, *, transformed: bool = False
    ) -> None:
        self.got.append(f"list {len(items)}")

    def watch_event(self, event_type: str, obj: dict[str, Any]) -> None:
        self.got.append(event_type)

    def bookmark(self, resource_version: str) -> None:
        self.got.append("bookmark")


class _Lists:
    async def list_all(self, *args: Any, **kw: Any) -> dict[str, Any]:
        items = [{"metadata": {"name": f"x{i}", "resourceVersion": "1"}} for i in range(3)]
        return {"metadata": {"resourceVersion": "5"}, "items": items}


async def test_what_the_api_server_sent_is_counted_per_resource() -> None:
    res = Resource("", "v1", "reflectortests", "ReflectorTest")
    sink = _Sink()
    r = Reflector(cast(KubeClient, _Lists()), res, sink)
    events = WATCH_EVENTS_TOTAL.labels(str(res))
    listed = LISTED_OBJECTS_TOTAL.labels(str(res))
    before = (events._value.get(), listed._value.get())
    await r._list()
    for kind in ("ADDED", "MODIFIED", "BOOKMARK", "DELETED"):
        r._handle({"type": kind, "object": {"metadata": {"resourceVersion": "6"}}})
    assert sink.got == ["list 3", "ADDED", "MODIFIED", "bookmark", "DELETED"]
    # Bookmarks are not objects sent: 3 watch events, 3 listed objects.
    assert (events._value.get() - before[0], listed._value.get() - before[1]) == (3, 3)
