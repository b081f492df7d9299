"""A training script stand-in for the launcher's tests. It writes ``<OUT>/<role>-<rank>``
with its pid when it starts, then, by its environment:

- ``KILL_RANK``: the worker of that rank SIGKILLs itself (as the OOM killer would);
- ``EXIT_RANK`` / ``EXIT_CODE``: the worker of that rank exits with that code;
- otherwise it works ``WORK`` seconds (the Scheduler ``SCHED_WORK``) and exits 0, writing
  ``<OUT>/<role>-<rank>.done``; on SIGTERM it writes ``.term`` and exits 143.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

out = Path(os.environ["OUT"])
role = os.environ.get("MS_ROLE", "")
rank = os.environ.get("RANK_ID", "")
me = out / f"{role}-{rank}"
me.write_text(str(os.getpid()))


def on_term(_signum: int, _frame: object) -> None:
    me.with_suffix(".term").write_text("")
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
if role == "MS_WORKER" and rank == os.environ.get("KILL_RANK"):
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)
if role == "MS_WORKER" and rank == os.environ.get("EXIT_RANK"):
    time.sleep(0.3)
    sys.exit(int(os.environ.get("EXIT_CODE", "1")))
time.sleep(float(os.environ.get("SCHED_WORK" if role == "MS_SCHED" else "WORK", "0.5")))
me.with_suffix(".done").write_text("")
