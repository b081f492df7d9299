"""Shards held on Leases by several replicas against one in-memory Lease store (real time,
short Leases): the fair share, a partitioned replica that lets its shards go before another
takes them, a graceful hand-over. Every test checks that no shard is ever worked on by two
replicas at once."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest

from msop.controller.leaderelection import LeaderElectionConfig, LeaderElector
from msop.controller.shardelection import ShardElection, ShardingConfig, ShardsLetGo
from msop.kube.errors import ApiError, ApiTimeout
from msop.kube.resources import Resource

SHARDS = 6
LEASE, RENEW, RETRY = 1.5, 1.0, 0.1


class Leases:
    """Leases of one namespace with resourceVersion checks, as the API server keeps them."""

    def __init__(self) -> None:
        self.items: dict[str, dict[str, Any]] = {}
        self.rv = 0

    def store(self, body: Mapping[str, Any]) -> dict[str, Any]:
        self.rv += 1
        obj = copy.deepcopy(dict(body))
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self.rv)}
        self.items[obj["metadata"]["name"]] = obj
        return copy.deepcopy(obj)


class Client:
    """One replica's view of :class:`Leases`; ``partitioned`` makes every call time out."""

    def __init__(self, leases: Leases) -> None:
        self.leases = leases
        self.partitioned = False

    async def _call(self) -> None:
        await asyncio.sleep(0.005)
        if self.partitioned:
            await asyncio.sleep(0.05)
            raise ApiTimeout("partitioned")

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        await self._call()
        if name not in self.leases.items:
            raise ApiError(404, "NotFound", "not found")
        return copy.deepcopy(self.leases.items[name])

    async def list(self, res: Resource, namespace: str | None = None) -> dict[str, Any]:
        await self._call()
        return {"items": copy.deepcopy(list(self.leases.items.values()))}

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        await self._call()
        if body["metadata"]["name"] in self.leases.items:
            raise ApiError(409, "AlreadyExists", "exists")
        return self.leases.store(body)

    async def replace(self, res: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        await self._call()
        current = self.leases.items.get(body["metadata"]["name"])
        if current is None:
            raise ApiError(404, "NotFound", "not found")
        if current["metadata"]["resourceVersion"] != body["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "conflict")
        return self.leases.store(body)


class Work:
    """Who works on which shard (between adopt and drop), across the replicas; fails the
    test if two ever overlap."""

    def __init__(self) -> None:
        self.active: dict[int, str] = {}
        self.log: list[tuple[float, str, str, int]] = []
        self.overlaps: list[str] = []


class Owner:
    def __init__(self, me: str, work: Work) -> None:
        self.me = me
        self.work = work
        self.held: set[int] = set()

    def drop(self, shard: int) -> None:
        if shard in self.held:
            self.held.discard(shard)
            self.work.active.pop(shard, None)
            self.work.log.append((time.monotonic(), self.me, "drop", shard))

    async def adopt(self, shard: int) -> None:
        other = self.work.active.get(shard)
        if other is not None and other != self.me:
            self.work.overlaps.append(f"shard {shard}: {self.me} adopts while {other} works")
        self.work.active[shard] = self.me
        self.held.add(shard)
        self.work.log.append((time.monotonic(), self.me, "adopt", shard))

    async def release(self, shard: int) -> None:
        self.drop(shard)


def replica(
    name: str, leases: Leases, work: Work, shards: int = SHARDS
) -> tuple[ShardElection, Client, Owner]:
    client = Client(leases)
    owner = Owner(name, work)
    election = LeaderElectionConfig(
        name="msop", namespace="ns", identity=name, lease_duration=LEASE,
        renew_deadline=RENEW, retry_period=RETRY,
    )  # fmt: skip
    return ShardElection(client, ShardingConfig(shards, election), owner), client, owner


async def until(cond: Any, within: float) -> None:
    async with asyncio.timeout(within):
        while not cond():  # noqa: ASYNC110 - polling a plain predicate is the point
            await asyncio.sleep(0.05)


@dataclass
class Running:
    """Replicas of one election running on one Lease store, for a test's body."""

    leases: Leases
    work: Work
    replicas: list[tuple[ShardElection, Client, Owner]]
    tasks: list[asyncio.Task[None]]

    @property
    def owners(self) -> list[Owner]:
        return [o for _, _, o in self.replicas]


@contextlib.asynccontextmanager
async def running(*names: str) -> AsyncIterator[Running]:
    """Start a replica per name; stop them all at the end (a stop lets their shards go)."""
    leases, work = Leases(), Work()
    replicas = [replica(n, leases, work) for n in names]
    tasks = [asyncio.create_task(e.run()) for e, _, _ in replicas]
    try:
        yield Running(leases, work, replicas, tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def split(owners: list[Owner]) -> list[int]:
    return sorted(len(o.held) for o in owners)


async def test_three_replicas_take_two_shards_each_and_never_overlap() -> None:
    async with running("a", "b", "c") as run:
        owners = run.owners
        # b and c start a little later: a takes everything first, then hands over.
        await until(lambda: split(owners) == [2, 2, 2], 20)
        assert sorted(s for o in owners for s in o.held) == list(range(SHARDS))
        assert {e.owned() == frozenset(o.held) for e, _, o in run.replicas} == {True}
    assert run.work.overlaps == []
    assert all(not o.held for o in owners)  # a stop lets every shard go


async def test_a_partitioned_replica_drops_its_shards_before_another_takes_them() -> None:
    async with running("a", "b", "c") as run:
        owners, work = run.owners, run.work
        await until(lambda: split(owners) == [2, 2, 2], 20)
        _, client_a, owner_a = run.replicas[0]
        lost = set(owner_a.held)
        cut = time.monotonic()
        client_a.partitioned = True
        # The others take a's shards: within the Lease duration, plus the time to see the
        # member Lease expire too, plus a few attempts.
        await until(lambda: split(owners) == [0, 3, 3], LEASE + RENEW + 20 * RETRY)
        taken = time.monotonic() - cut
        assert taken < 2 * LEASE + 20 * RETRY
        for shard in lost:
            drops = [t for t, who, what, s in work.log if (who, what, s) == ("a", "drop", shard)]
            adopts = [
                t for t, who, what, s in work.log if what == "adopt" and s == shard and t > cut
            ]
            # a let go at its renew deadline, before anyone else adopted the shard.
            assert drops and adopts and max(drops) < min(adopts)
            assert max(drops) - cut < RENEW + 3 * RETRY
    assert work.overlaps == []


async def test_a_stopped_replica_hands_its_shards_over_at_once() -> None:
    async with running("a", "b") as run:
        owners = run.owners
        await until(lambda: split(owners) == [3, 3], 20)
        run.tasks[0].cancel()
        await asyncio.gather(run.tasks[0], return_exceptions=True)
        released = [lease["spec"]["holderIdentity"] for lease in run.leases.items.values()]
        assert "a" not in released  # its shards' and its member Lease are released
        # Released Leases need no expiry: b takes them within a few attempts.
        await until(lambda: split(owners) == [0, 6], LEASE)
    assert run.work.overlaps == []


async def test_replicas_with_another_n_hold_nothing_until_the_first_ones_are_gone() -> None:
    """A rolling update of --shards 4 to 6: the new replica waits; it never works while
    a replica of the old split does (a shard index means other jobs under another N)."""
    leases, old_work, new_work = Leases(), Work(), Work()
    old = [replica(n, leases, old_work, shards=4) for n in ("a", "b")]
    tasks = [asyncio.create_task(e.run()) for e, _, _ in old]
    new, _, new_owner = replica("c", leases, new_work, shards=6)
    new_task: asyncio.Task[None] | None = None
    try:
        await until(lambda: split([o for _, _, o in old]) == [2, 2], 20)
        new_task = asyncio.create_task(new.run())
        await asyncio.sleep(20 * RETRY)
        assert new_owner.held == set() and new.owned() == frozenset()
        for t in tasks:  # the old replicas stop (and release their Leases)
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        gone = time.monotonic()
        await until(lambda: len(new_owner.held) == 6, LEASE + 20 * RETRY)
        first = min(t for t, who, what, _ in new_work.log if what == "adopt")
        last_old = max(t for t, _, _, _ in old_work.log)
        assert last_old <= gone < first
    finally:
        every = [*tasks, *([new_task] if new_task else [])]
        for t in every:
            t.cancel()
        await asyncio.gather(*every, return_exceptions=True)


async def test_a_live_single_leader_bars_every_sharded_replica() -> None:
    leases, work = Leases(), Work()
    now = "2099-01-01T00:00:00.000000Z"  # renewed "now" as far as any clock can tell
    leases.store({"metadata": {"name": "msop"}, "spec": {
        "holderIdentity": "single", "leaseDurationSeconds": 60, "renewTime": now,
        "acquireTime": now}})  # fmt: skip
    election, _, owner = replica("a", leases, work, shards=4)
    task = asyncio.create_task(election.run())
    try:
        await asyncio.sleep(20 * RETRY)
        assert owner.held == set()
        leases.items["msop"]["spec"]["holderIdentity"] = None  # it stopped: released
        await until(lambda: len(owner.held) == 4, LEASE + 20 * RETRY)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.parametrize("shards", [0, -1])
def test_shards_must_be_positive(shards: int) -> None:
    election = LeaderElectionConfig(name="msop", namespace="ns", identity="a")
    with pytest.raises(ValueError):
        ShardingConfig(shards, election)


def single_leader(leases: Leases) -> tuple[LeaderElector, ShardsLetGo, Client]:
    client = Client(leases)
    config = LeaderElectionConfig(
        name="msop", namespace="ns", identity="single", lease_duration=LEASE,
        renew_deadline=RENEW, retry_period=RETRY,
    )  # fmt: skip
    return LeaderElector(client, config), ShardsLetGo(client, config), client


async def test_the_single_leader_starts_once_the_sharded_replicas_let_go() -> None:
    """--shards 3 back to one replica, rolling: the single leader takes its Lease while the
    sharded replicas run; they hand every shard over; only then is its guard clear."""
    async with running("a", "b") as run:
        await until(lambda: split(run.owners) == [3, 3], 20)
        elector, guard, _ = single_leader(run.leases)
        electing = asyncio.create_task(elector.run())
        guarding = asyncio.create_task(guard.run())
        try:
            await until(guard.clear, LEASE + 40 * RETRY)
            cleared = time.monotonic()
            assert elector.is_leader() and guarding.done()
            assert all(not o.held for o in run.owners)
            assert max(t for t, _, what, _ in run.work.log if what == "drop") <= cleared
            # Still running, the sharded replicas take nothing back while it leads.
            await asyncio.sleep(10 * RETRY)
            assert all(not o.held for o in run.owners)
        finally:
            electing.cancel()
            await asyncio.gather(electing, guarding, return_exceptions=True)
    assert run.work.overlaps == []


async def test_the_single_leader_waits_out_the_leases_of_a_cut_off_replica() -> None:
    """A sharded replica that cannot reach the API server neither sees the single leader
    nor releases its shards: they count as held until unrenewed for the Lease duration."""
    async with running("a") as run:
        await until(lambda: len(run.owners[0].held) == SHARDS, 20)
        run.replicas[0][1].partitioned = True
        cut = time.monotonic()
        elector, guard, _ = single_leader(run.leases)
        electing = asyncio.create_task(elector.run())
        guarding = asyncio.create_task(guard.run())
        try:
            await until(guard.clear, 2 * LEASE + 20 * RETRY)
            assert time.monotonic() - cut >= LEASE
            assert not run.owners[0].held  # it gave them up at its renew deadline
        finally:
            electing.cancel()
            await asyncio.gather(electing, guarding, return_exceptions=True)


async def test_leases_left_behind_long_ago_do_not_hold_the_single_leader() -> None:
    leases = Leases()
    leases.store({"metadata": {"name": "msop-shard-0"}, "spec": {"holderIdentity": ""}})
    leases.store({"metadata": {"name": "msop-shard-1"}, "spec": {
        "holderIdentity": "gone", "leaseDurationSeconds": 15,
        "renewTime": "2020-01-01T00:00:00.000000Z"}})  # fmt: skip
    leases.store({"metadata": {"name": "msop-member-x-of-2"}, "spec": {
        "holderIdentity": "x", "leaseDurationSeconds": 60,
        "renewTime": "2099-01-01T00:00:00.000000Z"}})  # fmt: skip
    _, guard, _ = single_leader(leases)
    await asyncio.wait_for(guard.run(), 1.0)
    assert guard.clear()


async def test_a_guard_that_may_not_list_leases_lets_the_leader_start() -> None:
    leases = Leases()
    _, guard, client = single_leader(leases)

    async def forbidden(res: Resource, namespace: str | None = None) -> dict[str, Any]:
        raise ApiError(403, "Forbidden", "leases is forbidden")

    client.list = forbidden  # type: ignore[method-assign]
    await asyncio.wait_for(guard.run(), 1.0)
    assert guard.clear()
