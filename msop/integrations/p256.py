"""ECDSA over NIST P-256 with SHA-256, in the standard library alone.

Two parts of msop sign with it: the operator's self-signed TLS certificate
(:mod:`msop.controller.selfsigned`) and the operator's requests to the restart agent in the
training pods (:mod:`msop.integrations.agent`), which verifies them. Why not the
``cryptography`` package: importing it costs a process about 14 MiB of resident memory for
the rest of its life, a third of the idle operator's footprint (see
``docs/development/dependencies.md``), and a training image should not need it to run the
agent either. The arithmetic is short and checked against OpenSSL by the unit tests, both
ways (OpenSSL verifies our signatures, we verify OpenSSL's).

Formats: a private key is the scalar ``d`` (an int in [1, n-1]); a public key is the
uncompressed SEC 1 point, 65 bytes ``0x04 || X || Y``; a signature is 64 bytes
``r || s``, each 32 bytes big-endian (not DER).

Speed: affine coordinates and Python integers, about 10 ms per signature or verification
on a busy core (a verification shares the doublings of its two multiplications). Timing:
the multiplications by a secret scalar (a key's public point, a signature's nonce) run a
Montgomery ladder of a fixed length, so the number and order of curve operations does not
depend on the scalar; Python's integers are not constant-time, so this hides the gross
leaks (a nonce's length and weight), nothing finer. The operator signs a couple of messages
per job restart, and nothing outside it sees when a signature starts.

:func:`verify` takes anything a client sends and never raises: a key that is not a point of
the curve, a signature of the wrong length, ``r`` or ``s`` outside [1, n-1] all give False.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Final

__all__ = [
    "PUBLIC_KEY_SIZE",
    "SIGNATURE_SIZE",
    "generate_private_key",
    "is_public_key",
    "public_key",
    "sign",
    "verify",
]

PUBLIC_KEY_SIZE: Final = 65
"""Bytes of an uncompressed SEC 1 public key."""
SIGNATURE_SIZE: Final = 64
"""Bytes of a signature, ``r || s``."""

# --- NIST P-256 (SEC 2 secp256r1), affine coordinates -----------------------------------

_P = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
_A = _P - 3
_B = 0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B
_G = (
    0x6B17D1F2E12C4247F8BCE6E563A440F277037D812DEB33A0F4A13945D898C296,
    0x4FE342E2FE1A7F9B8EE7EB4A7C0F9E162BCE33576B315ECECBB6406837BF51F5,
)
_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_SIZE = 32
_LADDER_BITS = 257
"""A scalar k in [1, n-1] plus n (or 2n) always has exactly this many bits."""

Point = tuple[int, int] | None
"""A point of the curve; None is the point at infinity."""


def _on_curve(point: Point) -> bool:
    if point is None:
        return True
    x, y = point
    return (y * y - (x * x * x + _A * x + _B)) % _P == 0


def _add(p1: Point, p2: Point) -> Point:
    if p1 is None:
        return p2
    if p2 is None:
        return p1
    x1, y1 = p1
    x2, y2 = p2
    if x1 == x2:
        if (y1 + y2) % _P == 0:
            return None
        slope = (3 * x1 * x1 + _A) * pow(2 * y1, -1, _P)
    else:
        slope = (y2 - y1) * pow(x2 - x1, -1, _P)
    x3 = (slope * slope - x1 - x2) % _P
    return (x3, (slope * (x1 - x3) - y1) % _P)


def _multiply_two(k1: int, p1: Point, k2: int, p2: Point) -> Point:
    """``k1 * p1 + k2 * p2`` for public scalars, with one shared chain of doublings
    (Shamir's trick): a verification costs about 40% less than two multiplications."""
    pair = {(1, 0): p1, (0, 1): p2, (1, 1): _add(p1, p2)}
    result: Point = None
    for i in reversed(range(max(k1.bit_length(), k2.bit_length()))):
        result = _add(result, result)
        bits = ((k1 >> i) & 1, (k2 >> i) & 1)
        if bits != (0, 0):
            result = _add(result, pair[bits])
    return result


def _multiply_secret(k: int, point: Point) -> Point:
    """``k * point`` for a secret ``k`` in [1, n-1], by a Montgomery ladder of fixed length.

    ``k + n`` (or ``k + 2n`` when that is still short) has 257 bits whatever ``k`` is and
    the same multiple of a point of order n; each step does one addition and one doubling.
    """
    k += _N
    if k.bit_length() < _LADDER_BITS:
        k += _N
    low: Point = None
    high = point
    for i in reversed(range(_LADDER_BITS)):
        if (k >> i) & 1:
            low, high = _add(low, high), _add(high, high)
        else:
            low, high = _add(low, low), _add(low, high)
    return low


def _scalar() -> int:
    """A uniformly random scalar in [1, n-1]."""
    return secrets.randbelow(_N - 1) + 1


def _digest(message: bytes) -> int:
    return int.from_bytes(hashlib.sha256(message).digest(), "big")  # 256 bits: no truncation


def _sign(d: int, message: bytes) -> tuple[int, int]:
    """ECDSA over SHA-256 of ``message`` with private scalar ``d``: (r, s)."""
    e = _digest(message)
    while True:
        k = _scalar()
        point = _multiply_secret(k, _G)
        assert point is not None
        r = point[0] % _N
        if r == 0:
            continue
        s = pow(k, -1, _N) * (e + r * d) % _N
        if s != 0:
            return r, s


def _encode(point: Point) -> bytes:
    assert point is not None
    return b"\x04" + point[0].to_bytes(_SIZE, "big") + point[1].to_bytes(_SIZE, "big")


def _decode(public: object) -> Point:
    """The point of an uncompressed SEC 1 key, or None if it is not a point of the curve."""
    if not isinstance(public, bytes | bytearray) or len(public) != PUBLIC_KEY_SIZE:
        return None
    if public[0] != 0x04:
        return None
    x = int.from_bytes(public[1 : 1 + _SIZE], "big")
    y = int.from_bytes(public[1 + _SIZE :], "big")
    if x >= _P or y >= _P or not _on_curve((x, y)):
        return None
    return (x, y)  # P-256's cofactor is 1: every point of the curve has order n


def _check_private(d: int) -> None:
    if isinstance(d, bool) or not isinstance(d, int) or not 1 <= d < _N:
        raise ValueError("a P-256 private key is an integer in [1, n-1]")


# --- public ---------------------------------------------------------------------------


def generate_private_key() -> int:
    """A new private key: a uniformly random scalar in [1, n-1] from :mod:`secrets`."""
    return _scalar()


def public_key(d: int) -> bytes:
    """The public key of ``d``: 65 bytes, ``0x04 || X || Y``. ValueError for a bad ``d``."""
    _check_private(d)
    return _encode(_multiply_secret(d, _G))


def is_public_key(public: bytes) -> bool:
    """Whether ``public`` is an uncompressed SEC 1 key of a point of the curve."""
    return _decode(public) is not None


def sign(d: int, message: bytes) -> bytes:
    """ECDSA-SHA256 signature of ``message`` with ``d``: 64 bytes ``r || s``.

    A new random nonce each time, so two signatures of one message differ. ValueError for a
    bad ``d``.
    """
    _check_private(d)
    r, s = _sign(d, message)
    return r.to_bytes(_SIZE, "big") + s.to_bytes(_SIZE, "big")


def verify(public: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` (``r || s``) is a signature of ``message`` by ``public``'s key.

    False, never an exception, for anything malformed: a key that does not decode or is not
    on the curve, a signature that is not 64 bytes, ``r`` or ``s`` outside [1, n-1], a
    message that is not bytes.
    """
    point = _decode(public)
    if point is None or not isinstance(message, bytes | bytearray):
        return False
    if not isinstance(signature, bytes | bytearray) or len(signature) != SIGNATURE_SIZE:
        return False
    r = int.from_bytes(signature[:_SIZE], "big")
    s = int.from_bytes(signature[_SIZE:], "big")
    if not (1 <= r < _N and 1 <= s < _N):
        return False
    w = pow(s, -1, _N)
    u1 = _digest(bytes(message)) * w % _N
    u2 = r * w % _N
    total = _multiply_two(u1, _G, u2, point)
    return total is not None and total[0] % _N == r
