"""Children filed under another shard than their job's (``--shards`` changed while jobs
ran): the job's holder moves them to its shard before it plans from their absence, and
never recreates them or charges a restart for them (msop.msjob.refile)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from msop.api import constants as c
from msop.kube.resources import PODS
from msop.msjob import refile
from msop.msjob.plan import Options
from tests.support.builders import job
from tests.support.fakes import JOB, Harness

JSON = dict[str, Any]
NOW = datetime(2026, 1, 1, tzinfo=UTC)
EVERY = ["j-scheduler-0", "j-worker-0", "j-worker-1"]


def running(old: int | None) -> Harness:
    """A job of 1 Scheduler and 2 Workers, Running, its children made with shard label
    ``old`` (None: made without shards)."""
    options = Options(progress_port=0, shard_of=None if old is None else lambda _: old)
    h = Harness(job({"Scheduler": 1, "Worker": 2}, rv="1"), options=options)
    h.reconcile()
    for name in EVERY:
        h.cluster.set_phase("Pod", name, "Running")
    h.now = NOW + timedelta(seconds=5)
    h.reconcile()
    assert h.conditions()["Running"]["status"] == "True"
    assert "startTime" in h.cluster.job["status"]
    return h


def now_sharded(h: Harness, shard: int, watched: set[str]) -> None:
    """The job's shard is ``shard`` now (another N), held by a replica whose cache shows
    the children labelled ``watched`` (and the unlabelled ones); it has not seen the job
    before."""
    h.reconciler.options = replace(h.reconciler.options, shard_of=lambda _: shard)
    h.reconciler.forget(JOB)
    h.cluster.watched = watched
    h.cluster.calls.clear()
    h.now += timedelta(seconds=5)


def labels(h: Harness, kind: str) -> dict[str, str | None]:
    return {
        o["metadata"]["name"]: refile.shard_label(o) for o in h.cluster.of_kind(kind, every=True)
    }


def writes(h: Harness) -> list[tuple[str, str, str]]:
    return [x for x in h.cluster.calls if x[0] != "patch" or x[1] != c.KIND]


def test_children_hidden_under_another_shard_are_moved_not_recreated_nor_restarted() -> None:
    h = running(old=1)  # 4 shards: shard 1
    now_sharded(h, 5, watched={"5"})  # 6 shards: shard 5; label 1 is another replica's
    h.reconcile()
    selector = f"{c.LABEL_JOB_NAME}=j,{c.LABEL_OPERATOR_NAME}={c.OPERATOR_NAME}"
    assert h.cluster.lists == [("Pod", selector), ("Service", selector)]
    assert sorted(writes(h)) == sorted(
        [("patch", "Pod", n) for n in EVERY] + [("patch", "Service", "j-scheduler-0")]
    )
    assert set(labels(h, "Pod").values()) == {"5"} and labels(h, "Service") == {
        "j-scheduler-0": "5"
    }
    # The next pass plans from them: nothing to do, nothing listed again.
    h.cluster.calls.clear()
    h.reconcile()
    assert writes(h) == []
    assert len(h.cluster.lists) == 2
    status = h.cluster.job["status"]
    assert all(r.get("restarts", 0) == 0 for r in status["replicaStatuses"].values())
    assert h.conditions()["Running"]["status"] == "True"
    assert "Restarting" not in h.conditions()


def test_children_of_a_shard_also_held_here_are_moved_without_a_list() -> None:
    h = running(old=2)
    now_sharded(h, 0, watched={"0", "2"})  # this replica holds the old label's shard too
    h.reconcile()
    assert h.cluster.lists == []  # every pod is in the cache: nothing may hide
    assert set(labels(h, "Pod").values()) == {"0"}
    assert labels(h, "Service") == {"j-scheduler-0": "0"}
    assert [x for x in h.cluster.calls if x[0] == "create"] == []


def test_a_pod_really_gone_is_listed_for_once_then_counts_as_lost() -> None:
    h = running(old=3)
    now_sharded(h, 3, watched={"3"})  # N did not change
    del h.cluster.objects[("Pod", "j-worker-1")]
    h.reconcile()
    assert len(h.cluster.lists) == 2  # one look at the API server: nothing hidden
    assert h.conditions()["Restarting"]["status"] == "True"  # lost, as without shards
    # Listed once while the shard is held: the restart's passes plan at once.
    for _ in range(3):
        h.now += timedelta(seconds=5)
        h.reconcile()
    assert ("create", "Pod", "j-worker-1") in h.cluster.calls
    assert len(h.cluster.lists) == 2


def test_without_shards_or_for_a_new_job_nothing_is_listed() -> None:
    h = running(old=None)
    del h.cluster.objects[("Pod", "j-worker-1")]
    h.now += timedelta(seconds=5)
    h.reconcile()
    assert h.cluster.lists == []
    fresh = Harness(job({"Worker": 2}, rv="1"), options=Options(progress_port=0,
                                                                 shard_of=lambda _: 1))  # fmt: skip
    fresh.reconcile()  # it never started: nothing of it can exist under another shard
    assert fresh.cluster.lists == []
    assert set(labels(fresh, "Pod").values()) == {"1"}


def test_unlabelled_children_stay_as_they_are() -> None:
    h = running(old=None)  # made without shards: every replica watches them
    now_sharded(h, 4, watched={"4"})
    h.reconcile()
    assert h.cluster.lists == []
    assert writes(h) == []
    assert set(labels(h, "Pod").values()) == {None}


def test_a_child_gone_or_replaced_before_its_move_is_left_alone() -> None:
    h = running(old=1)
    now_sharded(h, 5, watched={"5"})
    real_list = h.cluster.list

    async def list_then_replace(*args: Any, **kw: Any) -> JSON:
        out = await real_list(*args, **kw)
        if args[0].kind == "Pod":  # worker-1 is deleted and made again by someone else
            h.cluster.objects[("Pod", "j-worker-1")]["metadata"]["uid"] = "uid-other"
            del h.cluster.objects[("Pod", "j-worker-0")]
        return out

    h.cluster.list = list_then_replace  # type: ignore[method-assign]
    h.reconcile()  # the refused patches are no error
    assert labels(h, "Pod") == {"j-scheduler-0": "5", "j-worker-1": "1"}
    assert h.reconciler.expectations.satisfied((JOB, PODS))


def test_may_hide_only_for_a_started_unfinished_unsuspended_job_missing_pods() -> None:
    j = job({"Worker": 2}, rv="1")
    started = {**j, "status": {"startTime": "2026-01-01T00:00:00Z"}}
    assert refile.may_hide(started, started, cached_pods=1, creates=False)
    assert not refile.may_hide(started, started, cached_pods=2, creates=False)
    assert refile.may_hide(started, started, cached_pods=2, creates=True)  # a Service
    assert not refile.may_hide(j, j, cached_pods=0, creates=True)  # never started
    done = {**started, "status": {**started["status"], "conditions": [
        {"type": "Succeeded", "status": "True"}]}}  # fmt: skip
    assert not refile.may_hide(done, done, cached_pods=0, creates=True)
    suspended = {**started, "spec": {**started["spec"], "runPolicy": {"suspend": True}}}
    assert not refile.may_hide(started, suspended, cached_pods=0, creates=True)


def test_the_move_patch_carries_the_childs_uid() -> None:
    child = {"metadata": {"name": "j-worker-0", "uid": "u-9", "labels": {c.LABEL_SHARD: "1"}}}
    assert refile.refile_patch(child, 4) == {
        "metadata": {"uid": "u-9", "labels": {c.LABEL_SHARD: "4"}}
    }
    assert refile.misfiled([child], 1) == [] and refile.misfiled([child], 4) == [child]
