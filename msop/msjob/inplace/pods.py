"""Restart in place: what a job's pods carry for it, and what their status says of it.

With ``restartScope: Job``, a retryable failure restarts the whole MindSpore cluster. By
recreation that is two writes per pod, a scheduling pass for the whole gang and a cold
start on every node. In place, no pod is written: the kubelet restarts every container of
a pod where it is (Kubernetes' ``RestartAllContainers`` container restart rule, beta and on
by default since 1.36), keeping its node, IP, volumes and pulled image.

Each pod of such a job gets, in front of its own init containers:

- ``msop-agent``, a native sidecar (``msop.integrations.agent serve``, the operator's image)
  whose exit with :data:`~msop.integrations.wire.AGENT_RESTART_EXIT_CODE` restarts every
  container of its pod. The operator asks it to, over HTTP at the pod's IP, with a request
  signed by its key, when the job's restart generation moves on; the agent holds only
  the public key, so no pod gets an API credential, and nothing but this operator can
  restart a job. A request for a generation the pod already has does nothing.
- ``msop-barrier``, an init container (``... agent barrier``) that runs on the pod's start
  and after each restart of all its containers, and then holds the training container
  until the operator releases the generation: no rank starts again before every member
  of the cluster has been restarted.
- on the training container (``mindspore``, else the first), the rule that restarts the
  whole pod when it exits with a code its replica's ``restartPolicy`` retries (``ExitCode``:
  128-255; ``OnFailure``/``Always``: any but 0). The failed pod thus restarts itself at
  once; the operator then restarts its peers.

Everything here is pure: :mod:`msop.msjob.restarts` decides, the reconciler sends what
the plan asks (:mod:`.client`).
"""

from __future__ import annotations

from dataclasses import dataclass

from msop.api import constants as c
from msop.api.conditions import get_condition, is_true
from msop.api.copying import copy_json
from msop.api.types import MSJob
from msop.integrations import wire
from msop.kube.objects import JSON

AGENT_CONTAINER = wire.AGENT_CONTAINER
BARRIER_CONTAINER = "msop-barrier"
VOLUME = "msop-agent"
MOUNT_PATH = "/var/run/msop-agent"
KEEPER_PATH = "/var/run/msop-keeper"
"""Where the training container sees the runs directory of the agent's emptyDir."""
KEEPER_LAUNCH = (
    'if [ -f "$1/keeper.py" ]; then for py in python3 python; do'
    ' command -v "$py" >/dev/null 2>&1 && exec "$py" -I "$1/keeper.py" "$@"; done; fi;'
    ' shift 3; exec "$@"'
)
"""The training container's command becomes ``sh -c KEEPER_LAUNCH msop-keeper DIR NAME --
COMMAND...``: the keeper with the image's Python, or the command alone if there is none."""
DEFAULT_PORT = 28090
"""The agent's port unless ``--agent-port`` says otherwise."""
RESTARTING_IN_PLACE = "MSJobRestartingInPlace"
"""``Restarting``'s reason while the job restarts in place."""

_ALL_BUT_0_127 = list(range(128))

SECURITY_CONTEXT: JSON = {
    # The "restricted" Pod Security Standard, so that the agent never keeps a pod out of
    # a namespace that enforces it; the user is the operator image's, whatever the
    # pod's (both containers share their emptyDir's files).
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "runAsGroup": 65532,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True)
class InPlace:
    """The operator's in-place restart settings (``Options.in_place``)."""

    image: str
    """The agent's image (the operator's own)."""
    public_key: str
    """The hex public key the agents check the operator's signatures with."""
    port: int = DEFAULT_PORT
    timeout: float = 120.0
    """How long a restart in place may take before the pods are recreated instead."""
    unavailable: str = ""
    """Why this cluster cannot restart in place ("" if it can): new pods get no agent,
    and the condition of a restart by recreation says why."""


def wanted(job: JSON, in_place: InPlace | None) -> bool:
    """Whether the job's new pods carry the agent: ``restartScope: Job``, not elastic,
    some replica retries, and the cluster can restart in place."""
    if in_place is None or in_place.unavailable:
        return False
    view = MSJob(job)
    if view.spec.restart_scope != c.RESTART_SCOPE_JOB or view.spec.enable_dynamic_worker:
        return False
    if not view.spec.restart_in_place or _host_network(view):
        return False
    return any(s.restart_policy != c.NEVER for s in view.replica_specs.values())


def why_not(job: JSON, in_place: InPlace | None) -> str:
    """Why the job's pods are recreated rather than restarted in place ("" if they may
    be restarted in place)."""
    if in_place is None:
        return "restarts in place are turned off (msop run --restart-in-place=false)"
    if in_place.unavailable:
        return in_place.unavailable
    spec = MSJob(job).spec
    if not spec.restart_in_place:
        return "its spec.restartInPlace is false"
    if spec.enable_dynamic_worker:
        return "an elastic job (enableDynamicWorker) is not restarted in place"
    if _host_network(MSJob(job)):
        return "pods on the host network are not restarted in place (the agent's port)"
    return ""


def _host_network(view: MSJob) -> bool:
    return any(s.pod_spec.get("hostNetwork") is True for s in view.replica_specs.values())


def main_container(pod_spec: JSON) -> JSON | None:
    containers = pod_spec.get("containers") or []
    for container in containers:
        if container.get("name") == c.DEFAULT_CONTAINER_NAME:
            return dict(container)
    return dict(containers[0]) if containers else None


def _rules(policy: str) -> list[JSON]:
    if policy == c.EXIT_CODE:
        codes = {"operator": "NotIn", "values": _ALL_BUT_0_127}
    elif policy in (c.ON_FAILURE, c.ALWAYS):
        codes = {"operator": "NotIn", "values": [0]}
    else:
        return []
    return [{"action": "RestartAllContainers", "exitCodes": codes}]


def _guaranteed(pod_spec: JSON) -> bool:
    for container in pod_spec.get("containers") or []:
        res = container.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                return False
    return True


def _resources(pod_spec: JSON) -> JSON:
    """Small, and of the pod's QoS class: a Guaranteed pod stays Guaranteed."""
    if _guaranteed(pod_spec):
        fixed = {"cpu": "100m", "memory": "64Mi"}
        return {"requests": dict(fixed), "limits": dict(fixed)}
    return {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}


def add_agent(
    pod_spec: JSON,
    *,
    job_uid: str,
    generation: int,
    policy: str,
    in_place: InPlace,
    hold: bool = False,
    stop_grace: int = int(wire.DEFAULT_STOP_GRACE),
) -> None:
    """Give a pod the agent, the barrier and, if its replica's ``policy`` retries, the
    training container's rule (in place). Every member gets the agent: a restart of the
    job restarts them all, a Scheduler whose own failure is never retried included.
    ``hold``: the pod replaces a lost member during a restart in place (a hybrid
    restart): its barrier holds it on its first start too, until the job's ``generation``
    is released for every pod together. ``stop_grace``: seconds the training has after
    the keeper's SIGTERM when the pod is restarted for another member's failure
    (``spec.restartInPlaceGracePeriodSeconds``)."""
    main = main_container(pod_spec)
    if main is None:
        return
    env = [
        {"name": wire.ENV_AGENT_PORT, "value": str(in_place.port)},
        {"name": wire.ENV_AGENT_JOB, "value": job_uid},
        {"name": wire.ENV_AGENT_KEY, "value": in_place.public_key},
        {"name": wire.ENV_AGENT_GENERATION, "value": str(generation)},
        {"name": wire.ENV_AGENT_DIR, "value": MOUNT_PATH},
        *([{"name": wire.ENV_AGENT_HOLD, "value": "1"}] if hold else []),
        {"name": wire.ENV_AGENT_STOP_GRACE, "value": str(stop_grace)},
    ]
    common: JSON = {
        "image": in_place.image,
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "resources": _resources(pod_spec),
        "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}],
        "securityContext": copy_json(SECURITY_CONTEXT),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    agent: JSON = {
        "name": AGENT_CONTAINER,
        **common,
        "command": ["python", "-m", "msop.integrations.agent", "serve"],
        "ports": [{"name": "msop-agent", "containerPort": in_place.port, "protocol": "TCP"}],
        "restartPolicy": "Always",
        "restartPolicyRules": [
            {
                "action": "RestartAllContainers",
                "exitCodes": {"operator": "In", "values": [wire.AGENT_RESTART_EXIT_CODE]},
            }
        ],
    }
    barrier: JSON = {
        "name": BARRIER_CONTAINER,
        **common,
        "env": [dict(e) for e in env],
        "volumeMounts": [{"name": VOLUME, "mountPath": MOUNT_PATH}],
        "command": ["python", "-m", "msop.integrations.agent", "barrier"],
    }
    pod_spec["initContainers"] = [agent, barrier, *(pod_spec.get("initContainers") or [])]
    pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), {"name": VOLUME, "emptyDir": {}}]
    keep_output(main)
    rules = _rules(policy)
    if rules:  # else never retried: restarted with its peers, never for its own failure
        main["restartPolicy"] = c.NEVER
        main["restartPolicyRules"] = rules
    pod_spec["containers"] = [
        main if cont.get("name") == main.get("name") else cont for cont in pod_spec["containers"]
    ]


def keep_output(main: JSON) -> None:
    """Run the training container's command under the keeper
    (:mod:`msop.integrations.keeper`), which keeps the end of its output for after a
    restart in place. A container without ``command`` (the image's entrypoint, which the
    operator cannot see) runs as it is, and keeps nothing."""
    command = main.get("command")
    if not command:
        return
    name = str(main.get("name") or "")
    wrapped = ["/bin/sh", "-c", KEEPER_LAUNCH, "msop-keeper", KEEPER_PATH, name, "--"]
    main["command"] = [*wrapped, *command, *(main.get("args") or [])]
    main.pop("args", None)
    mount = {"name": VOLUME, "mountPath": KEEPER_PATH, "subPath": wire.KEEPER_DIR}
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), mount]


# --- what a pod's status says --------------------------------------------------------------


@dataclass(frozen=True)
class Agent:
    """A pod's agent, as its spec says (kept by the cache's projection)."""

    port: int
    generation: int
    """The job's restart generation when the pod was created."""


def agent_of(pod: JSON) -> Agent | None:
    for container in (pod.get("spec") or {}).get("initContainers") or []:
        if container.get("name") != AGENT_CONTAINER:
            continue
        env = {e.get("name"): e.get("value") for e in container.get("env") or []}
        try:
            return Agent(int(env[wire.ENV_AGENT_PORT]), int(env[wire.ENV_AGENT_GENERATION]))
        except (KeyError, TypeError, ValueError):
            return None
    return None


def _status(pod: JSON, key: str, name: str | None) -> JSON:
    statuses = (pod.get("status") or {}).get(key) or []
    for cs in statuses:
        if name is None or cs.get("name") == name:
            return dict(cs)
    return {}


def main_status(pod: JSON) -> JSON:
    """The training container's status (``mindspore``, else the first)."""
    return _status(pod, "containerStatuses", c.DEFAULT_CONTAINER_NAME) or _status(
        pod, "containerStatuses", None
    )


def at_barrier(pod: JSON) -> bool:
    """The pod restarted and waits at the barrier."""
    barrier = _status(pod, "initContainerStatuses", BARRIER_CONTAINER)
    return "running" in (barrier.get("state") or {})


def restarts_in_place(pod: JSON) -> int:
    """How often the pod's containers were restarted in place (its training
    container's ``restartCount``: with ``restartPolicy: Never`` and only the
    restart-all rule, nothing else restarts it)."""
    return int(main_status(pod).get("restartCount") or 0)


def restarted_for(pod: JSON, generation: int) -> bool:
    """Whether the pod has been restarted for the job's restart ``generation`` (each
    restart in place restarts each pod once: an agent never restarts twice for one)."""
    agent = agent_of(pod)
    if agent is None:
        return False
    return restarts_in_place(pod) >= generation - agent.generation or at_barrier(pod)


def failed_in_place(pod: JSON, generation: int) -> JSON | None:
    """The termination (``{exitCode, reason, finishedAt, ...}``) of a training container
    that failed and is restarting, or has restarted, in place since the job's
    ``generation`` began; None if it has not."""
    agent = agent_of(pod)
    if agent is None:
        return None
    cs = main_status(pod)
    state, last = cs.get("state") or {}, (cs.get("lastState") or {}).get("terminated")
    term = state.get("terminated")
    if term and term.get("exitCode") not in (0, None):
        return dict(term)
    if restarts_in_place(pod) > generation - agent.generation:
        return dict(last) if last else {"reason": "RestartedInPlace"}
    return None


def started_again(pod: JSON, generation: int) -> bool:
    """The pod restarted for ``generation`` and its training container runs again."""
    cs = main_status(pod)
    return (
        restarted_for(pod, generation)
        and not at_barrier(pod)
        and "running" in (cs.get("state") or {})
    )


def replacement(pod: JSON, generation: int) -> bool:
    """The pod was made for the job's restart ``generation``: it replaces a lost member
    of the restart in place under way (its barrier holds it on its first start)."""
    agent = agent_of(pod)
    return agent is not None and agent.generation >= generation


def at_barrier_since(pod: JSON) -> str:
    """When the pod's barrier started waiting (RFC 3339), "" if it does not wait or the
    kubelet did not say."""
    barrier = _status(pod, "initContainerStatuses", BARRIER_CONTAINER)
    return str(((barrier.get("state") or {}).get("running") or {}).get("startedAt") or "")


def unschedulable(pod: JSON) -> str:
    """Why the scheduler cannot place the pod (its ``PodScheduled`` condition's message,
    else its reason); "" if it is placed or nothing says it cannot be."""
    if (pod.get("spec") or {}).get("nodeName"):
        return ""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return str(cond.get("message") or cond.get("reason") or "Unschedulable")
    return ""


def in_progress(status: JSON) -> bool:
    """The job is restarting in place."""
    cond = get_condition(status, c.RESTARTING) or {}
    return is_true(status, c.RESTARTING) and cond.get("reason") == RESTARTING_IN_PLACE
