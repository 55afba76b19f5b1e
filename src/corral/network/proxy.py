"""The egress proxy: the one place where a sandbox's egress is inspected.

The slot's egress table redirects a sandbox's TCP 80/443 to this proxy when its policy has
host-name rules (``egress.PROXY_MARK``). The proxy listens inside each slot namespace (so the
listener that accepts a connection says which sandbox made it), reads the connection's first
flight -- the HTTP request head or the TLS ClientHello, never more than ``sniff.MAX_HEAD`` bytes
-- and takes the name from ``Host`` or SNI. It lets the connection through (``decide``) only when

- the name is not denied, and
- the name is allowed by a host rule and the original destination address (``SO_ORIGINAL_DST``)
  is one the sandbox's own resolver answered for that name, unexpired, and that address is not
  always-blocked unless an address rule allows it; or the mode reaches the internet and the
  address is not always-blocked (host-name deny rules in an internet mode).

So a direct IP, a forged SNI or ``Host`` and a shared CDN address the resolver gave for another
name do not get through. An allowed connection is spliced both ways as bytes, from a socket made
in the slot namespace (it leaves like the sandbox's own egress): TLS is never terminated.

Hook point: ``EgressHook.on_connect`` sees every allowed connection's first flight and returns
the bytes to send upstream in its place (the secrets issue adds header injection there).

Bounds: the first flight within ``head_timeout``, the upstream connect within
``connect_timeout``; splicing reads at most ``chunk`` bytes at a time and waits for the other side
to drain before reading more; a connection idle for ``idle_timeout`` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
from dataclasses import dataclass, field
from typing import Protocol

from corral.network import sniff
from corral.network.base import INNER_GATEWAY, NetworkFailure
from corral.network.namespaces import run_in_netns
from corral.network.sandbox_egress import SandboxEgress

__all__ = ["EgressHook", "EgressProxy", "Flow", "Verdict", "decide"]

log = logging.getLogger(__name__)
_SO_ORIGINAL_DST = 80


@dataclass(frozen=True)
class Flow:
    """One connection a sandbox opened: the name it asked for and where it was going."""

    sandbox_id: str
    name: str | None
    address: str
    port: int
    tls: bool


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str


class EgressHook(Protocol):
    async def on_connect(self, flow: Flow, head: bytes) -> bytes:
        """Return the first flight to send upstream (``head`` unchanged, or rewritten)."""
        ...


class PassThrough:
    async def on_connect(self, flow: Flow, head: bytes) -> bytes:
        return head


def decide(sandbox: SandboxEgress, name: str | None, address: str, port: int) -> Verdict:
    """Whether a proxied connection may go through (see the module docstring)."""
    policy, context = sandbox.policy, sandbox.context
    blocked = context.is_blocked(address)
    if name is not None and policy.name_denied(name):
        return Verdict(False, f"{name} is denied")
    if name is not None and policy.name_allowed_by_rule(name):
        if not sandbox.names.answered(name, address):
            return Verdict(False, f"{address} is not an address the resolver gave for {name}")
        if blocked and not _allowed_by_address_rule(sandbox, address, port):
            return Verdict(False, f"{address} ({name}) is in an always-blocked range")
        return Verdict(True, f"{name} is allowed")
    if policy.mode.internet and not blocked:
        return Verdict(True, "the mode reaches the internet")
    return Verdict(False, f"{name or 'a connection without a name'} is not allowed")


def _allowed_by_address_rule(sandbox: SandboxEgress, address: str, port: int) -> bool:
    ip = ipaddress.IPv4Address(address)
    return any(
        rule.kind == "cidr"
        and rule.network is not None
        and ip in rule.network
        and rule.matches_port(port, "tcp")
        for rule in sandbox.policy.allow
    )


@dataclass(eq=False)
class _Connection:
    flow: Flow
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def cut(self) -> None:
        for writer in self.writers:
            writer.transport.abort()


@dataclass(eq=False)
class _Listener:
    sandbox: SandboxEgress
    server: asyncio.Server
    connections: set[_Connection] = field(default_factory=set)


class EgressProxy:
    """Listens in each sandbox's slot namespace on ``context.proxy_port``. Not thread-safe; all
    methods run on one event loop."""

    def __init__(
        self,
        hook: EgressHook | None = None,
        *,
        head_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        chunk: int = 65536,
    ) -> None:
        self.hook: EgressHook = hook or PassThrough()
        self._head_timeout = head_timeout
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._chunk = chunk
        self._listeners: dict[str, _Listener] = {}

    async def serve(self, sandbox: SandboxEgress) -> None:
        if sandbox.sandbox_id in self._listeners:
            return
        port = sandbox.context.proxy_port
        sock = await asyncio.to_thread(
            run_in_netns, sandbox.slot_ns, lambda: _listen(INNER_GATEWAY, port)
        )
        holder: list[_Listener] = []
        server = await asyncio.start_server(
            lambda r, w: self._handle(holder[0], r, w), sock=sock, limit=self._chunk
        )
        holder.append(_Listener(sandbox, server))
        self._listeners[sandbox.sandbox_id] = holder[0]

    def recheck(self, sandbox_id: str) -> int:
        """After a policy change: cut the sandbox's proxied connections the new policy forbids
        (the resolver's answers stay valid). Returns how many were cut."""
        listener = self._listeners.get(sandbox_id)
        if listener is None:
            return 0
        cut = 0
        for conn in list(listener.connections):
            flow = conn.flow
            if not decide(listener.sandbox, flow.name, flow.address, flow.port).allowed:
                conn.cut()
                cut += 1
        return cut

    async def stop(self, sandbox_id: str) -> None:
        listener = self._listeners.pop(sandbox_id, None)
        if listener is None:
            return
        listener.server.close()
        for conn in list(listener.connections):
            conn.cut()
        await listener.server.wait_closed()

    async def close(self) -> None:
        for sandbox_id in list(self._listeners):
            await self.stop(sandbox_id)

    # -- one connection --------------------------------------------------------------------------

    async def _handle(
        self, listener: _Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        sandbox = listener.sandbox
        try:
            address, port = _original_destination(writer.get_extra_info("socket"))
            head = await asyncio.wait_for(_read_head(reader), self._head_timeout)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError):
            writer.transport.abort()
            return
        tls = sniff.is_tls(head)
        name = sniff.tls_server_name(head) if tls else sniff.http_host(head)
        verdict = decide(sandbox, name, address, port)
        if not verdict.allowed:
            log.info("sandbox %s: refused %s:%d: %s", sandbox.sandbox_id, address, port, verdict)
            writer.transport.abort()
            return
        flow = Flow(sandbox.sandbox_id, name, address, port, tls)
        conn = _Connection(flow, writers=[writer])
        listener.connections.add(conn)
        try:
            head = await self.hook.on_connect(flow, head)
            up_reader, up_writer = await asyncio.wait_for(
                self._connect(sandbox, address, port), self._connect_timeout
            )
            conn.writers.append(up_writer)
            up_writer.write(head)
            await up_writer.drain()
            await asyncio.gather(
                self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
            )
        except (OSError, TimeoutError, NetworkFailure) as exc:
            log.info(
                "sandbox %s: proxying to %s:%d failed: %s", sandbox.sandbox_id, address, port, exc
            )
        finally:
            listener.connections.discard(conn)
            for each in conn.writers:
                each.transport.abort()

    async def _connect(
        self, sandbox: SandboxEgress, address: str, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        sock = await asyncio.to_thread(run_in_netns, sandbox.slot_ns, _client_socket)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(sock, (address, port))
        except BaseException:
            sock.close()
            raise
        return await asyncio.open_connection(sock=sock, limit=self._chunk)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await asyncio.wait_for(reader.read(self._chunk), self._idle_timeout)
                if not data:
                    break
                writer.write(data)
                await writer.drain()
        finally:
            if writer.can_write_eof() and not writer.is_closing():
                with contextlib.suppress(OSError):
                    writer.write_eof()


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    head = b""
    while sniff.need_more(head):
        data = await reader.read(sniff.MAX_HEAD - len(head))
        if not data:
            break
        head += data
    return head


def _original_destination(sock: socket.socket | None) -> tuple[str, int]:
    if sock is None:
        raise OSError("no socket")
    raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


def _listen(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(256)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise NetworkFailure(f"binding the egress proxy on {address}:{port}: {exc}") from exc
    return sock


def _client_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
