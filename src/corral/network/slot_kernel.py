"""Slot kernel plumbing: building and tearing down one slot's namespaces, veth pairs,
addresses, routes and firewall (blocking; run in a worker thread of the daemon's namespace).
Links, addresses and routes are made with ``rtnl`` (see there why not pyroute2).

Work that must happen inside a slot or sandbox namespace runs in a fresh thread that enters the
namespace with ``setns`` and then ends, so no thread that outlives an operation is ever in
another namespace. New namespaces are made the same way (``unshare`` in a fresh thread, then
bind-mounted under ``/run/netns`` like ``ip netns add`` does).
"""

from __future__ import annotations

import contextlib
import errno
import os
from functools import partial

from corral.network import firewall
from corral.network.base import INNER_ADDRESS, INNER_GATEWAY, INNER_PREFIX, NetworkFailure
from corral.network.namespaces import (
    describe,
    list_netns,
    netns_path,
    remove_netns,
    run_in_netns,
    run_in_new_netns,
    step,
    write_sysctl,
)
from corral.network.rtnl import Rtnl
from corral.network.slot_plan import DOWNLINK, SANDBOX_IF, SLOT_PREFIXLEN, UPLINK, SlotLayout

__all__ = ["configure_inner", "ensure_slot", "teardown"]


def ensure_slot(layout: SlotLayout, table: str, adopt: bool) -> None:
    existing = list_netns()
    with _rtnl("configuring the host side") as host:
        if layout.slot_ns not in existing:
            # Without its slot ns, a veth named like ours is a crash leftover that would block
            # the new one.
            _delete_link(host, layout.host_veth)
        if layout.sandbox_ns not in existing:
            run_in_new_netns(layout.sandbox_ns, lambda: None)
        daemon_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            sandbox_ns = os.open(netns_path(layout.sandbox_ns), os.O_RDONLY)
            try:
                if layout.slot_ns in existing:
                    wire = partial(wire_slot_ns, layout, table, daemon_ns, sandbox_ns)
                    made_eth0 = run_in_netns(layout.slot_ns, wire)
                else:
                    wire = partial(wire_slot_ns, layout, table, daemon_ns, sandbox_ns, new=True)
                    made_eth0 = run_in_new_netns(layout.slot_ns, wire)
            finally:
                os.close(sandbox_ns)
        finally:
            os.close(daemon_ns)
        # Nothing uses IPv6 on the link; without it the veth skips link-local set-up and chatter.
        with contextlib.suppress(FileNotFoundError):
            write_sysctl(f"net/ipv6/conf/{layout.host_veth}/disable_ipv6", "1")
        _set_up(host, layout.host_veth)
        _ensure_address(host, layout.host_veth, layout.host_side_address, SLOT_PREFIXLEN)
    if made_eth0 or not adopt:
        # A sandbox that already runs owns its eth0 (gVisor strips it): adoption must not touch
        # it; ``prepare`` gives it its address before the next start or restore.
        run_in_netns(layout.sandbox_ns, configure_inner)


def wire_slot_ns(
    layout: SlotLayout, table: str, daemon_ns: int, sandbox_ns: int, *, new: bool = False
) -> bool:
    """In the slot ns: firewall, forwarding, both veth pairs and their addresses, the default
    route. Returns whether the sandbox's eth0 was created (the sandbox ns then needs
    configuring too). ``new``: the namespace was made just now, so it holds nothing yet."""
    # The firewall goes first: no packet crosses the slot before its policy is in place.
    if new or not firewall.has_table(table):
        rules = firewall.SlotRules(
            table=table, uplink=UPLINK, downlink=DOWNLINK, host_address=layout.slot_address
        )
        firewall.commit(rules.render(), f"slot {layout.index}")
    write_sysctl("net/ipv4/ip_forward", "1")
    made_eth0 = False
    with _rtnl("configuring the slot namespace") as rt:
        _set_up(rt, "lo")
        if new or not _exists(rt, UPLINK):
            step(
                f"creating veth {UPLINK}/{layout.host_veth}",
                lambda: rt.add_veth(UPLINK, layout.host_veth, daemon_ns),
            )
        if new or not _exists(rt, DOWNLINK):
            step(
                f"creating veth {DOWNLINK}/{SANDBOX_IF}",
                lambda: rt.add_veth(DOWNLINK, SANDBOX_IF, sandbox_ns),
            )
            made_eth0 = True
        _set_up(rt, UPLINK)
        _ensure_address(rt, UPLINK, layout.slot_address, SLOT_PREFIXLEN)
        _set_up(rt, DOWNLINK)
        _ensure_address(rt, DOWNLINK, INNER_GATEWAY, INNER_PREFIX)
        # The sandbox's egress leaves through the host side. Harmless before its egress is
        # attached: the slot table forwards nothing the egress table has not marked.
        step(
            "adding the default route of the slot",
            lambda: rt.replace_default_route(layout.host_side_address),
        )
    return made_eth0


def configure_inner() -> None:
    """In the sandbox ns: eth0 up with the inner address and the default route."""
    with _rtnl("configuring the sandbox namespace") as rt:
        _set_up(rt, "lo")
        _set_up(rt, SANDBOX_IF)
        index = _ensure_address(rt, SANDBOX_IF, INNER_ADDRESS, INNER_PREFIX)
        step(
            "adding the default route",
            lambda: rt.replace_default_route(INNER_GATEWAY, oif=index),
        )


def teardown(layout: SlotLayout) -> None:
    """Remove the slot whatever state it is in.

    Only the host veth is deleted explicitly: namespace deletion is asynchronous, and a host veth
    that outlived it would block the next slot with its name. The other veth pair lives only in
    the slot's own namespaces and goes with them (deleting a veth costs ~15 ms of RCU wait).
    """
    failures: list[str] = []
    try:
        with _rtnl("deleting the host veth") as host:
            _delete_link(host, layout.host_veth)
    except NetworkFailure as exc:
        failures.append(str(exc))
    for name in (layout.slot_ns, layout.sandbox_ns):
        try:
            remove_netns(name)
        except OSError as exc:
            failures.append(f"deleting namespace {name}: {describe(exc)}")
    if failures:
        raise NetworkFailure(f"tearing down slot {layout.index}: " + "; ".join(failures))


# -- rtnetlink steps, each failure named (``rtnl`` raises the kernel's errno as OSError) ----------


def _rtnl(context: str) -> Rtnl:
    try:
        return Rtnl()
    except OSError as exc:
        raise NetworkFailure(f"{context}: opening netlink: {exc}") from exc


def _set_up(rt: Rtnl, name: str) -> None:
    step(f"setting {name} up", lambda: rt.set_up(name))


def _exists(rt: Rtnl, name: str) -> bool:
    try:
        rt.index(name)
    except OSError as exc:
        if exc.errno == errno.ENODEV:
            return False
        raise NetworkFailure(f"looking up {name}: {describe(exc)}") from exc
    return True


def _ensure_address(rt: Rtnl, name: str, address: str, prefixlen: int) -> int:
    """Give link ``name`` the address unless it has it; return the link's index."""
    index = step(f"looking up {name}", lambda: rt.index(name))
    try:
        rt.add_address(index, address, prefixlen)
    except OSError as exc:
        if exc.errno != errno.EEXIST:
            what = f"adding {address}/{prefixlen} to {name}"
            raise NetworkFailure(f"{what}: {describe(exc)}") from exc
    return index


def _delete_link(rt: Rtnl, name: str) -> None:
    step(f"deleting {name}", lambda: rt.delete_link(name))
