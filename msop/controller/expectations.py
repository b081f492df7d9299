"""Controller expectations: wait for your own creates and deletes to reach the cache.

After a reconcile creates N pods it must not look at the (stale) cache again and create them
a second time. Kubernetes' ``ControllerExpectations`` (also used by Kubeflow) solve this: the
reconciler records what it expects to observe, the informer event handlers lower the
counts as the objects show up, and the reconciler acts only when ``satisfied(key)``.

Contract:

* ``satisfied(key)`` is True when nothing is recorded for ``key``, when every expected
  creation and deletion was observed, or when the record is older than ``ttl`` (default 5
  minutes; a lost watch event must not block a key forever).
* ``expect_creations`` / ``expect_deletions`` *replace* the record for that direction.
  The ``*_of`` variants track names, so observing the same object twice or an unrelated one
  does not count ("I created pod x; wait until the cache shows x").
* Observations for keys without a record are ignored. Counts never go below zero.
* The TTL runs from when expectations were set; observations do not extend it.

Records live in a ``cachetools.TTLCache`` with an injectable ``timer``; nothing raises.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from cachetools import TTLCache

__all__ = ["EXPECTATIONS_TTL", "Expectations"]

EXPECTATIONS_TTL = 300.0
"""Seconds after which unmet expectations count as satisfied (Kubernetes' 5 minutes)."""


@dataclass
class _Record:
    adds: int = 0
    dels: int = 0
    add_names: set[str] = field(default_factory=set)
    del_names: set[str] = field(default_factory=set)

    def fulfilled(self) -> bool:
        return self.adds <= 0 and self.dels <= 0


class Expectations:
    """Per-key expected creations and deletions; keys are usually ``namespace/name``."""

    def __init__(
        self,
        ttl: float = EXPECTATIONS_TTL,
        *,
        timer: Callable[[], float] = time.monotonic,
        maxsize: int = 1_000_000,
    ) -> None:
        self._records: TTLCache[str, _Record] = TTLCache(maxsize=maxsize, ttl=ttl, timer=timer)

    def _record(self, key: str) -> _Record:
        rec = self._records.get(key)
        if rec is None:
            rec = _Record()
            self._records[key] = rec
        return rec

    def expect_creations(self, key: str, count: int) -> None:
        """Expect ``count`` more creations for ``key`` (replaces earlier creation counts)."""
        rec = self._record(key)
        rec.adds, rec.add_names = count, set()

    def expect_deletions(self, key: str, count: int) -> None:
        """Expect ``count`` more deletions for ``key`` (replaces earlier deletion counts)."""
        rec = self._record(key)
        rec.dels, rec.del_names = count, set()

    def expect_creations_of(self, key: str, names: Iterable[str]) -> None:
        """Expect exactly these object names to be created (observed by name)."""
        rec = self._record(key)
        rec.add_names = set(names)
        rec.adds = len(rec.add_names)

    def expect_deletions_of(self, key: str, names: Iterable[str]) -> None:
        """Expect exactly these object names to be deleted (observed by name)."""
        rec = self._record(key)
        rec.del_names = set(names)
        rec.dels = len(rec.del_names)

    def creation_observed(self, key: str, name: str | None = None) -> None:
        """One creation for ``key`` reached the cache.

        When names are tracked, only a still-expected ``name`` counts.
        """
        rec = self._records.get(key)
        if rec is None:
            return
        if rec.add_names:
            if name in rec.add_names:
                rec.add_names.discard(name)
                rec.adds = len(rec.add_names)
        elif rec.adds > 0:
            rec.adds -= 1

    def deletion_observed(self, key: str, name: str | None = None) -> None:
        """One deletion for ``key`` reached the cache (by ``name`` when names are tracked)."""
        rec = self._records.get(key)
        if rec is None:
            return
        if rec.del_names:
            if name in rec.del_names:
                rec.del_names.discard(name)
                rec.dels = len(rec.del_names)
        elif rec.dels > 0:
            rec.dels -= 1

    def satisfied(self, key: str) -> bool:
        """True when ``key`` may act on the cache again (see the module docstring)."""
        rec = self._records.get(key)
        return rec is None or rec.fulfilled()

    def pending(self, key: str) -> tuple[int, int]:
        """Return the (creations, deletions) still expected for ``key`` (0, 0 if none)."""
        rec = self._records.get(key)
        return (0, 0) if rec is None else (max(rec.adds, 0), max(rec.dels, 0))

    def delete_expectations(self, key: str) -> None:
        """Forget ``key`` (e.g. its owner was deleted)."""
        self._records.pop(key, None)

    def __len__(self) -> int:
        """Number of live (not expired) records."""
        self._records.expire()
        return len(self._records)
