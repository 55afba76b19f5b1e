"""The project's services: names (``db.project``) that every sandbox in a project mode
resolves (its own resolver answers them) and reaches on the service's ports. Admins add and
remove them; each change is applied at once to every running sandbox."""

from __future__ import annotations

import ipaddress
import logging
import re
import time

from corral.network.policy import PolicyError, ProjectService
from corral.service.errors import InvalidRequest, NotFound
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
    def __init__(self, sandboxes: SandboxService) -> None:
        self.sb = sandboxes
        self.db = sandboxes.db

    def list(self) -> list[ProjectServiceRecord]:
        return self.db.project_services.list()

    def start(self) -> None:
        self.sb.policies.egress.set_services(self._mechanism())

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
        record = ProjectServiceRecord(name, str(address), [int(match["port"])], time.time())
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
        for record in self.sb.list(states=["running"], include_pooled=True):
            if self.sb.live.slot_index_of(record.id) is None:
                continue
            try:
                await self.sb.policies.egress.update(record.id, self.sb.policies.of(record))
            except Exception as exc:
                log.error("sandbox %s: applying the project's services failed: %s", record.id, exc)
