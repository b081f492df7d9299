"""Hold shards on Leases: one Lease per shard, about ``N / replicas`` shards per replica.

:class:`ShardElection` is a runnable (it needs no leader: it is the election). For every
shard ``i`` it campaigns for the Lease ``<name>-shard-<i>`` with a
:class:`~.leaderelection.LeaderElector`, so each shard has exactly the single leader's
guarantees:

* a shard is taken only when its Lease is free, released, or not renewed for
  ``lease_duration`` as seen on this process's own clock;
* a held shard whose renewals fail is given up ``renew_deadline`` after its last
  successful renewal was *sent*: at that moment :meth:`ShardOwner.drop` is called (no new
  reconcile of the shard starts, the in-flight ones are cancelled and their requests reset,
  :mod:`msop.kube.transport`), ``lease_duration - renew_deadline`` before another replica
  may take it. The process goes on with its other shards, and campaigns again;
* a shard handed over (fair share, or stop) is first released by the owner
  (:meth:`ShardOwner.release` returns once nothing of it runs), and only then is its Lease
  released, so two replicas never reconcile the same shard at once.

Fair share (:mod:`.shards`): every ``retry_period`` the replica lists the Leases of its
namespace and counts the live replicas: the holders of the shards' Leases and of the
member Leases (``<name>-member-<hash of identity>``, one per replica, renewed like a
shard's, released on stop), each counted while renewed (:func:`~.leaseguard.lease_held`).
The elector of a free shard asks :func:`~.shards.may_take` before taking it; a replica above
its share releases the surplus (:func:`~.shards.to_shed`).

``msop_shard_owned{shard}`` is 1 while this replica holds the shard (and its owner adopted
it), else 0; ``leader_election_master_status{name}`` reports each shard's Lease too.

A member Lease of a replica that was killed stays, unrenewed (it no longer counts as a live
replica); nothing deletes it. API errors while listing are logged; the last view stays.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from msop.controller import metrics
from msop.controller.leaderelection import (
    LeaderElectionConfig,
    LeaderElectionLost,
    LeaderElector,
    LeaseClient,
)
from msop.controller.leaseguard import lease_held
from msop.controller.shards import (
    fair_share,
    may_take,
    member_lease_name,
    member_shards,
    ruling_shards,
    shard_lease_name,
    to_shed,
)
from msop.kube.errors import ApiError, is_forbidden
from msop.kube.objects import JSON, parse_time
from msop.kube.resources import LEASES

__all__ = ["ShardElection", "ShardLeaseClient", "ShardOwner", "ShardingConfig", "ShardsLetGo"]

log = structlog.get_logger("msop.controller.shardelection")


class ShardOwner(Protocol):
    """What runs the work of the shards this replica holds."""

    def drop(self, shard: int) -> None:
        """At once: start nothing more of ``shard`` and cancel what of it runs. Called
        when its Lease is lost, and before every :meth:`release`; idempotent."""
        ...

    async def adopt(self, shard: int) -> None:
        """Start the work of ``shard`` (its Lease is held): e.g. fill its caches, then
        reconcile its objects. Cancelled if the shard goes before it returns."""
        ...

    async def release(self, shard: int) -> None:
        """Return once nothing of ``shard`` runs any more (after :meth:`drop`); free what
        :meth:`adopt` made."""
        ...


class ShardLeaseClient(LeaseClient, Protocol):
    """A :class:`~.leaderelection.LeaseClient` that also lists (the Leases of the
    namespace, to count the live replicas)."""

    async def list(self, res: Any, namespace: str | None = None) -> dict[str, Any]:
        """One page of objects (``items``)."""
        ...


@dataclass(frozen=True)
class ShardingConfig:
    """How many shards, and the Leases' place, names and timing."""

    shards: int
    """Number of shards (>= 1); every replica of an operator must use the same."""
    election: LeaderElectionConfig
    """Its ``name`` is the prefix of the Leases' names; its namespace, identity and timing
    apply to every shard's Lease and to the member Lease."""
    skew: float = 60.0
    """Seconds of wall-clock skew tolerated when reading another replica's ``renewTime``
    (:func:`~.leaseguard.lease_held`)."""
    server_split: bool = False
    """Whether the API server splits the jobs' list and watch by shard (its
    ``shardSelector``): a replica then caches only the jobs of the shards it holds."""

    def __post_init__(self) -> None:
        if self.shards < 1:
            raise ValueError("shards must be >= 1")


class _Seen:
    """A Lease as this replica last saw it, and since when (own clock)."""

    __slots__ = ("at", "key")

    def __init__(self, key: tuple[object, object], at: float) -> None:
        self.key = key
        self.at = at


class _Holders:
    """Who holds Leases listed again and again: each counts as held while its holder and
    ``renewTime`` changed within its duration on this process's clock
    (:func:`~.leaseguard.lease_held`)."""

    def __init__(self, skew: float) -> None:
        self.skew = skew
        self._seen: dict[str, _Seen] = {}

    def held(self, leases: Iterable[JSON], now: float, wall: datetime) -> dict[str, str]:
        """The Leases of this listing held now, by name, with their holders; a Lease not
        in ``leases`` is forgotten."""
        seen: dict[str, _Seen] = {}
        held: dict[str, str] = {}
        for lease in leases:
            name = str(lease["metadata"]["name"])
            spec = lease.get("spec") or {}
            key = (spec.get("holderIdentity"), spec.get("renewTime"))
            old = self._seen.get(name)
            seen[name] = old if old is not None and old.key == key else _Seen(key, now)
            holder = lease_held(lease, now - seen[name].at, wall, self.skew)
            if holder is not None:
                held[name] = holder
        self._seen = seen
        return held


class ShardElection:
    """See the module docstring. ``clock``: monotonic seconds; ``now``: wall-clock
    seconds (written into the Leases)."""

    name = "shard-election"

    def __init__(
        self,
        client: ShardLeaseClient,
        config: ShardingConfig,
        owner: ShardOwner,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.config = config
        self.owner = owner
        self._clock = clock
        self._now = now
        self._me = config.election.identity
        self._owned: set[int] = set()
        self._shed: dict[int, asyncio.Event] = {}
        self._seen = _Holders(config.skew)
        self._live: set[str] = {self._me}
        self._holders: dict[int, str] = {}
        self._unheld_since: dict[int, float] = {}
        self._barred: str | None = None
        """Why this replica holds no shard now: replicas with another ``--shards`` rule
        (:func:`~.shards.ruling_shards`); None while it may hold its share."""
        self._gauges = [metrics.SHARD_OWNED.labels(str(i)) for i in range(config.shards)]
        for gauge in self._gauges:
            gauge.set(0)

    # -- state -------------------------------------------------------------------------

    def owned(self) -> frozenset[int]:
        """The shards this replica holds now."""
        return frozenset(self._owned)

    def live_replicas(self) -> frozenset[str]:
        """The identities of the replicas seen alive at the last look (this one too)."""
        return frozenset(self._live)

    # -- running -----------------------------------------------------------------------

    async def run(self) -> None:
        """Campaign for every shard and keep the fair share until cancelled; on
        cancellation every held shard is released by the owner, then its Lease."""
        base = self.config.election
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._membership(), name="shard-member-lease")
            await self._look()
            for shard in range(self.config.shards):
                tg.create_task(self._campaign(shard), name=f"shard-{shard}")
            while True:
                await asyncio.sleep(base.retry_period)
                await self._look()
                self._rebalance()

    async def _membership(self) -> None:
        cfg = replace(
            self.config.election,
            name=member_lease_name(self.config.election.name, self._me, self.config.shards),
        )
        while True:
            elector = LeaderElector(self.client, cfg, clock=self._clock, now=self._now)
            try:
                await elector.run()
            except LeaderElectionLost:
                log.warning("member lease lost; taking it again", lease=cfg.name)

    def _may_take(self, shard: int) -> bool:
        since = self._unheld_since.get(shard)
        unheld_for = None if since is None else self._clock() - since
        grace = self.config.election.lease_duration
        if self._barred is not None:
            return False
        return may_take(len(self._owned), self.config.shards, len(self._live), unheld_for, grace)

    async def _campaign(self, shard: int) -> None:
        cfg = replace(self.config.election, name=shard_lease_name(self.config.election.name, shard))
        while True:
            elector = LeaderElector(
                self.client, cfg, clock=self._clock, now=self._now,
                admit=functools.partial(self._may_take, shard),
            )  # fmt: skip
            term = asyncio.create_task(elector.run(), name=f"shard-{shard}-lease")
            # The loss is acted on in the loop turn the elector gives up in, at the renew
            # deadline, whatever this task is awaiting.
            term.add_done_callback(lambda _: self.owner.drop(shard))
            try:
                await self._hold(shard, elector, term)
            finally:
                if not term.done():
                    term.cancel()  # releases the Lease if held (after the owner let go)
                await asyncio.gather(term, return_exceptions=True)

    async def _hold(self, shard: int, elector: LeaderElector, term: asyncio.Task[None]) -> None:
        """Wait to lead, adopt, then keep the shard until lost or shed; the owner lets go
        before this returns (also when cancelled)."""
        leading = asyncio.ensure_future(elector.wait_until_leader())
        try:
            await asyncio.wait({term, leading}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            leading.cancel()
        if term.done():
            return  # it never led: nothing to let go
        shed = self._shed[shard] = asyncio.Event()
        shedding = asyncio.ensure_future(shed.wait())
        adopt = asyncio.create_task(self.owner.adopt(shard), name=f"shard-{shard}-adopt")
        self._owned.add(shard)
        self._gauges[shard].set(1)
        log.info("shard acquired", shard=shard, owned=sorted(self._owned))
        try:
            await asyncio.wait({term, shedding}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            shedding.cancel()
            self._shed.pop(shard, None)
            self._owned.discard(shard)
            self._gauges[shard].set(0)
            self.owner.drop(shard)
            adopt.cancel()
            await asyncio.gather(adopt, shedding, return_exceptions=True)
            if not adopt.cancelled() and adopt.exception() is not None:
                log.error("adopting a shard failed", shard=shard, error=repr(adopt.exception()))
            await self.owner.release(shard)
            why = "lost" if term.done() else "handed over"
            log.info(f"shard {why}", shard=shard, owned=sorted(self._owned))

    # -- the view of the other replicas ----------------------------------------------------

    async def _look(self) -> None:
        cfg = self.config.election
        try:
            listed = await self.client.list(LEASES, cfg.namespace)
        except (ApiError, OSError, TimeoutError) as e:
            log.warning("cannot list the shards' Leases; keeping the last view", error=str(e))
            return
        now, wall = self._clock(), datetime.fromtimestamp(self._now(), UTC)
        shard_prefix, member_prefix = f"{cfg.name}-shard-", f"{cfg.name}-member-"
        ours = {
            str(lease["metadata"]["name"]): lease
            for lease in listed.get("items") or []
            if lease["metadata"]["name"] == cfg.name
            or str(lease["metadata"]["name"]).startswith((shard_prefix, member_prefix))
        }
        live, holders = {self._me}, {}
        members: list[tuple[datetime, str, int]] = []
        single: str | None = None
        for name, holder in self._seen.held(ours.values(), now, wall).items():
            if name == cfg.name:
                single = holder
                continue
            if name.startswith(member_prefix) and (n := member_shards(name)) is not None:
                acquired = parse_time((ours[name].get("spec") or {}).get("acquireTime"))
                members.append((acquired or wall, holder, n))
            live.add(holder)
            index = name.removeprefix(shard_prefix)
            if (
                name.startswith(shard_prefix)
                and index.isdigit()
                and int(index) < self.config.shards
            ):
                holders[int(index)] = holder
        self._live, self._holders = live, holders
        for shard in range(self.config.shards):
            if shard in holders or shard in self._owned:
                self._unheld_since.pop(shard, None)
            else:
                self._unheld_since.setdefault(shard, now)
        self._bar(single, members)

    def _bar(self, single: str | None, members: list[tuple[datetime, str, int]]) -> None:
        """Hold no shard while a single leader or replicas with another N rule (see
        :func:`~.shards.ruling_shards`)."""
        ruling = ruling_shards(members)
        if single is not None:
            barred: str | None = f"the single leader {single} (--shards 1) runs"
        elif ruling is not None and ruling != self.config.shards:
            barred = f"replicas with --shards {ruling} run, and ran first"
        else:
            barred = None
        if barred != self._barred:
            if barred is None:
                log.info("holding shards again: no replica with another --shards runs")
            else:
                log.warning(
                    "holding no shard until they stop", why=barred, shards=self.config.shards
                )
            self._barred = barred

    def _rebalance(self) -> None:
        if self._barred is not None:
            for stop in self._shed.values():
                stop.set()
            return
        counts: dict[str, int] = {}
        for holder in self._holders.values():
            counts[holder] = counts.get(holder, 0) + 1
        shed = to_shed(self._owned, self.config.shards, self._me, counts, self._live)
        if shed:
            log.info(
                "handing shards over", shards=shed, live_replicas=len(self._live),
                fair_share=fair_share(self.config.shards, len(self._live)),
            )  # fmt: skip
        for shard in shed:
            event = self._shed.get(shard)
            if event is not None:
                event.set()


class ShardsLetGo:
    """The single leader's guard (``--shards 1`` with leader election): its controllers
    start only once no shard's Lease (``<name>-shard-<i>``, any ``i``) is held.

    Going from ``--shards N`` back to one replica, the single leader takes its Lease
    ``<name>`` while the sharded replicas still run; they see it held and hand their
    shards over (each owner lets go, then its Lease is released: :class:`ShardElection`),
    or, dead or cut off, stop renewing. So the guard runs once this process leads
    (:meth:`~msop.controller.manager.Manager.add_guard` with ``once_leading``) and lists
    the Leases each retry period (``config.retry_period``) until none is held, as
    :func:`~.leaseguard.lease_held` counts (renewed within its duration on this process's
    own clock). It does not hold ``/readyz``: a rolling update must go on and stop the
    old replicas.

    Shard Leases left behind long ago (released, or renewed too long ago for any clock
    skew) count as clear at once. A 403 on the list (no ``list`` on Leases) is warned
    about once and counts as clear; other API errors are logged and retried."""

    name = "sharded-replicas"

    def __init__(
        self,
        client: ShardLeaseClient,
        config: LeaderElectionConfig,
        *,
        skew: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.config = config
        self._clock = clock
        self._now = now
        self._seen = _Holders(skew)
        self._clear = asyncio.Event()

    def clear(self) -> bool:
        """True once no shard's Lease was seen held."""
        return self._clear.is_set()

    async def wait_until_clear(self) -> None:
        await self._clear.wait()

    async def held(self) -> dict[str, str]:
        """List the Leases once: each shard Lease held now, by its holder."""
        listed = await self.client.list(LEASES, self.config.namespace)
        prefix = f"{self.config.name}-shard-"
        shards = [
            lease for lease in listed.get("items") or []
            if str(lease["metadata"]["name"]).startswith(prefix)
        ]  # fmt: skip
        return self._seen.held(shards, self._clock(), datetime.fromtimestamp(self._now(), UTC))

    async def run(self) -> None:
        """List until no shard is held, then return."""
        waited: dict[str, str] | None = None
        while True:
            try:
                held = await self.held()
            except (ApiError, OSError, TimeoutError) as e:
                if isinstance(e, ApiError) and is_forbidden(e):
                    log.warning(
                        "not allowed to list Leases: sharded replicas cannot be seen; "
                        "starting", error=e.message,
                    )  # fmt: skip
                    break
                log.warning("cannot list the shards' Leases; retrying", error=str(e))
                await asyncio.sleep(self.config.retry_period)
                continue
            if not held:
                break
            if waited is None or set(held.values()) != set(waited.values()):
                log.warning(
                    "sharded replicas (--shards above 1) hold shards: starting once they "
                    "have let go", shards=sorted(held), replicas=sorted(set(held.values())),
                )  # fmt: skip
            waited = held
            await asyncio.sleep(self.config.retry_period)
        if waited:
            log.info("the sharded replicas let go of every shard; starting")
        self._clear.set()
