"""Scenario 4: the operator's memory with the cluster full of pods.

The MSJobs, their Services and pods (owned and labelled as the operator would) and as
many unrelated pods are created while the operator is NOT running; every pod uses a
scheduler nobody serves, so it stays Pending and untouched. The operator then starts
watching all namespaces; its label selector must keep the unrelated pods out of its
cache. RSS is read once ``/readyz`` says the caches are synced, at several fill levels.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from bench import workload
from bench.burst import bench_client, bounded
from bench.environment import sample
from msop.api.resources import MSJOBS
from msop.kube import PODS, SERVICES, KubeClient
from testbed import LocalCluster, OperatorProcess
from testbed.cluster import create_namespace

JSON = dict[str, Any]
OWNED_NS = "bench-mem-owned"
OTHER_NS = "bench-mem-other"
PODS_PER_JOB = 5  # 1 Scheduler + 1 PS + 3 Workers


async def _fill(client: KubeClient, names: list[str], concurrency: int) -> None:
    """Create each job with its Service and pods, and as many unrelated pods."""

    async def one(name: str) -> None:
        job = workload.msjob(name, OWNED_NS, workers=3, scheduler_name=workload.UNSCHEDULED)
        stored = await client.create(MSJOBS, job)
        uid = stored["metadata"]["uid"]
        svc = await client.create(SERVICES, workload.service_for(job, uid))
        for pod in workload.pods_for(job, svc["spec"]["clusterIP"], uid):
            await client.create(PODS, pod)
            other = workload.unrelated(pod, OTHER_NS, "u-" + pod["metadata"]["name"])
            await client.create(PODS, other)

    await bounded(concurrency, names, one)


def _measure(cluster: LocalCluster, log_dir: Path, label: str) -> JSON:
    # As a cluster runs it: /metrics over HTTPS with a certificate made at start (nothing
    # scrapes it here, so the memory is the process's own).
    op = OperatorProcess(
        kubeconfig=cluster.kubeconfig,
        log_path=log_dir / f"operator-memory-{label}.log",
        metrics_secure=True,
    )
    t0 = time.monotonic()
    op.start(wait_ready=False)
    try:
        op.wait_ready(timeout=300)
        synced = time.monotonic() - t0
        assert op.proc is not None
        at_sync = sample(op.proc.pid)
        time.sleep(5)  # the startup reconciles of every job run; RSS after them
        settled = sample(op.proc.pid)
    finally:
        op.stop()
    return {
        "seconds_to_synced": synced,
        "rss_mib_at_synced": at_sync.rss_bytes / 2**20,
        "rss_mib_settled": settled.rss_bytes / 2**20,
        "rss_bytes_settled": settled.rss_bytes,
        "rss_bytes_at_synced": at_sync.rss_bytes,
    }


async def run(
    cluster: LocalCluster, jobs: int, concurrency: int, log_dir: Path, steps: int = 4
) -> JSON:
    create_namespace(cluster, OWNED_NS)
    create_namespace(cluster, OTHER_NS)
    names = [f"mem-{i:05d}" for i in range(jobs)]
    levels = sorted({round(jobs * k / steps) for k in range(steps + 1)})
    points: list[JSON] = []
    done = 0
    fill_s = 0.0
    for level in levels:
        if level > done:
            client = await bench_client(cluster.kubeconfig, concurrency)
            t = time.monotonic()
            try:
                await _fill(client, names[done:level], concurrency)
            finally:
                await client.close()
            fill_s += time.monotonic() - t
            done = level
        point = await asyncio.to_thread(_measure, cluster, log_dir, f"{level}")
        point.update(
            jobs=level, cached_pods=level * PODS_PER_JOB, pods_in_cluster=2 * level * PODS_PER_JOB
        )
        points.append(point)
    empty, full = points[0], points[-1]
    cached = full["cached_pods"]
    per_pod_settled = (full["rss_bytes_settled"] - empty["rss_bytes_settled"]) / max(cached, 1)
    per_pod_synced = (full["rss_bytes_at_synced"] - empty["rss_bytes_at_synced"]) / max(cached, 1)
    # The slope above the first filled level leaves out the one-off cost of the first
    # list pages and of the first objects of each kind.
    first = points[1] if len(points) > 2 else empty
    slope = (full["rss_bytes_settled"] - first["rss_bytes_settled"]) / max(
        cached - first["cached_pods"], 1
    )
    return {
        "jobs": jobs,
        "pods_in_cluster": 2 * jobs * PODS_PER_JOB,
        "marginal_bytes_per_cached_pod": slope,
        "cached_pods": cached,
        "fill_seconds": fill_s,
        "points": points,
        "rss_mib_full_settled": full["rss_mib_settled"],
        "rss_mib_full_at_synced": full["rss_mib_at_synced"],
        "rss_mib_empty": empty["rss_mib_settled"],
        "bytes_per_cached_pod": per_pod_settled,
        "bytes_per_cached_pod_at_synced": per_pod_synced,
        "seconds_to_synced_full": full["seconds_to_synced"],
    }
