"""The progress poller: fetches training progress from Worker 0 of each running MSJob.

Why pull. The operator asks; pods never call it. So:

- **A pod cannot report for another job.** The poller only asks the pod it chose from its
  own cache, Worker 0 of a job (by owner reference and labels), at that pod's IP, which
  the cluster network gives to no other pod. The answer must also name that pod (name
  and uid, which the reporter reads from the downward API), or it is rejected and
  counted: an IP reused by a new pod before the cache noticed cannot pass off its
  numbers as the old pod's. Pods on the host network share the node's IP, so they are
  never polled.
- **No new rights, no new component.** Pods need no token, no RBAC and no route to the
  operator; the operator needs no new permission (it already reads and writes the job's
  status). There is no server in the operator that a pod could flood.
- **The operator sets the pace.** Each target is asked at most once per ``interval``
  (default 30 s), with up to ``concurrency`` requests in flight and a ``timeout`` each;
  every target has at most one request in flight, so 1,000 jobs cost 1,000 small GETs per
  interval and a bounded number of tasks and sockets, never a backlog. A target that
  does not answer is asked again after 5, 10, 20, 40... s, up to
  :data:`UNANSWERED_MAX_INTERVALS` intervals apart (:func:`retry_after`; one that answers
  without a report yet, up to an interval apart): most Worker 0
  pods run no reporter at all (a script that does not use :mod:`msop.integrations`), and
  asking each of them every interval for its whole run would cost more than every
  reporting job together. Such targets hold at most half the slots, so silent pods never
  starve answering ones.
- **Progress never outruns its budget or delays the real work.** Reports are taken at
  most ``max_reports_per_second`` over all jobs (``msop run``: half of the status
  writes' budget when ``--kube-api-qps`` sets one, else no cap beyond the interval):
  with more jobs than that allows at the interval, the interval stretches. A job with a
  new report is enqueued at low priority, behind every pod event and spec change.
- **One status write per new report, at most one per interval.** A report is stored
  only when its ``seq`` is new; the job is then enqueued and the planner (not this
  module) puts it in ``status.progress``. The last report of a process reaches the
  status through the pod's termination message instead (see ``podstate.final_progress``),
  so the end of training is never missed between two polls.

Memory: one entry per Worker 0 pod that is Running with a progress port, and one stored
report (under 2 KiB) per such job; both go when the pod stops running.

**The last word of a deleted Worker 0.** When msop itself deletes a job's pods (a suspend,
a Kueue eviction, a restart by recreation, a scale), the training script may stop on
SIGTERM, save a checkpoint and write its final report into its termination message; but
the job is not planned again until the cache shows every delete (the reconciler's
expectations), by which time Worker 0 is gone from the cache. So the final report in
the last state a deleted Worker 0 had (its watch event's object) is kept here for
:data:`FINAL_KEPT_SECONDS` (at most :data:`FINAL_KEPT_MAX` jobs) and the job announced:
the planner takes it as it takes a live report, the newest wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

import aiohttp
import structlog
from cachetools import TTLCache

from msop.api import constants as c
from msop.api import report as progress_api
from msop.controller.controller import EventSource
from msop.controller.handler import EnqueueRequestForOwner
from msop.controller.reconcile import Request
from msop.informers.informer import UpdateHandler
from msop.kube.objects import JSON, format_time
from msop.msjob import desired
from msop.msjob.metrics import POLLS
from msop.msjob.podstate import final_progress, slot_of

log = structlog.get_logger("msop.msjob.poller")

#: Maps Worker 0 to the MSJob that controls it.
_OWNER = EnqueueRequestForOwner(c.API_VERSION, c.KIND)

#: Seconds from a target's appearance to its first poll (the script is still starting).
FIRST_POLL_DELAY = 5.0

#: A target that has not answered is asked again at most this many intervals apart: a
#: reporter that starts late is found within that time. At 5,000 jobs without reporters on
#: kwok (``python -m bench --scale 0.5 ... --include n10000``) asking them once per
#: interval took a fifth of the operator's CPU.
UNANSWERED_MAX_INTERVALS = 4.0


def retry_after(failures: int, longest: float) -> float:
    """Seconds until a target asked ``failures`` (>= 1) times in a row without a report is
    asked again: 5, 10, 20... doubling up to ``longest``."""
    return min(longest, FIRST_POLL_DELAY * 2.0 ** min(failures - 1, 32))


#: How long the final report of a deleted Worker 0 is kept for its job's next pass.
FINAL_KEPT_SECONDS = 600.0
#: The most jobs such a report is kept for at once (the oldest go first).
FINAL_KEPT_MAX = 4096


class Fetch(Protocol):
    """GET ``url``; return the HTTP status and at most ``limit`` bytes of body."""

    async def __call__(self, url: str, limit: int) -> tuple[int, bytes]: ...


@dataclass
class Target:
    """Worker 0 of one job, as the poller asks it."""

    job: Request
    """The MSJob."""
    pod: str
    """Worker 0's name (in the job's namespace)."""
    uid: str
    url: str
    due: float
    obj: JSON = field(default_factory=dict)
    """Worker 0 as the cache last showed it: what a new report is announced with."""
    failures: int = 0
    seq: int = 0
    in_flight: bool = False
    warned: bool = False


def target_url(pod: JSON) -> str | None:
    """Where Worker 0's reporter answers, if ``pod`` is a Worker 0 that should be polled
    now: Running, not terminating, with its own IP (not the host's) and a progress port."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if slot_of(pod) != (c.WORKER, 0) or meta.get("deletionTimestamp"):
        return None
    if status.get("phase") != "Running" or (pod.get("spec") or {}).get("hostNetwork"):
        return None
    ip, port = status.get("podIP"), desired.progress_port(pod)
    if not ip or port is None:
        return None
    host = f"[{ip}]" if ":" in str(ip) else ip
    return f"http://{host}:{port}/progress"


class ProgressPoller:
    """Polls Worker 0's reporter of every running job; see the module docstring.

    It is an event source a controller watches (``add_event_handler``): a new report of a
    job is announced as an update of its Worker 0 whose object did not change (the same
    resourceVersion), as a resync is, so an owner handler enqueues the job at low
    priority. ``get(job)`` is what the reconciler gives the planner. Run it with the
    manager (leader only: followers write no status).
    """

    def __init__(
        self,
        *,
        interval: float = 30.0,
        timeout: float = 2.0,
        concurrency: int = 32,
        fetch: Fetch | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        rand: Callable[[], float] = random.random,
        tick: float = 1.0,
        max_reports_per_second: float | None = None,
    ) -> None:
        self._handlers: list[UpdateHandler] = []
        self.interval = interval
        self.max_rate = max_reports_per_second
        self.timeout = timeout
        self.concurrency = concurrency
        self.clock = clock
        self.now = now
        self.rand = rand
        self.tick = min(tick, interval)
        self._fetch = fetch
        self._targets: dict[tuple[str, str], Target] = {}
        self._progress: dict[Request, JSON] = {}
        self._finals: TTLCache[Request, JSON] = TTLCache(
            FINAL_KEPT_MAX, FINAL_KEPT_SECONDS, timer=clock
        )
        self._tasks: set[asyncio.Task[None]] = set()

    # --- what the reconciler reads --------------------------------------------------------
    def get(self, job: Request) -> JSON | None:
        """The latest ``status.progress`` reported by the job's running Worker 0, else the
        final one a deleted Worker 0 left (kept a while; see the module docstring)."""
        live = self._progress.get(job)
        return live if live is not None else self._finals.get(job)

    def __len__(self) -> int:
        return len(self._targets)

    def reports(self) -> Iterator[tuple[Request, JSON]]:  # msop_job_progress_ratio
        """(job, progress) of every job with a stored report."""
        yield from list(self._progress.items())

    # --- an event source ----------------------------------------------------------------------
    def add_event_handler(
        self,
        on_add: Callable[[JSON, bool], None] | None = None,
        on_update: UpdateHandler | None = None,
        on_delete: Callable[[JSON], None] | None = None,
    ) -> UpdateHandler | None:
        """Announce each new report to ``on_update(worker0, worker0)``; nothing is ever
        added or deleted here (the pod informer says that). Returns the registration."""
        if on_update is not None:
            self._handlers.append(on_update)
        return on_update

    def remove_event_handler(self, registration: UpdateHandler | None) -> None:
        """Stop announcing to what :meth:`add_event_handler` returned."""
        if registration in self._handlers:
            self._handlers.remove(registration)

    # --- targets from the pod cache -------------------------------------------------------
    def follow(self, informer: EventSource) -> None:
        """Follow Worker 0 pods in ``informer``'s cache."""
        informer.add_event_handler(
            on_add=lambda obj, initial: self.observe(obj),
            on_update=lambda old, new: self.observe(new),
            on_delete=self.deleted,
        )

    def observe(self, pod: JSON) -> None:
        """Add, update or drop the target for ``pod`` after a cache event."""
        meta = pod.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        url, jobs = target_url(pod), _OWNER.requests(pod)
        if url is None or not jobs:
            self.forget(pod)
            return
        uid = str(meta.get("uid", ""))
        current = self._targets.get(key)
        if current is not None and current.uid == uid and current.url == url:
            current.obj = pod
            return
        if current is not None:
            self._drop(key)
        self._targets[key] = Target(next(iter(jobs)), key[1], uid, url, obj=pod,
                                    due=self.clock() + FIRST_POLL_DELAY)  # fmt: skip

    def deleted(self, pod: JSON) -> None:
        """``pod`` left the cache: drop its target, and keep the final report it left if it
        is a Worker 0 (its job is announced)."""
        self.forget(pod)
        if slot_of(pod) != (c.WORKER, 0):
            return
        final = final_progress(pod)
        jobs = _OWNER.requests(pod)
        if final is None or not jobs:
            return
        job = next(iter(jobs))
        self._finals[job] = final
        self._announce(job, pod)

    def _announce(self, job: Request, pod: JSON) -> None:
        for handler in list(self._handlers):
            try:
                handler(pod, pod)
            except Exception:  # one faulty handler must not stop the poller
                log.exception("progress event handler failed", job=str(job))

    def forget(self, pod: JSON) -> None:
        meta = pod.get("metadata") or {}
        self._drop((str(meta.get("namespace", "")), str(meta.get("name", ""))))

    def _drop(self, key: tuple[str, str]) -> None:
        target = self._targets.pop(key, None)
        if target is not None:
            self._progress.pop(target.job, None)

    # --- polling ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Poll due targets until cancelled."""
        own_session: aiohttp.ClientSession | None = None
        if self._fetch is None:
            # No proxy from the environment: pod IPs are reached directly, never through
            # an HTTP proxy that the operator's own environment may name.
            own_session = aiohttp.ClientSession(
                trust_env=False,
                connector=aiohttp.TCPConnector(limit=self.concurrency, force_close=True),
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
            self._fetch = _session_fetch(own_session)
        semaphore = self.slots()
        try:
            while True:
                self.poll_due(semaphore)
                await asyncio.sleep(self.tick)
        finally:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            if own_session is not None:
                await own_session.close()

    def slots(self) -> Slots:
        """The request slots: ``concurrency`` in all, at most half of them for targets
        that have not answered last time (each may hold its slot for the whole timeout),
        so that silent pods never starve the ones that answer."""
        return Slots(
            asyncio.Semaphore(self.concurrency), asyncio.Semaphore(max(1, self.concurrency // 2))
        )

    def poll_due(self, semaphore: Slots) -> int:
        """Start a poll of every due target that has none in flight; return how many."""
        now = self.clock()
        started = 0
        for target in list(self._targets.values()):
            if target.in_flight or target.due > now:
                continue
            target.in_flight = True
            task = asyncio.create_task(self._poll(target, semaphore))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started += 1
        return started

    async def _poll(self, target: Target, slots: Slots) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if target.failures:
                    await stack.enter_async_context(slots.failing)
                await stack.enter_async_context(slots.all)
                result = await self.poll(target)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug here must not stop the poller
            log.exception("progress poll failed", pod=target.pod)
            result = "unreachable"
        finally:
            target.in_flight = False
        POLLS.labels(result).inc()

    async def poll(self, target: Target) -> str:
        """Ask ``target`` once, store what it says; return the result label."""
        assert self._fetch is not None
        try:
            async with asyncio.timeout(self.timeout):  # not wait_for (see leaderelection)
                status, body = await self._fetch(target.url, progress_api.MAX_REPORT_BYTES + 1)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return self._schedule(target, "unreachable")
        if status == 204:
            return self._schedule(target, "empty")
        if status != 200:
            return self._invalid(target, f"HTTP {status}")
        try:
            report = progress_api.parse_report(body)
        except progress_api.InvalidReport as e:
            return self._invalid(target, str(e))
        if report.pod_uid != target.uid or report.pod_name != target.pod:
            if not target.warned:
                target.warned = True
                log.warning(
                    "progress report rejected: it names another pod", job=str(target.job),
                    pod=target.pod, claimed=f"{report.pod_name} ({report.pod_uid})",
                )  # fmt: skip
            return self._schedule(target, "rejected")
        if report.seq == target.seq:
            return self._schedule(target, "unchanged", ok=True)
        if self._targets.get((target.job.namespace, target.pod)) is not target:
            return "unchanged"  # the pod went away while we asked
        target.seq = report.seq
        taken = self.now() - timedelta(seconds=report.age)
        progress = progress_api.to_status(report, format_time(taken))
        if progress != self._progress.get(target.job):
            self._progress[target.job] = progress
            self._announce(target.job, target.obj)
        return self._schedule(target, "report", ok=True)

    def _invalid(self, target: Target, why: str) -> str:
        if not target.warned:
            target.warned = True
            log.warning("progress report invalid", job=str(target.job), pod=target.pod, error=why)
        return self._schedule(target, "invalid")

    def _schedule(self, target: Target, result: str, *, ok: bool = False) -> str:
        """Set when ``target`` is asked next: an interval after a report (with 10 %
        jitter, so that jobs started together do not stay in step); after anything else
        sooner at first, then backing off (:func:`retry_after`) up to an interval, or up to
        :data:`UNANSWERED_MAX_INTERVALS` for a target that did not answer at all. With more
        targets than ``max_reports_per_second`` allows at that interval, the interval
        stretches: reports (and so status writes) never outrun the budget they are given."""
        pace = self.interval
        if self.max_rate:
            pace = max(pace, len(self._targets) / self.max_rate)
        if ok:
            target.failures = 0
            wait = pace
        else:
            target.failures += 1
            unanswered = result == "unreachable"
            wait = retry_after(
                target.failures, pace * (UNANSWERED_MAX_INTERVALS if unanswered else 1)
            )
        target.due = self.clock() + wait * (0.9 + 0.2 * self.rand())
        return result


@dataclass(frozen=True)
class Slots:
    """Request slots: ``all`` bounds every poll in flight, ``failing`` those of targets
    that did not answer last time (taken first, then one of ``all``)."""

    all: asyncio.Semaphore
    failing: asyncio.Semaphore


def _session_fetch(session: aiohttp.ClientSession) -> Fetch:
    async def fetch(url: str, limit: int) -> tuple[int, bytes]:
        async with session.get(url, allow_redirects=False) as resp:
            return resp.status, await resp.content.read(limit)

    return fetch
