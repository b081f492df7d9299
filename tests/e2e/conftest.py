"""Every test under tests/e2e carries the ``e2e`` marker. The tiers are siblings, each with
its own fixtures: ``kwok/`` (the local control plane, kwok nodes), ``faults/`` (faults of
the control plane, on a cluster of their own) and ``real/`` (a real kubelet node);
``sessions.py`` holds what they share. The ``client`` fixture here serves every tier: it
talks to whichever ``cluster`` the tier's conftest defines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from msop.kube.client import KubeClient
from tests.e2e.reliability import TEST_AGENT


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@pytest.fixture
async def client(cluster: Any) -> AsyncIterator[KubeClient]:
    """A client of the test's own (the cluster's admin, generous client-side limits), to
    the tier's ``cluster``."""
    async with await KubeClient.from_config(
        cluster.kubeconfig, user_agent=TEST_AGENT, qps=200, burst=400
    ) as c:
        yield c
