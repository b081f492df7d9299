"""The objects the benchmarks create: MSJobs, and the pods and Services the operator
would create for them (built with the operator's own pure planner, so the raw-create
baseline sends byte-for-byte the same bodies)."""

from __future__ import annotations

import copy
import uuid
from typing import Any

from msop.api import constants as c
from msop.api.defaults import apply_defaults
from msop.msjob import desired

JSON = dict[str, Any]


#: A scheduler name nobody serves: pods stay Pending and untouched (memory scenario).
UNSCHEDULED = "msop-bench-unscheduled"


def template_spec() -> JSON:
    """The pod spec of every benchmark replica (without a scheduler name)."""
    spec: JSON = _template(None)["spec"]
    return spec


def _template(scheduler_name: str | None) -> JSON:
    spec: JSON = {
        "containers": [
            {
                "name": c.DEFAULT_CONTAINER_NAME,
                "image": "mindspore/mindspore-gpu:2.2.0",
                "command": ["/bin/bash", "-c", "python -s /data/train.py --epochs=1"],
                "env": [{"name": "GLOG_v", "value": "1"}],
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            }
        ],
        # No grace period: the cluster's pod deletion is instant under kwok anyway.
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler_name:
        spec["schedulerName"] = scheduler_name
    return {"spec": spec}


def msjob(
    name: str,
    namespace: str,
    *,
    ps: int = 1,
    workers: int = 4,
    scheduler_name: str | None = None,
    scheduler: bool = True,
) -> JSON:
    """An MSJob with 1 Scheduler (none without ``scheduler``), ``ps`` PS and ``workers``
    Workers.

    ``cleanPodPolicy: None`` keeps finished pods, so a lifecycle has no deletes and its
    minimum writes are exactly the creates plus one status write per transition.
    """
    specs: JSON = {"Scheduler": {"replicas": 1, "restartPolicy": "Never"}} if scheduler else {}
    if ps:
        specs["PS"] = {"replicas": ps, "restartPolicy": "Never"}
    specs["Worker"] = {"replicas": workers, "restartPolicy": "Never"}
    for spec in specs.values():
        spec["template"] = _template(scheduler_name)
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runPolicy": {"cleanPodPolicy": "None"}, "msReplicaSpecs": specs},
    }


def _as_stored(job: JSON, uid: str | None) -> JSON:
    stored = apply_defaults(job)
    stored["metadata"]["uid"] = uid or str(uuid.uuid4())
    return stored


def service_for(job: JSON, uid: str | None = None) -> JSON:
    """The Scheduler Service the operator creates for ``job``."""
    return desired.scheduler_service(_as_stored(job, uid))


def pods_for(job: JSON, cluster_ip: str, uid: str | None = None) -> list[JSON]:
    """The pods the operator creates for ``job`` once its Service has ``cluster_ip``."""
    stored = _as_stored(job, uid)
    return [
        desired.pod(stored, rt, i, sched_host=cluster_ip) for rt, i in desired.replica_slots(stored)
    ]


def orphaned(obj: JSON, namespace: str) -> JSON:
    """``obj`` moved to ``namespace`` without ownerReferences (the garbage collector
    would delete children of an owner that does not exist)."""
    out = copy.deepcopy(obj)
    out["metadata"]["namespace"] = namespace
    out["metadata"].pop("ownerReferences", None)
    return out


def unrelated(obj: JSON, namespace: str, name: str) -> JSON:
    """A copy of ``obj`` that is not the operator's: no operator labels, no owner."""
    out = orphaned(obj, namespace)
    out["metadata"]["name"] = name
    out["metadata"]["labels"] = {"app": "unrelated"}
    return out
