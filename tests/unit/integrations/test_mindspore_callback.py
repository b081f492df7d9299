"""ProgressReporter, the MindSpore callback, against a fake ``mindspore`` module.

The fake training loop below calls the hooks in the order, and sets the callback parameters
the way, ``Model._train`` and ``Model._train_process`` of MindSpore 2.10 do
(``mindspore/train/model.py``): ``epoch_num = epoch - initial_epoch``, ``cur_step_num``
from 0 in every ``train`` call, ``cur_epoch_num`` from ``initial_epoch + 1``, and a
``dict`` whose ``__getattr__`` raises KeyError for a missing key.
"""

from __future__ import annotations

import json
import logging
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import msop.integrations.mindspore as msi
from msop.integrations.reporter import Reporter
from tests.support.clocks import FakeClock


class FakeCallback:
    """mindspore.train.Callback: a context manager with no-op hooks."""

    def __enter__(self) -> FakeCallback:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def on_train_begin(self, run_context: Any) -> None: ...
    def on_train_epoch_begin(self, run_context: Any) -> None: ...
    def on_train_step_begin(self, run_context: Any) -> None: ...
    def on_train_step_end(self, run_context: Any) -> None: ...
    def on_train_epoch_end(self, run_context: Any) -> None: ...
    def on_train_end(self, run_context: Any) -> None: ...
    def on_eval_begin(self, run_context: Any) -> None: ...
    def on_eval_end(self, run_context: Any) -> None: ...


class CallbackParams(dict[str, Any]):
    """MindSpore's _InternalCallbackParam."""

    def __getattr__(self, key: str) -> Any:
        return self[key]

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class RunContext:
    def __init__(self, params: CallbackParams) -> None:
        self._params = params

    def original_args(self) -> CallbackParams:
        return self._params


class FakeArray:
    def __init__(self, value: float) -> None:
        self.value = value
        self.size = 1

    def item(self) -> float:
        return self.value


class FakeTensor:
    """A loss Tensor that counts its (device-synchronizing) asnumpy() calls."""

    calls = 0

    def __init__(self, value: float) -> None:
        self.value = value

    def asnumpy(self) -> FakeArray:
        FakeTensor.calls += 1
        return FakeArray(self.value)


class FakeDataset:
    def __init__(self, size: int) -> None:
        self.size = size

    def get_dataset_size(self) -> int:
        return self.size


def loss_of(step: int) -> FakeTensor:
    return FakeTensor(1.0 / step)


def train(
    callback: Any,
    epoch: int,
    steps_per_epoch: int,
    *,
    clock: FakeClock,
    initial_epoch: int = 0,
    step_seconds: float = 1.0,
    outputs: Callable[[int], Any] = loss_of,
    batch_num: int | None = None,
    sink_mode: bool = False,
    initial_step: int = 0,
    eval_results: dict[str, Any] | None = None,
    after_first_epoch_begin: Callable[[], None] | None = None,
) -> None:
    """Model.train(epoch, dataset, callbacks=[callback], initial_epoch=...) on a fake."""
    cb = CallbackParams()
    cb.cur_step_num = initial_step
    cb.epoch_num = epoch - initial_epoch
    cb.batch_num = steps_per_epoch if batch_num is None else batch_num
    cb.mode = "train"
    cb.train_dataset = FakeDataset(steps_per_epoch)
    cb.dataset_sink_mode = sink_mode
    run_context = RunContext(cb)
    with callback:
        callback.on_train_begin(run_context)
        for i in range(initial_epoch, epoch):
            cb.cur_epoch_num = i + 1
            callback.on_train_epoch_begin(run_context)
            if after_first_epoch_begin is not None and i == initial_epoch:
                after_first_epoch_begin()
            for _ in range(steps_per_epoch):
                cb.cur_step_num += 1
                callback.on_train_step_begin(run_context)
                clock.advance(step_seconds)
                cb.net_outputs = outputs(cb.cur_step_num)
                callback.on_train_step_end(run_context)
            if eval_results is not None:  # Model._eval_during_train, then _eval_in_fit
                saved = cb.cur_step_num, cb.batch_num, cb.net_outputs
                cb.mode, cb.batch_num, cb.cur_step_num = "eval", 3, 3
                cb.metrics = {k: v for k, v in eval_results.items() if k != "eval_loss"}
                cb.eval_results = dict(eval_results)
                callback.on_eval_end(run_context)
                cb.mode = "train"
                cb.cur_step_num, cb.batch_num, cb.net_outputs = saved
            callback.on_train_epoch_end(run_context)
            cb.pop("metrics", None)
            cb.pop("eval_results", None)
        callback.on_train_end(run_context)


@pytest.fixture
def fake_mindspore(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    mindspore = types.ModuleType("mindspore")
    train_module = types.ModuleType("mindspore.train")
    monkeypatch.setattr(train_module, "Callback", FakeCallback, raising=False)
    monkeypatch.setattr(mindspore, "train", train_module, raising=False)
    monkeypatch.setitem(sys.modules, "mindspore", mindspore)
    monkeypatch.setitem(sys.modules, "mindspore.train", train_module)
    msi.__dict__.pop("ProgressReporter", None)
    FakeTensor.calls = 0
    yield mindspore
    msi.__dict__.pop("ProgressReporter", None)


@pytest.fixture
def progress_reporter(fake_mindspore: types.ModuleType) -> type:
    from msop.integrations.mindspore import ProgressReporter

    return ProgressReporter


def final_of(path: Path) -> dict[str, Any]:
    obj = json.loads(path.read_bytes())
    assert isinstance(obj, dict)
    return obj


def test_the_class_is_a_mindspore_callback_built_once(progress_reporter: type) -> None:
    assert progress_reporter.__name__ == "ProgressReporter"
    assert progress_reporter.__module__ == "msop.integrations.mindspore"
    assert msi.ProgressReporter is progress_reporter  # cached after the first access
    assert "ProgressReporter" in dir(msi)
    assert progress_reporter(env={}).reporter.enabled is False
    assert issubclass(progress_reporter, FakeCallback)


def test_without_mindspore_a_clear_import_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mindspore", None)  # makes `import mindspore` fail
    msi.__dict__.pop("ProgressReporter", None)
    with pytest.raises(ImportError, match=r"needs MindSpore"):
        from msop.integrations.mindspore import ProgressReporter  # noqa: F401
    with pytest.raises(AttributeError):
        msi.NoSuchThing  # noqa: B018


def test_fresh_training(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(env=msop_env, min_interval=0)  # its own Reporter
    assert callback.reporter.enabled
    train(callback, epoch=3, steps_per_epoch=4, clock=clock)
    final = final_of(final_file)
    assert final["step"] == 12 and final["totalSteps"] == 12
    assert final["epoch"] == 3 and final["totalEpochs"] == 3
    assert final["percentComplete"] == 100.0
    assert final["metrics"] == [{"name": "loss", "value": "0.0833333"}]  # 1/12
    assert final["final"] is True
    assert callback.reporter.port is None  # on_train_end finished it


def test_the_loss_is_read_only_for_published_updates(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=2.5))
    train(callback, epoch=3, steps_per_epoch=4, clock=clock, step_seconds=1.0)
    # Published: the start (t=0, no loss), the steps at t=3, 7, 11 (2.5 s apart at least)
    # and the three epoch ends (t=4, 8, 12, forced). The other 9 steps never touched the
    # loss Tensor.
    assert final_of(final_file)["seq"] == 7
    assert FakeTensor.calls == 6


def test_resume_with_initial_epoch_counts_the_resumed_steps(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=0))
    first: list[dict[str, Any] | None] = []
    train(
        callback, epoch=5, steps_per_epoch=4, initial_epoch=2, clock=clock,
        after_first_epoch_begin=lambda: first.append(callback.reporter.snapshot()),
    )  # fmt: skip
    start = first[0]
    assert start is not None
    assert (start["step"], start["totalSteps"]) == (8, 20)
    assert (start["epoch"], start["totalEpochs"]) == (3, 5)
    assert start["percentComplete"] == 40.0
    assert start["metrics"] == []
    final = final_of(final_file)
    assert (final["step"], final["totalSteps"], final["epoch"]) == (20, 20, 5)


def test_fault_tolerant_resume_whose_step_count_already_holds_the_resumed_epochs(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=0))
    train(
        callback, epoch=5, steps_per_epoch=4, initial_epoch=2, initial_step=8,
        sink_mode=True, clock=clock,
    )  # fmt: skip
    final = final_of(final_file)
    assert (final["step"], final["totalSteps"]) == (20, 20)


def test_cpu_sink_fallback_uses_the_dataset_size_for_steps_per_epoch(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    # On CPU, dataset_sink_mode=True falls back to no sink but batch_num stays sink_size.
    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=0))
    train(callback, epoch=2, steps_per_epoch=4, batch_num=2, clock=clock)
    final = final_of(final_file)
    assert (final["step"], final["totalSteps"], final["percentComplete"]) == (8, 8, 100.0)


def test_tuple_outputs_take_the_loss_from_the_first_item(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=0))

    def with_loss_scale(step: int) -> tuple[FakeTensor, FakeTensor, FakeTensor]:
        return FakeTensor(0.25), FakeTensor(0.0), FakeTensor(1024.0)  # loss, overflow, scale

    train(callback, epoch=1, steps_per_epoch=2, clock=clock, outputs=with_loss_scale)
    assert final_of(final_file)["metrics"] == [{"name": "loss", "value": "0.25"}]
    assert FakeTensor.calls == 3  # two steps and the epoch end; only the loss was read


def test_eval_metrics_are_reported_with_an_eval_prefix(
    progress_reporter: type, msop_env: dict[str, str], final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=0))
    train(
        callback, epoch=2, steps_per_epoch=2, clock=clock,
        eval_results={"accuracy": 0.9125, "eval_loss": 0.31},
    )  # fmt: skip
    final = final_of(final_file)
    assert final["step"] == 4  # eval's own step counter did not leak into the progress
    assert final["metrics"] == [
        {"name": "loss", "value": "0.25"},
        {"name": "eval_accuracy", "value": "0.9125"},
        {"name": "eval_loss", "value": "0.31"},
    ]


def test_disabled_outside_msop_costs_no_loss_reads(
    progress_reporter: type, final_file: Path, clock: FakeClock
) -> None:
    callback = progress_reporter(env={"MSOP_PROGRESS_FILE": str(final_file)})
    train(callback, epoch=2, steps_per_epoch=5, clock=clock, eval_results={"acc": 1.0})
    assert FakeTensor.calls == 0
    assert callback.reporter.snapshot() is None
    assert not final_file.exists()


def test_a_failing_hook_is_logged_once_and_training_goes_on(
    progress_reporter: type,
    msop_env: dict[str, str],
    final_file: Path,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def asnumpy(self) -> None:
            raise RuntimeError("device lost")

    callback = progress_reporter(Reporter(env=msop_env, clock=clock, min_interval=0))
    with caplog.at_level(logging.WARNING, logger=msi.__name__):
        train(callback, epoch=2, steps_per_epoch=3, clock=clock, outputs=lambda _: Broken())
    assert [r.getMessage() for r in caplog.records] == [
        "msop progress: on_train_step_end failed: RuntimeError('device lost')",
        "msop progress: on_train_epoch_end failed: RuntimeError('device lost')",
    ]
    final = final_of(final_file)  # on_train_end still finished, with the start's snapshot
    assert final["final"] is True and final["totalSteps"] == 6
