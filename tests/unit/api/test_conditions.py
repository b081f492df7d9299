"""Condition transition rules: each row starts from a status, sets one condition, and checks
the resulting list (type, status, timestamps) and the `changed` result."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from msop.api import constants as c
from msop.api.conditions import (
    get_condition,
    is_finished,
    is_true,
    latest_condition_type,
    set_condition,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:01:00Z"


def cond(
    ctype: str,
    status: str = "True",
    reason: str = "R",
    message: str = "m",
    updated: str = T0,
    transitioned: str = T0,
) -> dict[str, Any]:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastUpdateTime": updated,
        "lastTransitionTime": transitioned,
    }


# Each expected condition is (type, status, lastUpdateTime, lastTransitionTime), in list order.
Row = tuple[list[dict[str, Any]], tuple[str, str, str, str], bool, list[tuple[str, str, str, str]]]
ROWS: dict[str, Row] = {
    "first-condition": ([], (c.CREATED, "True", "R", "m"), True, [(c.CREATED, "True", T1, T1)]),
    "unchanged-keeps-timestamps-and-position": (
        [cond(c.CREATED), cond(c.RUNNING)],
        (c.CREATED, "True", "R", "m"),
        False,
        [(c.CREATED, "True", T0, T0), (c.RUNNING, "True", T0, T0)],
    ),
    "new-reason-moves-to-end-keeps-transition": (
        [cond(c.CREATED), cond(c.RUNNING)],
        (c.CREATED, "True", "Other", "m"),
        True,
        [(c.RUNNING, "True", T0, T0), (c.CREATED, "True", T1, T0)],
    ),
    "new-message-moves-to-end-keeps-transition": (
        [cond(c.RUNNING), cond(c.CREATED)],
        (c.RUNNING, "True", "R", "other"),
        True,
        [(c.CREATED, "True", T0, T0), (c.RUNNING, "True", T1, T0)],
    ),
    "status-flip-sets-transition": (
        [cond(c.SUSPENDED), cond(c.CREATED)],
        (c.SUSPENDED, "False", "R", "m"),
        True,
        [(c.CREATED, "True", T0, T0), (c.SUSPENDED, "False", T1, T1)],
    ),
    "running-turns-restarting-false": (
        [cond(c.CREATED), cond(c.RESTARTING)],
        (c.RUNNING, "True", "R", "m"),
        True,
        [(c.CREATED, "True", T0, T0), (c.RESTARTING, "False", T1, T1), (c.RUNNING, "True", T1, T1)],
    ),
    "restarting-turns-running-false": (
        [cond(c.CREATED), cond(c.RUNNING)],
        (c.RESTARTING, "True", "R", "m"),
        True,
        [(c.CREATED, "True", T0, T0), (c.RUNNING, "False", T1, T1), (c.RESTARTING, "True", T1, T1)],
    ),
    "running-false-leaves-restarting": (
        [cond(c.RESTARTING), cond(c.RUNNING)],
        (c.RUNNING, "False", "R", "m"),
        True,
        [(c.RESTARTING, "True", T0, T0), (c.RUNNING, "False", T1, T1)],
    ),
    "already-false-is-not-touched": (
        [cond(c.RESTARTING, "False")],
        (c.RUNNING, "True", "R", "m"),
        True,
        [(c.RESTARTING, "False", T0, T0), (c.RUNNING, "True", T1, T1)],
    ),
    "succeeded-turns-running-false": (
        [cond(c.CREATED), cond(c.RUNNING)],
        (c.SUCCEEDED, "True", "R", "m"),
        True,
        [(c.CREATED, "True", T0, T0), (c.RUNNING, "False", T1, T1), (c.SUCCEEDED, "True", T1, T1)],
    ),
    "failed-turns-running-and-restarting-false": (
        [cond(c.RUNNING, "True"), cond(c.RESTARTING, "True")],
        (c.FAILED, "True", "R", "m"),
        True,
        [(c.RUNNING, "False", T1, T1), (c.RESTARTING, "False", T1, T1), (c.FAILED, "True", T1, T1)],
    ),
    "suspended-turns-running-false": (
        [cond(c.RUNNING)],
        (c.SUSPENDED, "True", "R", "m"),
        True,
        [(c.RUNNING, "False", T1, T1), (c.SUSPENDED, "True", T1, T1)],
    ),
    "succeeded-false-leaves-running": (
        [cond(c.RUNNING)],
        (c.SUCCEEDED, "False", "R", "m"),
        True,
        [(c.RUNNING, "True", T0, T0), (c.SUCCEEDED, "False", T1, T1)],
    ),
    "failed-is-final-for-running": (
        [cond(c.RUNNING, "False"), cond(c.FAILED)],
        (c.RUNNING, "True", "R", "m"),
        False,
        [(c.RUNNING, "False", T0, T0), (c.FAILED, "True", T0, T0)],
    ),
    "failed-is-final-for-failed-message": (
        [cond(c.FAILED)],
        (c.FAILED, "True", "R", "new message"),
        False,
        [(c.FAILED, "True", T0, T0)],
    ),
    "failed-is-final-for-failed-false": (
        [cond(c.FAILED)],
        (c.FAILED, "False", "R", "m"),
        False,
        [(c.FAILED, "True", T0, T0)],
    ),
    "failed-is-final-for-succeeded": (
        [cond(c.FAILED)],
        (c.SUCCEEDED, "True", "R", "m"),
        False,
        [(c.FAILED, "True", T0, T0)],
    ),
    "succeeded-is-final-for-failed": (
        [cond(c.SUCCEEDED)],
        (c.FAILED, "True", "R", "m"),
        False,
        [(c.SUCCEEDED, "True", T0, T0)],
    ),
    "failed-false-is-not-final": (
        [cond(c.FAILED, "False")],
        (c.RUNNING, "True", "R", "m"),
        True,
        [(c.FAILED, "False", T0, T0), (c.RUNNING, "True", T1, T1)],
    ),
    "duplicate-entries-collapse": (
        [cond(c.RUNNING), cond(c.CREATED), cond(c.RUNNING, "False")],
        (c.RUNNING, "True", "X", "m"),
        True,
        [(c.CREATED, "True", T0, T0), (c.RUNNING, "True", T1, T0)],
    ),
}


@pytest.mark.parametrize(("before", "change", "changed", "after"), ROWS.values(), ids=ROWS.keys())
def test_transition(
    before: list[dict[str, Any]],
    change: tuple[str, str, str, str],
    changed: bool,
    after: list[tuple[str, str, str, str]],
) -> None:
    status: dict[str, Any] = {"conditions": copy.deepcopy(before)}
    untouched = copy.deepcopy(status)
    assert set_condition(status, *change, now=T1) is changed
    got = [
        (x["type"], x["status"], x["lastUpdateTime"], x["lastTransitionTime"])
        for x in status["conditions"]
    ]
    assert got == after
    if not changed:
        assert status == untouched


def test_set_condition_writes_reason_and_message() -> None:
    status: dict[str, Any] = {}
    set_condition(status, c.FAILED, "True", "BackoffLimitExceeded", "worker-0 failed 3 times", T1)
    assert status["conditions"] == [
        {
            "type": c.FAILED,
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "worker-0 failed 3 times",
            "lastUpdateTime": T1,
            "lastTransitionTime": T1,
        }
    ]


def test_side_effect_keeps_reason_and_message() -> None:
    status: dict[str, Any] = {"conditions": [cond(c.RUNNING, reason="JobRunning", message="ok")]}
    set_condition(status, c.RESTARTING, "True", "JobRestarting", "pod restarted", T1)
    running = get_condition(status, c.RUNNING)
    assert running is not None
    assert (running["reason"], running["message"]) == ("JobRunning", "ok")


@pytest.mark.parametrize(
    ("conditions", "finished", "latest", "running"),
    [
        ([], False, None, False),
        ([cond(c.CREATED), cond(c.RUNNING)], False, c.RUNNING, True),
        ([cond(c.RUNNING, "False"), cond(c.SUCCEEDED)], True, c.SUCCEEDED, False),
        ([cond(c.FAILED), cond(c.CREATED)], True, c.CREATED, False),
        ([cond(c.FAILED, "False")], False, c.FAILED, False),
        ([cond(c.RUNNING, "Unknown")], False, c.RUNNING, False),
        ("garbage", False, None, False),
        ([None, 3, cond(c.RUNNING)], False, c.RUNNING, True),
    ],
)
def test_queries(conditions: Any, finished: bool, latest: str | None, running: bool) -> None:
    status = {"conditions": conditions}
    assert is_finished(status) is finished
    assert latest_condition_type(status) == latest
    assert is_true(status, c.RUNNING) is running


def test_queries_on_empty_status() -> None:
    assert get_condition({}, c.RUNNING) is None
    assert latest_condition_type({}) is None
    assert not is_finished({})


def test_malformed_conditions_replaced_on_write() -> None:
    status: dict[str, Any] = {"conditions": "garbage"}
    assert set_condition(status, c.CREATED, "True", "R", "m", T1)
    assert [x["type"] for x in status["conditions"]] == [c.CREATED]
