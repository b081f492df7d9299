"""Typed views: defaults-aware reads over raw and defaulted dicts, tolerant of bad types."""

from __future__ import annotations

from typing import Any

import pytest

from msop.api import MSJob, apply_defaults
from msop.api import constants as c
from tests.support.builders import container, replica, valid_job


def test_replica_specs_by_canonical_type() -> None:
    view = MSJob(valid_job(worker=replica(4), Scheduler=replica(None)))
    assert list(view.replica_specs) == [c.SCHEDULER, c.WORKER]
    assert view.replica_specs[c.WORKER].replicas == 4
    assert view.replica_specs[c.SCHEDULER].replicas == 1
    assert view.replica_specs.replicas(c.PS) == 0
    assert c.PS not in view.replica_specs
    with pytest.raises(KeyError):
        view.replica_specs[c.PS]


def test_exact_canonical_key_wins() -> None:
    view = MSJob(valid_job(worker=replica(4), Worker=replica(2)))
    assert view.replica_specs[c.WORKER].replicas == 2


@pytest.mark.parametrize(
    ("extra", "attr", "expected"),
    [
        ({}, "restart_policy", c.NEVER),
        ({"restartPolicy": "ExitCode"}, "restart_policy", c.EXIT_CODE),
        ({"replicas": "3"}, "replicas", 1),
        ({}, "port", 2222),
    ],
)
def test_replica_spec_defaults(extra: dict[str, Any], attr: str, expected: Any) -> None:
    spec = {**replica(None), **extra}
    view = MSJob(valid_job(Worker=spec)).replica_specs[c.WORKER]
    assert getattr(view, attr) == expected


def test_port_and_main_container() -> None:
    spec = replica(1)
    spec["template"]["spec"]["containers"] = [
        container("sidecar"),
        container(ports=[{"name": "msjob-port", "containerPort": 3333}]),
    ]
    view = MSJob(valid_job(Worker=spec)).replica_specs[c.WORKER]
    assert view.main_container is not None
    assert view.main_container["ports"][0]["containerPort"] == 3333
    assert view.port == 3333
    assert len(view.containers) == 2


def test_run_policy_defaults_and_values() -> None:
    view = MSJob(valid_job())
    rp = view.run_policy
    assert (rp.clean_pod_policy, rp.suspend, rp.managed_by) == (c.CLEAN_RUNNING, False, None)
    assert rp.scheduling_policy is None
    assert (rp.ttl_seconds_after_finished, rp.active_deadline_seconds, rp.backoff_limit) == (
        None,
        None,
        None,
    )
    assert view.spec.success_policy == c.SUCCESS_DEFAULT
    assert view.spec.enable_dynamic_worker is False

    raw = valid_job()
    raw["spec"]["runPolicy"] = {
        "cleanPodPolicy": "All",
        "ttlSecondsAfterFinished": 60,
        "activeDeadlineSeconds": 600,
        "backoffLimit": 2,
        "suspend": True,
        "managedBy": "x",
        "schedulingPolicy": {
            "minAvailable": 3,
            "queue": "q",
            "priorityClass": "p",
            "minResources": {"cpu": 4, "memory": "1Gi", "bad": True},
            "scheduleTimeoutSeconds": 30,
        },
    }
    rp = MSJob(raw).run_policy
    assert (rp.clean_pod_policy, rp.ttl_seconds_after_finished) == ("All", 60)
    assert (rp.active_deadline_seconds, rp.backoff_limit, rp.suspend, rp.managed_by) == (
        600,
        2,
        True,
        "x",
    )
    sp = rp.scheduling_policy
    assert sp is not None
    assert (sp.min_available, sp.queue, sp.priority_class, sp.schedule_timeout_seconds) == (
        3,
        "q",
        "p",
        30,
    )
    assert sp.min_resources == {"cpu": 4, "memory": "1Gi"}


def test_status_view() -> None:
    raw = valid_job()
    raw["metadata"].update({"uid": "u1", "generation": 3})
    raw["status"] = {
        "conditions": [{"type": "Created", "status": "True", "reason": "R", "message": "m"}],
        "replicaStatuses": {"Worker": {"active": 2, "failed": 1, "selector": "a=b"}},
        "startTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 3,
        "workers": "2/2",
    }
    view = MSJob(raw)
    assert (view.name, view.namespace, view.uid, view.generation) == ("ms-job", "default", "u1", 3)
    st = view.status
    assert [x.type for x in st.conditions] == ["Created"]
    assert st.conditions[0].is_true
    assert st.replica_statuses[c.WORKER].active == 2
    assert st.replica_statuses[c.WORKER].succeeded == 0
    assert st.replica_statuses[c.WORKER].selector == "a=b"
    assert st.replica_statuses[c.PS].active == 0
    assert c.WORKER in st.replica_statuses
    assert (st.start_time, st.completion_time, st.observed_generation, st.workers) == (
        "2026-01-01T00:00:00Z",
        None,
        3,
        "2/2",
    )


@pytest.mark.parametrize("garbage", [{}, {"spec": 3, "status": []}, {"metadata": None}])
def test_views_tolerate_garbage(garbage: dict[str, Any]) -> None:
    view = MSJob(garbage)
    assert len(view.replica_specs) == 0
    assert view.status.conditions == []
    assert view.run_policy.clean_pod_policy == c.CLEAN_RUNNING
    assert view.name == ""


def test_view_over_defaulted_job_matches_raw() -> None:
    raw = valid_job(worker=replica(None))
    raw_view, defaulted = MSJob(raw), MSJob(apply_defaults(raw))
    for view in (raw_view, defaulted):
        assert view.replica_specs[c.WORKER].replicas == 1
        assert view.replica_specs[c.WORKER].restart_policy == c.NEVER
        assert view.replica_specs[c.WORKER].port == 2222


def test_constants() -> None:
    assert c.API_VERSION == "mindspore.gitee.com/v1"
    assert c.ROLE_BY_TYPE == {"Scheduler": "MS_SCHED", "PS": "MS_PSERVER", "Worker": "MS_WORKER"}
    assert c.canonical_replica_type("pS") == c.PS
    assert c.canonical_replica_type("chief") is None
    assert c.replica_type_label(c.SCHEDULER) == "scheduler"
