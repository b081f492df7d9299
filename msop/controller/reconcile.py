"""The reconcile contract: a Request names an object, a Reconciler makes the world match it.

A :class:`Reconciler` is level-triggered: it gets only the key (:class:`Request`), reads the
current state from caches, and converges. It never learns which event caused the call.

What the controller does with the outcome of ``reconcile``:

* returns ``Result()`` - success: the key's backoff is forgotten;
* returns ``Result(requeue_after=s)`` (s > 0) - backoff forgotten, the key is re-added after
  ``s`` seconds;
* returns ``Result(requeue=True)`` - the key is re-added with rate limiting (backoff grows);
* raises :class:`TerminalError` - logged and counted, **not** retried (retrying cannot help,
  e.g. an invalid spec); a later event for the key still triggers a reconcile;
* raises any other ``Exception`` - logged with context and re-added with rate limiting.

``asyncio.CancelledError`` is not an error: it means the controller is stopping.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Reconciler", "Request", "Result", "StopAware", "TerminalError"]


@dataclass(frozen=True, slots=True)
class Request:
    """The key of the object to reconcile. ``namespace`` is ``""`` for cluster-scoped objects."""

    namespace: str
    """The object's namespace, ``""`` for a cluster-scoped object."""
    name: str
    """The object's name."""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, slots=True)
class Result:
    """What a successful reconcile asks for next; the default means "done"."""

    requeue: bool = False
    """Re-add the key with rate limiting (exponential backoff), e.g. while waiting."""
    requeue_after: float | None = None
    """Re-add the key after this many seconds (takes precedence over ``requeue``)."""

    def is_zero(self) -> bool:
        """True when the result asks for nothing."""
        return not self.requeue and not self.requeue_after


class Reconciler(Protocol):
    """Drives the object named by a request towards its desired state."""

    async def reconcile(self, request: Request) -> Result:
        """Reconcile ``request``; see the module docstring for how outcomes are handled."""
        ...


@runtime_checkable
class StopAware(Protocol):
    """A reconciler that wants to know when its controller has stopped (to report what it
    leaves undone); :meth:`stopped` is called once, after the last reconcile."""

    def stopped(self) -> None: ...


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix; the key is not requeued.

    Counted in ``controller_runtime_terminal_reconcile_errors_total`` (and in
    ``controller_runtime_reconcile_errors_total``). Chain the cause with ``raise ... from``.
    """
