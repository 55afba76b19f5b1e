"""The workspace's certificate authority, whose certificate sandboxes with secrets trust.

On disk (``directory``, 0700): ``ca.pem`` (the certificate, public: it is copied into sandboxes)
and ``ca.key`` (its P-256 private key, 0600; it never leaves the host and is never in a sandbox).
Both are made at first use. Leaf certificates for intercepted host names are issued on demand,
valid from a day ago for 30 days, all with one P-256 key that lives only in the daemon's memory,
and cached per name as ready server ``ssl.SSLContext``s (ALPN ``http/1.1`` only: the broker
speaks HTTP/1.1 to the sandbox, whatever the sandbox offers).
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertificateAuthority"]

_CACHE = 1024


class CertificateAuthority:
    """Loads (or makes) the CA in ``directory`` and issues leaf contexts. Not thread-safe."""

    def __init__(self, directory: Path, *, workspace: str = "corral") -> None:
        self.directory = directory
        self._workspace = workspace
        self._key: ec.EllipticCurvePrivateKey | None = None
        self._cert: x509.Certificate | None = None
        self._leaf_key = ec.generate_private_key(ec.SECP256R1())
        self._contexts: dict[str, ssl.SSLContext] = {}

    @property
    def cert_path(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def key_path(self) -> Path:
        return self.directory / "ca.key"

    def certificate_pem(self) -> bytes:
        self._load()
        assert self._cert is not None
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def _load(self) -> None:
        if self._cert is not None:
            return
        if self.cert_path.is_file() and self.key_path.is_file():
            key = serialization.load_pem_private_key(self.key_path.read_bytes(), password=None)
            if not isinstance(key, ec.EllipticCurvePrivateKey):
                raise ValueError(f"{self.key_path} is not an EC private key")
            self._key = key
            self._cert = x509.load_pem_x509_certificate(self.cert_path.read_bytes())
            os.chmod(self.key_path, 0o600)
            return
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.directory, 0o700)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "corral"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"corral broker CA ({self._workspace})"),
            ]
        )
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .sign(key, hashes.SHA256())
        )
        _write_private(
            self.key_path,
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ),
        )
        tmp = self.cert_path.with_suffix(".tmp")
        tmp.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        os.replace(tmp, self.cert_path)
        self._key, self._cert = key, cert

    def issue(self, host: str) -> x509.Certificate:
        """A leaf certificate for ``host`` signed by the CA (the leaf key is the daemon's)."""
        self._load()
        assert self._key is not None and self._cert is not None
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host[:64])]))
            .issuer_name(self._cert.subject)
            .public_key(self._leaf_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(host)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )

    def server_context(self, host: str) -> ssl.SSLContext:
        """A server context presenting a leaf for ``host`` (cached)."""
        context = self._contexts.get(host)
        if context is not None:
            return context
        leaf = self.issue(host)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["http/1.1"])
        chain = leaf.public_bytes(serialization.Encoding.PEM) + self.certificate_pem()
        key = self._leaf_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        # ssl loads a chain only from files: a private temporary file, gone right after.
        with tempfile.TemporaryDirectory(dir=self.directory) as tmp:
            path = Path(tmp) / "leaf.pem"
            _write_private(path, key + chain)
            context.load_cert_chain(path)
        if len(self._contexts) >= _CACHE:
            self._contexts.clear()
        self._contexts[host] = context
        return context


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.chmod(path, 0o600)
