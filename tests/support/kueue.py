"""Kueue in the unit tests: a queued MSJob, its Workload in each state, and the client seam
of the reconciler's Workload writes (the Kueue, topology and MultiKueue tests)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from msop.api import constants as c
from msop.kube.errors import ApiError
from msop.kube.resources import Resource
from msop.msjob import kueue, kueue_workload
from msop.msjob.plan import Plan
from msop.msjob.scheduling import Writer
from tests.support.builders import T0, job
from tests.support.fakes import Recorder

JSON = dict[str, Any]
QUEUE = "team-a"


def queued_job(**kw: Any) -> JSON:
    j = job({"Scheduler": (1, "Never"), "Worker": (2, "Never")}, **kw)
    j["metadata"]["labels"] = {kueue_workload.QUEUE_LABEL: QUEUE}
    for spec in j["spec"]["msReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    return j


def tas_job(annotations: dict[str, str], **kw: Any) -> JSON:
    """The Scheduler and two Workers of the Kueue tests, the Workers' template annotated."""
    j = queued_job(**kw)
    j["spec"]["msReplicaSpecs"]["Worker"]["template"]["metadata"] = {"annotations": annotations}
    return j


def assignment_of(hosts: list[str]) -> JSON:
    """A topologyAssignment as Kueue 0.17 writes it: one pod per host, lowest level only."""
    return {
        "levels": ["kubernetes.io/hostname"],
        "slices": [{
            "domainCount": len(hosts),
            "valuesPerLevel": [{"individual": {"prefix": "b1-r2-", "roots": [
                h.removeprefix("b1-r2-") for h in hosts]}}],
            "podCounts": {"universal": 1},
        }],
    }  # fmt: skip


def wl_of(j: JSON, *conditions: tuple[str, str, str], **status: Any) -> JSON:
    w = kueue_workload.workload(j, active=True)
    w["metadata"].update(uid="wl-uid", resourceVersion="7", generation=1)
    w["status"] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} {r}", "lastTransitionTime": T0}
            for t, s, r in conditions
        ],
        **status,
    }
    return w


ADMISSION = {
    "clusterQueue": "cq",
    "podSetAssignments": [
        {"name": "scheduler", "flavors": {"cpu": "pool-a"}, "count": 1},
        {"name": "worker", "flavors": {"cpu": "pool-b"}, "count": 2},
    ],
}
FLAVORS: dict[str, JSON | None] = {
    "pool-a": {"metadata": {"name": "pool-a"}, "spec": {"nodeLabels": {"pool": "a"}}},
    "pool-b": {
        "metadata": {"name": "pool-b"},
        "spec": {
            "nodeLabels": {"pool": "b"},
            "tolerations": [{"key": "pool", "operator": "Equal", "value": "b"}],
        },
    },
}


def admitted(j: JSON) -> JSON:
    return wl_of(
        j, ("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted"),
        admission=ADMISSION,
    )  # fmt: skip


def evicted(j: JSON, reason: str = "Preempted") -> JSON:
    return wl_of(
        j,
        ("QuotaReserved", "True", "QuotaReserved"),
        ("Admitted", "True", "Admitted"),
        ("Evicted", "True", reason),
        admission=ADMISSION,
    )


def queued(p: Plan) -> JSON | None:
    assert p.status is not None
    return next((x for x in p.status["conditions"] if x["type"] == c.QUEUED), None)


class WorkloadApi:
    """The client seam for Workload writes: records calls, serves one Workload."""

    def __init__(self, wl: JSON | None, conflict: bool = False) -> None:
        self.wl = wl
        self.conflict = conflict
        self.calls: list[tuple[str, str, Any]] = []

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> JSON:
        self.calls.append(("create", res.kind, body["metadata"]["name"]))
        return dict(body)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        self.calls.append(("get", res.kind, name))
        return {"metadata": {"name": name}, "value": 1000}

    async def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> JSON:
        self.calls.append(("list", res.kind, kw.get("label_selector")))
        return {"items": []}

    async def patch(
        self, res: Resource, name: str, patch: Any, namespace: str | None = None, **kw: Any
    ) -> JSON:
        self.calls.append(("patch", f"{res.kind}/{kw.get('subresource') or ''}", patch))
        if res.kind == "Workload" and self.conflict:
            raise ApiError(409, "Conflict", "the object has been modified")
        if res.kind != "Workload":
            return {"metadata": {"resourceVersion": "99"}}
        assert self.wl is not None
        rv = str(int(self.wl["metadata"]["resourceVersion"]) + 1)
        self.wl = {**self.wl, "metadata": {**self.wl["metadata"], "resourceVersion": rv}}
        return self.wl

    async def delete(
        self, res: Resource, name: str, namespace: str | None = None, **kw: Any
    ) -> JSON | None:
        self.calls.append(("delete", res.kind, name))
        return None


def kueue_of(api: WorkloadApi) -> kueue.Kueue:
    """Kueue's side of the reconciler, with empty caches."""
    return kueue.Kueue(
        api,
        owned_by=lambda uid: [], in_namespace=lambda ns: [], flavor=lambda name: None,
    )  # fmt: skip


def apply_decision(api: WorkloadApi, d: kueue.Decision, j: JSON) -> bool:
    return asyncio.run(d.apply(Writer(api, Recorder(), j)))
