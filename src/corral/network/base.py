"""The network mechanism: pooled, leased slots that link each sandbox to the host.

Topology of slot N (DESIGN.md): root ns ⇄ veth ``vh-N``/``vs-N`` ⇄ ns ``corral-slot-N`` (nftables
DNAT/SNAT) ⇄ veth ⇄ ns ``corral-sbx-N`` whose ``eth0`` the runtime takes over. Every sandbox has the
same inner address (``INNER_ADDRESS``); the host reaches sandbox N at ``Slot.host_address``, which
the slot namespace translates to the inner address. So a checkpoint taken in one slot restores into
any other free slot.

Invariants:
- a slot is leased to at most one sandbox at a time; ``release`` returns it to the pool;
- ``prepare`` must run before every start and restore of a sandbox in a slot (the runtime strips
  ``eth0``'s address and routes each time);
- in this first version a sandbox may answer connections from the host (the control link) and
  reaches nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

INNER_ADDRESS = "169.254.0.21"
INNER_GATEWAY = "169.254.0.22"
INNER_PREFIX = 30


class NetworkFailure(Exception):
    """Setting up, preparing or tearing down a slot failed; the message names the slot."""


class NoFreeSlot(NetworkFailure):
    """Every slot in the pool is leased."""


@dataclass(frozen=True)
class Slot:
    """One leased link. ``netns_path`` is the sandbox namespace the runtime joins;
    ``host_address`` is where the host reaches the sandbox's inner address."""

    index: int
    netns_name: str
    netns_path: str
    host_address: str


class Network(Protocol):
    """Leases and prepares slots. Safe for concurrent use."""

    async def lease(self, index: int | None = None) -> Slot:
        """Lease a free slot (a specific one when ``index`` is given, for re-adoption)."""
        ...

    async def prepare(self, slot: Slot) -> None:
        """(Re)give the sandbox namespace's eth0 the inner address and default route."""
        ...

    async def release(self, slot: Slot) -> None:
        """Return a slot to the pool; it may be torn down or kept for reuse."""
        ...

    async def close(self) -> None:
        """Tear down every slot that is not leased (daemon shutdown)."""
        ...
