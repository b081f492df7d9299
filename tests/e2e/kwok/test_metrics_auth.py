"""/metrics secured as a cluster runs it (``--metrics-secure``): HTTPS, every scrape's
bearer token reviewed by the kwok tier's real API server. The operator runs as the
ServiceAccount of config/rbac, so its own right to create the reviews is tested too.

- ``test_only_metrics_readers_may_scrape``: no token, or one the API server does not
  know, is 401; a ServiceAccount token without msop-metrics-reader is 403; one of a
  ServiceAccount bound to msop-metrics-reader is 200 with the metrics. The metrics port
  serves nothing else, and no plain HTTP; the probes stay plain HTTP on their own port.
- ``test_a_scraper_costs_no_request_per_scrape``: while nobody scrapes, the operator
  sends no review; repeated scrapes with one token cost one TokenReview and one
  SubjectAccessReview in all (the audit log, by the operator's ServiceAccount).
- ``test_prometheus_scrapes_over_https_with_a_token``: a real Prometheus with the
  configuration docs/tasks/monitoring.md gives (``authorization.credentials_file``,
  ``tls_config.insecure_skip_verify``) scrapes it: the reader's target is up, the other
  ServiceAccount's is down with a 403.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from testbed import LocalCluster, OperatorProcess
from testbed.monitoring import LocalPrometheus
from testbed.paths import REPO
from testbed.serviceaccount import (
    install_rbac,
    service_account_kubeconfig,
    service_account_token,
    service_account_user,
)
from tests.e2e.msjobs import wait_for
from tests.e2e.sessions import OperatorFactory

LOGS = REPO / ".cache" / "e2e-logs"
OPERATOR_USER = service_account_user()
READER_ROLE = "msop-metrics-reader"


@dataclass(frozen=True)
class Scrapers:
    """Two ServiceAccounts of the test's namespace and a token of each."""

    reader: str
    """Token of ``scraper``, bound to msop-metrics-reader."""
    stranger: str
    """Token of ``stranger``, bound to nothing."""


@pytest.fixture
def scrapers(cluster: LocalCluster, namespace: str) -> Iterator[Scrapers]:
    install_rbac(cluster, REPO / "config")
    binding = f"{namespace}-metrics-reader"
    for sa in ("scraper", "stranger"):
        cluster.kubectl("create", "serviceaccount", sa, "-n", namespace)
    cluster.kubectl("create", "clusterrolebinding", binding, f"--clusterrole={READER_ROLE}",
                    f"--serviceaccount={namespace}:scraper")  # fmt: skip

    def can_get_metrics(sa: str) -> bool:
        user = service_account_user(sa, namespace)
        proc = cluster.kubectl("auth", "can-i", "get", "/metrics", f"--as={user}", check=False)
        return proc.stdout.strip() == "yes"

    # A 403 would be cached for 30 s: scrape only once the authorizer has the binding.
    wait_for("the binding to take effect", lambda: can_get_metrics("scraper"), timeout=30)
    assert not can_get_metrics("stranger")
    try:
        yield Scrapers(
            reader=service_account_token(cluster, "scraper", namespace),
            stranger=service_account_token(cluster, "stranger", namespace),
        )
    finally:
        cluster.kubectl("delete", "clusterrolebinding", binding, "--wait=false", check=False)


def secure_operator(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory
) -> OperatorProcess:
    """msop with --metrics-secure, as the operator's ServiceAccount (config/rbac)."""
    kubeconfig = service_account_kubeconfig(cluster, LOGS / f"{namespace}-sa.kubeconfig")
    op = start_operator(kubeconfig=kubeconfig, metrics_secure=True)
    assert op.metrics_url.startswith("https://")
    return op


def test_only_metrics_readers_may_scrape(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, scrapers: Scrapers
) -> None:
    op = secure_operator(cluster, namespace, start_operator)

    status, body = op.scrape()
    assert status == 401, body
    assert op.scrape("not-a-token")[0] == 401
    status, body = op.scrape(scrapers.stranger)
    assert status == 403, body
    status, body = op.scrape(scrapers.reader)
    assert status == 200, body
    assert "msop_build_info{" in body and "workqueue_depth" in body

    # Only /metrics, and only over TLS; the probes are plain HTTP on their own port.
    for path in ("/healthz", "/readyz", "/"):
        assert op.scrape(scrapers.reader, path)[0] == 404, path
    plain = op.metrics_url.replace("https://", "http://")
    with pytest.raises((OSError, http.client.HTTPException)):
        urllib.request.urlopen(plain, timeout=10).close()
    assert op.metrics_port != op.health_port and op.ready()
    assert op.alive()


def operator_reviews(cluster: LocalCluster, offset: int) -> dict[str, int]:
    """The reviews the operator's ServiceAccount created, by resource, in the audit log's
    entries after byte ``offset`` (the earlier tests' operators run as the same user, and
    their last scrapes may be less than a second old)."""
    counts = {"tokenreviews": 0, "subjectaccessreviews": 0}
    with cluster.audit_log.open("rb") as log:
        log.seek(offset)
        text = log.read().decode()
    for line in text.splitlines():
        if f'"username":"{OPERATOR_USER}"' not in line or "reviews" not in line:
            continue
        entry = json.loads(line)
        resource = (entry.get("objectRef") or {}).get("resource")
        if (
            entry.get("stage") == "ResponseComplete"
            and entry["verb"] == "create"
            and resource in counts
        ):
            assert 200 <= entry["responseStatus"]["code"] < 300, entry
            counts[resource] += 1
    return counts


def test_a_scraper_costs_no_request_per_scrape(
    cluster: LocalCluster, namespace: str, start_operator: OperatorFactory, scrapers: Scrapers
) -> None:
    since = cluster.audit_log.stat().st_size
    op = secure_operator(cluster, namespace, start_operator)
    time.sleep(3)  # idle: nobody scrapes
    assert operator_reviews(cluster, since) == {"tokenreviews": 0, "subjectaccessreviews": 0}

    for _ in range(5):
        assert op.scrape(scrapers.reader)[0] == 200
    one_each = {"tokenreviews": 1, "subjectaccessreviews": 1}
    wait_for("the two reviews in the audit log",
             lambda: operator_reviews(cluster, since) == one_each, timeout=20)  # fmt: skip
    time.sleep(2)  # the audit log is written as requests complete: nothing more came
    assert operator_reviews(cluster, since) == one_each


def test_prometheus_scrapes_over_https_with_a_token(
    cluster: LocalCluster,
    namespace: str,
    start_operator: OperatorFactory,
    scrapers: Scrapers,
    tmp_path: Path,
) -> None:
    op = secure_operator(cluster, namespace, start_operator)
    target = op.metrics_url.removeprefix("https://").removesuffix("/metrics")

    def job(name: str, token: str) -> dict[str, Any]:
        credentials = tmp_path / f"{name}.token"
        credentials.write_text(token)
        return {
            "job_name": name,
            "scheme": "https",
            "authorization": {"type": "Bearer", "credentials_file": str(credentials)},
            "tls_config": {"insecure_skip_verify": True},
            "static_configs": [{"targets": [target]}],
        }

    configs = [job("reader", scrapers.reader), job("stranger", scrapers.stranger)]
    with LocalPrometheus(tmp_path, configs, LOGS / f"{namespace}-prometheus.log") as prom:

        def targets() -> dict[str, dict[str, Any]]:
            try:
                active = prom.get("/api/v1/targets")["data"]["activeTargets"]
            except OSError:
                return {}
            by_job = {t["labels"]["job"]: t for t in active}
            scraped = all(t["health"] != "unknown" for t in by_job.values())
            return by_job if len(by_job) == 2 and scraped else {}

        by_job = wait_for("both targets scraped", targets, timeout=60)
        assert by_job["reader"]["health"] == "up", by_job["reader"]
        assert by_job["stranger"]["health"] == "down"
        assert "403" in by_job["stranger"]["lastError"], by_job["stranger"]

        def build_info() -> list[Any]:
            body = prom.get("/api/v1/query", query='msop_build_info{job="reader"}')
            result: list[Any] = body["data"]["result"]
            return result

        assert wait_for("msop_build_info in Prometheus", build_info, timeout=30)
