"""network/silent_flows.py's frame: what the sandbox's TCP stack checks before it answers a SYN
(a well-formed IPv4 header and TCP segment with both checksums right, to the flow's ports)."""

from __future__ import annotations

import socket
import struct

from corral.network.silent_flows import syn_frame

OWN, SANDBOX = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def _sum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return total


def test_the_syn_is_addressed_as_the_server_to_the_sandboxs_port_with_valid_checksums() -> None:
    frame = syn_frame(OWN, SANDBOX, "203.0.113.7", 443, "169.254.0.21", 40123)
    assert frame[:6] == SANDBOX and frame[6:12] == OWN and frame[12:14] == b"\x08\x00"
    ip, tcp = frame[14:34], frame[34:]
    assert ip[0] == 0x45 and ip[9] == socket.IPPROTO_TCP
    assert struct.unpack("!H", ip[2:4])[0] == len(ip) + len(tcp) == 40
    assert socket.inet_ntoa(ip[12:16]) == "203.0.113.7"
    assert socket.inet_ntoa(ip[16:20]) == "169.254.0.21"
    assert _sum(ip) == 0xFFFF  # the header checksum
    sport, dport, _seq, ack, offset_flags = struct.unpack("!HHIIH", tcp[:14])
    assert (sport, dport, ack) == (443, 40123, 0)
    assert offset_flags == (5 << 12) | 0x02  # a bare SYN, no options, no data
    pseudo = ip[12:20] + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(tcp))
    assert _sum(pseudo + tcp) == 0xFFFF  # the segment's checksum
