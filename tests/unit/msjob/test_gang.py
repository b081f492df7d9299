"""Gang scheduling with Volcano: the PodGroup's spec (minMember, minResources summed from
the pods' requests), its updates, and the Queued condition the planner derives from it."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from msop.api import quantity
from msop.api.conditions import latest_condition_type, set_condition
from msop.msjob import desired, gang
from tests.support.builders import T0, cond, job, pod, run, service, volcano

JSON = dict[str, Any]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        (3, Fraction(3)),
        (0.1, Fraction(1, 10)),
        ("4Gi", Fraction(4 * 2**30)),
        ("1.5Mi", Fraction(3 * 2**19)),
        ("1e3", Fraction(1000)),
        ("2k", Fraction(2000)),
        ("250u", Fraction(1, 4000)),
        (".5", Fraction(1, 2)),
    ],
)
def test_quantities_parse_exactly(text: Any, value: Fraction) -> None:
    assert quantity.parse(text) == value


@pytest.mark.parametrize("bad", ["", "4GB", "m", "1.2.3", "--1", True])
def test_what_is_not_a_quantity_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError):
        quantity.parse(bad)


def test_a_cached_quantity_is_not_taken_for_another_type() -> None:
    assert quantity.parse(1) == 1 and quantity.parse("1") == 1
    with pytest.raises(ValueError):
        quantity.parse(True)  # equal to 1, and hashed the same, but not a quantity
    with pytest.raises(ValueError):
        quantity.parse("4GB")  # refusals are not cached as anything
    assert quantity.parse(1.0) == 1


@pytest.mark.parametrize(
    ("value", "binary", "text"),
    [
        (Fraction(3, 10), False, "300m"),
        (Fraction(4), False, "4"),
        (Fraction(8 * 2**30), True, "8Gi"),
        (Fraction(1536 * 2**20), True, "1536Mi"),
        (Fraction(1000), True, "1000"),
        (Fraction(1, 3), False, "333333334n"),
    ],
)
def test_sums_are_written_canonically(value: Fraction, binary: bool, text: str) -> None:
    assert quantity.format_quantity(value, binary=binary) == text


def _spec(*containers: JSON, init: list[JSON] | None = None) -> JSON:
    out: JSON = {"containers": list(containers)}
    if init:
        out["initContainers"] = init
    return out


def _c(requests: JSON | None = None, limits: JSON | None = None, **extra: Any) -> JSON:
    return {"name": "x", "resources": {"requests": requests or {}, "limits": limits or {}}, **extra}


def test_a_pod_reserves_its_containers_requests_or_their_limits() -> None:
    spec = _spec(
        _c({"cpu": "1", "memory": "2Gi"}),
        _c(limits={"cpu": "500m", "huawei.com/Ascend910": 1}),
    )
    got = desired.pod_requests(spec)
    assert got == {
        "cpu": (Fraction(3, 2), False),
        "memory": (Fraction(2 * 2**30), True),
        "huawei.com/Ascend910": (Fraction(1), False),
    }


def test_init_containers_raise_the_floor_and_sidecars_add_to_it() -> None:
    spec = _spec(
        _c({"cpu": "1"}),
        init=[
            _c({"cpu": "500m"}, restartPolicy="Always"),  # a sidecar: runs throughout
            _c({"cpu": "3"}),  # runs alone, beside the sidecar started before it
        ],
    )
    assert desired.pod_requests(spec)["cpu"] == (Fraction(7, 2), False)
    small_init = _spec(_c({"cpu": "2"}), init=[_c({"cpu": "1"})])
    assert desired.pod_requests(small_init)["cpu"] == (Fraction(2), False)


def _gang_job(
    workers: int = 3, policy: JSON | None = None, worker_requests: JSON | None = None
) -> JSON:
    j = job({"Scheduler": (1, "Never"), "Worker": (workers, "Never")},
            {"schedulingPolicy": policy} if policy is not None else None)  # fmt: skip
    specs = j["spec"]["msReplicaSpecs"]
    specs["Scheduler"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "256Mi"}
    }
    specs["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": worker_requests or {"cpu": "2", "memory": "4Gi"},
        "limits": {"huawei.com/Ascend910": "1"},
    }
    return j


def test_min_resources_sum_every_pod_when_the_whole_gang_is_needed() -> None:
    spec = gang.pod_group_spec(_gang_job(workers=3))
    assert spec == {
        "minMember": 4,
        "minResources": {"cpu": "6100m", "huawei.com/Ascend910": "3", "memory": "12544Mi"},
    }


def test_min_resources_sum_the_first_min_available_pods_scheduler_first() -> None:
    spec = gang.pod_group_spec(
        _gang_job(workers=3, policy={"minAvailable": 2, "queue": "team-a", "priorityClass": "hi"})
    )
    assert spec == {
        "minMember": 2,
        "minResources": {"cpu": "2100m", "huawei.com/Ascend910": "1", "memory": "4352Mi"},
        "queue": "team-a",
        "priorityClassName": "hi",
    }


def test_min_resources_written_in_the_policy_win() -> None:
    spec = gang.pod_group_spec(_gang_job(policy={"minResources": {"cpu": 8}}))
    assert spec["minResources"] == {"cpu": "8"}


def _pg(j: JSON, phase: str | None = None, **status: Any) -> JSON:
    pg = gang.pod_group(j)
    if phase is not None:
        pg["status"] = {"phase": phase, **status}
    return pg


def test_a_scaled_job_patches_min_member_and_min_resources() -> None:
    pg = _pg(_gang_job(workers=3), "Running")
    assert gang.pod_group_patch(_gang_job(workers=3), pg) is None
    patch = gang.pod_group_patch(_gang_job(workers=5), pg)
    assert patch == {
        "spec": {
            "minMember": 6,
            "minResources": {"cpu": "10100m", "huawei.com/Ascend910": "5", "memory": "20736Mi"},
        }
    }


def test_equal_quantities_written_differently_need_no_patch() -> None:
    pg = _pg(_gang_job(), "Running")
    pg["spec"]["minResources"]["memory"] = str(12544 * 2**20)  # as bytes
    assert gang.pod_group_patch(_gang_job(), pg) is None


def test_a_priority_class_removed_from_the_policy_is_removed_from_the_podgroup() -> None:
    pg = _pg(_gang_job(policy={"priorityClass": "hi"}), "Pending")
    assert gang.pod_group_patch(_gang_job(policy={}), pg) == {"spec": {"priorityClassName": None}}


def test_a_queue_defaulted_by_volcanos_webhook_is_left_alone() -> None:
    pg = _pg(_gang_job(), "Running")
    pg["spec"]["queue"] = "default"
    assert gang.pod_group_patch(_gang_job(), pg) is None


def test_a_new_job_creates_its_podgroup_and_waits_queued() -> None:
    j = _gang_job()
    p = run(j, gang_scheduling=True)
    assert volcano(p).create is not None and not p.create_pods
    queued = cond(p, "Queued")
    assert queued and queued["status"] == "True" and queued["reason"] == "PodGroupPending"
    assert "gang of 4 pods" in queued["message"] and "huawei.com/Ascend910=3" in queued["message"]
    assert "queue 'default'" in queued["message"]
    assert p.status is not None and latest_condition_type(p.status) == "Queued"
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "PodGroupPending")]


def test_a_pending_podgroup_holds_the_pods_and_does_not_repeat_the_event() -> None:
    j = _gang_job()
    first = run(j, gang_scheduling=True)
    j["status"] = first.status
    again = run(j, pod_group=_pg(j, "Pending"), gang_scheduling=True)
    assert not again.create_pods and not again.events and again.status is None


def test_an_admitted_gang_gets_its_pods_and_says_so() -> None:
    j = _gang_job()
    j["status"] = run(j, gang_scheduling=True).status
    p = run(j, pod_group=_pg(j, "Inqueue"), gang_scheduling=True)
    assert [x["metadata"]["name"] for x in p.create_pods] == ["j-scheduler-0"]
    assert (cond(p, "Queued") or {}).get("reason") == "PodGroupInqueue"
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "PodGroupInqueue")]


def test_volcanos_own_reason_is_shown_when_it_cannot_place_the_gang() -> None:
    j = _gang_job()
    j["status"] = run(j, gang_scheduling=True).status
    verdict = {
        "type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
        "message": "3/4 tasks in gang unschedulable: 3 Insufficient huawei.com/Ascend910",
        "lastTransitionTime": "2026-01-01T12:00:00Z",
    }  # fmt: skip
    older = {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready",
             "lastTransitionTime": "2026-01-01T11:00:00Z"}  # fmt: skip
    p = run(j, pod_group=_pg(j, "Inqueue", conditions=[older, verdict]), gang_scheduling=True)
    queued = cond(p, "Queued")
    assert queued and queued["reason"] == "NotEnoughResources"
    assert "3 Insufficient huawei.com/Ascend910" in queued["message"]
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "NotEnoughResources")]


def test_a_placed_gang_turns_queued_false_in_place() -> None:
    j = _gang_job()
    j["status"] = run(j, gang_scheduling=True).status
    pods = [pod("Scheduler", 0, "Pending")] + [pod("Worker", i, "Pending") for i in range(3)]
    p = run(j, pods, pod_group=_pg(j, "Running"), gang_scheduling=True)
    queued = cond(p, "Queued")
    assert queued and queued["status"] == "False" and queued["reason"] == "GangScheduled"
    assert p.status is not None and latest_condition_type(p.status) == "Created"
    assert [(e.type, e.reason) for e in p.events] == [("Normal", "GangScheduled")]


def test_running_turns_a_queued_job_not_queued() -> None:
    status: JSON = {}
    set_condition(status, "Queued", "True", "PodGroupInqueue", "m", T0)
    set_condition(status, "Running", "True", "MSJobRunning", "m", T0)
    assert [(x["type"], x["status"]) for x in status["conditions"]] == [
        ("Queued", "False"),
        ("Running", "True"),
    ]


def test_a_job_restarted_whole_waits_in_the_queue_again() -> None:
    """Volcano sets a PodGroup with fewer than minMember pods placed back to Pending."""
    j = _gang_job()
    j["status"] = run(j, gang_scheduling=True).status
    pods = [pod("Scheduler", 0)] + [pod("Worker", i) for i in range(3)]
    placed = run(j, pods, pod_group=_pg(j, "Running"), gang_scheduling=True)
    j["status"] = placed.status
    p = run(j, [], pod_group=_pg(j, "Pending"), gang_scheduling=True)
    assert not p.create_pods
    queued = cond(p, "Queued")
    assert queued and queued["status"] == "True" and queued["reason"] == "PodGroupPending"


def test_a_podgroup_being_deleted_is_neither_patched_nor_trusted() -> None:
    j = _gang_job(workers=5)
    pg = _pg(_gang_job(workers=3), "Running")
    pg["metadata"]["deletionTimestamp"] = T0
    p = run(j, pod_group=pg, gang_scheduling=True)
    assert volcano(p).patch is None and not p.create_pods and volcano(p).create is None


def test_waiting_is_none_once_placed() -> None:
    j = _gang_job()
    assert gang.waiting(j, _pg(j, "Running")) is None
    assert gang.waiting(j, _pg(j, "Completed")) is None
    wait = gang.waiting(j, None)
    assert wait is not None and wait.reason == "PodGroupPending"


def test_pods_running_before_the_podgroup_says_so_end_the_wait_all_the_same() -> None:
    j = _gang_job()
    j["status"] = run(j, gang_scheduling=True).status
    pods = [pod("Scheduler", 0)] + [pod("Worker", i) for i in range(3)]
    p = run(j, pods, [service()], pod_group=_pg(j, "Inqueue"), gang_scheduling=True)
    queued = cond(p, "Queued")
    assert queued and queued["status"] == "False" and queued["reason"] == "GangScheduled"
    assert p.status is not None and latest_condition_type(p.status) == "Running"
    assert [e.reason for e in p.events] == ["GangScheduled", "MSJobRunning"]
    j["status"] = p.status
    later = run(j, pods, [service()], pod_group=_pg(j, "Running"), gang_scheduling=True)
    assert not later.events
