"""Smoke test of the ground everything stands on: the local control plane itself."""

from __future__ import annotations

import ipaddress
import json
import time

from testbed import KubeletStandIn, LocalCluster

JOB = {
    "apiVersion": "mindspore.gitee.com/v1",
    "kind": "MSJob",
    "metadata": {"name": "smoke"},
    "spec": {
        "msReplicaSpecs": {
            "Worker": {
                "replicas": 1,
                "restartPolicy": "Never",
                "template": {
                    "spec": {"containers": [{"name": "mindspore", "image": "mindspore:smoke"}]}
                },
            }
        }
    },
}


def _wait(what: str, predicate: object, timeout: float = 60) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _pod(name: str, owner: dict[str, str] | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"name": name}
    if owner:
        meta["ownerReferences"] = [
            {
                "apiVersion": "mindspore.gitee.com/v1",
                "kind": "MSJob",
                "name": owner["name"],
                "uid": owner["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "mindspore",
                    "image": "mindspore:smoke",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def test_crd_object_pod_and_garbage_collection(
    cluster: LocalCluster, namespace: str, kubelet: KubeletStandIn
) -> None:
    crd = cluster.kubectl("get", "crd", "msjobs.mindspore.gitee.com", "-o", "name")
    assert (
        crd.stdout.strip()
        == "customresourcedefinition.apiextensions.k8s.io/msjobs.mindspore.gitee.com"
    )

    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(JOB))
    job = json.loads(cluster.kubectl("get", "msjob", "smoke", "-n", namespace, "-o", "json").stdout)
    assert (
        job["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"]
        == "mindspore"
    )

    owner = {"name": "smoke", "uid": job["metadata"]["uid"]}
    cluster.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps(_pod("smoke-worker-0", owner))
    )
    pod = kubelet.run(namespace, "smoke-worker-0")
    assert pod["spec"]["nodeName"].startswith("kwok-node-")
    # Simulated pods get loopback IPs (testbed.cluster.pod_cidr): whatever connects
    # to them, the progress poller included, stays on this machine.
    assert ipaddress.ip_address(pod["status"]["podIP"]).is_loopback, pod["status"]["podIP"]

    cluster.kubectl("delete", "msjob", "smoke", "-n", namespace, "--wait=false")

    def pod_gone() -> bool:
        proc = cluster.kubectl("get", "pod", "smoke-worker-0", "-n", namespace, check=False)
        return proc.returncode != 0 and "NotFound" in proc.stderr

    _wait("the garbage collector to delete the owned pod", pod_gone)


def test_kubelet_stand_in_drives_pod_lifecycle(
    cluster: LocalCluster, namespace: str, kubelet: KubeletStandIn
) -> None:
    for name in ("ok", "bad", "flaky"):
        cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(_pod(name)))
        kubelet.run(namespace, name)

    pod = kubelet.succeed(namespace, "ok")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0

    pod = kubelet.fail(namespace, "bad", exit_code=137)
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 137

    kubelet.restart(namespace, "flaky", exit_code=1)
    pod = kubelet.restart(namespace, "flaky", exit_code=2)
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running"
    assert status["restartCount"] == 2
    assert status["lastState"]["terminated"]["exitCode"] == 2

    # kwok must not move an ended pod back to Running behind our back.
    time.sleep(1)
    assert kubelet.get(namespace, "ok")["status"]["phase"] == "Succeeded"
    assert kubelet.get(namespace, "bad")["status"]["phase"] == "Failed"
