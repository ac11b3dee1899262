"""The development cluster's certificates and keys, made fresh for each cluster.

One CA signs everything: the API server's and etcd's serving certificates and the client
certificates of the admin, the controller-manager, the scheduler, the node simulator and the
API server's own client to etcd. The service-account key pair signs ServiceAccount tokens.
Keys are ECDSA P-256: as strong as RSA-3072 and quick to make.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its key as PEM files."""

    cert: Path
    key: Path

    def cert_pem(self) -> bytes:
        return self.cert.read_bytes()

    def key_pem(self) -> bytes:
        return self.key.read_bytes()


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)
    path.chmod(0o600)


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )


class CertificateAuthority:
    """A self-signed CA in ``directory`` (ca.crt, ca.key) that issues certificates beside it."""

    def __init__(self, directory: Path, *, name: str = "npu-lab-devcluster-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = _name(name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                    key_encipherment=False, data_encipherment=False, key_agreement=False,
                    encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        self.files = CertFiles(directory / "ca.crt", directory / "ca.key")
        self.files.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.files.key, self._key)

    def issue(
        self,
        filename: str,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
        client: bool = False,
    ) -> CertFiles:
        """A certificate for ``common_name`` (the user; ``organizations`` are its groups).

        ``server_names`` (DNS names or IP addresses) make it a serving certificate; ``client``
        a client one; both may be set.
        """
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server_names else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_encipherment=False, content_commitment=False, data_encipherment=False,
                    key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False)
        )
        if server_names:
            builder = builder.add_extension(x509.SubjectAlternativeName([_general_name(n) for n in server_names]), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        files = CertFiles(self.directory / f"{filename}.crt", self.directory / f"{filename}.key")
        files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(files.key, key)
        return files


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def service_account_keys(directory: Path) -> CertFiles:
    """The key pair that signs ServiceAccount tokens: ``sa.key`` (private) and ``sa.pub`` (public)."""
    key = ec.generate_private_key(ec.SECP256R1())
    files = CertFiles(directory / "sa.pub", directory / "sa.key")
    _write_key(files.key, key)
    files.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return files
