"""Restart policies: what a failed, resized or broken MSJob does next (the planner's rule 7).

Pure, like the rest of the planner: each function takes the planning pass
(:class:`msop.msjob.passes.PlanningPass`) and the replica counts it made, decides, and acts
through the pass (pods to delete, conditions, events). Each returns True when the
pass failed or restarted the job, so the planner stops there.

``restartScope: Job`` (:func:`restart_job_if_needed`; the default for a MindSpore cluster:
a job with a Scheduler, not elastic) restarts the job as a whole:

- The job's first failure decides (the earliest ``finishedAt``): MindSpore's peers of a
  killed worker exit 1 about 30 s after it, and those follow-on exits say nothing about
  the job. Retryable by the failed replica's policy (``ExitCode``: a code >= 128, or no
  code at all: evicted, node lost; ``OnFailure``/``Always``: any failure; ``Never``:
  none) means every pod is restarted, counted once toward ``backoffLimit``: in place where
  the pods carry the msop agent (:mod:`.inplace.decisions` decides the steps), the pods
  gone or ended (deleted, evicted, their node lost) recreated alone and released with
  the others (a hybrid restart); else every pod deleted and recreated with the same
  ``MS_*`` values. Otherwise the job fails, naming
  the pod, its exit code and the container's reason; the failed run's last output stays
  in the condition's message.
- Pods created for another cluster size (``MS_WORKER_NUM``/``MS_SERVER_NUM``, after
  ``kubectl scale``) cannot join the others: if the cluster has started, every pod is
  recreated (not counted toward ``backoffLimit``); if none runs yet, only the stale ones
  are replaced.
- A member of a Running cluster that is gone or going (deleted by hand, its node lost)
  leaves a cluster that cannot go on: it restarts the same way (a hybrid restart where it
  can), counted once toward ``backoffLimit``: a pod deleted again and again must not
  restart the job forever. The count lives only in the status, so no operator restart,
  leader change or deleted child resets it.
- While a restart in place is under way, what fails before its release joins it (nothing
  ran at its generation yet); what fails after it is a new failure, counted.

``restartScope: Pod`` (:func:`restart_pods`, ms-operator's rules): ``Always``/``OnFailure``
are restarted in place by the kubelet, and each ``restartCount`` counts toward
``backoffLimit``. ``ExitCode``: a Failed pod whose ``mindspore`` container exited with a
code >= 128 (killed by a signal: OOM, preemption) is deleted and recreated, ``Restarting``
is set, and the recreation is counted in ``status.replicaStatuses.<type>.restarts`` (also
toward ``backoffLimit``). Codes 1-127 are permanent. When the count would exceed
``backoffLimit`` the job fails instead (reason ``BackoffLimitExceeded``).

A restart writes the status first (``Plan.status_first``): it must be counted before the
evidence (the failed pod) is gone.
"""

from __future__ import annotations

from msop.api import constants as c
from msop.api import naming
from msop.api.conditions import is_true
from msop.kube.objects import JSON, EventType
from msop.msjob import desired
from msop.msjob.inplace import decisions as in_place_steps
from msop.msjob.inplace import pods as inplace
from msop.msjob.passes import ACTIVE_PHASES as ACTIVE
from msop.msjob.passes import PlanningPass
from msop.msjob.podstate import (
    exit_code,
    finished_at,
    how_it_ended,
    last_output,
    phase,
    restart_count,
    terminating,
)

Slot = tuple[str, int]


def restart_pods(p: PlanningPass, counts: dict[str, JSON]) -> bool:
    """``restartScope: Pod``: apply the restart policies and ``backoffLimit`` pod by pod;
    True if the job just failed."""
    kubelet_restarts = 0
    restarts: list[tuple[str, JSON, int | None]] = []
    permanent: dict[str, int] = {}
    for slot, pod in p.by_slot.items():
        rtype = slot[0]
        if not p.wanted(slot) or terminating(pod):
            continue
        policy = p.specs[rtype].restart_policy
        if policy in (c.ALWAYS, c.ON_FAILURE):
            kubelet_restarts += restart_count(pod)
        if phase(pod) != "Failed":
            continue
        code = exit_code(pod)
        if policy == c.EXIT_CODE and code is not None and code >= 128:
            restarts.append((rtype, pod, code))
        elif not (rtype == c.WORKER and p.view.spec.enable_dynamic_worker):
            permanent[rtype] = permanent.get(rtype, 0) + 1

    operator_restarts = sum(int(e.get("restarts", 0)) for e in counts.values())
    limit = p.view.run_policy.backoff_limit
    total = kubelet_restarts + operator_restarts + len(restarts)
    if limit is not None and total > limit:
        done = [f"{operator_restarts} pod recreation(s)"]
        if kubelet_restarts:
            done.insert(0, f"{kubelet_restarts} container restart(s)")
        needed = f"; {len(restarts)} more needed" if restarts else ""
        p.fail(
            "BackoffLimitExceeded",
            f"MSJob {p.ref} has failed because it has reached the specified backoff "
            f"limit (backoffLimit {limit}): {' and '.join(done)} so far{needed}.",
        )
        p.finish(delete_all=True)
        return True
    if permanent:
        what = ", ".join(f"{n} {rt}" for rt, n in permanent.items())
        p.fail("MSJobFailed", f"MSJob {p.ref} has failed because {what} replica(s) failed.")
        p.finish(delete_all=False)
        return True
    _recreate_killed(p, counts, restarts)
    drop_lost(p)
    return False


def _recreate_killed(
    p: PlanningPass, counts: dict[str, JSON], restarts: list[tuple[str, JSON, int | None]]
) -> None:
    """Delete the pods killed by a signal (recreated in a later pass), counting each."""
    for rtype, pod, code in restarts:
        name = pod["metadata"]["name"]
        p.event(
            "Normal", "ExitedWithCode", f"Pod {p.view.namespace}/{name} exited with code {code}"
        )
        counts[rtype]["restarts"] = int(counts[rtype].get("restarts", 0)) + 1
        counts[rtype]["failed"] = max(0, counts[rtype]["failed"] - 1)
        p.delete_pod(pod)
        p.write_status_first()
    if restarts:
        types = sorted({rt for rt, _, _ in restarts})
        msg = (
            f"MSJob {p.ref} is restarting because {len(restarts)} "
            f"{'/'.join(types)} replica(s) failed with a retryable exit code."
        )
        p.set_condition(c.RESTARTING, c.CONDITION_TRUE, "MSJobRestarting", msg)
        p.event("Warning", "MSJobRestarting", msg)


def restart_job_if_needed(p: PlanningPass, counts: dict[str, JSON]) -> bool:
    """``restartScope: Job`` (see the module docstring); True if this pass failed or
    restarts the job."""
    under_way = inplace.in_progress(p.status)
    # Before its release, a restart in place takes in what fails meanwhile (nothing has
    # run at its generation yet); after it, a failure is a new one, counted.
    if not under_way or in_place_steps.released(p):
        if _first_failure(p, counts):
            return True
        if under_way and _gone(p, lost := in_place_steps.lost_slots(p)):
            return _members_lost(p, counts, lost)
    if under_way:
        step = in_place_steps.advance(p)
        if step.recreate:
            restart_all(p, "Warning", "MSJobRestarting", step.recreate)
        return not step.done
    if _resize_cluster(p) or _replace_lost_member(p, counts):
        return True
    drop_lost(p)
    return False


def _first_failure(p: PlanningPass, counts: dict[str, JSON]) -> bool:
    """The job's first failure, if a pod failed (as a whole, or in place since the job's
    generation began): restart or fail the job (True); False if no pod failed."""
    live = [
        (slot, pod) for slot, pod in p.by_slot.items() if p.wanted(slot) and not terminating(pod)
    ]
    failed = [(slot, pod) for slot, pod in live if phase(pod) == "Failed"]
    if p.view.spec.enable_dynamic_worker:
        failed = [
            (slot, pod) for slot, pod in failed if slot[0] != c.WORKER or retryable(p, slot, pod)
        ]
    generation = p.generation()
    # Pods whose training container failed and restarts (or restarted) in place: the
    # kubelet acted on their rule before we could; they count like Failed pods.
    ended: list[tuple[Slot, JSON, JSON]] = [(slot, pod, pod) for slot, pod in failed]
    for slot, pod in live:
        if phase(pod) in ACTIVE and (term := inplace.failed_in_place(pod, generation)):
            ended.append((slot, in_place_steps.as_ended(pod, term), pod))
    if not ended:
        return False
    slot, shown, pod = min(
        ended,
        key=lambda e: (
            finished_at(e[1]),
            not retryable(p, e[0], e[1]),
            e[2]["metadata"]["name"],
        ),
    )
    return _job_failure(p, counts, slot, shown, pod)


def retryable(p: PlanningPass, slot: Slot, pod: JSON) -> bool:
    """Whether the replica's restart policy retries this failed pod."""
    policy = p.specs[slot[0]].restart_policy
    if policy == c.NEVER:
        return False
    if policy == c.EXIT_CODE:
        code = exit_code(pod)
        return code is None or code >= 128
    return True


def _job_failure(
    p: PlanningPass, counts: dict[str, JSON], slot: Slot, shown: JSON, pod: JSON
) -> bool:
    """The job's first failure (``shown``: ``pod`` as that failure left it): restart the
    job, in place (recreating only the pods lost or ended) or by recreation, or fail it
    (not retryable, or ``backoffLimit`` reached)."""
    name = f"{p.view.namespace}/{pod['metadata']['name']}"
    code = exit_code(shown)
    what = f"pod {name} {how_it_ended(shown)}"
    tail = last_output(shown, code) if code is not None else ""
    # Its pods are deleted: what the failed process printed last stays here.
    said = f"\nThe last output of pod {name}:\n{tail}" if tail else ""
    if code is not None:
        p.event("Normal", "ExitedWithCode", f"Pod {name} exited with code {code}")
    if not retryable(p, slot, shown):
        policy = p.specs[slot[0]].restart_policy
        p.fail(
            "MSJobFailed",
            f"MSJob {p.ref} has failed because {what}, which restartPolicy {policy} of "
            f"{slot[0]} does not retry.{said}",
        )
        p.finish(delete_all=False)
        return True
    count = _count(p, counts, slot[0], what, said)
    if count is None:
        return True
    lost = in_place_steps.lost_slots(p)
    why_not = in_place_steps.why_not(p, lost)
    if not why_not:
        in_place_steps.start(p, _in_place_message(p, what, count, lost) + said, lost)
        return True
    restart_all(
        p, "Warning", "MSJobRestarting",
        f"MSJob {p.ref} is restarting all its pods because {what} ({count}); they are "
        f"recreated: {why_not}.{said}",
    )  # fmt: skip
    return True


def _count(
    p: PlanningPass, counts: dict[str, JSON], rtype: str, what: str, said: str = ""
) -> str | None:
    """Count one restart of the job toward ``backoffLimit``, in the status of replica type
    ``rtype`` (written before any pod goes: ``Plan.status_first``), and return "restart
    N of L"; or, with ``backoffLimit`` reached, fail the job and return None."""
    restarts = sum(int(e.get("restarts", 0)) for e in counts.values())
    limit = p.view.run_policy.backoff_limit
    if limit is not None and restarts >= limit:
        p.fail(
            "BackoffLimitExceeded",
            f"MSJob {p.ref} has failed because {what} after {restarts} restart(s) of "
            f"the job (backoffLimit {limit}).{said}",
        )
        p.finish(delete_all=True)
        return None
    counts[rtype]["restarts"] = int(counts[rtype].get("restarts", 0)) + 1
    return f"restart {restarts + 1}{f' of {limit}' if limit is not None else ''}"


def _in_place_message(p: PlanningPass, what: str, count: str, lost: list[Slot]) -> str:
    if not lost:
        return f"MSJob {p.ref} is restarting all its pods in place because {what} ({count})."
    names = ", ".join(naming.object_name(p.view.name, *s) for s in lost)
    return (
        f"MSJob {p.ref} is restarting because {what} ({count}): pod(s) {names} are "
        "recreated and the other pods restarted in place."
    )


def _resize_cluster(p: PlanningPass) -> bool:
    """Pods made for another cluster size: replace them (nothing started yet), or restart
    the whole cluster; True if it restarts."""
    want = desired.wanted_cluster_size_env(p.job)
    live = [pod for pod in p.pods if not terminating(pod)]
    stale = [pod for pod in live if desired.cluster_size_env(pod) not in ({}, want)]
    if not stale:
        return False
    if not any(phase(pod) != "Pending" for pod in live):
        for pod in stale:  # nothing started yet: the job simply changes size
            p.delete_pod(pod)
        return False
    was = desired.cluster_size_env(stale[0])
    change = ", ".join(f"{k} {was.get(k, '?')} -> {v}" for k, v in want.items() if was.get(k) != v)
    restart_all(
        p, "Normal", c.REASON_RESIZING,
        f"MSJob {p.ref} is restarting all its pods so that every one has the new "
        f"cluster size ({change}); training resumes from its last checkpoint.",
    )  # fmt: skip
    return True


def _replace_lost_member(p: PlanningPass, counts: dict[str, JSON]) -> bool:
    """Members of a Running cluster are gone or going (deleted, their node lost): restart
    it; True if so."""
    if not is_true(p.status, c.RUNNING) or not any(not terminating(pod) for pod in p.pods):
        return False
    lost = in_place_steps.lost_slots(p)
    return _gone(p, lost) and _members_lost(p, counts, lost)


def _gone(p: PlanningPass, lost: list[Slot]) -> bool:
    """Whether a lost member is gone or going, or its node or devices say it is lost
    (:meth:`PlanningPass.node_signals`). A member that ended (a Worker that succeeded
    before Worker 0) is no loss by itself; once the cluster restarts, it is recreated
    with the gone ones."""
    signals = p.node_signals()
    return any((pod := p.by_slot.get(s)) is None or terminating(pod) or s in signals for s in lost)


def _what_was_lost(p: PlanningPass, lost: list[Slot]) -> str:
    """``pod(s) a, b of the running cluster are gone``, and for each pod its node or
    devices say is lost, the pod, its node and the sign."""
    signals = p.node_signals()
    gone = [s for s in lost if s not in signals]
    said = []
    if gone:
        names = ", ".join(naming.object_name(p.view.name, *s) for s in gone)
        said.append(f"pod(s) {names} of the running cluster are gone")
    if len(gone) < len(lost):
        said.append(p.lost_message([s for s in lost if s in signals]))
    return "; ".join(said)


def drop_lost(p: PlanningPass) -> None:
    """Where no restart of the cluster takes them in (``restartScope: Pod``, or a cluster
    not yet running): delete the pods their node or devices say are lost, each said in a
    Warning Event; they are created again once gone, as after the taint manager's
    eviction, but without its wait."""
    for slot in sorted(p.node_signals()):
        p.delete_pod(p.by_slot[slot])
        said = f"MSJob {p.ref}: {p.lost_message([slot])}; it is deleted and created again."
        p.event("Warning", in_place_steps.POD_LOST, said)


def _members_lost(p: PlanningPass, counts: dict[str, JSON], lost: list[Slot]) -> bool:
    """Restart the cluster whose ``lost`` members are gone or going, counted once toward
    ``backoffLimit`` (a pod deleted again and again must not restart the job forever):
    the lost pods are recreated and the others restarted in place, else every pod is
    recreated. True: this pass restarted or failed the job."""
    what = _what_was_lost(p, lost)
    count = _count(p, counts, lost[0][0], what)
    if count is None:
        return True
    why_not = in_place_steps.why_not(p, lost)
    if not why_not:
        in_place_steps.start(
            p, f"MSJob {p.ref} is restarting because {what} ({count}): they are recreated "
            "and the other pods restarted in place.", lost, "MSJobMemberLost",
        )  # fmt: skip
        return True
    restart_all(
        p, "Warning", "MSJobMemberLost",
        f"MSJob {p.ref} is restarting all its pods because {what} ({count}); they are "
        f"recreated: {why_not}.",
    )  # fmt: skip
    return True


def restart_all(p: PlanningPass, type_: EventType, reason: str, message: str) -> None:
    """Delete every pod of the job; they are recreated together once all are gone (the
    planner creates nothing while one terminates). The Service stays, so
    ``MS_SCHED_HOST`` does not change."""
    for pod in p.pods:
        p.delete_pod(pod)
    p.write_status_first()
    p.set_condition(c.RESTARTING, c.CONDITION_TRUE, reason, message)
    p.event(type_, reason, message)
