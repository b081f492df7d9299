"""The training container's kept runs (:mod:`msop.integrations.keeper`), on the agent's side.

- :func:`install_keeper`: the barrier puts the keeper script into the ``runs`` directory of
  the pod's emptyDir on every start of the pod's containers, before the training container
  starts (the training image runs it with its own Python).
- :func:`request_stop`: the sidecar, as it accepts a restart, asks the keeper to stop the
  run now (SIGTERM, and SIGKILL after the stop grace); :func:`wait_run_ended` waits for
  it, when the grace is longer than the kubelet's own.
- :func:`show_stopped_run`: the sidecar, which starts first after a restart of every
  container of the pod, prints the run that the restart stopped into its own log,
  between a :data:`~msop.integrations.wire.KEPT_RUN_BEGIN` line and a
  :data:`~msop.integrations.wire.KEPT_RUN_END` line, where ``msop logs --previous`` and
  ``kubectl logs <pod> -c msop-agent`` read it. A run is stopped when no keeper holds its
  lock; a sidecar that restarted alone while the training runs prints nothing. Every
  start of the sidecar with no keeper running prints the last stopped run again: a
  second restart of every container before the training ran again (a restart asked for
  twice, a sidecar stopped while it printed) removed the log that held it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import BinaryIO, Final

from msop.integrations.wire import KEEPER_DIR, KEPT_RUN_BEGIN, KEPT_RUN_END

__all__ = [
    "KEEPER_SCRIPT",
    "install_keeper",
    "request_stop",
    "runs_dir",
    "show_stopped_run",
    "wait_run_ended",
]

KEEPER_SCRIPT: Final = "keeper.py"
_LOG, _OLDER, _LOCK, _INFO, _STOP = "run.log", "run.log.1", "run.lock", "run.json", "stop"


def runs_dir(agent_dir: Path) -> Path:
    return agent_dir / KEEPER_DIR


def install_keeper(agent_dir: Path) -> Path:
    """Write the keeper script into the runs directory (made writable for the training
    container, whatever its user); its path."""
    runs = runs_dir(agent_dir)
    runs.mkdir(exist_ok=True)
    runs.chmod(0o777)
    source = resources.files("msop.integrations").joinpath("keeper.py").read_bytes()
    target = runs / KEEPER_SCRIPT
    tmp = runs / f".{KEEPER_SCRIPT}.{os.getpid()}"
    tmp.write_bytes(source)
    tmp.chmod(0o644)
    tmp.replace(target)
    return target


def request_stop(agent_dir: Path, generation: int, grace: float) -> bool:
    """Ask the keeper of the running training to stop it for the restart to
    ``generation``; False if there is no runs directory (no keeper was ever installed)."""
    runs = runs_dir(agent_dir)
    if not runs.is_dir():
        return False
    tmp = runs / f".{_STOP}.{os.getpid()}"
    tmp.write_text(json.dumps({"generation": generation, "grace": grace}))
    tmp.chmod(0o644)
    tmp.replace(runs / _STOP)
    return True


def _until_unlocked(fd: int, wait: float) -> bool:
    """Take the run's lock (no keeper holds it any more) within ``wait`` seconds."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def wait_run_ended(agent_dir: Path, wait: float) -> bool:
    """Whether no keeper runs, or the running one ended within ``wait`` seconds."""
    try:
        fd = os.open(runs_dir(agent_dir) / _LOCK, os.O_RDONLY)
    except OSError:
        return True
    try:
        return _until_unlocked(fd, wait)
    except OSError:
        return True
    finally:
        os.close(fd)


def show_stopped_run(
    agent_dir: Path,
    out: BinaryIO | None = None,
    log: Callable[[str], None] | None = None,
    wait: float = 0.0,
) -> bool:
    """Print the stopped run, if there is one not shown yet; True if it printed one.
    ``wait``: seconds to wait for a keeper still running to end (the kubelet may start the
    sidecar again before the old training container is gone)."""
    runs = runs_dir(agent_dir)
    out = sys.stdout.buffer if out is None else out
    try:
        fd = os.open(runs / _LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError as exc:
        if log is not None:
            log(f"cannot read the kept run in {runs}: {exc}")
        return False
    try:
        if not _until_unlocked(fd, wait):
            return False  # a keeper runs: the training container was not restarted
        return _show(runs, out)
    except OSError as exc:
        if log is not None:
            log(f"cannot show the kept run in {runs}: {exc}")
        return False
    finally:
        os.close(fd)


def _when(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        raise ValueError(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _describe(info_file: Path) -> tuple[str, str]:
    """The container's name, and when and how its run started and ended (``run.json``)."""
    try:
        info = json.loads(info_file.read_text())
        container = str(info.get("container") or "?")
        how = f"started {_when(info['started'])}"
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return "?", "started ?"
    try:
        ended, code, signum = _when(info["ended"]), info["exit_code"], info.get("signal")
    except (KeyError, ValueError):
        return container, f"{how}, stopped with its container"
    stopped_for = info.get("stopped_for")
    if isinstance(stopped_for, int):
        how = f"{how}, stopped by msop for the restart in place to generation {stopped_for}"
    if isinstance(signum, int):
        return container, f"{how}, ended {ended}: killed by signal {signum} (exit code {code})"
    return container, f"{how}, ended {ended} with exit code {code}"


def _show(runs: Path, out: BinaryIO) -> bool:
    parts = [runs / _OLDER, runs / _LOG]
    stats = [p.stat() for p in parts if p.exists()]
    if not stats:
        return False
    container, how = _describe(runs / _INFO)
    size = sum(s.st_size for s in stats)
    out.write(
        f"{KEPT_RUN_BEGIN}{container} ({how}; its last {size} bytes, kept by msop before "
        "the restart in place) -----\n".encode()
    )
    ends_with_newline = True
    for part in parts:
        with contextlib.suppress(FileNotFoundError), part.open("rb") as f:
            while chunk := f.read(65536):
                out.write(chunk)
                ends_with_newline = chunk.endswith(b"\n")
    if not ends_with_newline:
        out.write(b"\n")
    out.write(f"{KEPT_RUN_END}{container} -----\n".encode())
    out.flush()
    return True
