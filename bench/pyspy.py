"""Summarize ``py-spy record --format raw`` output: where the operator's CPU went.

Each line of the raw format is a collapsed stack (``frame;frame;...;leaf count``), a
frame being ``function (file:line)``. Samples whose leaf is a thread blocked on its
queue or the event loop waiting in ``select`` are idle, not CPU, and are left out.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

#: Leaf frames that mean "waiting", not "working".
IDLE_LEAVES = ("concurrent/futures/thread.py", "selectors.py", "threading.py")


def _function(frame: str) -> str:
    """``name (path/to/file.py:12)`` -> ``name (file.py)``: one entry per function."""
    name, _, where = frame.partition(" (")
    file = where.split(":", 1)[0].rsplit("/", 1)[-1]
    return f"{name} ({file})" if where else name


def summarize(raw: str, top: int = 25) -> str:
    """A text table of the busiest leaf functions and the largest inclusive ones."""
    leaf: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    busy = idle = 0
    for line in raw.splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if any(marker in frames[-1] for marker in IDLE_LEAVES):
            idle += n
            continue
        busy += n
        leaf[_function(frames[-1])] += n
        for function in {_function(f) for f in frames}:
            inclusive[function] += n
    if not busy:
        return "no busy samples\n"
    out = [f"busy samples: {busy} (idle samples left out: {idle})", "", "self time:"]
    out += [f"{n / busy:6.1%}  {f}" for f, n in leaf.most_common(top)]
    out += ["", "inclusive time:"]
    out += [f"{n / busy:6.1%}  {f}" for f, n in inclusive.most_common(top * 2)]
    return "\n".join(out) + "\n"


def write_summary(raw_path: Path, out_path: Path, wait_s: float = 15.0) -> bool:
    """Summarize ``raw_path`` into ``out_path`` once py-spy has written it (it does so
    when the profiled process exits). False if it never appeared."""
    deadline = time.monotonic() + wait_s
    while not raw_path.exists() or raw_path.stat().st_size == 0:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    time.sleep(0.5)  # the writer may still be flushing
    out_path.write_text(summarize(raw_path.read_text()))
    return True
