"""The wait_for_job progress line: formatting and in-place vs line-per-change output."""

from __future__ import annotations

import io
from typing import Any

from msop.sdk.statusline import ProgressLine, format_progress
from tests.support.builders import job


def _job(status: dict[str, Any] | None = None) -> dict[str, Any]:
    """Job ``ns/j`` with ``status`` (None: none yet)."""
    return job(status=status)


def test_format_before_the_operator_saw_the_job() -> None:
    assert format_progress(_job()) == "ns/j Pending"


def test_format_latest_condition_and_counts_in_type_order() -> None:
    status = {
        "conditions": [
            {"type": "Created", "status": "True"},
            {"type": "Running", "status": "True"},
        ],
        "replicaStatuses": {
            "Worker": {"active": 3, "succeeded": 1, "failed": 0, "selector": "x"},
            "Scheduler": {"active": 1, "succeeded": 0, "failed": 0},
            "PS": {"active": 2},
        },
    }
    assert format_progress(_job(status)) == (
        "ns/j Running | Scheduler active=1 succeeded=0 failed=0 | "
        "PS active=2 succeeded=0 failed=0 | Worker active=3 succeeded=1 failed=0"
    )


def test_format_ends_with_the_training_progress_once_reported() -> None:
    status = {
        "conditions": [{"type": "Running", "status": "True"}],
        "replicaStatuses": {"Worker": {"active": 2, "succeeded": 0, "failed": 0}},
        "progress": {
            "percentComplete": 45, "epoch": 9, "totalEpochs": 20, "step": 90,
            "totalSteps": 200, "estimatedRemainingSeconds": 3725,
            "metrics": [{"name": "loss", "value": "0.0213"}],
            "lastReportTime": "2026-01-01T00:00:00Z",
        },
    }  # fmt: skip
    assert format_progress(_job(status)) == (
        "ns/j Running | Worker active=2 succeeded=0 failed=0 | 45% epoch 9/20 ETA 1h2m loss=0.0213"
    )


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_terminal_one_line_per_change() -> None:
    out = io.StringIO()
    line = ProgressLine(out)
    for text in ("a Created", "a Created", "a Running", "a Succeeded"):
        line.update(text)
    line.close()
    assert out.getvalue() == "a Created\na Running\na Succeeded\n"


def test_terminal_rewrites_in_place_and_pads_shorter_lines() -> None:
    out = _Tty()
    line = ProgressLine(out)
    line.update("job Created long")
    line.update("job Running")
    line.update("job Running")
    line.close()
    assert out.getvalue() == "\rjob Created long\rjob Running     \n"


def test_terminal_close_without_output_writes_nothing() -> None:
    out = _Tty()
    ProgressLine(out).close()
    assert out.getvalue() == ""


def test_format_says_where_a_restarting_job_resumes_from() -> None:
    progress = {
        "step": 15,
        "lastReportTime": "2026-01-01T00:00:00Z",
        "lastCheckpoint": {"step": 15, "epoch": 1, "time": "2026-01-01T00:00:00Z"},
    }
    running = {"conditions": [{"type": "Running", "status": "True"}], "progress": progress}
    assert "resumes" not in format_progress(_job(running))
    restarting = {**running, "conditions": [{"type": "Restarting", "status": "True"}]}
    assert format_progress(_job(restarting)) == (
        "ns/j Restarting | step 15 | resumes from step 15 (epoch 1) at 2026-01-01T00:00:00Z"
    )
