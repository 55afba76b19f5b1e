"""The composition root of the service: builds the store and every service of one workspace
over the mechanisms it is given, each service handed its collaborators at construction.

``corral.daemon.open_workspace`` gives it the real mechanisms (gVisor, network slots); tests give
it fakes (``Workspace.build``). Nothing here runs at import time.
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
from corral.images.cas import ContentStore
from corral.network.base import Network
from corral.network.broker import CertificateAuthority
from corral.network.broker.intercept import Broker
from corral.network.sandbox_net import EgressFactory, EgressWiring, FakeEgress
from corral.network.service_routes import ServiceRoutes
from corral.runtime.base import AgentMount, Runtime
from corral.service.audit import AuditLog
from corral.service.auth import ApiKeys
from corral.service.builds import BuildService, TemplateBuilder
from corral.service.code import CodeService
from corral.service.console_sessions import ConsoleSessions
from corral.service.create import SandboxCreator
from corral.service.events import EventBus
from corral.service.files import FileService
from corral.service.launch import Launcher
from corral.service.lifecycle import LifecycleService
from corral.service.lifecycle.fork import ForkService
from corral.service.lifecycle.monitor import Monitor
from corral.service.lifecycle.park import ParkService
from corral.service.lifecycle.reconcile import Reconciler
from corral.service.lifecycle.wake import WakeService
from corral.service.metrics import MetricsService
from corral.service.policy import PolicyService
from corral.service.pools import PoolService
from corral.service.ports import PortService
from corral.service.processes import ProcessService
from corral.service.project_services import ProjectServices
from corral.service.ratelimit import RateLimiter
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity
from corral.service.sandboxes.admission import Admission
from corral.service.sandboxes.agents import ConnectAgent
from corral.service.sandboxes.freezer import Freezer
from corral.service.sandboxes.live import LiveSandboxes
from corral.service.sandboxes.policy import NetworkPolicies
from corral.service.secrets import SecretService
from corral.service.snapshots.service import SnapshotService
from corral.service.snapshots.transfer import TransferService
from corral.service.snapshots.trust import TrustService
from corral.service.templates import TemplateService
from corral.service.warm import WarmService
from corral.storage import Database
from corral.storage.sealing import Sealer

log = logging.getLogger("corral.workspace")


@dataclass
class Workspace:
    """Every service of one daemon, sharing one store, runtime and network."""

    settings: Settings
    db: Database
    api_keys: ApiKeys
    templates: TemplateService
    builds: BuildService
    sandboxes: SandboxService
    admission: Admission
    creator: SandboxCreator
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
    # What stops the mechanisms under the service, last (the daemon's; tests' fakes need none).
    close_mechanisms: Callable[[], Awaitable[None]] | None = None
    console_sessions: ConsoleSessions = field(default_factory=ConsoleSessions)

    @classmethod
    def build(
        cls,
        settings: Settings,
        runtime: Runtime,
        network: Network,
        agent: AgentMount,
        connect_agent: ConnectAgent | None = None,
        egress: EgressFactory | None = None,
        close_mechanisms: Callable[[], Awaitable[None]] | None = None,
    ) -> Workspace:
        """Every service over the given mechanisms, each given what it uses at construction,
        lowest first (the daemon passes the real ones, ``corral.daemon``; tests pass fakes).
        ``egress`` makes the egress control once what it needs of the service (the broker, the
        routes to sandbox services) exists; without it, a ``FakeEgress``."""
        secure_data_dir(settings.data_dir)
        events = EventBus()  # told of every sandbox change the store commits
        db = Database(settings.db_path, on_sandbox_change=events.sandbox_changed)
        images = ImageStore(settings.images_dir)
        store = ContentStore(
            settings.data_dir / "store",
            images,
            mount_points=[(dest, os.path.isdir(source)) for source, dest in agent.mounts]
            + [("/etc/resolv.conf", False)],  # the sandbox resolver's config (spec_for)
        )
        templates = TemplateService(db, images, settings, store)
        secret_service = SecretService(
            db, Sealer(settings.secrets_key_path), CertificateAuthority(settings.broker_dir)
        )
        workspace_policy = PolicyService(db, settings)
        broker = Broker(
            secret_service.authority, secret_service, upstream_ca=settings.broker_upstream_ca
        )
        routes = ServiceRoutes()  # the egress proxy asks, ProjectServices answers
        egress_control = egress(EgressWiring(broker, routes)) if egress else FakeEgress()
        policies = NetworkPolicies(settings, workspace_policy, egress_control)
        admission = Admission(settings, db, runtime.name, templates, policies, workspace_policy)
        activity = Activity()
        freezer = Freezer(runtime)
        live = LiveSandboxes(
            settings, db, runtime, network, agent, policies, freezer, connect_agent
        )
        sandboxes = SandboxService(
            settings,
            db,
            runtime,
            templates,
            live,
            policies,
            workspace_policy,
            activity,
            freezer,
            secrets=secret_service,
        )
        launcher = Launcher(
            db, templates, sandboxes, admission, live, policies, secrets=secret_service
        )
        pools = PoolService(sandboxes, launcher, admission, policies)
        creator = SandboxCreator(launcher, pools)
        parks = ParkService(settings, db, runtime, sandboxes, live, admission)
        wakes = WakeService(settings, db, sandboxes, live, admission, activity)
        forks = ForkService(
            settings,
            db,
            templates,
            sandboxes,
            live,
            admission,
            policies,
            launcher,
            secrets=secret_service,
        )
        lifecycle = LifecycleService(
            parks,
            wakes,
            forks,
            Reconciler(settings, db, runtime, sandboxes, live),
            Monitor(settings, db, sandboxes, parks, activity),
            live,
        )
        snapshots = SnapshotService(
            settings,
            db,
            runtime,
            templates,
            sandboxes,
            live,
            admission,
            policies,
            launcher,
            creator,
            secrets=secret_service,
        )
        warm = WarmService(settings, templates, sandboxes, live, launcher)
        trust = TrustService(db, settings.signing_key_path)
        builder = TemplateBuilder(settings, templates.store, live, admission)
        builds = BuildService(
            settings, templates, builder, warm, pools, on_progress=events.build_progress
        )
        ports = PortService(sandboxes, wakes, activity)
        return cls(
            settings=settings,
            db=db,
            api_keys=ApiKeys(db),
            templates=templates,
            builds=builds,
            sandboxes=sandboxes,
            admission=admission,
            creator=creator,
            processes=ProcessService(sandboxes, wakes, activity),
            files=FileService(sandboxes, wakes, activity),
            lifecycle=lifecycle,
            snapshots=snapshots,
            transfer=TransferService(settings, sandboxes, admission, snapshots, trust),
            trust=trust,
            pools=pools,
            services=ProjectServices(sandboxes, ports, routes),
            code=CodeService(sandboxes, wakes, activity),
            ports=ports,
            secrets=secret_service,
            metrics=MetricsService(sandboxes),
            policy=workspace_policy,
            audit=AuditLog(db),
            events=events,
            rate_limits=RateLimiter(settings.key_rate_limit),
            close_mechanisms=close_mechanisms,
        )

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
        await self.services.stop()
        await self.code.aclose()
        await self.audit.stop()
        await self.secrets.stop()
        # Running builds first (they clean up after themselves), then the image views, the
        # sandboxes' egress, and the mechanisms under everything.
        closers: list[Callable[[], Awaitable[None]]] = [
            self.builds.close,
            self.templates.close,
            self.sandboxes.policies.egress.close,
        ]
        if self.close_mechanisms is not None:
            closers.append(self.close_mechanisms)
        for close in closers:
            try:
                await close()
            except Exception:
                log.exception("stopping the workspace: %s failed", close)
        self.db.close()
