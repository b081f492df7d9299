"""config/prometheus/alerts.yaml and config/grafana/msop.json against msop's real metrics.

- promtool accepts the rule file, and every dashboard query parses as PromQL;
- ``promtool test rules`` on synthetic series: a healthy operator fires nothing, and each
  failure (scaled to 0, no leader, errors, stuck queue, ...) fires exactly its alert;
- every metric, label and label value the rules and the dashboard name is one msop exports
  (taken from msop's registry, not from a list kept here);
- the dashboard's panels all use the ``${datasource}`` variable and literal queries.

promtool is built from Prometheus's Go module by ``hack/prometheus/build.sh`` (``make unit``
depends on ``make prometheus``, which builds it; the first call here builds it otherwise).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from msop.controller.controller import Controller
from msop.controller.reconcile import Request, Result
from msop.informers.metrics import RESTART_REASONS
from msop.metrics import REGISTRY
from testbed.monitoring import (
    ALERTS,
    DASHBOARD,
    TARGET_LABELS,
    alert_exprs,
    exported_metrics,
    grouping_labels,
    matchers,
    metric_names,
    panel_exprs,
    prometheus_tools,
)

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
JOB = "msop"  # the job name the annotation-based scrape config uses
OPERATOR_JOB = "msop-controller-manager-metrics"  # the ServiceMonitor's (the Service name)
LEASE = "msop.mindspore.gitee.com"


def _promtool() -> str:
    return str(prometheus_tools() / "promtool")


def _run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args], capture_output=True, text=True, timeout=120, check=False
    )


def _dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def _all_exprs() -> list[tuple[str, str]]:
    return [(f"alert {n}", e) for n, e in alert_exprs()] + [
        (f"panel {t!r}", e) for t, e in panel_exprs()
    ]


# --- promtool -----------------------------------------------------------------------------


def test_promtool_checks_the_rules() -> None:
    result = _run_promtool("check", "rules", str(ALERTS))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    # promtool has no query linter, but it parses recording rules: one per target.
    rules = [
        {"record": f"dashboard:panel_{i}", "expr": expr}
        for i, (_title, expr) in enumerate(panel_exprs())
    ]
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = _run_promtool("check", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr


def _series(
    metric: str, values: str, instance: str = "a:8080", /, job: str = JOB, **labels: str
) -> dict[str, str]:
    """One promtool input series; ``values`` in promtool's expanding notation."""
    all_labels = {"job": job, "instance": instance, **labels}
    selector = ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items()))
    return {"series": f"{metric}{{{selector}}}", "values": values}


def _healthy() -> dict[str, dict[str, str]]:
    """Two replicas, ``a`` leading, reconciling jobs; keyed by a short name to override."""
    ctl = {"controller": "msjob"}
    q = {"name": "msjob"}
    return {
        "up_a": _series("up", "1x60"),
        "up_b": _series("up", "1x60", "b:8080"),
        "leader_a": _series("leader_election_master_status", "1x60", name=LEASE),
        "leader_b": _series("leader_election_master_status", "0x60", "b:8080", name=LEASE),
        "ok": _series("controller_runtime_reconcile_total", "0+10x60", result="success", **ctl),
        "err": _series("controller_runtime_reconcile_total", "0x60", result="error", **ctl),
        "depth": _series("workqueue_depth", "3x60", **q),
        "longest": _series("workqueue_longest_running_processor_seconds", "0.2x60", **q),
        "closed": _series(
            "informer_watch_restarts_total", "0+0.2x60", resource="pods", reason="closed"
        ),
        "expired_once": _series(
            "informer_watch_restarts_total", "0x20 1x40", resource="pods", reason="expired"
        ),
        "req_200": _series("rest_client_requests_total", "0+100x60", code="200", method="GET"),
        "req_409": _series("rest_client_requests_total", "0+2x60", code="409", method="PUT"),
        "failed_once": _series(
            "training_operator_jobs_failed_total",
            "0x20 1x40",
            job_namespace="team-a",
            framework="mindspore",
        ),
        # A job training (a new report every minute, half done), one queued for 30 minutes
        # at 40m, one restarted once; each job's series from both replicas' caches.
        "reported": _series(REPORTED, "0+60x60", **TRAIN),
        "ratio": _series("msop_job_progress_ratio", "0.5x60", **TRAIN),
        "queued_a": _series(QUEUED_SINCE, "600x60", **WAITING),
        "queued_b": _series(QUEUED_SINCE, "600x60", "b:8080", **WAITING),
        "restarts_a": _series(RESTARTS, "0x20 1x40", **TRAIN),
        "restarts_b": _series(RESTARTS, "0x20 1x40", "b:8080", **TRAIN),
    }


REPORTED = "msop_job_progress_last_report_timestamp_seconds"
QUEUED_SINCE = "msop_job_queued_since_timestamp_seconds"
RESTARTS = "msop_job_restarts_total"
TRAIN = {"namespace": "team-a", "name": "train"}
WAITING = {"namespace": "team-a", "name": "waiting"}


def _scenarios() -> dict[str, tuple[dict[str, dict[str, str]], list[dict[str, str]]]]:
    """name -> (input series, alerts expected to fire at 40m, with their labels)."""
    h = _healthy
    q = {"name": "msjob"}
    crit, warn = {"severity": "critical"}, {"severity": "warning"}
    return {
        "healthy": (h(), []),
        "a job's training stopped moving": (
            {**h(), "reported": _series(REPORTED, "0x60", **TRAIN)},
            [{"alertname": "MsopJobProgressStalled", "job": JOB, **TRAIN, **warn}],
        ),
        "a finished training reports no more": (
            {
                **h(),
                "reported": _series(REPORTED, "0x60", **TRAIN),
                "ratio": _series("msop_job_progress_ratio", "1x60", **TRAIN),
            },
            [],
        ),
        "a job queued for over an hour": (
            {
                **h(),
                "queued_a": _series(QUEUED_SINCE, "-1800x60", **WAITING),
                "queued_b": _series(QUEUED_SINCE, "-1800x60", "b:8080", **WAITING),
            },
            [{"alertname": "MsopJobQueuedTooLong", "job": JOB, **WAITING, "severity": "info"}],
        ),
        "a job restarting again and again": (
            {
                **h(),
                "restarts_a": _series(RESTARTS, "0+1x60", **TRAIN),
                "restarts_b": _series(RESTARTS, "0+1x60", "b:8080", **TRAIN),
            },
            [{"alertname": "MsopJobRestartingRepeatedly", "job": JOB, **TRAIN, **warn}],
        ),
        "healthy, ServiceMonitor job name": (
            {
                "up": _series("up", "1x60", job=OPERATOR_JOB),
                "leader": _series(
                    "leader_election_master_status", "1x60", job=OPERATOR_JOB, name=LEASE
                ),
            },
            [],
        ),
        "scaled to 0": (
            {"other": {"series": 'up{job="other",instance="x:1"}', "values": "1x60"}},
            [{"alertname": "MsopDown", **crit}, {"alertname": "MsopNoLeader", **crit}],
        ),
        "every replica unreachable": (
            {**h(), "up_a": _series("up", "0x60"), "up_b": _series("up", "0x60", "b:8080")},
            [
                {"alertname": "MsopDown", **crit},
                *(
                    {"alertname": "MsopTargetDown", "job": JOB, "instance": i, **warn}
                    for i in ("a:8080", "b:8080")
                ),
            ],
        ),
        "no leader": (
            {**h(), "leader_a": _series("leader_election_master_status", "0x60", name=LEASE)},
            [{"alertname": "MsopNoLeader", "job": JOB, "name": LEASE, **crit}],
        ),
        "two leaders": (
            {
                **h(),
                "leader_b": _series("leader_election_master_status", "1x60", "b:8080", name=LEASE),
            },
            [{"alertname": "MsopMultipleLeaders", "job": JOB, "name": LEASE, **warn}],
        ),
        "reconcile errors": (
            {
                **h(),
                "err": _series(
                    "controller_runtime_reconcile_total",
                    "0+2x60",
                    result="error",
                    controller="msjob",
                ),
            },
            [{"alertname": "MsopReconcileErrors", "job": JOB, "controller": "msjob", **warn}],
        ),
        "queue backlog": (
            {**h(), "depth": _series("workqueue_depth", "150x60", **q)},
            [{"alertname": "MsopWorkqueueNotDraining", "job": JOB, **q, **warn}],
        ),
        "stuck reconcile": (
            {
                **h(),
                "longest": _series("workqueue_longest_running_processor_seconds", "0+60x60", **q),
            },
            [{"alertname": "MsopReconcileStuck", "job": JOB, **q, **warn}],
        ),
        "failing watches": (
            {
                **h(),
                "error": _series(
                    "informer_watch_restarts_total", "0+1x60", resource="pods", reason="error"
                ),
            },
            [{"alertname": "MsopWatchesRestarting", "job": JOB, "resource": "pods", **warn}],
        ),
        "API server errors": (
            {
                **h(),
                "req_503": _series(
                    "rest_client_requests_total", "0+10x60", code="503", method="GET"
                ),
            },
            [{"alertname": "MsopApiErrors", "job": JOB, **warn}],
        ),
        "jobs keep failing": (
            {
                **h(),
                "failed_once": _series(
                    "training_operator_jobs_failed_total",
                    "0+1x60",
                    job_namespace="team-a",
                    framework="mindspore",
                ),
            },
            [{"alertname": "MsopJobsFailing", "job": JOB, "job_namespace": "team-a", **warn}],
        ),
    }


def test_alerts_fire_exactly_when_they_should(tmp_path: Path) -> None:
    # The rules as shipped, minus their annotations: promtool compares annotations too,
    # and the templates are checked by `promtool check rules` above.
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(doc))
    names = [name for name, _ in alert_exprs()]
    tests = []
    for scenario, (series, firing) in _scenarios().items():
        for alert in firing:
            assert alert["alertname"] in names, f"{scenario}: no alert {alert['alertname']}"
        tests.append(
            {
                "name": scenario,
                "interval": "1m",
                "input_series": list(series.values()),
                "alert_rule_test": [
                    {
                        "alertname": name,
                        "eval_time": "40m",
                        "exp_alerts": [
                            {"exp_labels": {k: v for k, v in a.items() if k != "alertname"}}
                            for a in firing
                            if a["alertname"] == name
                        ],
                    }
                    for name in names
                ],
            }
        )
    test_file = tmp_path / "alerts-test.yaml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(rules)], "tests": tests}))
    result = _run_promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_actionable() -> None:
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert rules and all("alert" in r for r in rules)
    for rule in rules:
        name = rule["alert"]
        assert rule.get("for"), f"{name}: no `for`"
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        for key in ("summary", "description", "runbook"):
            assert rule["annotations"].get(key), f"{name}: no {key} annotation"
    assert {"MsopDown", "MsopNoLeader", "MsopReconcileErrors", "MsopWorkqueueNotDraining"} <= {
        r["alert"] for r in rules
    }


# --- the names match what msop exports -----------------------------------------------------


@pytest.mark.parametrize(("where", "expr"), _all_exprs())
def test_queries_use_metrics_and_labels_msop_exports(where: str, expr: str) -> None:
    exported = exported_metrics()
    names = metric_names(expr)
    assert names, f"{where}: no metric found in {expr!r}"
    unknown = names - exported.keys()
    assert not unknown, f"{where}: msop exports no {sorted(unknown)}"
    for m in matchers(expr):
        assert m.metric, f"{where}: selector without a metric name"
        allowed = exported[m.metric] | TARGET_LABELS
        assert m.label in allowed, f"{where}: {m.metric} has no label {m.label!r}"
    # by/without/on/ignoring may name any label of the metrics used (and ``le``).
    known = set(TARGET_LABELS).union(*(exported[n] for n in names))
    assert grouping_labels(expr) <= known, f"{where}: grouping by {grouping_labels(expr) - known}"


class _Noop:
    async def reconcile(self, request: Request) -> Result:
        return Result()


def _reconcile_results() -> set[str]:
    """The ``result`` values a controller exports (all created at zero on construction)."""
    Controller("monitoring-config-test", _Noop())
    return {
        s.labels["result"]
        for family in REGISTRY.collect()
        if family.name == "controller_runtime_reconcile"
        for s in family.samples
        if s.labels.get("controller") == "monitoring-config-test" and s.name.endswith("_total")
    }


def test_label_values_are_ones_msop_emits() -> None:
    results = _reconcile_results()
    assert "error" in results and "success" in results, results
    known = {
        ("controller_runtime_reconcile_total", "result"): results,
        ("informer_watch_restarts_total", "reason"): set(RESTART_REASONS),
        ("training_operator_jobs_failed_total", "framework"): {"mindspore"},
    }
    checked = 0
    for where, expr in _all_exprs():
        for m in matchers(expr):
            values = known.get((m.metric, m.label))
            if values is None:
                continue
            checked += 1
            # Regex matchers here are plain alternations of literal values.
            wanted = m.value.split("|") if m.op in ("=~", "!~") else [m.value]
            assert set(wanted) <= values, f"{where}: {m.metric} has no {m.label}={m.value!r}"
    assert checked >= 2


# --- the dashboard ---------------------------------------------------------------------------


def _panels() -> list[dict[str, Any]]:
    panels: list[dict[str, Any]] = _dashboard()["panels"]
    return panels


def test_dashboard_identity_and_datasource_variable() -> None:
    d = _dashboard()
    assert (d["uid"], d["title"]) == ("msop", "msop")
    assert d["schemaVersion"] >= 36
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")


def test_every_panel_and_target_uses_the_datasource_variable() -> None:
    panels = _panels()
    assert panels
    for p in panels:
        assert p["type"] in ("timeseries", "stat"), p["title"]
        assert p.get("datasource") == DATASOURCE, p["title"]
        assert p["targets"], f"{p['title']}: no targets"
        ref_ids = [t["refId"] for t in p["targets"]]
        assert len(set(ref_ids)) == len(ref_ids), f"{p['title']}: duplicate refId"
        for t in p["targets"]:
            assert t.get("datasource", DATASOURCE) == DATASOURCE, p["title"]
            assert t.get("expr", "").strip(), f"{p['title']}: target {t['refId']} has no expr"


def test_dashboard_queries_run_verbatim() -> None:
    # No Grafana variables ($__rate_interval, $job, ...): a test can send them to Prometheus
    # as they are, and the rate windows are literal.
    for title, expr in panel_exprs():
        assert "$" not in expr, f"{title}: {expr}"
        for window in re.findall(r"\[([^\]]+)\]", expr):
            assert window == "5m", f"{title}: window [{window}]"


def test_dashboard_covers_the_essentials() -> None:
    used = set().union(*(metric_names(e) for _t, e in panel_exprs()))
    assert {
        "controller_runtime_reconcile_total",
        "controller_runtime_reconcile_time_seconds_bucket",
        "workqueue_depth",
        "rest_client_requests_total",
        "msop_jobs",
        "leader_election_master_status",
    } <= used


def test_panels_do_not_overlap() -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in _panels():
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[x, y]}"
                cells[x, y] = p["title"]
    ids = [p["id"] for p in _panels()]
    assert len(set(ids)) == len(ids)


# --- the PromQL scanner itself ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (le) (rate(a_bucket{x="y"}[5m]))', {"a_bucket"}),
        ('absent(up{job=~"m|n"} == 1)', {"up"}),
        ('label_replace(sum(rate(b_total[5m])), "t", "c", "", "") or c', {"b_total", "c"}),
        ("max without (pod) (d) > 1 and on (job) e offset 5m", {"d", "e"}),
        ("histogram_quantile(0.99, sum by (verb, le) (rate(f[5m])))", {"f"}),
    ],
)
def test_metric_names(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names
