"""The MSJob controller's wiring: made whole, with the caches its systems ask for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from msop.api.resources import MSJOBS
from msop.controller.events import EventRecorder
from msop.controller.manager import Manager
from msop.controller.reconcile import Request
from msop.kube.resources import PODGROUPS, PODS, RESOURCEFLAVORS, SERVICES, WORKLOADS
from msop.msjob import gang, kueue
from msop.msjob.reconciler import MSJobReconciler
from msop.msjob.settings import Settings, WorkerLost
from msop.msjob.setup import setup
from tests.support.clients import NoApiServer


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
    setup(plain, Settings(progress_port=0))
    plain_kinds = [inf.resource.kind for inf in plain.informers.informers()]
    assert sorted(plain_kinds) == sorted([MSJOBS.kind, PODS.kind, SERVICES.kind])


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
