"""One proxied inbound connection, driven on its two sockets: answers spliced to the client as
they come (a path route's heads isolated), requests spliced to the sandbox's port with every
later head on a kept-alive connection checked and rewritten (``corral.api.inbound`` says the
design; the heads are ``corral.api.inbound.heads``').
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any

import h11

from corral.api.inbound.heads import (
    HEAD_END,
    BadHead,
    InboundRequest,
    isolate_answer_head,
    parse_head,
)
from corral.network import local_hop, splice

__all__ = ["Link"]

log = logging.getLogger("corral.inbound")

CHUNK = 256 * 1024  # one read of a chunked request body
MAX_ANSWER_HEAD = 64 * 1024


class Link:
    """One proxied connection: the client's socket and the sandbox's. Answers are spliced to the
    client as they come; requests are spliced to the sandbox, each head read and rewritten on
    the way (``Content-Length`` bodies spliced by count, chunked ones read through ``h11``)."""

    def __init__(
        self,
        client: socket.socket,
        upstream: socket.socket,
        first: InboundRequest,
        *,
        app_ports: frozenset[int],
        max_head: int,
        drain_timeout: float,
    ) -> None:
        """``app_ports``, ``max_head``, ``drain_timeout``: the proxy's, as ``InboundProxy``
        documents them."""
        self.app_ports = app_ports
        self.max_head = max_head
        self.drain_timeout = drain_timeout
        self.client = client
        self.upstream = upstream
        self.first = first
        self.peer = _peer_of(client)

    async def run(self, rest: bytes) -> bool:
        """Serve until both sides are done; True when they ended cleanly."""
        # Hops that stay on this host get a congestion control that does not pace
        # (network/local_hop.py): the sandbox's slot always, the client when it is on this host.
        local_hop.unpace(self.upstream)
        if local_hop.on_this_host(self.client):
            local_hop.unpace(self.client)
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
            await asyncio.wait_for(answers, self.drain_timeout)
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
                following = parse_head(head, self.app_ports)
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
                if end > self.max_head:
                    raise OSError("request head too large")
                return bytes(buffer[:end]), bytes(buffer[end:])
            if len(buffer) > self.max_head:
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


def _peer_of(sock: socket.socket) -> str | None:
    with contextlib.suppress(OSError):
        peer: Any = sock.getpeername()
        return str(peer[0]) if isinstance(peer, tuple) and peer else None
    return None
