"""The pod's state in ``$MSOP_AGENT_DIR``, which the sidecar and the barrier share:
``state.json`` (:class:`State`), ``released`` and the ``.lock`` that orders writers
(:class:`StateDir`). See the package docstring for what the generations mean."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from msop.integrations.wire import MAX_GENERATION, valid_generation

__all__ = ["LOCK_FILE", "RELEASED_FILE", "STATE_FILE", "State", "StateDir", "log"]

STATE_FILE: Final = "state.json"
RELEASED_FILE: Final = "released"
LOCK_FILE: Final = ".lock"
_JSON_SEPARATORS = (",", ":")


def log(line: str) -> None:
    """The agent's log: one line on stderr."""
    print(f"msop agent: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class State:
    """``state.json``: the pod's generation, and how it got there."""

    generation: int
    requested: bool = False
    """The sidecar asked for the restart that comes (``POST /restart``)."""
    waiting: bool = False
    """The barrier is waiting for the release of ``generation``."""

    def to_json(self) -> bytes:
        obj = {"generation": self.generation, "requested": self.requested, "waiting": self.waiting}
        return json.dumps(obj, separators=_JSON_SEPARATORS).encode() + b"\n"

    @classmethod
    def parse(cls, data: bytes) -> State | None:
        """The state in ``data``, or None if it is not one."""
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        generation, requested, waiting = (
            obj.get(k) for k in ("generation", "requested", "waiting")
        )
        if not valid_generation(generation):
            return None
        if not isinstance(requested, bool) or not isinstance(waiting, bool):
            return None
        assert isinstance(generation, int)
        return cls(generation, requested, waiting)


class StateDir:
    """``$MSOP_AGENT_DIR``: ``state.json``, ``released`` and the lock that orders writers.

    Every read goes to the file (the other container may have changed it); every write
    replaces the file whole. A file that does not parse is logged once per process.
    """

    def __init__(self, path: Path, env_generation: int, log: Callable[[str], None] = log) -> None:
        self.path = path
        self.env_generation = env_generation
        self._log = log
        self._warned: set[str] = set()

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """An exclusive ``flock`` for a read-modify-write of ``state.json``: the sidecar and
        the barrier share the directory, and the lock, across their containers."""
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def read(self) -> State | None:
        """The pod's state; None before the barrier's first run. A corrupt file reads as
        :meth:`fallback` (see the module docstring)."""
        data = self._read(STATE_FILE)
        if data is None:
            return None
        state = State.parse(data)
        if state is None:
            fallback = self.fallback()
            self._warn(STATE_FILE, f"{STATE_FILE} is corrupt ({data[:80]!r}); read as {fallback}")
            return fallback
        return state

    def current(self) -> State:
        """The pod's state, or the environment's generation before the barrier's first run."""
        state = self.read()
        return State(self.env_generation) if state is None else state

    def fallback(self) -> State:
        released = self.released()
        return State(max(self.env_generation, -1 if released is None else released))

    def write(self, state: State) -> None:
        self._write(STATE_FILE, state.to_json())

    def released(self) -> int | None:
        """The highest released generation, or None (none yet, or a corrupt file)."""
        data = self._read(RELEASED_FILE)
        if data is None:
            return None
        text = data.decode("ascii", "replace").strip()
        if (
            not (text.isascii() and text.isdigit() and len(text) <= 19)
            or int(text) > MAX_GENERATION
        ):
            self._warn(RELEASED_FILE, f"{RELEASED_FILE} is corrupt ({data[:80]!r}); read as none")
            return None
        return int(text)

    def write_released(self, generation: int) -> None:
        self._write(RELEASED_FILE, f"{generation}\n".encode())

    def _read(self, name: str) -> bytes | None:
        try:
            return (self.path / name).read_bytes()
        except FileNotFoundError:
            return None

    def _write(self, name: str, data: bytes) -> None:
        # No fsync: the files need to survive container restarts, not the node; a node that
        # goes down takes the pod with it.
        tmp = self.path / f".{name}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, self.path / name)

    def _warn(self, key: str, line: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self._log(line)
