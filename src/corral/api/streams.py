"""NDJSON event streams, the one way the API streams events (exec output, build progress).

``NDJSONResponse`` streams like Starlette's ``StreamingResponse`` and, like it, stops as soon as
the client goes away (the events' iterator is closed then, so a stream from an agent is closed
with it). It watches for that with one plain asyncio task that cancels the streaming task,
where ``StreamingResponse`` opens an anyio task group with cancel scopes for every response: on
the exec path that machinery was 9% of the daemon's CPU per exec (py-spy, 600 execs).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

NDJSON = "application/x-ndjson"


async def _lines(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    try:
        async for event in events:
            yield json.dumps(event, separators=(",", ":")).encode() + b"\n"
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


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


def ndjson_response(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """Stream ``events`` one JSON object per line."""
    return NDJSONResponse(_lines(events), media_type=NDJSON)
