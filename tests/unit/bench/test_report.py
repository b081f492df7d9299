"""bench's pure parts: percentiles, audit counting, target verdicts and the Markdown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.audit import WRITE_VERBS, count_requests
from bench.report import (
    JSON,
    judge,
    judge_curve_goals,
    judge_scale_goals,
    judge_throttled_goals,
    render_markdown,
    scale_curve,
    shard_shares,
)
from bench.stats import cdf, percentile, ratio, summarize


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 50, 2.5),  # order does not matter
        (list(map(float, range(101))), 99, 99.0),
        ([0.0, 10.0], 90, 9.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


@pytest.mark.parametrize(("values", "q"), [([], 50), ([1.0], -1), ([1.0], 101)])
def test_percentile_rejects(values: list[float], q: float) -> None:
    with pytest.raises(ValueError):
        percentile(values, q)


def test_summarize_and_cdf() -> None:
    s = summarize([3.0, 1.0, 2.0])
    assert s == {"count": 3, "mean": 2.0, "p50": 2.0, "p90": 2.8, "p99": pytest.approx(2.98),
                 "max": 3.0}  # fmt: skip
    assert summarize([]) == {"count": 0}
    assert cdf([2.0, 1.0]) == ([1.0, 2.0], [0.5, 1.0])
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 0.0) is None


def _audit(verb: str, resource: str, ua: str, stage: str = "ResponseComplete", **ref: str) -> str:
    return json.dumps(
        {"stage": stage, "verb": verb, "userAgent": ua, "objectRef": {"resource": resource, **ref}}
    )


def test_count_requests_filters_user_agent_and_stage() -> None:
    lines = [
        _audit("create", "pods", "msop/0.1.0"),
        _audit("create", "pods", "msop/0.1.0"),
        _audit("watch", "pods", "msop/0.1.0", stage="ResponseStarted"),
        _audit("watch", "pods", "msop/0.1.0"),
        _audit("update", "msjobs", "msop/0.1.0", apiGroup="mindspore.gitee.com",
               subresource="status"),
        _audit("create", "pods", "msop-bench/1"),
        _audit("create", "pods", "kubectl/v1.36"),
        "not json msop/",
    ]  # fmt: skip
    counts = count_requests(lines, "msop/")
    assert counts.by_verb_resource == {
        ("create", "pods"): 2,
        ("watch", "pods"): 1,
        ("update", "msjobs.mindspore.gitee.com/status"): 1,
    }
    assert counts.total(WRITE_VERBS) == 3
    assert counts.total(WRITE_VERBS, "pods") == 2


def _results(p99: float, writes: float) -> JSON:
    return {
        "burst": {
            "operator": {"job_latency_s": {"p99": p99}, "operator_cpu_ms_per_lifecycle": 25.0},
            "ratio_operator_to_raw": 1.2,
            "api": {"writes_per_job": writes, "minimum_writes_per_job": 9.0},
        }
    }


def test_judge() -> None:
    rows = {r["target"]: r for r in judge(_results(p99=1.5, writes=10.0))}
    assert rows["burst p99 job latency"]["met"] is True
    assert rows["operator / raw-create time"]["met"] is True
    assert rows["writes per job"]["met"] is True
    assert rows["CPU per job lifecycle"]["met"] is False
    assert rows["bytes per cached pod"]["met"] is None  # no memory scenario run
    rows = {r["target"]: r for r in judge(_results(p99=2.5, writes=8.9))}
    assert rows["burst p99 job latency"]["met"] is False
    assert rows["writes per job"]["met"] is False  # fewer than the floor is also wrong
    # Created and Running in one status write for some jobs: under 10, above the floor.
    assert {r["target"]: r for r in judge(_results(p99=1, writes=9.9))}["writes per job"]["met"]
    assert not {r["target"]: r for r in judge(_results(p99=1, writes=10.1))}["writes per job"][
        "met"
    ]


def test_a_latency_the_raw_creates_cannot_reach_is_out_of_reach() -> None:
    results = _results(p99=19.0, writes=10.0)
    results["burst"]["raw"] = {"job_latency_s": {"p99": 12.0}}
    row = {r["target"]: r for r in judge(results)}["burst p99 job latency"]
    assert row["met"] is False and row["out_of_reach"] == 12.0
    md = render_markdown({"targets": judge(results)})
    assert (
        "| burst p99 job latency | 19.00 s | ≤ 2.00 | "
        "out of reach here: the raw creates' p99 is 12.00 s |" in md
    )
    results["burst"]["raw"] = {"job_latency_s": {"p99": 1.0}}
    row = {r["target"]: r for r in judge(results)}["burst p99 job latency"]
    assert row["met"] is False and "out_of_reach" not in row  # reachable: missed


def test_render_markdown_without_scenarios() -> None:
    report = {"started": "now", "command": "make bench", "scale": 1, "targets": judge({})}
    md = render_markdown(report)
    assert md.startswith("# msop benchmark now")
    assert "not measured" in md


def _scenario(events_dropped: int, exit_code: int, sigterm_s: float) -> JSON:
    return {
        "operator": {
            "jobs": 200, "operator_args": ["--kube-api-qps", "20"], "all_objects_exist_s": 60.0,
            "events_dropped": events_dropped, "operator_cpu_ms_per_lifecycle": 20.0,
            "operator_rss_mib_idle": 40.0, "operator_rss_mib_peak": 70.0,
            "shutdown": {"sigterm_to_exit_s": sigterm_s, "exit_code": exit_code},
        },
        "raw": {"all_objects_exist_s": 20.0, "concurrency": 16},
        "ratio_operator_to_raw": 3.0,
        "api": {"writes_per_job": 10.0, "event_writes_per_job": 4.0},
    }  # fmt: skip


def test_throttled_goals_next_to_previous_figures() -> None:
    report: dict[str, object] = {
        "load": {"qps20": _scenario(0, 0, 1.5), "defaults": _scenario(3, 1, 2.0)},
        "targets": [],
    }
    rows = {r["goal"]: r for r in judge_throttled_goals(report)}
    assert rows["all pods / raw creates, N=200, qps 20"]["met"] is True
    assert rows["all pods / raw creates, N=500, default flags"]["met"] is False
    assert rows["events dropped, N=500, default flags"]["met"] is False
    assert rows["SIGTERM to exit, N=200, qps 20 (exit 0, ≤ 30 s)"]["met"] is True
    assert rows["SIGTERM to exit, N=500, default flags"]["met"] is False  # exit code 1
    assert rows["RSS with 10,000 of 20,000 pods cached"]["met"] is None  # not run
    assert not any("idle" in goal for goal in rows)  # the idle RSS goal is retired
    assert rows["Event writes per job, N=200, qps 20"]["met"] is None  # reported only
    report["throttled_goals"] = list(rows.values())
    md = render_markdown(report)
    assert "## Goals under a client-side limit" in md and "99.5 s / 17.6 s = 5.6x (issue)" in md
    assert "## Load scenarios" in md and "| qps20 | 200 |" in md


def test_a_goal_below_the_flags_floor_is_out_of_reach_not_missed() -> None:
    # Raw creates took 5 s; --kube-api-qps 20 cannot create 1,400 objects in under 68.5 s.
    qps20 = _scenario(0, 0, 1.0)
    qps20.update(
        ratio_operator_to_raw=70.0 / 5.0, client_limit_floor_s=68.5,
        ratio_operator_to_floor=70.0 / 68.5, ratio_floor_to_raw=68.5 / 5.0,
    )  # fmt: skip
    report: dict[str, object] = {"load": {"qps20": qps20}, "targets": []}
    rows = {r["goal"]: r for r in judge_throttled_goals(report)}
    raw = rows["all pods / raw creates, N=200, qps 20"]
    assert raw["met"] is False and raw["out_of_reach"] == 68.5 / 5.0
    floor = rows["all pods / the flags' floor ((creates - burst) / qps), N=200, qps 20"]
    assert floor["met"] is True
    report["throttled_goals"] = list(rows.values())
    md = render_markdown(report)
    assert "out of reach here: the flags' floor is 13.70 x" in md
    assert "| 68.50 |" in md  # the floor column of the load scenarios

    # Slower than the floor allows, and the floor itself within reach: missed.
    qps20.update(ratio_operator_to_floor=1.2, ratio_floor_to_raw=3.0)
    rows = {r["goal"]: r for r in judge_throttled_goals(report)}
    assert "out_of_reach" not in rows["all pods / raw creates, N=200, qps 20"]
    assert (
        rows["all pods / the flags' floor ((creates - burst) / qps), N=200, qps 20"]["met"] is False
    )


def test_the_flags_floor_of_a_client_side_limit() -> None:
    from bench.burst import client_limit_floor_s

    assert client_limit_floor_s(["--kube-api-qps", "20", "--kube-api-burst", "30"], 1400) == 68.5
    assert client_limit_floor_s(["--kube-api-qps=0"], 20) == 2.0  # client-go's 5/s, burst 10
    assert client_limit_floor_s(["--kube-api-qps", "20", "--kube-api-burst", "50"], 10) == 0
    assert client_limit_floor_s([], 1400) is None  # the default: no client-side limit
    assert client_limit_floor_s(["--max-concurrent-reconciles", "50"], 1400) is None


def test_scale_goals_come_first_with_the_scale_scenarios() -> None:
    n2000 = _scenario(0, 0, 1.0)
    n2000["ratio_operator_to_raw"] = 1.2
    n2000["operator"]["operator_rss_mib_peak"] = 151.0
    report: dict[str, object] = {
        "load": {"n100": _scenario(0, 0, 1.0), "n2000": n2000},
        "memory": {"bytes_per_cached_pod": 1900.0, "rss_mib_empty": 41.0},
        "targets": [],
    }
    rows = {r["goal"]: r for r in judge_scale_goals(report)}
    assert rows["all pods / raw creates, N=2,000"]["met"] is True
    assert rows["RSS peak, N=2,000"]["met"] is False
    assert rows["CPU per job, N=100"]["met"] is True  # 20.0 <= 20
    assert rows["CPU per job, N=500"]["met"] is None  # scenario not run
    assert rows["bytes per cached pod"]["met"] is True
    assert not any("idle" in goal for goal in rows)  # the idle RSS goal is retired
    report["scale_goals"] = list(rows.values())
    report["throttled_goals"] = judge_throttled_goals(report)
    del report["memory"]  # the memory section needs the whole scenario
    md = render_markdown(report)
    assert (
        md.index("## Scale goals")
        < md.index("## Targets")
        < md.index("## Goals under a client-side limit")
    )
    assert "6.2 KB (make bench)" in md


def test_a_rotated_audit_log_gives_no_per_job_figures(tmp_path: Path) -> None:
    from bench.burst import api_efficiency

    log = tmp_path / "audit.log"
    log.write_text("")  # the API server rotated it: the run's creates are not in it
    api = api_efficiency(log, jobs=10)
    assert api["audit_complete"] is False
    assert api["writes_per_job"] is None and api["event_writes_per_job"] is None
    rows = {r["goal"]: r for r in judge_scale_goals({"load": {"n2000": {"api": api}}})}
    assert rows["writes per job excl. Events, N=2,000"]["met"] is None


def test_operator_counters_by_label_read_any_label_value_and_a_missing_label() -> None:
    from bench.burst import _metric_by_label

    text = (
        "# TYPE msop_events_dropped_total counter\n"
        'msop_events_dropped_total{reason="a}b,c"} 2\n'
        'msop_events_dropped_total{reason="full"} 1\n'
        'msop_events_dropped_total{other="x"} 4\n'
        'msop_events_dropped_created{reason="full"} 1.7e+09\n'
    )
    assert _metric_by_label(text, "msop_events_dropped_total", "reason") == {
        "a}b,c": 2.0, "full": 1.0, "": 4.0,
    }  # fmt: skip


def test_the_watches_the_api_server_gave_up_on_are_reported() -> None:
    from bench.burst import _metric_by_label
    from bench.report import _watch_sentence

    text = (
        "# TYPE apiserver_terminated_watchers_total counter\n"
        'apiserver_terminated_watchers_total{group="",resource="pods"} 11\n'
        'apiserver_terminated_watchers_total{group="",resource="services"} 0\n'
    )
    closed = _metric_by_label(text, "apiserver_terminated_watchers_total", "resource")
    assert closed == {"pods": 11.0, "services": 0.0}
    said = _watch_sentence(
        {"apiserver_terminated_watchers": closed, "watch_restarts_by_reason": {"closed": 11.0}}
    )
    assert (
        "every client): pods 11." in said
        and "by reason (`informer_watch_restarts_total`): closed 11." in said
    )
    assert _watch_sentence({}).count("none") == 2  # a report from before these were measured


def _load(jobs: int, cpu_ms: float, ratio_: float, replicas: list[JSON] | None = None) -> JSON:
    per = replicas or [
        {
            "cpu_s": cpu_ms * jobs / 1000,
            "rss_mib_peak": 100.0,
            "pod_objects_received": 6.0 * jobs * 4,
            "reconciles": 6 * jobs,
        }
    ]
    return {
        "operator": {
            "jobs": jobs, "operator_args": [], "all_objects_exist_s": 10.0, "events_dropped": 0,
            "operator_cpu_ms_per_lifecycle": cpu_ms, "operator_rss_mib_peak": 120.0,
            "reconciles_per_job": 6.0, "replicas": len(per), "per_replica": per,
            "shutdown": {"sigterm_to_exit_s": 1.0, "exit_code": 0},
        },
        "raw": {"all_objects_exist_s": 10.0, "concurrency": 16},
        "ratio_operator_to_raw": ratio_,
        "api": {"writes_per_job": 10.0, "event_writes_per_job": 4.0},
    }  # fmt: skip


def test_the_scale_curve_and_the_shards_against_one_replica() -> None:
    one = _load(2000, 15.0, 1.0)["operator"]["per_replica"][0]
    half = {**one, "pod_objects_received": one["pod_objects_received"] * 0.55,
            "rss_mib_peak": 70.0}  # fmt: skip
    quarter = {**one, "pod_objects_received": one["pod_objects_received"] * 0.3}
    report: JSON = {"load": {
        "defaults": _load(500, 14.0, 1.1), "n2000": _load(2000, 15.0, 1.0),
        "n10000": _load(10000, 17.5, 0.98),
        "shards2": _load(2000, 16.0, 1.05, [half, half]),
        "shards4": _load(2000, 16.0, 1.2, [quarter] * 4),
    }}  # fmt: skip
    curve = scale_curve(report)
    assert [r["jobs"] for r in curve["rows"]] == [500, 2000, 10000]
    assert curve["cpu_flatness"] == pytest.approx(17.5 / 14.0)
    shards = shard_shares(report)
    assert set(shards) == {"shards2", "shards4"}
    assert shards["shards2"]["max_pod_objects_share"] == pytest.approx(0.55)
    assert shards["shards2"]["max_rss_share"] == pytest.approx(0.7)
    report.update(curve=curve, shards=shards)
    report["curve_goals"] = judge_curve_goals(report)
    verdicts = {r["goal"]: r["met"] for r in report["curve_goals"]}
    assert verdicts["all pods / raw creates, N=10,000"] is True
    assert verdicts["CPU per job at the largest N / at N=500"] is False  # 1.25 > 1.2
    assert verdicts["pods sent to the busiest of 2 shard replicas / to one replica"] is True
    assert verdicts["pods sent to the busiest of 4 shard replicas / to one replica"] is True
    md = render_markdown(report)
    assert "## Cost per job against N" in md and "## Shards: each replica" in md
    assert "shards4: one replica (n2000)" in md


def test_the_failover_of_a_killed_replica_is_judged_against_the_lease() -> None:
    one = _load(2000, 15.0, 1.0)["operator"]["per_replica"][0]
    report: JSON = {"load": {"n2000": _load(2000, 15.0, 1.0),
                             "failover2": _load(2000, 16.0, 1.1, [one])}}  # fmt: skip
    report["load"]["failover2"]["operator"]["replicas"] = 2  # one killed: its figures are lost
    report["load"]["failover2"]["operator"]["failover"] = {
        "killed_shards": [1], "lease_duration_s": 15.0, "shards_taken_after_kill_s": 17.2,
        "dead_shards_jobs": 1003, "dead_shards_all_pods_after_kill_s": 95.0,
        "other_shards_all_pods_after_kill_s": 80.0,
    }  # fmt: skip
    report["shards"] = shard_shares(report)
    report["curve_goals"] = judge_curve_goals(report)
    verdicts = {r["goal"]: (r["value"], r["met"]) for r in report["curve_goals"]}
    assert verdicts["a SIGKILLed replica's shards held again, 2,000 jobs (Lease 15 s + 5 s)"] == (
        17.2,
        True,
    )
    md = render_markdown(report)
    assert "its shards held by the survivor 17.20 s later (Lease duration 15.00 s)" in md
    assert "the last pod of its 1003 jobs 95.00 s after the kill" in md
    report["load"]["failover2"]["operator"]["failover"]["shards_taken_after_kill_s"] = 21.0
    judged = {r["goal"][:12]: r["met"] for r in judge_curve_goals(report)}
    assert judged["a SIGKILLed "] is False


def test_without_the_big_scenarios_no_curve_goal_is_judged() -> None:
    report: JSON = {"load": {"defaults": _load(500, 14.0, 1.1)}}
    report["curve"] = scale_curve(report)
    report["shards"] = shard_shares(report)
    assert report["curve"]["cpu_flatness"] is None and report["shards"] == {}
    assert judge_curve_goals(report) == []
