"""The local stack's certificates: one CA, and a key and certificate per principal (each broker-side and client-side
identity), laid out as a Kubernetes TLS Secret is mounted (`ca.crt`, `tls.crt`, `tls.key` in a folder), so a
process is handed its identity the same way locally and in a pod (`pipeline.transport.security`).

Keys are PKCS#8 PEM without a passphrase (Kafka's PEM key stores refuse a store password) and 0600; the folders
are 0700. Nothing here logs a key.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from aitax.pipeline.transport.security import CA_FILE, CERTIFICATE_FILE, KEY_FILE

CA_NAME = "aitax local CA"
VALID_DAYS = 365
RENEW_BEFORE_DAYS = 30  # `stack up` issues again when a certificate has less left


def write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    path.chmod(0o600)


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "aitax"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _expires_soon(certificate_file: Path) -> bool:
    certificate = x509.load_pem_x509_certificate(certificate_file.read_bytes())
    left = certificate.not_valid_after_utc - datetime.datetime.now(datetime.UTC)
    return left < datetime.timedelta(days=RENEW_BEFORE_DAYS)


def _ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    certificate_file, key_file = folder / "ca.crt", folder / "ca.key"
    if certificate_file.exists() and key_file.exists() and not _expires_soon(certificate_file):
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(certificate_file.read_bytes()), key
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(CA_NAME)).issuer_name(_name(CA_NAME))
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False, data_encipherment=False,
                                     key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    write_private(key_file, _pem_key(key))
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return certificate, key


def _issue(ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, principal: str, hosts: tuple[str, ...],
           folder: Path) -> None:
    key = _new_key()
    now = datetime.datetime.now(datetime.UTC)
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(principal)).issuer_name(ca.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if names:  # a server's: clients check its name (both Kafka clients verify hostnames)
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_private(folder / KEY_FILE, _pem_key(key))
    (folder / CERTIFICATE_FILE).write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / CA_FILE).write_bytes(ca.public_bytes(serialization.Encoding.PEM))


def ensure_identities(folder: Path, principals: dict[str, tuple[str, ...]]) -> None:
    """A CA under `folder` and an identity per principal in `folder/PRINCIPAL` (its server names, or () for a
    client only), made once and kept until they near expiry or the CA changes; `folder` is 0700."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder.chmod(0o700)
    ca, ca_key = _ca(folder)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    for principal, hosts in principals.items():
        own = folder / principal
        current = (all((own / name).exists() for name in (CA_FILE, CERTIFICATE_FILE, KEY_FILE))
                   and (own / CA_FILE).read_bytes() == ca_pem and not _expires_soon(own / CERTIFICATE_FILE))
        if not current:
            _issue(ca, ca_key, principal, hosts, own)
