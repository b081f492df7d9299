"""The listening socket of a pod's servers (msop.integrations.listener)."""

from __future__ import annotations

import errno
import socket

import pytest

from msop.integrations.listener import listen

# Binding every address (the pods' case) is left to the e2e tiers, which run the agents
# and reporters inside network namespaces: a unit test must not listen on this machine's
# external interfaces.


def test_on_one_address() -> None:
    with listen(0, host="127.0.0.1", backlog=4) as server:
        assert server.family == socket.AF_INET
        host, port = server.getsockname()
        assert host == "127.0.0.1"
        with socket.create_connection((host, port), timeout=5):
            conn, _ = server.accept()
            conn.close()


def test_a_port_in_use_raises_eaddrinuse() -> None:
    with listen(0, host="127.0.0.1", backlog=4) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as raised:
            listen(port, host="127.0.0.1", backlog=4).close()
        assert raised.value.errno == errno.EADDRINUSE
