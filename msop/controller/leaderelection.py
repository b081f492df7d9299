"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

One :class:`LeaderElector` per process and lease. :meth:`LeaderElector.run`:

1. **Acquire.** Every ``retry_period`` (with up to 20% jitter) it tries to take the lease.
   A lease is free when it does not exist, when its ``holderIdentity`` is empty (released),
   or when its record has not changed for ``lease_duration`` seconds *as observed on this
   process's own monotonic clock* (remote timestamps are never compared with local time,
   so clock skew between replicas does not matter).
2. **Write with optimistic concurrency.** The update is a PUT carrying the
   ``resourceVersion`` that was read; a 409 Conflict means another replica won the race and
   the attempt simply fails. Creation races fail on AlreadyExists the same way.
3. **Renew.** While leading it renews every ``retry_period``. If no renewal succeeds for
   ``renew_deadline`` seconds, leadership is lost: ``run()`` raises
   :class:`LeaderElectionLost`. The process must then exit non-zero (its controllers may be
   running on stale assumptions while another replica already leads).

   The deadline runs from when the last successful renewal was **sent**, not from when
   its answer came back: the API server stored it after it was sent, and another replica
   saw it no earlier than that, so that replica cannot take the Lease before
   ``sent + lease_duration``, while this one stops at ``sent + renew_deadline``. That
   leaves ``lease_duration - renew_deadline`` (5 s by default) between the old leader's
   last write and the new leader's first, whatever the latency of the answer. (Counting
   from the answer, a renewal answered late - a slow or partitioned API server - would
   stretch the old leader's term by that latency into the new leader's.) Requests the old
   leader still has queued when it stops are reset, not delivered later
   (:mod:`msop.kube.transport`).
4. **Release.** When ``run()`` is cancelled while leading and ``release_on_cancel`` is set
   (default), it writes the lease with an empty ``holderIdentity`` and
   ``leaseDurationSeconds=1`` so that another replica takes over at once (client-go's
   ``ReleaseOnCancel``). Release errors are logged and swallowed.

``leader_election_master_status{name}`` is 1 while leading, else 0.
API errors during acquire/renew are logged and count as a failed attempt; they never escape.
Requires ``renew_deadline < lease_duration`` and ``retry_period < renew_deadline``.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from msop.controller import metrics
from msop.kube.errors import ApiError, is_already_exists, is_conflict, is_not_found
from msop.kube.objects import format_micro_time, parse_time
from msop.kube.resources import LEASES, Resource
from msop.kube.writer import LiveReader

__all__ = [
    "LeaderElectionConfig",
    "LeaderElectionLost",
    "LeaderElector",
    "LeaseClient",
    "default_identity",
]

log = structlog.get_logger("msop.controller.leaderelection")


def default_identity() -> str:
    """``<hostname>_<uuid4>``: unique per process even for pods sharing a hostname."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


class LeaderElectionLost(Exception):
    """This process held the lease and could not renew it in time; it must exit non-zero."""


@dataclass(frozen=True)
class LeaderElectionConfig:
    """Where the lease lives and the client-go timing parameters."""

    name: str
    """Lease name (also the ``name`` label of ``leader_election_master_status``)."""
    namespace: str
    """Namespace of the lease, usually the operator's own."""
    identity: str = field(default_factory=default_identity)
    """This candidate's ``holderIdentity``; must be unique among replicas."""
    lease_duration: float = 15.0
    """Seconds a non-leader waits after the last observed change before taking over."""
    renew_deadline: float = 10.0
    """Seconds the leader keeps retrying to renew before giving up leadership."""
    retry_period: float = 2.0
    """Seconds between acquire/renew attempts."""
    release_on_cancel: bool = True
    """Release the lease when cancelled, so another replica takes over at once."""

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError("need 0 < retry_period < renew_deadline < lease_duration")


def _micro_time(moment: float) -> str:
    return format_micro_time(datetime.fromtimestamp(moment, UTC))


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    """The fields whose change counts as "the holder is alive"."""
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity") or "",
        spec.get("leaseDurationSeconds"),
        spec.get("acquireTime"),
        spec.get("renewTime"),
        spec.get("leaseTransitions"),
    )


class LeaseClient(LiveReader, Protocol):
    """What the elector needs of :class:`~msop.kube.client.KubeClient`: get, create and
    replace a Lease."""

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """POST a new object; raises ``ApiError`` (``is_already_exists`` when taken)."""
        ...

    async def replace(self, res: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the object (its ``resourceVersion`` guards it: ``is_conflict`` if stale)."""
        ...


class LeaderElector:
    """Campaigns for one Lease; see the module docstring for the contract."""

    def __init__(
        self,
        client: LeaseClient,
        config: LeaderElectionConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
        on_takeover: Callable[[datetime], None] | None = None,
        admit: Callable[[], bool] | None = None,
    ) -> None:
        """``clock``: monotonic seconds (renew deadline, expiry of an observed Lease);
        ``now``: wall-clock seconds, for the times written into the Lease;
        ``on_takeover``: called once this process takes the Lease over from a holder that
        did not release it, with that holder's last ``renewTime`` (until then nobody led:
        a crashed leader, or one cut off from the API server). ``admit``: asked just before
        taking a Lease that is free (absent, released or expired); a False leaves it to the
        other candidates (sharding's fair share). None: always take it. Never asked while
        renewing."""
        self.client = client
        self.config = config
        self._on_takeover = on_takeover
        self._admit = admit
        self._clock = clock
        self._now = now
        self._leader = asyncio.Event()
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._held_since = 0.0
        """When (``clock``) the last successful acquire or renew was sent."""
        self._gauge = metrics.LEADER_ELECTION_MASTER_STATUS.labels(config.name)
        self._gauge.set(0)
        self._log = log.bind(lease=f"{config.namespace}/{config.name}", identity=config.identity)

    @property
    def identity(self) -> str:
        """This candidate's identity."""
        return self.config.identity

    def is_leader(self) -> bool:
        """True while this process holds the lease."""
        return self._leader.is_set()

    async def wait_until_leader(self) -> None:
        """Return once this process holds the lease (at once if it already does)."""
        await self._leader.wait()

    async def run(self) -> None:
        """Acquire, then renew until cancelled (release) or lost (raise LeaderElectionLost)."""
        try:
            await self._acquire()
            await self._renew_loop()
        except asyncio.CancelledError:
            if self.is_leader() and self.config.release_on_cancel:
                await self._release()
            raise
        finally:
            self._set_leader(False)

    def _set_leader(self, leading: bool) -> None:
        if leading:
            self._leader.set()
        else:
            self._leader.clear()
        self._gauge.set(1 if leading else 0)

    def _sleep_jittered(self) -> float:
        return self.config.retry_period * (1 + random.uniform(0, 0.2))

    async def _acquire(self) -> None:
        self._log.info("attempting to acquire leader lease")
        while True:
            sent = self._clock()
            if await self._try_acquire_or_renew():
                self._held_since = sent
                break
            await asyncio.sleep(self._sleep_jittered())
        self._set_leader(True)
        self._log.info("successfully acquired lease")

    async def _renew_loop(self) -> None:
        cfg = self.config
        while True:
            await asyncio.sleep(cfg.retry_period)
            while True:
                sent = self._clock()
                remaining = self._held_since + cfg.renew_deadline - sent
                if remaining <= 0:
                    self._log.error("failed to renew lease within the renew deadline")
                    raise LeaderElectionLost(
                        f"lease {cfg.namespace}/{cfg.name} lost by {cfg.identity}"
                    )
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancellation
                    # that comes as the renewal completes, and the elector would go on.
                    async with asyncio.timeout(remaining):
                        ok = await self._try_acquire_or_renew()
                except TimeoutError:
                    ok = False
                if ok:
                    self._held_since = sent
                    break
                if self._observed and self._observed[0] not in ("", cfg.identity):
                    self._log.error("lease taken over by another holder", holder=self._observed[0])
                    raise LeaderElectionLost(
                        f"lease {cfg.namespace}/{cfg.name} taken by {self._observed[0]}"
                    )
                await asyncio.sleep(min(cfg.retry_period, max(0.0, remaining)))

    def _spec(self, old: dict[str, Any] | None, now: float) -> dict[str, Any]:
        cfg = self.config
        spec = dict((old or {}).get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder != cfg.identity:
            spec["acquireTime"] = _micro_time(now)
            if old is not None:
                transitions += 1
        spec.update(
            holderIdentity=cfg.identity,
            leaseDurationSeconds=max(1, round(cfg.lease_duration)),
            renewTime=_micro_time(now),
            leaseTransitions=transitions,
        )
        return spec

    async def _try_acquire_or_renew(self) -> bool:
        cfg = self.config
        try:
            try:
                lease = await self.client.get(LEASES, cfg.name, cfg.namespace)
            except ApiError as e:
                if not is_not_found(e):
                    raise
                if self._admit is not None and not self._admit():
                    return False
                body = {
                    "apiVersion": LEASES.api_version,
                    "kind": "Lease",
                    "metadata": {"name": cfg.name, "namespace": cfg.namespace},
                    "spec": self._spec(None, self._now()),
                }
                created = await self.client.create(LEASES, body, cfg.namespace)
                self._observe(created)
                return True
            record = _record(lease)
            if record != self._observed:
                self._observe(lease)
            holder = record[0]
            expired = self._observed_at + cfg.lease_duration <= self._clock()
            if holder and holder != cfg.identity and not expired:
                return False
            if holder != cfg.identity and self._admit is not None and not self._admit():
                return False
            updated = dict(lease)
            updated["spec"] = self._spec(lease, self._now())
            result = await self.client.replace(LEASES, updated)
            self._observe(result)
            last_renewed = parse_time((lease.get("spec") or {}).get("renewTime"))
            taken_over = holder and holder != cfg.identity and last_renewed is not None
            if taken_over and last_renewed is not None and self._on_takeover is not None:
                self._on_takeover(last_renewed)
            return True
        except ApiError as e:
            if is_conflict(e) or is_already_exists(e):
                self._log.debug("lease changed concurrently", reason=e.reason)
            else:
                self._log.warning("lease request failed", error=str(e))
            return False

    def _observe(self, lease: dict[str, Any]) -> None:
        self._observed = _record(lease)
        self._observed_at = self._clock()

    async def _release(self) -> None:
        cfg = self.config
        try:
            lease = await self.client.get(LEASES, cfg.name, cfg.namespace)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != cfg.identity:
                return
            now = _micro_time(self._now())
            lease["spec"] = {
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": spec.get("leaseTransitions", 0),
            }
            await self.client.replace(LEASES, lease)
            self._log.info("released leader lease")
        except Exception as e:
            self._log.warning("could not release lease", error=str(e))
