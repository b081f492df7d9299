"""The manager's HTTP endpoints: ``/healthz``, ``/readyz`` and ``/metrics``.

* ``/healthz`` and ``/readyz`` run their named checks (plain callables returning True when
  healthy; an exception counts as failing). All pass -> ``200 ok``; otherwise ``500`` with
  one ``[-]name failed`` line per failing check, like controller-runtime's healthz. Add
  ``?verbose`` to list passing checks too.
* ``/metrics`` serves a Prometheus registry (default :data:`msop.metrics.REGISTRY`) in the
  text exposition format, or OpenMetrics, gzip-compressed or not, as the scraper asks.

A bind address is ``host:port``; ``:port`` means every interface; ``"0"`` disables the
endpoint; port ``0`` picks a free port (see :attr:`HttpServer.port`).

The server is a small HTTP/1.1 server on :func:`asyncio.start_server` (GET and HEAD, no
request bodies, keep-alive), not aiohttp's web server: three fixed read-only endpoints do
not need it, and importing it cost the operator about 2 MiB of RSS. Unknown paths answer
``404``, other methods on a known path ``405`` (``Allow: GET, HEAD``), malformed requests
``400`` (and the connection is closed).

A server may serve over TLS (``tls``: an ``ssl.SSLContext``, e.g. the ``context`` of a
:class:`~msop.controller.servingcert.ServingCert`) and may ``guard`` its routes: an async
callable that sees each request to a known path with an allowed method first and answers
a response to send instead (401, 403...), or None to serve it
(:class:`~msop.controller.delegatedauth.DelegatedAuth`). A handler or a guard that raises
gets the client a ``500``.
"""

from __future__ import annotations

import asyncio
import gzip
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote

from prometheus_client.exposition import CONTENT_TYPE_LATEST, choose_encoder, gzip_accepted

from msop.metrics import REGISTRY, CollectorRegistry

__all__ = [
    "Checks",
    "Guard",
    "HttpServer",
    "Request",
    "Response",
    "Routes",
    "health_routes",
    "metrics_routes",
    "parse_bind_address",
]

Check = Callable[[], bool]

TEXT = "text/plain; charset=utf-8"
#: The longest request line or header line, and the most header lines, a request may have.
MAX_LINE = 8190
MAX_HEADERS = 100
#: Seconds an idle keep-alive connection (or a slow request head) is kept open.
KEEPALIVE_TIMEOUT = 75.0
#: Seconds a client gets to complete the TLS handshake.
TLS_HANDSHAKE_TIMEOUT = 10.0


def parse_bind_address(address: str) -> tuple[str, int] | None:
    """``":8080"`` -> ``("0.0.0.0", 8080)``; ``"127.0.0.1:0"`` -> (host, 0); ``"0"`` -> None.

    Raises ValueError for anything else.
    """
    if address in ("0", ""):
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"bad bind address {address!r}; want host:port, :port or 0")
    return (host.strip("[]") or "0.0.0.0", int(port))


@dataclass
class Checks:
    """Named probe checks for one endpoint."""

    checks: dict[str, Check] = field(default_factory=dict)
    """name -> callable returning True when the check passes."""

    def add(self, name: str, check: Check) -> None:
        """Add (or replace) a check."""
        self.checks[name] = check

    def run(self) -> dict[str, bool]:
        """Evaluate every check; an exception counts as a failure."""
        results = {}
        for name, check in self.checks.items():
            try:
                results[name] = bool(check())
            except Exception:
                results[name] = False
        return results


@dataclass(frozen=True)
class Request:
    """What a handler sees of a request."""

    method: str
    path: str
    """Percent-decoded, without the query."""
    query: dict[str, str]
    headers: dict[str, str]
    """Lower-cased names."""


@dataclass(frozen=True)
class Response:
    """A complete response (the body is sent with a ``Content-Length``)."""

    status: int = 200
    body: bytes = b""
    content_type: str = TEXT
    headers: tuple[tuple[str, str], ...] = ()
    """More header lines, e.g. ``WWW-Authenticate`` of a 401."""


Handler = Callable[[Request], Response]
Routes = dict[str, Handler]
"""path -> handler of GET (and HEAD: the same response without its body)."""
Guard = Callable[[Request], Awaitable[Response | None]]
"""Sees a request before its handler: None serves it, a response is sent instead."""


def _text(status: int, text: str) -> Response:
    return Response(status, text.encode())


def _probe_handler(checks: Checks) -> Handler:
    def handle(request: Request) -> Response:
        results = checks.run()
        ok = all(results.values())
        verbose = "verbose" in request.query
        lines = [
            f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}"
            for name, passed in results.items()
            if verbose or not passed
        ]
        if ok:
            return _text(200, "\n".join([*lines, "ok"]) if verbose else "ok")
        return _text(500, "\n".join([*lines, "check failed"]))

    return handle


def health_routes(routes: Routes, healthz: Checks, readyz: Checks) -> None:
    """Mount ``/healthz`` and ``/readyz`` on ``routes``."""
    routes["/healthz"] = _probe_handler(healthz)
    routes["/readyz"] = _probe_handler(readyz)


def metrics_routes(routes: Routes, registry: CollectorRegistry = REGISTRY) -> None:
    """Mount ``/metrics`` on ``routes``: ``registry`` rendered by prometheus_client's
    exposition in the format the scraper's ``Accept`` asks for (OpenMetrics, else the
    Prometheus text format), gzip-compressed when its ``Accept-Encoding`` allows."""

    def handle(request: Request) -> Response:
        accept = request.headers.get("accept", "")
        encoder, content_type = choose_encoder(accept)
        if not accept:  # a plain GET (curl): the text format, labelled as it always was
            content_type = CONTENT_TYPE_LATEST
        body = encoder(registry)
        if gzip_accepted(request.headers.get("accept-encoding", "")):
            return Response(200, gzip.compress(body), content_type, (("Content-Encoding", "gzip"),))
        return Response(200, body, content_type)

    routes["/metrics"] = handle


class _BadRequest(Exception):
    pass


def _error(status: int) -> Response:
    return _text(status, f"{status}: {HTTPStatus(status).phrase}")


class HttpServer:
    """Serves ``routes`` on one address, over TLS with ``tls``, each request passed by
    ``guard`` first when there is one; ``start()``/``stop()``."""

    def __init__(
        self,
        routes: Routes,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        guard: Guard | None = None,
    ) -> None:
        self._routes = routes
        self._host = host
        self._port = port
        self._tls = tls
        self._guard = guard
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.port = port
        """The bound port (the real one after ``start()`` when 0 was asked for)."""

    async def start(self) -> None:
        """Bind and serve. Raises OSError when the address is taken."""
        tls = self._tls
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=MAX_LINE + 2, ssl=tls,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT if tls else None,
        )  # fmt: skip
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop serving, close open connections and release the port. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                try:
                    async with asyncio.timeout(KEEPALIVE_TIMEOUT):
                        head = await _read_head(reader)
                except (TimeoutError, OSError):  # OSError: ConnectionError, ssl.SSLError
                    return
                if head is None:
                    return
                try:
                    request, version = _parse_head(head)
                    keep_alive = _keep_alive(version, request.headers)
                    await _skip_body(reader, request.headers)
                except _BadRequest:
                    writer.write(_encode(_error(400), "GET", keep_alive=False))
                    await writer.drain()
                    return
                response = await self._respond(request)
                writer.write(_encode(response, request.method, keep_alive))
                await writer.drain()
                if not keep_alive:
                    return
        except (OSError, asyncio.IncompleteReadError):
            return
        finally:
            self._connections.discard(task)
            writer.close()

    async def _respond(self, request: Request) -> Response:
        handler = self._routes.get(request.path)
        if handler is None:
            return _error(404)
        if request.method not in ("GET", "HEAD"):
            return _error(405)
        try:
            if self._guard is not None:
                refused = await self._guard(request)
                if refused is not None:
                    return refused
            return handler(request)
        except Exception:
            return _error(500)


async def _read_head(reader: asyncio.StreamReader) -> list[bytes] | None:
    """The request line and header lines; None at a clean end of stream. Raises
    _BadRequest for lines or heads over the limits (through the caller's parse)."""
    lines: list[bytes] = []
    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            if not lines and not e.partial:
                return None
            raise ConnectionResetError from None
        except asyncio.LimitOverrunError:
            return [b""]  # unparsable: a 400
        line = line.rstrip(b"\r\n")
        if not line:
            if not lines:
                continue  # tolerated: empty lines before a request line (RFC 9112 2.2)
            return lines
        lines.append(line)
        if len(lines) > MAX_HEADERS + 1:
            return [b""]


def _parse_head(head: list[bytes]) -> tuple[Request, str]:
    try:
        method, target, version = head[0].decode("ascii").split(" ")
    except (UnicodeDecodeError, ValueError):
        raise _BadRequest from None
    if version not in ("HTTP/1.1", "HTTP/1.0") or not method.isalpha() or not method.isupper():
        raise _BadRequest
    if not target.startswith("/"):
        raise _BadRequest
    headers: dict[str, str] = {}
    for line in head[1:]:
        name, sep, value = line.decode("latin-1").partition(":")
        if not sep or not name or name != name.strip():
            raise _BadRequest
        headers[name.lower()] = value.strip()
    path, _, query = target.partition("?")
    return (
        Request(method, unquote(path), dict(parse_qsl(query, keep_blank_values=True)), headers),
        version,
    )


def _keep_alive(version: str, headers: dict[str, str]) -> bool:
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens


async def _skip_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> None:
    """Read and drop a request body (none of the endpoints takes one)."""
    if "transfer-encoding" in headers:
        raise _BadRequest  # chunked GETs: not worth supporting
    length = headers.get("content-length", "0")
    if not length.isdigit():
        raise _BadRequest
    if int(length) > 1 << 20:
        raise _BadRequest
    if int(length):
        await reader.readexactly(int(length))


def _encode(response: Response, method: str, keep_alive: bool) -> bytes:
    status = HTTPStatus(response.status)
    head = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
    ]
    if response.status == 405:
        head.append("Allow: GET, HEAD")
    head += [f"{name}: {value}" for name, value in response.headers]
    head.append("Connection: keep-alive" if keep_alive else "Connection: close")
    data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
    return data if method == "HEAD" else data + response.body
