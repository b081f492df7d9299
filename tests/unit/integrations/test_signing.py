"""The agents' signatures (msop.integrations.signing, on the cryptography package): the
wire formats stay those of every earlier msop, and verify never raises on what a client
sends."""

from __future__ import annotations

import pytest

from msop.integrations import signing
from msop.integrations.agent import signed_message

#: Made by msop's earlier, hand-written P-256 (the agents of pods an older msop created
#: verify with it): a key's scalar, its public point and a signature of MESSAGE.
OLD_SCALAR = "1f2e3d4c5b6a79880123456789abcdeffedcba98765432100123456789abcdef"
OLD_PUBLIC = bytes.fromhex(
    "04466ee0fcdb262f1fef66c93409dee7dd1b2e1dda6fd0c262d6673e9dc08c6da7dbeb8d227e80c4f77e163e"
    "2178d7fe2a89bcecc7856edf3d8a4e334e21a1c4b5"
)
MESSAGE = b"msop-agent/v1\nrestart\n1b0a2c3d-0000-4000-8000-00000000abcd\n3"
OLD_SIGNATURE = bytes.fromhex(
    "16697b1f37c3f504e8e7e133a0f02667b3616b905066a7fa4acf55659dec4ec02dfc3f432412dbf707843326"
    "c14d4f4eb09a448e08f46efd4b024da7adf4d7b5"
)


def test_a_key_kept_by_an_earlier_msop_is_the_same_key() -> None:
    key = signing.private_key_from_hex(OLD_SCALAR)
    assert signing.private_key_hex(key) == OLD_SCALAR
    assert signing.public_key(key) == OLD_PUBLIC


def test_signatures_of_an_earlier_msop_verify_and_ours_have_its_format() -> None:
    assert signing.verify(OLD_PUBLIC, MESSAGE, OLD_SIGNATURE)
    key = signing.private_key_from_hex(OLD_SCALAR)
    ours = signing.sign(key, MESSAGE)
    assert len(ours) == signing.SIGNATURE_SIZE  # r || s, not DER
    assert ours != OLD_SIGNATURE  # a fresh nonce each time
    assert signing.verify(OLD_PUBLIC, MESSAGE, ours)


def test_a_signature_is_for_its_key_and_message_only() -> None:
    key, other = signing.generate_private_key(), signing.generate_private_key()
    message = signed_message("release", "0f4c7b1e-8d2a-4c55-9d1e-3b6a2f0c9e11", 4)
    signature = signing.sign(key, message)
    public = signing.public_key(key)
    assert len(public) == signing.PUBLIC_KEY_SIZE and public[0] == 4
    assert signing.verify(public, message, signature)
    assert not signing.verify(signing.public_key(other), message, signature)
    assert not signing.verify(public, message + b"1", signature)
    flipped = bytes([signature[0] ^ 1]) + signature[1:]
    assert not signing.verify(public, message, flipped)


@pytest.mark.parametrize(
    ("public", "signature"),
    [
        (b"", OLD_SIGNATURE),
        (OLD_PUBLIC[:-1], OLD_SIGNATURE),  # too short
        (b"\x02" + OLD_PUBLIC[1:33] + b"\x00" * 32, OLD_SIGNATURE),  # not uncompressed
        (b"\x04" + b"\x01" * 64, OLD_SIGNATURE),  # not a point of the curve
        (OLD_PUBLIC, b""),
        (OLD_PUBLIC, OLD_SIGNATURE[:-1]),
        (OLD_PUBLIC, b"\x00" * 64),  # r = s = 0
        (OLD_PUBLIC, b"\xff" * 64),  # r, s beyond the order
    ],
)
def test_verify_refuses_anything_malformed_without_raising(public: bytes, signature: bytes) -> None:
    assert not signing.verify(public, MESSAGE, signature)


def test_is_public_key() -> None:
    assert signing.is_public_key(OLD_PUBLIC)
    assert not signing.is_public_key(b"\x04" + b"\x01" * 64)
    with pytest.raises(ValueError):
        signing.private_key_from_hex("not hex")
