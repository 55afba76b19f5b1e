"""The inbound proxy: outside HTTP/1.1 and WebSocket clients reach a sandbox's open port.

Routes (the daemon's own listener; ``api/front.py`` hands over the connections they start):

- by path: ``/sandboxes/ID/ports/PORT/REST`` goes to ``/REST`` on the port (with
  ``X-Forwarded-Prefix: /sandboxes/ID/ports/PORT``);
- by host name: ``Host: PORT-ID.<any domain>`` goes to the same path on the port (E2B's
  scheme; ports that the app itself serves under that scheme, E2B's envd, are left to it).

Credentials (``service.ports.PortService.check_access``): the port's token in the
``X-Corral-Token`` header, the ``corral_token`` query parameter, or the ``corral_token`` cookie;
a public port needs none. All three are removed before the request goes on. A GET or HEAD with
the token in its query is answered with a redirect to the same URL without it that sets the
cookie (scoped to the route), so a browser can follow links while the token leaves the address
bar. Then the sandbox is resolved (a parked sandbox with auto-wake wakes now) and connected to.

Streaming: after the first request is accepted, both directions are copied as bytes with
asyncio's buffered protocols (``recv_into`` a 256 KiB buffer, written straight to the other
side, reading paused while the other side's write buffer is full). The proxy still finds the
start of every later request on a kept-alive connection (``Content-Length`` bodies by counting,
chunked ones through ``h11``): each head is checked against the first request's target and
rewritten; a request for another sandbox or port (or the API) closes the connection. After an
``Upgrade`` request (WebSocket) everything is copied as is.

Bounds: a request head at most ``max_head`` bytes (431), at most ``max_connections`` proxied
connections at once (503), the upstream connect within ``connect_timeout`` (504). Errors are the
API's JSON ``{"code", "message"}`` with the status of ``corral.errcodes``; a port nothing listens
on is a 502 saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import h11

from corral.errcodes import status_of
from corral.service.errors import CorralError
from corral.service.ports import PortService

__all__ = ["HEAD_END", "InboundProxy", "InboundRequest", "error_answer"]

log = logging.getLogger("corral.inbound")

HEAD_END = b"\r\n\r\n"
TOKEN_HEADER = b"x-corral-token"
TOKEN_NAME = "corral_token"
CHUNK = 256 * 1024
HIGH_WATER = 1024 * 1024
_PATH = re.compile(rb"^/sandboxes/(sb-[0-9a-z]{4,32})/ports/(\d{1,5})(/[^?#]*)?(\?.*)?$", re.S)
_HOST = re.compile(rb"^(\d{1,5})-(sb-[0-9a-z]{4,32})\.", re.I)
_REASONS = {
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def error_answer(status: int, code: str, message: str, extra: list[str] | None = None) -> bytes:
    """A complete HTTP/1.1 answer carrying the API's error body; the connection then closes."""
    body = json.dumps({"code": code, "message": message}, ensure_ascii=True).encode()
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(extra or []),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(frozen=True)
class InboundRequest:
    """One parsed request head addressed to a sandbox's port."""

    sandbox_id: str
    port: int
    by_host: bool
    method: bytes
    path: bytes  # what the port sees, query included, credentials removed
    headers: list[tuple[bytes, bytes]]  # original names, credentials removed
    token: str | None
    token_in_query: bool
    upgrade: bool
    chunked: bool
    content_length: int

    @property
    def prefix(self) -> str:
        return f"/sandboxes/{self.sandbox_id}/ports/{self.port}"

    def same_target(self, other: InboundRequest) -> bool:
        """Whether both go to the same port of the same sandbox (by either route)."""
        return (self.sandbox_id, self.port) == (other.sandbox_id, other.port)

    def upstream_head(self, client: str | None) -> bytes:
        headers = [(k, v) for k, v in self.headers if k.lower() not in _HOP_BY_PROXY]
        if client is not None:
            headers.append((b"X-Forwarded-For", client.encode()))
        if not self.by_host:
            headers.append((b"X-Forwarded-Prefix", self.prefix.encode()))
        lines = [self.method + b" " + self.path + b" HTTP/1.1"]
        lines += [name + b": " + value for name, value in headers]
        return b"\r\n".join(lines) + HEAD_END


_HOP_BY_PROXY = {b"x-forwarded-for", b"x-forwarded-prefix"}


class BadHead(Exception):
    """A request head the proxy refuses; ``status`` is the answer's HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_head(head: bytes, app_ports: frozenset[int]) -> InboundRequest | None:
    """The inbound request ``head`` (one complete head, ending in a blank line) is, or None when
    it is not addressed to a sandbox's port (it is the API's). Raises BadHead."""
    first_line = head.split(b"\r\n", 1)[0]
    target = first_line.split(b" ")
    path_match = _PATH.match(target[1]) if len(target) == 3 else None
    host_match = None
    if path_match is None:
        host = _host_header(head)
        host_match = _HOST.match(host) if host is not None else None
        if host_match is None or int(host_match.group(1)) in app_ports:
            return None
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    try:
        conn.receive_data(head)
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise BadHead(400, f"malformed request: {exc}") from None
    if not isinstance(event, h11.Request):
        raise BadHead(400, "malformed request head")
    if path_match is not None:
        sandbox_id, port = path_match.group(1).decode(), int(path_match.group(2))
        path = (path_match.group(3) or b"/") + (path_match.group(4) or b"")
    else:
        assert host_match is not None
        sandbox_id, port = host_match.group(2).decode().lower(), int(host_match.group(1))
        path = event.target
    if not 1 <= port <= 65535:
        raise BadHead(400, f"port {port} is out of range 1-65535")
    names = [name for name, _ in event.headers]
    if b"transfer-encoding" in names and b"content-length" in names:
        raise BadHead(400, "a request with both Transfer-Encoding and Content-Length")
    chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in event.headers)
    length = next((int(v) for n, v in event.headers if n == b"content-length"), 0)
    upgrade = any(n == b"upgrade" for n in names)
    path, query_token = _strip_query_token(path)
    headers, header_token, cookie_token = _strip_credentials(event.headers.raw_items())
    token = header_token or query_token or cookie_token
    return InboundRequest(
        sandbox_id=sandbox_id,
        port=port,
        by_host=path_match is None,
        method=event.method,
        path=path,
        headers=headers,
        token=token,
        token_in_query=query_token is not None and header_token is None,
        upgrade=upgrade,
        chunked=chunked,
        content_length=length,
    )


def _host_header(head: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"host":
            return value.strip()
    return None


def _strip_query_token(path: bytes) -> tuple[bytes, str | None]:
    base, question, query = path.partition(b"?")
    if not question or TOKEN_NAME.encode() not in query:
        return path, None
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    token = next((v for k, v in pairs if k == TOKEN_NAME), None)
    rest = [(k, v) for k, v in pairs if k != TOKEN_NAME]
    return (base + (b"?" + urlencode(rest).encode() if rest else b"")), token


def _strip_credentials(
    items: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], str | None, str | None]:
    header_token = cookie_token = None
    kept: list[tuple[bytes, bytes]] = []
    for name, value in items:
        lower = name.lower()
        if lower == TOKEN_HEADER:
            header_token = value.decode("latin-1").strip()
            continue
        if lower == b"cookie" and TOKEN_NAME.encode() in value:
            crumbs = []
            for crumb in value.split(b";"):
                key, _, val = crumb.strip().partition(b"=")
                if key == TOKEN_NAME.encode():
                    cookie_token = val.decode("latin-1")
                elif crumb.strip():
                    crumbs.append(crumb.strip())
            if not crumbs:
                continue
            value = b"; ".join(crumbs)
        kept.append((name, value))
    return kept, header_token, cookie_token


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
    ) -> None:
        self.ports = ports
        self.app_ports = app_ports
        self.max_head = max_head
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._tasks: set[asyncio.Task[None]] = set()
        self._links: set[_Link] = set()
        ports.on_close.append(self.cut)

    def cut(self, sandbox_id: str, port: int) -> None:
        """Close the open connections to a port that was just closed."""
        for link in list(self._links):
            if (link.first.sandbox_id, link.first.port) == (sandbox_id, port):
                link.abort()

    def claims(self, head: bytes) -> InboundRequest | BadHead | None:
        """What the first head of a connection is: an inbound request, a refused one, or the
        API's (None)."""
        try:
            return parse_head(head, self.app_ports)
        except BadHead as exc:
            return exc

    def take(self, transport: asyncio.Transport, request: InboundRequest, rest: bytes) -> None:
        """Serve a connection whose first head was ``request`` (``rest``: bytes read after it).
        The transport's reading is paused until the sandbox is connected."""
        transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self._serve(transport, request, rest))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for link in list(self._links):
            link.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(
        self, transport: asyncio.Transport, request: InboundRequest, rest: bytes
    ) -> None:
        try:
            if len(self._links) >= self.max_connections:
                raise _Refusal(503, "unavailable", "too many inbound connections; try again")
            try:
                self.ports.check_access(request.sandbox_id, request.port, request.token)
            except CorralError as exc:
                raise _Refusal(status_of(exc.code), exc.code, exc.message) from None
            navigation = request.method in (b"GET", b"HEAD") and not request.upgrade
            if request.token_in_query and navigation:
                transport.write(_cookie_redirect(request))
                transport.close()
                return
            try:
                target = await self.ports.resolve_inbound(request.sandbox_id, request.port)
            except CorralError as exc:
                raise _Refusal(status_of(exc.code), exc.code, exc.message) from None
            link = _Link(self, transport, request)
            loop = asyncio.get_running_loop()
            try:
                await asyncio.wait_for(
                    loop.create_connection(
                        lambda: _UpstreamSide(link), target.address, target.port
                    ),
                    self.connect_timeout,
                )
            except TimeoutError:
                raise _Refusal(
                    504,
                    "timeout",
                    f"port {request.port} of sandbox {request.sandbox_id} did not accept a "
                    f"connection within {self.connect_timeout:g} s",
                ) from None
            except ConnectionRefusedError:
                raise _Refusal(
                    502,
                    "bad_gateway",
                    f"nothing listens on port {request.port} in sandbox {request.sandbox_id} "
                    "(connection refused): start a server on 0.0.0.0:"
                    f"{request.port} in the sandbox",
                ) from None
            except OSError as exc:
                raise _Refusal(
                    502,
                    "bad_gateway",
                    f"connecting to port {request.port} of sandbox {request.sandbox_id} "
                    f"failed: {exc.strerror or exc}",
                ) from None
            link.start(rest)
        except _Refusal as refusal:
            transport.write(error_answer(refusal.status, refusal.code, refusal.message))
            transport.close()
        except asyncio.CancelledError:
            transport.abort()
            raise
        except Exception:
            log.exception("inbound connection to sandbox %s failed", request.sandbox_id)
            transport.write(
                error_answer(500, "internal", "the inbound proxy failed; the daemon's log says why")
            )
            transport.close()


class _Refusal(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def _cookie_redirect(request: InboundRequest) -> bytes:
    location = request.path if request.by_host else request.prefix.encode() + request.path
    cookie_path = "/" if request.by_host else request.prefix + "/"
    return error_answer(
        302,
        "redirect",
        "the token is now a cookie; follow the redirect",
        [
            f"location: {quote(location.decode('latin-1'), safe=':/?&=%#+;@!$,~*')}",
            f"set-cookie: {TOKEN_NAME}={request.token}; Path={cookie_path}; HttpOnly; SameSite=Lax",
        ],
    )


class _Link:
    """One proxied connection: the client's transport, the sandbox's, and the state of the
    client-to-sandbox direction (where the next request head starts)."""

    def __init__(self, proxy: InboundProxy, client: asyncio.Transport, first: InboundRequest):
        self.proxy = proxy
        self.client = client
        self.first = first
        self.upstream: asyncio.Transport | None = None
        self._activity: contextlib.ExitStack | None = None
        self._peer = _peer_of(client)
        # Client-to-sandbox state: "head" (collecting one), "body" (``_left`` bytes to copy),
        # "chunked" (``_h11`` finds the end), "raw" (after an upgrade: copy everything).
        self._state = "head"
        self._head = bytearray()
        self._left = 0
        self._h11: h11.Connection | None = None
        self._client_side = _ClientSide(self)
        self.upstream_side: _UpstreamSide | None = None
        self._closed = False

    def start(self, rest: bytes) -> None:
        assert self.upstream is not None
        self.proxy._links.add(self)
        self._activity = contextlib.ExitStack()
        self._activity.enter_context(self.proxy.ports.activity(self.first.sandbox_id))
        self.client.set_protocol(self._client_side)
        self.client.set_write_buffer_limits(high=HIGH_WATER)
        self.upstream.set_write_buffer_limits(high=HIGH_WATER)
        self._begin(self.first)
        if rest:
            self.from_client(memoryview(rest))
        if not self._closed:
            self.client.resume_reading()

    def _begin(self, request: InboundRequest) -> None:
        assert self.upstream is not None
        self.upstream.write(request.upstream_head(self._peer))
        if request.upgrade:
            self._state = "raw"
        elif request.chunked:
            self._state = "chunked"
            self._h11 = h11.Connection(h11.SERVER)
            self._h11.receive_data(_CHUNKED_START)
            self._h11.next_event()  # the Request
        elif request.content_length:
            self._state, self._left = "body", request.content_length
        else:
            self._state = "head"

    def from_client(self, data: memoryview) -> None:
        """Copy what the client sent, finding and rewriting each request head on the way."""
        upstream = self.upstream
        assert upstream is not None
        while data and not self._closed:
            if self._state == "raw":
                upstream.write(data)
                return
            if self._state == "body":
                take = min(self._left, len(data))
                upstream.write(data[:take])
                self._left -= take
                data = data[take:]
                if not self._left:
                    self._state = "head"
                continue
            if self._state == "chunked":
                data = self._copy_chunked(data)
                continue
            data = self._collect_head(data)

    def _copy_chunked(self, data: memoryview) -> memoryview:
        assert self._h11 is not None and self.upstream is not None
        try:
            self._h11.receive_data(bytes(data))
            while True:
                event = self._h11.next_event()
                if event is h11.NEED_DATA:
                    self.upstream.write(data)
                    return data[len(data) :]
                if isinstance(event, h11.EndOfMessage):
                    trailing = len(self._h11.trailing_data[0])
                    self.upstream.write(data[: len(data) - trailing])
                    self._state, self._h11 = "head", None
                    return data[len(data) - trailing :]
        except h11.RemoteProtocolError as exc:
            self._refuse_mid_stream(f"malformed chunked body: {exc}")
            return data[len(data) :]

    def _collect_head(self, data: memoryview) -> memoryview:
        start = max(0, len(self._head) - 3)
        self._head += data
        end = self._head.find(HEAD_END, start)
        if end < 0:
            if len(self._head) > self.proxy.max_head:
                self._refuse_mid_stream("request head too large")
            return data[len(data) :]
        end += len(HEAD_END)
        if end > self.proxy.max_head:
            self._refuse_mid_stream("request head too large")
            return data[len(data) :]
        head, rest = bytes(self._head[:end]), bytes(self._head[end:])
        self._head.clear()
        try:
            request = parse_head(head, self.proxy.app_ports)
        except BadHead as exc:
            self._refuse_mid_stream(exc.message)
            return memoryview(b"")
        if request is None or not request.same_target(self.first):
            # Another sandbox, port or the API on this connection: the client opens a new one.
            self.close()
            return memoryview(b"")
        self._begin(request)
        return memoryview(rest)

    def _refuse_mid_stream(self, why: str) -> None:
        log.info("inbound connection to sandbox %s cut: %s", self.first.sandbox_id, why)
        self.abort()

    # -- ends ----------------------------------------------------------------------------------
    def both_ended(self) -> bool:
        return self._client_side.eof and self.upstream_side is not None and self.upstream_side.eof

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.client.close()
        if self.upstream is not None:
            self.upstream.close()
        self._finish()

    def abort(self) -> None:
        self._closed = True
        self.client.abort()
        if self.upstream is not None:
            self.upstream.abort()
        self._finish()

    def _finish(self) -> None:
        self.proxy._links.discard(self)
        if self._activity is not None:
            self._activity.close()
            self._activity = None


class _Side(asyncio.BufferedProtocol):
    """One direction's reader: reads into its buffer and writes to the other side. A transport
    may keep a reference to what it could not send at once (Python 3.12+), so a buffer that
    went into a non-empty write buffer is replaced rather than reused."""

    def __init__(self, link: _Link) -> None:
        self.link = link
        self.view = memoryview(bytearray(CHUNK))
        self.eof = False

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.view

    def other(self) -> asyncio.Transport | None:
        """The other side's transport: where this side writes, and whose reading pauses while
        this side's own write buffer is full."""
        raise NotImplementedError

    def forward(self, data: memoryview) -> None:
        target = self.other()
        if target is not None:
            target.write(data)

    def buffer_updated(self, nbytes: int) -> None:
        self.forward(self.view[:nbytes])
        target = self.other()
        if target is not None and target.get_write_buffer_size():
            self.view = memoryview(bytearray(CHUNK))

    def eof_received(self) -> bool:
        self.eof = True
        target = self.other()
        if self.link.both_ended():
            self.link.close()
        elif target is not None and target.can_write_eof():
            target.write_eof()
        return True  # keep the transport: the other direction may still be going

    def pause_writing(self) -> None:
        other = self.other()
        if other is not None:
            other.pause_reading()

    def resume_writing(self) -> None:
        other = self.other()
        if other is not None and not self.link._closed:
            other.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.close() if exc is None else self.link.abort()


class _ClientSide(_Side):
    """Reads the client and writes the sandbox (through the link's request tracking)."""

    def other(self) -> asyncio.Transport | None:
        return self.link.upstream

    def forward(self, data: memoryview) -> None:
        self.link.from_client(data)


class _UpstreamSide(_Side):
    """Reads the sandbox and writes the client."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.link.upstream = transport
        self.link.upstream_side = self

    def other(self) -> asyncio.Transport | None:
        return self.link.client


# Puts a fresh h11 connection into "reading a chunked body" (the real head went upstream already).
_CHUNKED_START = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


def _peer_of(transport: asyncio.BaseTransport) -> str | None:
    peer: Any = transport.get_extra_info("peername")
    return str(peer[0]) if isinstance(peer, tuple) and peer else None
