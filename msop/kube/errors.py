"""Errors raised by :class:`msop.kube.KubeClient`, and predicates to classify them.

- :class:`ApiError`: the API server answered with a non-2xx status (or a watch ``ERROR``
  event). ``reason`` is the ``Status.reason`` from the body, or derived from the HTTP code
  when the body is not a Status.
- :class:`ApiUnavailable` (a subclass): no answer at all - connection refused or reset,
  TLS failure, or the response stream broke. Callers should back off and retry.
- :class:`ApiTimeout` (a subclass of ApiUnavailable): a client-side timeout elapsed, e.g.
  a watch stream stayed silent for longer than its read timeout.

The predicates never raise; they return False for exceptions that are not ApiErrors.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ApiError",
    "ApiTimeout",
    "ApiUnavailable",
    "is_allocation_failure",
    "is_already_exists",
    "is_conflict",
    "is_forbidden",
    "is_gone",
    "is_invalid",
    "is_not_found",
    "is_patch_test_failed",
    "is_too_many_requests",
    "is_unavailable",
]

# apimachinery's reason for each HTTP status, used when the body is not a Status object.
_REASON_FOR_CODE: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Gone",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """The API server refused a request.

    ``status`` is the HTTP code (0 when unknown), ``reason`` the machine-readable Status
    reason (``NotFound``, ``AlreadyExists``, ``Conflict``, ``Expired``, ...), ``message``
    the human-readable text and ``body`` the parsed Status object when there was one.
    ``retry_after`` holds the server's ``Retry-After`` seconds for 429/5xx, if sent.
    """

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: dict[str, Any] | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.body = body
        self.retry_after = retry_after

    @classmethod
    def from_status(cls, status: int, body: Any, *, retry_after: float | None = None) -> ApiError:
        """Build an error from an HTTP code and a parsed body (a Status dict or anything).

        Falls back to the code's standard reason when ``body`` is not a Status object.
        """
        if isinstance(body, dict) and body.get("kind") == "Status":
            code = body.get("code")
            status = code if isinstance(code, int) and code else status
            reason = str(body.get("reason") or _REASON_FOR_CODE.get(status, "Unknown"))
            return cls(status, reason, str(body.get("message", "")), body, retry_after=retry_after)
        text = body if isinstance(body, str) else ""
        return cls(
            status,
            _REASON_FOR_CODE.get(status, "Unknown"),
            text[:1000],
            None,
            retry_after=retry_after,
        )


class ApiUnavailable(ApiError):
    """The API server could not be reached or the connection broke mid-response."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "ServiceUnavailable", message, None)
        self.args = (message,)

    def __str__(self) -> str:
        return self.message


class ApiTimeout(ApiUnavailable):
    """A client-side timeout elapsed (request deadline, or a silent watch stream)."""


def transport_reason(e: BaseException) -> str:
    """What a connection's failure says, for a person: the exception's own message
    (aiohttp's "Cannot connect to host ...") rather than its repr, else its type."""
    return str(e).strip() or type(e).__name__


def _api(e: BaseException) -> ApiError | None:
    return e if isinstance(e, ApiError) and not isinstance(e, ApiUnavailable) else None


def is_not_found(e: BaseException) -> bool:
    """404 NotFound."""
    a = _api(e)
    return a is not None and (a.status == 404 or a.reason == "NotFound")


def is_conflict(e: BaseException) -> bool:
    """409 Conflict from optimistic concurrency (stale resourceVersion), not AlreadyExists."""
    a = _api(e)
    return a is not None and a.reason == "Conflict"


def is_already_exists(e: BaseException) -> bool:
    """409 AlreadyExists from a create."""
    a = _api(e)
    return a is not None and a.reason == "AlreadyExists"


def is_gone(e: BaseException) -> bool:
    """410, reason Expired/Gone, or "too old resource version": the caller must relist."""
    a = _api(e)
    if a is None:
        return False
    return (
        a.status == 410
        or a.reason in ("Expired", "Gone")
        or "too old resource version" in a.message
    )


def is_forbidden(e: BaseException) -> bool:
    """403 Forbidden (RBAC, or a namespace being terminated)."""
    a = _api(e)
    return a is not None and (a.status == 403 or a.reason == "Forbidden")


def is_patch_test_failed(e: BaseException) -> bool:
    """422 for a JSON patch (RFC 6902) whose ``test`` operation failed: the object no longer
    holds the tested value. The API server reports it as Invalid with no details (no
    name, kind or causes), unlike a validation error, which always names the object."""
    a = _api(e)
    return (
        a is not None
        and a.status == 422
        and a.reason == "Invalid"
        and not (a.body or {}).get("details")
    )


def is_allocation_failure(e: BaseException) -> bool:
    """422 Invalid that is not about the object's content: the API server could not
    allocate a Service's cluster IP or node port (its range is full, or the allocator's
    storage failed, e.g. ``failed to allocate IP: rpc error: code = Unavailable`` while
    etcd restarts). The storage layer reports these as field errors on
    ``spec.clusterIPs``/``spec.ports[i].nodePort`` all the same; the same body can
    succeed later. Every cause must be one: a content error among them stays permanent."""
    a = _api(e)
    if a is None or not (a.status == 422 or a.reason == "Invalid"):
        return False
    causes = ((a.body or {}).get("details") or {}).get("causes") or []
    texts = [str(c.get("message", "")) for c in causes if isinstance(c, dict)] or [a.message]
    return all("failed to allocate" in t for t in texts)


def is_invalid(e: BaseException) -> bool:
    """422 Invalid: the object failed validation; retrying the same body cannot succeed.
    An allocation failure (:func:`is_allocation_failure`) is not one."""
    a = _api(e)
    return (
        a is not None
        and (a.status == 422 or a.reason == "Invalid")
        and not is_allocation_failure(e)
    )


def is_too_many_requests(e: BaseException) -> bool:
    """429 TooManyRequests (API priority and fairness); see ``retry_after``."""
    a = _api(e)
    return a is not None and (a.status == 429 or a.reason == "TooManyRequests")


def is_unavailable(e: BaseException) -> bool:
    """No answer from the server (connection failure or client-side timeout)."""
    return isinstance(e, ApiUnavailable)
