"""The job's children: what the planner's rule 11 creates, deletes and corrects.

Pure functions over the planning pass (:class:`msop.msjob.passes.PlanningPass`), acting
through it. In order: pods out of range or unlabelled are deleted, pods
stuck terminating past ``stuck_terminating_seconds`` (past their deletion deadline alone
on a node that is not ready: :meth:`PlanningPass.node_down`) are force-deleted, the Service in
front of the rendezvous pod is created (or replaced, or its selector corrected), and,
unless the cluster is still stopping (a whole-job restart waits for every old pod to go)
or a scheduling system holds the pods, every missing pod is created, carrying what the
scheduling systems add to it. With a Scheduler (or msrun's Worker 0), the other pods
wait for the Service's ClusterIP: it is their ``MS_SCHED_HOST``.
"""

from __future__ import annotations

from msop.api import constants as c
from msop.api import naming
from msop.kube.objects import parse_time
from msop.msjob import desired
from msop.msjob.passes import PlanningPass
from msop.msjob.podstate import service_port, terminating
from msop.msjob.scheduling import Placement


def sync(p: PlanningPass) -> None:
    """Rule 11: delete what is out of range, then create what is missing, in order:
    the Scheduler Service, then what the scheduling systems need first (a PodGroup),
    then the pods (held while one of them is missing or not ready)."""
    delete_unwanted_pods(p)
    reap_stuck_terminating(p)
    sched_host = sync_scheduler_service(p)
    if cluster_still_stopping(p):
        return
    if not all(system.release_pods(p) for system in p.systems):
        return
    create_missing_pods(p, sched_host)


def delete_unwanted_pods(p: PlanningPass) -> None:
    """Out of range or unlabelled: delete (scale-down, kubectl scale, changed types)."""
    for slot, pod in p.by_slot.items():
        if not p.wanted(slot):
            p.delete_pod(pod)
    for pod in p.strays:
        p.delete_pod(pod)


def sync_scheduler_service(p: PlanningPass) -> str | None:
    """Create the Service in front of the rendezvous pod (Scheduler 0, or Worker 0 of an
    msrun job) if missing, replace it if its port is not the job's, correct its
    selector in place if it would not select the pod (a Service ms-operator made),
    and delete any other; return its ClusterIP once it has one (the other pods'
    ``MS_SCHED_HOST``)."""
    services = p.services
    slot = desired.rendezvous(p.job)
    if slot is None:
        for s in services:
            p.delete_service(s)
        return None
    want = naming.object_name(p.view.name, *slot)
    svc = next((s for s in services if s["metadata"]["name"] == want), None)
    if (
        svc is not None
        and not terminating(svc)
        and service_port(svc) != (desired.rendezvous_port(p.job))
    ):
        svc = None  # deleted below; created anew once gone
    for s in services:
        if s is not svc:
            p.delete_service(s)
    if svc is not None and not terminating(svc):
        fix = desired.selector_fix(p.job, svc)
        if fix is not None:
            p.patch_service(svc, fix)
    if svc is None:
        if not any(s["metadata"]["name"] == want for s in services):
            p.create_service(desired.scheduler_service(p.job))
        return None
    ip = (svc.get("spec") or {}).get("clusterIP")
    return ip if ip and ip != "None" and not terminating(svc) else None


def cluster_still_stopping(p: PlanningPass) -> bool:
    """A cluster restarts as a whole: no new member while an old one lives."""
    return p.view.spec.restart_scope == c.RESTART_SCOPE_JOB and any(
        terminating(pod) or p.deleting(pod) for pod in p.pods
    )


def create_missing_pods(p: PlanningPass, sched_host: str | None, *, hold: bool = False) -> None:
    """Every wanted pod that does not exist; with a Scheduler, the others wait for
    its Service's ClusterIP (the Service's creation requeues the job). ``hold``: they
    replace lost members during a restart in place (:func:`replace_lost`)."""
    rendezvous = desired.rendezvous(p.job)
    waits_for_host = rendezvous is not None and sched_host is None
    types: set[str] = set()
    for rtype, index in desired.replica_slots(p.job):
        if (rtype, index) in p.by_slot or (waits_for_host and (rtype, index) != rendezvous):
            continue
        p.create_pod(
            desired.pod(
                p.job, rtype, index, sched_host=sched_host,
                progress_port=p.opts.progress_port, placement=placement(p, rtype),
                in_place=p.opts.in_place, generation=p.generation(), hold=hold,
            )
        )  # fmt: skip
        types.add(rtype)
    for rtype in sorted(types, key=c.REPLICA_TYPES.index):
        if desired.template_restart_policy_overridden(p.job, rtype):
            p.event(
                "Warning",
                "SettedPodTemplateRestartPolicy",
                f"The restartPolicy in the {rtype} pod template is overridden by the "
                f"replica's restartPolicy ({p.specs[rtype].restart_policy}).",
            )


def replace_lost(p: PlanningPass) -> None:
    """A restart in place that recreates some pods (a hybrid restart,
    :mod:`.inplace.decisions`): a missing pod is created again, for the job's restart
    generation and held at its barrier until every pod is released together; a pod
    still terminating holds its slot (force-deleted once stuck, as in :func:`sync`). The
    Scheduler Service stays: a new Scheduler pod is behind the same ClusterIP, so no
    ``MS_SCHED_HOST`` changes."""
    reap_stuck_terminating(p)
    sched_host = sync_scheduler_service(p)
    if not all(system.release_pods(p) for system in p.systems):
        return
    create_missing_pods(p, sched_host, hold=True)


def placement(p: PlanningPass, replica_type: str) -> Placement | None:
    """What the scheduling systems add to the replica type's pods."""
    out: Placement | None = None
    for system in p.systems:
        more = system.placement(p, replica_type)
        if more is not None:
            out = more if out is None else out + more
    return out


def reap_stuck_terminating(p: PlanningPass) -> None:
    for pod in p.pods:
        meta = pod["metadata"]
        deleted = parse_time(meta.get("deletionTimestamp"))
        if deleted is None:
            continue
        # deletionTimestamp already includes the grace period. On a node that is not
        # ready (past --node-lost-after), its kubelet would have confirmed the kill by
        # then if it could: no more waiting.
        overdue = (p.now - deleted).total_seconds()
        limit = 0.0 if p.node_down(pod) else p.opts.stuck_terminating_seconds
        if overdue >= limit:
            p.force_delete_pod(pod)
            p.event(
                "Warning",
                "ForceDeletedStuckPod",
                f"Pod {p.view.namespace}/{meta['name']} was terminating for "
                f"{int(overdue)}s past its grace period (its node is unreachable); "
                "force-deleted so the replica can be recreated.",
            )
        else:
            p.requeue_at(limit - overdue)
