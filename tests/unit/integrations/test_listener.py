"""The listening socket of a pod's servers (msop.integrations.listener)."""

from __future__ import annotations

import errno
import socket

import pytest

from msop.integrations.listener import listen


def test_on_every_address_ipv4_clients_reach_it() -> None:
    with listen(0, backlog=4) as server:
        port = server.getsockname()[1]
        assert server.family in (socket.AF_INET, socket.AF_INET6)
        if server.family == socket.AF_INET6:
            assert server.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            conn, _ = server.accept()
            conn.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_on_one_address(host: str) -> None:
    if ":" in host and not socket.has_ipv6:
        pytest.skip("no IPv6 in this network namespace")
    try:
        server = listen(0, host=host, backlog=4)
    except OSError as exc:
        if ":" in host and exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            pytest.skip("IPv6 loopback unavailable")
        raise
    with server:
        assert server.family == (socket.AF_INET6 if ":" in host else socket.AF_INET)
        assert server.getsockname()[0] == host


def test_a_port_in_use_raises_eaddrinuse() -> None:
    with listen(0, host="127.0.0.1", backlog=4) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as raised:
            listen(port, backlog=4).close()
        assert raised.value.errno == errno.EADDRINUSE
