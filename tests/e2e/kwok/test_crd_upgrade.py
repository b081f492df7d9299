"""The upgrade page's CRD step (docs/tasks/upgrade.md, "The CRD"), run as written on a CRD
that really changed (the next release's, standing in: the chart's CRD with a new field),
after each way of installing msop:

- ``test_after_helm_install``: ``helm install`` of charts/msop; the CRD's fields then
  belong to the field manager ``helm``, and a plain ``kubectl apply --server-side`` of the
  changed CRD stops at a conflict with it (the step the page had). The page's step takes
  the fields over: the new field is served, and a ``helm upgrade`` afterwards succeeds and
  leaves the new CRD in place (Helm never touches ``crds/`` again).
- ``test_after_server_side_apply``: ``kubectl apply --server-side -k config/default`` (what
  install.yaml is); the page's step updates the CRD.

On a small cluster of this module's own: the session's has the CRD installed already.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import LocalCluster
from testbed.paths import CACHE, REPO
from tests.e2e.msjobs import wait_for
from tests.e2e.sessions import build_binaries

JSON = dict[str, Any]
CRD = "msjobs.mindspore.gitee.com"
CHART = REPO / "charts" / "msop"
CHART_CRD = CHART / "crds" / "mindspore.gitee.com_msjobs.yaml"
NS = "msop-system"
#: The field the next release's CRD adds to ``spec``.
NEW_FIELD = "upgradeProbe"


@pytest.fixture(scope="module")
def crd_cluster() -> Iterator[LocalCluster]:
    c = LocalCluster(
        name=f"msop-crd-{os.getpid()}", bin_dir=build_binaries(), workdir=CACHE / "kwok",
        nodes=1,
    )  # fmt: skip
    try:
        c.start()
        yield c
    finally:
        c.stop()


def helm(
    cluster: LocalCluster, home: Path, *args: str, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """The helm of ``make helm`` (hack/helm/build.sh) against ``cluster``; AssertionError
    with its output when it fails (with ``check``)."""
    built = subprocess.run(
        [str(REPO / "hack" / "helm" / "build.sh")], capture_output=True, text=True, check=True
    )
    binary = Path(built.stdout.strip().splitlines()[-1]) / "helm"
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        KUBECONFIG=cluster.kubeconfig,
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    proc = subprocess.run(
        [str(binary), *args], capture_output=True, text=True, env=env, timeout=180
    )
    assert proc.returncode == 0 or not check, f"helm {' '.join(args)}:\n{proc.stdout}{proc.stderr}"
    return proc


def documented_crd_apply() -> list[str]:
    """The kubectl arguments of the page's CRD step for a file, before the file."""
    text = (REPO / "docs" / "tasks" / "upgrade.md").read_text()
    section = text.split("\n## The CRD\n", 1)[1].split("\n## ", 1)[0]
    (line,) = [x for x in section.splitlines() if x.startswith("kubectl apply") and " -f " in x]
    argv = shlex.split(line)
    return argv[1:-1]


def next_crd(tmp_path: Path) -> Path:
    """The chart's CRD with one more field in ``spec`` (every served version's schema)."""
    crd = yaml.safe_load(CHART_CRD.read_text())
    changed = copy.deepcopy(crd)
    for version in changed["spec"]["versions"]:
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        spec["properties"][NEW_FIELD] = {"type": "string", "description": "the next release's"}
    path = tmp_path / "next-crd.yaml"
    path.write_text(yaml.safe_dump(changed))
    return path


def served_fields(cluster: LocalCluster) -> set[str]:
    crd = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


def managers(cluster: LocalCluster) -> set[str]:
    crd = json.loads(
        cluster.kubectl("get", "crd", CRD, "-o", "json", "--show-managed-fields").stdout
    )
    return {m["manager"] for m in crd["metadata"].get("managedFields") or []}


def established(cluster: LocalCluster) -> bool:
    proc = cluster.kubectl(
        "get", "crd", CRD, "-o",
        "jsonpath={.status.conditions[?(@.type=='Established')].status}", check=False,
    )  # fmt: skip
    return proc.returncode == 0 and proc.stdout.strip() == "True"


def gone(cluster: LocalCluster) -> None:
    cluster.kubectl("delete", "crd", CRD, "--ignore-not-found", "--wait=true", timeout=120)


def test_the_page_takes_the_crd_over_with_force_conflicts() -> None:
    assert documented_crd_apply() == ["apply", "--server-side", "--force-conflicts", "-f"]


def test_after_helm_install(crd_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = crd_cluster
    cluster.kubectl("create", "namespace", NS)
    try:
        helm(cluster, tmp_path, "install", "msop", str(CHART), "-n", NS)
        wait_for("the chart's CRD Established", lambda: established(cluster), timeout=60)
        assert "helm" in managers(cluster)
        new = next_crd(tmp_path)
        assert NEW_FIELD not in served_fields(cluster)

        # The step as the page had it: a conflict with helm on a CRD that changed.
        plain = cluster.kubectl("apply", "--server-side", "-f", str(new), check=False)
        assert plain.returncode != 0
        assert 'conflict with "helm"' in plain.stderr and ".spec.versions" in plain.stderr

        cluster.kubectl(*documented_crd_apply(), str(new))
        assert NEW_FIELD in served_fields(cluster)
        assert "kubectl" in managers(cluster)
        helm(cluster, tmp_path, "upgrade", "msop", str(CHART), "-n", NS)
        assert NEW_FIELD in served_fields(cluster)  # Helm leaves crds/ alone
    finally:
        helm(cluster, tmp_path, "uninstall", "msop", "-n", NS, check=False)
        cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=true",
                        timeout=120, check=False)  # fmt: skip
        gone(cluster)


def test_after_server_side_apply(crd_cluster: LocalCluster, tmp_path: Path) -> None:
    cluster = crd_cluster
    try:
        cluster.kubectl("apply", "--server-side", "-k", str(REPO / "config" / "default"))
        wait_for("config/default's CRD Established", lambda: established(cluster), timeout=60)
        new = next_crd(tmp_path)
        assert NEW_FIELD not in served_fields(cluster)
        cluster.kubectl(*documented_crd_apply(), str(new))
        assert NEW_FIELD in served_fields(cluster)
        assert managers(cluster) >= {"kubectl"}
    finally:
        cluster.kubectl("delete", "-k", str(REPO / "config" / "default"), "--ignore-not-found",
                        "--wait=true", timeout=180, check=False)  # fmt: skip
        gone(cluster)
