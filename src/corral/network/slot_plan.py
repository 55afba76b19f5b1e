"""Slot addressing: how a network prefix and subnet map slot indices to namespace names,
veth names and addresses, and back (pure data; nothing here touches the kernel).

Slot N of a network with prefix P and subnet S owns the N-th /30 of S (``A.1``, ``A.2``)::

    daemon ns                  ns P-slot-N                           ns P-sbx-N
    {tag}-Nh  A.1/30 <-veth-> to-host  A.2/30
                              to-sbx   169.254.0.22/30 <-veth->  eth0 169.254.0.21/30
                              nftables (firewall.SlotRules)      default via 169.254.0.22

The host reaches the sandbox at ``A.2`` (``Slot.host_address``); the slot namespace rewrites it to
the inner address, which is the same in every slot. Everything the network owns carries the
prefix: the namespace names, the host-side veth names (through a short ``tag``, as interface
names have at most 15 characters) and the ``inet`` table in the daemon's namespace
(``firewall.HostRules``). So tests and a running daemon never touch each other's slots.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from hashlib import blake2s

from corral.network.base import NetworkFailure
from corral.network.namespaces import NETNS_DIR

__all__ = [
    "DOWNLINK",
    "SANDBOX_IF",
    "SLOT_PREFIXLEN",
    "UPLINK",
    "SlotLayout",
    "SlotPlan",
    "indices",
]

UPLINK = "to-host"  # in the slot ns: the end of the veth whose other end is the host veth
DOWNLINK = "to-sbx"  # in the slot ns: the end of the veth whose other end is the sandbox's eth0
SANDBOX_IF = "eth0"
SLOT_PREFIXLEN = 30
_IFNAMSIZ = 15
_PREFIX = re.compile(r"^[a-z][a-z0-9]{0,31}$")


@dataclass(frozen=True)
class SlotLayout:
    """Names and addresses of one slot (pure data)."""

    index: int
    slot_ns: str
    sandbox_ns: str
    host_veth: str
    host_side_address: str  # on host_veth, in the daemon's namespace
    slot_address: str  # on the uplink in the slot ns; what the host connects to

    @property
    def sandbox_ns_path(self) -> str:
        return f"{NETNS_DIR}/{self.sandbox_ns}"

    @property
    def slot_ns_path(self) -> str:
        return f"{NETNS_DIR}/{self.slot_ns}"


class SlotPlan:
    """How a prefix and a subnet map slot indices to names and addresses, and back.

    The host veth of slot N is ``{tag}-{N}h``. ``tag`` is the prefix itself when it is short
    enough, else its first two characters plus hex digits of its hash; prefixes are lowercase
    alphanumeric, so ``{tag}-`` never starts the veth name of another prefix.
    """

    def __init__(self, prefix: str, subnet: str) -> None:
        if not _PREFIX.match(prefix):
            raise ValueError(f"network prefix {prefix!r} must match {_PREFIX.pattern}")
        network = ipaddress.ip_network(subnet)
        if not isinstance(network, ipaddress.IPv4Network) or network.prefixlen > SLOT_PREFIXLEN:
            raise ValueError(f"slot subnet {subnet!r} must be IPv4 and at least a /30")
        self.prefix = prefix
        self.subnet = network
        self.capacity = network.num_addresses // 4
        width = len(str(self.capacity - 1))
        room = _IFNAMSIZ - len("-") - width - len("h")
        if room < 4:
            raise ValueError(f"slot subnet {subnet!r} has too many slots for interface names")
        if len(prefix) <= room:
            self.tag = prefix
        else:
            self.tag = prefix[:2] + blake2s(prefix.encode()).hexdigest()[: room - 2]
        self._netns_re = re.compile(rf"^{prefix}-(?:slot|sbx)-(\d+)$")
        self._veth_re = re.compile(rf"^{self.tag}-(\d+)h$")

    @property
    def table(self) -> str:
        return self.prefix

    @property
    def veth_pattern(self) -> str:
        return f"{self.tag}-*"

    def layout(self, index: int) -> SlotLayout:
        if not 0 <= index < self.capacity:
            raise NetworkFailure(f"slot {index} is outside 0..{self.capacity - 1}")
        base = self.subnet.network_address + 4 * index
        return SlotLayout(
            index=index,
            slot_ns=f"{self.prefix}-slot-{index}",
            sandbox_ns=f"{self.prefix}-sbx-{index}",
            host_veth=f"{self.tag}-{index}h",
            host_side_address=str(base + 1),
            slot_address=str(base + 2),
        )

    def index_of_netns(self, name: str) -> int | None:
        return match_index(self._netns_re, name)

    def index_of_veth(self, name: str) -> int | None:
        return match_index(self._veth_re, name)


def match_index(pattern: re.Pattern[str], name: str) -> int | None:
    match = pattern.match(name)
    return int(match.group(1)) if match else None


def indices(index_of: Callable[[str], int | None], names: Iterable[str]) -> set[int]:
    return {index for name in names if (index := index_of(name)) is not None}
