"""Launch: make one new sandbox and boot it, cold or from a memory image.

``Launcher.create`` decides warm or cold for a request (a warm template's sandboxes restore its
warmed memory); ``launch`` admits a record, pins it to its image and boots it, giving its agent
the secrets, brokered secret files and start command. A sandbox that fails to launch leaves
nothing behind: no record, runtime, slot or secret binding. The ready pools (``pools.py``)
launch their sandboxes here; ``create.py`` puts the pools in front.
"""

from __future__ import annotations

import time
from pathlib import Path

from corral.runtime.agent_client import AgentError
from corral.service import access
from corral.service.errors import InvalidRequest, OperationFailed
from corral.service.images import image_complete
from corral.service.model import CreateRequest, ExecSpec, Operation, SandboxState, new_sandbox_id
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.sandboxes.policy import NetworkPolicies
from corral.service.secrets import BrokeredSetup, SecretService
from corral.service.templates import TemplateService
from corral.storage import Database, SandboxRecord, TemplateRecord
from corral.timing import phase

__all__ = ["Launcher"]


class Launcher:
    """Makes new sandboxes (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        templates: TemplateService,
        sandboxes: SandboxService,
        admission: Admission,
        live: LiveSandboxes,
        policies: NetworkPolicies,
        secrets: SecretService | None = None,
    ) -> None:
        self.db = db
        self.templates = templates
        self.sandboxes = sandboxes
        self.admission = admission
        self.live = live
        self.policies = policies
        self.secrets = secrets

    async def create(
        self, request: CreateRequest, *, pooled: bool = False, cold: bool = False
    ) -> SandboxRecord:
        """A new sandbox restored from the template's warm image, else booted cold (``cold``
        forces that, for warmups); ``pooled`` makes it one of the template's ready pool."""
        cpu, memory, disk, expires = self.admission.resolve(request)
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
            request,
            template.name,
            (cpu, memory, disk),
            expires,
            env=env,
            operation=Operation.CREATING,
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
        operation: Operation,
        parent_id: str | None = None,
        network: str | None = None,
    ) -> SandboxRecord:
        """The record of a sandbox about to be made for ``request`` (not yet stored);
        ``network``: a stored policy to keep (a fork's), else the request's."""
        cpu, memory, disk = resources
        return SandboxRecord(
            id=new_sandbox_id(),
            state=SandboxState.CREATING,
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
            owner=access.new_owner(),
            network=network
            or self.policies.build(request.network, request.allow, request.deny).dumps(),
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
        pins = self.templates.pins_for([record.id], template, image)
        with phase("admit"):
            await self.admission.admit([record], pins)  # one commit for the record and its pin
        self.templates.pinned(pins)
        secret = {k: v for k, v in env.items() if k in record.secret_keys}
        plain = {k: v for k, v in env.items() if k not in secret}
        async with self.sandboxes.lock(record.id):
            try:
                await self.live.boot(record, rootfs, plain, image_dir=image_dir)
                client = self.live.require_client(record.id)
                if image_dir is not None and configure:
                    with phase("agent env"):
                        await client.set_env(env)
                elif secret:
                    await client.set_env(secret, merge=True)
                if self.secrets is not None and self.secrets.brokered(record.id):
                    await self.secrets.install(client, files or {})
                if image_dir is None and template.start_cmd:
                    # The template's start command (a Dockerfile's CMD/ENTRYPOINT, --start) runs
                    # in the background of every sandbox booted from it, tagged "start".
                    await client.start_process(
                        ExecSpec(
                            cmd=list(template.start_cmd),
                            cwd=template.workdir,
                            user=template.user,
                            tag="start",
                            # recipes' servers (the code interpreter) are kept running
                            restart=template.labels.get("corral.start.restart") == "always",
                        ).to_wire()
                    )
            except BaseException as exc:
                if self.live.client(record.id) is not None:
                    await self.live.release_resources(record.id, self.live.slot_index_of(record.id))
                self.db.sandboxes.delete(record.id)
                if isinstance(exc, AgentError):
                    raise OperationFailed(f"configuring sandbox {record.id}: {exc}") from exc
                raise
            return self.db.sandboxes.update(
                record.id,
                state=SandboxState.RUNNING,
                operation=None,
                slot_index=self.live.slot_index_of(record.id),
            )
