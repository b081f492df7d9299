"""The keeper: runs a pod's training command and keeps the end of its output, so that a
restart in place does not lose it.

A restart in place restarts every container of a pod where it is, and the kubelet removes
the old containers with their logs (``kubectl logs --previous`` finds nothing). So in a pod
that msop restarts in place, the training container's command runs under this script::

    python3 keeper.py DIR CONTAINER -- COMMAND [ARG...]

It runs COMMAND as its child, passes its standard output and error through unchanged (the
container's log is what it would be without the keeper), and appends the same bytes to
``DIR/run.log``, keeping the last :data:`SEGMENT` to twice :data:`SEGMENT` bytes of the run
(``run.log.1`` holds the segment before). ``DIR/run.json`` says which container, when it
started and, once the command ended by itself, when and how (exit code, signal); the
keeper holds an exclusive ``flock`` on ``DIR/run.lock`` while it runs. After a
restart of the pod's containers, the msop-agent sidecar (which starts before the training
container) prints the stopped run from these files into its own log, where ``msop logs
--previous`` and ``kubectl logs <pod> -c msop-agent`` find it.

It is the container's PID 1: it forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and
SIGUSR2 to the child, and exits with the child's code, or 128 + N when a signal N ended the
child (as a shell does, and as the kubelet reports a killed process), so the pod's restart
rules see the codes they would see without it. A COMMAND that cannot be started exits 127.

When msop restarts the pod in place for a failure elsewhere in the job, the msop-agent
writes ``DIR/stop`` (``{"generation": G, "grace": SECONDS}``) as it accepts the restart,
before it exits for the kubelet to restart every container. The keeper looks for that file
every :data:`STOP_POLL` seconds: it sends SIGTERM to the child at once, and SIGKILL to every
process of the container once ``grace`` has passed, then ends with the child's code. The
run is stopped as soon as msop asked, not once the kubelet noticed the agent's exit (up to
a second later) and gave its own SIGTERM two seconds (the least grace a restart of every
container gives); and a longer ``grace`` is honoured, since the agent waits for the keeper
to end before it exits. ``run.json`` then says the run was stopped for that restart.

Nothing here may slow or fail the training: a write error to DIR stops the keeping (one
line on standard error), never the passing through. On a terminal (``tty: true``) the
command replaces the keeper and nothing is kept.

This file is copied into the pod by the msop-barrier init container and run by the
training image's own Python: standard library only, and no import from msop.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Final

SEGMENT: Final = 512 * 1024
"""Bytes per kept segment: the kept end of a run is between one and two of them."""
FORWARDED: Final = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
LOG: Final = "run.log"
OLDER: Final = "run.log.1"
LOCK: Final = "run.lock"
INFO: Final = "run.json"
STOP: Final = "stop"
STOP_POLL: Final = 0.1
"""Seconds between two looks for :data:`STOP`."""
DRAIN_SECONDS: Final = 2.0
"""After the child ended, how long its output may still flow (a process it left behind may
hold the pipes open)."""
_CHUNK = 65536


class Kept:
    """The end of the run's output in ``directory``, appended from two threads."""

    def __init__(self, directory: str) -> None:
        self._dir = directory
        self._info: dict[str, object] = {}
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._size = 0
        self._broken = False

    def open(self, container: str) -> None:
        """Start a new run: the files of the run before are replaced."""
        try:
            for name in (OLDER, LOG):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self._dir, name))
            self._file = open(os.path.join(self._dir, LOG), "ab")  # noqa: SIM115
            self._info = {"container": container, "started": time.time()}
            _write_whole(os.path.join(self._dir, INFO), json.dumps(self._info).encode())
        except OSError as exc:
            self._stop(exc)

    def add(self, data: bytes) -> None:
        with self._lock:
            if self._file is None:
                return
            try:
                if self._size + len(data) > SEGMENT and self._size > 0:
                    self._file.close()
                    os.replace(os.path.join(self._dir, LOG), os.path.join(self._dir, OLDER))
                    self._file = open(os.path.join(self._dir, LOG), "ab")  # noqa: SIM115
                    self._size = 0
                self._file.write(data[-2 * SEGMENT :])
                self._file.flush()
                self._size += len(data)
            except OSError as exc:
                self._stop(exc)

    def ended(self, code: int, signum: int | None, stopped_for: int | None = None) -> None:
        """The command ended by itself, or was stopped by the keeper for msop's restart to
        generation ``stopped_for``: ``run.json`` says how (a run killed with its container
        says nothing)."""
        with self._lock:
            if self._file is None:
                return
            ended: dict[str, object] = {"ended": time.time(), "exit_code": code, "signal": signum}
            if stopped_for is not None:
                ended["stopped_for"] = stopped_for
            try:
                _write_whole(
                    os.path.join(self._dir, INFO), json.dumps({**self._info, **ended}).encode()
                )
            except OSError as exc:
                self._stop(exc)

    def _stop(self, exc: OSError) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
        self._file = None
        if not self._broken:
            self._broken = True
            _say(f"cannot keep the run's output in {self._dir} ({exc}); the run goes on")


def _write_whole(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _say(line: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"msop keeper: {line}\n".encode())


def _pump(source: IO[bytes], fd: int, kept: Kept) -> None:
    """Copy the child's stream to ``fd`` and to the kept run, until it ends."""
    reader = source.fileno()
    while True:
        try:
            data = os.read(reader, _CHUNK)
        except OSError:
            return
        if not data:
            return
        kept.add(data)  # first: what the log shows is kept when a kill comes
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                time.sleep(0.01)
            except OSError:
                break  # our own output is gone: keep reading, so the child never blocks


def read_stop(directory: str) -> tuple[int, float] | None:
    """``(generation, grace)`` of the agent's stop request in ``directory``, if any (a
    file that cannot be read as one counts as a request with no grace)."""
    try:
        with open(os.path.join(directory, STOP), "rb") as f:
            data = f.read(4096)
    except FileNotFoundError:
        return None
    except OSError:
        return (0, 0.0)
    try:
        obj = json.loads(data)
        generation, grace = int(obj["generation"]), float(obj["grace"])
    except (ValueError, KeyError, TypeError, RecursionError):
        return (0, 0.0)
    return (generation, grace if 0.0 <= grace < 86400.0 else 0.0)


class Stopper:
    """Stops the run when the agent asks (:data:`STOP`): SIGTERM to the child, then, once
    the grace has passed, SIGKILL to every process of the container."""

    def __init__(self, directory: str, child: subprocess.Popen[bytes]) -> None:
        self._dir = directory
        self._child = child
        self.ended = threading.Event()
        """Set once the child has ended."""
        self.generation: int | None = None
        """The generation of the restart the run was stopped for."""

    def watch(self, poll: float = STOP_POLL) -> None:
        """Until the child ends: look for the request, then stop the run."""
        while not self.ended.wait(poll):
            request = read_stop(self._dir)
            if request is None:
                continue
            self.generation, grace = request
            _say(
                f"msop restarts the pod in place (generation {self.generation}): SIGTERM to the "
                f"run, and SIGKILL after {grace:g}s"
            )
            _forward(self._child, signal.SIGTERM)
            if not self.ended.wait(grace):
                _say(f"the run did not end within {grace:g}s: SIGKILL")
                kill_the_rest(self._child)
            return


def kill_the_rest(child: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL the child and, as the container's PID 1, every other process in it (a
    launcher's workers left behind)."""
    if child is not None:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
    if os.getpid() == 1:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def run(directory: str, container: str, command: Sequence[str]) -> int:
    """Run ``command``, keep the end of its output in ``directory``; its exit code."""
    lock_fd: int | None = None
    try:
        lock_fd = os.open(os.path.join(directory, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
    except OSError as exc:
        _say(f"cannot lock {directory} ({exc}); the run's output is not kept")
        lock_fd = None
    kept = Kept(directory)
    if lock_fd is not None:
        kept.open(container)
    with contextlib.suppress(OSError):  # a request for the run before this one
        os.unlink(os.path.join(directory, STOP))
    try:
        child = subprocess.Popen(list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        message = f"cannot run {command[0]!r}: {exc}"
        _say(message)
        kept.add(f"msop keeper: {message}\n".encode())
        return 127
    for signum in FORWARDED:
        signal.signal(signum, lambda n, _frame: _forward(child, n))
    assert child.stdout is not None and child.stderr is not None
    pumps = [
        threading.Thread(target=_pump, args=(child.stdout, 1, kept), daemon=True),
        threading.Thread(target=_pump, args=(child.stderr, 2, kept), daemon=True),
    ]
    for pump in pumps:
        pump.start()
    stopper = Stopper(directory, child)
    threading.Thread(target=stopper.watch, daemon=True).start()
    while True:
        try:
            returncode = child.wait()
            break
        except InterruptedError:
            continue
    stopper.ended.set()
    if stopper.generation is not None:  # what it left behind would hold the pipes open
        kill_the_rest(None)
    deadline = time.monotonic() + DRAIN_SECONDS
    for pump in pumps:
        pump.join(max(0.0, deadline - time.monotonic()))
    ended_by: int | None = -returncode if returncode < 0 else None
    kept.ended(_exit_code(returncode), ended_by, stopper.generation)
    return _exit_code(returncode)


def _forward(child: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        child.send_signal(signum)


def main(argv: Sequence[str]) -> int:
    if len(argv) < 4 or argv[2] != "--":
        _say("usage: keeper.py DIR CONTAINER -- COMMAND [ARG...]")
        return 127
    directory, container, command = argv[0], argv[1], argv[3:]
    if os.isatty(1):
        try:
            os.execvp(command[0], list(command))
        except OSError as exc:
            _say(f"cannot run {command[0]!r}: {exc}")
            return 127
    return run(directory, container, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
