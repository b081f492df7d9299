"""Fixtures of the kwok tier: one local control plane for the session, kwok nodes.

- ``cluster`` (session): built once (hack/cluster/build.sh) and started once per run,
  with every CRD under config/crd/bases installed, and the API server's sharded list and
  watch on (``ShardedListAndWatch``).
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``kubelet``: a ``KubeletStandIn`` that runs, ends and restarts simulated pods.
- ``start_operator``/``operator``: ``msop run`` processes watching the test's namespace.
- ``declared``: every node declares RestartAllContainersOnContainerExits (restarts in
  place).
- ``pool``: tainted kwok nodes with devices (``client`` is in tests/e2e/conftest.py).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from msop.msjob.nodehealth import NOT_READY_TAINT as NOT_READY
from testbed import KubeletStandIn, LocalCluster
from testbed.cluster import (
    SHARDED_WATCH_GATE,
    apiserver_feature_gates,
    fake_node,
    namespace_for_a_test,
    pod_cidr,
)
from testbed.inplace import InPlaceKubelet
from testbed.operator import OperatorProcess
from testbed.paths import CACHE
from tests.e2e.inplace import FEATURE, declare
from tests.e2e.msjobs import wait_for
from tests.e2e.sessions import (
    DEVICE,
    POOL_LABEL,
    OperatorFactory,
    Pool,
    build_binaries,
    install_crds,
    operator_factory,
    run_session_cluster,
)

#: The test files that take longest (a few minutes each), run first: ``make e2e-kwok`` gives
#: whole files to two workers in this order, so that neither is left with a long file at
#: the end while the other has nothing to do.
SLOW_FILES_FIRST = (
    "test_multikueue.py",
    "test_reliability_slow.py",
    "test_informers.py",
    "test_reliability.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    # The API server splits lists and watches by shard here (the shards' tests check that
    # the replicas use it); the faults tier's and the bench's clusters do not.
    c = LocalCluster(
        name=f"msop-e2e-{os.getpid()}",
        bin_dir=build_binaries(),
        workdir=CACHE / "kwok",
        extra_config_docs=[apiserver_feature_gates(SHARDED_WATCH_GATE)],
    )
    yield from run_session_cluster(c, install_crds)


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    yield from namespace_for_a_test(cluster, prefix="e2e", timeout=30)


@pytest.fixture
def kubelet(cluster: LocalCluster) -> KubeletStandIn:
    return KubeletStandIn(cluster)


@pytest.fixture
def start_operator(cluster: LocalCluster, namespace: str) -> Iterator[OperatorFactory]:
    """Operators as the cluster's admin (see :func:`operator_factory`)."""
    with operator_factory(cluster.kubeconfig, namespace) as start:
        yield start


@pytest.fixture
def operator(start_operator: OperatorFactory) -> OperatorProcess:
    """One operator for this test's namespace, with default flags."""
    return start_operator()


@pytest.fixture
def pool(cluster: LocalCluster, namespace: str) -> Iterator[Pool]:
    """``pool(nodes, devices, labels)``: kwok nodes with ``devices`` Ascend devices each
    (and ``labels``), tainted for this test's jobs only; deleted afterwards."""
    made: list[str] = []

    def make(nodes: int = 2, devices: int = 2, labels: dict[str, str] | None = None) -> list[str]:
        names = []
        for _ in range(nodes):
            name = f"{namespace}-n{len(made)}"
            capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", DEVICE: str(devices)}
            node = fake_node(
                name, pod_cidr(50 + len(made)), capacity, {POOL_LABEL: namespace, **(labels or {})},
                [{"key": POOL_LABEL, "value": namespace, "effect": "NoSchedule"}],
            )  # fmt: skip
            cluster.kubectl("apply", "-f", "-", input=json.dumps(node))
            made.append(name)
            names.append(name)
        for name in names:
            cluster.kubectl("wait", "--for=condition=Ready", "--timeout=60s", f"node/{name}")
        return names

    yield make
    # Pods that terminate for their grace period still count as used in Volcano's
    # accounting, and slowed the tests after them: end this test's jobs at once.
    cluster.kubectl("delete", "msjobs", "--all", "-n", namespace, "--wait=false", check=False)
    cluster.kubectl("delete", "pods", "--all", "-n", namespace, "--grace-period=0", "--force",
                    check=False)  # fmt: skip
    if made:
        cluster.kubectl("delete", "node", *made, "--wait=false", check=False)


@pytest.fixture
def declared(cluster: LocalCluster) -> Iterator[None]:
    """Every node declares RestartAllContainersOnContainerExits, as 1.36 kubelets do."""
    declare(cluster, [FEATURE])
    yield
    declare(cluster, None)


def _set_ready(cluster: LocalCluster, node: str, status: str) -> None:
    """Say the node's Ready is ``status`` from now, as its kubelet would."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    ready = {"type": "Ready", "status": status, "reason": "KubeletNotReady" if status != "True"
             else "KubeletReady", "message": "e2e", "lastHeartbeatTime": now,
             "lastTransitionTime": now}  # fmt: skip
    cluster.kubectl("patch", "node", node, "--subresource=status", "--type=strategic",
                    "-p", json.dumps({"status": {"conditions": [ready]}}))  # fmt: skip


@pytest.fixture
def node_lost(cluster: LocalCluster) -> Iterator[Callable[[str], Callable[[], None]]]:
    """Loses a node as a kubelet that stops does: kwok, which plays every node's kubelet,
    is frozen (else it would say Ready again at once), and the node says Ready False from
    now. Returns what brings kwok back (the node Ready again); done at the end anyway."""
    kwok = cluster.component_pid("kwok-controller")
    lost: list[str] = []

    def back() -> None:
        os.kill(kwok, signal.SIGCONT)
        for node in lost:
            _set_ready(cluster, node, "True")

    def tainted(node: str) -> bool:
        out = cluster.kubectl("get", "node", node, "-o", "json").stdout
        taints = json.loads(out).get("spec", {}).get("taints") or []
        return any(t.get("key") == NOT_READY and t.get("effect") == "NoSchedule" for t in taints)

    def lose(node: str) -> Callable[[], None]:
        lost.append(node)
        os.kill(kwok, signal.SIGSTOP)
        _set_ready(cluster, node, "False")
        # As on a real cluster by the time the sign counts: the node lifecycle controller
        # has tainted the node, so that no replacement is scheduled onto it (without this,
        # a slow controller-manager let the scheduler put it there, and it was lost too).
        wait_for(f"the controller-manager's {NOT_READY} taint on {node}",
                 lambda: tainted(node), timeout=30)  # fmt: skip
        return back

    yield lose
    back()


@pytest.fixture
def kubelet_in_place(
    cluster: LocalCluster, namespace: str, tmp_path: Path
) -> Iterator[InPlaceKubelet]:
    k = InPlaceKubelet(cluster, namespace, tmp_path)
    yield k
    k.stop()
