"""The manager's HTTP endpoints: ``/healthz``, ``/readyz`` and ``/metrics`` (aiohttp).

* ``/healthz`` and ``/readyz`` run their named checks (plain callables returning True when
  healthy; an exception counts as failing). All pass -> ``200 ok``; otherwise ``500`` with
  one ``[-]name failed`` line per failing check, like controller-runtime's healthz. Add
  ``?verbose`` to list passing checks too.
* ``/metrics`` serves a Prometheus registry (default :data:`msop.metrics.REGISTRY`) in the
  text exposition format.

A bind address is ``host:port``; ``:port`` means every interface; ``"0"`` disables the
endpoint; port ``0`` picks a free port (see :attr:`HttpServer.port`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from msop.metrics import REGISTRY

__all__ = ["Checks", "HttpServer", "health_routes", "metrics_routes", "parse_bind_address"]

Check = Callable[[], bool]


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


def _probe_handler(checks: Checks) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        results = checks.run()
        ok = all(results.values())
        verbose = "verbose" in request.query
        lines = [
            f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}"
            for name, passed in results.items()
            if verbose or not passed
        ]
        if ok:
            text = "\n".join([*lines, "ok"]) if verbose else "ok"
            return web.Response(text=text)
        return web.Response(status=500, text="\n".join([*lines, "check failed"]))

    return handle


def health_routes(app: web.Application, healthz: Checks, readyz: Checks) -> None:
    """Mount ``/healthz`` and ``/readyz`` on ``app``."""
    app.router.add_get("/healthz", _probe_handler(healthz))
    app.router.add_get("/readyz", _probe_handler(readyz))


def metrics_routes(app: web.Application, registry: CollectorRegistry = REGISTRY) -> None:
    """Mount ``/metrics`` (Prometheus text format of ``registry``) on ``app``."""

    async def handle(request: web.Request) -> web.StreamResponse:
        body = generate_latest(registry)
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app.router.add_get("/metrics", handle)


class HttpServer:
    """One aiohttp application bound to one address; ``start()``/``stop()``."""

    def __init__(self, app: web.Application, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self._host = host
        self._port = port
        self.port = port
        """The bound port (the real one after ``start()`` when 0 was asked for)."""

    async def start(self) -> None:
        """Bind and serve. Raises OSError when the address is taken."""
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop serving and release the port. Idempotent."""
        await self._runner.cleanup()
