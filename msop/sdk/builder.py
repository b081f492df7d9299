"""Building the common MSJob without writing a PodTemplate: :func:`dataparallel_job`."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from msop.api import constants as c
from msop.kube.objects import JSON

GPU_RESOURCE = "nvidia.com/gpu"


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
    env: Mapping[str, str] | None = None,
    volumes: Sequence[Mapping[str, Any]] = (),
    volume_mounts: Sequence[Mapping[str, Any]] = (),
    scheduler: bool = True,
    namespace: str | None = None,
    labels: Mapping[str, str] | None = None,
    restart_policy: str = c.NEVER,
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
    ``gpus_per_worker`` sets the ``nvidia.com/gpu`` limit of Workers only (merged into
    ``worker_resources``). The other arguments map to the same-named spec fields and are
    left out (server-side defaults apply) when None.

    The result is not validated here; ``create`` does that before sending anything.
    """
    cmd = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    env = dict(env or {})
    resources: JSON = copy.deepcopy(dict(worker_resources or {}))
    if gpus_per_worker:
        limits = dict(resources.get("limits") or {})
        limits[GPU_RESOURCE] = gpus_per_worker
        resources["limits"] = limits

    def replica(replicas: int, res: Mapping[str, Any] | None) -> JSON:
        pod_spec: JSON = {
            "containers": [_container(image, cmd, env, volume_mounts, res, image_pull_policy)]
        }
        if volumes:
            pod_spec["volumes"] = copy.deepcopy([dict(v) for v in volumes])
        return {
            "replicas": replicas,
            "restartPolicy": restart_policy,
            "template": {"spec": pod_spec},
        }

    replica_specs: JSON = {}
    if scheduler:
        replica_specs[c.SCHEDULER] = replica(1, None)
    if ps:
        replica_specs[c.PS] = replica(ps, None)
    replica_specs[c.WORKER] = replica(workers, resources or None)

    spec: JSON = {"msReplicaSpecs": replica_specs}
    run_policy = _given(cleanPodPolicy=clean_pod_policy, backoffLimit=backoff_limit)
    if run_policy:
        spec["runPolicy"] = run_policy
    spec.update(_given(successPolicy=success_policy, restartScope=restart_scope))

    metadata: JSON = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if labels:
        metadata["labels"] = dict(labels)
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": metadata, "spec": spec}
