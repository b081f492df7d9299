"""How the MSJob controller runs: its settings, one typed value with a default per field.

Light on purpose (no runtime imports): ``msop run``'s flags take their defaults from here.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from msop.api import constants as c

if TYPE_CHECKING:
    from msop.controller.shardelection import ShardingConfig
    from msop.msjob.inplace.client import AgentClient
    from msop.msjob.inplace.pods import InPlace


@dataclass(frozen=True)
class WorkerLost:
    """How msop on a MultiKueue worker cluster treats the copies that were here through a
    long outage of this cluster's API server (``msop run
    --multikueue-worker-lost-timeout``, ``--multikueue-lost-copy-hold``)."""

    timeout: float = 900.0
    """Seconds of outage from which a copy is held: the manager's ``workerLostTimeout``
    (15 minutes by default), after which it gives the worker's jobs to another worker, or
    less; 0: never held."""
    hold: float = 420.0
    """Seconds after the outage during which it is held at most: MultiKueue's reconnect
    backoff (at most 5m20s) plus its default ``gcInterval`` (one minute), and a margin."""


@dataclass(frozen=True)
class Settings:
    """How the MSJob controller runs."""

    namespaces: Sequence[str] = ()
    """Namespaces to watch; empty means all namespaces."""
    max_concurrent_reconciles: int = 10
    """Jobs reconciled at the same time (one key is never reconciled twice at once); the
    default of ``msop run --max-concurrent-reconciles``."""
    gang_scheduling: bool = False
    """Create Volcano PodGroups and hold pods until their group is Inqueue."""
    workload_api: str | None = None
    """Gang-schedule with Kubernetes' Workload API of this version (``v1alpha2``,
    ``v1beta1``): a Workload and a PodGroup per job, ``schedulingGroup`` on its pods."""
    kueue: bool = False
    """Queue jobs labelled ``kueue.x-k8s.io/queue-name`` in Kueue through a Workload
    each, and run their pods only while it is admitted."""
    progress_port: int = c.DEFAULT_PROGRESS_PORT
    """Port Worker 0's progress reporter serves on; 0 turns progress off."""
    progress_interval: float = 30.0
    """Seconds between two progress polls of one job (and so between two progress
    writes of its status)."""
    progress_writes_per_second: float = math.inf
    """Progress reports taken per second at most, over all jobs (each may cost a status
    write). When ``--kube-api-qps`` sets a client-side limit, ``msop run`` gives half of
    it (the status budget), so that progress never holds up a condition, and more jobs
    than that allows at ``progress_interval`` are polled less often. Without one (the
    default) the interval alone paces them: one write per job per interval."""
    worker_lost: WorkerLost = WorkerLost()
    """On a MultiKueue worker: how the copies that were here through a long outage of
    this cluster's API server are held (:class:`WorkerLost`)."""
    in_place: InPlace | None = None
    """How failed jobs are restarted in place (:mod:`msop.msjob.inplace`); None: never."""
    agents: AgentClient | None = None
    """What asks the pods' agents (with ``in_place``)."""
    recheck_in_place: Callable[[], Awaitable[str]] | None = None
    """Says again why the cluster cannot restart in place ("" if it can), every few
    minutes (a node joins, a kubelet changes)."""
    node_lost_after: float | None = 10.0
    """Seconds a pod's node may be not ready before the pod counts as lost
    (:mod:`msop.msjob.nodehealth`; 0: at the first sign); None: nodes are not watched
    (a pod is lost once deleted or evicted; an unhealthy device still counts)."""
    sharding: ShardingConfig | None = None
    """Split the jobs into ``sharding.shards`` shards, each held on a Lease by one replica
    (:mod:`msop.msjob.sharding`); None: one shard, reconciled by the leader."""
