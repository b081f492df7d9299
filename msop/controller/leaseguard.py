"""Hold a process's controllers while another controller's leader-election Lease is held.

Two controllers that manage the same objects must not run at once. When the other one
elects its leader through a ``coordination.k8s.io/v1`` Lease, that Lease is live
evidence: while its holder renews it, the other controller runs. :class:`LeaseGuard`
reads it (a GET every ``period`` seconds) while the process starts, and:

* :meth:`LeaseGuard.run`, a runnable, reads it until it is clear: absent, released
  (no ``holderIdentity``), or not renewed for its ``leaseDurationSeconds`` as seen on this
  process's own monotonic clock (the leader elector's rule: remote times are not compared
  with local time), or with a ``renewTime`` so old that no clock skew explains it
  (``leaseDurationSeconds + skew`` behind the local wall clock: a Lease left behind by a
  controller stopped long ago does not cost a wait at every start);
* :meth:`LeaseGuard.wait_until_clear` returns once it was seen clear, and
  :meth:`LeaseGuard.clear` says so (a readiness check).

The :class:`~msop.controller.manager.Manager` runs a guard given to
:meth:`~msop.controller.manager.Manager.add_guard` and starts no leader runnable (and
does not campaign for its own Lease) until it is clear. Once clear, it is not read
again: a controller started later, while this process runs, is not seen until this
process restarts (a rollback stops this process first).

A Lease the process may not read (403) cannot be checked: a warning says so once and the
guard counts it as clear, so that a missing permission does not keep the operator down.
Other API errors are logged and retried; they leave the state as it was.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from msop.kube.errors import ApiError, is_forbidden, is_not_found
from msop.kube.objects import JSON, parse_time
from msop.kube.resources import LEASES
from msop.kube.writer import LiveReader

__all__ = ["LeaseGuard", "lease_held"]

log = structlog.get_logger("msop.controller.leaseguard")

#: client-go's default lease duration, for a Lease that does not say its own.
DEFAULT_LEASE_DURATION = 15.0


def lease_held(
    lease: JSON | None, unchanged_for: float, wall_now: datetime, skew: float
) -> str | None:
    """The holder of ``lease`` while it counts as held, else None.

    ``unchanged_for``: seconds (this process's clock) since its holder and ``renewTime``
    were first seen as they are now. Pure: the caller keeps the clocks."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    if not holder:
        return None
    duration = float(spec.get("leaseDurationSeconds") or DEFAULT_LEASE_DURATION)
    renewed = parse_time(spec.get("renewTime"))
    if renewed is not None and (wall_now - renewed).total_seconds() > duration + skew:
        return None
    return str(holder) if unchanged_for < duration else None


class LeaseGuard:
    """See the module docstring. ``what`` names the other controller in logs and errors."""

    def __init__(
        self,
        client: LiveReader,
        namespace: str,
        name: str,
        *,
        what: str,
        period: float = 2.0,
        skew: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.lease_name = name
        self.what = what
        self.period = period
        self.skew = skew
        self._clock = clock
        self._wall = wall
        self._seen: tuple[object, object] | None = None
        self._seen_at = 0.0
        self._clear = asyncio.Event()
        self._warned_forbidden = False
        self.name = "legacy-operator-lease"
        """The runnable's and the readiness check's name."""

    def clear(self) -> bool:
        """True once the Lease has been seen clear (readiness)."""
        return self._clear.is_set()

    async def holder(self) -> str | None:
        """Read the Lease once: its holder while it counts as held, else None."""
        try:
            lease: JSON | None = await self.client.get(LEASES, self.lease_name, self.namespace)
        except ApiError as e:
            if is_not_found(e):
                return None
            if is_forbidden(e):
                if not self._warned_forbidden:
                    self._warned_forbidden = True
                    log.warning(
                        "not allowed to read the legacy operator's Lease; not checked",
                        lease=f"{self.namespace}/{self.lease_name}", error=e.message,
                    )  # fmt: skip
                return None
            raise
        spec = (lease or {}).get("spec") or {}
        seen = (spec.get("holderIdentity"), spec.get("renewTime"))
        now = self._clock()
        if seen != self._seen:
            self._seen, self._seen_at = seen, now
        return lease_held(lease, now - self._seen_at, self._wall(), self.skew)

    async def wait_until_clear(self) -> None:
        """Return once :meth:`run` has seen the Lease clear."""
        await self._clear.wait()

    async def _poll_until_clear(self) -> None:
        logged: str | None = None
        while not self._clear.is_set():
            try:
                holder = await self.holder()
            except ApiError as e:
                log.warning("cannot read the legacy operator's Lease; retrying", error=str(e))
                holder = logged or "unknown"
            if holder is None:
                if logged is not None:
                    log.info("the legacy operator's Lease lapsed; starting", what=self.what)
                self._clear.set()
                return
            if holder != logged:
                log.warning(
                    "waiting for the legacy operator's Lease to lapse: it runs, and two "
                    "operators must not manage the same jobs (stop it, or turn this check "
                    "off with --legacy-operator-lease='')",
                    what=self.what, lease=f"{self.namespace}/{self.lease_name}", holder=holder,
                )  # fmt: skip
                logged = holder
            await asyncio.sleep(self.period)

    async def run(self) -> None:
        """Read the Lease until it is clear, then return (a runnable that returns normally
        is done; the manager goes on)."""
        await self._poll_until_clear()
