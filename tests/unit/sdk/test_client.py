"""MSJobClient behaviour that needs no API server: local validation and waiting rules."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from msop.kube.resources import Resource
from msop.sdk import (
    MSJobClient,
    MSJobError,
    MSJobFailedError,
    MSJobValidationError,
    dataparallel_job,
)
from msop.sdk.manifests import load_job
from tests.support import builders
from tests.support.clients import NoApiServer


async def test_invalid_job_is_refused_before_any_request() -> None:
    client = MSJobClient(kube=NoApiServer())
    job = dataparallel_job("Bad_Name", "", "x", workers=-2)
    with pytest.raises(MSJobValidationError) as info:
        await client.create(job)
    paths = [e.path for e in info.value.errors]
    assert "metadata.name" in paths
    assert "spec.msReplicaSpecs.Worker.replicas" in paths
    text = str(info.value)
    assert text.startswith("MSJob Bad_Name is invalid:\n")
    assert "  spec.msReplicaSpecs.Worker.replicas: must be greater than or equal to 0" in text


async def test_wrong_kind_is_refused() -> None:
    client = MSJobClient(kube=NoApiServer())
    job = dataparallel_job("ok", "img", "x")
    job["apiVersion"] = "kubeflow.org/v1"
    with pytest.raises(MSJobValidationError, match="apiVersion"):
        await client.create(job)


async def test_create_sends_the_job_to_its_namespace() -> None:
    sent: list[tuple[Any, dict[str, Any], str | None]] = []

    class Kube(NoApiServer):
        async def create(
            self, res: Resource, body: Mapping[str, Any], namespace: str | None = None
        ) -> dict[str, Any]:
            sent.append((res, dict(body), namespace))
            return dict(body)

    client = MSJobClient(namespace="dflt", kube=Kube())
    job = dataparallel_job("ok", "img", "x")
    del job["apiVersion"], job["kind"]
    created = await client.create(job)
    assert created["metadata"]["namespace"] == "dflt"
    assert created["apiVersion"] == "mindspore.gitee.com/v1" and created["kind"] == "MSJob"
    assert sent[0][0].plural == "msjobs" and sent[0][2] == "dflt"
    assert "namespace" not in job["metadata"]  # the caller's dict is not modified
    await client.create(dataparallel_job("ok", "img", "x", namespace="a"))
    assert sent[1][2] == "a"
    with pytest.raises(ValueError, match="does not match"):
        await client.create(dataparallel_job("ok", "img", "x", namespace="a"), namespace="b")


def test_load_job_from_yaml_text_and_file(tmp_path: Path) -> None:
    text = (
        "apiVersion: v1\nkind: ConfigMap\n---\n"
        "apiVersion: mindspore.gitee.com/v1\nkind: MSJob\nmetadata: {name: a}\n"
    )
    assert load_job(text)["metadata"]["name"] == "a"
    f = tmp_path / "job.yaml"
    f.write_text(text)
    assert load_job(f)["metadata"]["name"] == "a"
    assert load_job(str(f))["metadata"]["name"] == "a"
    with pytest.raises(ValueError, match="exactly one MSJob"):
        load_job(text + "---\n" + text)


def _job(*conds: tuple[str, str, str]) -> dict[str, Any]:
    """Job ``ns/j`` with the conditions ``conds``: (type, status, message) each."""
    return builders.job(
        status={
            "conditions": [
                {"type": t, "status": s, "reason": "R" + t, "message": m} for t, s, m in conds
            ]
        }
    )


def test_wait_rules() -> None:
    client = MSJobClient(kube=NoApiServer())
    done = ("Succeeded", "Failed")
    assert not client._decide(_job(("Created", "True", "")), done)
    assert client._decide(_job(("Succeeded", "True", "")), done)
    assert client._decide(_job(("Failed", "True", "boom")), done)  # requested: returned
    assert client._decide(_job(("Running", "True", "")), ("Running",))
    assert not client._decide(_job(("Running", "False", "")), ("Running",))
    with pytest.raises(MSJobFailedError) as info:
        client._decide(_job(("Failed", "True", "2 Worker replica(s) failed.")), ("Succeeded",))
    assert info.value.reason == "RFailed"
    assert str(info.value) == "MSJob ns/j failed (RFailed): 2 Worker replica(s) failed."
    with pytest.raises(MSJobError, match="Succeeded without reaching Running"):
        client._decide(_job(("Succeeded", "True", "")), ("Running",))


async def test_not_open() -> None:
    client = MSJobClient()
    with pytest.raises(RuntimeError, match="async with"):
        await client.get("x")
