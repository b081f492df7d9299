"""The MSJob decision: from what is observed, what to do and what the status should be.

``plan(observed, options)`` is a pure function of the MSJob, the pods and services it
owns (from the informer cache), its PodGroup (gang scheduling) and the current time.
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

1. A job being deleted, or with ``runPolicy.managedBy`` naming another controller, is
   left alone (an empty Plan, status untouched).
2. A job that fails validation (it bypassed admission) gets ``Failed`` with reason
   ``InvalidSpec`` naming the fields, and a Warning event. Nothing is created.
3. ``Created`` is set on first sight; ``observedGeneration`` follows the spec.
4. Finished jobs (Succeeded/Failed) only clean up: ``cleanPodPolicy`` (All: every pod;
   Running: pods still Pending/Running; None: nothing; services go with All and
   Running), the PodGroup is deleted, and ``ttlSecondsAfterFinished`` deletes the job at
   exactly ``completionTime + ttl`` (a precise requeue until then). Replica counts are
   frozen at the moment the job finished, so cleanup does not rewrite history.
5. ``suspend: true`` deletes all pods and services and sets ``Suspended`` (and turns
   ``Running`` False). Resuming sets ``Suspended=False`` (reason ``MSJobResumed``) and
   restarts the clock: ``startTime`` is reset. The deadline does not run while suspended.
6. ``activeDeadlineSeconds`` fails the job (reason ``DeadlineExceeded``) at exactly
   ``startTime + deadline``; until then the Plan asks for a requeue at that instant.
7. Restarts. With ``restartScope: Job`` (the default for a MindSpore cluster: a job with
   a Scheduler, not elastic) the job restarts as a whole: the success policy is checked
   first; then the earliest failure decides, and if the failed replica's policy retries
   it, every pod is deleted and recreated together once all are gone (one restart toward
   ``backoffLimit``); a scale of a started cluster, or a member deleted from a running
   one, restarts it the same way without counting. See ``restart_cluster_if_needed``.
   With ``restartScope: Pod`` (ms-operator's rules):
   ``Always``/``OnFailure`` are restarted in place by the kubelet; each
   ``restartCount`` counts toward ``backoffLimit``. ``ExitCode``: a Failed pod whose
   ``mindspore`` container exited with a code >= 128 (killed by a signal: OOM, preemption)
   is deleted and recreated, ``Restarting`` is set, and the recreation is counted in
   ``status.replicaStatuses.<type>.restarts`` (also toward ``backoffLimit``). Codes 1-127
   are permanent. When the count would exceed ``backoffLimit`` the job fails instead
   (reason ``BackoffLimitExceeded``). Deadline and backoff failures delete every pod and
   service whatever the ``cleanPodPolicy``.
8. A Failed replica that is not restarted fails the job (reason ``MSJobFailed``), unless
   ``enableDynamicWorker`` is set and it is a Worker.
9. Success: with ``successPolicy: ""`` when Worker 0 succeeded with exit code 0; with
   ``AllWorkers`` when every Worker succeeded; a job without Workers when every replica
   succeeded.
10. ``Running`` when every wanted pod exists and runs (or already succeeded).
11. Otherwise create what is missing and delete what is out of range. The Scheduler
    Service comes first: other replicas wait for its ClusterIP (their ``MS_SCHED_HOST``).
    With gang scheduling the PodGroup comes first and no pod is created until it is
    ``Inqueue`` (or ``Running``). A terminating pod holds its slot; one that stays
    terminating ``stuck_terminating_seconds`` past its deletion deadline (its node is
    gone, nobody will confirm the kill) is force-deleted so the slot can be refilled
    and the job does not sit in ``Restarting`` forever.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from msop.api import constants as c
from msop.api import naming
from msop.api import report as progress_api
from msop.api.conditions import get_condition, is_finished, is_true, set_condition
from msop.api.copying import copy_json
from msop.api.defaults import apply_defaults
from msop.api.types import MSJob
from msop.api.validation import validate
from msop.kube.objects import JSON, format_time, parse_time
from msop.msjob import desired, gang, kueue
from msop.msjob.podstate import (
    exit_code,
    final_progress,
    finished_at,
    how_it_ended,
    last_output,
    phase,
    pod_succeeded,
    restart_count,
    service_port,
    slot_of,
    terminating,
)

#: ``runPolicy.managedBy`` values this operator acts on ("" / absent means us too).
MANAGED_BY = "mindspore.gitee.com/msop"
ACTIVE_PHASES = ("Pending", "Running")


@dataclass(frozen=True)
class Options:
    """Operator-wide behaviour switches for planning."""

    gang_scheduling: bool = False
    """Create a Volcano PodGroup per job and hold pods until it is Inqueue."""
    stuck_terminating_seconds: float = 300.0
    """How long past its deletion deadline a terminating pod may hold its slot."""
    progress_port: int = c.DEFAULT_PROGRESS_PORT
    """Port Worker 0's progress reporter is told to serve on; 0: no progress."""
    kueue: bool = False
    """Manage jobs labelled ``kueue.x-k8s.io/queue-name`` through Kueue Workloads."""


@dataclass
class Observed:
    """What the reconciler saw in its caches for one job."""

    job: JSON
    pods: list[JSON]
    services: list[JSON]
    now: datetime
    pod_group: JSON | None = None
    defaulted: JSON | None = None
    """``apply_defaults(job)`` if the caller already has it (the planner only reads it);
    None to have the planner compute it."""
    progress: JSON | None = None
    """The latest ``status.progress`` fetched from Worker 0's reporter while it runs
    (the progress poller's), if any."""
    counts_unwritten_since: datetime | None = None
    """Since when a change of this job's pod counts alone has been held back
    (:attr:`StatusWrite.held`); None if none is."""
    workload: JSON | None = None
    """The job's Kueue Workload (the one named :func:`kueue.workload_name`), if any."""
    other_workloads: list[JSON] = field(default_factory=list)
    """Other Workloads the job controls (left by an earlier spec): deleted."""
    flavors: dict[str, JSON | None] = field(default_factory=dict)
    """The ResourceFlavors the Workload's admission names, from the cache (None: not
    there yet)."""
    workload_priority: JSON | kueue.MissingClass | None = None
    """While the job has no Workload: the priority fields of the class it names
    (:func:`kueue.priority_ref`), or that class missing; None: it names none."""


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


@dataclass
class Plan:
    """What to do. Apply in order: status first if ``status_first``; services; pods;
    deletes; PodGroup; events; then status (unless written first); then job deletion."""

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
    create_pod_group: JSON | None = None
    patch_pod_group: JSON | None = None
    """A merge patch for the PodGroup's spec (after a scale or a scheduling-policy edit)."""
    delete_pod_group: bool = False
    create_workload: JSON | None = None
    """A Kueue Workload to create, with its priority (:attr:`Observed.workload_priority`)."""
    patch_workload: JSON | None = None
    """A merge patch for the Workload's spec (pod sets, queue name, active)."""
    workload_status: JSON | None = None
    """A merge patch for the Workload's status (requeued after an eviction, finished)."""
    release_workloads: list[JSON] = field(default_factory=list)
    """Workloads whose Kueue finalizer is removed (finished, or going away)."""
    delete_workloads: list[JSON] = field(default_factory=list)
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


class _Planner:
    def __init__(self, obs: Observed, opts: Options) -> None:
        self.obs = obs
        self.opts = opts
        self.now = obs.now
        self.now_s = format_time(obs.now)
        self.raw = obs.job
        # The cached job is read-only: old_status is only compared against, status is ours.
        self.old_status: JSON = self.raw.get("status") or {}
        self.status: JSON = copy_json(self.old_status)
        self.plan = Plan()
        self.job = obs.defaulted if obs.defaulted is not None else apply_defaults(self.raw)
        # Per replica type: what Kueue's admission adds to its pods.
        self.placements: dict[str, desired.Placement] = {}
        self.view = MSJob(self.job)
        self.specs = self.view.replica_specs
        self.ref = f"{self.view.namespace}/{self.view.name}"
        # Live objects by slot; the first one wins if two claim a slot.
        self.pods: dict[tuple[str, int], JSON] = {}
        self.strays: list[JSON] = []
        for p in sorted(obs.pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            slot = slot_of(p)
            if slot is None or slot in self.pods:
                self.strays.append(p)
            else:
                self.pods[slot] = p

    # --- helpers ---------------------------------------------------------------------------
    def event(self, type_: str, reason: str, message: str) -> None:
        self.plan.events.append(Event(type_, reason, message))

    def condition(self, type_: str, status: str, reason: str, message: str) -> bool:
        if (
            status == c.CONDITION_TRUE
            and type_ in (c.RUNNING, c.SUCCEEDED, c.FAILED, c.SUSPENDED)
            and is_true(self.status, c.RESTARTING)
        ):
            # Set here, before the new condition, so that the new one stays the last (the
            # State column) and Restarting=False does not keep "is restarting" as message.
            # Why it restarted (and the failed run's last output) stays in the message.
            why = (get_condition(self.status, c.RESTARTING) or {}).get("message") or ""
            set_condition(
                self.status, c.RESTARTING, c.CONDITION_FALSE, "MSJobRestarted",
                f"MSJob {self.ref} is no longer restarting: it is {type_.lower()}."
                + (f" The last restart: {why}" if why else ""),
                self.now_s,
            )  # fmt: skip
        changed = set_condition(self.status, type_, status, reason, message, self.now_s)
        if changed and status == c.CONDITION_TRUE:
            self.plan.transitions.append(type_)
        return changed

    def wanted(self, slot: tuple[str, int]) -> bool:
        rtype, index = slot
        return rtype in self.specs and index < self.specs[rtype].replicas

    def delete_pod(self, pod: JSON) -> None:
        if not terminating(pod) and pod not in self.plan.delete_pods:
            self.plan.delete_pods.append(pod)

    # --- the flow ---------------------------------------------------------------------------
    def run(self) -> Plan:
        if self.left_alone():
            return self.plan
        if get_condition(self.status, c.CREATED) is None:
            self.condition(
                c.CREATED, c.CONDITION_TRUE, "MSJobCreated", f"MSJob {self.ref} is created."
            )
        generation = self.view.generation
        if generation:
            self.status["observedGeneration"] = generation

        counts: dict[str, JSON] | None = None
        if is_finished(self.status):
            self.finish(delete_all=False)
        elif errors := validate(self.raw):
            detail = "; ".join(f"{e.path}: {e.message}" for e in errors[:10])
            self.fail("InvalidSpec", f"MSJob {self.ref} is invalid: {detail}")
            self.finish(delete_all=True)
        else:
            counts = self.active_job()
        self.progress()
        return self.finish_status(counts)

    def left_alone(self) -> bool:
        """Rule 1: a job being deleted, or managed by another controller."""
        if self.view.deletion_timestamp:
            return True
        managed_by = self.view.run_policy.managed_by
        return bool(managed_by) and managed_by != MANAGED_BY

    def progress(self) -> None:
        """``status.progress``: the newest of the stored one, the poller's live one and the
        final one Worker 0's reporter left in its termination message (which wins a tie:
        it is the last word of that process)."""
        current = self.status.get("progress")
        worker0 = self.pods.get((c.WORKER, 0))
        final = final_progress(worker0) if worker0 is not None else None
        best = progress_api.newest(final, self.obs.progress, current)
        if best is not None and best != current:
            self.status["progress"] = copy_json(best)

    def fail(self, reason: str, message: str) -> None:
        self.condition(c.FAILED, c.CONDITION_TRUE, reason, message)
        self.event("Warning", reason, message)

    def active_job(self) -> dict[str, JSON] | None:
        """Rules 5-11 for a job that has not finished; returns the replica counts when it
        got as far as counting them (the status shows them), else None."""
        if self.view.run_policy.suspend:
            self.suspend()
            return None
        resuming = self.resume()
        if self.kueue_managed() and not self.kueue_admitted(resuming):
            return None
        if not self.status.get("startTime"):
            self.status["startTime"] = self.now_s
        if self.deadline_exceeded():
            return None
        counts = self.count_replicas()
        if not self.finished_or_restarting(counts):
            self.sync_children()
            if self.all_running():
                self.gang_placed()
                msg = f"MSJob {self.ref} is running."
                if self.condition(c.RUNNING, c.CONDITION_TRUE, "MSJobRunning", msg):
                    self.event("Normal", "MSJobRunning", msg)
        return counts

    def resume(self) -> bool:
        """Resuming restarts the clock: ``startTime`` is set again when the pods start.
        Returns whether the job resumes in this pass."""
        if not is_true(self.status, c.SUSPENDED):
            return False
        self.condition(
            c.SUSPENDED, c.CONDITION_FALSE, "MSJobResumed", f"MSJob {self.ref} is resumed."
        )
        self.plan.transitions.append("Resumed")
        self.event("Normal", "MSJobResumed", f"MSJob {self.ref} is resumed.")
        self.status.pop("startTime", None)
        return True

    def deadline_exceeded(self) -> bool:
        """Rule 6: fail at ``startTime + activeDeadlineSeconds``; requeue at that instant."""
        deadline = self.view.run_policy.active_deadline_seconds
        if deadline is None:
            return False
        start = parse_time(self.status["startTime"]) or self.now
        remaining = (start + timedelta(seconds=deadline) - self.now).total_seconds()
        if remaining > 0:
            self.plan.requeue_at(remaining)
            return False
        self.fail(
            "DeadlineExceeded",
            f"MSJob {self.ref} was active longer than its deadline ({deadline}s).",
        )
        self.finish(delete_all=True)
        return True

    def finished_or_restarting(self, counts: dict[str, JSON]) -> bool:
        """Rules 7-9: True if this pass fails, completes or restarts the job."""
        if self.view.spec.restart_scope == c.RESTART_SCOPE_JOB:
            # The training's own result comes first: a cluster whose workers finished is
            # never restarted for a pod that crashed afterwards (at interpreter exit, say).
            if self.succeeded(counts):
                self.succeed()
                return True
            return self.restart_cluster_if_needed(counts)
        if self.handle_restarts_and_failures(counts):
            return True
        if self.succeeded(counts):
            self.succeed()
            return True
        return False

    def succeed(self) -> None:
        msg = f"MSJob {self.ref} successfully completed."
        self.condition(c.SUCCEEDED, c.CONDITION_TRUE, "MSJobSucceeded", msg)
        self.event("Normal", "MSJobSucceeded", msg)
        self.finish(delete_all=False)

    def suspend(self) -> None:
        for pod in self.obs.pods:
            self.delete_pod(pod)
        self.plan.delete_services.extend(s for s in self.obs.services if not terminating(s))
        if self.opts.gang_scheduling and self.obs.pod_group is not None:
            self.plan.delete_pod_group = True
        wl = self.obs.workload
        if wl is not None and not kueue.terminating(wl):
            # A suspended job holds no quota: its Workload is made inactive (Kueue evicts
            # it) and handed back once the pods are gone.
            if kueue.active(wl):
                self.plan.patch_workload = {"spec": {"active": False}}
            self.requeue_when_stopped(wl)
            queued = get_condition(self.status, c.QUEUED)
            if queued is not None and queued.get("reason") == kueue.REASON_ADMITTED:
                # No longer admitted: the queue-name label may change (config/admission).
                msg = f"MSJob {self.ref} is suspended: its Workload holds no quota."
                set_condition(
                    self.status, c.QUEUED, c.CONDITION_FALSE, "MSJobSuspended", msg,
                    self.now_s, in_place=True,
                )  # fmt: skip
        if not is_true(self.status, c.SUSPENDED):
            msg = f"MSJob {self.ref} is suspended."
            self.condition(c.SUSPENDED, c.CONDITION_TRUE, "MSJobSuspended", msg)
            self.event("Normal", "MSJobSuspended", msg)

    def count_replicas(self) -> dict[str, JSON]:
        counts: dict[str, JSON] = {}
        old = self.status.get("replicaStatuses") or {}
        for rtype in c.REPLICA_TYPES:
            if rtype not in self.specs:
                continue
            entry: JSON = {"active": 0, "succeeded": 0, "failed": 0}
            restarts = (old.get(rtype) or {}).get("restarts")
            if isinstance(restarts, int) and restarts > 0:
                entry["restarts"] = restarts
            counts[rtype] = entry
        for slot, pod in self.pods.items():
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

    def handle_restarts_and_failures(self, counts: dict[str, JSON]) -> bool:
        """Apply restart policies and backoffLimit; True if the job just failed."""
        kubelet_restarts = 0
        restarts: list[tuple[str, JSON, int | None]] = []
        permanent: dict[str, int] = {}
        for slot, pod in self.pods.items():
            rtype = slot[0]
            if not self.wanted(slot) or terminating(pod):
                continue
            policy = self.specs[rtype].restart_policy
            if policy in (c.ALWAYS, c.ON_FAILURE):
                kubelet_restarts += restart_count(pod)
            if phase(pod) != "Failed":
                continue
            code = exit_code(pod)
            if policy == c.EXIT_CODE and code is not None and code >= 128:
                restarts.append((rtype, pod, code))
            elif not (rtype == c.WORKER and self.view.spec.enable_dynamic_worker):
                permanent[rtype] = permanent.get(rtype, 0) + 1

        operator_restarts = sum(int(e.get("restarts", 0)) for e in counts.values())
        limit = self.view.run_policy.backoff_limit
        total = kubelet_restarts + operator_restarts + len(restarts)
        if limit is not None and total > limit:
            done = [f"{operator_restarts} pod recreation(s)"]
            if kubelet_restarts:
                done.insert(0, f"{kubelet_restarts} container restart(s)")
            needed = f"; {len(restarts)} more needed" if restarts else ""
            self.fail(
                "BackoffLimitExceeded",
                f"MSJob {self.ref} has failed because it has reached the specified backoff "
                f"limit (backoffLimit {limit}): {' and '.join(done)} so far{needed}.",
            )
            self.finish(delete_all=True)
            return True
        if permanent:
            what = ", ".join(f"{n} {rt}" for rt, n in permanent.items())
            msg = f"MSJob {self.ref} has failed because {what} replica(s) failed."
            self.fail("MSJobFailed", msg)
            self.finish(delete_all=False)
            return True
        for rtype, pod, code in restarts:
            name = pod["metadata"]["name"]
            self.event(
                "Normal",
                "ExitedWithCode",
                f"Pod {self.view.namespace}/{name} exited with code {code}",
            )
            counts[rtype]["restarts"] = int(counts[rtype].get("restarts", 0)) + 1
            counts[rtype]["failed"] = max(0, counts[rtype]["failed"] - 1)
            self.delete_pod(pod)
            self.plan.status_first = True
        if restarts:
            types = sorted({rt for rt, _, _ in restarts})
            msg = (
                f"MSJob {self.ref} is restarting because {len(restarts)} "
                f"{'/'.join(types)} replica(s) failed with a retryable exit code."
            )
            self.condition(c.RESTARTING, c.CONDITION_TRUE, "MSJobRestarting", msg)
            self.event("Warning", "MSJobRestarting", msg)
        return False

    # --- restartScope: Job ---------------------------------------------------------------------
    def restart_cluster_if_needed(self, counts: dict[str, JSON]) -> bool:
        """Rule 7 for ``restartScope: Job``; True if this pass failed or restarts the job.

        - The job's first failure decides (the earliest ``finishedAt``): MindSpore's
          peers of a killed worker exit 1 about 30 s after it, and those follow-on exits
          say nothing about the job. Retryable by the failed replica's policy (``ExitCode``:
          a code >= 128, or no code at all: evicted, node lost; ``OnFailure``/``Always``:
          any failure; ``Never``: none) means every pod is deleted and recreated with the
          same ``MS_*`` values, counted once toward ``backoffLimit``. Otherwise the job
          fails, naming the pod, its exit code and the container's reason.
        - Pods created for another cluster size (``MS_WORKER_NUM``/``MS_SERVER_NUM``, after
          ``kubectl scale``) cannot join the others: if the cluster has started, every pod
          is recreated (not counted toward ``backoffLimit``); if none runs yet, only the
          stale ones are replaced.
        - A member of a Running cluster that disappeared (deleted by hand) leaves a cluster
          that cannot go on: every pod is recreated (not counted either)."""
        failed = [
            (slot, pod)
            for slot, pod in self.pods.items()
            if self.wanted(slot) and not terminating(pod) and phase(pod) == "Failed"
        ]
        if self.view.spec.enable_dynamic_worker:
            failed = [
                (slot, pod)
                for slot, pod in failed
                if slot[0] != c.WORKER or self.retryable(slot, pod)
            ]
        if failed:
            slot, pod = min(
                failed,
                key=lambda sp: (
                    finished_at(sp[1]),
                    not self.retryable(*sp),
                    sp[1]["metadata"]["name"],
                ),
            )
            return self.cluster_failure(counts, slot, pod)
        return self.resize_cluster() or self.replace_lost_member()

    def retryable(self, slot: tuple[str, int], pod: JSON) -> bool:
        policy = self.specs[slot[0]].restart_policy
        if policy == c.NEVER:
            return False
        if policy == c.EXIT_CODE:
            code = exit_code(pod)
            return code is None or code >= 128
        return True

    def cluster_failure(self, counts: dict[str, JSON], slot: tuple[str, int], pod: JSON) -> bool:
        name = f"{self.view.namespace}/{pod['metadata']['name']}"
        code = exit_code(pod)
        what = f"pod {name} {how_it_ended(pod)}"
        tail = last_output(pod, code) if code is not None else ""
        # Its pods are deleted: what the failed process printed last stays here.
        said = f"\nThe last output of pod {name}:\n{tail}" if tail else ""
        if code is not None:
            self.event("Normal", "ExitedWithCode", f"Pod {name} exited with code {code}")
        if not self.retryable(slot, pod):
            policy = self.specs[slot[0]].restart_policy
            self.fail(
                "MSJobFailed",
                f"MSJob {self.ref} has failed because {what}, which restartPolicy {policy} of "
                f"{slot[0]} does not retry.{said}",
            )
            self.finish(delete_all=False)
            return True
        restarts = sum(int(e.get("restarts", 0)) for e in counts.values())
        limit = self.view.run_policy.backoff_limit
        if limit is not None and restarts >= limit:
            self.fail(
                "BackoffLimitExceeded",
                f"MSJob {self.ref} has failed because {what} after {restarts} restart(s) of "
                f"the job (backoffLimit {limit}).{said}",
            )
            self.finish(delete_all=True)
            return True
        counts[slot[0]]["restarts"] = int(counts[slot[0]].get("restarts", 0)) + 1
        self.restart_all(
            "Warning", "MSJobRestarting",
            f"MSJob {self.ref} is restarting all its pods because {what} "
            f"(restart {restarts + 1}{f' of {limit}' if limit is not None else ''}).{said}",
        )  # fmt: skip
        return True

    def resize_cluster(self) -> bool:
        want = desired.wanted_cluster_size_env(self.job)
        stale = [
            p for p in self.obs.pods
            if not terminating(p) and desired.cluster_size_env(p) not in ({}, want)
        ]  # fmt: skip
        if not stale:
            return False
        if not any(phase(p) != "Pending" for p in self.obs.pods if not terminating(p)):
            for p in stale:  # nothing started yet: the job simply changes size
                self.delete_pod(p)
            return False
        was = desired.cluster_size_env(stale[0])
        change = ", ".join(
            f"{k} {was.get(k, '?')} -> {v}" for k, v in want.items() if was.get(k) != v
        )
        self.restart_all(
            "Normal", "MSJobResizing",
            f"MSJob {self.ref} is restarting all its pods so that every one has the new "
            f"cluster size ({change}); training resumes from its last checkpoint.",
        )  # fmt: skip
        return True

    def replace_lost_member(self) -> bool:
        if not is_true(self.status, c.RUNNING):
            return False
        missing = [s for s in desired.replica_slots(self.job) if s not in self.pods]
        if not missing or not any(not terminating(p) for p in self.obs.pods):
            return False
        names = ", ".join(naming.object_name(self.view.name, *s) for s in missing)
        self.restart_all(
            "Warning", "MSJobMemberLost",
            f"MSJob {self.ref} is restarting all its pods because pod(s) {names} of the "
            "running cluster are gone.",
        )  # fmt: skip
        return True

    def restart_all(self, type_: str, reason: str, message: str) -> None:
        """Delete every pod of the job; they are recreated together once all are gone
        (``sync_children`` creates nothing while one terminates). The Service stays, so
        ``MS_SCHED_HOST`` does not change."""
        for pod in self.obs.pods:
            self.delete_pod(pod)
        self.plan.status_first = True
        self.condition(c.RESTARTING, c.CONDITION_TRUE, reason, message)
        self.event(type_, reason, message)

    def succeeded(self, counts: dict[str, JSON]) -> bool:
        if c.WORKER in self.specs and self.specs[c.WORKER].replicas > 0:
            workers = counts[c.WORKER]
            replicas = self.specs[c.WORKER].replicas
            if self.view.spec.enable_dynamic_worker:
                # Elastic: failed workers are gone for good; the rest decide.
                done = workers["active"] == 0 and workers["succeeded"] > 0
                if self.view.spec.success_policy == c.SUCCESS_ALL_WORKERS:
                    return bool(done and workers["succeeded"] + workers["failed"] == replicas)
                worker0 = self.pods.get((c.WORKER, 0))
                return bool(
                    (worker0 is not None and pod_succeeded(worker0))
                    or (done and worker0 is not None and phase(worker0) == "Failed")
                )
            if self.view.spec.success_policy == c.SUCCESS_ALL_WORKERS:
                return bool(workers["succeeded"] == replicas)
            worker0 = self.pods.get((c.WORKER, 0))
            return worker0 is not None and not terminating(worker0) and pod_succeeded(worker0)
        slots = desired.replica_slots(self.job)
        return bool(slots) and all(s in self.pods and pod_succeeded(self.pods[s]) for s in slots)

    def all_running(self) -> bool:
        slots = desired.replica_slots(self.job)
        if not slots:
            return False
        phases = []
        for s in slots:
            pod = self.pods.get(s)
            if pod is None or terminating(pod):
                return False
            if phase(pod) == "Failed" and s[0] == c.WORKER and self.view.spec.enable_dynamic_worker:
                continue
            phases.append(phase(pod))
        return all(p in ("Running", "Succeeded") for p in phases) and "Running" in phases

    def sync_children(self) -> None:
        """Rule 11: delete what is out of range, then create what is missing, in order:
        the Scheduler Service, the PodGroup, then the pods (held while one of them is
        missing or not ready)."""
        self.delete_unwanted_pods()
        self.reap_stuck_terminating()
        sched_host = self.sync_scheduler_service()
        if self.cluster_still_stopping() or not self.gang_admitted():
            return
        self.create_missing_pods(sched_host)

    def delete_unwanted_pods(self) -> None:
        """Out of range or unlabelled: delete (scale-down, kubectl scale, changed types)."""
        for slot, pod in self.pods.items():
            if not self.wanted(slot):
                self.delete_pod(pod)
        for pod in self.strays:
            self.delete_pod(pod)

    def sync_scheduler_service(self) -> str | None:
        """Create the Service in front of the rendezvous pod (Scheduler 0, or Worker 0 of an
        msrun job) if missing, replace it if its port is not the job's, correct its
        selector in place if it would not select the pod (a Service ms-operator made),
        and delete any other; return its ClusterIP once it has one (the other pods'
        ``MS_SCHED_HOST``)."""
        services = self.obs.services
        slot = desired.rendezvous(self.job)
        if slot is None:
            self.plan.delete_services.extend(s for s in services if not terminating(s))
            return None
        want = naming.object_name(self.view.name, *slot)
        svc = next((s for s in services if s["metadata"]["name"] == want), None)
        if (
            svc is not None
            and not terminating(svc)
            and service_port(svc) != (desired.rendezvous_port(self.job))
        ):
            svc = None  # deleted below; created anew once gone
        self.plan.delete_services.extend(s for s in services if s is not svc and not terminating(s))
        if svc is not None and not terminating(svc):
            fix = desired.selector_fix(self.job, svc)
            if fix is not None:
                self.plan.patch_services.append((svc, fix))
        if svc is None:
            if not any(s["metadata"]["name"] == want for s in services):
                self.plan.create_services.append(desired.scheduler_service(self.job))
            return None
        ip = (svc.get("spec") or {}).get("clusterIP")
        return ip if ip and ip != "None" and not terminating(svc) else None

    def cluster_still_stopping(self) -> bool:
        """A cluster restarts as a whole: no new member while an old one lives."""
        return self.view.spec.restart_scope == c.RESTART_SCOPE_JOB and any(
            terminating(p) or p in self.plan.delete_pods for p in self.obs.pods
        )

    def gang_admitted(self) -> bool:
        """With gang scheduling: create the PodGroup first, keep its spec in step with the
        job (a scale, an edited scheduling policy), and hold the pods until Volcano has
        admitted the gang; the Queued condition says where it waits (:mod:`.gang`)."""
        if not self.opts.gang_scheduling:
            return True
        pg = self.obs.pod_group
        if pg is None:
            self.plan.create_pod_group = desired.pod_group(self.job)
        elif not terminating(pg):
            self.plan.patch_pod_group = desired.pod_group_patch(self.job, pg)
        # Every pod running ends the wait even if the PodGroup's status lags behind.
        wait = None if self.all_running() else gang.waiting(self.job, pg)
        if wait is not None:
            if self.condition(c.QUEUED, c.CONDITION_TRUE, wait.reason, wait.message):
                current = get_condition(self.old_status, c.QUEUED) or {}
                if current.get("reason") != wait.reason or current.get("status") != "True":
                    self.event(wait.event_type, wait.reason, wait.message)
        else:
            self.gang_placed()
        return pg is not None and not terminating(pg) and gang.admitted(pg)

    def gang_placed(self) -> None:
        """Queued turns False (out of the State column) once the gang is placed: the
        PodGroup says so, or every pod already runs (its status may lag behind)."""
        queued = get_condition(self.status, c.QUEUED)
        if (
            not self.opts.gang_scheduling
            or queued is None
            or queued.get("reason") == gang.REASON_SCHEDULED
        ):
            return
        msg = f"MSJob {self.ref}: Volcano placed its gang."
        set_condition(
            self.status, c.QUEUED, c.CONDITION_FALSE, gang.REASON_SCHEDULED, msg,
            self.now_s, in_place=True,
        )  # fmt: skip
        self.event("Normal", gang.REASON_SCHEDULED, msg)

    # --- Kueue ------------------------------------------------------------------------------
    def kueue_managed(self) -> bool:
        return self.opts.kueue and bool(kueue.queue_name(self.raw))

    def stop_pods(self) -> bool:
        """Delete every pod of the job (services stay); True once none is left."""
        for pod in self.obs.pods:
            self.delete_pod(pod)
        return not self.obs.pods

    def drop_workload(self, wl: JSON) -> None:
        if kueue.has_finalizer(wl):
            self.plan.release_workloads.append(wl)
        if not kueue.terminating(wl):
            self.plan.delete_workloads.append(wl)

    def requeue_when_stopped(self, wl: JSON) -> None:
        """An evicted Workload goes back to Kueue's queue once the pods are gone: until
        then they hold the resources its quota accounted for."""
        if kueue.is_true(wl, "Evicted") and kueue.has_quota(wl) and not self.obs.pods:
            self.plan.workload_status = kueue.requeue_patch(wl, self.now_s)

    def kueue_wait(self, wait: kueue.Wait) -> None:
        """``Queued`` True with the wait's reason; an event when the reason changes."""
        if is_true(self.status, c.RUNNING):
            set_condition(
                self.status, c.RUNNING, c.CONDITION_FALSE, wait.reason, wait.message, self.now_s
            )
        if self.condition(c.QUEUED, c.CONDITION_TRUE, wait.reason, wait.message):
            current = get_condition(self.old_status, c.QUEUED) or {}
            if current.get("reason") != wait.reason or current.get("status") != "True":
                self.event(wait.event_type, wait.reason, wait.message)

    def kueue_admitted(self, resuming: bool) -> bool:
        """With Kueue: keep the job's Workload in step with it and let its pods run only
        while the Workload is admitted (:mod:`.kueue`); the Queued condition says where
        it waits."""
        wl = self.obs.workload
        for old in self.obs.other_workloads:
            self.drop_workload(old)
        if wl is not None and kueue.terminating(wl):
            # Deleted under the job: stop, let it go, and queue a new one.
            self.stop_pods()
            self.drop_workload(wl)
            wl = None
        if wl is None:
            priority = self.obs.workload_priority
            if isinstance(priority, kueue.MissingClass):
                self.stop_pods()
                wait = kueue.waiting_for_class(self.job, priority)
                self.kueue_wait(wait)
                # Looked up again after as long as it has waited so far, 1 s to a minute.
                since = parse_time((get_condition(self.status, c.QUEUED) or {}).get(
                    "lastTransitionTime")) or self.now  # fmt: skip
                self.plan.requeue_at(min(60.0, max(1.0, (self.now - since).total_seconds())))
                return False
            if self.stop_pods() and not self.obs.other_workloads:
                self.plan.create_workload = kueue.workload(self.job, active=True, priority=priority)
            self.kueue_wait(kueue.why_waiting(self.job, None))
            return False
        if not kueue.pod_sets_match(self.job, wl):
            self.reshape_workload(wl)
            return False
        self.sync_workload_spec(wl, resuming)
        if not kueue.admitted(wl):
            reactivating = ((self.plan.patch_workload or {}).get("spec") or {}).get("active")
            wait = kueue.why_waiting(self.job, wl, reactivating=reactivating is True)
            if wait.reason == kueue.REASON_EVICTED:
                self.status.pop("startTime", None)
            self.stop_pods()
            self.requeue_when_stopped(wl)
            self.kueue_wait(wait)
            return False
        placements = kueue.placements(wl, self.obs.flavors)
        if placements is None:
            self.plan.requeue_at(1.0)  # a ResourceFlavor not in the cache yet
            return False
        self.placements = placements
        self.plan.workload_status = kueue.pods_ready_patch(wl, self.all_running(), self.now_s)
        queued = get_condition(self.status, c.QUEUED)
        if queued is None or queued.get("reason") != kueue.REASON_ADMITTED:
            msg = (
                f"MSJob {self.ref}: Kueue admitted its Workload {wl['metadata']['name']} to "
                f"ClusterQueue {kueue.cluster_queue(wl)!r}."
            )
            set_condition(
                self.status, c.QUEUED, c.CONDITION_FALSE, kueue.REASON_ADMITTED, msg,
                self.now_s, in_place=True,
            )  # fmt: skip
            self.event("Normal", kueue.REASON_ADMITTED, msg)
        return True

    def reshape_workload(self, wl: JSON) -> None:
        """The job's replicas or resources changed: a Workload not yet admitted is
        updated; one admitted for the old shape is dropped once the pods are stopped, and
        a new one is queued."""
        if kueue.has_quota(wl) or self.obs.pods:
            if self.stop_pods():
                self.drop_workload(wl)
        else:
            self.plan.patch_workload = {"spec": {"podSets": kueue.pod_sets(self.job)}}
        self.kueue_wait(
            kueue.Wait(
                kueue.REASON_PENDING,
                f"MSJob {self.ref} changed its replicas or resources: its Workload is "
                f"queued again in LocalQueue {kueue.queue_name(self.raw)!r}.",
            )
        )

    def sync_workload_spec(self, wl: JSON, resuming: bool) -> None:
        """The queue name follows the label until the Workload holds quota (then a change
        is refused: the Workload stays in its queue and a Warning says so); a resumed
        job's Workload is made active again."""
        spec: JSON = {}
        want = kueue.queue_name(self.raw)
        have = (wl.get("spec") or {}).get("queueName")
        if want != have and kueue.has_quota(wl):
            self.event(
                "Warning",
                "QueueNameChangeRefused",
                f"MSJob {self.ref}: the {kueue.QUEUE_LABEL} label says {want!r}, but its "
                f"Workload is admitted through LocalQueue {have!r}; the change is refused "
                "while it holds quota (suspend the job to move it).",
            )
        elif want != have:
            spec["queueName"] = want
        if resuming and not kueue.active(wl):
            spec["active"] = True
        if spec:
            self.plan.patch_workload = {"spec": spec}

    def finish_workload(self) -> None:
        """A finished job's Workload is marked Finished (its quota is released) and
        Kueue's finalizer removed."""
        wl = self.obs.workload
        for old in self.obs.other_workloads:
            self.drop_workload(old)
        if wl is None:
            return
        if not kueue.is_true(wl, "Finished") and not kueue.terminating(wl):
            done = get_condition(self.status, c.SUCCEEDED)
            succeeded = bool(done and done.get("status") == c.CONDITION_TRUE)
            final = done if succeeded else get_condition(self.status, c.FAILED)
            message = str((final or {}).get("message") or "finished")
            self.plan.workload_status = kueue.finish_patch(wl, succeeded, message, self.now_s)
        if kueue.has_finalizer(wl):
            self.plan.release_workloads.append(wl)

    def create_missing_pods(self, sched_host: str | None) -> None:
        """Every wanted pod that does not exist; with a Scheduler, the others wait for
        its Service's ClusterIP (the Service's creation requeues the job)."""
        rendezvous = desired.rendezvous(self.job)
        waits_for_host = rendezvous is not None and sched_host is None
        types: set[str] = set()
        for rtype, index in desired.replica_slots(self.job):
            if (rtype, index) in self.pods or (waits_for_host and (rtype, index) != rendezvous):
                continue
            self.plan.create_pods.append(
                desired.pod(
                    self.job, rtype, index, sched_host=sched_host,
                    gang=self.opts.gang_scheduling, progress_port=self.opts.progress_port,
                    placement=self.placements.get(rtype),
                )
            )  # fmt: skip
            types.add(rtype)
        for rtype in sorted(types, key=c.REPLICA_TYPES.index):
            if desired.template_restart_policy_overridden(self.job, rtype):
                self.event(
                    "Warning",
                    "SettedPodTemplateRestartPolicy",
                    f"The restartPolicy in the {rtype} pod template is overridden by the "
                    f"replica's restartPolicy ({self.specs[rtype].restart_policy}).",
                )

    def reap_stuck_terminating(self) -> None:
        for pod in self.obs.pods:
            meta = pod["metadata"]
            deleted = parse_time(meta.get("deletionTimestamp"))
            if deleted is None:
                continue
            # deletionTimestamp already includes the grace period.
            overdue = (self.now - deleted).total_seconds()
            if overdue >= self.opts.stuck_terminating_seconds:
                self.plan.force_delete_pods.append(pod)
                self.event(
                    "Warning",
                    "ForceDeletedStuckPod",
                    f"Pod {self.view.namespace}/{meta['name']} was terminating for "
                    f"{int(overdue)}s past its grace period (its node is unreachable); "
                    "force-deleted so the replica can be recreated.",
                )
            else:
                self.plan.requeue_at(self.opts.stuck_terminating_seconds - overdue)

    def finish(self, *, delete_all: bool) -> None:
        """Cleanup and TTL for a finished job (just now or earlier)."""
        if not self.status.get("completionTime"):
            self.status["completionTime"] = self.now_s
        policy = self.view.run_policy.clean_pod_policy
        if delete_all or policy == c.CLEAN_ALL:
            for pod in self.obs.pods:
                self.delete_pod(pod)
        elif policy == c.CLEAN_RUNNING:
            for pod in self.obs.pods:
                if phase(pod) in ACTIVE_PHASES:
                    self.delete_pod(pod)
        if delete_all or policy in (c.CLEAN_ALL, c.CLEAN_RUNNING):
            self.plan.delete_services.extend(s for s in self.obs.services if not terminating(s))
        if self.opts.gang_scheduling and self.obs.pod_group is not None:
            self.plan.delete_pod_group = True
        self.finish_workload()
        ttl = self.view.run_policy.ttl_seconds_after_finished
        if ttl is not None:
            done = parse_time(self.status["completionTime"]) or self.now
            remaining = (done + timedelta(seconds=ttl) - self.now).total_seconds()
            if remaining <= 0:
                self.plan.delete_job = True
            else:
                self.plan.requeue_at(remaining)

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
    return _Planner(observed, options or Options()).run()
