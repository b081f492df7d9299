"""apply_defaults: one row per defaulting rule, plus purity and idempotence."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from msop.api import apply_defaults
from msop.api import constants as c
from tests.support.builders import container, replica, valid_job

MS_PORT = {"name": "msjob-port", "containerPort": 2222, "protocol": "TCP"}


def _ports(obj: dict[str, Any], rtype: str = "Worker") -> Any:
    return obj["spec"]["msReplicaSpecs"][rtype]["template"]["spec"]["containers"][0].get("ports")


@pytest.mark.parametrize(
    ("given", "path", "expected"),
    [
        (valid_job(Worker=replica(None)), ("msReplicaSpecs", "Worker", "replicas"), 1),
        (valid_job(Worker=replica(0)), ("msReplicaSpecs", "Worker", "replicas"), 0),
        (valid_job(Worker=replica(5)), ("msReplicaSpecs", "Worker", "replicas"), 5),
        (valid_job(Worker=replica()), ("msReplicaSpecs", "Worker", "restartPolicy"), "Never"),
        (
            valid_job(Worker=replica(restartPolicy="")),
            ("msReplicaSpecs", "Worker", "restartPolicy"),
            "Never",
        ),
        (
            valid_job(Worker=replica(restartPolicy="OnFailure")),
            ("msReplicaSpecs", "Worker", "restartPolicy"),
            "OnFailure",
        ),
        (valid_job(), ("runPolicy", "cleanPodPolicy"), "Running"),
        (valid_job(), ("successPolicy",), ""),
        (valid_job(worker=replica(3)), ("msReplicaSpecs", "Worker", "replicas"), 3),
        (valid_job(WORKER=replica(3)), ("msReplicaSpecs", "Worker", "replicas"), 3),
        (valid_job(ps=replica(2)), ("msReplicaSpecs", "PS", "replicas"), 2),
        (valid_job(sCheDuler=replica()), ("msReplicaSpecs", "Scheduler", "replicas"), 1),
    ],
    ids=[
        "replicas-unset-1",
        "replicas-0-kept",
        "replicas-5-kept",
        "restart-never",
        "restart-empty-never",
        "restart-kept",
        "clean-pod-running",
        "success-policy-empty",
        "key-worker",
        "key-WORKER",
        "key-ps",
        "key-sCheDuler",
    ],
)
def test_default_values(given: dict[str, Any], path: tuple[str, ...], expected: Any) -> None:
    value: Any = apply_defaults(given)["spec"]
    for key in path:
        value = value[key]
    assert value == expected


@pytest.mark.parametrize(
    ("run_policy", "success_policy", "expected_clean", "expected_success"),
    [
        ({"cleanPodPolicy": "None"}, "AllWorkers", "None", "AllWorkers"),
        ({"cleanPodPolicy": "All", "suspend": True}, "", "All", ""),
        ({"backoffLimit": 3}, None, "Running", ""),
    ],
)
def test_explicit_policies_kept(
    run_policy: dict[str, Any],
    success_policy: str | None,
    expected_clean: str,
    expected_success: str,
) -> None:
    given = valid_job()
    given["spec"]["runPolicy"] = run_policy
    if success_policy is not None:
        given["spec"]["successPolicy"] = success_policy
    out = apply_defaults(given)
    assert out["spec"]["runPolicy"]["cleanPodPolicy"] == expected_clean
    assert out["spec"]["successPolicy"] == expected_success
    for key, value in run_policy.items():
        assert out["spec"]["runPolicy"][key] == value


@pytest.mark.parametrize(
    ("ports", "expected"),
    [
        (None, [MS_PORT]),
        ([], [MS_PORT]),
        (
            [{"name": "metrics", "containerPort": 8080}],
            [{"name": "metrics", "containerPort": 8080}, MS_PORT],
        ),
        (
            [{"name": "msjob-port", "containerPort": 3333}],
            [{"name": "msjob-port", "containerPort": 3333}],
        ),
        # 2222/TCP under another name: a second 2222/TCP port would make the pod invalid.
        ([{"name": "other", "containerPort": 2222}], [{"name": "other", "containerPort": 2222}]),
        (
            [{"name": "udp", "containerPort": 2222, "protocol": "UDP"}],
            [{"name": "udp", "containerPort": 2222, "protocol": "UDP"}, MS_PORT],
        ),
    ],
    ids=["no-ports", "empty", "other-port", "custom-msjob-port", "2222-other-name", "2222-udp"],
)
def test_msjob_port(ports: list[dict[str, Any]] | None, expected: list[dict[str, Any]]) -> None:
    given = valid_job(Worker=replica())
    if ports is not None:
        given["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"] = (
            ports
        )
    assert _ports(apply_defaults(given)) == expected


def test_port_only_on_mindspore_container() -> None:
    given = valid_job(Worker=replica())
    pod = given["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
    pod["containers"] = [container("sidecar"), container()]
    out = apply_defaults(given)["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
    assert "ports" not in out["containers"][0]
    assert out["containers"][1]["ports"] == [MS_PORT]


def test_canonical_key_present_keeps_duplicate_for_validation() -> None:
    out = apply_defaults(valid_job(Worker=replica(1), worker=replica(2)))
    assert set(out["spec"]["msReplicaSpecs"]) == {"Worker", "worker"}


def test_unknown_replica_type_kept() -> None:
    out = apply_defaults(valid_job(Chief=replica(1)))
    assert set(out["spec"]["msReplicaSpecs"]) == {"Chief"}


@pytest.mark.parametrize(
    "given",
    [
        valid_job(),
        valid_job(worker=replica(None), ps=replica(2)),
        {"metadata": {"name": "x"}},
        {"spec": None},
    ],
)
def test_does_not_mutate_and_is_idempotent(given: dict[str, Any]) -> None:
    before = copy.deepcopy(given)
    once = apply_defaults(given)
    assert given == before
    assert apply_defaults(once) == once
    assert once is not given


@pytest.mark.parametrize(
    "garbage",
    [
        {"spec": "nope"},
        {"spec": {"msReplicaSpecs": ["Worker"]}},
        {"spec": {"runPolicy": 3, "msReplicaSpecs": {"Worker": 1}}},
        {"spec": {"msReplicaSpecs": {"Worker": {"template": {"spec": {"containers": "x"}}}}}},
        {"spec": {"msReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [1]}}}}}},
        {
            "spec": {
                "msReplicaSpecs": {
                    "Worker": {
                        "template": {"spec": {"containers": [{"name": "mindspore", "ports": 7}]}}
                    }
                }
            }
        },
    ],
)
def test_garbage_does_not_raise(garbage: dict[str, Any]) -> None:
    apply_defaults(garbage)


def test_constants_cover_replica_types() -> None:
    assert set(c.ROLE_BY_TYPE) == set(c.REPLICA_TYPES)
