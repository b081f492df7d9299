"""MultiKueue: MSJobs submitted once to a manager cluster, run on worker clusters.

Three local control planes: the session's cluster is the manager, two more are workers,
each with a real Kueue (built from its Go module) and its own ``msop run --enable-kueue``.
The manager's Kueue connects to each worker as a ServiceAccount bound to
``config/multikueue/worker``'s role (the documented RBAC, so a missing permission fails
here). Each worker's ClusterQueue holds one job (3 CPUs): a job dispatched from the
manager lands on a worker with free quota, its status comes back to the manager, and msop
on the manager creates no pod.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import ipaddress
import itertools
import json
import os
import socketserver
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from bench.reporters import report_body, response_for
from testbed import KubeletStandIn, LocalCluster
from testbed.kueue import EXTERNAL_FRAMEWORK, NAMESPACE, Kueue, build
from testbed.paths import CACHE, REPO
from tests.e2e.msjobs import (
    condition,
    env_of,
    get,
    is_true,
    items,
    job_pods,
    wait_condition,
    wait_for,
)
from tests.e2e.msjobs import (
    queued as queued_condition,
)
from tests.e2e.sessions import (
    build_binaries,
    install_crds,
    operator_factory,
    run_addon,
    run_session_cluster,
)
from tests.e2e.tcpproxy import TcpProxy

JSON = dict[str, Any]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREBUILT_LABEL = "kueue.x-k8s.io/prebuilt-workload-name"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
ORIGIN = "msop-e2e"
WORKER_SA = "multikueue"
JOB_NAME = "training.kubeflow.org/job-name"
#: The manager's multiKueue.workerLostTimeout, and msop's on the workers (seconds).
WORKER_LOST_TIMEOUT = 20
HELD = "MultiKueueWorkerLost"
#: msop's --multikueue-lost-copy-hold on the workers, in the lost-worker test (seconds).
HOLD = 150


def create(cluster: LocalCluster, obj: JSON) -> None:
    cluster.kubectl("apply", "-f", "-", input=json.dumps(obj))


def kueue_obj(kind: str, name: str, spec: JSON, ns: str | None = None) -> JSON:
    meta: JSON = {"name": name, **({"namespace": ns} if ns else {})}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": kind, "metadata": meta, "spec": spec}


def cluster_queue(
    name: str, cpu: str, checks: list[str] | None = None, flavor: str = "default"
) -> JSON:
    spec: JSON = {
        "namespaceSelector": {},
        "resourceGroups": [{
            "coveredResources": ["cpu", "memory"],
            "flavors": [{"name": flavor, "resources": [
                {"name": "cpu", "nominalQuota": cpu},
                {"name": "memory", "nominalQuota": "64Gi"},
            ]}],
        }],
    }  # fmt: skip
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in checks]}
    else:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return kueue_obj("ClusterQueue", name, spec)


def active(cluster: LocalCluster, kind: str, name: str) -> bool:
    obj = get(cluster, "", kind, name) or {}
    return bool((condition(obj, "Active") or {}).get("status") == "True")


def sa_kubeconfig(cluster: LocalCluster, server: str | None = None) -> str:
    """A self-contained kubeconfig for the worker's MultiKueue ServiceAccount: the CA as
    data and a bound token, as MultiKueue requires (no file paths); ``server``: reach the
    API server there (a proxy) instead."""
    token = cluster.kubectl(
        "create", "token", WORKER_SA, "-n", NAMESPACE, "--duration=2h"
    ).stdout.strip()
    raw = json.loads(
        cluster.kubectl("config", "view", "--raw", "--minify", "--flatten", "-o", "json").stdout
    )
    ca = raw["clusters"][0]["cluster"]["certificate-authority-data"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "worker", "cluster": {
            "server": server or raw["clusters"][0]["cluster"]["server"],
            "certificate-authority-data": ca,
        }}],
        "users": [{"name": WORKER_SA, "user": {"token": token}}],
        "contexts": [{"name": "worker", "context": {"cluster": "worker", "user": WORKER_SA}}],
        "current-context": "worker",
    }  # fmt: skip
    return json.dumps(config)


@dataclass
class Clusters:
    manager: LocalCluster
    workers: dict[str, LocalCluster]


@pytest.fixture(scope="module")
def clusters(cluster: LocalCluster) -> Iterator[Clusters]:
    """Two worker clusters with Kueue, connected to the manager's Kueue by MultiKueue."""
    bin_dir = build_binaries()
    workers: dict[str, LocalCluster] = {}
    with contextlib.ExitStack() as stack:
        for name in ("w1", "w2"):
            w = LocalCluster(
                name=f"msop-mk-{name}-{os.getpid()}", bin_dir=bin_dir,
                workdir=CACHE / "kwok", nodes=2,
            )  # fmt: skip
            workers[name] = w
            stack.enter_context(_session(w, install_crds))
        for name, w in workers.items():
            stack.enter_context(_addon(
                f"Kueue on {name}", build,
                functools.partial(Kueue, w, name=f"kueue-mk-{name}"),
            ))  # fmt: skip
            w.kubectl("apply", "-k", str(REPO / "config/multikueue/worker"))
            w.kubectl("create", "serviceaccount", WORKER_SA, "-n", NAMESPACE)
            w.kubectl(
                "create", "clusterrolebinding", "msop-multikueue-worker",
                "--clusterrole=msop-multikueue-worker-role",
                f"--serviceaccount={NAMESPACE}:{WORKER_SA}",
            )  # fmt: skip
            create(w, kueue_obj("ResourceFlavor", "default", {}))
            create(w, cluster_queue("cq", "3"))
        multikueue = {"multiKueue": {
            "externalFrameworks": [{"name": EXTERNAL_FRAMEWORK}],
            "origin": ORIGIN, "gcInterval": "30s",
            # A worker lost this long loses its jobs to another (the lost-worker test).
            "workerLostTimeout": f"{WORKER_LOST_TIMEOUT}s",
        }}  # fmt: skip
        stack.enter_context(_addon(
            "Kueue (MultiKueue manager)", build,
            lambda b, logs: Kueue(cluster, b, logs, name="kueue-mk-manager",
                                  extra_config=multikueue),
        ))  # fmt: skip
        # Before Kueue stops: it removes its finalizers from what goes.
        stack.callback(_forget_multikueue, cluster)
        cluster.kubectl("apply", "-k", str(REPO / "config/multikueue/manager"))
        for name, w in workers.items():
            secret = {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": f"mk-{name}", "namespace": NAMESPACE},
                "data": {"kubeconfig": base64.b64encode(sa_kubeconfig(w).encode()).decode()},
            }  # fmt: skip
            create(cluster, secret)
            create(cluster, kueue_obj("MultiKueueCluster", name, {
                "clusterSource": {"kubeConfig": {"locationType": "Secret",
                                                 "location": f"mk-{name}"}},
            }))  # fmt: skip
        create(cluster, kueue_obj("MultiKueueConfig", "mk", {"clusters": list(workers)}))
        create(cluster, kueue_obj("AdmissionCheck", "mk", {
            "controllerName": MULTIKUEUE,
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                           "name": "mk"},
        }))  # fmt: skip
        create(cluster, kueue_obj("ResourceFlavor", "mk-default", {}))
        create(cluster, cluster_queue("cq-mk", "12", checks=["mk"], flavor="mk-default"))
        for name in workers:
            wait_for(f"MultiKueueCluster {name} active",
                     functools.partial(active, cluster, "multikueuecluster", name), 60)  # fmt: skip
        wait_for("AdmissionCheck mk active", lambda: active(cluster, "admissioncheck", "mk"), 60)
        wait_for("ClusterQueue cq-mk active", lambda: active(cluster, "clusterqueue", "cq-mk"))
        for w in workers.values():
            wait_for(
                "worker ClusterQueue active", functools.partial(active, w, "clusterqueue", "cq")
            )
        yield Clusters(cluster, workers)


_session = contextlib.contextmanager(run_session_cluster)
_addon = contextlib.contextmanager(run_addon)


def _forget_multikueue(cluster: LocalCluster) -> None:
    """The manager's MultiKueue objects go, so later tests see the cluster as it was."""
    for obj in ("clusterqueue/cq-mk", "admissioncheck/mk", "multikueueconfig/mk",
                "multikueuecluster/w1", "multikueuecluster/w2", "resourceflavor/mk-default",
                "clusterrolebinding/msop-multikueue-manager-rolebinding",
                "clusterrole/msop-multikueue-manager-role"):  # fmt: skip
        cluster.kubectl("delete", obj, "--ignore-not-found", "--wait=false", check=False)
    cluster.kubectl("delete", "secret", "mk-w1", "mk-w2", "-n", NAMESPACE,
                    "--ignore-not-found", check=False)  # fmt: skip


def msjob(name: str, ns: str, *, dispatched: bool) -> JSON:
    """A Scheduler and two Workers of 1 CPU each (3 CPUs: one worker cluster's quota)."""
    tmpl: JSON = {"containers": [{
        "name": "mindspore", "image": "mindspore:e2e",
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }]}  # fmt: skip
    replica = {"restartPolicy": "Never", "template": {"spec": tmpl}}
    spec: JSON = {
        "runPolicy": {"cleanPodPolicy": "None", "backoffLimit": 0},
        "msReplicaSpecs": {"Scheduler": {"replicas": 1, **replica},
                           "Worker": {"replicas": 2, **replica}},
    }  # fmt: skip
    if dispatched:
        spec["managedBy"] = MULTIKUEUE
    return {
        "apiVersion": "mindspore.gitee.com/v1", "kind": "MSJob",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: "team"}},
        "spec": spec,
    }  # fmt: skip


def where(workers: dict[str, LocalCluster], ns: str, job: str) -> list[str]:
    """The worker clusters that hold a copy of ``job``."""
    return [n for n, w in workers.items() if get(w, ns, "msjob", job) is not None]


@contextlib.contextmanager
def progress_reporter(pod: JSON) -> Iterator[None]:
    """Answer ``GET /progress`` on the (loopback) pod IP and progress port of ``pod``, as
    its reporter would, with a report one step further each time."""
    ip = pod["status"]["podIP"]
    assert ipaddress.ip_address(ip).is_loopback, ip  # nothing listens outside loopback
    port = int(env_of(pod)["MSOP_PROGRESS_PORT"])
    meta = pod["metadata"]
    seq = itertools.count(1)

    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            request = self.rfile.readline() + b"\r\n"
            body = report_body(meta["name"], meta["uid"], next(seq), 1.0)
            self.wfile.write(response_for(request, body))

    class Server(socketserver.ThreadingTCPServer):
        allow_reuse_address = True  # an earlier run's connections may be in TIME_WAIT
        daemon_threads = True

    server = Server((ip, port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def audited_pod_creates(cluster: LocalCluster, ns: str) -> int:
    n = 0
    for line in cluster.audit_log.read_text().splitlines():
        if f'"namespace":"{ns}"' not in line or '"resource":"pods"' not in line:
            continue
        entry = json.loads(line)
        ref = entry.get("objectRef") or {}
        if (
            entry.get("verb") == "create"
            and ref.get("resource") == "pods"
            and not ref.get("subresource")
        ):
            n += 1
    return n


def test_jobs_submitted_to_the_manager_run_on_the_worker_with_free_quota(
    clusters: Clusters, namespace: str
) -> None:
    manager, workers = clusters.manager, clusters.workers
    w1, w2 = workers["w1"], workers["w2"]
    create(manager, kueue_obj("LocalQueue", "team", {"clusterQueue": "cq-mk"}, namespace))
    for w in workers.values():
        w.kubectl("create", "namespace", namespace)
        create(w, kueue_obj("LocalQueue", "team", {"clusterQueue": "cq"}, namespace))
    with (
        operator_factory(manager.kubeconfig, namespace) as on_manager,
        operator_factory(w1.kubeconfig, namespace) as on_w1,
        operator_factory(w2.kubeconfig, namespace) as on_w2,
    ):
        for start in (on_manager, on_w1, on_w2):
            start("--enable-kueue", "--progress-interval", "1")

        # w1 is full: a job of its own holds its quota.
        create(w1, msjob("filler", namespace, dispatched=False))
        wait_condition(w1, namespace, "filler", "Running", timeout=60)

        # The first dispatched job can only go to w2.
        create(manager, msjob("first", namespace, dispatched=True))
        wait_for("first copied to w2", lambda: where(workers, namespace, "first") == ["w2"], 90)
        copy = get(w2, namespace, "msjob", "first") or {}
        assert PREBUILT_LABEL in copy["metadata"]["labels"]
        assert "managedBy" not in copy["spec"]
        wait_condition(w2, namespace, "first", "Running", timeout=60)
        # Its status on the manager is the worker's: conditions, replica counts.
        wait_condition(manager, namespace, "first", "Running", timeout=60)
        mirrored = get(manager, namespace, "msjob", "first") or {}
        assert mirrored["status"]["replicaStatuses"]["Worker"]["active"] == 2
        assert mirrored["status"].get("workers") == "2/2"
        # Its progress too: Worker 0's reporter (simulated on its loopback pod IP) is
        # polled by msop on w2, and the report reaches the manager.
        worker0 = job_pods(w2, namespace, "first")["first-worker-0"]
        with progress_reporter(worker0):
            wait_for(
                "first's progress on the manager",
                lambda: (
                    ((get(manager, namespace, "msjob", "first") or {}).get("status", {}))
                    .get("progress", {})
                    .get("step", 0)
                    > 0
                ),
                60,
            )
        # msop on w2 adopted the Workload MultiKueue pre-built there.
        wl_name = copy["metadata"]["labels"][PREBUILT_LABEL]
        wl = get(w2, namespace, "workload", wl_name) or {}
        owner = wl["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"]) == ("MSJob", copy["metadata"]["uid"])

        # Both workers full: the second waits on the manager, and says why.
        create(manager, msjob("second", namespace, dispatched=True))
        wait_for(
            "second waits on the manager for a worker",
            lambda: (
                "admission checks are pending"
                in ((queued_condition(manager, namespace, "second") or {}).get("message") or "")
            ),
            60,
        )
        assert where(workers, namespace, "second") == []
        # w1 frees its quota: the second spills there.
        w1.kubectl("delete", "msjob", "filler", "-n", namespace, "--wait=true")
        wait_for("second copied to w1", lambda: where(workers, namespace, "second") == ["w1"], 90)
        wait_condition(manager, namespace, "second", "Running", timeout=90)

        # Suspended on the manager: its run on w1 ends (copy and pods gone), and the
        # manager says Suspended; resumed, it is dispatched again.
        suspend = '{"spec":{"runPolicy":{"suspend":%s}}}'
        manager.kubectl("patch", "msjob", "second", "-n", namespace, "--type=merge",
                        "-p", suspend % "true")  # fmt: skip
        wait_condition(manager, namespace, "second", "Suspended", timeout=90)
        wait_for("second's copy removed", lambda: where(workers, namespace, "second") == [], 90)
        wait_for(
            "second's pods gone",
            lambda: not items(w1, namespace, "pods", "training.kubeflow.org/job-name=second"),
            60,
        )
        manager.kubectl("patch", "msjob", "second", "-n", namespace, "--type=merge",
                        "-p", suspend % "false")  # fmt: skip
        wait_for(
            "second dispatched again", lambda: where(workers, namespace, "second") == ["w1"], 90
        )
        wait_condition(manager, namespace, "second", "Running", timeout=90)

        # A preemption on w2 ends the first's run there: the manager queues it again (not
        # failed, though its backoffLimit is 0), and once w2 has room it runs there again.
        # Kueue does that one of two ways: the manager's Workload loses its quota long enough
        # for MultiKueue to delete the copy and dispatch a new one; or it gets quota again
        # before MultiKueue looks, and the preempted copy is admitted again on w2. Either way
        # the pods that ran before are gone and new ones run.
        create(w2, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
                    "metadata": {"name": "urgent"}, "value": 1000})  # fmt: skip
        urgent = msjob("urgent", namespace, dispatched=False)
        urgent["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
        first_uid = (get(w2, namespace, "msjob", "first") or {})["metadata"]["uid"]
        ran_before = {p["metadata"]["uid"] for p in job_pods(w2, namespace, "first").values()}
        assert len(ran_before) == 3, ran_before
        create(w2, urgent)
        wait_condition(w2, namespace, "urgent", "Running", timeout=90)
        wait_for(
            "first queued again on the manager",
            lambda: is_true(get(manager, namespace, "msjob", "first"), "Queued"),
            90,
        )
        evicted = get(manager, namespace, "msjob", "first")
        assert not is_true(evicted, "Failed") and not is_true(evicted, "Running"), evicted
        w2.kubectl("delete", "msjob", "urgent", "-n", namespace, "--wait=true")
        w2.kubectl("delete", "workloadpriorityclass", "urgent")

        def first_runs_again() -> bool:
            copy = get(w2, namespace, "msjob", "first")
            pods = {p["metadata"]["uid"] for p in job_pods(w2, namespace, "first").values()}
            return (
                copy is not None
                and is_true(copy, "Running")
                and len(pods) == 3
                and not pods & ran_before
            )

        def where_first_is() -> str:
            """Each cluster's Workloads and copy of the first: what a timed-out wait says."""
            lines = []
            for name, c in (("manager", manager), *workers.items()):
                for wl in items(c, namespace, "workloads"):
                    if wl["metadata"]["labels"].get(JOB_NAME) != "first":
                        continue
                    st = wl.get("status") or {}
                    lines.append(json.dumps({
                        "cluster": name, "workload": wl["metadata"]["name"],
                        "deleting": wl["metadata"].get("deletionTimestamp"),
                        "conditions": [(c["type"], c["status"], c.get("reason"))
                                       for c in st.get("conditions") or []],
                        "checks": st.get("admissionChecks"), "requeue": st.get("requeueState"),
                    }))  # fmt: skip
                job = get(c, namespace, "msjob", "first")
                if job is not None:
                    lines.append(json.dumps({
                        "cluster": name, "msjob": job["metadata"]["uid"],
                        "deleting": job["metadata"].get("deletionTimestamp"),
                        "conditions": [(c["type"], c["status"], c.get("reason"))
                                       for c in (job.get("status") or {}).get("conditions") or []],
                    }))  # fmt: skip
            return "\n".join([f"old copy's uid: {first_uid}", *lines])

        wait_for("first dispatched to w2 again and running", first_runs_again, 120,
                 details=where_first_is)  # fmt: skip
        wait_condition(manager, namespace, "first", "Running", timeout=60)

        # The first succeeds on w2, and on the manager; MultiKueue then removes the copy.
        kubelet = KubeletStandIn(w2)
        for i in (1, 0):
            kubelet.succeed(namespace, f"first-worker-{i}")
        wait_condition(w2, namespace, "first", "Succeeded", timeout=60)
        wait_condition(manager, namespace, "first", "Succeeded", timeout=90)
        wait_for("first's copy removed from w2",
                 lambda: where(workers, namespace, "first") == [], 90)  # fmt: skip

        def finished_here() -> bool:
            wls = [w for w in items(manager, namespace, "workloads")
                   if w["metadata"]["labels"].get(JOB_NAME) == "first"]  # fmt: skip
            return (
                bool(wls)
                and is_true(wls[0], "Finished")
                and (
                    "kueue.x-k8s.io/resource-in-use"
                    not in (wls[0]["metadata"].get("finalizers") or [])
                )
            )

        wait_for("first's Workload Finished and released on the manager", finished_here, 30)

        # Deleting the second on the manager removes it and its Workloads everywhere.
        manager.kubectl("delete", "msjob", "second", "-n", namespace, "--wait=true")
        wait_for("second gone from w1", lambda: where(workers, namespace, "second") == [], 90)
        wait_for(
            "no Workload of second left anywhere",
            lambda: (
                not any(
                    w["metadata"]["labels"].get(JOB_NAME) == "second"
                    for c_ in (manager, w1, w2)
                    for w in items(c_, namespace, "workloads")
                )
            ),
            90,
        )
        wait_for("second's pods gone from w1",
                 lambda: not items(w1, namespace, "pods"), 60)  # fmt: skip

        # msop on the manager never created a pod.
        assert items(manager, namespace, "pods") == []
        time.sleep(1)  # the audit log is written asynchronously
        assert audited_pod_creates(manager, namespace) == 0
        assert audited_pod_creates(w2, namespace) >= 3


def kubeconfig_secret(manager: LocalCluster, name: str, kubeconfig: str) -> None:
    """The manager's Secret that MultiKueueCluster ``name`` reads its kubeconfig from."""
    create(manager, {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": f"mk-{name}", "namespace": NAMESPACE},
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    })  # fmt: skip


@contextlib.contextmanager
def proxied(
    cluster: LocalCluster,
) -> Iterator[tuple[TcpProxy, Callable[[Callable[[], Any]], None]]]:
    """A TCP proxy to ``cluster``'s API server, run on an event loop of its own thread,
    and a function that runs a call of it there."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = TcpProxy("127.0.0.1", cluster.api_port)

    def do(call: Callable[[], Any]) -> None:
        async def run() -> None:
            call()

        asyncio.run_coroutine_threadsafe(run(), loop).result(10)

    try:
        asyncio.run_coroutine_threadsafe(proxy.__aenter__(), loop).result(10)
        yield proxy, do
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(proxy.__aexit__(None, None, None), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def serving(cluster: LocalCluster) -> bool:
    return cluster.kubectl("get", "--raw", "/readyz", check=False, timeout=10).returncode == 0


def test_a_lost_workers_copy_starts_nothing_again_when_the_worker_comes_back(
    clusters: Clusters, namespace: str
) -> None:
    """w1 is lost to the manager (the link cut) and its API server goes down; the manager
    gives the job to w2. w1's API server comes back while the manager cannot reach it
    yet: the stale copy there is still admitted. msop on w1 stops its pods and creates
    and restarts none, for --multikueue-lost-copy-hold; the manager, once it reaches w1
    again, keeps that copy (Kueue v0.17.0) and deletes w2's, and after the hold the
    copy runs again."""
    manager, workers = clusters.manager, clusters.workers
    w1, w2 = workers["w1"], workers["w2"]
    create(manager, kueue_obj("LocalQueue", "team", {"clusterQueue": "cq-mk"}, namespace))
    for w in workers.values():
        w.kubectl("create", "namespace", namespace)
        create(w, kueue_obj("LocalQueue", "team", {"clusterQueue": "cq"}, namespace))
    lost_flags = (
        "--multikueue-worker-lost-timeout", f"{WORKER_LOST_TIMEOUT}s",
        "--multikueue-lost-copy-hold", f"{HOLD}s",
    )  # fmt: skip
    with (
        proxied(w1) as (proxy, on_proxy),
        operator_factory(manager.kubeconfig, namespace) as on_manager,
        operator_factory(w1.kubeconfig, namespace) as on_w1,
        operator_factory(w2.kubeconfig, namespace) as on_w2,
    ):
        # The manager reaches w1 through the proxy, whose cut is the lost link.
        kubeconfig_secret(manager, "w1", sa_kubeconfig(w1, f"https://127.0.0.1:{proxy.port}"))
        try:
            wait_for("the manager reaches w1 through the proxy", lambda: bool(proxy.conns), 60)
            on_manager("--enable-kueue")
            for start in (on_w1, on_w2):
                start("--enable-kueue", *lost_flags)
            # w2 is full: the job goes to w1.
            create(w2, msjob("filler", namespace, dispatched=False))
            wait_condition(w2, namespace, "filler", "Running", timeout=60)
            create(manager, msjob("lost", namespace, dispatched=True))
            wait_for("lost copied to w1", lambda: where(workers, namespace, "lost") == ["w1"], 90)
            wait_condition(w1, namespace, "lost", "Running", timeout=60)
            wait_condition(manager, namespace, "lost", "Running", timeout=60)
            w2.kubectl("delete", "msjob", "filler", "-n", namespace, "--wait=true")
            time.sleep(1)  # the audit log is written asynchronously
            creates_before = audited_pod_creates(w1, namespace)
            assert creates_before == 3

            # w1 is lost: the manager's link is cut, and its API server goes down.
            on_proxy(proxy.hold_new)
            on_proxy(proxy.cut)
            w1.kill_component("kube-apiserver")
            down_at = time.monotonic()
            try:
                # After workerLostTimeout the manager queues the job again: it runs on w2.
                wait_for(
                    "lost dispatched to w2 and running",
                    lambda: is_true(get(w2, namespace, "msjob", "lost"), "Running"),
                    180,
                )
                # The manager may give the job away sooner (it counts from the dispatch):
                # msop on w1 holds after an outage of workerLostTimeout.
                time.sleep(max(0.0, down_at + WORKER_LOST_TIMEOUT + 5 - time.monotonic()))
            finally:
                w1.start_component("kube-apiserver")
            wait_for("w1's API server serving again", lambda: serving(w1), 90)
            for component in w1.dead_components():  # those that lost their leases
                w1.start_component(component)

            # The manager cannot reach w1 yet, and its copy there is still admitted: msop
            # stops its pods, and creates and restarts none.
            back_at = time.monotonic()
            assert get(w1, namespace, "msjob", "lost") is not None, "the cut link let through"
            wait_for(
                "msop on w1 holds the stale copy",
                lambda: (queued_condition(w1, namespace, "lost") or {}).get("reason") == HELD,
                60,
            )
            held = queued_condition(w1, namespace, "lost") or {}
            assert held["status"] == "True" and ORIGIN in held["message"], held
            wait_for("the stale copy's pods stopped on w1",
                     lambda: not job_pods(w1, namespace, "lost"), 60)  # fmt: skip
            events = items(w1, namespace, "events")
            assert [e["type"] for e in events if e.get("reason") == HELD] == ["Warning"]
            time.sleep(5)  # a restart would have been made by now
            assert not job_pods(w1, namespace, "lost")
            assert audited_pod_creates(w1, namespace) == creates_before

            # The manager reaches w1 again. Kueue v0.17.0 keeps the copy admitted first
            # (w1's) and deletes the one that ran meanwhile (w2's): read in its source,
            # multikueue/workload.go, and what this asserts.
            on_proxy(proxy.thaw)
            wait_for("the manager keeps w1's copy and deletes w2's",
                     lambda: where(workers, namespace, "lost") == ["w1"], 240)  # fmt: skip
            kept = time.monotonic() - back_at
            print(f"\nlost worker: the manager kept w1's copy {kept:.0f}s after w1 came back")
            assert kept < HOLD - 20, "the hold ended before this check"
            time.sleep(1)
            assert audited_pod_creates(w1, namespace) == creates_before  # still held
            # The hold ends and the copy the manager kept runs again: never held for ever.
            wait_condition(w1, namespace, "lost", "Running", timeout=HOLD + 120)
            assert audited_pod_creates(w1, namespace) > creates_before
            wait_condition(manager, namespace, "lost", "Running", timeout=60)
        finally:
            kubeconfig_secret(manager, "w1", sa_kubeconfig(w1))
