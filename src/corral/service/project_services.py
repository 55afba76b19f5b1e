"""The project's services: names (``db.project``) that every sandbox in a project mode
resolves (its own resolver answers them) and reaches on the service's ports. Admins add and
remove them; each change is applied at once to every running sandbox.

A service is an address the daemon reaches (``add``), or a port of a sandbox (``add_sandbox``:
a fake Stripe for agents to test against). The latter gets a virtual address in
``SANDBOX_SERVICE_NET`` that its name resolves to; nothing routes it: the sandboxes' egress proxy
takes those connections and ``route`` says where they go, the target sandbox's slot address and
port, waking it first when it is parked with auto-wake (the same step as an inbound request)."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import re
import time

from corral.network.policy import SANDBOX_SERVICE_NET, PolicyError, ProjectService
from corral.network.service_routes import ServiceRoutes
from corral.service.errors import CorralError, InvalidRequest, NotFound, StateConflict
from corral.service.model import LIVE_STATES, SandboxState
from corral.service.ports import PortService
from corral.service.sandboxes import SandboxService
from corral.storage import ProjectServiceRecord

log = logging.getLogger("corral.services")

MAX_SERVICES = 256
_TARGET = re.compile(r"^(?P<address>[0-9.]{7,15}):(?P<port>[0-9]{1,5})$")
# Never a service: what no sandbox may be pointed at by a name (loopback, link-local and
# metadata, "this network", multicast and reserved).
_REFUSED = tuple(
    ipaddress.IPv4Network(net)
    for net in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4")
)


class ProjectServices:
    """The project's services, and the answers to the egress proxy's ``routes`` (served from
    ``start`` to ``stop``)."""

    def __init__(
        self, sandboxes: SandboxService, ports: PortService, routes: ServiceRoutes
    ) -> None:
        self.sb = sandboxes
        self.db = sandboxes.db
        self.ports = ports
        self.routes = routes
        self._serving: asyncio.Task[None] | None = None

    def list(self) -> list[ProjectServiceRecord]:
        return self.db.project_services.list()

    def start(self) -> None:
        self.sb.policies.egress.set_services(self._mechanism())
        self._serving = asyncio.get_running_loop().create_task(
            self.routes.serve(self.route), name="service-routes"
        )

    async def stop(self) -> None:
        if self._serving is not None:
            self._serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
            self._serving = None

    async def route(self, sandbox_id: str, address: str, port: int) -> tuple[str, int]:
        """Where a connection of ``sandbox_id`` to a sandbox service's ``address`` goes; raises
        LookupError (the proxy then resets the connection) when it cannot go anywhere now."""
        record = next(
            (r for r in self.list() if r.sandbox_id and r.address == address and port in r.ports),
            None,
        )
        if record is None or record.sandbox_id is None:
            raise LookupError(f"no sandbox service at {address}:{port}")
        try:
            target = await self.ports.resolve_inbound(record.sandbox_id, port)
        except CorralError as exc:
            raise LookupError(f"service {record.name}: {exc.message}") from None
        return target.address, target.port

    async def add_sandbox(self, name: str, sandbox_id: str, port: int) -> ProjectServiceRecord:
        """Add (or replace) service ``name``: ``port`` of sandbox ``sandbox_id``, which the
        other sandboxes reach as ``name:port`` (TCP)."""
        name = name.strip().lower().rstrip(".")
        target = self.sb.get(sandbox_id)
        if target.state not in LIVE_STATES:
            raise StateConflict(
                f"cannot make sandbox {sandbox_id} in state {target.state} a project service"
            )
        if not 1 <= port <= 65535:
            raise InvalidRequest(f"service {name!r}: port {port} is out of range 1-65535")
        known = {r.name: r for r in self.list()}
        if name not in known and len(known) >= MAX_SERVICES:
            raise InvalidRequest(f"a workspace holds at most {MAX_SERVICES} project services")
        current = known.get(name)
        if current is not None and current.sandbox_id is not None:
            address = current.address  # keep its address: sandboxes may have it cached
        else:
            taken = {r.address for r in known.values()}
            free = (str(a) for a in SANDBOX_SERVICE_NET.hosts() if str(a) not in taken)
            address = next(free, "")
            if not address:
                raise InvalidRequest("every virtual address for sandbox services is taken")
        try:
            ProjectService(name, address, (port,))
        except (PolicyError, ValueError) as exc:
            raise InvalidRequest(f"service {name!r}: {exc}") from exc
        record = ProjectServiceRecord(name, address, [port], time.time(), sandbox_id)
        self.db.project_services.put(record)
        await self._apply()
        return record

    async def add(self, name: str, target: str) -> ProjectServiceRecord:
        """Add (or replace) service ``name`` at ``target`` (``IPV4:PORT``)."""
        name = name.strip().lower().rstrip(".")
        match = _TARGET.match(target.strip())
        if match is None:
            raise InvalidRequest(f"service target {target!r} is not IPV4:PORT (e.g. 10.1.2.3:5432)")
        try:
            address = ipaddress.IPv4Address(match["address"])
        except ValueError:
            raise InvalidRequest(f"service target {target!r}: not an IPv4 address") from None
        if any(address in net for net in _REFUSED) or address in self.sb.policies.subnet():
            raise InvalidRequest(
                f"service {name!r}: {address} is a loopback, link-local, multicast, reserved or "
                "slot address, which no sandbox may be pointed at"
            )
        try:
            ProjectService(name, str(address), (int(match["port"]),))
        except (PolicyError, ValueError) as exc:
            raise InvalidRequest(f"service {name!r}: {exc}") from exc
        known = {r.name for r in self.list()}
        if name not in known and len(known) >= MAX_SERVICES:
            raise InvalidRequest(f"a workspace holds at most {MAX_SERVICES} project services")
        record = ProjectServiceRecord(name, str(address), [int(match["port"])], time.time(), None)
        self.db.project_services.put(record)
        await self._apply()
        return record

    async def remove(self, name: str) -> None:
        if not self.db.project_services.delete(name.strip().lower().rstrip(".")):
            raise NotFound(f"project service {name!r} not found")
        await self._apply()

    def _mechanism(self) -> tuple[ProjectService, ...]:
        return tuple(ProjectService(r.name, r.address, tuple(r.ports)) for r in self.list())

    async def _apply(self) -> None:
        self.sb.policies.egress.set_services(self._mechanism())
        for record in self.sb.list(states=[SandboxState.RUNNING], include_pooled=True):
            if self.sb.live.slot_index_of(record.id) is None:
                continue
            try:
                await self.sb.policies.egress.update(record.id, self.sb.policies.of(record))
            except Exception as exc:
                log.error("sandbox %s: applying the project's services failed: %s", record.id, exc)
