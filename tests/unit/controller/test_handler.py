"""Event handlers (event -> keys, priorities)."""

from __future__ import annotations

from typing import Any

from msop.controller.handler import (
    ChangedOnly,
    EnqueueRequestForObject,
    EnqueueRequestForOwner,
    EnqueueRequestsFromMapFunc,
    group_of,
)
from msop.controller.reconcile import Request
from msop.controller.workqueue import PRIORITY_LOW, PRIORITY_NORMAL


class RecordingQueue:
    def __init__(self) -> None:
        self.added: list[tuple[Request, int]] = []

    def add(self, item: Request, *, priority: int = PRIORITY_NORMAL) -> None:
        self.added.append((item, priority))


def obj(name: str, rv: str = "1", **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, **meta}}


def owner(kind: str, name: str, api: str = "example.com/v1", ctl: bool = True) -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "controller": ctl}


def test_for_object_priorities() -> None:
    q = RecordingQueue()
    h = EnqueueRequestForObject()
    h.create(obj("a"), q, initial=True)
    h.create(obj("b"), q)
    o = obj("c")
    h.update(o, o, q)  # resync
    h.update(obj("d", "1"), obj("d", "2"), q)
    h.delete(obj("e"), q)
    assert q.added == [
        (Request("ns", "a"), PRIORITY_LOW),
        (Request("ns", "b"), PRIORITY_NORMAL),
        (Request("ns", "c"), PRIORITY_LOW),
        (Request("ns", "d"), PRIORITY_NORMAL),
        (Request("ns", "e"), PRIORITY_NORMAL),
    ]


def test_cluster_scoped_object_has_empty_namespace() -> None:
    q = RecordingQueue()
    EnqueueRequestForObject().create({"metadata": {"name": "n"}}, q)
    assert q.added == [(Request("", "n"), PRIORITY_NORMAL)]
    assert str(Request("", "n")) == "n" and str(Request("a", "b")) == "a/b"


def test_for_owner_matches_group_kind_and_controller_flag() -> None:
    refs = [
        owner("Other", "x"),
        owner("Toy", "not-controller", ctl=False),
        owner("Toy", "wrong-group", api="apps/v1"),
        owner("Toy", "mine", api="example.com/v2"),
    ]
    q = RecordingQueue()
    EnqueueRequestForOwner("example.com/v1", "Toy").create(obj("p", ownerReferences=refs), q)
    assert q.added == [(Request("ns", "mine"), PRIORITY_NORMAL)]
    q2 = RecordingQueue()
    EnqueueRequestForOwner("example.com/v1", "Toy", is_controller=False).create(
        obj("p", ownerReferences=refs), q2
    )
    assert [r.name for r, _ in q2.added] == ["not-controller", "mine"]
    q3 = RecordingQueue()
    EnqueueRequestForOwner("v1", "ConfigMap").create(
        obj("p", ownerReferences=[owner("ConfigMap", "cm", api="v1")]), q3
    )
    assert q3.added == [(Request("ns", "cm"), PRIORITY_NORMAL)]


def test_for_owner_update_enqueues_old_and_new_owner_once() -> None:
    q = RecordingQueue()
    h = EnqueueRequestForOwner("example.com/v1", "Toy")
    old = obj("p", "1", ownerReferences=[owner("Toy", "a")])
    new = obj("p", "2", ownerReferences=[owner("Toy", "b")])
    h.update(old, new, q)
    h.update(new, obj("p", "3", ownerReferences=[owner("Toy", "b")]), q)
    assert [r.name for r, _ in q.added] == ["a", "b", "b"]
    q.added.clear()
    h.create(obj("orphan"), q)
    assert q.added == []


def test_map_func_and_group_of() -> None:
    q = RecordingQueue()
    EnqueueRequestsFromMapFunc(lambda o: [Request("x", "1"), Request("y", "2")]).delete(obj("a"), q)
    assert [r for r, _ in q.added] == [Request("x", "1"), Request("y", "2")]
    assert (group_of("v1"), group_of("apps/v1")) == ("", "apps")


def test_changed_only_drops_updates_of_nothing_but_the_resource_version() -> None:
    q = RecordingQueue()
    h = ChangedOnly(EnqueueRequestForOwner("example.com/v1", "Toy"))
    refs = [owner("Toy", "a")]
    pod = {**obj("p", "1", ownerReferences=refs), "status": {"phase": "Running"}}
    h.update(pod, {**pod, "metadata": {**pod["metadata"], "resourceVersion": "2"}}, q)
    assert q.added == []  # e.g. a condition the projection leaves out changed
    h.update(pod, pod, q)  # a resync, or news of an unchanged object: the same version
    assert q.added == [(Request("ns", "a"), PRIORITY_LOW)]
    q.added.clear()
    changed = [
        {**obj("p", "2", ownerReferences=refs), "status": {"phase": "Succeeded"}},
        {**obj("p", "2", ownerReferences=refs, labels={"x": "y"}), "status": {"phase": "Running"}},
        {**obj("p", "2", ownerReferences=refs)},  # a field gone
        {**obj("p", "2", ownerReferences=refs), "status": {"phase": "Running"}, "spec": {}},
    ]
    for new in changed:
        h.update(pod, new, q)
    assert q.added == [(Request("ns", "a"), PRIORITY_NORMAL)] * len(changed)
    q.added.clear()
    h.update(obj("p", ownerReferences=refs), obj("p", "", ownerReferences=refs), q)
    h.create(pod, q)
    h.delete(pod, q)
    assert len(q.added) == 3  # no version to compare passes; creates and deletes pass
