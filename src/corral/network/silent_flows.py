"""Ending a fast-path flow whose sandbox never sent its first flight: with a reset to the sandbox,
and nothing to the server.

The first-flight judge (``first_flight.FirstFlights.expire``) gives up on a flow that has not
completed its first flight in time. If it holds some of the flight, the slot answers the last
held packet with a reset. A sandbox that completed the handshake and then sent nothing (a client
waiting for the server to speak first) left nothing to answer, and the slot cannot forge a
reset itself: a reset is taken only at exactly the sequence number the sandbox expects next,
which only the sandbox knows. So ``provoke`` makes the sandbox say it: it puts a SYN for the
flow on the wire to the sandbox, which its TCP answers with a challenge ACK (RFC 5961 4.2: a SYN
on an established connection, whatever its sequence number; Linux and gVisor's netstack do)
carrying that number. The challenge ACK goes out through the slot like any packet of the flow;
the judge no longer knows the flow and denies it, and the slot answers it with a reset
(``reject with tcp reset``, taken from the ACK's own acknowledgement number), which ends the
sandbox's connection. The server gets nothing; its side ends by its own idle timeout.

The SYN is written as an Ethernet frame on the slot's link to the sandbox (``AF_PACKET``): past
netfilter, so the slot's conntrack, whose entry for the flow is source-NATed, neither drops it
as a clash nor keeps a state for it. Its addresses come from the slot namespace's route and
neighbour table for the sandbox's inner address; a flow whose sandbox has no resolved neighbour
is left as before (the sandbox's next packet of it is refused with a reset). A sandbox's TCP
answers a challenge at most every half second per connection (Linux's and gVisor's default),
which one SYN per flow never reaches.
"""

from __future__ import annotations

import logging
import random
import socket
import struct
from collections.abc import Sequence
from typing import Any

from corral.network.base import INNER_ADDRESS, NetworkFailure
from corral.network.namespaces import describe, open_ipr, run_in_netns

__all__ = ["provoke", "syn_frame"]

log = logging.getLogger(__name__)

FlowKey = tuple[int, str, int]  # as first_flight.FlowKey: the sandbox's port, the server, its port
_ETH_P_IP = 0x0800
_SYN = 0x02


def provoke(slot_ns: str, flows: Sequence[FlowKey]) -> int:
    """Blocking (a worker thread): send each flow's SYN to the sandbox of ``slot_ns``; how many
    were sent. Raises NetworkFailure when the namespace or its link cannot be used."""
    if not flows:
        return 0
    return run_in_netns(slot_ns, lambda: _provoke_here(flows))


def _provoke_here(flows: Sequence[FlowKey]) -> int:
    try:
        with open_ipr("provoking silent flows") as ipr:
            index, own, sandbox = _link_to_sandbox(ipr)
    except Exception as exc:  # pyroute2 raises its own errors besides OSError
        raise NetworkFailure(f"finding the link to the sandbox: {describe(exc)}") from exc
    if sandbox is None:
        log.info("no neighbour entry for %s: silent flows not provoked", INNER_ADDRESS)
        return 0
    try:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_IP)) as sock:
            sock.bind((socket.if_indextoname(index), _ETH_P_IP))
            for sport, server, dport in flows:
                sock.send(syn_frame(own, sandbox, server, dport, INNER_ADDRESS, sport))
    except OSError as exc:
        raise NetworkFailure(f"sending a SYN to the sandbox: {exc}") from exc
    return len(flows)


def _link_to_sandbox(ipr: Any) -> tuple[int, bytes, bytes | None]:
    """The slot's link toward the sandbox's inner address: its index, its own hardware address,
    and the sandbox's (None without a resolved neighbour entry)."""
    route = ipr.route("get", dst=INNER_ADDRESS)[0]
    index = int(route.get_attr("RTA_OIF"))
    own = _mac(ipr.link("get", index=index)[0].get_attr("IFLA_ADDRESS"))
    for entry in ipr.get_neighbours(family=socket.AF_INET, ifindex=index):
        lladdr = entry.get_attr("NDA_LLADDR")
        if entry.get_attr("NDA_DST") == INNER_ADDRESS and lladdr:
            return index, own, _mac(lladdr)
    return index, own, None


def _mac(text: str) -> bytes:
    return bytes(int(part, 16) for part in text.split(":"))


def syn_frame(
    source_mac: bytes, dest_mac: bytes, source: str, sport: int, dest: str, dport: int
) -> bytes:
    """An Ethernet frame carrying a bare TCP SYN from ``source``:``sport`` to ``dest``:``dport``
    with a random sequence number (the receiver's challenge ACK does not depend on it)."""
    tcp = struct.pack(
        "!HHIIHHHH", sport, dport, random.getrandbits(32), 0, (5 << 12) | _SYN, 1024, 0, 0
    )
    pseudo = socket.inet_aton(source) + socket.inet_aton(dest)
    pseudo += struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    tcp = tcp[:16] + struct.pack("!H", _checksum(pseudo + tcp)) + tcp[18:]
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + len(tcp),
        random.getrandbits(16),
        0x4000,  # don't fragment
        64,
        socket.IPPROTO_TCP,
        0,
        socket.inet_aton(source),
        socket.inet_aton(dest),
    )
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    return dest_mac + source_mac + struct.pack("!H", _ETH_P_IP) + ip + tcp


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF
