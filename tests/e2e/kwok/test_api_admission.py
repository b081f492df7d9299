"""The MSJob API on the real apiserver: samples are accepted, nonsense is rejected at admission
with a message naming the field, `kubectl scale` and the printer columns work."""

from __future__ import annotations

import copy
import io
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from msop.api import validate_admission
from msop.cli.validate import validate_files as main_validate
from testbed import LocalCluster
from testbed.paths import REPO

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
    for key in path.split(".") if path else ():
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


WORKER = f"{RS}.Worker"
TEMPLATE = f"{WORKER}.template"
POD = f"{TEMPLATE}.spec"
CONTAINERS = f"{POD}.containers"
C0 = f"{CONTAINERS}[0]"


def _with(path: str, key: str, value: Any) -> Callable[[Job], None]:
    """Set ``key`` in the object at ``path``, creating objects on the way."""

    def mutate(obj: Job) -> None:
        target = obj
        for part in path.split("."):
            target = target.setdefault(part, {})
        target[key] = value

    return mutate


def _sidecar(**fields: Any) -> Callable[[Job], None]:
    return lambda j: _at(j, CONTAINERS).append({"name": "sidecar", "image": "side:1", **fields})


def _ports(*ports: Job) -> Callable[[Job], None]:
    return _container(image="ms:1", ports=list(ports))


def _init(**fields: Any) -> Callable[[Job], None]:
    return _with(POD, "initContainers", [{"name": "init", "image": "init:1", **fields}])


def _keys(*keys: str) -> Callable[[Job], None]:
    def mutate(obj: Job) -> None:
        specs = _at(obj, RS)
        values = list(specs.values())
        specs.clear()
        specs.update(zip(keys, values, strict=False))

    return mutate


def _then(*mutators: Callable[[Job], None]) -> Callable[[Job], None]:
    """One mutator that applies ``mutators`` in order."""

    def mutate(obj: Job) -> None:
        for m in mutators:
            m(obj)

    return mutate


def _msrun(obj: Job) -> None:
    """An msrun job: no Scheduler, 2 local workers per Worker pod."""
    del _at(obj, RS)["Scheduler"]
    obj["spec"]["msrun"] = {"localWorkers": 2}


# Every MSJob here is refused by the CRD (schema and CEL rules) and by `validate_admission`
# (what `msop validate` runs), naming the same field: (id, mutation of a valid job, the field,
# a piece of the API server's message). The field is written with dots; the API server writes
# the map keys of CEL errors in brackets (spec.msReplicaSpecs[Worker]), see _normalise.
ADMISSION: list[tuple[str, Callable[[Job], None], str, str]] = [
    # the MSJob itself
    ("spec-missing", _delete("spec"), "spec", "Required value"),
    ("replica-specs-missing", _delete(RS), RS, "Required value"),
    ("replica-specs-empty", _set(RS, {}), WORKER, "Worker replica type is required"),
    ("no-worker", _delete(WORKER), WORKER, "Worker replica type is required"),
    ("lower-case-keys", _keys("scheduler", "worker"), RS, "spelled exactly so"),
    ("upper-case-key", _keys("Scheduler", "WORKER"), RS, "spelled exactly so"),
    (
        "unknown-replica-type",
        lambda j: _at(j, RS).update({"Chief": copy.deepcopy(_at(j, WORKER))}),
        RS,
        "Scheduler, PS or Worker",
    ),
    ("two-schedulers", _set(f"{RS}.Scheduler.replicas", 2), f"{RS}.Scheduler.replicas", "0 or 1"),
    ("replicas-negative", _set(f"{WORKER}.replicas", -1), f"{WORKER}.replicas", "greater than"),
    (
        "bad-restart-policy",
        _set(f"{WORKER}.restartPolicy", "Sometimes"),
        f"{WORKER}.restartPolicy",
        "Sometimes",
    ),
    ("template-missing", _delete(TEMPLATE), TEMPLATE, "Required value"),
    ("template-spec-missing", _delete(POD), POD, "Required value"),
    (
        "bad-clean-pod-policy",
        _set("spec.runPolicy", {"cleanPodPolicy": "Finished"}),
        "spec.runPolicy.cleanPodPolicy",
        "Finished",
    ),
    ("bad-success-policy", _set("spec.successPolicy", "AnyWorker"), "spec.successPolicy", "Any"),
    (
        "negative-ttl",
        _set("spec.runPolicy", {"ttlSecondsAfterFinished": -1}),
        "spec.runPolicy.ttlSecondsAfterFinished",
        "greater than",
    ),
    (
        "bad-min-resources",
        _set("spec.runPolicy", {"schedulingPolicy": {"minResources": {"cpu": "many"}}}),
        "spec.runPolicy.schedulingPolicy.minResources.cpu",
        "many",
    ),
    (
        "managed-by-too-long",
        _set("spec.runPolicy", {"managedBy": "x" * 64}),
        "spec.runPolicy.managedBy",
        "should match",
    ),
    ("name-not-dns-1035", _set("metadata.name", "1st-job"), "metadata.name", "DNS-1035"),
    (
        "name-too-long",
        _set("metadata.name", "a" * 54),  # a...a-scheduler-0 is 66 characters
        "metadata.name",
        "is too long",
    ),
    (
        "name-too-long-for-the-last-worker",
        _then(_set("metadata.name", "a" * 48), _set(f"{WORKER}.replicas", 10**8)),
        "metadata.name",
        "is too long",
    ),
    # msrun jobs (spec.msrun): Worker pods only, a way to count the local workers
    (
        "msrun-with-a-scheduler",
        _set("spec.msrun", {"localWorkers": 2}),
        f"{RS}.Scheduler",
        "msrun starts the Scheduler",
    ),
    (
        "msrun-with-parameter-servers",
        _then(_msrun, lambda j: _at(j, RS).update({"PS": copy.deepcopy(_at(j, WORKER))})),
        f"{RS}.PS",
        "no parameter servers",
    ),
    (
        "msrun-zero-local-workers",
        _then(_msrun, _set("spec.msrun", {"localWorkers": 0})),
        "spec.msrun.localWorkers",
        "greater than or equal to 1",
    ),
    (
        "msrun-privileged-master-port",
        _then(_msrun, _set("spec.msrun", {"localWorkers": 2, "masterPort": 80})),
        "spec.msrun.masterPort",
        "greater than or equal to 1024",
    ),
    (
        "msrun-elastic",
        _then(_msrun, _set("spec.enableDynamicWorker", True)),
        "spec.enableDynamicWorker",
        "one cluster",
    ),
    (
        "msrun-restart-scope-pod",
        _then(_msrun, _set("spec.restartScope", "Pod")),
        "spec.restartScope",
        "rejoin",
    ),
    # the pod template: what the API server would refuse in the pods and the Service
    (
        "no-mindspore-container",
        _set(CONTAINERS, [{"name": "main", "image": "m"}]),
        CONTAINERS,
        "exactly one container named 'mindspore'",
    ),
    (
        "two-mindspore-containers",
        _set(
            CONTAINERS, [{"name": "mindspore", "image": "a"}, {"name": "mindspore", "image": "b"}]
        ),
        CONTAINERS,
        "exactly one",
    ),
    ("mindspore-without-image", _container(), f"{C0}.image", "needs an image"),
    ("mindspore-empty-image", _container(image=""), f"{C0}.image", "needs an image"),
    ("image-with-whitespace", _container(image="ms:1 "), f"{C0}.image", "should match"),
    ("sidecar-without-image", _sidecar(image=""), f"{CONTAINERS}[1].image", "needs an image"),
    ("container-name-Side_Car", _sidecar(name="Side_Car"), f"{CONTAINERS}[1].name", "Side_Car"),
    ("container-name-70-chars", _sidecar(name="s" * 70), f"{CONTAINERS}[1].name", "should match"),
    (
        "msjob-port-70000",
        _ports({"name": "msjob-port", "containerPort": 70000}),
        f"{C0}.ports[0].containerPort",
        "less than or equal to 65535",
    ),
    (
        "container-port-negative",
        _ports({"containerPort": -1}),
        f"{C0}.ports[0].containerPort",
        "greater than or equal to 1",
    ),
    (
        "host-port-70000",
        _ports({"containerPort": 2222, "hostPort": 70000}),
        f"{C0}.ports[0].hostPort",
        "less than or equal to 65535",
    ),
    (
        "port-name-upper-case",
        _ports({"name": "Metrics_Port", "containerPort": 9090}),
        f"{C0}.ports[0].name",
        "Metrics_Port",
    ),
    (
        "port-name-too-long",
        _ports({"name": "metrics-port-long", "containerPort": 9090}),
        f"{C0}.ports[0].name",
        "at most 15 characters",
    ),
    (
        "port-protocol-http",
        _ports({"containerPort": 9090, "protocol": "HTTP"}),
        f"{C0}.ports[0].protocol",
        "HTTP",
    ),
    (
        "env-name-with-equals",
        _container(image="ms:1", env=[{"name": "A=B", "value": "1"}]),
        f"{C0}.env[0].name",
        "should match",
    ),
    ("init-container-name", _init(name="Init_1"), f"{POD}.initContainers[0].name", "Init_1"),
    (
        "init-container-without-image",
        _init(image=""),
        f"{POD}.initContainers[0].image",
        "needs an image",
    ),
    (
        "init-container-named-like-a-container",
        _init(name="mindspore"),
        f"{POD}.initContainers",
        "must differ",
    ),
    (
        "volume-name",
        _with(POD, "volumes", [{"name": "Data_Vol", "emptyDir": {}}]),
        f"{POD}.volumes[0].name",
        "Data_Vol",
    ),
    (
        "label-value-70-chars",
        _with(f"{TEMPLATE}.metadata", "labels", {"team": "t" * 70}),
        f"{TEMPLATE}.metadata.labels.team",
        "should match",
    ),
    (
        "label-value-with-space",
        _with(f"{TEMPLATE}.metadata", "labels", {"team": "a b"}),
        f"{TEMPLATE}.metadata.labels.team",
        "should match",
    ),
    (
        "label-key",
        _with(f"{TEMPLATE}.metadata", "labels", {"my team": "a"}),
        f"{TEMPLATE}.metadata.labels",
        "qualified names",
    ),
    (
        "annotation-key",
        _with(f"{TEMPLATE}.metadata", "annotations", {"-bad/key": "a"}),
        f"{TEMPLATE}.metadata.annotations",
        "qualified names",
    ),
    (
        "node-selector-value",
        _with(POD, "nodeSelector", {"disk": "fast ssd"}),
        f"{POD}.nodeSelector.disk",
        "should match",
    ),
    (
        "cpu-request-over-limit",
        _container(image="ms:1", resources={"requests": {"cpu": "2"}, "limits": {"cpu": "1500m"}}),
        f"{C0}.resources.requests",
        "must not exceed the limit",
    ),
    (
        "init-memory-request-over-limit",
        _with(
            POD,
            "initContainers",
            [
                {
                    "name": "fetch",
                    "image": "busybox",
                    "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": 1024}},
                }
            ],
        ),
        f"{POD}.initContainers[0].resources.requests",
        "must not exceed the limit",
    ),
    (
        "npu-request-below-limit",
        _container(
            image="ms:1",
            resources={
                "requests": {"huawei.com/Ascend910": 1},
                "limits": {"huawei.com/Ascend910": 8},
            },
        ),
        f"{C0}.resources.requests",
        "cannot be overcommitted",
    ),
    (
        "npu-request-without-limit",
        _container(image="ms:1", resources={"requests": {"huawei.com/Ascend910": "8"}}),
        f"{C0}.resources.requests",
        "cannot be overcommitted",
    ),
]

# Refused by the API server's own schema checks. The first three `validate_admission` cannot
# see (it does not carry the PodTemplateSpec schema): the operator would fail such a job once
# with the API server's message when it creates the pod. The type errors it reports too; for
# them the API server skips the CEL rules and appends its own line "<nil>: Invalid value:
# null: some validation rules were not checked ..." (docs/tasks/troubleshooting.md).
SCHEMA_ONLY: list[tuple[str, Callable[[Job], None], str, bool]] = [
    (
        "misspelled-container-field",
        _container(image="ms:1", imagePullPolicyy="Always"),
        f"{C0}.imagePullPolicyy",
        False,
    ),
    ("misspelled-pod-field", _with(POD, "nodeSelecter", {"a": "b"}), f"{POD}.nodeSelecter", False),
    (
        "bad-container-quantity",
        _container(image="ms:1", resources={"limits": {"cpu": "lots"}}),
        f"{C0}.resources.limits.cpu",
        False,
    ),
    ("replicas-string", _set(f"{WORKER}.replicas", "two"), f"{WORKER}.replicas", True),
    ("suspend-string", _set("spec.runPolicy", {"suspend": "yes"}), "spec.runPolicy.suspend", True),
    ("misspelled-spec-field", _set("spec.runpolicy", {}), "spec.runpolicy", True),
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
    assert len(ADMISSION) >= 30
    assert len({row[0] for row in ADMISSION + SCHEMA_ONLY}) == len(ADMISSION + SCHEMA_ONLY)


def _normalise(text: str) -> str:
    """The API server writes map keys of CEL errors in brackets: spec.msReplicaSpecs[Worker]."""
    return re.sub(r"\.?\[([A-Za-z][^\]]*)\]", r".\1", text)


def _msop_validate(tmp_path: Path, obj: Job) -> list[str]:
    """The lines `msop validate -f <file>` prints for ``obj``."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    out = io.StringIO()
    code = main_validate([str(path)], out)
    lines = out.getvalue().splitlines()
    assert code == (1 if lines != [f"OK {path}"] else 0)
    return [line.removeprefix(f"{path}: ") for line in lines]


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
        assert validate_admission(yaml.safe_load(sample.read_text())) == []


@pytest.mark.parametrize(
    ("mutate", "field", "text"),
    [row[1:] for row in ADMISSION],
    ids=[row[0] for row in ADMISSION],
)
def test_invalid_create_is_refused_naming_the_field(
    cluster: LocalCluster,
    namespace: str,
    tmp_path: Path,
    mutate: Callable[[Job], None],
    field: str,
    text: str,
) -> None:
    obj = _job()
    mutate(obj)
    proc = _apply(cluster, namespace, obj)
    assert proc.returncode != 0, f"accepted: {json.dumps(obj)}"
    stderr = _normalise(proc.stderr)
    assert f"{field}: " in stderr, proc.stderr
    assert text in stderr, proc.stderr
    assert "<nil>" not in stderr, proc.stderr
    # msop validate: the same verdict, the same field, and every field it names the API
    # server names too.
    paths = [e.path for e in validate_admission(obj)]
    assert field in paths, paths
    for path in paths:
        assert f"{path}: " in stderr, (path, proc.stderr)
    lines = _msop_validate(tmp_path, obj)
    assert any(line.startswith(f"{field}: ") for line in lines), lines
    for line in lines:
        path, _, message = line.partition(": ")
        # The field, not a longer path it starts: "a.b: a.b must be ..." was printed before.
        assert not re.search(re.escape(path) + r"(?![.\[\w])", message), f"twice: {line}"


@pytest.mark.parametrize(
    ("mutate", "field", "python_rejects"),
    [row[1:] for row in SCHEMA_ONLY],
    ids=[row[0] for row in SCHEMA_ONLY],
)
def test_schema_errors_name_the_field(
    cluster: LocalCluster,
    namespace: str,
    mutate: Callable[[Job], None],
    field: str,
    python_rejects: bool,
) -> None:
    obj = _job()
    mutate(obj)
    proc = _apply(cluster, namespace, obj)
    assert proc.returncode != 0, f"accepted: {json.dumps(obj)}"
    assert field in _normalise(proc.stderr), proc.stderr
    paths = [e.path for e in validate_admission(obj)]
    assert (field in paths) is python_rejects, paths


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


def _no_replicas(job: Job) -> Job:
    for spec in job["spec"]["msReplicaSpecs"].values():
        del spec["replicas"]
    return job


def _only_worker(job: Job) -> Job:
    del job["spec"]["msReplicaSpecs"]["Scheduler"]
    return job


def _zero_workers(job: Job) -> Job:
    job["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = 0
    return job


def _with_ps(job: Job) -> Job:
    specs = job["spec"]["msReplicaSpecs"]
    specs["PS"] = copy.deepcopy(specs["Worker"])
    return job


# Every shape of spec.msReplicaSpecs the API accepts, with the Worker replicas it starts with.
SCALABLE: list[tuple[str, Callable[[], Job], int]] = [
    ("sample", lambda: yaml.safe_load((REPO / DATAPARALLEL).read_text()), 4),
    ("scheduler-and-worker", _job, 2),
    ("worker-without-replicas", lambda: _no_replicas(_job()), 1),
    ("only-worker", lambda: _only_worker(_job()), 2),
    ("only-worker-without-replicas", lambda: _no_replicas(_only_worker(_job())), 1),
    ("ps-without-replicas", lambda: _no_replicas(_with_ps(_job())), 1),
    ("zero-workers", lambda: _zero_workers(_job()), 0),
]
DATAPARALLEL = "config/samples/ms_wide_deep_dataparallel.yaml"


def _scale(cluster: LocalCluster, namespace: str, name: str) -> Job:
    out = cluster.kubectl(
        "get", "-n", namespace, "msjob", name, "--subresource=scale", "-o", "json"
    )
    scale: Job = json.loads(out.stdout)
    return scale


@pytest.mark.parametrize(
    ("make", "replicas"), [r[1:] for r in SCALABLE], ids=[r[0] for r in SCALABLE]
)
def test_scale_works_for_every_accepted_spelling(
    cluster: LocalCluster, namespace: str, make: Callable[[], Job], replicas: int
) -> None:
    job = make()
    name = job["metadata"]["name"]
    _apply(cluster, namespace, job, check=True)
    scale = _scale(cluster, namespace, name)
    assert (scale["kind"], scale["spec"].get("replicas", 0)) == ("Scale", replicas)
    before = json.loads(cluster.kubectl("get", "-n", namespace, "msjob", name, "-o", "json").stdout)
    cluster.kubectl("scale", "-n", namespace, f"msjob/{name}", "--replicas=3")
    after = json.loads(cluster.kubectl("get", "-n", namespace, "msjob", name, "-o", "json").stdout)
    assert after["spec"]["msReplicaSpecs"]["Worker"]["replicas"] == 3
    after["spec"]["msReplicaSpecs"]["Worker"]["replicas"] = replicas
    assert after["spec"] == before["spec"]  # nothing else moved
    assert _scale(cluster, namespace, name)["spec"]["replicas"] == 3
    proc = cluster.kubectl("scale", "-n", namespace, f"msjob/{name}", "--replicas=-1", check=False)
    assert proc.returncode != 0


def test_lower_case_keys_are_refused_with_the_reason(cluster: LocalCluster, namespace: str) -> None:
    job = _job("lower")
    specs = job["spec"]["msReplicaSpecs"]
    job["spec"]["msReplicaSpecs"] = {k.lower(): v for k, v in specs.items()}
    proc = _apply(cluster, namespace, job)
    assert proc.returncode != 0
    assert "spelled exactly so" in proc.stderr
    assert "spec.msReplicaSpecs.Worker.replicas" in proc.stderr


def test_printer_columns(cluster: LocalCluster, namespace: str) -> None:
    _apply(cluster, namespace, _job("printed"), check=True)
    header = cluster.kubectl("get", "msjobs", "-n", namespace).stdout.splitlines()[0].split()
    assert header == ["NAME", "STATE", "WORKERS", "PROGRESS", "AGE"]

    status = {
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "MSJobCreated", "message": "m"},
                {"type": "Running", "status": "True", "reason": "MSJobRunning", "message": "m"},
            ],
            "replicaStatuses": {"Worker": {"active": 2, "selector": "a=b"}},
            "workers": "2/2",
            "progress": {
                "percentComplete": 45, "step": 90, "totalSteps": 200,
                "metrics": [{"name": "loss", "value": "0.0213"}],
                "lastReportTime": "2026-01-01T00:00:00Z",
            },
        }
    }  # fmt: skip
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
    assert row[:4] == ["printed", "Running", "2/2", "45"]
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
