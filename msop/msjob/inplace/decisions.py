"""Restart in place, the decisions: when a job's pods can be restarted in place, and the
steps of a restart in place under way (the planner's rule 7 for ``restartScope: Job``).

Pure, like the rest of the planner; it acts through the planning pass
(:class:`~msop.msjob.passes.PlanningPass`). :func:`start` counts the restart (the status
goes first), deletes the pods that failed as a whole and asks every other pod's agent to
restart its pod for the new generation; :func:`advance`, in each later pass, asks again
the agents that did not answer, recreates the lost pods (held at their barrier: a
*hybrid* restart), releases the barrier once every pod waits there, and says when the
restart is over or why it cannot finish (the pods are then recreated by
:mod:`.restarts`). What the pods carry and what their status says is :mod:`.inplace`.

A hybrid restart, in the words of the rules here:

- **Lost** (:func:`lost_slots`): a wanted slot whose pod is gone, terminating, or ended
  (Failed or Succeeded: a pod the kubelet will not restart), or whose node or devices
  say it is lost from the first sign (its node not ready past ``--node-lost-after``, a
  ``NoExecute`` taint it does not tolerate, an unhealthy device: :mod:`msop.msjob.nodehealth`).
  Its pod is deleted (if it still exists) and, once gone, created again for the new generation
  (:func:`msop.msjob.children.replace_lost`); every other pod is *kept* and restarted
  in place.
- **Before the release** nothing has run at the new generation, so a pod lost then (a
  second failure, a pod lost at the barrier, a node that takes two pods one after the
  other) joins the restart under way: it is replaced too, and nothing more is counted.
- **The release** goes out once every kept pod has restarted and every replacement waits
  at its barrier; a kept pod whose training runs again at the new generation shows it went
  out (:func:`released`). A failure from then on is a new one, counted
  (:mod:`.restarts`).
- **A replacement that cannot be scheduled** is waited for: the kept pods keep their
  nodes, the ``Restarting`` message names the pod and what the scheduler said, and a
  Warning Event (:data:`REPLACEMENT_UNSCHEDULABLE`) says it once. Recreating every pod
  would not find the room either. ``--restart-in-place-timeout`` bounds what the kept
  pods' agents do, counted from the restart's start or, when later, from the moment the
  last replacement reached its barrier; a replacement still on its way does not trip it
  (``activeDeadlineSeconds`` still bounds the job).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from msop.api import constants as c
from msop.api import naming
from msop.api.conditions import get_condition, is_true
from msop.kube.objects import JSON, parse_time
from msop.msjob import children, desired
from msop.msjob.inplace import pods
from msop.msjob.passes import ACTIVE_PHASES, PlanningPass
from msop.msjob.podstate import phase, terminating

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


def lost_slots(p: PlanningPass) -> list[Slot]:
    """The wanted slots whose pod is gone, terminating, or ended (Failed, Succeeded), or
    that its node or its devices say is lost (:meth:`PlanningPass.node_signals`): a
    restart recreates those pods, whatever it does with the others."""
    lost = []
    signals = p.node_signals()
    for slot in desired.replica_slots(p.job):
        pod = p.by_slot.get(slot)
        if pod is None or terminating(pod) or phase(pod) not in ACTIVE_PHASES or slot in signals:
            lost.append(slot)
    return lost


def why_not(p: PlanningPass, lost: list[Slot]) -> str:
    """Why this restart recreates every pod ("" if it restarts the pods it keeps in place
    and recreates only the ``lost`` ones)."""
    why = pods.why_not(p.job, p.opts.in_place)
    if why:
        return why
    kept = [slot for slot in desired.replica_slots(p.job) if slot not in lost]
    if not kept:
        return "no pod of the job is left to restart in place"
    for slot in kept:
        if pods.agent_of(p.by_slot[slot]) is None:
            name = naming.object_name(p.view.name, *slot)
            return f"pod {name} was created without the msop agent that restarts it in place"
    return ""


def start(p: PlanningPass, message: str, lost: list[Slot], reason: str = "") -> None:
    """Start a restart in place: counted (the status goes first), the ``lost`` pods
    deleted (created again by :func:`advance`), and every other pod's agent asked to
    restart its pod for the new generation. ``reason``: the Event's (else the
    condition's). A restart that starts while another is under way (a failure after its
    release) gets a ``Restarting`` of its own: its time runs from now."""
    p.write_status_first()
    if is_true(p.status, c.RESTARTING):
        p.set_condition(c.RESTARTING, c.CONDITION_FALSE, "MSJobRestarted", "")
    p.set_condition(c.RESTARTING, c.CONDITION_TRUE, pods.RESTARTING_IN_PLACE, message)
    p.event("Warning", reason or pods.RESTARTING_IN_PLACE, message)
    generation = p.generation()
    kept = []
    for slot in desired.replica_slots(p.job):
        pod = p.by_slot.get(slot)
        if slot in lost:
            if pod is not None:
                p.delete_pod(pod)
        elif pod is not None and not pods.restarted_for(pod, generation):
            kept.append(pod)
    p.ask_agents(kept, "restart", generation)
    if any(slot not in p.by_slot for slot in lost):
        children.replace_lost(p)  # after the status, which counts the new generation
    p.requeue_at(AGENT_RETRY_SECONDS)


AGENT_RETRY_SECONDS = 1.0
"""How soon a pass of a job restarting in place looks again (and asks again the agents
that did not answer)."""

POD_LOST = "MSJobPodLost"
"""The Warning Event of a pod that its node or devices say is lost, deleted to be
recreated (by a restart under way, or alone where nothing restarts with it)."""

REPLACEMENT_UNSCHEDULABLE = "MSJobReplacementUnschedulable"
"""The Warning Event of a restart in place that waits for a replacement the scheduler
cannot place."""
_WAITING = " It waits for "
"""Where the ``Restarting`` message says which replacement it waits for."""


def released(p: PlanningPass) -> bool:
    """Whether the restart in place under way has released its pods: a kept pod's training
    container runs again at the job's generation. A failure from then on is a new one."""
    generation = p.generation()
    return any(
        p.wanted(slot)
        and not terminating(pod)
        and not pods.replacement(pod, generation)
        and pods.started_again(pod, generation)
        for slot, pod in p.by_slot.items()
    )


def advance(p: PlanningPass) -> Step:
    """A restart in place under way: ask the agents that have not restarted their pods,
    replace the pods lost before the release, release the barrier once every pod waits
    there, and say when it is over (every training container runs again) or why it
    cannot finish: a pod without the agent, or ``InPlace.timeout`` passed (the pods are
    then recreated). See the module docstring."""
    generation = p.generation()
    slots = desired.replica_slots(p.job)
    by_slot = {slot: p.by_slot.get(slot) for slot in slots}
    signals = p.node_signals()
    if all(
        pod is not None
        and not terminating(pod)
        and slot not in signals
        and pods.started_again(pod, generation)
        for slot, pod in by_slot.items()
    ):
        return Step(done=True)
    live = _live(p, by_slot)
    cond = get_condition(p.status, c.RESTARTING) or {}
    first = str(cond.get("message") or "").split("\n", 1)[0].split(_WAITING, 1)[0]
    for slot, pod in live.items():
        if pods.agent_of(pod) is None:
            name = naming.object_name(p.view.name, *slot)
            return Step(recreate=_recreate(p, f"pod {name} has no msop agent", first))
    if len(live) < len(slots):
        children.replace_lost(p)
    kept = {s: pod for s, pod in live.items() if not pods.replacement(pod, generation)}
    new = {s: pod for s, pod in live.items() if pods.replacement(pod, generation)}
    going = released(p)
    arrived = {s for s, pod in new.items() if pods.at_barrier(pod) or going}
    restarted = all(pods.restarted_for(pod, generation) for pod in kept.values())
    # Only replacements on their way (scheduled, pulled, started): the kept pods wait.
    only_new = (
        restarted
        and all(
            pods.at_barrier(pod) or pods.started_again(pod, generation) for pod in kept.values()
        )
        and (len(live) < len(slots) or len(arrived) < len(new))
    )
    timeout = p.opts.in_place.timeout if p.opts.in_place is not None else 0.0
    # The members' grace (spec.restartInPlaceGracePeriodSeconds) comes on top of it.
    grace = p.view.spec.restart_in_place_grace if timeout else 0
    within = f"{timeout:g}s" + (f" and the members' {grace}s grace" if grace else "")
    timeout += grace
    # The kept pods' agents have had the whole time; the release, from the moment the
    # last replacement reached its barrier.
    since = _since(p, cond, new if restarted else {})
    remaining = timeout - (p.now - since).total_seconds()
    if remaining <= 0 and not only_new:
        late = [
            pod["metadata"]["name"]
            for pod in kept.values()
            if not pods.restarted_for(pod, generation)
        ]
        waiting = f" (not restarted: {', '.join(late)})" if late else ""
        return Step(recreate=_recreate(p, f"it did not complete within {within}{waiting}", first))
    _say_waiting(p, cond, new)
    if only_new:
        return Step()  # the replacements' own status changes bring the next pass
    if restarted and len(live) == len(slots) and len(arrived) == len(new):
        p.ask_agents([pod for pod in live.values() if pods.at_barrier(pod)], "release",
                     generation)  # fmt: skip
    else:
        p.ask_agents(
            [pod for pod in kept.values() if not pods.restarted_for(pod, generation)],
            "restart",
            generation,
        )
    p.requeue_at(min(AGENT_RETRY_SECONDS, max(remaining, 0.0)))
    return Step()


def _live(p: PlanningPass, by_slot: dict[Slot, JSON | None]) -> dict[Slot, JSON]:
    """The pods that take part in the restart; one that ended before the release, or
    that its node or devices say is lost, is deleted (replaced in this restart, once
    gone; the latter said in a Warning Event, :data:`POD_LOST`)."""
    live: dict[Slot, JSON] = {}
    signals = p.node_signals()
    for slot, pod in by_slot.items():
        if pod is None or terminating(pod):
            continue
        if phase(pod) not in ACTIVE_PHASES:
            p.delete_pod(pod)
            continue
        if slot in signals:
            p.delete_pod(pod)
            p.event("Warning", POD_LOST, f"MSJob {p.ref}: {p.lost_message([slot])}; it is "
                    "recreated within the restart in place under way.")  # fmt: skip
            continue
        live[slot] = pod
    return live


def _since(p: PlanningPass, cond: JSON, new: dict[Slot, JSON]) -> datetime:
    """Whence ``InPlace.timeout`` runs: the restart's start, or the moment the last
    replacement reached its barrier, whichever is later."""
    since = parse_time(str(cond.get("lastTransitionTime") or "")) or p.now
    for pod in new.values():
        reached = parse_time(pods.at_barrier_since(pod))
        if reached is not None and reached > since:
            since = reached
    return since


def _recreate(p: PlanningPass, why: str, first: str) -> str:
    return (
        f"MSJob {p.ref} is recreating all its pods: its restart in place failed because "
        f"{why}. {first}"
    )


def _say_waiting(p: PlanningPass, cond: JSON, new: dict[Slot, JSON]) -> None:
    """Name, in the ``Restarting`` message, the replacements the scheduler cannot place
    (a Warning Event when that changes); the rest of the message stays."""
    stuck = [
        f"pod {pod['metadata']['name']}, which cannot be scheduled: {why}"
        for pod in new.values()
        if (why := pods.unschedulable(pod))
    ]
    message = str(cond.get("message") or "")
    head, sep, tail = message.partition("\n")
    head = head.split(_WAITING, 1)[0]
    said = f"{_WAITING}{'; '.join(stuck)}." if stuck else ""
    if head + said + sep + tail == message:
        return
    p.set_condition(c.RESTARTING, c.CONDITION_TRUE, pods.RESTARTING_IN_PLACE,
                    head + said + sep + tail)  # fmt: skip
    if stuck:
        p.event("Warning", REPLACEMENT_UNSCHEDULABLE,
                f"MSJob {p.ref} restarts in place and waits for {'; '.join(stuck)}.")  # fmt: skip
