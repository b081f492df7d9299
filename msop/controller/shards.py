"""Shards: which shard an object belongs to, and how many shards a replica may hold.

Pure functions; :mod:`.shardelection` holds the shards' Leases with them.

* **The hash.** An object's hash is the 64-bit FNV-1a of its ``metadata.uid`` (UTF-8),
  and shard ``i`` of N is the range ``[ceil(i * 2**64 / N), ceil((i + 1) * 2**64 / N))``
  of hashes (:func:`shard_of`, :func:`shard_range`). That is the hash and the ranges of the
  API server's sharded list and watch (KEP-5866, alpha in Kubernetes 1.36,
  ``shardSelector=shardRange(object.metadata.uid, '0x...', '0x...')``:
  :func:`shard_range_selector`), so a server that offers it can send a replica exactly
  the objects of its shards. The same in every process and Python version (Python's
  ``hash()`` of a string is salted per process and would split the objects differently in
  every replica). A UID never changes, so an object stays in its shard for its whole
  life; changing N moves most objects to another shard (the shards' holders change hands,
  not the objects).
* **Fair share.** With ``R`` live replicas a replica takes at most ``ceil(N / R)`` shards
  (:func:`fair_share`), unless a shard has been held by nobody for a while (then anyone
  takes it: a shard without a holder is worse than an uneven split). A replica above its
  share hands shards over (:func:`to_shed`), only as many as the replicas below their
  share can take.
* **One N at a time.** Each replica's member Lease names its N. While replicas of
  different N are live, only those of the N of the oldest live replica hold shards
  (:func:`ruling_shards`); a live single leader (``--shards 1``, its own Lease) rules
  over every sharded replica. A rolling update of ``--shards`` is then safe: the new
  replicas wait until the old ones are gone.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from datetime import datetime

__all__ = [
    "fair_share",
    "may_take",
    "member_lease_name",
    "member_shards",
    "ruling_shards",
    "shard_lease_name",
    "shard_of",
    "shard_range",
    "shard_range_selector",
    "to_shed",
    "uid_hash",
]


_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_SPACE = 1 << 64
_MASK = _SPACE - 1


@functools.lru_cache(maxsize=8192)
def uid_hash(uid: str) -> int:
    """The 64-bit FNV-1a hash of ``uid`` (UTF-8), as the API server's sharded list and
    watch computes it. Cached: a job's events, enqueues and reconciles ask for it again
    and again, close together."""
    h = _FNV_OFFSET
    for byte in uid.encode():
        h = ((h ^ byte) * _FNV_PRIME) & _MASK
    return h


def shard_of(uid: str, shards: int) -> int:
    """The shard (``0 .. shards-1``) of the object with this UID: the range of
    :func:`shard_range` its :func:`uid_hash` falls in. ValueError for ``shards < 1``."""
    if shards < 1:
        raise ValueError("shards must be >= 1")
    return (uid_hash(uid) * shards) >> 64


def shard_range(shard: int, shards: int) -> tuple[int, int]:
    """The hashes of shard ``shard`` of ``shards``: ``[start, end)``, the last ending at
    2**64. The ranges of 0 .. shards-1 cover every hash once."""
    if not 0 <= shard < shards:
        raise ValueError(f"no shard {shard} of {shards}")
    return -(-shard * _SPACE // shards), -(-(shard + 1) * _SPACE // shards)


def shard_range_selector(shard: int, shards: int) -> str:
    """The API server's ``shardSelector`` (KEP-5866) for the objects of one shard."""
    start, end = shard_range(shard, shards)
    return f"shardRange(object.metadata.uid, '{start:#018x}', '{end:#018x}')"


def shard_lease_name(base: str, shard: int) -> str:
    """The Lease of one shard: ``<base>-shard-<index>``."""
    return f"{base}-shard-{shard}"


def member_lease_name(base: str, identity: str, shards: int) -> str:
    """The Lease that says a replica is alive, whether or not it holds a shard, and with
    how many shards it runs: ``<base>-member-<12 hex digits of sha256(identity)>-of-<N>``
    (an identity may hold characters a name may not)."""
    return f"{base}-member-{hashlib.sha256(identity.encode()).hexdigest()[:12]}-of-{shards}"


def member_shards(name: str) -> int | None:
    """The N a member Lease's name says (:func:`member_lease_name`); None for a name
    without one (an msop before the N was in the name)."""
    _, sep, n = name.rpartition("-of-")
    return int(n) if sep and n.isdigit() and int(n) >= 1 else None


def ruling_shards(members: Iterable[tuple[datetime, str, int]]) -> int | None:
    """Of the live replicas, as (their member Lease's ``acquireTime``, identity, N), the
    N of the one that has run longest (ties: the least identity); None if none. While
    replicas with different N run (a rolling update of ``--shards``), only those with the
    ruling N hold shards: the others wait until it is gone, so that two replicas never
    work one job under two different splits."""
    oldest = min(members, default=None)
    return None if oldest is None else oldest[2]


def fair_share(shards: int, live_replicas: int) -> int:
    """``ceil(shards / live_replicas)``; a replica always counts itself (at least 1)."""
    return -(-shards // max(1, live_replicas))


def may_take(
    owned: int, shards: int, live_replicas: int, unheld_for: float | None, grace: float
) -> bool:
    """Whether a replica that holds ``owned`` shards takes one more that is free.

    ``unheld_for``: seconds the shard has been seen without a holder (None: it has one, as
    far as this replica saw). Below the fair share: yes. At or above it: only a shard
    nobody held for ``grace`` seconds."""
    if owned < fair_share(shards, live_replicas):
        return True
    return unheld_for is not None and unheld_for >= grace


def to_shed(
    owned: Iterable[int], shards: int, me: str, holders: Mapping[str, int], live: Iterable[str]
) -> list[int]:
    """The shards to hand over: those above the fair share, as many as the other live
    replicas below it can take, highest index first.

    ``holders``: shards held per live holder (this replica included or not: ``owned`` is
    what it holds); ``live``: every live replica's identity (this one may be absent)."""
    mine = sorted(owned, reverse=True)
    others = {r for r in live if r != me}
    target = fair_share(shards, len(others) + 1)
    room = sum(max(0, target - holders.get(r, 0)) for r in others)
    return mine[: max(0, min(len(mine) - target, room))]
