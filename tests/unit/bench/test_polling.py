"""The progress scenario's pure parts (bench.polling, bench.reporters, bench.audit) and
the simulated reporters against the operator's real poller, on loopback."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bench.audit import Request, requests_of
from bench.polling import (
    LEASE_RESOURCE,
    STATUS_RESOURCE,
    Snapshot,
    analyse_window,
    gaps_between,
    judge_fields,
    metric_by_label,
    metric_total,
    other_writes,
    parse_metrics,
    poll_stats,
    settle_seconds,
    write_stats,
)
from bench.report import judge, render_markdown
from bench.reporters import Reporter, Reporters, report_body, response_for, worker0_address
from msop.api import report as progress_api
from msop.controller.reconcile import Request as JobKey
from msop.msjob import desired
from msop.msjob.poller import ProgressPoller
from tests.support.builders import job

JSON = dict[str, Any]

METRICS = """\
# HELP msop_progress_polls_total Progress polls
# TYPE msop_progress_polls_total counter
msop_progress_polls_total{result="report"} 10.0
msop_progress_polls_total{result="unreachable"} 2.0
msop_progress_polls_created{result="report"} 1.7e+09
workqueue_depth{name="msjob"} 3.0
msop_job_progress_ratio{job_namespace="ns",job_name="a"} 0.5
msop_job_progress_ratio{job_namespace="ns",job_name="b \\"q\\""} 0.25
process_cpu_seconds_total 4.5
"""


def test_parse_metrics() -> None:
    m = parse_metrics(METRICS)
    assert metric_by_label(m, "msop_progress_polls_total", "result") == {
        "report": 10.0, "unreachable": 2.0,
    }  # fmt: skip
    assert metric_total(m, "msop_progress_polls_total") == 12.0
    assert metric_total(m, "msop_progress_polls_total", result="report") == 10.0
    assert metric_total(m, "workqueue_depth") == 3.0
    assert metric_total(m, "process_cpu_seconds_total") == 4.5
    assert len(m["msop_job_progress_ratio"]) == 2
    assert metric_total(m, "absent") == 0.0


def test_gaps_and_poll_stats() -> None:
    assert gaps_between([5.0, 1.0, 3.0, 100.0], 0.0, 10.0) == [2.0, 2.0]
    times = {"a": [0.0, 30.0, 60.0, 90.0], "b": [10.0, 37.0, 70.0], "c": []}
    s = poll_stats(times, ["a", "b", "c"], 0.0, 80.0, 30.0)
    assert s["pods"] == 3 and s["requests"] == 6
    # gaps 30, 30 (a) and 27, 33 (b): mean 30, so one poll per job-interval
    assert s["per_job_interval"] == pytest.approx(1.0)
    assert s["per_job_interval_at_shortest_gap"] == pytest.approx(30 / 27)
    assert s["longest_gap_s"] == 33.0
    assert "per_job_interval" not in poll_stats({}, ["x"], 0.0, 1.0, 30.0)


def _w(t: float, name: str, resource: str = STATUS_RESOURCE, verb: str = "patch",
       code: int = 200) -> Request:  # fmt: skip
    return Request(t, verb, resource, name, code)


def test_write_stats_and_other_writes() -> None:
    answers = {"j1-worker-0": [9.0, 39.0, 59.9], "j2-worker-0": [20.0]}
    writes = [_w(10.0, "j1"), _w(40.5, "j1"), _w(60.1, "j1"), _w(21.0, "j2", code=409),
              _w(50.0, "j2"), _w(15.0, "lease", LEASE_RESOURCE, "update"),
              _w(16.0, "j1-worker-0", "pods", "create"), _w(17.0, "x", "pods", "get")]  # fmt: skip
    s = write_stats(writes, 0.0, 60.0, 30.0, answers)
    assert s["count"] == 4 and s["failed"] == 1 and s["jobs_written"] == 2
    assert s["per_second"] == pytest.approx(4 / 60)
    assert s["most_for_one_job"] == 2
    assert s["gap_s"]["count"] == 2  # j1: 10 -> 40.5; j2: 21 -> 50
    # the report at 59.9 is matched by the write just after the window; j2's report at 20
    # is followed by two writes (21 and the unprompted one at 50)
    assert s["reports_sent"] == 4 and s["per_report"] == pytest.approx(5 / 4)
    assert s["unprompted"] == 1  # j2's second write has no report since its first
    assert s["poll_to_write_s"]["count"] == 4
    assert s["poll_to_write_s"]["max"] == pytest.approx(30.0)
    others, leases = other_writes(writes, 0.0, 60.0)
    assert others == {"create pods": 1} and leases == 1


def test_two_writes_for_one_report_count_twice() -> None:
    answers = {"j1-worker-0": [10.0, 40.0]}
    writes = [_w(10.1, "j1"), _w(10.2, "j1"), _w(40.1, "j1")]
    s = write_stats(writes, 0.0, 60.0, 30.0, answers)
    assert s["per_report"] == pytest.approx(1.5)
    assert s["unprompted"] == 1


def _snap(wall: float, cpu: float, rss_mib: float, polls: dict[str, float],
          series: int = 0) -> Snapshot:  # fmt: skip
    text = "".join(f'msop_progress_polls_total{{result="{r}"}} {v}\n' for r, v in polls.items())
    text += "".join(f'msop_job_progress_ratio{{job_namespace="n",job_name="j{i}"}} 0.5\n'
                    for i in range(series))  # fmt: skip
    text += f"workqueue_queue_duration_seconds_sum {cpu / 100}\n"
    text += f"workqueue_queue_duration_seconds_count {polls.get('report', 0)}\n"
    return Snapshot(wall, cpu, int(rss_mib * 2**20), int(rss_mib * 2**20), 0.0,
                    parse_metrics(text))  # fmt: skip


def _window(cpu: float, jobs: int = 2) -> JSON:
    start = _snap(0.0, 10.0, 50.0, {"report": 0.0})
    end = _snap(60.0, 10.0 + cpu, 51.0, {"report": 4.0}, series=jobs)
    polls = {"j0-worker-0": [1.0, 31.0], "j1-worker-0": [2.0, 32.0]}
    writes = [_w(t + 0.1, p.removesuffix("-worker-0")) for p, ts in polls.items() for t in ts]
    return analyse_window(
        start, end, jobs=jobs, interval=30.0, groups={"answering": sorted(polls)},
        polls_by_pod=polls, answers_by_pod=polls, writes=writes,
        samples=[(30.0, 2.0, 60 * 2**20)],
    )  # fmt: skip


def test_analyse_window() -> None:
    w = _window(cpu=0.6)
    assert w["job_intervals"] == pytest.approx(4.0)
    assert w["operator_cpu_per_s"] == pytest.approx(0.01)
    assert w["operator_cpu_ms_per_job_interval"] == pytest.approx(150.0)
    assert w["operator_cpu_ms_per_poll"] == pytest.approx(150.0)
    assert w["polls_by_result"] == {"report": 4.0}
    assert w["status_writes"]["count"] == 4
    assert w["status_writes_per_report"] == pytest.approx(1.0)
    assert w["by_group"]["answering"]["per_job_interval"] == pytest.approx(1.0)
    assert w["rss_growth_mib"] == pytest.approx(1.0)
    assert w["rss_mib_max"] == pytest.approx(60.0)
    assert w["workqueue"]["depth_max"] == 2.0
    assert w["progress_series_end"] == 2
    assert w["other_writes_total"] == 0
    assert w["status_writes"]["unprompted"] == 0
    assert w["down_polls_per_job_interval"] is None


def test_settle_seconds_cover_the_back_off() -> None:
    # next poll (<= 33 s), then retries after 5, 10, 20, 40 and 80 s (up to 10 % later
    # each), then every 120 s
    assert settle_seconds(30.0) >= 33 + 1.1 * 155
    assert settle_seconds(5.0) >= 5.5 + 1.1 * 15


def test_judged_fields_and_targets() -> None:
    steady = _window(cpu=0.6)
    refused = _window(cpu=0.3)
    refused["down_polls_per_job_interval"] = 0.9
    fields = judge_fields(steady, refused, None, jobs=2, interval=30.0)
    assert fields["cpu_refused_over_steady"] == pytest.approx(0.5)
    assert fields["progress_series_per_job"] == 1.0
    assert "cpu_silent_over_steady" not in fields
    rows = {r["target"]: r for r in judge({"progress": {"judged": fields}})}
    assert rows["progress: polls per job-interval"]["met"] is True
    assert rows["progress: status writes per new report"]["met"] is True
    assert rows["progress: msop_job_progress_ratio series per job"]["met"] is True
    assert rows["progress: CPU, half refusing / all answering"]["met"] is True
    assert rows["progress: operator CPU per job-interval"]["met"] is False  # 150 ms
    assert rows["progress: CPU, half silent / all answering"]["met"] is None
    assert rows["burst p99 job latency"]["met"] is None


def test_render_progress_section() -> None:
    report = {
        "progress": {
            "jobs": 2, "interval_s": 30.0, "operator_args": ["--namespace", "p"],
            "windows": {"steady": _window(cpu=0.6)}, "shutdown": {"sigterm_to_exit_s": 0.2,
            "exit_code": 0},
        },
        "targets": [],
    }  # fmt: skip
    md = render_markdown(report)
    assert "## Training progress: N reporting jobs" in md
    assert "| steady | 60.00 |" in md
    assert "report 4" in md


def test_requests_of_audit_lines() -> None:
    def line(stage: str, ua: str = "msop/0.1.0", verb: str = "patch", **extra: Any) -> str:
        return json.dumps({
            "stage": stage, "verb": verb, "userAgent": ua,
            "requestReceivedTimestamp": "2026-01-01T00:00:01.500000Z",
            "objectRef": {"resource": "msjobs", "apiGroup": "mindspore.gitee.com",
                          "subresource": "status", "name": "j1"},
            "responseStatus": {"code": 200}, **extra,
        })  # fmt: skip

    reqs = requests_of(
        [line("RequestReceived"), line("ResponseComplete"), line("ResponseComplete", "kubectl"),
         "garbage msop/"], "msop/",
    )  # fmt: skip
    assert len(reqs) == 1
    [r] = reqs
    assert (r.verb, r.resource, r.name, r.code) == ("patch", STATUS_RESOURCE, "j1", 200)
    assert r.time == pytest.approx(1767225601.5)


# --- the simulated reporters -----------------------------------------------------------------


def test_report_body_is_a_valid_advancing_report() -> None:
    first = progress_api.parse_report(report_body("j-worker-0", "u1", 1, 30.0))
    later = progress_api.parse_report(report_body("j-worker-0", "u1", 7, 30.0))
    assert (first.pod_name, first.pod_uid, first.seq) == ("j-worker-0", "u1", 1)
    assert later.progress["percentComplete"] > first.progress["percentComplete"]
    assert later.progress["metrics"][0]["name"] == "loss"
    assert progress_api.parse_report(report_body("p", "u", 10**6, 30.0)).progress[
        "percentComplete"
    ] == 99  # never done  # fmt: skip


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"GET /progress HTTP/1.1\r\nHost: x\r\n\r\n", b"200"),
        (b"GET /progress?x=1 HTTP/1.1\r\n\r\n", b"200"),
        (b"GET /other HTTP/1.1\r\n\r\n", b"404"),
        (b"POST /progress HTTP/1.1\r\n\r\n", b"405"),
        (b"nonsense\r\n\r\n", b"400"),
    ],
)
def test_response_for(request_head: bytes, status: bytes) -> None:
    answer = response_for(request_head, b"{}")
    assert answer.split(b" ", 2)[1] == status
    assert b"Connection: close" in answer


def _worker0(ip: str | None, phase: str = "Running", port: int = 28080) -> JSON:
    j = job({"Worker": (1, "Never")})
    j["metadata"].update(name="j", namespace="ns")
    pod = desired.pod(j, "Worker", 0, sched_host=None, progress_port=port)
    pod["metadata"]["uid"] = "uid-w0"
    pod["status"] = {"phase": phase, **({"podIP": ip} if ip else {})}
    return pod


def test_worker0_address_only_on_loopback() -> None:
    assert worker0_address(_worker0("127.100.0.7")) == ("127.100.0.7", 28080)
    assert worker0_address(_worker0("10.0.0.7")) is None  # never an external interface
    assert worker0_address(_worker0("127.100.0.7", phase="Pending")) is None
    assert worker0_address(_worker0(None)) is None


def test_reporter_counts_and_advances() -> None:
    rep = Reporter("p", "u", "127.0.0.1", 1, interval=30.0)
    assert rep.respond(b"GET /progress HTTP/1.1\r\n\r\n") is not None
    rep.mode = "silent"
    assert rep.respond(b"GET /progress HTTP/1.1\r\n\r\n") is None
    assert rep.seq == 1 and len(rep.requests) == 2 and len(rep.answers) == 1


async def test_reporters_against_the_real_poller() -> None:
    """A reporter on a loopback IP answers the operator's own poller: a report, then
    refused (socket closed), then silent (the poller's timeout)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    pod = _worker0("127.0.0.1", port=port)
    reporters = Reporters(interval=30.0)
    reporters("ADDED", pod, 0.0)
    reporters("ADDED", pod, 0.0)  # seen once
    for _ in range(100):
        if reporters.listening():
            break
        await asyncio.sleep(0.01)
    assert reporters.listening() == 1
    poller = ProgressPoller(timeout=0.3)
    enqueued: list[str] = []
    poller.add_event_handler(on_update=lambda old, new: enqueued.append(new["metadata"]["name"]))
    poller.observe(pod)
    [target] = poller._targets.values()
    session_run = asyncio.create_task(poller.run())  # builds the real aiohttp session
    try:
        await asyncio.sleep(0.05)
        assert await poller.poll(target) == "report"
        assert await poller.poll(target) == "report"  # a new seq each time
        assert enqueued == ["j-worker-0", "j-worker-0"]
        assert poller.get(JobKey("ns", "j")) is not None
        await reporters.set_mode([pod["metadata"]["name"]], "refuse")
        assert await poller.poll(target) == "unreachable"
        await reporters.set_mode([pod["metadata"]["name"]], "silent")
        assert await poller.poll(target) == "unreachable"  # timed out
        rep = reporters.by_pod[pod["metadata"]["name"]]
        assert rep.seq == 2 and len(rep.requests) == 3
    finally:
        session_run.cancel()
        await asyncio.gather(session_run, return_exceptions=True)
        await reporters.close()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--scale", "1"], "make bench"),
        (["--scale", "0.1"], "make bench BENCH_SCALE=0.1"),
        (["--scale", "1", "--skip", "burst", "--progress-interval", "10"],
         "python -m bench --scale 1 --skip burst --progress-interval 10"),
    ],
)  # fmt: skip
def test_report_names_the_command(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: str
) -> None:
    from bench.__main__ import _command, _parser

    monkeypatch.setattr("sys.argv", ["python -m bench", *argv])
    assert _command(_parser().parse_args(argv)) == expected
    assert "progress" in _parser().parse_args(["--skip", "progress"]).skip


def test_the_interval_the_operator_keeps_stretches_past_half_the_qps() -> None:
    from bench.polling import effective_interval

    assert effective_interval(30, 1000) == 30  # no client-side limit: the flag's interval
    assert effective_interval(30, 500, qps=50) == 30  # 500 / 25 = 20 s: the flag's interval
    assert effective_interval(30, 1000, qps=50) == 40  # 1,000 jobs at 25 reports/s
    assert effective_interval(10, 1000, qps=200) == 10
    assert effective_interval(30, 1000, qps=0) == 400  # client-go's 5/s: 2.5 reports/s
