"""Fixtures for the real-node tier (see msop.testing.realnode).

- ``real_cluster`` (session): Debian packages installed (hack/realnode/ensure-packages.sh),
  the control plane and kubelet/kube-proxy built (hack/cluster/build.sh), the images
  built or taken from the cache (msop.testing.images), then one control plane and one real
  node in a network namespace of their own. A failure at any step fails every test of the
  tier with the step's (or the component's) output; nothing is skipped.
- ``images``: the images imported into the node (``operator``, ``python``, ``pause``).
- ``installed`` (session): msop installed as users install it, ``kubectl apply -k`` of an
  overlay of config/default that sets the locally built image (README, "Install in a
  cluster"), with the Deployment Available.
- ``namespace``: a fresh namespace per test.

``MSOP_E2E_KEEP=1`` leaves the cluster running after the session and prints its
kubeconfig (the host relay to the API server).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from msop.testing.cluster import ClusterStartError
from msop.testing.images import Image, ImageBuilder, ImageBuildError
from msop.testing.realnode import RealCluster

REPO = Path(__file__).resolve().parents[3]
CACHE = Path(os.environ.get("MSOP_CACHE_DIR", REPO / ".cache"))
OPERATOR_NAMESPACE = "msop-system"
DEPLOYMENT = "msop-controller-manager"
LEASE = "msop.mindspore.gitee.com"


def _step(argv: list[str], what: str) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed ({' '.join(argv)}):\n{proc.stderr[-4000:]}", pytrace=False)
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""


@dataclass(frozen=True)
class Images:
    pause: Image
    python: Image
    operator: Image


@pytest.fixture(scope="session")
def images() -> Images:
    _step([str(REPO / "hack/realnode/ensure-packages.sh")], "installing the node's packages")
    builder = ImageBuilder(CACHE)
    try:
        python = builder.python_base()
        return Images(pause=builder.pause(), python=python, operator=builder.operator(python))
    except ImageBuildError as e:
        pytest.fail(f"building the real tier's images failed:\n{e}", pytrace=False)


@pytest.fixture(scope="session")
def real_cluster(images: Images) -> Iterator[RealCluster]:
    bin_dir = _step([str(REPO / "hack/cluster/build.sh")], "building the control plane")
    node_bin = _step([str(REPO / "hack/cluster/build.sh"), "node"], "building kubelet")
    cluster = RealCluster(
        name=f"msop-real-{os.getpid()}",
        bin_dir=Path(bin_dir),
        node_bin_dir=Path(node_bin),
        workdir=CACHE / "real",
        images=(images.pause, images.python, images.operator),
    )
    started = time.monotonic()
    try:
        cluster.start()
    except ClusterStartError as e:
        cluster.stop()
        pytest.fail(str(e), pytrace=False)
    print(f"\nreal node up in {time.monotonic() - started:.1f}s; KUBECONFIG={cluster.kubeconfig}")
    try:
        yield cluster
    finally:
        if os.environ.get("MSOP_E2E_KEEP"):
            print(f"\nkept real cluster {cluster.name}: KUBECONFIG={cluster.kubeconfig}")
        else:
            cluster.stop()


def overlay(images: Images) -> Path:
    """An overlay of config/default that sets the image, as the README tells users."""
    path = CACHE / "real" / "overlay"
    path.mkdir(parents=True, exist_ok=True)
    name, _, tag = images.operator.ref.rpartition(":")
    (path / "kustomization.yaml").write_text(
        json.dumps(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(REPO / "config/default", path)],
                "images": [{"name": "msop", "newName": name, "newTag": tag}],
            },
            indent=2,
        )
    )
    return path


def wait_available(cluster: RealCluster, timeout: float = 120) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    status: dict[str, object] = {}
    while time.monotonic() < deadline:
        dep = json.loads(
            cluster.kubectl(
                "get", "deployment", DEPLOYMENT, "-n", OPERATOR_NAMESPACE, "-o", "json"
            ).stdout
        )
        status = dep.get("status", {})
        conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
        if (
            conds.get("Available") == "True"
            and status.get("readyReplicas") == dep["spec"]["replicas"]
        ):
            return dep
        time.sleep(1)
    pods = cluster.kubectl(
        "get", "pods", "-n", OPERATOR_NAMESPACE, "-o", "wide", check=False
    ).stdout
    events = cluster.kubectl("get", "events", "-n", OPERATOR_NAMESPACE, check=False).stdout
    pytest.fail(
        f"Deployment {DEPLOYMENT} not Available within {timeout}s: {status}\n"
        f"{pods}\n{events[-3000:]}",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def installed(real_cluster: RealCluster, images: Images) -> RealCluster:
    real_cluster.kubectl("apply", "-k", str(overlay(images)))
    wait_available(real_cluster)
    return real_cluster


@pytest.fixture
def namespace(real_cluster: RealCluster) -> Iterator[str]:
    name = f"real-{uuid.uuid4().hex[:8]}"
    real_cluster.kubectl("create", "namespace", name)
    deadline = time.monotonic() + 30
    while real_cluster.kubectl("get", "sa", "default", "-n", name, check=False).returncode:
        if time.monotonic() > deadline:
            pytest.fail(f"namespace {name}: default ServiceAccount never appeared")
        time.sleep(0.2)
    yield name
    real_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
