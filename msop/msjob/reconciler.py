"""The MSJob reconciler: read the caches, ask the planner, apply what it says.

This is the only part of the MSJob controller that talks to the API server. It reads
the time once per pass (``now``, into ``Observed.now``) and decides nothing about the
job: ``plan()`` says what to create, delete and write, and ``status_write()`` says what
status follows from how the creates went (``Failed``, ``ReplicaFailure``) and whether a
change of pod counts alone waits (``COUNT_WRITE_DELAY``). What the reconciler does
decide is how to react to API errors (retry, requeue, or a reconcile error):

- **The Scheduler Service** is created first; its ClusterIP comes back in the create
  response, so the planner runs again with it and every pod goes out in the same pass -
  unless other jobs wait in the queue (``backlog``). Then the pods wait for the pass the
  Service's own watch event causes, so that in a burst every job's Service is created
  before the load of their pods: the API server allocates ClusterIPs far slower while
  pods are being created (a kwok cluster of this project: 150 Services/s alone, 7/s
  beside a flood of pod creates), and each job's pods wait for its Service. The pass
  that then creates the pods leaves ``Created`` and the replica counts to the pass its
  pods' watch events cause (``_status_waits_for_pods``): one status write instead of two.
- **Creates** go out in slow-start batches (1, 2, 4, ...), Services before pods. The
  first failure stops the rest, so a quota that forbids pods costs one request per
  reconcile, and the controller's rate-limited requeue spaces the retries (no hot loop).
  Where the last pass creating that kind in that namespace succeeded, the first batch is
  ``WARM_BATCH`` (16) objects instead of one: in a burst of jobs in one namespace, only
  the first job's pods slow-start, and a job of up to 16 pods is created in one round
  trip instead of ceil(log2) of them (a burst of 6-pod jobs made 1 pod in flight per
  reconcile for a third of its passes). A failure makes the namespace cold again, so a
  quota met later costs one batch of refusals, then one request per reconcile.
  ``AlreadyExists`` counts as success. Expectations (by name) are raised before each
  create and delete, so a stale cache never causes a second create.
- **Successful creates** become one ``SuccessfulCreatePod``/``SuccessfulCreateService``
  event per pass naming every object created (``Created pods: a, b, c``), not one each.
- **Create failures** give one ``FailedCreatePod``/``FailedCreateService`` Warning event
  and one warning log line per pass (the first failure; creates stop there), and then:

  - **422 Invalid** (the API server refuses the object's content; admission cannot check
    everything the pod validation does): permanent, since the same spec makes the same
    object. The job gets ``Failed`` with the API's reason and message, and the reconcile
    succeeds: no retry, no reconcile error. Failed is final, like every Failed job.
  - **403 Forbidden by policy** (a ResourceQuota, PodSecurity, an admission webhook):
    the cluster, not the operator, says no, and may change its mind without an event we
    watch. A ``ReplicaFailure`` condition (reason and message the API's) and a
    rate-limited requeue (backoff capped at a minute), not a reconcile error, so the
    ``MsopReconcileErrors`` alert stays for the operator's own trouble. The condition is
    removed once creates succeed.
  - anything else (RBAC's 403 "cannot create resource", 5xx, timeouts): the operator's
    or the API server's problem: ``ReplicaFailure`` too, and an error return
    (rate-limited requeue, counted in ``controller_runtime_reconcile_errors_total``).
- **Deletes** carry a UID precondition; NotFound and a UID mismatch count as done.
- **Status** is written through the status subresource, only when it changed, as a JSON
  patch whose ``test`` operation requires the stored status to be the one this pass
  planned from (encoded as the API server encodes, ``msop.kube.jsonpatch``, or a test of
  a message holding ``>`` or ``é`` would never match). Writes to the job's labels,
  annotations or spec do not stand in the way
  (the API server re-applies the patch to the newest object; a ``resourceVersion``
  precondition would fail on every one of them, and a busy writer could starve the
  status forever). A status that moved under us requeues: the next pass recomputes from
  a fresher cache, so no update is lost and a stale status is never written over a
  newer one.
  A change that only moves pod counts (``replicaStatuses``, ``workers``) waits up to
  ``msop.msjob.statuswrite.COUNT_WRITE_DELAY`` (1 s) so a burst of pod events costs one write,
  not one each; condition changes are written at once. The reconciler only remembers
  since when such a change is held (``Observed.counts_unwritten_since``).
  A 422 Invalid (the stored object fails the CRD's current schema) is a TerminalError:
  not requeued until the job changes (the Warning events of the pass are already out).
- **Writes in doubt are announced once they prove stored** (the ledger of them is
  ``msop.msjob.doubts``). A create or a status write that got no answer (connection lost,
  timeout, the pass cancelled while it was out) or a 5xx may have been carried out. Its
  Events are not emitted then (a write that failed must not be announced) but kept with
  the job: a pod or Service in doubt that later shows up in the cache, or whose create
  is answered AlreadyExists, is announced then (``SuccessfulCreatePod``). A status in
  doubt is judged once the cache holds a newer job than the one it was written over: if
  the stored conditions then hold its conditions' states (type, status, reason), it is
  announced with the Events of its pass (``MSJobRunning``, ``MSJobSucceeded`` ...); a
  later write that succeeds over the same version takes its place. So an API server
  killed in the middle of a write neither doubles nor loses an announcement. A process
  that stops with writes in doubt logs how many Events it held (``stopped``).
- **Children are made again only for a job that still exists.** A job that had pods
  (its stored status has ``Created``) and would get pods or Services again in a pass that
  did not write its status first (which already proves it stored) is read once from the
  API server: if it is gone, being deleted, or another object under the same name, the
  pass creates nothing. The cache can lag behind a deletion by a relist: after a watch
  expired (410), the pods relist may report a deleted job's pods gone (the garbage
  collector took them) before the jobs relist drops the job, and without this read the
  pass would create pods for a job that no longer exists. Recreations are rare (a member
  lost, a restart, a scale), so the read costs little; a job's first pods do not need it.

All the reconciler remembers about a job between passes is one ``JobMemory``: the
resourceVersion its last status write replaced and the one it made (so the watch event
of that write causes no reconcile, ``caused_by_own_write``), since when pod counts are
held unwritten, and its writes in doubt. It is dropped when the job is gone, and
forgotten at the end of a pass that leaves nothing in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import structlog
from cachetools import LRUCache

from msop.api import constants as c
from msop.api.defaults import apply_defaults
from msop.api.resources import MSJOBS
from msop.controller.events import Recorder
from msop.controller.expectations import EXPECTATIONS_TTL, Expectations
from msop.controller.reconcile import Request, Result, TerminalError
from msop.informers.lister import Reader
from msop.informers.store import BY_CONTROLLER_UID, DeflatedJSON, by_controller_uid
from msop.kube import jsonpatch
from msop.kube.errors import (
    ApiError,
    is_already_exists,
    is_conflict,
    is_invalid,
    is_not_found,
    is_patch_test_failed,
)
from msop.kube.objects import JSON
from msop.kube.resources import PODS, SERVICES, Resource
from msop.kube.writer import Client
from msop.msjob import metrics, refile
from msop.msjob.doubts import Doubts
from msop.msjob.passes import Event, Observed, Options, Plan
from msop.msjob.plan import plan
from msop.msjob.scheduling import System, Writer

if TYPE_CHECKING:
    from msop.msjob.inplace.client import AgentClient
from msop.msjob.statuswrite import status_write

log = structlog.get_logger("msop.msjob")


#: Jobs whose defaulted spec is kept between reconciles (the recently active ones).
DEFAULTED_CACHE = 512

#: The first batch of a pass's creates where the last pass creating that kind in that
#: namespace succeeded; elsewhere the first batch is one object.
WARM_BATCH = 16


def refused_by_policy(e: ApiError) -> bool:
    """A 403 from a policy of the cluster (ResourceQuota, PodSecurity, an admission
    webhook), not from RBAC: the operator's own permissions are not the problem."""
    return e.status == 403 and "cannot create resource" not in e.message


def _outcome(e: ApiError) -> str:
    """What happens after a refused create (the log line says it, once)."""
    if is_invalid(e):
        return "the job fails: the API server refuses this spec"
    if refused_by_policy(e):
        return "retried with backoff: refused by a cluster policy"
    return "retried with backoff"


@dataclass(slots=True)
class JobMemory:
    """What the reconciler remembers about one job between passes: dropped when the job is
    gone, forgotten at the end of a pass that leaves nothing in it (``forget_settled``)."""

    replaced: str | None = None
    """The resourceVersion our last status write replaced. While the cache still shows
    that version it is stale: planning from it would only conflict."""
    written: str | None = None
    """The resourceVersion our last status write made (see ``caused_by_own_write``)."""
    awaited: bool = False
    """A reconcile found the cache at ``replaced`` and waits for that write's watch event."""
    counts_unwritten_since: datetime | None = None
    """Since when a change of the job's pod counts alone is held back
    (``Observed.counts_unwritten_since``; the planner decides when to write it)."""
    doubts: Doubts | None = None
    """The job's writes in doubt and their announcements (``msop.msjob.doubts``); None
    when there are none."""

    def forget_settled(self) -> bool:
        """Drop the writes in doubt if they all settled; True if nothing is left to
        remember (a job's last status write is remembered for as long as the job is)."""
        if self.doubts is not None and not self.doubts.held():
            self.doubts = None
        return (
            self.replaced is None
            and self.written is None
            and not self.awaited
            and self.counts_unwritten_since is None
            and self.doubts is None
        )


ChildKey = tuple[Request, Resource]
"""What the reconciler's expectations are kept by: a job and a kind of its children."""


class MSJobReconciler:
    """``reconcile(Request) -> Result`` for MSJobs; see the module docstring."""

    def __init__(
        self,
        client: Client,
        *,
        jobs: Reader,
        pods: Reader,
        services: Reader,
        recorder: Recorder,
        scheduling: Sequence[System] = (),
        expectations: Expectations[ChildKey],
        options: Options,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        progress: Callable[[Request], JSON | None] | None = None,
        backlog: Callable[[], int] = lambda: 0,
        agents: AgentClient | None = None,
        nodes: Callable[[str], JSON | None] | None = None,
    ) -> None:
        self.client = client
        self.nodes = nodes
        """The node cache by name (``--node-lost-after``; None: nodes are not watched)."""
        self.agents = agents
        """Asks the pods' agents what a restart in place needs (None: never asked)."""
        self.backlog = backlog
        """How many other jobs wait for a reconcile (the controller's ready queue)."""
        self.jobs = jobs
        self.pods = pods
        self.services = services
        self.scheduling = list(scheduling)
        """The scheduling systems that manage jobs, in the order they decide."""
        self.recorder = recorder
        self.expectations = expectations
        self.options = options
        self.now = now
        # job -> the latest progress report of its running Worker 0 (the poller's).
        self.progress = progress
        # job -> what is remembered about it between passes: our last status write and
        # its echo, held counts, writes in doubt. Made on demand; dropped when the job is
        # gone and forgotten at the end of a pass that leaves it empty (see reconcile).
        self._memory: dict[Request, JobMemory] = {}
        # job -> (resourceVersion, the job defaulted, as JSON): most reconciles are caused
        # by pod events and see an unchanged job, so it is not defaulted again. The same
        # resourceVersion is the same content; bounded to the recent jobs. Kept encoded
        # and deflated (a few hundred bytes, decoded in ~10 us) rather than as dicts (~15 KB:
        # 512 jobs took 7.5 MB) or as JSON (~2.5 KB: 1.3 MB).
        self._defaulted: LRUCache[Request, tuple[str, bytes]] = LRUCache(maxsize=DEFAULTED_CACHE)
        self._defaulted_codec = DeflatedJSON()
        # (namespace, kind) whose last pass of creates all succeeded: the next pass there
        # starts with a batch of WARM_BATCH (see _create).
        self._warm: LRUCache[tuple[str, str], bool] = LRUCache(maxsize=4096)
        # With shards: the jobs whose children were listed from the API server while their
        # shard is held here (see _refile); forgotten with the job.
        self._listed: set[Request] = set()

    def caused_by_own_write(self, request: Request, resource_version: str) -> bool:
        """Whether a job at ``resource_version`` is exactly what our last status write
        made, with no reconcile waiting for it: its watch event needs no reconcile (the
        pass that wrote it planned from everything else)."""
        memory = self._memory.get(request)
        return memory is not None and memory.written == resource_version and not memory.awaited

    def forget(self, request: Request) -> int:
        """Drop what this process remembers of the job: its memory (the status write it
        waits for), its defaulted copy and its expectations. For a job that is gone, and
        for the jobs of a shard handed over (``--shards``): a write cancelled by the hand-
        over may never show, and the next time this replica holds the job it must plan
        from the cluster alone. Returns how many Events held for writes still in doubt
        go unwritten with it (the next holder sees the writes stored, or not, and does
        not announce them)."""
        memory = self._memory.pop(request, None)
        held = memory.doubts.unannounced() if memory is not None and memory.doubts else 0
        self._defaulted.pop(request, None)
        self._listed.discard(request)
        self.expectations.delete_expectations((request, PODS))
        self.expectations.delete_expectations((request, SERVICES))
        return held

    def _remember(self, request: Request) -> JobMemory:
        """The job's memory, made on demand."""
        memory = self._memory.get(request)
        if memory is None:
            memory = self._memory[request] = JobMemory()
        return memory

    def _doubts(self, request: Request) -> Doubts:
        """The job's writes in doubt, made on demand."""
        memory = self._remember(request)
        if memory.doubts is None:
            memory.doubts = Doubts()
        return memory.doubts

    async def reconcile(self, request: Request) -> Result:
        try:
            return await self._reconcile(request)
        finally:
            # A job with nothing left to remember is forgotten: the memory grows with the
            # jobs that have something in it, not with every job ever seen.
            memory = self._memory.get(request)
            if memory is not None and memory.forget_settled():
                del self._memory[request]

    async def _reconcile(self, request: Request) -> Result:
        job = self.jobs.get(request.name, request.namespace)
        if job is None:
            self.forget(request)
            for system in self.scheduling:
                await system.forget(request)
            return Result()
        rv = job["metadata"].get("resourceVersion", "")
        memory = self._remember(request)
        if memory.replaced == rv:
            # Our own status write has not reached the cache yet; its watch event requeues.
            memory.awaited = True
            return Result()
        memory.replaced, memory.awaited = None, False
        if not (
            self.expectations.satisfied((request, PODS))
            and self.expectations.satisfied((request, SERVICES))
        ):
            # The informer events that satisfy them requeue the job; the TTL bounds the wait.
            log.debug("waiting for the cache to show our own creates/deletes")
            return Result(requeue_after=EXPECTATIONS_TTL)

        uid = job["metadata"]["uid"]
        cached = self._defaulted.get(request)
        if cached is not None and cached[0] == rv and rv:
            defaulted = self._defaulted_codec.decode(cached[1])
        else:
            defaulted = apply_defaults(job)
            self._defaulted[request] = (rv, self._defaulted_codec.encode(defaulted))
        seen = [await system.observe(job) for system in self.scheduling]
        pods = self.pods.by_index(BY_CONTROLLER_UID, uid)
        observed = Observed(
            job=job,
            pods=pods,
            services=self.services.by_index(BY_CONTROLLER_UID, uid),
            now=self.now(),
            scheduling=[s for s in seen if s is not None],
            defaulted=defaulted,
            progress=self.progress(request) if self.progress is not None else None,
            counts_unwritten_since=memory.counts_unwritten_since,
            nodes=self._nodes_of(pods),
        )
        if memory.doubts is not None:
            memory.doubts.settle(self.recorder, job, observed.pods, observed.services)
        p = plan(observed, self.options)
        if self.options.shard_of is not None and await self._refile(
            request, job, defaulted, observed, bool(p.create_pods or p.create_services)
        ):
            # Its children filed under another shard reach this shard's informer as adds:
            # the pass plans from them, not from their absence.
            return Result(requeue_after=EXPECTATIONS_TTL)
        failure: ApiError | None = None
        if p.create_services and not p.status_first and not await self._still_there(job, p):
            p = replace(p, create_services=[], create_pods=[])
        if p.create_services and not p.status_first:
            # The create response carries the Service's ClusterIP: plan again with it, so
            # the pods that need it go out in this pass, not after a watch round trip.
            failure, created = await self._create(request, job, SERVICES, p.create_services)
            if failure is None:
                if self.backlog() > 0:
                    # Other jobs' Services first; the Service's watch event brings us back
                    # for the pods and the status (one status write, as without the wait).
                    return Result()
                observed.services = [*observed.services, *created]
                p = plan(observed, self.options)
            else:
                p.create_services, p.create_pods = [], []
        return await self._apply(request, observed, p, failure)

    async def _refile(
        self, request: Request, job: JSON, defaulted: JSON, observed: Observed, creates: bool
    ) -> bool:
        """With shards: file the job's children that carry another shard's label under its
        own (:mod:`.refile`); those of them not in this cache are found by a list, once per
        job while its shard is held here, when the cache may not show them all. True if a
        child was relabelled (the pass waits for the cache to show it)."""
        assert self.options.shard_of is not None
        uid = str(job["metadata"]["uid"])
        shard = self.options.shard_of(uid)
        moves = {PODS: refile.misfiled(observed.pods, shard),
                 SERVICES: refile.misfiled(observed.services, shard)}  # fmt: skip
        if request not in self._listed and refile.may_hide(
            job, defaulted, len(observed.pods), creates
        ):
            cached = {PODS: observed.pods, SERVICES: observed.services}
            for res, have in cached.items():
                names = {o["metadata"]["name"] for o in have}
                listed = await self.client.list(
                    res, request.namespace,
                    label_selector=refile.children_selector(request.name),
                )  # fmt: skip
                moves[res] += [
                    o for o in refile.misfiled(listed["items"], shard)
                    if o["metadata"]["name"] not in names and by_controller_uid(o) == [uid]
                ]  # fmt: skip
            self._listed.add(request)
        if not any(moves.values()):
            return False
        for res, objs in moves.items():
            if not objs:
                continue
            exp_key = (request, res)
            moved = [o["metadata"]["name"] for o in objs]
            self.expectations.expect_creations_of(exp_key, moved)
            results = await asyncio.gather(
                *(self.client.patch(res, o["metadata"]["name"], refile.refile_patch(o, shard),
                                    request.namespace) for o in objs),
                return_exceptions=True,
            )  # fmt: skip
            failed: BaseException | None = None
            for name, result in zip(moved, results, strict=True):
                if not isinstance(result, BaseException):
                    continue
                self.expectations.creation_observed(exp_key, name)
                gone = isinstance(result, ApiError) and (
                    is_not_found(result) or is_invalid(result) or is_conflict(result)
                )  # deleted, or made again (another UID) since it was read
                if not gone and failed is None:
                    failed = result
            if failed is not None:
                raise failed
        log.info(
            "children filed under another shard moved to the job's",
            shard=shard,
            pods=[o["metadata"]["name"] for o in moves[PODS]],
            services=[o["metadata"]["name"] for o in moves[SERVICES]],
            was=sorted({refile.shard_label(o) or "" for objs in moves.values() for o in objs}),
        )
        return True

    async def _apply(
        self, request: Request, observed: Observed, p: Plan, failure: ApiError | None
    ) -> Result:
        job = observed.job
        if p.status is not None and p.status_first:
            written = await self._write_status(request, job, p.status, p.transitions, p.events)
            if written is None:
                return Result(requeue=True)
            # The status is out: what is left of the Plan is applied to the job it returned.
            observed = replace(observed, job=written)
            p = replace(p, status=None, transitions=[])
            job = written

        failure = await self._children(request, job, p, failure)
        # A scheduling write that conflicted (a Workload) is planned again from a fresher
        # cache; the others are applied all the same.
        writer = Writer(self.client, self.recorder, job)
        scheduled = all([await d.apply(writer) for d in p.scheduling])

        if scheduled and self._status_waits_for_pods(p, failure):
            return Result()
        w = status_write(observed, p, failure)
        memory = self._remember(request)
        if w.held and memory.counts_unwritten_since is None:
            memory.counts_unwritten_since = observed.now
        if w.status is not None:
            if await self._write_status(request, job, w.status, w.transitions, p.events) is None:
                # The transitions these events announce are not stored: the next pass
                # plans them again, with their events (emitting them now would announce
                # a transition once per failed attempt, e.g. through an API outage).
                return Result(requeue=True)
            memory.counts_unwritten_since = None
        for e in p.events:
            self.recorder.event(job, e.type, e.reason, e.message)
        if p.delete_job:
            await self._delete_job(job)
        if not scheduled:
            return Result(requeue=True)
        if failure is not None and not is_invalid(failure):
            if refused_by_policy(failure):
                return Result(requeue=True)
            raise failure
        return Result(requeue_after=w.requeue_after)

    def _status_waits_for_pods(self, p: Plan, failure: ApiError | None) -> bool:
        """In a burst (other jobs wait in the queue), a pass that created pods and has
        nothing but ``Created`` and replica counts to write leaves them to the pass its
        pods' watch events cause: that pass writes them with the counts the pods show,
        one status write instead of two, and the API server's time goes to other jobs'
        pods meanwhile. No event is planned (``Created`` has none), so nothing waits but
        the write; the pods' watch events are certain to come (they were just created)."""
        return (
            failure is None
            and bool(p.create_pods)
            and not p.status_first
            and not p.events
            and not p.delete_job
            and set(p.transitions) <= {c.CREATED}
            and self.backlog() > 0
        )

    async def _children(
        self, request: Request, job: JSON, p: Plan, failure: ApiError | None
    ) -> ApiError | None:
        """Services, then pods (the first refused create stops the creates), then
        deletes, then the pods' agents; returns the refusal."""
        creates = bool(p.create_services or p.create_pods)
        if creates and failure is None and not await self._still_there(job, p):
            p = replace(p, create_services=[], create_pods=[])
        if failure is None:
            failure, _ = await self._create(request, job, SERVICES, p.create_services)
        if failure is None:
            failure, _ = await self._create(request, job, PODS, p.create_pods)
        await self._delete(request, PODS, p.delete_pods)
        await self._delete(request, PODS, p.force_delete_pods, grace=0)
        await self._delete(request, SERVICES, p.delete_services)
        for svc, patch in p.patch_services:
            await self._patch_service(job, svc, patch)
        if p.agent_requests and self.agents is not None:
            # Unanswered ones are asked again: a restart in place requeues in a second.
            await self.agents.send(job, p.agent_requests)
        return failure

    async def _patch_service(self, job: JSON, svc: JSON, patch: JSON) -> None:
        """Merge-patch a Service in place (gone meanwhile: nothing to do), and say so."""
        meta = svc["metadata"]
        try:
            await self.client.patch(SERVICES, meta["name"], patch, meta["namespace"])
        except ApiError as e:
            if is_not_found(e):
                return
            raise
        selector = ",".join(f"{k}={v}" for k, v in patch["spec"]["selector"].items() if v)
        self.recorder.event(
            job, "Normal", "UpdatedService",
            f"Updated Service {meta['namespace']}/{meta['name']}: selector {selector} "
            "(it did not select the pods msop creates; its ClusterIP is kept)",
        )  # fmt: skip

    def _nodes_of(self, pods: list[JSON]) -> dict[str, JSON]:
        """The cached nodes of ``pods``, by name (those the cache has)."""
        if self.nodes is None:
            return {}
        out: dict[str, JSON] = {}
        for pod in pods:
            name = (pod.get("spec") or {}).get("nodeName")
            if name and name not in out and (node := self.nodes(name)) is not None:
                out[name] = node
        return out

    async def _still_there(self, job: JSON, p: Plan) -> bool:
        """False if ``job``, which had children before, is gone or being deleted per the
        API server (see the module docstring); True without asking for a job's first
        children or after a status write this pass."""
        stored = job.get("status") or {}
        if p.status_first or not any(
            cond.get("type") == c.CREATED for cond in stored.get("conditions") or []
        ):
            return True
        meta = job["metadata"]
        try:
            live = await self.client.get(MSJOBS, meta["name"], meta["namespace"])
        except ApiError as e:
            if is_not_found(e):
                log.info("job gone; not recreating its children", job=meta["name"])
                return False
            raise
        live_meta = live.get("metadata") or {}
        if live_meta.get("uid") != meta.get("uid") or live_meta.get("deletionTimestamp"):
            log.info("job replaced or being deleted; not recreating its children")
            return False
        return True

    async def _write_status(
        self,
        request: Request,
        job: JSON,
        status: JSON,
        transitions: Sequence[str],
        events: Sequence[Event] = (),
    ) -> JSON | None:
        """Write the status if the stored one is still ``job``'s; return the updated job,
        or None when it moved or the job is gone (requeue). A write in doubt keeps
        ``events`` to announce it once it shows stored."""
        try:
            written = await self._patch_status(request, job, status, transitions)
        except TerminalError:
            # No status can be stored for this object as it is (it fails the CRD's current
            # schema), and it is not retried: its Events are the only word the user gets.
            for e in events:
                self.recorder.event(job, e.type, e.reason, e.message)
            raise
        except (ApiError, asyncio.CancelledError) as e:
            # No answer, a server error, or a pass cancelled while the write was out.
            base = job["metadata"].get("resourceVersion")
            self._doubts(request).status_failed(e, status, events, base)
            raise
        held = self._remember(request).doubts
        if written is not None and held is not None:
            # Written over the very version the doubtful write was tested against: that
            # one was not stored, and this write's Events announce the same transitions.
            held.status_written()
        return written

    async def _patch_status(
        self, request: Request, job: JSON, status: JSON, transitions: Sequence[str]
    ) -> JSON | None:
        meta = job["metadata"]
        ops = [
            {"op": "test", "path": "/status", "value": job.get("status")},
            {"op": "add", "path": "/status", "value": status},
        ]
        try:
            updated = await self.client.patch(
                MSJOBS, meta["name"], jsonpatch.dumps(ops), meta["namespace"],
                patch_type="json", subresource="status",
            )  # fmt: skip
        except ApiError as e:
            if is_patch_test_failed(e) or is_conflict(e) or is_not_found(e):
                log.info("status write conflicted; requeueing", reason=e.reason)
                return None
            if is_invalid(e):
                # The stored object fails the CRD's current schema (written under an
                # older one): no status can be written until its spec is edited, and
                # that edit enqueues it again. Retrying now would only loop.
                raise TerminalError(f"status write refused: {e.message}") from e
            raise
        memory = self._remember(request)
        memory.replaced = meta["resourceVersion"]
        rv = (updated.get("metadata") or {}).get("resourceVersion") if updated else None
        if rv:
            memory.written = rv
        metrics.count_transitions(transitions, meta["namespace"])
        return updated

    async def _create(
        self, request: Request, job: JSON, res: Resource, objs: list[JSON]
    ) -> tuple[ApiError | None, list[JSON]]:
        """Create ``objs`` in slow-start batches; return the first failure (creates stop
        there) and the objects the API server returned."""
        created: list[JSON] = []
        if not objs:
            return None, created
        names = [o["metadata"]["name"] for o in objs]
        exp_key = (request, res)
        self.expectations.expect_creations_of(exp_key, names)
        kind = res.kind
        doubts = self._doubts(request)
        found: set[str] = set()
        failure: ApiError | None = None
        done = 0
        warm = (request.namespace, kind)
        batch = self._first_batch(warm)
        while done < len(objs) and failure is None:
            chunk = objs[done : done + batch]
            sent = [o["metadata"]["name"] for o in chunk]
            # In doubt until answered: a pass cancelled meanwhile (a lost Lease stops the
            # process at once) leaves them so, and says so when it stops.
            before = doubts.sending(kind, sent)
            results = await asyncio.gather(
                *(self.client.create(res, o, request.namespace) for o in chunk),
                return_exceptions=True,
            )
            for obj, result in zip(chunk, results, strict=True):
                name = obj["metadata"]["name"]
                if isinstance(result, ApiError) and is_already_exists(result):
                    self.expectations.creation_observed(exp_key, name)
                    if doubts.refused(kind, name, result, before):
                        found.add(name)  # our create in doubt had stored it
                elif isinstance(result, ApiError):
                    self.expectations.creation_observed(exp_key, name)
                    doubts.refused(kind, name, result, before)
                    if failure is not None:
                        continue  # one event and one log line per pass: the first failure
                    failure = result
                    log.warning(
                        f"failed to create {kind.lower()}", object=name, status=result.status,
                        reason=result.reason, error=result.message,
                        outcome=_outcome(result),
                    )  # fmt: skip
                    self.recorder.event(
                        job, "Warning", f"FailedCreate{kind}",
                        f"Error creating {kind} {name}: {result.message}",
                    )  # fmt: skip
                elif isinstance(result, BaseException):
                    for o in objs[done:]:
                        self.expectations.creation_observed(exp_key, o["metadata"]["name"])
                    raise result
                else:
                    created.append(result)
            done += len(chunk)
            batch *= 2
        for o in objs[done:]:  # never attempted
            self.expectations.creation_observed(exp_key, o["metadata"]["name"])
        self._note_outcome(warm, failure)
        doubts.created(self.recorder, job, kind, [o["metadata"]["name"] for o in created], found)
        return failure, created

    def _first_batch(self, where: tuple[str, str]) -> int:
        """WARM_BATCH where the last pass of creates of that kind there succeeded, else 1."""
        return WARM_BATCH if self._warm.get(where) else 1

    def _note_outcome(self, where: tuple[str, str], failure: ApiError | None) -> None:
        if failure is None:
            self._warm[where] = True
        else:
            self._warm.pop(where, None)

    def unannounced(self) -> int:
        """Events held back for writes still in doubt: one per job and kind of child
        created without an answer, and those of each status write without one."""
        return sum(m.doubts.unannounced() for m in self._memory.values() if m.doubts is not None)

    def stopped(self) -> None:
        """Called by the controller once its workers have finished: say how many Events
        this process never wrote because their writes were still in doubt (the process
        that follows sees the objects stored and does not announce them again)."""
        held = self.unannounced()
        if held:
            log.warning(
                "events not written: writes still in doubt at stop",
                count=held,
                jobs=sum(
                    1 for m in self._memory.values() if m.doubts is not None and m.doubts.held()
                ),
            )

    async def _delete(
        self, request: Request, res: Resource, objs: list[JSON], grace: int | None = None
    ) -> None:
        if not objs:
            return
        exp_key = (request, res)
        names = [o["metadata"]["name"] for o in objs]
        if grace is None:
            self.expectations.expect_deletions_of(exp_key, names)

        async def one(obj: JSON) -> None:
            meta = obj["metadata"]
            try:
                await self.client.delete(
                    res, meta["name"], request.namespace, uid_precondition=meta["uid"],
                    grace_period_seconds=grace,
                )  # fmt: skip
            except ApiError as e:
                if grace is None:
                    self.expectations.deletion_observed(exp_key, meta["name"])
                if not (is_not_found(e) or is_conflict(e)):
                    raise

        await asyncio.gather(*(one(o) for o in objs))

    async def _delete_job(self, job: JSON) -> None:
        meta = job["metadata"]
        try:
            await self.client.delete(
                MSJOBS, meta["name"], meta["namespace"], uid_precondition=meta["uid"],
                propagation_policy="Background",
            )  # fmt: skip
        except ApiError as e:
            if not (is_not_found(e) or is_conflict(e)):
                raise
        log.info("deleted finished job after ttlSecondsAfterFinished")
