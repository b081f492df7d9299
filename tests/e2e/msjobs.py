"""Reading and waiting on MSJobs, pods and events through kubectl, as a user would."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import yaml

from testbed import KubeletStandIn
from testbed.cluster import Kubectl
from testbed.paths import REPO

SAMPLES = REPO / "config" / "samples"
JSON = dict[str, Any]


def sample(name: str) -> JSON:
    doc: JSON = yaml.safe_load((SAMPLES / name).read_text())
    return doc


def apply(cluster: Kubectl, ns: str, obj: JSON) -> None:
    cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(obj))


def get(cluster: Kubectl, ns: str, kind: str, name: str) -> JSON | None:
    proc = cluster.kubectl("get", kind, name, "-n", ns, "-o", "json", check=False)
    if proc.returncode != 0:
        if "NotFound" in proc.stderr:
            return None
        raise AssertionError(proc.stderr)
    obj: JSON = json.loads(proc.stdout)
    return obj


def items(cluster: Kubectl, ns: str, kind: str, selector: str | None = None) -> list[JSON]:
    args = ["get", kind, "-n", ns, "-o", "json"]
    if selector:
        args += ["-l", selector]
    out: list[JSON] = json.loads(cluster.kubectl(*args).stdout)["items"]
    return out


def job_pods(cluster: Kubectl, ns: str, job: str) -> dict[str, JSON]:
    pods = items(cluster, ns, "pods", f"training.kubeflow.org/job-name={job}")
    return {p["metadata"]["name"]: p for p in pods}


def condition(job: JSON | None, type_: str) -> JSON | None:
    for c in ((job or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def must_condition(job: JSON | None, type_: str) -> JSON:
    """The condition ``type_`` of ``job``; the test fails if it has none."""
    found = condition(job, type_)
    assert found is not None, f"no {type_} condition in {job and job.get('status')}"
    return found


def is_true(job: JSON | None, type_: str) -> bool:
    c = condition(job, type_)
    return c is not None and c.get("status") == "True"


Details = Callable[[], str]
"""What else a timed-out wait should tell, e.g. the job's pod logs (tests/e2e/real/joblogs.py)."""


def wait_for(
    what: str,
    fn: Callable[[], Any],
    timeout: float = 60,
    interval: float = 0.2,
    details: Details | None = None,
) -> Any:
    """Poll ``fn`` until it returns something truthy; AssertionError with ``what`` (and
    ``details()``) otherwise."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    more = f"\n{details()}" if details else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){more}")


def wait_condition(
    cluster: Kubectl,
    ns: str,
    name: str,
    type_: str,
    timeout: float = 60,
    details: Details | None = None,
) -> JSON:
    def check() -> JSON | None:
        job = get(cluster, ns, "msjob", name)
        return job if is_true(job, type_) else None

    try:
        job: JSON = wait_for(f"MSJob {ns}/{name} {type_}", check, timeout)
    except AssertionError:
        job_now = get(cluster, ns, "msjob", name)
        more = f"\n{details()}" if details else ""
        raise AssertionError(
            f"MSJob {ns}/{name} never {type_}; status: "
            f"{json.dumps((job_now or {}).get('status'), indent=1)}{more}"
        ) from None
    return job


def wait_pods(
    cluster: Kubectl, ns: str, job: str, names: set[str], timeout: float = 60
) -> dict[str, JSON]:
    def check() -> dict[str, JSON] | None:
        pods = job_pods(cluster, ns, job)
        return pods if set(pods) >= names else None

    out: dict[str, JSON] = wait_for(f"pods {sorted(names)}", check, timeout)
    return out


def events(cluster: Kubectl, ns: str, name: str) -> list[JSON]:
    evs = items(cluster, ns, "events")
    return [e for e in evs if e["involvedObject"].get("name") == name]


def event_reasons(cluster: Kubectl, ns: str, name: str) -> set[str]:
    return {e["reason"] for e in events(cluster, ns, name)}


def wait_events(
    cluster: Kubectl, ns: str, name: str, *reasons: str, timeout: float = 30
) -> list[JSON]:
    """The Events of ``name`` once each of ``reasons`` is among them. The operator writes an
    Event just after the status change it announces, so the Event of a condition a test has
    just seen may not be stored yet: assert on Events through this, not at once."""

    def check() -> list[JSON] | None:
        evs = events(cluster, ns, name)
        return evs if set(reasons) <= {e["reason"] for e in evs} else None

    out: list[JSON] = wait_for(f"{name}'s Events {sorted(reasons)}", check, timeout)
    return out


def env_of(pod: JSON) -> dict[str, Any]:
    for c in pod["spec"]["containers"]:
        if c["name"] == "mindspore":
            return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env") or []}
    return {}


def bound(cluster: Kubectl, ns: str, job: str) -> dict[str, str]:
    """The job's live pods that have a node: name -> node."""
    return {
        name: p["spec"]["nodeName"]
        for name, p in job_pods(cluster, ns, job).items()
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


def wait_bound(cluster: Kubectl, ns: str, job: str, n: int, timeout: float = 60) -> dict[str, str]:
    def details() -> str:
        status = (get(cluster, ns, "msjob", job) or {}).get("status") or {}
        pods = {k: p["status"].get("phase") for k, p in job_pods(cluster, ns, job).items()}
        # The scheduling objects of the job, where they are served: Volcano's PodGroup,
        # Kueue's Workloads, Kubernetes' Workload and PodGroup (each kind by its group).
        more = []
        for kind in (
            "podgroups.scheduling.volcano.sh",
            "workloads.kueue.x-k8s.io",
            "workloads.scheduling.k8s.io",
            "podgroups.scheduling.k8s.io",
        ):
            proc = cluster.kubectl("get", kind, "-n", ns, "-l",
                                   f"training.kubeflow.org/job-name={job}", "-o", "json",
                                   check=False)  # fmt: skip
            if proc.returncode == 0:
                for obj in json.loads(proc.stdout)["items"]:
                    more.append(f"{kind}: {json.dumps(obj.get('spec'))[:600]} "
                                f"{json.dumps(obj.get('status'))}")  # fmt: skip
        return (
            f"MSJob conditions: {json.dumps(status.get('conditions'))}\npods: {pods}\n"
            + "\n".join(more)
        )

    out: dict[str, str] = wait_for(
        f"{n} pods of {job} bound",
        lambda: (b := bound(cluster, ns, job)) and len(b) == n and b,
        timeout,
        details=details,
    )
    return out


def finish(kubelet: KubeletStandIn, cluster: Kubectl, ns: str, job: str, workers: int) -> None:
    """Workers exit 0 (worker 0 last: its success ends the job)."""
    for i in reversed(range(workers)):
        kubelet.succeed(ns, f"{job}-worker-{i}")
    wait_condition(cluster, ns, job, "Succeeded")


def state_column(cluster: Kubectl, ns: str, job: str) -> str:
    out: str = cluster.kubectl(
        "get", "msjob", job, "-n", ns, "-o", "custom-columns=STATE:.status.conditions[-1:].type",
        "--no-headers",
    ).stdout.strip()  # fmt: skip
    return out


def event_count(cluster: Kubectl, ns: str, job: str, reason: str) -> int:
    return sum(int(e.get("count") or 1) for e in events(cluster, ns, job) if e["reason"] == reason)


def queued(cluster: Kubectl, ns: str, job: str) -> JSON | None:
    return condition(get(cluster, ns, "msjob", job), "Queued")


def wait_queued(cluster: Kubectl, ns: str, job: str, reason: str, timeout: float = 60) -> JSON:
    out: JSON = wait_for(
        f"{job} Queued with reason {reason}",
        lambda: (
            (q := queued(cluster, ns, job))
            and q["status"] == "True"
            and q["reason"] == reason
            and q
        ),
        timeout,
    )
    return out
