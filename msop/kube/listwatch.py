"""One list-then-watch loop for clients that follow objects without a cache.

:func:`list_then_watch` yields ``("LIST", list)`` for each (re)list, then
``(type, object)`` for each watch event (``ADDED``, ``MODIFIED``, ``DELETED``; bookmarks
only move the resume point). A watch that ends is resumed from the last
resourceVersion seen; a broken stream (:class:`ApiUnavailable`) too, after
``retry_delay``; 410 Gone (the version expired) relists. Other API errors are raised.

The informers' reflector (``msop.informers.reflector``) is not built on this: it also
pages its lists, transforms objects before they are kept, backs off with jitter,
declares a silent watch stuck and reports metrics, which a one-object follower such as
the SDK's ``wait_for_job`` does not need.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, ApiUnavailable, is_gone
from msop.kube.objects import JSON
from msop.kube.resources import Resource

__all__ = ["list_then_watch"]


async def list_then_watch(
    client: KubeClient,
    res: Resource,
    namespace: str | None,
    *,
    field_selector: str | None = None,
    timeout_seconds: int = 300,
    retry_delay: float = 1.0,
) -> AsyncGenerator[tuple[str, JSON], None]:
    """List, then watch from the list's version, forever (see the module docstring)."""
    version: str | None = None
    while True:
        if version is None:
            listed = await client.list(res, namespace, field_selector=field_selector)
            yield "LIST", listed
            version = str(listed["metadata"]["resourceVersion"])
        try:
            events = client.watch(
                res, namespace, resource_version=version,
                field_selector=field_selector, timeout_seconds=timeout_seconds,
            )  # fmt: skip
            async with contextlib.aclosing(events):
                async for event in events:
                    obj: JSON = event["object"]
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event["type"] != "BOOKMARK":
                        yield event["type"], obj
        except ApiError as e:
            if is_gone(e):
                version = None  # expired: list again
            elif isinstance(e, ApiUnavailable):
                await asyncio.sleep(retry_delay)  # broken stream: resume from the last version
            else:
                raise
