"""The SuccessfulCreate* event messages: one event per pass naming every object."""

from __future__ import annotations

from msop.msjob.doubts import EVENT_MESSAGE_LIMIT, created_messages


def test_one_object_keeps_the_go_operators_message() -> None:
    assert created_messages("Pod", ["job-worker-0"]) == ["Created pod: job-worker-0"]


def test_several_objects_are_named_in_one_message() -> None:
    names = ["job-scheduler-0", "job-ps-0", "job-worker-0"]
    assert created_messages("Pod", names) == [
        "Created pods: job-scheduler-0, job-ps-0, job-worker-0"
    ]


def test_long_lists_split_under_the_limit_and_lose_no_name() -> None:
    names = [f"a-rather-long-msjob-name-worker-{i}" for i in range(200)]
    messages = created_messages("Pod", names)
    assert len(messages) > 1
    assert all(len(m) <= EVENT_MESSAGE_LIMIT for m in messages)
    named = [n for m in messages for n in m.split(": ", 1)[1].split(", ")]
    assert named == names


def test_nothing_created_no_message() -> None:
    assert created_messages("Service", []) == []
