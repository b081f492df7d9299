"""REST client metrics, with client-go's names and labels, on :data:`msop.metrics.REGISTRY`.

- ``rest_client_requests_total{code,method,host}``: every request, watches included;
  ``code`` is the HTTP status as a string, or ``"<error>"`` when no response arrived.
- ``rest_client_request_duration_seconds{verb,host}``: latency until the response body was
  read (not recorded for watches, whose duration is meaningless).
- ``rest_client_request_retries_total{code,verb,host}``: requests sent again because the
  API server refused them with ``Retry-After`` (429 from API Priority and Fairness,
  500-504); ``code`` is the refusal's status.
- ``rest_client_rate_limiter_duration_seconds{verb,host}``: time spent waiting on the
  client-side token bucket.
- ``msop_apiserver_unreachable_total{host}``: times a refused or dropped connection closed
  the transport's ready gate (:class:`~msop.kube.transport.ReadyGate`).
- ``msop_apiserver_held_requests_total{host}``: requests that waited at the closed gate
  for the API server's ``/readyz`` to say 200.
"""

from __future__ import annotations

from msop.metrics import REGISTRY, Counter, Histogram

__all__ = [
    "HELD_TOTAL",
    "RATE_LIMITER_DURATION",
    "REQUESTS_TOTAL",
    "REQUEST_DURATION",
    "REQUEST_RETRIES_TOTAL",
    "UNREACHABLE_TOTAL",
]

_LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

REQUESTS_TOTAL = Counter(
    "rest_client_requests",
    "Number of HTTP requests, partitioned by status code, method, and host.",
    ["code", "method", "host"],
    registry=REGISTRY,
)

REQUEST_RETRIES_TOTAL = Counter(
    "rest_client_request_retries",
    "Number of request retries, partitioned by status code, verb, and host.",
    ["code", "verb", "host"],
    registry=REGISTRY,
)

REQUEST_DURATION = Histogram(
    "rest_client_request_duration_seconds",
    "Request latency in seconds. Broken down by verb and host.",
    ["verb", "host"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)

RATE_LIMITER_DURATION = Histogram(
    "rest_client_rate_limiter_duration_seconds",
    "Client side rate limiter latency in seconds. Broken down by verb and host.",
    ["verb", "host"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)

UNREACHABLE_TOTAL = Counter(
    "msop_apiserver_unreachable",
    "Times the API server refused or dropped a connection and requests were held until "
    "its /readyz answered 200 (or for at most 10 s).",
    ["host"],
    registry=REGISTRY,
)

HELD_TOTAL = Counter(
    "msop_apiserver_held_requests",
    "Requests that waited for an unreachable API server to report ready.",
    ["host"],
    registry=REGISTRY,
)
