"""What a pod's node and devices say about it: lost from the first sign, before the pod
is deleted or ends.

Pure reads of one pod and its node, like :mod:`.podstate`; the planner acts on them
(:func:`msop.msjob.passes.PlanningPass.node_signals`). A running pod counts as **lost**
when:

- **its node is not ready**: the node's ``Ready`` condition is ``False`` (the kubelet
  says so) or ``Unknown`` (the node lifecycle controller heard nothing from it), or the
  node carries the ``node.kubernetes.io/not-ready`` or ``node.kubernetes.io/unreachable``
  ``NoExecute`` taint. Kubernetes evicts such a pod only after its default toleration
  (300 s); msop calls it lost once the sign has lasted ``grace`` seconds
  (``msop run --node-lost-after``, 0: at the first sign), so that a ``Ready`` that flaps
  for a moment costs nothing. The sign's age is read from the cluster (the condition's
  ``lastTransitionTime``, the taint's ``timeAdded``, whichever is older): a flap starts it
  again. Where the job's pod template tolerates that taint itself, its toleration is
  followed instead: ``tolerationSeconds`` from the sign, or never without it. The
  tolerations that the API server's ``DefaultTolerationSeconds`` admission adds to every
  pod are not the user's: only the template's count for these two taints.
- **its node has another ``NoExecute`` taint the pod does not tolerate** (the pod's own
  tolerations: the template's, a Kueue flavor's, a webhook's): the taint manager would
  evict it now; with a toleration that has ``tolerationSeconds``, at ``timeAdded`` plus
  those seconds (the shortest of the tolerations that match, per taint).
- **one of its devices is unhealthy**: a container's
  ``allocatedResourcesStatus[].resources[].health`` is ``Unhealthy`` (KEP-4680,
  the ``ResourceHealthStatus`` feature): restarting it on the same device would fail
  again, so it is recreated. At once: the status carries no time to wait from.

A pod whose node is not in the cache is judged on its devices alone (the node was
deleted: its pods go with it, or not yet seen).

:func:`node_projection` is what the operator keeps of a node: its name, its ``Ready``
condition (status and ``lastTransitionTime``) and its ``NoExecute`` taints; about a
hundred bytes a node, and a node's heartbeats change none of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from msop.kube.objects import JSON, parse_time

__all__ = [
    "NOT_READY_TAINT",
    "UNREACHABLE_TAINT",
    "Signal",
    "judge",
    "node_down",
    "node_of",
    "node_projection",
]

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
#: The taints of the node lifecycle controller: the node's own health, timed by ``grace``.
LIFECYCLE_TAINTS = (NOT_READY_TAINT, UNREACHABLE_TAINT)
NO_EXECUTE = "NoExecute"


@dataclass(frozen=True)
class Signal:
    """A sign that a pod is lost: what it is, and in how many seconds it counts."""

    what: str
    """The sign, for the job's condition and Event: ``node NotReady for 12s (taint
    node.kubernetes.io/unreachable:NoExecute)``, ``device nvidia.com/gpu gpu-3 of container
    mindspore is Unhealthy``."""
    node: str
    """The pod's node ("" if none)."""
    lost_in: float
    """Seconds until it counts as lost; <= 0: lost now."""
    node_down: bool = False
    """The node itself is not ready (its kubelet may never confirm a kill)."""


def node_of(pod: JSON) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def node_projection(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The cached form of a node (see the module docstring); never raises on odd fields."""
    meta = _dict(obj.get("metadata"))
    out: dict[str, Any] = {
        "metadata": {k: meta[k] for k in ("name", "resourceVersion", "uid") if k in meta}
    }
    spec = _dict(obj.get("spec"))
    taints = [
        {k: t[k] for k in ("key", "value", "effect", "timeAdded") if k in t}
        for t in spec.get("taints") or []
        if isinstance(t, dict) and t.get("effect") == NO_EXECUTE
    ]
    if taints:
        out["spec"] = {"taints": taints}
    status = _dict(obj.get("status"))
    ready = [
        {k: cond[k] for k in ("type", "status", "lastTransitionTime") if k in cond}
        for cond in status.get("conditions") or []
        if isinstance(cond, dict) and cond.get("type") == "Ready"
    ]
    if ready:
        out["status"] = {"conditions": ready}
    return out


def health(node: Mapping[str, Any]) -> JSON:
    """What of a node (full or projected) says whether it is healthy: two nodes with the
    same health put the same pods at risk."""
    projected = node_projection(node)
    projected.pop("metadata", None)
    return projected


def _tolerates(toleration: JSON, taint: JSON) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def _tolerated_for(tolerations: list[JSON], taint: JSON) -> float | None:
    """How long ``tolerations`` tolerate ``taint``, in seconds: the shortest
    ``tolerationSeconds`` of those that match (as the taint manager takes it); 0 if none
    matches; None (forever) if those that match say no time."""
    matching = [t for t in tolerations if isinstance(t, dict) and _tolerates(t, taint)]
    if not matching:
        return 0.0
    seconds = [t["tolerationSeconds"] for t in matching
               if isinstance(t.get("tolerationSeconds"), int | float)]  # fmt: skip
    if not seconds:
        return None
    return max(0.0, float(min(seconds)))


def _age(now: datetime, since: datetime | None) -> float:
    """Seconds since ``since``; unknown: long ago (a sign without a time counts at once)."""
    return (now - since).total_seconds() if since is not None else float("inf")


def _device(pod: JSON) -> str:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for allocated in cs.get("allocatedResourcesStatus") or []:
            for res in allocated.get("resources") or []:
                if res.get("health") == "Unhealthy":
                    return (
                        f"device {allocated.get('name', '?')} {res.get('resourceID', '?')} of "
                        f"container {cs.get('name', '?')} is Unhealthy"
                    )
    return ""


def _node_down(
    name: str, node: JSON, user_tolerations: list[JSON], now: datetime, grace: float
) -> Signal | None:
    """The node's own health: its ``Ready`` condition and the lifecycle taints, timed by
    ``grace`` unless the template tolerates the taint itself."""
    taints = [t for t in (node.get("spec") or {}).get("taints") or []
              if t.get("effect") == NO_EXECUTE and t.get("key") in LIFECYCLE_TAINTS]  # fmt: skip
    ready = next((cond for cond in (node.get("status") or {}).get("conditions") or []
                  if cond.get("type") == "Ready"), None)  # fmt: skip
    signs: list[tuple[str, datetime | None]] = [
        (str(t["key"]), parse_time(t.get("timeAdded"))) for t in taints
    ]
    state = str((ready or {}).get("status") or "")
    if ready is not None and state != "True":
        key = NOT_READY_TAINT if state == "False" else UNREACHABLE_TAINT
        signs.append((key, parse_time(ready.get("lastTransitionTime"))))
    if not signs:
        return None
    age = max(_age(now, since) for _, since in signs)
    # Per sign: the template's own toleration of its taint (True), else the grace.
    allowed: list[tuple[float, bool]] = []
    for key, _ in signs:
        taint = {"key": key, "effect": NO_EXECUTE}
        if not any(_tolerates(t, taint) for t in user_tolerations if isinstance(t, dict)):
            allowed.append((grace, False))
        elif (seconds := _tolerated_for(user_tolerations, taint)) is not None:
            allowed.append((seconds, True))
    if not allowed:
        return None  # tolerated for ever, as the template says
    wait, own = min(allowed)
    if state == "Unknown":
        said = "unreachable (Ready Unknown)"
    elif state != "False" and any(key == UNREACHABLE_TAINT for key, _ in signs):
        said = "unreachable"
    else:
        said = "NotReady"
    shown = "" if age == float("inf") else f" for {int(age)}s"
    taint_names = ", ".join(f"{t['key']}:{NO_EXECUTE}" for t in taints)
    what = f"node {said}{shown}{f' (taint {taint_names})' if taint_names else ''}"
    if own:
        what += f", which its template tolerates for {wait:g}s"
    return Signal(what, name, wait - age, node_down=True)


def node_down(node: JSON, *, now: datetime, grace: float) -> bool:
    """Whether ``node`` has not been ready (``Ready`` not True, or a lifecycle taint) for
    ``grace`` seconds, whatever any pod tolerates."""
    name = str((node.get("metadata") or {}).get("name") or "")
    signal = _node_down(name, node, [], now, grace)
    return signal is not None and signal.lost_in <= 0


def _other_taints(name: str, node: JSON, tolerations: list[JSON], now: datetime) -> Signal | None:
    """The node's other NoExecute taints, by the pod's tolerations (the taint manager's)."""
    best: Signal | None = None
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") != NO_EXECUTE or taint.get("key") in LIFECYCLE_TAINTS:
            continue
        allowed = _tolerated_for(tolerations, taint)
        if allowed is None:
            continue
        age = _age(now, parse_time(taint.get("timeAdded")))
        value = f"={taint['value']}" if taint.get("value") else ""
        how = f"tolerated {allowed:g}s" if allowed else "not tolerated"
        shown = "" if age == float("inf") else f", added {int(age)}s ago"
        what = f"node has taint {taint.get('key')}{value}:{NO_EXECUTE} ({how}{shown})"
        signal = Signal(what, name, allowed - age)
        if best is None or signal.lost_in < best.lost_in:
            best = signal
    return best


def judge(
    pod: JSON,
    node: JSON | None,
    *,
    template_tolerations: list[JSON],
    now: datetime,
    grace: float,
) -> Signal | None:
    """The first sign that ``pod`` is lost (see the module docstring), with the seconds
    until it counts (soonest first); None if there is none. ``node``: the pod's node
    (None: not known); ``template_tolerations``: the tolerations of the pod's template
    (the user's word on the node lifecycle taints)."""
    name = node_of(pod)
    if device := _device(pod):
        return Signal(device, name, 0.0)
    if node is None:
        return None
    tolerations = list((pod.get("spec") or {}).get("tolerations") or [])
    found = [
        s
        for s in (
            _node_down(name, node, template_tolerations, now, grace),
            _other_taints(name, node, tolerations, now),
        )
        if s is not None
    ]
    return min(found, key=lambda s: s.lost_in) if found else None
