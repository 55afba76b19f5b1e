"""Encryption at rest of secret values: AES-256-GCM with a key kept outside the database.

The key is 32 random bytes in ``DATA/secrets.key`` (mode 0600, made at first use); the database
holds only ``base64(nonce || ciphertext || tag)``. The secret's name is the associated data, so a
sealed value copied under another name does not open. Losing the key file loses the values (the
names and bindings stay readable); a copy of the database alone reveals nothing.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["KEY_FILE", "SealError", "Sealer"]

KEY_FILE = "secrets.key"
_NONCE = 12


class SealError(Exception):
    """A sealed value that does not open with this key (wrong key, name or tampered text)."""


class Sealer:
    """Seals and opens values with the key at ``path`` (created 0600 when missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._aead: AESGCM | None = None

    def _key(self) -> AESGCM:
        if self._aead is None:
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                key = self.path.read_bytes()
            else:
                key = os.urandom(32)
                with os.fdopen(fd, "wb") as out:
                    out.write(key)
                    out.flush()
                    os.fsync(out.fileno())
            if len(key) != 32:
                raise SealError(f"{self.path} does not hold a 32-byte key")
            os.chmod(self.path, 0o600)
            self._aead = AESGCM(key)
        return self._aead

    def seal(self, name: str, value: bytes) -> str:
        nonce = os.urandom(_NONCE)
        sealed = nonce + self._key().encrypt(nonce, value, name.encode())
        return base64.b64encode(sealed).decode("ascii")

    def open(self, name: str, sealed: str) -> bytes:
        try:
            raw = base64.b64decode(sealed, validate=True)
            return self._key().decrypt(raw[:_NONCE], raw[_NONCE:], name.encode())
        except (ValueError, InvalidTag) as exc:
            raise SealError(
                f"secret {name!r} does not open with {self.path} (the key was replaced, or the "
                "store was edited); set the secret again"
            ) from exc
