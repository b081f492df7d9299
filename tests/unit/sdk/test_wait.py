"""wait_for_job follows a watch: resumes from the last resourceVersion when the stream
ends, lists again when the version expired (410), and stops on deletion or timeout."""

from __future__ import annotations

import io
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from msop.kube.errors import ApiError
from msop.kube.resources import Resource
from msop.sdk import MSJobClient, MSJobNotFoundError, MSJobTimeoutError
from tests.support import builders
from tests.support.clients import NoApiServer

JSON = dict[str, Any]


def _job(rv: str, *conds: str) -> JSON:
    """Job ``ns/j`` at ``rv`` with the conditions ``conds``, all True."""
    return builders.job(
        rv=rv, status={"conditions": [{"type": t, "status": "True"} for t in conds]}
    )


class FakeKube(NoApiServer):
    """Serves scripted list answers and watch streams; records what was asked."""

    def __init__(self, lists: list[list[JSON]], watches: list[list[JSON] | Exception]) -> None:
        self.lists = lists
        self.watches = watches
        self.calls: list[tuple[str, str | None, str | None]] = []

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        field_selector: str | None = None,
        **kw: Any,
    ) -> JSON:
        self.calls.append(("list", None, field_selector))
        items = self.lists.pop(0)
        rv = items[0]["metadata"]["resourceVersion"] if items else "1"
        return {"items": items, "metadata": {"resourceVersion": rv}}

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        field_selector: str | None = None,
        **kw: Any,
    ) -> AsyncGenerator[JSON, None]:
        self.calls.append(("watch", resource_version, field_selector))
        script = self.watches.pop(0) if self.watches else []
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event


def _client(kube: FakeKube) -> MSJobClient:
    return MSJobClient(namespace="ns", kube=kube)


async def test_resumes_after_stream_end_and_relists_after_expiry() -> None:
    kube = FakeKube(
        lists=[[_job("10", "Created")], [_job("30", "Created", "Running")]],
        watches=[
            [{"type": "MODIFIED", "object": _job("20", "Created")}],  # then the stream ends
            ApiError(410, "Expired", "too old resource version", None),
            [
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "35"}}},
                {"type": "MODIFIED", "object": _job("40", "Created", "Running", "Succeeded")},
            ],
        ],
    )
    out = io.StringIO()
    job = await _client(kube).wait_for_job("j", timeout=5, stream=out)
    assert job["metadata"]["resourceVersion"] == "40"
    sel = "metadata.name=j"
    assert kube.calls == [
        ("list", None, sel),
        ("watch", "10", sel),
        ("watch", "20", sel),  # resumed where the ended stream stopped
        ("list", None, sel),  # 410: start over
        ("watch", "30", sel),
    ]
    assert out.getvalue().splitlines() == ["ns/j Created", "ns/j Running", "ns/j Succeeded"]


async def test_missing_and_deleted() -> None:
    with pytest.raises(MSJobNotFoundError, match="ns/j not found"):
        await _client(FakeKube([[]], [])).wait_for_job("j", progress=False)
    kube = FakeKube([[_job("1")]], [[{"type": "DELETED", "object": _job("2")}]])
    with pytest.raises(MSJobNotFoundError, match="was deleted"):
        await _client(kube).wait_for_job("j", progress=False)


async def test_timeout_carries_the_last_state() -> None:
    class Silent(FakeKube):
        async def watch(self, *args: Any, **kwargs: Any) -> AsyncGenerator[JSON, None]:
            import asyncio

            await asyncio.sleep(60)
            yield {}

    kube = Silent([[_job("1", "Created", "Running")]], [])
    with pytest.raises(MSJobTimeoutError) as info:
        await _client(kube).wait_for_job("j", timeout=0.1, progress=False)
    assert info.value.job is not None and info.value.job["metadata"]["resourceVersion"] == "1"
    assert str(info.value) == (
        "MSJob ns/j: timed out after 0.1s waiting for Succeeded or Failed; last state: ns/j Running"
    )
