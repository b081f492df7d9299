"""``barrier``: the msop-barrier init container. On the pod's first start it writes the
generation and exits (a pod made to replace a lost member, ``MSOP_AGENT_HOLD=1``, waits
for the release of that generation instead); after a restart it waits until msop released
the pod's generation."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

from msop.integrations.agent.config import Config
from msop.integrations.agent.runs import install_keeper
from msop.integrations.agent.state import State, StateDir

__all__ = ["POLL", "barrier"]

POLL: Final = 0.1
"""Seconds between two looks of the barrier at ``released``."""


def _enter(files: StateDir, say: Callable[[str], None], hold: bool) -> int | None:
    """The generation to wait for, written with ``waiting: true``; None on the first start
    (unless ``hold``: the pod replaces a lost member and starts with the others)."""
    with files.lock():
        state = files.read()
        if state is None and hold:
            target, why = files.env_generation, "this pod replaces a lost member"
        elif state is None:
            files.write(State(files.env_generation))
            say(
                f"first start of the pod, at generation {files.env_generation}: nothing to wait for"
            )
            return None
        elif state.requested:
            target, why = state.generation, "msop asked for this restart"
        elif state.waiting:
            target, why = state.generation, "the pod restarted before its release"
        else:
            target, why = state.generation + 1, "a container of this pod failed"
        files.write(State(target, waiting=True))
    say(f"waiting for msop to release generation {target} ({why})")
    return target


def _leave(files: StateDir, target: int) -> bool:
    """Clear ``waiting`` if the state is still the barrier's own; False if the sidecar
    accepted a newer restart meanwhile (the restart of every container that follows runs
    the barrier again, so it must not let the training start now)."""
    with files.lock():
        if files.read() != State(target, waiting=True):
            return False
        files.write(State(target))
        return True


def _say(line: str) -> None:
    print(f"msop barrier: {line}", flush=True)


def barrier(config: Config, *, poll: float = POLL, say: Callable[[str], None] = _say) -> int:
    """Run the init container: wait until msop released the pod's generation, then exit 0."""
    files = StateDir(config.directory, config.generation)
    try:
        install_keeper(config.directory)
    except OSError as exc:  # the training then runs without its output kept
        say(f"cannot install the keeper of the training's output: {exc}")
    target = _enter(files, say, config.hold)
    if target is None:
        return 0
    superseded = False
    while True:
        released = files.released()
        if released is not None and released >= target:
            if _leave(files, target):
                say(f"generation {target} released: the training may start")
                return 0
            if not superseded:
                superseded = True
                say("a newer restart was accepted meanwhile: waiting for it")
        time.sleep(poll)
