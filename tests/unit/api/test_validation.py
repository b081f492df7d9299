"""validate: a table of invalid MSJobs, each with the path it must report."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from msop.api import FieldError, apply_defaults, validate
from msop.api import validation as v
from tests.support.builders import container, replica, valid_job

Job = dict[str, Any]


def _worker_pod(obj: Job) -> Job:
    pod: Job = obj["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
    return pod


def _set(path: str, value: Any) -> Callable[[Job], None]:
    """A mutator that sets a dotted path (creating objects on the way)."""

    def mutate(obj: Job) -> None:
        keys = path.split(".")
        target = obj
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value

    return mutate


def _delete(path: str) -> Callable[[Job], None]:
    def mutate(obj: Job) -> None:
        keys = path.split(".")
        target = obj
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


def _then(*mutators: Callable[[Job], None]) -> Callable[[Job], None]:
    """One mutator that applies ``mutators`` in order."""

    def mutate(obj: Job) -> None:
        for m in mutators:
            m(obj)

    return mutate


def _containers(*containers: Job) -> Callable[[Job], None]:
    def mutate(obj: Job) -> None:
        _worker_pod(obj)["containers"] = list(containers)

    return mutate


def _resources(requests: Job, limits: Job | None) -> Callable[[Job], None]:
    """The mindspore container with these requests and limits."""
    resources = (
        {"requests": requests} if limits is None else {"requests": requests, "limits": limits}
    )
    return _containers(container(resources=resources))


NPU = "huawei.com/Ascend910"
RS = "spec.msReplicaSpecs"
INVALID: list[tuple[str, Callable[[Job], None], str, str]] = [
    # (id, mutation of a valid job, expected path, expected message substring)
    ("spec-missing", _delete("spec"), "spec", "required"),
    ("spec-not-object", _set("spec", "x"), "spec", "object"),
    ("replica-specs-missing", _delete(f"{RS}"), RS, "required"),
    ("replica-specs-empty", _set(RS, {}), RS, "at least one"),
    ("replica-specs-list", _set(RS, [1]), RS, "object"),
    ("unknown-replica-type", _set(f"{RS}.Chief", replica()), f"{RS}.Chief", "Scheduler, PS or"),
    ("duplicate-case", _set(f"{RS}.worker", replica()), f"{RS}.worker", "unique ignoring case"),
    ("replica-spec-not-object", _set(f"{RS}.Worker", 3), f"{RS}.Worker", "object"),
    (
        "replicas-negative",
        _set(f"{RS}.Worker.replicas", -1),
        f"{RS}.Worker.replicas",
        "greater than or equal to 0",
    ),
    ("replicas-string", _set(f"{RS}.Worker.replicas", "2"), f"{RS}.Worker.replicas", "integer"),
    ("replicas-bool", _set(f"{RS}.Worker.replicas", True), f"{RS}.Worker.replicas", "integer"),
    (
        "replicas-int32",
        _set(f"{RS}.Worker.replicas", 2**31),
        f"{RS}.Worker.replicas",
        "less than or equal to",
    ),
    ("two-schedulers", _set(f"{RS}.Scheduler.replicas", 2), f"{RS}.Scheduler.replicas", "0 or 1"),
    (
        "restart-policy",
        _set(f"{RS}.Worker.restartPolicy", "Sometimes"),
        f"{RS}.Worker.restartPolicy",
        "supported",
    ),
    (
        "replica-unknown-field",
        _set(f"{RS}.Worker.replica", 2),
        f"{RS}.Worker.replica",
        "unknown field",
    ),
    ("template-missing", _delete(f"{RS}.Worker.template"), f"{RS}.Worker.template", "required"),
    (
        "template-spec-missing",
        _delete(f"{RS}.Worker.template.spec"),
        f"{RS}.Worker.template.spec",
        "required",
    ),
    (
        "containers-not-list",
        _set(f"{RS}.Worker.template.spec.containers", {"name": "mindspore"}),
        f"{RS}.Worker.template.spec.containers",
        "list",
    ),
    (
        "no-mindspore-container",
        _containers(container("pytorch")),
        f"{RS}.Worker.template.spec.containers",
        "exactly one container named 'mindspore'",
    ),
    (
        "two-mindspore-containers",
        _containers(container(), container()),
        f"{RS}.Worker.template.spec.containers",
        "exactly one",
    ),
    (
        "mindspore-no-image",
        _containers(container("sidecar"), {"name": "mindspore"}),
        f"{RS}.Worker.template.spec.containers[1].image",
        "needs an image",
    ),
    (
        "mindspore-empty-image",
        _containers(container(image="")),
        f"{RS}.Worker.template.spec.containers[0].image",
        "needs an image",
    ),
    ("success-policy", _set("spec.successPolicy", "AnyWorker"), "spec.successPolicy", "supported"),
    (
        "dynamic-worker-string",
        _set("spec.enableDynamicWorker", "yes"),
        "spec.enableDynamicWorker",
        "boolean",
    ),
    (
        "restart-grace-negative",
        _set("spec.restartInPlaceGracePeriodSeconds", -1),
        "spec.restartInPlaceGracePeriodSeconds",
        "greater than or equal to 0",
    ),
    (
        "restart-grace-too-long",
        _set("spec.restartInPlaceGracePeriodSeconds", 3601),
        "spec.restartInPlaceGracePeriodSeconds",
        "less than or equal to 3600",
    ),
    (
        "restart-grace-not-int",
        _set("spec.restartInPlaceGracePeriodSeconds", "5s"),
        "spec.restartInPlaceGracePeriodSeconds",
        "integer",
    ),
    ("spec-unknown-field", _set("spec.replicaSpecs", {}), "spec.replicaSpecs", "unknown field"),
    ("run-policy-not-object", _set("spec.runPolicy", []), "spec.runPolicy", "object"),
    (
        "clean-pod-policy",
        _set("spec.runPolicy.cleanPodPolicy", "Some"),
        "spec.runPolicy.cleanPodPolicy",
        "supported",
    ),
    (
        "ttl-negative",
        _set("spec.runPolicy.ttlSecondsAfterFinished", -5),
        "spec.runPolicy.ttlSecondsAfterFinished",
        "greater than or equal to 0",
    ),
    (
        "deadline-zero",
        _set("spec.runPolicy.activeDeadlineSeconds", 0),
        "spec.runPolicy.activeDeadlineSeconds",
        "greater than or equal to 1",
    ),
    (
        "backoff-float",
        _set("spec.runPolicy.backoffLimit", 1.5),
        "spec.runPolicy.backoffLimit",
        "integer",
    ),
    ("suspend-string", _set("spec.runPolicy.suspend", "true"), "spec.runPolicy.suspend", "boolean"),
    ("managed-by-int", _set("spec.runPolicy.managedBy", 7), "spec.runPolicy.managedBy", "string"),
    (
        "managed-by-long",
        _set("spec.runPolicy.managedBy", "x" * 64),
        "spec.runPolicy.managedBy",
        "at most 63",
    ),
    (
        "run-policy-unknown-field",
        _set("spec.runPolicy.cleanPodPolicyy", "All"),
        "spec.runPolicy.cleanPodPolicyy",
        "unknown field",
    ),
    (
        "scheduling-policy-not-object",
        _set("spec.runPolicy.schedulingPolicy", "gang"),
        "spec.runPolicy.schedulingPolicy",
        "object",
    ),
    (
        "min-available-negative",
        _set("spec.runPolicy.schedulingPolicy.minAvailable", -1),
        "spec.runPolicy.schedulingPolicy.minAvailable",
        "greater than or equal to 0",
    ),
    (
        "queue-int",
        _set("spec.runPolicy.schedulingPolicy.queue", 1),
        "spec.runPolicy.schedulingPolicy.queue",
        "string",
    ),
    (
        "min-resources-bad-quantity",
        _set("spec.runPolicy.schedulingPolicy.minResources", {"cpu": "lots"}),
        "spec.runPolicy.schedulingPolicy.minResources.cpu",
        "quantity",
    ),
    (
        "schedule-timeout-negative",
        _set("spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds", -1),
        "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds",
        "greater than or equal to 0",
    ),
    ("name-missing", _delete("metadata.name"), "metadata.name", "required"),
    ("name-uppercase", _set("metadata.name", "MyJob"), "metadata.name", "DNS-1035"),
    ("name-leading-digit", _set("metadata.name", "1job"), "metadata.name", "DNS-1035"),
    ("name-dot", _set("metadata.name", "my.job"), "metadata.name", "DNS-1035"),
    # "<50 chars>-scheduler-0" is 62 characters: fine; 52 chars make 64.
    ("name-too-long-scheduler", _set("metadata.name", "a" * 52), "metadata.name", "too long"),
    (
        "name-too-long-worker-index",
        _then(_set("metadata.name", "a" * 53), _set(f"{RS}.Worker.replicas", 10)),
        "metadata.name",
        "too long",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [row[1:] for row in INVALID],
    ids=[row[0] for row in INVALID],
)
def test_invalid_job_reports_field(mutate: Callable[[Job], None], path: str, message: str) -> None:
    obj = valid_job()
    mutate(obj)
    errors = validate(obj)
    assert [e.path for e in errors] == [path], errors
    assert message in errors[0].message, errors
    # Defaulting never hides an error.
    assert validate(apply_defaults(obj))


def test_catalogue_is_large_enough() -> None:
    assert len(INVALID) >= 15


@pytest.mark.parametrize(
    "obj",
    [
        valid_job(),
        apply_defaults(valid_job()),
        valid_job(Worker=replica(1)),
        valid_job(worker=replica(4), scheduler=replica(1), ps=replica(2)),
        valid_job(Worker=replica(0)),
        valid_job(Scheduler=replica(0), Worker=replica(1)),
        valid_job(name="a" * 50, Scheduler=replica(1), Worker=replica(10)),  # "<50>-worker-9" = 59
        valid_job(name="a" * 53, Worker=replica(10)),  # 53 + "-worker-9" = 62
    ],
    ids=["sched-worker", "defaulted", "standalone", "lower-keys", "zero", "zero-sched", "50", "53"],
)
def test_valid_jobs(obj: Job) -> None:
    assert validate(obj) == []


def test_valid_full_job() -> None:
    obj = valid_job()
    obj["spec"].update(
        {
            "successPolicy": "AllWorkers",
            "enableDynamicWorker": True,
            "runPolicy": {
                "cleanPodPolicy": "None",
                "ttlSecondsAfterFinished": 0,
                "activeDeadlineSeconds": 3600,
                "backoffLimit": 3,
                "suspend": False,
                "managedBy": "kubeflow.org/training-operator",
                "schedulingPolicy": {
                    "minAvailable": 3,
                    "queue": "default",
                    "priorityClass": "high",
                    "minResources": {"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": "2"},
                    "scheduleTimeoutSeconds": 60,
                },
            },
        }
    )
    obj["spec"]["msReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    assert validate(obj) == []


@pytest.mark.parametrize(
    "garbage",
    [
        None,
        3,
        "MSJob",
        [],
        {},
        {"metadata": "x", "spec": {}},
        {"metadata": {"name": 5}, "spec": {"msReplicaSpecs": {3: {}}}},
        {"metadata": {"name": "x"}, "spec": {"msReplicaSpecs": {"Worker": {"template": []}}}},
        {
            "metadata": {"name": "x"},
            "spec": {"msReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [None]}}}}},
        },
        {
            "metadata": {"name": "x"},
            "spec": {"runPolicy": {"schedulingPolicy": {"minResources": 1}}},
        },
    ],
)
def test_garbage_gives_errors_not_exceptions(garbage: Any) -> None:
    errors = validate(garbage)
    assert errors
    assert all(isinstance(e, FieldError) for e in errors)


def test_field_error_str() -> None:
    assert str(FieldError("spec", "required")) == "spec: required"


def test_admission_wants_canonical_keys_and_a_worker_the_operator_does_not() -> None:
    lower = valid_job()
    specs = lower["spec"]["msReplicaSpecs"]
    lower["spec"]["msReplicaSpecs"] = {k.lower(): val for k, val in specs.items()}
    assert validate(lower) == []
    assert [e.path for e in v.validate_admission(lower)] == [
        "spec.msReplicaSpecs",
        "spec.msReplicaSpecs.Worker",
    ]
    no_worker = valid_job()
    del no_worker["spec"]["msReplicaSpecs"]["Worker"]
    assert validate(no_worker) == []
    assert v.validate_admission(no_worker) == [
        FieldError("spec.msReplicaSpecs.Worker", v.MSG_WORKER_REQUIRED)
    ]
    assert v.validate_admission(valid_job()) == []


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (_containers(container(), {"name": "Side_Car", "image": "x"}), "containers[1].name"),
        (_containers(container(), {"name": "s" * 64, "image": "x"}), "containers[1].name"),
        (_containers(container(), {"name": "side"}), "containers[1].image"),
        (_containers(container(image=" x")), "containers[0].image"),
        (_containers(container(ports=[{"containerPort": 70000}])), "ports[0].containerPort"),
        (_containers(container(ports=[{"containerPort": 1, "hostPort": -1}])), "ports[0].hostPort"),
        (_containers(container(ports=[{"containerPort": 1, "name": "a--b"}])), "ports[0].name"),
        (_containers(container(ports=[{"containerPort": 1, "name": "123"}])), "ports[0].name"),
        (_containers(container(ports=[{"containerPort": 1, "name": "a" * 16}])), "ports[0].name"),
        (_containers(container(ports=[{"containerPort": 1, "protocol": "tcp"}])), "protocol"),
        (_containers(container(env=[{"name": "A=B"}])), "env[0].name"),
        (_containers(container(env=[{"name": "\t"}])), "env[0].name"),
        (lambda j: _worker_pod(j).update(volumes=[{"name": "V"}]), "volumes[0].name"),
        (lambda j: _worker_pod(j).update(nodeSelector={"a": "b\n"}), "nodeSelector.a"),
        (lambda j: _worker_pod(j).update(initContainers=[container()]), "spec.initContainers"),
        (_resources({"cpu": "2"}, {"cpu": "1500m"}), "containers[0].resources.requests"),
        (_resources({"cpu": 2}, {"cpu": 1}), "containers[0].resources.requests"),
        (_resources({"memory": "1.5Gi"}, {"memory": "1G"}), "containers[0].resources.requests"),
        (_resources({"ephemeral-storage": "2"}, {"ephemeral-storage": "1"}), "resources.requests"),
        (_resources({NPU: 1}, {NPU: 8}), "containers[0].resources.requests"),
        (_resources({NPU: "8"}, None), "containers[0].resources.requests"),
        (_resources({NPU: "8"}, {"cpu": 1}), "containers[0].resources.requests"),
        (_resources({"hugepages-2Mi": "4Mi"}, {"hugepages-2Mi": "2Mi"}), "resources.requests"),
        (_resources({"example.com/fpga": 1}, {"example.com/fpga": 2}), "resources.requests"),
        (
            lambda j: _worker_pod(j).update(
                initContainers=[
                    container(name="init", resources={"requests": {"cpu": 2}, "limits": {"cpu": 1}})
                ]
            ),
            "initContainers[0].resources.requests",
        ),
        (
            lambda j: j["spec"]["msReplicaSpecs"]["Worker"]["template"].update(
                metadata={"labels": {"a/b/c": "x"}}
            ),
            "template.metadata.labels",
        ),
        (
            lambda j: j["spec"]["msReplicaSpecs"]["Worker"]["template"].update(
                metadata={"annotations": {"x": 1}}
            ),
            "template.metadata.annotations.x",
        ),
    ],
)
def test_what_the_api_server_would_refuse_in_a_pod(
    mutate: Callable[[Job], None], path: str
) -> None:
    obj = valid_job()
    mutate(obj)
    paths = [e.path for e in validate(obj)]
    assert len(paths) == 1 and paths[0].endswith(path), paths


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "sidecar-2", "image": "registry:5000/a/b:1"},
        {
            "name": "s",
            "image": "x",
            "ports": [{"containerPort": 65535, "name": "1a", "hostPort": 0}],
        },
        {"name": "s", "image": "x", "env": [{"name": "a.b-c d"}], "ports": [{"containerPort": 1}]},
        {
            "name": "s",
            "image": "x",
            "resources": {
                "requests": {"cpu": "500m", "memory": "1Gi", NPU: 8, "hugepages-2Mi": "2Mi"},
                "limits": {"cpu": 1, "memory": "1073741824", NPU: "8", "hugepages-2Mi": "2Mi"},
            },
        },
        # Only limits (the API server copies them to the requests), or only native requests.
        {"name": "s", "image": "x", "resources": {"limits": {NPU: 8, "cpu": "100m"}}},
        {"name": "s", "image": "x", "resources": {"requests": {"cpu": 64, "memory": "1Ti"}}},
        # Native resources of the kubernetes.io domain may be overcommitted.
        {
            "name": "s",
            "image": "x",
            "resources": {
                "requests": {"example.kubernetes.io/thing": 1},
                "limits": {"example.kubernetes.io/thing": 2},
            },
        },
        # A malformed quantity is the schema's error, not a comparison's.
        {"name": "s", "image": "x", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": []}}},
    ],
)
def test_valid_pod_content_passes(fields: Job) -> None:
    obj = valid_job()
    _worker_pod(obj)["containers"].append(fields)
    template = obj["spec"]["msReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"labels": {"example.com/team": "a_b.c", "empty": ""}}
    assert v.validate_admission(obj) == []
