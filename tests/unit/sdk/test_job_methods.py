"""The SDK's job methods against a small fake of the API: pods of a job, logs of every
pod (followed across a restart, the previous run), scale/suspend/resume/update, the
typed status and the wait's callback; and the builders' defaults."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from msop.kube.errors import ApiError
from msop.kube.resources import Resource
from msop.sdk import (
    JobStatus,
    MSJobClient,
    MSJobLogsError,
    MSJobNotFoundError,
    MSJobValidationError,
    dataparallel_job,
    msrun_job,
)
from msop.sdk import client as client_module
from msop.sdk.client import KEPT_IN_CONDITION
from tests.support import builders
from tests.support.clients import NoApiServer

JSON = dict[str, Any]


def pod(rtype: str, index: int, uid: str, started: bool = True) -> JSON:
    made = builders.pod(rtype, index)
    made["metadata"]["uid"] = uid
    if not started:
        waiting = {"name": "mindspore", "state": {"waiting": {"reason": "ContainerCreating"}}}
        made["status"] = {"phase": "Pending", "containerStatuses": [waiting]}
    return made


class Api(NoApiServer):
    """Serves one job and its pods; records writes, and the log requests :func:`client`
    serves in ``served``."""

    def __init__(self, job: JSON, pods: list[JSON]) -> None:
        self.job: JSON | None = job
        """The job (None: deleted)."""
        self.pods = pods
        self.calls: list[tuple[str, Any]] = []
        self.conflicts = 0
        self.served: list[tuple[str, Mapping[str, str]]] = []

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        if self.job is None or name != self.job["metadata"]["name"]:
            raise ApiError(404, "NotFound", "not found")
        return self.job

    async def list_all(self, res: Resource, namespace: str | None = None, **kw: Any) -> JSON:
        self.calls.append(("list", kw.get("label_selector")))
        selector = dict(x.split("=") for x in kw["label_selector"].split(","))
        labels = [(p, p["metadata"]["labels"]) for p in self.pods]
        items = [p for p, have in labels if all(have.get(k) == v for k, v in selector.items())]
        return {"items": list(reversed(items))}

    async def patch(
        self, res: Resource, name: str, patch: Any, namespace: str | None = None, **kw: Any
    ) -> JSON:
        self.calls.append(("patch", patch))
        if self.job is None or name != self.job["metadata"]["name"]:
            raise ApiError(404, "NotFound", "not found")
        return self.job

    async def replace(self, res: Resource, body: Mapping[str, Any]) -> JSON:
        self.calls.append(("replace", body))
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409, "Conflict", "the object has been modified")
        return dict(body)


def client(api: Api, logs: Mapping[str, list[str]] | None = None) -> MSJobClient:
    c = MSJobClient(namespace="ns", kube=api)
    served = api.served

    async def stream(
        kube: Any, path: str, query: Mapping[str, str], what: str
    ) -> AsyncIterator[bytes]:
        pod_name = path.rsplit("/", 2)[-2]
        served.append((pod_name, dict(query)))
        which = "agent" if query.get("container") == "msop-agent" else query.get("previous", "")
        key = f"{pod_name}@{which}"
        if logs is None or key not in logs:
            raise MSJobLogsError(f"logs of {what}: 400 BadRequest: container is waiting to start")
        for line in logs[key]:
            yield (line + "\n").encode()

    c._log_stream = stream
    return c


async def test_the_pods_of_a_job_in_replica_order_and_of_one_type() -> None:
    pods = [pod("Worker", 1, "w1"), pod("Scheduler", 0, "s0"), pod("Worker", 0, "w0")]
    api = Api(builders.job(), pods)
    names = [p["metadata"]["name"] for p in await client(api).get_job_pods("j")]
    assert names == ["j-scheduler-0", "j-worker-0", "j-worker-1"]
    workers = await client(api).get_job_pods("j", replica_type="worker")
    assert [p["metadata"]["uid"] for p in workers] == ["w0", "w1"]
    assert api.calls[-1] == (
        "list", "training.kubeflow.org/job-name=j,training.kubeflow.org/replica-type=worker"
    )  # fmt: skip
    with pytest.raises(ValueError, match="replica_type"):
        await client(api).get_job_pods("j", replica_type="Chief")


async def test_logs_of_every_pod_prefixed_by_it_and_the_previous_run() -> None:
    pods = [pod("Scheduler", 0, "s0"), pod("Worker", 0, "w0"), pod("Worker", 1, "w1")]
    logs = {"j-scheduler-0@": ["s"], "j-worker-0@": ["a", "b"], "j-worker-1@": ["c"],
            "j-worker-1@true": ["before the restart"]}  # fmt: skip
    api = Api(builders.job(), pods)
    c = client(api, logs)
    got = [x async for x in c.get_job_logs("j")]
    assert got == [("j-scheduler-0", "s"), ("j-worker-0", "a"), ("j-worker-0", "b"),
                   ("j-worker-1", "c")]  # fmt: skip
    got = [x async for x in c.get_job_logs("j", replica_type="Worker", index=1, previous=True,
                                           tail_lines=5)]  # fmt: skip
    assert got == [("j-worker-1", "before the restart")]
    assert api.served[-1] == ("j-worker-1", {"container": "mindspore", "previous": "true",
                                           "tailLines": "5"})  # fmt: skip
    with pytest.raises(MSJobNotFoundError):
        _ = [x async for x in c.get_job_logs("nope")]


async def test_following_reads_every_pod_and_a_pod_recreated_by_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(client_module, "LOG_LOOK_SECONDS", 0.01)
    job = builders.job({"Worker": 2})
    api = Api(job, [pod("Worker", 0, "w0-a"), pod("Worker", 1, "w1-a", started=False)])
    logs = {"j-worker-0@": ["first run"], "j-worker-1@": ["w1"]}
    c = client(api, logs)
    got: list[tuple[str, str]] = []
    async for item in c.get_job_logs("j", follow=True):
        got.append(item)
        if item == ("j-worker-0", "first run"):
            # The job restarts: both pods made anew; worker 1 starts now.
            logs["j-worker-0@"] = ["second run"]
            api.pods = [pod("Worker", 0, "w0-b"), pod("Worker", 1, "w1-b")]
        if item == ("j-worker-0", "second run"):
            job["status"] = builders.finished()
    assert ("j-worker-0", "first run") in got and ("j-worker-0", "second run") in got
    assert ("j-worker-1", "w1") in got
    assert all(q.get("follow") == "true" for _, q in api.served)


async def test_scale_suspend_resume_patch_the_spec() -> None:
    api = Api(builders.job(), [])
    c = client(api)
    await c.scale("j", 4)
    await c.suspend("j")
    await c.resume("j")
    assert [body for verb, body in api.calls if verb == "patch"] == [
        {"spec": {"msReplicaSpecs": {"Worker": {"replicas": 4}}}},
        {"spec": {"runPolicy": {"suspend": True}}},
        {"spec": {"runPolicy": {"suspend": False}}},
    ]
    with pytest.raises(ValueError):
        await c.scale("j", -1)
    with pytest.raises(MSJobNotFoundError):
        await c.suspend("other")


async def test_update_replaces_spec_and_labels_and_keeps_the_status() -> None:
    stored = builders.job(status=builders.running_status())
    api = Api(stored, [])
    api.conflicts = 1  # the operator wrote the status meanwhile: read again, write again
    new = dataparallel_job("j", "ms:2", "python train.py", workers=3, labels={"team": "a"})
    updated = await client(api).update(new)
    assert [verb for verb, _ in api.calls] == ["replace", "replace"]
    assert updated["spec"]["msReplicaSpecs"]["Worker"]["replicas"] == 3
    assert updated["metadata"]["labels"] == {"team": "a"}
    assert updated["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert updated["status"] == stored["status"]
    with pytest.raises(MSJobValidationError):
        await client(api).update(dataparallel_job("j", "", "x", workers=-1))


def test_the_typed_status_of_a_job() -> None:
    status = builders.running_status(
        replicaStatuses={"Worker": {"active": 2, "restarts": 1}, "Scheduler": {"active": 1}},
        workers="2/2",
        progress={"percentComplete": 40, "epoch": 2, "lastReportTime": builders.T0},
    )
    status["conditions"].insert(1,  # before Running, the latest, as msop orders them
        {"type": "Restarting", "status": "False", "reason": "MSJobRestarted",
         "message": "no longer restarting. The last restart: pod ns/j-worker-1 exited",
         "lastTransitionTime": builders.T0}
    )  # fmt: skip
    s = JobStatus.of(builders.job(status=status))
    assert (s.namespace, s.name, s.state, s.reason) == ("ns", "j", "Running", "MSJobRunning")
    assert s.replicas["Worker"].active == 2 and s.restarts == 1 and s.workers == "2/2"
    assert s.progress is not None and s.progress["percentComplete"] == 40
    assert s.last_failure is not None and "j-worker-1" in s.last_failure.message
    assert not s.finished and s.queued is None and s.start_time == builders.T0
    empty = JobStatus.of({"metadata": {"name": "new", "namespace": "ns"}})
    assert empty.state is None and empty.replicas == {} and empty.last_failure is None


def test_a_resize_is_not_the_last_failure() -> None:
    status = builders.running_status()
    status["conditions"].insert(1,
        {"type": "Restarting", "status": "False", "reason": "MSJobResized",
         "message": "no longer restarting. The last restart: ... the new cluster size",
         "lastTransitionTime": builders.T0}
    )  # fmt: skip
    assert JobStatus.of(builders.job(status=status)).last_failure is None
    status["conditions"][1]["reason"] = "MSJobRestarted"
    assert JobStatus.of(builders.job(status=status)).last_failure is not None


async def test_the_wait_calls_back_with_each_status(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[JobStatus] = []
    running = builders.job(status=builders.running_status())
    done = builders.job(status=builders.finished())

    async def updates(*a: Any, **kw: Any) -> AsyncIterator[tuple[str, JSON]]:
        yield "LIST", {"items": [running]}
        yield "MODIFIED", done

    monkeypatch.setattr(client_module, "list_then_watch", updates)
    c = MSJobClient(namespace="ns", kube=NoApiServer())
    await c.wait_for_job("j", progress=False, callback=seen.append)
    assert [s.state for s in seen] == ["Running", "Succeeded"]


async def test_following_says_what_a_pod_waits_for_once() -> None:
    # A finished job with a pod that never started: one look, one notice, then the end.
    pods = [pod("Worker", 0, "w0", started=False)]
    c = client(Api(builders.job(status=builders.finished()), pods))
    told: list[str] = []
    got = [x async for x in c.get_job_logs("j", follow=True, notice=told.append)]
    assert got == [] and told == ["waiting for pod ns/j-worker-0: ContainerCreating"]


async def test_an_unreadable_pod_does_not_hide_the_others_logs() -> None:
    pods = [pod("Scheduler", 0, "s0"), pod("Worker", 0, "w0"), pod("Worker", 1, "w1")]
    c = client(Api(builders.job(), pods), {"j-scheduler-0@": ["s"], "j-worker-1@": ["c"]})
    got: list[tuple[str, str]] = []
    with pytest.raises(MSJobLogsError, match=r"logs of pod ns/j-worker-0: 400 BadRequest"):
        async for item in c.get_job_logs("j"):
            got.append(item)
    assert got == [("j-scheduler-0", "s"), ("j-worker-1", "c")]


async def test_a_wait_already_over_prints_no_status_line(monkeypatch: pytest.MonkeyPatch) -> None:
    # `msop wait` prints the final status on stdout; a job that already holds the condition
    # was not waited for, so stderr's progress line would say the same thing twice.
    done = builders.job(status=builders.finished())
    running = builders.job(status=builders.running_status())
    answers = [[("LIST", {"items": [done]})],
               [("LIST", {"items": [running]}), ("MODIFIED", done)]]  # fmt: skip

    async def updates(*a: Any, **kw: Any) -> AsyncIterator[tuple[str, JSON]]:
        for item in answers.pop(0):
            yield item

    monkeypatch.setattr(client_module, "list_then_watch", updates)
    c = MSJobClient(namespace="ns", kube=NoApiServer())
    quiet, waited = io.StringIO(), io.StringIO()
    await c.wait_for_job("j", stream=quiet)
    assert quiet.getvalue() == ""
    await c.wait_for_job("j", stream=waited)
    assert len(waited.getvalue().splitlines()) == 2  # Running, then Succeeded


def test_builders_survive_an_oom_kill_and_take_an_accelerator() -> None:
    job = dataparallel_job("j", "img", "x", workers=2, accelerator="npu", accelerators_per_worker=8)
    worker = job["spec"]["msReplicaSpecs"]["Worker"]
    assert worker["restartPolicy"] == "ExitCode"
    limits = worker["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"huawei.com/Ascend910": 8}
    gpu = dataparallel_job("j", "img", "x", gpus_per_worker=2)["spec"]["msReplicaSpecs"]["Worker"]
    assert gpu["template"]["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 2}
    with pytest.raises(ValueError):
        dataparallel_job("j", "img", "x", gpus_per_worker=1, accelerators_per_worker=1)
    with pytest.raises(ValueError, match="accelerator"):
        dataparallel_job("j", "img", "x", accelerator="tpu", accelerators_per_worker=1)
    msrun = msrun_job("j", "img", "t.py", devices_per_pod=4, device_resource="gpu")
    spec = msrun["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 4}


async def test_follow_ends_when_the_job_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(client_module, "LOG_LOOK_SECONDS", 0.01)
    api = Api(builders.job(), [pod("Worker", 0, "w0", started=False)])
    c = client(api)

    async def read() -> list[tuple[str, str]]:
        return [x async for x in c.get_job_logs("j", follow=True)]

    task = asyncio.create_task(read())
    await asyncio.sleep(0.05)
    api.job = None
    with pytest.raises(MSJobNotFoundError):
        await asyncio.wait_for(task, 5)


async def test_the_previous_run_of_a_recreated_or_deleted_pod_is_the_output_the_job_kept() -> None:
    # The job failed after a restart of the whole job: its pods are gone, its Failed
    # condition keeps what the failed run printed last.
    status = builders.finished()
    status["conditions"][-1].update(
        type="Failed", reason="BackoffLimitExceeded",
        message="MSJob ns/j has failed because pod ns/j-worker-1 exited with code 137 after 3 "
        "restart(s) of the job (backoffLimit 3).\nThe last output of pod ns/j-worker-1:\n"
        "step 9\nKilled",
    )  # fmt: skip
    c = client(Api(builders.job(status=status), []))
    kept = [("j-worker-1", KEPT_IN_CONDITION), ("j-worker-1", "step 9"), ("j-worker-1", "Killed")]
    assert KEPT_IN_CONDITION.startswith("----- msop: the failed run's last output, kept in the")
    assert [x async for x in c.get_job_logs("j", previous=True)] == kept
    assert [x async for x in c.get_job_logs("j", previous=True, replica_type="Worker",
                                            index=1)] == kept  # fmt: skip
    with pytest.raises(MSJobLogsError, match="no previous run"):
        _ = [x async for x in c.get_job_logs("j", previous=True, replica_type="Scheduler")]
    # A pod the kubelet restarted in place has a previous run of its own.
    c = client(Api(builders.job(status=status), [pod("Worker", 0, "w0")]),
               {"j-worker-0@true": ["run 1"]})  # fmt: skip
    got = [x async for x in c.get_job_logs("j", previous=True)]
    assert got == [("j-worker-0", "run 1"), *kept]


def kept_by_the_keeper(made: JSON) -> JSON:
    """A pod msop restarts in place: the agent, and the training command under the keeper."""
    spec = made["spec"]
    spec["initContainers"] = [{"name": "msop-agent"}, {"name": "msop-barrier"}]
    spec["containers"][0]["command"] = ["/bin/sh", "-c", "...", "msop-keeper", "/d", "mindspore",
                                        "--", "python", "train.py"]  # fmt: skip
    return made


BEGIN = (
    "----- msop: the stopped run of container mindspore (started 2026-11-28T10:00:00Z; ...) -----"
)
END = "----- msop: end of the stopped run of container mindspore -----"


async def test_the_previous_run_of_a_pod_restarted_in_place_is_the_one_its_agent_kept() -> None:
    # The kubelet removed the containers with their logs; each pod's msop-agent printed the
    # stopped run into its own log (the last one counts), which is read in its place.
    members = [("Scheduler", 0, "s0"), ("Worker", 0, "w0"), ("Worker", 1, "w1")]
    pods = [kept_by_the_keeper(pod(*m)) for m in members]
    logs = {
        "j-scheduler-0@agent": ["msop agent: serving", BEGIN, "sched 1", END, "msop agent: x"],
        "j-worker-0@agent": [BEGIN, "old", END, BEGIN, "epoch 1", "epoch 2", "Killed", END],
        # Its agent printed nothing (a run that kept nothing): the kubelet's previous run.
        "j-worker-1@agent": ["msop agent: serving"],
        "j-worker-1@true": ["from the kubelet"],
    }
    api = Api(builders.job(), pods)
    c = client(api, logs)
    got = [x async for x in c.get_job_logs("j", previous=True)]
    assert got == [
        ("j-scheduler-0", BEGIN), ("j-scheduler-0", "sched 1"), ("j-scheduler-0", END),
        ("j-worker-0", BEGIN), ("j-worker-0", "epoch 1"), ("j-worker-0", "epoch 2"),
        ("j-worker-0", "Killed"), ("j-worker-0", END),
        ("j-worker-1", "from the kubelet"),
    ]  # fmt: skip
    tail = [x async for x in c.get_job_logs("j", previous=True, replica_type="Worker", index=0,
                                            tail_lines=1)]  # fmt: skip
    assert tail == [("j-worker-0", BEGIN), ("j-worker-0", "Killed"), ("j-worker-0", END)]
    # Another container of the pod is not the one kept, and has no previous run.
    with pytest.raises(MSJobLogsError, match="no previous run to show: no pod has one"):
        _ = [x async for x in c.get_job_logs("j", previous=True, container="sidecar",
                                             replica_type="Scheduler")]  # fmt: skip


def test_job_status_reads_the_last_checkpoint_and_where_it_resumes() -> None:
    from msop.sdk import Checkpoint, JobStatus

    saved = {"step": 15, "epoch": 1, "path": "/c/step-15.ckpt", "time": "2026-01-01T00:00:00Z"}
    status_of_job: dict[str, Any] = {
        "conditions": [{"type": "Queued", "status": "True"}],
        "progress": {"lastCheckpoint": saved},
    }
    job = {"metadata": {"name": "j", "namespace": "ns"}, "status": status_of_job}
    status = JobStatus.of(job)
    assert status.last_checkpoint == Checkpoint(15, 1, "/c/step-15.ckpt", "2026-01-01T00:00:00Z")
    assert status.resumes_from == status.last_checkpoint
    assert str(Checkpoint(epoch=3)) == "epoch 3"
    assert Checkpoint.of({"path": "x"}) is None and Checkpoint.of("x") is None
    status_of_job["conditions"] = [{"type": "Succeeded", "status": "True"}]
    assert JobStatus.of(job).resumes_from is None  # done: it never resumes
