"""The committed CRD is what hack/gen_crd.py generates, and has the shape the issue asks for."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
import yaml

from msop.api import constants as c
from msop.api import validation as v
from testbed.paths import REPO


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_crd", REPO / "hack/gen_crd.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_crd = _load_generator()


@pytest.fixture(scope="module")
def generated() -> dict[str, Any]:
    crd: dict[str, Any] = gen_crd.generate()
    return crd


@pytest.fixture(scope="module")
def committed() -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(gen_crd.CRD_PATH.read_text())
    return crd


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    version: dict[str, Any] = crd["spec"]["versions"][0]
    return version


def _nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from _nodes(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _nodes(value, f"{path}[{i}]")


def test_committed_crd_is_not_stale(generated: dict[str, Any]) -> None:
    text = gen_crd.CRD_PATH.read_text()
    assert text == gen_crd.render(generated), "the CRD is stale: run `make generate`"


def test_names(committed: dict[str, Any]) -> None:
    spec = committed["spec"]
    assert committed["metadata"]["name"] == "msjobs.mindspore.gitee.com"
    assert (spec["group"], spec["scope"]) == ("mindspore.gitee.com", "Namespaced")
    assert spec["names"] == {
        "kind": "MSJob",
        "listKind": "MSJobList",
        "plural": "msjobs",
        "singular": "msjob",
        "shortNames": ["msj"],
        "categories": ["kubeflow", "mindspore"],
    }
    assert [v["name"] for v in spec["versions"]] == ["v1"]


def test_subresources_and_columns(committed: dict[str, Any]) -> None:
    version = _version(committed)
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.msReplicaSpecs.Worker.replicas",
            "statusReplicasPath": ".status.replicaStatuses.Worker.active",
            "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
        },
    }
    columns = {col["name"]: col["jsonPath"] for col in version["additionalPrinterColumns"]}
    assert columns == {
        "State": ".status.conditions[-1:].type",
        "Workers": ".status.workers",
        "Progress": ".status.progress.percentComplete",
        "Age": ".metadata.creationTimestamp",
    }


def test_no_preserve_unknown_fields(committed: dict[str, Any]) -> None:
    for path, node in _nodes(committed):
        assert "x-kubernetes-preserve-unknown-fields" not in node, path


def _schemas(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node, following properties, items and additionalProperties only."""
    yield path, node
    for name, prop in node.get("properties", {}).items():
        yield from _schemas(prop, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            yield from _schemas(node[key], f"{path}.{key}")


def test_structural_every_node_has_a_type(committed: dict[str, Any]) -> None:
    root = _version(committed)["schema"]["openAPIV3Schema"]
    count = 0
    for path, node in _schemas(root, ""):
        count += 1
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, path
        if node.get("type") == "object" and path.startswith(".spec.msReplicaSpecs"):
            # An object without properties would silently prune what users write.
            assert "properties" in node or "additionalProperties" in node, path
    assert count > 500


def test_list_map_keys_are_required_or_defaulted(committed: dict[str, Any]) -> None:
    for path, node in _nodes(committed):
        if node.get("x-kubernetes-list-type") != "map":
            continue
        items = node["items"]
        for key in node["x-kubernetes-list-map-keys"]:
            assert key in items.get("required", []) or "default" in items["properties"][key], (
                f"{path}: map key {key}"
            )


def test_pod_template_is_the_real_pod_schema(committed: dict[str, Any]) -> None:
    root = _version(committed)["schema"]["openAPIV3Schema"]
    replica = root["properties"]["spec"]["properties"]["msReplicaSpecs"]["additionalProperties"]
    template = replica["properties"]["template"]
    pod = template["properties"]["spec"]
    container = pod["properties"]["containers"]["items"]
    assert {"image", "imagePullPolicy", "command", "env", "resources", "ports"} <= set(
        container["properties"]
    )
    assert container["required"] == ["name"]
    assert pod["required"] == ["containers"]
    assert set(template["properties"]["metadata"]["properties"]) == {
        "name",
        "generateName",
        "namespace",
        "labels",
        "annotations",
    }
    limits = container["properties"]["resources"]["properties"]["limits"]
    assert limits["additionalProperties"]["x-kubernetes-int-or-string"] is True


def test_cel_rules_name_their_field_and_reason(committed: dict[str, Any]) -> None:
    root = _version(committed)["schema"]["openAPIV3Schema"]
    rules = [
        (path, rule)
        for path, node in _nodes(committed)
        for rule in node.get("x-kubernetes-validations", [])
    ]
    assert len(rules) >= 20
    for path, rule in rules:
        assert rule["reason"] in ("FieldValueInvalid", "FieldValueRequired"), path
        # The error names the field; the message must not repeat it (msop validate prints
        # "path: message").
        assert not rule["message"].startswith(("spec.", "metadata.", "template.")), rule
    # A rule at the root is reported at `<nil>` unless it names its field.
    assert all("fieldPath" in rule for rule in root["x-kubernetes-validations"])


def test_no_blocking_schema_error_a_user_can_hit(committed: dict[str, Any]) -> None:
    """`required`, `enum`, `maxLength`, `maxItems` and `maxProperties` errors make the API server
    skip every CEL rule and add a `<nil>` line: the MSJob part uses CEL rules and patterns,
    and the bounds that only serve the CEL cost estimate are far above real limits."""
    root = _version(committed)["schema"]["openAPIV3Schema"]
    for path, node in _schemas(root, ""):
        if path.startswith(".status"):
            continue
        assert "enum" not in node, path
        if "required" in node:
            assert ".template.spec" in path, path  # the PodTemplateSpec's own (list-map keys)
        assert node.get("maxLength", gen_crd.MAX_NAME) >= gen_crd.MAX_NAME, path
        assert node.get("maxItems", gen_crd.MAX_CONTAINERS) >= gen_crd.MAX_CONTAINERS, path
        assert node.get("maxProperties", 8) >= 8, path


def test_replicas_default_to_one(committed: dict[str, Any]) -> None:
    """The scale subresource reads spec.msReplicaSpecs.Worker.replicas: it must exist."""
    root = _version(committed)["schema"]["openAPIV3Schema"]
    replica = root["properties"]["spec"]["properties"]["msReplicaSpecs"]["additionalProperties"]
    assert replica["properties"]["replicas"]["default"] == c.DEFAULT_REPLICAS


def test_recursion_is_detected() -> None:
    schemas = {
        "io.k8s.api.core.v1.PodTemplateSpec": {"$ref": "#/components/schemas/a"},
        "a": {"type": "object", "properties": {"b": {"$ref": "#/components/schemas/a"}}},
    }
    with pytest.raises(ValueError, match="recursive"):
        gen_crd.pod_template_schema({"components": {"schemas": schemas}})


def test_size_is_reported_compactly(generated: dict[str, Any]) -> None:
    assert len(json.dumps(generated, separators=(",", ":"))) < 262144 // 2
    assert generated["metadata"]["name"] == c.CRD_NAME


def test_requests_are_held_to_limits_at_admission(committed: dict[str, Any]) -> None:
    """Every container's and init container's resources carry the API server's pod rule:
    a request at most its limit, an extended resource's or hugepages' request equal to it."""
    spec = _version(committed)["schema"]["openAPIV3Schema"]["properties"]["spec"]
    replica = spec["properties"]["msReplicaSpecs"]["additionalProperties"]
    pod = replica["properties"]["template"]["properties"]["spec"]["properties"]
    for key in ("containers", "initContainers"):
        resources = pod[key]["items"]["properties"]["resources"]
        rules = {r["message"]: r for r in resources["x-kubernetes-validations"]}
        over = rules[v.MSG_REQUEST_OVER_LIMIT]
        equal = rules[v.MSG_REQUEST_NOT_LIMIT]
        assert over["fieldPath"] == equal["fieldPath"] == ".requests"
        assert ".compareTo(" in over["rule"] and ".compareTo(" in equal["rule"]
        assert v.CEL_OVERCOMMIT in over["rule"] and v.CEL_OVERCOMMIT in equal["rule"]
        for side in ("requests", "limits"):
            quantity = resources["properties"][side]["additionalProperties"]
            assert quantity["maxLength"] >= gen_crd.MAX_NAME
