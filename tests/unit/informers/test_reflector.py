"""Pure parts of the reflector: backoff schedule, watch timeouts, relist diff."""

from __future__ import annotations

from typing import Any

import pytest

from msop.informers.reflector import (
    Backoff,
    Delta,
    ReflectorOptions,
    backoff_delay,
    relist_deltas,
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


def o(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": name, "resourceVersion": rv}}


def test_relist_deltas_adds_updates_and_deletes_with_last_known_state() -> None:
    known = {"a/same": o("same", "1"), "a/changed": o("changed", "1"), "a/gone": o("gone", "3")}
    listed = [o("same", "1"), o("changed", "5"), o("new", "6")]
    deltas = relist_deltas(known, listed)
    assert Delta("update", "a/changed", known["a/changed"], listed[1]) in deltas
    assert Delta("add", "a/new", None, listed[2]) in deltas
    assert Delta("delete", "a/gone", known["a/gone"], None) in deltas
    assert len(deltas) == 3  # unchanged objects produce nothing


def test_relist_deltas_of_first_list_are_all_adds() -> None:
    deltas = relist_deltas({}, [o("x", "1"), o("y", "2")])
    assert [d.type for d in deltas] == ["add", "add"]
    assert relist_deltas({"a/x": o("x", "1")}, []) == [Delta("delete", "a/x", o("x", "1"), None)]
