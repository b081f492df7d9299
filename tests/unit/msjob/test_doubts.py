"""Writes in doubt (``msop.msjob.doubts``): a create or status write that got no answer,
or a 5xx, may have been stored. Its Events are held and announced once, when it proves
stored, through the reconciler against the fake cluster of ``tests.support.fakes``
(with answers lost after the write was carried out), and the ledger on its own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from msop.api import constants as c
from msop.controller.events import EventRecorder
from msop.controller.reconcile import Request
from msop.kube.errors import ApiError, ApiUnavailable
from msop.kube.resources import Resource
from msop.msjob.doubts import Doubts, in_doubt
from msop.msjob.plan import Event
from tests.support.builders import job
from tests.support.fakes import Harness, Recorder

JSON = dict[str, Any]
NOW = datetime(2026, 1, 1, tzinfo=UTC)

EXISTS = ApiError(409, "AlreadyExists", 'pods "j-worker-0" already exists')
QUOTA = ApiError(403, "Forbidden", 'pods "j-worker-0" is forbidden: exceeded quota: pods')
SERVER = ApiError(500, "InternalError", "etcd timeout")


def _job(workers: int = 2) -> JSON:
    return job({"Worker": workers}, rv="1")


@pytest.mark.parametrize("error", [SERVER, ApiError(503, "ServiceUnavailable", "etcd down")])
def test_a_transition_is_announced_once_however_often_its_status_write_fails(
    error: ApiError,
) -> None:
    """An API outage fails the status write that carries Running several times: the
    MSJobRunning event goes out once, with the write that stores it."""
    h = Harness(_job(workers=1))
    h.reconcile()
    h.cluster.set_phase("Pod", "j-worker-0", "Running")
    for _ in range(3):
        h.cluster.fail("patch", c.KIND, error)
        with pytest.raises(ApiError):
            h.reconcile()
        assert "MSJobRunning" not in h.reasons()
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1
    assert h.conditions()["Running"]["status"] == "True"


RESET = ApiUnavailable("POST /api/v1/namespaces/ns/pods: connection reset")


def test_a_create_stored_without_an_answer_is_announced_once_the_cache_shows_it() -> None:
    h = Harness(_job(workers=2))
    h.cluster.lose_answer("create", "Pod", RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    # worker-0 was stored (answer lost); worker-1 was not attempted after the failure.
    assert ("Pod", "j-worker-0") in h.cluster.objects
    h.reconcile()
    created = [m for _, r, m in h.recorder.events if r == "SuccessfulCreatePod"]
    named = [n for m in created for n in m.split(": ", 1)[1].split(", ")]
    assert sorted(named) == ["j-worker-0", "j-worker-1"]


def test_a_create_in_doubt_the_cache_does_not_show_yet_is_announced_on_already_exists() -> None:
    h = Harness(_job(workers=1))
    h.cluster.lose_answer("create", "Pod", RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    h.cluster.objects.pop(("Pod", "j-worker-0"))  # the cache lags behind
    h.cluster.fail("create", "Pod", EXISTS)  # ... the API server has it
    h.reconcile()
    assert h.reasons().count("SuccessfulCreatePod") == 1


def test_a_create_in_doubt_that_was_not_stored_is_announced_once_when_made() -> None:
    h = Harness(_job(workers=1))
    h.cluster.fail("create", "Pod", RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    h.reconcile()
    assert h.reasons().count("SuccessfulCreatePod") == 1


def test_a_status_stored_without_an_answer_is_announced_once() -> None:
    h = Harness(_job(workers=1))
    h.reconcile()
    h.cluster.set_phase("Pod", "j-worker-0", "Running")
    h.cluster.lose_answer("patch", c.KIND, RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    assert h.conditions()["Running"]["status"] == "True"  # stored
    assert "MSJobRunning" not in h.reasons()
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1


def test_events_held_for_writes_in_doubt_are_counted_at_stop(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A process that stops with writes in doubt (its lease lost mid-outage) never writes
    their Events, and its successor, seeing the objects stored, does not either: the stop
    says how many, as the recorder does for its own queue."""
    h = Harness(_job(workers=1))
    h.cluster.lose_answer("create", "Pod", RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    assert h.reconciler.unannounced() == 1
    h.reconciler.stopped()
    line = next(x for x in capsys.readouterr().out.splitlines() if "events not written" in x)
    assert "count=1" in line
    h.reconcile()  # seen stored: announced, nothing held any more
    assert h.reasons().count("SuccessfulCreatePod") == 1
    assert h.reconciler.unannounced() == 0
    h.reconciler.stopped()
    assert "events not written" not in capsys.readouterr().out


def test_a_job_let_go_says_how_many_events_of_writes_in_doubt_go_with_it() -> None:
    """Its shard handed over or lost (--shards): the next holder sees the pod stored and
    announces nothing, so forgetting the job counts the Event it held."""
    h = Harness(_job(workers=1))
    h.cluster.lose_answer("create", "Pod", RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    assert h.reconciler.forget(Request("ns", "j")) == 1
    assert h.reconciler.unannounced() == 0
    assert h.reconciler.forget(Request("ns", "j")) == 0  # nothing left


def _running_written_without_an_answer() -> tuple[Harness, JSON]:
    """A job whose worker runs and whose status write (Running) was stored but not
    answered; returns the harness and the job as it was before that write."""
    h = Harness(_job(workers=1))
    h.reconcile()
    h.cluster.set_phase("Pod", "j-worker-0", "Running")
    before = h.cluster.job
    h.cluster.lose_answer("patch", c.KIND, RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    return h, before


def test_a_status_in_doubt_the_cache_does_not_show_yet_is_announced_once_it_does() -> None:
    """After an API server restart the cache can still hold the job as it was before the
    unanswered write: that write is neither taken as lost (its Events dropped) nor made
    again with its Events twice."""
    h, before = _running_written_without_an_answer()
    h.cluster.cached = before  # stored, but the cache lags
    h.reconcile()  # plans the same write again over the stale status: refused
    assert "MSJobRunning" not in h.reasons()
    h.cluster.cached = None  # the watch delivers the stored job
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1


def test_a_status_in_doubt_that_was_not_stored_is_announced_once_when_written() -> None:
    h = Harness(_job(workers=1))
    h.reconcile()
    h.cluster.set_phase("Pod", "j-worker-0", "Running")
    h.cluster.fail("patch", c.KIND, RESET)
    with pytest.raises(ApiError):
        h.reconcile()
    h.reconcile()  # the cache shows the same version: written again, announced with it
    assert h.reasons().count("MSJobRunning") == 1
    assert h.reconciler.unannounced() == 0
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1


def test_a_status_in_doubt_retried_later_is_still_announced_once_stored() -> None:
    """The write stored without an answer is tried again in later passes while the API
    server is down (connection refused), each with its own timestamps: the stored one
    still counts as the transition announced."""
    h, before = _running_written_without_an_answer()
    h.cluster.cached = before  # the cache lags behind the stored write
    h.now = NOW + timedelta(seconds=5)
    h.cluster.fail("patch", c.KIND, ApiUnavailable("connection refused"))
    with pytest.raises(ApiError):
        h.reconcile()
    h.cluster.cached = None
    h.reconcile()
    assert h.reasons().count("MSJobRunning") == 1


@pytest.mark.parametrize(
    ("verb", "kind"), [("create", "Pod"), ("patch", c.KIND)], ids=["create", "status"]
)
def test_a_pass_cancelled_with_a_write_out_counts_it_in_doubt(verb: str, kind: str) -> None:
    """A lost Lease stops the process at once, cancelling passes whose writes are out:
    they may be stored, so their Events are counted as held, not silently dropped."""
    h = Harness(_job(workers=1))
    if verb == "patch":
        h.reconcile()
        h.cluster.set_phase("Pod", "j-worker-0", "Running")
    real = getattr(h.cluster, verb)
    out = asyncio.Event()

    async def hang(res: Resource, *args: Any, **kw: Any) -> JSON:
        if res.kind != kind:
            answer: JSON = await real(res, *args, **kw)
            return answer
        out.set()
        await asyncio.Event().wait()
        raise AssertionError("never answered")

    setattr(h.cluster, verb, hang)

    async def cancel_mid_write() -> None:
        task = asyncio.create_task(h.reconciler.reconcile(Request("ns", "j")))
        await out.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_write())
    assert h.reconciler.unannounced() == 1


# The ledger on its own.


def test_in_doubt_are_writes_without_an_answer_and_server_errors() -> None:
    assert in_doubt(RESET)
    assert in_doubt(SERVER)
    assert in_doubt(ApiError(503, "ServiceUnavailable", "etcd down"))
    assert not in_doubt(EXISTS)
    assert not in_doubt(QUOTA)
    assert not in_doubt(ApiError(422, "Invalid", "bad"))


def _ledger() -> tuple[Doubts, Recorder, EventRecorder]:
    recorder = Recorder()
    return Doubts(), recorder, cast("EventRecorder", recorder)


def _cached(rv: str, *conditions: tuple[str, str, str]) -> JSON:
    """The job as the cache shows it at ``rv``, with conditions (type, status, reason)."""
    return {
        "metadata": {"namespace": "ns", "name": "j", "resourceVersion": rv},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "lastTransitionTime": "x"}
                for t, s, r in conditions
            ]
        },
    }


def _pod(name: str) -> JSON:
    return {"metadata": {"name": name}}


def test_a_refusal_keeps_in_doubt_only_what_may_be_stored() -> None:
    doubts, recorder, announce = _ledger()
    assert doubts.sending("Pod", ["a", "b", "c"]) == set()
    assert not doubts.refused("Pod", "a", QUOTA, set())  # refused: not stored
    assert not doubts.refused("Pod", "b", SERVER, set())  # may be stored
    assert not doubts.refused("Pod", "c", EXISTS, set())  # someone else's
    assert doubts.creates["Pod"] == {"b"}
    assert doubts.unannounced() == 1 and doubts.held()
    earlier = doubts.sending("Pod", ["b", "d"])
    assert earlier == {"b"}
    assert not doubts.refused("Pod", "b", QUOTA, earlier)  # the earlier create may have
    assert doubts.refused("Pod", "b", EXISTS, earlier)  # ... and it did
    doubts.created(announce, _cached("1"), "Pod", ["d"], {"b"})
    assert recorder.events == [
        ("Normal", "SuccessfulCreatePod", "Created pod: d"),
        ("Normal", "SuccessfulCreatePod", "Created pod: b"),
    ]
    assert not doubts.held() and doubts.unannounced() == 0


def test_settling_announces_the_children_the_cache_shows() -> None:
    doubts, recorder, announce = _ledger()
    doubts.sending("Pod", ["a", "b"])
    doubts.sending("Service", ["s"])
    doubts.settle(announce, _cached("1"), [_pod("b"), _pod("x")], [])
    assert recorder.events == [("Normal", "SuccessfulCreatePod", "Created pod: b")]
    assert doubts.creates == {"Pod": {"a"}, "Service": {"s"}}
    assert doubts.unannounced() == 2


def test_a_status_in_doubt_is_judged_once_the_cache_moved_past_its_base() -> None:
    running = ("Running", "True", "Running")
    events = [Event("Normal", "MSJobRunning", "running"), Event("Normal", "Other", "x")]
    doubts, recorder, announce = _ledger()
    doubts.status_failed(QUOTA, _cached("1", running)["status"], events, "1")
    assert not doubts.held()  # refused: not stored, nothing to announce
    doubts.status_failed(asyncio.CancelledError(), _cached("1", running)["status"], events, "1")
    assert doubts.unannounced() == 2
    doubts.settle(announce, _cached("1"), [], [])  # the cache cannot tell yet
    assert recorder.events == [] and doubts.held()
    doubts.settle(announce, _cached("2", running, ("Created", "True", "Created")), [], [])
    assert [r for _, r, _ in recorder.events] == ["MSJobRunning", "Other"]
    assert not doubts.held()


def test_a_status_in_doubt_not_stored_is_forgotten_unannounced() -> None:
    running = ("Running", "True", "Running")
    doubts, recorder, announce = _ledger()
    doubts.status_failed(RESET, _cached("1", running)["status"], [Event("Normal", "R", "")], "1")
    doubts.settle(announce, _cached("2", ("Running", "False", "Other")), [], [])
    assert recorder.events == [] and not doubts.held()
    doubts.status_failed(RESET, _cached("1", running)["status"], [Event("Normal", "R", "")], "1")
    doubts.status_written()  # a later write over the same version took its place
    assert not doubts.held() and doubts.unannounced() == 0
