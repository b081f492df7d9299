"""Resource path building."""

from __future__ import annotations

import pytest

from msop.kube.resources import CONFIGMAPS, LEASES, NAMESPACES, PODS, Resource


def test_core_paths() -> None:
    assert PODS.api_version == "v1"
    assert PODS.path() == "/api/v1/pods"
    assert PODS.path("ns") == "/api/v1/namespaces/ns/pods"
    assert PODS.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert str(CONFIGMAPS) == "configmaps"


def test_group_paths() -> None:
    assert LEASES.api_version == "coordination.k8s.io/v1"
    assert LEASES.path("kube-system", "x") == (
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x"
    )
    assert str(LEASES) == "leases.coordination.k8s.io"
    crd = Resource("mindspore.example.com", "v1", "things", "Thing")
    assert (
        crd.path("a", "b", "status")
        == "/apis/mindspore.example.com/v1/namespaces/a/things/b/status"
    )


def test_cluster_scoped() -> None:
    assert NAMESPACES.path(name="default") == "/api/v1/namespaces/default"
    with pytest.raises(ValueError):
        NAMESPACES.path("x", "y")


def test_subresource_needs_name_and_names_are_quoted() -> None:
    with pytest.raises(ValueError):
        PODS.path("ns", subresource="status")
    assert PODS.path("ns", "a/b") == "/api/v1/namespaces/ns/pods/a%2Fb"
