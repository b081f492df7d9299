"""The MSJob decision: from what is observed, what to do and what the status should be.

``plan(observed, options)`` is a pure function of the MSJob, the pods and services it
owns (from the informer cache), what the scheduling systems that manage it see of it
(Kueue's Workload, Volcano's PodGroup: :mod:`.scheduling`) and the current time.
It returns a :class:`~msop.msjob.passes.Plan`: objects to create and delete, the new
``status``, the events to record and when to look again. The reconciler applies a Plan; it
never decides.

This module keeps the order of the rules. Each rule reads the job and acts through the
pass (:class:`~msop.msjob.passes.PlanningPass`): the job's life here, its children in
:mod:`.children`, its restarts in :mod:`.restarts`, its replica counts and status in
:mod:`.replicastatus`, the scheduling systems behind :mod:`.scheduling`.
Time is an input like the rest: ``Observed.now``, read once per pass by the caller;
nothing here reads a clock.

Within one pass the reconciler may call the planner three times, each time with what
it has observed since: ``plan`` again once it created the Scheduler Service (its
ClusterIP is in the create response, so the pods go out in the same pass), and
:func:`status_write` once the creates went out, with the API server's refusal if there
was one (which status follows, and whether a change of pod counts alone waits).

Rules, in the order they apply:

1. A job being deleted, or with ``managedBy`` (``spec.managedBy`` or
   ``spec.runPolicy.managedBy``) naming another controller, is left alone (an empty Plan,
   status untouched). A job managed by Kueue's MultiKueue (``kueue.x-k8s.io/multikueue``)
   is *dispatched* (:func:`dispatched`): only its queueing is done here (its
   Workload), never a pod or Service; once it runs on a worker cluster, its status is
   that cluster's, copied by MultiKueue, and the planner writes none.
2. A job that fails validation (it bypassed admission) gets ``Failed`` with reason
   ``InvalidSpec`` naming the fields, and a Warning event. Nothing is created.
3. ``Created`` is set on first sight; ``observedGeneration`` follows the spec.
4. Finished jobs (Succeeded/Failed) only clean up: ``cleanPodPolicy`` (All: every pod;
   Running: pods still Pending/Running; None: nothing; services go with All and
   Running), the scheduling systems let go (the PodGroup is deleted, the Workload marked
   finished), and ``ttlSecondsAfterFinished`` deletes the job at exactly ``completionTime
   + ttl`` (a precise requeue until then). Replica counts are frozen at the moment the
   job finished, so cleanup does not rewrite history.
5. ``suspend: true`` deletes all pods and services (the scheduling systems release the
   job: no PodGroup, an inactive Workload) and sets ``Suspended`` (and turns ``Running``
   False). Resuming sets ``Suspended=False`` (reason ``MSJobResumed``) and
   restarts the clock: ``startTime`` is reset. The deadline does not run while suspended.
6. ``activeDeadlineSeconds`` fails the job (reason ``DeadlineExceeded``) at exactly
   ``startTime + deadline``; until then the Plan asks for a requeue at that instant.
7. Restarts (:mod:`.restarts`): with ``restartScope: Job`` (the default for a MindSpore
   cluster) the success policy is checked first, then the job's first failure decides:
   retried by its replica's policy, every pod is restarted together (in place where it
   can, the lost pods alone recreated; else deleted and recreated), counted once toward
   ``backoffLimit``; a member lost from a running cluster restarts it the same way, also
   counted; a scale of a started cluster restarts it without counting. With ``restartScope: Pod``
   (ms-operator's rules) pods are restarted one by one. Past ``backoffLimit`` the job
   fails (``BackoffLimitExceeded``). Deadline and backoff failures delete every pod and
   service whatever the ``cleanPodPolicy``.
8. A Failed replica that is not restarted fails the job (reason ``MSJobFailed``), unless
   ``enableDynamicWorker`` is set and it is a Worker.
9. Success: with ``successPolicy: ""`` when Worker 0 succeeded with exit code 0; with
   ``AllWorkers`` when every Worker succeeded; a job without Workers when every replica
   succeeded.
10. ``Running`` when every wanted pod exists and runs (or already succeeded).
11. Otherwise create what is missing and delete what is out of range. The Scheduler
    Service comes first: other replicas wait for its ClusterIP (their ``MS_SCHED_HOST``).
    A scheduling system may hold the job before its clock starts (Kueue, until its
    Workload is admitted) or hold its pods (Volcano, until the PodGroup it creates first
    is ``Inqueue``); its pods carry what the systems add (flavors, scheduler). A
    terminating pod holds its slot; one that stays terminating
    ``stuck_terminating_seconds`` past its deletion deadline (its node is gone, nobody
    will confirm the kill) is force-deleted so the slot can be refilled and the job does
    not sit in ``Restarting`` forever.
"""

from __future__ import annotations

from datetime import timedelta

from msop.api import constants as c
from msop.api.conditions import get_condition, is_finished, is_true
from msop.api.validation import validate
from msop.kube.objects import JSON, parse_time
from msop.msjob import children, replicastatus, restarts
from msop.msjob.passes import AgentRequest, Event, Observed, Options, Plan, PlanningPass

__all__ = ["MANAGED_BY", "AgentRequest", "Event", "Observed", "Options", "Plan", "plan"]

#: The ``managedBy`` value this operator acts on ("" / absent means us too).
MANAGED_BY = c.MANAGED_BY_MSOP


def plan(observed: Observed, options: Options | None = None) -> Plan:
    """Decide what to do for one MSJob; see the module docstring for the rules."""
    p = PlanningPass(observed, options or Options())
    if left_alone(p):
        return p.result(None)
    if any(system.runs_elsewhere(p) for system in p.systems):
        return dispatched(p)
    created(p)
    counts: dict[str, JSON] | None = None
    if not finished_or_invalid(p):
        counts = active_job(p)
    replicastatus.update_progress(p)
    return replicastatus.finish_status(p, counts)


def left_alone(p: PlanningPass) -> bool:
    """Rule 1: a job being deleted, or managed by another controller, unless a
    scheduling system runs it elsewhere (:func:`dispatched`): a job MultiKueue would
    dispatch but nobody queues here (no Kueue, no queue) is left alone."""
    if p.view.deletion_timestamp:
        return True
    if any(system.runs_elsewhere(p) for system in p.systems):
        return False
    managed_by = p.view.spec.managed_by
    return bool(managed_by) and managed_by != MANAGED_BY


def dispatched(p: PlanningPass) -> Plan:
    """Rule 1, a job a scheduling system runs on another cluster (MultiKueue's worker
    cluster): it is queued here (the systems' ``admit``, ``suspend`` and ``finish``),
    no pod or Service is ever made here, and the status is written only while no other
    cluster runs the job (``Created``, ``Queued``, ``Suspended``, an invalid spec's
    ``Failed``); ``ttlSecondsAfterFinished`` deletes it here as well."""
    created(p)
    if finished_or_invalid(p):
        pass
    elif p.view.run_policy.suspend:
        suspend(p)
    else:
        resuming = resume(p)
        for system in p.systems:
            if not system.admit(p, resuming):
                break
    if any(system.mirrors_status(p) for system in p.systems):
        # The worker cluster's status is copied here: writing ours would fight it.
        return p.unwritten()
    return replicastatus.finish_status(p, None)


def created(p: PlanningPass) -> None:
    """Rule 3: ``Created`` on first sight; ``observedGeneration``."""
    if get_condition(p.status, c.CREATED) is None:
        p.set_condition(c.CREATED, c.CONDITION_TRUE, "MSJobCreated", f"MSJob {p.ref} is created.")
    generation = p.view.generation
    if generation:
        p.status["observedGeneration"] = generation


def finished_or_invalid(p: PlanningPass) -> bool:
    """Rules 2 and 4: a finished job only cleans up; an invalid one fails (True)."""
    if is_finished(p.status):
        p.finish(delete_all=False)
        return True
    if errors := validate(p.stored):
        detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:10])
        p.fail("InvalidSpec", f"MSJob {p.ref} is invalid: {detail}")
        p.finish(delete_all=True)
        return True
    return False


def active_job(p: PlanningPass) -> dict[str, JSON] | None:
    """Rules 5-11 for a job that has not finished; returns the replica counts when it
    got as far as counting them (the status shows them), else None."""
    if p.view.run_policy.suspend:
        suspend(p)
        return None
    resuming = resume(p)
    if not all(system.admit(p, resuming) for system in p.systems):
        return None
    if not p.status.get("startTime"):
        p.status["startTime"] = p.now_s
    if fail_past_deadline(p):
        return None
    counts = p.counts = replicastatus.count_replicas(p)
    if not finish_or_restart(p, counts):
        children.sync(p)
        if p.all_running():
            for system in p.systems:
                system.running(p)
            msg = f"MSJob {p.ref} is running."
            if p.set_condition(c.RUNNING, c.CONDITION_TRUE, "MSJobRunning", msg):
                p.event("Normal", "MSJobRunning", msg)
    return counts


def suspend(p: PlanningPass) -> None:
    """Rule 5: every pod and Service goes; the scheduling systems let go of the job."""
    for pod in p.pods:
        p.delete_pod(pod)
    for service in p.services:
        p.delete_service(service)
    for system in p.systems:
        system.suspend(p)
    if not is_true(p.status, c.SUSPENDED):
        msg = f"MSJob {p.ref} is suspended."
        p.set_condition(c.SUSPENDED, c.CONDITION_TRUE, "MSJobSuspended", msg)
        p.event("Normal", "MSJobSuspended", msg)


def resume(p: PlanningPass) -> bool:
    """Rule 5, resuming: it restarts the clock (``startTime`` is set again when the pods
    start). Returns whether the job resumes in this pass."""
    if not is_true(p.status, c.SUSPENDED):
        return False
    msg = f"MSJob {p.ref} is resumed."
    p.set_condition(c.SUSPENDED, c.CONDITION_FALSE, "MSJobResumed", msg)
    p.transition("Resumed")
    p.event("Normal", "MSJobResumed", msg)
    p.status.pop("startTime", None)
    return True


def fail_past_deadline(p: PlanningPass) -> bool:
    """Rule 6: fail at ``startTime + activeDeadlineSeconds`` (True); until then,
    requeue at that instant."""
    deadline = p.view.run_policy.active_deadline_seconds
    if deadline is None:
        return False
    start = parse_time(p.status["startTime"]) or p.now
    remaining = (start + timedelta(seconds=deadline) - p.now).total_seconds()
    if remaining > 0:
        p.requeue_at(remaining)
        return False
    p.fail(
        "DeadlineExceeded",
        f"MSJob {p.ref} was active longer than its deadline ({deadline}s).",
    )
    p.finish(delete_all=True)
    return True


def finish_or_restart(p: PlanningPass, counts: dict[str, JSON]) -> bool:
    """Rules 7-9: True if this pass fails, completes or restarts the job."""
    if p.view.spec.restart_scope == c.RESTART_SCOPE_JOB:
        # The training's own result comes first: a cluster whose workers finished is
        # never restarted for a pod that crashed afterwards (at interpreter exit, say).
        if replicastatus.succeeded(p, counts):
            succeed(p)
            return True
        return restarts.restart_job_if_needed(p, counts)
    if restarts.restart_pods(p, counts):
        return True
    if replicastatus.succeeded(p, counts):
        succeed(p)
        return True
    return False


def succeed(p: PlanningPass) -> None:
    """Rule 9: the job succeeded."""
    msg = f"MSJob {p.ref} successfully completed."
    p.set_condition(c.SUCCEEDED, c.CONDITION_TRUE, "MSJobSucceeded", msg)
    p.event("Normal", "MSJobSucceeded", msg)
    p.finish(delete_all=False)
