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
  reaches nothing else;
- a slot counts the sandbox's own traffic from the moment it is built (``traffic``); a released
  slot's counts are gone, so whoever needs a total reads them before ``release``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

INNER_ADDRESS = "169.254.0.21"
INNER_GATEWAY = "169.254.0.22"
INNER_PREFIX = 30
# The in-sandbox agent's port (corral.agent.AGENT_PORT; the network may not import the agent): the
# daemon's control channel, which the traffic counters leave out.
CONTROL_PORT = 49983


class NetworkFailure(Exception):
    """Setting up, preparing or tearing down a slot failed; the message names the slot."""


class NoFreeSlot(NetworkFailure):
    """Every slot in the pool is leased."""


@dataclass(frozen=True)
class Traffic:
    """Bytes and packets a sandbox received (``rx``) and sent (``tx``) on its link, leaving out
    the daemon's control channel to its agent. Adding two gives the sum (totals over slots)."""

    rx_bytes: int = 0
    rx_packets: int = 0
    tx_bytes: int = 0
    tx_packets: int = 0

    def __add__(self, other: Traffic) -> Traffic:
        return Traffic(
            self.rx_bytes + other.rx_bytes,
            self.rx_packets + other.rx_packets,
            self.tx_bytes + other.tx_bytes,
            self.tx_packets + other.tx_packets,
        )


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

    async def lease(self, index: int | None = None, *, refill: bool = True) -> Slot:
        """Lease a free slot (a specific one when ``index`` is given, for re-adoption). A network
        that builds slots ahead starts building the leased one's replacement at once, or, with
        ``refill=False``, only when ``refill()`` is called (a boot calls it once the sandbox
        runs: the building then competes with nothing of the daemon's on the boot's path)."""
        ...

    def refill(self) -> None:
        """Build the slots ahead that leases took, in the background (nothing if there are
        as many as wanted, or if this network builds none ahead)."""
        ...

    async def prepare(self, slot: Slot) -> None:
        """(Re)give the sandbox namespace's eth0 the inner address and default route (a slot
        built for its lease has them: its first ``prepare`` may return at once)."""
        ...

    async def traffic(self, slot: Slot) -> Traffic | None:
        """What the sandbox in a leased slot sent and received since the slot was built; None
        when the slot cannot tell (a slot built by an older corral, without counters)."""
        ...

    async def release(self, slot: Slot) -> None:
        """Return a slot to the pool; it may be torn down or kept for reuse."""
        ...

    def build_ahead(self, count: int) -> None:
        """``count`` leases are about to come at once (a fork's children): build that many
        slots ahead, in the background, if the network builds slots at all. The extra ones are
        not replaced once leased; a negative ``count`` withdraws what such a call asked for and
        no lease took (the burst did not come)."""
        ...

    async def close(self) -> None:
        """Tear down every slot that is not leased (daemon shutdown)."""
        ...
