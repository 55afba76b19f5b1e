"""The audit of brokered secrets' use: every injection noted in memory and written to the store
at most every ``AUDIT_FLUSH`` seconds (a request never waits for the disk); at most ``AUDIT_KEEP``
entries are kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time

from corral.storage import Database, SecretAuditRecord

__all__ = ["AUDIT_FLUSH", "AUDIT_KEEP", "SecretAudit"]

log = logging.getLogger("corral.secrets")

AUDIT_FLUSH = 1.0
AUDIT_KEEP = 100_000


class SecretAudit:
    """The buffer of injections not yet written, and its flusher task. ``used`` runs on the
    event loop; the writes happen in a thread, under ``_writing``, so a reader that flushes
    first also waits for a batch the flusher has taken but not yet written."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._audit: list[SecretAuditRecord] = []
        self._used: dict[str, float] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._writing = threading.Lock()

    def used(self, sandbox_id: str, secret: str, host: str, method: str, path: str) -> None:
        """Note one injection (on the event loop; written by the next flush)."""
        now = time.time()
        self._audit.append(SecretAuditRecord(now, sandbox_id, secret, host, method, path[:2048]))
        self._used[secret] = now
        if len(self._audit) > 10_000:  # a burst: drop the oldest rather than grow
            del self._audit[:1000]

    def _take(self) -> tuple[list[SecretAuditRecord], dict[str, float]]:
        entries, used = self._audit, self._used
        self._audit, self._used = [], {}
        return entries, used

    def _write(self, entries: list[SecretAuditRecord], used: dict[str, float]) -> None:
        """(Any thread.) Under ``_writing``: a reader that flushes first also waits for a batch
        the background flusher has taken but not yet written."""
        with self._writing:
            self._write_now(entries, used)

    def _write_now(self, entries: list[SecretAuditRecord], used: dict[str, float]) -> None:
        if entries:
            self.db.secrets.audit(entries, AUDIT_KEEP)
        if used:
            self.db.secrets.mark_used(used)

    def flush(self) -> None:
        """Write what is buffered now (a reader of the audit calls it first)."""
        self._write(*self._take())

    async def start(self) -> None:
        self._flusher = asyncio.create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(AUDIT_FLUSH)
            if not (self._audit or self._used):
                continue  # nothing to write: no trip through a worker thread every second
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
            self.flush()
