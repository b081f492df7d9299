"""A self-signed TLS serving certificate, made with ``cryptography``.

:func:`generate` returns a fresh P-256 (prime256v1) key and an X.509 v3 certificate for it,
signed with ECDSA-SHA256 by that same key, both PEM-encoded. A server uses them when no
certificate was given to it, as controller-runtime's metrics server does; clients then
skip verification (``insecureSkipVerify``) or trust nothing in particular, since the
certificate is new at every start. The certificate is a server's leaf: its subject
alternative names are the hosts, key usage digitalSignature, extended key usage
serverAuth, not a CA. The key is written as a SEC 1 ``EC PRIVATE KEY``.

Raises nothing but ValueError for impossible arguments (no host, a bad validity).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["DEFAULT_VALIDITY", "generate"]

#: How long a generated certificate is valid; clients that skip verification ignore it.
DEFAULT_VALIDITY = timedelta(days=365)


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
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + validity)
        .add_extension(x509.SubjectAlternativeName([_alt_name(h) for h in hosts]), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    return certificate.public_bytes(serialization.Encoding.PEM), key_pem


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
