"""``msop run`` exports process_* and msop_build_info on msop's own registry."""

from __future__ import annotations

import platform

from prometheus_client import generate_latest

from msop import __version__
from msop.metrics import REGISTRY, register_process_metrics


def test_process_and_build_info_series_are_exported_once() -> None:
    register_process_metrics(__version__)
    register_process_metrics(__version__)  # a second call adds nothing (no duplicate error)
    text = generate_latest(REGISTRY).decode()
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total",
                 "process_start_time_seconds", "process_open_fds"):  # fmt: skip
        assert f"\n{name} " in text, name
    line = f'msop_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
    assert line in text
    assert text.count("# TYPE msop_build_info gauge") == 1
