"""The inbound proxy: outside HTTP/1.1 and WebSocket clients reach a sandbox's open port.

Routes (the daemon's own listener; ``api/front.py`` hands over the connections they start):

- by path: ``/sandboxes/ID/ports/PORT/REST`` goes to ``/REST`` on the port (with
  ``X-Forwarded-Prefix: /sandboxes/ID/ports/PORT``);
- by host name: ``Host: PORT-ID.<any domain>`` goes to the same path on the port (E2B's
  scheme; ports that the app itself serves under that scheme, E2B's envd, are left to it).

Credentials (``service.ports.PortService.check_access``): the port's token in the
``X-Corral-Token`` header, the ``corral_token`` query parameter, or the ``corral_token`` cookie;
a public port needs none. All three are removed before the request goes on, and so is the web
console's session cookie (``corral_session``), which a browser sends to path routes too. Path
routes share the daemon's origin with the console, so their answers are isolated
(``isolate_answer_head``: a ``Content-Security-Policy: sandbox`` gives a sandbox's page an
origin of its own) and each connection carries one answer (``Connection: close``). A GET
or HEAD with the token in its query is answered with a redirect to the same URL without it that
sets the cookie (scoped to the route), so a browser can follow links while the token leaves the
address bar. Then the sandbox is resolved (a parked sandbox with auto-wake wakes now) and
connected to.

Streaming: once the first request is let through, the connection's socket is taken out of its
asyncio transport and both directions are spliced in the kernel (``network/splice.py``): the
answers as they come, the requests too, but the proxy still finds the start of every later
request on a kept-alive connection (``Content-Length`` bodies spliced by count, chunked ones read
through ``h11``): each head is checked against the first request's target and rewritten; a
request for another sandbox or port (or the API) is not forwarded: the answers under way finish
(the port sees the end of the requests) and the connection closes. After an ``Upgrade``
request (WebSocket) everything is spliced as is.

Bounds: a request head at most ``max_head`` bytes (431), at most ``max_connections`` proxied
connections at once (503), the upstream connect within ``connect_timeout`` (504), the answers
still owed after the requests end within ``drain_timeout``. Errors are the
API's JSON ``{"code", "message"}`` with the status of ``corral.errcodes``; a port nothing listens
on is a 502 saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import struct
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import h11

from corral.errcodes import status_of
from corral.network import splice
from corral.service.console_sessions import COOKIE_NAME as CONSOLE_COOKIE
from corral.service.errors import CorralError
from corral.service.ports import PortService

__all__ = ["HEAD_END", "InboundProxy", "InboundRequest", "error_answer"]

log = logging.getLogger("corral.inbound")

HEAD_END = b"\r\n\r\n"
TOKEN_HEADER = b"x-corral-token"
TOKEN_NAME = "corral_token"
# The web console's session cookie rides along with every request to the daemon's origin, path
# routes included: a sandbox's server must never see it (it is the key of whoever is logged in).
DAEMON_COOKIES = (TOKEN_NAME.encode(), CONSOLE_COOKIE.encode())
CHUNK = 256 * 1024  # one read of a chunked request body
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
            if not self.upgrade:
                # One answer per connection, so that every answer gets its own origin
                # (isolate_answer_head); the browser opens a new connection for the next.
                headers = [(k, v) for k, v in headers if k.lower() != b"connection"]
                headers.append((b"Connection", b"close"))
        lines = [self.method + b" " + self.path + b" HTTP/1.1"]
        lines += [name + b": " + value for name, value in headers]
        return b"\r\n".join(lines) + HEAD_END


_HOP_BY_PROXY = {b"x-forwarded-for", b"x-forwarded-prefix"}


# What a path-routed answer gets: the daemon's origin is the console's too, so a sandbox's page
# there is given an opaque origin of its own (scripts run, but reach nothing of the daemon's
# origin: no cookies, no readable answers, no service worker over the console).
ISOLATION_POLICY = (
    b"sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
    b"allow-pointer-lock allow-popups-to-escape-sandbox"
)
MAX_ANSWER_HEAD = 64 * 1024


def isolate_answer_head(head: bytes) -> bytes:
    """A path-routed answer's head (without its blank line) with the isolation policy added,
    ``Connection: close``, and no ``Service-Worker-Allowed`` nor cookies of the daemon's own."""
    lines = head.split(b"\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        lower = name.strip().lower()
        if lower in (b"connection", b"keep-alive", b"service-worker-allowed"):
            continue
        if lower == b"set-cookie":
            cookie = value.strip().split(b"=", 1)[0].strip()
            if cookie in DAEMON_COOKIES:
                continue
        kept.append(line)
    kept.append(b"Content-Security-Policy: " + ISOLATION_POLICY)
    kept.append(b"Connection: close")
    return b"\r\n".join(kept)


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
        if lower == b"cookie" and any(name in value for name in DAEMON_COOKIES):
            crumbs = []
            for crumb in value.split(b";"):
                key, _, val = crumb.strip().partition(b"=")
                if key == TOKEN_NAME.encode():
                    cookie_token = val.decode("latin-1")
                elif key not in DAEMON_COOKIES and crumb.strip():
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
        drain_timeout: float = 60.0,
    ) -> None:
        self.ports = ports
        self.drain_timeout = drain_timeout
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
            link = _Link(self, client, upstream, request)
            self._links.add(link)
            try:
                with self.ports.activity(request.sandbox_id):
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


class _Link:
    """One proxied connection: the client's socket and the sandbox's. Answers are spliced to the
    client as they come; requests are spliced to the sandbox, each head read and rewritten on
    the way (``Content-Length`` bodies spliced by count, chunked ones read through ``h11``)."""

    def __init__(
        self,
        proxy: InboundProxy,
        client: socket.socket,
        upstream: socket.socket,
        first: InboundRequest,
    ) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.first = first
        self.peer = _peer_of(client)
        self._task: asyncio.Task[bool] | None = None

    def abort(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def run(self, rest: bytes) -> bool:
        """Serve until both sides are done; True when they ended cleanly."""
        self._task = asyncio.current_task()
        requests = asyncio.create_task(self._requests(rest))
        if self.first.by_host:
            answers = asyncio.create_task(splice.copy(self.upstream, self.client))
        else:
            answers = asyncio.create_task(self._isolated_answers())
        try:
            done, _ = await asyncio.wait({requests, answers}, return_when=asyncio.FIRST_COMPLETED)
            if answers in done:
                # The sandbox closed: nothing more can be answered; the client learns at once.
                answers.result()
                with contextlib.suppress(OSError):
                    self.client.shutdown(socket.SHUT_WR)
                requests.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await requests
                return True
            clean = requests.result()
            if not clean:
                answers.cancel()
                return False
            # The client said all it had (or asked for something else): the answer may still be
            # coming; the sandbox's port sees the end of the requests.
            with contextlib.suppress(OSError):
                self.upstream.shutdown(socket.SHUT_WR)
            await asyncio.wait_for(answers, self.proxy.drain_timeout)
            return True
        finally:
            for task in (requests, answers):
                if not task.done():
                    task.cancel()
            await asyncio.gather(requests, answers, return_exceptions=True)

    async def _isolated_answers(self) -> int:
        """A path route's answers: each final answer's head rewritten by
        ``isolate_answer_head`` (interim 1xx heads pass as they are; after a 101 everything
        does), the rest spliced."""
        loop = asyncio.get_running_loop()
        buffer = bytearray()
        while True:
            end = buffer.find(HEAD_END)
            if end < 0:
                if len(buffer) > MAX_ANSWER_HEAD:
                    raise OSError("the sandbox's answer head is too large")
                data = await loop.sock_recv(self.upstream, 65536)
                if not data:
                    if buffer:
                        await loop.sock_sendall(self.client, bytes(buffer))
                    return len(buffer)
                buffer += data
                continue
            head, after = bytes(buffer[:end]), bytes(buffer[end + len(HEAD_END) :])
            status = head[9:12]
            if status[:1] == b"1" and status != b"101":
                await loop.sock_sendall(self.client, head + HEAD_END)
                buffer = bytearray(after)
                continue
            if status != b"101":
                head = isolate_answer_head(head)
            await loop.sock_sendall(self.client, head + HEAD_END + after)
            break
        return await splice.copy(self.upstream, self.client)

    async def _requests(self, pending: bytes) -> bool:
        """Copy the client's requests; True when they end (the client's end, or a request
        that is not forwarded), False when the connection is to be cut."""
        loop = asyncio.get_running_loop()
        request = self.first
        while True:
            await loop.sock_sendall(self.upstream, request.upstream_head(self.peer))
            if request.upgrade:
                if pending:
                    await loop.sock_sendall(self.upstream, pending)
                await splice.copy(self.client, self.upstream)
                return True
            if request.chunked:
                pending = await self._chunked_body(pending)
            elif request.content_length:
                now = pending[: request.content_length]
                pending = pending[len(now) :]
                if now:
                    await loop.sock_sendall(self.upstream, now)
                left = request.content_length - len(now)
                if left:
                    await splice.copy(self.client, self.upstream, left)
            head, pending = await self._next_head(pending)
            if head is None:
                return True
            try:
                following = parse_head(head, self.proxy.app_ports)
            except BadHead as exc:
                log.info("inbound connection to %s ends: %s", self.first.sandbox_id, exc.message)
                return True
            if following is None or not following.same_target(self.first):
                # Another sandbox, port or the API on this connection: it is not forwarded; the
                # answers under way finish, then the connection closes (clients open a new one).
                return True
            request = following

    async def _next_head(self, pending: bytes) -> tuple[bytes | None, bytes]:
        loop = asyncio.get_running_loop()
        buffer = bytearray(pending)
        while True:
            end = buffer.find(HEAD_END)
            if end >= 0:
                end += len(HEAD_END)
                if end > self.proxy.max_head:
                    raise OSError("request head too large")
                return bytes(buffer[:end]), bytes(buffer[end:])
            if len(buffer) > self.proxy.max_head:
                raise OSError("request head too large")
            data = await loop.sock_recv(self.client, 65536)
            if not data:
                if buffer:
                    raise OSError("the client closed in the middle of a request head")
                return None, b""
            buffer += data

    async def _chunked_body(self, pending: bytes) -> bytes:
        """Copy one chunked body as it is; returns the bytes after it."""
        loop = asyncio.get_running_loop()
        parser = h11.Connection(h11.SERVER)
        parser.receive_data(_CHUNKED_START)
        parser.next_event()  # the Request
        data = pending
        while True:
            if data:
                try:
                    parser.receive_data(data)
                    while True:
                        event = parser.next_event()
                        if event is h11.NEED_DATA:
                            break
                        if isinstance(event, h11.EndOfMessage):
                            trailing = len(parser.trailing_data[0])
                            await loop.sock_sendall(self.upstream, data[: len(data) - trailing])
                            return data[len(data) - trailing :]
                except h11.RemoteProtocolError as exc:
                    raise OSError(f"malformed chunked body: {exc}") from None
                await loop.sock_sendall(self.upstream, data)
            data = await loop.sock_recv(self.client, CHUNK)
            if not data:
                raise OSError("the client closed in the middle of a chunked body")


# Puts a fresh h11 connection into "reading a chunked body" (the real head went upstream already).
_CHUNKED_START = b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"


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


def _peer_of(sock: socket.socket) -> str | None:
    with contextlib.suppress(OSError):
        peer: Any = sock.getpeername()
        return str(peer[0]) if isinstance(peer, tuple) and peer else None
    return None
