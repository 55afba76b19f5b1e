"""Idle freezing: a running sandbox nobody has called for ``freeze_idle_seconds`` is frozen
(``runsc pause``: its processes stop where they are and it costs no CPU), and thawed before any
call reaches it (exec, files, a terminal, an inbound connection, park, fork, snapshot). A ready
pool's sandboxes are not frozen (``SandboxService.freeze_if_idle``): a claim answers at once.

Freezing is the cgroup freezer's (``Runtime.freeze``), not ``runsc pause``: gVisor's pause stops
the sandbox's tasks but not the sentry's own threads, which measured the same host CPU paused as
running (an idle sandbox: about 4.5 % of a core either way on a loaded host), while a frozen
cgroup is not scheduled at all; and a thaw is one write to the cgroup, not a runsc process.

Frozen is not a state users see as such: the sandbox stays ``running`` in the store and in every
answer, with ``frozen`` set in ``corral info`` / the API while it is.

Invariants:
- ``frozen`` holds exactly the sandboxes whose runtime this daemon paused and has not resumed;
- freeze and thaw of one sandbox are serialized by that sandbox's own lock here (not the
  sandbox's state lock, which long operations hold), so a thaw that arrives while a freeze is in
  flight waits for it and then resumes the sandbox: a call never reaches a frozen agent;
- ``freeze`` re-checks, under that lock, that the sandbox is still idle (``still_idle``), so a
  call that arrived since the monitor looked keeps it running;
- it is kept in memory: after a daemon restart ``reconcile`` thaws every sandbox it adopts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from corral.runtime.base import Runtime, RuntimeFailure

log = logging.getLogger("corral.freezer")


class Freezer:
    """Which sandboxes are frozen, and the only code that pauses or resumes them for idleness."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._frozen: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    def is_frozen(self, sandbox_id: str) -> bool:
        return sandbox_id in self._frozen

    def changing(self, sandbox_id: str) -> bool:
        """A freeze or thaw of the sandbox is in flight."""
        lock = self._locks.get(sandbox_id)
        return lock is not None and lock.locked()

    def _lock(self, sandbox_id: str) -> asyncio.Lock:
        lock = self._locks.get(sandbox_id)
        if lock is None:
            lock = self._locks[sandbox_id] = asyncio.Lock()
        return lock

    async def freeze(self, sandbox_id: str, still_idle: Callable[[], bool]) -> bool:
        """Pause the sandbox if ``still_idle()`` holds once its lock is held; True if it did."""
        async with self._lock(sandbox_id):
            if sandbox_id in self._frozen or not still_idle():
                return False
            try:
                await self._runtime.freeze(sandbox_id)
            except RuntimeFailure as exc:
                log.warning("sandbox %s: could not freeze it: %s", sandbox_id, exc)
                return False
            self._frozen.add(sandbox_id)
            log.debug("sandbox %s: idle; frozen", sandbox_id)
            return True

    async def thaw(self, sandbox_id: str) -> None:
        """Resume the sandbox if it is frozen or being frozen; returns once it runs. A sandbox
        whose runtime cannot be resumed is no longer counted frozen (its caller's call then fails
        as for any sandbox that died, and the death check settles it)."""
        lock = self._locks.get(sandbox_id)
        if sandbox_id not in self._frozen and (lock is None or not lock.locked()):
            return  # the common case: no lock taken, no await
        async with self._lock(sandbox_id):
            if sandbox_id not in self._frozen:
                return
            self._frozen.discard(sandbox_id)
            try:
                await self._runtime.thaw(sandbox_id)
            except RuntimeFailure as exc:
                log.warning("sandbox %s: could not thaw it: %s", sandbox_id, exc)
                return
            log.debug("sandbox %s: thawed", sandbox_id)

    def forget(self, sandbox_id: str) -> None:
        """The sandbox's runtime is gone (killed, parked, failed): nothing of it is frozen."""
        self._frozen.discard(sandbox_id)
        lock = self._locks.get(sandbox_id)
        if lock is not None and not lock.locked():
            del self._locks[sandbox_id]
