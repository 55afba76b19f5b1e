"""Sandboxes: records, admission, create, kill, death detection and reconciliation, plus the
machinery every state change shares (per-sandbox locks, booting into a network slot, releasing).

Park, wake, fork and snapshots build on this in ``lifecycle.py``.

Invariants:
- the store is the truth: a state change is committed before it is reported; an action in flight
  is recorded in ``operation`` first, so a daemon killed mid-way finds, at its next start, what was
  interrupted and settles every sandbox in a true state (``reconcile``);
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
  trust store and its secret files through its agent;
- every agent has a key of its own (``agent_keys.py``): a cold boot is given a new one, a restore
  is rekeyed before anything else is asked of it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import ipaddress
import logging
import os
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from pathlib import Path

from corral.config import Settings
from corral.network.base import Network, Slot
from corral.network.policy import EgressPolicy, NetworkMode, PolicyError
from corral.network.sandbox_net import EgressControl, FakeEgress, Names, write_resolv_conf
from corral.paths import PathEscape, inside
from corral.runtime.agent_client import AgentClient, AgentError
from corral.runtime.base import (
    AgentMount,
    Resources,
    Runtime,
    RuntimeFailure,
    RuntimeStatus,
    SandboxSpec,
)
from corral.service import access
from corral.service.agent_keys import AgentKeys
from corral.service.audit import note_target
from corral.service.capacity import CapacityModel, CapacityReport
from corral.service.errors import (
    CapacityExceeded,
    CorralError,
    InvalidRequest,
    NotFound,
    OperationFailed,
    SandboxUnavailable,
    StateConflict,
)
from corral.service.images import image_complete, make_private
from corral.service.model import (
    ENDED_STATES,
    LIVE_STATES,
    MIN_CPU,
    MIN_DISK_MIB,
    MIN_MEMORY_MIB,
    PRUNED_STATES,
    TIMEOUT_ACTIONS,
    CreateRequest,
    new_sandbox_id,
    require_state,
)
from corral.service.policy import PolicyService
from corral.service.quotas import check_quotas, usage_of
from corral.service.sandboxes.freezer import Freezer
from corral.service.secrets import BrokeredSetup, SecretService
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord, TemplateRecord

log = logging.getLogger("corral.sandboxes")


class SandboxService:
    """Owns the records and the live side (slot, agent client) of every sandbox."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        runtime: Runtime,
        network: Network,
        templates: TemplateService,
        agent: AgentMount,
        connect_agent: Callable[[str, Slot], AgentClient] | None = None,
        egress: EgressControl | None = None,
    ) -> None:
        self.settings = settings
        self.egress: EgressControl = egress or FakeEgress()
        self._names: dict[str, Names] = {}  # resolved names of parked sandboxes
        self.db = db
        self.runtime = runtime
        self.network = network
        self.templates = templates
        self._agent_mount = agent
        self._connect_agent = connect_agent or (lambda _id, slot: AgentClient(slot.host_address))
        self.keys = AgentKeys(settings.data_dir / "agent-keys")
        self.capacity_model = CapacityModel(settings)
        self.policy = PolicyService(db, settings)
        self.admission = asyncio.Lock()
        self._locks: dict[str, asyncio.Lock] = {}
        self._slots: dict[str, Slot] = {}
        self._clients: dict[str, AgentClient] = {}
        self._busy: dict[str, int] = {}
        self._last_active: dict[str, float] = {}
        self._started_at = time.time()
        self.freezer = Freezer(runtime)
        # Admission of boots: a boot waits here before it takes a slot or starts a runtime, so
        # that under a burst the started ones are not starved past agent_ready_timeout.
        boots = settings.max_concurrent_boots or 2 * (os.cpu_count() or 1)
        self._boots = asyncio.Semaphore(boots)
        # Set by the lifecycle service: wakes a parked sandbox (for auto_wake).
        self.wake_hook: Callable[[str], Awaitable[SandboxRecord]] | None = None
        # Set by the pool service: hands out a ready sandbox that fits a request, if any.
        self.pool_hook: Callable[[CreateRequest], Awaitable[SandboxRecord | None]] | None = None
        # Set by the workspace: the secret store and broker (None: no brokered secrets).
        self.secrets: SecretService | None = None

    # ----------------------------------------------------------------------------- queries
    def capacity(self) -> CapacityReport:
        snapshots = sum(s.size_mib for s in self.db.snapshots.list())
        return self.capacity_model.report(
            self.db.sandboxes.list(states=LIVE_STATES), snapshot_mib=snapshots
        )

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
            record.state == "running"
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
        if record.state != "running" or record.operation not in (None, "forking", "snapshotting"):
            require_state(record, action, "running")
        client = self._clients.get(sandbox_id)
        if client is None:
            raise SandboxUnavailable(f"sandbox {sandbox_id} has no control link; try again")
        return client

    async def ready_agent(self, sandbox_id: str, action: str) -> AgentClient:
        """Like ``agent``, but first wakes a parked sandbox that asked for ``auto_wake``."""
        record = self.get(sandbox_id)
        if record.state == "parked" and record.auto_wake and self.wake_hook is not None:
            record = await self.wake_hook(sandbox_id)
        await self.thaw(sandbox_id)
        return self.agent(sandbox_id, action, record)

    async def thaw(self, sandbox_id: str) -> None:
        """Resume the sandbox if idleness froze it, and count this as activity (so the monitor
        does not freeze it again under the call that asked). Every call that reaches a running
        sandbox's agent or runtime goes through here first."""
        self.touch(sandbox_id)
        await self.freezer.thaw(sandbox_id)

    def idle_for(self, record: SandboxRecord, seconds: float, now: float) -> bool:
        """No call in flight (through the API or any request open on its agent link) and none
        for ``seconds``."""
        client = self._clients.get(record.id)
        return (
            not self.in_use(record.id)
            and (client is None or client.in_flight == 0)
            and self.last_active(record) + seconds <= now
        )

    async def freeze_if_idle(self, record: SandboxRecord) -> bool:
        """Freeze a running sandbox idle for the workspace's ``freeze_idle_seconds``."""
        after = self.settings.freeze_idle_seconds
        if not after or record.state != "running" or self.freezer.is_frozen(record.id):
            return False

        def still_idle() -> bool:
            current = self.db.sandboxes.get(record.id)
            return (
                current is not None
                and current.state == "running"
                and not current.operation
                and not self.lock(record.id).locked()
                and self.idle_for(current, after, time.time())
            )

        return await self.freezer.freeze(record.id, still_idle)

    def touch(self, sandbox_id: str) -> None:
        """Note activity (an exec or file call) for idle auto-park. Kept in memory: writing the
        store on every exec would cost an fsync; after a restart the idle clock starts anew."""
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

    async def diagnose(self, sandbox_id: str, exc: Exception) -> CorralError:
        """Turn a failed agent call into the error a user should see (the sandbox may have died)."""
        record = self.get(sandbox_id)
        if record.state == "running" and not record.operation:
            await self.check_alive(record)
            record = self.get(sandbox_id)
        if record.state != "running":
            return StateConflict(
                f"sandbox {sandbox_id} is {record.state}"
                + (f": {record.error}" if record.error else "")
            )
        return SandboxUnavailable(f"sandbox {sandbox_id}: its agent did not answer ({exc})")

    # --------------------------------------------------------------------------- network
    def check_mode(self, mode: NetworkMode) -> None:
        self.policy.check_mode(mode)

    def build_policy(
        self, mode: str | None, allow: Iterable[str] = (), deny: Iterable[str] = ()
    ) -> EgressPolicy:
        """A policy from caller input (InvalidRequest naming what is wrong), in an allowed mode."""
        try:
            policy = EgressPolicy.build(mode or self.policy.default_mode(), list(allow), list(deny))
        except PolicyError as exc:
            raise InvalidRequest(f"invalid network policy: {exc}") from exc
        self.check_mode(policy.mode)
        return policy

    def policy_of(self, record: SandboxRecord) -> EgressPolicy:
        """The stored policy; a record made before policies were stored (or a corrupt one)
        reaches nothing, as such sandboxes always did."""
        if record.network:
            try:
                return EgressPolicy.loads(record.network)
            except PolicyError as exc:
                log.error("sandbox %s: its stored network policy is unreadable: %s", record.id, exc)
        return EgressPolicy(NetworkMode.AIRGAPPED)

    def network_subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.settings.network_subnet)

    def default_policy(self) -> EgressPolicy:
        return self.build_policy(None)

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
            require_state(record, "change the network of", "running", "parked")
            self.policy.check_rules(allow or ())
            current = self.policy_of(record).to_json()
            policy = self.build_policy(
                mode or current["mode"],
                current["allow"] if allow is None else allow,
                current["deny"] if deny is None else deny,
            )
            record = self.db.sandboxes.update(sandbox_id, network=policy.dumps())
            cut = 0
            slot = self._slots.get(sandbox_id)
            if record.state == "running" and slot is not None:
                try:
                    if self.egress.attached(sandbox_id):
                        cut = await self.egress.update(sandbox_id, policy)
                    else:  # its egress failed to come back (adoption): this brings it back
                        await self.egress.attach(sandbox_id, slot, policy)
                except Exception as exc:
                    raise OperationFailed(
                        f"applying the network policy of sandbox {sandbox_id} failed: {exc}; "
                        "the new policy is stored, try again"
                    ) from exc
            log.info("sandbox %s: network now %s (%d flows cut)", sandbox_id, policy.dumps(), cut)
            return record, cut

    async def _attach_egress(self, record: SandboxRecord, slot: Slot) -> None:
        names = self._names.pop(record.id, None)
        if names is None and record.parent_id:
            names = self.egress.names(record.parent_id)
        await self.egress.attach(record.id, slot, self.policy_of(record), names)

    async def _detach_egress(self, sandbox_id: str) -> None:
        try:
            await self.egress.detach(sandbox_id)
        except Exception as exc:
            log.error("sandbox %s: stopping its egress failed: %s", sandbox_id, exc)

    def resolv_conf(self) -> str:
        return write_resolv_conf(self.settings.data_dir / "network")

    # ---------------------------------------------------------------------------- create
    def resolve(self, request: CreateRequest) -> tuple[float, int, int, float | None]:
        """Resources and expiry for a request, or InvalidRequest naming every problem."""
        policy = self.policy.current()
        template = self.templates.get(request.template)
        self.policy.check_template(template.name)
        self.policy.check_runtime(self.runtime.name)
        self.policy.check_rules(request.allow)
        cpu = request.cpu if request.cpu is not None else template.cpu
        memory = request.memory_mib if request.memory_mib is not None else template.memory_mib
        disk = request.disk_mib if request.disk_mib is not None else template.disk_mib
        self.templates.check_ceilings(template, cpu=cpu, memory_mib=memory, disk_mib=disk)
        problems = []
        if not MIN_CPU <= cpu <= policy.max_cpu:
            problems.append(f"cpu {cpu:g} is outside {MIN_CPU:g}..{policy.max_cpu:g} vCPUs")
        if not MIN_MEMORY_MIB <= memory <= policy.max_memory_mib:
            problems.append(
                f"memory {memory} MiB is outside {MIN_MEMORY_MIB}..{policy.max_memory_mib} MiB"
            )
        if not MIN_DISK_MIB <= disk <= policy.max_disk_mib:
            problems.append(f"disk {disk} MiB is outside {MIN_DISK_MIB}..{policy.max_disk_mib} MiB")
        ttl = request.ttl_seconds
        if ttl is None:
            ttl = policy.default_ttl_seconds
        elif not 0 < ttl <= policy.max_ttl_seconds:
            problems.append(f"ttl {ttl} s is outside 1..{policy.max_ttl_seconds} s")
        for key in [*request.env, *request.secret_env]:
            if not key or "=" in key or "\0" in key:
                problems.append(f"env name {key!r} is not valid")
        both = sorted(set(request.env) & set(request.secret_env))
        if both:
            problems.append(f"env names given both plain and secret: {', '.join(both)}")
        if request.on_timeout not in TIMEOUT_ACTIONS:
            problems.append(f"on_timeout must be one of {', '.join(TIMEOUT_ACTIONS)}")
        if request.auto_park_idle is not None and request.auto_park_idle <= 0:
            problems.append("auto_park_idle must be a positive number of seconds")
        try:
            self.build_policy(request.network, request.allow, request.deny)
        except InvalidRequest as exc:
            problems.append(exc.message)
        if problems:
            raise InvalidRequest("invalid sandbox request: " + "; ".join(problems))
        expires = time.time() + ttl if ttl else None
        return cpu, memory, disk, expires

    def check_quotas(
        self, live: Iterable[SandboxRecord], adding: Iterable[SandboxRecord], what: str
    ) -> None:
        """Raise QuotaExceeded if ``adding`` (new or changed records, in their new state) would
        take an owner over a quota of its key. Callers hold ``admission``."""
        live = builtins.list(live)
        adding = builtins.list(adding)
        changed = {r.id for r in adding}
        for owner in {r.owner for r in adding if r.owner is not None}:
            key = self.db.api_keys.get(owner)
            if key is None or not key.quotas:
                continue
            before = usage_of(live, owner)
            after = usage_of([*(r for r in live if r.id not in changed), *adding], owner)
            need = type(before)(
                **{q: after.get(q) - before.get(q) for q in vars(before)}  # the growth
            )
            check_quotas(key.name, key.quotas, before, need, what)

    async def admit(self, records: builtins.list[SandboxRecord]) -> None:
        """Check capacity and quotas for new records and insert them, atomically with other
        admissions."""
        async with self.admission:
            live = self.db.sandboxes.list(states=LIVE_STATES)
            what = "this sandbox" if len(records) == 1 else f"these {len(records)} sandboxes"
            for record in records[:1]:
                note_target(record.id)  # the audit entry of the call names what it made
            self.check_quotas(live, records, what)
            self.capacity_model.admit(
                live,
                cpu=sum(r.cpu for r in records),
                memory_mib=sum(r.memory_mib for r in records),
                disk_mib=sum(r.disk_mib for r in records),
                snapshot_mib=sum(s.size_mib for s in self.db.snapshots.list()),
            )
            for record in records:
                self.db.sandboxes.add(record)

    async def hold(self, key: str, resources: Resources, what: str) -> None:
        """Reserve ``resources`` for something that is not a sandbox record (a template build's
        sandbox) until ``unhold(key)``; raises CapacityExceeded, naming ``what``, if they do
        not fit."""
        async with self.admission:
            try:
                self.capacity_model.admit(
                    self.db.sandboxes.list(states=LIVE_STATES),
                    cpu=resources.cpu,
                    memory_mib=resources.memory_mib,
                    disk_mib=resources.disk_mib,
                    snapshot_mib=sum(s.size_mib for s in self.db.snapshots.list()),
                )
            except CapacityExceeded as exc:
                raise CapacityExceeded(f"{what} does not fit: {exc.message}") from exc
            self.capacity_model.held[key] = (
                resources.cpu,
                resources.memory_mib,
                resources.disk_mib,
            )

    def unhold(self, key: str) -> None:
        self.capacity_model.held.pop(key, None)

    async def create(
        self, request: CreateRequest, *, pooled: bool = False, cold: bool = False
    ) -> SandboxRecord:
        """A new sandbox: claimed from the template's ready pool when one fits, else restored
        from the template's warm image, else booted cold (``cold`` forces that, for warmups)."""
        if not pooled and not cold and self.pool_hook is not None:
            claimed = await self.pool_hook(request)
            if claimed is not None:
                return claimed
        cpu, memory, disk, expires = self.resolve(request)
        template = self.templates.get(request.template)
        warm = None if cold or not image_complete(template.warm_image) else template.warm_image
        if warm is not None and memory != template.memory_mib:
            raise InvalidRequest(
                f"template {template.name!r} is warm: its sandboxes continue from a memory image "
                f"of {template.memory_mib} MiB, so their memory cannot be changed"
            )
        if warm is not None and disk != template.disk_mib:
            raise InvalidRequest(
                f"template {template.name!r} is warm: its sandboxes continue from a memory image "
                f"whose root holds a {template.disk_mib} MiB disk, so their disk cannot be changed"
            )
        brokered = self._brokered(request)
        env = {**template.env, **request.env, **brokered.env}
        record = self.new_record(
            request, template.name, (cpu, memory, disk), expires, env=env, operation="creating"
        )
        record.pooled = pooled
        if pooled:
            record.owner = None  # the workspace's until a caller claims it
        if brokered.placeholders and self.secrets is not None:
            self.secrets.bind(record.id, brokered.placeholders)
        try:
            return await self.launch(
                record,
                template,
                image=template.image,
                env={**env, **request.secret_env},
                image_dir=Path(warm) if warm else None,
                configure=bool(request.env or request.secret_env or brokered.env),
                files=brokered.files,
            )
        except BaseException:
            if self.secrets is not None:
                self.secrets.forget(record.id)
            raise

    def _brokered(self, request: CreateRequest) -> BrokeredSetup:
        """Placeholders, env and files for ``request``'s brokered secrets (checked)."""
        if not request.secrets and not request.secret_files:
            return BrokeredSetup()
        if self.secrets is None:
            raise InvalidRequest("this workspace has no secret broker")
        setup = self.secrets.prepare(request.secrets, request.secret_files)
        clash = sorted(set(setup.env) & (set(request.env) | set(request.secret_env)))
        if clash:
            raise InvalidRequest(
                f"env names given both as brokered secrets and as env: {', '.join(clash)}"
            )
        return setup

    def new_record(
        self,
        request: CreateRequest,
        template: str,
        resources: tuple[float, int, int],
        expires: float | None,
        *,
        env: dict[str, str],
        operation: str,
        parent_id: str | None = None,
    ) -> SandboxRecord:
        """The record of a sandbox about to be made for ``request`` (not yet stored)."""
        cpu, memory, disk = resources
        return SandboxRecord(
            id=new_sandbox_id(),
            state="creating",
            template=template,
            cpu=cpu,
            memory_mib=memory,
            disk_mib=disk,
            env=env,
            metadata=dict(request.metadata),
            created_at=time.time(),
            expires_at=expires,
            operation=operation,
            secret_keys=sorted(request.secret_env),
            on_timeout=request.on_timeout,
            auto_park_idle=request.auto_park_idle,
            auto_wake=request.auto_wake,
            parent_id=parent_id,
            last_active_at=time.time(),
            network=self.build_policy(request.network, request.allow, request.deny).dumps(),
            owner=access.new_owner(),
        )

    async def launch(
        self,
        record: SandboxRecord,
        template: TemplateRecord,
        *,
        image: str,
        env: dict[str, str],
        image_dir: Path | None,
        configure: bool,
        files: dict[str, str] | None = None,
    ) -> SandboxRecord:
        """Admit ``record``, pin it to ``image`` of ``template``, and boot it cold or restore
        ``image_dir`` (a warm template's or a snapshot's memory) into it. A restored sandbox's
        memory holds the env it was taken with: ``configure`` gives new processes ``env``. A
        cold one starts the template's start command. ``env``'s secret values (the record's
        ``secret_keys``) never go into the boot's configuration: the agent gets them over its
        link. On any failure nothing remains."""
        rootfs = self.templates.image_rootfs(image, template.name)
        await self.admit([record])
        self.templates.pin_image(record.id, template, image)
        secret = {k: v for k, v in env.items() if k in record.secret_keys}
        plain = {k: v for k, v in env.items() if k not in secret}
        async with self.lock(record.id):
            try:
                await self.boot(record, rootfs, plain, image_dir=image_dir)
                client = self._clients[record.id]
                if image_dir is not None and configure:
                    await client.set_env(env)
                elif secret:
                    await client.set_env(secret, merge=True)
                if self.secrets is not None and self.secrets.brokered(record.id):
                    await self.secrets.install(client, files or {})
                if image_dir is None and template.start_cmd:
                    # The template's start command (a Dockerfile's CMD/ENTRYPOINT, --start) runs
                    # in the background of every sandbox booted from it, tagged "start".
                    await client.start_process(
                        {
                            "cmd": list(template.start_cmd),
                            "cwd": template.workdir,
                            "user": template.user,
                            "tag": "start",
                            # recipes' servers (the code interpreter) are kept running
                            "restart": template.labels.get("corral.start.restart") == "always",
                        }
                    )
            except BaseException as exc:
                if record.id in self._clients:
                    await self.release_resources(record.id, self.slot_index_of(record.id))
                self.db.sandboxes.delete(record.id)
                if isinstance(exc, AgentError):
                    raise OperationFailed(f"configuring sandbox {record.id}: {exc}") from exc
                raise
            return self.db.sandboxes.update(record.id, state="running", operation=None)

    def injected_python(self) -> builtins.list[str]:
        """The daemon's own interpreter as injected read-only into every sandbox (``-I -S``):
        tools run with it never depend on, or trust, the image's programs."""
        argv = list(self._agent_mount.argv)
        for i, arg in enumerate(argv):
            if arg.endswith("/py/bin/python3"):
                return [*argv[: i + 1], "-I", "-S"]
        raise OperationFailed("the injected agent has no interpreter to run snapshot tools with")

    def remove_image(self, image_path: Path | str) -> None:
        """Remove a parked image directory, only if it lies inside the parked dir (a record's
        stored path is never trusted to name what may be deleted)."""
        try:
            target = inside(self.settings.data_dir / "parked", image_path)
        except PathEscape as exc:
            log.error("not removing image %s: %s", image_path, exc)
            return
        shutil.rmtree(target, ignore_errors=True)

    def rootfs_of(self, record: SandboxRecord) -> Path:
        """The root the sandbox's memory was made on: its pinned image, else its template's."""
        pinned = self.templates.rootfs_for(record.id)
        return pinned or self.templates.rootfs(self.templates.get(record.template))

    # ------------------------------------------------------------------------ boot machinery
    def spec_for(
        self,
        record: SandboxRecord,
        rootfs: Path,
        slot: Slot,
        env: dict[str, str],
        agent_key: str | None = None,
    ) -> SandboxSpec:
        agent = AgentMount(
            mounts=self._agent_mount.mounts,
            argv=self._agent_mount.argv,
            env=tuple(self._agent_mount.env) + tuple(env.items()),
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
            resolv_conf=self.resolv_conf(),
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
        OperationFailed is raised; the record itself is left to the caller. At most
        ``max_concurrent_boots`` run at once; the others wait their turn first."""
        async with self._boots:
            await self._boot(record, rootfs, env, image_dir=image_dir)

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
            slot = await self.network.lease()
            self.db.sandboxes.update(record.id, slot_index=slot.index)
            await self.network.prepare(slot)
            await self._attach_egress(record, slot)
            if image_dir is None or old_key is None:
                key = self.keys.issue(record.id)
                await self.runtime.start(self.spec_for(record, rootfs, slot, env, key))
            else:
                key = old_key
                await self.runtime.restore(self.spec_for(record, rootfs, slot, env), image_dir)
            client = self._connect_agent(record.id, slot)
            client.set_key(key)
            try:
                await client.wait_ready(self.settings.agent_ready_timeout)
                if old_key is not None:
                    await client.rekey(
                        self.keys.issue(record.id),
                        boot_id=secrets.token_hex(16),
                        seed=secrets.token_hex(32),
                    )
            except BaseException:
                await client.aclose()
                raise
            self._slots[record.id] = slot
            self._clients[record.id] = client
        except BaseException as exc:
            log.error("sandbox %s: %s failed: %s", record.id, verb, exc)
            await self.release_resources(record.id, slot.index if slot else None, slot)
            with contextlib.suppress(KeyError):
                self.db.sandboxes.update(record.id, slot_index=None)
            if isinstance(exc, CorralError | asyncio.CancelledError):
                raise
            raise OperationFailed(f"{verb} sandbox {record.id} failed: {exc}") from exc

    async def detach(self, sandbox_id: str) -> Slot | None:
        """Forget the live side of a sandbox whose runtime has already stopped (after a park):
        close its agent client and hand back its slot for the caller to release. Its agent's key
        stays only in the image (``checkpoint``)."""
        self.keys.forget(sandbox_id)
        client = self._clients.pop(sandbox_id, None)
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()
        try:
            self._names[sandbox_id] = await self.egress.detach(sandbox_id)
        except Exception as exc:
            log.error("sandbox %s: stopping its egress failed: %s", sandbox_id, exc)
        return self._slots.pop(sandbox_id, None)

    async def release_slot(self, sandbox_id: str, slot: Slot) -> None:
        try:
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
            await self._attach_egress(record, slot)
        except Exception as exc:  # it keeps running, reaching nothing until its policy is set
            log.error("sandbox %s: re-applying its network policy failed: %s", record.id, exc)
        self._slots[record.id] = slot
        client = self._connect_agent(record.id, slot)
        client.set_key(key)
        if image_key is not None:
            await self._finish_rekey(record.id, client, key, image_key)
        self._clients[record.id] = client
        log.info("sandbox %s: re-adopted (slot %d)", record.id, slot.index)
        return True

    async def _finish_rekey(
        self, sandbox_id: str, client: AgentClient, key: str, image_key: str
    ) -> None:
        try:
            if "boot_id" in await client.health():  # only answered in full to the right key
                return
            client.set_key(image_key)
            if "boot_id" in await client.health():
                await client.rekey(key, boot_id=secrets.token_hex(16), seed=secrets.token_hex(32))
                log.info("sandbox %s: finished the rekey an interrupted wake left", sandbox_id)
                return
        except AgentError as exc:
            log.error("sandbox %s: checking its agent key failed: %s", sandbox_id, exc)
        client.set_key(key)

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
    ) -> None:
        """Checkpoint a running sandbox into ``image_dir`` with its agent's key beside the memory
        (for the restore's rekey); the image is left 0600 files in 0700 dirs (it holds the
        sandbox's memory: its secrets, its agent's key)."""
        try:
            self.keys.put_in_image(sandbox_id, image_dir)
        except (KeyError, OSError) as exc:  # as the runtime's own failures: nothing changed
            raise RuntimeFailure(f"checkpointing sandbox {sandbox_id}: {exc}") from exc
        await self.runtime.checkpoint(
            sandbox_id, image_dir, leave_running=leave_running, defer_cleanup=defer_cleanup
        )
        await asyncio.to_thread(make_private, image_dir)

    # ------------------------------------------------------------------------------ kill
    async def kill(self, sandbox_id: str) -> None:
        """Stop a sandbox and free everything it holds. Killing a killed sandbox is a no-op."""
        record = self.get(sandbox_id)
        if record.state == "killed":
            return
        async with self.lock(sandbox_id):
            record = self.get(sandbox_id)
            if record.state == "killed":
                return
            self.db.sandboxes.update(sandbox_id, operation="killing")
            await self.release_resources(sandbox_id, record.slot_index)
            if record.image_path:
                self.remove_image(record.image_path)
            if self.secrets is not None:
                self.secrets.forget(sandbox_id)
            self.db.sandboxes.update(
                sandbox_id,
                state="killed",
                operation=None,
                slot_index=None,
                image_path=None,
                image_mib=0,
            )
        self._locks.pop(sandbox_id, None)

    def set_timeout(self, sandbox_id: str, seconds: int) -> SandboxRecord:
        """End a running or parked sandbox ``seconds`` from now (its ``on_timeout`` action)."""
        record = self.get(sandbox_id)
        require_state(record, "set the timeout of", "running", "parked")
        cap = self.policy.current().max_ttl_seconds
        if not 0 < seconds <= cap:
            raise InvalidRequest(f"timeout {seconds} s is outside 1..{cap} s")
        return self.db.sandboxes.update(sandbox_id, expires_at=time.time() + seconds)

    # ------------------------------------------------------------------------------ shared
    def lock(self, sandbox_id: str) -> asyncio.Lock:
        lock = self._locks.get(sandbox_id)
        if lock is None:
            lock = self._locks[sandbox_id] = asyncio.Lock()
        return lock

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
        await self._detach_egress(sandbox_id)
        self._names.pop(sandbox_id, None)
        slot = self._slots.pop(sandbox_id, None) or slot
        if slot is None and slot_index is not None:
            with contextlib.suppress(Exception):
                slot = await self.network.lease(slot_index)
        if slot is not None:
            try:
                await self.network.release(slot)
            except Exception as exc:
                log.error("sandbox %s: releasing slot %d failed: %s", sandbox_id, slot.index, exc)

    async def fail(self, sandbox_id: str, reason: str) -> None:
        """Record that a sandbox died, and free what it held."""
        record = self.db.sandboxes.get(sandbox_id)
        if record is None:
            return
        log.error("sandbox %s: %s", sandbox_id, reason)
        await self.release_resources(sandbox_id, record.slot_index)
        self.db.sandboxes.update(
            sandbox_id, state="error", error=reason, operation=None, slot_index=None
        )

    async def check_alive(self, record: SandboxRecord) -> None:
        try:
            info = await self.runtime.info(record.id)
        except RuntimeFailure as exc:
            log.warning("sandbox %s: runtime status unknown: %s", record.id, exc)
            return
        if info.status in (RuntimeStatus.RUNNING, RuntimeStatus.PAUSED):
            return
        async with self.lock(record.id):
            current = self.get(record.id)
            if current.state != "running" or current.operation:
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

    async def close_clients(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.aclose()
        self._clients.clear()
