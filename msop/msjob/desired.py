"""What should exist for an MSJob: its pods and its Scheduler Service, as pure functions
(what a scheduling system adds is its own: :mod:`.gang`, :mod:`.kueue`).

Every function here takes a *defaulted* MSJob dict (``msop.api.apply_defaults``) and
returns new plain dicts ready to POST; nothing is read from or written to a cluster.
``msop render`` and the reconciler call the same functions, so what a user previews is
what the operator creates.

Names, labels and owner references come from :mod:`msop.api.naming`: pods and services
are ``<job>-<type>-<index>`` with the type in lower case.

The ``MS_*`` environment (ms-operator's contract) goes into the container named
``mindspore`` of jobs that have a Scheduler replica (distributed jobs):

- ``MS_ROLE``: MS_SCHED, MS_PSERVER or MS_WORKER;
- ``MS_SCHED_HOST``: the Scheduler pod's own ``status.podIP`` (downward API) on the
  Scheduler; the ClusterIP of the Scheduler Service on every other replica;
- ``MS_SCHED_PORT``: the Scheduler's ``msjob-port`` (default 2222);
- ``MS_WORKER_NUM`` / ``MS_SERVER_NUM``: Worker and PS replica counts;
- ``MS_NODE_ID``: the pod name.

A job with ``spec.msrun`` has Worker pods only, each running msrun with several local
workers; msrun starts the Scheduler in Worker 0's pod. Its pods' ``mindspore`` container
gets what msrun needs (the launcher ``msop.integrations.msrun`` passes it on):

- ``MS_SCHED_HOST``: Worker 0's own ``status.podIP`` there (msrun starts the Scheduler only
  where the master address is local); the ClusterIP of the Service ``<job>-worker-0``
  elsewhere;
- ``MS_SCHED_PORT``: ``spec.msrun.masterPort`` (default 8118);
- ``MS_WORKER_NUM``: local workers x Worker replicas (msrun's ``--worker_num``);
- ``MS_LOCAL_WORKER``: the local workers per pod; ``MS_NODE_RANK``: the pod's index;
- ``MSOP_TERMINATION_FILE``: the container's termination message path, where the launcher
  says which local worker failed and how.

Jobs without a Scheduler or msrun (standalone training) get no ``MS_*`` variables, exactly like
ms-operator: MindSpore reads ``MS_ROLE`` as "join a cluster", which a standalone script
must not do. Operator values replace user-set variables of the same name, because the
cluster only works if every replica agrees on them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from msop.api import constants as c
from msop.api import quantity
from msop.api.copying import copy_json
from msop.api.naming import (
    object_name,
    owner_reference,
    replica_labels,
    replica_selector,
)
from msop.api.types import MSJob, ReplicaSpec
from msop.kube.objects import JSON
from msop.msjob.inplace import pods as inplace
from msop.msjob.scheduling import Placement

if TYPE_CHECKING:
    from fractions import Fraction  # imported where used: see msop.api.quantity


def has_scheduler(job: JSON) -> bool:
    specs = MSJob(job).replica_specs
    return c.SCHEDULER in specs and specs[c.SCHEDULER].replicas > 0


def is_msrun(job: JSON) -> bool:
    return MSJob(job).spec.msrun is not None


def rendezvous(job: JSON) -> tuple[str, int] | None:
    """The pod the others find through the job's Service: Scheduler 0, or Worker 0 of an
    msrun job (its msrun starts the Scheduler); None for a job without either."""
    view = MSJob(job)
    if has_scheduler(job):
        return (c.SCHEDULER, 0)
    if view.spec.msrun is not None and view.replica_specs.replicas(c.WORKER) > 0:
        return (c.WORKER, 0)
    return None


def rendezvous_port(job: JSON) -> int:
    view = MSJob(job)
    msrun = view.spec.msrun
    if msrun is not None:
        return msrun.master_port
    return view.replica_specs[c.SCHEDULER].port


def scheduler_service(job: JSON) -> JSON:
    """The ClusterIP Service in front of the rendezvous pod (:func:`rendezvous`): Scheduler
    0 on its ``msjob-port``, or Worker 0 of an msrun job on ``spec.msrun.masterPort``."""
    view = MSJob(job)
    slot = rendezvous(job)
    if slot is None:
        raise ValueError(f"{view.name}: the job has no Scheduler and no msrun")
    port = rendezvous_port(job)
    name = object_name(view.name, *slot)
    labels = replica_labels(view.name, *slot)
    selector = replica_selector(view.name, *slot)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": view.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [
                {
                    "name": c.DEFAULT_PORT_NAME,
                    "port": port,
                    "targetPort": port,
                    "protocol": "TCP",
                }
            ],
        },
    }


def selector_fix(job: JSON, svc: JSON) -> JSON | None:
    """A merge patch that gives the rendezvous Service (:func:`scheduler_service`) msop's
    selector when its own would not select the rendezvous pod msop creates (a Service
    another operator made: ms-operator's, or an older layout); None when it does. The
    Service is patched, not replaced: its ClusterIP is the other pods' ``MS_SCHED_HOST``."""
    slot = rendezvous(job)
    if slot is None:
        return None
    view = MSJob(job)
    rtype, index = slot
    template = view.replica_specs[rtype].template
    labels = {
        **((template.get("metadata") or {}).get("labels") or {}),
        **replica_labels(view.name, rtype, index),
    }
    have = (svc.get("spec") or {}).get("selector") or {}
    if have and all(labels.get(k) == v for k, v in have.items()):
        return None
    want: dict[str, str | None] = {k: None for k in have}
    want.update(replica_selector(view.name, rtype, index))
    return {"spec": {"selector": want}}


def _env(view: MSJob, spec: ReplicaSpec, pod_name: str, sched_host: str | None) -> list[JSON]:
    specs = view.replica_specs
    sched_port = specs[c.SCHEDULER].port
    host: JSON
    if spec.replica_type == c.SCHEDULER:
        host = {"name": c.ENV_SCHED_HOST, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    else:
        host = {"name": c.ENV_SCHED_HOST, "value": sched_host or ""}
    return [
        {"name": c.ENV_ROLE, "value": c.ROLE_BY_TYPE[spec.replica_type]},
        host,
        {"name": c.ENV_SCHED_PORT, "value": str(sched_port)},
        {"name": c.ENV_WORKER_NUM, "value": str(specs.replicas(c.WORKER))},
        {"name": c.ENV_SERVER_NUM, "value": str(specs.replicas(c.PS))},
        {"name": c.ENV_NODE_ID, "value": pod_name},
    ]


def _msrun_env(view: MSJob, index: int, sched_host: str | None, container: JSON) -> list[JSON]:
    local = view.local_workers or 1  # validation refuses a job that does not say
    msrun = view.spec.msrun
    port = msrun.master_port if msrun is not None else c.DEFAULT_MSRUN_MASTER_PORT
    host: JSON
    if index == 0:
        host = {"name": c.ENV_SCHED_HOST, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    else:
        host = {"name": c.ENV_SCHED_HOST, "value": sched_host or ""}
    path = container.get("terminationMessagePath") or c.DEFAULT_TERMINATION_MESSAGE_PATH
    return [
        host,
        {"name": c.ENV_SCHED_PORT, "value": str(port)},
        {"name": c.ENV_WORKER_NUM, "value": str(local * view.replica_specs.replicas(c.WORKER))},
        {"name": c.ENV_LOCAL_WORKER, "value": str(local)},
        {"name": c.ENV_NODE_RANK, "value": str(index)},
        {"name": c.ENV_TERMINATION_FILE, "value": str(path)},
    ]


def progress_env(container: JSON, port: int) -> list[JSON]:
    """What a progress reporter (``msop.integrations``) in Worker 0 reads: the port to
    serve its snapshot on, the pod's own name and uid (the operator checks that a report
    names the pod it asked), and the file for the final snapshot, the container's
    termination message (which the kubelet puts in the pod's status)."""
    path = container.get("terminationMessagePath") or c.DEFAULT_TERMINATION_MESSAGE_PATH
    return [
        {"name": c.ENV_PROGRESS_PORT, "value": str(port)},
        {"name": c.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": c.ENV_POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
        {"name": c.ENV_PROGRESS_FILE, "value": str(path)},
    ]


def progress_port(pod: JSON) -> int | None:
    """The port a pod's progress reporter serves on, if the operator gave it one."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == c.DEFAULT_CONTAINER_NAME:
            for e in container.get("env") or []:
                if e.get("name") == c.ENV_PROGRESS_PORT:
                    try:
                        port = int(str(e.get("value")))
                    except ValueError:
                        return None
                    return port if 0 < port < 65536 else None
    return None


def template_restart_policy_overridden(job: JSON, replica_type: str) -> bool:
    """True if the template sets a restartPolicy that the replica's policy overrides."""
    view = MSJob(job)
    spec = view.replica_specs[replica_type]
    own = spec.pod_spec.get("restartPolicy")
    return bool(own) and own != pod_restart_policy(spec.restart_policy, view.spec.restart_scope)


def pod_restart_policy(replica_restart_policy: str, restart_scope: str) -> str:
    """The pod-level restartPolicy. With ``restartScope: Job`` every restart is the
    operator's (the whole cluster at once), so the kubelet never restarts a container in
    place: Never. With ``Pod``, ExitCode is implemented by the operator over Never and the
    other policies are the kubelet's."""
    if restart_scope == c.RESTART_SCOPE_JOB or replica_restart_policy == c.EXIT_CODE:
        return c.NEVER
    return replica_restart_policy


def cluster_size_env(pod: JSON) -> dict[str, str]:
    """The ``MS_WORKER_NUM`` / ``MS_SERVER_NUM`` values a pod was created with (from its
    ``mindspore`` container), to tell whether it belongs to the cluster as now sized."""
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == c.DEFAULT_CONTAINER_NAME:
            return {
                str(e.get("name")): str(e.get("value"))
                for e in container.get("env") or []
                if e.get("name") in (c.ENV_WORKER_NUM, c.ENV_SERVER_NUM)
            }
    return {}


def wanted_cluster_size_env(job: JSON) -> dict[str, str]:
    """The ``MS_WORKER_NUM`` / ``MS_SERVER_NUM`` values of the job's pods as now sized
    (an msrun job's pods have only the first: every worker of every pod)."""
    view = MSJob(job)
    specs = view.replica_specs
    if view.spec.msrun is not None:
        local = view.local_workers or 1
        return {c.ENV_WORKER_NUM: str(local * specs.replicas(c.WORKER))}
    return {
        c.ENV_WORKER_NUM: str(specs.replicas(c.WORKER)),
        c.ENV_SERVER_NUM: str(specs.replicas(c.PS)),
    }


def pod(
    job: JSON,
    replica_type: str,
    index: int,
    *,
    sched_host: str | None,
    progress_port: int = 0,
    placement: Placement | None = None,
    in_place: inplace.InPlace | None = None,
    generation: int = 0,
    hold: bool = False,
) -> JSON:
    """The pod for one replica.

    ``sched_host`` is the Scheduler Service's ClusterIP; it is required (not None) for
    non-Scheduler replicas of jobs that have a Scheduler, and ignored otherwise.

    The template's labels, annotations and spec are kept; the operator's labels,
    ownerReference, namespace, name and restartPolicy win over whatever the template
    says (a template cannot place a pod in another namespace or claim another owner).
    Raises ValueError if a Scheduler-backed replica is asked for without ``sched_host``.

    ``progress_port`` (not 0) gives Worker 0's ``mindspore`` container what a progress
    reporter needs (:func:`progress_env`).

    ``placement`` is what the scheduling systems add (:class:`~.scheduling.Placement`):
    node labels (the template's own win on a conflict, which Kueue's flavor assignment
    rules out), tolerations, labels, annotations, scheduling gates (added to the
    template's, each once) and a scheduler (the template's wins).

    ``in_place`` (when :func:`.inplace.pods.wanted`) gives the pod what a restart in place
    needs (:func:`.inplace.pods.add_agent`), at the job's restart ``generation``; with
    ``hold``, it replaces a lost member of a restart in place under way and waits at its
    barrier for the others.
    """
    view = MSJob(job)
    spec = view.replica_specs[replica_type]
    name = object_name(view.name, replica_type, index)
    template = spec.template
    tmeta = template.get("metadata") or {}
    labels = {**(tmeta.get("labels") or {}), **replica_labels(view.name, replica_type, index)}
    annotations = dict(tmeta.get("annotations") or {})
    pod_spec: JSON = copy_json(dict(template.get("spec") or {}))
    pod_spec["restartPolicy"] = pod_restart_policy(spec.restart_policy, view.spec.restart_scope)
    _keep_last_words(pod_spec)

    if has_scheduler(job):
        if replica_type != c.SCHEDULER and sched_host is None:
            raise ValueError(f"{name}: the Scheduler Service has no ClusterIP yet")
        _set_env(pod_spec, lambda _: _env(view, spec, name, sched_host))
    elif view.spec.msrun is not None and replica_type == c.WORKER:
        if index != 0 and sched_host is None:
            raise ValueError(f"{name}: the Service of Worker 0 has no ClusterIP yet")
        _set_env(pod_spec, lambda container: _msrun_env(view, index, sched_host, container))

    if progress_port and replica_type == c.WORKER and index == 0:
        _set_env(pod_spec, lambda container: progress_env(container, progress_port))

    if in_place is not None and inplace.wanted(job, in_place):
        inplace.add_agent(
            pod_spec,
            job_uid=view.uid,
            generation=generation,
            policy=spec.restart_policy,
            in_place=in_place,
            hold=hold,
            stop_grace=view.spec.restart_in_place_grace,
        )

    if placement is not None:
        _place(pod_spec, placement)
        labels = {**placement.labels, **labels}
        annotations.update(placement.annotations)

    metadata: JSON = {
        "name": name,
        "namespace": view.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def _place(pod_spec: JSON, placement: Placement) -> None:
    """Add what the scheduling systems give the pod to its spec (see :func:`pod`)."""
    if placement.scheduler_name:
        pod_spec.setdefault("schedulerName", placement.scheduler_name)
    if placement.node_selector:
        pod_spec["nodeSelector"] = {
            **placement.node_selector,
            **(pod_spec.get("nodeSelector") or {}),
        }
    if placement.tolerations:
        pod_spec["tolerations"] = [*(pod_spec.get("tolerations") or []), *placement.tolerations]
    if placement.scheduling_group and "schedulingGroup" not in pod_spec:
        pod_spec["schedulingGroup"] = {"podGroupName": placement.scheduling_group}
    if placement.scheduling_gates:
        gates = list(pod_spec.get("schedulingGates") or [])
        have = {g.get("name") for g in gates if isinstance(g, dict)}
        gates += [{"name": n} for n in placement.scheduling_gates if n not in have]
        pod_spec["schedulingGates"] = gates


#: The ``mindspore`` container's ``terminationMessagePolicy`` unless its template sets one.
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"


def _keep_last_words(pod_spec: JSON) -> None:
    """A failed run of the ``mindspore`` container that wrote no message of its own leaves
    the end of its log as its termination message: the job's condition and Event carry it
    after the pod is deleted (:func:`msop.msjob.podstate.last_output`). A template that
    sets its own policy keeps it."""
    for container in pod_spec.get("containers") or []:
        if container.get("name") == c.DEFAULT_CONTAINER_NAME:
            container.setdefault("terminationMessagePolicy", TERMINATION_MESSAGE_POLICY)


def _set_env(pod_spec: JSON, ours: Callable[[JSON], list[JSON]]) -> None:
    """Put the operator's variables into the ``mindspore`` container, replacing the
    template's of the same names (every replica must agree on them)."""
    for container in pod_spec.get("containers") or []:
        if container.get("name") == c.DEFAULT_CONTAINER_NAME:
            env = ours(container)
            names = {e["name"] for e in env}
            kept = [e for e in container.get("env") or [] if e.get("name") not in names]
            container["env"] = kept + env


def replica_slots(job: JSON) -> list[tuple[str, int]]:
    """Every (replica type, index) the job wants, Scheduler first."""
    specs = MSJob(job).replica_specs
    return [
        (rt, i) for rt in c.REPLICA_TYPES if rt in specs for i in range(max(0, specs[rt].replicas))
    ]


def gang_size(job: JSON) -> int:
    """How many of the job's pods a gang scheduler must place together:
    ``runPolicy.schedulingPolicy.minAvailable``, or every replica."""
    sp = MSJob(job).run_policy.scheduling_policy
    if sp is not None and sp.min_available is not None:
        return sp.min_available
    return total_replicas(job)


def total_replicas(job: JSON) -> int:
    specs = MSJob(job).replica_specs
    return sum(max(0, specs[rt].replicas) for rt in specs if rt in c.REPLICA_TYPES)


def pod_requests(pod_spec: JSON) -> dict[str, tuple[Fraction, bool]]:
    """What a scheduler reserves for a pod built from ``pod_spec``, per resource: the
    value, and whether it was written with a binary suffix (memory as "4Gi").

    A container's request, or its limit where the request is missing (the API server
    defaults one to the other); the containers' sum, plus restartable init containers
    (sidecars), which run alongside them; at least what each ordinary init container
    needs with the sidecars started before it. Pod overhead (a RuntimeClass's) is not
    known before admission and is left out."""
    from fractions import Fraction

    total: dict[str, Fraction] = {}
    binary: set[str] = set()

    def requests(container: JSON) -> dict[str, Fraction]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        out: dict[str, Fraction] = {}
        for name, value in merged.items():
            try:
                out[name] = quantity.parse(value)
            except ValueError:
                continue  # admission rejects a malformed quantity; nothing to reserve
            if quantity.is_binary(value):
                binary.add(name)
        return out

    def add(into: dict[str, Fraction], more: dict[str, Fraction]) -> None:
        for name, value in more.items():
            into[name] = into.get(name, Fraction(0)) + value

    sidecars: dict[str, Fraction] = {}
    init_peak: dict[str, Fraction] = {}
    for container in pod_spec.get("initContainers") or []:
        need = requests(container)
        if container.get("restartPolicy") == "Always":
            add(sidecars, need)
            continue
        with_sidecars = dict(sidecars)
        add(with_sidecars, need)
        for name, value in with_sidecars.items():
            init_peak[name] = max(init_peak.get(name, Fraction(0)), value)
    for container in pod_spec.get("containers") or []:
        add(total, requests(container))
    add(total, sidecars)
    for name, value in init_peak.items():
        total[name] = max(total.get(name, Fraction(0)), value)
    return {name: (value, name in binary) for name, value in total.items() if value}
