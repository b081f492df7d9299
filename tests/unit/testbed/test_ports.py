"""testbed.ports: servers' ports come from below the ephemeral range, never twice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from testbed import ports


def test_ports_are_below_the_ephemeral_range_and_never_given_twice() -> None:
    got = [ports.free_port() for _ in range(50)]
    assert len(set(got)) == len(got)
    assert all(ports.PORT_FLOOR <= p < ports.ephemeral_floor() for p in got)


def test_a_held_port_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        # Only two candidates: the held one first, then the next.
        monkeypatch.setattr(ports, "PORT_FLOOR", taken)
        monkeypatch.setattr(ports, "ephemeral_floor", lambda: taken + 1002)
        monkeypatch.setattr(ports, "_given", set())
        monkeypatch.setattr(ports._random, "randrange", lambda span: 0)
        assert ports.free_port() == taken + 1


def test_the_kernels_range_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "range"
    f.write_text("40000\t60999\n")
    monkeypatch.setattr(ports, "_RANGE_FILE", f)
    assert ports.ephemeral_floor() == 40000
    monkeypatch.setattr(ports, "_RANGE_FILE", tmp_path / "absent")
    assert ports.ephemeral_floor() == 32768


def test_a_narrow_range_falls_back_to_the_kernels_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = ports.ephemeral_floor()
    monkeypatch.setattr(ports, "ephemeral_floor", lambda: ports.PORT_FLOOR + 10)
    got = ports.free_port()
    assert got >= kernels  # bind(0): the kernel's own (ephemeral) choice, not a walk below
    with socket.socket() as s:
        s.bind(("127.0.0.1", got))  # and free
