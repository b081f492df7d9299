"""The CRD must install with a plain (client-side) `kubectl apply`.

Client-side apply stores the whole object as JSON in the kubectl.kubernetes.io/last-applied-
configuration annotation, and the annotations of an object are limited to 256 KiB in total.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from testbed.paths import REPO

CRD = REPO / "config/crd/bases/mindspore.gitee.com_msjobs.yaml"
ANNOTATION_LIMIT = 262144  # bytes (TotalAnnotationSizeLimitB)


def _crd() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(CRD.read_text())
    return crd


def test_crd_is_well_under_the_annotation_limit() -> None:
    # json.dumps' default separators are roomier than kubectl's compact JSON: an upper bound.
    size = len(json.dumps(_crd()))
    assert size < ANNOTATION_LIMIT // 2, f"CRD is {size} bytes as JSON"


def test_embedded_pod_schema_has_no_descriptions() -> None:
    crd = _crd()
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    template = root["properties"]["spec"]["properties"]["msReplicaSpecs"]["additionalProperties"][
        "properties"
    ]["template"]
    text = json.dumps({k: v for k, v in template.items() if k != "description"})
    assert '"description"' not in text
