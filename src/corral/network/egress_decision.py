"""What the egress proxy lets through: ``decide`` judges one connection a sandbox opened (a
``Flow``: the name it asked for, by ``Host`` or SNI, and its original destination) and lets it
through only when

- the name is not denied, and
- the name is allowed by a host rule and the original destination address (``SO_ORIGINAL_DST``)
  is one the sandbox's own resolver answered for that name, unexpired, and that address is not
  always-blocked unless an address rule allows it; or the mode reaches the internet and the
  address is not always-blocked (host-name deny rules in an internet mode);
- or it goes to a project service's virtual address that the policy reaches.

So a direct IP, a forged SNI or ``Host`` and a shared CDN address the resolver gave for another
name do not get through. Also the hooks the proxy calls: ``EgressHook`` (rewrites an allowed
connection's first flight) and ``ServiceRouter`` (where a project service's connection goes).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Protocol

from corral.network.egress import is_service_address, reaches_service
from corral.network.sandbox_egress import SandboxEgress

__all__ = ["EgressHook", "Flow", "PassThrough", "ServiceRouter", "Verdict", "decide"]


@dataclass(frozen=True)
class Flow:
    """One connection a sandbox opened: the name it asked for and where it was going."""

    sandbox_id: str
    name: str | None
    address: str
    port: int
    tls: bool


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


class EgressHook(Protocol):
    async def on_connect(self, flow: Flow, head: bytes) -> bytes:
        """Return the first flight to send upstream (``head`` unchanged, or rewritten)."""
        ...


class ServiceRouter(Protocol):
    async def __call__(self, sandbox_id: str, address: str, port: int) -> tuple[str, int]:
        """Where a connection of ``sandbox_id`` to a sandbox service's virtual ``address`` and
        ``port`` goes (the target sandbox's slot address and port, woken if need be); raises
        LookupError when there is no such service or it cannot be reached now."""
        ...


class PassThrough:
    async def on_connect(self, flow: Flow, head: bytes) -> bytes:
        return head


def decide(sandbox: SandboxEgress, name: str | None, address: str, port: int) -> Verdict:
    """Whether a proxied connection may go through (see the module docstring)."""
    policy, context = sandbox.policy, sandbox.context
    if is_service_address(address):
        if reaches_service(policy, context, address, port):
            return Verdict(True, f"the project's service at {address}:{port}")
        return Verdict(False, f"the project's service at {address}:{port} is not allowed")
    blocked = context.is_blocked(address)
    if name is not None and policy.name_denied(name):
        return Verdict(False, f"{name} is denied")
    if name is not None and policy.name_allowed_by_rule(name):
        if not sandbox.names.answered(name, address):
            return Verdict(False, f"{address} is not an address the resolver gave for {name}")
        if blocked and not _allowed_by_address_rule(sandbox, address, port):
            return Verdict(False, f"{address} ({name}) is in an always-blocked range")
        return Verdict(True, f"{name} is allowed")
    if policy.mode.internet and not blocked:
        return Verdict(True, "the mode reaches the internet")
    return Verdict(False, f"{name or 'a connection without a name'} is not allowed")


def _allowed_by_address_rule(sandbox: SandboxEgress, address: str, port: int) -> bool:
    ip = ipaddress.IPv4Address(address)
    return any(
        rule.kind == "cidr"
        and rule.network is not None
        and ip in rule.network
        and rule.matches_port(port, "tcp")
        for rule in sandbox.policy.allow
    )
