"""Fixtures for the real-node tier (see tests.harness.realnode).

- ``real_cluster`` (session): Debian packages installed (hack/realnode/ensure-packages.sh),
  the control plane and kubelet/kube-proxy built (hack/cluster/build.sh), the images
  built or taken from the cache (tests.harness.images), then one control plane and one real
  node in a network namespace of their own. A failure at any step fails every test of the
  tier with the step's (or the component's) output; nothing is skipped.
- ``images``: the images imported into the node (``operator``, ``python``, ``pause``).
- ``installed`` (session): msop installed as users install it, ``kubectl apply -k`` of an
  overlay of config/default that sets the locally built image (docs/tasks/install.md),
  with the Deployment Available.
- ``namespace``: a fresh namespace per test.

test_release.py installs msop from its release (Helm, install.yaml) and so removes the
shared install first: ``pytest_collection_modifyitems`` below runs it after every other
module of the tier, whatever their names (its docstring says more).

``MSOP_E2E_KEEP=1`` leaves the cluster running after the session and prints its
kubeconfig (the host relay to the API server).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.real.install import wait_available
from tests.e2e.sessions import run_session_cluster
from tests.harness.cluster import ClusterStartError
from tests.harness.paths import CACHE, REPO
from tests.harness.realnode import NodeImages, Prepared, RealCluster, prepare, write_overlay

#: The module that removes the shared install (``installed``) to test the release's own.
RUNS_LAST = Path(__file__).with_name("test_release.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests of :data:`RUNS_LAST` after every other test, keeping their order."""
    last = [item for item in items if item.path == RUNS_LAST]
    if last:
        moved = {id(item) for item in last}
        items[:] = [item for item in items if id(item) not in moved] + last


@pytest.fixture(scope="session")
def prepared() -> Prepared:
    try:
        return prepare(REPO, CACHE)
    except ClusterStartError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="session")
def images(prepared: Prepared) -> NodeImages:
    return prepared.images


@pytest.fixture(scope="session")
def real_cluster(prepared: Prepared) -> Iterator[RealCluster]:
    cluster = RealCluster(
        name=f"msop-real-{os.getpid()}",
        bin_dir=prepared.bin_dir,
        node_bin_dir=prepared.node_bin_dir,
        workdir=CACHE / "real",
        images=prepared.images.all(),
    )
    yield from run_session_cluster(cluster)


@pytest.fixture(scope="session")
def installed(real_cluster: RealCluster, images: NodeImages) -> RealCluster:
    overlay = write_overlay(
        CACHE / "real" / "overlay", images.operator.ref, REPO / "config/default"
    )
    real_cluster.kubectl("apply", "-k", str(overlay))
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


@pytest.fixture
def checkpoints(namespace: str) -> Iterator[Path]:
    """A checkpoint directory of this test's own on the node (the example's hostPath)."""
    path = Path("/var/lib/msop-e2e") / namespace
    yield path
    shutil.rmtree(path, ignore_errors=True)
