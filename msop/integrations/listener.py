"""The listening socket of a pod's HTTP server (the progress reporter's, the restart
agent's): on one address, or on every address of the pod.

Every address is dual-stack ``::`` where the pod has IPv6 (an IPv6-only cluster gives pods
only IPv6 addresses), else ``0.0.0.0``: a pod whose network namespace has IPv6 disabled
cannot bind ``::`` and serves on IPv4 alone. Standard library only.
"""

from __future__ import annotations

import errno
import socket

__all__ = ["listen"]


def listen(port: int, *, host: str | None = None, backlog: int) -> socket.socket:
    """A listening TCP socket on ``host`` (an IPv4 or IPv6 address), or on every address
    when ``host`` is None. Port 0 picks a free one.

    Raises OSError (EADDRINUSE if the port is taken).
    """
    if host is not None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return socket.create_server((host, port), family=family, backlog=backlog)
    if socket.has_dualstack_ipv6():
        try:
            return socket.create_server(
                ("::", port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
            )
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise
            # IPv6 disabled in this pod's network namespace: IPv4 only.
    return socket.create_server(("0.0.0.0", port), backlog=backlog)
