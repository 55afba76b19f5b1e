"""Brokered secrets: the store (sealed values, presets, bindings), the broker's view of them,
and the audit of every injection.

Invariants:
- a value exists in clear only in this daemon's memory (the broker's cache) and in the requests
  the broker sends to the hosts it is bound to; never in a record, an answer, a log line, a
  sandbox (env, files, memory), an export or an image. The store holds it sealed
  (``storage/sealing.py``, key in ``DATA/secrets.key``);
- a sandbox holds only placeholders (``corral-ph-`` and 32 random hex digits), one per secret
  and sandbox, bound in ``secret_bindings``; so a sandbox with brokered secrets is not
  secret-bearing and may be parked, forked, snapshotted with memory and exported. A fork is
  bound to its parent's placeholders (its memory holds them);
- ``injections`` is read on every intercepted request: a rotation, a removal or a revocation
  applies to the next request of every running sandbox;
- the audit is buffered in memory and written at most every ``AUDIT_FLUSH`` seconds (a request
  never waits for the disk); at most ``AUDIT_KEEP`` entries are kept.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import re
import secrets
import string
import threading
import time
from dataclasses import dataclass, field

from corral.network.broker import CertificateAuthority, Injection
from corral.runtime.agent_client import AgentClient, AgentError
from corral.service.errors import InvalidRequest, NotFound
from corral.service.secret_presets import PRESETS, SecretOptions, resolve_options
from corral.storage import Database, SecretAuditRecord, SecretBindingRecord, SecretRecord
from corral.storage.sealing import Sealer

__all__ = ["PLACEHOLDER_PREFIX", "SNAPSHOT_OWNER", "BrokeredSetup", "SecretService"]

log = logging.getLogger("corral.secrets")

PLACEHOLDER_PREFIX = "corral-ph-"
# Bindings held by a memory snapshot (its memory holds the placeholders) are owned by
# "snapshot:NAME" until a sandbox restored from it inherits them.
SNAPSHOT_OWNER = "snapshot:"
MAX_VALUE = 8192
MAX_SECRETS = 256
MAX_FILES = 32
AUDIT_FLUSH = 1.0
AUDIT_KEEP = 100_000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# Where the workspace CA goes in a sandbox, and the env that points runtimes at it.
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
CA_FILE = "/etc/corral/broker-ca.pem"
TRUST_ENV = {
    "SSL_CERT_FILE": SYSTEM_BUNDLE,
    "REQUESTS_CA_BUNDLE": SYSTEM_BUNDLE,
    "CURL_CA_BUNDLE": SYSTEM_BUNDLE,
    "NODE_EXTRA_CA_CERTS": CA_FILE,
}
_PRINTABLE = set(string.printable) - set("\t\n\r\x0b\x0c")


def check_name(name: str) -> str:
    if not _NAME.match(name or ""):
        raise InvalidRequest(
            f"secret name {name!r} is not valid: letters, digits and _, not starting with a "
            "digit, at most 64 (it becomes an env var name)"
        )
    return name


def check_value(name: str, value: str, preset: str) -> bytes:
    """A value as the broker will send it: printable ASCII without line breaks (it goes into
    HTTP headers), at most ``MAX_VALUE`` bytes; an aws value is ``KEY_ID:SECRET``."""
    if not value or len(value) > MAX_VALUE or not set(value) <= _PRINTABLE:
        raise InvalidRequest(
            f"secret {name!r}: the value must be 1..{MAX_VALUE} printable ASCII characters "
            "without line breaks"
        )
    if PLACEHOLDER_PREFIX in value:
        raise InvalidRequest(f"secret {name!r}: the value is a corral placeholder")
    if preset == "aws":
        key_id, sep, secret = value.partition(":")
        if not sep or not key_id or not secret or " " in value:
            raise InvalidRequest(
                f"secret {name!r}: an aws value is ACCESS_KEY_ID:SECRET_ACCESS_KEY"
            )
    return value.encode("ascii")


def new_placeholder() -> str:
    return PLACEHOLDER_PREFIX + secrets.token_hex(16)


@dataclass
class BrokeredSetup:
    """What a new sandbox gets for its brokered secrets: env (placeholders and the trust env),
    files (path -> text) and the bindings to store (placeholder per secret)."""

    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    placeholders: dict[str, str] = field(default_factory=dict)


class SecretService:
    """The store and the broker's ``SecretSource``. Event-loop only."""

    def __init__(self, db: Database, sealer: Sealer, authority: CertificateAuthority) -> None:
        self.db = db
        self.sealer = sealer
        self.authority = authority
        self._values: dict[tuple[str, float], bytes] = {}
        self._injections: dict[str, tuple[Injection, ...]] = {}
        self._audit: builtins.list[SecretAuditRecord] = []
        self._used: dict[str, float] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._writing = threading.Lock()

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
        self._flush()
        return self.db.secrets.audit_log(secret=secret, sandbox_id=sandbox_id, limit=limit)

    # -- sandboxes ---------------------------------------------------------------------------
    def prepare(
        self, names: builtins.list[str], files: dict[str, tuple[str, str | None]]
    ) -> BrokeredSetup:
        """Placeholders, env and files for a new sandbox given ``names`` and ``files`` (path ->
        (secret name, template or None)); checks that each exists. A template is text with
        ``$NAME``/``${NAME}`` for the placeholders; None: the preset's template for that kind of
        file, else the bare placeholder and a newline."""
        setup = BrokeredSetup()
        if not names and not files:
            return setup
        problems = []
        records: dict[str, SecretRecord] = {}
        for name in dict.fromkeys(names):
            found = self.db.secrets.get(name)
            if found is None:
                problems.append(f"secret {name!r} not found")
            else:
                records[name] = found
        if sum(1 for r in records.values() if r.preset == "aws") > 1:
            problems.append("at most one aws secret per sandbox (they share AWS_ACCESS_KEY_ID)")
        reserved = sorted(set(records) & set(TRUST_ENV))
        if reserved:
            problems.append(f"{', '.join(reserved)}: the broker's trust settings use that env name")
        if len(files) > MAX_FILES:
            problems.append(f"at most {MAX_FILES} secret files")
        for path, (name, _) in files.items():
            if not path.startswith("/") or "\0" in path or len(path) > 4096:
                problems.append(f"secret file path {path!r} is not absolute")
            if name not in records:
                problems.append(f"secret file {path!r} names {name!r}, which is not given")
        if problems:
            raise InvalidRequest("invalid secrets: " + "; ".join(problems))
        for name, record in records.items():
            placeholder = new_placeholder()
            setup.placeholders[name] = placeholder
            if record.preset == "aws":
                setup.env["AWS_ACCESS_KEY_ID"] = placeholder
                setup.env["AWS_SECRET_ACCESS_KEY"] = new_placeholder()
            else:
                setup.env[name] = placeholder
        values = {name: setup.placeholders[name] for name in records}
        for path, (name, template) in files.items():
            if not template:
                preset_text = PRESETS[records[name].preset].file_template(path)
                template = (preset_text or "${NAME}\n").replace("${NAME}", "${" + name + "}")
            try:
                setup.files[path] = string.Template(template).substitute(values)
            except (KeyError, ValueError) as exc:
                raise InvalidRequest(
                    f"secret file {path!r}: its template names {exc} which is not a given "
                    "secret ($NAME or ${NAME} of a --secret)"
                ) from None
        setup.env.update(TRUST_ENV)
        return setup

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
        """(A booted sandbox's agent.) Put the broker's CA in the sandbox's trust store -- the
        system bundle (made if the image has none) and ``CA_FILE`` for runtimes that take one
        extra file -- then write its secret files (placeholders only)."""
        pem = self.authority.certificate_pem()
        bundle = b""
        try:
            chunks = [chunk async for chunk in client.read_file(SYSTEM_BUNDLE)]
            bundle = b"".join(chunks)
        except AgentError as exc:
            if exc.code != "not_found":
                raise
        if pem not in bundle:
            if bundle and not bundle.endswith(b"\n"):
                bundle += b"\n"
            await client.write_file(SYSTEM_BUNDLE, bundle + pem, mode=0o644, parents=True)
        await client.write_file(CA_FILE, pem, mode=0o644, parents=True)
        for path, text in files.items():
            await client.write_file(path, text.encode(), mode=0o644, parents=True)

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
                    header=_opt_str(opts.get("header")),
                    scheme=_opt_str(opts.get("scheme")),
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

    def used(self, sandbox_id: str, secret: str, host: str, method: str, path: str) -> None:
        now = time.time()
        self._audit.append(SecretAuditRecord(now, sandbox_id, secret, host, method, path[:2048]))
        self._used[secret] = now
        if len(self._audit) > 10_000:  # a burst: drop the oldest rather than grow
            del self._audit[:1000]

    def _take(self) -> tuple[builtins.list[SecretAuditRecord], dict[str, float]]:
        entries, used = self._audit, self._used
        self._audit, self._used = [], {}
        return entries, used

    def _write(self, entries: builtins.list[SecretAuditRecord], used: dict[str, float]) -> None:
        """(Any thread.) Under ``_writing``: a reader that flushes first also waits for a batch
        the background flusher has taken but not yet written."""
        with self._writing:
            self._write_now(entries, used)

    def _write_now(self, entries: builtins.list[SecretAuditRecord], used: dict[str, float]) -> None:
        if entries:
            self.db.secrets.audit(entries, AUDIT_KEEP)
        if used:
            self.db.secrets.mark_used(used)

    def _flush(self) -> None:
        self._write(*self._take())

    async def start(self) -> None:
        self.authority.certificate_pem()  # made at first start, not at the first sandbox
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(AUDIT_FLUSH)
            try:
                await asyncio.to_thread(self._write, *self._take())
            except Exception as exc:
                log.error("writing the secret audit failed: %s", exc)

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        with contextlib.suppress(Exception):
            self._flush()


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def options_of(record: SecretRecord) -> SecretOptions:
    opts = record.options
    return SecretOptions(
        preset=record.preset,
        hosts=tuple(record.hosts),
        header=_opt_str(opts.get("header")),
        scheme=_opt_str(opts.get("scheme")),
        query=bool(opts.get("query", True)),
        body=bool(opts.get("body", False)),
    )
