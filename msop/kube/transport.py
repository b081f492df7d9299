"""The HTTP session under :class:`~msop.kube.client.KubeClient`.

TLS and credentials come from a kubernetes_asyncio ``Configuration`` (kubeconfig or
in-cluster); the session is ours, so that each request costs only what it must:

- **No per-request environment lookups.** aiohttp with ``trust_env=True`` (what
  kubernetes_asyncio's REST client uses) reads ``~/.netrc`` and the proxy variables on
  every request, each in a worker thread. Here the proxy is resolved once, when the
  session is made: the kubeconfig's ``proxy-url`` if it has one, else ``HTTPS_PROXY``/
  ``HTTP_PROXY`` unless ``NO_PROXY`` exempts the API server - as client-go does.
  Credentials in the proxy URL (``http://user:pass@proxy:3128``) are sent to the proxy.
  ``.netrc`` is not read (client-go does not read it either).
- **Compact JSON bodies** (no spaces after separators), encoded with orjson.
- **One connection pool** of ``max_connections`` (0 = unbounded), and no cookie jar.
- **Abandoned requests never land later.** Every socket closes with a reset
  (``SO_LINGER`` 0): when a request is given up (timeout, cancellation, a leader that
  lost its Lease exiting), bytes still queued in the kernel are discarded, not delivered
  by the kernel's retransmissions once a partitioned link comes back. A plain close
  would keep sending them for up to a minute after the process has moved on or exited.
  A TLS connection closes its socket at most :data:`SSL_SHUTDOWN_TIMEOUT` after it is
  closed (asyncio would wait 30 s for the peer's close_notify, which a partitioned peer
  never sends, with the request's bytes still queued).
- **Requests wait out a restarting API server** (:class:`ReadyGate`). When a connection
  is refused or dropped, the transport's gate closes: requests then wait while one probe
  asks ``GET /readyz`` (which every authenticated user may read) until it answers 200,
  at most :data:`MAX_HOLD` seconds. Without it every reconcile fails during the outage
  and is retried with backoff, and a server that has just come back refuses requests
  until its authorizer's caches are filled (403s for what RBAC allows); the retries of
  those failures pile up behind the workqueue's rate limiter and run long after the
  server is back. A server that never says ready (``/readyz`` forbidden, say) costs a
  request at most :data:`MAX_HOLD` seconds once it is unreachable.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import os
import socket
import ssl
import struct
import time
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import aiohttp
import orjson

from msop.kube.contact import Contact

#: Watch events carrying large objects can exceed aiohttp's default line buffer; etcd
#: accepts requests up to 1.5 MiB, so 2 MiB holds any object the API server can store.
READ_BUFSIZE = 2**21

#: Seconds a TLS connection that is closed waits for the API server's close_notify before
#: its socket is closed anyway (with a reset). asyncio's default is 30 s: a request given
#: up while the link is cut (a shard's reconciles cancelled when its Lease is lost, the
#: process going on) kept its socket, and the kernel delivered the request once the link
#: came back, seconds after another replica had taken the job. A partitioned peer never
#: answers; a reachable one answers well within this.
SSL_SHUTDOWN_TIMEOUT = 0.1


def env_proxy(url: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy the environment asks for to reach ``url`` (None: connect directly).

    ``https_proxy``/``HTTPS_PROXY`` for https URLs, ``http_proxy``/``HTTP_PROXY`` for
    http (the lower-case spelling wins). ``no_proxy``/``NO_PROXY`` exempts hosts: ``*``,
    host names, domain suffixes (``.svc`` or ``svc``), ``host:port``, IP addresses and
    CIDR ranges. ``environ`` defaults to ``os.environ``.
    """
    env = os.environ if environ is None else environ

    def var(name: str) -> str:
        return (env.get(name) or env.get(name.upper()) or "").strip()

    parts = urlsplit(url)
    if not parts.hostname or _bypassed(parts.hostname, parts.port, var("no_proxy")):
        return None
    return var(f"{parts.scheme or 'https'}_proxy") or None


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    host = host.lower()
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for entry in no_proxy.split(","):
        name = entry.strip().lower()
        if name == "*":
            return True
        if not name:
            continue
        if ip is not None and "/" in name:
            try:
                if ip in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = name.lstrip(".")
        if name in (host, f"{host}:{port}") or host.endswith("." + name):
            return True
    return False


def split_proxy_credentials(proxy: str | None) -> tuple[str | None, str | None]:
    """``http://user:pass@proxy:3128`` -> (``http://proxy:3128``, ``Basic dXNlcjpwYXNz``).

    The second part is the ``Proxy-Authorization`` header value (None without
    credentials): aiohttp does not take credentials from the proxy URL itself.
    """
    if not proxy:
        return None, None
    parts = urlsplit(proxy)
    if not parts.username:
        return proxy, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
    header = "Basic " + base64.b64encode(user_pass.encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=netloc)), header


_RESET_ON_CLOSE = struct.pack("ii", 1, 0)


def reset_on_close_socket(addr_info: tuple[Any, ...]) -> socket.socket:
    """A TCP socket for ``addr_info`` (family, type, proto, ...) whose close sends a reset
    and discards unsent bytes (``SO_LINGER`` on, 0 s); see the module docstring."""
    family, type_, proto = addr_info[0], addr_info[1], addr_info[2]
    sock = socket.socket(family=family, type=type_, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _RESET_ON_CLOSE)
    return sock


def ssl_context(configuration: Any) -> ssl.SSLContext:
    """The TLS context a ``Configuration`` describes (CA, client certificate, verify)."""
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(configuration, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


#: The longest a request waits for an unreachable API server to say it is ready (seconds).
MAX_HOLD = 10.0
#: The first pause between two ``/readyz`` probes; it doubles up to :data:`PROBE_MAX_INTERVAL`.
PROBE_INTERVAL = 0.25
PROBE_MAX_INTERVAL = 2.0

Probe = Callable[[Mapping[str, str]], Awaitable[int]]
"""Sends ``GET /readyz`` with the given headers and returns the HTTP status."""


def server_unreachable(error: BaseException) -> bool:
    """Whether ``error`` means the API server refused or dropped the connection (not a
    timeout, which a partition gives, and not a TLS failure, which waiting cannot mend)."""
    if isinstance(error, aiohttp.ClientSSLError):
        return False
    return isinstance(
        error, aiohttp.ClientConnectorError | aiohttp.ServerDisconnectedError | ConnectionError
    )


class ReadyGate:
    """Holds requests while the API server is unreachable, until its ``/readyz`` says 200.

    :meth:`trip` closes the gate (a request found the server unreachable) and starts one
    probe task; :meth:`wait` returns at once while the gate is open, else when it opens or
    after ``max_hold`` seconds. The probe opens the gate on a 200, or gives up after
    ``max_hold`` seconds of probing (the next unreachable request closes it again).
    ``trips`` counts the closings.
    """

    def __init__(
        self,
        probe: Probe,
        *,
        max_hold: float = MAX_HOLD,
        interval: float = PROBE_INTERVAL,
        max_interval: float = PROBE_MAX_INTERVAL,
    ) -> None:
        self._probe = probe
        self.max_hold = max_hold
        self._interval = interval
        self._max_interval = max_interval
        self._opened: asyncio.Event | None = None  # made lazily, in the running loop
        self._task: asyncio.Task[None] | None = None
        self.trips = 0

    @property
    def is_open(self) -> bool:
        return self._task is None

    def trip(self, headers: Mapping[str, str]) -> bool:
        """Close the gate and start probing; False if it was already closed."""
        if self._task is not None:
            return False
        self.trips += 1
        self._opened = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._watch(dict(headers)))
        return True

    async def wait(self) -> float:
        """Wait while the gate is closed (at most ``max_hold`` s); return the seconds waited."""
        if self._task is None or self._opened is None:
            return 0.0
        start = time.monotonic()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.max_hold):
                await self._opened.wait()
        return time.monotonic() - start

    async def _watch(self, headers: Mapping[str, str]) -> None:
        deadline = time.monotonic() + self.max_hold
        delay = self._interval
        try:
            while True:
                try:
                    status = await self._probe(headers)
                except (aiohttp.ClientError, OSError, TimeoutError):
                    status = 0
                if status == 200 or time.monotonic() + delay > deadline:
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._max_interval)
        finally:
            self._task = None
            if self._opened is not None:
                self._opened.set()

    async def close(self) -> None:
        """Stop probing and let every waiter through."""
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None  # a task cancelled before it ran never reached its finally
        if self._opened is not None:
            self._opened.set()


class Transport:
    """Sends HTTP requests to one API server; see the module docstring.

    Make it inside a running event loop (the aiohttp session binds to it); close it
    with :meth:`close`.
    """

    def __init__(self, configuration: Any, *, max_connections: int | None = 100) -> None:
        self.configuration = configuration
        self.base = str(configuration.host).rstrip("/")
        # Older kubernetes_asyncio Configurations lack some of these attributes.
        self.server_hostname: str | None = getattr(configuration, "tls_server_name", None) or None
        self.proxy, proxy_authorization = split_proxy_credentials(
            getattr(configuration, "proxy", None) or env_proxy(self.base)
        )
        proxy_headers = dict(getattr(configuration, "proxy_headers", None) or {})
        if proxy_authorization and "Proxy-Authorization" not in proxy_headers:
            proxy_headers["Proxy-Authorization"] = proxy_authorization
        self.proxy_headers: Mapping[str, str] | None = proxy_headers or None
        with warnings.catch_warnings():
            # aiohttp marks the parameter deprecated (to go in 4.0); without it a TLS
            # connection closed mid-request waits up to 30 s on the peer's close_notify
            # before its socket closes (see SSL_SHUTDOWN_TIMEOUT).
            warnings.simplefilter("ignore", DeprecationWarning)
            connector = aiohttp.TCPConnector(
                limit=max_connections or 0,
                ssl=ssl_context(configuration),
                socket_factory=reset_on_close_socket,
                ssl_shutdown_timeout=SSL_SHUTDOWN_TIMEOUT,
            )
        # The API server sets no cookies: a dummy jar spares every response a cookie parse.
        self.session = aiohttp.ClientSession(
            connector=connector,
            trust_env=False,
            read_bufsize=READ_BUFSIZE,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        self.gate = ReadyGate(self._probe_ready)
        """Holds requests while the API server is unreachable (see the module docstring)."""
        self.contact = Contact()
        """When the API server stopped answering the requests sent through this
        transport, and for how long (:mod:`msop.kube.contact`)."""

    async def _probe_ready(self, headers: Mapping[str, str]) -> int:
        timeout = aiohttp.ClientTimeout(total=PROBE_MAX_INTERVAL)
        async with self.session.get(
            self.base + "/readyz",
            headers=headers,
            timeout=timeout,
            proxy=self.proxy,
            proxy_headers=self.proxy_headers,
            server_hostname=self.server_hostname,
        ) as resp:
            await resp.read()
            return resp.status

    async def close(self) -> None:
        await self.gate.close()
        await self.session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None,
        headers: Mapping[str, str],
        body: Any,
        client_timeout: aiohttp.ClientTimeout,
    ) -> aiohttp.ClientResponse:
        """Send one request; the response comes back with its body unread.

        ``body``: ``None``, ``bytes``/``str`` (sent as is) or a JSON value (encoded).
        Raises aiohttp/OS errors as they come; the caller maps them.
        """
        url = self.base + path
        if query:
            url += "?" + urlencode(query)
        data: bytes | str | None = (
            body if body is None or isinstance(body, bytes | str) else orjson.dumps(body)
        )
        return await self.session.request(
            method,
            url,
            headers=headers,
            data=data,
            timeout=client_timeout,
            proxy=self.proxy,
            proxy_headers=self.proxy_headers,
            server_hostname=self.server_hostname,
        )
