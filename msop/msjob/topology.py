"""Kueue's Topology-Aware Scheduling (TAS) for MSJobs: what a replica type's template asks
of the topology, and what its pods carry once Kueue has chosen where they go.

Kueue's built-in integrations do this in their ``PodSets`` (the request) and when they
start an admitted job (the pods' gate); for MSJobs msop does it, and :mod:`.kueue` calls
here from ``pod_sets`` and ``placements``. Pure functions, no I/O.

**The request.** A replica template's annotations ask for a topology level (a node label
of Kueue's ``Topology``, such as a rack label or ``kubernetes.io/hostname``), as on
Kueue's own jobs:

=================================================  ========================================
annotation (on ``template.metadata``)              the pod set's ``topologyRequest``
=================================================  ========================================
``kueue.x-k8s.io/podset-required-topology: L``     ``required: L``: every pod in one domain
                                                   of level L, or the job waits
``kueue.x-k8s.io/podset-preferred-topology: L``    ``preferred: L``: one domain of L if one
                                                   fits, else the fewest domains one level up,
                                                   and so on
``kueue.x-k8s.io/podset-unconstrained-topology``   ``unconstrained``: anywhere with room
``kueue.x-k8s.io/podset-slice-required-topology``  ``podSetSliceRequiredTopology`` and
and ``kueue.x-k8s.io/podset-slice-size: N``        ``podSetSliceSize``: every N consecutive
                                                   pods in one domain of that level
=================================================  ========================================

Every request names ``podIndexLabel: training.kubeflow.org/replica-index`` (as Kueue's
Kubeflow integration does): the pod's index within its replica type, 0..n-1, by which
Kueue's ungater gives pod *i* the *i*-th place of the assignment. A template without any
of these annotations gets no request, and its pod set is as without TAS (Kueue's Kubeflow
integration sends the ``podIndexLabel`` alone then; msop leaves such Workloads as they
were).

The rules are Kueue's job webhook's (``jobframework.ValidateTASPodSetRequest``): at most
one of required, preferred and unconstrained; levels that are label names (of at most 63
characters, the Workload's own limit); unconstrained a boolean; a slice level and a slice
size together, the size an integer from 1 to the replica count. Kueue has no webhook for
MSJobs, so msop checks them before it creates the Workload (:func:`refusal`): a job that
breaks one gets no Workload and waits, ``Queued`` with reason :data:`REASON_INVALID` and
a Warning Event, until its template is fixed. PodSet groups
(``kueue.x-k8s.io/podset-group-name``) and multi-level slices
(``kueue.x-k8s.io/podset-slice-required-topology-constraints``, alpha) are refused the
same way: msop does not implement them.

**The pods.** When the admission of a pod set has a ``topologyAssignment`` (or waits for
one, ``delayedTopologyRequest: Pending``), its pods are created held by Kueue's
scheduling gate ``kueue.x-k8s.io/topology`` and annotated ``kueue.x-k8s.io/workload:
<Workload>`` (with the ``kueue.x-k8s.io/podset`` label every admitted pod has, that is how
Kueue's ungater finds them). A pod set admitted by TAS without asking (every flavor of its
ClusterQueue has a topology) also gets ``kueue.x-k8s.io/podset-unconstrained-topology:
"true"``, as Kueue gives its own: the ungater looks only at pods that carry one of the
topology annotations. The ungater then removes the gate and adds the domain's node labels
(down to ``kubernetes.io/hostname`` when the topology has it) to the pod's
``nodeSelector``; msop never rewrites a pod it created, so nothing undoes that, and a
gated pod is Pending like any pod not yet scheduled.

**A lost node.** When a node that holds a pod of a pod set placed down to
``kubernetes.io/hostname`` fails (deleted, or not ready once its pods are gone), Kueue
names it in the Workload's ``status.unhealthyNodes``, finds a node in its place (in the
same domain of the required level) and rewrites that pod set's ``topologyAssignment``
without admitting the Workload again (its failed-node replacement, on by default since
Kueue 0.14). The ungater gives a gated pod whatever place of the assignment no pod holds:
a pod created *before* Kueue has moved the place would be sent to the lost node, and
never run. So while a place without a pod is on a node that cannot take one
(:func:`unplaceable`: named in ``unhealthyNodes``, gone from msop's node cache, or not
ready), the job's missing pods are not created (:meth:`.kueue.Decision.release_pods`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from msop.api import constants as c
from msop.api.types import MSJob
from msop.api.validation import QUALIFIED_NAME_PATTERN
from msop.kube.objects import JSON
from msop.msjob.scheduling import Placement, Wait

REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED: Final = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
#: Kueue annotations msop does not implement (refused, not ignored: a job that asks for
#: them would otherwise be placed as if it had not).
UNSUPPORTED: Final = (
    "kueue.x-k8s.io/podset-group-name",
    "kueue.x-k8s.io/podset-slice-required-topology-constraints",
)

#: The scheduling gate Kueue's ungater removes once it has put the domain's node labels
#: into the pod's nodeSelector.
GATE: Final = "kueue.x-k8s.io/topology"
#: Names the pod's Workload: the ungater lists a Workload's pods by it.
WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
#: The lowest level of a topology placed down to nodes; Kueue replaces failed nodes only
#: in such assignments.
HOSTNAME: Final = "kubernetes.io/hostname"

#: The ``Queued`` reason of a job whose topology annotations Kueue would refuse.
REASON_INVALID: Final = "InvalidTopologyRequest"

_LEVEL = re.compile(QUALIFIED_NAME_PATTERN.removesuffix("$") + r"\Z")
#: The longest level a Workload's topologyRequest holds (Kueue's CRD: a longer one is
#: refused when the Workload is created).
_LEVEL_MAX = 63
_INT = re.compile(r"[+-]?[0-9]+\Z")
_INT32_MAX = 2**31 - 1
#: Go's strconv.ParseBool, which Kueue reads the unconstrained annotation with.
_BOOLS: Final = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


def _annotations(template: Mapping[str, Any]) -> dict[str, str]:
    raw = (template.get("metadata") or {}).get("annotations") or {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v) for k, v in raw.items()}


def _int32(value: str) -> int | None:
    """``value`` as Go's ``strconv.ParseInt(value, 10, 32)`` reads it; None if it does not."""
    if not _INT.match(value):
        return None
    n = int(value)
    return n if -_INT32_MAX - 1 <= n <= _INT32_MAX else None


def request(template: Mapping[str, Any]) -> JSON | None:
    """The ``topologyRequest`` of the pod set of a replica ``template``; None when its
    annotations ask for no topology. Kueue's precedence (required, then preferred, then
    unconstrained); a value Kueue could not read is left out (:func:`problems` names it,
    and no Workload is created while there is one)."""
    notes = _annotations(template)
    out: JSON = {}
    if REQUIRED in notes:
        out["required"] = notes[REQUIRED]
    elif PREFERRED in notes:
        out["preferred"] = notes[PREFERRED]
    elif UNCONSTRAINED in notes and notes[UNCONSTRAINED] in _BOOLS:
        out["unconstrained"] = _BOOLS[notes[UNCONSTRAINED]]
    if SLICE_REQUIRED in notes and SLICE_SIZE in notes:
        size = _int32(notes[SLICE_SIZE])
        if size is not None:
            out["podSetSliceRequiredTopology"] = notes[SLICE_REQUIRED]
            out["podSetSliceSize"] = size
    if not out:
        return None
    out["podIndexLabel"] = c.LABEL_REPLICA_INDEX
    return out


def problems(job: JSON) -> list[str]:
    """What Kueue would refuse in the topology annotations of the job's replica templates
    (those with replicas), one sentence each; empty when there is nothing."""
    out: list[str] = []
    specs = MSJob(job).replica_specs
    for rtype in c.REPLICA_TYPES:
        spec = specs.get(rtype)
        if spec is None or spec.replicas < 1:
            continue
        notes = _annotations(spec.template)
        where = f"the {rtype} template's annotation"
        levels = [k for k in (REQUIRED, PREFERRED, UNCONSTRAINED) if k in notes]
        if len(levels) > 1:
            out.append(
                f"the {rtype} template has {' and '.join(levels)}: at most one of "
                f"{REQUIRED}, {PREFERRED} and {UNCONSTRAINED} may be set"
            )
        for key in (REQUIRED, PREFERRED, SLICE_REQUIRED):
            if key in notes and not _LEVEL.match(notes[key]):
                out.append(f"{where} {key}: {notes[key]!r} is not a node label name")
            elif key in notes and len(notes[key]) > _LEVEL_MAX:
                out.append(
                    f"{where} {key}: {notes[key]!r} is longer than the {_LEVEL_MAX} "
                    "characters a Workload holds"
                )
        if UNCONSTRAINED in notes and notes[UNCONSTRAINED] not in _BOOLS:
            out.append(f"{where} {UNCONSTRAINED}: {notes[UNCONSTRAINED]!r} is not a boolean")
        if SLICE_SIZE in notes:
            size = _int32(notes[SLICE_SIZE])
            if size is None or not 1 <= size <= spec.replicas:
                out.append(
                    f"{where} {SLICE_SIZE}: {notes[SLICE_SIZE]!r} is not an integer from 1 "
                    f"to the replica count ({spec.replicas})"
                )
            if SLICE_REQUIRED not in notes:
                out.append(f"{where} {SLICE_SIZE} needs {SLICE_REQUIRED}")
        elif SLICE_REQUIRED in notes:
            out.append(f"{where} {SLICE_REQUIRED} needs {SLICE_SIZE}")
        out += [f"{where} {key} is not supported by msop" for key in UNSUPPORTED if key in notes]
    return out


def refusal(job: JSON) -> Wait | None:
    """Why the job gets no Workload while its topology annotations break Kueue's rules
    (a Warning: the user must fix the template); None when they do not."""
    found = problems(job)
    if not found:
        return None
    view = MSJob(job)
    return Wait(
        REASON_INVALID,
        f"MSJob {view.namespace}/{view.name}: {'; '.join(found)}. Its Workload is created "
        "once the template is fixed.",
        event_type="Warning",
    )


def assigned(assignment: JSON) -> bool:
    """Whether a pod set's admission places its pods by topology (now, or once its
    delayed topology request is answered)."""
    return bool(assignment.get("topologyAssignment")) or (
        assignment.get("delayedTopologyRequest") == "Pending"
    )


def placement(wl: JSON, assignment: JSON) -> Placement | None:
    """What the pods of the pod set of ``assignment`` (in Workload ``wl``'s admission)
    carry for Kueue's ungater; None when it is not placed by topology."""
    if not assigned(assignment):
        return None
    name = assignment.get("name")
    pod_set: JSON = next(
        (ps for ps in (wl.get("spec") or {}).get("podSets") or [] if ps.get("name") == name),
        {},
    )
    req = pod_set.get("topologyRequest") or {}
    annotations = {WORKLOAD_ANNOTATION: str(wl["metadata"]["name"])}
    if not any(k in req for k in ("required", "preferred", "unconstrained")):
        annotations[UNCONSTRAINED] = "true"  # TAS without asking: the ungater's mark
    return Placement(annotations=annotations, scheduling_gates=[GATE])


def node_places(assignment: JSON) -> dict[str, int]:
    """How many pods the pod set of ``assignment`` has on each node, from its
    ``topologyAssignment`` (Kueue's v1beta2 form: slices of domains, each level's values
    either one for all or one per domain, with a prefix and suffix); empty when it has
    none, or when its lowest level is not ``kubernetes.io/hostname``."""
    ta = assignment.get("topologyAssignment") or {}
    levels = ta.get("levels") or []
    if not levels or levels[-1] != HOSTNAME:
        return {}
    out: dict[str, int] = {}
    for piece in ta.get("slices") or []:
        domains = int(piece.get("domainCount") or 0)
        values = (piece.get("valuesPerLevel") or [{}])[-1]
        counts = piece.get("podCounts") or {}
        individual = values.get("individual") or {}
        roots = individual.get("roots") or []
        for i in range(domains):
            if "universal" in values:
                host = str(values["universal"])
            elif i < len(roots):
                host = f"{individual.get('prefix') or ''}{roots[i]}{individual.get('suffix') or ''}"
            else:
                continue
            if "universal" in counts:
                n = int(counts["universal"])
            else:
                each = counts.get("individual") or []
                n = int(each[i]) if i < len(each) else 0
            out[host] = out.get(host, 0) + n
    return out


def unhealthy_nodes(wl: JSON) -> list[str]:
    """The nodes Kueue is replacing in the Workload's topology assignment
    (``status.unhealthyNodes``)."""
    return [
        str(n.get("name"))
        for n in (wl.get("status") or {}).get("unhealthyNodes") or []
        if isinstance(n, dict) and n.get("name")
    ]


def pod_host(pod: JSON) -> str:
    """The node a pod is on, or that Kueue's ungater sent it to; "" while it is gated."""
    spec = pod.get("spec") or {}
    return str(spec.get("nodeName") or (spec.get("nodeSelector") or {}).get(HOSTNAME) or "")


def free_places(assignment: JSON, pods: Sequence[JSON]) -> list[str]:
    """The nodes where the assignment has a place that none of ``pods`` (the pod set's
    pods that have not ended) holds, one entry a place, in the assignment's order."""
    held: dict[str, int] = {}
    for pod in pods:
        host = pod_host(pod)
        if host:
            held[host] = held.get(host, 0) + 1
    out: list[str] = []
    for host, n in node_places(assignment).items():
        out += [host] * max(0, n - held.get(host, 0))
    return out


def unplaceable(
    wl: JSON, assignment: JSON, pods: Sequence[JSON], usable: Callable[[str], str]
) -> list[tuple[str, str]]:
    """The free places of ``assignment`` (:func:`free_places`) on nodes that cannot take a
    pod, with why: Kueue names the node in ``status.unhealthyNodes``, or ``usable(node)``
    says why not ("" when it can)."""
    replacing = set(unhealthy_nodes(wl))
    out: list[tuple[str, str]] = []
    for host in dict.fromkeys(free_places(assignment, pods)):
        why = "Kueue is replacing it" if host in replacing else usable(host)
        if why:
            out.append((host, why))
    return out
