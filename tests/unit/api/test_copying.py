"""copy_json: a deep copy of JSON values that shares nothing mutable."""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from typing import Any

from msop.api.copying import copy_json


def _mutables(value: Any) -> list[int]:
    """ids of every dict and list inside `value`."""
    out: list[int] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            out.append(id(v))
            stack.extend(v.values())
        elif isinstance(v, list):
            out.append(id(v))
            stack.extend(v)
    return out


JOB = {
    "metadata": {"name": "j", "labels": {"a": "b"}, "generation": 3},
    "spec": {
        "msReplicaSpecs": {
            "Worker": {
                "replicas": 2,
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "mindspore", "env": [{"name": "X", "value": "1"}],
                             "ports": [], "resources": {"limits": {"cpu": 1.5}}},
                        ],
                        "hostNetwork": False,
                        "nodeSelector": None,
                    }
                },
            }
        }
    },
}  # fmt: skip


def test_copy_equals_deepcopy_and_shares_no_dict_or_list() -> None:
    out = copy_json(JOB)
    assert out == copy.deepcopy(JOB)
    assert json.dumps(out) == json.dumps(JOB)  # key order kept
    assert not set(_mutables(out)) & set(_mutables(JOB))


def test_mutating_the_copy_leaves_the_original() -> None:
    original = json.loads(json.dumps(JOB))
    out = copy_json(original)
    out["spec"]["msReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "Y"}
    )
    out["metadata"]["labels"]["c"] = "d"
    assert original == JOB


def test_scalars_and_subclasses() -> None:
    for scalar in ("s", 1, 1.5, True, None):
        assert copy_json(scalar) is scalar
    od: OrderedDict[str, Any] = OrderedDict([("b", [1, {"c": 2}]), ("a", 1)])
    out = copy_json(od)
    assert type(out) is dict and list(out) == ["b", "a"] and out == od
    assert out["b"] is not od["b"] and out["b"][1] is not od["b"][1]
    assert copy_json([]) == [] and copy_json({}) == {}
