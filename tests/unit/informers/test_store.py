"""Store, indexes and transforms."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from msop.informers.store import (
    BY_CONTROLLER_UID,
    BY_NAMESPACE,
    LAST_APPLIED_ANNOTATION,
    Delta,
    EncodedStore,
    Store,
    by_controller_uid,
    default_transform,
    intern_strings,
    iter_relist_deltas,
    key_of,
    make_transform,
    relist_deltas,
    split_key,
)


def obj(
    name: str, ns: str | None = "a", owner: str | None = None, rv: str = "1", **meta: Any
) -> dict[str, Any]:
    m: dict[str, Any] = {"name": name, "resourceVersion": rv, **meta}
    if ns:
        m["namespace"] = ns
    if owner:
        m["ownerReferences"] = [
            {"uid": "other", "controller": False},
            {"uid": owner, "controller": True},
        ]
    return {"metadata": m}


def test_keys() -> None:
    assert key_of(obj("x")) == "a/x"
    assert key_of(obj("n", ns=None)) == "n"
    assert split_key("a/x") == ("a", "x")
    assert split_key("n") == (None, "n")


def test_add_get_update_delete() -> None:
    s = Store()
    o1 = obj("x")
    assert s.add(o1) is None
    assert s.get("a/x") is o1 and s.get_by_name("a", "x") is o1
    o2 = obj("x", rv="2")
    assert s.update(o2) is o1
    assert s.list() == [o2] and len(s) == 1 and "a/x" in s
    assert s.delete("a/x") is o2
    assert s.delete(o2) is None
    assert s.list() == [] and s.get("a/x") is None


def test_namespace_and_controller_indexes_follow_updates() -> None:
    s = Store()
    s.add(obj("p1", owner="u1"))
    s.add(obj("p2", owner="u1"))
    s.add(obj("p3", ns="b", owner="u2"))
    s.add(obj("p4", ns="b"))
    assert {key_of(o) for o in s.by_index(BY_CONTROLLER_UID, "u1")} == {"a/p1", "a/p2"}
    assert {key_of(o) for o in s.by_index(BY_NAMESPACE, "b")} == {"b/p3", "b/p4"}
    assert s.by_index(BY_CONTROLLER_UID, "other") == []  # not the controller ref
    # adoption by another controller moves the object between index values
    s.update(obj("p2", owner="u2", rv="2"))
    assert [key_of(o) for o in s.by_index(BY_CONTROLLER_UID, "u1")] == ["a/p1"]
    assert set(s.index_keys(BY_CONTROLLER_UID, "u2")) == {"a/p2", "b/p3"}
    s.delete("a/p1")
    assert "u1" not in s.index_values(BY_CONTROLLER_UID)
    with pytest.raises(KeyError):
        s.by_index("nope", "x")


@pytest.mark.parametrize("kind", [Store, EncodedStore])
def test_index_buckets_stay_exact_as_they_grow_and_shrink(kind: type[Store]) -> None:
    """Buckets change form (one key, a tuple, a set past 16 keys) as owners gain and lose
    objects; the index must answer exactly as a set would, through every form."""
    import random

    rng = random.Random(7)
    s = kind()
    model: dict[str, str | None] = {}  # name -> owner
    for _ in range(3000):
        name = f"p{rng.randrange(60)}"
        if rng.random() < 0.3:
            s.delete(f"a/{name}")
            model.pop(name, None)
        else:
            owner = rng.choice(["u1", "u2", "u3", None])
            s.add(obj(name, owner=owner))
            model[name] = owner
        for uid in ("u1", "u2", "u3"):
            want = {f"a/{n}" for n, o in model.items() if o == uid}
            keys = s.index_keys(BY_CONTROLLER_UID, uid)
            assert len(keys) == len(want) and set(keys) == want
            assert {key_of(o) for o in s.by_index(BY_CONTROLLER_UID, uid)} == want
            assert (uid in s.index_values(BY_CONTROLLER_UID)) == bool(want)
        assert set(s.index_keys(BY_NAMESPACE, "a")) == {f"a/{n}" for n in model}
    # one, a few and many: each form was met
    s.replace([obj(f"q{i}", owner="big") for i in range(40)] + [obj("solo", owner="one")], "9")
    assert len(s.index_keys(BY_CONTROLLER_UID, "big")) == 40
    assert s.index_keys(BY_CONTROLLER_UID, "one") == ["a/solo"]


def test_index_buckets_of_a_few_keys_are_small() -> None:
    import sys

    s = Store()
    for i in range(5):
        s.add(obj(f"p{i}", owner="u1"))
    s.add(obj("svc", owner="u2"))
    buckets = s._indices[BY_CONTROLLER_UID]
    assert sys.getsizeof(buckets["u1"]) < sys.getsizeof(set()) / 2
    assert buckets["u2"] == "a/svc"


def test_replace_rebuilds_everything() -> None:
    s = Store()
    s.add(obj("old", owner="u1"))
    s.replace([obj("n1", owner="u2"), obj("n2", ns="c")], "42")
    assert sorted(s.keys()) == ["a/n1", "c/n2"]
    assert s.by_index(BY_CONTROLLER_UID, "u1") == []
    assert len(s.by_index(BY_CONTROLLER_UID, "u2")) == 1
    assert s.resource_version == "42"


def test_custom_indexers_added_late_index_existing_objects() -> None:
    s = Store()
    s.add(obj("x", labels={"app": "web"}))
    s.add_indexers({"app": lambda o: [o["metadata"].get("labels", {}).get("app", "")]})
    assert [key_of(o) for o in s.by_index("app", "web")] == ["a/x"]
    with pytest.raises(ValueError):
        s.add_indexers({"app": by_controller_uid})


def test_default_transform_strips_managed_fields_and_last_applied() -> None:
    o = obj(
        "x",
        managedFields=[{"manager": "kubectl"}],
        annotations={LAST_APPLIED_ANNOTATION: "{...}", "keep": "me"},
    )
    out = default_transform(o)
    assert "managedFields" not in out["metadata"]
    assert out["metadata"]["annotations"] == {"keep": "me"}


def test_default_transform_interns_keys_and_short_strings() -> None:
    long_value = "x" * 100
    a = default_transform(obj("x", labels={"app": "web" + str(1)}, uid=long_value))
    b = default_transform(obj("y", labels={"app": "web" + str(1)}, uid=long_value[:]))
    (ka,) = a["metadata"]["labels"]
    (kb,) = b["metadata"]["labels"]
    assert ka is kb
    assert a["metadata"]["labels"]["app"] is b["metadata"]["labels"]["app"]
    assert a["metadata"]["uid"] == long_value
    assert intern_strings([{"k": 1, "n": None, "f": 1.5, "b": True}]) == [
        {"k": 1, "n": None, "f": 1.5, "b": True}
    ]


def test_transform_without_interning_works_in_place() -> None:
    o = obj("x", managedFields=[])
    assert make_transform(intern=False)(o) is o
    assert "managedFields" not in o["metadata"]


def test_transform_can_keep_last_applied() -> None:
    o = obj("x", managedFields=[], annotations={LAST_APPLIED_ANNOTATION: "{}"})
    out = make_transform(drop_last_applied=False)(o)
    assert "managedFields" not in out["metadata"]
    assert LAST_APPLIED_ANNOTATION in out["metadata"]["annotations"]
    assert make_transform()({"kind": "NoMeta"}) == {"kind": "NoMeta"}


def o(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "a", "name": name, "resourceVersion": rv}}


def test_relist_deltas_adds_updates_and_deletes_with_last_known_state() -> None:
    known = {"a/same": o("same", "1"), "a/changed": o("changed", "1"), "a/gone": o("gone", "3")}
    listed = [o("same", "1"), o("changed", "5"), o("new", "6")]
    deltas = relist_deltas(known, listed)
    assert Delta("update", "a/changed", known["a/changed"], listed[1]) in deltas
    assert Delta("add", "a/new", None, listed[2]) in deltas
    assert Delta("delete", "a/gone", known["a/gone"], None) in deltas
    assert len(deltas) == 3  # unchanged objects produce nothing


def test_relist_deltas_of_first_list_are_all_adds() -> None:
    deltas = relist_deltas({}, [o("x", "1"), o("y", "2")])
    assert [d.type for d in deltas] == ["add", "add"]
    assert relist_deltas({"a/x": o("x", "1")}, []) == [Delta("delete", "a/x", o("x", "1"), None)]


# -- EncodedStore -----------------------------------------------------------------------


def test_encoded_store_reads_equal_fresh_copies_and_follows_the_indexes() -> None:
    s = EncodedStore()
    o1 = obj("p1", owner="u1", labels={"app": "w"})
    assert s.add(o1) is None
    got = s.get("a/p1")
    assert got == o1 and got is not o1
    assert s.get_by_name("a", "p1") == o1 and s.get("a/p1") is not got
    got["metadata"]["name"] = "changed"  # a reader's copy: the cache is not affected
    assert s.get("a/p1") == o1
    s.add(obj("p2", owner="u1"))
    s.add(obj("p3", ns="b", owner="u2"))
    assert {key_of(o) for o in s.by_index(BY_CONTROLLER_UID, "u1")} == {"a/p1", "a/p2"}
    old = s.update(obj("p2", owner="u2", rv="2"))
    assert old == obj("p2", owner="u1")
    assert set(s.index_keys(BY_CONTROLLER_UID, "u2")) == {"a/p2", "b/p3"}
    assert [o["metadata"]["resourceVersion"] for o in s.by_index(BY_CONTROLLER_UID, "u2")
            if o["metadata"]["name"] == "p2"] == ["2"]  # fmt: skip
    assert s.delete("a/p1") == o1 and s.delete("a/p1") is None
    assert "u1" not in s.index_values(BY_CONTROLLER_UID)
    assert sorted(s.keys()) == ["a/p2", "b/p3"] and len(s) == 2 and "b/p3" in s
    assert sorted(key_of(o) for o in s.list()) == ["a/p2", "b/p3"]
    assert dict(s.items()) == {"a/p2": obj("p2", owner="u2", rv="2"), "b/p3": s.get("b/p3")}
    s.add_indexers({"name": lambda o: [o["metadata"]["name"]]})
    assert [key_of(o) for o in s.by_index("name", "p3")] == ["b/p3"]


def test_encoded_store_is_compact() -> None:
    # Alike objects (a controller's pods) share most of their JSON with the first one.
    s = EncodedStore()
    pods = [obj(f"job-{i}-worker-{i % 5}", owner=f"uid-{i:08d}", labels={"app": "w"},
                annotations={"note": "x" * 300}) for i in range(50)]  # fmt: skip
    s.replace(pods, "7")
    assert s.resource_version == "7" and len(s) == 50
    assert sorted(s.list(), key=key_of) == sorted(pods, key=key_of)
    sizes = [len(s.encode(o)) for o in s.list()]  # encode(): the stored form
    assert max(sizes) < len(orjson.dumps(pods[-1])) / 3


def test_encoded_store_replace_encoded_and_snapshot() -> None:
    s = EncodedStore()
    s.add(obj("old", owner="u1"))
    snap = s.snapshot()
    raws = [s.encode(obj("n1", owner="u2")), s.encode(obj("n2", ns="b"))]
    s.replace_encoded(raws, "9")
    assert sorted(s.keys()) == ["a/n1", "b/n2"] and s.resource_version == "9"
    assert s.index_values(BY_CONTROLLER_UID) == ["u2"]
    assert sorted(s.index_values(BY_NAMESPACE)) == ["a", "b"]
    # the snapshot taken before still shows (and decodes) the old content
    assert list(snap) == ["a/old"] and len(snap) == 1 and snap["a/old"] == obj("old", owner="u1")
    assert snap.get("a/n1") is None


def test_encoded_store_rejects_an_unencodable_object_unchanged() -> None:
    s = EncodedStore()
    s.add(obj("x"))
    with pytest.raises(TypeError):
        s.add(obj("x", rv="2", bad=object()))
    assert s.get("a/x") == obj("x")


def test_iter_relist_deltas_reads_known_only_where_needed() -> None:
    reads: list[str] = []

    class Known(dict[str, Any]):
        def get(self, key: str, default: Any = None) -> Any:
            reads.append(key)
            return super().get(key, default)

        def __getitem__(self, key: str) -> Any:
            reads.append(key)
            return super().__getitem__(key)

    known = Known({"a/same": obj("same"), "a/gone": obj("gone")})
    deltas = iter_relist_deltas(known, iter([obj("same"), obj("new")]))
    assert next(deltas) == Delta("add", "a/new", None, obj("new"))
    assert reads == ["a/same", "a/new"]
    assert list(deltas) == [Delta("delete", "a/gone", obj("gone"), None)]
    assert reads == ["a/same", "a/new", "a/gone"]
