"""All nftables handling of the network slots: render a ruleset, commit it atomically.

Two rulesets exist, each one ``inet`` table named after the network's prefix:

- the slot ruleset, inside every slot namespace: DNAT of everything the host sends to the slot's
  host address onto the sandbox's inner address, SNAT of that traffic to the inner gateway (so a
  sandbox sees the same peer in every slot), a forward policy that lets the host open
  connections to the sandbox and drops every connection the sandbox opens, and two named
  counters of the sandbox's own traffic on its link (``RX_COUNTER``: what crosses the link into
  the sandbox, ``TX_COUNTER``: what it sends), whatever the packets' fate after (forwarded,
  proxied, answered by the slot's resolver, refused), except the daemon's control channel to the
  agent (TCP ``CONTROL_PORT`` on connections the host opened). The counters start at zero when
  the table is made (a new slot) and are read with ``read_counters``;
- the host ruleset, in the daemon's own namespace: defence in depth for the same policy. It drops
  connections that arrive from (or would be forwarded into) the network's host-side veths, and
  lets only root (``meta skuid 0``: the daemon) open connections from this namespace into the
  slots; it changes nothing for any other interface or address.

Why the owner's uid and not the daemon's cgroup or a socket mark: every host user could otherwise
reach every sandbox's agent and services through the slot addresses. Anything running as root
can already do everything the daemon can (read its store and keys, enter the namespaces, move
itself into the daemon's cgroup or set a mark), so a finer match would add nothing against root
and would break root tools (tests, debugging); the line that matters is root versus everyone
else. New connections of other users are rejected at once (TCP reset, ICMP otherwise).

A ruleset is committed as one libnftables transaction that first removes the table and then
redefines it: it applies completely or not at all, and committing it twice is harmless. The
functions act on the network namespace of the calling thread; the caller enters the right one.
libnftables itself runs in a worker process (``nft_client``), never in the daemon: it waits on
its netlink socket with ``select()``, which aborts a process holding more than 1,024 descriptors.

Syntax note (nft 1.0.6, DESIGN.md): chains are written multi-line and ``fwd``/``egress`` are
reserved words, so no chain is named after them.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import dataclass

from corral.network import nft_client
from corral.network.base import CONTROL_PORT, INNER_ADDRESS, INNER_GATEWAY, NetworkFailure, Traffic

__all__ = [
    "RX_COUNTER",
    "TX_COUNTER",
    "FirewallError",
    "HostRules",
    "SlotRules",
    "commit",
    "delete_table",
    "has_table",
    "read_traffic",
]

RX_COUNTER = "sandbox_rx"
TX_COUNTER = "sandbox_tx"

# The egress table (network/egress.py) marks what a sandbox's policy lets through; marks never cross
# a namespace, so only that table can set them.
_EGRESS_ACCEPT = "meta mark & 0xffff0000 == 0x2b8e0000 accept"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}\*?$")


class FirewallError(NetworkFailure):
    """libnftables refused a ruleset or command (the message carries nft's own error text), or
    its worker process failed."""


@dataclass(frozen=True)
class SlotRules:
    """The ruleset of one slot namespace.

    ``uplink`` is the slot side of the veth to the host, ``downlink`` the slot side of the veth to
    the sandbox, ``host_address`` the slot's address on the uplink (what the host connects to).
    """

    table: str
    uplink: str
    downlink: str
    host_address: str

    def render(self) -> str:
        _check_name(self.table)
        _check_ifname(self.uplink)
        _check_ifname(self.downlink)
        ipaddress.IPv4Address(self.host_address)  # raises ValueError on anything else
        from_host = f'iifname "{self.uplink}" oifname "{self.downlink}" ip daddr {INNER_ADDRESS}'
        # The control channel: connections the host opened (DNAT: only those through the slot's
        # address) to the agent's port. Mangle priority: after conntrack, before any NAT.
        control = f"ct status dnat tcp {{}} {CONTROL_PORT} ct direction {{}} return"
        return _replace_table(
            self.table,
            f"""\
    counter {RX_COUNTER} {{
    }}
    counter {TX_COUNTER} {{
    }}
    chain count_sent {{
        type filter hook prerouting priority mangle; policy accept;
        iifname "{self.downlink}" {control.format("sport", "reply")}
        iifname "{self.downlink}" counter name "{TX_COUNTER}"
    }}
    chain count_received {{
        type filter hook postrouting priority mangle; policy accept;
        oifname "{self.downlink}" {control.format("dport", "original")}
        oifname "{self.downlink}" counter name "{RX_COUNTER}"
    }}
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        iifname "{self.uplink}" ip daddr {self.host_address} dnat ip to {INNER_ADDRESS}
    }}
    chain postrouting {{
        type nat hook postrouting priority srcnat; policy accept;
        oifname "{self.downlink}" ip daddr {INNER_ADDRESS} snat ip to {INNER_GATEWAY}
    }}
    chain forward {{
        type filter hook forward priority filter; policy drop;
        ct state established,related accept
        ct state invalid drop
        {from_host} ct status dnat accept
        {_EGRESS_ACCEPT}
    }}
    chain input {{
        type filter hook input priority filter; policy drop;
        iifname "lo" accept
        ct state established,related accept
        {_EGRESS_ACCEPT}
    }}
""",
        )


@dataclass(frozen=True)
class HostRules:
    """The ruleset of the daemon's own namespace; ``veth_pattern`` matches the host-side veths
    (an nft interface wildcard such as ``"corral-*"``), ``subnet`` is the slots' subnet. With
    ``egress_uplinks`` (the interfaces of the default routes) the slots' IPv4 egress is forwarded
    and masqueraded out of those; each slot's own egress table (network/egress.py) decides what
    reaches its veth at all."""

    table: str
    veth_pattern: str
    subnet: str | None = None
    egress_uplinks: tuple[str, ...] = ()

    def render(self) -> str:
        _check_name(self.table)
        _check_ifname(self.veth_pattern)
        to_slots = [f'oifname "{self.veth_pattern}"']
        if self.subnet is not None:
            to_slots.append(f"ip daddr {ipaddress.IPv4Network(self.subnet)}")
        output = "\n".join(
            f"        {match} ct state established,related accept\n"
            f"        {match} meta skuid 0 accept\n"
            f"        {match} meta l4proto tcp reject with tcp reset\n"
            f"        {match} reject"
            for match in to_slots
        )
        forward = "\n".join(f"        {match} drop" for match in to_slots)
        return _replace_table(
            self.table,
            f"""\
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname "{self.veth_pattern}" ct state established,related accept
        iifname "{self.veth_pattern}" drop
    }}
    chain forward {{
        type filter hook forward priority filter; policy accept;
{self._egress_forward()}\
        iifname "{self.veth_pattern}" drop
{forward}
    }}
    chain output {{
        type filter hook output priority filter; policy accept;
{output}
    }}
{self._egress_nat()}\
""",
        )

    def _egress_forward(self) -> str:
        if not self.egress_uplinks:
            return ""
        for name in self.egress_uplinks:
            _check_ifname(name)
        veth, up = self.veth_pattern, ", ".join(f'"{name}"' for name in self.egress_uplinks)
        return (
            f'        iifname "{veth}" oifname {{ {up} }} meta nfproto ipv4'
            " ct state new,established accept\n"
            f'        iifname {{ {up} }} oifname "{veth}" ct state established,related accept\n'
        )

    def _egress_nat(self) -> str:
        if not self.egress_uplinks:
            return ""
        up = ", ".join(f'"{name}"' for name in self.egress_uplinks)
        return (
            "    chain slot_masq {\n"
            "        type nat hook postrouting priority srcnat; policy accept;\n"
            f'        iifname "{self.veth_pattern}" oifname {{ {up} }} masquerade\n'
            "    }\n"
        )


def commit(ruleset: str, what: str) -> None:
    """Apply ``ruleset`` in one transaction in the calling thread's namespace."""
    _run(ruleset, f"committing nftables ruleset for {what}")


def read_traffic(table: str) -> Traffic | None:
    """The slot table's traffic counters in the calling thread's namespace; None when the table
    has none (no table, or one made by an older corral that did not count)."""
    _check_name(table)
    rc, output, _ = _cmd(f"list counters table inet {table}", "reading counters", json_output=True)
    if rc != 0:
        return None
    found: dict[str, tuple[int, int]] = {}
    for item in json.loads(output or "{}").get("nftables", []):
        counter = item.get("counter") if isinstance(item, dict) else None
        if isinstance(counter, dict) and counter.get("name") in (RX_COUNTER, TX_COUNTER):
            found[counter["name"]] = (int(counter["bytes"]), int(counter["packets"]))
    if len(found) != 2:
        return None
    (rx_bytes, rx_packets), (tx_bytes, tx_packets) = found[RX_COUNTER], found[TX_COUNTER]
    return Traffic(rx_bytes, rx_packets, tx_bytes, tx_packets)


def has_table(table: str) -> bool:
    """Whether the ``inet`` table exists in the calling thread's namespace."""
    _check_name(table)
    rc, _, _ = _cmd(f"list table inet {table}", f"looking up table {table}")
    return bool(rc == 0)


def delete_table(table: str, what: str) -> bool:
    """Remove the ``inet`` table if present (atomically); return whether it existed."""
    _check_name(table)
    if not has_table(table):
        return False
    _run(f"delete table inet {table}\n", f"deleting nftables table of {what}")
    return True


def _replace_table(table: str, body: str) -> str:
    # "add" makes the "delete" valid when the table is new; the three run as one transaction.
    return f"add table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n{body}}}\n"


def _create_table(table: str, body: str) -> str:
    # "create" fails if the table exists, and with it the whole transaction: nothing is applied.
    # No deletion, so the commit does not wait for the kernel to release an old table.
    return f"create table inet {table}\ntable inet {table} {{\n{body}}}\n"


def _run(commands: str, context: str) -> None:
    rc, _, error = _cmd(commands, context)
    if rc != 0:
        raise FirewallError(f"{context}: {error.strip() or f'nft exited with {rc}'}")


def _cmd(commands: str, context: str, *, json_output: bool = False) -> tuple[int, str, str]:
    try:
        return nft_client.run(commands, json_output=json_output)
    except nft_client.NftWorkerError as exc:
        raise FirewallError(f"{context}: {exc}") from exc


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ValueError(f"invalid nftables table name {name!r}")


def _check_ifname(name: str) -> None:
    if not _IFNAME.match(name):
        raise ValueError(f"invalid interface name {name!r}")
