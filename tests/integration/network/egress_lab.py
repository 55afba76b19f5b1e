"""A lab for the egress mechanism, built only of namespaces the test makes (``eg`` + hex prefix)::

    P-inet  "the internet": 198.18.0.2-.6 (HTTP 80, HTTPS 443 with a test CA, DNS 53),
            172.31.77.5 (a project service on 5432, a private address)
      | veth eth0 / P-up (198.18.0.1)
    P-host  stands in for the daemon's namespace: firewall.HostRules with egress, ip_forward
      | veths made by slot_kernel.py's real slot builder (subnet 198.19.77.0/24)
    P-slot-N  firewall.SlotRules + egress.SlotEgress, the resolver and the proxy listen here
    P-sbx-N   stands in for the gVisor sandbox (a plain namespace)

Servers and clients are sockets made inside those namespaces and driven by the test's event loop,
so no traffic ever leaves them; teardown deletes every namespace of the prefix, also on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import secrets
import socket
import ssl
import struct
import subprocess
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from corral.network import firewall, slot_kernel, slot_plan
from corral.network.base import INNER_GATEWAY
from corral.network.egress import EgressContext, SlotEgress, fast_ports
from corral.network.egress_apply import apply_slot_egress
from corral.network.fast_path import FastPath
from corral.network.namespaces import (
    add_veth,
    ensure_address,
    list_netns,
    netns_path,
    open_ipr,
    remove_netns,
    run_in_netns,
    run_in_new_netns,
    set_up,
    write_sysctl,
)
from corral.network.policy import EgressPolicy, ProjectService
from corral.network.proxy import EgressProxy
from corral.network.resolver import SandboxResolver
from corral.network.sandbox_egress import SandboxEgress

SLOT_SUBNET = "198.19.77.0/24"
GATEWAY = "198.18.0.1"
WEB = "198.18.0.2"  # api.example.test
OTHER = "198.18.0.3"  # other.example.test
EVIL = "198.18.0.4"  # evil.example.test
CDN = "198.18.0.6"  # a.cdn.test and b.cdn.test share it
METADATA = "169.254.169.254"  # served in P-inet, so only the policy stands in the way
SERVICE = ProjectService("db.project", "172.31.77.5", (5432,))
ZONE = {
    "api.example.test": [WEB],
    "other.example.test": [OTHER],
    "evil.example.test": [EVIL],
    "a.cdn.test": [CDN],
    "b.cdn.test": [CDN],
    "rebind.example.test": [METADATA],  # an allowed name that points at the metadata address
}
ECHO_PORT = 7
INET_ADDRESSES = (WEB, OTHER, EVIL, "198.18.0.5", CDN)


def sweep(prefix: str) -> None:
    for name in list_netns():
        if name.startswith(f"{prefix}-"):
            remove_netns(name)


def in_netns_socket(netns: str, kind: int = socket.SOCK_STREAM) -> socket.socket:
    def make() -> socket.socket:
        sock = socket.socket(socket.AF_INET, kind)
        sock.setblocking(False)
        return sock

    return run_in_netns(netns, make)


@dataclass
class LabCA:
    directory: Path
    names: list[str]
    cert_path: Path = field(init=False)
    key_path: Path = field(init=False)
    ca_path: Path = field(init=False)

    def __post_init__(self) -> None:
        now = datetime.datetime.now(datetime.UTC)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corral egress test CA")])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, self.names[0])]))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=2))
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(name) for name in self.names]),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        self.ca_path = self.directory / "ca.pem"
        self.cert_path = self.directory / "cert.pem"
        self.key_path = self.directory / "key.pem"
        self.ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        self.cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key_path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_path, self.key_path)
        return context

    def client_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_path))
        return context


class Lab:
    """The namespaces, the fake internet's servers, and the mechanism under test."""

    def __init__(self, prefix: str, tmp: Path, *, fast_timeout: float = 3.0) -> None:
        self.prefix = prefix
        self.host_ns = f"{prefix}-host"
        self.inet_ns = f"{prefix}-inet"
        self.plan = slot_plan.SlotPlan(prefix, SLOT_SUBNET)
        self.ca = LabCA(tmp, [*ZONE])
        self.servers: list[asyncio.Server | asyncio.DatagramTransport] = []
        self.resolver = SandboxResolver([WEB], upstream_netns=self.host_ns, timeout=2.0)
        self.proxy = EgressProxy(head_timeout=3.0, connect_timeout=3.0)
        self.fast = FastPath(timeout=fast_timeout)
        self.sandboxes: dict[int, SandboxEgress] = {}
        self.dns_queries = 0

    # -- building --------------------------------------------------------------------------------

    async def build(self, slot_count: int = 2) -> None:
        await asyncio.to_thread(self._build_namespaces, slot_count)
        await self._start_servers()

    def _build_namespaces(self, slot_count: int) -> None:
        run_in_new_netns(self.inet_ns, lambda: None)
        inet_fd = open_fd(self.inet_ns)
        try:
            run_in_new_netns(self.host_ns, lambda: self._wire_host(inet_fd))
        finally:
            os.close(inet_fd)
        run_in_netns(self.inet_ns, self._wire_inet)
        for index in range(slot_count):
            layout = self.plan.layout(index)
            run_in_netns(
                self.host_ns,
                lambda layout=layout: slot_kernel.ensure_slot(layout, self.prefix, False),
            )

    def _wire_host(self, inet_fd: int) -> None:
        write_sysctl("net/ipv4/ip_forward", "1")
        uplink = f"{self.prefix}-up"
        with open_ipr("lab host") as ipr:
            set_up(ipr, "lo")
            add_veth(ipr, uplink, "eth0", inet_fd)
            set_up(ipr, uplink)
            ensure_address(ipr, uplink, GATEWAY, 24)
            ipr.route("replace", dst="172.31.77.0/24", gateway=WEB)
            ipr.route("replace", dst=f"{METADATA}/32", gateway=WEB)
        rules = firewall.HostRules(
            table=self.prefix, veth_pattern=self.plan.veth_pattern, egress_uplinks=(uplink,)
        )
        firewall.commit(rules.render(), "lab host")

    def _wire_inet(self) -> None:
        with open_ipr("lab inet") as ipr:
            set_up(ipr, "lo")
            set_up(ipr, "eth0")
            for address in INET_ADDRESSES:
                ensure_address(ipr, "eth0", address, 24)
            ensure_address(ipr, "lo", SERVICE.address, 32)
            ensure_address(ipr, "lo", METADATA, 32)

    async def _start_servers(self) -> None:
        tls = self.ca.server_context()
        for address in INET_ADDRESSES:
            self.servers.append(await self._tcp_server(address, 80, self._http, None))
            self.servers.append(await self._tcp_server(address, 443, self._http, tls))
        self.servers.append(await self._tcp_server(SERVICE.address, 5432, self._http, None))
        self.servers.append(await self._tcp_server(METADATA, 80, self._http, None))
        self.servers.append(await self._tcp_server(WEB, 53, self._dns_tcp, None))
        loop = asyncio.get_running_loop()
        udp = await asyncio.to_thread(self._bound, WEB, 53, socket.SOCK_DGRAM)
        transport, _ = await loop.create_datagram_endpoint(lambda: _DnsUdp(self), sock=udp)
        self.servers.append(transport)
        echo = await asyncio.to_thread(self._bound, WEB, ECHO_PORT, socket.SOCK_DGRAM)
        self.echo = _UdpEcho()
        transport, _ = await loop.create_datagram_endpoint(lambda: self.echo, sock=echo)
        self.servers.append(transport)

    def _bound(self, address: str, port: int, kind: int) -> socket.socket:
        def make() -> socket.socket:
            sock = socket.socket(socket.AF_INET, kind)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            if kind == socket.SOCK_STREAM:
                sock.listen(64)
            sock.setblocking(False)
            return sock

        return run_in_netns(self.inet_ns, make)

    async def _tcp_server(
        self, address: str, port: int, handler: Callable[..., Any], tls: ssl.SSLContext | None
    ) -> asyncio.Server:
        sock = await asyncio.to_thread(self._bound, address, port, socket.SOCK_STREAM)
        return await asyncio.start_server(handler, sock=sock, ssl=tls)

    async def _http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HTTP/1.1 keep-alive; answers which server address took the request."""
        here = writer.get_extra_info("sockname")[0]
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ssl.SSLError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                size = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        size = int(line.split(b":")[1])
                body = await reader.readexactly(size) if size else b""
                reply = f"{here} {len(body)}".encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(reply), reply)
                )
                await writer.drain()
        writer.close()

    def dns_answer(self, wire: bytes) -> bytes:
        self.dns_queries += 1
        query = dns.message.from_wire(wire)
        response = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True)
        if name not in ZONE:
            response.set_rcode(dns.rcode.NXDOMAIN)
        elif question.rdtype == dns.rdatatype.A:
            response.answer.append(dns.rrset.from_text(question.name, 300, "IN", "A", *ZONE[name]))
        elif question.rdtype == dns.rdatatype.AAAA:
            response.answer.append(
                dns.rrset.from_text(question.name, 300, "IN", "AAAA", "2001:db8::1")
            )
        return response.to_wire()

    async def _dns_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            size = struct.unpack("!H", await reader.readexactly(2))[0]
            reply = self.dns_answer(await reader.readexactly(size))
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
        writer.close()

    # -- the mechanism under test ----------------------------------------------------------------

    async def context(self) -> EgressContext:
        from corral.network.egress_apply import host_ipv4_addresses

        hosts = await asyncio.to_thread(run_in_netns, self.host_ns, host_ipv4_addresses)
        return EgressContext(SLOT_SUBNET, hosts, (SERVICE,), proxy_port=15001)

    async def attach(self, index: int, policy: EgressPolicy) -> SandboxEgress:
        """Give slot ``index`` its egress: ruleset, resolver, proxy (what the service will do)."""
        sandbox = SandboxEgress(
            f"sbx{index}", self.plan.layout(index).slot_ns, policy, await self.context()
        )
        self.sandboxes[index] = sandbox
        await self.apply(index, fresh=True)  # as the service attaches a slot built for it
        await self.resolver.serve(sandbox)
        await self.proxy.serve(sandbox)
        return sandbox

    async def apply(
        self, index: int, policy: EgressPolicy | None = None, *, fresh: bool = False
    ) -> int:
        """Commit the slot's egress for its (new) policy; returns the conntrack flows forgotten.
        ``fresh``: the slot's first egress (``egress_apply.commit_slot_egress``)."""
        sandbox = self.sandboxes[index]
        if policy is not None:
            sandbox.update(policy)
        if fast_ports(sandbox.policy, False):
            await self.fast.serve(sandbox)
        layout = self.plan.layout(index)
        egress = SlotEgress(
            table=self.prefix,
            uplink=slot_plan.UPLINK,
            downlink=slot_plan.DOWNLINK,
            slot_address=layout.slot_address,
            policy=sandbox.policy,
            context=sandbox.context,
        )
        keep = self.fast.keep(sandbox.sandbox_id)
        forgotten = await asyncio.to_thread(
            lambda: apply_slot_egress(
                layout.slot_ns, egress, layout.host_side_address, fresh=fresh, keep=keep
            )
        )
        self.proxy.recheck(sandbox.sandbox_id)
        return forgotten

    # -- the sandbox's side ----------------------------------------------------------------------

    def sbx(self, index: int) -> str:
        return self.plan.layout(index).sandbox_ns

    async def connect(
        self,
        index: int,
        address: str,
        port: int,
        *,
        tls_name: str | None = None,
        timeout: float = 2.0,
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = await asyncio.to_thread(in_netns_socket, self.sbx(index))
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.sock_connect(sock, (address, port)), timeout)
        except BaseException:
            sock.close()
            raise
        context = self.ca.client_context() if tls_name else None
        return await asyncio.wait_for(
            asyncio.open_connection(sock=sock, ssl=context, server_hostname=tls_name), timeout
        )

    async def fetch(
        self,
        index: int,
        address: str,
        port: int = 80,
        *,
        host: str | None = None,
        tls_name: str | None = None,
        timeout: float = 2.0,
    ) -> str:
        """One HTTP(S) request; the answer's first word (the server's address) or ``blocked``."""
        try:
            reader, writer = await self.connect(
                index, address, port, tls_name=tls_name, timeout=timeout
            )
            try:
                return await asyncio.wait_for(
                    request(reader, writer, host or tls_name or address), timeout
                )
            finally:
                writer.transport.abort()
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
            return "blocked"

    async def dig(
        self,
        index: int,
        name: str,
        rdtype: str = "A",
        *,
        server: str = INNER_GATEWAY,
        tcp: bool = False,
        timeout: float = 2.0,
    ) -> tuple[str, list[str]]:
        """(rcode text, addresses) of one query from the sandbox, or ("blocked", [])."""
        query = dns.message.make_query(name, rdtype)
        wire = query.to_wire()
        loop = asyncio.get_running_loop()
        kind = socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM
        sock = await asyncio.to_thread(in_netns_socket, self.sbx(index), kind)
        try:
            with sock:
                await asyncio.wait_for(loop.sock_connect(sock, (server, 53)), timeout)
                if tcp:
                    await loop.sock_sendall(sock, struct.pack("!H", len(wire)) + wire)
                    raw = await asyncio.wait_for(_read_tcp_dns(loop, sock), timeout)
                else:
                    await loop.sock_sendall(sock, wire)
                    raw = await asyncio.wait_for(loop.sock_recv(sock, 65535), timeout)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return "blocked", []
        answer = dns.message.from_wire(raw)
        addresses = [
            rdata.to_text()
            for rrset in answer.answer
            for rdata in rrset
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA)
        ]
        return dns.rcode.to_text(answer.rcode()), addresses

    # -- teardown --------------------------------------------------------------------------------

    async def close(self) -> None:
        await self.fast.close()
        await self.proxy.close()
        await self.resolver.close()
        for server in self.servers:
            server.close()
        for server in self.servers:
            if isinstance(server, asyncio.Server):
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(server.wait_closed(), 2)


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, host: str) -> str:
    writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    size = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = await reader.readexactly(size)
    return body.decode().split()[0]


async def _read_tcp_dns(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 2 or len(data) < 2 + struct.unpack("!H", data[:2])[0]:
        chunk = await loop.sock_recv(sock, 65535)
        if not chunk:
            raise OSError("closed")
        data += chunk
    return data[2:]


class _UdpEcho(asyncio.DatagramProtocol):
    """Echoes datagrams on ``ECHO_PORT``; ``push`` sends one unasked to the last peer."""

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.peer: tuple[str, int] | None = None
        self.received: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        self.peer = addr
        self.received.append(data)
        self.transport.sendto(data, addr)

    def push(self, data: bytes) -> None:
        assert self.transport is not None and self.peer is not None
        self.transport.sendto(data, self.peer)


class _DnsUdp(asyncio.DatagramProtocol):
    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        self.transport.sendto(self.lab.dns_answer(data), addr)


def open_fd(netns: str) -> int:
    return os.open(netns_path(netns), os.O_RDONLY)


def new_prefix() -> str:
    return f"eg{secrets.token_hex(3)}"


def leftovers(prefix: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"{prefix}-")]


@contextlib.asynccontextmanager
async def built_lab(
    tmp_path: Path, slot_count: int = 2, *, fast_timeout: float = 3.0
) -> AsyncIterator[Lab]:
    """A lab of ``slot_count`` slots under a fresh prefix, torn down after, and checked to have
    left no namespace, veth or nft table behind (swept either way). ``fast_timeout``: how long
    the first-flight judge waits for a flow's first flight."""
    prefix = new_prefix()
    made = Lab(prefix, tmp_path, fast_timeout=fast_timeout)
    try:
        await made.build(slot_count=slot_count)
        yield made
    finally:
        await made.close()
        sweep(prefix)
        assert leftovers(prefix) == []
