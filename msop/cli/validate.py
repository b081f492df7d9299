"""``msop validate``: admission's checks, offline, with one CI-readable line per problem
(and the few the operator adds, which admission cannot afford: ``beyond_admission``)."""

from __future__ import annotations

from typing import Any, TextIO

import yaml

from msop.api import FieldError, validate_admission
from msop.api import constants as c
from msop.api.validation import beyond_admission
from msop.sdk.manifests import read_msjobs


def check_document(doc: Any) -> list[FieldError]:
    """Admission's field errors for one MSJob document, plus a wrong ``apiVersion``."""
    errors: list[FieldError] = []
    if isinstance(doc, dict) and doc.get("apiVersion") != c.API_VERSION:
        errors.append(
            FieldError("apiVersion", f"must be {c.API_VERSION}, got {doc.get('apiVersion')!r}")
        )
    return errors + validate_admission(doc) + beyond_admission(doc)


def validate_files(paths: list[str], out: TextIO) -> int:
    """Print ``<file>: <path>: <message>`` per error and ``OK <file>`` per clean file.

    Documents of other kinds are skipped (files may be kustomize bundles); a file with
    no MSJob at all is an error. Returns the exit code: 1 on any error, else 0.
    """
    failed = False
    for path in paths:
        try:
            jobs = read_msjobs(path)
        except (OSError, yaml.YAMLError) as e:
            detail = " ".join(str(e).split())
            print(f"{path}: {detail}", file=out)
            failed = True
            continue
        if not jobs:
            print(f"{path}: no MSJob document (kind: {c.KIND})", file=out)
            failed = True
            continue
        clean = True
        for job in jobs:
            meta = job.get("metadata")
            name = meta.get("name") if isinstance(meta, dict) and len(jobs) > 1 else None
            prefix = f"{path}: {name}: " if name else f"{path}: "
            for fe in check_document(job):
                clean = False
                print(f"{prefix}{fe.path + ': ' if fe.path else ''}{fe.message}", file=out)
        if clean:
            print(f"OK {path}", file=out)
        else:
            failed = True
    return 1 if failed else 0
