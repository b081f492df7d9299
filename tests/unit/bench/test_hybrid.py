"""The hybrid scenario's pure parts: the cluster's shape, the job, the operator's writes
counted from an audit log, the report line and goals."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from bench import hybrid
from bench.report import judge_hybrid_goals, render_markdown
from msop.api.defaults import apply_defaults
from msop.api.types import MSJob
from msop.msjob.inplace.pods import InPlace, wanted


def test_nodes_hold_every_pod_and_one_replacement() -> None:
    # One node with the lone pod, then 8 pods a node: a free slot for the replacement.
    assert hybrid.nodes_for(1000) == 126
    assert 1 + 8 * (hybrid.nodes_for(1000) - 1) == 1000 + 1
    assert 1 + 8 * (hybrid.nodes_for(50) - 1) >= 50 + 1


def test_the_job_restarts_in_place_unless_told_not_to() -> None:
    in_place = InPlace(image="msop:kwok", public_key="04" + "00" * 64)
    job = apply_defaults(hybrid.msjob(999, in_place=True))  # restartScope: Job
    assert MSJob(job).replica_specs["Worker"].replicas == 999
    assert wanted(job, in_place)
    off = apply_defaults(hybrid.msjob(999, in_place=False))
    assert off["spec"]["restartInPlace"] is False and not wanted(off, in_place)


def _event(t: str, verb: str, resource: str, name: str, ua: str = "msop/0.1") -> str:
    return json.dumps({
        "stage": "ResponseComplete", "userAgent": ua, "verb": verb,
        "requestReceivedTimestamp": t, "stageTimestamp": t,
        "objectRef": {"resource": resource, "namespace": "bench-hybrid", "name": name},
        "responseStatus": {"code": 201},
    })  # fmt: skip


def test_writes_counts_the_operators_writes_in_the_window(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    lines = [
        _event("2026-11-29T03:00:00.000000Z", "create", "pods", "early"),  # before
        _event("2026-11-29T03:00:01.000000Z", "create", "pods", "hybrid-worker-3"),
        _event("2026-11-29T03:00:01.100000Z", "get", "pods", "hybrid-worker-3"),  # a read
        _event("2026-11-29T03:00:01.200000Z", "create", "events", "e"),
        _event("2026-11-29T03:00:01.300000Z", "delete", "pods", "x", ua="msop-bench/1"),
        _event("2026-11-29T03:00:09.000000Z", "delete", "pods", "late"),  # after
    ]
    log.write_text("\n".join(lines) + "\n")
    since = datetime.fromisoformat("2026-11-29T03:00:00.500000+00:00").timestamp()
    w = hybrid.writes(log, since, since + 2)
    assert w["pod_writes"] == 1 and w["pod_creates"] == 1 and w["pod_deletes"] == 0
    assert w["created"] == ["hybrid-worker-3"]
    assert w["total"] == 2 and w["excluding_events"] == 1
    # Every client's pod deletes in the window, by who sent them (no user here: "?").
    assert w["pod_deletes_by_client"] == {"? (msop-bench/1)": 1}


def _result(mode: str, pods: int, creates: int, deletes: int, released: float) -> dict[str, object]:
    return {
        "mode": mode, "pods": pods, "failure_to_all_released_s": released,
        "failure_to_job_restarted_s": released + 0.2, "operator_cpu_s": 1.0,
        "cpu_s": {"operator": 1.0, "stand-in": 3.2}, "window_s": released + 0.2,
        "pods_new_uid": creates, "pods_restarted_in_place": pods - creates if mode == "in_place"
        else 0,
        "writes": {"pod_writes": creates + deletes, "pod_creates": creates,
                   "pod_deletes": deletes, "excluding_events": creates + deletes + 2,
                   "total": creates + deletes + 4},
    }  # fmt: skip


def test_the_report_line_and_goals() -> None:
    result: dict[str, object] = {
        "in_place": _result("in_place", 1000, 1, 0, 3.5),
        "recreation": _result("recreation", 1000, 1000, 999, 40.0),
    }
    result["summary"] = hybrid.summary(result)
    result["line"] = line = hybrid.report_line(result)
    assert line.startswith("hybrid, 1000 pods, one node lost: in place: released in 3.5 s")
    assert "(CPU over the 3.7 s: stand-in 3.2 s, operator 1.0 s)" in line
    assert "1000 pod creates + 999 deletes (1999 pod writes" in line
    report: dict[str, object] = {"hybrid": result}
    goals = {g["goal"]: g for g in judge_hybrid_goals(report)}
    assert goals["pod writes by msop, in place (1 delete if needed, 1 create)"]["met"] is True
    assert goals["failure to every pod released, in place"]["met"] is True
    assert goals["pod writes by msop, by recreation (for comparison)"]["value"] == 1999
    report["hybrid_goals"] = list(goals.values())
    text = render_markdown(report)
    assert "## A node lost: restarted in place (hybrid) against recreation" in text
    assert line in text
    assert judge_hybrid_goals({}) == []
