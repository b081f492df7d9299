"""Restart in place, the decisions: when a job's pods can be restarted in place, and the
steps of a restart in place under way (the planner's rule 7 for ``restartScope: Job``).

Pure, like the rest of the planner; it acts through the planning pass
(:class:`~msop.msjob.passes.PlanningPass`). :func:`start` counts the restart (the status
goes first) and asks every pod's agent to restart its pod for the new generation;
:func:`advance`, in each later pass, asks again the agents that did not answer, releases
the barrier once every pod has restarted, and says when the restart is over or why it
cannot finish (the pods are then recreated by :mod:`.restarts`). What the pods carry and
what their status says is :mod:`.inplace`.
"""

from __future__ import annotations

from dataclasses import dataclass

from msop.api import constants as c
from msop.api import naming
from msop.api.conditions import get_condition
from msop.kube.objects import JSON, parse_time
from msop.msjob import desired
from msop.msjob.inplace import pods
from msop.msjob.passes import ACTIVE_PHASES, PlanningPass
from msop.msjob.podstate import how_it_ended, phase, terminating

Slot = tuple[str, int]


@dataclass(frozen=True)
class Step:
    """Where a restart in place under way stands after this pass."""

    done: bool = False
    """Every training container runs again: the pass goes on (to ``Running``)."""
    recreate: str = ""
    """Why the restart in place cannot finish, as the ``Restarting`` message of the
    recreation that replaces it ("" while it goes on)."""


#: The reason of what the kubelet reports as the last state of a container that
#: ``RestartAllContainers`` removed: a made-up exit code 137, whatever the process's own.
REMOVED_BY_RESTART = "RestartingAllContainers"


def as_ended(pod: JSON, term: JSON) -> JSON:
    """The pod as if its training container's run that ended with ``term`` were its
    current state: what the failure's description reads. When the kubelet removed the
    container before it reported its exit (it then says 137 for any), the pod says it
    failed without an exit code, and nothing is made up."""
    if term.get("reason") in (REMOVED_BY_RESTART, "RestartedInPlace") or not isinstance(
        term.get("exitCode"), int
    ):
        return {
            "metadata": pod["metadata"],
            "status": {
                "phase": phase(pod),
                "reason": "RestartedInPlace",
                "message": "its containers were restarted in place by its restart rule; the "
                "kubelet reports neither the exit code nor the last output of the run it "
                "stopped",
            },
        }
    return {
        "metadata": pod["metadata"],
        "status": {
            "phase": phase(pod),
            "containerStatuses": [
                {"name": c.DEFAULT_CONTAINER_NAME, "state": {"terminated": dict(term)}}
            ],
        },
    }


def why_not(p: PlanningPass, failed: list[tuple[Slot, JSON]]) -> str:
    """Why this restart recreates the pods ("" if it can restart them in place)."""
    why = pods.why_not(p.job, p.opts.in_place)
    if why:
        return why
    for slot in desired.replica_slots(p.job):
        pod = p.by_slot.get(slot)
        name = naming.object_name(p.view.name, *slot)
        if pod is None or terminating(pod):
            return f"pod {name} is gone"
        if pods.agent_of(pod) is None:
            return f"pod {name} was created without the msop agent that restarts it in place"
    if failed:
        names = ", ".join(pod["metadata"]["name"] for _, pod in failed)
        return f"pod(s) {names} failed as a whole, which a restart in place cannot undo"
    return ""


def start(p: PlanningPass, message: str) -> None:
    """Start a restart in place: counted (the status goes first), then every pod's agent
    is asked to restart its pod for the new generation (:func:`advance`)."""
    p.write_status_first()
    p.set_condition(c.RESTARTING, c.CONDITION_TRUE, pods.RESTARTING_IN_PLACE, message)
    p.event("Warning", pods.RESTARTING_IN_PLACE, message)
    generation = p.generation()
    p.ask_agents(
        [pod for pod in p.pods if not pods.restarted_for(pod, generation)],
        "restart",
        generation,
    )
    p.requeue_at(AGENT_RETRY_SECONDS)


AGENT_RETRY_SECONDS = 1.0
"""How soon a pass of a job restarting in place looks again (and asks again the agents
that did not answer)."""


def advance(p: PlanningPass) -> Step:
    """A restart in place under way: ask the agents that have not restarted their pods,
    release the barrier once every pod has, and say when it is over (every training
    container runs again) or why it cannot finish: a pod gone or failed, or
    ``InPlace.timeout`` passed (the pods are then recreated)."""
    generation = p.generation()
    slots = desired.replica_slots(p.job)
    by_slot = {slot: p.by_slot.get(slot) for slot in slots}
    if all(pod is not None and pods.started_again(pod, generation) for pod in by_slot.values()):
        return Step(done=True)
    broken = _broken(p, by_slot)
    cond = get_condition(p.status, c.RESTARTING) or {}
    since = parse_time(str(cond.get("lastTransitionTime") or "")) or p.now
    timeout = p.opts.in_place.timeout if p.opts.in_place is not None else 0.0
    remaining = timeout - (p.now - since).total_seconds()
    if not broken and remaining <= 0:
        late = [
            pod["metadata"]["name"]
            for pod in by_slot.values()
            if pod is not None and not pods.restarted_for(pod, generation)
        ]
        waiting = f" (not restarted: {', '.join(late)})" if late else ""
        broken = f"it did not complete within {timeout:g}s{waiting}"
    if broken:
        first = str(cond.get("message") or "").split("\n", 1)[0]
        return Step(
            recreate=f"MSJob {p.ref} is recreating all its pods: its restart in place failed "
            f"because {broken}. {first}"
        )
    live = [pod for pod in by_slot.values() if pod is not None]
    if all(pods.restarted_for(pod, generation) for pod in live):
        p.ask_agents([pod for pod in live if pods.at_barrier(pod)], "release", generation)
    else:
        p.ask_agents(
            [pod for pod in live if not pods.restarted_for(pod, generation)],
            "restart",
            generation,
        )
    p.requeue_at(min(AGENT_RETRY_SECONDS, max(remaining, 0.0)))
    return Step()


def _broken(p: PlanningPass, by_slot: dict[Slot, JSON | None]) -> str:
    """Why the pods cannot finish restarting in place ("" if they can)."""
    for slot, pod in by_slot.items():
        name = naming.object_name(p.view.name, *slot)
        if pod is None or terminating(pod):
            return f"pod {name} is gone"
        if phase(pod) not in ACTIVE_PHASES:
            return f"pod {name} {how_it_ended(pod)}"
        if pods.agent_of(pod) is None:
            return f"pod {name} has no msop agent"
    return ""
