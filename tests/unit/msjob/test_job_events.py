"""The MSJob watch's handler: every event enqueues the job, except the update that is
exactly our own status write (the pass that wrote it had planned from all else)."""

from __future__ import annotations

from typing import Any

from msop.controller.reconcile import Request
from msop.controller.workqueue import PRIORITY_LOW, PRIORITY_NORMAL
from msop.msjob.setup import _JobEvents


class Queue:
    def __init__(self) -> None:
        self.added: list[tuple[Request, int]] = []

    def add(self, item: Request, *, priority: int = PRIORITY_NORMAL) -> None:
        self.added.append((item, priority))


def _job(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": rv}}


def test_only_the_update_our_own_status_write_made_is_skipped() -> None:
    own = {(Request("ns", "j"), "7")}
    handler = _JobEvents(lambda request, rv: (request, rv) in own)
    q = Queue()
    handler.update(_job("6"), _job("7"), q)  # our write
    assert q.added == []
    handler.update(_job("7"), _job("8"), q)  # someone else's change after it
    handler.update(_job("7"), _job("7"), q)  # a relist's resync: same version
    handler.create(_job("7"), q)
    handler.delete(_job("7"), q)
    assert q.added == [
        (Request("ns", "j"), PRIORITY_NORMAL),
        (Request("ns", "j"), PRIORITY_LOW),
        (Request("ns", "j"), PRIORITY_NORMAL),
        (Request("ns", "j"), PRIORITY_NORMAL),
    ]
