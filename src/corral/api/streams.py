"""NDJSON event streams, the one way the API streams events (exec output, build progress).

``NDJSONResponse`` streams like Starlette's ``StreamingResponse`` and, like it, stops as soon as
the client goes away (the events' iterator is closed then, so a stream from an agent is closed
with it). It watches for that with one plain asyncio task that cancels the streaming task,
where ``StreamingResponse`` opens an anyio task group with cancel scopes for every response: on
the exec path that machinery was 9% of the daemon's CPU per exec (py-spy, 600 execs).

A stream whose last event is known when it comes (a process's ``exit``: ``ends_with``) ends the
answer with that event, its line and the chunked body's end in one write, and then reads the
events' iterator to its end, for at most ``DRAIN_SECONDS``, without sending: the caller has its
answer without waiting for the agent's own end of stream, and the agent's connection is still
read to its end and kept alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

NDJSON = "application/x-ndjson"
DRAIN_SECONDS = 5.0

Event = dict[str, Any]


async def _lines(
    events: AsyncIterator[Event], ends_with: Callable[[Event], bool] | None
) -> AsyncIterator[bytes]:
    """Each event's line; the line of the event ``ends_with`` picks is a ``_LastLine``."""
    try:
        async for event in events:
            line = json.dumps(event, separators=(",", ":")).encode() + b"\n"
            yield _LastLine(line) if ends_with is not None and ends_with(event) else line
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


class _LastLine(bytes):
    """The line of the stream's last event: the answer ends with it."""


class NDJSONResponse(StreamingResponse):
    """A ``StreamingResponse`` of ``body_iterator``'s byte pieces that ends, closing the
    iterator, when the client disconnects."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        streaming = asyncio.current_task()
        assert streaming is not None
        state = {"gone": False, "done": False}

        async def watch() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if not state["done"]:
                state["gone"] = True
                streaming.cancel()

        watcher = asyncio.get_running_loop().create_task(watch())
        pieces = self.body_iterator
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            async for piece in pieces:
                body = piece.encode(self.charset) if isinstance(piece, str) else piece
                if isinstance(piece, _LastLine):
                    state["done"] = True  # the answer's end is no client leaving
                    await send({"type": "http.response.body", "body": body, "more_body": False})
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(DRAIN_SECONDS):
                            async for _after in pieces:
                                pass
                    return
                await send({"type": "http.response.body", "body": body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not state["gone"]:
                raise
            streaming.uncancel()  # our own cancel: the client left, which ends the answer
        finally:
            state["done"] = True
            watcher.cancel()
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()


def ndjson_response(
    events: AsyncIterator[Event], *, ends_with: Callable[[Event], bool] | None = None
) -> StreamingResponse:
    """Stream ``events`` one JSON object per line; the answer ends with the first event
    ``ends_with`` is true of (whatever follows it is read and dropped)."""
    return NDJSONResponse(_lines(events, ends_with), media_type=NDJSON)


def is_exit(event: Event) -> bool:
    """A process's last event."""
    return event.get("type") == "exit"
