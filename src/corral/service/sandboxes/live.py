"""The live side of every sandbox: its network slot and its agent link, and the machinery that
makes and unmakes them (boot or restore into a slot, adopt after a restart, checkpoint, release).

Invariants:
- a sandbox is live (in ``_slots`` and ``_clients``) only between a successful ``boot``,
  ``boot_build`` or ``adopt`` and its ``detach`` or ``release_resources``; a failed boot releases
  all it made;
- every boot, a build's sandbox included, waits its turn in one admission of boots
  (``max_concurrent_boots``) and goes lease → prepare → start → agent ready, with the egress
  attached before the start (a restore's) or beside it (a cold boot's, which runs nothing but
  its agent until the egress is done: ``_run``) and always before the agent is waited for;
- every agent has a key of its own (``agent_keys.py``): a cold boot is given a new one, a restore
  is rekeyed before anything else is asked of it; a checkpoint puts the key beside the memory;
- a boot's agent is waited for while the boot progresses (``agents.py``, which also connects,
  rekeys, and translates what agents report).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from corral.config import Settings
from corral.network.base import Network, Slot, Traffic
from corral.network.policy import EgressPolicy
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import (
    AgentMount,
    Resources,
    Runtime,
    RuntimeFailure,
    SandboxSpec,
)
from corral.service.agent_keys import AgentKeys, new_agent_key
from corral.service.errors import (
    CorralError,
    OperationFailed,
)
from corral.service.images import make_private
from corral.service.sandboxes.agents import AgentLinks, ConnectAgent
from corral.service.sandboxes.freezer import Freezer
from corral.service.sandboxes.policy import NetworkPolicies
from corral.storage import Database, SandboxRecord
from corral.timing import beside, phase

__all__ = ["LiveSandboxes"]

log = logging.getLogger("corral.sandboxes")


class LiveSandboxes:
    """Slots and agent clients of the running sandboxes, by id (event-loop only; callers hold
    the sandbox's lock for anything that changes one)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        network: Network,
        agent: AgentMount,
        policies: NetworkPolicies,
        freezer: Freezer,
        connect_agent: ConnectAgent | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.runtime = runtime
        self.network = network
        self.policies = policies
        self.freezer = freezer
        self.agent_mount = agent
        self.agents = AgentLinks(settings, runtime, connect_agent)
        self.keys = AgentKeys(settings.data_dir / "agent-keys")
        self._slots: dict[str, Slot] = {}
        self._clients: dict[str, AgentClient] = {}
        # Admission of boots: a boot waits here before it takes a slot or starts a runtime, so
        # that under a burst the started ones are not starved past agent_ready_timeout.
        boots = settings.max_concurrent_boots or 2 * (os.cpu_count() or 1)
        self._boots = asyncio.Semaphore(boots)

    @property
    def connect_agent(self) -> ConnectAgent:
        """How this daemon makes an agent client (a test's workspace restarted over the same
        fakes passes it on)."""
        return self.agents.connect_agent

    def client(self, sandbox_id: str) -> AgentClient | None:
        return self._clients.get(sandbox_id)

    def require_client(self, sandbox_id: str) -> AgentClient:
        """The agent client of a sandbox this service has just booted (KeyError if none)."""
        return self._clients[sandbox_id]

    def slot(self, sandbox_id: str) -> Slot | None:
        return self._slots.get(sandbox_id)

    def spec_for(
        self,
        record: SandboxRecord,
        rootfs: Path,
        slot: Slot,
        env: dict[str, str],
        agent_key: str | None = None,
        network_ready: Callable[[], Awaitable[None]] | None = None,
    ) -> SandboxSpec:
        agent = AgentMount(
            mounts=self.agent_mount.mounts,
            argv=self.agent_mount.argv,
            env=tuple(self.agent_mount.env) + tuple(env.items()),
        )
        return SandboxSpec(
            sandbox_id=record.id,
            rootfs=rootfs,
            resources=Resources(
                cpu=record.cpu,
                memory_mib=record.memory_mib,
                disk_mib=record.disk_mib,
                pids=self.settings.default_pids,
            ),
            agent=agent,
            netns_path=slot.netns_path,
            annotations={"corral.template": record.template},
            agent_key=agent_key,
            resolv_conf=self.policies.resolv_conf(),
            network_ready=network_ready,
        )

    async def boot(
        self,
        record: SandboxRecord,
        rootfs: Path,
        env: dict[str, str],
        *,
        image_dir: Path | None = None,
    ) -> None:
        """Give ``record`` a slot, start it (or restore ``image_dir`` into it) and connect to its
        agent. A restored agent holds the key of the one that was checkpointed: it is rekeyed
        before anything else. On failure everything this call made is released and
        OperationFailed is raised; the record itself is left to the caller, who records the
        slot (``slot_index_of``) in the commit that says the sandbox runs. At most
        ``max_concurrent_boots`` run at once; the others wait their turn first."""
        with phase("boot queue"):
            await self._boots.acquire()
        try:
            with phase("boot"):
                await self._boot(record, rootfs, env, image_dir=image_dir)
        finally:
            self._boots.release()
            self.network.refill()  # if the boot ended before its sandbox ran (``_run``)

    async def _boot(
        self,
        record: SandboxRecord,
        rootfs: Path,
        env: dict[str, str],
        *,
        image_dir: Path | None = None,
    ) -> None:
        slot: Slot | None = None
        verb = "restoring" if image_dir else "creating"
        try:
            old_key = None if image_dir is None else self.keys.of_image(image_dir)
            if image_dir is not None and old_key is None:
                raise OperationFailed(
                    f"restoring sandbox {record.id}: the memory image {image_dir} has no agent "
                    "key (it was made by an older corral); make the image again"
                )
            # The record learns its slot in the commit that says it runs (its caller's): a
            # crash before then leaves a slot no record names, which the restart reaps.
            with phase("slot lease"):
                # Its replacement is built once the sandbox runs (``_run``), not beside the
                # boot's own preparation on the event loop and the host's cores.
                slot = await self.network.lease(refill=False)
            key = self.keys.issue(record.id)  # kept before any agent has it
            await self._run(record, rootfs, slot, env, key, image_dir)
            if old_key is None:
                client = await self.agents.connect(record.id, slot, key, verb)
            else:
                client = await self.agents.connect(record.id, slot, old_key, verb, rekey_to=key)
            self._slots[record.id] = slot
            self._clients[record.id] = client
        except BaseException as exc:
            log.error("sandbox %s: %s failed: %s", record.id, verb, exc)
            await self.release_resources(record.id, slot.index if slot else None, slot)
            if isinstance(exc, CorralError | asyncio.CancelledError):
                raise
            raise OperationFailed(f"{verb} sandbox {record.id} failed: {exc}") from exc

    async def _run(
        self,
        record: SandboxRecord,
        rootfs: Path,
        slot: Slot,
        env: dict[str, str],
        key: str,
        image_dir: Path | None,
    ) -> None:
        """Start (or restore ``image_dir`` into) the runtime while the slot is made ready beside
        it: the runtime makes the disk and configuration, then waits for the slot
        (``SandboxSpec.network_ready``) before the sandbox runs. Returns (or raises) only once
        the slot's set-up has ended too, so a failure never releases a slot that is still being
        set up, and a booted sandbox is never handed on without its egress.

        A restore waits for the inner address and the egress (rules, resolver and proxy), as
        the processes of its memory image run on at once. A cold boot waits for the inner
        address only (gVisor reads it when it starts), and its egress is set up beside runsc:
        until this call returns, the only thing running in the sandbox is its agent, which
        opens no connection (the start command, the secrets and every call of the caller's come
        after), and the slot as built drops every connection its sandbox opens
        (``network/firewall.py``), so egress that is not yet attached is closed, not open."""
        with beside():  # the slot's set-up runs beside the runtime's boot, not inside it
            prepare = asyncio.create_task(_timed("slot prepare", self.network.prepare(slot)))
            egress = asyncio.create_task(
                _timed("egress attach", self.policies.attach(record, slot, fresh=True))
            )
        network = asyncio.create_task(_settled(prepare, egress))
        awaited = network if image_dir is not None else prepare

        def ready() -> Awaitable[None]:
            self.network.refill()  # the runtime is about to run the sandbox
            return asyncio.shield(awaited)  # the runtime's cancellation leaves the set-up be

        try:
            if image_dir is None:
                await self.runtime.start(self.spec_for(record, rootfs, slot, env, key, ready))
            else:
                spec = self.spec_for(record, rootfs, slot, env, network_ready=ready)
                await self.runtime.restore(spec, image_dir)
            with phase("egress wait"):
                await network  # at once, unless the runtime did not wait for all of it
        except BaseException:
            await asyncio.wait({network})
            if not network.cancelled():
                network.exception()  # retrieved: the runtime's error is the one raised
            raise

    async def boot_build(
        self, sandbox_id: str, rootfs: Path, resources: Resources, policy: EgressPolicy
    ) -> AgentClient:
        """Boot a template build's sandbox over its writable overlay ``rootfs`` with egress
        ``policy``, and return its ready agent. It has no record (a build sandbox is never parked,
        restored or adopted), so its agent's key is kept in memory only. Released, like any live
        sandbox, by ``release_resources(sandbox_id, None)``; on failure everything this call
        made is released first and OperationFailed is raised."""
        async with self._boots:
            slot: Slot | None = None
            try:
                slot = await self.network.lease()
                await self.network.prepare(slot)
                await self.policies.egress.attach(sandbox_id, slot, policy, fresh=True)
                key = new_agent_key()
                spec = SandboxSpec(
                    sandbox_id=sandbox_id,
                    rootfs=rootfs,
                    resources=resources,
                    agent=self.agent_mount,
                    netns_path=slot.netns_path,
                    annotations={"corral.build": "1"},
                    writable_root=True,
                    agent_key=key,
                    resolv_conf=self.policies.resolv_conf(),
                )
                await self.runtime.start(spec)
                self._slots[sandbox_id] = slot
                client = await self.agents.connect(sandbox_id, slot, key, "booting build")
                self._clients[sandbox_id] = client
                return client
            except BaseException as exc:
                log.error("build sandbox %s: creating it failed: %s", sandbox_id, exc)
                await self.release_resources(sandbox_id, None, slot)
                if isinstance(exc, CorralError | asyncio.CancelledError):
                    raise
                raise OperationFailed(f"creating build sandbox {sandbox_id} failed: {exc}") from exc

    async def detach(self, sandbox_id: str) -> Slot | None:
        """Forget the live side of a sandbox whose runtime has already stopped (after a park):
        close its agent client and hand back its slot for the caller to release. Its agent's key
        stays only in the image (``checkpoint``)."""
        self.keys.forget(sandbox_id)
        client = self._clients.pop(sandbox_id, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
        with phase("egress detach"):
            await self.policies.detach(sandbox_id, keep_names=True)
        return self._slots.pop(sandbox_id, None)

    async def release_slot(self, sandbox_id: str, slot: Slot) -> None:
        try:
            with phase("slot release"):
                await self.network.release(slot)
        except Exception as exc:
            log.error("sandbox %s: releasing slot %d failed: %s", sandbox_id, slot.index, exc)

    async def adopt(self, record: SandboxRecord, image_key: str | None = None) -> bool:
        """Re-attach to a sandbox that kept running while the daemon was away. ``image_key``: the
        key of the image an interrupted wake restored, which the agent still holds if the daemon
        stopped between persisting the new key and the rekey; the rekey is then finished here."""
        if record.slot_index is None:
            return False
        try:
            slot = await self.network.lease(record.slot_index)
        except Exception as exc:
            log.error(
                "sandbox %s: re-adopting slot %s failed: %s", record.id, record.slot_index, exc
            )
            return False
        key = self.keys.get(record.id)
        if key is None:
            log.error("sandbox %s: cannot re-adopt it: its agent key is missing", record.id)
            with contextlib.suppress(Exception):
                await self.network.release(slot)
            return False
        try:
            await self.policies.attach(record, slot)
        except Exception as exc:  # it keeps running, reaching nothing until its policy is set
            log.error("sandbox %s: re-applying its network policy failed: %s", record.id, exc)
        self._slots[record.id] = slot
        client = self.agents.connect_agent(record.id, slot)
        client.set_key(key)
        if image_key is not None:
            await self.agents.finish_rekey(record.id, client, key, image_key)
        self._clients[record.id] = client
        log.info("sandbox %s: re-adopted (slot %d)", record.id, slot.index)
        return True

    async def traffic(self, sandbox_id: str) -> Traffic | None:
        """What a live sandbox sent and received in its current slot (None: not live, or its
        slot cannot tell); never raises (logs what failed)."""
        slot = self._slots.get(sandbox_id)
        if slot is None:
            return None
        try:
            with phase("slot traffic"):
                return await self.network.traffic(slot)
        except Exception as exc:
            log.error("sandbox %s: reading its traffic counters failed: %s", sandbox_id, exc)
            return None

    def slot_index_of(self, sandbox_id: str) -> int | None:
        slot = self._slots.get(sandbox_id)
        return slot.index if slot else None

    def slot_address_of(self, sandbox_id: str) -> str | None:
        """Where the host reaches a running sandbox's ports (None without a slot)."""
        slot = self._slots.get(sandbox_id)
        return slot.host_address if slot else None

    async def checkpoint(
        self,
        sandbox_id: str,
        image_dir: Path,
        *,
        leave_running: bool,
        defer_cleanup: bool = False,
        durable: bool = True,
        compress: bool = True,
    ) -> None:
        """Checkpoint a running sandbox into ``image_dir`` with its agent's key beside the memory
        (for the restore's rekey); the image is left 0600 files in 0700 dirs (it holds the
        sandbox's memory: its secrets, its agent's key). ``durable`` (fsynced) and
        ``compress``: see ``Runtime.checkpoint``."""
        try:
            with phase("agent key"):
                self.keys.put_in_image(sandbox_id, image_dir)
        except (KeyError, OSError) as exc:  # as the runtime's own failures: nothing changed
            raise RuntimeFailure(f"checkpointing sandbox {sandbox_id}: {exc}") from exc
        await self.runtime.checkpoint(
            sandbox_id,
            image_dir,
            leave_running=leave_running,
            defer_cleanup=defer_cleanup,
            durable=durable,
            compress=compress,
        )
        with phase("image chmod"):
            await asyncio.to_thread(make_private, image_dir)

    async def release_resources(
        self, sandbox_id: str, slot_index: int | None, slot: Slot | None = None
    ) -> None:
        """Destroy the runtime and release the slot; never raises (logs what failed)."""
        self.keys.forget(sandbox_id)
        self.freezer.forget(sandbox_id)
        client = self._clients.pop(sandbox_id, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
        try:
            await self.runtime.destroy(sandbox_id)
        except Exception as exc:
            log.error("sandbox %s: destroying runtime failed: %s", sandbox_id, exc)
        await self.policies.detach(sandbox_id)
        self.policies.forget(sandbox_id)
        slot = self._slots.pop(sandbox_id, None) or slot
        if slot is None and slot_index is not None:
            with contextlib.suppress(Exception):
                slot = await self.network.lease(slot_index)
        if slot is not None:
            try:
                await self.network.release(slot)
            except Exception as exc:
                log.error("sandbox %s: releasing slot %d failed: %s", sandbox_id, slot.index, exc)

    async def close_clients(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
        self._clients.clear()

    def injected_python(self) -> list[str]:
        """The daemon's own interpreter as injected read-only into every sandbox (``-I -S``):
        tools run with it never depend on, or trust, the image's programs."""
        if not self.agent_mount.tools:
            raise OperationFailed("no interpreter is injected to run snapshot tools with")
        return list(self.agent_mount.tools)


async def _settled(*steps: asyncio.Task[None]) -> None:
    """Wait for all of ``steps`` (cancelling them if cancelled), then raise the first failure:
    a failure is raised only once the others have ended too."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def _timed(name: str, work: Awaitable[None]) -> None:
    with phase(name):
        await work
