"""Ready pools: N running sandboxes per template, waiting to be claimed.

A pooled sandbox is an ordinary running sandbox with ``pooled`` set: it reserves capacity like any
other, is hidden from listings, and survives a daemon restart like any other (reconcile re-adopts
it). ``claim`` hands one out at once when a request asks for nothing the pooled sandbox does not
already have (the template's resources; env and secrets are given to its agent on the way out),
and a background task per template refills the pool. A template rebuilt or removed has its pool
drained, so nobody gets a sandbox of an old image.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Coroutine
from typing import Any

from corral.runtime.agent_client import AgentError
from corral.service import access
from corral.service.audit import note_target
from corral.service.errors import CapacityExceeded, CorralError, NotFound
from corral.service.launch import Launcher
from corral.service.model import LIVE_STATES, CreateRequest, SandboxState
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.policy import NetworkPolicies
from corral.storage import SandboxRecord
from corral.timing import phase

log = logging.getLogger("corral.pools")

RETRY_SECONDS = 5.0
REFILL_DELAY = 0.5


class PoolService:
    """The ready pools of every template, and the background tasks refilling them."""

    def __init__(
        self,
        sandboxes: SandboxService,
        launcher: Launcher,
        admission: Admission,
        policies: NetworkPolicies,
    ) -> None:
        self.sandboxes = sandboxes
        self.templates = sandboxes.templates
        self.launcher = launcher
        self.admission = admission
        self.policies = policies
        self.db = sandboxes.db
        self._refills: dict[str, asyncio.Task[None]] = {}
        self._claim_lock = asyncio.Lock()
        self._stopping = False
        self._background: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for template in self.templates.list():
            if template.pool > 0:
                self.schedule(template.name)

    async def stop(self) -> None:
        """Stop refilling; pooled sandboxes stay running and are re-adopted at the next start."""
        self._stopping = True
        for task in list(self._refills.values()):
            task.cancel()
        for task in list(self._refills.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def pooled(self, template: str) -> list[SandboxRecord]:
        return self.db.sandboxes.list(
            states={SandboxState.RUNNING, SandboxState.CREATING}, pooled_in=template
        )

    def schedule(self, template: str, delay: float = 0.0) -> None:
        if self._stopping:
            return
        task = self._refills.get(template)
        if task is None or task.done():
            self._refills[template] = asyncio.get_running_loop().create_task(
                self._refill(template, delay), name=f"pool-{template}"
            )

    async def _refill(self, name: str, delay: float = 0.0) -> None:
        with access.as_system():  # pooled sandboxes are the workspace's, whoever claimed last
            await self._refill_as_system(name, delay)

    async def _refill_as_system(self, name: str, delay: float) -> None:
        # After a claim, let the caller's first calls run before a refill competes for the cpu.
        await asyncio.sleep(delay)
        while not self._stopping:
            try:
                template = self.templates.get(name)
            except NotFound:
                return
            if len(self.pooled(name)) >= template.pool:
                return
            try:
                record = await self.launcher.create(CreateRequest(template=name), pooled=True)
                await self._prime(record)
            except CapacityExceeded as exc:
                log.warning("pool %s: cannot refill: %s", name, exc)
                await asyncio.sleep(RETRY_SECONDS)
            except CorralError as exc:
                log.error("pool %s: refilling failed: %s", name, exc)
                await asyncio.sleep(RETRY_SECONDS)

    async def _prime(self, record: SandboxRecord) -> None:
        """Run one trivial command so the agent's exec path (its lazy imports, the control
        connection) is warm before the sandbox is handed out: its owner's first exec is then
        as fast as any other."""
        client = self.sandboxes.agent(record.id, "prime")
        with contextlib.suppress(AgentError):
            async for _event in client.stream_process({"cmd": ["true"]}, forget=True):
                pass

    async def claim(self, request: CreateRequest) -> SandboxRecord | None:
        """A pooled sandbox made into the caller's, or None when none fits the request."""
        try:
            template = self.templates.get(request.template)
        except NotFound:
            return None
        if template.pool <= 0:
            return None
        wanted = (
            request.cpu in (None, template.cpu)
            and request.memory_mib in (None, template.memory_mib)
            and request.disk_mib in (None, template.disk_mib)
            and self.policies.build(request.network, request.allow, request.deny)
            == self.policies.default()  # pooled sandboxes run the default policy
            and not request.secrets  # brokered sandboxes get the CA at boot
            and not request.secret_files
        )
        if not wanted:
            return None
        with phase("pool resolve"):
            *_, expires = self.admission.resolve(request)  # validates the rest
        # Under the admission lock, so no admission slips between the quota check and the
        # claim's commit. The pick reads only the pool's rows; every live record is read only
        # when the caller's key has quotas to check (a claim is a few ms with thousands parked).
        async with self._claim_lock, self.admission.lock:
            with phase("pool pick"):
                ready = [
                    r
                    for r in self.pooled(template.name)
                    if r.state == SandboxState.RUNNING and not r.operation
                ]
                if not ready:
                    self.schedule(template.name)
                    return None
                pick = ready[0]
                note_target(pick.id)
                self.admission.check_quotas(  # a claimed sandbox counts against its key's quotas
                    lambda: self.db.sandboxes.list(states=LIVE_STATES),
                    [dataclasses.replace(pick, owner=access.new_owner(), pooled=False)],
                    "this sandbox",
                )
            now = time.time()
            env = {**pick.env, **request.env}
            with phase("db update"):
                record = self.db.sandboxes.update(
                    pick.id,
                    pooled=False,
                    env=env,
                    metadata=dict(request.metadata),
                    created_at=now,
                    expires_at=expires,
                    secret_keys=sorted(request.secret_env),
                    on_timeout=request.on_timeout,
                    auto_park_idle=request.auto_park_idle,
                    auto_wake=request.auto_wake,
                    last_active_at=now,
                    owner=access.new_owner(),
                )
        self.schedule(template.name, delay=REFILL_DELAY)
        if not (request.env or request.secret_env):
            # The daemon's link to a pooled agent expires while the sandbox waits for a claim
            # (agent_http.IDLE_EXPIRY): reopen it beside the answer, not in the first call.
            with contextlib.suppress(CorralError):
                link = self.sandboxes.agent(record.id, "prepare", record)
                self._in_background(link.prepare_link())
        else:
            try:
                await self.sandboxes.thaw(record.id)
                await self.sandboxes.agent(record.id, "configure").set_env(
                    {**env, **request.secret_env}
                )
            except (AgentError, CorralError) as exc:
                await self.sandboxes.kill(record.id)
                log.error("pool %s: handing out %s failed: %s", template.name, record.id, exc)
                return None
        log.info("pool %s: handed out %s", template.name, record.id)
        return record

    def refresh(self, template: str) -> None:
        """A template was (re)built: replace its pooled sandboxes with ones of the new image."""
        if self._stopping:
            return

        async def run() -> None:
            with access.as_system():
                await self.drain(template)
                self.schedule(template)

        self._in_background(run(), name=f"pool-refresh-{template}")

    def _in_background(self, work: Coroutine[Any, Any, None], name: str | None = None) -> None:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def drain(self, template: str) -> None:
        """Kill the pooled sandboxes of ``template`` (it was rebuilt or is being removed)."""
        task = self._refills.pop(template, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for record in self.pooled(template):
            await self.sandboxes.kill(record.id)
            self.db.sandboxes.delete(record.id)
