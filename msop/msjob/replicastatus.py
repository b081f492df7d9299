"""What the status counts: the replicas, the success policy, the progress.

Read off the planning pass (:class:`~msop.msjob.passes.PlanningPass`): how many pods of each
replica type are active, succeeded or failed; whether the success policy holds; the
newest progress report; and, at the end of a pass, the status to write.
"""

from __future__ import annotations

from msop.api import constants as c
from msop.api import naming
from msop.api import report as progress_api
from msop.api.conditions import is_finished
from msop.api.copying import copy_json
from msop.kube.objects import JSON
from msop.msjob import desired
from msop.msjob.passes import ACTIVE_PHASES, Plan, PlanningPass
from msop.msjob.podstate import final_progress, phase, pod_succeeded, slot_of, terminating


def count_replicas(p: PlanningPass) -> dict[str, JSON]:
    """Each replica type's ``active``/``succeeded``/``failed`` pods, and its
    ``restarts`` as the status counts them."""
    counts: dict[str, JSON] = {}
    old = p.status.get("replicaStatuses") or {}
    for rtype in c.REPLICA_TYPES:
        if rtype not in p.specs:
            continue
        entry: JSON = {"active": 0, "succeeded": 0, "failed": 0}
        restarted = (old.get(rtype) or {}).get("restarts")
        if isinstance(restarted, int) and restarted > 0:
            entry["restarts"] = restarted
        counts[rtype] = entry
    for slot, pod in p.by_slot.items():
        if slot[0] not in counts or not p.wanted(slot) or terminating(pod):
            continue
        pod_phase = phase(pod)
        entry = counts[slot[0]]
        if pod_phase in ACTIVE_PHASES:
            entry["active"] += 1
        elif pod_phase == "Succeeded":
            entry["succeeded"] += 1
        elif pod_phase == "Failed":
            entry["failed"] += 1
    return counts


def succeeded(p: PlanningPass, counts: dict[str, JSON]) -> bool:
    """The success policy: Worker 0 (``""``) or every Worker (``AllWorkers``); a job
    without Workers when every replica succeeded."""
    if c.WORKER in p.specs and p.specs[c.WORKER].replicas > 0:
        workers = counts[c.WORKER]
        replicas = p.specs[c.WORKER].replicas
        if p.view.spec.enable_dynamic_worker:
            # Elastic: failed workers are gone for good; the rest decide.
            done = workers["active"] == 0 and workers["succeeded"] > 0
            if p.view.spec.success_policy == c.SUCCESS_ALL_WORKERS:
                return bool(done and workers["succeeded"] + workers["failed"] == replicas)
            worker0 = p.by_slot.get((c.WORKER, 0))
            return bool(
                (worker0 is not None and pod_succeeded(worker0))
                or (done and worker0 is not None and phase(worker0) == "Failed")
            )
        if p.view.spec.success_policy == c.SUCCESS_ALL_WORKERS:
            return bool(workers["succeeded"] == replicas)
        worker0 = p.by_slot.get((c.WORKER, 0))
        return worker0 is not None and not terminating(worker0) and pod_succeeded(worker0)
    slots = desired.replica_slots(p.job)
    return bool(slots) and all(s in p.by_slot and pod_succeeded(p.by_slot[s]) for s in slots)


def update_progress(p: PlanningPass) -> None:
    """``status.progress``: the newest of the stored one, the poller's live one and the
    final one Worker 0's reporter left in its termination message (which wins a tie:
    it is the last word of that process). Its ``lastCheckpoint`` is kept from an older
    one when the newest has none (a restarted run that has not saved yet)."""
    current = p.status.get("progress")
    worker0 = p.by_slot.get((c.WORKER, 0))
    final = final_progress(worker0) if worker0 is not None else None
    best = progress_api.newest(final, p.obs.progress, current)
    best = progress_api.keep_checkpoint(best, final, p.obs.progress, current)
    if best is not None and best != current:
        p.status["progress"] = copy_json(best)


def finish_status(p: PlanningPass, counts: dict[str, JSON] | None) -> Plan:
    """The pass's Plan with the status to write: the replica counts (``counts`` if this
    pass made them), ``workers``, ``lastReconcileTime``; no status when nothing changed."""
    status = p.status
    if not is_finished(p.old_status):
        # Once finished, replica counts stay as they were at that moment, except that
        # the pods the cleanup deletes now (cleanPodPolicy) are no longer active.
        counts = counts if counts is not None else count_replicas(p)
        if is_finished(status):
            for pod in p.deleted_pods():
                slot = slot_of(pod)
                if slot is not None and slot[0] in counts and phase(pod) in ACTIVE_PHASES:
                    entry = counts[slot[0]]
                    entry["active"] = max(0, int(entry.get("active", 0)) - 1)
        for rtype, entry in counts.items():
            entry["selector"] = naming.replica_selector_string(p.view.name, rtype)
        status["replicaStatuses"] = counts
        if c.WORKER in p.specs:
            status["workers"] = (
                f"{counts.get(c.WORKER, {}).get('active', 0)}/{p.specs[c.WORKER].replicas}"
            )
    if status != p.old_status:
        status["lastReconcileTime"] = p.now_s
        return p.result(status)
    return p.result(None)
