"""One planning pass over one MSJob: what it reads, and every act a rule may take.

The planner (:mod:`.plan`) orders the rules; the rule modules (:mod:`.children`,
:mod:`.restarts`) and the scheduling systems (:mod:`.scheduling`) decide. All of them read
the job and its children here and act only through the pass: create, delete or patch a
child, set a condition, fail or finish the job, record an event, ask the pods' agents,
requeue. The :class:`Plan` that the reconciler applies is built by those acts and by
nothing else (:meth:`PlanningPass.result`).

This module imports no rule module: the rules depend on the pass, never the reverse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from msop.api import conditions
from msop.api import constants as c
from msop.api.conditions import get_condition, is_true
from msop.api.copying import copy_json
from msop.api.defaults import apply_defaults
from msop.api.types import MSJob
from msop.kube.objects import JSON, EventType, format_time, parse_time
from msop.msjob import desired, nodehealth
from msop.msjob.inplace import pods as inplace
from msop.msjob.podstate import phase, slot_of, terminating
from msop.msjob.scheduling import Decision, Seen, Wait

#: Pod phases in which a pod counts as active.
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
    shard_of: Callable[[str], int] | None = None
    """The shard of a job by its UID (``msop run --shards`` above 1): its pods and Services
    are created with it in ``c.LABEL_SHARD``. None: no shards, no label."""
    node_lost_after: float = 10.0
    """Seconds a pod's node may be not ready (``Ready`` False or Unknown, or the
    not-ready/unreachable taint) before the pod counts as lost (:mod:`.nodehealth`);
    0: at the first sign."""


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
    nodes: dict[str, JSON] = field(default_factory=dict)
    """The nodes of the job's pods, by name, as the cache holds them
    (:func:`.nodehealth.node_projection`); a node not here is not known."""


@dataclass(frozen=True)
class Event:
    type: EventType
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


class PlanningPass:
    """One planning pass over one job.

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
        self._plan = Plan(scheduling=self.systems)
        self._deleting: set[int] = set()
        """``id()`` of the pods in ``Plan.delete_pods``."""
        self._signals: dict[tuple[str, int], nodehealth.Signal] | None = None
        # Live pods by slot; the first one wins if two claim a slot.
        self.by_slot: dict[tuple[str, int], JSON] = {}
        self.strays: list[JSON] = []
        for p in sorted(obs.pods, key=lambda p: p["metadata"].get("creationTimestamp", "")):
            slot = slot_of(p)
            if slot is None or slot in self.by_slot:
                self.strays.append(p)
            else:
                self.by_slot[slot] = p

    # --- what the pass reads ------------------------------------------------------------
    @property
    def pods(self) -> list[JSON]:
        """The job's pods in the cache."""
        return self.obs.pods

    @property
    def services(self) -> list[JSON]:
        """The job's Services in the cache."""
        return self.obs.services

    def wanted(self, slot: tuple[str, int]) -> bool:
        rtype, index = slot
        return rtype in self.specs and index < self.specs[rtype].replicas

    def deleting(self, pod: JSON) -> bool:
        """Whether this pass deletes ``pod`` (one of :attr:`pods`)."""
        return id(pod) in self._deleting

    def node_signals(self) -> dict[tuple[str, int], nodehealth.Signal]:
        """The wanted, live (not terminating, Pending or Running) pods that their node or
        their devices say are lost (:mod:`.nodehealth`), by slot. A sign that does not
        count yet (a ``Ready`` that may come back) is not here: the pass looks again when
        it would."""
        if self._signals is None:
            self._signals = {}
            for slot, pod in self.by_slot.items():
                if not self.wanted(slot) or terminating(pod) or phase(pod) not in ACTIVE_PHASES:
                    continue
                signal = nodehealth.judge(
                    pod, self.obs.nodes.get(nodehealth.node_of(pod)),
                    template_tolerations=self._template_tolerations(slot[0]),
                    now=self.now, grace=self.opts.node_lost_after,
                )  # fmt: skip
                if signal is None:
                    continue
                if signal.lost_in > 0:
                    self.requeue_at(signal.lost_in)
                else:
                    self._signals[slot] = signal
        return self._signals

    def lost_message(self, slots: list[tuple[str, int]]) -> str:
        """What the signs of ``slots`` (those :meth:`node_signals` has) say, for a
        condition: ``pod ns/x on node n is lost: node NotReady for 12s (...)``; "" if none
        has."""
        signals = self.node_signals()
        said = []
        for slot in slots:
            if (signal := signals.get(slot)) is not None:
                name = self.by_slot[slot]["metadata"]["name"]
                where = f" on node {signal.node}" if signal.node else ""
                said.append(f"pod {self.view.namespace}/{name}{where} is lost: {signal.what}")
        return "; ".join(said)

    def node_down(self, pod: JSON) -> bool:
        """Whether ``pod``'s node has not been ready for ``node_lost_after`` seconds: its
        kubelet may never confirm a kill (:func:`.nodehealth.node_down`)."""
        node = self.obs.nodes.get(nodehealth.node_of(pod))
        return node is not None and nodehealth.node_down(
            node, now=self.now, grace=self.opts.node_lost_after
        )

    def _template_tolerations(self, rtype: str) -> list[JSON]:
        replica = ((self.job.get("spec") or {}).get("msReplicaSpecs") or {}).get(rtype) or {}
        spec = (replica.get("template") or {}).get("spec") or {}
        return list(spec.get("tolerations") or [])

    def deleted_pods(self) -> list[JSON]:
        """The pods this pass deletes so far, in order."""
        return list(self._plan.delete_pods)

    def generation(self) -> int:
        """The job's restart generation: how often it was restarted, as the status counts
        it (``replicaStatuses.<type>.restarts``, with this pass's restart)."""
        counted = self.counts if self.counts is not None else self.status.get("replicaStatuses")
        return sum(int((e or {}).get("restarts") or 0) for e in (counted or {}).values())

    def all_running(self) -> bool:
        """Whether every wanted pod exists and runs (or already succeeded; a failed Worker
        of an elastic job does not count), and one at least runs."""
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

    # --- the job's status, events and timing -----------------------------------------------
    def event(self, type_: EventType, reason: str, message: str) -> None:
        self._plan.events.append(Event(type_, reason, message))

    def requeue_at(self, seconds: float) -> None:
        self._plan.requeue_at(seconds)

    def transition(self, name: str) -> None:
        """Count a transition that is not a condition becoming True ("Resumed")."""
        self._plan.transitions.append(name)

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
            restarting = get_condition(self.status, c.RESTARTING) or {}
            why = restarting.get("message") or ""
            # A resize is no failure: its end keeps saying what it was.
            resized = restarting.get("reason") == c.REASON_RESIZING
            conditions.set_condition(
                self.status, c.RESTARTING, c.CONDITION_FALSE,
                c.REASON_RESIZED if resized else "MSJobRestarted",
                f"MSJob {self.ref} is no longer restarting: it is {type_.lower()}."
                + (f" The last restart: {why}" if why else ""),
                self.now_s,
            )  # fmt: skip
        changed = conditions.set_condition(
            self.status, type_, status, reason, message, self.now_s, in_place=in_place
        )
        if changed and status == c.CONDITION_TRUE:
            self._plan.transitions.append(type_)
        return changed

    def write_status_first(self) -> None:
        """Write the status before any pod is deleted: a restart is counted before the
        evidence (the failed pod) is gone."""
        self._plan.status_first = True

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

    # --- the job's children -------------------------------------------------------------------
    def create_service(self, service: JSON) -> None:
        self._plan.create_services.append(self._sharded(service))

    def create_pod(self, pod: JSON) -> None:
        self._plan.create_pods.append(self._sharded(pod))

    def _sharded(self, child: JSON) -> JSON:
        """``child`` labelled with its job's shard (with shards; else ``child`` itself)."""
        if self.opts.shard_of is None:
            return child
        shard = self.opts.shard_of(str(self.job["metadata"]["uid"]))
        meta = child.get("metadata") or {}
        labels = {**(meta.get("labels") or {}), c.LABEL_SHARD: str(shard)}
        return {**child, "metadata": {**meta, "labels": labels}}

    def delete_pod(self, pod: JSON) -> None:
        if not terminating(pod) and id(pod) not in self._deleting:
            self._deleting.add(id(pod))
            self._plan.delete_pods.append(pod)

    def force_delete_pod(self, pod: JSON) -> None:
        """Delete a pod with no grace period: its node will never confirm the kill."""
        self._plan.force_delete_pods.append(pod)

    def delete_service(self, service: JSON) -> None:
        if not terminating(service):
            self._plan.delete_services.append(service)

    def patch_service(self, service: JSON, patch: JSON) -> None:
        """Merge-patch a Service in place."""
        self._plan.patch_services.append((service, patch))

    def stop_pods(self) -> bool:
        """Delete every pod of the job (services stay); True once none is left."""
        for pod in self.pods:
            self.delete_pod(pod)
        return not self.pods

    def ask_agents(self, pods: list[JSON], action: str, generation: int) -> None:
        """Ask the pods' agents to ``restart`` their pod or ``release`` its barrier, once
        the status is written."""
        self._plan.agent_requests.extend(AgentRequest(pod, action, generation) for pod in pods)

    # --- the job's end ----------------------------------------------------------------------
    def finish(self, *, delete_all: bool) -> None:
        """The job has finished (just now or earlier): ``completionTime``, the cleanup of
        ``cleanPodPolicy`` (every pod and Service with ``delete_all``), the scheduling
        systems let go, and ``ttlSecondsAfterFinished``."""
        if not self.status.get("completionTime"):
            self.status["completionTime"] = self.now_s
        policy = self.view.run_policy.clean_pod_policy
        if delete_all or policy == c.CLEAN_ALL:
            for pod in self.pods:
                self.delete_pod(pod)
        elif policy == c.CLEAN_RUNNING:
            for pod in self.pods:
                if phase(pod) in ACTIVE_PHASES and not _training_ended(pod):
                    self.delete_pod(pod)
        if delete_all or policy in (c.CLEAN_ALL, c.CLEAN_RUNNING):
            for service in self.services:
                self.delete_service(service)
        for system in self.systems:
            system.finish(self)
        ttl = self.view.run_policy.ttl_seconds_after_finished
        if ttl is not None:
            done = parse_time(self.status["completionTime"]) or self.now
            remaining = (done + timedelta(seconds=ttl) - self.now).total_seconds()
            if remaining <= 0:
                self._plan.delete_job = True
            else:
                self.requeue_at(remaining)

    # --- the result ---------------------------------------------------------------------------
    def result(self, status: JSON | None) -> Plan:
        """The Plan of this pass, with ``status`` to write (None: none)."""
        self._plan.status = status
        return self._plan

    def unwritten(self) -> Plan:
        """The Plan of a pass that writes no status (another cluster's status is copied
        here): its transitions are not counted either."""
        self._plan.transitions.clear()
        return self.result(None)


def _training_ended(pod: JSON) -> bool:
    """A pod with msop's agent whose training container has ended: its phase is still
    Running while the kubelet stops the sidecar, but it is a finished pod, kept (with its
    log) as ``cleanPodPolicy: Running`` keeps a Failed or Succeeded one."""
    if inplace.agent_of(pod) is None:
        return False
    return "terminated" in (inplace.main_status(pod).get("state") or {})
