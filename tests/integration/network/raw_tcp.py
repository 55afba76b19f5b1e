"""A TCP client driven segment by segment, for attacks a socket cannot make (out-of-order or
overlapping data, data before the handshake): raw IPv4 segments from a namespace of the lab.

The namespace's own TCP stack would answer the server's SYN-ACK with a reset (it knows no such
connection), so a table of the namespace drops its resets from this client's port while it
lives. Everything is removed by ``close``.
"""

from __future__ import annotations

import random
import socket
import struct
import subprocess
import time
from dataclasses import dataclass

from corral.network.base import INNER_ADDRESS
from corral.network.namespaces import run_in_netns

SYN, ACK, FIN, RST, PSH = 0x02, 0x10, 0x01, 0x04, 0x08


@dataclass(frozen=True)
class Segment:
    seq: int
    ack: int
    flags: int
    payload: bytes


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


class RawTcp:
    """One connection from ``netns`` (whose address is the sandbox's inner one) to
    ``address``:``port``."""

    def __init__(self, netns: str, address: str, port: int) -> None:
        self.netns, self.address, self.port = netns, address, port
        self.sport = random.randrange(40000, 60000)
        self.isn = random.randrange(1 << 32)
        self.table = f"rawtcp{self.sport}"
        nft = f"""table ip {self.table} {{
    chain out {{
        type filter hook output priority 0; policy accept;
        tcp sport {self.sport} tcp flags rst drop
    }}
}}"""
        subprocess.run(
            ["ip", "netns", "exec", netns, "nft", "-f", "-"], input=nft.encode(), check=True
        )
        self.sock = run_in_netns(
            netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
        )

    def send(self, flags: int, offset: int, payload: bytes = b"", ack: int = 0) -> None:
        """A segment at ``offset`` in the stream (0: the first byte after the SYN; -1: the SYN)."""
        seq = (self.isn + 1 + offset) & 0xFFFFFFFF
        header = struct.pack(
            "!HHIIHHHH", self.sport, self.port, seq, ack, (5 << 12) | flags, 65535, 0, 0
        )
        pseudo = socket.inet_aton(INNER_ADDRESS) + socket.inet_aton(self.address)
        pseudo += struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(header) + len(payload))
        check = _checksum(pseudo + header + payload)
        header = header[:16] + struct.pack("!H", check) + header[18:]
        self.sock.sendto(header + payload, (self.address, 0))

    def receive(self, timeout: float) -> Segment | None:
        """The server's next segment to this client, or None when none came in time."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                packet = self.sock.recv(65535)
            except TimeoutError:
                return None
            ihl = (packet[0] & 0x0F) * 4
            if socket.inet_ntoa(packet[12:16]) != self.address:
                continue
            sport, dport, seq, ack, off_flags = struct.unpack_from("!HHIIH", packet, ihl)
            if (sport, dport) != (self.port, self.sport):
                continue
            data = packet[ihl + (off_flags >> 12) * 4 :]
            return Segment(seq, ack, off_flags & 0x3F, data)
        return None

    def handshake(self, timeout: float = 3.0) -> int:
        """SYN, SYN-ACK, ACK; returns the ACK number to send from then on."""
        self.send(SYN, -1)
        answer = self.receive(timeout)
        assert answer is not None and answer.flags & SYN, f"no SYN-ACK: {answer}"
        ack = (answer.seq + 1) & 0xFFFFFFFF
        self.send(ACK, 0, ack=ack)
        return ack

    def reset_seen(self, timeout: float = 3.0) -> bool:
        """Whether a reset comes back (what the slot answers a refused flow with)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            answer = self.receive(left)
            if answer is None:
                return False
            if answer.flags & RST:
                return True
        return False

    def close(self) -> None:
        self.sock.close()
        subprocess.run(
            ["ip", "netns", "exec", self.netns, "nft", "delete", "table", "ip", self.table],
            capture_output=True,
        )
