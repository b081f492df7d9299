"""The scheduling systems start with the caches they ask for, in their order, and tell
``msop render`` what it draws of them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from msop.kube.objects import JSON
from msop.kube.resources import PODGROUPS, RESOURCEFLAVORS, WORKLOADS, Resource
from msop.msjob import gang, kueue, kueue_workload, systems, workloadapi
from msop.msjob.plan import Observed, plan
from msop.msjob.scheduling import decision
from tests.support.builders import NOW, job
from tests.support.clients import NoApiServer


class _Children:
    def __init__(self, objs: list[JSON]) -> None:
        self.objs = objs

    def get(self, name: str, namespace: str) -> JSON | None:
        return next((o for o in self.objs if o["metadata"]["name"] == name), None)

    def owned_by(self, uid: str) -> list[JSON]:
        return [o for o in self.objs if kueue_workload.controller_uid(o) == uid]

    def in_namespace(self, namespace: str) -> list[JSON]:
        return [o for o in self.objs if o["metadata"]["namespace"] == namespace]


class _Caches:
    """Records what each system asks for."""

    def __init__(self, objs: list[JSON]) -> None:
        self.objs = objs
        self.asked: list[tuple[str, str]] = []
        self.resources: list[Resource] = []

    def children(self, resource: Resource) -> _Children:
        self.asked.append(("children", resource.kind))
        self.resources.append(resource)
        return _Children([o for o in self.objs if o["kind"] == resource.kind])

    def cluster(self, resource: Resource) -> Callable[[str], JSON | None]:
        self.asked.append(("cluster", resource.kind))
        return lambda name: None

    def nodes(self) -> Callable[[str], JSON | None] | None:
        self.asked.append(("nodes", "Node"))
        return None


def test_the_enabled_systems_in_their_order() -> None:
    assert systems.enabled(kueue_enabled=False, gang_scheduling=False) == []
    both = systems.enabled(kueue_enabled=True, gang_scheduling=True)
    assert [s.name for s in both] == ["kueue", "volcano"]
    assert systems.enabled(kueue_enabled=False, gang_scheduling=True) == [gang.INTEGRATION]


def test_each_system_asks_for_its_caches_when_it_starts() -> None:
    caches = _Caches([])
    for integration in systems.enabled(kueue_enabled=True, gang_scheduling=True):
        integration.start(NoApiServer(), caches)
    assert caches.asked == [
        ("children", WORKLOADS.kind),
        ("cluster", RESOURCEFLAVORS.kind),
        ("nodes", "Node"),  # the operator's own node cache: no new watch
        ("children", PODGROUPS.kind),
    ]


def test_the_workload_api_decides_after_kueue_and_asks_for_its_own_caches() -> None:
    on = systems.enabled(kueue_enabled=True, gang_scheduling=False, workload_api="v1beta1")
    assert [s.name for s in on] == ["kueue", "kubernetes"]
    caches = _Caches([])
    api = on[1].start(NoApiServer(), caches)
    groups = [(r.group, r.version, r.plural) for r in caches.resources]
    assert groups == [("scheduling.k8s.io", "v1beta1", "workloads"),
                      ("scheduling.k8s.io", "v1beta1", "podgroups")]  # fmt: skip
    j = job({"Scheduler": 1, "Worker": 2})
    wl, pg = workloadapi.workload(j, "v1beta1"), workloadapi.pod_group(j, "v1beta1")
    api = on[1].start(NoApiServer(), _Caches([wl, pg]))
    seen = asyncio.run(api.observe(j))
    assert isinstance(seen, workloadapi.Seen)
    assert (seen.version, seen.workload, seen.pod_group) == ("v1beta1", wl, pg)


def test_volcano_reads_the_pod_group_from_the_cache_it_asked_for() -> None:
    j = job({"Worker": (2, "Never")})
    pg = gang.pod_group(j)
    volcano = gang.Volcano.start(NoApiServer(), _Caches([pg]))
    seen = asyncio.run(volcano.observe(j))
    assert isinstance(seen, gang.Seen) and seen.pod_group is pg


def test_render_sees_each_system_let_the_job_go_ahead() -> None:
    j = job({"Worker": (2, "Never")})
    j["metadata"]["labels"] = {kueue_workload.QUEUE_LABEL: "q"}
    seen = [kueue.INTEGRATION.unseen(), gang.INTEGRATION.unseen()]
    first = plan(Observed(j, [], [], NOW, scheduling=seen))
    granted = decision(first.scheduling, kueue.Decision)
    assert granted is not None
    kueue_part = granted.granted()
    assert kueue_part is not None and [o["kind"] for o in kueue_part.objects] == ["Workload"]
    assert isinstance(kueue_part.seen, kueue.Seen)
    assert kueue_workload.admitted(kueue_part.seen.workload) and kueue_part.note
    held = decision(first.scheduling, gang.Decision)
    assert held is not None and held.granted() is None

    second = plan(Observed(j, [], [], NOW, scheduling=[kueue_part.seen, seen[1]]))
    volcano = decision(second.scheduling, gang.Decision)
    assert volcano is not None
    gang_part = volcano.granted()
    assert gang_part is not None and [o["kind"] for o in gang_part.objects] == ["PodGroup"]
    assert isinstance(gang_part.seen, gang.Seen) and gang.admitted(gang_part.seen.pod_group)
    done = decision(second.scheduling, kueue.Decision)
    assert done is not None and done.granted() is None
