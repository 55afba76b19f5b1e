"""Exec streams and JSON requests to a plain-``http://`` daemon go through the SDK's own HTTP/1.1
client (``corral.http1``), not httpx: against the real app behind a real server on
loopback, and against hostile answers."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from corral import http1 as _http1
from corral.sdk import (
    AsyncClient,
    ConnectionFailed,
    ExecFailed,
    NotFound,
    RateLimited,
)
from tests.unit.conftest import Served


@pytest.fixture
def connections_made(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every connection opened with ``asyncio.open_connection`` (the SDK's plain client's)."""
    made: list[tuple[str, int]] = []
    real = asyncio.open_connection

    async def counting(host: str, port: int, **kwargs: Any) -> Any:
        made.append((host, port))
        return await real(host, port, **kwargs)

    monkeypatch.setattr(_http1.asyncio, "open_connection", counting)
    return made


async def test_exec_streams_translates_errors_and_keeps_one_connection(
    served: Served, connections_made: list[tuple[str, int]]
) -> None:
    async with AsyncClient(served.url, served.admin_key) as client:
        sbx = await client.create_sandbox()
        seen: list[str] = []
        result = await sbx.exec("echo out; echo err >&2; exit 3", on_stdout=seen.append)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        assert seen == ["out\n"]
        assert (await sbx.exec(["printf", "%s", "a b"])).stdout == "a b"
        with pytest.raises(ExecFailed):
            await sbx.exec(["/nonexistent-program"])
        with pytest.raises(NotFound):
            await client.sandbox("sb-00000000000").exec(["true"])
        assert (await sbx.exec(["true"])).exit_code == 0
        await sbx.kill()
    # Every answer, the refusals too, was read to its end: one connection served them all. (The
    # in-process daemon's connections to its agent count here too: only the daemon's port.)
    port = int(served.url.rsplit(":", 1)[1])
    assert [made for made in connections_made if made[1] == port] == [("127.0.0.1", port)]


async def test_requests_answer_translate_errors_and_keep_one_connection(
    served: Served, connections_made: list[tuple[str, int]]
) -> None:
    async with AsyncClient(served.url, served.admin_key) as client:
        assert await client.health()
        sbx = await client.create_sandbox(metadata={"k": "v"})
        assert (await sbx.info()).state == "running"
        listed = await client.list_sandboxes(metadata={"k": "v"})  # a query string
        assert [s.id for s in listed] == [sbx.id]
        with pytest.raises(NotFound):
            await client.get_sandbox_info("sb-00000000000")
        assert "corral" in await client.metrics_text()  # a text answer
        await sbx.kill()
        assert (await sbx.info()).state == "killed"
    port = int(served.url.rsplit(":", 1)[1])
    assert [made for made in connections_made if made[1] == port] == [("127.0.0.1", port)]


async def test_exec_to_a_closed_port_says_the_daemon_is_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with AsyncClient(f"http://127.0.0.1:{port}", "k") as client:
        with pytest.raises(ConnectionFailed, match="cannot reach"):
            await client.sandbox("sb-00000000000").exec(["true"])


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[bytes], Awaitable[str]]]:
    """A loopback server that answers any request with the bytes given, then closes."""
    servers: list[asyncio.Server] = []

    async def serve(answer: bytes) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer)
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield serve
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 200 OK\r\nX: " + b"a" * (_http1.MAX_HEAD + 10) + b"\r\n\r\n",  # endless head
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # bad chunk size
        b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{}",  # cut short
    ],
    ids=["not-http", "endless-head", "bad-chunk", "cut-short"],
)
async def test_a_malformed_answer_is_a_lost_connection(
    hostile: Callable[[bytes], Awaitable[str]], answer: bytes
) -> None:
    url = await hostile(answer)
    async with AsyncClient(url, "k") as client:
        with pytest.raises(ConnectionFailed, match="lost the connection"):
            await client.sandbox("sb-00000000000").exec(["true"])


async def test_an_error_answer_is_bounded(hostile: Callable[[bytes], Awaitable[str]]) -> None:
    body = b"x" * (2 << 20)
    head = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body)
    url = await hostile(head + body)
    async with AsyncClient(url, "k") as client:
        with pytest.raises(ConnectionFailed, match="passed"):
            await client.sandbox("sb-00000000000").exec(["true"])


async def test_a_refusal_keeps_its_retry_after(hostile: Callable[[bytes], Awaitable[str]]) -> None:
    body = b'{"code": "rate_limited", "message": "slow down"}'
    head = b"HTTP/1.1 429 Too Many\r\nRetry-After: 2.5\r\nContent-Length: %d\r\n\r\n" % len(body)
    url = await hostile(head + body)
    async with AsyncClient(url, "k") as client:
        with pytest.raises(RateLimited, match="slow down") as refused:
            await client.capacity()
    assert refused.value.retry_after == 2.5
