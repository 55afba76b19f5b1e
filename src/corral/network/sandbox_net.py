"""Egress of live sandboxes: the one place that drives the per-slot egress table, the resolver
and the proxy together (``egress``, ``resolver``, ``proxy``) for the service layer.

``EgressControl`` is the Protocol the service uses; ``SlotEgressControl`` the real one (over a
``SlotNetwork``'s slots), ``FakeEgress`` an in-memory one for unit tests.

Lifecycle of one sandbox: ``attach`` after its slot is prepared (start, wake, restore, fork,
adopt), ``update`` for a live policy change, ``detach`` before its slot is released (park, kill,
failure). A slot without ``attach`` reaches nothing but the daemon's control link. ``attach`` is
idempotent: a second call re-commits the policy. A first ``attach`` that fails leaves nothing
of the sandbox's: no listener and no egress table (its slot drops everything it sends again).

Resolved names (what the proxy lets name rules through to) travel with the sandbox: ``detach``
returns them, ``attach`` takes them back (a wake or fork continues with the answers its memory
may still cache).

What the egress needs of the service layer comes at construction, in ``EgressWiring``: the
workspace builds it (the credential broker, the routes to sandbox services) and calls the
daemon's ``EgressFactory`` with it, so nothing is set on the egress control afterwards.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from corral.network import egress_apply, slot_plan, slots
from corral.network.base import INNER_GATEWAY, NetworkFailure, Slot
from corral.network.broker.intercept import Broker
from corral.network.egress import EgressContext, SlotEgress, fast_ports
from corral.network.fast_path import FastPath
from corral.network.namespaces import run_in_netns
from corral.network.policy import EgressPolicy, ProjectService
from corral.network.proxy import EgressProxy, bind_listener
from corral.network.resolver import SandboxResolver, bind_listeners
from corral.network.sandbox_egress import SandboxEgress
from corral.network.service_routes import ServiceRoutes
from corral.timing import phase

__all__ = [
    "EgressControl",
    "EgressFactory",
    "EgressWiring",
    "FakeEgress",
    "Names",
    "SlotEgressControl",
    "write_resolv_conf",
]

log = logging.getLogger(__name__)

Names = list[tuple[str, str, float]]
PROXY_PORT = 15001


def write_resolv_conf(directory: Path) -> str:
    """The host file bind-mounted read-only at every sandbox's /etc/resolv.conf: the
    sandbox's own resolver on its slot's gateway (written when missing or different)."""
    path = directory / "resolv.conf"
    text = f"nameserver {INNER_GATEWAY}\noptions timeout:2 attempts:2\n"
    if not path.is_file() or path.read_text() != text:
        directory.mkdir(parents=True, exist_ok=True, mode=0o755)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    return str(path)


class EgressControl(Protocol):
    async def attach(
        self,
        sandbox_id: str,
        slot: Slot,
        policy: EgressPolicy,
        names: Names | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        """``fresh``: the slot was built by this daemon for this lease and its sandbox has not
        run yet, so no flow can be tracked in it (nothing to forget) and its slot table and
        route are current (only the egress table is made)."""

    async def update(self, sandbox_id: str, policy: EgressPolicy) -> int:
        """Apply a new policy to an attached sandbox; returns how many flows were cut."""
        ...

    async def detach(self, sandbox_id: str) -> Names: ...

    def names(self, sandbox_id: str) -> Names: ...

    def attached(self, sandbox_id: str) -> bool: ...

    def set_services(self, services: tuple[ProjectService, ...]) -> None:
        """The project's services now (live data, like ``update``'s policy): for sandboxes
        attached or updated from now on."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class EgressWiring:
    """What the service layer gives the egress control it is built with: the credential
    broker (a sandbox with brokered secrets has its TLS egress sent through it) and the routes
    its proxy asks where connections to sandbox services go."""

    broker: Broker
    routes: ServiceRoutes


EgressFactory = Callable[[EgressWiring], EgressControl]


@dataclass
class _Attached:
    slot: Slot
    box: SandboxEgress


class SlotEgressControl:
    """The real ``EgressControl``. ``upstreams``: the resolvers the sandboxes' DNS is forwarded
    to. ``internet``: whether any sandbox may use an internet mode (then the daemon's namespace
    forwards IPv4, once, at the first attach). ``wiring``: the broker (a sandbox with brokered
    secrets has its TLS egress sent through the proxy) and the routes to sandbox services."""

    def __init__(
        self,
        network: slots.SlotNetwork,
        wiring: EgressWiring,
        *,
        upstreams: list[str] | None = None,
        internet: bool = True,
    ) -> None:
        self._network = network
        self._internet = internet
        self._resolver = SandboxResolver(upstreams)
        self._proxy = EgressProxy(broker=wiring.broker, routes=wiring.routes)
        self._fast = FastPath()
        self._attached: dict[str, _Attached] = {}
        self._host_addresses: tuple[str, ...] | None = None
        self._services: tuple[ProjectService, ...] = ()
        self._start_lock = asyncio.Lock()
        self._broker = wiring.broker

    def _intercepts(self, sandbox_id: str) -> bool:
        return bool(self._broker.source.injections(sandbox_id))

    def set_services(self, services: tuple[ProjectService, ...]) -> None:
        """The project's services, for sandboxes attached or updated from now on."""
        self._services = services

    async def _context(self) -> EgressContext:
        async with self._start_lock:
            if self._host_addresses is None:
                if self._internet:
                    await asyncio.to_thread(egress_apply.enable_host_forwarding)
                self._host_addresses = await asyncio.to_thread(egress_apply.host_ipv4_addresses)
        return EgressContext(
            str(self._network.plan.subnet),
            host_addresses=self._host_addresses,
            services=self._services,
            proxy_port=PROXY_PORT,
        )

    async def _rules(self, slot: Slot, ctx: EgressContext, box: SandboxEgress) -> SlotEgress:
        """The slot's egress ruleset for ``box``'s policy (with host-name rules, the fast path
        reads its queue first: it must be read before the table marks for it)."""
        intercept = self._intercepts(box.sandbox_id)
        if fast_ports(box.policy, intercept):
            await self._fast.serve(box)
        plan = self._network.plan
        return SlotEgress(
            plan.table,
            slot_plan.UPLINK,
            slot_plan.DOWNLINK,
            plan.layout(slot.index).slot_address,
            box.policy,
            ctx,
            intercept=intercept,
        )

    async def _apply(self, slot: Slot, ctx: EgressContext, box: SandboxEgress) -> int:
        """Re-commit an attached sandbox's rules (``attach`` again, ``update``)."""
        rules = await self._rules(slot, ctx, box)
        layout = self._network.plan.layout(slot.index)
        return await asyncio.to_thread(
            egress_apply.apply_slot_egress,
            layout.slot_ns,
            rules,
            layout.host_side_address,
            keep=self._fast.keep(box.sandbox_id),
        )

    async def _enter(
        self, slot: Slot, ctx: EgressContext, box: SandboxEgress, *, fresh: bool
    ) -> None:
        """A first attach, in one thread hop into the slot namespace: the resolver's and the
        proxy's sockets are bound there, then the rules committed (a port taken fails the
        attach before any rule is made); the listeners are served once the rules are in."""
        rules = await self._rules(slot, ctx, box)
        layout = self._network.plan.layout(slot.index)
        keep = self._fast.keep(box.sandbox_id)

        def inside() -> tuple[tuple[socket.socket, socket.socket], socket.socket]:
            made: list[socket.socket] = []
            try:
                pair = bind_listeners()
                made += pair
                made.append(bind_listener(ctx.proxy_port))
                egress_apply.commit_slot_egress(
                    rules, layout.host_side_address, fresh=fresh, keep=keep
                )
            except BaseException:
                for sock in made:
                    sock.close()
                raise
            return pair, made[2]

        with phase("egress commit"):  # the hop: the binds and the rules, through the worker
            sockets = await asyncio.to_thread(run_in_netns, layout.slot_ns, inside)
        resolver_pair, proxy_sock = sockets
        with phase("egress listen"):
            try:
                await self._resolver.serve(box, bound=resolver_pair)
            finally:
                await self._proxy.serve(box, bound=proxy_sock)  # it owns its socket either way

    async def attach(
        self,
        sandbox_id: str,
        slot: Slot,
        policy: EgressPolicy,
        names: Names | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        ctx = await self._context()
        current = self._attached.get(sandbox_id)
        if current is not None and current.slot == slot:
            box = current.box
            box.update(policy, ctx)
            await self._apply(slot, ctx, box)
            self._proxy.recheck(sandbox_id)
            return
        if current is not None:
            await self.detach(sandbox_id)
        layout = self._network.plan.layout(slot.index)
        box = SandboxEgress(sandbox_id, layout.slot_ns, policy, ctx)
        if names:
            box.names.load(names)
        # Runs to its end even when this call is cancelled, so a failure is cleaned up only
        # once nothing is in flight.
        entering = asyncio.ensure_future(self._enter(slot, ctx, box, fresh=fresh))
        try:
            await asyncio.wait({entering})
            entering.result()
        except BaseException:
            await asyncio.wait({entering})
            await self._undo(sandbox_id, layout.slot_ns)
            raise
        self._attached[sandbox_id] = _Attached(slot, box)

    async def _undo(self, sandbox_id: str, slot_ns: str) -> None:
        """After a failed attach: no listener of the sandbox's, and no egress table in its slot,
        which then drops everything its sandbox sends again (never raises: logs)."""
        await self._fast.stop(sandbox_id)
        await self._resolver.stop(sandbox_id)
        await self._proxy.stop(sandbox_id)
        try:
            await asyncio.to_thread(
                egress_apply.remove_slot_egress, slot_ns, self._network.plan.table
            )
        except NetworkFailure as exc:
            log.error("sandbox %s: removing its egress after a failed attach: %s", sandbox_id, exc)

    async def update(self, sandbox_id: str, policy: EgressPolicy) -> int:
        attached = self._attached.get(sandbox_id)
        if attached is None:
            return 0
        ctx = await self._context()
        attached.box.update(policy, ctx)
        cut = await self._apply(attached.slot, ctx, attached.box)
        return cut + self._proxy.recheck(sandbox_id)

    def names(self, sandbox_id: str) -> Names:
        attached = self._attached.get(sandbox_id)
        return attached.box.names.export() if attached else []

    def attached(self, sandbox_id: str) -> bool:
        return sandbox_id in self._attached

    async def detach(self, sandbox_id: str) -> Names:
        attached = self._attached.pop(sandbox_id, None)
        if attached is None:
            return []
        names = attached.box.names.export()
        await self._fast.stop(sandbox_id)
        await self._proxy.stop(sandbox_id)
        await self._resolver.stop(sandbox_id)
        return names

    async def close(self) -> None:
        await self._fast.close()
        await self._proxy.close()
        await self._resolver.close()
        self._attached.clear()


@dataclass
class FakeEgress:
    """Records what the service asked for: ``policies`` of the attached sandboxes."""

    policies: dict[str, EgressPolicy] = field(default_factory=dict)
    slots: dict[str, int] = field(default_factory=dict)
    saved: dict[str, Names] = field(default_factory=dict)
    fresh: dict[str, bool] = field(default_factory=dict)  # of each sandbox's last attach
    services: tuple[ProjectService, ...] = ()

    async def attach(
        self,
        sandbox_id: str,
        slot: Slot,
        policy: EgressPolicy,
        names: Names | None = None,
        *,
        fresh: bool = False,
    ) -> None:
        self.policies[sandbox_id] = policy
        self.slots[sandbox_id] = slot.index
        self.fresh[sandbox_id] = fresh

    async def update(self, sandbox_id: str, policy: EgressPolicy) -> int:
        if sandbox_id in self.policies:
            self.policies[sandbox_id] = policy
        return 0

    def names(self, sandbox_id: str) -> Names:
        return list(self.saved.get(sandbox_id, []))

    def attached(self, sandbox_id: str) -> bool:
        return sandbox_id in self.policies

    async def detach(self, sandbox_id: str) -> Names:
        self.policies.pop(sandbox_id, None)
        self.slots.pop(sandbox_id, None)
        return self.names(sandbox_id)

    def set_services(self, services: tuple[ProjectService, ...]) -> None:
        self.services = services

    async def close(self) -> None:
        self.policies.clear()
