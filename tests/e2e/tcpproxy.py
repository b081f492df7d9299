"""A TCP proxy for fault injection between the operator and the API server.

TLS passes through as raw bytes, so a kubeconfig whose server is the proxy works as is
(the serving certificate is for 127.0.0.1 either way). Three faults:

- ``freeze()``: every byte stops moving, in both directions, and connections stay open:
  a watch that stays open but delivers nothing. New connections are accepted and held.
  ``thaw()`` lets the held bytes through.
- ``freeze_open()``: the connections open now go silent (open, nothing moves), new ones
  flow: the watches of an idle client go silent, its new requests are served.
- ``hold_new()`` + ``cut()``: every open connection is closed, new ones are accepted but
  not connected upstream until ``thaw()``: a network partition the client notices.

``closed_by_client`` records when the client side of each connection hung up, so a test
can tell when a frozen connection was given up.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field


@dataclass
class _Conn:
    opened: float
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    client_closed: float | None = None
    flowing: asyncio.Event = field(default_factory=asyncio.Event)


class TcpProxy:
    def __init__(self, upstream_host: str, upstream_port: int, source: str | None = None) -> None:
        """``source``: the local address upstream connections come from (e.g. 127.0.0.2),
        so that the API server's audit log tells the clients of two proxies apart."""
        self.upstream = (upstream_host, upstream_port)
        self.source = source
        self.port = 0
        self.conns: list[_Conn] = []
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def freeze(self) -> list[_Conn]:
        """Stop all traffic without closing anything; return the connections open now."""
        self._flowing.clear()
        return [c for c in self.conns if c.client_closed is None]

    def freeze_open(self) -> list[_Conn]:
        """Stop the traffic of the connections open now, without closing them; new
        connections flow. Return the frozen ones."""
        frozen = [c for c in self.conns if c.client_closed is None]
        for c in frozen:
            c.flowing.clear()
        return frozen

    def hold_new(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()
        for c in self.conns:
            c.flowing.set()

    def cut(self) -> None:
        for c in self.conns:
            for w in c.writers:
                w.close()

    async def _serve(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # owned: cancelled and awaited by __aexit__
        conn = _Conn(opened=time.monotonic(), writers=[cwriter])
        conn.flowing.set()
        self.conns.append(conn)
        try:
            await self._flowing.wait()
            local = (self.source, 0) if self.source else None
            ureader, uwriter = await asyncio.open_connection(*self.upstream, local_addr=local)
            conn.writers.append(uwriter)
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self._pipe(creader, uwriter, conn, client_side=True))
                tg.create_task(self._pipe(ureader, cwriter, conn, client_side=False))
        except (OSError, ExceptionGroup):
            pass
        except asyncio.CancelledError:
            # Only __aexit__ cancels it, and awaits it. End normally: the callback that
            # Python 3.11's start_server adds to this task calls task.exception(), which
            # raises for a cancelled task, and asyncio logged that as an error at teardown.
            pass
        finally:
            for w in conn.writers:
                w.close()
            if conn.client_closed is None:
                conn.client_closed = time.monotonic()
            self._tasks.discard(task)

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        conn: _Conn,
        client_side: bool,
    ) -> None:
        """Copy one direction. Reading never stops (so a hang-up is seen at once, even
        while frozen); writing waits while frozen."""
        queue: asyncio.Queue[bytes] = asyncio.Queue()

        async def read() -> None:
            while data := await reader.read(65536):
                queue.put_nowait(data)
            if client_side and conn.client_closed is None:
                conn.client_closed = time.monotonic()
            queue.put_nowait(b"")

        async def write() -> None:
            while data := await queue.get():
                await self._flowing.wait()
                await conn.flowing.wait()
                writer.write(data)
                await writer.drain()

        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(read())
                tg.create_task(write())
        finally:
            # Closing one direction ends the other: the peer sees the connection close.
            for w in conn.writers:
                with contextlib.suppress(OSError):
                    w.close()
