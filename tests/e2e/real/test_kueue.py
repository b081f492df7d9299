"""Kueue on the real node: a real MindSpore job (examples/mindspore) is preempted
mid-training by a higher-priority one, queued again, re-admitted, and resumes from its
checkpoint to Succeeded, its restarts not counted against ``backoffLimit``.

The operator is the installed Deployment (config/default, which also installs
config/admission), then applied again with the component config/components/kueue (its
RBAC and ``--enable-kueue``), as docs/tasks/kueue.md tells users; Kueue's manager
(hack/kueue) runs against the same control plane. The ClusterQueue's quota holds one
example job (3 pods of 100m CPU and 512Mi: 300m, 1536Mi), with preemption of lower
priorities.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.examples import MINDSPORE_JOB as NAME
from testbed.examples import mindspore_example
from testbed.kueue import Kueue, build
from testbed.paths import CACHE, REPO
from testbed.realnode import NodeImages, RealCluster, write_overlay
from tests.e2e.msjobs import condition, events, get, job_pods, wait_condition, wait_for
from tests.e2e.real.install import DEPLOYMENT, OPERATOR_NAMESPACE, wait_available
from tests.e2e.real.joblogs import JobLogs
from tests.e2e.real.training import apply, records, wait_training

JSON = dict[str, Any]
URGENT = "urgent"


@pytest.fixture(scope="module")
def kueue_operator(installed: RealCluster, images: NodeImages) -> Iterator[Kueue]:
    """Kueue running against the real cluster, and the installed operator applied again
    with config/components/kueue: Kueue's RBAC and ``--enable-kueue`` (left on for the rest
    of the session: jobs without the queue label are not affected, and Kueue's CRDs stay
    installed)."""
    try:
        bin_dir = build()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    # In the cluster's network namespace, where the API server reaches Kueue's webhooks.
    k = Kueue(
        installed, bin_dir, CACHE / "e2e-logs", name="kueue-real", spawn=installed.spawn,
        expose=installed.expose, api_kubeconfig=installed.inner_kubeconfig,
    )  # fmt: skip
    try:
        k.start()
    except (RuntimeError, OSError) as e:
        k.stop()
        pytest.fail(str(e), pytrace=False)
    overlay = write_overlay(
        CACHE / "real" / "overlay-kueue", images.operator.ref, REPO / "config/default",
        components=[REPO / "config/components/kueue"],
    )  # fmt: skip
    installed.kubectl("apply", "-k", str(overlay))
    got = installed.kubectl("get", "deployment", DEPLOYMENT, "-n", OPERATOR_NAMESPACE, "-o", "json")
    args = json.loads(got.stdout)["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--enable-kueue" in args, args
    installed.kubectl("rollout", "status", f"deployment/{DEPLOYMENT}", "-n",
                      OPERATOR_NAMESPACE, "--timeout=180s", timeout=200)  # fmt: skip
    wait_available(installed)
    yield k
    k.stop()


def create(cluster: RealCluster, obj: JSON) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def queues(cluster: RealCluster, ns: str) -> None:
    flavor = f"node-{ns}"
    create(cluster, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                     "metadata": {"name": flavor}, "spec": {}})  # fmt: skip
    create(cluster, {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
        "metadata": {"name": f"cq-{ns}"},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [{
                "name": flavor, "resources": [{"name": "cpu", "nominalQuota": "300m"},
                                              {"name": "memory", "nominalQuota": "2Gi"}]}]}],
        },
    })  # fmt: skip
    create(cluster, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                     "metadata": {"name": "team", "namespace": ns},
                     "spec": {"clusterQueue": f"cq-{ns}"}})  # fmt: skip
    for level, value in (("low", 100), ("high", 1000)):
        create(cluster, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                         "metadata": {"name": f"{ns}-{level}"}, "value": value})  # fmt: skip
    wait_for(
        "the ClusterQueue active",
        lambda: (condition(get(cluster, ns, "clusterqueue", f"cq-{ns}"), "Active") or {}).get(
            "status") == "True",
    )  # fmt: skip


def cleanup(cluster: RealCluster, ns: str) -> None:
    cluster.kubectl("delete", "msjobs", "--all", "-n", ns, "--wait=true", check=False)
    for kind, name in (("clusterqueue", f"cq-{ns}"), ("resourceflavor", f"node-{ns}"),
                       ("workloadpriorityclass", f"{ns}-low"),
                       ("workloadpriorityclass", f"{ns}-high")):  # fmt: skip
        cluster.kubectl("delete", kind, name, "--wait=false", check=False)


def test_a_preempted_training_resumes_from_its_checkpoint_and_succeeds(
    installed: RealCluster,
    kueue_operator: Kueue,
    namespace: str,
    images: NodeImages,
    checkpoints: Path,
) -> None:
    cluster = installed
    queues(cluster, namespace)
    try:
        image = images.mindspore.ref
        config_map, victim = mindspore_example(cluster, image, checkpoints, STEP_DELAY="0.15")
        victim["metadata"]["labels"] = {
            "kueue.x-k8s.io/queue-name": "team",
            "kueue.x-k8s.io/priority-class": f"{namespace}-low",
        }
        _, urgent = mindspore_example(
            cluster, image, checkpoints / URGENT, STEP_DELAY="0", EPOCHS="2"
        )
        urgent["metadata"] = {"name": URGENT, "labels": {
            "kueue.x-k8s.io/queue-name": "team",
            "kueue.x-k8s.io/priority-class": f"{namespace}-high"}}  # fmt: skip
        apply(cluster, namespace, config_map, victim)
        with JobLogs(cluster, namespace, NAME) as logs:
            wait_training(cluster, namespace, f"{NAME}-worker-0", 3, logs)
        first_uids = {p["metadata"]["uid"] for p in job_pods(cluster, namespace, NAME).values()}

        apply(cluster, namespace, urgent)
        evicted = wait_for(
            "the training job evicted",
            lambda: (q := condition(get(cluster, namespace, "msjob", NAME), "Queued"))
            and q["status"] == "True" and q["reason"] == "WorkloadEvicted" and q,
            timeout=90,
        )  # fmt: skip
        assert "Preempted" in evicted["message"], evicted
        wait_condition(cluster, namespace, URGENT, "Succeeded", timeout=240)

        job = wait_condition(cluster, namespace, NAME, "Succeeded", timeout=300)
        after = job_pods(cluster, namespace, NAME)
        assert not first_uids & {p["metadata"]["uid"] for p in after.values()}
        status = job["status"]
        assert condition(job, "Failed") is None
        assert all(not s.get("restarts") for s in status["replicaStatuses"].values()), status
        for i in range(2):
            lines = records(cluster, namespace, f"{NAME}-worker-{i}")
            resumed = next(r for r in lines if r["event"] in ("resume", "fresh"))
            assert resumed["event"] == "resume" and resumed["epoch"] >= 3, (i, resumed)
            assert lines[-1]["event"] == "done"
        reasons = [e["reason"] for e in events(cluster, namespace, NAME)]
        assert "WorkloadEvicted" in reasons and "MSJobRestarting" not in reasons
        wl = json.loads(cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", namespace, "-l",
                                        f"training.kubeflow.org/job-name={NAME}", "-o",
                                        "json").stdout)["items"]  # fmt: skip
        assert len(wl) == 1
        finished = condition(wl[0], "Finished") or {}
        assert (finished.get("status"), finished.get("reason")) == ("True", "Succeeded")
        assert (condition(wl[0], "Requeued") or {}).get("reason") == "Preempted"
    finally:
        cleanup(cluster, namespace)
