"""The SDK on the local cluster: create, wait_for_job, events, logs and delete through
msop.sdk with the operator running; msop render against what the operator created;
and the SDK example of docs/tasks/sdk.md, executed as written."""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from msop.sdk import (
    CLUSTER_IP_PLACEHOLDER,
    UID_PLACEHOLDER,
    MSJobClientSync,
    MSJobFailedError,
    MSJobLogsError,
    MSJobNotFoundError,
    MSJobTimeoutError,
    MSJobValidationError,
    dataparallel_job,
    render,
)
from testbed import KubeletStandIn, LocalCluster, OperatorProcess
from testbed.paths import REPO
from tests.e2e.msjobs import SAMPLES, get, job_pods, wait_events, wait_for, wait_pods

JSON = dict[str, Any]


@pytest.fixture
def client(cluster: LocalCluster, namespace: str) -> Iterator[MSJobClientSync]:
    with MSJobClientSync(cluster.kubeconfig, namespace=namespace) as c:
        yield c


def with_reason(reason: str, evs: list[JSON]) -> list[JSON] | None:
    """``evs`` if one of them has ``reason``, else None (for :func:`wait_for`)."""
    return evs if any(e["reason"] == reason for e in evs) else None


class Driver:
    """Plays the kubelet in a background thread; its exception is re-raised on join."""

    def __init__(self, fn: Callable[[], None]) -> None:
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as e:  # surfaced by join()
            self.error = e

    def join(self) -> None:
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the pod driver thread is stuck"
        if self.error is not None:
            raise self.error


def test_create_wait_events_logs_delete(
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    kubelet: KubeletStandIn,
    client: MSJobClientSync,
) -> None:
    bad = dataparallel_job("Bad_Name", "img", "train", workers=2)
    with pytest.raises(MSJobValidationError, match=r"metadata\.name"):
        client.create(bad)

    name = "sdk-job"
    workers = [f"{name}-worker-{i}" for i in range(3)]
    created = client.create(dataparallel_job(name, "mindspore:sdk", "python train.py", workers=3))
    assert created["metadata"]["uid"]
    assert [j["metadata"]["name"] for j in client.list(label_selector=None)] == [name]

    def drive() -> None:
        wait_pods(cluster, namespace, name, {f"{name}-scheduler-0", *workers})
        for pod in (f"{name}-scheduler-0", *workers):
            kubelet.run(namespace, pod)
        # Highest index first: worker 0's success ends the job (default successPolicy).
        for pod in reversed(workers):
            kubelet.succeed(namespace, pod)

    driver = Driver(drive)
    progress = io.StringIO()
    done = client.wait_for_job(name, timeout=120, stream=progress)
    driver.join()
    conditions = {c["type"]: c["status"] for c in done["status"]["conditions"]}
    assert conditions["Succeeded"] == "True"
    lines = progress.getvalue().splitlines()
    assert lines, "no progress was shown"
    assert len(lines) == len(set(lines))  # one line per change
    assert lines[-1].startswith(f"{namespace}/{name} Succeeded | Scheduler active=")
    assert "Worker active=0 succeeded=3 failed=0" in lines[-1]
    # Waiting again returns at once: the job is finished.
    assert (
        client.wait_for_job(name, timeout=30, progress=False)["metadata"]["uid"]
        == (created["metadata"]["uid"])
    )

    # An Event is written just after the status it announces: it may trail it a moment.
    job_events = wait_for(
        "the MSJobSucceeded Event", lambda: with_reason("MSJobSucceeded", client.get_events(name))
    )
    reasons = [e["reason"] for e in job_events]
    assert {"SuccessfulCreatePod", "MSJobSucceeded"} <= set(reasons)
    assert reasons.index("MSJobSucceeded") > reasons.index("SuccessfulCreatePod")
    stamps = [e.get("lastTimestamp") or e.get("eventTime") or "" for e in job_events]
    assert stamps == sorted(stamps)

    # kwok's nodes serve no container logs: the API server's answer comes back clearly,
    # naming the pod that was asked for.
    with pytest.raises(MSJobLogsError) as info:
        list(client.get_logs(name, replica_type="worker", index=1))
    assert f"logs of pod {namespace}/{name}-worker-1: " in str(info.value)
    with pytest.raises(MSJobLogsError, match=f"pod {namespace}/{name}-ps-0: 404 NotFound"):
        list(client.get_logs(name, replica_type="PS", index=0))

    client.delete(name)
    wait_for("the MSJob to be gone", lambda: get(cluster, namespace, "msjob", name) is None)
    with pytest.raises(MSJobNotFoundError):
        client.get(name)
    with pytest.raises(MSJobNotFoundError):
        client.delete(name)


def test_pods_status_scale_suspend_resume_update_and_a_callback(
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    kubelet: KubeletStandIn,
    client: MSJobClientSync,
) -> None:
    name = "sdk-life"
    client.create(dataparallel_job(name, "mindspore:sdk", "python train.py", workers=2))
    wait_pods(cluster, namespace, name, {f"{name}-scheduler-0", f"{name}-worker-0",
                                         f"{name}-worker-1"})  # fmt: skip
    pods = client.get_job_pods(name)
    assert [p["metadata"]["name"] for p in pods] == [
        f"{name}-scheduler-0", f"{name}-worker-0", f"{name}-worker-1",
    ]  # fmt: skip
    assert len(client.get_job_pods(name, replica_type="Worker")) == 2
    for pod in pods:
        kubelet.run(namespace, pod["metadata"]["name"])
    seen: list[str | None] = []
    client.wait_for_job(name, conditions=("Running",), timeout=60, progress=False,
                        callback=lambda s: seen.append(s.state))  # fmt: skip
    assert seen and seen[-1] == "Running"
    status = client.get_status(name)
    assert status.state == "Running" and status.workers == "2/2"
    assert status.replicas["Worker"].active == 2 and not status.finished

    # Scale: the running cluster restarts with 3 Workers.
    assert client.scale(name, 3)["spec"]["msReplicaSpecs"]["Worker"]["replicas"] == 3
    wait_for("3 Worker pods", lambda: len(client.get_job_pods(name, replica_type="Worker")) == 3)
    # Suspend: every pod goes; resume: they come back.
    client.suspend(name)
    wait_for("Suspended", lambda: client.get_status(name).state == "Suspended")
    wait_for("the pods gone", lambda: not job_pods(cluster, namespace, name))
    client.resume(name)
    wait_for("the pods back", lambda: len(job_pods(cluster, namespace, name)) == 4)
    # Update: a new label and spec, the operator's status kept.
    job = client.get(name)
    job["metadata"]["labels"] = {"team": "a"}
    job["spec"]["runPolicy"] = {**(job["spec"].get("runPolicy") or {}), "backoffLimit": 7}
    updated = client.update(job)
    assert updated["metadata"]["labels"] == {"team": "a"}
    assert updated["spec"]["runPolicy"]["backoffLimit"] == 7
    assert updated["status"]["conditions"]
    client.delete(name)


def test_wait_for_job_failure_and_timeout(
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    kubelet: KubeletStandIn,
    client: MSJobClientSync,
) -> None:
    name = "sdk-fail"
    client.create(dataparallel_job(name, "img", "train", workers=1, scheduler=False))
    with pytest.raises(MSJobTimeoutError) as timeout:
        client.wait_for_job(name, conditions=("Succeeded",), timeout=1, progress=False)
    assert isinstance(timeout.value, TimeoutError)
    assert timeout.value.job is not None and timeout.value.job["metadata"]["name"] == name
    assert "timed out after 1s waiting for Succeeded; last state: " in str(timeout.value)

    kubelet.run(namespace, f"{name}-worker-0")
    kubelet.fail(namespace, f"{name}-worker-0", exit_code=3)
    with pytest.raises(MSJobFailedError) as failed:
        client.wait_for_job(name, conditions=("Succeeded",), timeout=60, progress=False)
    assert failed.value.reason == "MSJobFailed"
    assert "1 Worker replica(s) failed" in str(failed.value)
    # Asking for Failed returns the job instead.
    job = client.wait_for_job(name, timeout=30, progress=False)
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"]["conditions"])


def _is_subset(rendered: Any, live: Any, path: str, mismatches: list[str]) -> None:
    """Every key/value of ``rendered`` is in ``live``; what only ``live`` has was set by the
    API server. Lists match item by item; the server may append items (the ServiceAccount
    admission plugin adds the ``kube-api-access-*`` volume and its mount), never insert.
    Quantities written as numbers come back as strings."""
    if isinstance(rendered, dict):
        if not isinstance(live, dict):
            mismatches.append(f"{path}: {rendered!r} != {live!r}")
            return
        for key, value in rendered.items():
            if key not in live:
                mismatches.append(f"{path}.{key}: missing in the live object")
            else:
                _is_subset(value, live[key], f"{path}.{key}", mismatches)
    elif isinstance(rendered, list):
        if not isinstance(live, list) or len(live) < len(rendered):
            mismatches.append(f"{path}: {rendered!r} != {live!r}")
            return
        for extra in live[len(rendered) :]:
            if not str((extra or {}).get("name", "")).startswith("kube-api-access-"):
                mismatches.append(f"{path}: unexpected extra item {extra!r}")
        for i, (r, v) in enumerate(zip(rendered, live[: len(rendered)], strict=True)):
            _is_subset(r, v, f"{path}[{i}]", mismatches)
    elif rendered != live and not (
        ".resources." in path and isinstance(rendered, int) and str(rendered) == live
    ):
        mismatches.append(f"{path}: rendered {rendered!r}, live {live!r}")


def _fill(obj: Any, values: dict[str, str]) -> Any:
    if isinstance(obj, dict):
        return {k: _fill(v, values) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill(v, values) for v in obj]
    return values.get(obj, obj) if isinstance(obj, str) else obj


def test_render_equals_what_the_operator_created(
    cluster: LocalCluster, operator: OperatorProcess, namespace: str, client: MSJobClientSync
) -> None:
    raw: JSON = yaml.safe_load((SAMPLES / "ms_wide_deep_ps_distribute.yaml").read_text())
    rendered = render(raw, namespace=namespace).objects()
    assert rendered, "the sample renders nothing"
    name = raw["metadata"]["name"]
    job = client.create(raw)

    pod_names = {o["metadata"]["name"] for o in rendered if o["kind"] == "Pod"}
    pods = wait_pods(cluster, namespace, name, pod_names)
    assert set(pods) == pod_names  # nothing more, nothing less
    svc = get(cluster, namespace, "service", f"{name}-scheduler-0")
    assert svc is not None
    live = {("Pod", n): p for n, p in pods.items()} | {("Service", svc["metadata"]["name"]): svc}
    assert {(o["kind"], o["metadata"]["name"]) for o in rendered} == set(live)

    values = {
        UID_PLACEHOLDER: job["metadata"]["uid"],
        CLUSTER_IP_PLACEHOLDER: svc["spec"]["clusterIP"],
    }
    for obj in rendered:
        key = (obj["kind"], obj["metadata"]["name"])
        mismatches: list[str] = []
        _is_subset(_fill(obj, values), live[key], f"{key[0]}/{key[1]}", mismatches)
        assert not mismatches, "\n".join(mismatches)
    # The comparison is not vacuous: the placeholders were there, and were filled.
    text = yaml.safe_dump_all(rendered)
    assert UID_PLACEHOLDER in text and CLUSTER_IP_PLACEHOLDER in text


SDK_PAGE = REPO / "docs" / "tasks" / "sdk.md"


def _docs_example() -> str:
    page = SDK_PAGE.read_text()
    section = page.split("\n## The Python SDK\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "docs/tasks/sdk.md's Python SDK section has no python example"
    return match.group(1)


def test_docs_sdk_example_runs_as_written(
    cluster: LocalCluster,
    operator: OperatorProcess,
    namespace: str,
    kubelet: KubeletStandIn,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = _docs_example()
    monkeypatch.setenv("KUBECONFIG", cluster.kubeconfig)
    monkeypatch.setenv("MSJOB_NAMESPACE", namespace)
    name = "mnist-sdk"

    example_done = threading.Event()

    def drive() -> None:
        # kwok starts the pods; the stand-in waits for each to run, as a kubelet would. The
        # example deletes its job as soon as it is Running, so a pod may be gone by then.
        want = {f"{name}-scheduler-0", f"{name}-worker-0"}
        # kwok may run the pods and the example delete its job before this thread ever
        # sees both pods: stop waiting as soon as the example is done.
        wait_for(
            f"pods {sorted(want)}",
            lambda: example_done.is_set() or (set(job_pods(cluster, namespace, name)) >= want),
            timeout=60,
        )
        if example_done.is_set():
            return
        for pod in sorted(want):
            if example_done.is_set():
                return
            try:
                kubelet.run(namespace, pod)
            except TimeoutError:
                if not example_done.is_set():
                    raise

    driver = Driver(drive)
    try:
        exec(compile(code, "docs/tasks/sdk.md", "exec"), {"__name__": "docs_example"})
    finally:
        example_done.set()
    driver.join()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Running 2/2 ReplicaStatus(active=2, succeeded=0, failed=0, restarts=0)"
    # What it printed are the job's Events as they stood when it asked: each one is stored
    # (Events outlive the job), the pods' creation among them. An Event is written just
    # after the change it announces, so MSJobRunning may trail the status the example saw
    # Running (docs/tasks/sdk.md says so): if it was not printed, it must come.
    stored = wait_events(cluster, namespace, name, "MSJobRunning")
    announced = {f"{e['reason']} {e['message']}" for e in stored}
    assert out[1:] and set(out[1:]) <= announced, (out[1:], announced)
    assert any(line.startswith("SuccessfulCreatePod ") for line in out[1:]), out[1:]
    wait_for(
        "the example's MSJob to be gone", lambda: get(cluster, namespace, "msjob", name) is None
    )
    wait_for("its pods to be gone", lambda: not job_pods(cluster, namespace, name), timeout=60)
