"""Reporter without HTTP: disabled path, rate limit, force, ETA, metrics, the final file."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading
import types
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from msop.integrations import reporter as progress
from msop.integrations.reporter import (
    MAX_FINAL_BYTES,
    MAX_METRICS,
    Reporter,
    metric_name,
    metric_value,
)
from testbed.paths import REPO
from tests.support.clocks import FakeClock

MakeReporter = Callable[..., Reporter]


def read_final(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    assert len(data) < MAX_FINAL_BYTES
    obj = json.loads(data)
    assert isinstance(obj, dict)
    return obj


# -- disabled outside an msop pod ---------------------------------------------------------


def test_without_the_port_variable_everything_is_a_no_op(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    registered: list[object] = []
    monkeypatch.setattr(progress, "atexit", types.SimpleNamespace(register=registered.append))

    def no_socket(port: int, **kwargs: object) -> None:
        raise AssertionError("a disabled reporter must not open a socket")

    monkeypatch.setattr(progress, "listen", no_socket)
    threads = threading.active_count()
    target = tmp_path / "termination-log"
    # Everything but the port: still disabled.
    reporter = Reporter(total_steps=10, env={"MSOP_PROGRESS_FILE": str(target)})

    assert not reporter.enabled
    assert reporter.port is None
    assert not reporter.due()
    assert reporter.update(step=1, metrics={"loss": 1.0}, force=True) is False
    assert reporter.snapshot() is None
    reporter.finish()
    with reporter:
        pass
    assert not target.exists()
    assert registered == []
    assert threading.active_count() == threads


@pytest.mark.parametrize(
    ("env", "speaks"),
    [
        ({}, True),  # Worker 0 of a job with a Scheduler pod: one process, no RANK_ID
        ({"MS_ROLE": "MS_WORKER", "RANK_ID": "0", "DEVICE_ID": "0"}, True),  # msrun, rank 0
        ({"MS_ROLE": "MS_WORKER", "RANK_ID": "1", "DEVICE_ID": "1"}, False),  # its neighbour
        ({"MS_ROLE": "MS_SCHED", "RANK_ID": "0"}, False),  # msrun's Scheduler, also RANK_ID 0
    ],
)
def test_in_an_msrun_pod_only_rank_0_reports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], speaks: bool
) -> None:
    monkeypatch.setattr(progress, "listen", lambda port, **kw: (_ for _ in ()).throw(OSError("no")))
    target = tmp_path / "termination-log"
    reporter = Reporter(env={"MSOP_PROGRESS_PORT": "0", "MSOP_PROGRESS_FILE": str(target), **env})
    assert reporter.enabled is speaks
    reporter.update(step=1, total_steps=2, force=True)
    reporter.finish()
    assert target.exists() is speaks


def test_enabled_reporter_registers_finish_with_atexit_and_unregisters_it(
    monkeypatch: pytest.MonkeyPatch, make_reporter: MakeReporter
) -> None:
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(
        progress,
        "atexit",
        types.SimpleNamespace(
            register=lambda f: calls.append(("register", f)),
            unregister=lambda f: calls.append(("unregister", f)),
        ),
    )
    reporter = make_reporter()
    assert calls == [("register", reporter._at_exit)]
    reporter.finish()
    assert calls == [("register", reporter._at_exit), ("unregister", reporter._at_exit)]


# -- rate limit and force -----------------------------------------------------------------


def test_updates_closer_than_min_interval_are_dropped(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(min_interval=1.0)
    assert reporter.due()  # nothing published yet
    assert reporter.update(step=1) is True
    clock.advance(0.5)
    assert not reporter.due()
    assert reporter.update(step=2) is False
    snap = reporter.snapshot()
    assert snap is not None and snap["step"] == 1 and snap["seq"] == 1
    clock.advance(0.5)
    assert reporter.due()
    assert reporter.update(step=3) is True
    snap = reporter.snapshot()
    assert snap is not None and snap["step"] == 3 and snap["seq"] == 2


def test_force_publishes_inside_the_interval_and_restarts_it(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(min_interval=10.0)
    reporter.update(step=1)
    clock.advance(1)
    assert reporter.update(step=2, epoch=1, force=True) is True
    snap = reporter.snapshot()
    assert snap is not None and (snap["seq"], snap["step"], snap["epoch"]) == (2, 2, 1)
    clock.advance(9.5)  # 10.5 s after the first, 9.5 s after the forced one
    assert reporter.update(step=3) is False


def test_a_dropped_update_is_folded_into_the_next_published_one(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(min_interval=10.0)
    reporter.update(step=1, metrics={"loss": 1.0})
    clock.advance(1)
    reporter.update(step=7, metrics={"loss": 0.5})  # dropped
    reporter.update(epoch=1, force=True)  # says nothing about step or loss
    snap = reporter.snapshot()
    assert snap is not None
    assert (snap["step"], snap["epoch"]) == (7, 1)
    assert snap["metrics"] == [{"name": "loss", "value": "0.5"}]


def test_the_final_snapshot_includes_the_last_dropped_update(
    make_reporter: MakeReporter, clock: FakeClock, final_file: Path
) -> None:
    reporter = make_reporter(total_steps=100, min_interval=10.0)
    reporter.update(step=99, metrics={"loss": 0.2})
    clock.advance(0.1)
    assert reporter.update(step=100, metrics={"loss": 0.1}) is False
    reporter.finish()
    final = read_final(final_file)
    assert (final["seq"], final["step"], final["percentComplete"]) == (2, 100, 100.0)
    assert final["metrics"] == [{"name": "loss", "value": "0.1"}]


def test_values_left_out_keep_their_previous_value(make_reporter: MakeReporter) -> None:
    reporter = make_reporter(min_interval=0)
    reporter.update(step=5, epoch=1, total_steps=50, total_epochs=5, metrics={"loss": 2})
    reporter.update(metrics={"lr": 0.01})
    snap = reporter.snapshot()
    assert snap is not None
    assert (snap["step"], snap["epoch"], snap["totalSteps"], snap["totalEpochs"]) == (5, 1, 50, 5)
    assert snap["metrics"] == [{"name": "loss", "value": "2"}, {"name": "lr", "value": "0.01"}]


def test_update_never_raises_on_bad_values(
    make_reporter: MakeReporter, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = make_reporter(min_interval=0)
    reporter.update(step=3)
    with caplog.at_level(logging.WARNING, logger=progress.__name__):
        assert reporter.update(step="three", epoch=1.0) is True  # type: ignore[arg-type]
        assert reporter.update(step=2.5) is True  # type: ignore[arg-type]
        assert reporter.update(metrics=[("loss", 1)]) is False  # type: ignore[arg-type]
        assert reporter.update(metrics=[("loss", 1)]) is False  # type: ignore[arg-type]
    snap = reporter.snapshot()
    assert snap is not None and (snap["step"], snap["epoch"]) == (3, 1)
    messages = [r.getMessage() for r in caplog.records]
    assert sum("ignoring step" in m for m in messages) == 1  # once per kind of problem
    assert sum("update failed" in m for m in messages) == 1


# -- percent and ETA ------------------------------------------------------------------------


def test_percent_from_steps_when_known_else_from_epochs(make_reporter: MakeReporter) -> None:
    reporter = make_reporter(total_epochs=20, min_interval=0)
    reporter.update(epoch=9)
    snap = reporter.snapshot()
    assert snap is not None and snap["percentComplete"] == 45.0 and "totalSteps" not in snap
    reporter.update(step=30, total_steps=200)
    snap = reporter.snapshot()
    assert snap is not None and snap["percentComplete"] == 15.0
    reporter.update(step=250)  # more steps than planned
    snap = reporter.snapshot()
    assert snap is not None and snap["percentComplete"] == 100.0


def test_no_percent_and_no_eta_without_totals(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(min_interval=0)
    for step in range(5):
        reporter.update(step=step, epoch=1)
        clock.advance(1)
    snap = reporter.snapshot()
    assert snap is not None
    assert "percentComplete" not in snap and "estimatedRemainingSeconds" not in snap


def test_eta_ignores_the_first_step_and_follows_the_step_rate(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(total_steps=101, min_interval=1.0)

    def eta() -> Any:
        snap = reporter.snapshot()
        assert snap is not None
        return snap.get("estimatedRemainingSeconds")

    reporter.update(step=0)  # start (the origin)
    assert eta() is None
    clock.advance(50)  # the first step includes 50 s of compilation
    reporter.update(step=1)
    assert eta() is None  # the baseline: the first step is not a sample
    clock.advance(10)
    reporter.update(step=11)  # 10 steps in 10 s
    assert eta() == 90  # 1 s/step, 90 steps left
    clock.advance(20)
    reporter.update(step=21)  # 10 steps in 20 s: 2 s/step
    weight = 1 - math.exp(-20 / progress._ETA_TIME_CONSTANT)
    assert eta() == round(80 * (1 + weight * (2 - 1)))
    clock.advance(5)
    reporter.update(step=21)  # no progress: no sample, the stall counts in the next one
    clock.advance(5)
    reporter.update(step=26)  # 5 steps in 10 s
    per_step = 1 + weight * (2 - 1)
    per_step += (1 - math.exp(-10 / progress._ETA_TIME_CONSTANT)) * (2 - per_step)
    assert eta() == round(75 * per_step)


def test_eta_starts_over_when_progress_goes_back(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(total_steps=100, min_interval=0)
    for step in (0, 1, 11):
        reporter.update(step=step)
        clock.advance(10)
    snap = reporter.snapshot()
    assert snap is not None and "estimatedRemainingSeconds" in snap
    reporter.update(step=5)  # rolled back to a checkpoint
    snap = reporter.snapshot()
    assert snap is not None and "estimatedRemainingSeconds" not in snap


def test_eta_in_epochs_when_only_epochs_are_known(
    make_reporter: MakeReporter, clock: FakeClock
) -> None:
    reporter = make_reporter(total_epochs=10, min_interval=0)
    for epoch in (0, 1, 2, 3):
        reporter.update(epoch=epoch, force=True)
        clock.advance(60)
    snap = reporter.snapshot()
    assert snap is not None and snap["estimatedRemainingSeconds"] == 7 * 60


# -- metrics --------------------------------------------------------------------------------


class _Scalar:
    """Like a 0-d NumPy array: only ``__float__``."""

    def __float__(self) -> float:
        return 0.125


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.021300001, "0.0213"),
        (1234567.891, "1.23457e+06"),
        (1e-9, "1e-09"),
        (float("nan"), "nan"),
        (Fraction(1, 3), "0.333333"),
        (_Scalar(), "0.125"),
        (42, "42"),
        (12345678901234567890, "12345678901234567890"),
        (True, "true"),
        ("warmup", "warmup"),
        ("x" * 100, "x" * 64),
        ([1, 2], "[1, 2]"),
    ],
)
def test_metric_values(value: object, text: str) -> None:
    assert metric_value(value) == text


@pytest.mark.parametrize(
    ("name", "clean"),
    [
        ("loss", "loss"),
        ("eval/top-1.acc_2", "eval/top-1.acc_2"),
        ("val loss", "val_loss"),
        ("ünïcode:x", "_n_code_x"),
        ("n" * 80, "n" * 63),
        ("", None),
        ("  ", None),
        (7, "7"),
    ],
)
def test_metric_names(name: object, clean: str | None) -> None:
    assert metric_name(name) == clean


def test_at_most_eight_metrics_the_first_seen_and_updated_in_place(
    make_reporter: MakeReporter, caplog: pytest.LogCaptureFixture
) -> None:
    reporter = make_reporter(min_interval=0)
    with caplog.at_level(logging.WARNING, logger=progress.__name__):
        reporter.update(metrics={f"m{i}": i for i in range(MAX_METRICS + 3)})
        reporter.update(metrics={"m0": "again", "new": 1, "": 2})
    snap = reporter.snapshot()
    assert snap is not None
    names = [m["name"] for m in snap["metrics"]]
    assert names == [f"m{i}" for i in range(MAX_METRICS)]
    assert snap["metrics"][0] == {"name": "m0", "value": "again"}
    assert len(caplog.records) == 2  # too many metrics (once), a bad name (once)


# -- the final snapshot ---------------------------------------------------------------------


def test_final_snapshot_is_the_last_update_marked_final_without_age_or_eta(
    make_reporter: MakeReporter, clock: FakeClock, final_file: Path, msop_env: dict[str, str]
) -> None:
    reporter = make_reporter(total_steps=100, min_interval=0)
    for step in (0, 1, 11, 21):
        reporter.update(step=step, epoch=1, metrics={"loss": 1 / (step + 1)})
        clock.advance(10)
    live = reporter.snapshot()
    assert live is not None and "estimatedRemainingSeconds" in live
    reporter.finish()
    final = read_final(final_file)
    expected = {k: v for k, v in live.items() if k not in ("age", "estimatedRemainingSeconds")}
    assert final == {**expected, "final": True}
    assert final["pod"] == {"name": msop_env["MSOP_POD_NAME"], "uid": msop_env["MSOP_POD_UID"]}
    assert list(final)[:3] == ["version", "pod", "seq"]


def test_final_file_stays_under_4096_bytes_by_dropping_metrics(
    make_reporter: MakeReporter, final_file: Path
) -> None:
    reporter = make_reporter(total_steps=10, total_epochs=1)
    # JSON escapes each of these as a surrogate pair: 12 bytes per character.
    wide = "\U0001f600" * 64
    reporter.update(step=10, metrics={f"m{i}_" + "n" * 59: wide for i in range(MAX_METRICS)})
    live = reporter.snapshot()
    assert live is not None and len(live["metrics"]) == MAX_METRICS  # the endpoint has them all
    reporter.finish()
    final = read_final(final_file)
    kept = final["metrics"]
    assert 0 < len(kept) < MAX_METRICS
    assert kept == live["metrics"][: len(kept)]  # the first ones, intact
    assert final["step"] == 10 and final["final"] is True


def test_finish_is_idempotent(make_reporter: MakeReporter, final_file: Path) -> None:
    reporter = make_reporter()
    reporter.update(step=1)
    reporter.finish()
    assert final_file.exists()
    final_file.unlink()
    reporter.finish()
    assert not final_file.exists()
    assert reporter.update(step=2, force=True) is False  # finished: no more updates
    assert not reporter.due()


def test_nothing_is_written_without_any_update(
    make_reporter: MakeReporter, final_file: Path
) -> None:
    make_reporter().finish()
    assert not final_file.exists()


def test_a_final_file_that_cannot_be_written_is_a_warning(
    make_reporter: MakeReporter,
    msop_env: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {**msop_env, "MSOP_PROGRESS_FILE": str(tmp_path / "missing-dir" / "log")}
    reporter = make_reporter(env=env)
    reporter.update(step=1)
    with caplog.at_level(logging.WARNING, logger=progress.__name__):
        reporter.finish()
    assert "could not write the final snapshot" in caplog.text


def test_context_manager_finishes(make_reporter: MakeReporter, final_file: Path) -> None:
    with make_reporter(total_epochs=2) as reporter:
        assert reporter.enabled
        reporter.update(epoch=2)
    assert read_final(final_file)["percentComplete"] == 100.0


def test_a_with_block_left_by_an_exception_leaves_no_final_snapshot(
    make_reporter: MakeReporter, final_file: Path
) -> None:
    # The kubelet then keeps the log's end (the traceback) as the termination message.
    with pytest.raises(ValueError), make_reporter(total_epochs=2) as reporter:
        reporter.update(epoch=1)
        raise ValueError("bad batch")
    assert not final_file.exists()


@pytest.mark.parametrize(
    ("ending", "written"),
    [("pass", True), ("raise RuntimeError('NaN loss')", False), ("r.finish()", True)],
    ids=["forgotten-finish", "uncaught-exception", "explicit-finish"],
)
def test_at_exit_the_final_snapshot_is_written_unless_an_exception_ends_the_script(
    msop_env: dict[str, str], final_file: Path, ending: str, written: bool
) -> None:
    script = (
        "from msop.integrations.reporter import Reporter\n"
        "r = Reporter(total_epochs=2)\n"
        "r.update(epoch=1, force=True)\n"
        f"{ending}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env={**os.environ, **msop_env,
                                             "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (proc.returncode == 0) is (ending != "raise RuntimeError('NaN loss')"), proc.stderr
    assert final_file.exists() is written, proc.stderr
    if not written:
        assert "RuntimeError: NaN loss" in proc.stderr  # the traceback, for the log's end


def test_a_checkpoint_is_published_at_once_and_reaches_the_final_snapshot(
    make_reporter: MakeReporter, clock: FakeClock, final_file: Path
) -> None:
    reporter = make_reporter(min_interval=10.0)
    reporter.update(step=5, epoch=1)
    clock.advance(1.0)
    assert reporter.checkpoint(step=5, epoch=1, path=Path("/ckpt/step-5.ckpt")) is True
    snap = reporter.snapshot()
    assert snap is not None and snap["checkpoint"] == {
        "age": 0.0, "step": 5, "epoch": 1, "path": "/ckpt/step-5.ckpt",
    }  # fmt: skip
    clock.advance(2.5)
    reporter.update(step=7, force=True)
    snap = reporter.snapshot()
    assert snap is not None and snap["checkpoint"]["age"] == 2.5
    reporter.finish()
    assert read_final(final_file)["checkpoint"] == {"age": 2.5, "step": 5, "epoch": 1,
                                                    "path": "/ckpt/step-5.ckpt"}  # fmt: skip


def test_a_bad_checkpoint_is_ignored_and_never_raises(make_reporter: MakeReporter) -> None:
    reporter = make_reporter(min_interval=0)
    assert reporter.checkpoint() is False
    assert reporter.checkpoint(step="x") is False  # type: ignore[arg-type]
    assert reporter.checkpoint(epoch=2, path="p" * 300) is True
    snap = reporter.snapshot()
    assert snap is not None and snap["checkpoint"]["path"] == "p" * 256
    assert Reporter(env={}).checkpoint(step=1) is False  # no-op outside msop
