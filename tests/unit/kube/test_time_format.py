"""Kubernetes ``Time`` values: RFC 3339 in UTC, whole seconds, four-digit years."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from msop.kube.objects import format_time, parse_time


@pytest.mark.parametrize(
    ("t", "want"),
    [
        (datetime(2026, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC), "2026-01-02T03:04:05Z"),
        (datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=8))),
         "2026-01-01T19:04:05Z"),
        (datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC), "0999-12-31T23:59:59Z"),
    ],
)  # fmt: skip
def test_format_time(t: datetime, want: str) -> None:
    assert format_time(t) == want
    assert parse_time(want) == t.replace(microsecond=0)
