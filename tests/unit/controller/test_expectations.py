"""Expectations with a fake timer."""

from __future__ import annotations

from msop.controller.expectations import Expectations


class Timer:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_no_record_is_satisfied_and_observations_without_record_ignored() -> None:
    e = Expectations(timer=Timer())
    assert e.satisfied("k")
    e.creation_observed("k")
    e.deletion_observed("k")
    assert e.satisfied("k") and len(e) == 0


def test_counts_lower_to_satisfied_and_never_below_zero() -> None:
    e = Expectations(timer=Timer())
    e.expect_creations("k", 2)
    e.expect_deletions("k", 1)
    assert not e.satisfied("k")
    e.creation_observed("k")
    e.creation_observed("k")
    assert not e.satisfied("k")
    assert e.pending("k") == (0, 1)
    e.deletion_observed("k")
    assert e.satisfied("k")
    e.creation_observed("k")
    e.expect_creations("k", 1)
    assert not e.satisfied("k")  # no negative credit carried over


def test_expired_expectations_count_as_satisfied() -> None:
    timer = Timer()
    e = Expectations(timer=timer)
    e.expect_creations("k", 3)
    timer.t = 299
    e.creation_observed("k")  # does not extend the TTL
    assert not e.satisfied("k")
    timer.t = 300.5
    assert e.satisfied("k")
    assert len(e) == 0


def test_named_expectations_ignore_duplicates_and_strangers() -> None:
    e = Expectations(timer=Timer())
    e.expect_creations_of("k", ["p0", "p1"])
    e.creation_observed("k", "p0")
    e.creation_observed("k", "p0")
    e.creation_observed("k", "other")
    assert not e.satisfied("k")
    e.creation_observed("k", "p1")
    assert e.satisfied("k")
    e.expect_deletions_of("k", ["p0"])
    e.deletion_observed("k", "x")
    assert e.pending("k") == (0, 1)
    e.deletion_observed("k", "p0")
    assert e.satisfied("k")


def test_delete_expectations_and_per_key_isolation() -> None:
    e = Expectations(timer=Timer())
    e.expect_creations("a", 1)
    e.expect_creations("b", 1)
    e.delete_expectations("a")
    assert e.satisfied("a") and not e.satisfied("b")
