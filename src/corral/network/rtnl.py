"""A minimal rtnetlink client for building slots: the few link, address and route requests a
slot's set-up makes, packed by hand on one netlink socket of the calling thread's namespace.

Why not pyroute2 (which the rest of the network package uses): each of its synchronous calls runs
a request through its asyncio core and its message classes, ~0.2-0.4 ms of CPU per request
here, and a slot's set-up makes about 30 of them (with a socket per namespace). That build runs
beside ``runsc run`` (the spare slot is rebuilt as a sandbox boots) on a host whose cores runsc
wants, so its CPU lands on the boot. Packed by hand, a request costs a few microseconds of
Python; the kernel's work is the same.

Scope: what ``slot_kernel`` and ``egress_apply`` need (a veth pair with its peer in another
namespace, a link up, an IPv4 address, a default route, a link's index, a link's deletion);
reads of the kernel's tables stay with pyroute2. Every request asks for an acknowledgement,
and a refusal is raised as ``OSError`` with the kernel's errno (``NetlinkError``'s role in
pyroute2), so callers wrap it with ``namespaces.step`` as before. Not thread-safe: one thread
uses one ``Rtnl``.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from types import TracebackType

__all__ = ["Rtnl"]

_NETLINK_ROUTE = 0
_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port
_IFINFO = struct.Struct("=BxHiII")  # ifinfomsg: family, type, index, flags, change
_IFADDR = struct.Struct("=BBBBI")  # ifaddrmsg: family, prefix length, flags, scope, index
_RTMSG = struct.Struct("=BBBBBBBBI")  # rtmsg: family, dst/src len, tos, table, proto, scope, type
_ATTR = struct.Struct("=HH")
_ERROR = struct.Struct("=i")

_NLMSG_ERROR = 2
_RTM_NEWLINK, _RTM_DELLINK, _RTM_GETLINK = 16, 17, 18
_RTM_NEWADDR, _RTM_NEWROUTE = 20, 24
_F_REQUEST, _F_ACK = 0x1, 0x4
_F_REPLACE, _F_EXCL, _F_CREATE = 0x100, 0x200, 0x400
_IFF_UP = 0x1
_IFLA_IFNAME, _IFLA_LINKINFO, _IFLA_NET_NS_FD = 3, 18, 28
_IFLA_INFO_KIND, _IFLA_INFO_DATA, _VETH_INFO_PEER = 1, 2, 1
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_RTA_OIF, _RTA_GATEWAY = 4, 5
_RT_TABLE_MAIN, _RTPROT_BOOT, _RT_SCOPE_UNIVERSE, _RTN_UNICAST = 254, 3, 0, 1
_MAX_ANSWER = 65536


def _attr(kind: int, payload: bytes) -> bytes:
    size = _ATTR.size + len(payload)
    return _ATTR.pack(size, kind) + payload + b"\0" * (-size % 4)


def _name(kind: int, name: str) -> bytes:
    return _attr(kind, name.encode() + b"\0")


def _link(index: int = 0, *, up: bool = False) -> bytes:
    flag = _IFF_UP if up else 0
    return _IFINFO.pack(socket.AF_UNSPEC, 0, index, flag, flag)


class Rtnl:
    """One rtnetlink socket in the namespace of the thread that opened it (a context manager)."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE)
        try:
            self._sock.bind((0, 0))
        except OSError:
            self._sock.close()
            raise
        self._sequence = 0

    def __enter__(self) -> Rtnl:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()

    # -- requests --------------------------------------------------------------------------------

    def add_veth(self, name: str, peer: str, peer_netns_fd: int) -> None:
        """A veth pair: ``name`` up in this namespace, ``peer`` (down) in namespace
        ``peer_netns_fd``; EEXIST if ``name`` exists."""
        peer_info = _link() + _name(_IFLA_IFNAME, peer)
        peer_info += _attr(_IFLA_NET_NS_FD, struct.pack("=I", peer_netns_fd))
        info = _attr(_IFLA_INFO_KIND, b"veth\0")
        info += _attr(_IFLA_INFO_DATA, _attr(_VETH_INFO_PEER, peer_info))
        body = _link(up=True) + _name(_IFLA_IFNAME, name) + _attr(_IFLA_LINKINFO, info)
        self._request(_RTM_NEWLINK, _F_CREATE | _F_EXCL, body)

    def set_up(self, name: str) -> None:
        self._request(_RTM_NEWLINK, 0, _link(up=True) + _name(_IFLA_IFNAME, name))

    def index(self, name: str) -> int:
        """The link's index; ``OSError(ENODEV)`` if there is none."""
        answer = self._exchange(_RTM_GETLINK, 0, _link() + _name(_IFLA_IFNAME, name), ack=False)
        kind, payload = answer
        if kind != _RTM_NEWLINK or len(payload) < _IFINFO.size:
            raise OSError(errno.EPROTO, f"unexpected answer {kind} to a link lookup")
        return int(_IFINFO.unpack_from(payload)[2])

    def add_address(self, index: int, address: str, prefixlen: int) -> None:
        """An IPv4 address on link ``index`` (EEXIST if it has it)."""
        packed = socket.inet_aton(address)
        body = _IFADDR.pack(socket.AF_INET, prefixlen, 0, _RT_SCOPE_UNIVERSE, index)
        body += _attr(_IFA_LOCAL, packed) + _attr(_IFA_ADDRESS, packed)
        self._request(_RTM_NEWADDR, _F_CREATE | _F_EXCL, body)

    def replace_default_route(self, gateway: str, oif: int | None = None) -> None:
        """The IPv4 default route of the main table, through ``gateway`` (made or replaced)."""
        body = _RTMSG.pack(
            socket.AF_INET,
            0,
            0,
            0,
            _RT_TABLE_MAIN,
            _RTPROT_BOOT,
            _RT_SCOPE_UNIVERSE,
            _RTN_UNICAST,
            0,
        )
        body += _attr(_RTA_GATEWAY, socket.inet_aton(gateway))
        if oif is not None:
            body += _attr(_RTA_OIF, struct.pack("=I", oif))
        self._request(_RTM_NEWROUTE, _F_CREATE | _F_REPLACE, body)

    def delete_link(self, name: str) -> bool:
        """Delete the link if present; returns whether it was."""
        try:
            self._request(_RTM_DELLINK, 0, _link() + _name(_IFLA_IFNAME, name))
        except OSError as exc:
            if exc.errno == errno.ENODEV:
                return False
            raise
        return True

    # -- the wire --------------------------------------------------------------------------------

    def _request(self, kind: int, flags: int, body: bytes) -> None:
        self._exchange(kind, flags, body, ack=True)

    def _exchange(self, kind: int, flags: int, body: bytes, *, ack: bool) -> tuple[int, bytes]:
        """Send one request; return the first answer to it (type, payload), or raise the
        kernel's error (an acknowledgement is an error message carrying 0)."""
        self._sequence += 1
        sequence = self._sequence
        flags |= _F_REQUEST | (_F_ACK if ack else 0)
        self._sock.send(_HEADER.pack(_HEADER.size + len(body), kind, flags, sequence, 0) + body)
        while True:
            data = self._sock.recv(_MAX_ANSWER)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, answer, _, seq, _ = _HEADER.unpack_from(data, offset)
                if length < _HEADER.size:
                    raise OSError(errno.EPROTO, "a malformed netlink answer")
                payload = data[offset + _HEADER.size : offset + length]
                offset += (length + 3) & ~3
                if seq != sequence:
                    continue  # an answer to an earlier request that gave up
                if answer == _NLMSG_ERROR:
                    (code,) = _ERROR.unpack_from(payload)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                return answer, payload
