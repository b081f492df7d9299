"""The MSJob API on the real apiserver: samples are accepted, nonsense is rejected at admission
with a message naming the field, `kubectl scale` and the printer columns work."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from msop.api import validate
from msop.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted((REPO / "config/samples").glob("*.yaml"))
Job = dict[str, Any]
RS = "spec.msReplicaSpecs"


def _job(name: str = "bad") -> Job:
    def replica(replicas: int) -> Job:
        return {
            "replicas": replicas,
            "restartPolicy": "Never",
            "template": {"spec": {"containers": [{"name": "mindspore", "image": "ms:1"}]}},
        }

    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name},
        "spec": {"msReplicaSpecs": {"Scheduler": replica(1), "Worker": replica(2)}},
    }


def _apply(
    cluster: LocalCluster, namespace: str, obj: Job, check: bool = False
) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=check)


def _at(obj: Job, path: str) -> Any:
    for key in path.split("."):
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


def _set(path: str, value: Any) -> Callable[[Job], None]:
    def mutate(obj: Job) -> None:
        parent, _, key = path.rpartition(".")
        target = _at(obj, parent)
        if isinstance(target, list):
            target[int(key)] = value
        else:
            target[key] = value

    return mutate


def _delete(path: str) -> Callable[[Job], None]:
    def mutate(obj: Job) -> None:
        parent, _, key = path.rpartition(".")
        del _at(obj, parent)[key]

    return mutate


def _container(**fields: Any) -> Callable[[Job], None]:
    return _set(f"{RS}.Worker.template.spec.containers", [{"name": "mindspore", **fields}])


WORKER_C0 = f"{RS}.Worker.template.spec.containers[0]"
CONTAINERS = f"{RS}[Worker].template.spec.containers"

# (id, mutation of a valid MSJob, substrings stderr must contain, whether msop.api.validate
# also rejects it: the Python checks skip the PodTemplateSpec schema, which is the apiserver's).
INVALID_CREATES: list[tuple[str, Callable[[Job], None], tuple[str, ...], bool]] = [
    (
        "no-mindspore-container",
        _set(f"{RS}.Worker.template.spec.containers", [{"name": "main", "image": "ms:1"}]),
        (CONTAINERS, "exactly one container named 'mindspore'"),
        True,
    ),
    (
        "two-mindspore-containers",
        _set(
            f"{RS}.Worker.template.spec.containers",
            [{"name": "mindspore", "image": "a"}, {"name": "mindspore", "image": "b"}],
        ),
        (CONTAINERS, "exactly one"),
        True,
    ),
    ("mindspore-without-image", _container(), (CONTAINERS, "needs an image"), True),
    ("mindspore-empty-image", _container(image=""), (CONTAINERS, "needs an image"), True),
    (
        "two-schedulers",
        _set(f"{RS}.Scheduler.replicas", 2),
        (RS, "Scheduler.replicas must be 0 or 1"),
        True,
    ),
    (
        "replica-type-twice-ignoring-case",
        lambda j: _at(j, RS).update({"worker": copy.deepcopy(_at(j, f"{RS}.Worker"))}),
        (RS, "unique ignoring case"),
        True,
    ),
    (
        "unknown-replica-type",
        lambda j: _at(j, RS).update({"Chief": _at(j, f"{RS}.Worker")}),
        (RS, "Scheduler, PS or Worker"),
        True,
    ),
    ("replicas-negative", _set(f"{RS}.Worker.replicas", -1), (f"{RS}.Worker.replicas",), True),
    ("replicas-string", _set(f"{RS}.Worker.replicas", "two"), (f"{RS}.Worker.replicas",), True),
    (
        "bad-restart-policy",
        _set(f"{RS}.Worker.restartPolicy", "Sometimes"),
        (f"{RS}.Worker.restartPolicy", "Sometimes"),
        True,
    ),
    (
        "misspelled-container-field",
        _container(image="ms:1", imagePullPolicyy="Always"),
        (f"{WORKER_C0}.imagePullPolicyy", "unknown field"),
        False,
    ),
    (
        "misspelled-pod-field",
        _set(f"{RS}.Worker.template.spec.nodeSelecter", {"a": "b"}),
        (f"{RS}.Worker.template.spec.nodeSelecter", "unknown field"),
        False,
    ),
    (
        "bad-container-quantity",
        _container(image="ms:1", resources={"limits": {"cpu": "lots"}}),
        (f"{WORKER_C0}.resources.limits.cpu",),
        False,
    ),
    ("template-missing", _delete(f"{RS}.Worker.template"), (f"{RS}.Worker.template",), True),
    ("replica-specs-missing", _delete(RS), (RS, "Required"), True),
    ("replica-specs-empty", _set(RS, {}), (RS,), True),
    (
        "bad-clean-pod-policy",
        _set("spec.runPolicy", {"cleanPodPolicy": "Finished"}),
        ("spec.runPolicy.cleanPodPolicy", "Finished"),
        True,
    ),
    ("bad-success-policy", _set("spec.successPolicy", "AnyWorker"), ("spec.successPolicy",), True),
    (
        "negative-ttl",
        _set("spec.runPolicy", {"ttlSecondsAfterFinished": -1}),
        ("spec.runPolicy.ttlSecondsAfterFinished",),
        True,
    ),
    (
        "bad-min-resources",
        _set("spec.runPolicy", {"schedulingPolicy": {"minResources": {"cpu": "many"}}}),
        ("spec.runPolicy.schedulingPolicy.minResources.cpu",),
        True,
    ),
    (
        "misspelled-spec-field",
        _set("spec.runpolicy", {}),
        ("spec.runpolicy", "unknown field"),
        True,
    ),
    (
        "name-not-dns-1035",
        _set("metadata.name", "1st-job"),
        ("metadata.name must be a DNS-1035 label",),
        True,
    ),
    (
        "name-too-long",
        _set("metadata.name", "a" * 56),  # a...a-scheduler-0 is 68 characters
        ("metadata.name is too long",),
        True,
    ),
]

# (id, runPolicy at creation, runPolicy in the update, path the error must name)
INVALID_UPDATES: list[tuple[str, Job, Job, str]] = [
    ("managed-by-changed", {"managedBy": "a"}, {"managedBy": "b"}, "spec.runPolicy.managedBy"),
    ("managed-by-added", {}, {"managedBy": "b"}, "spec.runPolicy.managedBy"),
    ("managed-by-removed", {"managedBy": "a"}, {}, "spec.runPolicy.managedBy"),
    (
        "queue-changed",
        {"schedulingPolicy": {"queue": "a"}},
        {"schedulingPolicy": {"queue": "b"}},
        "spec.runPolicy.schedulingPolicy.queue",
    ),
    (
        "queue-removed",
        {"schedulingPolicy": {"queue": "a"}},
        {"schedulingPolicy": {"minAvailable": 2}},
        "spec.runPolicy.schedulingPolicy.queue",
    ),
]


def test_catalogue_size() -> None:
    assert len(INVALID_CREATES) + len(INVALID_UPDATES) >= 15


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_sample_is_accepted(cluster: LocalCluster, namespace: str, sample: Path) -> None:
    proc = cluster.kubectl("apply", "-n", namespace, "-f", str(sample), check=False)
    assert proc.returncode == 0, proc.stderr
    name = yaml.safe_load(sample.read_text())["metadata"]["name"]
    cluster.kubectl("get", "msjob", name, "-n", namespace)


def test_samples_cover_the_features() -> None:
    names = {s.name for s in SAMPLES}
    assert {
        "ms_wide_deep_standalone.yaml",
        "ms_wide_deep_dataparallel.yaml",
        "ms_wide_deep_ps_standalone.yaml",
        "ms_wide_deep_ps_distribute.yaml",
    } <= names
    for sample in SAMPLES:
        assert sample.read_text().startswith("# "), f"{sample.name} needs a leading comment"
        assert validate(yaml.safe_load(sample.read_text())) == []


@pytest.mark.parametrize(
    ("mutate", "expected", "python_rejects"),
    [row[1:] for row in INVALID_CREATES],
    ids=[row[0] for row in INVALID_CREATES],
)
def test_invalid_create_is_rejected(
    cluster: LocalCluster,
    namespace: str,
    mutate: Callable[[Job], None],
    expected: tuple[str, ...],
    python_rejects: bool,
) -> None:
    obj = _job()
    mutate(obj)
    proc = _apply(cluster, namespace, obj)
    assert proc.returncode != 0, f"accepted: {json.dumps(obj)}"
    for text in expected:
        assert text in proc.stderr, proc.stderr
    assert bool(validate(obj)) is python_rejects, validate(obj)


@pytest.mark.parametrize(
    ("before", "after", "path"),
    [row[1:] for row in INVALID_UPDATES],
    ids=[row[0] for row in INVALID_UPDATES],
)
def test_invalid_update_is_rejected(
    cluster: LocalCluster, namespace: str, before: Job, after: Job, path: str
) -> None:
    obj = _job("immutable")
    obj["spec"]["runPolicy"] = before
    _apply(cluster, namespace, obj, check=True)
    obj["spec"]["runPolicy"] = after
    proc = _apply(cluster, namespace, obj)
    assert proc.returncode != 0
    assert f"{path}: Invalid value" in proc.stderr, proc.stderr
    assert "is immutable" in proc.stderr


def test_mutable_fields_can_change(cluster: LocalCluster, namespace: str) -> None:
    obj = _job("mutable")
    obj["spec"]["runPolicy"] = {"managedBy": "a", "schedulingPolicy": {"queue": "q"}}
    _apply(cluster, namespace, obj, check=True)
    obj["spec"]["runPolicy"].update(
        {"suspend": True, "schedulingPolicy": {"queue": "q", "minAvailable": 3}}
    )
    obj["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 5
    proc = _apply(cluster, namespace, obj)
    assert proc.returncode == 0, proc.stderr


def test_kubectl_scale(cluster: LocalCluster, namespace: str) -> None:
    sample = REPO / "config/samples/ms_wide_deep_dataparallel.yaml"
    cluster.kubectl("apply", "-n", namespace, "-f", str(sample))
    name = "ms-widedeep-dataparallel"
    cluster.kubectl("scale", "-n", namespace, f"msjob/{name}", "--replicas=7")
    job = json.loads(cluster.kubectl("get", "-n", namespace, "msjob", name, "-o", "json").stdout)
    assert job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] == 7
    assert job["spec"]["msReplicaSpecs"]["Scheduler"]["replicas"] == 1
    scale = json.loads(
        cluster.kubectl(
            "get", "-n", namespace, "msjob", name, "--subresource=scale", "-o", "json"
        ).stdout
    )
    assert (scale["kind"], scale["spec"]["replicas"]) == ("Scale", 7)
    proc = cluster.kubectl("scale", "-n", namespace, f"msjob/{name}", "--replicas=-1", check=False)
    assert proc.returncode != 0


def test_printer_columns(cluster: LocalCluster, namespace: str) -> None:
    _apply(cluster, namespace, _job("printed"), check=True)
    header = cluster.kubectl("get", "msjobs", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "STATE", "WORKERS", "AGE"]

    status = {
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "MSJobCreated", "message": "m"},
                {"type": "Running", "status": "True", "reason": "MSJobRunning", "message": "m"},
            ],
            "replicaStatuses": {"Worker": {"active": 2, "selector": "a=b"}},
            "workers": "2/2",
        }
    }
    cluster.kubectl(
        "patch",
        "-n",
        namespace,
        "msjob",
        "printed",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    row = cluster.kubectl("get", "msj", "printed", "-n", namespace).stdout.splitlines()[1].split()
    assert row[:3] == ["printed", "Running", "2/2"]
    # The category and the short name find it too.
    assert "printed" in cluster.kubectl("get", "mindspore", "-n", namespace).stdout
    scale = json.loads(
        cluster.kubectl(
            "get", "-n", namespace, "msjob", "printed", "--subresource=scale", "-o", "json"
        ).stdout
    )
    assert scale["status"] == {"replicas": 2, "selector": "a=b"}


def test_status_is_not_written_through_the_main_resource(
    cluster: LocalCluster, namespace: str
) -> None:
    obj = _job("nostatus")
    obj["status"] = {"workers": "9/9"}
    _apply(cluster, namespace, obj, check=True)
    job = json.loads(
        cluster.kubectl("get", "-n", namespace, "msjob", "nostatus", "-o", "json").stdout
    )
    assert "workers" not in job.get("status", {})
