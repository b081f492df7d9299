"""Fixtures for the real-node tier (see testbed.realnode).

- ``real_cluster`` (session): Debian packages installed (hack/realnode/ensure-packages.sh),
  the control plane and kubelet/kube-proxy built (hack/cluster/build.sh), the images
  built or taken from the cache (testbed.images), then one control plane and one real
  node in a network namespace of their own, serving Kubernetes' Workload API (its gates
  on), so that every job of the tier is placed as a gang. A failure at any step fails
  every test of the tier with the step's (or the component's) output; nothing is skipped.
- ``images``: the images imported into the node (``operator``, ``python``, ``pause``).
- ``installed`` (session): msop installed as users install it, ``kubectl apply -k`` of an
  overlay of config/default that sets the locally built image (docs/tasks/install.md),
  with the Deployment Available.
- ``namespace``: a fresh namespace per test.
- ``fast_progress`` (module): ``installed``, with the operator polling training progress
  every ``PROGRESS_INTERVAL`` seconds (30 by default), so that a short run shows several
  reports.

test_release.py installs msop from its release (Helm, install.yaml) and so removes the
shared install first: ``pytest_collection_modifyitems`` below runs it after every other
module of the tier, whatever their names (its docstring says more).

``MSOP_E2E_KEEP=1`` leaves the cluster running after the session and prints its
kubeconfig (the host relay to the API server).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster import ClusterStartError, namespace_for_a_test
from testbed.paths import CACHE, REPO
from testbed.realnode import NodeImages, Prepared, RealCluster, prepare, write_overlay
from tests.e2e.real.install import DEPLOYMENT, OPERATOR_NAMESPACE, wait_available
from tests.e2e.real.training import RESTART_REPORT
from tests.e2e.sessions import run_session_cluster

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
        # Kubernetes' Workload API served: msop's --gang-scheduler=auto places every job
        # of the tier as a gang (test_workload_api.py).
        workload_api=True,
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


#: Seconds between the operator's progress polls under ``fast_progress``.
PROGRESS_INTERVAL = "2"


@pytest.fixture(scope="module")
def fast_progress(installed: RealCluster) -> RealCluster:
    """The installed operator, polling progress every PROGRESS_INTERVAL seconds."""
    deployment = f"deployment/{DEPLOYMENT}"
    installed.kubectl("set", "env", "-n", OPERATOR_NAMESPACE, deployment,
                      f"MSOP_PROGRESS_INTERVAL={PROGRESS_INTERVAL}")  # fmt: skip
    installed.kubectl("rollout", "status", "-n", OPERATOR_NAMESPACE, deployment,
                      "--timeout=180s")  # fmt: skip
    wait_available(installed)
    return installed


@pytest.fixture
def namespace(real_cluster: RealCluster) -> Iterator[str]:
    yield from namespace_for_a_test(real_cluster, prefix="real", timeout=30)


@pytest.fixture
def checkpoints(namespace: str) -> Iterator[Path]:
    """A checkpoint directory of this test's own on the node (the example's hostPath)."""
    path = Path("/var/lib/msop-e2e") / namespace
    yield path
    shutil.rmtree(path, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    RESTART_REPORT.unlink(missing_ok=True)  # the report says this run's restarts only


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The restart report: what a restart in place and a recreation of the same job took
    (tests/e2e/real/test_mindspore.py), and their ratio."""
    if not RESTART_REPORT.is_file():
        return
    report = json.loads(RESTART_REPORT.read_text())
    terminalreporter.section("restarts: in place vs recreation")
    for mode, figures in sorted(report.items()):
        terminalreporter.write_line(f"{mode}: {json.dumps(figures, sort_keys=True)}")
    modes = {m.split(" (")[0]: f for m, f in report.items()}
    if {"in place", "recreation"} <= modes.keys():
        for key in ("seconds to every rank training", "seconds to Running"):
            ratio = modes["recreation"][key] / max(modes["in place"][key], 0.1)
            terminalreporter.write_line(f"{key}: recreation / in place = {ratio:.1f}x")
    terminalreporter.write_line(f"(also in {RESTART_REPORT})")
