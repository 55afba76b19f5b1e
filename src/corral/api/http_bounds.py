"""Bounds on request heads for the connections uvicorn's HTTP protocol serves.

httptools (llhttp) puts no limit of its own on a request head, so a client could send headers
without end and the daemon would keep them all. ``bounded_protocol`` returns uvicorn's protocol
class with a bound: once a head's request target and headers pass ``max_head`` bytes (as the parser
reports them; a header still incomplete by the reads that arrive meanwhile, less one read), the
connection is answered 431 and closed. The first head of every connection is bounded exactly
by ``api/front.py``; this bounds the later ones on a kept-alive connection. Under h11 uvicorn
applies the bound itself (``h11_max_incomplete_event_size``).
"""

from __future__ import annotations

import asyncio
from typing import Any

from corral.api.inbound import error_answer

__all__ = ["bounded_protocol"]

READ_SLACK = 256 * 1024  # asyncio's largest single read


class _HeadTooLarge(Exception):
    """Raised from a parser callback when a request head passes its bound."""


def bounded_protocol(max_head: int) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools when installed, else h11) bounded to ``max_head``."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = False
            self._head_bytes = 0
            self._raw_bytes = 0
            self._too_large = False

        def _count(self, size: int) -> None:
            self._head_bytes += size
            if self._head_bytes > max_head:
                self._too_large = True
                # httptools turns this into HttpParserError; uvicorn then calls
                # send_400_response, which answers 431 instead (below).
                raise _HeadTooLarge

        def on_message_begin(self) -> None:
            self._in_head, self._head_bytes, self._raw_bytes = True, 0, 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count(len(url))
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count(len(name) + len(value) + 4)
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            # A header still incomplete is held by the parser, out of the callbacks' count:
            # count the reads that arrive meanwhile. The last of them may carry body bytes too
            # (one read, at most READ_SLACK), so only a count past both is surely over.
            if self._in_head:
                self._raw_bytes += len(data)
                if self._raw_bytes > max_head + READ_SLACK:
                    self._answer_431()
                    return
            super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            if self._too_large:
                self._answer_431()
                return
            super().send_400_response(msg)

        def _answer_431(self) -> None:
            self._in_head = False
            self.transport.write(
                error_answer(431, "head_too_large", f"the request head is over {max_head} bytes")
            )
            self.transport.close()

    return BoundedHttpToolsProtocol
