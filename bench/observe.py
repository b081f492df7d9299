"""Watch a namespace and record, per object, when the bench first saw it.

Times are ``time.monotonic()`` readings in the bench process, taken when the watch
event arrived, so they include the API server's watch delivery delay (the same for the
operator's objects and the raw-created ones).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

from msop.kube import ApiError, ApiUnavailable, KubeClient, Resource

JSON = dict[str, Any]
Handler = Callable[[str, JSON, float], None]


async def watch_forever(client: KubeClient, res: Resource, namespace: str, on: Handler) -> None:
    """List, then watch ``res`` in ``namespace`` until cancelled, calling ``on(type, obj,
    now)`` for each listed object (type ``ADDED``) and each event. Restarts a watch that
    ends; relists after 410 Gone or a broken stream."""
    rv: str | None = None
    while True:
        if rv is None:
            listed = await client.list_all(res, namespace)
            now = time.monotonic()
            for obj in listed["items"]:
                on("ADDED", obj, now)
            rv = str(listed["metadata"]["resourceVersion"])
        try:
            async with aclosing(
                client.watch(res, namespace, resource_version=rv, timeout_seconds=600)
            ) as events:
                async for event in events:
                    obj = event["object"]
                    rv = str(obj.get("metadata", {}).get("resourceVersion", rv))
                    if event["type"] != "BOOKMARK":
                        on(event["type"], obj, time.monotonic())
        except (ApiError, ApiUnavailable):
            rv = None
            await asyncio.sleep(0.2)


class FirstSeen:
    """First-seen time of each object name, with the job it belongs to (by label)."""

    def __init__(self, job_label: str = "training.kubeflow.org/job-name") -> None:
        self.times: dict[str, float] = {}
        self.job_of: dict[str, str] = {}
        self._job_label = job_label

    def __call__(self, type_: str, obj: JSON, now: float) -> None:
        if type_ == "DELETED":
            return
        meta = obj["metadata"]
        name = meta["name"]
        if name not in self.times:
            self.times[name] = now
            self.job_of[name] = (meta.get("labels") or {}).get(self._job_label, "")

    def per_job_last_seen(self) -> dict[str, tuple[int, float]]:
        """job -> (number of its objects seen, when the last one was first seen)."""
        out: dict[str, tuple[int, float]] = {}
        for name, t in self.times.items():
            job = self.job_of[name]
            n, last = out.get(job, (0, 0.0))
            out[job] = (n + 1, max(last, t))
        return out


class ConditionTimes:
    """When each job's ``Running`` and ``Succeeded`` conditions were first seen True."""

    def __init__(self) -> None:
        self.first: dict[str, dict[str, float]] = {"Running": {}, "Succeeded": {}}

    def __call__(self, type_: str, obj: JSON, now: float) -> None:
        name = obj["metadata"]["name"]
        for cond in (obj.get("status") or {}).get("conditions") or []:
            seen = self.first.get(cond.get("type", ""))
            if seen is not None and cond.get("status") == "True" and name not in seen:
                seen[name] = now


async def wait_until(what: str, done: Callable[[], bool], wait_s: float) -> float:
    """Poll ``done`` every 20 ms; return the monotonic time it became true.

    Raises TimeoutError naming ``what`` after ``wait_s`` seconds.
    """
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {wait_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic()
