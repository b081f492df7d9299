"""``msop render``: print what the operator would create for the MSJobs of YAML files."""

from __future__ import annotations

from typing import TextIO

import yaml

from msop.kube.objects import JSON
from msop.sdk.manifests import read_msjobs
from msop.sdk.render import InvalidJobError, render

RENDER_VERSION = "v1alpha2"
"""The Workload API version ``msop render --gang-scheduler=kubernetes`` draws: the one
Kubernetes 1.36 serves."""


def render_files(
    paths: list[str],
    namespace: str | None,
    gang_scheduling: bool,
    out: TextIO,
    err: TextIO,
    kueue: bool = False,
    workload_api: str | None = None,
) -> int:
    """The ``msop render`` command: 0 when every MSJob rendered, 1 on any error."""
    docs: list[JSON] = []
    failed = False
    for path in paths:
        try:
            jobs = read_msjobs(path)
        except (OSError, yaml.YAMLError) as e:
            print(f"{path}: {e}", file=err)
            failed = True
            continue
        if not jobs:
            print(f"{path}: no MSJob document", file=err)
            failed = True
        for job in jobs:
            try:
                result = render(
                    job,
                    namespace=namespace,
                    gang_scheduling=gang_scheduling,
                    kueue=kueue,
                    workload_api=workload_api,
                )
            except InvalidJobError as e:
                for fe in e.errors:
                    print(f"{path}: {fe.path}: {fe.message}", file=err)
                failed = True
                continue
            for note in result.notes:
                name = (job.get("metadata") or {}).get("name")
                print(f"{path}: {name}: {note}", file=err)
            docs.extend(result.objects())
    if failed:
        return 1
    out.write(yaml.safe_dump_all(docs, sort_keys=False, explicit_start=True) if docs else "")
    return 0
