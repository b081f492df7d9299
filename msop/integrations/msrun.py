"""Run a training script under MindSpore's ``msrun`` in a pod of an msrun MSJob, so that
the pod's exit says how its workers ended.

In the ``mindspore`` container of a job with ``spec.msrun``::

    command: ["python", "-m", "msop.integrations.msrun", "/opt/train/train.py", "--epochs", "3"]

msop gives every pod of such a job ``MS_WORKER_NUM`` (the workers of the whole job),
``MS_LOCAL_WORKER`` (the workers of this pod), ``MS_NODE_RANK`` (the pod's index),
``MS_SCHED_HOST`` (in pod 0 its own IP, elsewhere the ClusterIP of the Service in front of
pod 0) and ``MS_SCHED_PORT``. The launcher runs msrun with them::

    msrun --worker_num=$MS_WORKER_NUM --local_worker_num=$MS_LOCAL_WORKER
          --node_rank=$MS_NODE_RANK --master_addr=$MS_SCHED_HOST
          --master_port=$MS_SCHED_PORT --join=True [your msrun flags] <watcher> train.py ...

Options before the script (``--log_dir=/logs``, ``--cluster_time_out=300``, ...) go to
msrun; the six above are msop's and may not be given.

Why a launcher: msrun turns every failure of a local worker into its own exit code 1
(it kills the other workers and raises ``RuntimeError``), so a worker killed by the
kernel's OOM killer looks like a script error, and ``restartPolicy: ExitCode`` would fail
the job instead of restarting it. Here each process msrun starts (the workers, and in pod 0
the Scheduler) runs under a watcher, this file with ``--watch``: it runs the script, records
how it ended (``<dir>/<pid>.json``) and ends the same way, with the same code or by the same
signal, so that msrun sees what it would have seen. The launcher polls those records while
msrun runs; a watcher gone without one was SIGKILLed itself (it passes every other signal
on), which counts as its process killed by SIGKILL. The first failure decides, at once
(without waiting for msrun, whose Scheduler can take half a minute to give up, while the
peers in other pods exit 1 meanwhile):

- a process killed by signal N (a kill, the OOM killer): the pod exits 128+N, which
  ``ExitCode`` retries, as for a single-process pod killed by the same signal;
- a process that exited with code N: the pod exits N (a script error stays permanent);
- msrun failed with no failed process (wrong flags, say): the pod exits with msrun's code;
- msrun itself killed by signal N: the pod exits 128+N, as for a killed worker.

The launcher is the container's main process: if it is killed itself, the container
ends as any killed process does (137 for SIGKILL) and leaves no line of its own.

The launcher kills what still runs, and writes one line saying which process ended how
(``local worker 1 (rank 3) was killed by signal 9 (SIGKILL)``) to the termination
message (``MSOP_TERMINATION_FILE``, which msop sets to the container's
``terminationMessagePath``), which msop puts into the job's events and conditions. On
SIGTERM (the pod is deleted: the job restarts, or is deleted) it passes SIGTERM on to every
process, waits for them up to ``MSOP_MSRUN_GRACE`` seconds (default 10), and exits 143.

Standard library only, like :mod:`msop.integrations.reporter`: it runs in the training
image, whatever else that holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from msop.integrations.wire import (
    ENV_LOCAL_WORKER,
    ENV_MSRUN,
    ENV_NODE_RANK,
    ENV_SCHED_HOST,
    ENV_SCHED_PORT,
    ENV_TERMINATION_FILE,
    ENV_WORKER_NUM,
)
from msop.integrations.wire import ENV_MSRUN_GRACE as ENV_GRACE

__all__ = [
    "ENV_LOCAL_WORKER",
    "ENV_MSRUN",
    "ENV_NODE_RANK",
    "ENV_TERMINATION_FILE",
    "Ending",
    "main",
    "msrun_command",
]

DEFAULT_TERMINATION_FILE: Final = "/dev/termination-log"
DEFAULT_GRACE: Final = 10.0
#: The msrun flags msop sets from the MSJob.
OWN_FLAGS: Final = (
    "--worker_num",
    "--local_worker_num",
    "--node_rank",
    "--master_addr",
    "--master_port",
    "--join",
)
_POLL: Final = 0.2
_USAGE: Final = (
    "usage: python -m msop.integrations.msrun [msrun flags] script.py [script args]\n"
    "       (in a pod of an MSJob with spec.msrun; see the module's documentation)"
)


@dataclass(frozen=True)
class Ending:
    """How one process that msrun started ended, as its watcher recorded it."""

    pid: int
    role: str
    local_rank: int | None
    rank: int | None
    exit_code: int | None
    signal: int | None
    at: float
    watcher: int | None = None

    @property
    def failed(self) -> bool:
        return self.signal is not None or (self.exit_code or 0) != 0

    @property
    def pod_exit_code(self) -> int:
        """What the pod exits with for this ending: 128+N for signal N, else the code."""
        if self.signal is not None:
            return 128 + self.signal
        return self.exit_code or 0

    def describe(self) -> str:
        if self.role == "MS_SCHED":
            who = "the Scheduler"
        else:
            rank = f" (rank {self.rank})" if self.rank is not None else ""
            local = self.local_rank if self.local_rank is not None else "?"
            who = f"local worker {local}{rank}"
        if self.signal is not None:
            return f"{who} was killed by signal {self.signal} ({_signal_name(self.signal)})"
        return f"{who} exited with code {self.exit_code}"

    @classmethod
    def parse(cls, text: str) -> Ending | None:
        try:
            data = json.loads(text)
            return cls(
                pid=int(data["pid"]),
                role=str(data.get("role") or ""),
                local_rank=_opt_int(data.get("localRank")),
                rank=_opt_int(data.get("rank")),
                exit_code=_opt_int(data.get("exitCode")),
                signal=_opt_int(data.get("signal")),
                at=float(data["at"]),
                watcher=_opt_int(data.get("watcher")),
            )
        except (ValueError, KeyError, TypeError):
            return None


def _opt_int(value: object) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# --- the launcher ----------------------------------------------------------------------------


class UsageError(Exception):
    """The launcher cannot run: not in an msrun pod, or a flag msop owns was given."""


def msrun_command(
    env: Mapping[str, str], argv: Sequence[str], watch_dir: str, python: str = sys.executable
) -> list[str]:
    """The msrun command line for this pod: msop's six flags from ``env``, the user's msrun
    flags (``argv`` up to the script), then the watcher running the script."""
    missing = [
        name
        for name in (
            ENV_WORKER_NUM,
            ENV_LOCAL_WORKER,
            ENV_NODE_RANK,
            ENV_SCHED_HOST,
            ENV_SCHED_PORT,
        )
        if not env.get(name)
    ]
    if missing:
        raise UsageError(
            f"{', '.join(missing)} not set: run this in a pod of an MSJob with spec.msrun "
            "(msop sets them)"
        )
    flags: list[str] = []
    rest = list(argv)
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        name = flag.split("=", 1)[0]
        if name in OWN_FLAGS:
            raise UsageError(f"{name} is set by msop from the MSJob (spec.msrun, replicas)")
        flags.append(flag)
        if "=" not in flag and len(rest) > 1:
            flags.append(rest.pop(0))  # "--log_dir /logs": every msrun flag takes a value
    if not rest:
        raise UsageError("no training script given")
    msrun = shlex.split(env.get(ENV_MSRUN) or "") or [
        python,
        "-m",
        "mindspore.parallel.cluster.run",
    ]
    return [
        *msrun,
        f"--worker_num={env[ENV_WORKER_NUM]}",
        f"--local_worker_num={env[ENV_LOCAL_WORKER]}",
        f"--node_rank={env[ENV_NODE_RANK]}",
        f"--master_addr={env[ENV_SCHED_HOST]}",
        f"--master_port={env[ENV_SCHED_PORT]}",
        "--join=True",
        *flags,
        # msrun runs "python <file.py> args"; the watcher is this very file.
        str(Path(__file__).resolve()),
        "--watch",
        watch_dir,
        python,
        *rest,
    ]


def read_endings(directory: Path) -> list[Ending]:
    """The watchers' records so far, oldest first."""
    endings = []
    for path in directory.glob("*.json"):
        with contextlib.suppress(OSError):
            ending = Ending.parse(path.read_text())
            if ending is not None:
                endings.append(ending)
    return sorted(endings, key=lambda e: (e.at, e.pid))


@dataclass(frozen=True)
class _Watcher:
    """A watcher as it started: its process group and whom it runs."""

    pid: int
    pgid: int
    role: str
    local_rank: int | None
    rank: int | None
    child: int | None

    def killed(self) -> Ending:
        """How it ended when it is gone without a record: only an uncatchable signal ends
        a watcher so (it passes every other one on to its process and records the end),
        so SIGKILL, and its process group goes with it."""
        return Ending(self.pid, self.role, self.local_rank, self.rank, None,
                      int(signal.SIGKILL), time.time(), self.pid)  # fmt: skip


def _watchers(directory: Path) -> dict[int, _Watcher]:
    """Every watcher that started, by pid. msrun puts each worker in a session of its own;
    the Scheduler shares msrun's process group."""
    found = {}
    for path in directory.glob("*.start"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(path.read_text())
            pid = int(path.stem)
            role, local, rank = str(data.get("role") or ""), data.get("localRank"), data.get("rank")
            found[pid] = _Watcher(pid, int(data["pgid"]), role, _opt_int(local), _opt_int(rank),
                                  _opt_int(data.get("child")))  # fmt: skip
    return found


def first_failure(directory: Path) -> Ending | None:
    """The earliest failure so far: a recorded one, or a watcher gone without a record
    (SIGKILLed). Watchers are looked at before the records are read, so that one which
    recorded its end and exited is never taken for killed.

    A watcher killed alone leaves its script running (msrun then kills every other
    worker's process group, watcher and script at once): so among watchers gone without a
    record, the ones whose script still runs were the first; the others only count if
    nothing else failed."""
    dead = [w for w in _watchers(directory).values() if not _alive(w.pid)]
    endings = read_endings(directory)
    recorded = {e.watcher for e in endings}
    vanished = [w for w in dead if w.pid not in recorded]
    first = [w for w in vanished if w.child is not None and _alive(w.child)]
    failures = [e for e in endings if e.failed] + [w.killed() for w in first]
    if not failures:
        failures = [w.killed() for w in vanished]
    return min(failures, key=lambda e: (e.at, e.pid), default=None)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not: its parent, msrun, has not reaped it yet)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it came to us (we are the pod's init)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _stop(directory: Path, msrun: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to every watcher (each passes it on to its process), then wait for them."""
    watchers = _watchers(directory)
    for pid in watchers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in watchers):
        time.sleep(_POLL)


def _kill_all(directory: Path, msrun: subprocess.Popen[bytes]) -> None:
    """SIGKILL to msrun's process group (msrun, the Scheduler) and every worker's."""
    own = os.getpgid(0)
    for pgid in {*(w.pgid for w in _watchers(directory).values()), msrun.pid}:
        if pgid != own:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)


def _write_termination(env: Mapping[str, str], line: str) -> None:
    path = env.get(ENV_TERMINATION_FILE) or DEFAULT_TERMINATION_FILE
    try:
        with open(path, "w", encoding="utf-8") as out:
            out.write(line + "\n")
    except OSError as exc:
        print(f"msop msrun launcher: cannot write {path}: {exc}", file=sys.stderr, flush=True)


def launch(argv: Sequence[str], env: Mapping[str, str] | None = None) -> int:
    """Run msrun for this pod and return the pod's exit code (see the module docstring)."""
    env = dict(os.environ if env is None else env)
    grace = float(env.get(ENV_GRACE) or DEFAULT_GRACE)
    watch_dir = Path(tempfile.mkdtemp(prefix="msop-msrun-"))
    try:
        command = msrun_command(env, argv, str(watch_dir))
    except UsageError as exc:
        print(f"msop msrun launcher: {exc}\n{_USAGE}", file=sys.stderr, flush=True)
        shutil.rmtree(watch_dir, ignore_errors=True)
        return 2
    print(f"msop msrun launcher: {' '.join(command)}", flush=True)
    stopping: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _frame: stopping.append(signum))
        for sig in (signal.SIGTERM, signal.SIGINT)
    }
    # A session of its own: the Scheduler it starts shares its process group, which the
    # launcher can then kill without killing itself.
    msrun = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        return _supervise(msrun, watch_dir, env, stopping, grace)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _kill_all(watch_dir, msrun)
        with contextlib.suppress(subprocess.TimeoutExpired):
            msrun.wait(timeout=5)
        shutil.rmtree(watch_dir, ignore_errors=True)


def _supervise(
    msrun: subprocess.Popen[bytes],
    watch_dir: Path,
    env: Mapping[str, str],
    stopping: list[int],
    grace: float,
) -> int:
    while True:
        failure = first_failure(watch_dir)
        if failure is not None:
            line = f"msrun: {failure.describe()}"
            print(f"msop msrun launcher: {line}; stopping the others", file=sys.stderr, flush=True)
            _write_termination(env, line)
            return failure.pod_exit_code
        if stopping:
            sig = stopping[0]
            print(
                f"msop msrun launcher: received {_signal_name(sig)}; stopping every process",
                file=sys.stderr,
                flush=True,
            )
            _stop(watch_dir, msrun, grace)
            return 128 + sig
        code = msrun.poll()
        if code is not None:
            # A watcher may record its ending a moment after msrun saw it.
            if first_failure(watch_dir) is not None:
                continue
            if code < 0:
                # msrun itself was killed (Popen reports signal N as -N): end as a
                # single-process pod killed by the same signal would, 128+N.
                line = f"msrun itself was killed by signal {-code} ({_signal_name(-code)})"
                _write_termination(env, f"msrun: {line}")
                return 128 - code
            if code != 0:
                line = f"msrun exited with code {code} and no worker failed (see its log)"
                _write_termination(env, f"msrun: {line}")
            return code
        time.sleep(_POLL)


# --- the watcher ---------------------------------------------------------------------------


def watch(directory: str, command: Sequence[str]) -> int:
    """Run ``command`` (one process msrun started), record how it ended in ``directory``
    and end the same way. Never returns when the command was killed by a signal."""
    if not command:
        print("msop msrun watcher: no command", file=sys.stderr, flush=True)
        return 2
    out = Path(directory)
    me = os.getpid()
    env = os.environ
    role = env.get("MS_ROLE", "")
    who = {
        "role": role,
        "localRank": None if role == "MS_SCHED" else env.get("DEVICE_ID"),
        "rank": None if role == "MS_SCHED" else env.get("RANK_ID"),
    }
    try:
        child = subprocess.Popen(list(command))
    except OSError as exc:
        print(f"msop msrun watcher: cannot run {command[0]}: {exc}", file=sys.stderr, flush=True)
        _write_atomic(out, f"{me}.json", {"pid": me, "watcher": me, **who, "exitCode": 127,
                                          "signal": None, "at": time.time()})  # fmt: skip
        return 127
    _write_atomic(out, f"{me}.start", {"pgid": os.getpgid(0), "child": child.pid, **who})
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: _forward(child, signum))
    while True:
        try:
            status = child.wait()
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries for us
            continue
    record = {
        "pid": child.pid,
        "watcher": me,
        **who,
        "exitCode": status if status >= 0 else None,
        "signal": -status if status < 0 else None,
        "at": time.time(),
    }
    _write_atomic(out, f"{child.pid}.json", record)
    if status < 0:
        signal.signal(-status, signal.SIG_DFL)
        os.kill(me, -status)
        time.sleep(5)  # the signal ends us; if it is one that does not, say so below
        return 128 - status
    return status


def _write_atomic(directory: Path, name: str, data: Mapping[str, object]) -> None:
    tmp = directory / f".{name}.tmp"
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps(data))
        tmp.rename(directory / name)


def _forward(child: subprocess.Popen[bytes], signum: int) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--watch"] and len(args) >= 2:
        return watch(args[1], args[2:])
    if not args or args[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not args else sys.stdout)
        return 2 if not args else 0
    return launch(args)


if __name__ == "__main__":
    sys.exit(main())
