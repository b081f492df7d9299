"""msop deployed the way users deploy it: config/ on a real apiserver, the operator running
as its own ServiceAccount, Prometheus scraping it, and replicas handing over on SIGTERM.

- ``test_rbac_is_sufficient``: msop authenticates with a token of the config/rbac
  ServiceAccount (no other credentials) and runs the dataparallel sample to Succeeded;
  the audit log shows every request it made was allowed (no 403), including Events,
  status writes, the Lease in msop-system and the reviews of a scrape's token.
- ``test_rbac_is_not_over_broad``: the same identity may not read secrets (but its own
  key's, in msop's namespace) or update
  pods (can-i and a real request), and the roles have no wildcards.
- ``test_user_roles_aggregate``: the editor/viewer roles reach the built-in edit/view
  (editors may change an MSJob's scale subresource, viewers only read it).
- ``test_default_kustomization_server_dry_run``: the apiserver accepts
  ``kubectl apply -k config/default --dry-run=server``; the Deployment is hardened.
- ``test_prometheus_scrapes_metrics``: a real Prometheus (built from its Go module) scrapes
  /metrics on loopback and answers a PromQL query for controller_runtime_reconcile_total.
- ``test_sigterm_hands_over_the_lease``: SIGTERM to the leader while it reconciles → exit
  0, Lease released, and the other replica acquires it within 5 s of the release (judged
  from the Lease's own times; the lease is 15 s).
"""

from __future__ import annotations

import functools
import json
import queue
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from msop.kube.objects import parse_time
from testbed import KubeletStandIn, LocalCluster, OperatorProcess
from testbed.exposition import read_samples
from testbed.monitoring import LocalPrometheus
from testbed.paths import REPO
from testbed.serviceaccount import (
    OPERATOR_NAMESPACE,
    install_rbac,
    service_account_kubeconfig,
    service_account_token,
    service_account_user,
)
from tests.e2e.msjobs import apply, event_reasons, job_pods, sample, wait_condition, wait_for
from tests.e2e.sessions import OperatorFactory

CONFIG = REPO / "config"
LOGS = REPO / ".cache" / "e2e-logs"
SA_USER = service_account_user()


@pytest.fixture
def operator_rbac(cluster: LocalCluster) -> str:
    """config/rbac installed; returns the ServiceAccount's user name."""
    install_rbac(cluster, CONFIG)
    return SA_USER


def can_i(cluster: LocalCluster, *args: str, ns: str | None = None) -> bool:
    extra = ["-n", ns] if ns else []
    proc = cluster.kubectl("auth", "can-i", *args, f"--as={SA_USER}", *extra, check=False)
    return proc.stdout.strip() == "yes"


def audit_entries(cluster: LocalCluster, user: str, since: str) -> list[dict[str, Any]]:
    out = []
    for line in cluster.audit_log.read_text().splitlines():
        if f'"username":"{user}"' not in line:
            continue
        entry = json.loads(line)
        if entry.get("stage") == "ResponseComplete" and entry["requestReceivedTimestamp"] >= since:
            out.append(entry)
    return out


def _has_pods(cluster: LocalCluster, ns: str, job: str, count: int) -> bool:
    return len(job_pods(cluster, ns, job)) == count


def refusal(line: str) -> bool:
    """A JSON log line that reports a 403 from the API server (timestamps aside)."""
    try:
        fields = json.loads(line)
    except ValueError:
        return "forbidden" in line.lower()
    fields.pop("timestamp", None)
    text = json.dumps(fields).lower()
    return "forbidden" in text or re.search(r"\b403\b", text) is not None


def test_rbac_is_sufficient(
    cluster: LocalCluster, operator_rbac: str, namespace: str, kubelet: KubeletStandIn
) -> None:
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - 1))
    kubeconfig = service_account_kubeconfig(cluster, LOGS / f"{namespace}-sa.kubeconfig")
    lease = f"msop-rbac-{namespace}"
    op = OperatorProcess(
        kubeconfig=str(kubeconfig),
        log_path=LOGS / f"{namespace}-sa.log",
        args=("--namespace", namespace, "--log-level", "debug", "--leader-elect",
              "--leader-election-namespace", OPERATOR_NAMESPACE, "--leader-election-id", lease),
        metrics_secure=True,
    )  # fmt: skip
    try:
        op.start()
        job = sample("ms_wide_deep_dataparallel.yaml")
        name = job["metadata"]["name"]
        apply(cluster, namespace, job)
        wait_condition(cluster, namespace, name, "Created")
        pods = wait_for("5 pods", lambda: len(job_pods(cluster, namespace, name)) == 5)
        assert pods
        for pod in job_pods(cluster, namespace, name):
            kubelet.run(namespace, pod)
        wait_condition(cluster, namespace, name, "Running")
        for pod in job_pods(cluster, namespace, name):
            if "-worker-" in pod:
                kubelet.succeed(namespace, pod)
        wait_condition(cluster, namespace, name, "Succeeded")
        wait_for(
            "the MSJobSucceeded event",
            lambda: "MSJobSucceeded" in event_reasons(cluster, namespace, name),
        )
        holder = cluster.kubectl(
            "get", "lease", lease, "-n", OPERATOR_NAMESPACE,
            "-o", "jsonpath={.spec.holderIdentity}",
        ).stdout  # fmt: skip
        assert holder, "the operator holds its Lease in msop-system"
        # A scrape: the operator reviews its token (its own ServiceAccount's, which is
        # not a metrics reader) with the API server, as the ServiceAccount.
        assert op.scrape(service_account_token(cluster))[0] == 403
    finally:
        code = op.stop()
    assert code == 0, op.log_tail()
    refused = [line for line in op.log_path.read_text().splitlines() if refusal(line)]
    assert not refused, "\n".join(refused)

    def requests() -> list[dict[str, Any]]:
        entries = audit_entries(cluster, SA_USER, since)
        seen = {(e["verb"], e["objectRef"].get("resource"), e["objectRef"].get("subresource"))
                for e in entries if "objectRef" in e}  # fmt: skip
        needed = {("create", "pods", None), ("create", "services", None),
                  ("patch", "msjobs", "status"), ("create", "events", None),
                  ("update", "leases", None), ("watch", "pods", None),
                  ("create", "tokenreviews", None),
                  ("create", "subjectaccessreviews", None)}  # fmt: skip
        return entries if needed <= seen else []

    entries = wait_for("the operator's requests in the audit log", requests, timeout=20)
    denied = [(e["verb"], e["requestURI"]) for e in entries if e["responseStatus"]["code"] == 403]
    assert not denied, f"requests the RBAC denied: {denied}"
    # Released on SIGTERM: the next replica need not wait for it to expire.
    holder = cluster.kubectl(
        "get", "lease", lease, "-n", OPERATOR_NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}"
    ).stdout
    assert holder == ""


def test_rbac_is_not_over_broad(cluster: LocalCluster, operator_rbac: str, namespace: str) -> None:
    # What the operator needs (everywhere) ...
    needed = [("list", "msjobs.mindspore.gitee.com"), ("watch", "pods"), ("create", "pods"),
              ("delete", "pods"), ("create", "services"), ("patch", "services"),
              ("patch", "events"),
              ("patch", "msjobs.mindspore.gitee.com", "--subresource=status")]  # fmt: skip
    # The reviews of the tokens that scrape /metrics (cluster-scoped: no namespace).
    assert can_i(cluster, "create", "tokenreviews.authentication.k8s.io")
    assert can_i(cluster, "create", "subjectaccessreviews.authorization.k8s.io")
    for args in needed:
        assert can_i(cluster, *args, ns=namespace), f"{args} should be allowed"
    assert can_i(cluster, "update", "leases.coordination.k8s.io", ns=OPERATOR_NAMESPACE)
    # ms-operator's Lease, by name only (the --legacy-operator-lease guard).
    assert can_i(cluster, "get", "leases.coordination.k8s.io/4725f7c4.gitee.com",
                 ns="ms-operator-system")  # fmt: skip
    assert not can_i(cluster, "get", "leases.coordination.k8s.io/other", ns="ms-operator-system")
    assert not can_i(cluster, "watch", "leases.coordination.k8s.io", ns="ms-operator-system")
    # Restarts in place: the nodes' declared features, and the signing key in msop's
    # namespace only (by name, but a create cannot be limited to one).
    assert can_i(cluster, "list", "nodes")
    # A pod lost from its node's first sign (--node-lost-after): the nodes are watched.
    assert can_i(cluster, "watch", "nodes")
    assert can_i(cluster, "get", "secrets/msop-agent-key", ns=OPERATOR_NAMESPACE)
    assert can_i(cluster, "create", "secrets", ns=OPERATOR_NAMESPACE)
    assert not can_i(cluster, "get", "secrets/msop-agent-key", ns=namespace)
    assert not can_i(cluster, "get", "secrets/other", ns=OPERATOR_NAMESPACE)
    # ... and nothing else.
    for verb, res, ns in [
        ("list", "secrets", namespace), ("get", "secrets", OPERATOR_NAMESPACE),
        ("list", "secrets", None), ("update", "pods", namespace), ("patch", "pods", namespace),
        ("get", "configmaps", namespace), ("create", "msjobs.mindspore.gitee.com", namespace),
        ("update", "msjobs.mindspore.gitee.com", namespace), ("get", "nodes", None),
        ("patch", "nodes", None), ("create", "secrets", namespace),
        ("update", "leases.coordination.k8s.io", namespace), ("delete", "namespaces", None),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io", None), ("*", "*", None),
    ]:  # fmt: skip
        assert not can_i(cluster, verb, res, ns=ns), f"{verb} {res} in {ns} must be denied"
    for sub in ("status", "exec", "eviction"):
        assert not can_i(cluster, "create", "pods", f"--subresource={sub}", ns=namespace), sub
        assert not can_i(cluster, "update", "pods", f"--subresource={sub}", ns=namespace), sub
    # Status is patched (with a test of the stored status), never replaced.
    assert not can_i(cluster, "update", "msjobs.mindspore.gitee.com", "--subresource=status",
                     ns=namespace)  # fmt: skip

    # A real request with the ServiceAccount's token is refused too.
    kubeconfig = service_account_kubeconfig(cluster, LOGS / f"{namespace}-sa.kubeconfig")
    proc = subprocess.run(
        [cluster.binary("kubectl"), "--kubeconfig", str(kubeconfig), "get", "secrets", "-A"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode != 0 and "Forbidden" in proc.stderr, proc.stderr

    for path in sorted((CONFIG / "rbac").glob("*role*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for rule in doc.get("rules") or []:
                for key in ("apiGroups", "resources", "verbs"):
                    assert "*" not in rule.get(key, []), f"{path.name}: wildcard in {key}"
                if "secrets" in rule.get("resources", []):
                    # Only the key of restarts in place, in msop's own namespace.
                    assert doc["kind"] == "Role" and path.name == "restart_in_place_role.yaml"
                    assert rule.get("resourceNames") == ["msop-agent-key"] or rule["verbs"] == [
                        "create"
                    ], rule


def test_user_roles_aggregate(cluster: LocalCluster, operator_rbac: str, namespace: str) -> None:
    alice, bob = f"alice-{namespace}", f"bob-{namespace}"
    cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit",
                    f"--user={alice}", "-n", namespace)  # fmt: skip
    cluster.kubectl("create", "rolebinding", "bob-view", "--clusterrole=view",
                    f"--user={bob}", "-n", namespace)  # fmt: skip

    def allowed(user: str, verb: str, *extra: str) -> bool:
        proc = cluster.kubectl("auth", "can-i", verb, "msjobs.mindspore.gitee.com", *extra,
                               f"--as={user}", "-n", namespace, check=False)  # fmt: skip
        return proc.stdout.strip() == "yes"

    # kube-controller-manager's aggregation controller fills edit/view in shortly.
    wait_for("edit to include msjobs", lambda: allowed(alice, "create"), timeout=30)
    wait_for("view to include msjobs", lambda: allowed(bob, "list"), timeout=30)
    assert allowed(alice, "delete")
    assert not allowed(bob, "create") and not allowed(bob, "delete")
    # kubectl scale msjob/NAME: editors change the scale, viewers only read it.
    scale = "--subresource=scale"
    assert allowed(alice, "patch", scale) and allowed(alice, "update", scale)
    assert allowed(bob, "get", scale) and not allowed(bob, "patch", scale)


def test_default_kustomization_server_dry_run(cluster: LocalCluster) -> None:
    rendered = list(
        yaml.safe_load_all(cluster.kubectl("kustomize", str(CONFIG / "default")).stdout)
    )
    kinds = sorted(d["kind"] for d in rendered)
    # msop's own and its metrics-auth role, the editor, the viewer, the metrics reader.
    assert kinds.count("ClusterRole") == 5 and "CustomResourceDefinition" in kinds
    assert "ValidatingAdmissionPolicy" in kinds and "ValidatingAdmissionPolicyBinding" in kinds
    namespaced = [d for d in rendered if d["kind"] not in (
        "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")]  # fmt: skip
    assert {d["metadata"]["namespace"] for d in namespaced} == {OPERATOR_NAMESPACE}

    # A server-side dry run does not persist the Namespace, so objects in it would be
    # NotFound on a cluster that never had it: create it as the first apply would.
    if cluster.kubectl("get", "ns", OPERATOR_NAMESPACE, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    proc = cluster.kubectl("apply", "-k", str(CONFIG / "default"), "--dry-run=server")
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(rendered), proc.stdout
    assert all(line.endswith("(server dry run)") for line in lines), proc.stdout

    # config/rbac applies alone: it brings the namespace its objects live in.
    rbac = list(yaml.safe_load_all(cluster.kubectl("kustomize", str(CONFIG / "rbac")).stdout))
    assert {(d["kind"], d["metadata"]["name"]) for d in rbac} >= {("Namespace", OPERATOR_NAMESPACE)}
    assert {
        d["metadata"].get("namespace") for d in rbac if d["kind"] in ("Role", "RoleBinding")
    } == {OPERATOR_NAMESPACE}

    (deploy,) = [d for d in rendered if d["kind"] == "Deployment"]
    spec = deploy["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert deploy["spec"]["replicas"] == 2 and "--leader-elect" in c["args"]
    assert "--metrics-secure" in c["args"]
    assert spec["serviceAccountName"] == "msop-controller-manager"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert {p["containerPort"] for p in c["ports"]} == {8080, 8081}
    assert c["resources"]["requests"] and c["resources"]["limits"]
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert spec["securityContext"]["runAsNonRoot"]
    assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    (svc,) = [d for d in rendered if d["kind"] == "Service"]
    assert svc["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    assert svc["metadata"]["annotations"]["prometheus.io/scheme"] == "https"
    (port,) = svc["spec"]["ports"]
    assert port["targetPort"] in {p["name"] for p in c["ports"]}
    # The ServiceMonitor renders too (it is applied only where its CRD exists), and
    # scrapes over HTTPS with its ServiceAccount's token.
    monitor = yaml.safe_load(cluster.kubectl("kustomize", str(CONFIG / "prometheus")).stdout)
    assert monitor["kind"] == "ServiceMonitor"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] and endpoint["tlsConfig"]["insecureSkipVerify"]
    (reader,) = [d for d in rendered if d["metadata"]["name"] == "msop-metrics-reader"]
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_prometheus_scrapes_metrics(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, tmp_path: Path
) -> None:
    apply(cluster, namespace, sample("ms_wide_deep_dataparallel.yaml"))
    wait_condition(cluster, namespace, "ms-widedeep-dataparallel", "Created")

    target = operator.metrics_url.removeprefix("http://").removesuffix("/metrics")
    configs = [{"job_name": "msop", "static_configs": [{"targets": [target]}]}]
    with LocalPrometheus(tmp_path, configs, LOGS / f"{namespace}-prometheus.log") as prom:
        wait_for("prometheus ready", prom.ready, timeout=60)

        def reconciles() -> list[Any]:
            query = "sum by (controller) (controller_runtime_reconcile_total) > 0"
            body = prom.get("/api/v1/query", query=query)
            assert body["status"] == "success", body
            result: list[Any] = body["data"]["result"]
            return result

        result = wait_for("controller_runtime_reconcile_total in Prometheus", reconciles, 60)
        assert result[0]["metric"]["controller"] == "msjob"
        assert float(result[0]["value"][1]) > 0
        targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
        assert [t["health"] for t in targets] == ["up"], targets
        created = prom.get("/api/v1/query", query="training_operator_jobs_created_total")
        assert created["data"]["result"], created


LeaseRecord = tuple[str, str, str]
"""``(holderIdentity, renewTime, acquireTime)`` of one version of a Lease."""


class LeaseWatch:
    """Every record Lease ``lease`` goes through, in order, from ``kubectl get --watch``:
    a GET can miss one (a released record lasts only until a follower's next try)."""

    FORMAT = 'jsonpath={.spec.holderIdentity},{.spec.renewTime},{.spec.acquireTime}{"\\n"}'

    def __init__(self, cluster: LocalCluster, namespace: str, lease: str) -> None:
        self.records: list[LeaseRecord] = []
        self.other: list[str] = []
        self._lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(
            [cluster.binary("kubectl"), "--kubeconfig", cluster.kubeconfig, "get", "lease",
             lease, "-n", namespace, "--watch", "-o", self.FORMAT],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put("")  # the end of the stream

    def until(
        self, what: str, found: Callable[[list[LeaseRecord]], Any], timeout: float = 60
    ) -> Any:
        """Read records until ``found(records)`` is truthy; return it. ``timeout`` is a
        hang guard, not a bound."""
        deadline = time.monotonic() + timeout
        while not (result := found(self.records)):
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what}: {self.records} {self.other}") from None
            assert line, f"kubectl's watch ended: {self.other}"
            fields = line.rstrip("\n").split(",")
            if len(fields) == 3:
                self.records.append((fields[0], fields[1], fields[2]))
            else:
                self.other.append(line)
        return result

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


def record_after(records: list[LeaseRecord], holder: str) -> LeaseRecord | None:
    """The first record after the last one held by ``holder`` (None until there is one)."""
    held = [i for i, r in enumerate(records) if r[0] == holder]
    after = held[-1] + 1 if held else len(records)
    return records[after] if after < len(records) else None


def micro_time(value: str) -> datetime:
    parsed = parse_time(value)
    assert parsed is not None, f"not a MicroTime: {value!r}"
    return parsed


def master_status(op: OperatorProcess, lease: str) -> float | None:
    try:
        with urllib.request.urlopen(op.metrics_url, timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return next(
        (
            s.value
            for s in read_samples(text)
            if s.name == "leader_election_master_status" and s.labels == {"name": lease}
        ),
        None,
    )


def small_job(name: str) -> dict[str, Any]:
    job = sample("ms_wide_deep_dataparallel.yaml")
    job["metadata"]["name"] = name
    job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 2
    return job


def test_sigterm_hands_over_the_lease(
    cluster: LocalCluster, start_operator: OperatorFactory, namespace: str
) -> None:
    lease = f"msop-takeover-{uuid.uuid4().hex[:6]}"
    flags = ("--leader-elect", "--leader-election-namespace", namespace,
             "--leader-election-id", lease)  # fmt: skip
    first = start_operator(*flags)
    wait_for("the first replica to lead", lambda: master_status(first, lease) == 1.0, 30, 0.05)
    second = start_operator(*flags)
    assert master_status(second, lease) == 0.0

    # Work in flight: jobs arriving while the leader is told to stop.
    names = [f"handover-{i}" for i in range(6)]
    cluster.kubectl("apply", "-n", namespace, "-f", "-",
                    input=json.dumps({"apiVersion": "v1", "kind": "List",
                                      "items": [small_job(n) for n in names]}))  # fmt: skip
    wait_for("the leader to start on them",
             lambda: job_pods(cluster, namespace, names[0]), 30, 0.05)  # fmt: skip
    assert first.proc is not None
    watch = LeaseWatch(cluster, namespace, lease)
    try:
        # The watch is on (it has printed the current record, the first's) before SIGTERM.
        holder = watch.until("record of the Lease", lambda r: r and r[0][0])
        first.proc.send_signal(signal.SIGTERM)
        wait_for("the second to lead", lambda: master_status(second, lease) == 1.0, 60, 0.05)
        release = watch.until("record after the first's", lambda r: record_after(r, holder))
        assert release[0] == "", f"the first did not release the Lease: {watch.records}"
        taken = watch.until("record after the release", lambda r: record_after(r, ""))
        assert taken[0] not in ("", holder), watch.records
    finally:
        watch.close()
    code = first.proc.wait(60)
    assert code == 0, first.log_tail()
    assert "released leader lease" in first.log_path.read_text(), first.log_tail()
    # Judged from the Lease's own times (MicroTimes, microseconds: no allowance for a
    # coarse resolution): the second sees the release at its next try, 2 s on with up to
    # 20% jitter, and takes the Lease at once; 2.6 s more for its requests on a loaded
    # machine. Had it ignored the release, it would have waited the lease out (15 s).
    takeover = (micro_time(taken[2]) - micro_time(release[1])).total_seconds()
    print(f"\ntakeover {takeover:.2f}s after the release (retry period 2s, lease 15s)")
    assert takeover < 5, f"the second acquired the Lease {takeover:.1f}s after its release"
    # The new leader finishes the work: every job gets its pods.
    for n in names:
        wait_condition(cluster, namespace, n, "Created", timeout=60)
        wait_for(f"{n}'s 3 pods", functools.partial(_has_pods, cluster, namespace, n, 3), 60)
