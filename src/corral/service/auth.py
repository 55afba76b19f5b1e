"""API keys: issuing, listing, revoking, and verifying a presented key into a ``Principal``.

Invariants:
- a key's plaintext exists only in the caller's hands and in ``admin.key`` (mode 0600); the store
  holds SHA-256 hashes, compared in constant time;
- new keys are ``e2b_`` and 40 hex digits (160 random bits), the shape the official E2B SDK
  expects of ``E2B_API_KEY``, so a corral key works there unchanged; keys made before (``crl_...``)
  keep working, as verification only hashes what is presented;
- a revoked or expired key is refused (401) from the moment of its revocation or expiry: the
  cache of verified keys is emptied by every revocation and checks expiry on every hit;
- names are unique among keys that are not revoked; a revoked key's row stays (the audit log and
  the owners of sandboxes name it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import time
from pathlib import Path

from corral.service.access import ROLES, SCOPES, Forbidden, Principal
from corral.service.errors import CorralError, InvalidRequest, NotFound, Unauthorized
from corral.service.quotas import QUOTAS
from corral.storage import ApiKeyRecord, Database

KEY_PREFIX = "e2b_"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
ADMIN_KEY_NAME = "admin"
CACHE_SECONDS = 2.0
TOUCH_EVERY = 60.0  # last use is written at most this often per key (a write costs an fsync)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class Exists(CorralError):
    code = "exists"


def principal_of(record: ApiKeyRecord) -> Principal:
    return Principal(
        key_id=record.id,
        name=record.name,
        role=record.role,
        scopes=frozenset(record.scopes) if record.scopes is not None else None,
        quotas=dict(record.quotas),
    )


class ApiKeys:
    """Issues, lists, revokes and checks API keys against the store.

    Verified keys are cached by hash for ``CACHE_SECONDS`` (an exec round trip is a few
    milliseconds; a store query on each would show); event-loop only, no locking.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._verified: dict[str, tuple[float, ApiKeyRecord]] = {}
        self._touched: dict[str, float] = {}

    # ---------------------------------------------------------------------------- issuing
    def create(self, name: str, role: str = "admin") -> str:
        """A new key with no limits (the admin key; tests)."""
        key, _ = self.issue(name, role)
        return key

    def issue(
        self,
        name: str,
        role: str,
        *,
        scopes: list[str] | None = None,
        expires_at: float | None = None,
        quotas: dict[str, float] | None = None,
        rate_limit: float | None = None,
        created_by: str | None = None,
    ) -> tuple[str, ApiKeyRecord]:
        """A new key (shown to the caller once) and its record; InvalidRequest names what is
        wrong with the request, ``exists`` if an active key has the name."""
        problems = []
        if not NAME_RE.match(name):
            problems.append(
                f"name {name!r} must be 1-64 letters, digits, '.', '_' or '-', "
                "starting with a letter or digit"
            )
        if role not in ROLES:
            problems.append(f"role {role!r} is not one of {', '.join(ROLES)}")
        unknown = sorted(set(scopes or ()) - set(SCOPES))
        if unknown:
            problems.append(f"unknown scopes {', '.join(unknown)} (known: {', '.join(SCOPES)})")
        if scopes is not None and not scopes:
            problems.append("scopes, when given, must name at least one scope")
        for quota, limit in (quotas or {}).items():
            if quota not in QUOTAS:
                problems.append(f"unknown quota {quota!r} (known: {', '.join(QUOTAS)})")
            elif not 0 <= limit <= 1e9:
                problems.append(f"quota {quota} must be between 0 and 1e9, got {limit}")
        if expires_at is not None and expires_at <= time.time():
            problems.append("the expiry is in the past")
        if rate_limit is not None and not 0 < rate_limit <= 1e6:
            problems.append(f"rate_limit must be above 0 requests per second, got {rate_limit}")
        if problems:
            raise InvalidRequest("invalid API key request: " + "; ".join(problems))
        if self._db.api_keys.find_active(name) is not None:
            raise Exists(f"an API key named {name!r} exists; revoke it first or pick another name")
        key = KEY_PREFIX + secrets.token_hex(20)
        record = ApiKeyRecord(
            id="k-" + secrets.token_hex(8),
            name=name,
            key_hash=hash_key(key),
            role=role,
            created_at=time.time(),
            scopes=tuple(dict.fromkeys(scopes)) if scopes is not None else None,
            expires_at=expires_at,
            quotas=dict(quotas or {}),
            rate_limit=rate_limit,
            created_by=created_by,
        )
        self._db.api_keys.add(record)
        return key, record

    def ensure_admin_key(self, path: Path) -> None:
        """Create the admin key at first start and write it to ``path`` with mode 0600.

        If the file exists but its key is unknown to the store (a new database) or revoked, a
        new one replaces it.
        """
        if path.exists():
            existing = path.read_text().strip()
            found = self._db.api_keys.find_by_hash(hash_key(existing)) if existing else None
            if found is not None and found.revoked_at is None:
                os.chmod(path, 0o600)
                return
        name = ADMIN_KEY_NAME
        if self._db.api_keys.find_active(name) is not None:
            name = f"{ADMIN_KEY_NAME}-{secrets.token_hex(3)}"
        key = self.create(name)
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    # -------------------------------------------------------------------------- managing
    def list(self, *, include_revoked: bool = False) -> list[ApiKeyRecord]:
        return self._db.api_keys.list(include_revoked=include_revoked)

    def get(self, name: str) -> ApiKeyRecord:
        record = self._db.api_keys.find_active(name)
        if record is None:
            raise NotFound(f"API key {name!r} not found (see `corral key ls`)")
        return record

    def names(self) -> dict[str, str]:
        """Every key's name by its id, revoked ones included (what owns what, for listings)."""
        return {r.id: r.name for r in self._db.api_keys.list(include_revoked=True)}

    def name_of(self, key_id: str | None) -> str | None:
        if key_id is None:
            return None
        record = self._db.api_keys.get(key_id)
        return record.name if record else None

    def revoke(self, name: str, *, by: Principal | None = None) -> ApiKeyRecord:
        """Revoke the active key ``name``: it is refused from now on (its cache entry too)."""
        record = self.get(name)
        if by is not None and by.key_id == record.id:
            admins = [k for k in self.list() if k.role == "admin" and k.id != record.id]
            if not admins:
                raise Forbidden(
                    f"API key {name!r} is the last admin key: create another admin key before "
                    "revoking it"
                )
        self._db.api_keys.revoke(record.id)
        self._verified.clear()
        return record

    # ------------------------------------------------------------------------- verifying
    def verify(self, presented: str | None) -> ApiKeyRecord:
        """The record of a valid key, or Unauthorized (missing, unknown, revoked, expired)."""
        if not presented:
            raise Unauthorized("missing API key: send 'Authorization: Bearer KEY'")
        if len(presented) > 512:
            raise Unauthorized("invalid API key")
        digest = hash_key(presented)
        now = time.time()
        cached = self._verified.get(digest)
        if cached is not None and cached[0] >= time.monotonic():
            record = cached[1]
        else:
            found = self._db.api_keys.find_by_hash(digest)
            if found is None or not hmac.compare_digest(found.key_hash, digest):
                raise Unauthorized("invalid API key")
            record = found
            if record.revoked_at is None:
                if len(self._verified) > 1024:  # bounded: forget all rather than track ages
                    self._verified.clear()
                self._verified[digest] = (time.monotonic() + CACHE_SECONDS, record)
        if record.revoked_at is not None:
            raise Unauthorized(f"API key {record.name!r} was revoked")
        if record.expires_at is not None and record.expires_at <= now:
            raise Unauthorized(f"API key {record.name!r} expired; ask an admin for a new one")
        if now - self._touched.get(record.id, 0.0) >= TOUCH_EVERY:
            self._touched[record.id] = now
            self._db.api_keys.touch(record.id, now)
        return record

    def principal(self, presented: str | None) -> Principal:
        return principal_of(self.verify(presented))
