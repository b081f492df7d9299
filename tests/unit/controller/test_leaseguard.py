"""The guard that holds the controllers while another controller's Lease is renewed:
when a Lease counts as held, the manager waiting on it (readiness, no leader runnable),
and no read once it is clear."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from msop.controller.leaseguard import LeaseGuard, lease_held
from msop.kube.errors import ApiError
from msop.kube.objects import JSON, format_micro_time
from tests.support.managers import Sleeper, manager

WALL = datetime(2026, 11, 27, 12, 0, 0, tzinfo=UTC)


def lease(holder: str | None, renewed: datetime = WALL, duration: int = 15) -> JSON:
    spec: JSON = {"leaseDurationSeconds": duration, "renewTime": format_micro_time(renewed)}
    if holder is not None:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": "4725f7c4.gitee.com"}, "spec": spec}


@pytest.mark.parametrize(
    ("obj", "unchanged_for", "held"),
    [
        (None, 0, False),  # no Lease: no leader election, or never ran
        (lease(None), 0, False),  # released
        (lease("ms-op_1"), 0, True),  # just seen
        (lease("ms-op_1"), 14.9, True),  # renewed within its duration
        (lease("ms-op_1"), 15, False),  # not renewed for its duration, on our clock
        (lease("ms-op_1", renewed=WALL - timedelta(seconds=30)), 0, True),  # skew allowed
        (lease("ms-op_1", renewed=WALL - timedelta(hours=2)), 0, False),  # left long ago
    ],
)
def test_when_a_lease_counts_as_held(obj: JSON | None, unchanged_for: float, held: bool) -> None:
    holder = lease_held(obj, unchanged_for, WALL, skew=60)
    assert (holder is not None) == held
    if held:
        assert holder == "ms-op_1"


class Api:
    """Serves the Lease as the test sets it; ``clock`` is the guard's."""

    def __init__(self, obj: JSON | ApiError | None) -> None:
        self.obj = obj
        self.gets = 0

    async def get(self, res: Any, name: str, namespace: str | None = None) -> JSON:
        self.gets += 1
        assert (res.kind, name, namespace) == ("Lease", "4725f7c4.gitee.com", "ms-operator-system")
        if isinstance(self.obj, ApiError):
            raise self.obj
        if self.obj is None:
            raise ApiError(404, "NotFound", "leases not found")
        return self.obj


def guard(api: Api, clock: list[float], period: float = 0.01) -> LeaseGuard:
    return LeaseGuard(
        api,
        "ms-operator-system", "4725f7c4.gitee.com", what="ms-operator",
        period=period, clock=lambda: clock[0], wall=lambda: WALL,
    )  # fmt: skip


async def test_a_renewed_lease_holds_the_leader_runnables_until_it_lapses() -> None:
    clock = [0.0]
    api = Api(lease("ms-op_1"))
    m = manager()
    g = guard(api, clock)
    m.add_guard(g)
    leader = Sleeper("leader")
    m.add(leader)
    task = asyncio.create_task(m.run())
    await m.wait_for_sync()
    for renewal in range(3):  # renewed: each renewal is a new record
        api.obj = lease("ms-op_1", renewed=WALL + timedelta(seconds=renewal))
        clock[0] += 10
        await asyncio.sleep(0.05)
        assert not leader.started.is_set() and not m.is_leader() and not g.clear()
    url = f"http://127.0.0.1:{m.health_port}/readyz"
    async with aiohttp.ClientSession() as http, http.get(f"{url}?verbose") as r:
        assert r.status != 200
        assert "[-]legacy-operator-lease failed" in await r.text()
    clock[0] += 16  # no renewal for its duration: lapsed
    await m.wait_until_leader()
    assert leader.started.is_set() and g.clear()
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        assert r.status == 200

    # Once clear, the Lease is not read again: no request while msop runs.
    gets = api.gets
    await asyncio.sleep(0.1)
    assert api.gets == gets
    m.stop()
    await task


@pytest.mark.parametrize(
    "obj",
    [None, lease(None), ApiError(403, "Forbidden", "leases is forbidden")],
    ids=["absent", "released", "forbidden"],
)
async def test_a_clear_lease_costs_one_read(obj: JSON | ApiError | None) -> None:
    api = Api(obj)
    m = manager()
    m.add_guard(guard(api, [0.0], period=60))  # the next read is a minute away
    leader = Sleeper("leader")
    m.add(leader)
    task = asyncio.create_task(m.run())
    await asyncio.wait_for(m.wait_until_leader(), 5)
    assert api.gets == 1
    m.stop()
    await task


async def test_an_api_error_keeps_waiting() -> None:
    api = Api(ApiError(500, "InternalError", "etcd timeout"))
    g = guard(api, [0.0])
    task = asyncio.create_task(g.run())
    await asyncio.sleep(0.05)
    assert not g.clear() and api.gets > 1 and not task.done()
    api.obj = None
    await asyncio.wait_for(task, 5)  # clear: the guard's work is done
    assert g.clear()
