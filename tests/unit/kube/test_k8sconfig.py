"""kubernetes_asyncio's config loaders work without its model package being imported.

Each case runs in a fresh interpreter: the test process itself has long imported
kubernetes_asyncio in full (other tests use its Configuration).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

CREDENTIAL = {
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": "tok-123"},
}


def kubeconfig_with_exec_plugin(tmp_path: Path) -> Path:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(f"print({json.dumps(json.dumps(CREDENTIAL))})\n")
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://127.0.0.1:6443",
                                      "insecure-skip-tls-verify": True}}
        ],
        "users": [
            {"name": "u", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                "args": [str(plugin)], "interactiveMode": "Never"}}}
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }  # fmt: skip
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def test_kubeconfig_with_an_exec_plugin_loads_without_the_models(tmp_path: Path) -> None:
    kubeconfig = kubeconfig_with_exec_plugin(tmp_path)
    result = run(
        f"""
        import asyncio, json, sys
        from msop.kube.client import KubeClient

        async def main():
            client = await KubeClient.from_config({str(kubeconfig)!r})
            headers = await client._headers(None)
            await client.close()
            return headers["Authorization"]

        token = asyncio.run(main())
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        print(json.dumps({{"token": token, "models": len(models),
                           "config": "kubernetes_asyncio.config.kube_config" in sys.modules,
                           "urllib3": "urllib3.poolmanager" in sys.modules}}))
        """
    )
    assert result == {"token": "Bearer tok-123", "models": 0, "config": True, "urllib3": False}


def test_basic_auth_still_builds_its_header() -> None:
    """Configuration's basic auth goes through urllib3.util, which imports on demand."""
    result = run(
        """
        import json, sys
        from msop.kube import k8sconfig
        k8sconfig.install()
        from kubernetes_asyncio.client import Configuration

        c = Configuration(host="https://x", username="user", password="pass")
        header = c.get_basic_auth_token()
        lazy = "urllib3.poolmanager" not in sys.modules
        import urllib3
        print(json.dumps({"header": header, "lazy": lazy, "pool": urllib3.PoolManager.__name__}))
        """
    )
    assert result == {"header": "Basic dXNlcjpwYXNz", "lazy": True, "pool": "PoolManager"}


def test_in_cluster_config_loads_without_the_models(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("not read until TLS is set up")
    result = run(
        f"""
        import json, os, sys
        from msop.kube import k8sconfig
        k8sconfig.install()
        from kubernetes_asyncio.client import Configuration
        from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

        os.environ["KUBERNETES_SERVICE_HOST"] = "10.96.0.1"
        os.environ["KUBERNETES_SERVICE_PORT"] = "443"
        configuration = Configuration()
        InClusterConfigLoader(
            token_filename={str(tmp_path / "token")!r}, cert_filename={str(tmp_path / "ca.crt")!r}
        ).load_and_set(configuration)
        models = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")]
        print(json.dumps({{"host": configuration.host,
                           "token": configuration.api_key["BearerToken"], "models": len(models)}}))
        """
    )
    assert result == {"host": "https://10.96.0.1:443", "token": "Bearer sa-token", "models": 0}


def test_the_rest_of_the_library_still_works_when_asked_for() -> None:
    """Names the lazy packages do not hold run the real package initializers then."""
    result = run(
        """
        import json, sys
        from msop.kube import k8sconfig
        k8sconfig.install()
        import kubernetes_asyncio.config
        before = len([m for m in sys.modules if m.startswith("kubernetes_asyncio.client.models.")])
        from kubernetes_asyncio.client import CoreV1Api, V1Pod
        from kubernetes_asyncio import client, watch
        print(json.dumps({"before": before, "pod": V1Pod(metadata={"name": "p"}).metadata["name"],
                          "api": CoreV1Api.__name__, "watch": watch.Watch.__name__,
                          "models": hasattr(client.models, "V1Service")}))
        """
    )
    assert result == {
        "before": 0,
        "pod": "p",
        "api": "CoreV1Api",
        "watch": "Watch",
        "models": True,
    }


def test_new_client_from_config_still_builds_a_real_api_client(tmp_path: Path) -> None:
    kubeconfig = kubeconfig_with_exec_plugin(tmp_path)
    result = run(
        f"""
        import asyncio, json, sys
        from msop.kube import k8sconfig
        k8sconfig.install()
        rest_before = "kubernetes_asyncio.client.rest" in sys.modules
        from kubernetes_asyncio import config
        from kubernetes_asyncio.client import ApiClient

        async def main():
            api = await config.new_client_from_config(config_file={str(kubeconfig)!r})
            real = isinstance(api, ApiClient)
            host = api.configuration.host
            await api.close()
            return real, host

        real, host = asyncio.run(main())
        print(json.dumps({{"rest_before": rest_before, "real": real, "host": host}}))
        """
    )
    assert result == {"rest_before": False, "real": True, "host": "https://127.0.0.1:6443"}
