"""The bench's writes that survive an API server answering 504 under load (pure, a fake
client)."""

from __future__ import annotations

from typing import Any

import pytest

from bench import burst
from msop.kube import PODS
from msop.kube.errors import ApiError, ApiTimeout

JSON = dict[str, Any]


class Flaky:
    """Stores every create it is sent, but answers the first ``fail`` with ``error``."""

    def __init__(self, fail: int, error: ApiError) -> None:
        self.fail, self.error = fail, error
        self.stored: dict[str, JSON] = {}
        self.creates = 0
        self.patches = 0

    async def create(self, res: Any, obj: JSON, ns: str) -> JSON:
        self.creates += 1
        name = obj["metadata"]["name"]
        if name in self.stored:
            raise ApiError(409, "AlreadyExists", f"{name} exists", None)
        self.stored[name] = {**obj, "uid": f"uid-{name}"}
        if self.creates <= self.fail:
            raise self.error
        return self.stored[name]

    async def get(self, res: Any, name: str, ns: str) -> JSON:
        return self.stored[name]

    async def patch(self, res: Any, name: str, body: JSON, ns: str, **kw: Any) -> JSON:
        self.patches += 1
        if self.patches <= self.fail:
            raise self.error
        return body


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    async def sleep(_: float) -> None:
        return None

    monkeypatch.setattr("asyncio.sleep", sleep)


async def test_a_create_stored_though_its_answer_was_lost_is_found_not_failed() -> None:
    client = Flaky(1, ApiError(504, "Timeout", "request did not complete", None))
    got = await burst.create_surely(client, PODS, {"metadata": {"name": "p"}}, "ns")  # type: ignore[arg-type]
    assert got["uid"] == "uid-p" and client.creates == 2


async def test_a_create_with_no_answer_is_tried_again() -> None:
    client = Flaky(1, ApiTimeout("no answer"))
    got = await burst.create_surely(client, PODS, {"metadata": {"name": "p"}}, "ns")  # type: ignore[arg-type]
    assert got["uid"] == "uid-p"


async def test_a_refusal_that_does_not_pass_fails_at_once() -> None:
    client = Flaky(1, ApiError(422, "Invalid", "spec.x: Invalid value", None))
    with pytest.raises(ApiError):
        await burst.create_surely(client, PODS, {"metadata": {"name": "p"}}, "ns")  # type: ignore[arg-type]
    assert client.creates == 1
    # And a first create that exists already is the caller's mistake, not a lost answer.
    with pytest.raises(ApiError):
        await burst.create_surely(client, PODS, {"metadata": {"name": "p"}}, "ns")  # type: ignore[arg-type]


async def test_the_tries_are_bounded() -> None:
    client = Flaky(100, ApiError(503, "ServiceUnavailable", "", None))
    with pytest.raises(ApiError):
        await burst.patch_surely(client, PODS, "p", {}, "ns", subresource="status")  # type: ignore[arg-type]
    assert client.patches == burst.WRITE_TRIES
    client = Flaky(3, ApiError(429, "TooManyRequests", "", None))
    await burst.patch_surely(client, PODS, "p", {}, "ns")  # type: ignore[arg-type]
    assert client.patches == 4


async def test_a_wait_that_times_out_is_noted_and_the_scenario_goes_on() -> None:
    missed: list[str] = []
    assert await burst._wait_or_miss("never", lambda: False, 0.05, missed) is None
    assert await burst._wait_or_miss("at once", lambda: True, 0.05, missed) is not None
    assert missed == ["never"]
