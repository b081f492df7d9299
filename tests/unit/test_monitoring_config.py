"""config/prometheus/alerts.yaml and config/grafana/msop.json against msop's real metrics.

- promtool accepts the rule file, and every dashboard query parses as PromQL;
- ``promtool test rules`` on synthetic series: a healthy operator fires nothing, and each
  failure (scaled to 0, no leader, errors, stuck queue, ...) fires exactly its alert;
- every metric, label and label value the rules and the dashboard name is one msop exports
  (taken from msop's registry, not from a list kept here);
- no label msop exports is one a standard scrape attaches to the target (``namespace``,
  ``job``, ...): such a label would be renamed ``exported_<label>`` by Prometheus, and the
  synthetic series here are what Prometheus stores after such a scrape;
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
from msop.msjob.metrics import JobCollector, ProgressCollector
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
    metric: str, values: str, instance: str = "a:8080", /, job: str = JOB, **exposed: str
) -> dict[str, str]:
    """One promtool input series as Prometheus stores it after scraping ``exposed`` (the
    labels msop serves) from the replica at ``instance`` with the scrape config of
    docs/tasks/monitoring.md: the target's labels (``job``, ``instance``, and the
    ``namespace`` and ``pod`` of msop's pod) win, and an exposed label of the same name is
    kept as ``exported_<label>`` (``honor_labels: false``, the default, also the
    ServiceMonitor's). ``values`` in promtool's expanding notation."""
    target = {
        "job": job,
        "instance": instance,
        "namespace": OPERATOR_NAMESPACE,
        "pod": f"msop-controller-manager-{instance.partition(':')[0]}",
    }
    labels = {(f"exported_{k}" if k in target else k): v for k, v in exposed.items()}
    all_labels = {**labels, **target}
    selector = ",".join(f'{k}="{v}"' for k, v in sorted(all_labels.items()))
    return {"series": f"{metric}{{{selector}}}", "values": values}


def _job_labels(namespace: str, name: str) -> dict[str, str]:
    """The labels msop serves on the per-job series of MSJob ``namespace/name``, read
    from its collectors (the progress series must carry the same ones)."""

    class _Report:
        def reports(self) -> list[tuple[Request, dict[str, object]]]:
            progress = {"percentComplete": 50, "lastReportTime": "2026-01-01T00:00:00Z"}
            return [(Request(namespace, name), progress)]

    jobs, progress = JobCollector(), ProgressCollector()
    jobs.add(lambda: [(namespace, name, 0, "2026-01-01T00:00:00Z")])
    progress.add(_Report())
    label_sets = [
        s.labels
        for collector in (jobs, progress)
        for family in collector.collect()
        for s in family.samples
        if not s.name.endswith("_created")
    ]
    assert len(label_sets) == 4 and all(ls == label_sets[0] for ls in label_sets), label_sets
    return dict(label_sets[0])


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
OPERATOR_NAMESPACE = "msop-system"
# The exposed labels of three jobs, and the labels their alerts must carry: the job's own
# namespace and name, never msop's.
TRAIN = _job_labels("team-a", "train")
WAITING = _job_labels("team-a", "waiting")
TRAIN_B = _job_labels("team-b", "train")
ALERT_TRAIN = {"job_namespace": "team-a", "job_name": "train"}
ALERT_WAITING = {"job_namespace": "team-a", "job_name": "waiting"}
ALERT_TRAIN_B = {"job_namespace": "team-b", "job_name": "train"}


def _scenarios() -> dict[str, tuple[dict[str, dict[str, str]], list[dict[str, str]]]]:
    """name -> (input series, alerts expected to fire at 40m, with their labels)."""
    h = _healthy
    q = {"name": "msjob"}
    crit, warn = {"severity": "critical"}, {"severity": "warning"}
    return {
        "healthy": (h(), []),
        "a job's training stopped moving": (
            {**h(), "reported": _series(REPORTED, "0x60", **TRAIN)},
            [{"alertname": "MsopJobProgressStalled", "job": JOB, **ALERT_TRAIN, **warn}],
        ),
        "a training that reports no totals stopped moving": (
            {
                **{k: v for k, v in h().items() if k != "ratio"},
                "reported": _series(REPORTED, "0x60", **TRAIN),
            },
            [{"alertname": "MsopJobProgressStalled", "job": JOB, **ALERT_TRAIN, **warn}],
        ),
        "a training that reports no totals moves on": (
            {k: v for k, v in h().items() if k != "ratio"},
            [],
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
            [
                {
                    "alertname": "MsopJobQueuedTooLong",
                    "job": JOB,
                    **ALERT_WAITING,
                    "severity": "info",
                }
            ],
        ),
        "a job restarting again and again": (
            {
                **h(),
                "restarts_a": _series(RESTARTS, "0+1x60", **TRAIN),
                "restarts_b": _series(RESTARTS, "0+1x60", "b:8080", **TRAIN),
            },
            [{"alertname": "MsopJobRestartingRepeatedly", "job": JOB, **ALERT_TRAIN, **warn}],
        ),
        "two jobs of one name in two namespaces restarting": (
            {
                **h(),
                "restarts_a": _series(RESTARTS, "0+1x60", **TRAIN),
                "restarts_b": _series(RESTARTS, "0+1x60", "b:8080", **TRAIN),
                "restarts_other_a": _series(RESTARTS, "0+1x60", **TRAIN_B),
                "restarts_other_b": _series(RESTARTS, "0+1x60", "b:8080", **TRAIN_B),
            },
            [
                {"alertname": "MsopJobRestartingRepeatedly", "job": JOB, **ALERT_TRAIN, **warn},
                {"alertname": "MsopJobRestartingRepeatedly", "job": JOB, **ALERT_TRAIN_B, **warn},
            ],
        ),
        "two jobs of one name in two namespaces stopped moving": (
            {
                **h(),
                "reported": _series(REPORTED, "0x60", **TRAIN),
                "reported_other": _series(REPORTED, "0x60", **TRAIN_B),
                "ratio_other": _series("msop_job_progress_ratio", "0.5x60", **TRAIN_B),
            },
            [
                {"alertname": "MsopJobProgressStalled", "job": JOB, **ALERT_TRAIN, **warn},
                {"alertname": "MsopJobProgressStalled", "job": JOB, **ALERT_TRAIN_B, **warn},
            ],
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
                    {
                        "alertname": "MsopTargetDown",
                        "job": JOB,
                        "instance": f"{r}:8080",
                        "namespace": OPERATOR_NAMESPACE,  # the target's own labels
                        "pod": f"msop-controller-manager-{r}",
                        **warn,
                    }
                    for r in ("a", "b")
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


def test_annotations_name_the_jobs_namespace() -> None:
    # After a standard scrape `namespace` is msop's own (msop-system): a runbook that
    # sends the reader there, or a summary that names it, points at the wrong place.
    doc = yaml.safe_load(ALERTS.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    for rule in rules:
        text = " ".join(rule["annotations"].values())
        used = set(re.findall(r"\$labels\.(\w+)", text))
        assert "namespace" not in used, f"{rule['alert']}: $labels.namespace is msop's"
        assert "exported_namespace" not in used, rule["alert"]
        for label in re.findall(r"kubectl\s+-n\s+\{\{\s*\$labels\.(\w+)", text):
            assert label == "job_namespace", f"{rule['alert']}: kubectl -n $labels.{label}"
        # Every label a template reads is one the expression keeps.
        kept = grouping_labels(str(rule["expr"])) or set(TARGET_LABELS)
        assert used <= kept, f"{rule['alert']}: {sorted(used - kept)} not in the alert"
    per_job = [r for g in doc["groups"] if g["name"] == "msop-jobs" for r in g["rules"]]
    assert per_job
    for rule in per_job:
        assert {"job_namespace", "job_name"} <= grouping_labels(str(rule["expr"])), rule["alert"]


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
    # On series about jobs, `namespace` is the scraped target's: grouping by it merges
    # every job of one name.
    if any("job_namespace" in exported[n] for n in names):
        assert not grouping_labels(expr) & {"namespace", "name"}, f"{where}: {expr}"


def test_no_exported_label_is_a_scrape_target_label() -> None:
    # Prometheus attaches job, instance and (Kubernetes discovery, ServiceMonitor) the
    # target's namespace, pod, service, endpoint and container; an exposed label of the same
    # name would become exported_<label>, and rules grouping by it would group by msop's.
    for metric, labels in exported_metrics().items():
        if metric == "up":
            continue
        clash = labels & TARGET_LABELS
        assert not clash, f"{metric} exposes {sorted(clash)}, which the scrape overwrites"


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
