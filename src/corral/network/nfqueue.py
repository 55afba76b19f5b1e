"""A minimal NFQUEUE client: bind one queue of a network namespace, read queued IPv4 packets,
give each a verdict (accept with a mark, or drop).

Why not a library: NetfilterQueue is published as source only (a compiler and
libnetfilter-queue's headers at install), runs a callback loop of its own and gives no
non-blocking descriptor to an event loop; fnfqueue reads in a thread of its own per
connection (one more thread per sandbox) behind a blocking iterator; pyroute2, already used
here, has no NFQUEUE. The protocol itself is small (``linux/netfilter/nfnetlink_queue.h``):
three message types and a handful of attributes, written here with ``struct``.

A queue is per network namespace: ``open_queue`` is called in the namespace (a thread that
entered it); the socket keeps belonging to it wherever it is used from. Packets the kernel
could not hand over (the socket's buffer full, nothing bound) are dropped by the kernel, never
let through: the nft rule has no ``bypass``.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from dataclasses import dataclass

__all__ = ["ACCEPT", "DROP", "QueueSocket", "Queued", "open_queue"]

NETLINK_NETFILTER = 12
_SUBSYS_QUEUE = 3
_MSG_PACKET = 0
_MSG_VERDICT = 1
_MSG_CONFIG = 2
_CFG_CMD = 1
_CFG_PARAMS = 2
_CFG_QUEUE_MAXLEN = 3
_CMD_BIND = 1
_COPY_PACKET = 2
_PACKET_HDR = 1
_VERDICT_HDR = 2
_MARK = 3
_PAYLOAD = 10
_NLM_F_REQUEST = 1
_NLM_F_ACK = 4
_NLMSG_ERROR = 2
DROP = 0
ACCEPT = 1
_HEADER = struct.Struct("=IHHII")
_ATTR = struct.Struct("=HH")


@dataclass(frozen=True)
class Queued:
    """One queued packet: its id (for the verdict) and its bytes from the IPv4 header on."""

    packet_id: int
    payload: bytes


class QueueSocket:
    """One bound queue. Not thread-safe: one reader, on one thread (the event loop)."""

    def __init__(self, sock: socket.socket, queue: int) -> None:
        self.sock = sock
        self.queue = queue
        self._seq = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self) -> list[Queued]:
        """The packets waiting now (an empty list when none; never blocks)."""
        found: list[Queued] = []
        while True:
            try:
                data = self.sock.recv(1 << 17)
            except BlockingIOError:
                return found
            except OSError as exc:  # ENOBUFS: the kernel dropped packets it could not queue
                if exc.errno == errno.ENOBUFS:
                    continue
                raise
            found += _packets(data)

    def verdict(self, packet_id: int, verdict: int, mark: int | None = None) -> None:
        attrs = _attr(_VERDICT_HDR, struct.pack("!II", verdict, packet_id))
        if mark is not None:
            attrs += _attr(_MARK, struct.pack("!I", mark))
        self._send(_MSG_VERDICT, attrs, ack=False)

    def close(self) -> None:
        self.sock.close()

    def _send(self, kind: int, attrs: bytes, *, ack: bool) -> None:
        self._seq += 1
        body = struct.pack("!BBH", socket.AF_UNSPEC, 0, self.queue) + attrs
        flags = _NLM_F_REQUEST | (_NLM_F_ACK if ack else 0)
        kind = (_SUBSYS_QUEUE << 8) | kind
        self.sock.send(_HEADER.pack(_HEADER.size + len(body), kind, flags, self._seq, 0) + body)


def open_queue(queue: int, maxlen: int = 1024) -> QueueSocket:
    """Bind ``queue`` in the calling thread's network namespace (packets copied whole);
    raises OSError when the kernel refuses (another process holds the queue, no module)."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        sock.bind((0, 0))
        bound = QueueSocket(sock, queue)
        command = _attr(_CFG_CMD, struct.pack("!BBH", _CMD_BIND, 0, socket.AF_INET))
        bound._send(_MSG_CONFIG, command, ack=True)
        _expect_ack(sock)
        params = _attr(_CFG_PARAMS, struct.pack("!IB", 0xFFFF, _COPY_PACKET))
        params += _attr(_CFG_QUEUE_MAXLEN, struct.pack("!I", maxlen))
        bound._send(_MSG_CONFIG, params, ack=True)
        _expect_ack(sock)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return bound


def _attr(kind: int, value: bytes) -> bytes:
    length = _ATTR.size + len(value)
    return _ATTR.pack(length, kind) + value + b"\0" * (-length % 4)


def _expect_ack(sock: socket.socket) -> None:
    data = sock.recv(65536)
    _, kind, _, _, _ = _HEADER.unpack_from(data)
    if kind == _NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", data, _HEADER.size)
        if error:
            raise OSError(-error, f"binding an NFQUEUE: {os.strerror(-error)}")


def _packets(data: bytes) -> list[Queued]:
    """The queued packets of one netlink read (anything else in it is skipped)."""
    found: list[Queued] = []
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _, _, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size or offset + length > len(data):
            break
        if kind == (_SUBSYS_QUEUE << 8) | _MSG_PACKET:
            packet_id, payload = None, b""
            at = offset + _HEADER.size + 4  # past the nfgenmsg
            while at + _ATTR.size <= offset + length:
                size, attr = _ATTR.unpack_from(data, at)
                if size < _ATTR.size:
                    break
                value = data[at + _ATTR.size : at + size]
                attr &= 0x7FFF
                if attr == _PACKET_HDR:
                    packet_id = struct.unpack_from("!I", value)[0]
                elif attr == _PAYLOAD:
                    payload = value
                at += (size + 3) & ~3
            if packet_id is not None:
                found.append(Queued(packet_id, payload))
        offset += (length + 3) & ~3
    return found
