"""The MSJob decision: from what is observed, what to do and what the status should be.

``plan(observed, options)`` is a pure function of the MSJob, the pods and services it
owns (from the informer cache), what the scheduling systems that manage it see of it
(Kueue's Workload, Volcano's PodGroup: :mod:`.scheduling`) and the current time.
It returns a :class:`Plan`: objects to create and delete, the new ``status``, the events
to record and when to look again. The reconciler applies a Plan; it never decides.
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
   is *dispatched* (:meth:`Planner.dispatched`): only its queueing is done here (its
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
   retried by its replica's policy, every pod is deleted and recreated together, counted
   once toward ``backoffLimit``; a scale of a started cluster, or a member lost from a
   running one, restarts it the same way without counting. With ``restartScope: Pod``
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

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from msop.api import conditions, naming
from msop.api import constants as c
from msop.api import report as progress_api
from msop.api.conditions import get_condition, is_finished, is_true
from msop.api.copying import copy_json
from msop.api.defaults import apply_defaults
from msop.api.types import MSJob
from msop.api.validation import validate
from msop.kube.objects import JSON, format_time, parse_time
from msop.msjob import children, desired, restarts
from msop.msjob.inplace import pods as inplace
from msop.msjob.podstate import (
    final_progress,
    phase,
    pod_succeeded,
    slot_of,
    terminating,
)
from msop.msjob.scheduling import Decision, Seen, Wait

#: The ``managedBy`` value this operator acts on ("" / absent means us too).
MANAGED_BY = c.MANAGED_BY_MSOP
ACTIVE_PHASES = ("Pending", "Running")


@dataclass(frozen=True)
class Options:
    """Operator-wide behaviour switches for planning."""

    stuck_terminating_seconds: float = 300.0
    """How long past its deletion deadline a terminating pod may hold its slot."""
    progress_port: int = c.DEFAULT_PROGRESS_PORT
    """Port Worker 0's progress reporter is told to serve on; 0: no progress."""
    in_place: inplace.InPlace | None = None
    """How jobs are restarted in place (:mod:`.inplace`); None: never, always recreated."""


@dataclass
class Observed:
    """What the reconciler saw in its caches for one job."""

    job: JSON
    pods: list[JSON]
    services: list[JSON]
    now: datetime
    defaulted: JSON | None = None
    """``apply_defaults(job)`` if the caller already has it (the planner only reads it);
    None to have the planner compute it."""
    progress: JSON | None = None
    """The latest ``status.progress`` fetched from Worker 0's reporter while it runs
    (the progress poller's), if any."""
    counts_unwritten_since: datetime | None = None
    """Since when a change of this job's pod counts alone has been held back
    (:attr:`StatusWrite.held`); None if none is."""
    scheduling: list[Seen] = field(default_factory=list)
    """What each scheduling system that manages the job sees of it, in the order they
    decide (Kueue, then Volcano; :mod:`.scheduling`)."""


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class AgentRequest:
    """Ask a pod's agent (:mod:`.inplace`) to restart its pod, or to release its barrier,
    for the job's restart ``generation``."""

    pod: JSON
    action: str
    """``restart`` or ``release``."""
    generation: int


@dataclass
class Plan:
    """What to do. Apply in order: the status first if ``status_first``; Services, then
    pods; deletes and Service patches; the scheduling systems' writes; the status (unless
    written first); the events (once the status they announce is stored); then the job's
    deletion."""

    status: JSON | None = None
    """The new status when it differs from the observed one, else None."""
    status_first: bool = False
    """Write the status before deleting pods: a restart must be counted before the
    evidence (the failed pod) is gone."""
    create_services: list[JSON] = field(default_factory=list)
    create_pods: list[JSON] = field(default_factory=list)
    delete_pods: list[JSON] = field(default_factory=list)
    force_delete_pods: list[JSON] = field(default_factory=list)
    delete_services: list[JSON] = field(default_factory=list)
    patch_services: list[tuple[JSON, JSON]] = field(default_factory=list)
    """Services to merge-patch in place, with the patch: a rendezvous Service whose
    selector misses the pods msop creates (:func:`desired.selector_fix`)."""
    scheduling: list[Decision] = field(default_factory=list)
    """Each scheduling system's decisions for the job, with the writes they make."""
    agent_requests: list[AgentRequest] = field(default_factory=list)
    """What to ask the pods' agents, after the status is written (a restart in place)."""
    delete_job: bool = False
    events: list[Event] = field(default_factory=list)
    requeue_after: float | None = None
    transitions: list[str] = field(default_factory=list)
    """Condition types that became True in this plan (Created, Running, Restarting,
    Succeeded, Failed, Suspended) plus "Resumed": counted once each by job metrics."""

    def requeue_at(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)
        if self.requeue_after is None or seconds < self.requeue_after:
            self.requeue_after = seconds


class Planner:
    """One planning pass over one job; see the module docstring for the rules.

    The job is read three ways, one name each: ``stored`` (as the cache holds it: its
    labels, its status, and what validation checks), ``job`` (with the defaults applied:
    what the desired objects are built from) and ``view`` (typed accessors over ``job``).
    ``status`` is this pass's own copy of the stored status, changed only through
    :meth:`set_condition` and the few fields the rules name. The pass is also what a
    scheduling system's hooks see of it (:class:`msop.msjob.scheduling.Pass`).
    """

    def __init__(self, obs: Observed, opts: Options) -> None:
        self.obs = obs
        self.opts = opts
        self.now = obs.now
        self.now_s = format_time(obs.now)
        self.stored = obs.job
        # The cached job is read-only: old_status is only compared against, status is ours.
        self.old_status: JSON = self.stored.get("status") or {}
        self.status: JSON = copy_json(self.old_status)
        self.job = obs.defaulted if obs.defaulted is not None else apply_defaults(self.stored)
        self.view = MSJob(self.job)
        self.specs = self.view.replica_specs
        self.ref = f"{self.view.namespace}/{self.view.name}"
        self.systems = [seen.decide() for seen in obs.scheduling]
        self.counts: dict[str, JSON] | None = None
        """This pass's replica counts, once made."""
        self.plan = Plan(scheduling=self.systems)
        # Live pods by slot; the first one wins if two claim a slot.
        self.by_slot: dict[tuple[str, int], JSON] = {}
        self.strays: list[JSON] = []
        for p in sorted(obs.pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            slot = slot_of(p)
            if slot is None or slot in self.by_slot:
                self.strays.append(p)
            else:
                self.by_slot[slot] = p

    # --- what the rules and the scheduling systems act through ----------------------------
    @property
    def pods(self) -> list[JSON]:
        """The job's pods in the cache."""
        return self.obs.pods

    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def requeue_at(self, seconds: float) -> None:
        self.plan.requeue_at(seconds)

    def set_condition(
        self, type_: str, status: str, reason: str, message: str, *, in_place: bool = False
    ) -> bool:
        """Set a condition (``in_place``: where it is, rather than last: a ``Queued``
        turning False stays out of the State column); return whether it changed. A
        condition that becomes True ends a ``Restarting`` and counts as a transition."""
        if (
            status == c.CONDITION_TRUE
            and type_ in (c.RUNNING, c.SUCCEEDED, c.FAILED, c.SUSPENDED)
            and is_true(self.status, c.RESTARTING)
        ):
            # Set here, before the new condition, so that the new one stays the last (the
            # State column) and Restarting=False does not keep "is restarting" as message.
            # Why it restarted (and the failed run's last output) stays in the message.
            why = (get_condition(self.status, c.RESTARTING) or {}).get("message") or ""
            conditions.set_condition(
                self.status, c.RESTARTING, c.CONDITION_FALSE, "MSJobRestarted",
                f"MSJob {self.ref} is no longer restarting: it is {type_.lower()}."
                + (f" The last restart: {why}" if why else ""),
                self.now_s,
            )  # fmt: skip
        changed = conditions.set_condition(
            self.status, type_, status, reason, message, self.now_s, in_place=in_place
        )
        if changed and status == c.CONDITION_TRUE:
            self.plan.transitions.append(type_)
        return changed

    def fail(self, reason: str, message: str) -> None:
        self.set_condition(c.FAILED, c.CONDITION_TRUE, reason, message)
        self.event("Warning", reason, message)

    def wait(self, wait: Wait) -> None:
        """``Queued`` True with the wait's reason; its Event when the reason changes."""
        if self.set_condition(c.QUEUED, c.CONDITION_TRUE, wait.reason, wait.message):
            current = get_condition(self.old_status, c.QUEUED) or {}
            if current.get("reason") != wait.reason or current.get("status") != "True":
                self.event(wait.event_type, wait.reason, wait.message)

    def placed(self, reason: str, message: str) -> None:
        """``Queued`` False where it is (out of the State column), and its Event."""
        self.set_condition(c.QUEUED, c.CONDITION_FALSE, reason, message, in_place=True)
        self.event("Normal", reason, message)

    def wanted(self, slot: tuple[str, int]) -> bool:
        rtype, index = slot
        return rtype in self.specs and index < self.specs[rtype].replicas

    def delete_pod(self, pod: JSON) -> None:
        if not terminating(pod) and pod not in self.plan.delete_pods:
            self.plan.delete_pods.append(pod)

    def generation(self) -> int:
        """The job's restart generation: how often it was restarted, as the status counts
        it (``replicaStatuses.<type>.restarts``, with this pass's restart)."""
        counted = self.counts if self.counts is not None else self.status.get("replicaStatuses")
        return sum(int((e or {}).get("restarts") or 0) for e in (counted or {}).values())

    def ask_agents(self, pods: list[JSON], action: str, generation: int) -> None:
        self.plan.agent_requests.extend(AgentRequest(pod, action, generation) for pod in pods)

    def stop_pods(self) -> bool:
        """Delete every pod of the job (services stay); True once none is left."""
        for pod in self.pods:
            self.delete_pod(pod)
        return not self.pods

    # --- the flow ---------------------------------------------------------------------------
    def run(self) -> Plan:
        if self.left_alone():
            return self.plan
        if self.view.spec.managed_by == c.MANAGED_BY_MULTIKUEUE:
            return self.dispatched()
        self.created()

        counts: dict[str, JSON] | None = None
        if not self.finished_or_invalid():
            counts = self.active_job()
        self.update_progress()
        return self.finish_status(counts)

    def finished_or_invalid(self) -> bool:
        """Rules 2 and 4: a finished job only cleans up; an invalid one fails (True)."""
        if is_finished(self.status):
            self.finish(delete_all=False)
            return True
        if errors := validate(self.stored):
            detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:10])
            self.fail("InvalidSpec", f"MSJob {self.ref} is invalid: {detail}")
            self.finish(delete_all=True)
            return True
        return False

    def created(self) -> None:
        """Rule 3: ``Created`` on first sight; ``observedGeneration``."""
        if get_condition(self.status, c.CREATED) is None:
            self.set_condition(
                c.CREATED, c.CONDITION_TRUE, "MSJobCreated", f"MSJob {self.ref} is created."
            )
        generation = self.view.generation
        if generation:
            self.status["observedGeneration"] = generation

    def left_alone(self) -> bool:
        """Rule 1: a job being deleted, managed by another controller, or dispatched by
        MultiKueue without a queue (or without Kueue here: nobody would queue it)."""
        if self.view.deletion_timestamp:
            return True
        managed_by = self.view.spec.managed_by
        if managed_by == c.MANAGED_BY_MULTIKUEUE:
            return not self.systems  # Kueue observes it only with --enable-kueue and a queue
        return bool(managed_by) and managed_by != MANAGED_BY

    def dispatched(self) -> Plan:
        """Rule 1, a job MultiKueue dispatches to a worker cluster: its Workload is queued
        here (the scheduling systems' ``admit``, ``suspend`` and ``finish``), no pod or
        Service is ever made here, and the status is written only while no worker cluster
        runs the job (``Created``, ``Queued``, ``Suspended``, an invalid spec's
        ``Failed``); ``ttlSecondsAfterFinished`` deletes it here as well."""
        self.created()
        if self.finished_or_invalid():
            pass
        elif self.view.run_policy.suspend:
            self.suspend()
        else:
            resuming = self.resume()
            for system in self.systems:
                if not system.admit(self, resuming):
                    break
        if any(system.mirrors_status(self) for system in self.systems):
            # The worker cluster's status is copied here: writing ours would fight it.
            self.plan.transitions.clear()
            return self.plan
        return self.finish_status(None)

    def update_progress(self) -> None:
        """``status.progress``: the newest of the stored one, the poller's live one and the
        final one Worker 0's reporter left in its termination message (which wins a tie:
        it is the last word of that process)."""
        current = self.status.get("progress")
        worker0 = self.by_slot.get((c.WORKER, 0))
        final = final_progress(worker0) if worker0 is not None else None
        best = progress_api.newest(final, self.obs.progress, current)
        if best is not None and best != current:
            self.status["progress"] = copy_json(best)

    def active_job(self) -> dict[str, JSON] | None:
        """Rules 5-11 for a job that has not finished; returns the replica counts when it
        got as far as counting them (the status shows them), else None."""
        if self.view.run_policy.suspend:
            self.suspend()
            return None
        resuming = self.resume()
        if not all(system.admit(self, resuming) for system in self.systems):
            return None
        if not self.status.get("startTime"):
            self.status["startTime"] = self.now_s
        if self.fail_past_deadline():
            return None
        counts = self.counts = self.count_replicas()
        if not self.finish_or_restart(counts):
            children.sync(self)
            if self.all_running():
                for system in self.systems:
                    system.running(self)
                msg = f"MSJob {self.ref} is running."
                if self.set_condition(c.RUNNING, c.CONDITION_TRUE, "MSJobRunning", msg):
                    self.event("Normal", "MSJobRunning", msg)
        return counts

    def resume(self) -> bool:
        """Resuming restarts the clock: ``startTime`` is set again when the pods start.
        Returns whether the job resumes in this pass."""
        if not is_true(self.status, c.SUSPENDED):
            return False
        msg = f"MSJob {self.ref} is resumed."
        self.set_condition(c.SUSPENDED, c.CONDITION_FALSE, "MSJobResumed", msg)
        self.plan.transitions.append("Resumed")
        self.event("Normal", "MSJobResumed", msg)
        self.status.pop("startTime", None)
        return True

    def fail_past_deadline(self) -> bool:
        """Rule 6: fail at ``startTime + activeDeadlineSeconds`` (True); until then,
        requeue at that instant."""
        deadline = self.view.run_policy.active_deadline_seconds
        if deadline is None:
            return False
        start = parse_time(self.status["startTime"]) or self.now
        remaining = (start + timedelta(seconds=deadline) - self.now).total_seconds()
        if remaining > 0:
            self.requeue_at(remaining)
            return False
        self.fail(
            "DeadlineExceeded",
            f"MSJob {self.ref} was active longer than its deadline ({deadline}s).",
        )
        self.finish(delete_all=True)
        return True

    def finish_or_restart(self, counts: dict[str, JSON]) -> bool:
        """Rules 7-9: True if this pass fails, completes or restarts the job."""
        if self.view.spec.restart_scope == c.RESTART_SCOPE_JOB:
            # The training's own result comes first: a cluster whose workers finished is
            # never restarted for a pod that crashed afterwards (at interpreter exit, say).
            if self.succeeded(counts):
                self.succeed()
                return True
            return restarts.restart_job_if_needed(self, counts)
        if restarts.restart_pods(self, counts):
            return True
        if self.succeeded(counts):
            self.succeed()
            return True
        return False

    def succeed(self) -> None:
        msg = f"MSJob {self.ref} successfully completed."
        self.set_condition(c.SUCCEEDED, c.CONDITION_TRUE, "MSJobSucceeded", msg)
        self.event("Normal", "MSJobSucceeded", msg)
        self.finish(delete_all=False)

    def suspend(self) -> None:
        """Rule 5: every pod and Service goes; the scheduling systems let go of the job."""
        for pod in self.pods:
            self.delete_pod(pod)
        self.plan.delete_services.extend(s for s in self.obs.services if not terminating(s))
        for system in self.systems:
            system.suspend(self)
        if not is_true(self.status, c.SUSPENDED):
            msg = f"MSJob {self.ref} is suspended."
            self.set_condition(c.SUSPENDED, c.CONDITION_TRUE, "MSJobSuspended", msg)
            self.event("Normal", "MSJobSuspended", msg)

    def count_replicas(self) -> dict[str, JSON]:
        counts: dict[str, JSON] = {}
        old = self.status.get("replicaStatuses") or {}
        for rtype in c.REPLICA_TYPES:
            if rtype not in self.specs:
                continue
            entry: JSON = {"active": 0, "succeeded": 0, "failed": 0}
            restarted = (old.get(rtype) or {}).get("restarts")
            if isinstance(restarted, int) and restarted > 0:
                entry["restarts"] = restarted
            counts[rtype] = entry
        for slot, pod in self.by_slot.items():
            if slot[0] not in counts or not self.wanted(slot) or terminating(pod):
                continue
            pod_phase = phase(pod)
            entry = counts[slot[0]]
            if pod_phase in ACTIVE_PHASES:
                entry["active"] += 1
            elif pod_phase == "Succeeded":
                entry["succeeded"] += 1
            elif pod_phase == "Failed":
                entry["failed"] += 1
        return counts

    def succeeded(self, counts: dict[str, JSON]) -> bool:
        if c.WORKER in self.specs and self.specs[c.WORKER].replicas > 0:
            workers = counts[c.WORKER]
            replicas = self.specs[c.WORKER].replicas
            if self.view.spec.enable_dynamic_worker:
                # Elastic: failed workers are gone for good; the rest decide.
                done = workers["active"] == 0 and workers["succeeded"] > 0
                if self.view.spec.success_policy == c.SUCCESS_ALL_WORKERS:
                    return bool(done and workers["succeeded"] + workers["failed"] == replicas)
                worker0 = self.by_slot.get((c.WORKER, 0))
                return bool(
                    (worker0 is not None and pod_succeeded(worker0))
                    or (done and worker0 is not None and phase(worker0) == "Failed")
                )
            if self.view.spec.success_policy == c.SUCCESS_ALL_WORKERS:
                return bool(workers["succeeded"] == replicas)
            worker0 = self.by_slot.get((c.WORKER, 0))
            return worker0 is not None and not terminating(worker0) and pod_succeeded(worker0)
        slots = desired.replica_slots(self.job)
        return bool(slots) and all(
            s in self.by_slot and pod_succeeded(self.by_slot[s]) for s in slots
        )

    def all_running(self) -> bool:
        slots = desired.replica_slots(self.job)
        if not slots:
            return False
        phases = []
        for s in slots:
            pod = self.by_slot.get(s)
            if pod is None or terminating(pod):
                return False
            if phase(pod) == "Failed" and s[0] == c.WORKER and self.view.spec.enable_dynamic_worker:
                continue
            phases.append(phase(pod))
        return all(p in ("Running", "Succeeded") for p in phases) and "Running" in phases

    def finish(self, *, delete_all: bool) -> None:
        """Cleanup and TTL for a finished job (just now or earlier)."""
        if not self.status.get("completionTime"):
            self.status["completionTime"] = self.now_s
        policy = self.view.run_policy.clean_pod_policy
        if delete_all or policy == c.CLEAN_ALL:
            for pod in self.pods:
                self.delete_pod(pod)
        elif policy == c.CLEAN_RUNNING:
            for pod in self.pods:
                if phase(pod) in ACTIVE_PHASES:
                    self.delete_pod(pod)
        if delete_all or policy in (c.CLEAN_ALL, c.CLEAN_RUNNING):
            self.plan.delete_services.extend(s for s in self.obs.services if not terminating(s))
        for system in self.systems:
            system.finish(self)
        ttl = self.view.run_policy.ttl_seconds_after_finished
        if ttl is not None:
            done = parse_time(self.status["completionTime"]) or self.now
            remaining = (done + timedelta(seconds=ttl) - self.now).total_seconds()
            if remaining <= 0:
                self.plan.delete_job = True
            else:
                self.requeue_at(remaining)

    def finish_status(self, counts: dict[str, JSON] | None) -> Plan:
        """The status to write: the replica counts (``counts`` if this pass made them),
        ``workers``, ``lastReconcileTime``; None in the Plan when nothing changed."""
        status = self.status
        if not is_finished(self.old_status):
            # Once finished, replica counts stay as they were at that moment, except that
            # the pods the cleanup deletes now (cleanPodPolicy) are no longer active.
            counts = counts if counts is not None else self.count_replicas()
            if is_finished(status):
                for pod in self.plan.delete_pods:
                    slot = slot_of(pod)
                    if slot is not None and slot[0] in counts and phase(pod) in ACTIVE_PHASES:
                        entry = counts[slot[0]]
                        entry["active"] = max(0, int(entry.get("active", 0)) - 1)
            for rtype, entry in counts.items():
                entry["selector"] = naming.replica_selector_string(self.view.name, rtype)
            status["replicaStatuses"] = counts
            if c.WORKER in self.specs:
                status["workers"] = (
                    f"{counts.get(c.WORKER, {}).get('active', 0)}/{self.specs[c.WORKER].replicas}"
                )
        if status != self.old_status:
            status["lastReconcileTime"] = self.now_s
            self.plan.status = status
        return self.plan


def plan(observed: Observed, options: Options | None = None) -> Plan:
    """Decide what to do for one MSJob; see the module docstring for the rules."""
    return Planner(observed, options or Options()).run()
