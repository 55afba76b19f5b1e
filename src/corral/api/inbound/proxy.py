"""The inbound proxy's front door: it takes over a connection, checks the credential, resolves
(wakes) the sandbox and connects to its port, or answers with a refusal; then a
``corral.api.inbound.link.Link`` serves the connection (``corral.api.inbound`` says the design).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
from urllib.parse import quote

from corral.api.inbound.heads import (
    TOKEN_NAME,
    BadHead,
    InboundRequest,
    error_answer,
    parse_head,
)
from corral.api.inbound.link import Link
from corral.errcodes import status_of
from corral.service.errors import CorralError
from corral.service.ports import PortService

__all__ = ["InboundProxy"]

log = logging.getLogger("corral.inbound")


class InboundProxy:
    """Serves the connections ``api/front.py`` hands over. One per daemon, on its event loop.
    ``app_ports``: ports whose ``PORT-ID.`` host names the app serves itself."""

    def __init__(
        self,
        ports: PortService,
        *,
        app_ports: frozenset[int] = frozenset(),
        max_head: int = 64 * 1024,
        connect_timeout: float = 10.0,
        max_connections: int = 1024,
        drain_timeout: float = 60.0,
    ) -> None:
        self.ports = ports
        self.drain_timeout = drain_timeout
        self.app_ports = app_ports
        self.max_head = max_head
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._tasks: set[asyncio.Task[None]] = set()
        self._links: set[Link] = set()

    def claims(self, head: bytes) -> InboundRequest | BadHead | None:
        """What the first head of a connection is: an inbound request, a refused one, or the
        API's (None)."""
        try:
            return parse_head(head, self.app_ports)
        except BadHead as exc:
            return exc

    def take(self, transport: asyncio.Transport, request: InboundRequest, rest: bytes) -> None:
        """Serve a connection whose first head was ``request`` (``rest``: bytes read after it).
        The socket is taken out of its transport and driven directly from here on."""
        client = _detach(transport)
        task = asyncio.get_running_loop().create_task(self._serve(client, request, rest))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, client: socket.socket, request: InboundRequest, rest: bytes) -> None:
        loop = asyncio.get_running_loop()
        upstream: socket.socket | None = None
        clean = False
        try:
            try:
                upstream = await self._open(client, request)
            except _Refusal as refusal:
                answer = error_answer(refusal.status, refusal.code, refusal.message, refusal.extra)
                await loop.sock_sendall(client, answer)
                clean = True
                return
            if upstream is None:
                return
            link = Link(
                client,
                upstream,
                request,
                app_ports=self.app_ports,
                max_head=self.max_head,
                drain_timeout=self.drain_timeout,
            )
            self._links.add(link)
            try:
                # Closing the port cancels this task: the link is cut (sockets reset below).
                with self.ports.connection(request.sandbox_id, request.port):
                    clean = await link.run(rest)
            finally:
                self._links.discard(link)
        except asyncio.CancelledError:
            raise
        except OSError as exc:
            log.info("inbound connection to sandbox %s ended: %s", request.sandbox_id, exc)
        except Exception:
            log.exception("inbound connection to sandbox %s failed", request.sandbox_id)
            with contextlib.suppress(OSError):
                answer = error_answer(500, "internal", "the inbound proxy failed; see its log")
                client.send(answer)
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    (socket.socket.close if clean else _abort)(sock)

    async def _open(self, client: socket.socket, request: InboundRequest) -> socket.socket | None:
        """Check the credential, resolve (wake) the sandbox, connect to its port."""
        if len(self._links) >= self.max_connections:
            raise _Refusal(503, "unavailable", "too many inbound connections; try again")
        try:
            self.ports.check_access(request.sandbox_id, request.port, request.token)
        except CorralError as exc:
            raise _Refusal(status_of(exc.code), exc.code, exc.message) from None
        navigation = request.method in (b"GET", b"HEAD") and not request.upgrade
        if request.token_in_query and navigation:
            raise _cookie_redirect(request)
        try:
            target = await self.ports.resolve_inbound(request.sandbox_id, request.port)
        except CorralError as exc:
            raise _Refusal(status_of(exc.code), exc.code, exc.message) from None
        where = f"port {request.port} of sandbox {request.sandbox_id}"
        upstream = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        upstream.setblocking(False)
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.wait_for(
                asyncio.get_running_loop().sock_connect(upstream, (target.address, target.port)),
                self.connect_timeout,
            )
        except TimeoutError:
            upstream.close()
            raise _Refusal(
                504, "timeout", f"{where} did not accept within {self.connect_timeout:g} s"
            ) from None
        except ConnectionRefusedError:
            upstream.close()
            raise _Refusal(
                502,
                "bad_gateway",
                f"nothing listens on port {request.port} in sandbox {request.sandbox_id} "
                f"(connection refused): start a server on 0.0.0.0:{request.port} in the sandbox",
            ) from None
        except OSError as exc:
            upstream.close()
            raise _Refusal(
                502, "bad_gateway", f"connecting to {where} failed: {exc.strerror or exc}"
            ) from None
        return upstream


class _Refusal(Exception):
    def __init__(
        self, status: int, code: str, message: str, extra: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra


def _cookie_redirect(request: InboundRequest) -> _Refusal:
    location = request.path if request.by_host else request.prefix.encode() + request.path
    cookie_path = "/" if request.by_host else request.prefix + "/"
    return _Refusal(
        302,
        "redirect",
        "the token is now a cookie; follow the redirect",
        [
            f"location: {quote(location.decode('latin-1'), safe=':/?&=%#+;@!$,~*')}",
            f"set-cookie: {TOKEN_NAME}={request.token}; Path={cookie_path}; HttpOnly; SameSite=Lax",
        ],
    )


def _detach(transport: asyncio.Transport) -> socket.socket:
    """The transport's connection as a socket of our own (a duplicate descriptor; closing the
    transport then closes only its own descriptor, not the connection)."""
    transport.pause_reading()
    raw = transport.get_extra_info("socket")
    sock = socket.socket(fileno=os.dup(raw.fileno()))
    sock.setblocking(False)
    transport.close()
    return sock


def _abort(sock: socket.socket) -> None:
    """Close with a reset (SO_LINGER 0), so the peer learns at once that the connection is cut."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
