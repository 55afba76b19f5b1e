"""Server-sent events: the workspace's state changes, as the calling key may see them."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from corral.api.deps import EventsDep, PrincipalDep

router = APIRouter(prefix="/v1", tags=["events"])

KEEPALIVE_SECONDS = 15.0


@router.get(
    "/events",
    operation_id="follow_events",
    responses={200: {"content": {"text/event-stream": {}}}},
)
async def follow_events(events: EventsDep, principal: PrincipalDep) -> StreamingResponse:
    """``text/event-stream``: one ``event: KIND`` with a JSON ``data:`` line per change
    (``created``, ``running``, ``parked``, ``woken``, ``forked``, ``killed``, ``stopped``,
    ``error``, ``build``; ``lagged`` if this reader fell behind and lost some)."""
    subscription = events.subscribe(principal)

    async def stream() -> AsyncIterator[bytes]:
        try:
            yield b": corral events\n\n"
            while True:
                event = await subscription.next(KEEPALIVE_SECONDS)
                if event is None:
                    yield b": keepalive\n\n"
                    continue
                data = json.dumps(event.to_json(), separators=(",", ":"))
                yield f"id: {event.id}\nevent: {event.kind}\ndata: {data}\n\n".encode()
        finally:
            subscription.close()

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
