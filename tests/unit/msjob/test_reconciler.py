"""The reconciler against the fake cluster of ``tests.support.fakes`` (creates, deletes,
status writes, live gets), with injected API errors: what it sends, in which order, and
how it reacts."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from msop.api import constants as c
from msop.api.defaults import apply_defaults
from msop.controller.reconcile import Request, Result, TerminalError
from msop.kube.errors import ApiError
from msop.kube.resources import PODS, Resource
from msop.msjob.statuswrite import COUNT_WRITE_DELAY
from tests.support.builders import job
from tests.support.fakes import JOB, Harness

JSON = dict[str, Any]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
STAMP = "2026-01-01T00:00:00Z"

CONFLICT = ApiError(409, "Conflict", "the object has been modified")
EXISTS = ApiError(409, "AlreadyExists", 'pods "j-worker-0" already exists')
INVALID = ApiError(422, "Invalid", 'Pod "j-worker-0" is invalid: spec.containers: bad')
QUOTA = ApiError(403, "Forbidden", 'pods "j-worker-0" is forbidden: exceeded quota: pods')
SERVER = ApiError(500, "InternalError", "etcd timeout")
SCHEMA = ApiError(
    422,
    "Invalid",
    'MSJob.mindspore.gitee.com "j" is invalid: status.workers: bad',
    body={"details": {"name": "j", "kind": "MSJob"}},
)  # the stored object fails the CRD's schema (a failed patch test has no details)
GONE = ApiError(404, "NotFound", 'pods "j-worker-3" not found')


def _job(workers: int = 2, scheduler: bool = False) -> JSON:
    return job({"Worker": workers, **({"Scheduler": 1} if scheduler else {})}, rv="1")


def test_a_new_job_creates_the_service_then_every_pod_in_one_pass() -> None:
    h = Harness(_job(workers=2, scheduler=True))
    assert h.reconcile() == Result()
    assert h.cluster.calls == [
        ("create", "Service", "j-scheduler-0"),
        ("create", "Pod", "j-scheduler-0"),  # slow start: 1, then 2
        ("create", "Pod", "j-worker-0"),
        ("create", "Pod", "j-worker-1"),
        ("patch", "MSJob", "j"),
    ]
    env = {
        e["name"]: e.get("value")
        for e in h.cluster.objects[("Pod", "j-worker-0")]["spec"]["containers"][0]["env"]
    }
    assert env[c.ENV_SCHED_HOST] == "10.0.0.7"  # from the create response, same pass
    assert h.reasons() == ["SuccessfulCreateService", "SuccessfulCreatePod"]
    assert h.conditions()["Created"]["lastTransitionTime"] == STAMP
    assert h.cluster.job["status"]["replicaStatuses"]["Worker"]["active"] == 0


def test_with_other_jobs_waiting_a_new_job_takes_three_passes_and_one_status_write() -> None:
    h = Harness(_job(workers=2, scheduler=True))
    waiting = [3]
    h.reconciler.backlog = lambda: waiting[0]
    assert h.reconcile() == Result()  # done: the Service's watch event brings the job back
    assert h.cluster.calls == [("create", "Service", "j-scheduler-0")]
    assert h.reasons() == ["SuccessfulCreateService"]
    h.cluster.calls.clear()
    assert h.reconcile() == Result()  # the Service is cached now: the pods go out
    assert h.cluster.calls == [
        ("create", "Pod", "j-scheduler-0"),
        ("create", "Pod", "j-worker-0"),
        ("create", "Pod", "j-worker-1"),
    ]  # and Created waits for the pass the pods' watch events cause
    assert h.reasons() == ["SuccessfulCreateService", "SuccessfulCreatePod"]
    assert "status" not in h.cluster.job
    env = {
        e["name"]: e.get("value")
        for e in h.cluster.objects[("Pod", "j-worker-0")]["spec"]["containers"][0]["env"]
    }
    assert env[c.ENV_SCHED_HOST] == "10.0.0.7"
    h.cluster.calls.clear()
    assert h.reconcile() == Result()  # the pods are cached: one write, Created and counts
    assert h.cluster.calls == [("patch", "MSJob", "j")]
    assert h.conditions()["Created"]["lastTransitionTime"] == STAMP
    # the counts the cached pods show, not the 0 the creating pass knew of
    assert h.cluster.job["status"]["replicaStatuses"]["Worker"]["active"] == 2
    assert h.reasons() == ["SuccessfulCreateService", "SuccessfulCreatePod"]


def test_in_a_burst_a_refused_create_still_writes_its_status_at_once() -> None:
    h = Harness(_job(workers=2))
    h.reconciler.backlog = lambda: 3
    h.cluster.fail("create", "Pod", QUOTA)
    assert h.reconcile() == Result(requeue=True)
    assert h.cluster.calls[-1] == ("patch", "MSJob", "j")
    assert h.conditions()["ReplicaFailure"]["reason"] == "Forbidden"
    assert "Created" in h.conditions()


def _create_batches(h: Harness, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record the sizes of the reconciler's batches of creates (those sent together)."""
    batches: list[int] = []
    in_flight = [0]
    real = h.cluster.create

    async def create(res: Resource, body: Mapping[str, Any], namespace: str | None = None) -> JSON:
        if in_flight[0] == 0:
            batches.append(0)
        in_flight[0] += 1
        batches[-1] += 1
        await asyncio.sleep(0)  # let the rest of the batch start
        try:
            return await real(res, body, namespace)
        finally:
            in_flight[0] -= 1

    monkeypatch.setattr(h.cluster, "create", create)
    return batches


def test_creates_slow_start_until_a_pass_in_the_namespace_succeeded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h = Harness(_job(workers=6))
    batches = _create_batches(h, monkeypatch)
    h.reconcile()
    assert batches == [1, 2, 3]  # a namespace of unknown fate: 1, 2, 4, ...
    batches.clear()
    h.cluster.job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 12
    h.cluster.job["metadata"]["resourceVersion"] = "100"
    h.reconcile()
    assert batches == [6]  # the last pass here succeeded: one batch of up to 16
    batches.clear()
    h.cluster.job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 40
    h.cluster.job["metadata"]["resourceVersion"] = "101"
    h.cluster.fail("create", "Pod", SERVER)  # the first create of the pass fails
    with pytest.raises(ApiError):
        h.reconcile()
    assert batches == [16]  # a warm namespace's first batch, refused in part
    batches.clear()
    h.reconcile()
    assert batches == [1, 2, 4, 6]  # cold again: the 13 the failed batch did not make


def test_already_exists_counts_as_created() -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("create", "Pod", EXISTS)
    assert h.reconcile() == Result()
    assert "FailedCreatePod" not in h.reasons()
    assert "ReplicaFailure" not in h.conditions()
    assert h.expectations.satisfied((JOB, PODS))


def test_a_quota_refusal_on_the_service_holds_every_pod() -> None:
    h = Harness(_job(workers=2, scheduler=True))
    h.cluster.fail("create", "Service", QUOTA)
    assert h.reconcile() == Result(requeue=True)
    assert [call for call in h.cluster.calls if call[0] == "create"] == [
        ("create", "Service", "j-scheduler-0")
    ]
    failure = h.conditions()["ReplicaFailure"]
    assert (failure["reason"], failure["lastTransitionTime"]) == ("Forbidden", STAMP)
    assert h.reasons().count("FailedCreateService") == 1


def test_replica_failure_is_removed_once_creates_succeed() -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("create", "Pod", SERVER)
    with pytest.raises(ApiError):
        h.reconcile()
    assert "ReplicaFailure" in h.conditions()
    assert h.reconcile() == Result()
    assert "ReplicaFailure" not in h.conditions()
    assert ("Pod", "j-worker-0") in h.cluster.objects


def test_invalid_fails_the_job_and_the_next_pass_cleans_up() -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("create", "Pod", INVALID)
    assert h.reconcile() == Result()
    failed = h.conditions()["Failed"]
    assert (failed["reason"], failed["message"]) == ("Invalid", INVALID.message)
    assert h.cluster.job["status"]["completionTime"] == STAMP
    calls = len(h.cluster.calls)
    assert h.reconcile() == Result()  # final: nothing is created again
    assert [call[0] for call in h.cluster.calls[calls:]] in ([], ["patch"])


def test_scale_down_deletes_with_a_uid_precondition_and_tolerates_gone_objects() -> None:
    h = Harness(_job(workers=3))
    h.reconcile()
    h.cluster.job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 1
    h.cluster.fail("delete", "Pod", GONE, CONFLICT)  # gone, and replaced under that name
    h.reconcile()
    deletes = sorted((d["name"], d["uid_precondition"]) for d in h.cluster.deletes)
    assert deletes == [("j-worker-1", "uid-j-worker-1"), ("j-worker-2", "uid-j-worker-2")]
    assert all(d["grace_period_seconds"] is None for d in h.cluster.deletes)


def test_a_delete_refused_by_the_server_is_a_reconcile_error() -> None:
    h = Harness(_job(workers=2))
    h.reconcile()
    h.cluster.job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 1
    h.cluster.fail("delete", "Pod", SERVER)
    with pytest.raises(ApiError) as raised:
        h.reconcile()
    assert raised.value is SERVER


@pytest.mark.parametrize("error", [CONFLICT, ApiError(422, "Invalid", "test failed")])
def test_a_status_write_that_conflicts_requeues(error: ApiError) -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("patch", c.KIND, error)
    assert h.reconcile() == Result(requeue=True)
    assert "status" not in h.cluster.job
    assert h.reconcile() == Result()  # the next pass writes it
    assert "Created" in h.conditions()


def test_a_status_the_schema_refuses_is_terminal() -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("patch", c.KIND, SCHEMA)
    with pytest.raises(TerminalError):
        h.reconcile()


def test_an_invalid_job_whose_status_the_schema_refuses_still_gets_its_warning() -> None:
    """Stored under an older, looser schema: no status can be written, so the Warning
    naming the bad field is all the user gets, and it must go out."""
    job = _job(workers=1)
    job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = "abc"
    h = Harness(job)
    h.cluster.fail("patch", c.KIND, SCHEMA)
    with pytest.raises(TerminalError):
        h.reconcile()
    warnings = [(t, r) for t, r, _ in h.recorder.events if t == "Warning"]
    assert warnings == [("Warning", "InvalidSpec")]
    assert not [x for x in h.cluster.calls if x[0] == "create"]


def test_a_status_write_failing_with_500_is_a_reconcile_error() -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("patch", c.KIND, SERVER)
    with pytest.raises(ApiError):
        h.reconcile()


def test_pod_count_changes_are_coalesced_and_conditions_are_not() -> None:
    h = Harness(_job(workers=2))
    h.reconcile()
    patches = len(h.cluster.patches)
    h.cluster.set_phase("Pod", "j-worker-0", "Running")  # counts move, no condition
    h.now = NOW + timedelta(seconds=5)
    result = h.reconcile()
    assert len(h.cluster.patches) == patches  # held
    assert result.requeue_after == pytest.approx(COUNT_WRITE_DELAY)
    h.now += timedelta(seconds=0.4)
    result = h.reconcile()
    assert len(h.cluster.patches) == patches  # still held, for what is left of the delay
    assert result.requeue_after == pytest.approx(COUNT_WRITE_DELAY - 0.4)
    h.now += timedelta(seconds=0.6)
    h.reconcile()
    assert len(h.cluster.patches) == patches + 1  # written once the delay is over
    assert h.cluster.job["status"]["replicaStatuses"]["Worker"]["active"] == 2
    h.cluster.set_phase("Pod", "j-worker-1", "Running")  # all run: Running, at once
    h.now += timedelta(seconds=0.1)
    h.reconcile()
    assert len(h.cluster.patches) == patches + 2
    assert h.conditions()["Running"]["status"] == "True"


def test_a_restart_is_written_before_the_failed_pod_is_deleted() -> None:
    job = _job(workers=1)
    job["spec"]["msReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    h = Harness(job)
    h.reconcile()
    pod = h.cluster.objects[("Pod", "j-worker-0")]
    pod["status"] = {"phase": "Failed", "containerStatuses": [
        {"name": "mindspore", "state": {"terminated": {"exitCode": 137}}}]}  # fmt: skip
    calls = len(h.cluster.calls)
    h.reconcile()
    assert h.cluster.calls[calls:calls + 2] == [
        ("patch", c.KIND, "j"), ("delete", "Pod", "j-worker-0"),
    ]  # fmt: skip
    assert h.cluster.job["status"]["replicaStatuses"]["Worker"]["restarts"] == 1
    assert h.conditions()["Restarting"]["status"] == "True"


def test_a_deleted_job_the_cache_still_holds_gets_no_pods_again() -> None:
    """After a relist the pods of a deleted job (collected by the garbage collector) can
    be gone from the cache before the job is: its pods are not made again."""
    h = Harness(_job(workers=2, scheduler=True))
    h.reconcile()
    assert h.cluster.gets == 0  # a job's first children need no read
    h.cluster.live = None  # deleted; the garbage collector takes its children
    for kind, name in list(h.cluster.objects):
        h.cluster.objects.pop((kind, name))
    creates = [x for x in h.cluster.calls if x[0] == "create"]
    h.reconcile()
    assert [x for x in h.cluster.calls if x[0] == "create"] == creates
    assert h.cluster.gets == 1


def test_a_job_replaced_under_its_name_gets_no_pods_for_the_old_one() -> None:
    h = Harness(_job(workers=1))
    h.reconcile()
    h.cluster.live = {**h.cluster.job, "metadata": {**h.cluster.job["metadata"], "uid": "u-2"}}
    h.cluster.objects.clear()
    h.reconcile()
    assert [x for x in h.cluster.calls if x[0] == "create"] == [("create", "Pod", "j-worker-0")]


def test_a_lost_member_of_a_live_job_is_made_again_after_one_read() -> None:
    h = Harness(_job(workers=1))
    h.reconcile()
    h.cluster.live = h.cluster.job
    h.cluster.objects.clear()
    h.reconcile()
    assert h.cluster.calls.count(("create", "Pod", "j-worker-0")) == 2
    assert h.cluster.gets == 1


def test_the_defaulted_job_is_kept_encoded_and_reused_for_the_same_resource_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import msop.msjob.reconciler as reconciler_module

    h = Harness(_job(workers=2))
    calls: list[str] = []
    real = apply_defaults

    def counting(j: JSON) -> JSON:
        calls.append(j["metadata"]["resourceVersion"])
        return real(j)

    monkeypatch.setattr(reconciler_module, "apply_defaults", counting)
    h.reconcile()
    h.reconcile()  # sees the job with its first status written
    rv = h.cluster.job["metadata"]["resourceVersion"]
    cached_rv, cached = h.reconciler._defaulted[Request("ns", "j")]
    assert cached_rv == rv and isinstance(cached, bytes)
    assert h.reconciler._defaulted_codec.decode(cached) == real(h.cluster.job)
    assert len(cached) < len(orjson.dumps(real(h.cluster.job))) / 2  # deflated
    before = len(calls)
    h.reconcile()
    assert h.cluster.job["metadata"]["resourceVersion"] == rv  # nothing new to write
    assert len(calls) == before  # the cached defaulted job was used


def test_the_watch_event_of_our_own_status_write_needs_no_reconcile() -> None:
    h = Harness(_job(workers=1))
    request = Request("ns", "j")
    stale = copy.deepcopy(h.cluster.job)
    assert h.reconcile() == Result()  # creates the pod and writes the status
    written = h.cluster.job["metadata"]["resourceVersion"]
    assert written != stale["metadata"]["resourceVersion"]
    assert h.reconciler.caused_by_own_write(request, written)
    assert not h.reconciler.caused_by_own_write(request, stale["metadata"]["resourceVersion"])
    # A reconcile that found the cache still at the version the write replaced waits for
    # that write's event: it must not be skipped.
    h.cluster.cached = stale
    assert h.reconcile() == Result()
    assert not h.reconciler.caused_by_own_write(request, written)
    h.cluster.cached = None
    h.reconcile()  # the event came: planned from the stored job
    assert h.reconciler.caused_by_own_write(request, written)


def test_what_is_remembered_of_a_job_goes_with_it_or_when_nothing_is_left() -> None:
    """The reconciler's memory of a job (its last status write, held counts, writes in
    doubt) is dropped when the job is gone, and a pass that leaves nothing in it keeps
    no entry: the memory does not grow with every job ever seen. (No public seam says
    what is remembered, so this looks at it.)"""
    h = Harness(_job(workers=1))
    request = Request("ns", "j")
    h.cluster.fail("patch", c.KIND, CONFLICT)
    assert h.reconcile() == Result(requeue=True)  # the pod is made, the status conflicts
    assert request not in h.reconciler._memory  # its create settled; nothing written
    h.reconcile()
    written = h.cluster.job["metadata"]["resourceVersion"]
    assert h.reconciler.caused_by_own_write(request, written)
    h.cluster.job = {}  # deleted: the cache no longer has it
    assert h.reconcile() == Result()
    assert h.reconciler._memory == {}
    assert not h.reconciler.caused_by_own_write(request, written)
    h.reconciler.stopped()
    assert h.reconciler.unannounced() == 0


def test_a_service_that_misses_the_pods_is_patched_in_place_and_announced() -> None:
    h = Harness(_job(workers=1, scheduler=True))
    h.reconcile()
    for name in ("j-scheduler-0", "j-worker-0"):
        h.cluster.set_phase("Pod", name, "Running")
    h.reconcile()
    svc = h.cluster.objects[("Service", "j-scheduler-0")]
    svc["spec"]["selector"] = {**svc["spec"]["selector"], "mindspore-job-role": "scheduler"}
    h.cluster.calls.clear()
    h.reconcile()
    assert ("patch", "Service", "j-scheduler-0") in h.cluster.calls
    assert not [x for x in h.cluster.calls if x[0] in ("create", "delete")]
    assert "mindspore-job-role" not in svc["spec"]["selector"]
    assert svc["spec"]["clusterIP"] == "10.0.0.7"  # the same Service: MS_SCHED_HOST holds
    assert "UpdatedService" in h.reasons()
