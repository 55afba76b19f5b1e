"""What a test may take from the host without touching a running daemon's: a free loopback port
and a slot subnet that nothing on the host routes.

A daemon (the user's `corral serve` on 10.200.0.0/16, or another test run's) routes a /30 of its
subnet for every slot it holds, spare slots included, and refuses a subnet that something else
routes (``corral.network.conflicts``). So a test that builds slots or addresses of its own picks
them from ``free_subnet()``, which looks only outside the default subnet and checks the routes.
"""

from __future__ import annotations

import ipaddress
import secrets
import socket


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_subnet() -> str:
    """A /16 that nothing on this host routes yet (other test runs may be going on)."""
    from corral.network.conflicts import foreign_routes

    for _ in range(50):
        subnet = f"10.{secrets.randbelow(136) + 64}.0.0/16"
        if not foreign_routes("zz", subnet):
            return subnet
    raise RuntimeError("no free 10.x.0.0/16 subnet for a test")


def free_link_addresses() -> tuple[str, str]:
    """The two addresses of a /30 inside a free subnet, for a test's own veth pair."""
    network = ipaddress.IPv4Network(free_subnet())
    block = next(network.subnets(new_prefix=30))
    host, peer = list(block.hosts())
    return str(host), str(peer)
