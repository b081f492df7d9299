"""Alerts about MSJobs, from a real Prometheus scraping msop as docs/tasks/monitoring.md
says: Kubernetes service discovery of the annotated metrics Service in msop-system, the
page's relabelling (which gives every series the target's ``namespace``), HTTPS with the
token of a ServiceAccount bound to msop-metrics-reader, and config/prometheus/alerts.yaml
as its rule file.

- ``test_same_named_jobs_in_two_namespaces_alert_apart``: an MSJob ``train`` in each of
  two namespaces, each restarted three times by the operator: Prometheus keeps one
  ``msop_job_restarts_total`` series per job, labelled with its own namespace beside the
  target's (msop-system), and ``MsopJobRestartingRepeatedly`` goes pending once per job,
  its labels, summary and runbook naming the job's namespace.

The kwok tier's pod IPs are loopback addresses, which an EndpointSlice refuses, and msop
runs here as a local process: the Service's EndpointSlice holds a documentation address
(192.0.2.10, never dialled) and one relabelling rule appended to the page's sends the
scrape to the operator's loopback address instead. Everything else is the page's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import KubeletStandIn, LocalCluster, OperatorProcess
from testbed.cluster import namespace_for_a_test
from testbed.monitoring import ALERTS, LocalPrometheus, documented_scrape_config
from testbed.paths import CACHE, REPO
from testbed.serviceaccount import (
    OPERATOR_NAMESPACE,
    install_rbac,
    service_account_token,
    service_account_user,
)
from tests.e2e.msjobs import apply, get, wait_for
from tests.e2e.sessions import OperatorFactory

CONFIG = REPO / "config"
LOGS = CACHE / "e2e-logs"
SERVICE = "msop-controller-manager-metrics"
SLICE = f"{SERVICE}-e2e"
#: An address of TEST-NET-1 (RFC 5737): the slice needs one that is not loopback.
PLACEHOLDER = "192.0.2.10"
JOB = "train"


@pytest.fixture
def other_namespace(cluster: LocalCluster) -> Iterator[str]:
    yield from namespace_for_a_test(cluster, prefix="e2e", timeout=30)


@pytest.fixture
def metrics_service(cluster: LocalCluster) -> Iterator[None]:
    """config/default's metrics Service in msop-system, and an EndpointSlice of it."""
    install_rbac(cluster, CONFIG)
    rendered = yaml.safe_load_all(cluster.kubectl("kustomize", str(CONFIG / "default")).stdout)
    (service,) = [
        d for d in rendered if d["kind"] == "Service" and d["metadata"]["name"] == SERVICE
    ]
    assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    endpoint_slice = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SLICE,
            "namespace": OPERATOR_NAMESPACE,
            "labels": {
                "kubernetes.io/service-name": SERVICE,
                "endpointslice.kubernetes.io/managed-by": "msop-e2e",
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [PLACEHOLDER], "conditions": {"ready": True}}],
        "ports": [{"name": "metrics", "port": 8080, "protocol": "TCP"}],
    }
    objects = {"apiVersion": "v1", "kind": "List", "items": [service, endpoint_slice]}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(objects))
    yield
    cluster.kubectl("delete", "-n", OPERATOR_NAMESPACE, f"service/{SERVICE}",
                    f"endpointslice/{SLICE}", "--wait=false", check=False)  # fmt: skip


def reader_token(cluster: LocalCluster, namespace: str) -> str:
    """A token of ServiceAccount ``prometheus`` in ``namespace``, bound to
    msop-metrics-reader as the monitoring page binds Prometheus's."""
    cluster.kubectl("create", "serviceaccount", "prometheus", "-n", namespace)
    cluster.kubectl("create", "clusterrolebinding", f"{namespace}-prometheus",
                    "--clusterrole=msop-metrics-reader",
                    f"--serviceaccount={namespace}:prometheus")  # fmt: skip
    user = service_account_user("prometheus", namespace)

    def allowed() -> bool:
        proc = cluster.kubectl("auth", "can-i", "get", "/metrics", f"--as={user}", check=False)
        return proc.stdout.strip() == "yes"

    # msop caches a 403 for 30 s: scrape only once the authorizer has the binding.
    wait_for("msop-metrics-reader bound", allowed, timeout=30)
    return service_account_token(cluster, "prometheus", namespace)


def scrape_configs(
    cluster: LocalCluster, operator: OperatorProcess, token: Path
) -> list[dict[str, Any]]:
    """The page's scrape config, pointed at this cluster, this token and this operator."""
    documented = documented_scrape_config()
    (job,) = documented["scrape_configs"]
    assert documented["rule_files"] == ["alerts.yaml"]
    (discovery,) = job["kubernetes_sd_configs"]
    discovery["kubeconfig_file"] = str(cluster.kubeconfig)
    job["authorization"]["credentials_file"] = str(token)
    address = operator.metrics_url.removeprefix("https://").removesuffix("/metrics")
    job["relabel_configs"].append({"target_label": "__address__", "replacement": address})
    return [job]


def restart_three_times(kubelet: KubeletStandIn, cluster: LocalCluster, namespace: str) -> None:
    """Worker 0 of the job is killed (137, retried by ExitCode) three times, each time
    once its replacement runs."""
    pod = f"{JOB}-worker-0"
    seen: set[str] = set()
    for _ in range(3):
        running = wait_for(
            f"a new {namespace}/{pod} running",
            lambda: (
                (p := get(cluster, namespace, "pod", pod)) is not None
                and p["metadata"]["uid"] not in seen
                and p.get("status", {}).get("phase") == "Running"
                and p
            ),
            timeout=60,
        )
        seen.add(running["metadata"]["uid"])
        kubelet.fail(namespace, pod, exit_code=137, reason="OOMKilled")

    def restarts() -> int:
        job = get(cluster, namespace, "msjob", JOB) or {}
        worker = (job.get("status", {}).get("replicaStatuses") or {}).get("Worker") or {}
        return int(worker.get("restarts") or 0)

    wait_for(f"{namespace}/{JOB} restarted 3 times", lambda: restarts() == 3, timeout=60)


def msjob() -> dict[str, Any]:
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": JOB},
        "spec": {
            "runPolicy": {"backoffLimit": 10},
            "msReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "ExitCode",
                    "template": {
                        "spec": {"containers": [{"name": "mindspore", "image": "mindspore:e2e"}]}
                    },
                }
            },
        },
    }


def test_same_named_jobs_in_two_namespaces_alert_apart(
    cluster: LocalCluster,
    namespace: str,
    other_namespace: str,
    metrics_service: None,
    start_operator: OperatorFactory,
    kubelet: KubeletStandIn,
    tmp_path: Path,
) -> None:
    namespaces = (namespace, other_namespace)
    try:
        token = tmp_path / "prometheus.token"
        token.write_text(reader_token(cluster, namespace))
        op = start_operator("--namespace", other_namespace, metrics_secure=True)
        configs = scrape_configs(cluster, op, token)
        log = LOGS / f"{namespace}-prometheus.log"
        with LocalPrometheus(tmp_path, configs, log, rule_files=[ALERTS]) as prom:
            for ns in namespaces:
                apply(cluster, ns, msjob())

            def query(expr: str) -> list[dict[str, Any]]:
                body = prom.get("/api/v1/query", query=expr)
                assert body["status"] == "success", body
                result: list[dict[str, Any]] = body["data"]["result"]
                return result

            def restart_series() -> list[dict[str, Any]]:
                try:
                    series = query('msop_job_restarts_total{job="msop"}')
                except OSError:
                    return []
                return series if len(series) == 2 else []

            # Both series are stored at 0 before the first restart: increase() sees all 3.
            series = wait_for("both jobs' restarts in Prometheus", restart_series, 90)
            for ns in namespaces:
                restart_three_times(kubelet, cluster, ns)

            # One series per job, named by its own namespace; the target's is msop's.
            labels = [s["metric"] for s in query('msop_job_restarts_total{job="msop"}')]
            assert sorted(m.get("job_namespace", "") for m in labels) == sorted(namespaces), labels
            for m in labels:
                assert m["job_name"] == JOB and m["namespace"] == OPERATOR_NAMESPACE, m
                assert "exported_namespace" not in m, m
            assert {s["metric"]["instance"] for s in series} == {
                op.metrics_url.removeprefix("https://").removesuffix("/metrics")
            }

            def alerts() -> list[dict[str, Any]]:
                body = prom.get("/api/v1/alerts")
                found = [a for a in body["data"]["alerts"]
                         if a["labels"]["alertname"] == "MsopJobRestartingRepeatedly"]  # fmt: skip
                return found if len(found) >= 2 else []

            found = wait_for("MsopJobRestartingRepeatedly for both jobs", alerts, 60)
            assert sorted(a["labels"].get("job_namespace", "") for a in found) == sorted(
                namespaces
            ), found
            for a in found:
                ns = a["labels"]["job_namespace"]
                assert a["labels"]["job_name"] == JOB, a
                assert a["state"] in ("pending", "firing"), a
                assert a["annotations"]["summary"] == f"MSJob {ns}/{JOB} keeps restarting.", a
                assert f"kubectl -n {ns} describe msjob {JOB}:" in a["annotations"]["runbook"]
    finally:
        cluster.kubectl("delete", "clusterrolebinding", f"{namespace}-prometheus",
                        "--wait=false", check=False)  # fmt: skip
