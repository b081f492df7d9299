"""ECDSA P-256 with SHA-256 through the ``cryptography`` package: the operator signs its
requests to the restart agents of the training pods, and the agents verify them.

The formats are the wire contract's, unchanged since the first agent, so an operator and
the agents of pods made by an older msop understand each other:

- a private key is written as the 64 hex digits of its scalar (the Secret
  ``msop-agent-key``);
- a public key is the uncompressed SEC 1 point, 65 bytes ``0x04 || X || Y`` (130 hex
  digits in the pod's environment);
- a signature is 64 bytes ``r || s``, each 32 bytes big-endian (not DER).

:func:`verify` takes anything a client sends and never raises: a key that is not a point
of the curve, a signature of the wrong length or out of range all give False.
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
    "private_key_from_hex",
    "private_key_hex",
    "public_key",
    "sign",
    "verify",
]

PUBLIC_KEY_SIZE: Final = 65
"""Bytes of an uncompressed SEC 1 public key."""
SIGNATURE_SIZE: Final = 64
"""Bytes of a signature, ``r || s``."""
_SIZE = 32
_CURVE = ec.SECP256R1()
_ECDSA = ec.ECDSA(hashes.SHA256())

PrivateKey = ec.EllipticCurvePrivateKey


def generate_private_key() -> PrivateKey:
    """A new random key (OpenSSL's generator)."""
    return ec.generate_private_key(_CURVE)


def private_key_hex(key: PrivateKey) -> str:
    """The key's scalar, 64 hex digits: how the Secret keeps it."""
    return f"{key.private_numbers().private_value:064x}"


def private_key_from_hex(text: str) -> PrivateKey:
    """The key whose scalar ``text`` gives (:func:`private_key_hex`); ValueError if it is
    not one."""
    value = int(text.strip(), 16)
    return ec.derive_private_key(value, _CURVE)


def public_key(key: PrivateKey) -> bytes:
    """The key's public point, uncompressed SEC 1 (65 bytes)."""
    return key.public_key().public_bytes(Encoding.X962, PublicFormat.UncompressedPoint)


def _public(point: bytes) -> ec.EllipticCurvePublicKey | None:
    if len(point) != PUBLIC_KEY_SIZE or point[0] != 4:
        return None
    try:
        return ec.EllipticCurvePublicKey.from_encoded_point(_CURVE, point)
    except ValueError:  # not a point of the curve
        return None


def is_public_key(point: bytes) -> bool:
    """Whether ``point`` is an uncompressed SEC 1 point of P-256."""
    return _public(point) is not None


def sign(key: PrivateKey, message: bytes) -> bytes:
    """The signature of ``message`` (SHA-256), ``r || s``."""
    r, s = decode_dss_signature(key.sign(message, _ECDSA))
    return r.to_bytes(_SIZE, "big") + s.to_bytes(_SIZE, "big")


def verify(point: bytes, message: bytes, signature: bytes) -> bool:
    """Whether ``signature`` (``r || s``) is the holder of ``point``'s for ``message``."""
    key = _public(point)
    if key is None or len(signature) != SIGNATURE_SIZE:
        return False
    r = int.from_bytes(signature[:_SIZE], "big")
    s = int.from_bytes(signature[_SIZE:], "big")
    if r == 0 or s == 0:
        return False
    try:
        key.verify(encode_dss_signature(r, s), message, _ECDSA)
    except (InvalidSignature, ValueError):
        return False
    return True
