"""Authentication and authorization of HTTP requests, delegated to the API server.

What kube-rbac-proxy and controller-runtime's metrics filter do, for msop's own server:

1. the request's bearer token (``Authorization: Bearer <token>``) is sent to the API
   server in a ``TokenReview`` (``authentication.k8s.io/v1``), which says whose it is;
2. that user is checked with a ``SubjectAccessReview`` (``authorization.k8s.io/v1``) of
   the request's path and verb as ``nonResourceAttributes`` (``GET /metrics`` is verb
   ``get`` on path ``/metrics``, what a ClusterRole's ``nonResourceURLs`` grants).

:meth:`DelegatedAuth.check` answers ``None`` (allowed: serve the request) or the
response to send instead:

- ``401`` without a bearer token, or with one the API server does not authenticate;
- ``403`` when the user may not do it;
- ``503`` when the API server does not answer within ``timeout`` (unreachable, slow,
  or refusing with 5xx or 429), and ``500`` when it refuses the review itself (the
  operator's own RBAC lacks ``create`` on ``tokenreviews`` or ``subjectaccessreviews``)
  or answers something that is not a review. Both say so in one short line, are logged,
  are never cached, and never raise.

Decisions are cached by the SHA-256 of the token with the path and the verb: an allowed
one for ``allowed_ttl`` seconds, a refused one (401 or 403) for ``denied_ttl``, at most
``max_entries`` of them (the least recently used go first). So a Prometheus scraping
every 15 s costs two API requests every ``allowed_ttl``, not per scrape, and a revoked
token or role stops working within ``allowed_ttl``. Concurrent requests with the same
token share one review; at most ``max_in_flight`` reviews run at once. Nothing is sent
to the API server at start or while no request comes: no request, no connection.

Tokens are never logged nor kept; only their hashes are cache keys.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import structlog
from cachetools import TLRUCache

from msop.controller.health import Request, Response
from msop.kube.errors import ApiError, ApiUnavailable
from msop.kube.resources import SUBJECTACCESSREVIEWS, TOKENREVIEWS, Resource

__all__ = ["AuthOptions", "DelegatedAuth", "ReviewClient"]

log = structlog.get_logger("msop.controller.delegatedauth")

TEXT = "text/plain; charset=utf-8"


class ReviewClient(Protocol):
    """What the reviews need of :class:`~msop.kube.client.KubeClient`."""

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class AuthOptions:
    """How :class:`DelegatedAuth` caches and bounds its reviews."""

    allowed_ttl: float = 120.0
    """Seconds an allowed token is served without asking the API server again."""
    denied_ttl: float = 30.0
    """Seconds a refused token (401 or 403) is refused without asking again."""
    max_entries: int = 1024
    """Decisions kept at most (the least recently used are dropped first)."""
    timeout: float = 5.0
    """Seconds a request waits for its reviews before it gets a 503."""
    max_in_flight: int = 4
    """Reviews sent at once; more requests with new tokens wait for a place."""


class _Unavailable(Exception):
    """The API server gave no decision; ``response`` says so to the client."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.body.decode())
        self.response = response


def _text(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, text.encode(), TEXT, headers)


_UNAUTHORIZED = _text(401, "Unauthorized", (("WWW-Authenticate", 'Bearer realm="msop"'),))
_FORBIDDEN = _text(403, "Forbidden")


def bearer_token(request: Request) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


@dataclass
class _Flight:
    """Requests waiting on the review of one key."""

    lock: asyncio.Lock
    users: int = 0


class DelegatedAuth:
    """See the module docstring. ``clock`` (monotonic seconds) runs the cache's TTLs."""

    def __init__(
        self,
        client: ReviewClient,
        options: AuthOptions | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.options = options or AuthOptions()
        allowed, denied = self.options.allowed_ttl, self.options.denied_ttl

        def expires(_key: str, status: int, now: float) -> float:
            return now + (allowed if status == 200 else denied)

        self._cache: TLRUCache[str, int] = TLRUCache(
            maxsize=self.options.max_entries, ttu=expires, timer=clock
        )
        self._flights: dict[str, _Flight] = {}
        self._slots = asyncio.Semaphore(self.options.max_in_flight)

    def statistics(self) -> dict[str, int]:
        """Cached decisions and reviews under way (for tests and debugging)."""
        return {"cached": len(self._cache), "in_flight": len(self._flights)}

    async def check(self, request: Request) -> Response | None:
        """None when ``request`` may be served, else the response to send. Never raises
        (but CancelledError)."""
        token = bearer_token(request)
        if token is None:
            return _UNAUTHORIZED
        verb = "get" if request.method in ("GET", "HEAD") else request.method.lower()
        digest = hashlib.sha256(token.encode()).hexdigest()
        key = f"{digest} {verb} {request.path}"
        status = self._cache.get(key)
        if status is None:
            try:
                async with asyncio.timeout(self.options.timeout):
                    status = await self._decide(key, token, request.path, verb)
            except TimeoutError:
                return self._unavailable(503, f"no decision within {self.options.timeout:g} s")
            except _Unavailable as e:
                return e.response
        if status == 200:
            return None
        return _UNAUTHORIZED if status == 401 else _FORBIDDEN

    async def _decide(self, key: str, token: str, path: str, verb: str) -> int:
        """The decision for ``key``: reviewed once, whoever else asks meanwhile."""
        flight = self._flights.get(key)
        if flight is None:
            flight = self._flights[key] = _Flight(asyncio.Lock())
        flight.users += 1
        try:
            async with flight.lock:
                status = self._cache.get(key)
                if status is None:
                    status = await self._review(token, path, verb)
                    self._cache[key] = status
                return status
        finally:
            flight.users -= 1
            if flight.users == 0:
                del self._flights[key]

    async def _review(self, token: str, path: str, verb: str) -> int:
        """200, 401 or 403 from the API server. Raises _Unavailable."""
        try:
            async with self._slots:
                user = await self._authenticate(token)
                if user is None:
                    return 401
                return 200 if await self._authorize(user, path, verb) else 403
        except ApiUnavailable as e:
            raise _Unavailable(self._unavailable(503, str(e))) from None
        except ApiError as e:
            # 401/403: the operator's own credentials or RBAC, not the caller's.
            status = 500 if e.status in (401, 403) else 503
            raise _Unavailable(self._unavailable(status, str(e))) from None
        except Exception as e:  # an answer of another shape: a 500, not a crash
            raise _Unavailable(self._unavailable(500, f"unexpected answer: {e!r}")) from None

    @staticmethod
    def _unavailable(status: int, error: str) -> Response:
        log.warning("cannot authenticate or authorize a request", status=status, error=error)
        what = (
            "the API server could not review the token"
            if status == 503
            else "the API server refused msop's review of the token"
        )
        return _text(status, f"{status}: {what}; see the operator's log")

    async def _authenticate(self, token: str) -> dict[str, Any] | None:
        review = await self.client.create(
            TOKENREVIEWS,
            {"apiVersion": TOKENREVIEWS.api_version, "kind": TOKENREVIEWS.kind,
             "spec": {"token": token}},
        )  # fmt: skip
        status = review.get("status") or {}
        if status.get("authenticated") is not True:
            return None
        user: dict[str, Any] = status.get("user") or {}
        return user if user.get("username") else None

    async def _authorize(self, user: Mapping[str, Any], path: str, verb: str) -> bool:
        spec: dict[str, Any] = {
            "user": user["username"],
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        for field in ("uid", "groups", "extra"):
            if user.get(field):
                spec[field] = user[field]
        review = await self.client.create(
            SUBJECTACCESSREVIEWS,
            {"apiVersion": SUBJECTACCESSREVIEWS.api_version, "kind": SUBJECTACCESSREVIEWS.kind,
             "spec": spec},
        )  # fmt: skip
        return (review.get("status") or {}).get("allowed") is True
