"""The real tier's restart report (tests/e2e/real/restarts.py) measures each moment of a
restart from the kill on its own: the job seen Running again is not timed after the ranks
train again (docs/performance.md). Driven here with recorded timestamps on a virtual clock,
with a stand-in for the cluster's kubectl."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from testbed.examples import MINDSPORE_JOB
from tests.e2e import msjobs
from tests.e2e.real import restarts

JSON = dict[str, Any]
KILLED_AT = 1000.0
W0, W1 = restarts.WORKERS


class Clock:
    """Virtual time: ``sleep`` moves it on."""

    def __init__(self, t: float) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def monotonic(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += seconds


def _record(event: str, at: float) -> JSON:
    return {"event": event, "time": KILLED_AT + at}


#: What the Workers' training scripts logged (seconds after the kill), and the job's
#: conditions: Running again 9.6 s after the kill, before either rank trains again.
RECORDS = {
    W0: [_record("step", -5.0), _record("start", 7.1), _record("resume", 13.9),
         _record("step", 14.2), _record("step", 14.6)],
    W1: [_record("start", 7.7), _record("resume", 14.5), _record("step", 14.8)],
}  # fmt: skip
RUNNING_AGAIN_AT = 9.6


class Cluster:
    """Answers ``kubectl get msjob`` and ``kubectl logs`` as the cluster stood at the
    virtual time; each call takes 0.05 s."""

    def __init__(self, clock: Clock, audit_log: Path) -> None:
        self.clock, self.audit_log = clock, audit_log

    def _job(self) -> JSON:
        again = self.clock.t >= KILLED_AT + RUNNING_AGAIN_AT
        conditions = [
            {"type": "Running", "status": "True" if again else "False"},
            {"type": "Restarting", "status": "False" if again else "True"},
        ]
        return {"metadata": {"name": MINDSPORE_JOB}, "status": {"conditions": conditions}}

    def kubectl(
        self, *args: str, check: bool = True, **kw: Any
    ) -> subprocess.CompletedProcess[str]:
        self.clock.t += 0.05
        if args[0] == "get":
            out = json.dumps(self._job())
        else:
            assert args[0] == "logs", args
            seen = [r for r in RECORDS[args[3]] if r["time"] <= self.clock.t]
            out = "MindSpore says hello\n" + "".join(json.dumps(r) + "\n" for r in seen)
        return subprocess.CompletedProcess(args, 0, out, "")


class Logs:
    def tail(self) -> str:
        return ""


def test_each_moment_of_a_restart_is_measured_from_the_kill_on_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clock = Clock(KILLED_AT + 2.0)  # the kill was seen Restarting 2 s after it
    monkeypatch.setattr(restarts, "time", clock)
    monkeypatch.setattr(msjobs, "time", clock)
    audit = tmp_path / "audit.log"
    audit.write_text("")
    cluster = Cluster(clock, audit)
    figures = restarts.time_the_restart(cluster, "ns", KILLED_AT, Logs())  # type: ignore[arg-type]
    assert figures["seconds to every start"] == 7.7
    assert figures["seconds to every resume"] == 14.5
    assert figures["seconds to every rank training"] == figures["seconds to every step"] == 14.8
    # Seen at the first look after 9.6 s (looks 0.2 s apart, each call 0.05 s), not
    # after the ranks trained again.
    assert RUNNING_AGAIN_AT <= figures["seconds to Running"] <= RUNNING_AGAIN_AT + 0.5
    assert figures["pod writes"] == 0


def test_running_again_is_the_first_sample_past_the_restart() -> None:
    def job(restarting: str, running: str) -> JSON:
        conditions = [{"type": "Running", "status": running},
                      {"type": "Restarting", "status": restarting}]  # fmt: skip
        return {"status": {"conditions": conditions}}

    samples = [(1.0, job("True", "False")), (1.2, None), (1.4, job("False", "True")),
               (1.6, job("False", "True"))]  # fmt: skip
    assert restarts.running_again(samples) == 1.4
    assert restarts.running_again(samples[:2]) is None
