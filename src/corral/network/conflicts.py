"""Refuse a slot subnet that something else on the host already routes.

Two daemons (or a daemon and another network) using overlapping subnets would each route the same
addresses to their own veths, and the host would deliver one daemon's control traffic to the
other's sandboxes. So at start the daemon checks the root namespace's IPv4 routes: any route that
overlaps the subnet and does not go through one of this prefix's own veths is a conflict.
"""

from __future__ import annotations

import ipaddress

from pyroute2 import IPRoute

from corral.network.base import NetworkFailure
from corral.network.slot_plan import SlotPlan


def foreign_routes(prefix: str, subnet: str) -> list[str]:
    """Routes overlapping ``subnet`` that are not this prefix's, as ``DEST dev NAME`` strings."""
    plan = SlotPlan(prefix, subnet)
    wanted = ipaddress.ip_network(subnet)
    found = []
    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        for route in ipr.get_routes(family=2):
            dst = route.get_attr("RTA_DST")
            if dst is None:
                continue  # the default route overlaps everything; it is not a conflict
            net = ipaddress.ip_network(f"{dst}/{route['dst_len']}", strict=False)
            if not net.overlaps(wanted):
                continue
            dev = names.get(route.get_attr("RTA_OIF"), "?")
            if plan.index_of_veth(str(dev)) is None:
                found.append(f"{net} dev {dev}")
    return sorted(set(found))


def check_subnet_free(prefix: str, subnet: str) -> None:
    """Raise NetworkFailure naming the routes if the subnet is in use by anything else."""
    clashes = foreign_routes(prefix, subnet)
    if clashes:
        raise NetworkFailure(
            f"the sandbox subnet {subnet} is already routed on this host ({'; '.join(clashes[:4])})"
            ": another corral daemon or network uses it; set CORRAL_NETWORK_SUBNET to a free one"
        )
