"""status.progress: parsing and bounding a reporter's wire format (msop.api.report)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from msop.api import report as p

JSON = dict[str, Any]


def wire(**fields: Any) -> bytes:
    base: JSON = {"version": 1, "pod": {"name": "j-worker-0", "uid": "u0"}, "seq": 3}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None}).encode()


def test_a_full_report_becomes_the_status_shape() -> None:
    report = p.parse_report(wire(
        age=1.5, step=90, totalSteps=200, epoch=9, totalEpochs=20, percentComplete=45.7,
        estimatedRemainingSeconds=120.4, metrics=[{"name": "loss", "value": "0.0213"}],
    ))  # fmt: skip
    assert (report.pod_name, report.pod_uid, report.seq, report.age, report.final) == (
        "j-worker-0", "u0", 3, 1.5, False,
    )  # fmt: skip
    assert p.to_status(report, "2026-01-01T00:00:00Z") == {
        "percentComplete": 45,
        "step": 90,
        "totalSteps": 200,
        "epoch": 9,
        "totalEpochs": 20,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.0213"}],
        "lastReportTime": "2026-01-01T00:00:00Z",
    }


@pytest.mark.parametrize(
    ("fields", "percent"),
    [
        ({"step": 50, "totalSteps": 200}, 25),
        ({"step": 199, "totalSteps": 200}, 99),  # rounded down: 100 only when done
        ({"step": 200, "totalSteps": 200}, 100),
        ({"step": 250, "totalSteps": 200}, 100),
        ({"epoch": 3, "totalEpochs": 4}, 75),
        ({"step": 10, "totalSteps": 0, "epoch": 1, "totalEpochs": 2}, 50),
        ({"step": 10}, None),
        ({"percentComplete": 99.9999999999}, 100),
    ],
)
def test_percent_comes_from_the_report_else_steps_else_epochs(
    fields: JSON, percent: int | None
) -> None:
    assert p.parse_report(wire(**fields)).progress.get("percentComplete") == percent


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (wire(version=2), "version must be 1"),
        (wire(pod={"name": "x"}), "pod must name"),
        (wire(pod="x"), "pod must name"),
        (wire(seq=0), "seq must be a positive integer"),
        (wire(seq=True), "seq must be an integer"),
        (wire(step=-1), "step must be an integer"),
        (wire(step=1.5), "step must be an integer"),
        (wire(totalSteps=2**60), "totalSteps must be an integer"),
        (wire(percentComplete=101), "percentComplete must be a number from 0 to 100"),
        (wire(percentComplete=float("nan")), "percentComplete"),
        (wire(estimatedRemainingSeconds=-3), "estimatedRemainingSeconds"),
        (wire(final="yes"), "final must be true or false"),
        (wire(metrics={"loss": 1}), "metrics must be a list"),
        (wire(metrics=[{"name": "loss", "value": 0.1}]), "string value"),
        (wire(metrics=[{"name": "a b", "value": "1"}]), "metric name"),
        (wire(metrics=[{"name": "x" * 64, "value": "1"}]), "metric name"),
        (wire(metrics=[{"name": "l", "value": "1" * 65}]), "at most 64"),
        (wire(metrics=[{"name": "l", "value": "1"}] * 2), "appears twice"),
        (wire(metrics=[{"name": f"m{i}", "value": "1"} for i in range(9)]), "at most 8"),
        (b" " * (p.MAX_REPORT_BYTES + 1), "larger than"),
    ],
)
def test_malformed_or_unbounded_reports_are_refused_with_the_reason(body: bytes, why: str) -> None:
    with pytest.raises(p.InvalidReport, match=why):
        p.parse_report(body)


def test_newest_prefers_the_latest_report_and_the_first_on_a_tie() -> None:
    old = {"percentComplete": 10, "lastReportTime": "2026-01-01T00:00:00Z"}
    new = {"percentComplete": 20, "lastReportTime": "2026-01-01T00:00:30Z"}
    tie = {"percentComplete": 21, "lastReportTime": "2026-01-01T00:00:30Z"}
    assert p.newest(old, new) is new
    assert p.newest(new, old) is new
    assert p.newest(tie, new) is tie
    assert p.newest(None, None) is None
    assert p.newest(None, old) is old


def test_summary_shows_percent_epochs_eta_and_loss() -> None:
    progress = {
        "percentComplete": 45, "step": 90, "totalSteps": 200, "epoch": 9, "totalEpochs": 20,
        "estimatedRemainingSeconds": 125,
        "metrics": [{"name": "acc", "value": "0.9"}, {"name": "loss", "value": "0.0213"}],
    }  # fmt: skip
    assert p.summary(progress) == "45% epoch 9/20 ETA 2m5s loss=0.0213"
    assert p.summary({"step": 7}) == "step 7"
    assert p.summary(None) == ""
    assert p.summary({}) == ""


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59, "59s"), (61, "1m1s"),
                                               (3600, "1h0m"), (7325, "2h2m")])  # fmt: skip
def test_format_duration(seconds: int, text: str) -> None:
    assert p.format_duration(seconds) == text


def test_a_checkpoint_is_timed_by_the_report_and_its_age() -> None:
    report = p.parse_report(wire(
        step=95, checkpoint={"step": 90, "epoch": 9, "path": "/ckpt/epoch-9.ckpt", "age": 12.4},
    ))  # fmt: skip
    assert (report.checkpoint, report.checkpoint_age) == (
        {"step": 90, "epoch": 9, "path": "/ckpt/epoch-9.ckpt"}, 12.4,
    )  # fmt: skip
    status = p.to_status(report, "2026-01-01T00:01:00Z")
    assert status["lastCheckpoint"] == {
        "step": 90, "epoch": 9, "path": "/ckpt/epoch-9.ckpt", "time": "2026-01-01T00:00:47Z",
    }  # fmt: skip
    # An operator that predates the field reads the rest of the same report unchanged.
    assert {k: v for k, v in status.items() if k != "lastCheckpoint"} == p.to_status(
        p.parse_report(wire(step=95)), "2026-01-01T00:01:00Z"
    )


@pytest.mark.parametrize(
    ("checkpoint", "why"),
    [
        ([90], "checkpoint must be an object"),
        ({"age": 1}, "a step or an epoch"),
        ({"step": -1}, "step must be an integer"),
        ({"epoch": 1.5}, "epoch must be an integer"),
        ({"step": 1, "path": ""}, "path must be a string"),
        ({"step": 1, "path": "x" * 257}, "path must be a string"),
        ({"step": 1, "age": -2}, "age must be a number"),
    ],
)
def test_a_malformed_checkpoint_refuses_the_report(checkpoint: Any, why: str) -> None:
    with pytest.raises(p.InvalidReport, match=why):
        p.parse_report(wire(checkpoint=checkpoint))


def test_keep_checkpoint_carries_the_last_one_over_a_run_that_has_not_saved() -> None:
    saved = {"step": 90, "time": "2026-01-01T00:00:00Z"}
    stored = {"step": 95, "lastReportTime": "2026-01-01T00:00:05Z", "lastCheckpoint": saved}
    fresh = {"step": 91, "lastReportTime": "2026-01-01T00:01:00Z"}
    assert p.keep_checkpoint(fresh, None, fresh, stored) == {**fresh, "lastCheckpoint": saved}
    # A later run's own checkpoint wins, even an earlier step (it rolled back).
    rolled = {**fresh, "lastCheckpoint": {"step": 80, "time": "2026-01-01T00:00:59Z"}}
    assert p.keep_checkpoint(rolled, stored) == rolled
    # Of several older ones, the newest report's.
    older = {"lastReportTime": "2025-12-31T00:00:00Z", "lastCheckpoint": {"step": 1}}
    kept = p.keep_checkpoint(fresh, older, stored)
    assert kept is not None and kept["lastCheckpoint"] == saved
    assert p.keep_checkpoint(fresh, {"lastReportTime": "x"}) == fresh
    assert p.keep_checkpoint(None, stored) is None
