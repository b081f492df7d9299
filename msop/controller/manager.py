"""The manager: caches, controllers, leader election, probes and metrics in one process.

``Manager.run()`` is the whole life of an operator process:

1. serve ``/metrics`` (``metrics_bind_address``) and ``/healthz`` + ``/readyz``
   (``health_probe_bind_address``) - see :mod:`.health`. With ``secure_metrics``
   (:class:`SecureServing`) ``/metrics`` is served over HTTPS, alone on its port, and
   each request must carry a bearer token the API server authenticates and allows to
   ``get`` ``/metrics`` (:mod:`.delegatedauth`); the probes stay plain HTTP on their own
   port for the kubelet;
2. run the :class:`~msop.informers.InformerFactory` (:attr:`Manager.informers`) and wait
   until every cache has synced; from then on ``/readyz`` answers ok;
3. start the runnables added with ``needs_leader_election=False`` (e.g. event recorders),
   and wait until every guard (:meth:`Manager.add_guard`) is clear;
4. with leader election configured, campaign for the Lease and wait to lead; then run the
   guards added ``once_leading`` until each is clear, and start the runnables added with
   ``needs_leader_election=True`` (controllers). Without leader election they start at once
   (after those guards);
5. run until stopped.

Stopping:

* :meth:`Manager.stop` (wired to SIGTERM/SIGINT by ``run(handle_signals=True)``) or
  cancelling ``run()`` stops gracefully: every runnable is cancelled once (a
  :class:`~.controller.Controller` then stops taking keys and finishes in-flight
  reconciles, an event recorder flushes its backlog); whatever still runs when the
  runnables' share of ``graceful_shutdown_timeout`` is over is cancelled again. Leader
  runnables stop first, then the others, then the Lease is released, then caches and
  servers stop. The runnables get the grace period minus a reserve (:func:`shutdown_reserve`)
  in which the Lease release and the rest of the teardown fit, so the whole stop ends within
  ``graceful_shutdown_timeout`` whatever the backlog. ``run()`` then returns normally after
  ``stop()`` (exit code 0) or re-raises ``CancelledError`` when it was cancelled.
* **Lost lease:** leader runnables are cancelled without grace and ``run()`` raises
  :class:`~.leaderelection.LeaderElectionLost`; the CLI must exit with code 1.
* A runnable (or the informer factory) failing with an exception stops the manager the same
  way and the exception propagates out of ``run()``. A runnable returning normally is fine.

Every task the manager starts is owned and awaited by ``run()``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from msop import malloc
from msop.controller.delegatedauth import AuthOptions, DelegatedAuth
from msop.controller.events import EventRecorder
from msop.controller.health import (
    Checks,
    HttpServer,
    Routes,
    health_routes,
    metrics_routes,
    parse_bind_address,
)
from msop.controller.leaderelection import LeaderElectionConfig, LeaderElectionLost, LeaderElector
from msop.controller.servingcert import ServingCert
from msop.informers.factory import InformerFactory
from msop.kube.client import KubeClient

__all__ = [
    "Guard",
    "LeaderElectionLost",
    "Manager",
    "Runnable",
    "SecureServing",
    "shutdown_reserve",
]

log = structlog.get_logger("msop.controller.manager")


def shutdown_reserve(grace: float) -> float:
    """Seconds of the grace period kept back from the runnables for the teardown after
    them (releasing the Lease: one request; stopping caches and servers): a fifth of it,
    at most 3 s."""
    return min(3.0, grace / 5)


class Runnable(Protocol):
    """Anything the manager can run: ``run()`` until cancelled (cancellation = stop)."""

    async def run(self) -> None: ...


class Guard(Runnable, Protocol):
    """A runnable that holds the leader runnables until it is clear
    (:class:`~msop.controller.leaseguard.LeaseGuard`)."""

    name: str

    def clear(self) -> bool: ...

    async def wait_until_clear(self) -> None: ...


@dataclass(frozen=True)
class SecureServing:
    """``/metrics`` over HTTPS, for authenticated and authorized clients only."""

    cert_dir: str | None = None
    """A directory with ``tls.crt`` and ``tls.key`` (e.g. a mounted Secret), loaded again
    when they change; None: a self-signed certificate made in memory at start."""
    auth: AuthOptions = field(default_factory=AuthOptions)
    """How the TokenReview and SubjectAccessReview decisions are cached and bounded."""


@dataclass(frozen=True)
class _Entry:
    runnable: Runnable
    needs_leader_election: bool
    name: str


class Manager:
    """Owns the process's runnables; see the module docstring.

    ``metrics_bind_address`` / ``health_probe_bind_address``: ``host:port``, ``:port``, or
    ``"0"`` to disable (port 0 picks a free port, see :attr:`metrics_port`). Equal
    addresses share one server, but not with ``secure_metrics``: then they raise
    ValueError (port 0 then means one free port each).
    ``secure_metrics``: None serves ``/metrics`` over plain HTTP to anyone.
    ``leader_election``: None runs leader runnables without an election.
    ``graceful_shutdown_timeout``: seconds in-flight work gets on stop before a hard cancel.
    ``cache_sync_timeout``: seconds to wait for the caches before failing (None: forever).
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        metrics_bind_address: str = ":8080",
        health_probe_bind_address: str = ":8081",
        secure_metrics: SecureServing | None = None,
        leader_election: LeaderElectionConfig | None = None,
        graceful_shutdown_timeout: float = 30.0,
        cache_sync_timeout: float | None = None,
        informers: InformerFactory | None = None,
    ) -> None:
        self.client = client
        self.informers = informers or InformerFactory(client)
        """The shared informer factory; controllers get their informers here."""
        self.graceful_shutdown_timeout = graceful_shutdown_timeout
        self.cache_sync_timeout = cache_sync_timeout
        self._metrics_addr = parse_bind_address(metrics_bind_address)
        self._health_addr = parse_bind_address(health_probe_bind_address)
        self.secure_metrics = secure_metrics
        """How ``/metrics`` is secured; None: plain HTTP, no authentication."""
        addr = self._metrics_addr
        same = addr is not None and addr == self._health_addr
        if secure_metrics is not None and addr is not None and same and addr[1] != 0:
            raise ValueError(
                "secure metrics need a port of their own: the health probes stay plain "
                f"HTTP for the kubelet (both are {metrics_bind_address!r})"
            )
        self._shared_server = same and secure_metrics is None
        # A Lease taken over from a holder that never released it: from its last renewal
        # until now, nothing of this controller reached the API server (the holder crashed,
        # or was cut off from it), an outage this process inherits.
        self.elector = (
            LeaderElector(client, leader_election, on_takeover=client.contact.missed)
            if leader_election
            else None
        )
        """The leader elector, or None without leader election."""
        self.healthz = Checks({"ping": lambda: True})
        """``/healthz`` checks (``ping`` always passes while the event loop serves)."""
        self.readyz = Checks({"informers-synced": lambda: self._synced.is_set()})
        """``/readyz`` checks (``informers-synced`` passes once every cache has synced)."""
        self._entries: list[_Entry] = []
        self._guards: list[Guard] = []
        self._leading_guards: list[Guard] = []
        self._recorders: dict[str, EventRecorder] = {}
        self._stop = asyncio.Event()
        self._synced = asyncio.Event()
        self._leading = asyncio.Event()
        self._started = False
        self.metrics_port: int | None = None
        """The bound metrics port once serving (None when disabled)."""
        self.health_port: int | None = None
        """The bound probe port once serving (None when disabled)."""

    # -- wiring ------------------------------------------------------------------------

    def add(self, runnable: Runnable, *, needs_leader_election: bool = True) -> None:
        """Run ``runnable`` with the manager (only while leader, by default).

        Raises RuntimeError once ``run()`` has started.
        """
        if self._started:
            raise RuntimeError("add runnables before Manager.run()")
        name = getattr(runnable, "name", None) or type(runnable).__name__
        self._entries.append(_Entry(runnable, needs_leader_election, str(name)))

    def add_guard(self, guard: Guard, *, once_leading: bool = False) -> None:
        """Run ``guard`` with the manager (not only while leader) and start no leader
        runnable, nor campaign for the Lease, before it is clear; ``/readyz`` fails its
        check (``guard.name``) until then. A guard's ``run()`` failing stops the manager,
        as any runnable's does. Raises RuntimeError once ``run()`` has started.

        ``once_leading``: run ``guard`` only once this manager leads (at once without
        leader election), and start the leader runnables when it is clear; it does not
        hold ``/readyz`` (a process that waits there is ready: a rolling update may go on
        and stop what it waits for)."""
        if self._started:
            raise RuntimeError("add guards before Manager.run()")
        if once_leading:
            self._leading_guards.append(guard)
            return
        self.add(guard, needs_leader_election=False)
        self._guards.append(guard)
        self.readyz.add(guard.name, guard.clear)

    def event_recorder(
        self, component: str, *, busy: Callable[[], bool] | None = None
    ) -> EventRecorder:
        """The EventRecorder for ``component`` (one per component, made by the first call),
        drained by the manager. ``busy`` (:class:`EventRecorder`) is given to the first
        call only: ValueError for a recorder that exists."""
        recorder = self._recorders.get(component)
        if recorder is not None and busy is not None:
            raise ValueError(f"the event recorder of {component} exists already")
        if recorder is None:
            recorder = EventRecorder(self.client, component, busy=busy)
            self._recorders[component] = recorder
            self.add(recorder, needs_leader_election=False)
        return recorder

    # -- state -------------------------------------------------------------------------

    def is_leader(self) -> bool:
        """True while leader runnables run (always, once started, without an election)."""
        return self._leading.is_set()

    async def wait_for_sync(self) -> None:
        """Wait until the caches have synced and the endpoints are serving."""
        await self._synced.wait()

    async def wait_until_leader(self) -> None:
        """Wait until this manager leads and its leader runnables have started."""
        await self._leading.wait()

    def stop(self) -> None:
        """Ask ``run()`` to stop gracefully and return normally. Safe from a signal handler."""
        self._stop.set()

    # -- running -----------------------------------------------------------------------

    async def run(self, *, handle_signals: bool = False) -> None:
        """Run until stopped; see the module docstring. A manager runs once.

        Raises LeaderElectionLost when the lease is lost, TimeoutError when the caches do
        not sync within ``cache_sync_timeout``, OSError when a port is taken, and whatever
        a runnable failed with.
        """
        if self._started:
            raise RuntimeError("Manager.run() may be called once")
        self._started = True
        signals = (signal.SIGTERM, signal.SIGINT) if handle_signals else ()
        loop = asyncio.get_running_loop()
        for sig in signals:
            loop.add_signal_handler(sig, self.stop)
        servers: list[HttpServer] = []
        informers = asyncio.create_task(self.informers.run(), name="informers")
        elector: asyncio.Task[None] | None = None
        plain: list[asyncio.Task[None]] = []
        leader: list[asyncio.Task[None]] = []
        lost = False
        try:
            servers = await self._start_servers()
            sync = self.informers.wait_for_sync(self.cache_sync_timeout)
            if not await self._until(sync, [informers]):
                return
            self._synced.set()
            log.info("caches synced")
            # The list pages are freed: give their heap back (glibc keeps it otherwise).
            malloc.trim()
            plain = self._start(e for e in self._entries if not e.needs_leader_election)
            if not await self._guards_clear(self._guards, [informers, *plain]):
                return
            electing: list[asyncio.Task[None]] = []
            if self.elector is not None:
                elector = asyncio.create_task(self.elector.run(), name="leader-election")
                electing = [elector]
                if not await self._until(
                    self.elector.wait_until_leader(), [informers, elector, *plain]
                ):
                    return
            plain += self._start(_Entry(g, False, g.name) for g in self._leading_guards)
            if not await self._guards_clear(self._leading_guards, [informers, *electing, *plain]):
                return
            leader = self._start(e for e in self._entries if e.needs_leader_election)
            self._leading.set()
            await self._until(None, [informers, *electing, *plain, *leader])
        except LeaderElectionLost:
            lost = True
            log.error("leader election lost; stopping without grace")
            raise
        finally:
            self._leading.clear()
            grace = 0.0 if lost else self.graceful_shutdown_timeout
            await _stop_in_order(grace, leader, plain, elector, informers)
            for server in servers:
                await server.stop()
            for sig in signals:
                loop.remove_signal_handler(sig)
            log.info("manager stopped")

    async def _guards_clear(self, guards: list[Guard], watched: list[asyncio.Task[None]]) -> bool:
        """Wait until every one of ``guards`` is clear (True) or ``stop()`` (False)."""
        for guard in guards:
            if not await self._until(guard.wait_until_clear(), watched):
                return False
        return True

    def _start(self, entries: Iterable[_Entry]) -> list[asyncio.Task[None]]:
        tasks = []
        for entry in entries:
            log.info("starting runnable", runnable=entry.name)
            tasks.append(asyncio.create_task(_as_coroutine(entry.runnable), name=entry.name))
        return tasks

    def _metrics_server(self) -> HttpServer:
        """The ``/metrics`` server; raises OSError when the certificate cannot be loaded."""
        assert self._metrics_addr is not None
        routes: Routes = {}
        metrics_routes(routes)
        secure = self.secure_metrics
        if secure is None:
            if self._shared_server:
                health_routes(routes, self.healthz, self.readyz)
            return HttpServer(routes, *self._metrics_addr)
        tls = ServingCert.load(secure.cert_dir) if secure.cert_dir else ServingCert.self_signed()
        log.info(
            "serving metrics over HTTPS to authenticated and authorized clients",
            certificate=secure.cert_dir or "self-signed, generated",
        )
        auth = DelegatedAuth(self.client, secure.auth)
        return HttpServer(routes, *self._metrics_addr, tls=tls.context, guard=auth.check)

    async def _start_servers(self) -> list[HttpServer]:
        servers = []
        if self._metrics_addr is not None:
            servers.append(self._metrics_server())
        if self._health_addr is not None and not self._shared_server:
            probes: Routes = {}
            health_routes(probes, self.healthz, self.readyz)
            servers.append(HttpServer(probes, *self._health_addr))
        try:
            for server in servers:
                await server.start()
        except BaseException:
            for server in servers:
                await server.stop()
            raise
        if self._metrics_addr is not None:
            self.metrics_port = servers[0].port
        if self._health_addr is not None:
            self.health_port = servers[-1].port
        return servers

    async def _until(
        self, awaitable: Awaitable[None] | None, watched: list[asyncio.Task[None]]
    ) -> bool:
        """Wait for ``awaitable`` (True) or ``stop()`` (False); re-raise a watched failure."""
        stop = asyncio.ensure_future(self._stop.wait())
        target = asyncio.ensure_future(awaitable) if awaitable is not None else None
        helpers = [stop] if target is None else [stop, target]
        pending = set(watched)
        try:
            while True:
                done, _ = await asyncio.wait(
                    {*helpers, *pending}, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done & pending:
                    pending.discard(task)
                    if task.cancelled():
                        raise RuntimeError(f"task {task.get_name()} was cancelled")
                    exc = task.exception()
                    if exc is not None:
                        raise exc
                if target is not None and target.done():
                    target.result()
                    return True
                if stop.done():
                    return False
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)


async def _as_coroutine(runnable: Runnable) -> None:
    await runnable.run()


async def _stop_in_order(
    grace: float,
    leader: list[asyncio.Task[None]],
    plain: list[asyncio.Task[None]],
    elector: asyncio.Task[None] | None,
    informers: asyncio.Task[None],
) -> None:
    """Stop the runnables within ``grace`` less the reserve, then release the Lease, then
    stop the informers."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    runnables_deadline = deadline - shutdown_reserve(grace)
    await _stop_tasks(leader, runnables_deadline)
    await _stop_tasks(plain, runnables_deadline)
    if elector is not None:
        # The release is one request on a budget of its own; it gets the reserve
        # (at least 1 s, so that a lost lease still ends cleanly).
        await _stop_tasks([elector], max(deadline - 0.2, loop.time() + 1.0))
    await _stop_tasks([informers], max(deadline, loop.time() + 0.5))


async def _stop_tasks(tasks: list[asyncio.Task[None]], deadline: float) -> None:
    """Cancel ``tasks``; hard-cancel what still runs at loop time ``deadline``; await all.

    Exceptions other than cancellation are logged (the manager is stopping anyway).
    """
    if not tasks:
        return
    loop = asyncio.get_running_loop()
    for task in tasks:
        task.cancel()
    _, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - loop.time()))
    if pending:
        log.warning(
            "graceful shutdown timed out; cancelling", tasks=[t.get_name() for t in pending]
        )
        for task in pending:
            task.cancel()
        await asyncio.wait(pending)
    for task in tasks:
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if not isinstance(exc, LeaderElectionLost):
                log.error("runnable failed while stopping", task=task.get_name(), error=repr(exc))
