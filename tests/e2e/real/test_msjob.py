"""MSJobs whose pods run real containers, through msop installed in-cluster.

- ``test_sample_runs_in_real_containers``: the dataparallel sample, with an image built
  here and a command that prints its ``MS_*`` environment, reaches Succeeded. The
  containers' own output shows ``MS_SCHED_HOST`` = the Scheduler Service's ClusterIP on
  the Workers and the Scheduler's own pod IP on the Scheduler; the SDK's ``get_logs``
  returns those real lines.
- ``test_sigkill_is_restarted_by_exitcode_policy``: a Worker whose process is killed with
  SIGKILL exits 137 for real; the ExitCode policy restarts the job (restartScope Job, the
  default with a Scheduler: every pod, in place), counts the restart, and says so in an
  event that names the pod.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from msop.sdk import MSJobClient
from testbed.realnode import NodeImages, RealCluster
from tests.e2e.msjobs import (
    event_reasons,
    events,
    get,
    job_pods,
    sample,
    wait_condition,
    wait_events,
    wait_for,
)
from tests.e2e.real.training import PRINT_ENV, apply_job, real_job

JSON = dict[str, Any]


def logs(cluster: RealCluster, ns: str, pod: str) -> dict[str, str]:
    out = cluster.kubectl("logs", "-n", ns, pod, "-c", "mindspore").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if line.startswith("MS_"))


def test_sample_runs_in_real_containers(
    installed: RealCluster, namespace: str, images: NodeImages
) -> None:
    cluster = installed
    job = real_job(
        sample("ms_wide_deep_dataparallel.yaml"),
        images.python.ref,
        {"Scheduler": f"{PRINT_ENV}; sleep 2", "Worker": PRINT_ENV},
        workers=2,
    )
    name = apply_job(cluster, namespace, job)
    wait_condition(cluster, namespace, name, "Succeeded", timeout=120)

    pods = job_pods(cluster, namespace, name)
    assert sorted(pods) == [f"{name}-scheduler-0", f"{name}-worker-0", f"{name}-worker-1"]
    services = json.loads(
        cluster.kubectl(
            "get", "svc", "-n", namespace, "-l", f"training.kubeflow.org/job-name={name}",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    assert len(services) == 1, services
    cluster_ip = services[0]["spec"]["clusterIP"]

    sched = logs(cluster, namespace, f"{name}-scheduler-0")
    assert sched["MS_ROLE"] == "MS_SCHED"
    assert sched["MS_SCHED_HOST"] == pods[f"{name}-scheduler-0"]["status"]["podIP"]
    for i in range(2):
        pod = f"{name}-worker-{i}"
        env = logs(cluster, namespace, pod)
        assert env["MS_ROLE"] == "MS_WORKER", env
        assert env["MS_SCHED_HOST"] == cluster_ip, (env, cluster_ip)
        assert env["MS_SCHED_PORT"] == "2222"
        assert env["MS_WORKER_NUM"] == "2"
        assert env["MS_NODE_ID"] == pod
        state = pods[pod]["status"]["containerStatuses"][0]["state"]
        assert state["terminated"]["exitCode"] == 0, state

    finished = get(cluster, namespace, "msjob", name)
    assert finished is not None
    assert finished["status"]["replicaStatuses"]["Worker"]["succeeded"] == 2
    wait_events(cluster, namespace, name, "MSJobSucceeded")

    async def sdk_logs() -> list[str]:
        async with MSJobClient(kubeconfig=cluster.kubeconfig, namespace=namespace) as client:
            return [line async for line in client.get_logs(name, index=1)]

    lines = asyncio.run(sdk_logs())
    assert f"MS_NODE_ID={name}-worker-1" in lines
    assert f"MS_SCHED_HOST={cluster_ip}" in lines


def test_sigkill_is_restarted_by_exitcode_policy(
    installed: RealCluster, namespace: str, images: NodeImages
) -> None:
    cluster = installed
    # sh stays PID 1 and waits for its child; killing the child makes sh exit 137
    # (a SIGKILL sent to PID 1 from inside its own namespace would be ignored).
    run = "sleep 600 & echo $! > /tmp/child.pid; wait $!"
    job = real_job(
        sample("msjob_exitcode_restart.yaml"),
        images.python.ref,
        {"Scheduler": run, "Worker": run},
        workers=1,
    )
    name = apply_job(cluster, namespace, job)
    worker = f"{name}-worker-0"

    def running_uid() -> str | None:
        pod = job_pods(cluster, namespace, name).get(worker)
        if pod and pod["status"].get("phase") == "Running":
            return str(pod["metadata"]["uid"])
        return None

    first = wait_for("the worker Running", running_uid, timeout=90)
    scheduler_uid = job_pods(cluster, namespace, name)[f"{name}-scheduler-0"]["metadata"]["uid"]
    # Running says the container started, not that sh has written the child's pid yet.
    wait_for("the child's pid written", lambda: cluster.kubectl(
        "exec", "-n", namespace, worker, "-c", "mindspore", "--", "cat", "/tmp/child.pid",
        check=False).stdout.strip(), timeout=30)  # fmt: skip
    cluster.kubectl("exec", "-n", namespace, worker, "-c", "mindspore", "--",
                    "sh", "-c", "kill -9 $(cat /tmp/child.pid)")  # fmt: skip

    # restartScope Job (a Scheduler) restarts every pod, in place by default: the same
    # pods, each container restarted once.
    def restarted(pod_name: str) -> bool:
        pod = job_pods(cluster, namespace, name).get(pod_name) or {}
        main = [c for c in (pod.get("status") or {}).get("containerStatuses") or []
                if c["name"] == "mindspore"]  # fmt: skip
        return (
            bool(main)
            and main[0].get("restartCount", 0) >= 1
            and "running" in main[0].get("state", {})
        )

    scheduler = f"{name}-scheduler-0"
    wait_for("both pods restarted in place and running",
             lambda: restarted(worker) and restarted(scheduler), timeout=120)  # fmt: skip
    pods = job_pods(cluster, namespace, name)
    assert pods[worker]["metadata"]["uid"] == first
    assert pods[f"{name}-scheduler-0"]["metadata"]["uid"] == scheduler_uid
    job_now = get(cluster, namespace, "msjob", name)
    assert job_now is not None
    assert job_now["status"]["replicaStatuses"]["Worker"]["restarts"] == 1
    restarting = [c for c in job_now["status"]["conditions"] if c["type"] == "Restarting"]
    assert restarting and restarting[0]["reason"] in ("MSJobRestartingInPlace", "MSJobRestarted")
    wait_for(
        "the MSJobRestartingInPlace event",
        lambda: "MSJobRestartingInPlace" in event_reasons(cluster, namespace, name),
    )
    messages = [e.get("message", "") for e in events(cluster, namespace, name)
                if e.get("reason") == "MSJobRestartingInPlace"]  # fmt: skip
    assert any(worker in m for m in messages), messages
    assert "MSJobFailed" not in event_reasons(cluster, namespace, name)
