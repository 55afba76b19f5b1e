"""Sandbox lifecycle: create, get, list, kill, TTL expiry, death detection, and reconciliation.

This is the only place that combines the runtime, the network and the store for a sandbox.

Invariants:
- the store is the truth: a state change is committed before it is reported; after a restart the
  records are reconciled with what the runtime and the network really hold;
- every lifecycle transition goes through ``require_state`` and runs under the sandbox's own lock,
  so operations on one sandbox are serialized; admission (capacity check + insert) runs under one
  workspace-wide lock;
- a sandbox that failed to be created leaves nothing behind (no record, runtime or slot);
- a sandbox in ``error``, ``stopped`` or ``killed`` holds no runtime or network resources.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from corral.config import Settings
from corral.network.base import Network, Slot
from corral.runtime.agent_client import AgentClient, AgentError
from corral.runtime.base import (
    AgentMount,
    Resources,
    Runtime,
    RuntimeFailure,
    RuntimeStatus,
    SandboxSpec,
)
from corral.service.capacity import CapacityModel, CapacityReport
from corral.service.errors import (
    CorralError,
    InvalidRequest,
    NotFound,
    OperationFailed,
    SandboxUnavailable,
    StateConflict,
)
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord

log = logging.getLogger("corral.sandboxes")

ID_ALPHABET = string.ascii_lowercase + string.digits
ID_LENGTH = 12
LIVE_STATES = {"creating", "running", "parked"}
MIN_MEMORY_MIB = 64
MIN_DISK_MIB = 32
MIN_CPU = 0.05


def new_sandbox_id() -> str:
    """A fixed-width id (runsc matches container ids by prefix, so widths must not vary)."""
    return "sb-" + "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LENGTH))


@dataclass
class CreateRequest:
    template: str = "base"
    cpu: float | None = None
    memory_mib: int | None = None
    disk_mib: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    ttl_seconds: int | None = None


def require_state(record: SandboxRecord, action: str, *allowed: str) -> None:
    """The one guard of every transition: raise StateConflict unless the state allows ``action``."""
    if record.state not in allowed:
        hint = ""
        if record.state in {"killed", "stopped"}:
            hint = "; it is gone, create a new sandbox"
        elif record.state == "error":
            hint = f" ({record.error}); kill it and create a new one"
        elif record.state == "parked":
            hint = "; wake it first"
        raise StateConflict(f"cannot {action} sandbox {record.id} in state {record.state}{hint}")


class SandboxService:
    """Owns the lifecycle of every sandbox of the workspace."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        network: Network,
        templates: TemplateService,
        agent: AgentMount,
        connect_agent: Callable[[str, Slot], AgentClient] | None = None,
    ) -> None:
        self._settings = settings
        self._connect_agent = connect_agent or (lambda _id, slot: AgentClient(slot.host_address))
        self._db = db
        self._runtime = runtime
        self._network = network
        self._templates = templates
        self._agent_mount = agent
        self._capacity = CapacityModel(settings)
        self._admission = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        self._slots: dict[str, Slot] = {}
        self._clients: dict[str, AgentClient] = {}
        self._monitor: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------- daemon start and stop
    async def start(self, *, monitor: bool = True) -> None:
        await self.reconcile()
        if monitor:
            self._monitor = asyncio.create_task(self._monitor_loop(), name="sandbox-monitor")

    async def stop(self) -> None:
        """Stop watching; running sandboxes stay running and are re-adopted at the next start."""
        if self._monitor:
            self._monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._monitor
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
        self._clients.clear()

    async def reconcile(self) -> None:
        """Make the store and the host agree after a (possibly unclean) daemon stop."""
        adopted: set[str] = set()
        for record in self._db.sandboxes.list(states={"creating", "running"}):
            if record.state == "creating":
                log.warning("sandbox %s: creation was interrupted; removing it", record.id)
                await self._release_resources(record.id, record.slot_index)
                self._db.sandboxes.delete(record.id)
                continue
            info = await self._runtime.info(record.id)
            if info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED) and (
                record.slot_index is not None
            ):
                try:
                    slot = await self._network.lease(record.slot_index)
                except Exception as exc:
                    await self._fail(record.id, f"re-adopting its network slot failed: {exc}")
                    continue
                self._slots[record.id] = slot
                self._clients[record.id] = self._connect_agent(record.id, slot)
                adopted.add(record.id)
                log.info("sandbox %s: re-adopted (slot %d)", record.id, slot.index)
            else:
                await self._fail(
                    record.id,
                    f"its runtime was {info.status.value} when the daemon restarted",
                )
        for sandbox_id in await self._runtime.list_ids():
            known = self._db.sandboxes.get(sandbox_id)
            if sandbox_id not in adopted and (known is None or known.state not in LIVE_STATES):
                log.warning("sandbox %s: removing orphaned runtime resources", sandbox_id)
                await self._runtime.destroy(sandbox_id)
        reap = getattr(self._network, "reap_stale", None)
        if reap is not None:
            await reap({self._slots[i].index for i in adopted})

    # ----------------------------------------------------------------------------- queries
    def capacity(self) -> CapacityReport:
        return self._capacity.report(self._db.sandboxes.list(states=LIVE_STATES))

    def get(self, sandbox_id: str) -> SandboxRecord:
        record = self._db.sandboxes.get(sandbox_id)
        if record is None:
            raise NotFound(f"sandbox {sandbox_id} not found")
        return record

    async def refresh(self, sandbox_id: str) -> SandboxRecord:
        """Like ``get``, but first checks that a running sandbox's runtime is still alive."""
        record = self.get(sandbox_id)
        if record.state == "running" and not self._lock(sandbox_id).locked():
            await self._check_alive(record)
            record = self.get(sandbox_id)
        return record

    def list(
        self, *, states: Iterable[str] | None = None, metadata: dict[str, str] | None = None
    ) -> list[SandboxRecord]:
        wanted = set(states) if states else None
        return self._db.sandboxes.list(states=wanted, metadata=metadata)

    def agent(self, sandbox_id: str, action: str) -> AgentClient:
        """The agent client of a running sandbox, or a StateConflict that says why not."""
        record = self.get(sandbox_id)
        require_state(record, action, "running")
        client = self._clients.get(sandbox_id)
        if client is None:
            raise SandboxUnavailable(f"sandbox {sandbox_id} has no control link; try again")
        return client

    async def diagnose(self, sandbox_id: str, exc: Exception) -> CorralError:
        """Turn a failed agent call into the error a user should see (the sandbox may have died)."""
        record = self.get(sandbox_id)
        if record.state == "running":
            await self._check_alive(record)
            record = self.get(sandbox_id)
        if record.state != "running":
            return StateConflict(
                f"sandbox {sandbox_id} is {record.state}"
                + (f": {record.error}" if record.error else "")
            )
        return SandboxUnavailable(f"sandbox {sandbox_id}: its agent did not answer ({exc})")

    # ---------------------------------------------------------------------------- create
    def _resolve(self, request: CreateRequest) -> tuple[float, int, int, float | None]:
        s = self._settings
        template = self._templates.get(request.template)
        cpu = request.cpu if request.cpu is not None else template.cpu
        memory = request.memory_mib if request.memory_mib is not None else template.memory_mib
        disk = request.disk_mib if request.disk_mib is not None else template.disk_mib
        problems = []
        if not MIN_CPU <= cpu <= s.max_cpu:
            problems.append(f"cpu {cpu:g} is outside {MIN_CPU:g}..{s.max_cpu:g} vCPUs")
        if not MIN_MEMORY_MIB <= memory <= s.max_memory_mib:
            problems.append(
                f"memory {memory} MiB is outside {MIN_MEMORY_MIB}..{s.max_memory_mib} MiB"
            )
        if not MIN_DISK_MIB <= disk <= s.max_disk_mib:
            problems.append(f"disk {disk} MiB is outside {MIN_DISK_MIB}..{s.max_disk_mib} MiB")
        ttl = request.ttl_seconds
        if ttl is not None and not 0 < ttl <= s.max_ttl_seconds:
            problems.append(f"ttl {ttl} s is outside 1..{s.max_ttl_seconds} s")
        for key in request.env:
            if not key or "=" in key or "\0" in key:
                problems.append(f"env name {key!r} is not valid")
        if problems:
            raise InvalidRequest("invalid sandbox request: " + "; ".join(problems))
        expires = time.time() + ttl if ttl else None
        return cpu, memory, disk, expires

    async def create(self, request: CreateRequest) -> SandboxRecord:
        cpu, memory, disk, expires = self._resolve(request)
        template = self._templates.get(request.template)
        rootfs = self._templates.rootfs(template)
        env = {**template.env, **request.env}
        record = SandboxRecord(
            id=new_sandbox_id(),
            state="creating",
            template=template.name,
            cpu=cpu,
            memory_mib=memory,
            disk_mib=disk,
            env=env,
            metadata=dict(request.metadata),
            expires_at=expires,
            operation="creating",
        )
        async with self._admission:
            live = self._db.sandboxes.list(states=LIVE_STATES)
            self._capacity.admit(live, cpu=cpu, memory_mib=memory, disk_mib=disk)
            self._db.sandboxes.add(record)
        async with self._lock(record.id):
            slot: Slot | None = None
            try:
                slot = await self._network.lease()
                self._db.sandboxes.update(record.id, slot_index=slot.index)
                await self._network.prepare(slot)
                spec = self._spec(record, rootfs, slot, env)
                await self._runtime.start(spec)
                client = self._connect_agent(record.id, slot)
                try:
                    await client.wait_ready(self._settings.agent_ready_timeout)
                except BaseException:
                    await client.aclose()
                    raise
                self._slots[record.id] = slot
                self._clients[record.id] = client
            except BaseException as exc:
                log.error("sandbox %s: creation failed: %s", record.id, exc)
                await self._release_resources(record.id, slot.index if slot else None, slot)
                self._db.sandboxes.delete(record.id)
                if isinstance(exc, CorralError | asyncio.CancelledError):
                    raise
                raise OperationFailed(f"creating sandbox {record.id} failed: {exc}") from exc
            return self._db.sandboxes.update(record.id, state="running", operation=None)

    def _spec(
        self, record: SandboxRecord, rootfs: object, slot: Slot, env: dict[str, str]
    ) -> SandboxSpec:
        agent = AgentMount(
            mounts=self._agent_mount.mounts,
            argv=self._agent_mount.argv,
            env=tuple(self._agent_mount.env) + tuple(env.items()),
        )
        return SandboxSpec(
            sandbox_id=record.id,
            rootfs=rootfs,  # type: ignore[arg-type]
            resources=Resources(
                cpu=record.cpu,
                memory_mib=record.memory_mib,
                disk_mib=record.disk_mib,
                pids=self._settings.default_pids,
            ),
            agent=agent,
            netns_path=slot.netns_path,
            annotations={"corral.template": record.template},
        )

    # ------------------------------------------------------------------------------ kill
    async def kill(self, sandbox_id: str) -> None:
        """Stop a sandbox and free everything it holds. Killing a killed sandbox is a no-op."""
        record = self.get(sandbox_id)
        if record.state == "killed":
            return
        async with self._lock(sandbox_id):
            record = self.get(sandbox_id)
            if record.state == "killed":
                return
            require_state(record, "kill", "creating", "running", "parked", "stopped", "error")
            self._db.sandboxes.update(sandbox_id, operation="killing")
            await self._release_resources(sandbox_id, record.slot_index)
            self._db.sandboxes.update(sandbox_id, state="killed", operation=None, slot_index=None)
        self._locks.pop(sandbox_id, None)

    # ------------------------------------------------------------------------------ internals
    def _lock(self, sandbox_id: str) -> asyncio.Lock:
        lock = self._locks.get(sandbox_id)
        if lock is None:
            lock = self._locks[sandbox_id] = asyncio.Lock()
        return lock

    async def _release_resources(
        self, sandbox_id: str, slot_index: int | None, slot: Slot | None = None
    ) -> None:
        """Destroy the runtime and release the slot; never raises (logs what failed)."""
        client = self._clients.pop(sandbox_id, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
        try:
            await self._runtime.destroy(sandbox_id)
        except Exception as exc:
            log.error("sandbox %s: destroying runtime failed: %s", sandbox_id, exc)
        slot = self._slots.pop(sandbox_id, None) or slot
        if slot is None and slot_index is not None:
            with contextlib.suppress(Exception):
                slot = await self._network.lease(slot_index)
        if slot is not None:
            try:
                await self._network.release(slot)
            except Exception as exc:
                log.error("sandbox %s: releasing slot %d failed: %s", sandbox_id, slot.index, exc)

    async def _fail(self, sandbox_id: str, reason: str) -> None:
        """Record that a sandbox died, and free what it held."""
        record = self._db.sandboxes.get(sandbox_id)
        if record is None:
            return
        log.error("sandbox %s: %s", sandbox_id, reason)
        await self._release_resources(sandbox_id, record.slot_index)
        self._db.sandboxes.update(
            sandbox_id, state="error", error=reason, operation=None, slot_index=None
        )

    async def _check_alive(self, record: SandboxRecord) -> None:
        try:
            info = await self._runtime.info(record.id)
        except RuntimeFailure as exc:
            log.warning("sandbox %s: runtime status unknown: %s", record.id, exc)
            return
        if info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED):
            return
        async with self._lock(record.id):
            current = self.get(record.id)
            if current.state != "running":
                return
            if info.oom_killed:
                reason = (
                    f"out of memory: the sandbox used more than its {record.memory_mib} MiB "
                    "and was stopped"
                )
            else:
                reason = f"the sandbox's runtime stopped unexpectedly ({info.status.value})"
            if info.detail:
                reason += f": {info.detail}"
            await self._fail(record.id, reason)

    async def _monitor_loop(self) -> None:
        health_every = 3.0
        last_health = 0.0
        while True:
            try:
                now = time.time()
                for record in self._db.sandboxes.list(states=LIVE_STATES):
                    if record.expires_at is not None and record.expires_at <= now:
                        log.info("sandbox %s: TTL ran out; killing it", record.id)
                        await self.kill(record.id)
                if time.monotonic() - last_health >= health_every:
                    last_health = time.monotonic()
                    for record in self._db.sandboxes.list(states={"running"}):
                        if not self._lock(record.id).locked():
                            await self._check_alive(record)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("sandbox monitor pass failed")
            await asyncio.sleep(1.0)


def translate_agent_error(sandbox_id: str, exc: AgentError) -> CorralError:
    """Map an error the agent reported to the service's tree (keeping the agent's code)."""
    code = getattr(exc, "code", None) or "internal"
    message = f"sandbox {sandbox_id}: {exc}"
    if code == "not_found":
        return NotFound(message)
    if code == "exec_failed":
        from corral.service.errors import ExecFailed

        return ExecFailed(message)
    if code in {"bad_request", "is_a_directory", "not_a_directory", "exists", "no_space"}:
        return InvalidRequest(message, code=code)
    if code in {"conflict"}:
        return StateConflict(message)
    if code == "permission_denied":
        return InvalidRequest(message, code=code)
    return OperationFailed(message)
