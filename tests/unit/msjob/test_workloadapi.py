"""Gang scheduling with Kubernetes' Workload API: the Workload and PodGroup a job gets,
its pods' schedulingGroup, a change of size, suspend and finish, the Queued condition, the
served version (discovery) and msop render."""

from __future__ import annotations

from typing import Any

import pytest

from msop.api.conditions import latest_condition_type
from msop.api.naming import job_selector
from msop.kube.errors import ApiError
from msop.msjob import scheduling, workloadapi
from msop.msjob.passes import Observed, Options
from msop.msjob.plan import Plan, plan
from msop.msjob.scheduling import decision
from msop.sdk.render import render
from tests.support.builders import NOW, T0, cond, finished, job, pod, valid_job

JSON = dict[str, Any]
V = "v1alpha2"


def run(j: JSON, pods: list[JSON] | None = None, *, wl: JSON | None = None,
        pg: JSON | None = None) -> Plan:  # fmt: skip
    seen: list[scheduling.Seen] = [workloadapi.Seen(V, wl, pg)]
    return plan(Observed(j, list(pods or []), [], NOW, scheduling=seen), Options())


def decided(p: Plan) -> workloadapi.Decision:
    made = decision(p.scheduling, workloadapi.Decision)
    assert made is not None
    return made


def gang_job(workers: int = 3, **run_policy: Any) -> JSON:
    return job({"Scheduler": (1, "Never"), "Worker": (workers, "Never")},
               run_policy=run_policy or None)  # fmt: skip


def scheduled(j: JSON, status: str | None = None, message: str = "") -> tuple[JSON, JSON]:
    wl, pg = workloadapi.workload(j, V), workloadapi.pod_group(j, V)
    if status is not None:
        pg["status"] = {"conditions": [{"type": "PodGroupScheduled", "status": status,
                                        "reason": "Unschedulable" if status == "False" else "",
                                        "message": message}]}  # fmt: skip
    return wl, pg


def test_a_new_job_gets_its_workload_and_podgroup_before_any_pod() -> None:
    j = gang_job(schedulingPolicy={"priorityClass": "high"})
    p = run(j)
    wl, pg = decided(p).create
    assert not p.create_pods
    assert wl == {
        "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "Workload",
        "metadata": {
            "name": "j", "namespace": "ns",
            "labels": job_selector("j"),
            "ownerReferences": wl["metadata"]["ownerReferences"],
        },
        "spec": {
            "controllerRef": {"apiGroup": "mindspore.gitee.com", "kind": "MSJob", "name": "j"},
            "podGroupTemplates": [{"name": "gang", "schedulingPolicy": {"gang": {"minCount": 4}},
                                   "disruptionMode": "PodGroup", "priorityClassName": "high"}],
        },
    }  # fmt: skip
    assert wl["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pg["spec"] == {
        "podGroupTemplateRef": {"workload": {"workloadName": "j", "podGroupTemplateName": "gang"}},
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "disruptionMode": "PodGroup",
        "priorityClassName": "high",
    }
    queued = cond(p, "Queued")
    assert queued and queued["status"] == "True" and queued["reason"] == "GangPending"
    assert "gang of 4 pods" in queued["message"]


def test_min_available_is_the_gangs_minimum() -> None:
    j = gang_job(workers=7, schedulingPolicy={"minAvailable": 5})
    wl, pg = decided(run(j)).create
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    assert wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 5}}


def test_once_both_exist_the_pods_are_made_in_the_group() -> None:
    j = gang_job()
    j["status"] = run(j).status
    wl, pg = scheduled(j)
    p = run(j, wl=wl, pg=pg)
    assert decided(p).create == [] and not decided(p).delete
    assert {x["metadata"]["name"] for x in p.create_pods} >= {"j-scheduler-0"}
    for made in p.create_pods:
        assert made["spec"]["schedulingGroup"] == {"podGroupName": "j"}


def test_the_schedulers_verdict_is_the_queued_reason_with_a_warning() -> None:
    j = gang_job()
    j["status"] = run(j).status
    wl, pg = scheduled(j, "False", "pod group is unschedulable")
    p = run(j, [pod("Scheduler", 0, "Pending")], wl=wl, pg=pg)
    queued = cond(p, "Queued")
    assert queued and queued["reason"] == "Unschedulable"
    assert (
        "cannot place its gang of 4 pods whole yet: pod group is unschedulable"
        in (queued["message"])
    )
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "Unschedulable")]


def test_a_scheduled_gang_turns_queued_false() -> None:
    j = gang_job()
    j["status"] = run(j).status
    wl, pg = scheduled(j, "True")
    pods = [pod("Scheduler", 0, "Pending")] + [pod("Worker", i, "Pending") for i in range(3)]
    p = run(j, pods, wl=wl, pg=pg)
    queued = cond(p, "Queued")
    assert queued and queued["status"] == "False" and queued["reason"] == "GangScheduled"
    assert p.status is not None and latest_condition_type(p.status) == "Created"


def test_a_change_of_size_deletes_both_and_holds_the_pods_until_they_are_made_again() -> None:
    j = gang_job(workers=5)
    j["status"] = run(j).status
    wl, pg = scheduled(gang_job(workers=3), "True")
    p = run(j, wl=wl, pg=pg)
    assert decided(p).delete and decided(p).create == [] and not p.create_pods
    for obj in (wl, pg):
        obj["metadata"]["deletionTimestamp"] = T0
    p = run(j, wl=wl, pg=pg)
    assert not decided(p).delete and decided(p).create == [] and not p.create_pods
    p = run(j)  # both gone: made again, of the new size
    assert [o["spec"].get("schedulingPolicy") for o in decided(p).create] == [
        None, {"gang": {"minCount": 6}}
    ]  # fmt: skip


@pytest.mark.parametrize("state", ["suspended", "finished"])
def test_a_suspended_or_finished_job_lets_its_gang_go(state: str) -> None:
    j = gang_job(suspend=True) if state == "suspended" else gang_job()
    if state == "finished":
        j["status"] = finished()
    wl, pg = scheduled(j, "True")
    assert decided(run(j, wl=wl, pg=pg)).delete
    assert not decided(run(j)).delete  # nothing left to delete


class Discovery:
    def __init__(self, answers: dict[str, JSON]) -> None:
        self.answers = answers

    async def request(self, method: str, path: str, **_: Any) -> JSON:
        if path not in self.answers:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return self.answers[path]


def resources(*names: str) -> JSON:
    return {"resources": [{"name": n} for n in names]}


@pytest.mark.parametrize(
    ("answers", "version"),
    [
        ({}, None),
        ({"/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}]}}, None),
        ({"/apis/scheduling.k8s.io": {"versions": [{"version": "v1"}, {"version": "v1alpha2"}]},
          "/apis/scheduling.k8s.io/v1alpha2": resources("workloads", "podgroups")}, "v1alpha2"),
        ({"/apis/scheduling.k8s.io": {"versions": [{"version": "v1alpha2"},
                                                   {"version": "v1beta1"}]},
          "/apis/scheduling.k8s.io/v1alpha2": resources("workloads", "podgroups"),
          "/apis/scheduling.k8s.io/v1beta1": resources("workloads", "podgroups")}, "v1beta1"),
        ({"/apis/scheduling.k8s.io": {"versions": [{"version": "v1alpha2"}]},
          "/apis/scheduling.k8s.io/v1alpha2": resources("workloads")}, None),
    ],
    ids=["no-group", "v1-only", "v1alpha2", "v1beta1-first", "no-podgroups"],
)  # fmt: skip
async def test_the_served_version_is_read_from_discovery(
    answers: dict[str, JSON], version: str | None
) -> None:
    assert await workloadapi.served_version(Discovery(answers)) == version  # type: ignore[arg-type]


def test_render_draws_the_workload_and_podgroup_through_the_seam() -> None:
    rendered = render(valid_job(), workload_api=V)
    kinds = [(o["apiVersion"], o["kind"]) for o in rendered.scheduling]
    assert kinds == [("scheduling.k8s.io/v1alpha2", "Workload"),
                     ("scheduling.k8s.io/v1alpha2", "PodGroup")]  # fmt: skip
    assert rendered.pods
    assert all(o["spec"]["schedulingGroup"] == {"podGroupName": "ms-job"} for o in rendered.pods)
