"""msop render: the planner's output for a new job, equal to desired.pod/scheduler_service."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from msop.api import apply_defaults
from msop.api.constants import DEFAULT_PROGRESS_PORT
from msop.cli import main
from msop.cli.render import render_files
from msop.msjob import desired
from msop.msjob import gang as volcano
from msop.sdk.render import (
    CLUSTER_IP_PLACEHOLDER,
    UID_PLACEHOLDER,
    InvalidJobError,
    render,
)
from testbed.paths import REPO

SAMPLES = REPO / "config" / "samples"
SAMPLE_FILES = sorted(SAMPLES.glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def _expected(raw: dict[str, Any], namespace: str, gang: bool = False) -> list[dict[str, Any]]:
    job = apply_defaults(raw)
    job["metadata"].update(namespace=namespace, uid=UID_PLACEHOLDER)
    if (job["spec"].get("runPolicy") or {}).get("suspend"):
        return []
    first = desired.rendezvous(job)
    services = [desired.scheduler_service(job)] if first else []
    pods = [
        desired.pod(
            job, rt, i, sched_host=CLUSTER_IP_PLACEHOLDER if first and (rt, i) != first else None,
            progress_port=DEFAULT_PROGRESS_PORT,
            placement=volcano.placement(job, rt) if gang else None,
        )
        for rt, i in desired.replica_slots(job)
    ]  # fmt: skip
    return [*services, *pods]


def test_there_are_samples() -> None:
    assert len(SAMPLE_FILES) >= 5


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_each_sample_renders_exactly_the_desired_objects(path: Path) -> None:
    raw = _load(path)
    result = render(raw, namespace="team")
    assert result.objects() == _expected(raw, "team")
    assert bool(result.notes) == (not result.objects())


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: p.name)
def test_cli_output_is_the_same_as_yaml(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "-f", str(path), "-n", "ns1"]) == 0
    out = capsys.readouterr().out
    docs = [d for d in yaml.safe_load_all(out) if d is not None]
    assert docs == _expected(_load(path), "ns1")
    if docs:
        assert out.startswith("---\n")


def test_namespace_from_the_job_then_default() -> None:
    raw = _load(SAMPLES / "ms_wide_deep_dataparallel.yaml")
    assert {o["metadata"]["namespace"] for o in render(raw).objects()} == {"default"}
    raw["metadata"]["namespace"] = "own"
    assert {o["metadata"]["namespace"] for o in render(raw).objects()} == {"own"}
    assert {o["metadata"]["namespace"] for o in render(raw, namespace="x").objects()} == {"x"}


def test_kinds_order_and_placeholders() -> None:
    raw = _load(SAMPLES / "ms_wide_deep_ps_distribute.yaml")
    objs = render(raw).objects()
    assert objs[0]["kind"] == "Service"
    assert objs[1]["metadata"]["name"].endswith("-scheduler-0")
    for o in objs:
        assert o["metadata"]["ownerReferences"][0]["uid"] == UID_PLACEHOLDER
    hosts = {
        e.get("value")
        for o in objs[2:]
        for e in o["spec"]["containers"][0]["env"]
        if e["name"] == "MS_SCHED_HOST"
    }
    assert hosts == {CLUSTER_IP_PLACEHOLDER}


def test_gang_scheduling_renders_the_pod_group_first() -> None:
    raw = _load(SAMPLES / "msjob_gang_scheduling.yaml")
    result = render(raw, namespace="g", gang_scheduling=True)
    assert result.pod_group is not None and result.pod_group["kind"] == "PodGroup"
    assert result.objects()[0] is result.pod_group
    assert result.objects()[1:] == _expected(raw, "g", gang=True)


def test_kueue_renders_the_workload_first_and_the_pods_as_if_admitted() -> None:
    raw = _load(SAMPLES / "msjob_kueue.yaml")
    result = render(raw, namespace="k", kueue=True)
    assert result.workload is not None and result.objects()[0] is result.workload
    assert result.workload["spec"]["queueName"] == "team-a"
    assert [p["name"] for p in result.workload["spec"]["podSets"]] == ["scheduler", "worker"]
    pods = [o for o in result.objects() if o["kind"] == "Pod"]
    assert len(pods) == 3
    assert {p["metadata"]["labels"]["kueue.x-k8s.io/podset"] for p in pods} == {
        "scheduler",
        "worker",
    }
    assert any("Kueue admits" in n for n in result.notes)
    assert render(raw, namespace="k").workload is None  # without the flag: no Workload


def test_input_uid_and_status_are_respected_and_ignored() -> None:
    raw = _load(SAMPLES / "ms_wide_deep_standalone.yaml")
    raw["metadata"]["uid"] = "1234"
    raw["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    objs = render(raw).objects()
    assert objs and objs[0]["metadata"]["ownerReferences"][0]["uid"] == "1234"


def test_invalid_job_gets_admission_errors(tmp_path: Path) -> None:
    raw = _load(SAMPLES / "ms_wide_deep_dataparallel.yaml")
    raw["spec"]["msReplicaSpecs"]["Scheduler"]["replicas"] = 2
    with pytest.raises(InvalidJobError) as info:
        render(raw)
    assert [e.path for e in info.value.errors] == ["spec.msReplicaSpecs.Scheduler.replicas"]

    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(raw))
    out, err = io.StringIO(), io.StringIO()
    assert render_files([str(f)], None, False, out, err) == 1
    assert out.getvalue() == ""
    assert err.getvalue() == (
        f"{f}: spec.msReplicaSpecs.Scheduler.replicas: "
        "must be 0 or 1: a job has at most one Scheduler\n"
    )


def test_multi_document_and_missing_files(tmp_path: Path) -> None:
    a = (SAMPLES / "ms_wide_deep_standalone.yaml").read_text()
    b = (SAMPLES / "ms_wide_deep_ps_standalone.yaml").read_text()
    f = tmp_path / "two.yaml"
    f.write_text(a + "\n---\n" + b)
    out, err = io.StringIO(), io.StringIO()
    assert render_files([str(f)], "n", False, out, err) == 0
    names = [d["metadata"]["name"] for d in yaml.safe_load_all(out.getvalue())]
    expected = [
        o["metadata"]["name"]
        for p in ("ms_wide_deep_standalone.yaml", "ms_wide_deep_ps_standalone.yaml")
        for o in _expected(_load(SAMPLES / p), "n")
    ]
    assert names == expected
    out, err = io.StringIO(), io.StringIO()
    assert render_files([str(tmp_path / "nope.yaml")], None, False, out, err) == 1
    assert "nope.yaml" in err.getvalue() and out.getvalue() == ""


def test_kueue_and_volcano_render_the_workload_then_the_pod_group() -> None:
    raw = _load(SAMPLES / "msjob_kueue.yaml")
    result = render(raw, namespace="k", kueue=True, gang_scheduling=True)
    kinds = [o["kind"] for o in result.objects()]
    assert kinds[:2] == ["Workload", "PodGroup"] and kinds.count("Pod") == 3
    assert result.objects()[:2] == [result.workload, result.pod_group]
    pods = [o for o in result.objects() if o["kind"] == "Pod"]
    assert {p["spec"]["schedulerName"] for p in pods} == {"volcano"}
    assert all("kueue.x-k8s.io/podset" in p["metadata"]["labels"] for p in pods)
