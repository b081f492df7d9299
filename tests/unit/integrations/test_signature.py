"""The agents' signatures (msop.integrations.signature, ECDSA P-256/SHA-256 from
``cryptography``) in the wire format of the agent protocol: a known-answer vector made by
OpenSSL (keys and signatures keep the format of the hand-written curve they replace),
both-ways interoperability with the ``openssl`` CLI, and verification refusing every kind
of malformed input without raising."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from msop.integrations import signature as ecdsa

# Made once with OpenSSL 3.0 (`openssl ecparam -name prime256v1 -genkey`, then
# `openssl dgst -sha256 -sign`), the private scalar and public point read from the key's DER
# and the signature's (r, s) from its DER. It is the form of a real agent request.
KAT_D = 0xAA38582C8426159E01C7FB1FC2CF4CBC42417AB66433411A8896A8AB4EC48916
KAT_PUBLIC = bytes.fromhex(
    "04cc3d906ff15c74f28a38054e1c220669d36f97cdaf47189879c51128f5899b8b"
    "7b45f7d6a161a4d91a047413a3f6887c95a54616368652aa7c473c3d4b6943fb"
)
KAT_MESSAGE = b"msop-agent/1 restart 0f4c7b1e-8d2a-4c55-9d1e-3b6a2f0c9e11 3"
KAT_SIGNATURE = bytes.fromhex(
    "597c8f424ca674ae0d07e0259a09dff62aaa7a0aad82932f6a4ea79d17e3c1a3"
    "84265a0a26aa64193deae300c67e65aaa3ea696e6932d1b1a1af7d8591a2906f"
)
N = ecdsa._N


def key_of(d: int) -> ecdsa.PrivateKey:
    return ecdsa.load_private_key(d)


def flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def signature_of(r: int, s: int) -> bytes:
    return r.to_bytes(32, "big") + s.to_bytes(32, "big")


def test_the_known_answer_from_openssl() -> None:
    assert ecdsa.public_key(key_of(KAT_D)) == KAT_PUBLIC
    assert ecdsa.is_public_key(KAT_PUBLIC)
    assert ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE, KAT_SIGNATURE)
    assert not ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE[:-1] + b"4", KAT_SIGNATURE)


def test_a_signature_verifies_and_each_is_new() -> None:
    d = ecdsa.private_scalar(ecdsa.generate_private_key())
    public = ecdsa.public_key(key_of(d))
    assert len(public) == 65 and public[0] == 4 and ecdsa.is_public_key(public)
    first, second = ecdsa.sign(key_of(d), b"hello"), ecdsa.sign(key_of(d), b"hello")
    assert len(first) == 64 and first != second  # a fresh nonce each time
    assert ecdsa.verify(public, b"hello", first) and ecdsa.verify(public, b"hello", second)
    assert ecdsa.verify(public, b"", ecdsa.sign(key_of(d), b""))
    assert ecdsa.verify(bytearray(public), bytearray(b"hello"), bytearray(first))


def test_anything_tampered_fails() -> None:
    d = ecdsa.private_scalar(ecdsa.generate_private_key())
    public, signature = ecdsa.public_key(key_of(d)), ecdsa.sign(key_of(d), b"msg")
    other = ecdsa.public_key(ecdsa.generate_private_key())
    assert not ecdsa.verify(public, b"msh", signature)
    assert not ecdsa.verify(public, b"msg ", signature)
    assert not ecdsa.verify(other, b"msg", signature)
    for index in (0, 31, 32, 63):  # r's and s's first and last bytes
        assert not ecdsa.verify(public, b"msg", flip(signature, index))
    r, s = signature[:32], signature[32:]
    assert not ecdsa.verify(public, b"msg", s + r)


@pytest.mark.parametrize(
    ("r", "s"),
    [(0, 1), (1, 0), (0, 0), (N, 1), (1, N), (N + 1, 1), (2**256 - 1, 1), (1, 2**256 - 1)],
)
def test_r_and_s_outside_1_to_n_minus_1_fail(r: int, s: int) -> None:
    assert not ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE, signature_of(r, s))


def test_r_or_s_plus_n_is_not_the_same_signature() -> None:
    # Reduced mod n they would verify; unreduced, they are out of range.
    r = int.from_bytes(KAT_SIGNATURE[:32], "big")
    s = int.from_bytes(KAT_SIGNATURE[32:], "big")
    if r + N < 2**256:
        assert not ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE, signature_of(r + N, s))
    if s + N < 2**256:
        assert not ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE, signature_of(r, s + N))


def _bad_keys() -> list[Any]:
    x, y = KAT_PUBLIC[1:33], KAT_PUBLIC[33:]
    p = (2**256 - 2**224 + 2**192 + 2**96 - 1).to_bytes(32, "big")
    return [
        b"",
        b"\x00",  # the point at infinity's encoding
        KAT_PUBLIC[:-1],
        KAT_PUBLIC + b"\x00",
        KAT_PUBLIC[1:],  # no prefix
        b"\x02" + x,  # compressed: not accepted
        b"\x03" + x + y,
        b"\x04" + x + flip(y, 31),  # off the curve
        b"\x04" + p + y,  # x >= p
        b"\x04" + bytes(64),  # (0, 0) is not on the curve
        KAT_PUBLIC.hex(),  # a str
        None,
        65,
    ]


@pytest.mark.parametrize("key", _bad_keys())
def test_a_key_that_is_not_a_point_fails_without_raising(key: Any) -> None:
    assert not ecdsa.is_public_key(key)
    assert not ecdsa.verify(key, KAT_MESSAGE, KAT_SIGNATURE)


@pytest.mark.parametrize(
    "signature",
    [b"", KAT_SIGNATURE[:-1], KAT_SIGNATURE + b"\x00", KAT_SIGNATURE.hex(), None, bytes(64)],
)
def test_a_malformed_signature_fails_without_raising(signature: Any) -> None:
    assert not ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE, signature)


def test_a_message_that_is_not_bytes_fails_without_raising() -> None:
    assert not ecdsa.verify(KAT_PUBLIC, KAT_MESSAGE.decode(), KAT_SIGNATURE)
    assert not ecdsa.verify(KAT_PUBLIC, None, KAT_SIGNATURE)


@pytest.mark.parametrize("d", [0, -1, N, N + 1, True])
def test_a_private_key_outside_1_to_n_minus_1_is_refused(d: int) -> None:
    with pytest.raises(ValueError):
        ecdsa.public_key(key_of(d))
    with pytest.raises(ValueError):
        ecdsa.sign(key_of(d), b"x")


# --- against the openssl CLI ---------------------------------------------------------------

#: The openssl CLI: always there, since ca-certificates (a README prerequisite) depends on
#: it. Missing, the cross-checks below fail rather than skip.
OPENSSL = shutil.which("openssl")


def openssl(*args: str, input: bytes | None = None) -> bytes:
    assert OPENSSL is not None, "the openssl CLI is missing (the ca-certificates package brings it)"
    done = subprocess.run([OPENSSL, *args], input=input, capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


def der_integers(der: bytes) -> list[int]:
    """The INTEGERs of a DER SEQUENCE of INTEGERs (an ECDSA-Sig-Value), short lengths only."""
    assert der[0] == 0x30 and der[1] == len(der) - 2
    values, i = [], 2
    while i < len(der):
        assert der[i] == 0x02
        length = der[i + 1]
        values.append(int.from_bytes(der[i + 2 : i + 2 + length], "big"))
        i += 2 + length
    return values


def der_signature(signature: bytes) -> bytes:
    parts = b""
    for half in (signature[:32], signature[32:]):
        value = int.from_bytes(half, "big")
        raw = value.to_bytes(value.bit_length() // 8 + 1, "big")
        parts += bytes([0x02, len(raw)]) + raw
    return bytes([0x30, len(parts)]) + parts


@pytest.fixture(scope="module")
def openssl_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, bytes]:
    """An OpenSSL-made key: its PEM file, its private scalar and its public point."""
    directory = tmp_path_factory.mktemp("openssl")
    key = directory / "key.pem"
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(key))
    der = openssl("ec", "-in", str(key), "-outform", "DER")
    # ECPrivateKey: SEQUENCE { INTEGER 1, OCTET STRING d (32), [0] curve, [1] point }
    assert der[2:7] == b"\x02\x01\x01\x04\x20"
    return key, int.from_bytes(der[7:39], "big"), der[-65:]


def test_openssl_and_we_derive_the_same_public_key(openssl_key: tuple[Path, int, bytes]) -> None:
    _, d, public = openssl_key
    assert public[0] == 4
    assert ecdsa.public_key(key_of(d)) == public


def test_we_verify_what_openssl_signs(openssl_key: tuple[Path, int, bytes], tmp_path: Path) -> None:
    key, _, public = openssl_key
    message = b"msop-agent/1 release 5e1a 17"
    r, s = der_integers(openssl("dgst", "-sha256", "-sign", str(key), input=message))
    assert ecdsa.verify(public, message, signature_of(r, s))
    assert not ecdsa.verify(public, message + b"0", signature_of(r, s))


def test_openssl_verifies_what_we_sign(
    openssl_key: tuple[Path, int, bytes], tmp_path: Path
) -> None:
    key, d, _ = openssl_key
    message = b"msop-agent/1 restart 5e1a 18"
    signature = tmp_path / "sig.der"
    signature.write_bytes(der_signature(ecdsa.sign(key_of(d), message)))
    public = tmp_path / "public.pem"
    openssl("ec", "-in", str(key), "-pubout", "-out", str(public))
    out = openssl(
        "dgst", "-sha256", "-verify", str(public), "-signature", str(signature), input=message
    )
    assert out.strip() == b"Verified OK"
