"""Fault 5: the operator's watches go silent without closing (the relay stops
forwarding them) while its new connections are served; jobs created meanwhile must be
reconciled once the stall detector gives the silent watches up.

The stall bound is 6 s here (``MSOP_WATCH_STALL_TIMEOUT``; 90 s by default, above the
API server's one bookmark a minute); a heartbeat patches an object of each watched
resource every second, so that a live watch is never quiet that long and only the
silent ones are given up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from msop.api.resources import MSJOBS
from msop.kube.client import KubeClient
from msop.kube.resources import NODES, PODS, SERVICES
from testbed import LocalCluster
from tests.e2e.faults.checks import final_checks, record
from tests.e2e.reliability import (
    apiserver_address,
    create_all,
    has_true,
    metric,
    msjob,
    proxied_kubeconfig,
    tcp_connections,
    wait_until,
)
from tests.e2e.tcpproxy import TcpProxy

STALL = 6.0
#: aiohttp closes a pooled connection idle this long; after it only the watches are open.
KEEPALIVE = 15.0
WATCHES = 4  # msjobs, pods, services, nodes (--node-lost-after)
HEARTBEAT_SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    # The label the operator's Service informer selects on; no owner, so no job's.
    "metadata": {
        "name": "heartbeat",
        "labels": {"training.kubeflow.org/operator-name": "msjob-controller"},
    },
    "spec": {"ports": [{"port": 80}]},
}


async def _heartbeat(client: KubeClient, ns: str, job: str, stop: asyncio.Event) -> None:
    """An event on each watched resource every second, as a busy cluster has: a live
    watch never goes quiet long enough to count as stalled, a silent one does."""
    node = (await client.list(NODES))["items"][0]["metadata"]["name"]
    beat = 0
    while not stop.is_set():
        beat += 1
        note = {"metadata": {"annotations": {"heartbeat": str(beat)}}}
        await client.patch(MSJOBS, job, note, ns, patch_type="merge")
        await client.patch(PODS, f"{job}-worker-0", note, ns, patch_type="merge")
        await client.patch(SERVICES, "heartbeat", note, ns, patch_type="merge")
        await client.patch(NODES, node, note, patch_type="merge")
        await asyncio.sleep(1.0)


async def _created(client: KubeClient, ns: str, names: list[str]) -> bool:
    jobs = (await client.list(MSJOBS, ns))["items"]
    return sum(1 for j in jobs if j["metadata"]["name"] in names and has_true(j, "Created")) == len(
        names
    )


async def test_silent_watches_are_given_up_and_nothing_is_missed(
    cluster: LocalCluster,
    namespace: str,
    start_operator: Any,
    client: KubeClient,
    operator_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    async with TcpProxy(*apiserver_address(cluster)) as proxy:
        kc = tmp_path / "proxied.kubeconfig"
        proxied_kubeconfig(cluster, proxy.port, kc, source=operator_kubeconfig)
        # In a thread: the proxy serves from this event loop while the operator starts.
        op = await asyncio.to_thread(
            start_operator, kubeconfig=kc, MSOP_WATCH_STALL_TIMEOUT=str(STALL)
        )
        assert op.proc is not None
        pid = op.proc.pid
        first = [f"sw-a-{i:02d}" for i in range(10)]
        await create_all(client, namespace, [msjob(n) for n in first])
        await wait_until("the first jobs Created", lambda: _created(client, namespace, first), 60)
        await client.create(SERVICES, HEARTBEAT_SERVICE, namespace)
        stop = asyncio.Event()
        beats = asyncio.create_task(_heartbeat(client, namespace, first[0], stop))
        await asyncio.sleep(STALL + 1)  # watches that were idle before have been replaced
        live0 = metric(op.metrics_url, "informer_watch_restarts_total", reason="stalled")
        # Idle until the pool has closed every connection but the watches.
        await wait_until(
            "only the watches open",
            lambda: tcp_connections(pid) <= WATCHES,
            within=KEEPALIVE + 15,
        )
        stalled0 = metric(op.metrics_url, "informer_watch_restarts_total", reason="stalled")
        assert stalled0 == live0, "a live watch counted as stalled"
        frozen = proxy.freeze_open()
        silent_at = time.monotonic()
        during = [f"sw-b-{i:02d}" for i in range(20)]
        await create_all(client, namespace, [msjob(n) for n in during])
        await wait_until(
            "the jobs created while the watches were silent Created",
            lambda: _created(client, namespace, during),
            within=STALL + 30,
        )
        caught_up = time.monotonic() - silent_at
        # Every silent connection is given up by the operator (the stall detector drops
        # it) within the bound of its last event.
        assert len(frozen) >= WATCHES
        await wait_until(
            "every silent connection dropped by the operator",
            lambda: all(c.client_closed is not None for c in frozen),
            within=STALL + 5,
            interval=0.2,
        )
        dropped = max(c.client_closed or 0.0 for c in frozen) - silent_at
        stalled = metric(op.metrics_url, "informer_watch_restarts_total", reason="stalled")
        assert stalled - stalled0 >= WATCHES, (stalled0, stalled)
        stop.set()
        await beats
        figures = await final_checks(cluster, client, namespace, first + during, set(),
                                     [(op, pid)])  # fmt: skip
    record(
        "silent watch",
        stall_bound_s=STALL,
        silent_connections=len(frozen),
        watches_restarted=int(stalled - stalled0),
        jobs_created_meanwhile=len(during),
        reconciled_after_silence_s=round(caught_up, 1),
        last_silent_connection_dropped_s=round(dropped, 1),
        **figures,
    )
