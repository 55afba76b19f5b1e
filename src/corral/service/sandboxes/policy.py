"""Network policies of sandboxes: building one from caller input (only in the workspace's
allowed modes), reading a sandbox's stored one, and attaching it to (or detaching it from) the
sandbox's slot through the egress control.

A parked sandbox keeps the names its resolver had resolved (``_names``) so that its flows find
the same addresses when it wakes; a fork's children start with their parent's.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable

from corral.config import Settings
from corral.network.base import Slot
from corral.network.policy import EgressPolicy, NetworkMode, PolicyError
from corral.network.sandbox_net import EgressControl, FakeEgress, Names, write_resolv_conf
from corral.service.errors import InvalidRequest
from corral.service.policy import PolicyService
from corral.storage import SandboxRecord

__all__ = ["NetworkPolicies"]

log = logging.getLogger("corral.sandboxes")


class NetworkPolicies:
    """The egress side of every sandbox: its policy and its attachment to its slot."""

    def __init__(
        self,
        settings: Settings,
        workspace_policy: PolicyService,
        egress: EgressControl | None = None,
    ) -> None:
        self.settings = settings
        self.workspace_policy = workspace_policy
        self.egress: EgressControl = egress or FakeEgress()
        self._names: dict[str, Names] = {}  # resolved names of parked sandboxes

    def check_mode(self, mode: NetworkMode) -> None:
        self.workspace_policy.check_mode(mode)

    def build(
        self, mode: str | None, allow: Iterable[str] = (), deny: Iterable[str] = ()
    ) -> EgressPolicy:
        """A policy from caller input (InvalidRequest naming what is wrong), in an allowed mode."""
        try:
            policy = EgressPolicy.build(
                mode or self.workspace_policy.default_mode(), list(allow), list(deny)
            )
        except PolicyError as exc:
            raise InvalidRequest(f"invalid network policy: {exc}") from exc
        self.check_mode(policy.mode)
        return policy

    def default(self) -> EgressPolicy:
        return self.build(None)

    def of(self, record: SandboxRecord) -> EgressPolicy:
        """The stored policy; a record made before policies were stored (or a corrupt one)
        reaches nothing, as such sandboxes always did."""
        if record.network:
            try:
                return EgressPolicy.loads(record.network)
            except PolicyError as exc:
                log.error("sandbox %s: its stored network policy is unreadable: %s", record.id, exc)
        return EgressPolicy(NetworkMode.AIRGAPPED)

    def subnet(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.settings.network_subnet)

    def resolv_conf(self) -> str:
        return write_resolv_conf(self.settings.data_dir / "network")

    async def attach(self, record: SandboxRecord, slot: Slot, *, fresh: bool = False) -> None:
        """Attach the sandbox's stored policy to ``slot``; ``fresh``: a slot just leased for a
        boot, before the sandbox runs (see ``EgressControl.attach``)."""
        names = self._names.pop(record.id, None)
        if names is None and record.parent_id:
            names = self.egress.names(record.parent_id)
        await self.egress.attach(record.id, slot, self.of(record), names, fresh=fresh)

    async def detach(self, sandbox_id: str, *, keep_names: bool = False) -> None:
        """Stop a sandbox's egress (never raises: logs what failed); ``keep_names`` keeps what
        its resolver knew for when it comes back (a park)."""
        try:
            names = await self.egress.detach(sandbox_id)
        except Exception as exc:
            log.error("sandbox %s: stopping its egress failed: %s", sandbox_id, exc)
            return
        if keep_names:
            self._names[sandbox_id] = names

    def forget(self, sandbox_id: str) -> None:
        self._names.pop(sandbox_id, None)
