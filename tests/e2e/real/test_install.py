"""msop installed the way users install it, running as a container on a real kubelet.

``kubectl apply -k`` of an overlay of config/default that sets the locally built image
(``installed`` fixture), then:

- ``test_deployment_is_available_and_hardened``: both replicas Ready with no probe failure
  and no restart; the container runs as UID/GID 65532 with a read-only root filesystem
  and a writable /tmp; it uses in-cluster config (no kubeconfig anywhere in the pod, and
  the audit log shows the operator's ServiceAccount listing MSJobs);
  exactly one replica holds the Lease.
- ``test_deleting_the_leader_moves_the_lease``: the Lease moves to another replica (the
  survivor, or the replacement pod if it asks first), and the Deployment is Available
  again.
"""

from __future__ import annotations

import json
import time
from typing import Any

from testbed.realnode import RealCluster
from tests.e2e.msjobs import wait_for
from tests.e2e.real.install import DEPLOYMENT, LEASE, OPERATOR_NAMESPACE, wait_available

SA_USER = f"system:serviceaccount:{OPERATOR_NAMESPACE}:{DEPLOYMENT}"


def operator_pods(cluster: RealCluster) -> list[dict[str, Any]]:
    out = cluster.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-l", "app.kubernetes.io/name=msop", "-o", "json"
    ).stdout
    return [p for p in json.loads(out)["items"] if not p["metadata"].get("deletionTimestamp")]


def lease_holder(cluster: RealCluster) -> str:
    out = cluster.kubectl(
        "get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}",
        check=False,
    )  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else ""


def exec_in(cluster: RealCluster, pod: str, script: str) -> str:
    return cluster.kubectl(
        "exec", "-n", OPERATOR_NAMESPACE, pod, "-c", "manager", "--", "sh", "-c", script,
        check=False,
    ).stdout  # fmt: skip


def test_deployment_is_available_and_hardened(installed: RealCluster) -> None:
    cluster = installed
    pods = operator_pods(cluster)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        name = pod["metadata"]["name"]
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, status
        assert "running" in status["state"], status
        assert exec_in(cluster, name, "id -u; id -g").split() == ["65532", "65532"]
        out = exec_in(cluster, name, "touch /probe 2>&1; touch /tmp/probe && echo tmp-ok")
        assert "Read-only file system" in out and "tmp-ok" in out, out
    # Readiness passed (Ready); liveness never failed: no Unhealthy or Killing events.
    reasons = cluster.kubectl(
        "get", "events", "-n", OPERATOR_NAMESPACE, "-o", "jsonpath={.items[*].reason}"
    ).stdout.split()
    assert "Unhealthy" not in reasons and "Killing" not in reasons, reasons

    # In-cluster config: nothing in the pod names a kubeconfig, and the API server sees
    # the operator's ServiceAccount (whose token only the pods have) at work. (Its source
    # address is the namespace's relay to the API server, not the pod IP.)
    for pod in pods:
        (container,) = pod["spec"]["containers"]
        assert "KUBECONFIG" not in {e["name"] for e in container.get("env", [])}
        assert not any("kubeconfig" in a for a in container.get("args", []))

    def operator_calls() -> list[str]:
        return [
            line for line in cluster.audit_log.read_text().splitlines()
            if f'"username":"{SA_USER}"' in line and '"resource":"msjobs"' in line
        ]  # fmt: skip

    assert wait_for("the ServiceAccount listing MSJobs in the audit log", operator_calls, 30)

    holder = wait_for("a Lease holder", lambda: lease_holder(cluster), timeout=60)
    names = {p["metadata"]["name"] for p in pods}
    assert holder.split("_")[0] in names, (holder, names)


def test_deleting_the_leader_moves_the_lease(installed: RealCluster) -> None:
    cluster = installed
    holder = wait_for("a Lease holder", lambda: lease_holder(cluster), timeout=60)
    leader = holder.split("_")[0]
    assert leader in {p["metadata"]["name"] for p in operator_pods(cluster)}
    started = time.monotonic()
    cluster.kubectl("delete", "pod", "-n", OPERATOR_NAMESPACE, leader, "--wait=false")

    def new_leader() -> str:
        # The deleted leader releases the Lease on SIGTERM; the surviving replica or the
        # Deployment's replacement pod, whichever asks first, takes it.
        name = lease_holder(cluster).split("_")[0]
        alive = {p["metadata"]["name"] for p in operator_pods(cluster)}
        return name if name and name != leader and name in alive else ""

    new = wait_for("the Lease to move to another replica", new_leader, timeout=60)
    print(f"\nLease moved from {leader} to {new} in {time.monotonic() - started:.1f}s")
    wait_available(cluster)
    assert lease_holder(cluster).split("_")[0] == new
