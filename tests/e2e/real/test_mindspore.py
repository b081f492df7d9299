"""Real MindSpore (2.10, CPU) trained through msop on the real node: examples/mindspore.

Each test applies the example as a user does (``kubectl kustomize examples/mindspore``,
then ``kubectl apply``), changing only what this machine needs: the image built here, a
checkpoint directory of its own, and the length of the run.

- ``test_trains_to_success``: Scheduler + 2 Workers form one MindSpore cluster through
  the operator's ``MS_*`` env and Service, the loss falls, the job Succeeds, and the real
  exit codes (0) reach ``status``.
- ``test_killed_worker_restarts_every_pod_in_place``: SIGKILL of a Worker's training
  process mid-run (from the host, as the OOM killer does) gives a real 137; the job is
  restarted in place (the default): the same pods (UIDs, IPs), each container restarted
  once, no pod written by the operator (audit log), the script resumes from its
  checkpoint, one restart is counted, the condition and Event say "in place", name the
  pod and the code and end with the killed run's last output, and it Succeeds. What the
  restart took (to every rank training, to Running, the writes) goes to the tier's
  restart report.
- ``test_killed_worker_of_a_job_that_recreates_restarts_every_pod``: the same with
  ``spec.restartInPlace: false``: every pod is recreated with the same ``MS_*`` values
  (the condition says why), the peers' follow-on exits do not fail the job, and it
  Succeeds; its figures go to the same report.
- ``test_deleted_pods_are_replaced_alone_and_the_others_restart_in_place``: a hybrid
  restart, twice in one job: a Worker's pod deleted mid-run, then the Scheduler's. Each
  time only that pod is recreated (a new UID, the same ``MS_*`` values: the new Scheduler
  is behind the same Service), the others keep their UIDs and IPs with their training
  container restarted once more, the operator writes one pod (the create), each restart
  counts once, training resumes from its checkpoint and the job Succeeds. The figures go
  to the tier's restart report.
- ``test_script_error_fails_the_job``: a training script that raises (exit 1) fails the
  job with that pod, code and reason in the condition message, which (and the Event, and
  ``kubectl describe msjob``) ends with the traceback's last lines.
- ``test_a_job_that_exhausts_its_restarts_keeps_its_last_failure``: the same error under
  ``OnFailure`` and ``backoffLimit: 1``: one restart, then ``BackoffLimitExceeded`` and
  every pod deleted; the traceback's end is still in the condition, the Events, ``msop
  status``, ``msop logs --previous`` and the SDK's ``get_job_logs(previous=True)``.
- ``test_scale_of_a_running_job_restarts_it_with_the_new_size``: ``kubectl scale`` from 2
  to 3 Workers mid-run restarts the cluster once, every pod agrees on
  ``MS_WORKER_NUM=3``, training resumes from its checkpoint, and the job Succeeds.
- ``test_suspended_job_saves_on_sigterm_and_resumes_at_the_next_step``: ``msop
  suspend`` mid-epoch: every Worker gets SIGTERM (the pods' deletion), they agree to stop
  after the same step k, rank 0 saves step k within the grace period, and
  ``status.progress.lastCheckpoint`` (from Worker 0's final report, read from the deleted
  pod) and ``msop status`` ("Resumes from") say so; ``msop resume``: every Worker's
  first record is ``resume`` at step k and its first step k+1, and the job Succeeds.
- ``test_ps_mode_forms_a_cluster``: Scheduler + 1 PS + 2 Workers (``MS_SERVER_NUM=1``):
  the parameter server registers and serves until the training ends (the job Succeeds
  while it runs); stopped with SIGTERM it exits 0, and then the Scheduler exits 0.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from msop.sdk import MSJobClientSync
from testbed.examples import MINDSPORE_JOB as NAME
from testbed.examples import mindspore_example
from testbed.realnode import NodeImages, RealCluster
from tests.e2e.msjobs import (
    condition,
    env_of,
    events,
    get,
    job_pods,
    wait_condition,
    wait_events,
    wait_for,
)
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.real.restarts import (
    VICTIM,
    WORKERS,
    assert_exit_reported,
    assert_last_output_kept,
    assert_no_failure,
    assert_recreated,
    assert_replaced_alone,
    assert_restarted_in_place,
    assert_restarted_once,
    assert_workers_resumed,
    event_messages,
    kill_a_worker,
    the_restart_event,
    time_the_restart,
    wait_restarting,
)
from tests.e2e.real.training import (
    apply,
    assert_every_stopped_run_kept,
    exit_codes,
    kill_training_process,
    last_epoch,
    launch,
    msop,
    records,
    report_restart,
    wait_training,
    worker_records,
)

JSON = dict[str, Any]


@pytest.fixture
def logs(installed: RealCluster, namespace: str) -> Iterator[JobLogs]:
    """The job's pod logs, followed from the start: a timed-out wait shows their tails."""
    with JobLogs(installed, namespace, NAME) as followed:
        yield followed


def test_trains_to_success(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0")
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=240, details=logs.tail)

    pods = job_pods(cluster, namespace, NAME)
    workers = {n: p for n, p in pods.items() if "-worker-" in n}
    assert exit_codes(workers) == {f"{NAME}-worker-0": 0, f"{NAME}-worker-1": 0}
    assert job["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
    ranks = set()
    for pod, lines in worker_records(cluster, namespace, 2).items():
        joined = next(r for r in lines if r["event"] == "fresh")
        assert joined["size"] == 2, (pod, joined)  # one cluster of two workers
        ranks.add(joined["rank"])
        losses = [r["loss"] for r in lines if r["event"] == "step"]
        assert len(losses) == 200, (pod, len(losses))
        assert losses[-1] < losses[0] / 10, (pod, losses[0], losses[-1])
        assert lines[-1]["event"] == "done" and lines[-1]["trained"] is True
    assert ranks == {0, 1}
    # The Workers found the Scheduler through its Service's ClusterIP (the Service is gone
    # now: cleanPodPolicy Running removes it with the job's end).
    host = env_of(pods[f"{NAME}-worker-0"])["MS_SCHED_HOST"]
    assert ipaddress.ip_address(host) in ipaddress.ip_network("10.96.0.0/16"), host
    assert (checkpoints / "latest.json").is_file()


def test_killed_worker_restarts_every_pod_in_place(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.1")
    before, killed_at, restarting = kill_a_worker(cluster, namespace, logs)
    for pod in before.values():  # every member carries the agent
        assert pod["spec"]["initContainers"][0]["name"] == "msop-agent", pod["spec"]
    assert restarting["reason"] == "MSJobRestartingInPlace", restarting
    # The kubelet may remove the killed container before it reports its exit: then the
    # job says so rather than make up a code (msop.msjob.inplacerestart.as_ended).
    reported = f"pod {namespace}/{VICTIM} exited with code 137" in restarting["message"]
    removed = f"pod {namespace}/{VICTIM} failed without an exit code (RestartedInPlace"
    assert reported or removed in restarting["message"], restarting
    figures = time_the_restart(cluster, namespace, killed_at, logs)
    after = job_pods(cluster, namespace, NAME)
    assert figures["pod writes"] == 0, figures
    report_restart("in place (Scheduler/Worker, 3 pods)", figures)
    # While every pod is there: once the job Succeeds, cleanPodPolicy Running deletes the
    # Scheduler's pod, and its log with it.
    assert_every_stopped_run_kept(cluster, namespace, NAME, sorted(after))
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)

    assert_restarted_once(job)
    assert_restarted_in_place(before, after)
    assert_workers_resumed(cluster, namespace)
    messages = event_messages(cluster, namespace)
    restart = the_restart_event(messages, "MSJobRestartingInPlace")
    if reported:
        assert_exit_reported(messages, namespace)
        assert_last_output_kept(restart, namespace)
    assert_no_failure(messages, "MSJobRestarting")


def test_killed_worker_of_a_job_that_recreates_restarts_every_pod(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    """spec.restartInPlace: false: the pods are recreated, as before in-place restarts."""
    cluster = installed
    launch(cluster, namespace, images, checkpoints, {"restartInPlace": False}, STEP_DELAY="0.1")
    before, killed_at, restarting = kill_a_worker(cluster, namespace, logs)
    assert not any("initContainers" in p["spec"] for p in before.values())
    assert f"pod {namespace}/{VICTIM} exited with code 137" in restarting["message"], restarting
    assert "they are recreated: its spec.restartInPlace is false" in restarting["message"]
    report_restart("recreation (Scheduler/Worker, 3 pods)",
                   time_the_restart(cluster, namespace, killed_at, logs))  # fmt: skip
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)

    assert_restarted_once(job)
    assert_recreated(before, job_pods(cluster, namespace, NAME))
    assert_workers_resumed(cluster, namespace)
    messages = event_messages(cluster, namespace)
    assert_exit_reported(messages, namespace)
    restart = the_restart_event(messages, "MSJobRestarting")
    assert "137" in restart, restart
    assert_last_output_kept(restart, namespace)
    assert_no_failure(messages)


def test_deleted_pods_are_replaced_alone_and_the_others_restart_in_place(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    """A hybrid restart, twice in one job: a Worker's pod deleted, then the Scheduler's."""
    cluster = installed
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.1", EPOCHS="30")
    scheduler = f"{NAME}-scheduler-0"
    for victim, epoch, restarts in ((VICTIM, 3, 1), (scheduler, 0, 2)):
        if epoch:
            wait_training(cluster, namespace, VICTIM, epoch, logs)
        else:  # the second: once both Workers train again past their resumed epoch
            resumed = max(last_epoch(cluster, namespace, w) for w in WORKERS)
            for worker in WORKERS:
                wait_training(cluster, namespace, worker, resumed + 2, logs)
        before = job_pods(cluster, namespace, NAME)
        deleted_at = time.time()
        cluster.kubectl("delete", "pod", "-n", namespace, victim, "--wait=false")
        restarting = wait_restarting(cluster, namespace, logs)
        assert restarting["reason"] == "MSJobRestartingInPlace", restarting
        assert f"pod(s) {victim} of the running cluster are gone" in restarting["message"]
        figures = time_the_restart(cluster, namespace, deleted_at, logs)
        after = job_pods(cluster, namespace, NAME)
        assert_replaced_alone(before, after, victim)
        assert figures["writes"].get("create pods") == 1, figures  # the replacement only
        assert figures["pod writes"] == 1, figures
        role = "Worker" if victim == VICTIM else "Scheduler"
        report_restart(f"hybrid ({role} pod deleted, 3 pods)", figures)
        job = get(cluster, namespace, "msjob", NAME) or {}
        counted = job["status"]["replicaStatuses"]
        assert sum(s.get("restarts", 0) for s in counted.values()) == restarts, counted

    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)
    assert condition(job, "Failed") is None
    assert_workers_resumed(cluster, namespace)
    reasons = [e["reason"] for e in events(cluster, namespace, NAME)]
    assert reasons.count("MSJobMemberLost") == 2, reasons  # one Event per restart
    assert_no_failure(event_messages(cluster, namespace), "MSJobRestarting")


def test_script_error_fails_the_job(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    # Rank 0 cannot write its first checkpoint (a read-only mount): a Python error, exit 1.
    launch(
        cluster, namespace, images, checkpoints, STEP_DELAY="0", CHECKPOINT_DIR="/opt/train/ckpt"
    )
    job = wait_condition(cluster, namespace, NAME, "Failed", timeout=240, details=logs.tail)
    failed = condition(job, "Failed")
    assert failed is not None and failed["reason"] == "MSJobFailed", failed
    assert "exited with code 1 (Error)" in failed["message"], failed
    culprit = failed["message"].split(f"pod {namespace}/", 1)[1].split()[0]
    lines = records(cluster, namespace, culprit)
    assert lines and lines[-1]["event"] != "done"
    assert "Read-only file system" in cluster.kubectl(
        "logs", "-n", namespace, culprit, "-c", "mindspore").stdout  # fmt: skip
    # The traceback's end stays on the job (the kubelet kept the log tail as the
    # termination message: FallbackToLogsOnError), where kubectl describe shows it.
    said = failed["message"].split(f"The last output of pod {namespace}/{culprit}:\n", 1)
    assert len(said) == 2 and "Read-only file system" in said[1], failed["message"]
    described = cluster.kubectl("describe", "msjob", NAME, "-n", namespace).stdout
    assert "Read-only file system" in described, described
    evs = wait_events(cluster, namespace, NAME, "MSJobFailed")
    reasons = [e["reason"] for e in evs]
    assert reasons.count("MSJobFailed") == 1 and "MSJobRestarting" not in reasons
    (warning,) = [e for e in evs if e["reason"] == "MSJobFailed"]
    assert warning["message"] == failed["message"]


def test_a_job_that_exhausts_its_restarts_keeps_its_last_failure(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    # The same script error, retried (OnFailure) once (backoffLimit 1): after the restart
    # the job fails and every pod is deleted; the traceback's end stays on the job.
    config_map, job = mindspore_example(
        cluster, images.mindspore.ref, checkpoints, STEP_DELAY="0",
        CHECKPOINT_DIR="/opt/train/ckpt",
    )  # fmt: skip
    job["spec"]["runPolicy"]["backoffLimit"] = 1
    # Recreated: a restart in place often loses the failed run's output, which the
    # kubelet removes with its container before reporting it (docs/concepts/
    # restart-scope.md#restart-in-place says so); this test is about what is kept.
    job["spec"]["restartInPlace"] = False
    for spec in job["spec"]["msReplicaSpecs"].values():
        spec["restartPolicy"] = "OnFailure"
    apply(cluster, namespace, config_map, job)
    done = wait_condition(cluster, namespace, NAME, "Failed", timeout=300, details=logs.tail)
    failed = condition(done, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded", failed
    assert "Read-only file system" in failed["message"].split("The last output of pod ")[1]
    wait_for("every pod deleted", lambda: not job_pods(cluster, namespace, NAME), timeout=120)
    messages = [e["message"] for e in wait_events(cluster, namespace, NAME, "MSJobRestarting")
                if e["reason"] == "MSJobRestarting"]  # fmt: skip
    assert messages and "Read-only file system" in messages[0]

    def msop(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "msop.cli", *args, NAME, "-n", namespace,
             "--kubeconfig", str(cluster.kubeconfig)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    status = msop("status")
    assert status.returncode == 0, status.stderr
    assert "BackoffLimitExceeded" in status.stdout and "Read-only file system" in status.stdout
    previous = msop("logs", "--previous")
    assert previous.returncode == 0, previous.stderr
    assert "Read-only file system" in previous.stdout, previous.stdout
    with MSJobClientSync(cluster.kubeconfig, namespace=namespace) as client:
        kept = client.get_status(NAME).last_failure
        assert kept is not None and "Read-only file system" in kept.message
        lines = list(client.get_job_logs(NAME, previous=True))
    assert lines and all(pod.startswith(f"{NAME}-") for pod, _ in lines)


def test_scale_of_a_running_job_restarts_it_with_the_new_size(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.1")
    wait_training(cluster, namespace, f"{NAME}-worker-0", 2, logs)
    cluster.kubectl("scale", "msjob", NAME, "-n", namespace, "--replicas=3")
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)

    pods = job_pods(cluster, namespace, NAME)
    workers = {n: p for n, p in pods.items() if "-worker-" in n}
    assert len(workers) == 3, sorted(pods)
    assert {env_of(p)["MS_WORKER_NUM"] for p in pods.values()} == {"3"}
    assert set(exit_codes(workers).values()) == {0}
    for pod, lines in worker_records(cluster, namespace, 3).items():
        start = next(r for r in lines if r["event"] in ("resume", "fresh"))
        assert start["size"] == 3, (pod, start)
        assert start["event"] == "resume" and start["epoch"] >= 2, (pod, start)
    status = job["status"]
    assert sum(s.get("restarts", 0) for s in status["replicaStatuses"].values()) == 0
    resizing = [e for e in events(cluster, namespace, NAME) if e["reason"] == "MSJobResizing"]
    assert len(resizing) == 1 and "MS_WORKER_NUM 2 -> 3" in resizing[0]["message"], resizing


def test_suspended_job_saves_on_sigterm_and_resumes_at_the_next_step(
    fast_progress: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = fast_progress
    launch(cluster, namespace, images, checkpoints, EPOCHS="4", STEP_DELAY="0.4")
    wait_training(cluster, namespace, f"{NAME}-worker-0", 1, logs)
    wait_for("a checkpoint in the status", lambda: last_checkpoint(cluster, namespace),
             timeout=30, interval=0.5, details=logs.tail)  # fmt: skip
    msop(cluster, "suspend", NAME, "-n", namespace)
    wait_condition(cluster, namespace, NAME, "Suspended", timeout=60, details=logs.tail)
    wait_for("every pod gone", lambda: not job_pods(cluster, namespace, NAME),
             timeout=60, details=logs.tail)  # fmt: skip
    saved = json.loads((checkpoints / "latest.json").read_text())
    step = saved["step"]
    assert saved["file"] == f"step-{step}.ckpt", saved
    assert '"event": "stopped"' in logs.tail(), logs.tail()

    # The checkpoint saved on SIGTERM reaches the status with Worker 0's final report, its
    # termination message, read from the deleted pod's last state.
    def reported_step() -> Any:
        return last_checkpoint(cluster, namespace).get("step")

    wait_for(f"step {step} in the status", lambda: reported_step() == step, timeout=30,
             interval=0.5, details=lambda: f"the status shows step {reported_step()}")  # fmt: skip
    reported = last_checkpoint(cluster, namespace)
    status = msop(cluster, "status", NAME, "-n", namespace)
    assert f"Resumes from:  step {reported['step']} (epoch {reported['epoch']}) at " in status

    msop(cluster, "resume", NAME, "-n", namespace)
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300, details=logs.tail)
    for pod, lines in worker_records(cluster, namespace, 2).items():
        resumed = next(r for r in lines if r["event"] in ("resume", "fresh"))
        assert (resumed["event"], resumed["step"]) == ("resume", step), (pod, resumed)
        first = next(r for r in lines if r["event"] == "step")
        assert first["step"] == step + 1, (pod, first)
        assert lines[-1]["event"] == "done" and lines[-1]["trained"] is True, (pod, lines[-1])
    assert job["status"]["progress"]["lastCheckpoint"]["step"] == 40, job["status"]["progress"]


def last_checkpoint(cluster: RealCluster, ns: str) -> JSON:
    """``status.progress.lastCheckpoint`` of the example's job ({} without one)."""
    job = get(cluster, ns, "msjob", NAME) or {}
    return dict(((job.get("status") or {}).get("progress") or {}).get("lastCheckpoint") or {})


def test_ps_mode_forms_a_cluster(
    installed: RealCluster,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
    logs: JobLogs,
) -> None:
    cluster = installed
    config_map, job = mindspore_example(cluster, images.mindspore.ref, checkpoints, STEP_DELAY="0",
                              EPOCHS="5")  # fmt: skip
    specs = job["spec"]["msReplicaSpecs"]
    specs["PS"] = json.loads(json.dumps(specs["Scheduler"]))
    # Keep the pods that still run when the job ends (the PS and the Scheduler, which
    # cleanPodPolicy Running would delete), to stop them here and read their exit codes.
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    apply(cluster, namespace, config_map, job)
    wait_condition(cluster, namespace, NAME, "Succeeded", timeout=240, details=logs.tail)

    pods = job_pods(cluster, namespace, NAME)
    ps, scheduler = f"{NAME}-ps-0", f"{NAME}-scheduler-0"
    assert env_of(pods[ps])["MS_ROLE"] == "MS_PSERVER"
    assert {env_of(p)["MS_SERVER_NUM"] for p in pods.values()} == {"1"}
    # init() returns in a parameter server only once it has registered with the Scheduler.
    assert {"event": "joined", "role": "MS_PSERVER"}.items() <= records(cluster, namespace, ps)[
        -1
    ].items()
    # The Workers trained to the end while the PS served: it is still in the cluster, and
    # so is the Scheduler, which waits for every member to leave.
    assert exit_codes(pods) == {
        ps: None,
        scheduler: None,
        f"{NAME}-worker-0": 0,
        f"{NAME}-worker-1": 0,
    }

    # The job's end: stop the PS as the kubelet does when msop deletes its pod. It leaves
    # the cluster and exits 0, and then the Scheduler, the last member, exits 0 too.
    kill_training_process(cluster, namespace, ps, "TERM")

    def ended() -> dict[str, int | None] | None:
        codes = exit_codes(job_pods(cluster, namespace, NAME))
        return codes if None not in codes.values() else None

    codes = wait_for("the PS and the Scheduler to exit", ended, timeout=60, interval=1,
                     details=logs.tail)  # fmt: skip
    assert codes == dict.fromkeys(pods, 0), codes
    assert records(cluster, namespace, ps)[-1].items() >= {
        "event": "stopped", "signal": "SIGTERM"}.items()  # fmt: skip
