"""informer_watching with several informers of one resource (namespaces, shards)."""

from __future__ import annotations

from msop.informers.metrics import Watching


def test_one_resource_watches_while_every_running_reflector_does() -> None:
    gauge = Watching()
    a, b = object(), object()
    state = {"a": True, "b": False}
    gauge.start(a, "pods", lambda: state["a"])
    gauge.start(b, "pods", lambda: state["b"])
    assert gauge.value("pods") == 0  # b still lists
    state["b"] = True
    assert gauge.value("pods") == 1
    samples = {s.labels["resource"]: s.value for f in gauge.collect() for s in f.samples}
    assert samples == {"pods": 1}
    # A reflector stopped for good (a shard handed over) leaves the others' verdict.
    gauge.stop(b)
    assert gauge.value("pods") == 1
    # None runs any more: the resource is not followed, and still reported.
    gauge.stop(a)
    samples = {s.labels["resource"]: s.value for f in gauge.collect() for s in f.samples}
    assert samples == {"pods": 0}
