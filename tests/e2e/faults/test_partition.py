"""Fault 3: the leader cut off from the API server while jobs keep arriving.

Replica A runs in a network namespace of its own and reaches the API server through a
relay inside it (``testbed.netns.forward``, connecting from 127.0.0.2 so that the
audit log tells A's requests from B's). The partition is a kernel one: iptables in A's
namespace drops every packet to and from the relay, so A's TCP keeps retransmitting what
it sent, as across a real partition, and nothing fails fast. B runs on the host.

What must hold (client-go's renew deadline is what guarantees it there):
- B takes over within the lease;
- A stops writing before B starts: in the audit log no write of A lands after B's first
  write, although A's kernel still held requests A had sent when it gave up (its sockets
  close with a reset, see msop.kube.transport, so they are dropped, not delivered when
  the link returns);
- A steps down rather than resumes: it exits 1 at its renew deadline; started again
  after the link returns (as its Deployment would) it follows.

The same with ``--shards 4`` and two replicas of 2 shards each: B takes A's shards within
the lease, no job is written by both at once (per job, in the audit log, the writes of
the one before end before the next one's begin), A keeps running and takes its share back
once the link returns.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from msop.kube.client import KubeClient
from msop.kube.resources import LEASES
from testbed import LocalCluster, OperatorProcess
from testbed.netns import NetNamespace
from testbed.process import terminate
from testbed.serviceaccount import OPERATOR_NAMESPACE, service_account_user
from tests.e2e.faults.checks import final_checks, operator_writes, record
from tests.e2e.reliability import (
    audit_events,
    create_all,
    held,
    job_of,
    metric,
    msjob,
    operator_creates,
    scrape,
    wait_until,
)

JSON = dict[str, Any]
LEASE_ID = "msop-partition"
LEASE_S, RENEW_DEADLINE_S, RETRY_S = 4, 3, 1
ELECTION = (
    "--leader-elect",
    "--leader-election-namespace", OPERATOR_NAMESPACE,
    "--leader-election-id", LEASE_ID,
    "--leader-election-lease-duration", str(LEASE_S),
    "--leader-election-renew-deadline", str(RENEW_DEADLINE_S),
    "--leader-election-retry-period", str(RETRY_S),
    # A slow client: a backlog at the cut keeps sending into the partition for the whole
    # renew deadline (what a real leader under load does), instead of being idle.
    "--kube-api-qps", "10", "--kube-api-burst", "10",
)  # fmt: skip
A_SOURCE = "127.0.0.2"
JOBS = 80


def _jobs(prefix: str) -> tuple[list[str], set[str], list[JSON]]:
    """The scenario's jobs: names, those with a Scheduler, manifests."""
    names = [f"{prefix}-{i:03d}" for i in range(JOBS)]
    sched = {n for i, n in enumerate(names) if i % 4 == 0}
    return names, sched, [msjob(n, scheduler=n in sched) for n in names]


async def _trickle(client: KubeClient, namespace: str, batch: list[JSON]) -> None:
    """Jobs arriving 4 at a time, every half second."""
    for i in range(0, len(batch), 4):
        await create_all(client, namespace, batch[i : i + 4])
        await asyncio.sleep(0.5)


class Relay:
    """``python -m testbed.netns forward`` as a child process."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "testbed.netns", "forward", *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline().strip())

    def stop(self) -> None:
        terminate(self.proc, 10)


@pytest.fixture
def netns() -> Iterator[NetNamespace]:
    ns = NetNamespace(f"msop-part-{os.getpid()}-{uuid.uuid4().hex[:4]}")
    ns.create()
    try:
        yield ns
    finally:
        ns.delete()


def _rules(ns: NetNamespace, action: str, port: int) -> None:
    for match in ("--dport", "--sport"):
        ns.run("iptables", action, "INPUT", "-p", "tcp", match, str(port), "-j", "DROP")


def _is_leader(op: OperatorProcess) -> bool:
    try:
        return metric(op.metrics_url, "leader_election_master_status") >= 1
    except OSError:
        return False


def _depth(op: OperatorProcess) -> float:
    try:
        samples = scrape(op.metrics_url)
    except OSError:
        return 0.0
    return sum(
        v
        for (n, labels), v in samples.items()
        if n == "workqueue_depth" and ("name", "msjob") in labels
    )


def _unwritten_events(log: Path) -> int:
    """Events the operator logged as not written when it stopped."""
    total = 0
    for line in log.read_text(errors="replace").splitlines():
        if "events not written" in line:
            total += int(json.loads(line).get("count", 0))
    return total


def _server_time(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def test_partitioned_leader_stops_before_the_follower_starts(
    cluster: LocalCluster,
    namespace: str,
    start_operator: Any,
    client: KubeClient,
    operator_kubeconfig: Path,
    netns: NetNamespace,
    tmp_path: Path,
) -> None:
    # Only this test's lines of the session's audit log count.
    first_line = len(audit_events(cluster.audit_log))
    api = _api_relay(cluster, netns)
    relays = [api]
    a_kubeconfig = _through(operator_kubeconfig, api.port, tmp_path / "a.kubeconfig")

    def start_a() -> OperatorProcess:
        return _start_in(netns, start_operator, a_kubeconfig, relays, ELECTION)

    try:
        a = await asyncio.to_thread(start_a)
        await wait_until("A leads", lambda: _is_leader(a), within=30)
        b = start_operator(*ELECTION)
        assert b.proc is not None
        await asyncio.sleep(2 * RETRY_S)
        assert not _is_leader(b)

        names, sched, jobs = _jobs("part")

        async def trickle(batch: list[JSON]) -> None:
            await _trickle(client, namespace, batch)

        await trickle(jobs[:20])
        await wait_until(
            "A busy creating pods",
            lambda: sum(operator_creates(cluster.audit_log, namespace, ("pods",)).values()) >= 10,
            within=30,
        )
        # A burst A has seen but not worked off when the link goes: its reconciles go on
        # sending creates and status writes into the partition until it gives up.
        await create_all(client, namespace, jobs[20:60], parallel=16)
        await wait_until("A backlogged", lambda: _depth(a) >= 5, within=30, interval=0.05)
        assert a.proc is not None
        a_proc = a.proc

        def a_exits() -> tuple[int, float]:
            code = a_proc.wait(LEASE_S + 10)
            return code, time.monotonic() - cut_at

        cut_at = time.monotonic()
        _rules(netns, "-I", api.port)
        exited = asyncio.create_task(asyncio.to_thread(a_exits))
        arrivals = asyncio.create_task(trickle(jobs[60:]))
        await wait_until("B leads", lambda: _is_leader(b), within=LEASE_S + 10, interval=0.1)
        takeover = time.monotonic() - cut_at
        code, stepped_down = await exited
        assert code == 1, a.log_tail()
        assert "lost the leader election lease" in a.log_path.read_text()
        # The link comes back after B leads. A's requests still in its kernel when it gave
        # up would arrive now if its sockets had not been reset.
        await asyncio.sleep(1)
        _rules(netns, "-D", api.port)
        healed_lines = len(audit_events(cluster.audit_log))
        await asyncio.sleep(5)
        a2 = await asyncio.to_thread(start_a)
        await asyncio.sleep(3 * RETRY_S)
        assert not _is_leader(a2) and _is_leader(b), "the old leader took the lease back"
        await arrivals

        user = service_account_user()
        a_writes = operator_writes(cluster, A_SOURCE, user, since_line=first_line)
        b_writes = operator_writes(cluster, "127.0.0.1", user, since_line=first_line)
        assert a_writes and b_writes
        a_last = max(_server_time(e["stageTimestamp"]) for e in a_writes)
        b_first = min(_server_time(e["requestReceivedTimestamp"]) for e in b_writes)
        late = [e for e in a_writes if _server_time(e["stageTimestamp"]) >= b_first]
        assert not late, f"writes of the old leader after the new one's first: {late[:3]}"
        after_heal = operator_writes(cluster, A_SOURCE, user, since_line=healed_lines)
        assert not after_heal, f"the old leader wrote after the link came back: {after_heal}"
        assert a2.proc is not None
        # Events A still had queued when it had to stop cannot be written by anyone: A
        # must not write any more, B never knew of them. A counts them.
        unwritten = _unwritten_events(a.log_path)
        figures = await final_checks(
            cluster, client, namespace, names, sched, [(b, b.proc.pid), (a2, a2.proc.pid)],
            lease_requests_per_s=2 / RETRY_S, events_unwritten=unwritten,
        )  # fmt: skip
        record(
            "partitioned leader",
            lease_s=LEASE_S,
            renew_deadline_s=RENEW_DEADLINE_S,
            takeover_after_cut_s=round(takeover, 1),
            old_leader_exited_after_cut_s=round(stepped_down, 1),
            gap_last_old_write_to_first_new_s=round((b_first - a_last).total_seconds(), 2),
            old_leader_writes_after_heal=0,
            jobs=JOBS,
            **figures,
        )
        assert takeover <= LEASE_S + 2 * RETRY_S + 2, f"takeover took {takeover:.1f}s"
    finally:
        _rules_quietly(netns, api.port)
        for r in relays:
            r.stop()
        await asyncio.to_thread(
            cluster.kubectl, "delete", "lease", LEASE_ID, "-n", OPERATOR_NAMESPACE,
            "--ignore-not-found", check=False,
        )  # fmt: skip


SHARDED = (
    "--leader-elect",
    "--leader-election-namespace", OPERATOR_NAMESPACE,
    "--leader-election-id", f"{LEASE_ID}-sharded",
    "--leader-election-lease-duration", str(LEASE_S),
    "--leader-election-renew-deadline", str(RENEW_DEADLINE_S),
    "--leader-election-retry-period", str(RETRY_S),
    "--kube-api-qps", "10", "--kube-api-burst", "10",
    "--shards", "4",
)  # fmt: skip


def _ref_name(event: JSON) -> str:
    ref = event.get("objectRef") or {}
    return f"{ref.get('resource')}/{ref.get('name')}"


def _one_writer_at_a_time(writes: list[JSON]) -> tuple[dict[str, int], list[str]]:
    """Per job (its children and its status), the writers in the order of their writes:
    where the writer changes, the last write of the one before must have been done before
    the first of the next was received. Returns how many times each job changed hands and
    the overlaps found."""
    by_job: dict[str, list[JSON]] = {}
    for e in writes:
        job = job_of(e.get("objectRef") or {})
        if job is not None:
            by_job.setdefault(job, []).append(e)
    changes: dict[str, int] = {}
    overlaps: list[str] = []
    for job, events in by_job.items():
        events.sort(key=lambda e: _server_time(e["requestReceivedTimestamp"]))
        runs: list[list[JSON]] = []
        for e in events:
            if runs and runs[-1][0]["sourceIPs"][0] == e["sourceIPs"][0]:
                runs[-1].append(e)
            else:
                runs.append([e])
        changes[job] = len(runs) - 1
        for before, after in itertools.pairwise(runs):
            done = max(_server_time(e["stageTimestamp"]) for e in before)
            start = _server_time(after[0]["requestReceivedTimestamp"])
            if done >= start:
                overlaps.append(
                    f"{job}: {before[0]['sourceIPs'][0]} wrote until {done.time()}, "
                    f"{after[0]['sourceIPs'][0]} from {start.time()}"
                )
    return changes, overlaps


async def test_a_partitioned_replica_stops_writing_its_shards_before_another_takes_them(
    cluster: LocalCluster,
    namespace: str,
    start_operator: Any,
    client: KubeClient,
    operator_kubeconfig: Path,
    netns: NetNamespace,
    tmp_path: Path,
) -> None:
    """With ``--shards 4``, replica A (2 shards) is cut off under a burst: B takes A's
    shards within the lease, A stops writing them before B starts (per job), A does not
    exit (a lost shard is not a lost process), and takes its share back once the link
    returns; every job succeeds, everything made once."""
    first_line = len(audit_events(cluster.audit_log))
    api = _api_relay(cluster, netns)
    relays = [api]
    a_kubeconfig = _through(operator_kubeconfig, api.port, tmp_path / "a.kubeconfig")
    try:
        a = await asyncio.to_thread(_start_in, netns, start_operator, a_kubeconfig, relays, SHARDED)
        await wait_until("A holds every shard", lambda: len(held(a)) == 4, within=30)
        b = start_operator(*SHARDED)
        assert a.proc is not None and b.proc is not None
        await wait_until("2 shards each", lambda: len(held(a)) == len(held(b)) == 2, within=30)
        a_shards = held(a)

        names, sched, jobs = _jobs("spart")

        async def trickle(batch: list[JSON]) -> None:
            await _trickle(client, namespace, batch)

        await trickle(jobs[:20])
        await create_all(client, namespace, jobs[20:60], parallel=16)
        await wait_until("A backlogged", lambda: _depth(a) >= 3, within=30, interval=0.05)
        cut_at = time.monotonic()
        _rules(netns, "-I", api.port)
        cut_wall = time.time()
        arrivals = asyncio.create_task(trickle(jobs[60:]))
        await wait_until(
            "B holds every shard", lambda: len(held(b)) == 4, within=LEASE_S + 10, interval=0.1
        )
        takeover = time.monotonic() - cut_at
        await asyncio.sleep(1)
        assert a.proc.poll() is None, a.log_tail()  # it lost shards, not its process
        lost = a.log_path.read_text().count('"shard lost"')
        assert lost == len(a_shards), a.log_tail()
        _rules(netns, "-D", api.port)
        healed_at, healed_wall = time.monotonic(), time.time()
        await wait_until(
            "A takes its share back", lambda: len(held(a)) == len(held(b)) == 2, within=60
        )
        rebalanced = time.monotonic() - healed_at
        await arrivals

        user = service_account_user()
        writes = [
            e for e in operator_writes(cluster, A_SOURCE, user, since_line=first_line)
            + operator_writes(cluster, "127.0.0.1", user, since_line=first_line)
            if (e.get("objectRef") or {}).get("namespace") == namespace
        ]  # fmt: skip
        changes, overlaps = _one_writer_at_a_time(writes)
        assert not overlaps, f"a job written by two replicas at once: {overlaps[:5]}"
        # From its renew deadline after the cut until a retry period after the link is
        # back, A holds no shard: no write of A to a job or its children may reach the API
        # server then, not even one it had sent into the partition and given up (its
        # socket is reset, not left to deliver it on heal). Events may trail a hand-over
        # (docs/concepts/shards.md).
        dropped_wall = cut_wall + RENEW_DEADLINE_S
        stray = [
            f"{e['requestReceivedTimestamp']} {e['verb']} {_ref_name(e)} {e['sourceIPs']}"
            for e in writes
            if A_SOURCE in e["sourceIPs"] and job_of(e.get("objectRef") or {}) is not None
            and dropped_wall <= _server_time(e["requestReceivedTimestamp"]).timestamp()
            <= healed_wall + RETRY_S
        ]  # fmt: skip
        assert not stray, f"A wrote while it held no shard: {stray[:5]}"
        assert any(changes.values())  # the hand-overs are exercised
        figures = await final_checks(
            cluster, client, namespace, names, sched, [(b, b.proc.pid), (a, a.proc.pid)],
            # Per retry period: a list of the Leases, a get and an update of its member
            # Lease and of each of its 2 shards' Leases, a get of each of the 2 others'.
            lease_requests_per_s=(1 + 2 * (1 + 2) + 2) / RETRY_S,
            events_unwritten=_unwritten_events(a.log_path),
        )  # fmt: skip
        record(
            "partitioned shard holder",
            shards=4,
            lease_s=LEASE_S,
            renew_deadline_s=RENEW_DEADLINE_S,
            takeover_after_cut_s=round(takeover, 1),
            rebalanced_after_heal_s=round(rebalanced, 1),
            jobs_that_changed_hands=sum(1 for n in changes.values() if n),
            jobs=JOBS,
            **figures,
        )
        assert takeover <= LEASE_S + 2 * RETRY_S + 2, f"takeover took {takeover:.1f}s"
    finally:
        _rules_quietly(netns, api.port)
        for r in relays:
            r.stop()
        leases = await client.list(LEASES, OPERATOR_NAMESPACE)
        for lease in leases["items"]:
            if lease["metadata"]["name"].startswith(f"{LEASE_ID}-sharded-"):
                await client.delete(LEASES, lease["metadata"]["name"], OPERATOR_NAMESPACE)


def _api_relay(cluster: LocalCluster, netns: NetNamespace) -> Relay:
    """The API server, reached from inside ``netns`` and connecting from A's address."""
    here = f"/proc/{os.getpid()}/ns/net"
    return Relay(
        "--listen", "127.0.0.1:0", "--connect", f"127.0.0.1:{cluster.api_port}",
        "--listen-netns", str(netns.path), "--connect-netns", here, "--source", A_SOURCE,
    )  # fmt: skip


def _start_in(
    netns: NetNamespace, start_operator: Any, kubeconfig: Path, relays: list[Relay],
    flags: tuple[str, ...],
) -> OperatorProcess:  # fmt: skip
    """An operator run with ``flags`` in ``netns``, reaching the API server per
    ``kubeconfig``; its probes are relayed to the host (added to ``relays``)."""
    op: OperatorProcess = start_operator(
        *flags, kubeconfig=kubeconfig, command_prefix=tuple(netns.prefix()), wait_ready=False
    )
    relay = ("--listen", "127.0.0.1:0", "--connect-netns", str(netns.path))
    probes = [
        Relay(*relay, "--connect", f"127.0.0.1:{port}")
        for port in (op.metrics_port, op.health_port)
    ]
    relays.extend(probes)
    op.probe_ports = (probes[0].port, probes[1].port)
    op.wait_ready()
    return op


def _through(kubeconfig: Path, port: int, out: Path) -> Path:
    """``kubeconfig`` with its server the relay on ``port`` (same certificate name)."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    out.write_text(yaml.safe_dump(cfg))
    return out


def _rules_quietly(ns: NetNamespace, port: int) -> None:
    for match in ("--dport", "--sport"):
        ns.run("iptables", "-D", "INPUT", "-p", "tcp", match, str(port), "-j", "DROP", check=False)
