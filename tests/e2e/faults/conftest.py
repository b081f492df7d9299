"""Fixtures of the control-plane fault scenarios (``make e2e-faults``).

- ``cluster`` (session): a kwok cluster of its own, since the scenarios kill its API
  server and etcd. Unlike the shared e2e cluster it keeps the API server's default
  limits with API Priority and Fairness on (the shared one turns both off for speed), as
  production clusters run. CRDs and the operator's RBAC (config/rbac) installed.
- ``operator_kubeconfig`` (session): the operator's ServiceAccount token, so that every
  operator here runs with exactly its production permissions and is classified by APF as
  a workload (an admin certificate would be exempt).
- ``start_operator``: ``msop run`` processes as that ServiceAccount, stopped at the end.
- ``client``: the test's own client (admin, user agent ``reliability-e2e``).

Each scenario ends with :func:`tests.e2e.faults.checks.final_checks`; the figures each
measured are printed and gathered in a table at the end of the session.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testbed import LocalCluster
from testbed.cluster import namespace_for_a_test
from testbed.paths import CACHE
from testbed.serviceaccount import service_account_kubeconfig
from tests.e2e.faults.checks import FIGURES
from tests.e2e.faults.cluster import fault_cluster, prepare
from tests.e2e.sessions import (
    OperatorFactory,
    operator_factory,
    run_session_cluster,
)


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    yield from run_session_cluster(fault_cluster("msop-faults"), prepare)


@pytest.fixture(scope="session")
def operator_kubeconfig(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return service_account_kubeconfig(cluster, tmp_path_factory.mktemp("sa") / "kubeconfig")


@pytest.fixture
def start_operator(
    cluster: LocalCluster, namespace: str, operator_kubeconfig: Path
) -> Iterator[OperatorFactory]:
    """Operators as the ServiceAccount of config/rbac (see ``operator_factory``)."""
    with operator_factory(operator_kubeconfig, namespace) as start:
        yield start


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    # The cluster's own controllers recover from the previous test's outage on client-go's
    # backoff (up to 30 s): each test starts once the scheduler and kwok run a pod again.
    cluster.wait_healthy(120)
    yield from namespace_for_a_test(cluster, prefix="fault", timeout=90)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not FIGURES:
        return
    terminalreporter.section("control-plane faults: figures")
    for row in FIGURES:
        terminalreporter.write_line(json.dumps(row))
    out = CACHE / "e2e-logs" / f"faults-figures-{uuid.uuid4().hex[:6]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(FIGURES, indent=2))
    terminalreporter.write_line(f"(also in {out})")
