"""The one-process stand-in for every pod's agent (``testbed.agents``), kept faithful.

The bench's ``hybrid`` scenario restarts a 1,000-pod job in place against
``testbed.agents``, which serves msop's own agent for every pod from one process and
plays the kubelet's part. Here the same stand-in serves a small job (1 Scheduler + 7
Workers): one Worker deleted from the running job, and the operator must see what it
sees with real agents (tests/e2e/kwok/test_restart_in_place.py): only the deleted pod
recreated (held at its barrier), the seven others restarted in place by their agents at
its signed request, all released together, the job Running again with one restart.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed import LocalCluster
from testbed.agents import StandInProcess
from tests.e2e.inplace import msjob as inplace_msjob
from tests.e2e.inplace import when
from tests.e2e.msjobs import apply, condition, events, get, job_pods, must_condition, wait_for
from tests.e2e.reliability import operator_calls
from tests.e2e.sessions import OperatorFactory

NAME = "standin"
WORKERS = 7


def msjob() -> dict[str, object]:
    container = {"name": "mindspore", "image": "ms:kwok", "command": ["python", "train.py"]}
    return inplace_msjob(NAME, WORKERS, container)


@pytest.fixture
def stand_in(cluster: LocalCluster, namespace: str, tmp_path: Path) -> Iterator[StandInProcess]:
    proc = StandInProcess(cluster.kubeconfig, namespace, tmp_path / "agents").start()
    yield proc
    assert proc.stop() == 0, proc.log_tail()


def test_a_deleted_worker_is_recreated_alone_with_the_stand_in(
    cluster: LocalCluster, namespace: str, declared: None, start_operator: OperatorFactory,
    stand_in: StandInProcess,
) -> None:  # fmt: skip
    op = start_operator("--agent-image=msop:kwok")
    apply(cluster, namespace, msjob())
    every = {f"{NAME}-scheduler-0", *(f"{NAME}-worker-{i}" for i in range(WORKERS))}
    wait_for("every pod adopted", lambda: {e["pod"] for e in stand_in.events("adopted")}
             >= every, timeout=60, details=stand_in.log_tail)  # fmt: skip

    def running_again(after: float) -> bool:
        job = get(cluster, namespace, "msjob", NAME) or {}
        done = condition(job, "Restarting")
        running = condition(job, "Running")
        return bool(running and running["status"] == "True"
                    and (done is None or done["status"] == "False")
                    and (after == 0 or done is not None))  # fmt: skip

    wait_for("the job Running", lambda: running_again(0), timeout=60)
    before = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, NAME).items()}
    assert before.keys() == every

    lost = f"{NAME}-worker-3"
    deleted_at = time.time()
    cluster.kubectl("delete", "pod", "-n", namespace, lost, "--grace-period=0", "--force")
    started = wait_for(
        "every pod started again",
        lambda: (s := {e["pod"] for e in stand_in.events("started")}) >= every and s,
        timeout=45, details=lambda: op.log_tail() + stand_in.log_tail(),
    )  # fmt: skip
    assert started == every
    wait_for("the job Running again", lambda: running_again(deleted_at), timeout=30,
             details=op.log_tail)  # fmt: skip

    now = {n: p["metadata"]["uid"] for n, p in job_pods(cluster, namespace, NAME).items()}
    assert {n for n in now if now[n] != before[n]} == {lost}
    # The seven others restarted in place: their agents exited with the reserved code.
    restarted = [e["pod"] for e in stand_in.events("restart")]
    assert sorted(restarted) == sorted(every - {lost})
    held = [e for e in stand_in.events("adopted") if e["pod"] == lost]
    assert held[-1]["held"] is True and held[-1]["uid"] == now[lost]
    for name, pod in job_pods(cluster, namespace, NAME).items():
        (main,) = pod["status"]["containerStatuses"]
        assert "running" in main["state"], (name, main)
        assert main["restartCount"] == (0 if name == lost else 1), (name, main)

    def calls(verb: str) -> list[str]:
        return [c["objectRef"].get("name") for c in operator_calls(
            cluster.audit_log, namespace, verb, "pods") if when(c) >= deleted_at]  # fmt: skip

    assert calls("create") == [lost]
    assert calls("delete") == []
    job = get(cluster, namespace, "msjob", NAME) or {}
    assert sum(e.get("restarts", 0) for e in job["status"]["replicaStatuses"].values()) == 1
    restarting = must_condition(job, "Restarting")
    assert (restarting["status"], restarting["reason"]) == ("False", "MSJobRestarted")
    reasons = {(e["type"], e["reason"]) for e in events(cluster, namespace, NAME)}
    assert ("Warning", "MSJobMemberLost") in reasons
    assert ("Warning", "MSJobRestarting") not in reasons
