"""Network namespaces for the real-node test tier, and a TCP forwarder between them.

The real-node cluster (``testbed.realnode``) lives in a network namespace of its
own: the API server, the pod bridge, the pods and the Service IPs exist only there, and
the namespace has no interface but its loopback and the bridge, so nothing it runs can
reach or be reached from outside this machine. Two things cross the boundary, both
through :func:`forward`, a plain TCP relay:

- the host's loopback to the API server (so kubectl and tests on the host can use it);
- inside the namespace, the bridge gateway to the API server on the namespace's own
  loopback (pods reach the ``kubernetes`` Service through kube-proxy to that gateway).

``python -m testbed.netns forward`` runs one relay; it prints the port it listens
on and serves until it is terminated. Linux only; creating a namespace needs root.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/run/netns")


def private_loopback(argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` in a network namespace of its own whose only
    interface is its loopback, up (IPv4 and IPv6). A unit test runs there what binds every
    address, a pod's server: nothing outside the namespace can reach it, and it listens on
    none of this machine's interfaces. Needs root or unprivileged user namespaces."""
    ip = shutil.which("ip", path=f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin")
    if ip is None:
        raise FileNotFoundError("ip (iproute2) is needed to bring a namespace's loopback up")
    up = '"$0" link set lo up && exec "$@"'
    return ["unshare", "--net", "--map-root-user", "--", "sh", "-c", up, ip, *argv]


def setns(path: str | Path) -> None:
    """Move the calling thread into the network namespace at ``path`` (a bind-mounted
    ``/run/netns/<name>`` or ``/proc/<pid>/ns/net``). Threads created afterwards by this
    thread inherit it; sockets keep the namespace they were created in.
    Raises OSError if the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass(frozen=True)
class NetNamespace:
    """A named network namespace (``ip netns``): ``create()`` it, run commands in it
    with ``prefix()``, ``delete()`` it (which removes every interface, route and
    iptables rule inside it)."""

    name: str

    @property
    def path(self) -> Path:
        return NETNS_DIR / self.name

    def exists(self) -> bool:
        return self.path.exists()

    def prefix(self) -> list[str]:
        """The argv prefix that runs a command inside the namespace. ``nsenter`` joins
        only the network namespace, so files and mounts stay the host's."""
        return ["nsenter", f"--net={self.path}", "--"]

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.prefix(), *argv], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise subprocess.CalledProcessError(
                proc.returncode, proc.args, output=proc.stdout, stderr=proc.stderr
            )
        return proc

    def create(self) -> None:
        """Create the namespace with its loopback up. An old one of the same name is
        deleted first. Raises CalledProcessError (with ip's stderr) on failure."""
        if self.exists():
            self.delete()
        _ip("netns", "add", self.name)
        self.run("ip", "link", "set", "lo", "up")

    def delete(self) -> None:
        """Delete the namespace. Never raises."""
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True, check=False)


def _ip(*args: str) -> None:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(
            proc.returncode, proc.args, output=proc.stdout, stderr=proc.stderr
        )


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            if writer.can_write_eof():
                writer.write_eof()


async def _relay(listener: socket.socket, host: str, port: int, source: str | None = None) -> None:
    local = (source, 0) if source else None

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port, local_addr=local)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the relay is stopping: the connection just closes
        finally:
            writer.close()
            up_writer.close()

    server = await asyncio.start_server(handle, sock=listener)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def forward(
    listen: tuple[str, int],
    connect: tuple[str, int],
    listen_netns: str | None = None,
    connect_netns: str | None = None,
    source: str | None = None,
) -> None:
    """Relay TCP from ``listen`` (in ``listen_netns``, or the current namespace) to
    ``connect`` (in ``connect_netns``), from the address ``source`` if given (e.g.
    ``127.0.0.2``, so that the target's logs tell this relay's clients apart). Prints the
    bound port on stdout, then serves until SIGTERM or SIGINT. Connections the target
    refuses are closed at once."""
    if listen_netns:
        setns(listen_netns)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(listen)
    listener.listen(128)
    # From here on every new socket is created in the target namespace; the listener
    # stays where it was bound.
    if connect_netns:
        setns(connect_netns)
    print(listener.getsockname()[1], flush=True)
    asyncio.run(_relay(listener, *connect, source=source))


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m testbed.netns")
    sub = parser.add_subparsers(dest="command", required=True)
    fwd = sub.add_parser("forward", help="relay TCP from one namespace to another")
    fwd.add_argument("--listen", type=_addr, required=True, help="HOST:PORT (port 0: any)")
    fwd.add_argument("--connect", type=_addr, required=True, help="HOST:PORT")
    fwd.add_argument("--listen-netns", help="namespace path to listen in (default: current)")
    fwd.add_argument("--connect-netns", help="namespace path to connect from")
    fwd.add_argument("--source", help="address to connect from (default: any)")
    args = parser.parse_args(argv)
    forward(args.listen, args.connect, args.listen_netns, args.connect_netns, args.source)


if __name__ == "__main__":
    main(sys.argv[1:])
