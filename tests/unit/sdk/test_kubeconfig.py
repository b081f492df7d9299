"""The SDK finds the user's cluster and namespace as kubectl does."""

from __future__ import annotations

from pathlib import Path

import pytest

from msop.sdk import MSJobClient, MSJobClientSync

KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: a
clusters:
- {name: x, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}
- {name: y, cluster: {server: "https://127.0.0.1:7443", insecure-skip-tls-verify: true}}
users:
- {name: u, user: {token: secret}}
contexts:
- {name: a, context: {cluster: x, user: u, namespace: team-a}}
- {name: b, context: {cluster: y, user: u}}
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME with only ~/.kube/config, and no $KUBECONFIG."""
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(KUBECONFIG)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path


async def test_the_home_kubeconfig_and_its_contexts_namespace(home: Path) -> None:
    async with MSJobClient() as client:
        assert client.namespace == "team-a"
        assert client.kube.host == "127.0.0.1:6443"


async def test_another_context_and_its_namespace(home: Path) -> None:
    async with MSJobClient(context="b") as client:
        assert client.namespace == "default"  # the context names none
        assert client.kube.host == "127.0.0.1:7443"


async def test_an_explicit_namespace_wins(home: Path) -> None:
    async with MSJobClient(namespace="other") as client:
        assert client.namespace == "other"


async def test_kubeconfig_env_comes_before_home(
    home: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path_factory.mktemp("env") / "config"
    other.write_text(KUBECONFIG.replace("current-context: a", "current-context: b"))
    monkeypatch.setenv("KUBECONFIG", str(other))
    async with MSJobClient() as client:
        assert client.kube.host == "127.0.0.1:7443"


def test_the_blocking_client_finds_it_too(home: Path) -> None:
    with MSJobClientSync() as client:
        assert client.namespace == "team-a"
