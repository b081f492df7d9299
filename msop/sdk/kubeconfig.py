"""The kubeconfig and the namespace, found as kubectl finds them.

``--kubeconfig`` (or the SDK's ``kubeconfig``), else the first file of ``$KUBECONFIG``,
else ``~/.kube/config`` if it exists, else (in a pod) the in-cluster service account. The
default namespace is the one of the kubeconfig's context (``context``, else its
current-context), or in a pod the service account's; else ``default``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import yaml

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def kubeconfig_path(
    flag: str | None, environ: Mapping[str, str] = os.environ, home: Path | None = None
) -> str | None:
    """``--kubeconfig``, else the first file of ``$KUBECONFIG``, else ``~/.kube/config``
    if it exists; None means the in-cluster service account."""
    if flag:
        return flag
    first = environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if first:
        return first
    default = (home or Path.home()) / ".kube" / "config"
    return str(default) if default.is_file() else None


def namespace_of_context(
    path: str | None,
    context: str | None,
    service_account_namespace: Path = SERVICE_ACCOUNT_NAMESPACE,
) -> str:
    """The namespace of the kubeconfig's context (``context``, else its current-context),
    or in a pod (no kubeconfig) the service account's; else ``default``. An unreadable
    kubeconfig gives ``default``: loading it for the client reports the problem."""
    if path is None:
        try:
            return service_account_namespace.read_text().strip() or "default"
        except OSError:
            return "default"
    try:
        config = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError):
        return "default"
    if not isinstance(config, dict):
        return "default"
    name = context or config.get("current-context")
    for entry in config.get("contexts") or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            ns = (entry.get("context") or {}).get("namespace")
            return str(ns) if ns else "default"
    return "default"
