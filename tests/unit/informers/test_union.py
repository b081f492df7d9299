"""InformerUnion: members come and go under fixed handlers and readers."""

from __future__ import annotations

from typing import Any

import pytest

from msop.informers import SharedInformer
from msop.informers.store import BY_CONTROLLER_UID
from msop.informers.union import InformerUnion
from msop.kube import PODS, KubeClient


def pod(name: str, rv: str = "1", owner: str = "job-uid") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns", "name": name, "resourceVersion": rv, "uid": f"uid-{name}",
            "ownerReferences": [{"uid": owner, "controller": True, "kind": "MSJob",
                                 "apiVersion": "mindspore.gitee.com/v1", "name": "j"}],
        }
    }  # fmt: skip


def informer(*pods: dict[str, Any]) -> SharedInformer:
    # The client is never used: the tests drive the sink methods directly.
    inf = SharedInformer(KubeClient.__new__(KubeClient), PODS)
    inf.replace(list(pods), "1")
    return inf


def test_a_member_that_joins_replays_its_cache_and_then_its_events() -> None:
    legacy, shard = informer(pod("old")), informer(pod("new"))
    union = InformerUnion([legacy])
    seen: list[tuple[str, str, bool]] = []
    union.add_event_handler(
        on_add=lambda obj, initial: seen.append(("add", obj["metadata"]["name"], initial))
    )
    assert seen == [("add", "old", True)]
    union.attach(shard)
    assert seen[-1] == ("add", "new", True)
    shard.watch_event("ADDED", pod("newer", "2"))
    assert seen[-1] == ("add", "newer", False)


def test_a_member_that_leaves_goes_silently_and_is_no_longer_read() -> None:
    legacy, shard = informer(pod("old")), informer(pod("new"))
    union = InformerUnion([legacy, shard])
    events: list[str] = []
    union.add_event_handler(
        on_add=lambda obj, initial: events.append("add"),
        on_delete=lambda obj: events.append("delete"),
    )
    events.clear()
    union.detach(shard)
    assert events == []  # no deletes: the pods were not deleted, they are someone else's
    shard.watch_event("ADDED", pod("later", "3"))
    assert events == []
    assert union.get("new", "ns") is None and union.get("old", "ns") is not None
    assert [p["metadata"]["name"] for p in union.by_index(BY_CONTROLLER_UID, "job-uid")] == ["old"]
    union.detach(shard)  # twice: nothing


def test_reads_cover_every_member_once() -> None:
    a, b = informer(pod("x"), pod("y")), informer(pod("y"), pod("z"))
    union = InformerUnion([a, b])
    names = sorted(p["metadata"]["name"] for p in union.by_index(BY_CONTROLLER_UID, "job-uid"))
    assert names == ["x", "y", "z"]
    assert union.get("z", "ns") is not None and union.get("z", "other") is None


def test_a_removed_handler_hears_nothing_from_later_members() -> None:
    union = InformerUnion()
    events: list[str] = []
    reg = union.add_event_handler(on_add=lambda obj, initial: events.append("add"))
    union.remove_event_handler(reg)
    union.attach(informer(pod("x")))
    assert events == []


def test_indexes_reach_every_member_and_its_store_reads_them_as_one() -> None:
    first = informer(pod("a", owner="j1"), pod("b", owner="j2"))
    union = InformerUnion([first])

    def by_owner(obj: dict[str, Any]) -> list[str]:
        return [obj["metadata"]["ownerReferences"][0]["uid"]]

    union.add_indexers({"owner": by_owner})
    later = informer(pod("b", owner="j2"), pod("c", owner="j2"))  # "b" in both members
    union.attach(later)
    assert "owner" in later.store.index_names()  # given as it joined
    assert union.store.keys() == ["ns/a", "ns/b", "ns/c"] and len(union.store) == 3
    assert union.store.index_keys("owner", "j2") == ["ns/b", "ns/c"]
    assert union.store.index_values("owner") == ["j1", "j2"]
    assert union.store.get_by_name("ns", "a") is not None
    assert union.store.get_by_name("other", "a") is None
    union.detach(first)
    assert union.store.get_by_name("ns", "a") is None
    assert union.store.keys() == ["ns/b", "ns/c"]
    assert union.store.index_values("owner") == ["j2"]
    with pytest.raises(ValueError, match="owner"):
        union.add_indexers({"owner": by_owner})
