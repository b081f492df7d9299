"""The reconciler's answer to a refused create, against the fake cluster of tests.support:
422 fails the job once, a policy 403 is retried without an error, anything else raises."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from msop.controller.reconcile import Result
from msop.kube.errors import ApiError
from msop.msjob.plan import Options
from msop.msjob.reconciler import refused_by_policy
from tests.support.builders import job
from tests.support.fakes import Cluster, Harness, Recorder

JSON = dict[str, Any]
NOW = datetime(2026, 1, 1, tzinfo=UTC)

INVALID = ApiError(
    422, "Invalid", 'Pod "j-worker-0" is invalid: spec.containers[0].resources.requests: bad'
)
QUOTA = ApiError(403, "Forbidden", 'pods "j-worker-0" is forbidden: exceeded quota: pods')
#: What kube-apiserver 1.36 answered to a Service create while etcd was being restarted.
ALLOCATION = ApiError.from_status(422, {
    "kind": "Status", "status": "Failure", "reason": "Invalid", "code": 422,
    "message": 'Service "j-scheduler-0" is invalid: spec.clusterIPs: Invalid value: [""]: '
               "failed to allocate IP: rpc error: code = Unavailable desc = error reading from "
               "server: EOF",
    "details": {"name": "j-scheduler-0", "kind": "Service", "causes": [{
        "reason": "FieldValueInvalid", "field": "spec.clusterIPs",
        "message": 'Invalid value: [""]: failed to allocate IP: rpc error: code = Unavailable'}]},
})  # fmt: skip
RBAC = ApiError(
    403, "Forbidden", 'pods is forbidden: User "x" cannot create resource "pods" in API group ""'
)


def _reconcile(
    error: ApiError, successes: int = 0, workers: int = 2
) -> tuple[Result | BaseException, Cluster, Recorder]:
    """One pass over a job of ``workers`` Workers whose pod creates fail with ``error``
    after the first ``successes``."""
    h = Harness(job({"Worker": workers}), now=NOW, options=Options())
    h.cluster.fail("create", "Pod", *([None] * successes), *([error] * workers))
    try:
        result: Result | BaseException = h.reconcile()
    except ApiError as e:
        result = e
    return result, h.cluster, h.recorder


def _creates(cluster: Cluster) -> list[str]:
    return [name for verb, _, name in cluster.calls if verb == "create"]


def _status(cluster: Cluster) -> JSON:
    (ops,) = cluster.patches
    status: JSON = ops[-1]["value"]
    return status


def _conditions(status: JSON) -> dict[str, JSON]:
    return {x["type"]: x for x in status["conditions"]}


def test_invalid_fails_the_job_once_without_an_error() -> None:
    result, cluster, recorder = _reconcile(INVALID)
    assert result == Result()  # no retry, no reconcile error
    assert _creates(cluster) == ["j-worker-0"]  # creates stop at the first refusal
    assert [(t, r) for t, r, _ in recorder.events] == [("Warning", "FailedCreatePod")]
    failed = _conditions(_status(cluster))["Failed"]
    assert (failed["status"], failed["reason"], failed["message"]) == (
        "True", "Invalid", INVALID.message,
    )  # fmt: skip
    assert "ReplicaFailure" not in _conditions(_status(cluster))
    assert _status(cluster)["completionTime"]


def test_one_event_when_a_whole_batch_is_refused() -> None:
    # Slow start: worker 0 alone (created), then workers 1 and 2 together (both refused).
    result, cluster, recorder = _reconcile(INVALID, successes=1, workers=3)
    assert result == Result()
    assert sorted(_creates(cluster)) == ["j-worker-0", "j-worker-1", "j-worker-2"]
    warnings = [(t, r) for t, r, _ in recorder.events if t == "Warning"]
    assert warnings == [("Warning", "FailedCreatePod")]
    assert _conditions(_status(cluster))["Failed"]["reason"] == "Invalid"


def test_policy_refusal_is_retried_without_an_error() -> None:
    result, cluster, recorder = _reconcile(QUOTA)
    assert result == Result(requeue=True)
    replica_failure = _conditions(_status(cluster))["ReplicaFailure"]
    assert (replica_failure["reason"], replica_failure["message"]) == ("Forbidden", QUOTA.message)
    assert "Failed" not in _conditions(_status(cluster))
    assert [(t, r) for t, r, _ in recorder.events] == [("Warning", "FailedCreatePod")]


@pytest.mark.parametrize(
    "error", [RBAC, ApiError(500, "InternalError", "etcd timeout"), ALLOCATION]
)
def test_other_refusals_are_reconcile_errors(error: ApiError) -> None:
    result, cluster, _ = _reconcile(error)
    assert result is error
    assert "ReplicaFailure" in _conditions(_status(cluster))


def test_refused_by_policy() -> None:
    assert refused_by_policy(QUOTA)
    assert refused_by_policy(ApiError(403, "Forbidden", 'violates PodSecurity "restricted"'))
    assert not refused_by_policy(RBAC)
    assert not refused_by_policy(INVALID)


def test_an_allocation_failure_is_retried_not_fatal() -> None:
    # A cluster IP the API server could not allocate (etcd restarting, range full) is
    # reported as 422 Invalid on spec.clusterIPs, but the same Service succeeds later.
    result, cluster, recorder = _reconcile(ALLOCATION)
    assert result is ALLOCATION  # a reconcile error: retried with backoff
    conditions = _conditions(_status(cluster))
    assert "Failed" not in conditions
    assert conditions["ReplicaFailure"]["reason"] == "Invalid"
    assert [(t, r) for t, r, _ in recorder.events] == [("Warning", "FailedCreatePod")]
