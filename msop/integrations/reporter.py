"""Training progress, served from inside the Worker 0 pod for msop to pull.

A training script creates one :class:`Reporter` and calls :meth:`Reporter.update` as it
trains, and :meth:`Reporter.checkpoint` after each checkpoint it saves (msop keeps the last
one in ``status.progress.lastCheckpoint``, where a restarted job resumes). msop's operator
reads the result in two ways:

- **while the process runs**, it polls ``GET /progress`` on ``$MSOP_PROGRESS_PORT``, which a
  daemon thread of this module serves;
- **after the process ended**, it reads the final snapshot that :meth:`Reporter.finish` wrote
  to ``$MSOP_PROGRESS_FILE`` (the container's termination message).

Why pull: the pod needs no credentials, no API-server address and no retry logic, and the
operator decides how often it looks (and stops looking when nobody cares). A push from the
pod would put network I/O, and its failures, on the training's path.

Why it never slows training: :meth:`Reporter.update` does no I/O. It either drops the call
(rate limit) or builds a small immutable snapshot and swaps it in with one attribute
assignment; the server thread reads whichever snapshot is current when a request comes.
There is no lock shared with the server and no queue that could grow. The server handles its
few connections in one thread with non-blocking sockets and a per-connection deadline, so a
client that connects and sends nothing is closed after ``io_timeout`` and never delays
another client. Errors are swallowed (logged once): a progress report is not worth a failed
training run.

Outside an msop pod (no ``MSOP_PROGRESS_PORT``) the reporter is disabled: every method is a
cheap no-op, and no thread, socket or file is created. So is it in the processes of the pod
that do not speak for the job: in an msrun job, msrun starts several processes in Worker 0's
pod, all with the same environment, and only the worker of rank 0 reports (``RANK_ID``, which
msrun sets from ``--node_rank``; never the Scheduler, ``MS_ROLE=MS_SCHED``, which msrun gives
``RANK_ID=0`` too).

This module imports only the Python standard library, and can be copied into a training
image on its own.
"""

from __future__ import annotations

import atexit
import json
import logging
import math
import numbers
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from msop.integrations.podhttp import Limits, Request, Response, Server, listen
from msop.integrations.wire import (
    ENV_POD_NAME,
    ENV_POD_UID,
    MAX_CHECKPOINT_PATH,
    MAX_FINAL_BYTES,
    MAX_METRIC_NAME,
    MAX_METRIC_VALUE,
    MAX_METRICS,
    PROGRESS_PATH,
    WIRE_VERSION,
)
from msop.integrations.wire import ENV_PROGRESS_FILE as ENV_FILE
from msop.integrations.wire import ENV_PROGRESS_PORT as ENV_PORT

__all__ = [
    "DEFAULT_IO_TIMEOUT",
    "DEFAULT_MIN_INTERVAL",
    "ENV_FILE",
    "ENV_POD_NAME",
    "ENV_POD_UID",
    "ENV_PORT",
    "MAX_CHECKPOINT_PATH",
    "MAX_FINAL_BYTES",
    "MAX_METRICS",
    "MAX_METRIC_NAME",
    "MAX_METRIC_VALUE",
    "PROGRESS_PATH",
    "WIRE_VERSION",
    "Reporter",
    "metric_name",
    "metric_value",
    "speaks_for_the_job",
]

log = logging.getLogger(__name__)


DEFAULT_MIN_INTERVAL: Final = 1.0
DEFAULT_IO_TIMEOUT: Final = 2.0

_ETA_TIME_CONSTANT = 30.0
"""Seconds: how far back the step-rate average mostly looks (see :class:`_RateEstimator`)."""
_MAX_CONNECTIONS = 8
_MAX_REQUEST_BYTES = 8192
_LISTEN_BACKLOG = 16
_MAX_POD_NAME = 253
_MAX_POD_UID = 64
_METRIC_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-/")

_JSON_SEPARATORS = (",", ":")


def speaks_for_the_job(env: Mapping[str, str]) -> bool:
    """False in the processes of Worker 0's pod that are not rank 0: the Scheduler and the
    other local workers that msrun starts there (a pod of one process has no ``RANK_ID``)."""
    if env.get("MS_ROLE") == "MS_SCHED":
        return False
    return env.get("RANK_ID", "0") in ("", "0")


def metric_name(name: object) -> str | None:
    """A metric name as the wire format allows it, or ``None`` if nothing is left.

    Characters outside ``[A-Za-z0-9_.-/]`` become ``_``; the result is cut to 63 characters.
    """
    text = "".join(ch if ch in _METRIC_NAME_CHARS else "_" for ch in str(name)[:MAX_METRIC_NAME])
    return text if text.strip("_") else None


def metric_value(value: object) -> str:
    """A metric value as the wire format's string of at most 64 characters.

    Real numbers (``float``, NumPy floats, anything with ``__float__`` such as a 0-d array)
    get 6 significant digits (``f"{v:.6g}"``), integers are written in full, booleans as
    ``true``/``false``, strings are passed through; everything is cut to 64 characters.
    """
    if isinstance(value, str):
        text = value
    elif isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, numbers.Integral):
        text = str(int(value))
    else:
        try:
            text = f"{float(value):.6g}"  # type: ignore[arg-type]
        except (TypeError, ValueError):
            text = str(value)
    return text[:MAX_METRIC_VALUE]


def _count(value: object) -> int:
    """A step or epoch count: an int, or a float with an integral value. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"not a count: {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if number.is_integer():
            return int(number)
    raise ValueError(f"not a count: {value!r}")


class _RateEstimator:
    """Seconds per unit of progress (a step, or an epoch), smoothed over time.

    The first unit after the start is ignored: it includes graph compilation and data
    loading, and would make every early estimate far too long. So the first observation is
    the origin, the first one past the origin the baseline, and samples are taken from
    there. Each sample is ``elapsed / units`` since the previous observation that made
    progress, and joins an exponentially weighted average whose weight grows with the
    elapsed time (``1 - exp(-elapsed / time_constant)``): a sample taken 0.1 s after a
    forced update barely counts, one covering a minute almost replaces the average. Progress
    that goes backwards (a rollback to a checkpoint) starts over.
    """

    def __init__(self, time_constant: float = _ETA_TIME_CONSTANT) -> None:
        self._time_constant = time_constant
        self._origin: float | None = None
        self._base: tuple[float, float] | None = None
        self.seconds_per_unit: float | None = None

    def observe(self, now: float, position: float) -> None:
        floor = self._base[1] if self._base is not None else self._origin
        if floor is None or position < floor:
            self._origin, self._base, self.seconds_per_unit = position, None, None
            return
        if self._base is None:
            if position > floor:
                self._base = (now, position)
            return
        base_time, base_position = self._base
        elapsed = now - base_time
        if position == base_position or elapsed <= 0:
            return  # no progress yet: keep the base, so a stall counts in the next sample
        sample = elapsed / (position - base_position)
        if self.seconds_per_unit is None:
            self.seconds_per_unit = sample
        else:
            weight = 1.0 - math.exp(-elapsed / self._time_constant)
            self.seconds_per_unit += weight * (sample - self.seconds_per_unit)
        self._base = (now, position)


@dataclass(frozen=True)
class _Snapshot:
    """One published update. ``fields`` is never mutated once the snapshot is published."""

    at: float
    seq: int
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class _Checkpoint:
    """The last checkpoint the script said it saved, and when (the reporter's clock)."""

    at: float
    step: int | None
    epoch: int | None
    path: str | None


@dataclass
class _Call:
    """The arguments of one update() call (kept when the rate limit drops it)."""

    step: object
    epoch: object
    total_steps: object
    total_epochs: object
    metrics: Mapping[str, object] | None


class Reporter:
    """Reports training progress to msop (see the module docstring for the design).

    Args:
        total_steps: the number of optimizer steps the run will reach (across resumes), if
            known; :meth:`update` can set or change it later.
        total_epochs: the same in epochs.
        min_interval: seconds; :meth:`update` calls closer than this to the last published
            one are dropped, unless ``force=True``.
        env: where to read the ``MSOP_*`` variables; ``os.environ`` by default.
        clock: monotonic seconds, for the rate limit, the ETA and ``age`` (tests inject one).
        io_timeout: seconds a client may take to send its request and read the answer.
        host: the address to serve on; every address of the pod by default.

    Creating an enabled reporter binds the port and starts the server thread; if the port is
    taken it logs one warning and runs without a server (the final file is still written).
    It also registers :meth:`finish` with :mod:`atexit`, so a script that ends without
    calling it (a forgotten call) still leaves its last progress in the termination
    message. A script that ends with an uncaught exception (or leaves the reporter's
    ``with`` block by one) leaves none: the kubelet then keeps the end of the container's
    log there (``FallbackToLogsOnError``, msop's default), the traceback, which the job's
    condition carries after the pod is gone; the operator keeps the last progress it
    polled. A process killed by a signal leaves none either.

    :meth:`update` is meant to be called from one thread (the training loop); reading the
    snapshot from the server thread needs no lock.
    """

    def __init__(
        self,
        total_steps: int | None = None,
        total_epochs: int | None = None,
        *,
        min_interval: float = DEFAULT_MIN_INTERVAL,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        io_timeout: float = DEFAULT_IO_TIMEOUT,
        host: str | None = None,
    ) -> None:
        env = os.environ if env is None else env
        port_text = env.get(ENV_PORT)
        self._on = port_text is not None and speaks_for_the_job(env)
        self._finished = False
        self._snapshot: _Snapshot | None = None
        self._server: Server | None = None
        if not self._on:
            return

        self._min_interval = min_interval
        self._clock = clock
        self._finish_lock = threading.Lock()
        self._warned: set[str] = set()
        self._pod = {
            "name": env.get(ENV_POD_NAME, "")[:_MAX_POD_NAME],
            "uid": env.get(ENV_POD_UID, "")[:_MAX_POD_UID],
        }
        self._file = env.get(ENV_FILE) or None
        self._seq = 0
        self._last_publish: float | None = None
        self._pending: _Call | None = None
        self._step: int | None = None
        self._epoch: int | None = None
        self._total_steps: int | None = None
        self._total_epochs: int | None = None
        self._metrics: dict[str, str] = {}
        self._checkpoint: _Checkpoint | None = None
        self._eta_unit: str | None = None
        self._eta = _RateEstimator()
        self._apply(_Call(None, None, total_steps, total_epochs, None))

        port = self._parse_port(port_text)
        if port is not None:
            try:
                limits = Limits(io_timeout, _MAX_CONNECTIONS, max_head=_MAX_REQUEST_BYTES)
                self._server = Server(
                    listen(port, host=host, backlog=_LISTEN_BACKLOG),
                    _ProgressHandler(self._render),
                    limits,
                    log=_log_server,
                    name="msop-progress",
                )
                self._server.start()
            except (OSError, RuntimeError) as exc:  # port taken; no thread to be had
                log.warning(
                    "msop progress: cannot serve on port %s (%s); training continues without "
                    "the progress endpoint, the final snapshot is still written",
                    port,
                    exc,
                )
        atexit.register(self._at_exit)
        _note_uncaught_exceptions()
        _forget_in_forked_children(self)

    # -- public -------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        """True inside an msop pod that asked for progress (``MSOP_PROGRESS_PORT`` set)."""
        return self._on

    @property
    def port(self) -> int | None:
        """The TCP port being served, or ``None`` (disabled, port taken, or finished)."""
        server = self._server
        return server.port if server is not None and not self._finished else None

    def due(self) -> bool:
        """Whether an :meth:`update` now would be published rather than dropped.

        Lets a caller skip expensive work (reading a loss off the device) on steps whose
        update would be dropped anyway.
        """
        if not self._on or self._finished:
            return False
        last = self._last_publish
        return last is None or self._clock() - last >= self._min_interval

    def update(
        self,
        step: int | None = None,
        epoch: int | None = None,
        *,
        total_steps: int | None = None,
        total_epochs: int | None = None,
        metrics: Mapping[str, object] | None = None,
        force: bool = False,
    ) -> bool:
        """Record progress; return whether it was published.

        Every argument left ``None`` keeps its previous value, and ``metrics`` are merged
        into the ones already reported (the latest value of each name; at most 8 names, the
        first 8 seen). ``step`` is the number of optimizer steps done across the whole run
        (including those before a resume), ``epoch`` the current or last completed epoch.

        A call within ``min_interval`` of the last published update is dropped (its values
        are kept and folded into the next published update or the final snapshot) unless
        ``force`` is set; use ``force`` for rare events such as the end of an epoch.

        Never raises and never blocks: a value it cannot use is ignored, with one warning.
        """
        if not self._on or self._finished:
            return False
        now = self._clock()
        call = _Call(step, epoch, total_steps, total_epochs, metrics)
        last = self._last_publish
        if not force and last is not None and now - last < self._min_interval:
            self._pending = call
            return False
        try:
            self._publish(now, call)
        except Exception as exc:  # a bug here must not stop the training
            self._warn_once("publish", "msop progress: update failed: %r", exc)
            return False
        return True

    def checkpoint(
        self,
        step: int | None = None,
        epoch: int | None = None,
        *,
        path: str | os.PathLike[str] | None = None,
    ) -> bool:
        """Say that a checkpoint was saved: training resumes after ``step`` (optimizer
        steps done in the whole run, as in :meth:`update`) or after ``epoch``. Call it once
        the checkpoint is complete on its storage (after the atomic rename), not before.

        msop keeps it as ``status.progress.lastCheckpoint`` (with the time of this call),
        across restarts of the job until a later run reports one of its own, and ``msop
        status`` shows where a restarted or suspended job resumes from. ``path`` (cut to
        256 characters) is for people reading the status; msop does not open it.

        It is published at once (a checkpoint is rare, and one saved on SIGTERM must
        reach the final snapshot): no rate limit. Returns whether it was published; a call
        with neither a step nor an epoch is ignored. Never raises and never blocks.
        """
        if not self._on or self._finished:
            return False
        try:
            counts = [None if v is None else _count(v) for v in (step, epoch)]
        except ValueError:
            self._warn_once("checkpoint", "msop progress: ignoring checkpoint(%r, %r)", step, epoch)
            return False
        if counts == [None, None]:
            self._warn_once("checkpoint", "msop progress: checkpoint() needs a step or an epoch")
            return False
        text = None if path is None else os.fspath(path)[:MAX_CHECKPOINT_PATH]
        now = self._clock()
        self._checkpoint = _Checkpoint(now, counts[0], counts[1], text or None)
        try:
            self._publish(now, _Call(None, None, None, None, None))
        except Exception as exc:  # a bug here must not stop the training
            self._warn_once("publish", "msop progress: update failed: %r", exc)
            return False
        return True

    def snapshot(self) -> dict[str, Any] | None:
        """The object ``GET /progress`` answers with now, or ``None`` before the first update."""
        if not self._on:
            return None
        snap = self._snapshot
        if snap is None:
            return None
        obj: dict[str, Any] = json.loads(self._body(snap))  # a copy the caller may change
        return obj

    def finish(self) -> None:
        """Write the final snapshot and stop the server. Idempotent, never raises.

        The final snapshot is the last update (dropped ones included) with ``"final": true``,
        without ``age`` and ``estimatedRemainingSeconds``, written in one write to
        ``$MSOP_PROGRESS_FILE`` and kept under 4096 bytes by leaving out metrics from the
        last. Nothing is written if there was never an update.
        """
        self._finish(write=True)

    def _at_exit(self) -> None:
        # An uncaught exception ends the process: its traceback, not the progress, is what
        # the termination message should keep (the kubelet's fallback to the log's end).
        self._finish(write=not _uncaught_exception)

    def _finish(self, *, write: bool) -> None:
        if not self._on:
            return
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
        atexit.unregister(self._at_exit)
        try:
            if self._pending is not None:
                self._publish(self._clock(), self._pending)
            snap = self._snapshot
            if write and snap is not None and self._file is not None:
                self._write_final(snap, self._file)
        except Exception as exc:
            self._warn_once("finish", "msop progress: could not write the final snapshot: %r", exc)
        server, self._server = self._server, None
        if server is not None:
            server.close()

    def __enter__(self) -> Reporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Left by an exception: no final snapshot, so that the log's end (the traceback)
        # becomes the termination message.
        self._finish(write=exc_type is None)

    # -- internals ----------------------------------------------------------------------

    def _disown(self) -> None:
        """In a forked child: this reporter is the parent's; never write or serve from here."""
        self._on = False
        self._finished = True
        server, self._server = self._server, None
        if server is not None:
            server.close_in_child()

    def _warn_once(self, key: str, message: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message, *args)

    def _parse_port(self, text: str | None) -> int | None:
        try:
            port = int(text or "")
        except ValueError:
            port = -1
        if 0 <= port <= 65535:
            return port
        self._warn_once("port", "msop progress: %s=%r is not a port; not serving", ENV_PORT, text)
        return None

    def _apply(self, call: _Call) -> None:
        """Fold one call's arguments into the current state (no publishing)."""
        for attr, value in (
            ("_step", call.step),
            ("_epoch", call.epoch),
            ("_total_steps", call.total_steps),
            ("_total_epochs", call.total_epochs),
        ):
            if value is None:
                continue
            try:
                count = _count(value)
            except ValueError:
                self._warn_once(attr, "msop progress: ignoring %s=%r", attr.lstrip("_"), value)
                continue
            if attr.startswith("_total") and count <= 0:
                continue
            setattr(self, attr, count)
        if call.metrics:
            for raw_name, raw_value in call.metrics.items():
                name = metric_name(raw_name)
                if name is None:
                    self._warn_once("metric-name", "msop progress: bad metric name %r", raw_name)
                elif name in self._metrics or len(self._metrics) < MAX_METRICS:
                    self._metrics[name] = metric_value(raw_value)
                else:
                    self._warn_once(
                        "metric-count", "msop progress: more than %d metrics, %r left out",
                        MAX_METRICS, name,
                    )  # fmt: skip

    def _publish(self, now: float, call: _Call) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and pending is not call:
            self._apply(pending)
        self._apply(call)

        unit, done, total = self._position()
        if unit != self._eta_unit:
            self._eta_unit, self._eta = unit, _RateEstimator()
        fields: dict[str, Any] = {}
        for key, value in (
            ("step", self._step),
            ("totalSteps", self._total_steps),
            ("epoch", self._epoch),
            ("totalEpochs", self._total_epochs),
        ):
            if value is not None:
                fields[key] = value
        if done is not None and total is not None:
            fields["percentComplete"] = round(min(100.0, max(0.0, 100.0 * done / total)), 2)
            self._eta.observe(now, done)
            rate = self._eta.seconds_per_unit
            if rate is not None:
                fields["estimatedRemainingSeconds"] = max(0, round((total - done) * rate))
        fields["metrics"] = [{"name": n, "value": v} for n, v in self._metrics.items()]
        ckpt = self._checkpoint
        if ckpt is not None:
            saved: dict[str, Any] = {
                "age": round(max(0.0, now - ckpt.at), 3),
                "step": ckpt.step,
                "epoch": ckpt.epoch,
                "path": ckpt.path,
            }
            fields["checkpoint"] = {k: v for k, v in saved.items() if v is not None}

        self._seq += 1
        self._snapshot = _Snapshot(now, self._seq, fields)  # the swap the server sees
        self._last_publish = now

    def _position(self) -> tuple[str | None, int | None, int | None]:
        """The unit progress is measured in: steps if their total is known, else epochs."""
        if self._step is not None and self._total_steps is not None:
            return "steps", self._step, self._total_steps
        if self._epoch is not None and self._total_epochs is not None:
            return "epochs", self._epoch, self._total_epochs
        return None, None, None

    def _wire(self, snap: _Snapshot, now: float, *, final: bool) -> dict[str, Any]:
        obj: dict[str, Any] = {"version": WIRE_VERSION, "pod": self._pod, "seq": snap.seq}
        if final:
            obj.update(snap.fields)
            obj.pop("estimatedRemainingSeconds", None)
        else:
            obj["age"] = round(max(0.0, now - snap.at), 3)
            obj.update(snap.fields)
        obj["final"] = final
        return obj

    def _render(self) -> tuple[int, bytes]:
        """Called by the server thread: (status, body) for ``GET /progress``."""
        snap = self._snapshot
        return (204, b"") if snap is None else (200, self._body(snap))

    def _body(self, snap: _Snapshot) -> bytes:
        obj = self._wire(snap, self._clock(), final=False)
        return json.dumps(obj, separators=_JSON_SEPARATORS).encode("ascii")

    def _write_final(self, snap: _Snapshot, path: str) -> None:
        obj = self._wire(snap, 0.0, final=True)
        metrics = list(obj["metrics"])
        while True:
            obj["metrics"] = metrics
            data = json.dumps(obj, separators=_JSON_SEPARATORS).encode("ascii")
            if len(data) < MAX_FINAL_BYTES or not metrics:
                break
            metrics.pop()
        # One small write of a fresh file; no rename: the kubelet bind-mounts this path.
        with open(path, "wb") as f:
            f.write(data)


_reporters: weakref.WeakSet[Reporter] = weakref.WeakSet()
_fork_hook_registered = False
_uncaught_exception = False
_excepthook_installed = False


def _note_uncaught_exceptions() -> None:
    """Chain a ``sys.excepthook`` that notes an uncaught exception (once per process):
    the atexit :meth:`Reporter.finish` then writes no final snapshot."""
    global _excepthook_installed
    if _excepthook_installed:
        return
    _excepthook_installed = True
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        global _uncaught_exception
        _uncaught_exception = True
        previous(exc_type, exc, tb)

    sys.excepthook = hook


def _forget_in_forked_children(reporter: Reporter) -> None:
    """Disown ``reporter`` in processes forked from this one (e.g. data-loading workers).

    A child inherits the listening socket and the atexit registration but not the server
    thread: without this, a child that exits normally would overwrite the final snapshot
    with its stale copy, and would hold the port open after the trainer is gone.
    """
    global _fork_hook_registered
    _reporters.add(reporter)
    if not _fork_hook_registered and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_disown_all)
        _fork_hook_registered = True


def _disown_all() -> None:
    for reporter in list(_reporters):
        reporter._disown()


class _ProgressHandler:
    """``GET /progress`` (a :class:`~msop.integrations.podhttp.Handler`): the snapshot that
    ``render`` gives, 204 before the first one."""

    def __init__(self, render: Callable[[], tuple[int, bytes]]) -> None:
        self._render = render

    def route(self, method: str, path: str) -> Response | None:
        if path != PROGRESS_PATH:
            return Response(404, b"not found\n", "text/plain")
        if method != "GET":
            return Response(405, b"only GET\n", "text/plain", allow="GET")
        return None

    def respond(self, request: Request) -> Response:
        status, body = self._render()
        return Response(status, body)

    def error(self, status: int, message: str) -> Response:
        return Response(status, f"{message}\n".encode(), "text/plain")


def _log_server(message: str) -> None:
    log.warning("msop progress: %s", message)
