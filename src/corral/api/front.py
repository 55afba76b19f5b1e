"""The daemon's HTTP front: the first request head of every connection decides who serves it.

uvicorn accepts the connections and builds this protocol for each (``uvicorn.Config(http=...)``
takes a protocol class). It reads the connection's first request head, at most ``max_head`` bytes
(431 past it) within ``head_timeout`` seconds, and then

- hands the connection to the inbound proxy (``api/inbound/``) when the head is addressed to a
  sandbox's port (``/sandboxes/ID/ports/PORT/...`` or ``Host: PORT-ID.<domain>``), so proxied
  bytes never pass through ASGI;
- otherwise gives the transport, and the bytes read so far, to uvicorn's own HTTP protocol
  (the API, the E2B front), which serves the connection from then on; its later heads are bounded
  by ``api/http_bounds.py``.

So a kept-alive API connection stays the API's: a browser that reuses it for a port's path gets
the API's 404, and opens a new connection when it follows that port's URL afresh (host-name
routes never share a connection with the API).
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral.api.inbound import HEAD_END, InboundProxy, InboundRequest, error_answer

__all__ = ["front_protocol"]


def front_protocol(
    inbound: InboundProxy,
    app_protocol: type[asyncio.Protocol],
    *,
    max_head: int,
    head_timeout: float = 30.0,
) -> type[asyncio.Protocol]:
    """A protocol class for ``uvicorn.Config(http=...)`` routing between ``inbound`` and
    ``app_protocol`` (uvicorn's HTTP protocol class, built with the same arguments)."""

    class FrontProtocol(asyncio.Protocol):
        def __init__(self, **kwargs: Any) -> None:
            self._kwargs = kwargs
            self._loop = kwargs.get("_loop") or asyncio.get_event_loop()
            self._buffer = bytearray()
            self._transport: asyncio.Transport | None = None
            self._timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            self._transport = transport
            self._timer = self._loop.call_later(head_timeout, self._too_slow)

        def data_received(self, data: bytes) -> None:
            transport = self._transport
            assert transport is not None
            start = max(0, len(self._buffer) - 3)
            self._buffer += data
            end = self._buffer.find(HEAD_END, start)
            if end < 0 and len(self._buffer) <= max_head:
                return
            if end < 0 or end + len(HEAD_END) > max_head:
                self._refuse(431, "head_too_large", f"the request head is over {max_head} bytes")
                return
            self._stop_timer()
            head = bytes(self._buffer[: end + len(HEAD_END)])
            claimed = inbound.claims(head)
            if claimed is None:
                self._to_app(transport)
            elif isinstance(claimed, InboundRequest):
                inbound.take(transport, claimed, bytes(self._buffer[len(head) :]))
                self._buffer = bytearray()
            else:
                self._refuse(claimed.status, "invalid", claimed.message)

        def _to_app(self, transport: asyncio.Transport) -> None:
            protocol = app_protocol(**self._kwargs)
            transport.set_protocol(protocol)
            protocol.connection_made(transport)
            data, self._buffer = bytes(self._buffer), bytearray()
            protocol.data_received(data)

        def _refuse(self, status: int, code: str, message: str) -> None:
            self._stop_timer()
            self._buffer = bytearray()
            if self._transport is not None:
                self._transport.write(error_answer(status, code, message))
                self._transport.close()

        def _too_slow(self) -> None:
            self._timer = None
            if self._transport is not None:
                self._transport.abort()

        def _stop_timer(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def eof_received(self) -> bool:
            return False

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_timer()

    return FrontProtocol
