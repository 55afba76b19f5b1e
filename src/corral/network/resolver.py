"""The DNS resolver of the sandboxes: one UDP and one TCP listener per slot, on the event loop.

Each sandbox asks ``INNER_GATEWAY:53`` (its slot namespace); the listeners' sockets are made inside
that namespace, so which sandbox asks is known from the socket, never from the packet. Answers:

- a project service's name (when the policy reaches the project): its address, locally;
- a name the policy lets resolve (``EgressPolicy.resolves``): forwarded to the host's resolvers
  (``/etc/resolv.conf``, read when the resolver starts) and passed back with only its A and CNAME
  records; the A addresses are recorded in the sandbox's ``ResolvedNames`` for the proxy;
- AAAA for such a name: an empty answer (IPv6 is blocked, so clients move on to A at once);
- anything else: REFUSED. REFUSED, not NXDOMAIN: it says what happened (policy), and a client or
  cache does not take it as proof that the name does not exist.

Parsing and building messages uses dnspython. Bounds: one question per message, 64 queries in
flight per sandbox, upstream time-out ``timeout`` seconds, TCP messages up to 65535 bytes with an
idle time-out.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import secrets
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import cast

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from corral.network.base import INNER_GATEWAY, NetworkFailure
from corral.network.namespaces import run_in_netns
from corral.network.sandbox_egress import SandboxEgress

__all__ = ["SandboxResolver", "Upstream", "bind_listeners", "read_resolv_conf"]

log = logging.getLogger(__name__)

Upstream = Callable[[bytes, bool], Awaitable[bytes]]  # (query wire, over tcp?) -> answer wire
PROJECT_TTL = 60
_MAX_INFLIGHT = 64
_TCP_IDLE = 10.0


def read_resolv_conf(path: str = "/etc/resolv.conf") -> list[str]:
    """The IPv4 ``nameserver`` addresses of a resolv.conf (at most three, like libc)."""
    found: list[str] = []
    try:
        with open(path) as conf:
            lines = conf.read(65536).splitlines()
    except OSError:
        return []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "nameserver":
            with contextlib.suppress(ValueError):
                found.append(str(ipaddress.IPv4Address(parts[1])))
    return found[:3]


@dataclass
class _Listener:
    udp: asyncio.DatagramTransport
    tcp: asyncio.Server
    inflight: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(_MAX_INFLIGHT))


class SandboxResolver:
    """Serves every sandbox's DNS. ``upstreams`` are IPv4 resolver addresses (port 53), queried
    from ``upstream_netns`` (None: the caller's namespace, the daemon's). Not thread-safe; all
    methods run on one event loop."""

    def __init__(
        self,
        upstreams: list[str] | None = None,
        *,
        upstream_netns: str | None = None,
        timeout: float = 3.0,
        upstream_port: int = 53,
    ) -> None:
        self._upstreams = upstreams if upstreams is not None else read_resolv_conf()
        self._upstream_netns = upstream_netns
        self._timeout = timeout
        self._upstream_port = upstream_port
        self._listeners: dict[str, _Listener] = {}

    async def serve(
        self,
        sandbox: SandboxEgress,
        port: int = 53,
        *,
        bound: tuple[socket.socket, socket.socket] | None = None,
    ) -> None:
        """Listen on ``INNER_GATEWAY:port`` (UDP and TCP) in the sandbox's slot namespace;
        ``bound``: the two sockets ``bind_listeners`` made there (they are then this
        resolver's, also when this call fails)."""
        if sandbox.sandbox_id in self._listeners:
            if bound is not None:
                for sock in bound:
                    sock.close()
            return
        if bound is None:
            bound = await asyncio.to_thread(
                run_in_netns, sandbox.slot_ns, lambda: bind_listeners(port)
            )
        udp_sock, tcp_sock = bound
        loop = asyncio.get_running_loop()
        holder: list[_Listener] = []
        try:
            udp, _ = await loop.create_datagram_endpoint(
                lambda: _UdpProtocol(self, sandbox, holder), sock=udp_sock
            )
        except BaseException:
            udp_sock.close()
            tcp_sock.close()
            raise
        try:
            tcp = await asyncio.start_server(
                lambda r, w: self._serve_tcp(sandbox, holder[0], r, w), sock=tcp_sock
            )
        except BaseException:
            udp.close()
            tcp_sock.close()
            raise
        holder.append(_Listener(udp, tcp))
        self._listeners[sandbox.sandbox_id] = holder[0]

    async def stop(self, sandbox_id: str) -> None:
        listener = self._listeners.pop(sandbox_id, None)
        if listener is not None:
            listener.udp.close()
            listener.tcp.close()
            await listener.tcp.wait_closed()

    async def close(self) -> None:
        for sandbox_id in list(self._listeners):
            await self.stop(sandbox_id)

    # -- the answer (pure apart from the upstream call) ------------------------------------------

    async def answer(self, sandbox: SandboxEgress, wire: bytes, upstream: Upstream) -> bytes:
        """The response to one query from ``sandbox`` (empty: send nothing, e.g. for a message that
        is itself a response); records forwarded A answers."""
        try:
            query = dns.message.from_wire(wire)
        except (dns.exception.DNSException, ValueError):
            return _formerr(wire)
        if query.flags & dns.flags.QR:
            return b""  # never answer an answer
        if len(query.question) != 1:
            return _reply(query, dns.rcode.FORMERR)
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        rdtype = question.rdtype
        policy = sandbox.policy
        if question.rdclass != dns.rdataclass.IN:
            return _reply(query, dns.rcode.REFUSED)
        service = _project_address(sandbox, name)
        if service is not None:
            response = dns.message.make_response(query)
            if rdtype == dns.rdatatype.A:
                rrset = dns.rrset.from_text(question.name, PROJECT_TTL, "IN", "A", service)
                response.answer.append(rrset)
            sandbox.names.record(name, [service], PROJECT_TTL)
            return response.to_wire()
        if not policy.resolves(name):
            return _reply(query, dns.rcode.REFUSED)
        if rdtype == dns.rdatatype.AAAA:
            return dns.message.make_response(query).to_wire()
        if rdtype in (dns.rdatatype.AXFR, dns.rdatatype.IXFR, dns.rdatatype.ANY):
            return _reply(query, dns.rcode.REFUSED)
        forwarded = dns.message.make_query(question.name, rdtype)
        forwarded.id = secrets.randbelow(65536)
        try:
            raw = await upstream(forwarded.to_wire(), False)
            upstream_answer = dns.message.from_wire(raw)
            if upstream_answer.flags & dns.flags.TC:
                upstream_answer = dns.message.from_wire(await upstream(forwarded.to_wire(), True))
        except (OSError, TimeoutError, dns.exception.DNSException, ValueError) as exc:
            log.info("sandbox %s: upstream DNS for %s failed: %s", sandbox.sandbox_id, name, exc)
            return _reply(query, dns.rcode.SERVFAIL)
        if not forwarded.is_response(upstream_answer):
            return _reply(query, dns.rcode.SERVFAIL)
        response = dns.message.make_response(query)
        response.set_rcode(upstream_answer.rcode())
        kept = (dns.rdatatype.A, dns.rdatatype.CNAME, rdtype)
        response.answer = [
            rrset
            for rrset in upstream_answer.answer
            if rrset.rdtype in kept and rrset.rdtype != dns.rdatatype.AAAA
        ]
        addresses = [
            rdata.address
            for rrset in response.answer
            if rrset.rdtype == dns.rdatatype.A
            for rdata in rrset
        ]
        if addresses:
            ttl = min(rrset.ttl for rrset in response.answer if rrset.rdtype == dns.rdatatype.A)
            sandbox.names.record(name, addresses, ttl)
        return response.to_wire()

    # -- upstream --------------------------------------------------------------------------------

    async def _upstream(self, wire: bytes, tcp: bool) -> bytes:
        if not self._upstreams:
            raise OSError("no upstream resolver (no IPv4 nameserver in /etc/resolv.conf)")
        failure: BaseException | None = None
        for address in self._upstreams:
            try:
                return await asyncio.wait_for(self._ask(address, wire, tcp), self._timeout)
            except (OSError, TimeoutError) as exc:
                failure = exc
        raise OSError(f"every upstream resolver failed: {failure}")

    async def _ask(self, address: str, wire: bytes, tcp: bool) -> bytes:
        loop = asyncio.get_running_loop()
        kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
        sock = await asyncio.to_thread(self._socket, kind)
        with sock:
            target = (address, self._upstream_port)
            if tcp:
                await loop.sock_connect(sock, target)
                await loop.sock_sendall(sock, struct.pack("!H", len(wire)) + wire)
                size = struct.unpack("!H", await _recv_exactly(loop, sock, 2))[0]
                return await _recv_exactly(loop, sock, size)
            await loop.sock_sendto(sock, wire, target)
            while True:
                data, peer = await loop.sock_recvfrom(sock, 65535)
                if peer[0] == address and data[:2] == wire[:2]:
                    return data

    def _socket(self, kind: int) -> socket.socket:
        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, kind)
            sock.setblocking(False)
            return sock

        if self._upstream_netns is None:
            return make()
        return run_in_netns(self._upstream_netns, make)

    # -- listeners -------------------------------------------------------------------------------

    async def _serve_tcp(
        self,
        sandbox: SandboxEgress,
        listener: _Listener,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        try:
            while True:
                size_bytes = await asyncio.wait_for(reader.readexactly(2), _TCP_IDLE)
                size = struct.unpack("!H", size_bytes)[0]
                wire = await asyncio.wait_for(reader.readexactly(size), _TCP_IDLE)
                async with listener.inflight:
                    reply = await self.answer(sandbox, wire, self._upstream)
                if not reply:
                    break
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, TimeoutError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(
        self, resolver: SandboxResolver, sandbox: SandboxEgress, holder: list[_Listener]
    ) -> None:
        self._resolver = resolver
        self._sandbox = sandbox
        self._holder = holder
        self._transport: asyncio.DatagramTransport | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if not self._holder or self._holder[0].inflight.locked():
            return  # over the bound: drop, the client retries
        task = asyncio.ensure_future(self._handle(data, addr))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _handle(self, data: bytes, addr: tuple[str, int]) -> None:
        async with self._holder[0].inflight:
            reply = await self._resolver.answer(self._sandbox, data, self._resolver._upstream)
        if not reply:
            return
        if len(reply) > 512 and not _has_edns(data):
            reply = _truncate(reply)
        if self._transport is not None and not self._transport.is_closing():
            self._transport.sendto(reply, addr)


def bind_listeners(port: int = 53) -> tuple[socket.socket, socket.socket]:
    """(In a slot namespace.) The resolver's UDP and TCP sockets on ``INNER_GATEWAY:port``."""
    return _bind_pair(INNER_GATEWAY, port)


def _bind_pair(address: str, port: int) -> tuple[socket.socket, socket.socket]:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        udp.setblocking(False)
        tcp.setblocking(False)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        udp.bind((address, port))
        tcp.bind((address, port))
        tcp.listen(64)
    except OSError as exc:
        udp.close()
        tcp.close()
        raise NetworkFailure(f"binding the sandbox resolver on {address}:{port}: {exc}") from exc
    return udp, tcp


async def _recv_exactly(loop: asyncio.AbstractEventLoop, sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = await loop.sock_recv(sock, size - len(data))
        if not chunk:
            raise OSError("upstream resolver closed the connection")
        data += chunk
    return data


def _project_address(sandbox: SandboxEgress, name: str) -> str | None:
    if not sandbox.policy.reaches_project or sandbox.policy.name_denied(name):
        return None
    for service in sandbox.context.services:
        if service.name.lower() == name:
            return service.address
    return None


def _reply(query: dns.message.Message, rcode: dns.rcode.Rcode) -> bytes:
    response = dns.message.make_response(query)
    response.set_rcode(rcode)
    return response.to_wire()


def _formerr(wire: bytes) -> bytes:
    if len(wire) < 2:
        return b""
    # Header only: the id, QR set, FORMERR; no question could be parsed to echo.
    return wire[:2] + struct.pack("!HHHHH", 0x8001, 0, 0, 0, 0)


def _has_edns(wire: bytes) -> bool:
    with contextlib.suppress(dns.exception.DNSException, ValueError):
        return dns.message.from_wire(wire).edns >= 0
    return False


def _truncate(reply: bytes) -> bytes:
    response = dns.message.from_wire(reply)
    response.answer = []
    response.flags |= dns.flags.TC
    return response.to_wire()
