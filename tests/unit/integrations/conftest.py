"""Shared fixtures: a manual clock, reporters that are always finished, a plain HTTP GET."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from msop.integrations.reporter import Reporter
from tests.support.clocks import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def final_file(tmp_path: Path) -> Path:
    return tmp_path / "termination-log"


@pytest.fixture
def msop_env(final_file: Path) -> dict[str, str]:
    """What the operator injects into Worker 0's mindspore container (port 0: any free one)."""
    return {
        "MSOP_PROGRESS_PORT": "0",
        "MSOP_POD_NAME": "job-worker-0",
        "MSOP_POD_UID": "0f4c7b1e-8d2a-4c55-9d1e-3b6a2f0c9e11",
        "MSOP_PROGRESS_FILE": str(final_file),
    }


@pytest.fixture
def make_reporter(msop_env: dict[str, str], clock: FakeClock) -> Iterator[Callable[..., Reporter]]:
    """Reporter(...) with the msop env and the fake clock by default; finished at teardown."""
    made: list[Reporter] = []

    def make(*args: Any, **kwargs: Any) -> Reporter:
        kwargs.setdefault("env", msop_env)
        kwargs.setdefault("clock", clock)
        kwargs.setdefault("host", "127.0.0.1")  # never every address in a unit test
        reporter = Reporter(*args, **kwargs)
        made.append(reporter)
        return reporter

    yield make
    for reporter in made:
        reporter.finish()
