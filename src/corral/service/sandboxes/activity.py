"""Activity: when each sandbox was last used and whether a call is in flight, for idle
auto-park. Kept in memory only: writing the store on every exec would cost an fsync; after a
restart the idle clock starts anew (never earlier than the daemon's start)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from corral.storage import SandboxRecord

__all__ = ["Activity"]


class Activity:
    """Last-activity times and in-flight call counts, by sandbox id (event-loop only)."""

    def __init__(self) -> None:
        self._busy: dict[str, int] = {}
        self._last_active: dict[str, float] = {}
        self._started_at = time.time()

    def touch(self, sandbox_id: str) -> None:
        """Note activity (an exec or file call)."""
        self._last_active[sandbox_id] = time.time()

    def last_active(self, record: SandboxRecord) -> float:
        return max(
            self._last_active.get(record.id, 0.0),
            record.last_active_at or record.created_at,
            self._started_at,
        )

    @contextlib.contextmanager
    def busy(self, sandbox_id: str) -> Iterator[None]:
        """Mark a call in flight (a long exec stream is activity the whole time it runs)."""
        self._busy[sandbox_id] = self._busy.get(sandbox_id, 0) + 1
        try:
            yield
        finally:
            self._busy[sandbox_id] -= 1
            if not self._busy[sandbox_id]:
                del self._busy[sandbox_id]
            self.touch(sandbox_id)

    def in_use(self, sandbox_id: str) -> bool:
        return sandbox_id in self._busy
