"""Stopping the child processes the test harness starts."""

from __future__ import annotations

import signal
import subprocess
from typing import Any


def terminate(proc: subprocess.Popen[Any], timeout: float) -> int:
    """SIGTERM ``proc`` and wait up to ``timeout`` seconds, then SIGKILL; return its exit
    code. A process that already ended just reports its code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return int(proc.returncode)
