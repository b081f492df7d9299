"""What the MSJob controller keeps of its pods and Services in the cache.

A pod as the API server sends it is mostly spec (the whole template, default
tolerations, the projected service-account token volume) and status detail that the
planner never reads: about 25 KB per pod as Python dicts. The informers store a
projection with only the fields :mod:`~msop.msjob.plan` and the reconciler
read (names, labels, owners, deletion state, phase, container exit codes, finish times
and restart counts and termination messages (a progress reporter's final snapshot), the
``MS_WORKER_NUM``/``MS_SERVER_NUM`` a pod was created with and its progress port, the pod
IP and ``hostNetwork`` (the progress poller), its node (or the node Kueue's topology
ungater selected for it), the tolerations that can
tolerate a ``NoExecute`` taint and its devices' health (:mod:`.nodehealth`), the
restart-in-place agent's port and
generation and whether (since when) the pod waits at its barrier, why a pod cannot be
scheduled, a Service's ClusterIP). The caches keep
these encoded (:class:`~msop.informers.store.EncodedStore`), so strings are not interned:
a projection is serialised at once, and the dicts handlers get are short-lived.

A field read from a cached pod or Service must be kept here; the unit tests check that
plans from projected objects equal plans from full ones.
"""

from __future__ import annotations

from typing import Any

from msop.api import constants as c
from msop.informers.store import LAST_APPLIED_ANNOTATION, Obj
from msop.msjob.nodehealth import LIFECYCLE_TAINTS, NO_EXECUTE
from msop.msjob.topology import HOSTNAME

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
#: ``allocatedResourcesStatus``: a device's health (an unhealthy one loses the pod).
_CONTAINER_STATUS = ("name", "restartCount", "state", "lastState", "allocatedResourcesStatus")
_SERVICE_SPEC = ("type", "clusterIP", "clusterIPs", "ports", "selector")
#: The cluster size a pod's MindSpore process was started with (restartScope Job resizes),
#: and the port its progress reporter serves on (the progress poller).
_KEPT_ENV = (c.ENV_WORKER_NUM, c.ENV_SERVER_NUM, c.ENV_PROGRESS_PORT)
#: A pod's restart-in-place agent (msop.msjob.inplace): its port and the job's restart
#: generation when the pod was made; and the barrier's status.
_AGENT, _BARRIER = "msop-agent", "msop-barrier"
_AGENT_ENV = ("MSOP_AGENT_PORT", "MSOP_AGENT_GENERATION")


def _pick(source: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(source, dict):
        return {}
    return {k: source[k] for k in keys if k in source}


def _base(obj: Obj) -> Obj:
    out: Obj = _pick(obj, ("apiVersion", "kind"))
    meta = out["metadata"] = _pick(obj.get("metadata"), _METADATA)
    annotations = meta.get("annotations")
    if isinstance(annotations, dict) and LAST_APPLIED_ANNOTATION in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}
    return out


def pod_projection(obj: Obj) -> Obj:
    """The cached form of a pod; never raises on missing or odd fields."""
    out = _base(obj)
    spec = obj.get("spec")
    if isinstance(spec, dict):
        kept: Obj = {
            **_pick(spec, ("nodeName", "hostNetwork")),
            **_tolerations(spec),
            **_selected_host(spec),
        }
        for container in spec.get("containers") or []:
            if isinstance(container, dict) and container.get("name") == c.DEFAULT_CONTAINER_NAME:
                env = [
                    {"name": e["name"], "value": e.get("value")}
                    for e in container.get("env") or []
                    if isinstance(e, dict) and e.get("name") in _KEPT_ENV
                ]
                if env:
                    kept["containers"] = [{"name": c.DEFAULT_CONTAINER_NAME, "env": env}]
        for container in spec.get("initContainers") or []:
            if isinstance(container, dict) and container.get("name") == _AGENT:
                env = [
                    {"name": e["name"], "value": e.get("value")}
                    for e in container.get("env") or []
                    if isinstance(e, dict) and e.get("name") in _AGENT_ENV
                ]
                kept["initContainers"] = [{"name": _AGENT, "env": env}]
        if kept:
            out["spec"] = kept
    status = obj.get("status")
    projected = _pick(status, _POD_STATUS)
    if isinstance(status, dict) and isinstance(status.get("containerStatuses"), list):
        projected["containerStatuses"] = [
            _pick(cs, _CONTAINER_STATUS) for cs in status["containerStatuses"]
        ]
    if isinstance(status, dict) and isinstance(status.get("initContainerStatuses"), list):
        # Only the barrier's: whether a pod restarting in place waits there.
        barrier = [
            _pick(cs, ("name", "state"))
            for cs in status["initContainerStatuses"]
            if isinstance(cs, dict) and cs.get("name") == _BARRIER
        ]
        if barrier:
            projected["initContainerStatuses"] = barrier
    if unplaced := _unplaced(status):
        projected["conditions"] = unplaced
    out["status"] = projected
    return out


def _selected_host(spec: Obj) -> Obj:
    """``{"nodeSelector": {hostname: node}}``: where Kueue's topology ungater sent a pod
    not bound yet (:func:`.topology.free_places`); ``{}`` if none."""
    selector = spec.get("nodeSelector")
    if isinstance(selector, dict) and selector.get(HOSTNAME):
        return {"nodeSelector": {HOSTNAME: selector[HOSTNAME]}}
    return {}


def _tolerations(spec: Obj) -> Obj:
    """``{"tolerations": [...]}`` with only what can tolerate a NoExecute taint (whether
    its node's taints evict the pod), but not the node lifecycle's taints: the API server
    adds those tolerations to every pod, and only the template's own count for them
    (nodehealth.py); ``{}`` if none is left."""
    kept = [
        t for t in spec.get("tolerations") or []
        if isinstance(t, dict) and t.get("effect") in (None, "", NO_EXECUTE)
        and t.get("key") not in LIFECYCLE_TAINTS
    ]  # fmt: skip
    return {"tolerations": kept} if kept else {}


def _unplaced(status: Any) -> list[Obj]:
    """Only a PodScheduled that is not True: why a pod cannot be placed (a replacement
    that a restart in place waits for says so in the job's condition)."""
    if not isinstance(status, dict) or not isinstance(status.get("conditions"), list):
        return []
    return [
        _pick(cond, ("type", "status", "reason", "message"))
        for cond in status["conditions"]
        if isinstance(cond, dict)
        and cond.get("type") == "PodScheduled"
        and cond.get("status") != "True"
    ]


def service_projection(obj: Obj) -> Obj:
    """The cached form of a Service; never raises on missing or odd fields."""
    out = _base(obj)
    out["spec"] = _pick(obj.get("spec"), _SERVICE_SPEC)
    return out
