"""The job commands of ``msop`` (and of ``kubectl msjob``, the same program as a kubectl
plugin) on real API objects, with the operator running: a job's whole life from the
command line, and the exit codes a script reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from msop.sdk import dataparallel_job
from testbed import KubeletStandIn, LocalCluster, OperatorProcess
from tests.e2e.msjobs import apply, job_pods, wait_for, wait_pods

JSON = dict[str, Any]
VENV_BIN = Path(sys.executable).parent


def msop(cluster: LocalCluster, ns: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "msop.cli", *args, "-n", ns, "--kubeconfig", cluster.kubeconfig],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_jobs_life_from_the_command_line(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, kubelet: KubeletStandIn
) -> None:
    ns, name = namespace, "cli-job"
    apply(cluster, ns, dataparallel_job(name, "mindspore:cli", "python train.py", workers=2))
    pods = {f"{name}-scheduler-0", f"{name}-worker-0", f"{name}-worker-1"}
    wait_pods(cluster, ns, name, pods)
    for pod in sorted(pods):
        kubelet.run(ns, pod)

    waited = msop(cluster, ns, "wait", name, "--for", "Running", "--timeout", "60s")
    assert waited.returncode == 0, waited.stderr
    listed = msop(cluster, ns, "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "STATE", "WORKERS", "PROGRESS", "AGE"]
    assert row.split()[:3] == [name, "Running", "2/2"]
    as_json = json.loads(msop(cluster, ns, "list", "-o", "json").stdout)
    assert as_json["kind"] == "List" and [j["metadata"]["name"] for j in as_json["items"]] == [name]
    assert msop(cluster, ns, "list", "-o", "name").stdout.split() == [name]
    status = msop(cluster, ns, "status", name)
    assert status.returncode == 0 and "Running" in status.stdout, status
    assert yaml.safe_load(msop(cluster, ns, "status", name, "-o", "yaml").stdout)["kind"] == (
        "MSJob"
    )

    # kwok serves no container logs: one clear line and exit 1, not a traceback.
    logs = msop(cluster, ns, "logs", name)
    assert logs.returncode == 1 and logs.stderr.startswith("msop: error: "), logs
    assert "Traceback" not in logs.stderr

    assert msop(cluster, ns, "scale", name, "--replicas", "3").returncode == 0
    wait_for("4 pods", lambda: len(job_pods(cluster, ns, name)) == 4)
    assert msop(cluster, ns, "suspend", name).returncode == 0
    assert msop(cluster, ns, "wait", name, "--for", "Suspended", "--timeout", "60s").returncode == 0
    wait_for("the pods gone", lambda: not job_pods(cluster, ns, name))
    assert msop(cluster, ns, "resume", name).returncode == 0
    wait_for("the pods back", lambda: len(job_pods(cluster, ns, name)) == 4)

    # Exit codes: 4 when the wait times out, 3 for a job that does not exist, 2 for usage.
    timed_out = msop(cluster, ns, "wait", name, "--for", "Succeeded", "--timeout", "2s")
    assert timed_out.returncode == 4, timed_out
    assert msop(cluster, ns, "status", "no-such-job").returncode == 3
    assert msop(cluster, ns, "scale", name, "--replicas", "many").returncode == 2

    # The kubectl plugin: kubectl finds kubectl-msjob on PATH and runs it.
    plugin = subprocess.run(
        [cluster.binary("kubectl"), "msjob", "list", "-n", ns, "--kubeconfig",
         cluster.kubeconfig],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}"},
    )  # fmt: skip
    assert plugin.returncode == 0, plugin.stderr
    assert plugin.stdout.splitlines()[1].split()[0] == name

    deleted = msop(cluster, ns, "delete", name, "--wait")
    assert deleted.returncode == 0, deleted.stderr
    assert msop(cluster, ns, "status", name).returncode == 3
