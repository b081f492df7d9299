"""The committed CRD is what hack/gen_crd.py generates, and has the shape the issue asks for."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from msop.api import constants as c

ROOT = Path(__file__).resolve().parents[2]


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_crd", ROOT / "hack/gen_crd.py")
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


def test_cel_messages_name_their_fields(committed: dict[str, Any]) -> None:
    rules = [
        node["x-kubernetes-validations"]
        for _, node in _nodes(committed)
        if "x-kubernetes-validations" in node
    ]
    messages = [rule["message"] for group in rules for rule in group]
    assert len(messages) == 9
    for message in messages:
        assert any(
            field in message for field in ("metadata.name", "spec.", "template.spec.containers")
        ), message


def test_readme_reference_lists_every_field(committed: dict[str, Any]) -> None:
    text = gen_crd.readme_reference(committed)
    for field in (
        "spec.runPolicy.cleanPodPolicy",
        "spec.runPolicy.schedulingPolicy.minResources",
        "spec.msReplicaSpecs.<type>.restartPolicy",
        "status.replicaStatuses.<type>.selector",
        "status.conditions[].lastTransitionTime",
        "status.workers",
    ):
        assert f"`{field}`" in text


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
