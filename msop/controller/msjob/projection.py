"""What the MSJob controller keeps of its pods and Services in the cache.

A pod as the API server sends it is mostly spec (the whole template, default
tolerations, the projected service-account token volume) and status detail that the
planner never reads: about 25 KB per pod as Python dicts. The informers store a
projection with only the fields :mod:`~msop.controller.msjob.plan` and the reconciler
read (names, labels, owners, deletion state, phase, container exit codes and restart
counts, a Service's ClusterIP), then apply the default transform (strings interned).

A field read from a cached pod or Service must be kept here; the unit tests check that
plans from projected objects equal plans from full ones.
"""

from __future__ import annotations

from typing import Any

from msop.informers.store import Obj, default_transform

__all__ = ["pod_projection", "service_projection"]

_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
)
_POD_STATUS = ("phase", "reason", "message", "podIP", "startTime")
_CONTAINER_STATUS = ("name", "restartCount", "state", "lastState")
_SERVICE_SPEC = ("type", "clusterIP", "clusterIPs", "ports", "selector")


def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(source, dict):
        return {}
    return {k: source[k] for k in keys if k in source}


def _base(obj: Obj) -> Obj:
    out: Obj = _pick(obj, ("apiVersion", "kind"))
    out["metadata"] = _pick(obj.get("metadata"), _METADATA)
    return out


def pod_projection(obj: Obj) -> Obj:
    """The cached form of a pod; never raises on missing or odd fields."""
    out = _base(obj)
    spec = obj.get("spec")
    if isinstance(spec, dict) and "nodeName" in spec:
        out["spec"] = {"nodeName": spec["nodeName"]}
    status = obj.get("status")
    projected = _pick(status, _POD_STATUS)
    if isinstance(status, dict) and isinstance(status.get("containerStatuses"), list):
        projected["containerStatuses"] = [
            _pick(cs, _CONTAINER_STATUS) for cs in status["containerStatuses"]
        ]
    out["status"] = projected
    return default_transform(out)


def service_projection(obj: Obj) -> Obj:
    """The cached form of a Service; never raises on missing or odd fields."""
    out = _base(obj)
    out["spec"] = _pick(obj.get("spec"), _SERVICE_SPEC)
    return default_transform(out)
