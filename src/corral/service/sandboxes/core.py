"""Sandboxes: their records as users see them, the per-sandbox locks every transition runs
under, and the transitions that need no checkpoint (kill, death, timeout and network changes).

Create is ``create.py`` and ``launch.py``; park, wake, fork and reconciliation ``lifecycle/``;
the model (states, the guard) ``model.py``; what this composes is this package's other modules:
``admission`` (validation and capacity), ``live`` (slots, agent links, boot), ``policy``
(egress), ``activity`` (idle clocks).

Invariants:
- the store is the truth: a state change is committed before it is reported; an action in flight
  is recorded in ``operation`` first, so a daemon killed mid-way finds, at its next start, what was
  interrupted and settles every sandbox in a true state (``lifecycle/reconcile.py``);
- every transition goes through ``require_state`` and runs under the sandbox's own lock, so
  operations on one sandbox are serialized; admission (capacity check + insert or reserve) runs
  under one workspace-wide lock, so two requests never take the same free MiB;
- a sandbox that failed to be created leaves nothing behind (no record, runtime or slot);
- a sandbox in ``error``, ``stopped`` or ``killed`` holds no runtime or network resources; a
  ``parked`` one holds only its image on disk;
- secret env values are handed to the sandbox's agent over its authenticated link after boot
  and never stored (no record, no OCI config, no file), logged or returned; they live in the
  agent's memory (and so in a parked sandbox's 0600 memory image);
- brokered secrets (``secrets.py``) put only placeholders in a sandbox: their bindings are
  stored before it boots and dropped when it is killed; a cold boot gets the broker's CA in its
  trust store and its secret files through its agent.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from corral.config import Settings
from corral.network.policy import EgressPolicy
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import Runtime, RuntimeFailure, RuntimeStatus
from corral.service import access
from corral.service.errors import (
    CorralError,
    InvalidRequest,
    NotFound,
    OperationFailed,
    SandboxUnavailable,
    StateConflict,
)
from corral.service.images import remove_parked_image
from corral.service.model import (
    ENDED_STATES,
    PRUNED_STATES,
    Action,
    Operation,
    SandboxState,
    require_state,
)
from corral.service.policy import PolicyService
from corral.service.sandboxes.activity import Activity
from corral.service.sandboxes.freezer import Freezer
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.sandboxes.policy import NetworkPolicies
from corral.service.secrets import SecretService
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord
from corral.timing import phase

__all__ = ["SandboxService"]

log = logging.getLogger("corral.sandboxes")


class SandboxService:
    """The records of every sandbox and the transitions that need no checkpoint.

    Locking: ``lock(id)`` serializes every action on one sandbox; it is dropped when the
    sandbox is killed or its record pruned."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        templates: TemplateService,
        live: LiveSandboxes,
        policies: NetworkPolicies,
        workspace_policy: PolicyService,
        activity: Activity,
        freezer: Freezer,
        secrets: SecretService | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.runtime = runtime
        self.templates = templates
        self.live = live
        self.policies = policies
        self.workspace_policy = workspace_policy
        self.activity = activity
        self.freezer = freezer
        self.secrets = secrets
        self._locks: dict[str, asyncio.Lock] = {}

    def get(self, sandbox_id: str) -> SandboxRecord:
        """The record, if the acting key may see it: another member's sandbox is not found,
        exactly as a missing one (``access.hide``)."""
        record = self.db.sandboxes.get(sandbox_id)
        missing = f"sandbox {sandbox_id} not found"
        if record is None:
            raise NotFound(missing)
        access.hide(record.owner, missing)
        return record

    async def refresh(self, sandbox_id: str) -> SandboxRecord:
        """Like ``get``, but first checks that a running sandbox's runtime is still alive."""
        record = self.get(sandbox_id)
        if (
            record.state == SandboxState.RUNNING
            and not record.operation
            and not self.lock(sandbox_id).locked()
        ):
            await self.check_alive(record)
            record = self.get(sandbox_id)
        return record

    def list(
        self,
        *,
        states: Iterable[str] | None = None,
        metadata: dict[str, str] | None = None,
        include_pooled: bool = False,
        include_ended: bool = False,
    ) -> list[SandboxRecord]:
        """Sandboxes as users see them (the ready pools' sandboxes are not theirs yet): those in
        ``states``, else all but the ended ones unless ``include_ended``."""
        wanted = set(states) if states else None
        records = self.db.sandboxes.list(states=wanted, metadata=metadata)
        if wanted is None and not include_ended:
            records = [r for r in records if r.state not in ENDED_STATES]
        return [r for r in records if (include_pooled or not r.pooled) and access.visible(r.owner)]

    def prune_ended(self, now: float) -> builtins.list[str]:
        """Forget the sandboxes that ended (or failed) more than the workspace's retention ago."""
        cutoff = now - self.settings.ended_retention_seconds
        pruned = self.db.sandboxes.prune(states=PRUNED_STATES, ended_before=cutoff)
        for sandbox_id in pruned:
            self._locks.pop(sandbox_id, None)
            if self.secrets is not None:  # one that failed or stopped was never killed
                self.secrets.forget(sandbox_id)
        return pruned

    def agent(
        self, sandbox_id: str, action: str, record: SandboxRecord | None = None
    ) -> AgentClient:
        """The agent client of a running sandbox, or a StateConflict that says why not
        (``record``: the sandbox's record when the caller has just read it)."""
        record = record or self.get(sandbox_id)
        usable_while = (None, Operation.FORKING, Operation.SNAPSHOTTING)
        if record.state != SandboxState.RUNNING or record.operation not in usable_while:
            require_state(record, action, SandboxState.RUNNING)
        client = self.live.client(sandbox_id)
        if client is None:
            raise SandboxUnavailable(f"sandbox {sandbox_id} has no control link; try again")
        return client

    async def thaw(self, sandbox_id: str) -> None:
        """Resume the sandbox if idleness froze it, and count this as activity (so the monitor
        does not freeze it again under the call that asked). Every call that reaches a running
        sandbox's agent or runtime goes through here first."""
        self.activity.touch(sandbox_id)
        await self.freezer.thaw(sandbox_id)

    def idle_for(self, record: SandboxRecord, seconds: float, now: float) -> bool:
        """No call in flight (through the API or any request open on its agent link) and none
        for ``seconds``."""
        client = self.live.client(record.id)
        return (
            not self.activity.in_use(record.id)
            and (client is None or client.in_flight == 0)
            and self.activity.last_active(record) + seconds <= now
        )

    async def freeze_if_idle(self, record: SandboxRecord) -> bool:
        """Freeze a running sandbox idle for the workspace's ``freeze_idle_seconds``.

        Never a ready pool's sandbox: a pool is there to answer a claim at once, and a claimed
        sandbox's first call would wait for its thaw (create -> first output from a pool whose
        sandboxes sat 3 s with freezing after 1 s: 45-82 ms, against 31-37 ms unfrozen). While
        it waits, a pooled sandbox costs the idle CPU of a running one."""
        after = self.settings.freeze_idle_seconds
        if (
            not after
            or record.pooled
            or record.state != SandboxState.RUNNING
            or self.freezer.is_frozen(record.id)
        ):
            return False

        def still_idle() -> bool:
            current = self.db.sandboxes.get(record.id)
            return (
                current is not None
                and current.state == SandboxState.RUNNING
                and not current.pooled
                and not current.operation
                and not self.lock(record.id).locked()
                and self.idle_for(current, after, time.time())
            )

        return await self.freezer.freeze(record.id, still_idle)

    async def diagnose(self, sandbox_id: str, exc: Exception) -> CorralError:
        """Turn a failed agent call into the error a user should see (the sandbox may have died)."""
        record = self.get(sandbox_id)
        if record.state == SandboxState.RUNNING and not record.operation:
            await self.check_alive(record)
            record = self.get(sandbox_id)
        if record.state != SandboxState.RUNNING:
            return StateConflict(
                f"sandbox {sandbox_id} is {record.state}"
                + (f": {record.error}" if record.error else "")
            )
        return SandboxUnavailable(f"sandbox {sandbox_id}: its agent did not answer ({exc})")

    def policy_of(self, record: SandboxRecord) -> EgressPolicy:
        """The sandbox's stored egress policy (airgapped if it has none)."""
        return self.policies.of(record)

    async def set_network(
        self,
        sandbox_id: str,
        *,
        mode: str | None = None,
        allow: Iterable[str] | None = None,
        deny: Iterable[str] | None = None,
    ) -> tuple[SandboxRecord, int]:
        """Change a sandbox's policy: each part given replaces that part, the others stay.
        Applied at once to a running sandbox (returns how many connections were cut); a parked
        one gets it when it wakes."""
        async with self.lock(sandbox_id):
            record = self.get(sandbox_id)
            require_state(record, Action.SET_NETWORK)
            self.workspace_policy.check_rules(allow or ())
            current = self.policies.of(record).to_json()
            policy = self.policies.build(
                mode or current["mode"],
                current["allow"] if allow is None else allow,
                current["deny"] if deny is None else deny,
            )
            record = self.db.sandboxes.update(sandbox_id, network=policy.dumps())
            cut = 0
            slot = self.live.slot(sandbox_id)
            if record.state == SandboxState.RUNNING and slot is not None:
                try:
                    if self.policies.egress.attached(sandbox_id):
                        cut = await self.policies.egress.update(sandbox_id, policy)
                    else:  # its egress failed to come back (adoption): this brings it back
                        await self.policies.egress.attach(sandbox_id, slot, policy)
                except Exception as exc:
                    raise OperationFailed(
                        f"applying the network policy of sandbox {sandbox_id} failed: {exc}; "
                        "the new policy is stored, try again"
                    ) from exc
            log.info("sandbox %s: network now %s (%d flows cut)", sandbox_id, policy.dumps(), cut)
            return record, cut

    def set_timeout(self, sandbox_id: str, seconds: int) -> SandboxRecord:
        """End a running or parked sandbox ``seconds`` from now (its ``on_timeout`` action)."""
        record = self.get(sandbox_id)
        require_state(record, Action.SET_TIMEOUT)
        cap = self.workspace_policy.current().max_ttl_seconds
        if not 0 < seconds <= cap:
            raise InvalidRequest(f"timeout {seconds} s is outside 1..{cap} s")
        return self.db.sandboxes.update(sandbox_id, expires_at=time.time() + seconds)

    async def kill(self, sandbox_id: str) -> None:
        """Stop a sandbox and free everything it holds. Killing a killed sandbox is a no-op."""
        record = self.get(sandbox_id)
        if record.state == SandboxState.KILLED:
            return
        async with self.lock(sandbox_id):
            record = self.get(sandbox_id)
            if record.state == SandboxState.KILLED:
                return
            self.db.sandboxes.update(sandbox_id, operation=Operation.KILLING)
            await self.live.release_resources(sandbox_id, record.slot_index)
            if record.image_path:
                await asyncio.to_thread(remove_parked_image, self.settings, record.image_path)
            if self.secrets is not None:
                self.secrets.forget(sandbox_id)
            self.db.sandboxes.update(
                sandbox_id,
                state=SandboxState.KILLED,
                operation=None,
                slot_index=None,
                image_path=None,
                image_mib=0,
            )
        self._locks.pop(sandbox_id, None)

    async def fail(self, sandbox_id: str, reason: str) -> None:
        """Record that a sandbox died, and free what it held."""
        record = self.db.sandboxes.get(sandbox_id)
        if record is None:
            return
        log.error("sandbox %s: %s", sandbox_id, reason)
        await self.live.release_resources(sandbox_id, record.slot_index)
        self.db.sandboxes.update(
            sandbox_id, state=SandboxState.ERROR, error=reason, operation=None, slot_index=None
        )

    async def check_alive(self, record: SandboxRecord) -> None:
        if self.freezer.is_frozen(record.id) or self.freezer.changing(record.id):
            return  # runsc state would wait on a frozen sandbox; its thaw finds out
        try:
            info = await self.runtime.info(record.id)
        except RuntimeFailure as exc:
            log.warning("sandbox %s: runtime status unknown: %s", record.id, exc)
            return
        if info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED):
            return
        async with self.lock(record.id):
            current = self.get(record.id)
            if current.state != SandboxState.RUNNING or current.operation:
                return
            if info.oom_killed:
                reason = (
                    f"out of memory: the sandbox used more than its {record.memory_mib} MiB "
                    "faster than its processes could be killed, and was stopped; kill it and "
                    "create a new one with more memory (corral new --memory MIB)"
                )
            else:
                reason = f"the sandbox's runtime stopped unexpectedly ({info.status.value})"
            if info.detail:
                reason += f": {info.detail}"
            await self.fail(record.id, reason)

    def lock(self, sandbox_id: str) -> asyncio.Lock:
        lock = self._locks.get(sandbox_id)
        if lock is None:
            lock = self._locks[sandbox_id] = asyncio.Lock()
        return lock

    @contextlib.asynccontextmanager
    async def locked(self, sandbox_id: str) -> AsyncIterator[None]:
        """Hold the sandbox's ``lock``; the wait for it is timed as ``lock wait``."""
        lock = self.lock(sandbox_id)
        with phase("lock wait"):
            await lock.acquire()
        try:
            yield
        finally:
            lock.release()

    def rootfs_of(self, record: SandboxRecord) -> Path:
        """The root the sandbox's memory was made on: its pinned image, else its template's."""
        pinned = self.templates.rootfs_for(record.id)
        return pinned or self.templates.rootfs(self.templates.get(record.template))
