"""Act as a ServiceAccount against a ``LocalCluster``: the way a pod authenticates.

``install_rbac`` applies ``config/rbac`` (the operator's ServiceAccount, its roles and
bindings, in ``msop-system``). ``service_account_kubeconfig`` asks the API server for a
bound token (``kubectl create token``, the TokenRequest API; ``service_account_token``
returns it bare, for a bearer header) and writes a kubeconfig that uses it, with the
cluster's server address and CA, and nothing else: a process started with it has exactly
the ServiceAccount's permissions. Errors from kubectl propagate as
``subprocess.CalledProcessError``.
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.cluster import Kubectl

#: The operator's identity, as config/rbac names it.
OPERATOR_NAMESPACE = "msop-system"
OPERATOR_SERVICE_ACCOUNT = "msop-controller-manager"


def install_rbac(cluster: Kubectl, config_dir: Path) -> None:
    """Create the operator namespace (if absent) and apply ``<config_dir>/rbac``."""
    if cluster.kubectl("get", "namespace", OPERATOR_NAMESPACE, check=False).returncode != 0:
        cluster.kubectl("create", "namespace", OPERATOR_NAMESPACE)
    cluster.kubectl("apply", "-k", str(config_dir / "rbac"))


def service_account_user(
    name: str = OPERATOR_SERVICE_ACCOUNT, namespace: str = OPERATOR_NAMESPACE
) -> str:
    """The user name the API server gives the ServiceAccount (for ``--as``)."""
    return f"system:serviceaccount:{namespace}:{name}"


def service_account_token(
    cluster: Kubectl,
    name: str = OPERATOR_SERVICE_ACCOUNT,
    namespace: str = OPERATOR_NAMESPACE,
    duration: str = "2h",
) -> str:
    """A fresh bound token of the ServiceAccount (``kubectl create token``)."""
    return cluster.kubectl(
        "create", "token", name, "-n", namespace, f"--duration={duration}"
    ).stdout.strip()


def service_account_kubeconfig(
    cluster: Kubectl,
    path: Path,
    name: str = OPERATOR_SERVICE_ACCOUNT,
    namespace: str = OPERATOR_NAMESPACE,
    duration: str = "2h",
) -> Path:
    """Write a kubeconfig at ``path`` that authenticates with a fresh token of the SA."""
    token = service_account_token(cluster, name, namespace, duration)
    admin = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    server = dict(admin["clusters"][0]["cluster"])
    user = f"{namespace}/{name}"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": server}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": "local", "user": user}}],
        "current-context": user,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    path.chmod(0o600)
    return path
