"""The egress proxy: the one place where a sandbox's egress is inspected.

The slot redirects to this proxy (``egress.PROXY_MARK``) the TCP 80/443 of a sandbox with
host-name rules that the first-flight judge does not take (``first_flight.py``: a SYN to an
address the resolver gave no allowed name), the TLS of a sandbox with brokered secrets, and
connections to sandbox services. The proxy listens inside each slot namespace (so the
listener that accepts a connection says which sandbox made it), reads the connection's first
flight -- the HTTP request head or the TLS ClientHello, never more than ``sniff.MAX_HEAD`` bytes
-- and takes the name from ``Host`` or SNI. It lets the connection through only when
``egress_decision.decide`` says so (a direct IP, a forged SNI or ``Host`` and a shared CDN
address the resolver gave for another name do not get through). An allowed connection is
spliced both ways as bytes, from a socket made in the slot namespace (it leaves like the
sandbox's own egress): TLS is never terminated.

Hook points: ``EgressHook.on_connect`` sees every allowed connection's first flight (an HTTP
request head, or a ClientHello) and returns the bytes to send upstream in its place. The
credential broker (``broker/``, given as ``broker``) may claim an allowed TLS connection whose
name one of the sandbox's secrets is bound to and whose address the sandbox's resolver answered
for that name: it then terminates TLS on both sides (``Broker.serve``) instead of the splice.
A connection to a sandbox service's virtual address asks ``routes`` where it goes.

Bounds: the first flight within ``head_timeout``, the upstream connect within
``connect_timeout``; splicing (``network/splice.py``, in the kernel) holds at most one pipeful per
direction and waits for the other side to drain before reading more; a connection idle for
``idle_timeout`` is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from dataclasses import dataclass, field

from corral.network import sniff, splice
from corral.network.base import INNER_GATEWAY, NetworkFailure
from corral.network.broker.intercept import Broker
from corral.network.egress import is_service_address
from corral.network.egress_decision import EgressHook, Flow, PassThrough, decide
from corral.network.namespaces import run_in_netns
from corral.network.sandbox_egress import SandboxEgress
from corral.network.service_routes import ServiceRoutes

__all__ = ["EgressProxy", "bind_listener"]

log = logging.getLogger(__name__)
_SO_ORIGINAL_DST = 80


@dataclass(eq=False)
class _Connection:
    """One proxied connection: its two sockets and the task that serves it."""

    flow: Flow | None
    client: socket.socket
    task: asyncio.Task[None] | None = None
    upstream: socket.socket | None = None

    def cut(self) -> None:
        if self.task is not None:
            self.task.cancel()


class _SocketPool:
    """Unconnected client sockets made ahead in a slot namespace: making one there takes a
    thread that enters the namespace (about a millisecond), which a connection should not wait
    for. Holds at most ``size``; refilled in the background once it is half empty."""

    def __init__(self, slot_ns: str, size: int = 16) -> None:
        self._slot_ns = slot_ns
        self._size = size
        self._ready: list[socket.socket] = []
        self._refill: asyncio.Task[None] | None = None

    async def take(self) -> socket.socket:
        sock = self._ready.pop() if self._ready else None
        if len(self._ready) <= self._size // 2 and (self._refill is None or self._refill.done()):
            self._refill = asyncio.create_task(self._fill())
        if sock is None:
            sock = await asyncio.to_thread(run_in_netns, self._slot_ns, _client_socket)
        return sock

    async def _fill(self) -> None:
        while (missing := self._size - len(self._ready)) > 0:
            made = await asyncio.to_thread(
                run_in_netns, self._slot_ns, lambda: [_client_socket() for _ in range(missing)]
            )
            self._ready.extend(made)
            for extra in self._ready[self._size :]:
                extra.close()
            del self._ready[self._size :]

    async def close(self) -> None:
        if self._refill is not None:
            with contextlib.suppress(Exception):
                await self._refill
        for sock in self._ready:
            sock.close()
        self._ready.clear()


@dataclass(eq=False)
class _Listener:
    sandbox: SandboxEgress
    sock: socket.socket
    pool: _SocketPool
    accepting: asyncio.Task[None] | None = None
    connections: set[_Connection] = field(default_factory=set)


class EgressProxy:
    """Listens in each sandbox's slot namespace on ``context.proxy_port``. Not thread-safe; all
    methods run on one event loop. Sockets are driven directly (``loop.sock_*``, and
    ``splice.copy`` once a connection is let through; ``chunk`` is not used since)."""

    def __init__(
        self,
        hook: EgressHook | None = None,
        *,
        head_timeout: float = 10.0,
        connect_timeout: float = 10.0,
        idle_timeout: float = 300.0,
        chunk: int = 262144,
        max_connections: int = 1024,
        broker: Broker | None = None,
        routes: ServiceRoutes | None = None,
    ) -> None:
        self.hook: EgressHook = hook or PassThrough()
        self.broker = broker
        # Where connections to sandbox services go (the service layer answers).
        self.routes = routes
        self._head_timeout = head_timeout
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._chunk = chunk
        self._max_connections = max_connections
        self._listeners: dict[str, _Listener] = {}

    async def serve(self, sandbox: SandboxEgress, *, bound: socket.socket | None = None) -> None:
        """Listen on ``context.proxy_port`` in the sandbox's slot namespace; ``bound``: the
        socket ``bind_listener`` made there (then this proxy's, also when this call fails)."""
        if sandbox.sandbox_id in self._listeners:
            if bound is not None:
                bound.close()
            return
        port = sandbox.context.proxy_port
        sock = bound
        if sock is None:
            sock = await asyncio.to_thread(
                run_in_netns, sandbox.slot_ns, lambda: bind_listener(port)
            )
        listener = _Listener(sandbox, sock, _SocketPool(sandbox.slot_ns))
        listener.accepting = asyncio.create_task(self._accept(listener))
        self._listeners[sandbox.sandbox_id] = listener

    def recheck(self, sandbox_id: str) -> int:
        """After a policy change: cut the sandbox's proxied connections the new policy forbids
        (the resolver's answers stay valid). Returns how many were cut."""
        listener = self._listeners.get(sandbox_id)
        if listener is None:
            return 0
        cut = 0
        for conn in list(listener.connections):
            flow = conn.flow
            if flow is None:
                continue
            if not decide(listener.sandbox, flow.name, flow.address, flow.port).allowed:
                conn.cut()
                cut += 1
        return cut

    async def stop(self, sandbox_id: str) -> None:
        listener = self._listeners.pop(sandbox_id, None)
        if listener is None:
            return
        if listener.accepting is not None:
            listener.accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener.accepting
        listener.sock.close()
        tasks = [conn.task for conn in listener.connections if conn.task is not None]
        for conn in list(listener.connections):
            conn.cut()
        await asyncio.gather(*tasks, return_exceptions=True)
        await listener.pool.close()

    async def close(self) -> None:
        for sandbox_id in list(self._listeners):
            await self.stop(sandbox_id)

    # -- one connection --------------------------------------------------------------------------

    async def _accept(self, listener: _Listener) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, _ = await loop.sock_accept(listener.sock)
            except OSError as exc:
                log.warning("sandbox %s: proxy accept failed: %s", listener.sandbox.sandbox_id, exc)
                await asyncio.sleep(0.1)  # e.g. out of descriptors: back off, then go on
                continue
            if len(listener.connections) >= self._max_connections:
                client.close()
                continue
            client.setblocking(False)
            conn = _Connection(None, client)
            listener.connections.add(conn)
            conn.task = asyncio.create_task(self._handle(listener, conn))

    async def _handle(self, listener: _Listener, conn: _Connection) -> None:
        sandbox = listener.sandbox
        client = conn.client
        finished = False
        try:
            address, port = _original_destination(client)
            if is_service_address(address):
                finished = await self._forward_service(sandbox, conn, address, port)
                return
            head = await asyncio.wait_for(self._read_head(client), self._head_timeout)
            tls = sniff.is_tls(head)
            name = sniff.tls_server_name(head) if tls else sniff.http_host(head)
            verdict = decide(sandbox, name, address, port)
            if not verdict.allowed:
                log.info(
                    "sandbox %s: refused %s:%d: %s",
                    sandbox.sandbox_id,
                    address,
                    port,
                    verdict.reason,
                )
                return
            conn.flow = Flow(sandbox.sandbox_id, name, address, port, tls)
            broker = self.broker
            intercept = (
                broker is not None
                and tls
                and name is not None
                and broker.claims(
                    sandbox.sandbox_id, name, address, port, sandbox.names.answered(name, address)
                )
            )
            if not intercept:
                head = await self.hook.on_connect(conn.flow, head)
            conn.upstream = await listener.pool.take()
            await asyncio.wait_for(
                asyncio.get_running_loop().sock_connect(conn.upstream, (address, port)),
                self._connect_timeout,
            )
            if intercept and broker is not None and name is not None:
                await broker.serve(sandbox.sandbox_id, name, client, conn.upstream, head)
            else:
                await asyncio.get_running_loop().sock_sendall(conn.upstream, head)
                await asyncio.gather(
                    self._pipe(client, conn.upstream), self._pipe(conn.upstream, client)
                )
            finished = True
        except (OSError, TimeoutError, ValueError, NetworkFailure) as exc:
            log.info("sandbox %s: proxied connection ended: %s", sandbox.sandbox_id, exc)
        finally:
            listener.connections.discard(conn)
            # Both sides said all they had: close; else (refused, cut, failed) reset both.
            close = socket.socket.close if finished else _abort
            close(client)
            if conn.upstream is not None:
                close(conn.upstream)

    async def _forward_service(
        self, sandbox: SandboxEgress, conn: _Connection, address: str, port: int
    ) -> bool:
        """A connection to a sandbox service: any TCP protocol, spliced as bytes to the target
        sandbox's port, connected from the daemon's namespace (the only one that reaches the
        slots)."""
        verdict = decide(sandbox, None, address, port)
        if not verdict.allowed or self.routes is None:
            why = verdict.reason if self.routes else "no service router"
            log.info("sandbox %s: refused %s:%d: %s", sandbox.sandbox_id, address, port, why)
            return False
        conn.flow = Flow(sandbox.sandbox_id, None, address, port, False)
        try:
            target = await self.routes.ask(sandbox.sandbox_id, address, port)
        except LookupError as exc:
            log.info("sandbox %s: service %s:%d: %s", sandbox.sandbox_id, address, port, exc)
            return False
        loop = asyncio.get_running_loop()
        conn.upstream = _client_socket()
        await asyncio.wait_for(loop.sock_connect(conn.upstream, target), self._connect_timeout)
        await asyncio.gather(
            self._pipe(conn.client, conn.upstream), self._pipe(conn.upstream, conn.client)
        )
        return True

    async def _read_head(self, client: socket.socket) -> bytes:
        loop = asyncio.get_running_loop()
        head = b""
        while sniff.need_more(head):
            data = await loop.sock_recv(client, sniff.MAX_HEAD - len(head))
            if not data:
                break
            head += data
        return head

    async def _pipe(self, source: socket.socket, target: socket.socket) -> None:
        # In the kernel (splice through a pipe): no copy into Python and back.
        await splice.copy(source, target, idle=self._idle_timeout)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)


def _abort(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), so the peer learns at once that the connection is cut."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def _original_destination(sock: socket.socket | None) -> tuple[str, int]:
    if sock is None:
        raise OSError("no socket")
    raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    port = struct.unpack("!H", raw[2:4])[0]
    return socket.inet_ntoa(raw[4:8]), port


def bind_listener(port: int) -> socket.socket:
    """(In a slot namespace.) The proxy's listening socket on ``INNER_GATEWAY:port``."""
    return _listen(INNER_GATEWAY, port)


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
