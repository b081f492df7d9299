"""A Lease as the tests judge leader election by: every record it goes through, from a
watch, and the times in a record (MicroTime)."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime
from typing import Any

from msop.kube.client import KubeClient
from msop.kube.objects import parse_time
from msop.kube.resources import LEASES


def lease_time(spec: dict[str, Any], field: str) -> datetime:
    """A Lease record's ``acquireTime``/``renewTime`` (MicroTime)."""
    value = parse_time(spec.get(field))
    assert value is not None, f"Lease has no {field}: {spec}"
    return value


class LeaseRecords:
    """Every record (``spec``) Lease ``name`` goes through, in order, from a watch: a GET
    can miss one (a released record lasts only until a follower's next try) or read one
    before a write still in flight from a replica just stopped lands."""

    def __init__(self) -> None:
        self.specs: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None

    @classmethod
    async def follow(cls, kube: KubeClient, namespace: str, name: str) -> LeaseRecords:
        records = cls()
        selector = f"metadata.name={name}"
        listed = await kube.list(LEASES, namespace, field_selector=selector)
        records.specs += [o["spec"] for o in listed["items"]]
        rv = listed["metadata"]["resourceVersion"]
        records._task = asyncio.create_task(records._watch(kube, namespace, selector, rv))
        return records

    async def _watch(self, kube: KubeClient, namespace: str, selector: str, rv: str) -> None:
        stream = kube.watch(LEASES, namespace, resource_version=rv, field_selector=selector)
        async with contextlib.aclosing(stream):
            async for event in stream:
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.specs.append(event["object"]["spec"])

    async def record_after(self, holder: str) -> dict[str, Any] | None:
        """The first record after the last one held by ``holder`` (None until seen)."""
        if self._task is not None and self._task.done():
            self._task.result()  # the watch failed: say why
        held = [i for i, s in enumerate(self.specs) if s.get("holderIdentity") == holder]
        after = held[-1] + 1 if held else len(self.specs)
        return self.specs[after] if after < len(self.specs) else None

    def last_of(self, holder: str) -> dict[str, Any]:
        """The last record held by ``holder``."""
        held = [s for s in self.specs if s.get("holderIdentity") == holder]
        assert held, f"no record held by {holder}: {self.specs}"
        return held[-1]

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
