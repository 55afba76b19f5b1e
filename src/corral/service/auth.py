"""API keys: the admin key made at first start, and verification of presented keys.

Invariant: a key's plaintext exists only in the caller's hands and in ``admin.key`` (mode 0600);
the store holds SHA-256 hashes. New keys are ``e2b_`` and 40 hex digits (160 random bits), the
shape the official E2B SDK expects of ``E2B_API_KEY``, so a corral key works there unchanged;
keys made before (``crl_...``) keep working, as verification only hashes what is presented.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

from corral.service.errors import Unauthorized
from corral.storage import ApiKeyRecord, Database

KEY_PREFIX = "e2b_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ApiKeys:
    """Issues and checks API keys against the store."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create(self, name: str, role: str = "admin") -> str:
        key = KEY_PREFIX + secrets.token_hex(20)
        self._db.api_keys.add(
            ApiKeyRecord(
                id=secrets.token_hex(8),
                name=name,
                key_hash=hash_key(key),
                role=role,
                created_at=time.time(),
            )
        )
        return key

    def ensure_admin_key(self, path: Path) -> None:
        """Create the admin key at first start and write it to ``path`` with mode 0600.

        If the file exists but its key is unknown to the store (a new database), it is replaced.
        """
        if path.exists():
            existing = path.read_text().strip()
            if existing and self._db.api_keys.find_by_hash(hash_key(existing)):
                os.chmod(path, 0o600)
                return
        key = self.create("admin")
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def verify(self, presented: str | None) -> ApiKeyRecord:
        if not presented:
            raise Unauthorized("missing API key: send 'Authorization: Bearer KEY'")
        digest = hash_key(presented)
        record = self._db.api_keys.find_by_hash(digest)
        if record is None or not hmac.compare_digest(record.key_hash, digest):
            raise Unauthorized("invalid API key")
        return record
