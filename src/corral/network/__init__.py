"""The network mechanism: per-sandbox slots linking each sandbox to the host (see ``base``).

Errors::

    NetworkFailure          setting up, preparing or tearing down a slot failed
    ├── NoFreeSlot          every slot of the pool is leased
    └── FirewallError       libnftables refused a ruleset (carries nft's message)

``SlotNetwork`` is the real implementation (namespaces, veths, nftables; needs root),
``FakeNetwork`` an in-memory one for unit tests.
"""

from corral.network.base import (
    INNER_ADDRESS,
    INNER_GATEWAY,
    INNER_PREFIX,
    Network,
    NetworkFailure,
    NoFreeSlot,
    Slot,
    Traffic,
)
from corral.network.fake import FakeNetwork
from corral.network.firewall import FirewallError
from corral.network.slots import SlotNetwork

__all__ = [
    "INNER_ADDRESS",
    "INNER_GATEWAY",
    "INNER_PREFIX",
    "FakeNetwork",
    "FirewallError",
    "Network",
    "NetworkFailure",
    "NoFreeSlot",
    "Slot",
    "SlotNetwork",
    "Traffic",
]
