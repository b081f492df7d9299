"""Training progress on the real node: the MindSpore example reports through msop's
callback (``msop.integrations.mindspore.ProgressReporter``), the operator polls Worker
0 and writes ``status.progress``; a pod of another job cannot report for it.

- ``test_progress_rises_to_100_while_the_loss_falls``: while the real example trains,
  ``status.progress`` appears, its percentage and step rise, its loss falls, it carries
  an ETA; at the end it is 100 (the final report, from Worker 0's termination message),
  ``kubectl get msjobs`` shows it in the Progress column, and the SDK's progress line
  shows it too.
- ``test_a_pod_of_another_job_cannot_report_for_this_one``: an impostor job's Worker 0
  serves a report that names the real job's Worker 0 (its name and uid). The operator
  asks the impostor only for the impostor's own progress, sees the wrong identity and
  refuses it (a log line and ``msop_progress_polls_total{result="rejected"}``): the
  numbers reach neither job's status.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from msop.api.report import summary
from msop.sdk.statusline import format_progress
from testbed.examples import MINDSPORE_JOB as NAME
from testbed.realnode import NodeImages, RealCluster
from tests.e2e.msjobs import get, wait_condition, wait_for
from tests.e2e.real.install import OPERATOR_NAMESPACE
from tests.e2e.real.training import launch

JSON = dict[str, Any]


def progress_of(cluster: RealCluster, ns: str, name: str) -> JSON | None:
    job = get(cluster, ns, "msjob", name)
    return ((job or {}).get("status") or {}).get("progress")


def has_loss(progress: JSON) -> bool:
    return any(m["name"] == "loss" for m in progress.get("metrics", []))


def loss(progress: JSON) -> float:
    return float(next(m["value"] for m in progress.get("metrics", []) if m["name"] == "loss"))


def operator_logs(cluster: RealCluster) -> str:
    """Every operator replica's log: ``kubectl logs deployment/...`` reads one pod of the
    two, which need not be the leader that polls."""
    return cluster.kubectl(
        "logs", "-n", OPERATOR_NAMESPACE, "--tail=-1", "--prefix",
        "-l", "app.kubernetes.io/name=msop,app.kubernetes.io/component=controller-manager",
        check=False,
    ).stdout  # fmt: skip


def test_progress_rises_to_100_while_the_loss_falls(
    fast_progress: RealCluster, namespace: str, images: NodeImages, checkpoints: Path
) -> None:
    cluster = fast_progress
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.15", EPOCHS="20")
    seen: list[JSON] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = get(cluster, namespace, "msjob", NAME) or {}
        progress = (job.get("status") or {}).get("progress")
        if progress and (not seen or progress != seen[-1]):
            seen.append(progress)
        conditions = {c["type"] for c in (job.get("status") or {}).get("conditions", [])
                      if c["status"] == "True"}  # fmt: skip
        if conditions & {"Succeeded", "Failed"}:
            break
        time.sleep(0.5)
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=30)

    # What a user watching `kubectl get msjob -o yaml` sees. Which reports the test catches
    # depends on when the operator's polls land (every PROGRESS_INTERVAL s over ~30 s of training),
    # so nothing below needs a particular one: the report served before the first step has
    # no loss and no ETA, and the first report with a loss may come at any step.
    training = [p for p in seen if 0 < p["step"] < p["totalSteps"]]
    assert len(training) >= 2, seen  # it reported while it trained, not only at the end
    percents = [p["percentComplete"] for p in seen]
    assert percents == sorted(percents), percents
    assert [p["step"] for p in seen] == sorted(p["step"] for p in seen)
    assert all(p["totalSteps"] == 200 and p["totalEpochs"] == 20 for p in seen), seen
    assert any("estimatedRemainingSeconds" in p for p in training), training
    times = [p["lastReportTime"] for p in seen]
    assert times == sorted(times), times

    final = job["status"]["progress"]
    assert final["percentComplete"] == 100 and final["step"] == 200, final
    first = next((p for p in training if has_loss(p)), None)
    assert first is not None, training  # a report taken mid-training carries the loss
    assert loss(final) < loss(first), [(p["step"], loss(p)) for p in seen if has_loss(p)]
    table = cluster.kubectl("get", "msjobs", "-n", namespace).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:5] == ["NAME", "STATE", "WORKERS", "PROGRESS", "AGE"], header
    assert row.split()[3] == "100", table
    line = format_progress(job)
    assert line.endswith(summary(final)) and "100% epoch 20/20" in line, line


IMPOSTOR = "impostor"
IMPOSTOR_SCRIPT = r"""
import http.server, json, os
victim = json.loads(os.environ["VICTIM"])
body = json.dumps({"version": 1, "pod": victim, "seq": 1, "age": 0, "step": 199,
                   "totalSteps": 200, "percentComplete": 99.5,
                   "metrics": [{"name": "loss", "value": "0.000001"}]}).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)
        print("served a forged report to", self.client_address[0], flush=True)
http.server.HTTPServer(("", int(os.environ["MSOP_PROGRESS_PORT"])), Handler).serve_forever()
"""


def impostor_job(image: str, victim: JSON) -> JSON:
    container = {
        "name": "mindspore",
        "image": image,
        "command": ["python", "-c", IMPOSTOR_SCRIPT],
        "env": [{"name": "VICTIM", "value": json.dumps(victim)}],
    }
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": IMPOSTOR},
        "spec": {"msReplicaSpecs": {"Worker": {
            "replicas": 1, "restartPolicy": "Never",
            "template": {"spec": {"containers": [container]}},
        }}},
    }  # fmt: skip


def test_a_pod_of_another_job_cannot_report_for_this_one(
    fast_progress: RealCluster, namespace: str, images: NodeImages, checkpoints: Path
) -> None:
    cluster = fast_progress
    launch(cluster, namespace, images, checkpoints, STEP_DELAY="0.3", EPOCHS="10")
    victim_pod = f"{NAME}-worker-0"
    pod = wait_for(f"{victim_pod} exists", lambda: get(cluster, namespace, "pod", victim_pod),
                   timeout=60)  # fmt: skip
    victim = {"name": victim_pod, "uid": pod["metadata"]["uid"]}
    cluster.kubectl("apply", "-n", namespace, "-f", "-",
                    input=json.dumps(impostor_job(images.python.ref, victim)))  # fmt: skip

    def forged_and_refused() -> bool:
        logs = cluster.kubectl("logs", "-n", namespace, f"{IMPOSTOR}-worker-0",
                               check=False).stdout  # fmt: skip
        return "served a forged report" in logs and any(
            "progress report rejected" in line and f"{namespace}/{IMPOSTOR}" in line
            and victim_pod in line
            for line in operator_logs(cluster).splitlines()
        )  # fmt: skip

    wait_for("the operator asked the impostor and refused its answer", forged_and_refused,
             timeout=120, interval=1)  # fmt: skip
    # The real job goes on reporting its own numbers, never the forged ones.
    real = wait_for("the real job's own progress", lambda: progress_of(cluster, namespace, NAME),
                    timeout=120, interval=1)  # fmt: skip
    assert progress_of(cluster, namespace, IMPOSTOR) is None
    job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300)
    assert progress_of(cluster, namespace, IMPOSTOR) is None
    assert job["status"]["progress"]["percentComplete"] == 100
    assert real.get("metrics") != [{"name": "loss", "value": "0.000001"}]
    assert job["status"]["progress"]["metrics"] != [{"name": "loss", "value": "0.000001"}]
