"""The checks every control-plane fault scenario ends with, and its figures.

:func:`final_checks`, after the fault and the recovery:

1. **every job in the state its pods say**: the kubelet pass ends the workers once their
   job says Running; then every job is Succeeded, every worker pod Succeeded, and the
   replica counts agree (``Worker.succeeded == 1``, nothing active);
2. **every pod and Service created exactly once**, per the API server's audit log (a
   write in flight when the API server was SIGKILLed may be stored without its audit
   line; an object with no audited create counts once if it exists, was deleted, or the
   operator announced its create with an Event, which it does only once the object is
   known stored, and was never created again);
3. **no transition lost**: the conditions Created, Running and Succeeded on every job;
   ``MSJobRunning`` and ``MSJobSucceeded`` each exactly one Event with count 1; every
   pod named by exactly one ``SuccessfulCreatePod`` occurrence;
4. **no loop spinning**: over a quiet window after convergence, the operator's requests
   per job (``rest_client_requests_total``), reconciles, and writes to the jobs'
   namespace (audit log: none at all);
5. **healthy without a restart**: every operator that must live through the fault is
   the same process (pid) and ``/readyz`` answers 200.

Figures are printed and added to :data:`FIGURES` (a table at the end of the session).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from typing import Any

from msop.api.resources import MSJOBS
from msop.kube.client import KubeClient
from msop.kube.resources import PODS
from testbed import LocalCluster, OperatorProcess
from tests.e2e.reliability import (
    audit_events,
    condition_types,
    drive_to_success,
    expected_children,
    has_true,
    metric,
    operator_creates,
    scrape,
    wait_until,
)

JSON = dict[str, Any]

#: One row per scenario: its name and what it measured.
FIGURES: list[JSON] = []

LIFECYCLE = {"Created", "Running", "Succeeded"}
ONCE = ("MSJobRunning", "MSJobSucceeded")
_CREATED = re.compile(r"^Created (pod|service)s?: (.+)$")
_WRITES = {"create", "update", "patch", "delete", "deletecollection"}


async def picture(client: KubeClient, ns: str) -> str:
    """Where the jobs and pods of ``ns`` stand, to tell a stuck operator from a stuck
    scheduler or kwok when a wait times out."""
    jobs = (await client.list(MSJOBS, ns))["items"]
    pods = (await client.list(PODS, ns))["items"]
    conditions = Counter(
        next((x["type"] for x in reversed(j.get("status", {}).get("conditions") or [])
              if x.get("status") == "True"), "none")
        for j in jobs
    )  # fmt: skip
    phases = Counter((p.get("status") or {}).get("phase", "none") for p in pods)
    unbound = sum(1 for p in pods if not p["spec"].get("nodeName"))
    return (
        f"{len(jobs)} jobs by latest true condition {dict(conditions)}; {len(pods)} pods by "
        f"phase {dict(phases)}, {unbound} not bound to a node"
    )


async def all_pods_made(client: KubeClient, ns: str, names: list[str], sched: set[str]) -> bool:
    """Every pod the jobs want exists: the operator's part of a recovery (that they then
    run is the scheduler's and kwok's)."""
    want = {k.split("/", 1)[1] for k in expected_children(names, sched) if k.startswith("pods/")}
    try:
        pods = (await client.list(PODS, ns))["items"]
    except Exception:  # the API server still coming back
        return False
    return want <= {p["metadata"]["name"] for p in pods}


def record(scenario: str, **figures: Any) -> None:
    row = {"scenario": scenario, **figures}
    FIGURES.append(row)
    print(f"\n{scenario}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def _ref(audit_event: JSON) -> str:
    ref = audit_event.get("objectRef") or {}
    return f"{ref.get('resource')}/{ref.get('name')}"


def announced(events: list[JSON]) -> Counter[str]:
    """How many times the operator's ``SuccessfulCreatePod``/``SuccessfulCreateService``
    Events name each ``pods/name`` and ``services/name`` (counting repeats)."""
    out: Counter[str] = Counter()
    for e in events:
        if (e.get("involvedObject") or {}).get("kind") != "MSJob":
            continue
        m = _CREATED.match(e.get("message", ""))
        if m and e.get("reason") == f"SuccessfulCreate{m.group(1).capitalize()}":
            for name in m.group(2).split(", "):
                out[f"{m.group(1)}s/{name}"] += int(e.get("count") or 1)
    return out


def created_once(
    cluster: LocalCluster,
    ns: str,
    expected: set[str],
    existing: set[str],
    events: list[JSON],
    recreated: frozenset[str] = frozenset(),
) -> None:
    """Each expected ``resource/name`` stored exactly once by the operator (twice if it
    is in ``recreated``: deleted on purpose) (item 2).

    The audit log counts the creates, but the API server writes an audit line after it
    has stored the object: a SIGKILL in between loses the line (a create in flight at the
    first outage), and the same for a delete (the job's Service, deleted on success, in
    flight at the second). An object with no audited create is still known created if it
    is there, its delete is audited, or the operator announced it: it announces a create
    only on a 201, an AlreadyExists of its own create in doubt, or once its cache shows it.
    """
    audit = audit_events(cluster.audit_log)
    creates = operator_creates(cluster.audit_log, ns, ("pods", "services"))
    twice = {k: n for k, n in creates.items() if n > (2 if k in recreated else 1)}
    assert not twice, f"created more than once (audit log): {twice}\n" + "\n".join(
        f"{e.get('requestReceivedTimestamp')} {e.get('verb')} {_ref(e)} "
        f"{(e.get('responseStatus') or {}).get('code')} from {e.get('sourceIPs')} "
        f"{(e.get('user') or {}).get('username')} {str(e.get('userAgent', '')).split(' ')[0]}"
        for e in audit
        if (e.get("objectRef") or {}).get("namespace") == ns and _ref(e) in twice
        and e.get("verb") in ("create", "delete", "patch", "update")
    )  # fmt: skip
    said = announced(events)
    twice = {k: n for k, n in said.items() if n > (2 if k in recreated else 1)}
    assert not twice, f"announced as created more than once (Events): {twice}"
    deleted = {
        _ref(e)
        for e in audit
        if e.get("verb") == "delete"
        and (e.get("objectRef") or {}).get("namespace") == ns
        and (e.get("responseStatus") or {}).get("code") in (200, 202)
    }
    unaudited = expected - set(creates)
    lost = unaudited - existing - deleted - set(said)
    if lost:
        trail = [
            (
                e.get("verb"),
                _ref(e),
                (e.get("responseStatus") or {}).get("code"),
                str(e.get("userAgent", "")).split(" ")[0],
            )
            for e in audit
            if (e.get("objectRef") or {}).get("namespace") == ns and _ref(e) in lost
        ]
        raise AssertionError(
            f"never created (no audited create or delete, not there, never announced): "
            f"{sorted(lost)}; every audited request on them: {trail}"
        )
    extra = set(creates) - expected
    assert not extra, f"created but not expected: {sorted(extra)[:10]}"


def _disagreements(jobs: list[JSON], pods: list[JSON]) -> dict[str, Any]:
    """Jobs whose Worker counts (succeeded, active) differ from their worker pods'."""
    seen: dict[str, Counter[str]] = {}
    for p in pods:
        labels = p["metadata"].get("labels") or {}
        if labels.get("training.kubeflow.org/replica-type") != "worker":
            continue
        phase = (p.get("status") or {}).get("phase", "Pending")
        if p["metadata"].get("deletionTimestamp"):
            continue
        job = labels.get("training.kubeflow.org/job-name", "")
        seen.setdefault(job, Counter())[
            "succeeded" if phase == "Succeeded" else "failed" if phase == "Failed" else "active"
        ] += 1
    out: dict[str, Any] = {}
    for j in jobs:
        name = j["metadata"]["name"]
        worker = ((j.get("status") or {}).get("replicaStatuses") or {}).get("Worker") or {}
        want = seen.get(name, Counter())
        got = {k: int(worker.get(k) or 0) for k in ("succeeded", "active")}
        if got != {k: want[k] for k in ("succeeded", "active")} or not want["succeeded"]:
            out[name] = {"status": got, "pods": dict(want)}
    return out


def _event_problems(
    events: list[JSON], names: list[str], pods: set[str], recreated: set[str]
) -> tuple[list[str], list[str], int]:
    """(doubled, missing, missing Events): Events announcing a transition or a create more
    than once, or not at all; the last counts Events (one ``SuccessfulCreatePod`` names
    every pod a pass created for its job)."""
    doubled: list[str] = []
    missing: list[str] = []
    by_job: dict[tuple[str, str], list[JSON]] = {}
    named: Counter[str] = Counter()
    for e in events:
        obj = e.get("involvedObject") or {}
        if obj.get("kind") != "MSJob":
            continue
        by_job.setdefault((obj.get("name", ""), e.get("reason", "")), []).append(e)
        for key, n in announced([e]).items():
            if key.startswith("pods/"):
                named[key.split("/", 1)[1]] += n
    missing_events = 0
    for job in names:
        for reason in ONCE:
            evs = by_job.get((job, reason), [])
            total = sum(int(e.get("count") or 1) for e in evs)
            if total > 1:
                doubled.append(f"{job}: {reason} x{total}")
            elif total == 0:
                missing.append(f"{job}: {reason} x0")
                missing_events += 1
    unnamed_jobs: set[str] = set()
    for pod in pods:
        want = 2 if f"pods/{pod}" in recreated else 1
        if named[pod] > want:
            doubled.append(f"pod {pod} named by {named[pod]} SuccessfulCreatePod occurrences")
        elif named[pod] < want:
            missing.append(f"pod {pod} named by {named[pod]} SuccessfulCreatePod occurrences")
            unnamed_jobs.add(pod.rsplit("-", 2)[0])
    return doubled, missing, missing_events + len(unnamed_jobs)


def all_watching(metrics_url: str) -> bool:
    """Whether every informer of the operator at ``metrics_url`` has its watch open."""
    samples = [v for (name, _), v in scrape(metrics_url).items() if name == "informer_watching"]
    return bool(samples) and all(v == 1 for v in samples)


async def final_checks(
    cluster: LocalCluster,
    client: KubeClient,
    ns: str,
    names: list[str],
    with_scheduler: set[str],
    survivors: list[tuple[OperatorProcess, int]],
    *,
    within: float = 240,
    quiet: float = 8.0,
    workers: int = 1,
    recreated: frozenset[str] = frozenset(),
    deleted_jobs: tuple[str, ...] = (),
    lease_requests_per_s: float = 0.0,
    events_unwritten: int = 0,
) -> JSON:
    """Run checks 1-5 (see the module docstring) and return their figures.

    ``survivors``: each operator that must live through the fault, with its pid before
    it; the first is the one whose metrics measure the quiet window. ``recreated``: the
    objects the scenario deleted on purpose, which the operator creates twice;
    ``deleted_jobs``: jobs the scenario deleted, whose children were made once and are
    gone; ``lease_requests_per_s``: what leader election sends while all is quiet;
    ``events_unwritten``: Events an operator that had to stop at once (a lost Lease)
    counted as not written: at most that many may be missing, none doubled."""
    started = time.monotonic()
    jobs = await drive_to_success(client, ns, set(names), within=within)
    converged = time.monotonic() - started
    # 1. state: each job's replica counts are what its pods say (polled: counts are
    # written up to a second after the pods change).
    disagree: dict[str, Any] = {}
    pods: list[JSON] = []
    state_deadline = time.monotonic() + 20
    while True:
        jobs = [
            j for j in (await client.list(MSJOBS, ns))["items"] if j["metadata"]["name"] in names
        ]
        pods = (await client.list(PODS, ns))["items"]
        disagree = _disagreements(jobs, pods)
        if not disagree or time.monotonic() > state_deadline:
            break
        await asyncio.sleep(1)
    assert not disagree, (
        f"replica counts disagree with the pods: {dict(list(disagree.items())[:5])}"
    )
    # 3. transitions
    lost = {
        j["metadata"]["name"]: sorted(condition_types(j))
        for j in jobs
        if not condition_types(j) >= LIFECYCLE or not has_true(j, "Succeeded")
    }
    assert not lost, f"conditions lost: {dict(list(lost.items())[:5])}"
    expected = expected_children(names, with_scheduler, workers)
    expected_pods = {k.split("/", 1)[1] for k in expected if k.startswith("pods/")}
    # Event writes refused during the outage are retried with backoff (up to 10 s apart):
    # give the recorder that long to catch up, then nothing may be missing or doubled.
    doubled: list[str] = []
    missing: list[str] = []
    missing_events = 0
    events_started = time.monotonic()
    events_deadline = events_started + 45
    while True:
        events = json.loads(cluster.kubectl("get", "events", "-n", ns, "-o", "json").stdout)
        doubled, missing, missing_events = _event_problems(
            events["items"], names, expected_pods, set(recreated)
        )
        if doubled or missing_events <= events_unwritten or time.monotonic() > events_deadline:
            break
        await asyncio.sleep(2)
    assert not doubled, f"events doubled: {doubled[:10]} ({len(doubled)} in all)"
    assert missing_events <= events_unwritten, (
        f"{missing_events} events lost ({events_unwritten} accounted for as not written by an "
        f"operator that had to stop): {missing[:10]}"
    )
    events_done = time.monotonic() - events_started
    # 2. created once
    existing = {f"pods/{p['metadata']['name']}" for p in pods}
    existing |= {
        f"services/{s['metadata']['name']}"
        for s in json.loads(cluster.kubectl("get", "services", "-n", ns, "-o", "json").stdout)[
            "items"
        ]
    }
    ghosts = {
        p for p in existing if any(p.split("/", 1)[1].startswith(f"{j}-") for j in deleted_jobs)
    }
    assert not ghosts, f"children of deleted jobs: {sorted(ghosts)}"
    expected |= expected_children(list(deleted_jobs), set(), workers)
    created_once(cluster, ns, expected, existing, events["items"], recreated)
    # 4. quiet window, once the probe's caches follow the API server again: a relist still
    # to come (say its watch was refused while the API server's storage initialized)
    # rightly reconciles the jobs that changed meanwhile.
    probe = survivors[0][0]
    await wait_until(
        "the operator's informers all watching",
        lambda: asyncio.to_thread(all_watching, probe.metrics_url),
        within=60,
    )
    # Events the operators still hold (a retry waiting out its backoff, say) are written
    # before the window opens: the events check above may pass on an allowance for those
    # an operator that had to stop never wrote, while a survivor's own are still coming.
    await wait_until(
        "the operators' events all written",
        lambda: asyncio.to_thread(
            lambda: sum(metric(op.metrics_url, "msop_events_pending") for op, _ in survivors) == 0
        ),
        within=60,
    )
    requests0 = metric(probe.metrics_url, "rest_client_requests_total")
    reconciles0 = metric(probe.metrics_url, "controller_runtime_reconcile_total")
    lines0 = len(audit_events(cluster.audit_log))
    await asyncio.sleep(quiet)
    requests = metric(probe.metrics_url, "rest_client_requests_total") - requests0
    reconciles = metric(probe.metrics_url, "controller_runtime_reconcile_total") - reconciles0
    writes = [
        (e.get("verb"), (e.get("objectRef") or {}).get("resource"))
        for e in audit_events(cluster.audit_log)[lines0:]
        if e.get("verb") in _WRITES
        and (e.get("objectRef") or {}).get("namespace") == ns
        and str(e.get("userAgent", "")).startswith("msop/")
    ]
    assert not writes, f"the operator still writes after converging: {Counter(writes)}"
    # Lease renewals (leader election) and a watch reopened are all that may remain.
    bound = quiet * lease_requests_per_s + 4
    assert requests <= bound, f"{requests:.0f} requests in a {quiet}s quiet window (> {bound})"
    assert reconciles <= len(names) * 0.05 + 2, f"{reconciles:.0f} reconciles while quiet"
    # 5. health
    for op, pid in survivors:
        assert op.alive() and op.proc is not None and op.proc.pid == pid, op.log_tail()
        assert op.ready(), f"/readyz not 200:\n{op.log_tail()}"
    return {
        "converged_s": round(converged, 1),
        "events_complete_after_s": round(events_done, 1),
        "duplicates": 0,
        "lost": 0,
        "events_missing": missing_events,
        "quiet_requests_per_job": round(requests / len(names), 3),
        "quiet_reconciles": int(reconciles),
    }


def operator_writes(
    cluster: LocalCluster, source_ip: str, user: str, since_line: int = 0
) -> list[JSON]:
    """Audited writes (any resource, any namespace) by ``user`` from ``source_ip``."""
    return [
        e
        for e in audit_events(cluster.audit_log)[since_line:]
        if e.get("verb") in _WRITES
        and (e.get("user") or {}).get("username") == user
        and source_ip in (e.get("sourceIPs") or [])
    ]


async def outage(cluster: LocalCluster, component: str, down: float) -> float:
    """SIGKILL ``component``, start it again ``down`` seconds later, wait until the API
    server answers again; return when (monotonic) it did."""
    await asyncio.to_thread(cluster.kill_component, component)
    await asyncio.sleep(down)
    await asyncio.to_thread(cluster.start_component, component)
    await wait_until("the API server to answer again", lambda: _serving(cluster), within=90)
    return time.monotonic()


def _serving(cluster: LocalCluster) -> bool:
    proc = cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=10)
    return proc.returncode == 0
