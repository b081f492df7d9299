"""The controller: a work queue of Requests, the watches that fill it, and N workers.

``Controller(name, reconciler)`` follows controller-runtime's controller:

* :meth:`Controller.watch` connects an informer (any :class:`EventSource`) through a
  :class:`~.handler.EventHandler` to the queue. Handlers are registered when
  :meth:`Controller.run` starts (a late registration replays the informer's cache as
  initial-list adds, at low priority) and removed when it stops, so a replica that is not
  the leader queues nothing.
* :meth:`Controller.run` starts ``max_concurrent_reconciles`` workers. A key is never
  reconciled by two workers at once (the queue guarantees it).
* Outcomes (see :mod:`.reconcile`): success -> ``forget``; ``requeue_after`` -> ``forget`` +
  ``add_after``; ``requeue`` -> ``add_rate_limited``; :class:`~.reconcile.TerminalError` ->
  counted, not requeued; any other exception -> logged with context and ``add_rate_limited``.
* **Panics.** An exception outside ``expected_errors`` (default: API errors, ``OSError``,
  ``TimeoutError``) is a bug in the reconciler - a *panic* in Go terms. It is logged with
  its traceback, counted in ``controller_runtime_reconcile_panics_total`` (and as an error),
  and requeued with rate limiting. It never kills a worker.
* **Logging context.** Each reconcile runs with ``controller``, ``namespace``, ``name`` and
  ``reconcile_id`` bound in ``structlog.contextvars``; the reconciler's own
  ``structlog.get_logger()`` lines carry them (the ``merge_contextvars`` processor, first in
  structlog's default chain, must stay in the configured chain).
* **Stopping.** Cancelling ``run()`` is a graceful stop: the queue is shut down, no new key
  is started, in-flight reconciles run to completion, then ``run()`` re-raises
  ``CancelledError``. Cancelling it *again* while it waits cancels the in-flight reconciles
  (the manager does this when its graceful-shutdown timeout expires). A controller runs once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import structlog

from msop.controller import metrics
from msop.controller.clock import Clock, MonotonicClock
from msop.controller.handler import EventHandler, RequestQueue
from msop.controller.ratelimiter import RateLimiter
from msop.controller.reconcile import Reconciler, Request, Result, StopAware, TerminalError
from msop.controller.workqueue import PRIORITY_NORMAL, ShutDown, WorkQueue
from msop.kube.errors import ApiError

__all__ = ["DEFAULT_EXPECTED_ERRORS", "Controller", "EventSource"]

DEFAULT_EXPECTED_ERRORS: tuple[type[BaseException], ...] = (ApiError, OSError, TimeoutError)
"""Exceptions a reconciler is expected to raise (errors); any other exception is a panic."""


class EventSource(Protocol):
    """What a controller needs from an informer (``msop.informers.SharedInformer`` fits)."""

    def add_event_handler(
        self,
        on_add: Callable[[dict[str, Any], bool], None] | None = None,
        on_update: Callable[[dict[str, Any], dict[str, Any]], None] | None = None,
        on_delete: Callable[[dict[str, Any]], None] | None = None,
    ) -> Any:
        """Register callbacks; replay existing objects to ``on_add`` as initial-list adds.
        ``on_delete`` gets the object's last known state."""
        ...

    def remove_event_handler(self, registration: Any) -> None:
        """Unregister what ``add_event_handler`` returned."""
        ...


class _Delayed:
    """A queue whose ``add`` is ``add_after(delay)``: the adds of one key within ``delay``
    seconds become one reconcile (see :meth:`Controller.watch`)."""

    def __init__(self, queue: WorkQueue[Request], delay: float) -> None:
        self.queue = queue
        self.delay = delay

    def add(self, item: Request, *, priority: int = PRIORITY_NORMAL) -> None:
        self.queue.add_after(item, self.delay, priority=priority)


class _Watch:
    """One (source, handler) pair, adapted to informer callbacks."""

    def __init__(
        self,
        controller: Controller,
        source: EventSource,
        handler: EventHandler,
        batch_window: float = 0.0,
    ) -> None:
        self.controller = controller
        self.source = source
        self.handler = handler
        self.registration: Any = None
        self.queue: RequestQueue = (
            _Delayed(controller.queue, batch_window) if batch_window > 0 else controller.queue
        )

    def _guard(self, kind: str, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception:
            self.controller.log.exception("event handler failed; event dropped", event=kind)

    def on_add(self, obj: dict[str, Any], initial: bool) -> None:
        def go() -> None:
            self.handler.create(obj, self.queue, initial=initial)

        self._guard("create", go)

    def on_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        def go() -> None:
            self.handler.update(old, new, self.queue)

        self._guard("update", go)

    def on_delete(self, obj: dict[str, Any]) -> None:
        def go() -> None:
            self.handler.delete(obj, self.queue)

        self._guard("delete", go)


class Controller:
    """Runs a :class:`~.reconcile.Reconciler` for the keys its watches enqueue.

    ``name`` labels every metric and log line (and names the queue); it should be unique per
    process. ``rate_limiter`` defaults to max(exponential 5 ms..1000 s, bucket 10 qps/100).
    ``expected_errors`` separates errors from panics (see the module docstring). ``queue``:
    the queue the watches fill, made by the caller so that what the controller drives can
    read its length (made here, with ``rate_limiter`` and ``clock``, when None).
    """

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        max_concurrent_reconciles: int = 1,
        rate_limiter: RateLimiter[Request] | None = None,
        log: Any = None,
        clock: Clock | None = None,
        expected_errors: tuple[type[BaseException], ...] = DEFAULT_EXPECTED_ERRORS,
        queue: WorkQueue[Request] | None = None,
    ) -> None:
        if max_concurrent_reconciles < 1:
            raise ValueError("max_concurrent_reconciles must be >= 1")
        if not name:
            raise ValueError("a controller needs a name")
        self.name = name
        self.reconciler = reconciler
        self.max_concurrent_reconciles = max_concurrent_reconciles
        self.expected_errors = expected_errors
        self._clock: Clock = clock or MonotonicClock()
        if queue is not None and rate_limiter is not None:
            raise ValueError("a given queue comes with its own rate limiter")
        if queue is None:  # not ``queue or``: an empty queue is falsy
            queue = WorkQueue(name, rate_limiter=rate_limiter, clock=self._clock)
        self.queue: WorkQueue[Request] = queue
        self.log: Any = (log or structlog.get_logger("msop.controller")).bind(controller=name)
        self._watches: list[_Watch] = []
        self._started = False
        self._stopping = False
        self._active = 0
        # Every series exists from the start, at zero, as in controller-runtime, so rates
        # and alerts work from the first scrape. The children are looked up once: the
        # workers update them on every reconcile.
        self._m_results = {
            result: metrics.RECONCILE_TOTAL.labels(name, result)
            for result in ("success", "error", "requeue", "requeue_after")
        }
        self._m_errors = metrics.RECONCILE_ERRORS.labels(name)
        self._m_terminal = metrics.TERMINAL_RECONCILE_ERRORS.labels(name)
        self._m_panics = metrics.RECONCILE_PANICS.labels(name)
        self._m_time = metrics.RECONCILE_TIME.labels(name)
        self._m_active = metrics.ACTIVE_WORKERS.labels(name)
        self._m_active.set(0)
        metrics.MAX_CONCURRENT_RECONCILES.labels(name).set(max_concurrent_reconciles)

    @property
    def active_workers(self) -> int:
        """How many workers are reconciling right now."""
        return self._active

    def watch(
        self, source: EventSource, handler: EventHandler, *, batch_window: float = 0.0
    ) -> None:
        """Map ``source``'s events through ``handler`` into the queue.

        ``batch_window`` > 0 delays each add by that many seconds, so that the events of
        one key within the window are reconciled once (an add without delay, e.g. from
        another watch, still goes at once). For watches of children, whose changes come
        in bursts (a job's pods bound, started or finished within a moment of each other).

        Takes effect when :meth:`run` starts; must be called before. Raises RuntimeError after.
        """
        if self._started:
            raise RuntimeError("watch() must be called before run()")
        self._watches.append(_Watch(self, source, handler, batch_window))

    async def run(self) -> None:
        """Register the watches, run the workers until cancelled, then stop gracefully.

        Never returns normally unless the queue is shut down by someone else. Raises
        RuntimeError when called twice.
        """
        if self._started:
            raise RuntimeError(f"controller {self.name} already ran")
        self._started = True
        metrics.MAX_CONCURRENT_RECONCILES.labels(self.name).set(self.max_concurrent_reconciles)
        self._m_active.set(0)
        for w in self._watches:
            w.registration = w.source.add_event_handler(w.on_add, w.on_update, w.on_delete)
        workers = [
            asyncio.create_task(self._worker(), name=f"{self.name}-worker-{i}")
            for i in range(self.max_concurrent_reconciles)
        ]
        self.log.info("starting workers", worker_count=len(workers))
        try:
            try:
                await asyncio.wait(workers)
            except asyncio.CancelledError:
                self.log.info("stopping: waiting for in-flight reconciles")
                self._stopping = True
                self.queue.shutdown()
                await asyncio.wait(workers)  # a second cancel interrupts this wait
                raise
            for task in workers:
                task.result()  # a worker only ends on shutdown; surface a bug if it crashed
        finally:
            self._stopping = True
            self.queue.shutdown()
            for t in workers:
                t.cancel()
            if workers:
                await asyncio.wait(workers)
            for w in self._watches:
                if w.registration is not None:
                    w.source.remove_event_handler(w.registration)
                    w.registration = None
            if isinstance(self.reconciler, StopAware):
                self.reconciler.stopped()
            self.log.info("all workers finished")

    async def _worker(self) -> None:
        while not self._stopping:
            try:
                request = await self.queue.get()
            except ShutDown:
                return
            try:
                if self._stopping:
                    return
                self._active += 1
                self._m_active.inc()
                try:
                    await self._reconcile_handler(request)
                finally:
                    self._active -= 1
                    self._m_active.dec()
            finally:
                self.queue.done(request)

    async def _reconcile_handler(self, request: Request) -> None:
        reconcile_id = str(uuid.uuid4())
        with structlog.contextvars.bound_contextvars(
            controller=self.name,
            namespace=request.namespace,
            name=request.name,
            reconcile_id=reconcile_id,
        ):
            started = self._clock.now()
            try:
                result = await self.reconciler.reconcile(request)
            except TerminalError as e:
                self._m_terminal.inc()
                self._count_error()
                self.queue.forget(request)
                self.log.error("reconciler error (terminal, not requeued)", error=str(e))
                return
            except Exception as e:
                panic = not isinstance(e, self.expected_errors)
                self._count_error()
                if panic:
                    self._m_panics.inc()
                    self.log.exception("reconciler panic", error=repr(e))
                else:
                    self.log.error("reconciler error", error=str(e), error_type=type(e).__name__)
                self.queue.add_rate_limited(request)
                return
            finally:
                self._m_time.observe(self._clock.now() - started)
            self._handle_result(request, result)

    def _count_error(self) -> None:
        self._m_errors.inc()
        self._m_results["error"].inc()

    def _handle_result(self, request: Request, result: Result) -> None:
        if result.requeue_after is not None and result.requeue_after > 0:
            self.queue.forget(request)
            self.queue.add_after(request, result.requeue_after)
            self._m_results["requeue_after"].inc()
        elif result.requeue:
            self.queue.add_rate_limited(request)
            self._m_results["requeue"].inc()
        else:
            self.queue.forget(request)
            self._m_results["success"].inc()
