"""A sandbox container's CPU quota, lifted while runsc checkpoints or restores it.

The quota bounds the sandbox's own work. A checkpoint (the sandbox is stopped meanwhile) and a
restore are runsc's: it compresses or inflates the sandbox's memory in the sentry, inside the
container's cgroup, and on one quota'd CPU that made a 200 MB checkpoint or restore ~150 ms
slower than raw runsc's (which has no quota), and the restored agent's first answer waited for
the quota's next period. So the quota is lifted for the checkpoint and put back before it
returns; a restore's container is made without one (``bundle.render_config``) and given it once
runsc has restored it (``generation.py``).

Invariant: a sandbox's state record names the quota its container must get back
(``SandboxRecord.cpu_quota_due``), saved before the container runs without it and cleared only
once it has it again. A daemon that died in between finds the record so at its next look
(``GVisorRuntime.info``, which the restart's reconciliation calls for every running sandbox)
and puts the quota back, unless this process is lifting it right now (``busy``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .cgroups import SandboxCgroups
from .layout import SandboxPaths, SandboxRecord

__all__ = ["CpuQuotaLifts"]


class CpuQuotaLifts:
    """The lifts of one runtime's sandboxes (event-loop only; see the module docstring)."""

    def __init__(self, cgroups: SandboxCgroups) -> None:
        self._cgroups = cgroups
        self._busy: set[str] = set()  # sandboxes checkpointed or restored without quota now

    @contextlib.contextmanager
    def checkpointing(self, paths: SandboxPaths, record: SandboxRecord) -> Iterator[None]:
        """The current container without its quota for the block, with it again after."""
        quota = self._cgroups.cpu_quota(record.current_container)
        if quota is None:  # no quota to lift
            yield
            return
        record.cpu_quota_due = quota
        paths.save(record)
        self._busy.add(record.sandbox_id)
        try:
            self._cgroups.set_cpu_quota(record.current_container, None)
            yield
        finally:
            self._busy.discard(record.sandbox_id)
            self.put_back(paths, record)

    @contextlib.contextmanager
    def restoring(self, sandbox_id: str) -> Iterator[None]:
        """While the block restores the sandbox: its due quota is the block's to set."""
        self._busy.add(sandbox_id)
        try:
            yield
        finally:
            self._busy.discard(sandbox_id)

    def settle(self, paths: SandboxPaths, record: SandboxRecord) -> None:
        """Put back a quota a dead daemon left lifted (nothing while this process lifts it)."""
        if record.cpu_quota_due is not None and record.sandbox_id not in self._busy:
            self.put_back(paths, record)

    def put_back(self, paths: SandboxPaths, record: SandboxRecord) -> None:
        """Give the current container its ``cpu_quota_due`` again (a container gone has no
        cgroup to give it to) and record that it has it."""
        with contextlib.suppress(OSError):
            self._cgroups.set_cpu_quota(record.current_container, record.cpu_quota_due)
        record.cpu_quota_due = None
        paths.save(record)
