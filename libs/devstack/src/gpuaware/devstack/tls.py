"""A throwaway certificate authority for the embedded stack's NATS (`gpuaware up --tls`) and tests.

Why a CA of our own and not a self-signed server certificate: clients verify the server against a
CA file (`NATS_TLS_CA`), exactly as they will against a cluster's CA in production, so the code path
that checks certificates is the one that runs here too. The CA's key never leaves the data folder
(0600) and is used once, to sign the server's certificate for 127.0.0.1 and localhost. That certificate
serves clients and, in a NATS cluster, the routes: a node dialling another presents it as a client
certificate (nats-server verifies routes both ways), hence both key usages.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TlsFiles", "make_server_certificates"]

VALID_DAYS = 365


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path
    """the CA certificate clients trust (`NATS_TLS_CA`)"""
    cert: Path
    key: Path


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_server_certificates(folder: Path, *, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A new CA and a server certificate for ``hosts`` in ``folder`` (kept when already there)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(ca=folder / "ca.pem", cert=folder / "server.pem", key=folder / "server-key.pem")
    if files.ca.exists() and files.cert.exists() and files.key.exists():
        return files
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "gpuaware embedded CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
          .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                       crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write(files.ca, ca.public_bytes(serialization.Encoding.PEM), private=False)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM), private=False)
    _write(files.key, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                        serialization.NoEncryption()), private=True)
    return files
