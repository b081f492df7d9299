"""The shard of a UID, and the fair share of a replica (pure)."""

from __future__ import annotations

import itertools
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime

import pytest

from msop.controller.shards import (
    fair_share,
    may_take,
    member_lease_name,
    member_shards,
    ruling_shards,
    shard_lease_name,
    shard_of,
    shard_range,
    shard_range_selector,
    to_shed,
    uid_hash,
)


def test_the_hash_is_fnv1a_of_the_uid_and_the_same_in_every_process() -> None:
    # Go's hash/fnv New64a (the API server's sharded list and watch) gives these.
    assert [f"{uid_hash(s):016x}" for s in ("", "a", "foobar")] == [
        "cbf29ce484222325", "af63dc4c8601ec8c", "85944171f73967e8",
    ]  # fmt: skip
    uid = "6f1c2a4e-3b5d-4e7f-9a0b-1c2d3e4f5a6b"
    assert uid_hash(uid) == 0x114BB8DC97E2A37F
    # Written down once: a change of the hash would move every running job to another shard.
    assert [shard_of(uid, n) for n in (1, 2, 6, 7, 16, 1000)] == [0, 0, 0, 0, 1, 67]
    code = f"from msop.controller.shards import shard_of; print(shard_of({uid!r}, 1000))"
    # A fresh interpreter with another hash seed computes the same shard (hash() would not).
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""}, timeout=60,
        )  # fmt: skip
        assert out.stdout.strip() == "67"


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 7, 1000])
def test_the_shards_are_the_api_servers_hash_ranges(n: int) -> None:
    ranges = [shard_range(i, n) for i in range(n)]
    assert ranges[0][0] == 0 and ranges[-1][1] == 2**64
    assert all(a[1] == b[0] and a[0] < a[1] for a, b in itertools.pairwise(ranges))
    for i in range(300):
        uid = str(uuid.UUID(int=i * 104729 + 7, version=4))
        start, end = ranges[shard_of(uid, n)]
        assert start <= uid_hash(uid) < end
    # The selector as the API server parses it: 16 hex digits, or 2**64 as 17.
    assert shard_range_selector(0, 4) == (
        "shardRange(object.metadata.uid, '0x0000000000000000', '0x4000000000000000')"
    )
    last = shard_range_selector(n - 1, n)
    assert last.endswith(", '0x10000000000000000')")
    assert re.fullmatch(
        r"shardRange\(object\.metadata\.uid, '0x[0-9a-f]{16}', '0x[0-9a-f]{16,17}'\)", last
    )
    with pytest.raises(ValueError):
        shard_range(n, n)


def test_the_hash_spreads_uids_evenly() -> None:
    n, jobs = 6, 12_000
    counts = [0] * n
    for i in range(jobs):
        counts[shard_of(str(uuid.UUID(int=i * 7919 + 12345, version=4)), n)] += 1
    assert all(abs(c - jobs / n) < 0.06 * jobs / n for c in counts), counts


def test_shards_must_be_positive() -> None:
    with pytest.raises(ValueError):
        shard_of("x", 0)


def test_lease_names() -> None:
    assert shard_lease_name("msop.mindspore.gitee.com", 3) == "msop.mindspore.gitee.com-shard-3"
    name = member_lease_name("msop", "host_with/odd:chars", 6)
    assert name.startswith("msop-member-") and name.endswith("-of-6")
    assert len(name) == len("msop-member-") + 12 + len("-of-6")
    assert name == member_lease_name("msop", "host_with/odd:chars", 6)
    assert member_shards(name) == 6
    assert member_shards("msop-member-0123456789ab") is None  # an older msop's
    assert member_shards("msop-member-0123456789ab-of-0") is None


def test_the_oldest_live_replica_rules_the_split() -> None:
    t = [datetime(2026, 1, 1, 0, 0, s, tzinfo=UTC) for s in range(3)]
    assert ruling_shards([]) is None
    assert ruling_shards([(t[1], "new", 6), (t[0], "old", 4), (t[2], "newer", 6)]) == 4
    assert ruling_shards([(t[0], "b", 6), (t[0], "a", 4)]) == 4  # a tie: the least name


@pytest.mark.parametrize(
    ("shards", "live", "share"), [(6, 1, 6), (6, 2, 3), (6, 3, 2), (6, 4, 2), (6, 7, 1), (6, 0, 6)]
)
def test_fair_share_is_the_ceiling(shards: int, live: int, share: int) -> None:
    assert fair_share(shards, live) == share


def test_a_replica_takes_below_its_share_or_a_shard_nobody_held_for_a_while() -> None:
    assert may_take(owned=1, shards=6, live_replicas=3, unheld_for=None, grace=15)
    assert not may_take(owned=2, shards=6, live_replicas=3, unheld_for=None, grace=15)
    assert not may_take(owned=2, shards=6, live_replicas=3, unheld_for=14.9, grace=15)
    assert may_take(owned=2, shards=6, live_replicas=3, unheld_for=15.0, grace=15)


def test_a_replica_sheds_its_surplus_only_to_replicas_below_their_share() -> None:
    # a holds all 6; b joined: b's room is 3, a sheds 3, highest first.
    assert to_shed({0, 1, 2, 3, 4, 5}, 6, "a", {"a": 6}, {"a", "b"}) == [5, 4, 3]
    # at its share: nothing.
    assert to_shed({0, 1, 2}, 6, "a", {"a": 3, "b": 3}, {"a", "b"}) == []
    # above its share but nobody has room (a replica counted live still holds its own):
    assert to_shed({0, 1, 2}, 6, "a", {"a": 3, "b": 2, "c": 2}, {"a", "b", "c"}) == []
    # 4 replicas, share 2: a holds 3, d holds none: one goes.
    live = {"a", "b", "c", "d"}
    assert to_shed({0, 1, 2}, 6, "a", {"a": 3, "b": 2, "c": 1}, live) == [2]
    # alone: keep everything.
    assert to_shed({0, 1}, 6, "a", {"a": 2}, {"a"}) == []
