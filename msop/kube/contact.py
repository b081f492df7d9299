"""When the API server stopped answering this process, and for how long.

Every request of a :class:`~msop.kube.client.KubeClient` reports to its transport's
:class:`Contact`: a response (any status: the server answered) or none (the connection
was refused, dropped or timed out, or a watch stream broke). An *outage* runs from the
first request that got no answer to the first answer after it. The process cannot tell
why (the API server down, the network cut, this process starved); it only knows that
for that long it saw nothing of the cluster and changed nothing in it.

A controller uses the outages to act on what others may have decided while it was cut
off (MultiKueue's manager gives a lost worker's jobs to another worker).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["Contact", "Outage"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Outage:
    """A time the API server did not answer: ``start`` is the first request that got no
    answer, ``end`` the first answer after it (UTC)."""

    start: datetime
    end: datetime

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


class Contact:
    """The outages of one API server, as this process saw them; the last ``keep`` are
    kept. ``now``: the wall clock (UTC), injected in tests.

    :meth:`answered` and :meth:`unanswered` are cheap and never raise: they are called on
    every request and every watch event."""

    def __init__(self, *, now: Callable[[], datetime] = _utcnow, keep: int = 16) -> None:
        self._now = now
        self._since: datetime | None = None
        self._outages: deque[Outage] = deque(maxlen=keep)
        self._subscribers: list[Callable[[Outage], None]] = []

    def subscribe(self, callback: Callable[[Outage], None]) -> None:
        """Call ``callback`` with each outage as it ends (on the event loop, from the
        request that got the first answer): it must be quick and must not raise."""
        self._subscribers.append(callback)

    def _ended(self, outage: Outage) -> None:
        self._outages.append(outage)
        for callback in self._subscribers:
            callback(outage)

    def answered(self) -> None:
        """The API server answered: an outage in progress ends now."""
        if self._since is not None:
            since, self._since = self._since, None
            self._ended(Outage(since, self._now()))

    def unanswered(self) -> None:
        """A request got no answer: an outage starts now, unless one already runs."""
        if self._since is None:
            self._since = self._now()

    def missed(self, since: datetime) -> None:
        """An outage an earlier process saw and this one inherits: nothing reached the API
        server for this controller from ``since`` (the last renewal of the Lease the earlier
        process held and did not release) until now (this process took the Lease over)."""
        now = self._now()
        if since < now:
            self._ended(Outage(since, now))

    @property
    def lost_since(self) -> datetime | None:
        """When the outage in progress started; None while the server answers."""
        return self._since

    def outages(self) -> list[Outage]:
        """The ended outages kept, oldest first."""
        return list(self._outages)
