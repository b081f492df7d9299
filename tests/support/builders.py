"""Builders of the objects unit tests feed msop: MSJobs, the pods and Services the planner
sees, statuses, and a one-call plan.

- :func:`valid_job` (with :func:`replica`, :func:`container`): a valid MSJob as a user
  writes it, for the API's defaulting and validation;
- :func:`job`: an MSJob as the cache holds it (uid, generation, resourceVersion), for the
  planner, the reconciler, the poller and the SDK's waits; :func:`pod` and
  :func:`service` are its children as the API server returns them,
  :func:`running_status` and :func:`finished` its status; :func:`run` plans it at
  :data:`NOW`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from msop.kube.objects import format_time
from msop.msjob import desired, gang, kueue, scheduling
from msop.msjob.plan import Observed, Options, Plan, plan
from msop.msjob.scheduling import decision

JSON = dict[str, Any]
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
"""The planner's "now" in :func:`run`."""
T0 = format_time(NOW - timedelta(seconds=60))
"""A minute before :data:`NOW`: when the children were created and the job started."""
SAMPLE_IMAGE = "mindspore/mindspore-gpu:1.8.1"


def container(name: str = "mindspore", **extra: Any) -> JSON:
    return {"name": name, "image": SAMPLE_IMAGE, **extra}


def replica(replicas: int | None = 1, **extra: Any) -> JSON:
    spec: JSON = {"template": {"spec": {"containers": [container()]}}, **extra}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def valid_job(name: str = "ms-job", **replica_specs: JSON) -> JSON:
    """A valid MSJob as a user writes it; by default a Scheduler and two Workers."""
    specs = replica_specs or {"Scheduler": replica(1), "Worker": replica(2)}
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"msReplicaSpecs": copy.deepcopy(specs)},
    }


def job(
    replicas: Mapping[str, int | tuple[int, str]] | None = None,
    run_policy: JSON | None = None,
    status: JSON | None = None,
    *,
    rv: str = "10",
    **spec: Any,
) -> JSON:
    """MSJob ``ns/j`` as the cache holds it. ``replicas`` maps a replica type to its count,
    or to (count, restartPolicy); default two Workers with ``Never``."""
    replicas = replicas or {"Worker": (2, "Never")}
    specs: JSON = {}
    for rt, value in replicas.items():
        n, policy = value if isinstance(value, tuple) else (value, None)
        specs[rt] = {
            "replicas": n,
            **({"restartPolicy": policy} if policy else {}),
            "template": {"spec": {"containers": [{"name": "mindspore", "image": "ms:1"}]}},
        }
    out: JSON = {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-1", "generation": 1,
                     "resourceVersion": rv},
        "spec": {"msReplicaSpecs": specs, **spec},
    }  # fmt: skip
    if run_policy:
        out["spec"]["runPolicy"] = run_policy
    if status is not None:
        out["status"] = status
    return out


def pod(
    rtype: str,
    index: int,
    phase: str = "Running",
    exit_code: int | None = None,
    restarts: int = 0,
    deleting: str | None = None,
    size: tuple[int, int] | None = None,
) -> JSON:
    """A pod of the job; ``size`` = the (workers, servers) its MS_* env was created for
    (None: no size variables, so that any job size accepts it)."""
    workers, servers = size or (8, 1)
    j = job({"Scheduler": (1, "Never"), "PS": (servers, "Never"), "Worker": (workers, "Never")})
    p = desired.pod(j, rtype, index, sched_host="10.0.0.1")
    if size is None:
        for container in p["spec"]["containers"]:
            container["env"] = [
                e for e in container.get("env", [])
                if e["name"] not in ("MS_WORKER_NUM", "MS_SERVER_NUM")
            ]  # fmt: skip
    p["metadata"]["uid"] = f"pod-{rtype}-{index}"
    p["metadata"]["creationTimestamp"] = T0
    cs: JSON = {"name": "mindspore", "restartCount": restarts, "state": {"running": {}}}
    if exit_code is not None:
        cs["state"] = {"terminated": {"exitCode": exit_code}}
    if deleting:
        p["metadata"]["deletionTimestamp"] = deleting
    p["status"] = {"phase": phase, "containerStatuses": [cs]}
    return p


def service(ip: str = "10.0.0.1") -> JSON:
    s = desired.scheduler_service(job({"Scheduler": (1, "Never"), "Worker": (1, "Never")}))
    s["metadata"]["uid"] = "svc-uid"
    s["spec"]["clusterIP"] = ip
    return s


def running_status(**extra: Any) -> JSON:
    cond = [
        {"type": "Created", "status": "True", "reason": "MSJobCreated", "message": "m",
         "lastUpdateTime": T0, "lastTransitionTime": T0},
        {"type": "Running", "status": "True", "reason": "MSJobRunning",
         "message": "MSJob ns/j is running.", "lastUpdateTime": T0, "lastTransitionTime": T0},
    ]  # fmt: skip
    return {"conditions": cond, "startTime": T0, "observedGeneration": 1, **extra}


def finished(**extra: Any) -> JSON:
    status = running_status(**extra)
    status["conditions"].append(
        {"type": "Succeeded", "status": "True", "reason": "r", "message": "m",
         "lastUpdateTime": T0, "lastTransitionTime": T0}
    )  # fmt: skip
    return status


def run(j: JSON, pods: Sequence[JSON] = (), services: Sequence[JSON] = (), **opts: Any) -> Plan:
    """Plan ``j``; ``gang_scheduling=True`` (with ``pod_group=``) adds Volcano's view;
    ``nodes=`` the cached nodes by name."""
    pod_group = opts.pop("pod_group", None)
    nodes = opts.pop("nodes", {})
    seen: list[scheduling.Seen] = (
        [gang.Seen(pod_group)] if opts.pop("gang_scheduling", False) else []
    )
    observed = Observed(j, list(pods), list(services), NOW, scheduling=seen, nodes=nodes)
    return plan(observed, Options(**opts))


def volcano(p: Plan) -> gang.Decision:
    """What Volcano decided in ``p`` (nothing, if it does not manage the job)."""
    return decision(p.scheduling, gang.Decision) or gang.Seen().decide()


def queue(p: Plan) -> kueue.Decision:
    """What Kueue decided in ``p`` (nothing, if it does not manage the job)."""
    return decision(p.scheduling, kueue.Decision) or kueue.Seen().decide()


def cond(p: Plan, type_: str) -> JSON | None:
    """The condition ``type_`` in ``p``'s status, or None; ``p`` must write a status."""
    return next((c for c in status_of(p)["conditions"] if c["type"] == type_), None)


def must_cond(p: Plan, type_: str) -> JSON:
    """The condition ``type_`` in ``p``'s status; the test fails if there is none."""
    found = cond(p, type_)
    assert found is not None, f"no {type_} condition in {status_of(p)['conditions']}"
    return found


def status_of(p: Plan) -> JSON:
    """The status ``p`` writes; the test fails if it writes none."""
    assert p.status is not None, "the plan writes no status"
    return p.status


def names(objs: list[JSON]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}
