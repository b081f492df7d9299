#!/usr/bin/env python3
"""`make demo`: msop on a local cluster, as its own ServiceAccount, running a sample to the end.

1. builds (or reuses) the control-plane binaries and starts a dedicated cluster "msop-demo";
2. installs the CRD (config/crd) and the RBAC (config/rbac, namespace msop-system);
3. gets a token for the operator's ServiceAccount (kubectl create token) and writes a
   kubeconfig with it, so msop has exactly the permissions config/rbac grants;
4. starts `msop run` with that kubeconfig and leader election in msop-system;
5. applies config/samples/ms_wide_deep_dataparallel.yaml and shows
   `kubectl get msjobs,pods,svc` as the job goes Created -> Running -> Succeeded. There is
   no kubelet: the kubelet stand-in (testbed.KubeletStandIn) runs the pods and then
   ends the workers with exit code 0;
6. shows where the metrics are and a few of them, then stops msop and deletes the cluster.

Nothing is downloaded. Set MSOP_DEMO_KEEP=1 to keep the cluster (and msop) at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed import ClusterStartError, KubeletStandIn, LocalCluster  # noqa: E402
from testbed.operator import OperatorProcess  # noqa: E402
from testbed.serviceaccount import (  # noqa: E402
    OPERATOR_NAMESPACE,
    install_rbac,
    service_account_kubeconfig,
    service_account_user,
)

CACHE = Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache"))
SAMPLE = REPO / "config/samples/ms_wide_deep_dataparallel.yaml"
JOB_NAMESPACE = "msop-demo"
BOLD, RESET = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")
T0 = time.monotonic()


def step(msg: str) -> None:
    print(f"\n{BOLD}==> [{time.monotonic() - T0:5.1f}s] {msg}{RESET}", flush=True)


def wait(what: str, fn: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = fn()
        if result:
            return result
        time.sleep(0.3)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def show(cluster: LocalCluster) -> None:
    print(f"$ kubectl get msjobs,pods,svc -n {JOB_NAMESPACE}")
    out = cluster.kubectl("get", "msjobs,pods,svc", "-n", JOB_NAMESPACE).stdout
    print(out.rstrip())
    conds = cluster.kubectl(
        "get", "msjobs", "-n", JOB_NAMESPACE, "-o",
        "jsonpath={range .items[0].status.conditions[*]}{.type}={.status} {end}",
    ).stdout  # fmt: skip
    print(f"\nconditions: {conds.strip()}", flush=True)


def condition_true(cluster: LocalCluster, name: str, type_: str) -> bool:
    proc = cluster.kubectl("get", "msjob", name, "-n", JOB_NAMESPACE, "-o", "json", check=False)
    if proc.returncode != 0:
        return False
    conds = json.loads(proc.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == type_ and c["status"] == "True" for c in conds)


def pod_names(cluster: LocalCluster, job: str) -> list[str]:
    out = cluster.kubectl(
        "get", "pods", "-n", JOB_NAMESPACE, "-l", f"training.kubeflow.org/job-name={job}",
        "-o", "jsonpath={.items[*].metadata.name}",
    ).stdout  # fmt: skip
    return sorted(out.split())


def install_crd(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "-k", str(REPO / "config/crd"))
    wait(
        "the MSJob CRD to be Established",
        lambda: cluster.kubectl(
            "get", "crd", "msjobs.mindspore.gitee.com", "-o",
            "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False,
        ).stdout.strip() == "True",
    )  # fmt: skip


def build_binaries() -> Path:
    proc = subprocess.run(
        [str(REPO / "hack/cluster/build.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"building the control plane failed:\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.split()[-1])


def demo(cluster: LocalCluster, op: OperatorProcess) -> None:
    step("installing the MSJob CRD (config/crd) and the operator's RBAC (config/rbac)")
    install_crd(cluster)
    install_rbac(cluster, REPO / "config")
    user = service_account_user()
    for verb, res in (("list", "msjobs.mindspore.gitee.com"), ("create", "pods"),
                      ("update", "pods"), ("list", "secrets")):  # fmt: skip
        ok = cluster.kubectl("auth", "can-i", verb, res, f"--as={user}", check=False)
        print(f"  can {user.rsplit(':', 1)[1]} {verb} {res}? {ok.stdout.strip()}")

    step("kubectl create token msop-controller-manager -n msop-system -> a kubeconfig")
    service_account_kubeconfig(cluster, Path(op.kubeconfig))
    print(f"  {op.kubeconfig} (token auth, no client certificate)")

    step("starting `msop run` as the ServiceAccount, with leader election in msop-system")
    op.start()
    print(f"  pid {op.proc.pid if op.proc else '?'}, ready; log: {op.log_path}")
    lease = cluster.kubectl(
        "get", "lease", "-n", OPERATOR_NAMESPACE, "msop.mindspore.gitee.com",
        "-o", "jsonpath={.spec.holderIdentity}", check=False,
    ).stdout  # fmt: skip
    print(f"  Lease msop-system/msop.mindspore.gitee.com held by {lease or '(not yet)'}")

    step(f"applying {SAMPLE.relative_to(REPO)} in namespace {JOB_NAMESPACE}")
    cluster.kubectl("create", "namespace", JOB_NAMESPACE)
    wait(
        "the namespace's default ServiceAccount",
        lambda: cluster.kubectl("get", "sa", "default", "-n", JOB_NAMESPACE, check=False)
        .returncode == 0,
    )  # fmt: skip
    cluster.kubectl("apply", "-n", JOB_NAMESPACE, "-f", str(SAMPLE))
    job = "ms-widedeep-dataparallel"
    wait("condition Created", lambda: condition_true(cluster, job, "Created"))
    wait("5 pods", lambda: len(pod_names(cluster, job)) == 5)
    step("Created: msop made the Scheduler Service and 5 pods (1 scheduler, 4 workers)")
    show(cluster)

    kubelet = KubeletStandIn(cluster)
    step(
        "no kubelet here: kwok's fake nodes start scheduled pods at once, and the kubelet "
        "stand-in (testbed.KubeletStandIn) waits until each pod is Running"
    )
    for pod in pod_names(cluster, job):
        kubelet.run(JOB_NAMESPACE, pod)
    wait("condition Running", lambda: condition_true(cluster, job, "Running"))
    step("Running")
    show(cluster)

    step("the stand-in ends every worker with exit code 0 (successPolicy: AllWorkers)")
    for pod in pod_names(cluster, job):
        if "-worker-" in pod:
            kubelet.succeed(JOB_NAMESPACE, pod)
    wait("condition Succeeded", lambda: condition_true(cluster, job, "Succeeded"))
    step("Succeeded")
    show(cluster)
    print()
    print(f"$ kubectl get events -n {JOB_NAMESPACE}")
    events = cluster.kubectl("get", "events", "-n", JOB_NAMESPACE,
                             "--field-selector", f"involvedObject.name={job}")  # fmt: skip
    print(events.stdout.rstrip())

    step(
        f"metrics: {op.metrics_url}  (plain HTTP here, --metrics-secure=false; in a cluster: "
        "https://msop-controller-manager-metrics.msop-system:8080/metrics, for ServiceAccounts "
        "bound to msop-metrics-reader)"
    )
    with urllib.request.urlopen(op.metrics_url, timeout=5) as resp:
        text = resp.read().decode()
    wanted = ("controller_runtime_reconcile_total", "training_operator_jobs_",
              "leader_election_master_status", "workqueue_depth")  # fmt: skip
    for line in text.splitlines():
        if line.startswith(wanted) and "_created{" not in line and not line.endswith(" 0.0"):
            print(f"  {line}")
    forbidden = [ln for ln in op.log_path.read_text().splitlines() if '"status": 403' in ln
                 or "Forbidden" in ln]  # fmt: skip
    print(f"\n  operator log: {len(forbidden)} 'forbidden' lines (RBAC is sufficient when 0)")


def main() -> int:
    step("building (or reusing) the control-plane binaries")
    cluster = LocalCluster(name="msop-demo", bin_dir=build_binaries(), workdir=CACHE / "kwok")
    step(f"starting the local cluster {cluster.name} (kwok, fake nodes, RBAC on)")
    try:
        cluster.start()
    except ClusterStartError as e:
        print(e, file=sys.stderr)
        cluster.stop()
        return 1
    print(f"  KUBECONFIG={cluster.kubeconfig}")
    demo_dir = CACHE / "demo"
    log = demo_dir / "msop.log"
    log.unlink(missing_ok=True)
    op = OperatorProcess(
        kubeconfig=str(demo_dir / "msop-sa.kubeconfig"),
        log_path=log,
        args=("--leader-elect", "--leader-election-namespace", OPERATOR_NAMESPACE),
    )
    ok = False
    try:
        demo(cluster, op)
        ok = True
    except Exception as e:
        print(f"\nmake demo failed: {e}", file=sys.stderr)
        print(f"operator log tail ({log}):\n{op.log_tail()}", file=sys.stderr)
    finally:
        if os.environ.get("MSOP_DEMO_KEEP") and ok:
            step(f"kept: KUBECONFIG={cluster.kubeconfig}; msop pid {op.proc and op.proc.pid}")
        else:
            step("cleaning up: SIGTERM to msop, then deleting the cluster")
            code = op.stop()
            print(f"  msop exited with {code}")
            cluster.stop()
            print(f"  cluster {cluster.name} deleted")
    step(f"done in {time.monotonic() - T0:.0f}s" if ok else "failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
