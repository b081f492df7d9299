"""Loopback ports for the servers the harness starts, taken below the ephemeral range.

``bind(("127.0.0.1", 0))`` picks from the kernel's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 here). Once that probing socket closes, the
port is free again, and any outgoing connection of the machine may take it as its source
port before the server the test then starts binds it: "bind: address already in use", a
flake seen in this harness. The kernel never gives a port below that range to an outgoing
connection, so one found free there stays free until someone binds it on purpose.

:func:`free_port` walks ports in ``[PORT_FLOOR, ephemeral floor)`` from a random start, skips
those it handed out before in this process (a server may not have bound its port yet), and
returns the first one that a bind without ``SO_REUSEADDR`` accepts (so none in TIME_WAIT).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["PORT_FLOOR", "ephemeral_floor", "free_port"]

#: The lowest port handed out: clear of well-known and registered services' usual ports.
PORT_FLOOR = 20000
_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_given: set[int] = set()
_random = random.Random()


def ephemeral_floor() -> int:
    """The lowest port the kernel gives to outgoing connections (32768 if unknown)."""
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A loopback port nobody holds, below the ephemeral range, not given out before by
    this process. Falls back to the kernel's choice when that range is too narrow."""
    low, high = PORT_FLOOR, ephemeral_floor()
    if high - low < 1000:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
            return port
    span = high - low
    start = _random.randrange(span)
    for i in range(span):
        candidate = low + (start + i) % span
        if candidate not in _given and _bindable(candidate):
            _given.add(candidate)
            return candidate
    raise OSError(f"no free loopback port in [{low}, {high})")
