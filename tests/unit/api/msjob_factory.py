"""Builders of MSJob dicts shared by the msop.api unit tests."""

from __future__ import annotations

import copy
from typing import Any

SAMPLE_IMAGE = "mindspore/mindspore-gpu:1.8.1"


def container(name: str = "mindspore", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": SAMPLE_IMAGE, **extra}


def replica(replicas: int | None = 1, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [container()]}}, **extra}
    if replicas is not None:
        spec["replicas"] = replicas
    return spec


def job(name: str = "ms-job", **replica_specs: dict[str, Any]) -> dict[str, Any]:
    """A valid MSJob; by default a Scheduler and two Workers."""
    specs = replica_specs or {"Scheduler": replica(1), "Worker": replica(2)}
    return {
        "apiVersion": "mindspore.gitee.com/v1",
        "kind": "MSJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"msReplicaSpecs": copy.deepcopy(specs)},
    }
