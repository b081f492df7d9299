"""ApiError construction and the is_* predicates."""

from __future__ import annotations

from typing import Any

from msop.kube.errors import (
    ApiError,
    ApiTimeout,
    ApiUnavailable,
    is_allocation_failure,
    is_already_exists,
    is_conflict,
    is_forbidden,
    is_gone,
    is_invalid,
    is_not_found,
    is_patch_test_failed,
    is_too_many_requests,
    is_unavailable,
)


def status(code: int, reason: str, message: str = "m") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def test_status_body_is_parsed() -> None:
    e = ApiError.from_status(409, status(409, "AlreadyExists", "exists"))
    assert (e.status, e.reason, e.message) == (409, "AlreadyExists", "exists")
    assert e.body is not None
    assert is_already_exists(e) and not is_conflict(e)
    assert is_conflict(ApiError.from_status(409, status(409, "Conflict")))


def test_reason_from_code_when_body_is_not_a_status() -> None:
    e = ApiError.from_status(404, "404 page not found")
    assert e.reason == "NotFound" and is_not_found(e) and e.body is None
    assert is_forbidden(ApiError.from_status(403, None))
    assert is_invalid(ApiError.from_status(422, status(422, "Invalid")))
    assert is_too_many_requests(ApiError.from_status(429, None, retry_after=1.0))


def test_gone_variants() -> None:
    assert is_gone(
        ApiError.from_status(410, status(410, "Expired", "too old resource version: 1 (2)"))
    )
    assert is_gone(ApiError.from_status(500, status(410, "Gone")))
    assert is_gone(ApiError(500, "InternalError", "too old resource version: 5 (9)"))
    assert not is_gone(ApiError.from_status(404, None))


def test_unavailable_is_not_classified_as_an_api_answer() -> None:
    e = ApiUnavailable("connection refused")
    t = ApiTimeout("silent")
    assert is_unavailable(e) and is_unavailable(t)
    assert not is_not_found(e) and not is_gone(t) and not is_forbidden(e)
    assert not is_unavailable(ValueError())
    assert not is_not_found(ValueError())


def test_failed_json_patch_test_is_told_from_a_validation_error() -> None:
    # What kube-apiserver 1.36 answered to a JSON patch whose `test` op failed.
    failed_test = {
        **status(422, "Invalid", "the server rejected our request due to an error in our request"),
        "details": {},
    }
    e = ApiError.from_status(422, failed_test)
    assert is_patch_test_failed(e) and is_invalid(e)
    # A validation error names the object and the fields.
    invalid = {
        **status(422, "Invalid", 'MSJob.mindspore.gitee.com "x" is invalid: spec: Required value'),
        "details": {"name": "x", "kind": "MSJob", "causes": [{"field": "spec"}]},
    }
    assert not is_patch_test_failed(ApiError.from_status(422, invalid))
    assert not is_patch_test_failed(ApiError.from_status(409, status(409, "Conflict")))


def test_an_allocation_failure_is_not_invalid_content() -> None:
    cause = {
        "reason": "FieldValueInvalid",
        "field": "spec.clusterIPs",
        "message": 'Invalid value: [""]: failed to allocate IP: rpc error: code = Unavailable',
    }
    nodeport = {
        "reason": "FieldValueInvalid",
        "field": "spec.ports[0].nodePort",
        "message": "Invalid value: 30000: failed to allocate port",
    }
    content = {"reason": "FieldValueRequired", "field": "spec.ports", "message": "Required value"}

    def err(*causes: dict[str, str]) -> ApiError:
        body = {
            **status(422, "Invalid", 'Service "s" is invalid'),
            "details": {"name": "s", "kind": "Service", "causes": list(causes)},
        }
        return ApiError.from_status(422, body)

    for e in (err(cause), err(cause, nodeport)):
        assert is_allocation_failure(e) and not is_invalid(e)
    for e in (err(cause, content), err(content), err()):
        assert is_invalid(e) and not is_allocation_failure(e)
    # Without a Status body the message decides.
    assert is_allocation_failure(ApiError(422, "Invalid", "failed to allocate IP: range is full"))
    assert not is_allocation_failure(ApiError.from_status(500, status(500, "InternalError")))
