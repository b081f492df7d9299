"""Expectations with a fake timer."""

from __future__ import annotations

from msop.controller.expectations import Expectations


class Timer:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_no_record_is_satisfied_and_observations_without_record_ignored() -> None:
    e: Expectations[str] = Expectations(clock=Timer())
    assert e.satisfied("k")
    e.creation_observed("k", "p0")
    e.deletion_observed("k", "p0")
    assert e.satisfied("k") and len(e) == 0


def test_named_expectations_ignore_duplicates_and_strangers() -> None:
    e: Expectations[str] = Expectations(clock=Timer())
    e.expect_creations_of("k", ["p0", "p1"])
    e.expect_deletions_of("k", ["old"])
    e.creation_observed("k", "p0")
    e.creation_observed("k", "p0")
    e.creation_observed("k", "other")
    assert not e.satisfied("k")
    assert e.pending("k") == (1, 1)
    e.creation_observed("k", "p1")
    e.deletion_observed("k", "x")
    assert e.pending("k") == (0, 1) and not e.satisfied("k")
    e.deletion_observed("k", "old")
    assert e.satisfied("k")


def test_a_new_expectation_replaces_the_old_one_of_its_direction() -> None:
    e: Expectations[str] = Expectations(clock=Timer())
    e.expect_creations_of("k", ["p0"])
    e.expect_creations_of("k", ["p1"])
    e.creation_observed("k", "p1")
    assert e.satisfied("k")  # p0 is no longer awaited


def test_expired_expectations_count_as_satisfied() -> None:
    timer = Timer()
    e: Expectations[str] = Expectations(clock=timer)
    e.expect_creations_of("k", ["a", "b", "c"])
    timer.t = 299
    e.creation_observed("k", "a")  # does not extend the TTL
    assert not e.satisfied("k")
    timer.t = 300.5
    assert e.satisfied("k")
    assert len(e) == 0


def test_delete_expectations_and_per_key_isolation() -> None:
    e: Expectations[str] = Expectations(clock=Timer())
    e.expect_creations_of("a", ["x"])
    e.expect_creations_of("b", ["y"])
    e.delete_expectations("a")
    assert e.satisfied("a") and not e.satisfied("b")
