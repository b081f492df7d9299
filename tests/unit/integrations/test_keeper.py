"""The keeper (msop.integrations.keeper), run as the training image runs it: a script of
its own, with the standard library only, in front of a real command."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from msop.integrations import keeper
from msop.integrations.agent.runs import install_keeper, show_stopped_run
from msop.msjob.inplace.pods import KEEPER_LAUNCH
from testbed.paths import REPO

SCRIPT = REPO / "msop" / "integrations" / "keeper.py"
WAIT = 20.0


def keep(
    directory: Path, *command: str, start_new_session: bool = False
) -> subprocess.Popen[bytes]:
    # -I: as the pod runs it, isolated from msop's checkout and any PYTHON* variable.
    return subprocess.Popen(
        [sys.executable, "-I", str(SCRIPT), str(directory), "mindspore", "--", *command],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=start_new_session,
    )  # fmt: skip


def test_output_passes_through_and_is_kept_with_the_exit_code(tmp_path: Path) -> None:
    proc = keep(tmp_path, "sh", "-c", "echo out; echo err >&2; printf partial; exit 3")
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 3
    assert (out, err) == (b"out\npartial", b"err\n")
    # Both streams, whole; how they interleave depends on when each pipe was read.
    assert sorted((tmp_path / "run.log").read_bytes()) == sorted(b"out\nerr\npartial")
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["container"] == "mindspore"
    assert info["started"] <= info["ended"] <= time.time()
    assert (info["exit_code"], info["signal"]) == (3, None)


def test_a_new_run_replaces_the_kept_one(tmp_path: Path) -> None:
    for word in ("first", "second"):
        keep(tmp_path, "echo", word).communicate(timeout=WAIT)
    assert (tmp_path / "run.log").read_bytes() == b"second\n"


def test_only_the_end_of_a_long_run_is_kept(tmp_path: Path) -> None:
    lines = 3 * keeper.SEGMENT // 10 + 7  # 10-byte lines: three segments' worth
    code = f"import sys\nfor i in range({lines}): sys.stdout.write(f'{{i:09d}}\\n')"
    proc = keep(tmp_path, sys.executable, "-c", code)
    out, _ = proc.communicate(timeout=WAIT)
    assert proc.returncode == 0 and len(out) == 10 * lines  # passed through whole
    kept = (tmp_path / "run.log.1").read_bytes() + (tmp_path / "run.log").read_bytes()
    assert keeper.SEGMENT <= len(kept) <= 2 * keeper.SEGMENT
    assert out.endswith(kept)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGUSR1])
def test_signals_reach_the_command_and_its_end_is_128_plus_n(
    tmp_path: Path, signum: signal.Signals
) -> None:
    # The command handles the signal, says so and exits 42 (not what the signal's default
    # action gives): the code shows the signal reached the command, not the keeper. Python,
    # not sh: a shell cannot trap a signal that was ignored when it started (as SIGINT is
    # under a job started in the background).
    handler = (
        "import signal, sys, time\n"
        f"signal.signal({int(signum)}, lambda *_: (print('got {signum.name}', flush=True),"
        " sys.exit(42)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = keep(tmp_path, sys.executable, "-c", handler)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=WAIT)
    assert proc.returncode == 42 and out == f"got {signum.name}\n".encode()


def test_a_command_killed_by_a_signal_exits_128_plus_n(tmp_path: Path) -> None:
    proc = keep(tmp_path, "sh", "-c", "echo going; kill -9 $$")
    out, _ = proc.communicate(timeout=WAIT)
    assert proc.returncode == 137 and out == b"going\n"
    info = json.loads((tmp_path / "run.json").read_text())
    assert (info["exit_code"], info["signal"]) == (137, 9)


def test_a_command_that_cannot_start_exits_127_and_says_why(tmp_path: Path) -> None:
    proc = keep(tmp_path, "/no/such/program", "x")
    _, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 127 and b"/no/such/program" in err
    assert b"/no/such/program" in (tmp_path / "run.log").read_bytes()


def test_an_unwritable_directory_keeps_nothing_and_the_run_goes_on(tmp_path: Path) -> None:
    proc = keep(tmp_path / "missing", "sh", "-c", "echo still; exit 5")
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 5 and out == b"still\n"
    assert b"not kept" in err


def test_the_agent_shows_a_stopped_run_at_each_start_never_a_running_one(tmp_path: Path) -> None:
    agent_dir = tmp_path
    runs = agent_dir / "runs"
    install_keeper(agent_dir)
    assert (runs / "keeper.py").read_bytes() == SCRIPT.read_bytes()
    assert (runs / "keeper.py").stat().st_mode & 0o777 == 0o644
    assert runs.stat().st_mode & 0o777 == 0o777
    proc = keep(runs, "sh", "-c", "echo epoch 1; echo ready; sleep 60", start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"epoch 1\n" and proc.stdout.readline() == b"ready\n"
    shown = agent_dir / "shown.txt"
    with shown.open("wb") as out:
        assert not show_stopped_run(agent_dir, out)  # the keeper holds the lock: it runs
    # The sidecar may start again before the old training container is gone: it waits.
    threading.Timer(0.3, os.killpg, (proc.pid, signal.SIGKILL)).start()
    with shown.open("wb") as out:
        assert show_stopped_run(agent_dir, out, wait=WAIT)
    proc.communicate(timeout=WAIT)
    text = shown.read_text().splitlines()
    assert text[0].startswith("----- msop: the stopped run of container mindspore (started ")
    assert ", stopped with its container; its last 14 bytes," in text[0]
    assert text[1:3] == ["epoch 1", "ready"]
    assert text[3] == "----- msop: end of the stopped run of container mindspore -----"
    # A second restart of every container before the training ran again removed the log
    # that held it: the next start of the sidecar shows it again, whole.
    with shown.open("wb") as out:
        assert show_stopped_run(agent_dir, out)
    assert shown.read_text().splitlines() == text


def test_the_agent_says_how_a_run_that_ended_by_itself_ended(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    keep(runs, "sh", "-c", "echo Traceback; exit 1").communicate(timeout=WAIT)
    with (tmp_path / "shown.txt").open("wb") as out:
        assert show_stopped_run(tmp_path, out)
    head = (tmp_path / "shown.txt").read_text().splitlines()[0]
    assert " with exit code 1; its last 10 bytes, kept by msop before the restart" in head
    runs2 = tmp_path / "again" / "runs"
    runs2.mkdir(parents=True)
    keep(runs2, "sh", "-c", "kill -TERM $$").communicate(timeout=WAIT)
    with (tmp_path / "shown2.txt").open("wb") as out:
        assert show_stopped_run(runs2.parent, out)
    head = (tmp_path / "shown2.txt").read_text().splitlines()[0]
    assert ": killed by signal 15 (exit code 143); its last 0 bytes" in head


def test_no_kept_run_shows_nothing(tmp_path: Path) -> None:
    with (tmp_path / "out").open("wb") as out:
        assert not show_stopped_run(tmp_path, out)


def test_the_pods_launch_line_runs_the_keeper_or_the_command_alone(tmp_path: Path) -> None:
    sh = shutil.which("sh")
    assert sh is not None
    runs = tmp_path / "runs"
    argv = [sh, "-c", KEEPER_LAUNCH, "msop-keeper", str(runs), "mindspore", "--"]
    command = ["sh", "-c", 'echo "$0 $1"', "one", "two words"]
    # Before the barrier installed the keeper (or with no Python in the image): as it is.
    runs.mkdir()
    alone = subprocess.run([*argv, *command], capture_output=True, timeout=WAIT, check=True)
    assert alone.stdout == b"one two words\n" and not (runs / "run.log").exists()
    install_keeper(tmp_path)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "python3").symlink_to(sys.executable)
    env = {"PATH": f"{bindir}:/usr/bin:/bin"}
    kept = subprocess.run([*argv, *command], capture_output=True, timeout=WAIT, check=True, env=env)
    assert kept.stdout == b"one two words\n"
    assert (runs / "run.log").read_bytes() == b"one two words\n"


def test_the_lock_is_the_keepers_while_it_runs(tmp_path: Path) -> None:
    proc = keep(tmp_path, "sh", "-c", "echo ready; sleep 60")
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    fd = os.open(tmp_path / "run.lock", os.O_RDONLY)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        proc.terminate()
        proc.communicate(timeout=WAIT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released with the keeper
    finally:
        os.close(fd)
