"""The composition root: builds the store, mechanisms and services of one workspace.

``Workspace.open`` wires the real mechanisms (gVisor, network slots); tests pass fakes to
``Workspace(...)`` directly. Nothing here runs at import time.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from corral.at_rest import secure_data_dir
from corral.config import Settings
from corral.images import ImageStore
from corral.network.base import Network, Slot
from corral.network.broker import CertificateAuthority
from corral.network.broker.intercept import Broker
from corral.network.sandbox_net import EgressControl
from corral.runtime.agent_client import AgentClient
from corral.runtime.base import AgentMount, Runtime
from corral.service.audit import AuditLog
from corral.service.auth import ApiKeys
from corral.service.builds import TemplateBuilder
from corral.service.code import CodeService
from corral.service.console_sessions import ConsoleSessions
from corral.service.events import EventBus
from corral.service.files import FileService
from corral.service.lifecycle import LifecycleService
from corral.service.metrics import MetricsService
from corral.service.policy import PolicyService
from corral.service.pools import PoolService
from corral.service.ports import PortService
from corral.service.processes import ProcessService
from corral.service.project_services import ProjectServices
from corral.service.ratelimit import RateLimiter
from corral.service.sandboxes import SandboxService
from corral.service.secrets import SecretService
from corral.service.snapshots.service import SnapshotService
from corral.service.snapshots.transfer import TransferService
from corral.service.snapshots.trust import TrustService
from corral.service.templates import TemplateService
from corral.service.warm import WarmService
from corral.storage import Database
from corral.storage.sealing import Sealer

log = logging.getLogger("corral.workspace")

SPARE_SLOTS = 2  # network slots built ahead: a create does not wait ~20 ms for its slot


@dataclass
class Workspace:
    """Every service of one daemon, sharing one store, runtime and network."""

    settings: Settings
    db: Database
    api_keys: ApiKeys
    templates: TemplateService
    sandboxes: SandboxService
    processes: ProcessService
    files: FileService
    lifecycle: LifecycleService
    snapshots: SnapshotService
    transfer: TransferService
    trust: TrustService
    pools: PoolService
    services: ProjectServices
    code: CodeService
    ports: PortService
    secrets: SecretService
    metrics: MetricsService
    policy: PolicyService
    audit: AuditLog
    events: EventBus
    rate_limits: RateLimiter
    on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)
    console_sessions: ConsoleSessions = field(default_factory=ConsoleSessions)

    @classmethod
    def build(
        cls,
        settings: Settings,
        runtime: Runtime,
        network: Network,
        agent: AgentMount,
        connect_agent: Callable[[str, Slot], AgentClient] | None = None,
        egress: EgressControl | None = None,
    ) -> Workspace:
        secure_data_dir(settings.data_dir)
        db = Database(settings.db_path)
        images = ImageStore(settings.images_dir)
        templates = TemplateService(db, images, settings)
        sandboxes = SandboxService(
            settings, db, runtime, network, templates, agent, connect_agent, egress
        )
        templates.store.set_mount_points(
            [(dest, os.path.isdir(source)) for source, dest in agent.mounts]
            + [("/etc/resolv.conf", False)]  # the sandbox resolver's config (spec_for)
        )
        templates.builder = TemplateBuilder(
            settings, templates.store, runtime, network, agent, connect_agent
        )
        lifecycle = LifecycleService(sandboxes)
        snapshots = SnapshotService(sandboxes, lifecycle)
        warm = WarmService(sandboxes, lifecycle)
        pools = PoolService(sandboxes)
        trust = TrustService(db, settings.signing_key_path)
        ports = PortService(sandboxes)
        secret_service = SecretService(
            db, Sealer(settings.secrets_key_path), CertificateAuthority(settings.broker_dir)
        )
        sandboxes.secrets = secret_service
        sandboxes.egress.set_broker(
            Broker(
                secret_service.authority, secret_service, upstream_ca=settings.broker_upstream_ca
            )
        )
        sandboxes.pool_hook = pools.claim
        events = EventBus()
        db.sandboxes.listeners.append(events.sandbox_changed)
        templates.on_build_progress = events.build_progress
        templates.builder.egress = sandboxes.egress
        templates.builder.finish = warm.warm
        templates.builder.rollback = templates.forget
        templates.builder.hold = sandboxes.hold
        templates.builder.unhold = sandboxes.unhold
        templates.after_build = lambda template: pools.refresh(template.name)
        return cls(
            settings=settings,
            db=db,
            api_keys=ApiKeys(db),
            templates=templates,
            sandboxes=sandboxes,
            processes=ProcessService(sandboxes),
            files=FileService(sandboxes),
            lifecycle=lifecycle,
            snapshots=snapshots,
            transfer=TransferService(sandboxes, lifecycle, snapshots, trust),
            trust=trust,
            pools=pools,
            services=ProjectServices(sandboxes, ports),
            code=CodeService(sandboxes),
            ports=ports,
            secrets=secret_service,
            metrics=MetricsService(sandboxes),
            policy=sandboxes.policy,
            audit=AuditLog(db),
            events=events,
            rate_limits=RateLimiter(settings.key_rate_limit),
        )

    @classmethod
    def open(cls, settings: Settings) -> Workspace:
        """Wire the real runtime (gVisor) and network (slots) for ``settings``."""
        from corral.network import egress as host_egress
        from corral.network.conflicts import check_subnet_free
        from corral.network.sandbox_net import SlotEgressControl
        from corral.network.slots import SlotNetwork
        from corral.runtime.gvisor import GVisorRuntime
        from corral.runtime.inject import host_agent_mount

        check_subnet_free(settings.network_prefix, settings.network_subnet)
        runtime = GVisorRuntime(
            settings.sandboxes_dir,
            runsc=settings.runsc,
            platform=settings.runsc_platform,
            console_kib=settings.console_log_kib,
        )
        uplinks: tuple[str, ...] = ()
        if settings.egress_allowed:  # forwarding and masquerade only if some mode needs them
            named = tuple(n.strip() for n in settings.egress_uplinks.split(",") if n.strip())
            uplinks = named or host_egress.uplink_interfaces()
        network = SlotNetwork(
            prefix=settings.network_prefix,
            subnet=settings.network_subnet,
            spare=SPARE_SLOTS,
            egress_uplinks=uplinks,
        )
        egress = SlotEgressControl(
            network, upstreams=settings.dns_upstream_list, internet=settings.egress_allowed
        )
        agent = host_agent_mount(compiled_dir=settings.data_dir / "agent")
        workspace = cls.build(settings, runtime, network, agent, egress=egress)

        async def close_network() -> None:
            await egress.close()
            # Sandboxes left running keep their slots and the host rules that fence them in;
            # with none left, nothing of the daemon's may stay in the host's network.
            if network.leased:
                await network.close_spares()
            else:
                await network.close()
                runtime.close()

        workspace.on_stop.append(close_network)
        workspace.on_stop.append(workspace.templates.close)
        return workspace

    async def start(self) -> None:
        self.events.bind(asyncio.get_running_loop())
        self.audit.start()
        self.api_keys.ensure_admin_key(self.settings.admin_key_path)
        self.trust.start()
        self.templates.sync()
        self.services.start()
        await self.secrets.start()
        await self.snapshots.start()
        await self.lifecycle.start()
        await self.pools.start()

    async def stop(self) -> None:
        await self.pools.stop()
        await self.lifecycle.stop()
        await self.code.aclose()
        await self.audit.stop()
        await self.secrets.stop()
        for hook in self.on_stop:
            try:
                await hook()
            except Exception:
                log.exception("stopping the workspace: %s failed", hook)
        self.db.close()
