"""Congestion control for the proxies' TCP connections that never leave this host.

A host may default to a congestion control that paces (BBR: ``net.ipv4.tcp_congestion_control``),
and without the ``fq`` qdisc TCP paces by itself, with a timer per burst: every few kilobytes
leave from a timer's softirq instead of the ``splice`` that queued them. That is right for a
path with a bottleneck link, and pure cost on a hop that has none: the inbound proxy's connection
to a sandbox's slot (a veth on this host) and its connection from a client on loopback (a reverse
proxy in front of the daemon, or the bench). ``unpace`` gives such a socket a congestion control
that does not pace (``cubic``, else ``reno``, which every kernel has); a socket whose peer is
elsewhere keeps the host's choice (``on_this_host`` tells them apart). It changes nothing but the
sender's window growth on that one connection, and gives up silently if the kernel refuses: the
connection works the same either way, only dearer.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket

__all__ = ["UNPACED", "is_loopback", "on_this_host", "unpace"]

UNPACED = (b"cubic", b"reno")


def unpace(sock: socket.socket) -> bytes | None:
    """Give ``sock`` the first congestion control of ``UNPACED`` the kernel accepts; which one,
    or None when it accepts none (the socket then keeps the one it had)."""
    for name in UNPACED:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, name)
            return name
    return None


def is_loopback(address: str | None) -> bool:
    """Whether ``address`` (a peer's IP, as ``getpeername`` gives it) is this host's loopback."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


def on_this_host(sock: socket.socket) -> bool:
    """Whether ``sock``'s peer is on this host: a loopback address, or the very address the
    connection came in on (a client of this host that connected to one of its own addresses:
    the kernel then gives it that address as its source, and the bytes never leave the host)."""
    try:
        own, peer = sock.getsockname(), sock.getpeername()
    except OSError:
        return False
    if not (isinstance(own, tuple) and isinstance(peer, tuple)):
        return False
    return is_loopback(str(peer[0])) or str(peer[0]) == str(own[0])
