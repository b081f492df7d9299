"""Every test under tests/e2e carries the ``e2e`` marker. The tiers are siblings, each with
its own fixtures: ``kwok/`` (the local control plane, kwok nodes), ``faults/`` (faults of
the control plane, on a cluster of their own) and ``real/`` (a real kubelet node);
``sessions.py`` holds what they share."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)
