"""The dataparallel builder produces valid MSJobs without a hand-written PodTemplate."""

from __future__ import annotations

from msop.api import apply_defaults, validate
from msop.msjob import desired
from msop.sdk import dataparallel_job, msrun_job


def test_minimal_job_is_valid_and_distributed() -> None:
    job = dataparallel_job("mnist", "mindspore:2.3", "python train.py", workers=4)
    assert validate(job) == []
    assert job["apiVersion"] == "mindspore.gitee.com/v1" and job["kind"] == "MSJob"
    specs = job["spec"]["msReplicaSpecs"]
    assert list(specs) == ["Scheduler", "Worker"]
    assert specs["Scheduler"]["replicas"] == 1
    assert specs["Worker"]["replicas"] == 4
    container = specs["Worker"]["template"]["spec"]["containers"][0]
    assert container == {
        "name": "mindspore",
        "image": "mindspore:2.3",
        "command": ["/bin/sh", "-c", "python train.py"],
    }
    assert "runPolicy" not in job["spec"]


def test_everything_set() -> None:
    volumes = [{"name": "data", "hostPath": {"path": "/data"}}]
    mounts = [{"name": "data", "mountPath": "/data"}]
    job = dataparallel_job(
        "wd",
        "img",
        ["python", "train.py", "--epochs=1"],
        workers=2,
        ps=3,
        gpus_per_worker=8,
        env={"GLOG_v": "1"},
        volumes=volumes,
        volume_mounts=mounts,
        namespace="team-a",
        labels={"team": "a"},
        clean_pod_policy="None",
        success_policy="AllWorkers",
        restart_scope="Pod",
        backoff_limit=2,
        worker_resources={"limits": {"memory": "16Gi"}, "requests": {"cpu": "4"}},
        image_pull_policy="IfNotPresent",
    )
    assert validate(job) == []
    assert job["metadata"] == {"name": "wd", "namespace": "team-a", "labels": {"team": "a"}}
    assert job["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "backoffLimit": 2}
    assert job["spec"]["successPolicy"] == "AllWorkers"
    assert job["spec"]["restartScope"] == "Pod"
    specs = job["spec"]["msReplicaSpecs"]
    assert list(specs) == ["Scheduler", "PS", "Worker"]
    assert specs["PS"]["replicas"] == 3
    worker = specs["Worker"]["template"]["spec"]
    assert worker["volumes"] == volumes
    c = worker["containers"][0]
    assert c["command"] == ["python", "train.py", "--epochs=1"]
    assert c["env"] == [{"name": "GLOG_v", "value": "1"}]
    assert c["volumeMounts"] == mounts
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert c["resources"] == {
        "limits": {"memory": "16Gi", "nvidia.com/gpu": 8},
        "requests": {"cpu": "4"},
    }
    # GPUs go to Workers only.
    for rt in ("Scheduler", "PS"):
        assert "resources" not in specs[rt]["template"]["spec"]["containers"][0]
    # Inputs are copied, not shared.
    volumes[0]["name"] = "changed"
    assert worker["volumes"][0]["name"] == "data"


def test_standalone_without_scheduler() -> None:
    job = dataparallel_job("solo", "img", "python train.py", scheduler=False)
    assert validate(job) == []
    assert list(job["spec"]["msReplicaSpecs"]) == ["Worker"]
    assert not desired.has_scheduler(apply_defaults(job))


def test_operator_environment_reaches_the_builder_job() -> None:
    job = apply_defaults(dataparallel_job("mnist", "img", "x", workers=2, ps=1, env={"A": "b"}))
    job["metadata"].update(namespace="ns", uid="u")
    pod = desired.pod(job, "Worker", 1, sched_host="10.0.0.1")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["A"] == "b"
    assert env["MS_ROLE"] == "MS_WORKER"
    assert env["MS_WORKER_NUM"] == "2" and env["MS_SERVER_NUM"] == "1"
    assert env["MS_SCHED_HOST"] == "10.0.0.1"


def test_invalid_input_is_left_for_validation() -> None:
    job = dataparallel_job("Bad_Name", "img", "x", workers=-1)
    paths = {e.path for e in validate(job)}
    assert {"metadata.name", "spec.msReplicaSpecs.Worker.replicas"} <= paths


def test_msrun_job_counts_workers_by_device_and_runs_the_launcher() -> None:
    job = msrun_job("llm", "mindspore:2.3", ["/code/train.py", "--epochs=3"], pods=4,
                    devices_per_pod=8, msrun_flags=["--log_dir=/logs"])  # fmt: skip
    assert validate(job) == []
    assert job["spec"]["msrun"] == {}
    assert list(job["spec"]["msReplicaSpecs"]) == ["Worker"]
    worker = job["spec"]["msReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "ExitCode"
    container = worker["template"]["spec"]["containers"][0]
    assert container["command"] == [
        "python", "-m", "msop.integrations.msrun", "--log_dir=/logs", "/code/train.py",
        "--epochs=3",
    ]  # fmt: skip
    assert container["resources"] == {"limits": {"huawei.com/Ascend910": 8}}
    job["metadata"] = {"name": "llm", "namespace": "ns", "uid": "u"}
    pod = desired.pod(apply_defaults(job), "Worker", 3, sched_host="10.0.0.1")
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert (env["MS_WORKER_NUM"], env["MS_LOCAL_WORKER"], env["MS_NODE_RANK"]) == ("32", "8", "3")


def test_msrun_job_on_cpu_says_how_many_workers() -> None:
    job = msrun_job("cpu", "ms:2.10", "/t.py", pods=2, local_workers=2, master_port=9000)
    assert validate(job) == []
    assert job["spec"]["msrun"] == {"localWorkers": 2, "masterPort": 9000}
    assert [e.path for e in validate(msrun_job("cpu", "ms:2.10", "/t.py"))] == [
        "spec.msrun.localWorkers"
    ]
