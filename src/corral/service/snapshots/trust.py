"""Signing exports and deciding whose exports are trusted.

Every workspace has one ed25519 signing key, made at first start and kept in
``<data>/signing.key`` (PKCS#8 PEM, mode 0600; it never leaves the host). Exports are signed with
it. An import restores a memory image (input to runsc's state decoder, which is not built to
resist hostile input) only when the export's signature verifies against a trusted key: this
workspace's own, or one an admin added (``corral trust add NAME KEY``), stored in the
``trusted_keys`` table.

Public keys travel as ``ed25519:<base64 of the raw 32 bytes>``; ``parse_public_key`` also takes
the bare base64 and a PEM ``PUBLIC KEY`` block.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from corral.service.errors import CorralError, InvalidRequest, NotFound, StateConflict
from corral.storage import Database, TrustedKeyRecord

__all__ = [
    "KEY_PREFIX",
    "SELF_NAME",
    "Signer",
    "TrustService",
    "UntrustedExport",
    "format_public_key",
    "parse_public_key",
]

KEY_PREFIX = "ed25519:"
SELF_NAME = "this-workspace"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
MAX_KEY_TEXT = 4096
# Signatures are over this prefix and the manifest's bytes: a signature made for anything else
# with the same key never passes for an export's.
SIGNING_CONTEXT = b"corral-export-signature-v1\0"


class UntrustedExport(CorralError):
    """An export whose signature is missing, wrong, or made by a key this workspace does not
    trust: its memory image is not restored."""

    code = "untrusted"


@dataclass(frozen=True)
class Signer:
    """Who signed a verified export: a trusted key's name (``this-workspace`` for our own)."""

    name: str
    public_key: str


def format_public_key(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KEY_PREFIX + base64.b64encode(raw).decode()


def parse_public_key(text: str) -> str:
    """The canonical ``ed25519:<base64>`` form of a public key given as that, as bare base64 of
    the 32 raw bytes, or as a PEM ``PUBLIC KEY`` block; InvalidRequest otherwise."""
    text = text.strip()
    if len(text) > MAX_KEY_TEXT:
        raise InvalidRequest("public key is too long to be an ed25519 key")
    if text.startswith("-----BEGIN"):
        try:
            loaded = serialization.load_pem_public_key(text.encode())
        except ValueError as exc:
            raise InvalidRequest(f"public key is not a valid PEM key: {exc}") from exc
        if not isinstance(loaded, Ed25519PublicKey):
            raise InvalidRequest("public key is not an ed25519 key")
        return format_public_key(loaded)
    encoded = text.removeprefix(KEY_PREFIX)
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(
            f"public key {text[:80]!r} is not valid: give 'ed25519:<base64>' as printed by "
            "`corral trust show` on the exporting host, or a PEM public key file"
        ) from exc
    if len(raw) != 32:
        raise InvalidRequest(f"public key has {len(raw)} bytes; an ed25519 key has 32")
    return format_public_key(Ed25519PublicKey.from_public_bytes(raw))


def _load_or_create_key(path: Path) -> Ed25519PrivateKey:
    """This workspace's signing key, made (mode 0600, fsynced) if there is none yet."""
    if path.exists():
        os.chmod(path, 0o600)
        try:
            loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
        except ValueError as exc:
            raise RuntimeError(
                f"the signing key {path} is damaged ({exc}); restore it from a backup, or move "
                "it away to make a new one (exports signed with the old key then need "
                "`corral trust add` on the hosts that import them)"
            ) from exc
        if not isinstance(loaded, Ed25519PrivateKey):
            raise RuntimeError(f"the signing key {path} is not an ed25519 key")
        return loaded
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    return key


class TrustService:
    """The workspace's signing key and its list of trusted signers. ``start`` loads (or makes)
    the key; nothing is read before."""

    def __init__(self, db: Database, key_path: Path) -> None:
        self.db = db
        self.key_path = key_path
        self._key: Ed25519PrivateKey | None = None

    def start(self) -> None:
        self._key = _load_or_create_key(self.key_path)

    @property
    def _signing_key(self) -> Ed25519PrivateKey:
        if self._key is None:
            self.start()
        assert self._key is not None
        return self._key

    @property
    def public_key(self) -> str:
        """This workspace's public key, for `corral trust add` on another host."""
        return format_public_key(self._signing_key.public_key())

    def sign(self, manifest: bytes) -> str:
        return base64.b64encode(self._signing_key.sign(SIGNING_CONTEXT + manifest)).decode()

    # ---------------------------------------------------------------------- trusted keys
    def list(self) -> list[TrustedKeyRecord]:
        return self.db.trusted_keys.list()

    def add(self, name: str, public_key: str) -> TrustedKeyRecord:
        if not NAME_RE.match(name) or name == SELF_NAME:
            raise InvalidRequest(
                f"trusted key name {name!r} is not valid: use 1-64 letters, digits, '.', '_' or "
                f"'-', starting with a letter or digit (and not {SELF_NAME!r})"
            )
        key = parse_public_key(public_key)
        if key == self.public_key:
            raise InvalidRequest("that is this workspace's own key; it is always trusted")
        if self.db.trusted_keys.get(name) is not None:
            raise StateConflict(f"a trusted key named {name!r} exists; remove it first")
        known = self.db.trusted_keys.find_by_key(key)
        if known is not None:
            raise StateConflict(f"that key is already trusted as {known.name!r}")
        record = TrustedKeyRecord(name=name, public_key=key, created_at=time.time())
        self.db.trusted_keys.add(record)
        return record

    def remove(self, name: str) -> None:
        if not self.db.trusted_keys.delete(name):
            raise NotFound(f"no trusted key named {name!r}")

    # ------------------------------------------------------------------------ verifying
    def verify(self, manifest: bytes, public_key: str | None, signature: str | None) -> Signer:
        """The trusted signer of ``manifest``, or UntrustedExport saying why not and what to do."""
        advice = (
            "If you trust its sender, ask them for `corral trust show` and run `corral trust add "
            "NAME KEY`; or import only its files with `corral import FILE --fs-only`"
        )
        if not public_key or not signature:
            raise UntrustedExport(
                f"the export is not signed, so its memory is not restored. {advice}"
            )
        try:
            key = parse_public_key(public_key)
            raw = base64.b64decode(key.removeprefix(KEY_PREFIX))
            sig = base64.b64decode(signature, validate=True)
            Ed25519PublicKey.from_public_bytes(raw).verify(sig, SIGNING_CONTEXT + manifest)
        except (InvalidRequest, InvalidSignature, binascii.Error, ValueError) as exc:
            raise UntrustedExport(
                "the export's signature does not match its contents: it was altered after it "
                "was signed (or the signature is damaged), so it is refused. Export it again "
                "from its source"
            ) from exc
        if key == self.public_key:
            return Signer(SELF_NAME, key)
        known = self.db.trusted_keys.find_by_key(key)
        if known is None:
            raise UntrustedExport(
                f"the export is signed by {key}, which this workspace does not trust, so its "
                f"memory is not restored. {advice}"
            )
        return Signer(known.name, key)
