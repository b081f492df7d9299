"""The msrun launcher (``python -m msop.integrations.msrun``): the command it builds from
msop's environment, and how the pod ends when a local worker fails.

The launcher runs real processes here: a stand-in for msrun with msrun's process model
(``msrun_fakes/fake_msrun.py``; the real tier runs MindSpore's own) and a stand-in script.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from msop.integrations import msrun
from testbed.paths import REPO

FAKES = Path(__file__).resolve().parent / "msrun_fakes"
POD = {
    "MS_WORKER_NUM": "4",
    "MS_LOCAL_WORKER": "2",
    "MS_NODE_RANK": "1",
    "MS_SCHED_HOST": "10.96.0.7",
    "MS_SCHED_PORT": "8118",
}


def test_the_command_is_msrun_with_msops_flags_then_the_users_then_the_watched_script() -> None:
    cmd = msrun.msrun_command(
        POD, ["--log_dir", "/logs", "--cluster_time_out=300", "train.py", "--epochs", "3"],
        "/tmp/w", python="/usr/bin/python3",
    )  # fmt: skip
    assert cmd[:3] == ["/usr/bin/python3", "-m", "mindspore.parallel.cluster.run"]
    assert cmd[3:9] == [
        "--worker_num=4", "--local_worker_num=2", "--node_rank=1",
        "--master_addr=10.96.0.7", "--master_port=8118", "--join=True",
    ]  # fmt: skip
    assert cmd[9:12] == ["--log_dir", "/logs", "--cluster_time_out=300"]
    # msrun runs "python <file>.py args": the watcher is the launcher's own file.
    assert cmd[12] == str(Path(msrun.__file__).resolve()) and cmd[12].endswith(".py")
    assert cmd[13:] == ["--watch", "/tmp/w", "/usr/bin/python3", "train.py", "--epochs", "3"]


def test_msrun_can_be_another_command() -> None:
    cmd = msrun.msrun_command({**POD, "MSOP_MSRUN": "/opt/bin/msrun --x"}, ["t.py"], "/w")
    assert cmd[:3] == ["/opt/bin/msrun", "--x", "--worker_num=4"]


@pytest.mark.parametrize("flag", ["--worker_num=8", "--node_rank", "--master_addr=1.2.3.4"])
def test_msops_own_flags_are_refused(flag: str) -> None:
    with pytest.raises(msrun.UsageError, match=flag.split("=")[0]):
        msrun.msrun_command(POD, [flag, "x", "train.py"], "/w")


def test_outside_an_msrun_pod_it_says_what_is_missing() -> None:
    with pytest.raises(msrun.UsageError, match="MS_LOCAL_WORKER, MS_NODE_RANK not set"):
        msrun.msrun_command({k: v for k, v in POD.items() if k not in
                             ("MS_LOCAL_WORKER", "MS_NODE_RANK")}, ["t.py"], "/w")  # fmt: skip


@pytest.mark.parametrize(
    ("record", "text"),
    [
        ({"signal": 9, "localRank": "1", "rank": "3"},
         "local worker 1 (rank 3) was killed by signal 9 (SIGKILL)"),
        ({"exitCode": 2, "localRank": "0", "rank": None}, "local worker 0 exited with code 2"),
        ({"exitCode": 1, "role": "MS_SCHED"}, "the Scheduler exited with code 1"),
    ],
)  # fmt: skip
def test_endings_describe_the_process(record: dict[str, object], text: str) -> None:
    ending = msrun.Ending.parse(json.dumps({"pid": 7, "role": "MS_WORKER", "at": 1.0, **record}))
    assert ending is not None and ending.describe() == text and ending.failed


# --- the launcher with real processes --------------------------------------------------------


class Pod:
    """One pod's launcher, run as the pod would run it."""

    def __init__(self, tmp: Path, **env: str) -> None:
        self.out = tmp / "out"
        self.out.mkdir()
        self.termination = tmp / "termination-log"
        self.env = {
            **os.environ,
            **POD,
            "MS_NODE_RANK": "0",
            "MS_SCHED_HOST": "127.0.0.1",  # the fake starts the Scheduler here, as in pod 0
            "MSOP_MSRUN": f"{sys.executable} {FAKES / 'fake_msrun.py'}",
            "MSOP_TERMINATION_FILE": str(self.termination),
            "MSOP_MSRUN_GRACE": "5",
            "PYTHONPATH": str(REPO),
            "OUT": str(self.out),
            **env,
        }
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> subprocess.Popen[str]:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "msop.integrations.msrun", str(FAKES / "script.py")],
            env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        return self.proc

    def run(self) -> tuple[int, str]:
        out, _ = self.start().communicate(timeout=60)
        assert self.proc is not None and self.proc.returncode is not None
        return self.proc.returncode, out

    def wait_for(self, name: str) -> None:
        deadline = time.monotonic() + 30
        while not (self.out / name).exists():
            assert time.monotonic() < deadline, f"{name} never started"
            time.sleep(0.05)

    def message(self) -> str:
        return self.termination.read_text() if self.termination.exists() else ""

    def alive(self, name: str) -> bool:
        pid = int((self.out / name).read_text())
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        # A zombie is dead too; its parent (a watcher) may not have reaped it yet.
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


MakePod = Callable[..., Pod]


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[MakePod]:
    pods: list[Pod] = []

    def make(**env: str) -> Pod:
        pods.append(Pod(tmp_path, **env))
        return pods[-1]

    yield make
    for p in pods:
        if p.proc is not None and p.proc.poll() is None:
            p.proc.kill()


def test_every_worker_exits_0_so_does_the_pod_and_it_leaves_no_message(pod: MakePod) -> None:
    p = pod()
    code, out = p.run()
    assert code == 0, out
    assert {f.name for f in p.out.glob("*.done")} == {
        "MS_SCHED-0.done", "MS_WORKER-0.done", "MS_WORKER-1.done",
    }  # fmt: skip
    assert p.message() == ""


def test_a_killed_worker_makes_the_pod_exit_128_plus_the_signal_at_once(pod: MakePod) -> None:
    # The Scheduler would linger (as a real one does for half a minute): the launcher decides
    # without waiting for it, and kills it with every other process.
    p = pod(KILL_RANK="1", WORK="60", SCHED_WORK="60")
    code, out = p.run()
    assert code == 128 + signal.SIGKILL, out
    assert p.message() == "msrun: local worker 1 (rank 1) was killed by signal 9 (SIGKILL)\n"
    assert not p.alive("MS_WORKER-0") and not p.alive("MS_SCHED-0")
    assert not list(p.out.glob("*.done"))


def test_a_killed_watcher_counts_as_its_worker_killed(pod: MakePod) -> None:
    # A kill from the host may hit the watcher instead of the script (both are python): it
    # is gone without a record, which only SIGKILL does to it.
    p = pod(WORK="60", SCHED_WORK="60")
    proc = p.start()
    for name in ("MS_SCHED-0", "MS_WORKER-0", "MS_WORKER-1"):
        p.wait_for(name)
    script = int((p.out / "MS_WORKER-1").read_text())
    watcher = int(Path(f"/proc/{script}/stat").read_text().rpartition(")")[2].split()[1])
    os.kill(watcher, signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 137, out
    assert p.message() == "msrun: local worker 1 (rank 1) was killed by signal 9 (SIGKILL)\n"
    assert not p.alive("MS_WORKER-1") and not p.alive("MS_WORKER-0")  # its orphan too


def test_a_script_error_stays_a_script_error(pod: MakePod) -> None:
    p = pod(EXIT_RANK="0", EXIT_CODE="3", WORK="60")
    code, out = p.run()
    assert code == 3, out
    assert p.message() == "msrun: local worker 0 (rank 0) exited with code 3\n"
    assert not p.alive("MS_WORKER-1")


def test_node_rank_gives_the_ranks_of_this_pods_workers(pod: MakePod) -> None:
    p = pod(MS_NODE_RANK="1", MS_SCHED_HOST="10.96.0.7", KILL_RANK="3", WORK="60")
    code, _ = p.run()
    assert code == 137
    assert p.message() == "msrun: local worker 1 (rank 3) was killed by signal 9 (SIGKILL)\n"
    assert not (p.out / "MS_SCHED-0").exists()  # no Scheduler away from the master


def test_msrun_failing_on_its_own_exits_with_its_code_and_says_so(pod: MakePod) -> None:
    p = pod(FAKE_MSRUN_FAIL="1")
    code, out = p.run()
    assert code == 1, out
    assert p.message() == "msrun: msrun exited with code 1 and no worker failed (see its log)\n"


def test_msrun_itself_killed_makes_the_pod_exit_128_plus_the_signal(pod: MakePod) -> None:
    # Popen reports msrun killed by SIGKILL as -9: the pod must exit 137 and say so, not 247.
    p = pod(WORK="60", SCHED_WORK="60")
    proc = p.start()
    for name in ("MS_SCHED-0", "MS_WORKER-0", "MS_WORKER-1"):
        p.wait_for(name)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1, children  # msrun, the launcher's only child
    os.kill(int(children[0]), signal.SIGKILL)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGKILL, out
    assert p.message() == "msrun: msrun itself was killed by signal 9 (SIGKILL)\n"
    assert not p.alive("MS_WORKER-0") and not p.alive("MS_WORKER-1")
    assert not p.alive("MS_SCHED-0")


def test_sigterm_reaches_every_process_and_the_pod_exits_143(pod: MakePod) -> None:
    p = pod(WORK="60", SCHED_WORK="60")
    proc = p.start()
    for name in ("MS_SCHED-0", "MS_WORKER-0", "MS_WORKER-1"):
        p.wait_for(name)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 143, out
    assert {f.name for f in p.out.glob("*.term")} == {
        "MS_SCHED-0.term", "MS_WORKER-0.term", "MS_WORKER-1.term",
    }  # fmt: skip
    assert p.message() == ""


def test_a_flag_msop_owns_is_a_usage_error(pod: MakePod) -> None:
    p = pod()
    proc = subprocess.run(
        [sys.executable, "-m", "msop.integrations.msrun", "--worker_num=2", "train.py"],
        env=p.env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "--worker_num is set by msop" in proc.stderr
