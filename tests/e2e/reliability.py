"""Shared tools of the reliability scenarios (tests/e2e/kwok/test_reliability*.py).

- small MSJobs and an async driver that creates them in bulk and ends their workers the
  way the kubelet stand-in does (status-subresource patches), fast enough for hundreds;
- the API server's audit log read back: successful creates by the operator, per object;
- the operator's ``/metrics`` and its process (RSS, open TCP connections) read back.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import urllib.request
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from msop.api.resources import MSJOBS
from msop.kube.client import KubeClient
from msop.kube.errors import ApiError, is_already_exists, is_not_found
from msop.kube.resources import PODS, SERVICES, Resource
from testbed import LocalCluster
from testbed.exposition import read_samples
from testbed.kubelet import succeeded_status

JSON = dict[str, Any]
#: The test's own client: its user agent must not look like the operator's (``msop/``).
TEST_AGENT = "reliability-e2e"


def msjob(
    name: str,
    workers: int = 1,
    scheduler: bool = False,
    run_policy: JSON | None = None,
    labels: dict[str, str] | None = None,
) -> JSON:
    """A small MSJob: ``workers`` Never-restart workers, optionally a Scheduler."""

    def replica(n: int) -> JSON:
        return {
            "replicas": n,
            "restartPolicy": "Never",
            "template": {
                "metadata": {"labels": dict(labels or {})},
                "spec": {"containers": [{"name": "mindspore", "image": "mindspore:e2e"}]},
            },
        }

    specs = {"Worker": replica(workers)}
    if scheduler:
        specs["Scheduler"] = replica(1)
    spec: JSON = {"msReplicaSpecs": specs}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name},
        "spec": spec,
    }


def has_true(job: JSON, type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or ()
    )


def condition_types(job: JSON) -> set[str]:
    return {c["type"] for c in (job.get("status") or {}).get("conditions") or ()}


async def create_all(client: KubeClient, ns: str, jobs: Iterable[JSON], parallel: int = 8) -> None:
    """Create MSJobs, ``parallel`` at a time; AlreadyExists is fine."""
    sem = asyncio.Semaphore(parallel)

    async def one(job: JSON) -> None:
        async with sem:
            try:
                await client.create(MSJOBS, job, ns)
            except ApiError as e:
                if not is_already_exists(e):
                    raise

    await asyncio.gather(*(one(j) for j in jobs))


async def succeed_running_workers(client: KubeClient, ns: str, done: set[str]) -> int:
    """One kubelet pass: every Running worker of a job that reports Running succeeds.

    Ending a worker only once its job has said Running keeps the Running transition in
    the job's history. ``done`` collects the pods already ended; returns how many were
    ended in this pass.
    """
    jobs = (await client.list(MSJOBS, ns))["items"]
    running = {j["metadata"]["name"] for j in jobs if has_true(j, "Running")}
    pods = (
        await client.list(PODS, ns, label_selector="training.kubeflow.org/replica-type=worker")
    )["items"]
    todo = [
        p
        for p in pods
        if p["metadata"]["name"] not in done
        and p.get("status", {}).get("phase") == "Running"
        and p["metadata"]["labels"].get("training.kubeflow.org/job-name") in running
    ]
    sem = asyncio.Semaphore(8)

    async def one(pod: JSON) -> None:
        async with sem:
            name = pod["metadata"]["name"]
            try:
                await client.patch(PODS, name, succeeded_status(pod), ns, subresource="status")
            except ApiError as e:
                if not is_not_found(e):
                    raise
            done.add(name)

    await asyncio.gather(*(one(p) for p in todo))
    return len(todo)


async def count(client: KubeClient, res: Resource, ns: str, selector: str | None = None) -> int:
    return len((await client.list(res, ns, label_selector=selector))["items"])


async def children(client: KubeClient, ns: str) -> tuple[int, int]:
    """(pods, services) the operator owns in ``ns``."""
    sel = "training.kubeflow.org/operator-name"
    return await count(client, PODS, ns, sel), await count(client, SERVICES, ns, sel)


# --- the audit log --------------------------------------------------------------------


def audit_events(audit_log: Path) -> list[JSON]:
    out = []
    with audit_log.open(errors="replace") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line being written right now
    return out


def operator_creates(audit_log: Path, ns: str, resources: Iterable[str]) -> Counter[str]:
    """How many times the operator (user agent ``msop/...``) stored each object in ``ns``
    with a create, per ``resource/name``, read from the audit log.

    A 201 stored it. A create in flight when the operator is SIGKILLed is audited as 504
    (the client went away) and may or may not have stored it: when the operator's next
    create of that name succeeds (201) with no delete in between, it had not; otherwise
    (next is 409 AlreadyExists, or none) it had. At Metadata level the log has no UIDs;
    an object stored twice under one name needs two stored creates, which this counts.
    """
    wanted = set(resources)
    history: dict[str, list[tuple[str, int]]] = {}
    for ev in audit_events(audit_log):
        ref = ev.get("objectRef") or {}
        if (
            ref.get("namespace") != ns
            or ref.get("resource") not in wanted
            or ref.get("subresource")
        ):
            continue
        key = f"{ref['resource']}/{ref.get('name', '')}"
        code = (ev.get("responseStatus") or {}).get("code", 0)
        if ev.get("verb") == "create" and str(ev.get("userAgent", "")).startswith("msop/"):
            history.setdefault(key, []).append(("create", code))
        elif ev.get("verb") == "delete" and code in (200, 202):
            history.setdefault(key, []).append(("delete", code))
    n: Counter[str] = Counter()
    for key, steps in history.items():
        for i, (verb, code) in enumerate(steps):
            if verb != "create":
                continue
            if code == 201:
                n[key] += 1
            elif code >= 500:
                later = steps[i + 1 : i + 2]
                if not (later and later[0] == ("create", 201)):
                    n[key] += 1
    return n


def operator_calls(
    audit_log: Path, ns: str, verb: str, resource: str, subresource: str | None = None
) -> list[JSON]:
    """Every request (any outcome) by the operator with this verb on this resource."""
    return [
        ev
        for ev in audit_events(audit_log)
        if ev.get("verb") == verb
        and (ev.get("objectRef") or {}).get("namespace") == ns
        and (ev.get("objectRef") or {}).get("resource") == resource
        and (ev.get("objectRef") or {}).get("subresource") == subresource
        and str(ev.get("userAgent", "")).startswith("msop/")
    ]


# --- the operator from outside -----------------------------------------------------------


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Read a Prometheus text page: (name, labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value for s in read_samples(text)}


def metric(url: str, name: str, **labels: str) -> float:
    """Sum of the samples of ``name`` whose labels include ``labels``; 0 when none."""
    want = set(labels.items())
    return sum(v for (n, ls), v in scrape(url).items() if n == name and want <= ls)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def tcp_connections(pid: int) -> int:
    """Established TCP connections held by the process (its socket fds found in the
    kernel's TCP tables in state 01)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    established = 0
    for table in ("tcp", "tcp6"):
        path = Path(f"/proc/{pid}/net/{table}")
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "01" and fields[9] in inodes:
                established += 1
    return established


async def wait_until(
    what: str, predicate: Any, within: float, interval: float = 0.5, explain: Any = None
) -> Any:
    """Await ``predicate()`` (sync or async) until truthy; AssertionError after ``within``,
    with what the awaitable ``explain()`` says, if given (e.g. where the cluster stands)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: Any = None
    while True:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            detail = f"; {await explain()}" if explain is not None else ""
            raise AssertionError(
                f"timed out after {within}s waiting for {what} (last: {last!r}){detail}"
            )
        await asyncio.sleep(interval)


# --- moved here to be shared by the reliability and the fault scenarios -----------------


async def drive_to_success(
    client: KubeClient, ns: str, names: set[str], within: float, stop: asyncio.Event | None = None
) -> list[Any]:
    """Run the kubelet pass until every job in ``names`` Succeeded; return the jobs."""
    done: set[str] = set()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        await succeed_running_workers(client, ns, done)
        jobs = [
            j for j in (await client.list(MSJOBS, ns))["items"] if j["metadata"]["name"] in names
        ]
        ok = [j for j in jobs if has_true(j, "Succeeded")]
        if len(ok) == len(names) and (stop is None or stop.is_set()):
            return jobs
        if loop.time() > deadline:
            stuck = sorted(
                (j["metadata"]["name"], sorted(condition_types(j)))
                for j in jobs
                if not has_true(j, "Succeeded")
            )[:10]
            raise AssertionError(
                f"{len(ok)}/{len(names)} jobs Succeeded after {within}s; e.g. {stuck}"
            )
        await asyncio.sleep(1.0)


def expected_children(names: list[str], with_scheduler: set[str], workers: int = 1) -> set[str]:
    out = {f"pods/{n}-worker-{i}" for n in names for i in range(workers)}
    out |= {f"pods/{n}-scheduler-0" for n in with_scheduler}
    out |= {f"services/{n}-scheduler-0" for n in with_scheduler}
    return out


def assert_created_once(cluster: LocalCluster, ns: str, expected: set[str]) -> None:
    """Per the audit log, the operator created each expected pod and Service exactly once
    (HTTP 201), and nothing else."""
    creates = operator_creates(cluster.audit_log, ns, ("pods", "services"))
    twice = {k: n for k, n in creates.items() if n > 1}
    assert not twice, f"created more than once (audit log): {twice}"
    missing = expected - set(creates)
    if missing:
        trail = [
            (
                e.get("verb"),
                e.get("objectRef", {}).get("name"),
                e.get("responseStatus", {}).get("code"),
                e.get("userAgent"),
            )
            for e in audit_events(cluster.audit_log)
            if any(m.split("/", 1)[1] == (e.get("objectRef") or {}).get("name") for m in missing)
        ]
        raise AssertionError(f"never created per the audit log: {sorted(missing)}; trail {trail}")
    assert set(creates) == expected, sorted(set(creates) - expected)


async def delete_all_and_wait_gc(cluster: LocalCluster, client: KubeClient, ns: str) -> None:
    cluster.kubectl("delete", "msjobs", "--all", "-n", ns, "--wait=false")
    await wait_until(
        "no pod or Service left after deleting every MSJob",
        lambda: _no_children(client, ns),
        within=120,
        interval=1.0,
    )


async def _no_children(client: KubeClient, ns: str) -> bool:
    return await children(client, ns) == (0, 0)


def proxied_kubeconfig(
    cluster: LocalCluster, proxy_port: int, path: Path, source: Path | None = None
) -> tuple[str, int]:
    """Write a copy of the cluster's kubeconfig (or of ``source``, e.g. a ServiceAccount's)
    that goes through the proxy; return the API server's (host, port)."""
    cfg = yaml.safe_load((source or Path(cluster.kubeconfig)).read_text())
    server = cfg["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy_port}"
    path.write_text(yaml.safe_dump(cfg))
    return host, int(port)


def apiserver_address(cluster: LocalCluster) -> tuple[str, int]:
    cfg = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    server = cfg["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").rsplit(":", 1)
    return host, int(port)


def etcd_compact(cluster: LocalCluster) -> int:
    """Compact the cluster's etcd up to its current revision (gRPC gateway); return it."""
    cfg = json.loads((cluster.workdir / f"{cluster.name}-kwokctl.yaml").read_text())
    base = f"http://127.0.0.1:{cfg['options']['etcdPort']}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            f"{base}/{path}",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            out: dict[str, Any] = json.loads(resp.read())
            return out

    key = base64.b64encode(b"/registry/").decode()
    rev = int(post("range", {"key": key, "limit": 1})["header"]["revision"])
    post("compaction", {"revision": rev, "physical": True})
    return rev


def held(op: Any) -> set[int]:
    """The shards the operator ``op`` (an ``OperatorProcess``) holds, per its
    ``msop_shard_owned``; empty if it cannot say."""
    try:
        samples = scrape(op.metrics_url)
    except OSError:
        return set()
    return {
        int(dict(labels)["shard"])
        for (name, labels), value in samples.items()
        if name == "msop_shard_owned" and value == 1
    }


def job_of(ref: dict[str, Any]) -> str | None:
    """The MSJob an audited write was about (its ``objectRef``): the job itself, or the
    job of a pod or Service."""
    name = str(ref.get("name") or "")
    if ref.get("resource") == "msjobs":
        return name
    if ref.get("resource") in ("pods", "services"):
        return name.rsplit("-", 2)[0]
    return None
