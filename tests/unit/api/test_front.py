"""The daemon's front (api/front.py) hands the API uvicorn a connection whose bytes are whole.

A real uvicorn server on 127.0.0.1 with the front and the bounded httptools protocol; the client
sends the first head in small pieces, each one read by the front on its own (the test waits for
that read, not for time), then a body, then a kept-alive second request pipelined with a third.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
import uvicorn

from corral.api.front import front_protocol
from corral.api.http_bounds import bounded_protocol
from corral.api.inbound import InboundProxy
from corral.service.ports import PortService

MAX_HEAD = 8 * 1024


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers ``METHOD PATH BODY`` for every request."""
    assert scope["type"] == "http"
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = f"{scope['method']} {scope['path']} ".encode() + body
    headers = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


class Server:
    def __init__(self) -> None:
        self.reads: asyncio.Queue[bytes] = asyncio.Queue()
        # No head here is addressed to a port, so the proxy's port service is never asked.
        ports = cast(PortService, SimpleNamespace())
        inbound = InboundProxy(ports, max_head=MAX_HEAD)
        front = front_protocol(inbound, bounded_protocol(MAX_HEAD), max_head=MAX_HEAD)
        reads = self.reads

        class Watched(front):  # type: ignore[misc, valid-type]
            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                reads.put_nowait(data)

        config = uvicorn.Config(
            echo, host="127.0.0.1", port=0, http=Watched, lifespan="off", log_config=None
        )
        self.server = uvicorn.Server(config)
        self.port = 0


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    served = Server()
    task = asyncio.create_task(served.server.serve())
    while not served.server.started:
        await asyncio.sleep(0)
    served.port = served.server.servers[0].sockets[0].getsockname()[1]
    try:
        yield served
    finally:
        served.server.should_exit = True
        await task


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    return await reader.readexactly(length)


async def test_a_head_in_pieces_then_kept_alive_and_pipelined_requests(server: Server) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    first = b"POST /v1/first HTTP/1.1\r\nHost: corral\r\nContent-Length: 5\r\nX-Pad: " + b"p" * 40
    first += b"\r\n\r\n"
    pieces = [first[i : i + 7] for i in range(0, len(first), 7)]
    # Split the end of the head across reads too: "\r\n" then "\r\n".
    for piece in pieces:
        writer.write(piece)
        await writer.drain()
        assert await server.reads.get() == piece  # the front read exactly this piece, alone
    writer.write(b"hello")
    assert await read_answer(reader) == b"POST /v1/first hello"
    second = b"GET /v1/second HTTP/1.1\r\nHost: corral\r\n\r\n"
    third = b"POST /v1/third HTTP/1.1\r\nHost: corral\r\nContent-Length: 2\r\n\r\nok"
    writer.write(second + third)
    assert await read_answer(reader) == b"GET /v1/second "
    assert await read_answer(reader) == b"POST /v1/third ok"
    writer.close()
    await writer.wait_closed()


async def test_a_first_head_with_its_body_and_a_pipelined_request_in_one_read(
    server: Server,
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(
        b"POST /a HTTP/1.1\r\nHost: corral\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /b HTTP/1.1\r\nHost: corral\r\n\r\n"
    )
    assert await read_answer(reader) == b"POST /a abc"
    assert await read_answer(reader) == b"GET /b "
    writer.close()
    await writer.wait_closed()
