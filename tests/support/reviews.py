"""A fake of the API server's TokenReview and SubjectAccessReview, for
:class:`msop.controller.delegatedauth.DelegatedAuth` (its ``ReviewClient`` seam).

``Reviews(tokens={"t": "alice"}, allowed={"alice"})``: token ``t`` authenticates as
``alice``, who may ``get`` ``/metrics``; any other token is not authenticated. Every
review sent is recorded in :attr:`Reviews.sent` as ``(resource plural, body)``.
:meth:`Reviews.fail` makes the next reviews raise; :attr:`Reviews.gate`, when set, holds
every review until it is set (concurrency tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from msop.kube.resources import SUBJECTACCESSREVIEWS, TOKENREVIEWS, Resource

JSON = dict[str, Any]


class Reviews:
    """See the module docstring."""

    def __init__(
        self, tokens: Mapping[str, str] | None = None, allowed: set[str] | None = None
    ) -> None:
        self.tokens = dict(tokens or {})
        """token -> user name."""
        self.allowed = set(allowed or ())
        """Users allowed to get /metrics."""
        self.sent: list[tuple[str, JSON]] = []
        self.errors: list[tuple[str | None, BaseException]] = []
        self.gate: asyncio.Event | None = None

    def fail(self, *errors: BaseException, plural: str | None = None) -> None:
        """The next reviews (of ``plural`` only, when given) raise ``errors``, one each,
        in order."""
        self.errors.extend((plural, e) for e in errors)

    def kinds(self) -> list[str]:
        """The plural of every review sent, in order."""
        return [plural for plural, _ in self.sent]

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> JSON:
        assert namespace is None, "reviews are cluster-scoped"
        assert body["apiVersion"] == res.api_version and body["kind"] == res.kind
        self.sent.append((res.plural, dict(body)))
        if self.gate is not None:
            await self.gate.wait()
        for i, (plural, error) in enumerate(self.errors):
            if plural in (None, res.plural):
                del self.errors[i]
                raise error
        if res == TOKENREVIEWS:
            user = self.tokens.get(body["spec"]["token"])
            if user is None:
                return {**body, "status": {"authenticated": False, "error": "invalid token"}}
            status = {
                "authenticated": True,
                "user": {
                    "username": user,
                    "uid": f"uid-{user}",
                    "groups": ["system:authenticated"],
                },
            }
            return {**body, "status": status}
        assert res == SUBJECTACCESSREVIEWS, res
        spec = body["spec"]
        allowed = spec["user"] in self.allowed and spec.get("nonResourceAttributes") == {
            "path": "/metrics",
            "verb": "get",
        }
        return {**body, "status": {"allowed": allowed}}
