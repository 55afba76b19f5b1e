"""The audit log: who did what to which object, when, from where, and what came of it.

Every mutating call and every refused call is recorded (the edge decides which calls those are
and fills in an ``AuditNote`` for the request; services add the target they made, e.g. the id of
a new sandbox, with ``note_target``). Entries are appended to the store in batches by one writer
task, so a request never waits for the log's fsync; ``flush`` writes what is pending (queries and
the daemon's stop call it). Flushes are serialised by a lock held until the batch is committed, so
a query's flush also waits for a batch the writer task took but has not committed yet: a query
sees every entry recorded before it. The store refuses to change or delete an entry
(``storage/audit.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from contextvars import ContextVar
from dataclasses import dataclass

from corral.service import access
from corral.storage import AuditEntry, Database

log = logging.getLogger("corral.audit")

MAX_PENDING = 10_000
FLUSH_SECONDS = 0.2
MAX_QUERY = 5000


@dataclass
class AuditNote:
    """What a request's handling learned that its audit entry needs (mutable, per request)."""

    principal: access.Principal | None = None
    target: str | None = None
    detail: str | None = None


_note: ContextVar[AuditNote | None] = ContextVar("corral_audit_note", default=None)


def begin_note() -> AuditNote:
    note = AuditNote()
    _note.set(note)
    return note


def current_note() -> AuditNote | None:
    return _note.get()


def note_target(target: str) -> None:
    """Name the object this request made (kept if the edge found none in the path)."""
    note = _note.get()
    if note is not None and note.target is None:
        note.target = target


class AuditLog:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._pending: list[AuditEntry] = []
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None
        self._flushing = asyncio.Lock()
        self.dropped = 0

    def start(self) -> None:
        if self._writer is None:
            self._writer = asyncio.get_running_loop().create_task(
                self._write_loop(), name="audit-writer"
            )

    async def stop(self) -> None:
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer
            self._writer = None
        await self.flush()

    def record(self, entry: AuditEntry) -> None:
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            log.error("audit log: %d entries pending; dropped %s", len(self._pending), entry)
            return
        self._pending.append(entry)
        self._wake.set()

    async def flush(self) -> None:
        """Write what is pending; return once it, and any batch taken before, is committed."""
        async with self._flushing:
            pending, self._pending = self._pending, []
            if not pending:
                return
            write = asyncio.ensure_future(asyncio.to_thread(self._db.audit.append, pending))
            try:
                await asyncio.shield(write)
            except asyncio.CancelledError:
                # The thread goes on writing; keep the lock until it has, so the next flush
                # (e.g. the one in ``stop``) cannot answer before this batch is in the store.
                with contextlib.suppress(Exception):
                    await write
                raise

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except Exception:
                log.exception("audit log: writing entries failed")
            await asyncio.sleep(FLUSH_SECONDS)

    async def query(
        self,
        *,
        key_name: str | None = None,
        target: str | None = None,
        since: float | None = None,
        after_id: int = 0,
        limit: int = 1000,
    ) -> list[AuditEntry]:
        await self.flush()
        return await asyncio.to_thread(
            self._db.audit.query,
            key_name=key_name,
            target=target,
            since=since,
            after_id=after_id,
            limit=max(1, min(limit, MAX_QUERY)),
        )


def entry(
    *,
    principal: access.Principal | None,
    action: str,
    method: str,
    path: str,
    target: str | None,
    status: int,
    result: str,
    source: str | None,
    detail: str | None = None,
) -> AuditEntry:
    return AuditEntry(
        at=time.time(),
        key_id=principal.key_id if principal else None,
        key_name=principal.name if principal else None,
        action=action[:128],
        method=method[:8],
        path=path[:1024],
        target=target[:253] if target else None,
        status=status,
        result=result[:32],
        source=source[:64] if source else None,
        detail=detail[:1024] if detail else None,
    )
