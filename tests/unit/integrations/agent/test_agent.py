"""The restart agent (``python -m msop.integrations.agent``), run as the pod runs it: the
sidecar's server and the barrier as real processes on loopback, sharing a directory as the
two containers share their emptyDir, with requests signed by a key made here."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msop.integrations import signature as ecdsa
from msop.integrations.wire import signed_message
from testbed.netns import private_loopback
from testbed.paths import REPO
from testbed.ports import free_port
from testbed.process import terminate

JOB = "0f4c7b1e-8d2a-4c55-9d1e-3b6a2f0c9e11"
OTHER_JOB = "7d3e0c55-1b2a-4f6e-8c9d-0a1b2c3d4e5f"
KEY = ecdsa.generate_private_key()
PUBLIC = ecdsa.public_key(KEY)
WAIT = 20.0
"""Seconds a process gets to start or to end: generous, the machine may be busy."""


def signed(
    action: str, generation: int, *, job: str = JOB, key: ecdsa.PrivateKey = KEY
) -> dict[str, Any]:
    signature = ecdsa.sign(key, signed_message(action, job, generation))
    return {"generation": generation, "signature": signature.hex()}


def agent(command: str, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "msop.integrations.agent", command, *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


class Pod:
    """The agent's environment and emptyDir for one pod, and its processes."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "MSOP_AGENT_PORT": str(self.port),
            "MSOP_AGENT_JOB": JOB,
            "MSOP_AGENT_KEY": PUBLIC.hex(),
            "MSOP_AGENT_GENERATION": "3",
            "MSOP_AGENT_DIR": str(directory),
        }
        self.procs: list[subprocess.Popen[str]] = []

    # -- the files -------------------------------------------------------------------

    def state(self) -> Any:
        """state.json as an object, its text if it is not JSON, None if there is none."""
        path = self.dir / "state.json"
        if not path.exists():
            return None
        text = path.read_text()
        try:
            return json.loads(text)
        except ValueError:
            return text

    def write_state(self, generation: int, requested: bool = False, waiting: bool = False) -> None:
        state = {"generation": generation, "requested": requested, "waiting": waiting}
        (self.dir / "state.json").write_text(json.dumps(state))

    def released(self) -> str | None:
        path = self.dir / "released"
        return path.read_text().strip() if path.exists() else None

    # -- the sidecar -----------------------------------------------------------------

    def serve(self, host: str | None = "127.0.0.1") -> subprocess.Popen[str]:
        proc = agent("serve", self.env, *(["--host", host] if host else []))
        self.procs.append(proc)
        deadline = time.monotonic() + WAIT
        while True:
            try:
                self.get("/state")
                return proc
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the sidecar never answered"
                time.sleep(0.02)

    def request(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT)
        try:
            conn.request(method, path, body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        return response.status, json.loads(data) if data else {}, response

    def get(self, path: str) -> tuple[int, dict[str, Any]]:
        status, obj, _ = self.request("GET", path)
        return status, obj

    def post(self, path: str, obj: object) -> tuple[int, dict[str, Any]]:
        status, reply, _ = self.request("POST", path, json.dumps(obj).encode())
        return status, reply

    # -- the barrier -----------------------------------------------------------------

    def barrier(self, **env: str) -> subprocess.Popen[str]:
        proc = agent("barrier", {**self.env, **env})
        self.procs.append(proc)
        return proc

    def wait_for_state(self, want: dict[str, Any]) -> None:
        deadline = time.monotonic() + WAIT
        while self.state() != want:
            assert time.monotonic() < deadline, f"state.json is {self.state()}, not {want}"
            time.sleep(0.02)


@pytest.fixture
def pod(tmp_path: Path) -> Iterator[Pod]:
    made = Pod(tmp_path)
    yield made
    for proc in made.procs:
        terminate(proc, 5)
        proc.communicate()  # closes the pipes


def exits(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=WAIT)
    return proc.returncode, out, err


def state_reply(
    generation: int, released: int | None = None, waiting: bool = False
) -> dict[str, Any]:
    return {"v": 1, "job": JOB, "generation": generation, "released": released, "waiting": waiting}


# --- the signed message -------------------------------------------------------------------


def test_the_signed_message_is_exactly_the_documented_bytes() -> None:
    assert signed_message("restart", JOB, 3) == f"msop-agent/1 restart {JOB} 3".encode()
    assert signed_message("release", "u", 0) == b"msop-agent/1 release u 0"


@pytest.mark.parametrize(
    ("action", "job", "generation"),
    [("stop", JOB, 1), ("restart", "", 1), ("restart", "a b", 1), ("restart", "é", 1),
     ("restart", JOB, -1), ("restart", JOB, True), ("restart", JOB, 2**63)],
)  # fmt: skip
def test_the_signed_message_refuses_what_it_cannot_say(
    action: str, job: str, generation: int
) -> None:
    with pytest.raises(ValueError):
        signed_message(action, job, generation)


# --- serve ----------------------------------------------------------------------------------


def test_the_state_before_the_barrier_ran_is_the_environments(pod: Pod) -> None:
    pod.serve()
    assert pod.get("/state") == (200, state_reply(3))
    assert pod.state() is None  # serving writes nothing


def test_a_newer_generation_is_written_then_the_sidecar_exits_75(pod: Pod) -> None:
    pod.write_state(3)
    proc = pod.serve()
    body = signed("restart", 4)
    status, reply = pod.post("/restart", body)
    assert (status, reply) == (202, {**state_reply(4), "restarting": True})
    code, _, err = exits(proc)
    assert code == 75, err
    assert pod.state() == {"generation": 4, "requested": True, "waiting": False}
    assert "restart to generation 4 (was 3) requested by 127.0.0.1" in err
    assert body["signature"] not in err


def test_a_replayed_generation_does_nothing(pod: Pod) -> None:
    pod.write_state(5)
    proc = pod.serve()
    for generation in (5, 4, 0):
        status, reply = pod.post("/restart", signed("restart", generation))
        assert (status, reply) == (200, {**state_reply(5), "restarting": False})
    assert proc.poll() is None and pod.get("/state") == (200, state_reply(5))
    assert pod.state() == {"generation": 5, "requested": False, "waiting": False}


def test_only_msops_signature_for_this_job_action_and_generation_is_accepted(pod: Pod) -> None:
    proc = pod.serve()
    other_key = ecdsa.generate_private_key()
    good = signed("restart", 9)
    hexed = good["signature"]
    tampered = hexed[:-1] + ("1" if hexed[-1] == "0" else "0")
    forged = [
        signed("restart", 9, job=OTHER_JOB),  # a request for another job
        signed("restart", 9, key=other_key),  # not msop's key
        signed("release", 9),  # the other action
        {**signed("restart", 8), "generation": 9},  # another generation
        {**good, "signature": "00" * 64},
        {**good, "signature": tampered},
    ]  # fmt: skip
    for body in forged:
        status, reply = pod.post("/restart", body)
        assert status == 403 and "error" in reply, body
    assert pod.post("/release", signed("restart", 9))[0] == 403
    assert pod.post("/release", signed("release", 9, job=OTHER_JOB))[0] == 403
    assert proc.poll() is None
    assert pod.state() is None and pod.released() is None


MALFORMED = [
    b"not json",
    b"[1]",
    b'{"generation": 1}',
    b'{"generation": -1, "signature": "%s"}' % (b"a" * 128),
    b'{"generation": true, "signature": "%s"}' % (b"a" * 128),
    b'{"generation": "1", "signature": "%s"}' % (b"a" * 128),
    b'{"generation": 1, "signature": "abc"}',
    b'{"generation": 1, "signature": "%s"}' % (b"g" * 128),
    b"\xff\xfe",
    b"[" * 3000,
]


def test_a_malformed_request_is_a_400(pod: Pod) -> None:
    proc = pod.serve()
    for body in MALFORMED:
        status, reply, _ = pod.request("POST", "/restart", body)
        assert status == 400 and "error" in reply, body
    assert proc.poll() is None


def test_paths_methods_and_sizes(pod: Pod) -> None:
    proc = pod.serve()
    assert pod.get("/nothing")[0] == 404
    assert pod.get("/state?x=1")[0] == 200
    status, _, response = pod.request("GET", "/restart")
    assert status == 405 and response.getheader("Allow") == "POST"
    assert pod.request("POST", "/state", b"{}")[0] == 405
    assert pod.request("DELETE", "/release")[0] == 405
    status, reply, _ = pod.request("POST", "/release", b" " * 5000)
    assert status == 413 and "error" in reply
    assert pod.request("POST", "/release", b" " * 4096)[0] == 400  # at the limit: read, parsed
    assert proc.poll() is None


def test_release_keeps_the_highest_generation(pod: Pod) -> None:
    pod.write_state(4, waiting=True)
    pod.serve()
    assert pod.post("/release", signed("release", 4)) == (200, state_reply(4, 4, waiting=True))
    assert pod.released() == "4"
    assert pod.post("/release", signed("release", 2)) == (200, state_reply(4, 4, waiting=True))
    assert pod.released() == "4"
    assert pod.post("/release", signed("release", 6))[1]["released"] == 6
    assert pod.released() == "6"


def test_concurrent_restarts_restart_once_to_the_generation_answered(pod: Pod) -> None:
    pod.write_state(1)
    proc = pod.serve()
    answers: dict[int, int | str] = {}

    def ask(generation: int) -> None:
        try:
            answers[generation] = pod.post("/restart", signed("restart", generation))[0]
        except (OSError, http.client.HTTPException) as exc:  # the process ended meanwhile
            answers[generation] = type(exc).__name__

    threads = [threading.Thread(target=ask, args=(g,)) for g in (2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    code, _, err = exits(proc)
    assert code == 75, err
    accepted = [g for g, status in answers.items() if status == 202]
    assert len(accepted) == 1, answers
    assert pod.state() == {"generation": accepted[0], "requested": True, "waiting": False}
    assert err.count("requested by") == 1


def test_the_sidecar_restarting_alone_changes_nothing(pod: Pod) -> None:
    pod.write_state(7, waiting=True)
    (pod.dir / "released").write_text("6")
    before = (pod.dir / "state.json").read_bytes()
    first = pod.serve()  # the environment says 3: the file wins
    assert pod.get("/state") == (200, state_reply(7, 6, waiting=True))
    first.send_signal(signal.SIGTERM)
    assert exits(first)[0] == 0
    pod.serve()
    assert pod.get("/state") == (200, state_reply(7, 6, waiting=True))
    assert (pod.dir / "state.json").read_bytes() == before


# --- barrier --------------------------------------------------------------------------------


def test_the_barrier_on_the_first_start_writes_the_generation_and_exits(pod: Pod) -> None:
    code, out, err = exits(pod.barrier())
    assert code == 0, err
    assert pod.state() == {"generation": 3, "requested": False, "waiting": False}
    assert "first start" in out


def test_after_a_failure_of_its_own_the_pod_moves_on_and_waits_for_the_release(pod: Pod) -> None:
    pod.write_state(3)  # the barrier let the training start at 3, then it failed
    pod.serve()
    barrier = pod.barrier()
    pod.wait_for_state({"generation": 4, "requested": False, "waiting": True})
    assert pod.get("/state") == (200, state_reply(4, waiting=True))
    pod.post("/release", signed("release", 3))  # an older release does not let it pass
    time.sleep(0.5)
    assert barrier.poll() is None
    assert pod.post("/restart", signed("restart", 4))[0] == 200  # already there: no restart
    assert pod.post("/release", signed("release", 4))[0] == 200
    code, out, err = exits(barrier)
    assert code == 0, err
    assert pod.state() == {"generation": 4, "requested": False, "waiting": False}
    assert out.splitlines() == [
        "msop barrier: waiting for msop to release generation 4 (a container of this pod failed)",
        "msop barrier: generation 4 released: the training may start",
    ]
    assert pod.get("/state") == (200, state_reply(4, 4))


def test_after_a_requested_restart_the_pod_keeps_the_generation(pod: Pod) -> None:
    pod.write_state(6, requested=True)
    barrier = pod.barrier()
    pod.wait_for_state({"generation": 6, "requested": False, "waiting": True})
    (pod.dir / "released").write_text("5")
    time.sleep(0.3)
    assert barrier.poll() is None
    (pod.dir / "released").write_text("6")
    code, out, err = exits(barrier)
    assert code == 0, err
    assert "msop asked for this restart" in out
    assert pod.state() == {"generation": 6, "requested": False, "waiting": False}


def test_a_barrier_restarted_before_its_release_waits_for_the_same_generation(pod: Pod) -> None:
    pod.write_state(6, waiting=True)
    (pod.dir / "released").write_text("6")
    code, _, err = exits(pod.barrier())
    assert code == 0, err
    assert pod.state() == {"generation": 6, "requested": False, "waiting": False}


def test_a_corrupt_state_counts_as_a_failure_after_the_last_release(pod: Pod) -> None:
    (pod.dir / "state.json").write_text('{"generation": 5, "requ')
    (pod.dir / "released").write_text("5")
    barrier = pod.barrier()
    pod.wait_for_state({"generation": 6, "requested": False, "waiting": True})
    (pod.dir / "released").write_text("6")
    code, _, err = exits(barrier)
    assert code == 0 and "state.json is corrupt" in err, err


def test_a_restart_accepted_while_the_barrier_waits_holds_the_barrier(pod: Pod) -> None:
    # The sidecar moved the pod to 8 and exits; the kubelet is about to restart every
    # container: the old barrier must not let the training start on the release of 7.
    pod.write_state(7, requested=True)
    barrier = pod.barrier()
    pod.wait_for_state({"generation": 7, "requested": False, "waiting": True})
    pod.write_state(8, requested=True)
    (pod.dir / "released").write_text("7")
    time.sleep(0.5)
    assert barrier.poll() is None
    assert pod.state() == {"generation": 8, "requested": True, "waiting": False}


# --- the command ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "change"),
    [("serve", {"MSOP_AGENT_PORT": ""}), ("serve", {"MSOP_AGENT_PORT": "0"}),
     ("serve", {"MSOP_AGENT_PORT": "70000"}), ("serve", {"MSOP_AGENT_JOB": ""}),
     ("serve", {"MSOP_AGENT_KEY": "04" + "00" * 64}), ("serve", {"MSOP_AGENT_KEY": "xyz"}),
     ("serve", {"MSOP_AGENT_GENERATION": "-1"}), ("barrier", {"MSOP_AGENT_GENERATION": "1.5"}),
     ("barrier", {"MSOP_AGENT_DIR": ""}), ("barrier", {"MSOP_AGENT_DIR": "/nonexistent"}),
     ("serve", {"MSOP_AGENT_STOP_GRACE": "1.5"}), ("serve", {"MSOP_AGENT_STOP_GRACE": "-1"})],
)  # fmt: skip
def test_a_missing_or_bad_variable_exits_2_with_one_line(
    pod: Pod, command: str, change: dict[str, str]
) -> None:
    env = {k: v for k, v in {**pod.env, **change}.items() if v}
    code, _, err = exits(agent(command, env))
    name = next(iter(change))
    assert code == 2
    assert len(err.splitlines()) == 1 and name in err, err
    assert pod.state() is None


def test_the_barrier_needs_only_its_own_variables(pod: Pod) -> None:
    env = {k: v for k, v in pod.env.items() if k not in ("MSOP_AGENT_PORT", "MSOP_AGENT_KEY")}
    assert exits(agent("barrier", env))[0] == 0


def test_help_explains_the_protocol(pod: Pod) -> None:
    code, out, _ = exits(agent("--help", pod.env))
    assert code == 0
    for word in ("/state", "/restart", "/release", "75", "msop-agent/1", "MSOP_AGENT_KEY"):
        assert word in out


def test_on_start_it_prints_the_stopped_run_of_the_training_container(pod: Pod) -> None:
    runs = pod.dir / "runs"
    runs.mkdir()
    (runs / "run.lock").touch()
    (runs / "run.json").write_text(json.dumps({"container": "mindspore", "started": 0}))
    (runs / "run.log").write_bytes(b"epoch 3 loss 0.5\nTraceback: boom")
    proc = pod.serve()
    proc.send_signal(signal.SIGTERM)
    code, out, _ = exits(proc)
    assert code == 0
    assert out.splitlines() == [
        "----- msop: the stopped run of container mindspore (started 1970-01-01T00:00:00Z,"
        " stopped with its container; its last 32 bytes, kept by msop before the restart in"
        " place) -----",
        "epoch 3 loss 0.5",
        "Traceback: boom",
        "----- msop: end of the stopped run of container mindspore -----",
    ]
    # Started again before the training ran again (its log, with the block, may be gone):
    # the same block again, whole.
    second = pod.serve()
    second.send_signal(signal.SIGTERM)
    again = exits(second)
    assert again[0] == 0 and again[1] == out


def test_the_barrier_installs_the_keeper(pod: Pod) -> None:
    assert exits(pod.barrier())[0] == 0
    script = pod.dir / "runs" / "keeper.py"
    assert script.read_bytes() == (REPO / "msop" / "integrations" / "keeper.py").read_bytes()


# --- the training's run, stopped when a restart is accepted ---------------------------------

STUCK = (  # a rank stuck on a lost peer: it says it got SIGTERM and goes on waiting
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: print('got SIGTERM', flush=True))\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
SAVES = (  # a rank that saves on SIGTERM, for a while, then exits 0
    "import signal, sys, time\n"
    "def stop(*_):\n"
    "    print('got SIGTERM', flush=True); time.sleep(2.5); print('saved', flush=True)\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, stop)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def training(pod: Pod, code: str) -> subprocess.Popen[bytes]:
    """The training container's command under the keeper the barrier installed."""
    assert exits(pod.barrier())[0] == 0
    runs = pod.dir / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-I", str(runs / "keeper.py"), str(runs), "mindspore", "--",
         sys.executable, "-c", code],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc


def test_an_accepted_restart_stops_the_run_at_once_sigkill_after_the_grace(pod: Pod) -> None:
    run = training(pod, STUCK)
    sidecar = pod.serve()
    assert pod.post("/restart", signed("restart", 4))[0] == 202
    assert exits(sidecar)[0] == 75
    # No kubelet here: only the keeper stops the run, SIGTERM first, then (the default
    # grace, 1 s) SIGKILL.
    out, err = run.communicate(timeout=WAIT)
    assert run.returncode == 137 and out == b"got SIGTERM\n", err
    assert b"msop restarts the pod in place (generation 4)" in err
    info = json.loads((pod.dir / "runs" / "run.json").read_text())
    assert (info["exit_code"], info["signal"], info["stopped_for"]) == (137, 9, 4)
    again = pod.serve()  # started again by the kubelet: it shows the stopped run
    again.send_signal(signal.SIGTERM)
    code, shown, _ = exits(again)
    assert code == 0
    assert "stopped by msop for the restart in place to generation 4, ended" in shown
    assert "killed by signal 9 (exit code 137)" in shown and "got SIGTERM" in shown


def test_a_grace_longer_than_the_kubelets_is_waited_for_before_the_exit(pod: Pod) -> None:
    pod.env["MSOP_AGENT_STOP_GRACE"] = "30"  # the template's terminationGracePeriodSeconds
    run = training(pod, SAVES)
    sidecar = pod.serve()
    assert pod.post("/restart", signed("restart", 4))[0] == 202
    assert exits(sidecar)[0] == 75
    sidecar_gone = time.time()
    # The sidecar exits (and the kubelet stops what is left) only once the run ended:
    # the run saved in its own time, past the kubelet's 2 s.
    info = json.loads((pod.dir / "runs" / "run.json").read_text())
    assert info["stopped_for"] == 4 and info["ended"] <= sidecar_gone
    out, _ = run.communicate(timeout=WAIT)
    assert run.returncode == 0 and out == b"got SIGTERM\nsaved\n"


def test_a_stop_request_left_from_an_earlier_run_is_not_this_runs(pod: Pod) -> None:
    assert exits(pod.barrier())[0] == 0
    runs = pod.dir / "runs"
    (runs / "stop").write_text(json.dumps({"generation": 2, "grace": 0}))
    proc = subprocess.Popen(
        [sys.executable, "-I", str(runs / "keeper.py"), str(runs), "mindspore", "--",
         "sh", "-c", "sleep 0.5; echo done"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = proc.communicate(timeout=WAIT)
    assert (proc.returncode, out) == (0, b"done\n"), err
    assert "stopped_for" not in json.loads((runs / "run.json").read_text())


def test_sigterm_stops_it_with_0(pod: Pod) -> None:
    proc = pod.serve()
    proc.send_signal(signal.SIGTERM)
    assert exits(proc)[0] == 0


def test_by_default_it_listens_on_every_address_ipv4_and_ipv6(pod: Pod) -> None:
    # In a network namespace of its own (only its loopback): a unit test never listens on
    # this machine's interfaces.
    code = textwrap.dedent(
        """
        import json, os, signal, subprocess, sys, time, urllib.request
        proc = subprocess.Popen([sys.executable, "-m", "msop.integrations.agent", "serve"])
        port, answers, deadline = os.environ["MSOP_AGENT_PORT"], {}, time.monotonic() + 20
        for host in ("127.0.0.1", "[::1]"):
            while host not in answers:
                try:
                    with urllib.request.urlopen(f"http://{host}:{port}/state", timeout=5) as r:
                        answers[host] = json.load(r)["generation"]
                except OSError:
                    assert time.monotonic() < deadline and proc.poll() is None
                    time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        print(json.dumps({"answers": answers, "code": proc.wait(20)}))
        """
    )
    env = {**pod.env, "no_proxy": "*", "NO_PROXY": "*"}
    out = subprocess.run(
        private_loopback([sys.executable, "-c", code]), env=env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"answers": {"127.0.0.1": 3, "[::1]": 3}, "code": 0}


def test_a_replacement_waits_on_its_first_start_for_the_release_of_its_generation(
    pod: Pod,
) -> None:
    # Made to replace a lost member during a hybrid restart at generation 3: it starts
    # with the pods restarted in place, not before.
    barrier = pod.barrier(MSOP_AGENT_HOLD="1")
    pod.wait_for_state({"generation": 3, "requested": False, "waiting": True})
    (pod.dir / "released").write_text("2")
    time.sleep(0.3)
    assert barrier.poll() is None
    (pod.dir / "released").write_text("3")
    code, out, err = exits(barrier)
    assert code == 0, err
    assert out.splitlines() == [
        "msop barrier: waiting for msop to release generation 3 (this pod replaces a lost member)",
        "msop barrier: generation 3 released: the training may start",
    ]
    assert pod.state() == {"generation": 3, "requested": False, "waiting": False}
    # Its later restarts are ordinary ones: a failure of its own moves it on.
    again = pod.barrier(MSOP_AGENT_HOLD="1")
    pod.wait_for_state({"generation": 4, "requested": False, "waiting": True})
    (pod.dir / "released").write_text("4")
    assert exits(again)[0] == 0
