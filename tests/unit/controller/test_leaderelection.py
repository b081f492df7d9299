"""The leader's term runs from when its last successful renewal was *sent*: a renewal
answered late (a slow or partitioned API server) must not stretch it into the next
leader's. A fake Lease client advances a fake monotonic clock as requests take time."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from msop.controller.leaderelection import LeaderElectionConfig, LeaderElectionLost, LeaderElector
from msop.kube.errors import ApiError, ApiTimeout
from msop.kube.resources import Resource
from tests.support.clocks import FakeClock


class LeaseServer:
    """get/create/replace of one Lease; ``plan`` scripts each renewal: ("ok", latency) or
    ("fail", latency), then every later call fails."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.lease: dict[str, Any] | None = None
        self.plan: list[tuple[str, float]] = []
        self.rv = 0
        self.calls: list[float] = []

    def _step(self) -> tuple[str, float]:
        return self.plan.pop(0) if self.plan else ("fail", 1.0)

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        if self.lease is None:
            raise ApiError(404, "NotFound", "not found")
        return copy.deepcopy(self.lease)

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.rv += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}
        return copy.deepcopy(self.lease)

    async def replace(self, res: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        self.calls.append(self.clock.now)
        verdict, latency = self._step()
        self.clock.now += latency
        if verdict != "ok":
            raise ApiTimeout("PUT lease: timed out")
        self.rv += 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.rv)}}
        return copy.deepcopy(self.lease)


@pytest.mark.parametrize("latency", [0.0, 3.0, 8.0])
async def test_term_ends_renew_deadline_after_the_last_good_renewal_was_sent(
    latency: float,
) -> None:
    clock = FakeClock(0.0)
    server = LeaseServer(clock)
    config = LeaderElectionConfig(
        name="msop", namespace="ns", identity="a", lease_duration=15.0, renew_deadline=10.0,
        retry_period=0.001,
    )  # fmt: skip
    elector = LeaderElector(server, config, clock=clock, now=lambda: 1_700_000_000.0)
    # One renewal that succeeds but is answered `latency` seconds after it was sent, then
    # a partition: every later renewal times out after 1 s.
    server.plan = [("ok", latency)]
    with pytest.raises(LeaderElectionLost):
        await elector.run()
    good_sent = server.calls[0]
    last_attempt = server.calls[-1]
    assert not elector.is_leader()
    # No renewal attempt (and so no term) reaches past sent + renew_deadline; another
    # replica may take the Lease from sent + lease_duration on.
    assert last_attempt < good_sent + config.renew_deadline
    assert clock.now <= good_sent + config.renew_deadline + 1.0
    assert clock.now < good_sent + config.lease_duration


async def test_a_lease_taken_over_from_a_holder_that_did_not_release_it_is_reported() -> None:
    # The earlier leader's last renewal is when nothing of this controller reached the
    # API server any more (it crashed, or was cut off from it): the new leader inherits
    # that outage (Contact.missed).
    clock = FakeClock(100.0)
    server = LeaseServer(clock)
    server.plan = [("ok", 0.0)] * 3
    old_renewal = "2026-11-28T12:00:00.000000Z"
    server.lease = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "msop", "namespace": "ns", "resourceVersion": "1"},
        "spec": {"holderIdentity": "old", "leaseDurationSeconds": 15,
                 "renewTime": old_renewal, "acquireTime": old_renewal},
    }  # fmt: skip
    config = LeaderElectionConfig(
        name="msop", namespace="ns", identity="new", lease_duration=15.0, renew_deadline=10.0,
        retry_period=1.0,
    )  # fmt: skip
    taken: list[datetime] = []
    elector = LeaderElector(
        server, config, clock=clock, now=lambda: 1_800_000_000.0, on_takeover=taken.append
    )
    assert not await elector._try_acquire_or_renew()  # still the old holder's: not expired
    clock.now += 16.0
    assert await elector._try_acquire_or_renew()  # expired: taken over
    assert taken == [datetime(2026, 11, 28, 12, 0, tzinfo=UTC)]
    assert await elector._try_acquire_or_renew()  # a renewal of our own: nothing new
    assert len(taken) == 1
    # A Lease its holder released (holderIdentity "") was handed over, not taken.
    assert server.lease is not None
    server.lease["spec"]["holderIdentity"] = ""
    other = LeaderElector(
        server, replace(config, identity="third"), clock=clock, now=lambda: 1_800_000_100.0,
        on_takeover=taken.append,
    )  # fmt: skip
    assert await other._try_acquire_or_renew()
    assert len(taken) == 1
