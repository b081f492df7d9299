"""The progress poller (msop.msjob.poller): which pods it asks, what it
accepts, how often it asks, and that it stays bounded."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web

from msop.controller.reconcile import Request
from msop.metrics import REGISTRY
from msop.msjob import desired
from msop.msjob.metrics import ProgressCollector
from msop.msjob.poller import (
    FINAL_KEPT_SECONDS,
    FIRST_POLL_DELAY,
    ProgressPoller,
    Target,
    retry_after,
    target_url,
)
from msop.msjob.setup import OWNER
from tests.support.builders import job
from tests.support.clocks import FakeClock

JSON = dict[str, Any]
WALL = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
JOB = Request("ns", "j")


def worker(index: int = 0, *, ip: str = "10.1.0.5", phase: str = "Running", port: int = 28080,
           uid: str = "uid-w0", ns: str = "ns", job_name: str = "j") -> JSON:  # fmt: skip
    j = job({"Worker": (2, "Never")})
    j["metadata"].update(name=job_name, namespace=ns)
    p = desired.pod(j, "Worker", index, sched_host=None, progress_port=port)
    p["metadata"]["uid"] = uid
    p["status"] = {"phase": phase, "podIP": ip}
    return p


def report(uid: str = "uid-w0", name: str = "j-worker-0", seq: int = 1, **fields: Any) -> bytes:
    body = {"version": 1, "pod": {"name": name, "uid": uid}, "seq": seq, "age": 2.0,
            "step": 5, "totalSteps": 20, **fields}  # fmt: skip
    return json.dumps(body).encode()


class Answers:
    """A fetch that answers from a list (status, body) or raises what is in it."""

    def __init__(self, *answers: tuple[int, bytes] | Exception) -> None:
        self.answers = list(answers)
        self.urls: list[str] = []

    async def __call__(self, url: str, limit: int) -> tuple[int, bytes]:
        self.urls.append(url)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def poller(fetch: Any, clock: FakeClock | None = None) -> tuple[ProgressPoller, list[str]]:
    p = ProgressPoller(
        interval=30.0,
        fetch=fetch,
        clock=clock or FakeClock(1000.0),
        now=lambda: WALL,
        rand=lambda: 0.5,
    )
    return p, announced(p)


def announced(p: ProgressPoller) -> list[str]:
    """The jobs the poller announces, as a controller's owner handler would enqueue them:
    each announcement is an update of Worker 0 whose object did not change."""
    jobs: list[str] = []

    def on_update(old: JSON, new: JSON) -> None:
        assert old is new and old["metadata"]["name"].endswith("-worker-0")
        jobs.extend(str(r) for r in OWNER.requests(new))

    p.add_event_handler(on_update=on_update)
    return jobs


def _polls(result: str) -> float:
    return REGISTRY.get_sample_value("msop_progress_polls_total", {"result": result}) or 0.0


def only_target(p: ProgressPoller) -> Target:
    [target] = p._targets.values()
    return target


def test_only_a_running_worker_0_with_its_own_ip_and_a_port_is_polled() -> None:
    assert target_url(worker()) == "http://10.1.0.5:28080/progress"
    assert target_url(worker(ip="fd00::5")) == "http://[fd00::5]:28080/progress"
    assert target_url(worker(index=1)) is None
    assert target_url(worker(phase="Pending")) is None
    assert target_url(worker(phase="Succeeded")) is None
    assert target_url(worker(ip="")) is None
    assert target_url(worker(port=0)) is None  # created with progress off
    host = worker()
    host["spec"]["hostNetwork"] = True  # shares the node's IP: anyone there could answer
    assert target_url(host) is None
    deleting = worker()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert target_url(deleting) is None


async def test_a_new_report_is_stored_timed_by_its_age_and_enqueues_the_job_once() -> None:
    p, enqueued = poller(Answers((200, report(seq=1)), (200, report(seq=1)), (200, report(seq=2))))
    p.observe(worker())
    target = only_target(p)
    assert await p.poll(target) == "report"
    assert enqueued == ["ns/j"]
    assert p.get(JOB) == {"percentComplete": 25, "step": 5, "totalSteps": 20,
                             "lastReportTime": "2026-01-01T11:59:58Z"}  # fmt: skip
    assert await p.poll(target) == "unchanged"  # same seq: nothing new, no write
    assert enqueued == ["ns/j"]
    assert await p.poll(target) == "report"  # a new seq with the same numbers: no write
    assert enqueued == ["ns/j"]


async def test_a_report_naming_another_pod_is_rejected_and_never_stored() -> None:
    other_job = report(uid="uid-of-another-jobs-pod", name="victim-worker-0", percentComplete=99)
    p, enqueued = poller(Answers((200, other_job), (200, report(name="j-worker-1"))))
    p.observe(worker())
    assert await p.poll(only_target(p)) == "rejected"
    assert await p.poll(only_target(p)) == "rejected"
    assert p.get(JOB) is None and enqueued == []


@pytest.mark.parametrize(
    ("answer", "result"),
    [
        ((204, b""), "empty"),
        ((404, b"no"), "invalid"),
        ((200, b"<html>"), "invalid"),
        ((200, report(version=7)), "invalid"),
        (ConnectionRefusedError(), "unreachable"),
        (TimeoutError(), "unreachable"),
    ],
)
async def test_no_report_is_counted_by_result_and_stores_nothing(
    answer: tuple[int, bytes] | Exception, result: str
) -> None:
    p, enqueued = poller(Answers(answer))
    p.observe(worker())
    before = _polls(result)
    target = only_target(p)
    target.in_flight = True
    await p._poll(target, p.slots())
    assert _polls(result) == before + 1
    assert p.get(JOB) is None and enqueued == [] and not target.in_flight


async def test_asked_every_interval_and_sooner_while_it_has_not_answered_yet() -> None:
    clock = FakeClock(1000.0)
    empty = [(204, b"") for _ in range(5)]
    p, _ = poller(Answers(*empty, (200, report()), (200, report(seq=2))), clock)
    p.observe(worker())
    target = only_target(p)
    assert target.due == clock.now + FIRST_POLL_DELAY
    waits = []
    for _ in range(7):
        await p.poll(target)
        waits.append(target.due - clock.now)
    # Its reporter answers without a report yet: at most an interval apart.
    assert waits == [5.0, 10.0, 20.0, 30.0, 30.0, 30.0, 30.0]


async def test_a_worker_0_that_never_answers_is_asked_less_and_less_often() -> None:
    """Most Worker 0 pods run no reporter: refused (or timed out) polls back off up to
    four intervals; a reporter that starts late is found within that time, and is then
    asked every interval."""
    clock = FakeClock(1000.0)
    refused: list[Any] = [ConnectionRefusedError() for _ in range(8)]
    p, announced_ = poller(Answers(*refused, TimeoutError(), (200, report())), clock)
    p.observe(worker())
    target = only_target(p)
    waits = []
    for _ in range(10):
        await p.poll(target)
        waits.append(target.due - clock.now)
    assert waits == [5.0, 10.0, 20.0, 40.0, 80.0, 120.0, 120.0, 120.0, 120.0, 30.0]
    assert announced_ == [str(JOB)] and p.get(JOB) is not None
    assert retry_after(10_000, 120.0) == 120.0  # a week of failures: no overflow


async def test_a_target_goes_with_its_pod_and_takes_its_report_with_it() -> None:
    p, _ = poller(Answers((200, report())))
    pod = worker()
    p.observe(pod)
    await p.poll(only_target(p))
    assert p.get(JOB) is not None
    p.observe({**pod, "status": {"phase": "Succeeded", "podIP": "10.1.0.5"}})
    assert len(p) == 0 and p.get(JOB) is None
    p.observe(pod)
    p.forget(pod)
    assert len(p) == 0
    p.observe(pod)
    replaced = worker(uid="uid-new")  # same name, new pod (a restart): asked afresh
    p.observe(replaced)
    assert only_target(p).uid == "uid-new"


async def test_each_target_has_one_request_in_flight_and_the_total_is_bounded() -> None:
    clock = FakeClock(1000.0)
    release = asyncio.Event()
    running = 0
    peak = 0

    async def slow(url: str, limit: int) -> tuple[int, bytes]:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1
        return 204, b""

    p, _ = poller(slow, clock)
    for i in range(10):
        p.observe(worker(ip=f"10.1.0.{i}", uid=f"u{i}", job_name=f"j{i}"))
    clock.now += FIRST_POLL_DELAY
    p.concurrency = 3
    semaphore = p.slots()
    assert p.poll_due(semaphore) == 10
    await asyncio.sleep(0.05)
    assert p.poll_due(semaphore) == 0  # all in flight: not asked twice
    assert peak == 3
    release.set()
    await asyncio.gather(*p._tasks)
    assert peak == 3 and not any(t.in_flight for t in p._targets.values())


async def test_targets_that_did_not_answer_get_at_most_half_the_slots() -> None:
    clock = FakeClock(1000.0)
    release = asyncio.Event()
    running: dict[str, int] = {"silent": 0, "answering": 0}
    peak: dict[str, int] = {"silent": 0, "answering": 0}

    async def fetch(url: str, limit: int) -> tuple[int, bytes]:
        kind = "silent" if "10.2." in url else "answering"
        running[kind] += 1
        peak[kind] = max(peak[kind], running[kind])
        await release.wait()
        running[kind] -= 1
        return 204, b""

    p, _ = poller(fetch, clock)
    p.concurrency = 4
    for i in range(6):
        p.observe(worker(ip=f"10.2.0.{i}", uid=f"s{i}", job_name=f"silent{i}"))
        p.observe(worker(ip=f"10.1.0.{i}", uid=f"a{i}", job_name=f"answering{i}"))
    for target in p._targets.values():
        target.failures = 1 if "10.2." in target.url else 0
    clock.now += FIRST_POLL_DELAY
    p.poll_due(p.slots())
    await asyncio.sleep(0.05)
    assert peak["silent"] <= 2 and peak["silent"] + peak["answering"] == 4, peak
    release.set()
    await asyncio.gather(*p._tasks)


async def test_the_interval_stretches_when_reports_would_outrun_their_budget() -> None:
    clock = FakeClock(1000.0)
    p, _ = poller(Answers(*[(200, report(uid=f"u{i}", name=f"j{i}-worker-0")) for i in range(2)]),
                  clock)  # fmt: skip
    p.max_rate = 0.05  # 2 targets at 0.05 reports/s: one report per 40 s each, not per 30 s
    for i in range(2):
        p.observe(worker(ip=f"10.1.0.{i}", uid=f"u{i}", job_name=f"j{i}"))
    for target in list(p._targets.values()):
        assert await p.poll(target) == "report"
        assert target.due - clock.now == 40.0  # rand 0.5: no jitter
    target = next(iter(p._targets.values()))
    p._fetch = Answers(*[(204, b"") for _ in range(5)], *[TimeoutError() for _ in range(2)])
    waits = []
    for _ in range(7):
        await p.poll(target)
        waits.append(target.due - clock.now)
    # Retries too keep to the stretched pace, and to four of it for one that does not answer.
    assert waits == [5.0, 10.0, 20.0, 40.0, 40.0, 160.0, 160.0]
    p.max_rate = 1.0
    p._fetch = Answers((200, report(uid=target.uid, name=target.pod, seq=2)))
    await p.poll(target)
    assert target.due - clock.now == 30.0  # within budget: the interval


async def test_polls_a_real_http_endpoint_through_its_own_session() -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(body=report(uid="uid-w0", seq=len(seen)),
                            content_type="application/json")  # fmt: skip

    app = web.Application()
    app.router.add_get("/progress", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    clock = FakeClock(1000.0)
    p = ProgressPoller(interval=1.0, tick=0.01, clock=clock, now=lambda: WALL)
    enqueued = announced(p)
    p.observe(worker(ip="127.0.0.1", port=port))
    clock.now += FIRST_POLL_DELAY
    task = asyncio.create_task(p.run())
    try:
        for _ in range(500):
            if enqueued:
                break
            await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await runner.cleanup()
    assert seen == ["/progress"] and enqueued == ["ns/j"]
    assert p.get(JOB) is not None


async def test_a_report_without_totals_has_a_report_time_and_no_ratio() -> None:
    # No total steps or epochs: no fraction done, but the time of the report still tells
    # a stalled training (MsopJobProgressStalled) from a moving one.
    body = json.dumps({"version": 1, "pod": {"name": "j-worker-0", "uid": "uid-w0"},
                       "seq": 1, "age": 2.0, "step": 5}).encode()  # fmt: skip
    p, _ = poller(Answers((200, body)))
    p.observe(worker())
    for target in list(p._targets.values()):
        await p.poll(target)
    collector = ProgressCollector()
    collector.add(p)
    family, reported = list(collector.collect())
    assert family.samples == []
    assert [(s.labels["job_namespace"], s.labels["job_name"]) for s in reported.samples] == [
        ("ns", "j")
    ]


async def test_the_ratio_metric_has_one_series_per_reporting_job() -> None:
    p, _ = poller(Answers((200, report(step=9)), (200, report(uid="u2", name="k-worker-0"))))
    p.observe(worker())
    p.observe(worker(uid="u2", job_name="k", ip="10.1.0.6"))
    for target in list(p._targets.values()):
        await p.poll(target)
    collector = ProgressCollector()
    collector.add(p)
    family, reported = list(collector.collect())
    assert {(s.labels["job_namespace"], s.labels["job_name"]): s.value for s in family.samples} == {
        ("ns", "j"): 0.45,
        ("ns", "k"): 0.25,
    }
    # When each last reported a new snapshot (for the alert on a stalled training).
    assert reported.name == "msop_job_progress_last_report_timestamp_seconds"
    assert {s.labels["job_name"] for s in reported.samples} == {"j", "k"}
    assert all(s.value > 1.7e9 for s in reported.samples)
    p.forget(worker(uid="u2", job_name="k"))
    family, reported = list(collector.collect())
    assert [s.labels["job_name"] for s in family.samples] == ["j"]
    assert [s.labels["job_name"] for s in reported.samples] == ["j"]
    assert REGISTRY.get_sample_value("msop_progress_polls_total", {"result": "report"}) is not None


def stopped_worker_0(message: str, uid: str = "uid-w0") -> JSON:
    """Worker 0 as its watch DELETE event shows it: deleted by msop (a suspend), after its
    script saved on SIGTERM and wrote its final report."""
    pod = worker(uid=uid)
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T11:59:50Z"
    term = {"exitCode": 143, "finishedAt": "2026-01-01T11:59:52Z", "message": message}
    pod["status"]["containerStatuses"] = [{"name": "mindspore", "state": {"terminated": term}}]
    return pod


def test_a_deleted_worker_0s_final_report_is_kept_for_its_job_a_while() -> None:
    clock = FakeClock(1000.0)
    p, jobs = poller(Answers(), clock)
    final = report(seq=9, final=True, checkpoint={"step": 13, "epoch": 1}).decode()
    p.deleted(stopped_worker_0(final))
    kept = p.get(JOB)
    assert kept is not None and kept["lastCheckpoint"] == {
        "step": 13, "epoch": 1, "time": "2026-01-01T11:59:52Z",
    }  # fmt: skip
    assert jobs == ["ns/j"] and len(p) == 0
    clock.advance(FINAL_KEPT_SECONDS + 1)
    assert p.get(JOB) is None
    # Nothing is kept from another pod, another pod's report, or a live (not final) one.
    p.deleted(stopped_worker_0(report(seq=9, final=True, uid="someone").decode()))
    p.deleted(stopped_worker_0(report(seq=9).decode()))
    other = stopped_worker_0(final)
    other["metadata"]["name"] = "j-worker-1"
    other["metadata"]["labels"] = {**other["metadata"]["labels"], "replica-index": "1",
                                   "training.kubeflow.org/replica-index": "1"}  # fmt: skip
    p.deleted(other)
    assert p.get(JOB) is None and jobs == ["ns/j"]
