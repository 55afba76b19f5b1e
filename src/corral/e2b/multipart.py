"""A streaming reader of ``multipart/form-data`` uploads: each part's bytes go straight to a
consumer as they arrive, so the daemon never holds (or spools) a whole file.

Built on python-multipart's push parser; bounded by the number of parts and header sizes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any

from python_multipart.multipart import MultipartParser, parse_options_header

from corral.service.errors import InvalidRequest

MAX_PARTS = 1000
QUEUE_CHUNKS = 8

PartSink = Callable[[str, AsyncIterator[bytes]], Awaitable[Any]]


def boundary_of(content_type: str) -> bytes:
    kind, options = parse_options_header(content_type)
    boundary = options.get(b"boundary")
    if kind != b"multipart/form-data" or not boundary:
        raise InvalidRequest("upload must be multipart/form-data with a boundary")
    return boundary


async def read_parts(content_type: str, body: AsyncIterable[bytes], sink: PartSink) -> list[Any]:
    """Feed every file part to ``sink(filename, chunks)`` in order; return what sink returned."""
    events: list[tuple[str, bytes]] = []
    header: dict[str, bytearray] = {"field": bytearray(), "value": bytearray()}
    part_headers: dict[str, str] = {}

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header["field"] += data[start:end]

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header["value"] += data[start:end]

    def on_header_end() -> None:
        part_headers[header["field"].decode("latin-1").lower()] = header["value"].decode("utf-8")
        header["field"], header["value"] = bytearray(), bytearray()

    def on_headers_finished() -> None:
        _, options = parse_options_header(part_headers.get("content-disposition", ""))
        name = options.get(b"filename") or b""
        events.append(("begin", name))
        part_headers.clear()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        events.append(("data", bytes(data[start:end])))

    def on_part_end() -> None:
        events.append(("end", b""))

    parser = MultipartParser(
        boundary_of(content_type),
        {
            "on_header_field": on_header_field,
            "on_header_value": on_header_value,
            "on_header_end": on_header_end,
            "on_headers_finished": on_headers_finished,
            "on_part_data": on_part_data,
            "on_part_end": on_part_end,
        },
    )
    results: list[Any] = []
    queue: asyncio.Queue[bytes | None] | None = None
    writer: asyncio.Task[Any] | None = None

    async def chunks(q: asyncio.Queue[bytes | None]) -> AsyncIterator[bytes]:
        while (item := await q.get()) is not None:
            yield item

    async def feed(item: bytes | None) -> None:
        # A sink that failed stops reading: never wait on a full queue for it.
        assert queue is not None and writer is not None
        put = asyncio.ensure_future(queue.put(item))
        await asyncio.wait({put, writer}, return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            writer.result()  # raises the sink's error
            raise InvalidRequest("the upload's writer stopped before the part ended")

    try:
        async for chunk in body:
            try:
                parser.write(chunk)
            except Exception as exc:
                raise InvalidRequest(f"malformed multipart upload: {exc}") from exc
            for kind, value in events:
                if kind == "begin":
                    if len(results) >= MAX_PARTS:
                        raise InvalidRequest(f"more than {MAX_PARTS} files in one upload")
                    filename = value.decode("utf-8", "surrogateescape")
                    queue = asyncio.Queue(QUEUE_CHUNKS)
                    writer = asyncio.ensure_future(sink(filename, chunks(queue)))
                elif kind == "data" and queue is not None and value:
                    await feed(value)
                elif kind == "end" and queue is not None and writer is not None:
                    await feed(None)
                    results.append(await writer)
                    queue, writer = None, None
            events.clear()
        parser.finalize()
    finally:
        if writer is not None and not writer.done():
            writer.cancel()
            with contextlib.suppress(BaseException):
                await writer
    return results
