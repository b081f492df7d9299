"""A killed Worker on the real node, and what every restart of the real tier must show: the
kill, the time the job took to train again, and the checks that the in-place and the
recreating restart share (one restart counted, the Workers resumed from their checkpoint,
one restart Event that names the pod, no failure) or do not (the same pods restarted, or
new pods with the same ``MS_*`` values)."""

from __future__ import annotations

import time
from typing import Any

from testbed.examples import MINDSPORE_JOB as NAME
from testbed.realnode import RealCluster
from tests.e2e.msjobs import condition, env_of, events, get, job_pods, wait_for
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.real.training import (
    CLUSTER_ENV,
    kill_training_process,
    operator_writes,
    records,
    started_after,
    training_again,
    wait_training,
    worker_records,
)

JSON = dict[str, Any]

#: The Worker whose training process the restart tests kill.
VICTIM = f"{NAME}-worker-1"
WORKERS = [f"{NAME}-worker-0", VICTIM]


def kill_a_worker(
    cluster: RealCluster, ns: str, logs: JobLogs
) -> tuple[dict[str, JSON], float, JSON]:
    """SIGKILL :data:`VICTIM`'s training process past epoch 3: the pods before, when, and
    the ``Restarting`` condition that follows."""
    wait_training(cluster, ns, VICTIM, 3, logs)
    before = job_pods(cluster, ns, NAME)
    killed_at = time.time()
    kill_training_process(cluster, ns, VICTIM)
    return before, killed_at, wait_restarting(cluster, ns, logs)


def wait_restarting(cluster: RealCluster, ns: str, logs: JobLogs) -> JSON:
    """The job's ``Restarting`` condition, once True."""
    restarting: JSON = wait_for(
        "Restarting=True",
        lambda: (
            (c := condition(get(cluster, ns, "msjob", NAME), "Restarting"))
            and c["status"] == "True"
            and c
        ),
        timeout=60,
        details=logs.tail,
    )
    return restarting


#: How often :func:`time_the_restart` reads the job (the moment it is Running again is
#: known to this much) and, at most, the Workers' logs (their moments are the logged ones).
JOB_LOOK_SECONDS = 0.2
LOG_LOOK_SECONDS = 1.0


def running_again(samples: list[tuple[float, JSON | None]]) -> float | None:
    """When the job was first seen Running again (``Restarting`` False, ``Running`` True)
    among ``samples`` of ``(when the answer came, the job)``, taken from when it was
    ``Restarting``; None if it was not."""
    for when, job in samples:
        done, running = condition(job, "Restarting"), condition(job, "Running")
        if done and done["status"] == "False" and running and running["status"] == "True":
            return when
    return None


def restart_figures(
    killed_at: float, worker_records: dict[str, list[JSON]], running: float
) -> dict[str, float]:
    """Each moment of a restart, in seconds from the kill at ``killed_at``, measured on
    its own: from the Workers' own records (their first ``start``, ``resume`` and
    ``step`` after the kill; the latest Worker's, as ``seconds to every <event>``;
    ``seconds to every rank training`` is the latest first step), and ``running``,
    when the job was seen Running again. No moment waits for another, so any may come
    before any other."""
    marks: dict[str, float] = {}
    for pod, lines in worker_records.items():
        for r in started_after(lines, killed_at):
            event = r.get("event")
            if event in ("start", "resume", "step"):
                first = min(marks.get(f"{pod} {event}", r["time"]), r["time"])
                marks[f"{pod} {event}"] = first
    figures: dict[str, float] = {}
    for event in ("start", "resume", "step"):
        firsts = [marks[k] for pod in worker_records if (k := f"{pod} {event}") in marks]
        if firsts and len(firsts) == len(worker_records):
            figures[f"seconds to every {event}"] = round(max(firsts) - killed_at, 1)
    figures["seconds to every rank training"] = figures["seconds to every step"]
    figures["seconds to Running"] = round(running - killed_at, 1)
    return figures


def time_the_restart(cluster: RealCluster, ns: str, killed_at: float, logs: JobLogs) -> JSON:
    """Wait for the job to run again after a kill at ``killed_at``; what it took.

    The job's status is read every :data:`JOB_LOOK_SECONDS` and the Workers' logs at most
    every :data:`LOG_LOOK_SECONDS`, in one loop, until both say the restart is over; each
    moment is then measured from the kill on its own (:func:`restart_figures`)."""
    samples: list[tuple[float, JSON | None]] = []
    trained: list[float] = []
    read_logs = [0.0]

    def over() -> bool:
        job = get(cluster, ns, "msjob", NAME)
        samples.append((time.time(), job))
        if not trained and time.monotonic() - read_logs[0] >= LOG_LOOK_SECONDS:
            read_logs[0] = time.monotonic()
            if (t := training_again(cluster, ns, WORKERS, killed_at)) is not None:
                trained.append(t)
        return bool(trained) and running_again(samples) is not None

    wait_for("the job Running and every rank training again", over, timeout=240,
             interval=JOB_LOOK_SECONDS, details=logs.tail)  # fmt: skip
    running = running_again(samples)
    assert running is not None
    figures = restart_figures(killed_at, {p: records(cluster, ns, p) for p in WORKERS}, running)
    writes = operator_writes(cluster.audit_log, ns, killed_at, max(running, trained[0]))
    return {
        **figures,
        "pod writes": sum(n for k, n in writes.items() if k.split()[1] == "pods"),
        "writes": writes,
    }


def assert_restarted_once(job: JSON) -> None:
    """One restart counted on the job, and it did not fail."""
    status = job["status"]
    assert sum(s.get("restarts", 0) for s in status["replicaStatuses"].values()) == 1, status
    assert condition(job, "Failed") is None


def assert_restarted_in_place(before: dict[str, JSON], after: dict[str, JSON]) -> None:
    """The same pods (UIDs, IPs), each of whose training containers restarted once."""
    assert set(after) == set(before)
    for name in before:
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"], name
        assert after[name]["status"]["podIP"] == before[name]["status"]["podIP"], name
        assert main_restarts(after[name]) == 1, name


def main_restarts(pod: JSON) -> int:
    """How often the kubelet restarted the pod's training container."""
    (main,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == "mindspore"]
    return int(main["restartCount"])


def assert_replaced_alone(before: dict[str, JSON], after: dict[str, JSON], lost: str) -> None:
    """A hybrid restart: ``lost`` recreated (a new UID) with the same ``MS_*`` values,
    every other pod the same (UID, IP) with its training container restarted once more."""
    assert set(after) == set(before)
    old, new = env_of(before[lost]), env_of(after[lost])
    assert after[lost]["metadata"]["uid"] != before[lost]["metadata"]["uid"], lost
    assert {k: new[k] for k in CLUSTER_ENV} == {k: old[k] for k in CLUSTER_ENV}, lost
    for name in set(before) - {lost}:
        assert after[name]["metadata"]["uid"] == before[name]["metadata"]["uid"], name
        assert after[name]["status"]["podIP"] == before[name]["status"]["podIP"], name
        assert main_restarts(after[name]) == main_restarts(before[name]) + 1, name


def assert_recreated(before: dict[str, JSON], after: dict[str, JSON]) -> None:
    """Every pod recreated (a new UID), with the same ``MS_*`` values."""
    assert set(after) == set(before)
    for name in before:
        assert after[name]["metadata"]["uid"] != before[name]["metadata"]["uid"], name
        old, new = env_of(before[name]), env_of(after[name])
        assert {k: new[k] for k in CLUSTER_ENV} == {k: old[k] for k in CLUSTER_ENV}, name


def assert_workers_resumed(cluster: RealCluster, ns: str) -> None:
    """Both Workers resumed from a checkpoint past the kill's epoch 3 and trained to the
    end."""
    for pod, lines in worker_records(cluster, ns, 2).items():
        resumed = next(r for r in lines if r["event"] in ("resume", "fresh"))
        assert resumed["event"] == "resume" and resumed["epoch"] >= 3, (pod, resumed)
        assert lines[-1]["event"] == "done"


def event_messages(cluster: RealCluster, ns: str) -> set[tuple[str, str]]:
    """The job's Events as (reason, message)."""
    return {(e["reason"], e["message"]) for e in events(cluster, ns, NAME)}


def the_restart_event(messages: set[tuple[str, str]], reason: str) -> str:
    """The message of the one Event of ``reason``, which names :data:`VICTIM`."""
    restarts = [m for r, m in messages if r == reason]
    assert len(restarts) == 1 and VICTIM in restarts[0], restarts
    return restarts[0]


def assert_exit_reported(messages: set[tuple[str, str]], ns: str) -> None:
    """An Event says that :data:`VICTIM` exited with the SIGKILL's code."""
    assert ("ExitedWithCode", f"Pod {ns}/{VICTIM} exited with code 137") in messages


def assert_last_output_kept(restart: str, ns: str) -> None:
    """The killed run's last lines outlive it, in the restart's Event (and condition)."""
    assert f"The last output of pod {ns}/{VICTIM}:\n" in restart, restart


def assert_no_failure(messages: set[tuple[str, str]], *also: str) -> None:
    """No Event says the job failed or ran out of restarts (nor any of ``also``)."""
    assert not {"MSJobFailed", "BackoffLimitExceeded", *also} & {r for r, _ in messages}
