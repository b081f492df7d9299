"""A self-signed TLS serving certificate, made with the standard library alone.

:func:`generate` returns a fresh P-256 (prime256v1) key and an X.509 v3 certificate for it,
signed with ECDSA-SHA256 by that same key, both PEM-encoded. A server uses them when no
certificate was given to it, as controller-runtime's metrics server does; clients then
skip verification (``insecureSkipVerify``) or trust nothing in particular, since the
certificate is new at every start.

Why not the ``cryptography`` package: importing it costs the process about 14 MiB of
resident memory for the rest of its life, a third of the operator's idle footprint, to
make one certificate at start. The Python here only makes the key and signs the
certificate once; the TLS itself is OpenSSL's (the ``ssl`` module), and the curve
arithmetic is :mod:`msop.integrations.p256`'s (shared with the restart agent of training
pods, for the same reason). The private key is a uniformly random scalar from
:mod:`secrets`; it is written without its public point, so OpenSSL computes that point
itself when it loads the key and refuses a certificate whose public key differs (``key
values mismatch``): a wrong curve computation here cannot go unnoticed. Speed does not
matter (one scalar multiplication for the key, one for the signature, a few milliseconds)
and neither does timing: nothing remote can measure them.

Raises nothing but ValueError for impossible arguments (no host, a bad validity).
"""

from __future__ import annotations

import base64
import ipaddress
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from msop.integrations import p256

__all__ = ["DEFAULT_VALIDITY", "generate"]

#: How long a generated certificate is valid; clients that skip verification ignore it.
DEFAULT_VALIDITY = timedelta(days=365)

# --- DER ------------------------------------------------------------------------------


def _tlv(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        length = bytes([n])
    else:
        raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(raw)]) + raw
    return bytes([tag]) + length + content


def _seq(*items: bytes) -> bytes:
    return _tlv(0x30, b"".join(items))


def _int(value: int) -> bytes:
    return _tlv(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _oid(dotted: str) -> bytes:
    first, second, *rest = (int(x) for x in dotted.split("."))
    out = bytearray([40 * first + second])
    for arc in rest:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        out += bytes(reversed(chunk))
    return _tlv(0x06, bytes(out))


def _bits(data: bytes) -> bytes:
    return _tlv(0x03, b"\x00" + data)


def _time(moment: datetime) -> bytes:
    if moment.year < 2050:  # RFC 5280 4.1.2.5: UTCTime through 2049
        return _tlv(0x17, moment.strftime("%y%m%d%H%M%SZ").encode())
    return _tlv(0x18, moment.strftime("%Y%m%d%H%M%SZ").encode())


def _name(common_name: str) -> bytes:
    attribute = _seq(_oid("2.5.4.3"), _tlv(0x0C, common_name.encode()))
    return _seq(_tlv(0x31, attribute))


def _extension(oid: str, value: bytes, *, critical: bool = False) -> bytes:
    flag = _tlv(0x01, b"\xff") if critical else b""
    return _seq(_oid(oid), flag, _tlv(0x04, value))


def _alt_names(hosts: Sequence[str]) -> bytes:
    names = []
    for host in hosts:
        try:
            names.append(_tlv(0x87, ipaddress.ip_address(host).packed))  # iPAddress [7]
        except ValueError:
            names.append(_tlv(0x82, host.encode("ascii")))  # dNSName [2]
    return _seq(*names)


_EC_PUBLIC_KEY = "1.2.840.10045.2.1"
_PRIME256V1 = "1.2.840.10045.3.1.7"
_ECDSA_SHA256 = "1.2.840.10045.4.3.2"


def _pem(label: str, der: bytes) -> bytes:
    body = base64.encodebytes(der).decode().replace("\n", "")
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join([f"-----BEGIN {label}-----", *lines, f"-----END {label}-----", ""]).encode()


def generate(
    hosts: Sequence[str],
    *,
    common_name: str = "msop",
    validity: timedelta = DEFAULT_VALIDITY,
    now: datetime | None = None,
) -> tuple[bytes, bytes]:
    """A new key and a self-signed certificate for it: ``(cert_pem, key_pem)``.

    ``hosts`` are the certificate's subject alternative names (DNS names, or IP
    addresses); ``common_name`` names its subject and issuer. The
    certificate is valid from a minute before ``now`` (default: the current time), to
    tolerate clocks slightly behind, for ``validity``. Raises ValueError without hosts
    or with a validity that is not positive.
    """
    if not hosts:
        raise ValueError("a certificate needs at least one host")
    if validity <= timedelta(0):
        raise ValueError(f"validity must be positive, got {validity}")
    start = (now or datetime.now(UTC)).replace(microsecond=0) - timedelta(minutes=1)
    d = p256.generate_private_key()
    point = p256.public_key(d)
    algorithm = _seq(_oid(_ECDSA_SHA256))
    extensions = [
        _extension("2.5.29.17", _alt_names(hosts)),
        _extension("2.5.29.15", _bits(b"\x80"), critical=True),  # keyUsage: digitalSignature
        _extension("2.5.29.37", _seq(_oid("1.3.6.1.5.5.7.3.1"))),  # extKeyUsage: serverAuth
        _extension("2.5.29.19", _seq(), critical=True),  # basicConstraints: not a CA
    ]
    tbs = _seq(
        _tlv(0xA0, _int(2)),  # version 3
        _int(secrets.randbits(127) | 1),  # positive, at most 16 octets
        algorithm,
        _name(common_name),
        _seq(_time(start), _time(start + validity)),
        _name(common_name),
        _seq(_seq(_oid(_EC_PUBLIC_KEY), _oid(_PRIME256V1)), _bits(point)),
        _tlv(0xA3, _seq(*extensions)),
    )
    signature = p256.sign(d, tbs)
    r, s = int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
    certificate = _seq(tbs, algorithm, _bits(_seq(_int(r), _int(s))))
    # SEC 1 ECPrivateKey without its optional public key: OpenSSL derives the point.
    key = _seq(_int(1), _tlv(0x04, d.to_bytes(32, "big")), _tlv(0xA0, _oid(_PRIME256V1)))
    return _pem("CERTIFICATE", certificate), _pem("EC PRIVATE KEY", key)
