"""An asyncio Kubernetes client that speaks plain dicts.

:class:`KubeClient` takes its configuration (TLS, bearer tokens, client certificates, token
refresh) from kubernetes_asyncio's kubeconfig and in-cluster loaders, sends requests over
its own aiohttp session (:mod:`msop.kube.transport`) and returns the API server's JSON
parsed with :func:`orjson.loads` - never model classes. Objects go out and come back
exactly as the API server defines them.

Contract for every request method:

- a 2xx answer returns the parsed body;
- a non-2xx answer raises :class:`~msop.kube.errors.ApiError` carrying the Status reason
  (use the ``is_*`` predicates in :mod:`msop.kube.errors`);
- no answer (connection refused or reset, TLS failure, broken stream) raises
  :class:`~msop.kube.errors.ApiUnavailable`; a client-side timeout raises its subclass
  :class:`~msop.kube.errors.ApiTimeout`;
- **the API server's own "try again later" is honoured here**, as client-go does: an
  answer of 429 (API Priority and Fairness shedding load, a cache still initializing) or
  500-504 *with* a ``Retry-After`` header means the request was not carried out, so it is
  sent again after ``Retry-After`` seconds (capped at :data:`MAX_RETRY_AFTER`) stretched
  by up to :data:`RETRY_JITTER` at random (so clients refused together do not come back
  together), at most ``max_retries`` times (10, client-go's default), each counted in
  ``rest_client_request_retries_total{code,verb,host}``, and sent with the header
  ``Audit-ID: <the first refused attempt's audit ID>-retry-<n>``, so the audit log
  ties each retry to the first refusal (a refused create is audited without its name:
  APF refuses it before its body is read). The last refusal raises
  ApiError with ``retry_after`` set. Watches and streams are not retried here (their
  callers reopen them). Nothing else is retried: callers own their retry policy.

Every request tells the transport's :class:`~msop.kube.contact.Contact` whether the API
server answered it (a broken or silent watch stream counts as no answer): the process knows
how long it was cut off from the cluster.

Requests other than watches may be throttled by client-side :class:`TokenBucket` s, one
per **budget**, each of ``qps``/``burst`` (read by :func:`~msop.kube.flowcontrol.client_limit`:
by default, ``qps=-1``, there is no client-side limit and the API server's Priority and
Fairness shapes the traffic, as controller-runtime does since 0.21; 0 means client-go's
5/s; a positive value is the limit):

- ``events``: writes and reads of Events (``v1`` and ``events.k8s.io``);
- ``status``: the ``status`` subresource of any object;
- ``leases``: Leases (leader election);
- ``default``: everything else (creates, deletes, reads of objects).

So a backlog of Event writes never delays a pod create, and leader election always has
tokens to renew its Lease: what client-go users get by giving the event broadcaster and
the leader elector clients of their own (ms-operator gives pods, status and events a
client each). With a limit, the process may send up to four times ``qps`` in total.

Every request, watches included, is counted in ``rest_client_requests_total{code,method,host}``.

Returned dicts belong to the caller; the client keeps no reference to them.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from types import TracebackType
from typing import Any, Literal, Self
from urllib.parse import urlsplit

import aiohttp
import orjson

from msop.kube import k8sconfig
from msop.kube.errors import ApiError, ApiTimeout, ApiUnavailable, transport_reason
from msop.kube.flowcontrol import TokenBucket, client_limit
from msop.kube.metrics import (
    HELD_TOTAL,
    RATE_LIMITER_DURATION,
    REQUEST_DURATION,
    REQUEST_RETRIES_TOTAL,
    REQUESTS_TOTAL,
    UNREACHABLE_TOTAL,
)
from msop.kube.resources import Resource
from msop.kube.transport import Transport, server_unreachable
from msop.kube.writer import PatchType

__all__ = ["BUDGETS", "MAX_RETRY_AFTER", "RETRY_JITTER", "KubeClient", "PatchType", "budget_of"]

#: The header by which the API server names a request in its audit log: it echoes the ID
#: it gave each request and takes the one a client sends.
AUDIT_ID = "Audit-ID"
#: A retry of a refused request is sent with ``Audit-ID: <first attempt's ID>-retry-<n>``,
#: so an audit log pairs every retry with the refusal it answers.
RETRY_AUDIT_SUFFIX = "-retry-"

#: The longest ``Retry-After`` honoured (seconds); a longer one is waited this long.
MAX_RETRY_AFTER = 30.0
#: A retry waits ``Retry-After`` times a random factor in [1, 1 + RETRY_JITTER).
RETRY_JITTER = 0.25

#: The client-side budgets; each has a token bucket of its own (see the module docstring).
BUDGETS = ("default", "status", "events", "leases")
_EVENT_GROUPS = frozenset({"", "events.k8s.io"})


def budget_of(res: Resource, subresource: str | None = None) -> str:
    """The budget a request on ``res`` (or its ``subresource``) takes its token from."""
    if res.plural == "events" and res.group in _EVENT_GROUPS:
        return "events"
    if subresource == "status":
        return "status"
    if res.plural == "leases" and res.group == "coordination.k8s.io":
        return "leases"
    return "default"


_PATCH_CONTENT_TYPES: dict[str, str] = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}

_TRANSPORT_ERRORS = (aiohttp.ClientError, OSError)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


#: How a retry waits (a seam for tests: they record the waits instead of sleeping).
_sleep = asyncio.sleep


def _retry_wait(status: int, retry_after: float | None) -> float | None:
    """Seconds to wait before sending a refused request again, or None to give up:
    429 and 500-504 carrying ``Retry-After`` (the server did not carry it out)."""
    if retry_after is None or not (status == 429 or 500 <= status <= 504):
        return None
    return min(max(retry_after, 0.0), MAX_RETRY_AFTER) * random.uniform(1.0, 1.0 + RETRY_JITTER)


def _drop(resp: aiohttp.ClientResponse) -> None:
    """Drop a response's connection at once: abort its transport (a reset, see
    :mod:`msop.kube.transport`), then close the response. A plain close would first try
    a TLS shutdown, which a peer that stopped answering (a stuck watch, a partition)
    never completes: the socket would stay open for asyncio's 30 s shutdown timeout."""
    connection = resp.connection
    transport = connection.transport if connection is not None else None
    if transport is not None:
        transport.abort()
    resp.close()


def _decode(data: bytes) -> Any:
    if not data:
        return None
    try:
        return orjson.loads(data)
    except ValueError:
        return data.decode("utf-8", "replace")


class KubeClient:
    """Dict-in, dict-out access to the Kubernetes API. See the module docstring for errors.

    Build it with :meth:`from_config` (kubeconfig or in-cluster) or
    :meth:`from_configuration` (a ready kubernetes_asyncio ``Configuration``, e.g. with a
    bearer token). Close it with :meth:`close` or use it as ``async with``.

    ``request_timeout`` bounds every non-watch request end to end (seconds, ``None`` for
    no bound); watches are bounded by their own ``timeout_seconds``/``read_timeout``.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        qps: float = -1,
        burst: int = 0,
        user_agent: str = "msop",
        request_timeout: float | None = 60.0,
        max_retries: int = 10,
    ) -> None:
        self.transport = transport
        """The HTTP session (shared by clients made from this one's transport)."""
        self.contact = transport.contact
        """The outages of the API server seen through this transport
        (:mod:`msop.kube.contact`)."""
        self._configuration = transport.configuration
        self._base = transport.base
        self.host = urlsplit(self._base).netloc or self._base
        """``host[:port]`` of the API server, the ``host`` label of the metrics."""
        self.user_agent = user_agent
        """Sent as ``User-Agent`` on every request (audit logs group requests by it)."""
        rate, size = client_limit(qps, burst)
        self.limiters = {name: TokenBucket(rate, size) for name in BUDGETS}
        """One client-side token bucket per budget (:data:`BUDGETS`); watches bypass them."""
        self.limiter = self.limiters["default"]
        """The ``default`` budget's bucket."""
        self._timeout = aiohttp.ClientTimeout(total=request_timeout)
        self.max_retries = max_retries
        """How many times a request refused with ``Retry-After`` is sent again."""
        # Metric children by label values, looked up once (every request updates them).
        self._m_requests: dict[tuple[str, str], Any] = {}
        self._m_durations: dict[str, Any] = {}
        self._m_waits: dict[str, Any] = {}
        self._m_retries: dict[tuple[str, str], Any] = {}

    def _count_request(self, code: str, method: str) -> None:
        child = self._m_requests.get((code, method))
        if child is None:
            child = self._m_requests[code, method] = REQUESTS_TOTAL.labels(code, method, self.host)
        child.inc()

    def _count_retry(self, code: str, method: str) -> None:
        child = self._m_retries.get((code, method))
        if child is None:
            child = self._m_retries[code, method] = REQUEST_RETRIES_TOTAL.labels(
                code, method, self.host
            )
        child.inc()

    def _observe(self, children: dict[str, Any], family: Any, method: str, value: float) -> None:
        child = children.get(method)
        if child is None:
            child = children[method] = family.labels(method, self.host)
        child.observe(value)

    @classmethod
    async def from_config(
        cls,
        kubeconfig: str | None = None,
        *,
        context: str | None = None,
        qps: float = -1,
        burst: int = 0,
        user_agent: str = "msop",
        request_timeout: float | None = 60.0,
        max_connections: int | None = 100,
    ) -> KubeClient:
        """Load ``kubeconfig`` (or ``$KUBECONFIG``; else the in-cluster service account).

        Raises kubernetes_asyncio's ``ConfigException`` when no usable config is found.
        Must be called with a running event loop (the HTTP session binds to it).
        """
        # Imported here, after the lazy packages are registered: see msop.kube.k8sconfig.
        k8sconfig.install()
        from kubernetes_asyncio import client as k8s_client
        from kubernetes_asyncio import config as k8s_config

        configuration = k8s_client.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or None
        if path is not None:
            await k8s_config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        return cls.from_configuration(
            configuration,
            qps=qps,
            burst=burst,
            user_agent=user_agent,
            request_timeout=request_timeout,
            max_connections=max_connections,
        )

    @classmethod
    def from_configuration(
        cls,
        configuration: Any,
        *,
        qps: float = -1,
        burst: int = 0,
        user_agent: str = "msop",
        request_timeout: float | None = 60.0,
        max_connections: int | None = 100,
    ) -> KubeClient:
        """Wrap a kubernetes_asyncio ``Configuration`` (host, TLS, ``api_key`` ...).

        ``max_connections`` bounds the HTTP connection pool (None: unbounded). Every open
        watch holds one connection for its whole life, so keep it above the number of
        informers plus the request concurrency, or requests queue for a free connection.
        Call this from inside a running event loop.
        """
        return cls(
            Transport(configuration, max_connections=max_connections),
            qps=qps,
            burst=burst,
            user_agent=user_agent,
            request_timeout=request_timeout,
        )

    async def close(self) -> None:
        """Close the HTTP session; open watches fail with ApiUnavailable. Idempotent."""
        await self.transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- plumbing ---------------------------------------------------------------------

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if content_type is not None:
            headers["Content-Type"] = content_type
        auth = await self._configuration.auth_settings()
        token = auth.get("BearerToken")
        if token and token.get("value"):
            headers["Authorization"] = token["value"]
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        budget: str = "default",
    ) -> Any:
        """Send one throttled request and return the parsed JSON body (None if empty).

        ``path`` starts with ``/api`` or ``/apis``; ``budget`` names the token bucket it
        waits on (:data:`BUDGETS`). A refusal with ``Retry-After`` is retried (see the
        module docstring). Raises ApiError / ApiUnavailable / ApiTimeout as described there.
        """
        headers = await self._headers(
            content_type or ("application/json" if body is not None else None)
        )
        retries = 0
        first_id: str | None = None
        while True:
            start = time.monotonic()
            resp = await self._open(
                method, path, query=query, headers=headers, body=body,
                client_timeout=self._timeout, budget=budget,
            )  # fmt: skip
            try:
                try:
                    data = await resp.read()
                finally:
                    resp.release()
            except TimeoutError as e:
                raise ApiTimeout(f"{method} {path}: timed out") from e
            except _TRANSPORT_ERRORS as e:
                raise ApiUnavailable(f"{method} {path}: {transport_reason(e)}") from e
            self._observe(self._m_durations, REQUEST_DURATION, method, time.monotonic() - start)
            if 200 <= resp.status < 300:
                return _decode(data)
            retry_after = _retry_after(resp.headers)
            wait = _retry_wait(resp.status, retry_after) if retries < self.max_retries else None
            if wait is None:
                raise ApiError.from_status(resp.status, _decode(data), retry_after=retry_after)
            retries += 1
            self._count_retry(str(resp.status), method)
            first_id = first_id or resp.headers.get(AUDIT_ID)
            if first_id:
                headers = {**headers, AUDIT_ID: f"{first_id}{RETRY_AUDIT_SUFFIX}{retries}"}
            await _sleep(wait)

    async def _open(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        headers: dict[str, str],
        client_timeout: aiohttp.ClientTimeout,
        body: Any = None,
        throttle: bool = True,
        budget: str = "default",
    ) -> aiohttp.ClientResponse:
        """Send a request and return the response with its body unread; every request
        (throttled unless ``throttle=False``, for watches) is counted in
        ``rest_client_requests_total``. Raises ApiTimeout / ApiUnavailable when no answer
        comes."""
        if throttle:
            waited = await self.limiters[budget].wait()
            self._observe(self._m_waits, RATE_LIMITER_DURATION, method, waited)
        gate = self.transport.gate
        if not gate.is_open:
            HELD_TOTAL.labels(self.host).inc()
            await gate.wait()
        contact = self.contact
        try:
            resp = await self.transport.request(
                method, path, query=query, headers=headers, body=body, client_timeout=client_timeout
            )
        except TimeoutError as e:
            self._count_request("<error>", method)
            contact.unanswered()
            raise ApiTimeout(f"{method} {path}: timed out") from e
        except _TRANSPORT_ERRORS as e:
            self._count_request("<error>", method)
            contact.unanswered()
            if server_unreachable(e) and gate.trip(headers):
                UNREACHABLE_TOTAL.labels(self.host).inc()
            raise ApiUnavailable(f"{method} {path}: {transport_reason(e)}") from e
        self._count_request(str(resp.status), method)
        contact.answered()
        return resp

    @staticmethod
    async def _raise_for_status(resp: aiohttp.ClientResponse) -> None:
        """ApiError from a non-2xx response (its body read if it can be)."""
        if 200 <= resp.status < 300:
            return
        try:
            data = await resp.read()
        except (TimeoutError, *_TRANSPORT_ERRORS):
            data = b""
        raise ApiError.from_status(
            resp.status, _decode(data), retry_after=_retry_after(resp.headers)
        )

    async def stream(
        self, path: str, *, query: Mapping[str, str] | None = None, accept: str = "*/*"
    ) -> AsyncGenerator[bytes, None]:
        """GET ``path`` and yield the raw body in chunks as they arrive (pod logs, any
        non-JSON or endless body). Throttled and counted like every request; no read
        timeout (a followed log may be quiet for long). Raises ApiError for a non-2xx
        answer and ApiUnavailable when no answer comes or the stream breaks. Close the
        generator (``contextlib.aclosing``) to end the request early.
        """
        headers = await self._headers(None)
        headers["Accept"] = accept
        resp = await self._open(
            "GET", path, query=query, headers=headers,
            client_timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )  # fmt: skip
        try:
            await self._raise_for_status(resp)
            while True:
                try:
                    chunk = await resp.content.readany()
                except _TRANSPORT_ERRORS as e:
                    raise ApiUnavailable(f"GET {path}: stream broken: {transport_reason(e)}") from e
                if not chunk:
                    return
                yield chunk
        finally:
            _drop(resp)

    # -- verbs ------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> dict[str, Any]:
        """GET one object. Raises ApiError (``is_not_found``) when it does not exist."""
        result: dict[str, Any] = await self.request(
            "GET", res.path(namespace, name), budget=budget_of(res)
        )
        return result

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_: str | None = None,
        shard_selector: str | None = None,
    ) -> dict[str, Any]:
        """List one page: a List dict with ``items`` and ``metadata.resourceVersion``.

        ``namespace=None`` lists all namespaces of a namespaced resource. A stale
        ``continue_`` token raises ApiError with ``is_gone``. ``shard_selector``: the
        API server's ``shardSelector`` (alpha, ``ShardedListAndWatch``); a server
        without it ignores it, and its answer has no ``metadata.shardInfo``.
        """
        query = _selectors(label_selector, field_selector, shard_selector)
        if resource_version is not None:
            query["resourceVersion"] = resource_version
        if limit is not None:
            query["limit"] = str(limit)
        if continue_:
            query["continue"] = continue_
        result: dict[str, Any] = await self.request(
            "GET", res.path(namespace), query=query, budget=budget_of(res)
        )
        if result.get("items") is None:
            result["items"] = []
        return result

    async def list_all(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        shard_selector: str | None = None,
    ) -> dict[str, Any]:
        """List every object with pages of ``limit``, as one List dict.

        The result's ``metadata.resourceVersion`` is the first page's, i.e. the snapshot
        all pages belong to. If the continue token expires mid-way (410) the list is
        redone in one unpaginated request, as client-go's pager does.

        ``transform`` is applied to each item as its page arrives, so a caller that keeps
        a slimmer form never holds every full object of a long list at once.
        """

        def items_of(page: dict[str, Any]) -> list[dict[str, Any]]:
            items: list[dict[str, Any]] = page["items"]
            return items if transform is None else [transform(o) for o in items]

        first = await self.list(
            res,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            shard_selector=shard_selector,
        )
        items = first["items"] = items_of(first)
        token = first.get("metadata", {}).get("continue")
        while token:
            try:
                page = await self.list(
                    res,
                    namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    limit=limit,
                    continue_=token,
                    shard_selector=shard_selector,
                )
            except ApiError as e:
                if e.status != 410 or isinstance(e, ApiUnavailable):
                    raise
                whole = await self.list(
                    res,
                    namespace,
                    label_selector=label_selector,
                    field_selector=field_selector,
                    shard_selector=shard_selector,
                )
                whole["items"] = items_of(whole)
                return whole
            items.extend(items_of(page))
            token = page.get("metadata", {}).get("continue")
            del page  # not held while the next page is fetched
        first.setdefault("metadata", {}).pop("continue", None)
        first["metadata"].pop("remainingItemCount", None)
        return first

    async def create(
        self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        """POST a new object; ``namespace`` defaults to ``body.metadata.namespace``.

        Raises ApiError with ``is_already_exists`` when the name is taken.
        """
        if namespace is None and res.namespaced:
            namespace = body.get("metadata", {}).get("namespace")
        result: dict[str, Any] = await self.request(
            "POST", res.path(namespace), body=body, budget=budget_of(res)
        )
        return result

    def _object_path(self, res: Resource, body: Mapping[str, Any], sub: str | None) -> str:
        meta = body.get("metadata", {})
        namespace = meta.get("namespace") if res.namespaced else None
        return res.path(namespace, meta["name"], sub)

    async def replace(self, res: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the whole object (name/namespace from its metadata).

        With ``metadata.resourceVersion`` set, a stale write raises ApiError ``is_conflict``.
        """
        result: dict[str, Any] = await self.request(
            "PUT", self._object_path(res, body, None), body=body, budget=budget_of(res)
        )
        return result

    async def replace_status(self, res: Resource, body: Mapping[str, Any]) -> dict[str, Any]:
        """PUT the ``status`` subresource; optimistic concurrency as for :meth:`replace`."""
        result: dict[str, Any] = await self.request(
            "PUT", self._object_path(res, body, "status"), body=body,
            budget=budget_of(res, "status"),
        )  # fmt: skip
        return result

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool | None = None,
    ) -> dict[str, Any]:
        """PATCH an object (or a subresource such as ``status``).

        ``patch_type``: ``merge`` (RFC 7386), ``json`` (RFC 6902 list of operations),
        ``strategic`` (built-in types only) or ``apply`` (server-side apply; needs
        ``field_manager``, ``force`` takes over conflicting fields).
        """
        query: dict[str, str] = {}
        if field_manager is not None:
            query["fieldManager"] = field_manager
        if force is not None:
            query["force"] = "true" if force else "false"
        result: dict[str, Any] = await self.request(
            "PATCH",
            res.path(namespace, name, subresource),
            query=query,
            body=patch,
            content_type=_PATCH_CONTENT_TYPES[patch_type],
            budget=budget_of(res, subresource),
        )
        return result

    async def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: Literal["Foreground", "Background", "Orphan"] | None = None,
        uid_precondition: str | None = None,
        resource_version_precondition: str | None = None,
        grace_period_seconds: int | None = None,
    ) -> dict[str, Any] | None:
        """DELETE an object.

        Returns the object when the server answers with it (deletion pending on finalizers
        or graceful termination), or None when it answers with a success Status. Raises
        ApiError ``is_not_found`` when absent, ``is_conflict`` when a precondition fails.
        """
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions: dict[str, str] = {}
        if uid_precondition is not None:
            preconditions["uid"] = uid_precondition
        if resource_version_precondition is not None:
            preconditions["resourceVersion"] = resource_version_precondition
        if preconditions:
            options["preconditions"] = preconditions
        result = await self.request(
            "DELETE", res.path(namespace, name), body=options, budget=budget_of(res)
        )
        if not isinstance(result, dict) or result.get("kind") == "Status":
            return None
        return result

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int | None = None,
        allow_bookmarks: bool = True,
        read_timeout: float | None = None,
        shard_selector: str | None = None,
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Stream watch events ``{"type": ..., "object": {...}}`` line by line.

        ``type`` is ADDED, MODIFIED, DELETED or BOOKMARK. The iterator ends when the
        server closes the stream (e.g. after ``timeout_seconds``). An ``ERROR`` event
        raises ApiError built from its Status (410 Expired -> ``is_gone``). A non-2xx
        answer raises ApiError; a broken stream raises ApiUnavailable; no byte for
        ``read_timeout`` seconds raises ApiTimeout (detects silent, stuck streams).

        The stream is not throttled and not buffered. Close it promptly with
        ``contextlib.aclosing`` when you stop early; that closes the connection.
        """
        query: dict[str, str] = {"watch": "true", "resourceVersion": resource_version}
        query.update(_selectors(label_selector, field_selector, shard_selector))
        if allow_bookmarks:
            query["allowWatchBookmarks"] = "true"
        if timeout_seconds is not None:
            query["timeoutSeconds"] = str(timeout_seconds)
        path = res.path(namespace)
        headers = await self._headers(None)
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._timeout.total, sock_read=read_timeout
        )
        resp = await self._open(
            "GET", path, query=query, headers=headers, client_timeout=timeout, throttle=False
        )
        try:
            await self._raise_for_status(resp)
            content = resp.content
            while True:
                try:
                    line = await content.readline()
                except TimeoutError as e:
                    self.contact.unanswered()
                    raise ApiTimeout(f"watch {path}: no data for {read_timeout} s") from e
                except _TRANSPORT_ERRORS as e:
                    self.contact.unanswered()
                    raise ApiUnavailable(f"watch {path}: {transport_reason(e)}") from e
                if not line:
                    return
                if line.isspace():
                    continue
                try:
                    event: dict[str, Any] = orjson.loads(line)
                except ValueError as e:
                    raise ApiUnavailable(f"watch {path}: undecodable line {line[:200]!r}") from e
                if event.get("type") == "ERROR":
                    obj = event.get("object")
                    code = obj.get("code", 500) if isinstance(obj, dict) else 500
                    raise ApiError.from_status(code if isinstance(code, int) else 500, obj)
                yield event
        finally:
            # Dropping (not releasing) the connection: the body was not fully read.
            _drop(resp)


def _selectors(label: str | None, field: str | None, shard: str | None) -> dict[str, str]:
    """A list's or watch's selectors as query parameters (the empty ones left out)."""
    query = {"labelSelector": label, "fieldSelector": field, "shardSelector": shard}
    return {k: v for k, v in query.items() if v}
