"""The secret store and the broker's view of it (see ``corral.service.secrets`` for the
invariants): sealed values, bindings of placeholders to sandboxes, the injections the broker
reads on every intercepted request, and the audit of their use (``audit.py``).
"""

from __future__ import annotations

import builtins
import logging
import time

from corral.network.broker import CertificateAuthority, Injection
from corral.runtime.agent_client import AgentClient
from corral.service.errors import InvalidRequest, NotFound
from corral.service.secret_presets import resolve_options
from corral.service.secrets.audit import SecretAudit
from corral.service.secrets.setup import BrokeredSetup, install, prepare
from corral.service.secrets.values import check_name, check_value, opt_str
from corral.storage import Database, SecretAuditRecord, SecretBindingRecord, SecretRecord
from corral.storage.sealing import Sealer

__all__ = ["MAX_SECRETS", "SNAPSHOT_OWNER", "SecretService"]

log = logging.getLogger("corral.secrets")

# Bindings held by a memory snapshot (its memory holds the placeholders) are owned by
# "snapshot:NAME" until a sandbox restored from it inherits them.
SNAPSHOT_OWNER = "snapshot:"
MAX_SECRETS = 256


class SecretService:
    """The store and the broker's ``SecretSource``. Event-loop only."""

    def __init__(self, db: Database, sealer: Sealer, authority: CertificateAuthority) -> None:
        self.db = db
        self.sealer = sealer
        self.authority = authority
        self._values: dict[tuple[str, float], bytes] = {}
        self._injections: dict[str, tuple[Injection, ...]] = {}
        self.audit = SecretAudit(db)

    # -- the store ---------------------------------------------------------------------------
    def list(self) -> builtins.list[SecretRecord]:
        return self.db.secrets.list()

    def get(self, name: str) -> SecretRecord:
        found = self.db.secrets.get(name)
        if found is None:
            raise NotFound(f"secret {name!r} not found; `corral secret ls` lists them")
        return found

    def bound_sandboxes(self, name: str) -> builtins.list[str]:
        """The sandboxes bound to ``name`` (not the memory snapshots that hold bindings)."""
        return [
            b.sandbox_id
            for b in self.db.secrets.bindings()
            if b.secret == name and not b.sandbox_id.startswith(SNAPSHOT_OWNER)
        ]

    def set(
        self,
        name: str,
        value: str,
        *,
        preset: str = "http",
        hosts: builtins.list[str] | None = None,
        header: str | None = None,
        scheme: str | None = None,
        query: bool | None = None,
        body: bool | None = None,
    ) -> SecretRecord:
        """Store (or replace) a secret; sandboxes bound to it use the new value and hosts at
        their next request."""
        check_name(name)
        options = resolve_options(
            preset, hosts, header=header, scheme=scheme, query=query, body=body
        )
        raw = check_value(name, value, options.preset)
        existing = self.db.secrets.get(name)
        if existing is None and len(self.db.secrets.list()) >= MAX_SECRETS:
            raise InvalidRequest(f"a workspace holds at most {MAX_SECRETS} secrets")
        now = time.time()
        record = SecretRecord(
            name=name,
            preset=options.preset,
            hosts=list(options.hosts),
            options=options.to_json(),
            sealed=self.sealer.seal(name, raw),
            created_at=existing.created_at if existing else now,
            updated_at=now,
            last_used_at=existing.last_used_at if existing else None,
        )
        self.db.secrets.put(record)
        self._changed()
        log.info("secret %s stored (preset %s, hosts %s)", name, preset, ",".join(options.hosts))
        return self.get(name)

    def rotate(self, name: str, value: str) -> SecretRecord:
        """A new value for a secret, same bindings; running sandboxes use it at once."""
        record = self.get(name)
        raw = check_value(name, value, record.preset)
        self.db.secrets.put(
            SecretRecord(
                name=name,
                preset=record.preset,
                hosts=record.hosts,
                options=record.options,
                sealed=self.sealer.seal(name, raw),
                created_at=record.created_at,
                updated_at=time.time(),
            )
        )
        self._changed()
        log.info("secret %s rotated", name)
        return self.get(name)

    def remove(self, name: str) -> None:
        """Delete a secret: every sandbox's binding of it stops at once."""
        if not self.db.secrets.delete(name):
            raise NotFound(f"secret {name!r} not found")
        self._changed()
        log.info("secret %s removed", name)

    def revoke(self, sandbox_id: str, name: str) -> None:
        """Stop injecting ``name`` for one sandbox (its placeholder stays, inert)."""
        if not self.db.secrets.unbind(sandbox_id, name):
            raise NotFound(f"sandbox {sandbox_id} has no secret {name!r}")
        self._changed()
        log.info("secret %s revoked for sandbox %s", name, sandbox_id)

    def bindings_of(self, sandbox_id: str) -> builtins.list[str]:
        return [b.secret for b in self.db.secrets.bindings(sandbox_id)]

    def audit_log(
        self, *, secret: str | None = None, sandbox_id: str | None = None, limit: int = 100
    ) -> builtins.list[SecretAuditRecord]:
        self.audit.flush()
        return self.db.secrets.audit_log(secret=secret, sandbox_id=sandbox_id, limit=limit)

    # -- sandboxes ---------------------------------------------------------------------------
    def prepare(
        self, names: builtins.list[str], files: dict[str, tuple[str, str | None]]
    ) -> BrokeredSetup:
        """Placeholders, env and files for a new sandbox (``setup.prepare``)."""
        return prepare(self.db, names, files)

    def bind(self, sandbox_id: str, placeholders: dict[str, str]) -> None:
        now = time.time()
        self.db.secrets.bind(
            SecretBindingRecord(sandbox_id, name, placeholder, now)
            for name, placeholder in placeholders.items()
        )
        self._changed()

    def inherit(self, child_id: str, parent_id: str) -> None:
        """A fork: bound to its parent's placeholders (its memory holds them)."""
        found = self.db.secrets.bindings(parent_id)
        if found:
            self.db.secrets.bind(
                SecretBindingRecord(child_id, b.secret, b.placeholder, time.time()) for b in found
            )
            self._changed()

    def forget(self, sandbox_id: str) -> None:
        """The sandbox is gone: drop its bindings."""
        if self.db.secrets.unbind(sandbox_id):
            self._changed()

    def brokered(self, sandbox_id: str) -> bool:
        return bool(self.injections(sandbox_id))

    async def install(self, client: AgentClient, files: dict[str, str]) -> None:
        """(A booted sandbox's agent.) The broker's CA and the secret files (``setup.install``)."""
        await install(client, self.authority.certificate_pem(), files)

    # -- the broker's SecretSource -----------------------------------------------------------
    def injections(self, sandbox_id: str) -> tuple[Injection, ...]:
        found = self._injections.get(sandbox_id)
        if found is None:
            found = self._load(sandbox_id)
            if len(self._injections) > 4096:
                self._injections.clear()
            self._injections[sandbox_id] = found
        return found

    def _load(self, sandbox_id: str) -> tuple[Injection, ...]:
        made: builtins.list[Injection] = []
        for binding in self.db.secrets.bindings(sandbox_id):
            record = self.db.secrets.get(binding.secret)
            if record is None:
                continue
            try:
                value = self._value(record)
            except Exception as exc:
                log.error("secret %s cannot be opened: %s", record.name, exc)
                continue
            opts = record.options
            aws_key_id = None
            if record.preset == "aws":
                key_id, _, value = value.partition(b":")
                aws_key_id = key_id
            made.append(
                Injection(
                    secret=record.name,
                    placeholder=binding.placeholder.encode(),
                    value=value,
                    hosts=tuple(record.hosts),
                    header=opt_str(opts.get("header")),
                    scheme=opt_str(opts.get("scheme")),
                    query=bool(opts.get("query", True)),
                    body=bool(opts.get("body", False)),
                    aws_key_id=aws_key_id,
                )
            )
        return tuple(made)

    def _value(self, record: SecretRecord) -> bytes:
        key = (record.name, record.updated_at)
        value = self._values.get(key)
        if value is None:
            value = self.sealer.open(record.name, record.sealed)
            self._values[key] = value
        return value

    def _changed(self) -> None:
        self._injections.clear()
        self._values.clear()

    # -- the audit -----------------------------------------------------------------------------
    def used(self, sandbox_id: str, secret: str, host: str, method: str, path: str) -> None:
        """The broker injected ``secret`` into a request of ``sandbox_id`` (audited)."""
        self.audit.used(sandbox_id, secret, host, method, path)

    async def start(self) -> None:
        self.authority.certificate_pem()  # made at first start, not at the first sandbox
        await self.audit.start()

    async def stop(self) -> None:
        await self.audit.stop()
