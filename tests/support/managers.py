"""The controller manager without a cluster: a manager on loopback ports whose client has no
API server behind it, and a runnable that takes a moment to stop (the manager's and the
lease guard's tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from msop.controller.manager import Manager
from tests.support.clients import NoApiServer


class Sleeper:
    """A runnable that needs a moment to stop after cancellation."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.started = asyncio.Event()
        self.finished_cleanly = False

    async def run(self) -> None:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # in-flight work finishing
            self.finished_cleanly = True
            raise


def manager(**kw: Any) -> Manager:
    return Manager(
        NoApiServer(),
        metrics_bind_address="127.0.0.1:0",
        health_probe_bind_address="127.0.0.1:0",
        **kw,
    )
