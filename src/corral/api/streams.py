"""NDJSON event streams, the one way the API streams events (exec output, build progress)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import StreamingResponse

NDJSON = "application/x-ndjson"


async def _lines(events: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    async for event in events:
        yield json.dumps(event, separators=(",", ":")).encode() + b"\n"


def ndjson_response(events: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """Stream ``events`` one JSON object per line."""
    return StreamingResponse(_lines(events), media_type=NDJSON)
