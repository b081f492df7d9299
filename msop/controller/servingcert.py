"""The TLS side of a server: its ``ssl.SSLContext`` and the certificate in it.

:meth:`ServingCert.load` reads ``tls.crt`` and ``tls.key`` from a directory (a mounted
``kubernetes.io/tls`` Secret, e.g. cert-manager's); :meth:`ServingCert.self_signed`
makes a certificate in memory (:mod:`.selfsigned`). The context serves TLS 1.2 and newer,
HTTP/1.1 only (ALPN ``http/1.1``).

A certificate from a directory is loaded again when its files change (a Secret's
rotation, which the kubelet applies by swapping the directory's ``..data`` link). The
server keeps the first context; its server-name callback, which OpenSSL calls early in
every handshake, with or without SNI, runs :meth:`ServingCert.refresh` (a ``stat`` of
the two files; a load into a new context when they changed) and hands the connection
the newest context. A refresh that fails keeps the certificate in use and logs why;
nothing raises.
"""

from __future__ import annotations

import os
import socket
import ssl
import tempfile
from collections.abc import Sequence
from pathlib import Path

import structlog

from msop.controller import selfsigned

__all__ = ["CERT_FILE", "KEY_FILE", "ServingCert", "default_hosts"]

log = structlog.get_logger("msop.controller.servingcert")

#: The file names of a ``kubernetes.io/tls`` Secret, as controller-runtime reads them.
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"

_Stamp = tuple[tuple[int, int, int], ...]


def _context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(["http/1.1"])
    return context


def _load_pem(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a certificate and key held in memory. ``ssl`` reads them only from a file:
    an anonymous in-memory file (Linux ``memfd``) where there is one, else a private
    temporary file that is removed at once."""
    data = cert_pem + key_pem
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd("msop-serving-cert", 0)
        try:
            os.write(fd, data)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
            return
        finally:
            os.close(fd)
    with tempfile.TemporaryDirectory() as tmp:  # mode 0700
        path = Path(tmp) / "cert.pem"
        path.write_bytes(data)
        context.load_cert_chain(path)


def _stat(directory: Path) -> _Stamp:
    """What tells a rewritten file from the one loaded (stat follows the Secret's links)."""
    stamps = []
    for name in (CERT_FILE, KEY_FILE):
        st = os.stat(directory / name)
        stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(stamps)


def _load_dir(directory: Path) -> ssl.SSLContext:
    context = _context()
    context.load_cert_chain(directory / CERT_FILE, directory / KEY_FILE)
    return context


def default_hosts() -> list[str]:
    """Names a generated certificate is made for: this host's name (a pod's name, when
    it is a DNS name) and loopback."""
    name = socket.gethostname()
    own = [name] if name.isascii() and name.replace("-", "").replace(".", "").isalnum() else []
    return [*own, "localhost", "127.0.0.1", "::1"]


class ServingCert:
    """A server's ``ssl.SSLContext`` (:attr:`context`); build it with :meth:`load` or
    :meth:`self_signed`."""

    def __init__(
        self, context: ssl.SSLContext, cert_dir: Path | None = None, stamp: _Stamp | None = None
    ) -> None:
        self.context = context
        """The context to serve with (the first one loaded; see the module docstring)."""
        self.cert_dir = cert_dir
        """Where the certificate comes from; None for a generated one."""
        self._current = context
        self._stamp = stamp
        if cert_dir is not None:
            context.sni_callback = self._select

    def _select(self, connection: ssl.SSLObject, name: str | None, context: ssl.SSLContext) -> None:
        self.refresh()
        if self._current is not context:
            connection.context = self._current

    @classmethod
    def load(cls, cert_dir: str | Path) -> ServingCert:
        """``tls.crt`` and ``tls.key`` of ``cert_dir``. Raises OSError (ssl.SSLError for a
        bad or mismatched certificate and key) with the directory in its message."""
        directory = Path(cert_dir)
        try:
            stamp = _stat(directory)  # before the load: a change in between is seen later
            return cls(_load_dir(directory), directory, stamp)
        except OSError as e:
            raise OSError(f"cannot load {CERT_FILE} and {KEY_FILE} from {directory}: {e}") from None

    @classmethod
    def self_signed(cls, hosts: Sequence[str] | None = None) -> ServingCert:
        """A certificate generated now, for ``hosts`` (default :func:`default_hosts`),
        held in memory only."""
        cert_pem, key_pem = selfsigned.generate(hosts or default_hosts())
        context = _context()
        _load_pem(context, cert_pem, key_pem)
        return cls(context)

    def refresh(self) -> bool:
        """Load the directory's files again if they changed since the last load; True
        when a new certificate was loaded (the next handshakes use it). A generated
        certificate never changes. Never raises."""
        if self.cert_dir is None:
            return False
        try:
            stamp = _stat(self.cert_dir)
        except OSError as e:
            log.warning("cannot read the serving certificate; keeping the current one",
                        cert_dir=str(self.cert_dir), error=str(e))  # fmt: skip
            return False
        if stamp == self._stamp:
            return False
        try:
            self._current = _load_dir(self.cert_dir)
        except OSError as e:
            # Half-written files (a new crt with the old key): try again next time.
            log.warning("cannot load the new serving certificate; keeping the current one",
                        cert_dir=str(self.cert_dir), error=str(e))  # fmt: skip
            return False
        self._stamp = stamp
        log.info("loaded a new serving certificate", cert_dir=str(self.cert_dir))
        return True
