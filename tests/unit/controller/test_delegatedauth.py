"""DelegatedAuth against a fake of the reviews: 401/403/allowed, what it sends, its cache
(allowed and refused tokens for their own TTLs, bounded), shared reviews, and the API
server failing (503/500, never an exception)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from msop.controller.delegatedauth import AuthOptions, DelegatedAuth, bearer_token
from msop.controller.health import Request, Response
from msop.kube.errors import ApiError, ApiTimeout, ApiUnavailable
from tests.support.clocks import FakeClock
from tests.support.reviews import Reviews


def scrape(token: str | None = None, *, method: str = "GET", scheme: str = "Bearer") -> Request:
    headers = {} if token is None else {"authorization": f"{scheme} {token}"}
    return Request(method, "/metrics", {}, headers)


def auth(reviews: Reviews, clock: FakeClock | None = None, **options: Any) -> DelegatedAuth:
    return DelegatedAuth(reviews, AuthOptions(**options), clock=clock or FakeClock())


def status(response: Response | None) -> int:
    return 200 if response is None else response.status


@pytest.fixture
def reviews() -> Reviews:
    return Reviews(tokens={"good": "prometheus", "other": "mallory"}, allowed={"prometheus"})


def test_the_bearer_token_is_read_from_the_authorization_header() -> None:
    assert bearer_token(scrape("abc")) == "abc"
    assert bearer_token(scrape("abc", scheme="bearer")) == "abc"
    assert bearer_token(scrape()) is None
    assert bearer_token(scrape("abc", scheme="Basic")) is None
    assert bearer_token(scrape("")) is None
    assert bearer_token(scrape("a b")) is None


async def test_no_token_is_401_without_asking_the_api_server(reviews: Reviews) -> None:
    a = auth(reviews)
    for request in (scrape(), scrape("dXNlcjpwdw==", scheme="Basic")):
        response = await a.check(request)
        assert response is not None and response.status == 401
        assert ("WWW-Authenticate", 'Bearer realm="msop"') in response.headers
    assert reviews.sent == []


async def test_a_token_the_api_server_does_not_know_is_401(reviews: Reviews) -> None:
    assert status(await auth(reviews).check(scrape("forged"))) == 401
    assert reviews.kinds() == ["tokenreviews"]
    assert reviews.sent[0][1]["spec"] == {"token": "forged"}


async def test_a_user_without_the_role_is_403(reviews: Reviews) -> None:
    assert status(await auth(reviews).check(scrape("other"))) == 403
    assert reviews.kinds() == ["tokenreviews", "subjectaccessreviews"]
    spec = reviews.sent[1][1]["spec"]
    assert spec == {
        "user": "mallory",
        "uid": "uid-mallory",
        "groups": ["system:authenticated"],
        "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
    }


async def test_an_allowed_user_passes_and_head_is_get(reviews: Reviews) -> None:
    a = auth(reviews)
    assert await a.check(scrape("good")) is None
    assert reviews.kinds() == ["tokenreviews", "subjectaccessreviews"]
    assert reviews.sent[1][1]["spec"]["nonResourceAttributes"]["verb"] == "get"
    assert await a.check(scrape("good", method="HEAD")) is None  # the same decision, cached
    assert len(reviews.sent) == 2


async def test_an_allowed_token_is_cached_for_the_allowed_ttl(reviews: Reviews) -> None:
    clock = FakeClock()
    a = auth(reviews, clock, allowed_ttl=120, denied_ttl=30)
    assert await a.check(scrape("good")) is None
    for _ in range(7):  # a Prometheus scraping every 15 s: no request per scrape
        clock.advance(15)
        assert await a.check(scrape("good")) is None
    assert len(reviews.sent) == 2
    clock.advance(120 - 7 * 15 + 1)
    assert await a.check(scrape("good")) is None
    assert len(reviews.sent) == 4  # reviewed again once expired


async def test_a_refused_token_is_cached_for_the_shorter_denied_ttl(reviews: Reviews) -> None:
    clock = FakeClock()
    a = auth(reviews, clock, allowed_ttl=120, denied_ttl=30)
    assert status(await a.check(scrape("forged"))) == 401
    assert status(await a.check(scrape("other"))) == 403
    assert len(reviews.sent) == 3
    clock.advance(29)
    assert status(await a.check(scrape("forged"))) == 401
    assert status(await a.check(scrape("other"))) == 403
    assert len(reviews.sent) == 3
    clock.advance(2)
    assert status(await a.check(scrape("forged"))) == 401
    assert status(await a.check(scrape("other"))) == 403
    assert len(reviews.sent) == 6


async def test_a_role_granted_later_takes_effect_after_the_denied_ttl(reviews: Reviews) -> None:
    clock = FakeClock()
    a = auth(reviews, clock, denied_ttl=30)
    assert status(await a.check(scrape("other"))) == 403
    reviews.allowed.add("mallory")
    assert status(await a.check(scrape("other"))) == 403  # cached
    clock.advance(31)
    assert await a.check(scrape("other")) is None


async def test_the_cache_is_bounded(reviews: Reviews) -> None:
    reviews.tokens.update({f"t{i}": f"user{i}" for i in range(10)})
    a = auth(reviews, max_entries=3)
    for i in range(10):
        await a.check(scrape(f"t{i}"))
    assert a.statistics()["cached"] == 3
    sent = len(reviews.sent)
    await a.check(scrape("t0"))  # dropped long ago: asked again
    assert len(reviews.sent) == sent + 2
    await a.check(scrape("t9"))  # still there
    assert len(reviews.sent) == sent + 2


async def test_tokens_are_kept_only_as_hashes(reviews: Reviews) -> None:
    a = auth(reviews)
    await a.check(scrape("good"))
    assert not any("good" in key for key in a._cache)


async def test_concurrent_requests_with_one_token_share_one_review(reviews: Reviews) -> None:
    reviews.gate = asyncio.Event()
    a = auth(reviews)
    checks = [asyncio.create_task(a.check(scrape("good"))) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert reviews.kinds() == ["tokenreviews"]
    reviews.gate.set()
    assert await asyncio.gather(*checks) == [None] * 5
    assert len(reviews.sent) == 2
    assert a.statistics()["in_flight"] == 0


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (ApiUnavailable("POST /apis/authentication.k8s.io/v1/tokenreviews: refused"), 503),
        (ApiTimeout("POST /apis/authentication.k8s.io/v1/tokenreviews: timed out"), 503),
        (ApiError(503, "ServiceUnavailable", "etcd is down"), 503),
        (ApiError(429, "TooManyRequests", "slow down", retry_after=1.0), 503),
        (ApiError(403, "Forbidden", "cannot create tokenreviews"), 500),
    ],
)
async def test_the_api_server_failing_is_an_answer_not_a_crash(
    reviews: Reviews, error: ApiError, code: int
) -> None:
    a = auth(reviews)
    reviews.fail(error)
    response = await a.check(scrape("good"))
    assert response is not None and response.status == code
    assert response.body.startswith(f"{code}: the API server".encode())
    assert b"good" not in response.body
    # Not cached: the next scrape asks again, and passes once the API server answers.
    assert await a.check(scrape("good")) is None
    assert reviews.kinds() == ["tokenreviews", "tokenreviews", "subjectaccessreviews"]


async def test_a_failing_authorization_review_is_503_too(reviews: Reviews) -> None:
    a = auth(reviews)
    reviews.fail(ApiUnavailable("connection reset"), plural="subjectaccessreviews")
    assert status(await a.check(scrape("good"))) == 503
    assert reviews.kinds() == ["tokenreviews", "subjectaccessreviews"]
    assert await a.check(scrape("good")) is None


async def test_an_answer_of_another_shape_is_500(reviews: Reviews) -> None:
    reviews.fail(KeyError("status"), plural="tokenreviews")
    assert status(await auth(reviews).check(scrape("good"))) == 500


async def test_no_answer_within_the_timeout_is_503(reviews: Reviews) -> None:
    reviews.gate = asyncio.Event()  # never set: the API server holds the request
    a = auth(reviews, timeout=0.05)
    response = await a.check(scrape("good"))
    assert response is not None and response.status == 503
    assert a.statistics() == {"cached": 0, "in_flight": 0}


async def test_reviews_in_flight_are_bounded(reviews: Reviews) -> None:
    reviews.gate = asyncio.Event()
    reviews.tokens.update({f"t{i}": "prometheus" for i in range(6)})
    a = auth(reviews, max_in_flight=2)
    checks = [asyncio.create_task(a.check(scrape(f"t{i}"))) for i in range(6)]
    await asyncio.sleep(0.01)
    assert len(reviews.sent) == 2
    reviews.gate.set()
    assert await asyncio.gather(*checks) == [None] * 6
