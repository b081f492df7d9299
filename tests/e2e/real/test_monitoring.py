"""A real Prometheus scraping msop the way users set it up.

Prometheus (built from its Go module by hack/prometheus/build.sh: Debian's package has no
Kubernetes service discovery) runs next to the node and discovers msop by Kubernetes
service discovery (``role: endpointslice``), keeping only Services annotated
``prometheus.io/scrape`` and taking port, path and scheme from the annotations, as the
common annotation-based configuration does. It loads ``config/prometheus/alerts.yaml``.
msop serves /metrics over HTTPS (``--metrics-secure`` in config/manager) with a
self-signed certificate and reviews every scrape's token, so Prometheus scrapes with the
token of a ServiceAccount of its own bound to msop-metrics-reader (config/rbac) and
skips certificate verification, as docs/tasks/monitoring.md says to.

- ``test_leader_metrics_are_scraped``: ``controller_runtime_reconcile_total`` comes back
  from the pod that holds the Lease, which reports ``leader_election_master_status`` 1.
- ``test_dashboard_queries_return_data``: every query of every panel of
  ``config/grafana/msop.json`` returns data.
- ``test_alert_rules``: every alert expression returns no series while msop is healthy;
  scaling the Deployment to 0 makes MsopDown and MsopNoLeader return series and go
  pending in Prometheus; scaling back clears them.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.monitoring import ALERTS, alert_exprs, panel_exprs
from testbed.realnode import NodeImages, Prepared, RealCluster
from testbed.serviceaccount import service_account_token, service_account_user
from tests.e2e.msjobs import sample, wait_condition, wait_for
from tests.e2e.real.install import DEPLOYMENT, LEASE, OPERATOR_NAMESPACE, wait_available
from tests.e2e.real.training import PRINT_ENV, apply_job, real_job

FIRES_WHEN_STOPPED = {"MsopDown", "MsopNoLeader"}
#: Series that exist only while a job's Worker 0 runs and reports progress.
#: Series that exist only while a job trains, waits in a queue or is unfinished: their
#: panels may be empty once the session's jobs have finished.
ONLY_WHILE_TRAINING = (
    "msop_job_progress_ratio",
    "msop_job_progress_last_report_timestamp_seconds",
    "msop_job_queued_since_timestamp_seconds",
    "msop_job_restarts_total",
)


#: Prometheus's own identity: a ServiceAccount bound to msop-metrics-reader.
SCRAPER_NAMESPACE = "msop-e2e-monitoring"
SCRAPER = "prometheus"


def metrics_reader_token(cluster: RealCluster) -> str:
    """A token of :data:`SCRAPER`, bound to the msop-metrics-reader ClusterRole (installed
    with config/default) as docs/tasks/monitoring.md binds Prometheus's."""
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SCRAPER_NAMESPACE}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SCRAPER, "namespace": SCRAPER_NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{SCRAPER_NAMESPACE}-msop-metrics-reader"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                     "name": "msop-metrics-reader"},
         "subjects": [{"kind": "ServiceAccount", "name": SCRAPER,
                       "namespace": SCRAPER_NAMESPACE}]},
    ]  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": objects}))  # fmt: skip
    user = service_account_user(SCRAPER, SCRAPER_NAMESPACE)

    def allowed() -> bool:
        proc = cluster.kubectl("auth", "can-i", "get", "/metrics", f"--as={user}", check=False)
        return proc.stdout.strip() == "yes"

    # msop caches a 403 for 30 s: scrape only once the authorizer has the binding.
    wait_for("msop-metrics-reader bound to Prometheus", allowed, timeout=30)
    return service_account_token(cluster, SCRAPER, SCRAPER_NAMESPACE, duration="6h")


def prometheus_config(
    cluster: RealCluster, rules: Path, kubeconfig: Path, token: Path
) -> dict[str, Any]:
    annotation = "__meta_kubernetes_service_annotation_prometheus_io_"
    return {
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {
                "job_name": "msop",
                "kubernetes_sd_configs": [
                    {"role": "endpointslice", "kubeconfig_file": str(kubeconfig)}
                ],
                # msop's /metrics: HTTPS with a self-signed certificate, for readers only.
                "authorization": {"type": "Bearer", "credentials_file": str(token)},
                "tls_config": {"insecure_skip_verify": True},
                "relabel_configs": [
                    {"source_labels": [f"{annotation}scrape"], "action": "keep", "regex": "true"},
                    {"source_labels": [f"{annotation}scheme"], "target_label": "__scheme__",
                     "regex": "(https?)"},
                    {"source_labels": [f"{annotation}path"], "target_label": "__metrics_path__",
                     "regex": "(.+)"},
                    {"source_labels": ["__address__", f"{annotation}port"],
                     "regex": r"([^:]+)(?::\d+)?;(\d+)", "replacement": "$1:$2",
                     "target_label": "__address__"},
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                ],
            }
        ],
    }  # fmt: skip


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def alerts(self) -> dict[str, str]:
        return {a["labels"]["alertname"]: a["state"] for a in self.get("/api/v1/alerts")["alerts"]}


@pytest.fixture(scope="module")
def prometheus(
    installed: RealCluster, prepared: Prepared, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Prometheus]:
    cluster = installed
    binary = str(prepared.prometheus)
    work = tmp_path_factory.mktemp("prometheus")
    kubeconfig = work / "kubeconfig"
    # Inside the namespace, the API server is on its loopback; the host relay is not.
    kubeconfig.write_text(Path(cluster.kubeconfig).read_text().replace(
        f"127.0.0.1:{cluster.host_api_port}", f"127.0.0.1:{cluster.control_plane.api_port}"
    ))  # fmt: skip
    rules = work / "alerts.yaml"
    shutil.copyfile(ALERTS, rules)
    token = work / "msop-metrics.token"
    token.write_text(metrics_reader_token(cluster))
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(cluster, rules, kubeconfig, token)))
    daemon = cluster.spawn(
        "prometheus",
        [binary, f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
         "--web.listen-address=127.0.0.1:9090"],
    )  # fmt: skip
    prom = Prometheus(cluster.expose("127.0.0.1:9090"))

    def ready() -> bool:
        assert daemon.alive(), f"prometheus exited:\n{daemon.tail()}"
        try:
            return bool(prom.get("/api/v1/targets")["activeTargets"])
        except OSError:
            return False

    wait_for("Prometheus to discover msop", ready, timeout=60)
    yield prom
    daemon.stop()


def leader_pod(cluster: RealCluster) -> str:
    out = cluster.kubectl(
        "get", "lease", LEASE, "-n", OPERATOR_NAMESPACE, "-o", "jsonpath={.spec.holderIdentity}"
    )
    return out.stdout.strip().split("_")[0]


@pytest.fixture(scope="module")
def finished_job(installed: RealCluster, images: NodeImages) -> Iterator[str]:
    """A job that ran to Succeeded and stays for the whole module: the leader has
    reconciled it, and the dashboard's job panels (MSJobs by state) have a series."""
    cluster = installed
    ns = f"monitoring-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    wait_for("the default ServiceAccount", lambda: cluster.kubectl(
        "get", "sa", "default", "-n", ns, check=False).returncode == 0, 30)  # fmt: skip
    job = real_job(
        sample("ms_wide_deep_dataparallel.yaml"), images.python.ref,
        {"Scheduler": PRINT_ENV, "Worker": PRINT_ENV}, workers=1,
    )  # fmt: skip
    wait_condition(cluster, ns, apply_job(cluster, ns, job), "Succeeded", 120)
    yield ns
    cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_leader_metrics_are_scraped(
    installed: RealCluster, prometheus: Prometheus, finished_job: str
) -> None:
    cluster = installed
    leader = wait_for("a leader", lambda: leader_pod(cluster), 60)

    def reconciles() -> list[dict[str, Any]]:
        return prometheus.query(
            f'controller_runtime_reconcile_total{{job="msop",pod="{leader}"}} > 0'
        )

    series = wait_for(f"controller_runtime_reconcile_total from {leader}", reconciles, 60)
    assert {s["metric"]["controller"] for s in series} == {"msjob"}, series
    status = prometheus.query(f'leader_election_master_status{{job="msop",pod="{leader}"}}')
    assert [s["value"][1] for s in status] == ["1"], status

    def both_replicas_up() -> list[dict[str, Any]]:
        # (A pod of an earlier test may still be terminating: its target goes with it.)
        targets: list[dict[str, Any]] = prometheus.get("/api/v1/targets")["activeTargets"]
        healthy = len(targets) == 2 and all(t["health"] == "up" for t in targets)
        return targets if healthy else []

    wait_for("both replicas scraped and up", both_replicas_up, 60)


def test_dashboard_queries_return_data(prometheus: Prometheus, finished_job: str) -> None:
    queries = panel_exprs()
    assert queries

    def empty() -> list[str]:
        # Every query runs (a bad one raises); only the panels of series that exist while
        # a job trains and reports may be empty here, after the job has finished.
        return [
            f"{title}: {expr}"
            for title, expr in queries
            if not prometheus.query(expr) and not any(m in expr for m in ONLY_WHILE_TRAINING)
        ]

    # rate() needs two samples in the window; give the 2 s scrapes a moment.
    wait_for("every panel query to return data", lambda: not empty(), timeout=60)


def test_alert_rules(installed: RealCluster, prometheus: Prometheus) -> None:
    cluster = installed
    rules = alert_exprs()
    assert {name for name, _ in rules} >= FIRES_WHEN_STOPPED

    def firing() -> dict[str, list[dict[str, Any]]]:
        return {name: series for name, expr in rules if (series := prometheus.query(expr))}

    try:
        wait_for("no alert expression to return a series", lambda: firing() == {}, 60)
    except AssertionError:
        raise AssertionError(f"alerts return series while msop is healthy: {firing()}") from None

    cluster.kubectl("scale", "deployment", DEPLOYMENT, "-n", OPERATOR_NAMESPACE, "--replicas=0")
    try:
        stopped = wait_for(
            "MsopDown and MsopNoLeader to return series",
            lambda: (f := firing()).keys() >= FIRES_WHEN_STOPPED and f,
            timeout=120,
        )
        unexpected = set(stopped) - FIRES_WHEN_STOPPED - {"MsopTargetDown"}
        assert not unexpected, stopped
        # The loaded rules agree: Prometheus holds them pending (their `for:` is minutes).
        wait_for(
            "the alerts pending in Prometheus",
            lambda: set(prometheus.alerts()) >= FIRES_WHEN_STOPPED,
            timeout=30,
        )
    finally:
        cluster.kubectl("scale", "deployment", DEPLOYMENT, "-n", OPERATOR_NAMESPACE, "--replicas=2")
    wait_available(cluster)
    start = time.monotonic()
    wait_for("every alert expression to clear", lambda: firing() == {}, timeout=120)
    print(f"\nalerts cleared {time.monotonic() - start:.1f}s after msop was Available again")
