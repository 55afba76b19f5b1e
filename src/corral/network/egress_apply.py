"""Applying a slot's egress (``egress.SlotEgress``) and the daemon namespace's share of it:
one libnftables transaction per commit (delete + redefine, as in ``firewall``; for a fresh slot
a create that deletes nothing), the slot's default route, and after a live change the deletion
of the conntrack entries of the forwarded flows the new policy forbids (``egress.allows_forward``;
the fast path's flows only unless the first-flight judge keeps them), so even answers to them
stop at once. Blocking: the caller runs these in a worker thread.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket

from pyroute2 import Conntrack
from pyroute2.conntrack import NFCTAttrTuple
from pyroute2.netlink.exceptions import NetlinkError

from corral.network import firewall
from corral.network.base import INNER_ADDRESS, NetworkFailure
from corral.network.egress import SlotEgress, allows_forward
from corral.network.namespaces import describe, open_ipr, run_in_netns, write_sysctl
from corral.network.rtnl import Rtnl

__all__ = [
    "apply_slot_egress",
    "commit_slot_egress",
    "enable_host_forwarding",
    "host_ipv4_addresses",
    "remove_slot_egress",
    "uplink_interfaces",
]

_PROTOCOLS = {socket.IPPROTO_TCP: "tcp", socket.IPPROTO_UDP: "udp"}


def apply_slot_egress(
    slot_ns: str,
    egress: SlotEgress,
    host_side_address: str,
    *,
    fresh: bool = False,
    keep: frozenset[tuple[int, str, int]] = frozenset(),
) -> int:
    """``commit_slot_egress`` in ``slot_ns`` (from a fresh thread that enters it)."""
    ipaddress.IPv4Address(host_side_address)
    try:
        return run_in_netns(
            slot_ns,
            lambda: commit_slot_egress(egress, host_side_address, fresh=fresh, keep=keep),
        )
    except NetworkFailure:
        raise
    except OSError as exc:
        raise NetworkFailure(f"applying egress of {slot_ns}: {exc}") from exc


def commit_slot_egress(
    egress: SlotEgress,
    host_side_address: str,
    *,
    fresh: bool = False,
    keep: frozenset[tuple[int, str, int]] = frozenset(),
) -> int:
    """(In the slot namespace.) Commit the egress ruleset (one transaction; a live change takes
    effect on the next packet of every connection) with the slot ruleset re-committed in the
    same transaction (so a slot built by an older daemon, whose slot table may lack the egress
    mark, is brought up to date atomically), route the slot's egress to the host side, and
    delete the conntrack entries of forwarded flows the policy now forbids, so their answers
    stop too. Returns how many flows were forgotten; the flows of the fast ports are kept only
    when ``keep`` names them (sandbox port, address, port: what the first-flight judge says the
    policy still allows). Only forwarded sandbox flows are touched: deleting the entry of an
    allowed, redirected or host-opened connection would break its translation.

    ``fresh``: the slot was built by this daemon for this lease (``slot_kernel.ensure_slot``:
    its slot table and route are current) and its sandbox has not run yet (it tracks no flow).
    Then only the egress table is committed, made without deleting anything (a commit that
    deletes a table waits for the kernel to release the old one: ~10 ms, and its worker's
    context close another RCU grace period); neither the route nor the conntrack table (a dump
    costs ~12 ms even when empty) is touched. If the table exists after all, that transaction
    fails whole and the replacing one runs instead."""
    what = f"egress of slot {egress.slot_address}"
    if fresh:
        try:
            firewall.commit(egress.render(new=True), what)
        except firewall.FirewallError:  # it exists: replace it (and say why if that fails too)
            firewall.commit(egress.render(), what)
        return 0
    slot_rules = firewall.SlotRules(
        table=egress.table,
        uplink=egress.uplink,
        downlink=egress.downlink,
        host_address=egress.slot_address,
    )
    firewall.commit(slot_rules.render() + egress.render(), what)
    _route_egress(host_side_address)
    return _forget_forbidden_flows(egress, keep)


def _route_egress(host_side_address: str) -> None:
    """(In the slot namespace.) The default route, through the host side of the uplink."""
    try:
        with Rtnl() as rt:
            rt.replace_default_route(host_side_address)
    except OSError as exc:
        raise NetworkFailure(f"adding the default route of the slot: {describe(exc)}") from exc


def _forget_forbidden_flows(egress: SlotEgress, keep: frozenset[tuple[int, str, int]]) -> int:
    """(In the slot namespace.) Delete the conntrack entries of the sandbox's forwarded flows
    (sent from the inner address, translated to the slot's address) that the policy forbids."""
    forgotten = 0
    try:
        with Conntrack() as conntrack:
            for entry in list(
                conntrack.dump_entries(tuple_orig=NFCTAttrTuple(saddr=INNER_ADDRESS))
            ):
                orig, reply = entry.tuple_orig, entry.tuple_reply
                if reply.daddr != egress.slot_address:
                    continue
                protocol = _PROTOCOLS.get(orig.proto)
                port = orig.dport if protocol else None
                if protocol == "tcp" and (orig.sport, orig.daddr, orig.dport) in keep:
                    continue
                if allows_forward(
                    egress.policy, egress.context, orig.daddr, port, protocol, egress.intercept
                ):
                    continue
                with contextlib.suppress(NetlinkError):  # gone meanwhile
                    conntrack.delete(entry)
                    forgotten += 1
    except (NetlinkError, OSError) as exc:
        raise NetworkFailure(
            f"deleting forbidden flows of {egress.table}: {describe(exc)}"
        ) from exc
    return forgotten


def remove_slot_egress(slot_ns: str, table: str) -> bool:
    """Drop the egress table of ``slot_ns`` (the sandbox then reaches nothing again)."""
    return run_in_netns(
        slot_ns, lambda: firewall.delete_table(f"{table}_egress", f"egress of {slot_ns}")
    )


def enable_host_forwarding() -> None:
    """Let the calling thread's namespace (the daemon's) forward IPv4 between slots and uplinks.
    A host-wide setting: the service calls it once, when the first sandbox gets egress."""
    write_sysctl("net/ipv4/ip_forward", "1")


def host_ipv4_addresses() -> tuple[str, ...]:
    """The IPv4 addresses of the calling thread's namespace (always blocked for sandboxes)."""
    with open_ipr("listing the host's addresses") as ipr:
        found = {addr.get_attr("IFA_ADDRESS") for addr in ipr.get_addr(family=2)}
    return tuple(sorted(str(addr) for addr in found if addr))


def uplink_interfaces() -> tuple[str, ...]:
    """The interfaces of the calling namespace's IPv4 default routes (where egress leaves)."""
    with open_ipr("finding the default routes") as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        oifs = {
            route.get_attr("RTA_OIF")
            for route in ipr.get_routes(family=2)
            if route.get_attr("RTA_DST") is None and route["dst_len"] == 0
        }
    return tuple(sorted(str(names[oif]) for oif in oifs if oif in names))
