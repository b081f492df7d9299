"""The examples/ jobs as the real tier and ``make demo-real`` apply them.

``mindspore_example`` renders ``examples/mindspore`` (or ``examples/mindspore-msrun``)
with ``kubectl kustomize`` (as ``kubectl apply -k`` would) and changes only what this
machine needs: the image built here (``testbed.images``), a checkpoint directory of
the caller's, and ``env`` on every replica (the run's length, for instance).
"""

from __future__ import annotations

from pathlib import Path

import yaml

from msop.kube.objects import JSON
from testbed.cluster import Kubectl
from testbed.paths import REPO

MINDSPORE_EXAMPLE = REPO / "examples" / "mindspore"
MINDSPORE_JOB = "mindspore-linear"
MSRUN_EXAMPLE = REPO / "examples" / "mindspore-msrun"
MSRUN_JOB = "mindspore-msrun"


def mindspore_example(
    cluster: Kubectl, image: str, checkpoints: Path, example: Path = MINDSPORE_EXAMPLE, **env: str
) -> tuple[JSON, JSON]:
    """The example's ConfigMap (the training script) and MSJob, ready to apply
    (``example``: ``MINDSPORE_EXAMPLE``, Scheduler and Workers, or ``MSRUN_EXAMPLE``)."""
    rendered = cluster.kubectl("kustomize", str(example)).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    job = next(d for d in docs if d["kind"] == "MSJob")
    for spec in job["spec"]["msReplicaSpecs"].values():
        pod = spec["template"]["spec"]
        for volume in pod.get("volumes", []):
            if "hostPath" in volume:
                volume["hostPath"]["path"] = str(checkpoints)
        for container in pod["containers"]:
            container["image"] = image
            values = {e["name"]: e for e in container.get("env", [])}
            for key, value in env.items():
                values[key] = {"name": key, "value": value}
            container["env"] = list(values.values())
    return config_map, job
