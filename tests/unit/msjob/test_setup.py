"""The MSJob controller's wiring: made whole, with the caches its systems ask for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from msop.api.resources import MSJOBS
from msop.controller.events import EventRecorder
from msop.controller.manager import Manager
from msop.controller.reconcile import Request
from msop.kube.objects import JSON, format_time
from msop.kube.resources import NODES, PODGROUPS, PODS, RESOURCEFLAVORS, SERVICES, WORKLOADS
from msop.msjob import gang, kueue, nodehealth
from msop.msjob.reconciler import MSJobReconciler
from msop.msjob.settings import Settings, WorkerLost
from msop.msjob.setup import setup
from tests.support.builders import NOW, T0, pod
from tests.support.clients import NoApiServer

NOW_S = format_time(NOW)


def _manager() -> Manager:
    return Manager(
        NoApiServer(),
        metrics_bind_address="0",
        health_probe_bind_address="0",
    )


def test_the_reconciler_and_its_recorder_read_the_controllers_own_queue() -> None:
    controller = setup(_manager(), Settings(max_concurrent_reconciles=2, progress_port=0))
    reconciler = controller.reconciler
    assert isinstance(reconciler, MSJobReconciler)
    recorder = reconciler.recorder
    assert isinstance(recorder, EventRecorder) and recorder.busy is not None
    assert reconciler.backlog() == 0 and not recorder.busy()
    controller.queue.add(Request("ns", "a"))
    assert reconciler.backlog() == 1 and not recorder.busy()
    controller.queue.add(Request("ns", "b"))
    assert reconciler.backlog() == 2 and recorder.busy()


def test_the_enabled_systems_start_with_the_caches_they_ask_for() -> None:
    m = _manager()
    settings = Settings(namespaces=("a", "b"), kueue=True, gang_scheduling=True, progress_port=0)
    controller = setup(m, settings)
    reconciler = controller.reconciler
    assert isinstance(reconciler, MSJobReconciler)
    assert [type(s) for s in reconciler.scheduling] == [kueue.Kueue, gang.Volcano]
    kinds = [(inf.resource.kind, inf.namespace) for inf in m.informers.informers()]
    for res in (MSJOBS, PODS, SERVICES, WORKLOADS, PODGROUPS):
        assert (res.kind, "a") in kinds and (res.kind, "b") in kinds
    assert (RESOURCEFLAVORS.kind, None) in kinds

    plain = _manager()
    setup(plain, Settings(progress_port=0, node_lost_after=None))
    plain_kinds = [inf.resource.kind for inf in plain.informers.informers()]
    assert sorted(plain_kinds) == sorted([MSJOBS.kind, PODS.kind, SERVICES.kind])
    # By default the nodes too, cluster-scoped, each kept as its health alone.
    default = _manager()
    setup(default, Settings(namespaces=("a", "b"), progress_port=0))
    [nodes] = [inf for inf in default.informers.informers() if inf.resource == NODES]
    assert nodes.namespace is None and nodes.transform is nodehealth.node_projection


def _node(name: str, ready: str = "True", rv: str = "1", beat: str = T0) -> JSON:
    return {
        "metadata": {"name": name, "resourceVersion": rv, "labels": {"big": "x" * 100}},
        "status": {
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": T0,
                            "lastHeartbeatTime": beat}],
            "images": [{"names": ["a" * 200]}],
        },
    }  # fmt: skip


def test_a_node_event_enqueues_only_the_jobs_with_pods_on_that_node() -> None:
    m = _manager()
    controller = setup(m, Settings(namespaces=("ns",), progress_port=0))
    [pods_cache] = [inf for inf in m.informers.informers() if inf.resource == PODS]
    [nodes_cache] = [inf for inf in m.informers.informers() if inf.resource == NODES]
    made: list[JSON] = []
    for job_name, node in (("a", "n1"), ("a", "n1"), ("b", "n2"), ("c", "n1"), ("d", None)):
        p = pod("Worker", len(made))
        p["metadata"]["ownerReferences"][0]["name"] = job_name
        if node:
            p["spec"]["nodeName"] = node
        made.append(p)
    pods_cache.store.replace(made, "1")
    [handler] = [w.handler for w in controller._watches if w.source is nodes_cache]
    queue = controller.queue
    # The initial list and a heartbeat: nothing (the projection keeps no heartbeat).
    handler.create(_node("n1"), queue, initial=True)
    beat = nodehealth.node_projection(_node("n1", rv="2", beat=NOW_S))
    handler.update(nodehealth.node_projection(_node("n1")), beat, queue)
    assert len(queue) == 0
    # Not ready: the jobs on n1 alone, each once.
    handler.update(beat, nodehealth.node_projection(_node("n1", "Unknown", rv="3")), queue)
    assert len(queue) == 2 and set(queue.queued()) == {Request("ns", "a"), Request("ns", "c")}


def test_after_a_long_outage_every_job_is_planned_again() -> None:
    # MultiKueue's copies are held after an outage of --multikueue-worker-lost-timeout:
    # every cached job is planned again as soon as the API server answers, not at its
    # next event (a relist that finds the cache unchanged sends none).
    m = _manager()
    settings = Settings(
        namespaces=("a",), kueue=True, progress_port=0, worker_lost=WorkerLost(60.0, 420.0)
    )
    controller = setup(m, settings)
    [jobs] = [inf for inf in m.informers.informers() if inf.resource.kind == MSJOBS.kind]
    meta = {"name": "j", "namespace": "a", "uid": "u", "resourceVersion": "1"}
    job = {"apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob", "metadata": meta}
    jobs.store.replace([job], "1")
    contact = m.client.contact
    now = datetime.now(UTC)
    contact.missed(now - timedelta(seconds=5))  # too short to hold anything
    assert len(controller.queue) == 0
    contact.missed(now - timedelta(seconds=120))
    assert len(controller.queue) == 1

    off = _manager()
    setup(off, Settings(namespaces=("a",), kueue=True, progress_port=0,
                        worker_lost=WorkerLost(0.0, 420.0)))  # fmt: skip
    assert off.client.contact._subscribers == []
