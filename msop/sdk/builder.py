"""Building the common MSJobs without writing a PodTemplate: :func:`dataparallel_job`,
:func:`msrun_job`."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from msop.api import constants as c
from msop.kube.objects import JSON

GPU_RESOURCE = "nvidia.com/gpu"
NPU_RESOURCE = "huawei.com/Ascend910"

#: Short names of accelerators (``accelerator=``); any other value is a resource name.
ACCELERATORS = {"gpu": GPU_RESOURCE, "npu": NPU_RESOURCE}


def accelerator_resource(accelerator: str) -> str:
    """The extended resource of an accelerator: ``"gpu"`` (NVIDIA), ``"npu"`` (Ascend
    910) or a resource name as the nodes advertise it (``huawei.com/Ascend310P``)."""
    resource = ACCELERATORS.get(accelerator.lower(), accelerator)
    if "/" not in resource:
        raise ValueError(
            f"accelerator {accelerator!r}: give 'gpu', 'npu' or a resource name such as "
            "'nvidia.com/gpu'"
        )
    return resource


def _container(
    image: str,
    command: Sequence[str],
    env: Mapping[str, str],
    volume_mounts: Sequence[Mapping[str, Any]],
    resources: Mapping[str, Any] | None,
    image_pull_policy: str | None,
) -> JSON:
    container: JSON = {"name": c.DEFAULT_CONTAINER_NAME, "image": image, "command": list(command)}
    if image_pull_policy:
        container["imagePullPolicy"] = image_pull_policy
    if env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    if volume_mounts:
        container["volumeMounts"] = copy.deepcopy([dict(m) for m in volume_mounts])
    if resources:
        container["resources"] = copy.deepcopy(dict(resources))
    return container


def _given(**fields: Any) -> JSON:
    """The fields that are not None (the others keep their server-side defaults)."""
    return {k: v for k, v in fields.items() if v is not None}


def dataparallel_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 1,
    ps: int = 0,
    gpus_per_worker: int = 0,
    accelerator: str = "gpu",
    accelerators_per_worker: int = 0,
    env: Mapping[str, str] | None = None,
    volumes: Sequence[Mapping[str, Any]] = (),
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    scheduler: bool = True,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    restart_policy: str = c.EXIT_CODE,
    clean_pod_policy: str | None = None,
    success_policy: str | None = None,
    restart_scope: str | None = None,
    backoff_limit: int | None = None,
    worker_resources: Mapping[str, Any] | None = None,
    image_pull_policy: str | None = None,
) -> JSON:
    """An MSJob dict for data-parallel (and PS) training, ready for ``MSJobClient.create``.

    Every replica runs ``image`` with ``command`` in the ``mindspore`` container (a string
    runs through ``/bin/sh -c``), with ``env`` and ``volume_mounts``; the pods get
    ``volumes``. ``scheduler`` adds the Scheduler replica that distributed MindSpore needs
    (the operator then injects the ``MS_*`` variables); without it the job is standalone.
    ``accelerators_per_worker`` sets the limit of the ``accelerator`` of Workers only
    (merged into ``worker_resources``): ``"gpu"`` (``nvidia.com/gpu``, the default),
    ``"npu"`` (``huawei.com/Ascend910``) or a resource name; ``gpus_per_worker`` is the
    same for ``"gpu"`` (ValueError if both are given). ``restart_policy`` defaults to
    ExitCode: a worker killed by a signal (the OOM killer, a preemption) restarts the job
    from its checkpoint, a script error fails it. The other arguments map to the
    same-named spec fields and are left out (server-side defaults apply) when None.

    The result is not validated here; ``create`` does that before sending anything.
    """
    cmd = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    env = dict(env or {})
    resources: JSON = copy.deepcopy(dict(worker_resources or {}))
    if gpus_per_worker and accelerators_per_worker:
        raise ValueError("give accelerators_per_worker or gpus_per_worker, not both")
    if gpus_per_worker:
        accelerator, accelerators_per_worker = "gpu", gpus_per_worker
    if accelerators_per_worker:
        limits = dict(resources.get("limits") or {})
        limits[accelerator_resource(accelerator)] = accelerators_per_worker
        resources["limits"] = limits

    def replica(replicas: int, res: Mapping[str, Any] | None) -> JSON:
        container = _container(image, cmd, env, volume_mounts, res, image_pull_policy)
        return _replica(replicas, restart_policy, container, volumes)

    replica_specs: JSON = {}
    if scheduler:
        replica_specs[c.SCHEDULER] = replica(1, None)
    if ps:
        replica_specs[c.PS] = replica(ps, None)
    replica_specs[c.WORKER] = replica(workers, resources or None)

    spec: JSON = {"msReplicaSpecs": replica_specs}
    spec.update(_given(successPolicy=success_policy, restartScope=restart_scope))
    return _job(name, namespace, labels, spec, clean_pod_policy, backoff_limit)


def msrun_job(
    name: str,
    image: str,
    script: str | Sequence[str],
    *,
    pods: int = 1,
    local_workers: int | None = None,
    devices_per_pod: int = 0,
    device_resource: str = NPU_RESOURCE,
    master_port: int | None = None,
    msrun_flags: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    volumes: Sequence[Mapping[str, Any]] = (),
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    restart_policy: str = c.EXIT_CODE,
    clean_pod_policy: str | None = None,
    success_policy: str | None = None,
    backoff_limit: int | None = None,
    resources: Mapping[str, Any] | None = None,
    image_pull_policy: str | None = None,
) -> JSON:
    """An MSJob dict whose ``pods`` Worker pods each run msrun with several MindSpore
    workers (``spec.msrun``), ready for ``MSJobClient.create``.

    Each pod runs ``python -m msop.integrations.msrun [msrun_flags] <script>`` (``script``
    is the path, or the path and its arguments), which starts msrun from the variables msop
    gives the pod. ``local_workers`` is the workers per pod; leave it None to get one per
    device: ``devices_per_pod`` sets the ``device_resource`` limit (Ascend NPUs by default;
    ``"gpu"`` or ``nvidia.com/gpu`` for GPUs, as for :func:`dataparallel_job`'s
    ``accelerator``). ``restart_policy`` defaults to ExitCode: the launcher
    exits 128+N when a worker died of signal N, which restarts the job from its checkpoint,
    while a script error fails it. The other arguments map to the same-named spec fields.
    """
    args = [script] if isinstance(script, str) else list(script)
    cmd = ["python", "-m", "msop.integrations.msrun", *msrun_flags, *args]
    res: JSON = copy.deepcopy(dict(resources or {}))
    if devices_per_pod:
        device = accelerator_resource(device_resource)
        res["limits"] = {**(res.get("limits") or {}), device: devices_per_pod}
    container = _container(image, cmd, dict(env or {}), volume_mounts, res, image_pull_policy)
    spec: JSON = {
        "msrun": _given(localWorkers=local_workers, masterPort=master_port),
        "msReplicaSpecs": {c.WORKER: _replica(pods, restart_policy, container, volumes)},
    }
    spec.update(_given(successPolicy=success_policy))
    return _job(name, namespace, labels, spec, clean_pod_policy, backoff_limit)


def _replica(
    replicas: int, restart_policy: str, container: JSON, volumes: Sequence[Mapping[str, Any]]
) -> JSON:
    pod_spec: JSON = {"containers": [container]}
    if volumes:
        pod_spec["volumes"] = copy.deepcopy([dict(v) for v in volumes])
    return {"replicas": replicas, "restartPolicy": restart_policy, "template": {"spec": pod_spec}}


def _job(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None,
    spec: JSON,
    clean_pod_policy: str | None,
    backoff_limit: int | None,
) -> JSON:
    run_policy = _given(cleanPodPolicy=clean_pod_policy, backoffLimit=backoff_limit)
    if run_policy:
        spec["runPolicy"] = run_policy
    metadata: JSON = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": metadata, "spec": spec}
