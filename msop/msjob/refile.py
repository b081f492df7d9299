"""Children filed under another shard than their job's: found and moved to it.

With ``msop run --shards N`` a job's pods and Services carry its shard,
``shard_of(uid, N)``, in ``c.LABEL_SHARD`` from their creation, and the replica that
holds the shard watches only the children labelled with it (:mod:`.sharding`). When N
changes while jobs run (4 -> 6, 6 -> 4), most jobs move to another shard and their
children keep the old one in their label:

* a child whose label is another shard held here is in this replica's cache, through that
  shard's informer: :func:`misfiled` finds it in the pass's own view;
* a child whose label is a shard held by another replica, or no shard of N at all (a
  label 5 under N = 4), is in no cache of the job's holder. The job looks as if those
  children were gone: the planner would recreate them (a name conflict) or, for a running
  job, count its members as lost and charge a restart to its ``backoffLimit``.

So, before the holder acts on an absence, it asks the API server: :func:`may_hide` says
when a job's cached children may not be all it has (it started, it has not finished, and
the cache shows fewer pods than its replicas, or the pass would create a child); the
reconciler then lists the job's pods and Services by its ``job-name`` label, once per job
while it holds the job's shard, and relabels every child filed under another shard to the
job's own. The relabelled children reach the holder's informer of that shard as adds: the
pass waits for them as for its own creates, and plans from them.

Only the job's holder writes these labels (the replica of the old label sees the label go
and drops the child from its cache). Unlabelled children (made without shards) need none of
this: every replica watches them (``!shard``). Without shards (N = 1) nothing here runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from msop.api import constants as c
from msop.api.conditions import is_finished
from msop.api.naming import job_selector
from msop.kube.objects import JSON

__all__ = ["children_selector", "may_hide", "misfiled", "refile_patch", "shard_label"]


def shard_label(child: Mapping[str, Any]) -> str | None:
    """The child's shard label, None without one."""
    labels = (child.get("metadata") or {}).get("labels") or {}
    value = labels.get(c.LABEL_SHARD)
    return None if value is None else str(value)


def misfiled(children: Iterable[JSON], shard: int) -> list[JSON]:
    """The ``children`` labelled with a shard other than ``shard`` (unlabelled ones are
    not: every replica watches them)."""
    want = str(shard)
    return [o for o in children if (label := shard_label(o)) is not None and label != want]


def replicas(defaulted: Mapping[str, Any]) -> int:
    """How many pods the job's spec asks for."""
    specs = (defaulted.get("spec") or {}).get("msReplicaSpecs") or {}
    total = 0
    for spec in specs.values():
        count = spec.get("replicas") if isinstance(spec, dict) else None
        total += count if isinstance(count, int) and count > 0 else 0
    return total


def may_hide(
    job: Mapping[str, Any], defaulted: Mapping[str, Any], cached_pods: int, creates: bool
) -> bool:
    """Whether the job may have children outside the cache: it started (its stored status
    has ``startTime``: it had children before this replica held it), it is neither
    finished nor suspended, and the cache shows fewer pods than its replicas, or the pass
    would create a child (``creates``)."""
    status = job.get("status") or {}
    if not status.get("startTime") or is_finished(status):
        return False
    run_policy = (defaulted.get("spec") or {}).get("runPolicy") or {}
    if run_policy.get("suspend"):
        return False
    return creates or cached_pods < replicas(defaulted)


def children_selector(job_name: str) -> str:
    """The label selector of every child of the job, whatever its shard label."""
    return ",".join(f"{k}={v}" for k, v in job_selector(job_name).items())


def refile_patch(child: Mapping[str, Any], shard: int) -> JSON:
    """A merge patch that files ``child`` under ``shard``. It carries the child's UID: on a
    child of the same name made since (another UID) the API server refuses it (the UID is
    immutable), so a patch never touches what it did not read."""
    meta = child.get("metadata") or {}
    return {"metadata": {"uid": meta.get("uid"), "labels": {c.LABEL_SHARD: str(shard)}}}
