"""Event-handler dispatch of SharedInformer, driven through its ReflectorSink methods."""

from __future__ import annotations

from typing import Any

import pytest

from msop.informers import (
    DeletedFinalStateUnknown,
    EncodedStore,
    Lister,
    MultiNamespaceLister,
    SharedInformer,
)
from msop.kube import CONFIGMAPS, KubeClient


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def on_add(self, obj: dict[str, Any], initial: bool) -> None:
        self.events.append(("add", obj["metadata"]["name"], initial))

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        self.events.append(
            ("update", old["metadata"]["resourceVersion"], new["metadata"]["resourceVersion"])
        )

    def on_delete(self, obj: dict[str, Any]) -> None:
        tomb = isinstance(obj, DeletedFinalStateUnknown)
        self.events.append(("delete", obj["metadata"]["name"], tomb))


def cm(name: str, rv: str, ns: str = "a", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name, "resourceVersion": rv, **extra}}


def informer(ns: str | None = None) -> SharedInformer:
    # The client is never used: these tests drive the sink methods directly.
    return SharedInformer(KubeClient.__new__(KubeClient), CONFIGMAPS, namespace=ns)


def test_initial_list_then_watch_events() -> None:
    inf, rec = informer(), Recorder()
    inf.add_event_handler(rec.on_add, rec.on_update, rec.on_delete)
    assert not inf.has_synced()
    inf.replace([cm("x", "1", managedFields=[{}])], "10")
    assert inf.has_synced()
    stored = inf.store.get("a/x")
    assert stored is not None and "managedFields" not in stored["metadata"]
    inf.watch_event("ADDED", cm("y", "11"))
    inf.watch_event("MODIFIED", cm("x", "12"))
    inf.watch_event("DELETED", cm("y", "13"))
    inf.bookmark("14")
    assert rec.events == [
        ("add", "x", True),
        ("add", "y", False),
        ("update", "1", "12"),
        ("delete", "y", False),
    ]
    assert inf.store.keys() == ["a/x"] and inf.store.resource_version == "14"


def test_relist_emits_tombstones_and_updates_not_initial_adds() -> None:
    inf, rec = informer(), Recorder()
    inf.add_event_handler(rec.on_add, rec.on_update, rec.on_delete)
    inf.replace([cm("keep", "1"), cm("change", "2"), cm("vanish", "3")], "3")
    rec.events.clear()
    inf.replace([cm("keep", "1"), cm("change", "7"), cm("fresh", "8")], "9")
    assert sorted(rec.events) == [
        ("add", "fresh", False),
        ("delete", "vanish", True),
        ("update", "2", "7"),
    ]


def test_late_handler_gets_replay_as_initial() -> None:
    inf = informer()
    inf.replace([cm("x", "1")], "1")
    rec = Recorder()
    reg = inf.add_event_handler(rec.on_add, rec.on_update)
    assert rec.events == [("add", "x", True)]
    inf.remove_event_handler(reg)
    inf.watch_event("ADDED", cm("z", "2"))
    assert len(rec.events) == 1  # removed: no more events


def test_late_handler_on_a_compact_cache_gets_one_decoded_object_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The replay to a late handler decodes each object just before handing it over:
    decoding a cache of 10,000 pods all at once took 20 MB, most of it kept by the heap."""
    inf = SharedInformer(KubeClient.__new__(KubeClient), CONFIGMAPS, compact=True)
    inf.replace([cm(f"p{i}", "1") for i in range(50)], "1")
    store = inf.store
    assert isinstance(store, EncodedStore)
    decoded: list[int] = []
    real = store.decode

    def counting(raw: bytes) -> dict[str, Any]:
        decoded.append(1)
        return real(raw)

    monkeypatch.setattr(store, "decode", counting)
    at_call: list[int] = []
    inf.add_event_handler(lambda obj, initial: at_call.append(len(decoded)))
    assert at_call == list(range(1, 51))


def test_handler_exceptions_are_swallowed_and_counted() -> None:
    inf, rec = informer(), Recorder()

    def boom(obj: dict[str, Any], initial: bool) -> None:
        raise RuntimeError("handler bug")

    inf.add_event_handler(boom)
    inf.add_event_handler(rec.on_add)
    inf.replace([cm("x", "1")], "1")
    assert rec.events == [("add", "x", True)]
    assert inf.statistics().handler_errors == 1
    assert inf.statistics().objects == 1 and inf.statistics().synced


async def test_wait_for_sync_times_out_when_never_listed() -> None:
    with pytest.raises(TimeoutError):
        await informer().wait_for_sync(timeout=0.01)


def test_listers() -> None:
    a, b = informer("a"), informer("b")
    a.replace([cm("x", "1", labels={"app": "w"}), cm("y", "1")], "1")
    b.replace([cm("x", "1", ns="b")], "1")
    la = Lister(a)
    assert la.get("x", "a") is not None and la.get("x", "b") is None
    assert [o["metadata"]["name"] for o in la.list("a", labels={"app": "w"})] == ["x"]
    multi = MultiNamespaceLister([a, b])
    assert sorted(multi.namespaces) == ["a", "b"]
    assert multi.get("x", "b") is not None and multi.get("x", "c") is None
    assert len(multi.list()) == 3 and len(multi.list("b")) == 1 and multi.list("c") == []
    assert len(multi.by_index("namespace", "a")) == 2
    with pytest.raises(ValueError):
        MultiNamespaceLister([a, informer("a")])
    with pytest.raises(ValueError):
        MultiNamespaceLister([informer(None)])


def test_list_already_transformed_by_the_reflector_is_not_transformed_again() -> None:
    calls: list[str] = []

    def transform(obj: dict[str, Any]) -> dict[str, Any]:
        calls.append(obj["metadata"]["name"])
        return obj

    inf = SharedInformer(KubeClient.__new__(KubeClient), CONFIGMAPS, transform=transform)
    assert inf.reflector.list_transform is transform  # pages are slimmed as they arrive
    inf.replace([cm("x", "1")], "1", transformed=True)
    assert calls == []
    inf.replace([cm("y", "2")], "2")
    inf.watch_event("ADDED", cm("z", "3"))
    assert calls == ["y", "z"]


def test_compact_informer_encodes_pages_and_hands_dicts_to_handlers() -> None:
    inf = SharedInformer(KubeClient.__new__(KubeClient), CONFIGMAPS, compact=True)
    assert isinstance(inf.store, EncodedStore)
    rec = Recorder()
    seen: list[dict[str, Any]] = []
    inf.add_event_handler(rec.on_add, rec.on_update, rec.on_delete)
    inf.add_event_handler(lambda obj, initial: seen.append(obj))
    # The reflector's list transform applies the default transform, then encodes.
    transform = inf.reflector.list_transform
    assert transform is not None
    page = [transform(cm(n, "1", managedFields=[{}])) for n in ("x", "y")]
    assert all(isinstance(raw, bytes) for raw in page)
    inf.replace(page, "1", transformed=True)
    assert rec.events == [("add", "x", True), ("add", "y", True)]
    assert seen == [cm("x", "1"), cm("y", "1")]  # managedFields dropped
    assert inf.store.get("a/x") == cm("x", "1") and inf.has_synced()
    # a relist without transformed items, and watch events, go through the same store
    inf.replace([cm("x", "2", managedFields=[{}])], "2")
    inf.watch_event("ADDED", cm("z", "3"))
    inf.watch_event("DELETED", cm("x", "4"))
    assert rec.events[2:] == [
        ("update", "1", "2"),
        ("delete", "y", True),
        ("add", "z", False),
        ("delete", "x", False),
    ]
    assert inf.store.keys() == ["a/z"] and inf.store.resource_version == "4"
    assert Lister(inf).get("z", "a") == cm("z", "3")
