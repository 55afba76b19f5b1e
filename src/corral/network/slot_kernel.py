"""Slot kernel plumbing: building and tearing down one slot's namespaces, veth pairs,
addresses, routes and firewall (blocking; run in a worker thread of the daemon's namespace).

Work that must happen inside a slot or sandbox namespace runs in a fresh thread that enters the
namespace with ``setns`` and then ends, so no thread that outlives an operation is ever in
another namespace. New namespaces are made the same way (``unshare`` in a fresh thread, then
bind-mounted under ``/run/netns`` like ``ip netns add`` does).
"""

from __future__ import annotations

import contextlib
import os
from functools import partial

from corral.network import firewall
from corral.network.base import INNER_ADDRESS, INNER_GATEWAY, INNER_PREFIX, NetworkFailure
from corral.network.namespaces import (
    add_veth,
    delete_links,
    describe,
    ensure_address,
    list_netns,
    netns_path,
    open_ipr,
    remove_netns,
    run_in_netns,
    run_in_new_netns,
    set_up,
    step,
    write_sysctl,
)
from corral.network.slot_plan import DOWNLINK, SANDBOX_IF, SLOT_PREFIXLEN, UPLINK, SlotLayout

__all__ = ["configure_inner", "ensure_slot", "teardown"]


def ensure_slot(layout: SlotLayout, table: str, adopt: bool) -> None:
    existing = list_netns()
    with open_ipr("configuring the host side") as host:
        if layout.slot_ns not in existing:
            # Without its slot ns, a veth named like ours is a crash leftover that would block
            # the new one.
            delete_links(host, [layout.host_veth])
        if layout.sandbox_ns not in existing:
            run_in_new_netns(layout.sandbox_ns, lambda: None)
        daemon_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            sandbox_ns = os.open(netns_path(layout.sandbox_ns), os.O_RDONLY)
            try:
                wire = partial(wire_slot_ns, layout, table, daemon_ns, sandbox_ns)
                if layout.slot_ns in existing:
                    made_eth0 = run_in_netns(layout.slot_ns, wire)
                else:
                    made_eth0 = run_in_new_netns(layout.slot_ns, wire)
            finally:
                os.close(sandbox_ns)
        finally:
            os.close(daemon_ns)
        # Nothing uses IPv6 on the link; without it the veth skips link-local set-up and chatter.
        with contextlib.suppress(FileNotFoundError):
            write_sysctl(f"net/ipv6/conf/{layout.host_veth}/disable_ipv6", "1")
        set_up(host, layout.host_veth)
        ensure_address(host, layout.host_veth, layout.host_side_address, SLOT_PREFIXLEN)
    if made_eth0 or not adopt:
        # A sandbox that already runs owns its eth0 (gVisor strips it): adoption must not touch
        # it; ``prepare`` gives it its address before the next start or restore.
        run_in_netns(layout.sandbox_ns, configure_inner)


def wire_slot_ns(layout: SlotLayout, table: str, daemon_ns: int, sandbox_ns: int) -> bool:
    """In the slot ns: firewall, forwarding, both veth pairs and their addresses. Returns
    whether the sandbox's eth0 was created (the sandbox ns then needs configuring too)."""
    # The firewall goes first: no packet crosses the slot before its policy is in place.
    if not firewall.has_table(table):
        rules = firewall.SlotRules(
            table=table, uplink=UPLINK, downlink=DOWNLINK, host_address=layout.slot_address
        )
        firewall.commit(rules.render(), f"slot {layout.index}")
    write_sysctl("net/ipv4/ip_forward", "1")
    made_eth0 = False
    with open_ipr("configuring the slot namespace") as ipr:
        set_up(ipr, "lo")
        if not ipr.link_lookup(ifname=UPLINK):
            add_veth(ipr, UPLINK, layout.host_veth, daemon_ns)
        if not ipr.link_lookup(ifname=DOWNLINK):
            add_veth(ipr, DOWNLINK, SANDBOX_IF, sandbox_ns)
            made_eth0 = True
        set_up(ipr, UPLINK)
        ensure_address(ipr, UPLINK, layout.slot_address, SLOT_PREFIXLEN)
        set_up(ipr, DOWNLINK)
        ensure_address(ipr, DOWNLINK, INNER_GATEWAY, INNER_PREFIX)
        # The sandbox's egress leaves through the host side. Harmless before its egress is
        # attached: the slot table forwards nothing the egress table has not marked.
        step(
            "adding the default route of the slot",
            lambda: ipr.route("replace", dst="0.0.0.0/0", gateway=layout.host_side_address),
        )
    return made_eth0


def configure_inner() -> None:
    """In the sandbox ns: eth0 up with the inner address and the default route."""
    with open_ipr("configuring the sandbox namespace") as ipr:
        set_up(ipr, "lo")
        set_up(ipr, SANDBOX_IF)
        index = ensure_address(ipr, SANDBOX_IF, INNER_ADDRESS, INNER_PREFIX)
        step(
            "adding the default route",
            lambda: ipr.route("replace", dst="0.0.0.0/0", gateway=INNER_GATEWAY, oif=index),
        )


def teardown(layout: SlotLayout) -> None:
    """Remove the slot whatever state it is in.

    Only the host veth is deleted explicitly: namespace deletion is asynchronous, and a host veth
    that outlived it would block the next slot with its name. The other veth pair lives only in
    the slot's own namespaces and goes with them (deleting a veth costs ~15 ms of RCU wait).
    """
    failures: list[str] = []
    try:
        with open_ipr("deleting the host veth") as host:
            delete_links(host, [layout.host_veth])
    except NetworkFailure as exc:
        failures.append(str(exc))
    for name in (layout.slot_ns, layout.sandbox_ns):
        try:
            remove_netns(name)
        except OSError as exc:
            failures.append(f"deleting namespace {name}: {describe(exc)}")
    if failures:
        raise NetworkFailure(f"tearing down slot {layout.index}: " + "; ".join(failures))
