"""The agents' request signatures: ECDSA over NIST P-256 with SHA-256, from ``cryptography``.

The operator signs (:mod:`msop.msjob.inplace.client`), the pod's agent verifies
(:mod:`msop.integrations.agent`); both run from the operator's image, which has
``cryptography``. What is signed is :func:`msop.integrations.wire.signed_message`.

Wire formats (unchanged from the agent protocol's first version): a private key is the
scalar ``d``, kept in the operator's Secret as 64 hex digits; a public key is the
uncompressed SEC 1 point, 65 bytes ``0x04 || X || Y`` (130 hex digits in the pod's
environment); a signature is 64 bytes ``r || s``, each 32 bytes big-endian (not DER).

:func:`verify` takes anything a client sends and never raises.
"""

from __future__ import annotations

from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

__all__ = [
    "PUBLIC_KEY_SIZE",
    "SIGNATURE_SIZE",
    "PrivateKey",
    "generate_private_key",
    "is_public_key",
    "load_private_key",
    "private_scalar",
    "public_key",
    "sign",
    "verify",
]

PUBLIC_KEY_SIZE: Final = 65
"""Bytes of an uncompressed SEC 1 public key."""
SIGNATURE_SIZE: Final = 64
"""Bytes of a signature, ``r || s``."""
_SIZE = 32
_N = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
"""The order of P-256's group: ``r`` and ``s`` lie in [1, n-1]."""

PrivateKey = ec.EllipticCurvePrivateKey


def generate_private_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def load_private_key(d: int) -> PrivateKey:
    """The key of scalar ``d``; ValueError unless 1 <= d < n."""
    if isinstance(d, bool) or not 0 < d < _N:
        raise ValueError("a P-256 private key is an integer in [1, n-1]")
    return ec.derive_private_key(d, ec.SECP256R1())


def private_scalar(key: PrivateKey) -> int:
    """The key's scalar ``d``, as the Secret keeps it."""
    return key.private_numbers().private_value


def public_key(key: PrivateKey) -> bytes:
    """The key's public point, uncompressed (65 bytes)."""
    return key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def _bytes(data: object) -> bytes | None:
    return bytes(data) if isinstance(data, (bytes, bytearray, memoryview)) else None


def _load_public(data: object) -> ec.EllipticCurvePublicKey | None:
    public = _bytes(data)
    if public is None or len(public) != PUBLIC_KEY_SIZE or public[0] != 4:
        return None
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), public)
    except ValueError:  # not a point of the curve
        return None


def is_public_key(public: object) -> bool:
    """Whether ``public`` is an uncompressed point of P-256."""
    return _load_public(public) is not None


def sign(key: PrivateKey, message: bytes) -> bytes:
    """The signature of ``message``, ``r || s`` (64 bytes)."""
    r, s = decode_dss_signature(key.sign(message, ec.ECDSA(hashes.SHA256())))
    return r.to_bytes(_SIZE, "big") + s.to_bytes(_SIZE, "big")


def verify(public: object, message: object, signature: object) -> bool:
    """Whether ``signature`` is the signature of ``message`` by ``public``'s key. False
    (never an exception) for a key that is not a point of the curve, a signature of the
    wrong length or with ``r`` or ``s`` out of range."""
    key, raw, data = _load_public(public), _bytes(signature), _bytes(message)
    if key is None or raw is None or data is None or len(raw) != SIGNATURE_SIZE:
        return False
    r, s = int.from_bytes(raw[:_SIZE], "big"), int.from_bytes(raw[_SIZE:], "big")
    if not (0 < r < _N and 0 < s < _N):
        return False
    try:
        key.verify(encode_dss_signature(r, s), data, ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True
