"""MindSpore glue: a training ``Callback`` that reports progress to msop.

::

    from msop.integrations.mindspore import ProgressReporter

    model.train(epochs, dataset, callbacks=[ProgressReporter()], initial_epoch=done)

msop does not depend on MindSpore: importing this module does not import it.
``ProgressReporter`` is built on first access (module ``__getattr__``) as a subclass of
``mindspore.train.Callback``, and raises ImportError then if MindSpore is missing.

How it reads MindSpore 2.10's callback parameters (``run_context.original_args()``; see
``Model._train``, ``_train_process`` and ``_train_dataset_sink_process`` in
``mindspore/train/model.py``):

- ``epoch_num`` is the number of epochs *this call* runs, ``epoch - initial_epoch``;
- ``cur_epoch_num`` is the current epoch, 1-based, counting the resumed ones
  (``initial_epoch + 1`` in the first epoch);
- ``cur_step_num`` counts only the steps of this call: it starts at 0 even when training
  resumes with ``initial_epoch``;
- ``batch_num`` is the steps per epoch: the dataset's ``get_dataset_size()`` without sink
  mode, ``sink_size`` with it (on CPU MindSpore falls back to no sink but keeps
  ``batch_num = sink_size``, so then the dataset's size is used).

So the global step is ``initial_epoch * batch_num + cur_step_num`` and the total
``(initial_epoch + epoch_num) * batch_num``, with ``initial_epoch = cur_epoch_num - 1``
taken in the first epoch.
"""

from __future__ import annotations

import functools
import importlib
import logging
import numbers
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from msop.integrations.reporter import DEFAULT_MIN_INTERVAL, Reporter

__all__ = ["ProgressReporter"]

log = logging.getLogger(__name__)

_Hook = Callable[["_ProgressCallback", Any], None]


def _hook(method: _Hook) -> _Hook:
    """Skip the hook when disabled; log (once per hook) instead of raising into training."""

    @functools.wraps(method)
    def run(self: _ProgressCallback, run_context: Any) -> None:
        if not self._on:
            return
        try:
            method(self, run_context)
        except Exception as exc:
            if method.__name__ not in self._failed:
                self._failed.add(method.__name__)
                log.warning("msop progress: %s failed: %r", method.__name__, exc)

    return run


def _param(cb_params: Any, key: str) -> Any:
    # cb_params is a dict whose __getattr__ raises KeyError (not AttributeError) when a key
    # is missing, so getattr(..., default) would not work on it.
    if isinstance(cb_params, Mapping):
        return cb_params.get(key)
    return getattr(cb_params, key, None)


def _int(cb_params: Any, key: str) -> int | None:
    value = _param(cb_params, key)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    return None


def _loss(net_outputs: Any) -> float | None:
    """The loss from a step's outputs: a Tensor, or the first item of a tuple/list
    (``TrainOneStepWithLossScaleCell`` returns ``(loss, overflow, scale)``).

    ``asnumpy()`` waits for the device, which is why callers only ask on steps whose
    update will be published.
    """
    if isinstance(net_outputs, (tuple, list)):
        net_outputs = net_outputs[0] if net_outputs else None
    if net_outputs is None:
        return None
    value = net_outputs.asnumpy() if hasattr(net_outputs, "asnumpy") else net_outputs
    if getattr(value, "size", 1) != 1:
        return None  # not a scalar loss
    if hasattr(value, "item"):
        value = value.item()
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class _ProgressCallback:
    """Reports MindSpore training progress to msop (the logic of ``ProgressReporter``).

    Args:
        reporter: the :class:`~msop.integrations.reporter.Reporter` to feed; by default one
            is created from the environment (disabled outside an msop pod).
        min_interval: seconds between published step updates (for the default reporter).
        env: where the default reporter reads ``MSOP_*`` (``os.environ`` by default).

    The first epoch's start publishes the totals and where training resumed; a step end
    publishes step, epoch and loss at most every ``min_interval`` and reads the loss
    (``asnumpy()``, which synchronizes) only then; an epoch end always publishes; the end
    of evaluation adds its metrics as ``eval_<name>``; the end of training calls
    :meth:`Reporter.finish`, which writes the final snapshot. When the reporter is disabled
    every hook returns at once. One instance serves one ``train``/``fit`` call.
    """

    def __init__(
        self,
        reporter: Reporter | None = None,
        *,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        env: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__()
        self.reporter = (
            reporter if reporter is not None else Reporter(min_interval=min_interval, env=env)
        )
        self._on = self.reporter.enabled
        self._failed: set[str] = set()
        self._started = False
        self._batch_num: int | None = None
        self._steps_before = 0

    @_hook
    def on_train_begin(self, run_context: Any) -> None:
        self._started = False

    @_hook
    def on_train_epoch_begin(self, run_context: Any) -> None:
        if not self._started:
            self._start(run_context.original_args())

    @_hook
    def on_train_step_end(self, run_context: Any) -> None:
        if self.reporter.due():
            self._send(run_context.original_args(), force=False)

    @_hook
    def on_train_epoch_end(self, run_context: Any) -> None:
        self._send(run_context.original_args(), force=True)

    @_hook
    def on_eval_end(self, run_context: Any) -> None:
        cb = run_context.original_args()
        # Model.fit puts the metrics plus eval_loss in eval_results; Model.eval only metrics.
        results = _param(cb, "eval_results") or _param(cb, "metrics")
        if isinstance(results, Mapping) and results:
            metrics = {
                (name if str(name).startswith("eval_") else f"eval_{name}"): value
                for name, value in results.items()
            }
            self.reporter.update(metrics=metrics, force=True)

    @_hook
    def on_train_end(self, run_context: Any) -> None:
        self.reporter.finish()

    def _start(self, cb: Any) -> None:
        self._started = True
        epoch = _int(cb, "cur_epoch_num")
        epoch_num = _int(cb, "epoch_num")
        step = _int(cb, "cur_step_num") or 0
        batch_num = _int(cb, "batch_num")
        if _param(cb, "dataset_sink_mode") is False:
            dataset = _param(cb, "train_dataset")
            size = dataset.get_dataset_size() if hasattr(dataset, "get_dataset_size") else None
            if isinstance(size, int) and size > 0:
                batch_num = size
        self._batch_num = batch_num if batch_num and batch_num > 0 else None
        done_epochs = max(0, epoch - 1) if epoch is not None else 0  # initial_epoch
        # MindSpore's fault-tolerant resume (Ascend, sink mode) starts cur_step_num at the
        # global step instead of 0: then it already holds the resumed epochs.
        if self._batch_num is not None and step < self._batch_num:
            self._steps_before = done_epochs * self._batch_num
        else:
            self._steps_before = 0
        total_epochs = done_epochs + epoch_num if epoch_num else None
        total_steps = total_epochs * self._batch_num if total_epochs and self._batch_num else None
        self.reporter.update(
            step=self._steps_before + step if self._batch_num else None,
            epoch=epoch,
            total_steps=total_steps,
            total_epochs=total_epochs,
            force=True,
        )

    def _send(self, cb: Any, *, force: bool) -> None:
        if not self._started:
            self._start(cb)
        step = _int(cb, "cur_step_num")
        loss = _loss(_param(cb, "net_outputs"))
        self.reporter.update(
            step=self._steps_before + step if step is not None and self._batch_num else None,
            epoch=_int(cb, "cur_epoch_num"),
            metrics={"loss": loss} if loss is not None else None,
            force=force,
        )


if TYPE_CHECKING:
    ProgressReporter = _ProgressCallback


def _build_progress_reporter() -> type:
    try:
        callback_base = importlib.import_module("mindspore.train").Callback
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            "msop.integrations.mindspore.ProgressReporter is a mindspore.train.Callback and "
            "needs MindSpore in this environment (msop does not install it); use "
            "msop.integrations.reporter.Reporter without MindSpore"
        ) from exc
    return type(
        "ProgressReporter",
        (_ProgressCallback, callback_base),
        {
            "__module__": __name__,
            "__qualname__": "ProgressReporter",
            "__doc__": _ProgressCallback.__doc__,
        },
    )


def __getattr__(name: str) -> Any:
    if name == "ProgressReporter":
        cls = _build_progress_reporter()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "ProgressReporter"})
