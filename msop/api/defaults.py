"""Defaulting of MSJob objects: the values the API implies when a field is left out.

The CRD schema carries one default, `replicas: 1` (the scale subresource needs
`spec.msReplicaSpecs.Worker.replicas` to exist); otherwise stored objects stay as the user
wrote them, and the reconciler calls `apply_defaults` on every object it reads instead.
"""

from __future__ import annotations

from typing import Any

from msop.api import constants as c
from msop.api.copying import copy_json


def apply_defaults(job: dict[str, Any]) -> dict[str, Any]:
    """Return a defaulted deep copy of `job`; the input is never mutated.

    - `spec.msReplicaSpecs` keys are renamed to their canonical case (`worker` -> `Worker`),
      unless the canonical key is already present (that duplicate is a validation error, and
      both entries are kept for `validate` to report);
    - each replica spec gets `replicas: 1` and `restartPolicy: Never` when unset;
    - `spec.runPolicy.cleanPodPolicy` defaults to `Running`, `spec.successPolicy` to `""`;
    - `spec.restartScope` defaults to `Job` for a job with a Scheduler that is not elastic
      and for an msrun job, else `Pod` (`default_restart_scope`);
    - the `mindspore` container of every template gets a `msjob-port` (2222/TCP) port unless it
      already has a port of that name, or already exposes 2222/TCP under another name (adding
      a second 2222/TCP would make the pod invalid).

    Parts of the wrong type are left untouched (never raises). Idempotent:
    `apply_defaults(apply_defaults(j)) == apply_defaults(j)`.
    """
    out = copy_json(job)
    spec = out.get("spec")
    if spec is None:
        spec = out["spec"] = {}
    if not isinstance(spec, dict):
        return out

    run_policy = spec.get("runPolicy")
    if run_policy is None:
        run_policy = spec["runPolicy"] = {}
    if isinstance(run_policy, dict) and not run_policy.get("cleanPodPolicy"):
        run_policy["cleanPodPolicy"] = c.DEFAULT_CLEAN_POD_POLICY

    if spec.get("successPolicy") is None:
        spec["successPolicy"] = c.SUCCESS_DEFAULT

    replica_specs = spec.get("msReplicaSpecs")
    if isinstance(replica_specs, dict):
        spec["msReplicaSpecs"] = _canonical_keys(replica_specs)
        for replica_spec in spec["msReplicaSpecs"].values():
            if isinstance(replica_spec, dict):
                _default_replica_spec(replica_spec)
    if spec.get("restartScope") is None:
        spec["restartScope"] = default_restart_scope(spec)
    return out


def default_restart_scope(spec: dict[str, Any]) -> str:
    """``Job`` for a MindSpore cluster (a Scheduler replica and not elastic, or
    ``spec.msrun``), else ``Pod``.

    The processes of one MindSpore cluster cannot take back a member that restarts alone:
    the Scheduler rejects it as a repeated registration, or the ring collectives of its
    peers fail. Jobs without a Scheduler run independent processes, and elastic jobs
    (``enableDynamicWorker``) are built to lose workers, so they keep ms-operator's
    per-pod restarts."""
    if isinstance(spec.get("msrun"), dict):
        return c.RESTART_SCOPE_JOB  # msrun's workers form one cluster too
    specs = spec.get("msReplicaSpecs")
    scheduler = None
    if isinstance(specs, dict):
        for key, value in specs.items():
            if isinstance(key, str) and c.canonical_replica_type(key) == c.SCHEDULER:
                scheduler = value
    replicas = scheduler.get("replicas", c.DEFAULT_REPLICAS) if isinstance(scheduler, dict) else 0
    if isinstance(replicas, int) and replicas > 0 and spec.get("enableDynamicWorker") is not True:
        return c.RESTART_SCOPE_JOB
    return c.RESTART_SCOPE_POD


def _canonical_keys(replica_specs: dict[str, Any]) -> dict[str, Any]:
    renamed: dict[str, Any] = {}
    for key, value in replica_specs.items():
        canonical = c.canonical_replica_type(key) if isinstance(key, str) else None
        if canonical is None or canonical in replica_specs:
            renamed[key] = value
        else:
            renamed[canonical] = value
    return renamed


def _default_replica_spec(replica_spec: dict[str, Any]) -> None:
    if replica_spec.get("replicas") is None:
        replica_spec["replicas"] = c.DEFAULT_REPLICAS
    if not replica_spec.get("restartPolicy"):
        replica_spec["restartPolicy"] = c.DEFAULT_RESTART_POLICY
    template = replica_spec.get("template")
    pod_spec = template.get("spec") if isinstance(template, dict) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if not isinstance(containers, list):
        return
    for container in containers:
        if isinstance(container, dict) and container.get("name") == c.DEFAULT_CONTAINER_NAME:
            _default_port(container)


def _default_port(container: dict[str, Any]) -> None:
    ports = container.get("ports")
    if ports is None:
        ports = container["ports"] = []
    if not isinstance(ports, list):
        return
    for port in ports:
        if not isinstance(port, dict):
            continue
        if port.get("name") == c.DEFAULT_PORT_NAME:
            return
        if port.get("containerPort") == c.DEFAULT_PORT and port.get("protocol", "TCP") == "TCP":
            return
    ports.append({"name": c.DEFAULT_PORT_NAME, "containerPort": c.DEFAULT_PORT, "protocol": "TCP"})
