"""Real MindSpore (2.10, CPU) under msrun through msop on the real node:
examples/mindspore-msrun, 2 Worker pods x 2 local workers, msrun started in each pod by
``python -m msop.integrations.msrun``, the Scheduler by msrun in Worker 0's pod.

- ``test_one_cluster_of_4_ranks_survives_a_killed_worker_and_a_scale_to_6``: the 4 ranks
  form one cluster and the loss falls; SIGKILL of one local worker's process (from the
  host, as the OOM killer does) makes its pod exit 137 with the launcher's verdict, every
  pod restarts in place once (the same pods, msrun started again in each, no pod written
  by the operator) and resumes from the checkpoint, and the event names the pod, the
  local rank and the signal; then ``kubectl scale`` to 3 pods recreates the cluster with
  6 ranks, and the job Succeeds, with rank 0's final progress in its status.
- ``test_an_oom_killed_worker_restarts_the_job``: a local worker exhausts the pod's
  memory limit; the kernel kills it; the same restart in place, and the job Succeeds.
- ``test_a_deleted_pod_is_replaced_alone_with_its_node_rank``: a hybrid restart of msrun:
  Worker 1's pod deleted mid-run is recreated alone with the same ``MS_*`` values
  (``MS_NODE_RANK`` 1), Worker 0's pod (msrun, and the Scheduler it runs) restarts in
  place, the 4 ranks resume from the checkpoint as one cluster, the operator writes one
  pod (the create), one restart is counted, and the job Succeeds.
- ``test_a_script_error_in_one_worker_fails_the_job``: rank 0 cannot write its checkpoint
  (a Python error, exit 1): the job Fails once, naming the pod and the local worker.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from testbed.examples import MSRUN_EXAMPLE, mindspore_example
from testbed.examples import MSRUN_JOB as NAME
from testbed.realnode import NodeImages, RealCluster
from tests.e2e.msjobs import condition, env_of, events, get, job_pods, wait_condition, wait_for
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.real.training import (
    apply,
    assert_every_stopped_run_kept,
    exit_codes,
    operator_writes,
    records,
)

JSON = dict[str, Any]


@pytest.fixture
def logs(installed: RealCluster, namespace: str) -> Iterator[JobLogs]:
    with JobLogs(installed, namespace, NAME) as followed:
        yield followed


def launch(
    cluster: RealCluster, ns: str, images: NodeImages, checkpoints: Path, **env: str
) -> None:
    apply(cluster, ns, *mindspore_example(cluster, images.mindspore.ref, checkpoints,
                                          MSRUN_EXAMPLE, **env))  # fmt: skip


def pod_records(cluster: RealCluster, ns: str, pods: int) -> list[JSON]:
    """The JSON lines of every process of every pod (msrun tails each worker's log)."""
    return [r for i in range(pods) for r in records(cluster, ns, f"{NAME}-worker-{i}")]


def started(lines: list[JSON]) -> dict[int, JSON]:
    """Rank -> the first fresh/resume record of that rank."""
    out: dict[int, JSON] = {}
    for r in lines:
        if r.get("event") in ("fresh", "resume"):
            out.setdefault(r["rank"], r)
    return out


def worker_process(cluster: RealCluster, ns: str, pod: str, rank: int) -> int:
    """The pid, on this host, of the training process of ``rank`` in ``pod``: found by the
    pod's cgroup and the ``RANK_ID`` and ``MS_ROLE`` msrun gave it (not the watcher)."""
    obj = get(cluster, ns, "pod", pod)
    assert obj is not None
    uid = obj["metadata"]["uid"]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if uid not in cgroups and uid.replace("-", "_") not in cgroups:
            continue
        if (
            f"RANK_ID={rank}".encode() in environ
            and b"MS_ROLE=MS_WORKER" in environ
            and any(arg.endswith(b"train.py") for arg in cmdline)
            and b"--watch" not in cmdline
        ):
            return int(entry.name)
    raise AssertionError(f"no training process of rank {rank} in {pod}")


def past_epoch(cluster: RealCluster, ns: str, pods: int, epoch: int) -> bool:
    return any(r.get("event") == "epoch" and r["epoch"] >= epoch
               for r in pod_records(cluster, ns, pods))  # fmt: skip


def restart_time(condition: JSON) -> float:
    """When a condition last changed (epoch seconds)."""
    at = str(condition["lastTransitionTime"]).replace("Z", "+00:00")
    return datetime.fromisoformat(at).timestamp()


def restarting(cluster: RealCluster, ns: str, logs: JobLogs) -> JSON:
    found: JSON = wait_for(
        "Restarting=True",
        lambda: (
            (c := condition(get(cluster, ns, "msjob", NAME), "Restarting"))
            and c["status"] == "True"
            and c
        ),
        timeout=120, interval=0.5, details=logs.tail,
    )  # fmt: skip
    return found


def test_one_cluster_of_4_ranks_survives_a_killed_worker_and_a_scale_to_6(
    installed: RealCluster, namespace: str, images: NodeImages, checkpoints: Path, logs: JobLogs
) -> None:
    cluster = installed
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.2", EPOCHS="8")
    wait_for("training past epoch 2", lambda: past_epoch(cluster, namespace, 2, 2),
             timeout=240, interval=1, details=logs.tail)  # fmt: skip
    first_run = pod_records(cluster, namespace, 2)
    ranks = started(first_run)
    assert sorted(ranks) == [0, 1, 2, 3], ranks  # one cluster of 4 ranks, over 2 pods
    assert {r["size"] for r in ranks.values()} == {4}
    starts = [r for r in first_run if r.get("event") == "start" and r["role"] == "MS_WORKER"]
    assert sorted(int(r["rank_id"]) for r in starts) == [0, 1, 2, 3], starts
    first_loss = next(r["loss"] for r in first_run if r.get("event") == "step")
    victim = f"{NAME}-worker-1"
    before = job_pods(cluster, namespace, NAME)

    os.kill(worker_process(cluster, namespace, victim, rank=3), signal.SIGKILL)
    restart = restarting(cluster, namespace, logs)
    verdict = "msrun: local worker 1 (rank 3) was killed by signal 9 (SIGKILL)"
    # The kubelet may remove the container before it reports its exit (and the launcher's
    # verdict): then the job says that it restarted without a code.
    reported = f"pod {namespace}/{victim} exited with code 137" in restart["message"]
    assert reported or "failed without an exit code (RestartedInPlace" in restart["message"]
    assert not reported or verdict in restart["message"], restart

    assert restart["reason"] == "MSJobRestartingInPlace", restart
    killed_at = restart_time(restart)

    def resumed() -> bool:
        return any(r.get("event") == "resume" for r in pod_records(cluster, namespace, 2))

    wait_for("the restarted cluster resumed", resumed, timeout=240, interval=1,
             details=logs.tail)  # fmt: skip
    again = job_pods(cluster, namespace, NAME)
    assert {n: p["metadata"]["uid"] for n, p in again.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }, "restarted in place: the same pods"
    for pod in again.values():
        (main,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == "mindspore"]
        assert main["restartCount"] == 1, main
    resumed_at = time.time()
    writes = operator_writes(cluster.audit_log, namespace, killed_at - 5, resumed_at)
    assert not [k for k in writes if k.split()[1] == "pods"], writes
    assert_every_stopped_run_kept(cluster, namespace, NAME, sorted(again))
    cluster.kubectl("scale", "msjob", NAME, "-n", namespace, "--replicas=3")
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=400, details=logs.tail)

    pods = job_pods(cluster, namespace, NAME)
    assert sorted(pods) == [f"{NAME}-worker-{i}" for i in range(3)]
    assert {env_of(p)["MS_WORKER_NUM"] for p in pods.values()} == {"6"}
    assert set(exit_codes(pods).values()) == {0}
    last_run = pod_records(cluster, namespace, 3)
    ranks = started(last_run)
    assert sorted(ranks) == list(range(6)), ranks
    assert all(r["event"] == "resume" and r["size"] == 6 for r in ranks.values()), ranks
    final_loss = [r["loss"] for r in last_run if r.get("event") == "step"][-1]
    assert final_loss < first_loss, (first_loss, final_loss)
    status = job["status"]
    assert sum(s.get("restarts", 0) for s in status["replicaStatuses"].values()) == 1, status
    assert status["progress"]["percentComplete"] == 100, status.get("progress")
    said = {(e["reason"], e["message"]) for e in events(cluster, namespace, NAME)}
    restarts = [m for r, m in said if r == "MSJobRestartingInPlace"]
    assert len(restarts) == 1 and victim in restarts[0], restarts
    assert not reported or verdict in restarts[0], restarts
    resizes = [m for r, m in said if r == "MSJobResizing"]
    assert len(resizes) == 1 and "MS_WORKER_NUM 4 -> 6" in resizes[0], resizes
    assert not {"MSJobFailed", "BackoffLimitExceeded"} & {r for r, _ in said}


def test_an_oom_killed_worker_restarts_the_job(
    installed: RealCluster, namespace: str, images: NodeImages, checkpoints: Path, logs: JobLogs
) -> None:
    cluster = installed
    # Rank 2 (local worker 0 of the second pod) fills its pod's 4 GiB in epoch 2.
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.05", EPOCHS="4", OOM_RANK="2")
    restart = restarting(cluster, namespace, logs)
    assert f"pod {namespace}/{NAME}-worker-1 " in restart["message"], restart
    if "exited with code 137" in restart["message"]:  # reported before the restart
        assert "local worker 0 (rank 2) was killed by signal 9 (SIGKILL)" in restart["message"]
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)
    status = job["status"]
    assert sum(s.get("restarts", 0) for s in status["replicaStatuses"].values()) == 1, status
    resumed = started(pod_records(cluster, namespace, 2))
    assert sorted(resumed) == [0, 1, 2, 3] and all(
        r["event"] == "resume" and r["epoch"] >= 1 for r in resumed.values()), resumed  # fmt: skip
    assert restart["reason"] == "MSJobRestartingInPlace", restart
    for pod in job_pods(cluster, namespace, NAME).values():
        (main,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == "mindspore"]
        assert main["restartCount"] == 1, main


def test_a_deleted_pod_is_replaced_alone_with_its_node_rank(
    installed: RealCluster, namespace: str, images: NodeImages, checkpoints: Path, logs: JobLogs
) -> None:
    """Rank 0's pod: Worker 0 runs msrun with the Scheduler, and the other pod reaches it
    through its Service. Its replacement gets a new IP behind the same ClusterIP; Worker 1
    restarts in place, and the 4 ranks form one cluster again. (Worker 1's pod deleted is
    the Scheduler/Worker job's case in test_mindspore.py, and msrun's on kwok.)"""
    cluster = installed
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.2", EPOCHS="6")
    wait_for("training past epoch 2", lambda: past_epoch(cluster, namespace, 2, 2),
             timeout=240, interval=1, details=logs.tail)  # fmt: skip
    victim, kept = f"{NAME}-worker-0", f"{NAME}-worker-1"
    before = job_pods(cluster, namespace, NAME)
    deleted_at = time.time()
    cluster.kubectl("delete", "pod", "-n", namespace, victim, "--wait=false")
    restart = restarting(cluster, namespace, logs)
    assert restart["reason"] == "MSJobRestartingInPlace", restart
    assert f"pod(s) {victim} of the running cluster are gone" in restart["message"], restart
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=400, details=logs.tail)

    after = job_pods(cluster, namespace, NAME)
    assert after[victim]["metadata"]["uid"] != before[victim]["metadata"]["uid"]
    assert after[kept]["metadata"]["uid"] == before[kept]["metadata"]["uid"]
    (main,) = [s for s in after[kept]["status"]["containerStatuses"] if s["name"] == "mindspore"]
    assert main["restartCount"] == 1, main  # Worker 1's msrun, in place
    cluster_env = {k: v for k, v in env_of(before[victim]).items() if k.startswith("MS_")}
    assert cluster_env["MS_NODE_RANK"] == "0", cluster_env
    assert {k: v for k, v in env_of(after[victim]).items() if k.startswith("MS_")} == cluster_env
    ranks = started(pod_records(cluster, namespace, 2))
    assert sorted(ranks) == [0, 1, 2, 3], ranks  # one cluster of 4 ranks again
    assert all(r["event"] == "resume" and r["size"] == 4 for r in ranks.values()), ranks
    status = job["status"]
    assert sum(s.get("restarts", 0) for s in status["replicaStatuses"].values()) == 1, status
    writes = operator_writes(cluster.audit_log, namespace, deleted_at, time.time())
    assert writes.get("create pods") == 1 and "delete pods" not in writes, writes
    reasons = [e["reason"] for e in events(cluster, namespace, NAME)]
    assert reasons.count("MSJobMemberLost") == 1, reasons
    assert not {"MSJobFailed", "BackoffLimitExceeded", "MSJobRestarting"} & set(reasons)


def test_a_script_error_in_one_worker_fails_the_job(
    installed: RealCluster, namespace: str, images: NodeImages, checkpoints: Path, logs: JobLogs
) -> None:
    cluster = installed
    # Rank 0 cannot write its first checkpoint (a read-only mount): a Python error, exit 1.
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0", EPOCHS="3",
           CHECKPOINT_DIR="/opt/train/ckpt")  # fmt: skip
    job = wait_condition(cluster, namespace, NAME, "Failed", timeout=300, details=logs.tail)
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "MSJobFailed", failed
    pattern = (
        rf"pod {namespace}/{NAME}-worker-(\d) exited with code 1 \(Error\): "
        r"msrun: local worker (\d) \(rank 0\) exited with code 1"
    )
    assert re.search(pattern, failed["message"]), failed
    reasons = [e["reason"] for e in events(cluster, namespace, NAME)]
    assert reasons.count("MSJobFailed") == 1 and "MSJobRestarting" not in reasons, reasons
