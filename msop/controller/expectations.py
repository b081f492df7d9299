"""Controller expectations: wait for your own creates and deletes to reach the cache.

After a reconcile creates N pods it must not look at the (stale) cache again and create them
a second time. Kubernetes' ``ControllerExpectations`` (also used by Kubeflow) solve this: the
reconciler records what it expects to observe, the informer event handlers lower the
counts as the objects show up, and the reconciler acts only when ``satisfied(key)``.

Contract:

* ``satisfied(key)`` is True when nothing is recorded for ``key``, when every expected
  creation and deletion was observed, or when the record is older than ``ttl`` (default 5
  minutes; a lost watch event must not block a key forever).
* ``expect_creations_of`` / ``expect_deletions_of`` *replace* the record for that
  direction with a set of object names: observing the same object twice, or an unrelated
  one, does not count ("I created pod x; wait until the cache shows x"). Kubernetes'
  count-based variant is not offered: a count cannot tell a stranger from our own object.
* Observations for keys without a record, or of names not expected, are ignored.
* The TTL runs from when expectations were set; observations do not extend it.

Records live in a ``cachetools.TTLCache`` with an injectable ``clock``; nothing raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from cachetools import TTLCache

__all__ = ["EXPECTATIONS_TTL", "Expectations"]

EXPECTATIONS_TTL = 300.0
"""Seconds after which unmet expectations count as satisfied (Kubernetes' 5 minutes)."""


@dataclass
class _Record:
    adds: set[str] = field(default_factory=set)
    dels: set[str] = field(default_factory=set)


K = TypeVar("K", bound=Hashable)


class Expectations(Generic[K]):
    """Per-key expected creations and deletions. A key is any hashable value: the MSJob
    reconciler uses (job ``Request``, child ``Resource``)."""

    def __init__(
        self,
        ttl: float = EXPECTATIONS_TTL,
        *,
        clock: Callable[[], float] = time.monotonic,
        maxsize: int = 1_000_000,
    ) -> None:
        self._records: TTLCache[K, _Record] = TTLCache(maxsize=maxsize, ttl=ttl, timer=clock)

    def _record(self, key: K) -> _Record:
        rec = self._records.get(key)
        if rec is None:
            rec = _Record()
            self._records[key] = rec
        return rec

    def expect_creations_of(self, key: K, names: Iterable[str]) -> None:
        """Expect exactly these object names to be created."""
        self._record(key).adds = set(names)

    def expect_deletions_of(self, key: K, names: Iterable[str]) -> None:
        """Expect exactly these object names to be deleted."""
        self._record(key).dels = set(names)

    def creation_observed(self, key: K, name: str) -> None:
        """Object ``name`` of ``key`` reached the cache (counts only if expected)."""
        rec = self._records.get(key)
        if rec is not None:
            rec.adds.discard(name)

    def deletion_observed(self, key: K, name: str) -> None:
        """Object ``name`` of ``key`` left the cache (counts only if expected)."""
        rec = self._records.get(key)
        if rec is not None:
            rec.dels.discard(name)

    def satisfied(self, key: K) -> bool:
        """True when ``key`` may act on the cache again (see the module docstring)."""
        rec = self._records.get(key)
        return rec is None or not (rec.adds or rec.dels)

    def pending(self, key: K) -> tuple[int, int]:
        """Return the (creations, deletions) still expected for ``key`` (0, 0 if none)."""
        rec = self._records.get(key)
        return (0, 0) if rec is None else (len(rec.adds), len(rec.dels))

    def delete_expectations(self, key: K) -> None:
        """Forget ``key`` (e.g. its owner was deleted)."""
        self._records.pop(key, None)

    def __len__(self) -> int:
        """Number of live (not expired) records."""
        self._records.expire()
        return len(self._records)
