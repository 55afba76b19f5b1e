"""The daemon's small HTTP/1.1 client of agents, against a server that answers whatever each
test scripts: well-framed answers reuse their connection, anything else closes it, and every
malformed or cut answer is an ``AgentTransportError`` (the real agents' side is
tests/unit/agent, which drives both agents through this client)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from corral.runtime.agent_http import MAX_HEAD, AgentConnections, AgentTransportError

Script = Callable[[bytes], bytes]
CLOSE = b"<close>"  # an answer ending in this closes the connection after it


class ScriptedServer:
    """Answers each request (its head, plus Content-Length bytes) with ``script(request)``."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                answer = self.script(request)
                writer.write(answer.removesuffix(CLOSE))
                await writer.drain()
                if answer.endswith(CLOSE):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


Start = Callable[[Script], Awaitable[tuple[ScriptedServer, AgentConnections]]]


@pytest.fixture
async def start() -> AsyncIterator[Start]:
    servers: list[asyncio.Server] = []
    clients: list[AgentConnections] = []

    async def run(script: Script) -> tuple[ScriptedServer, AgentConnections]:
        scripted = ScriptedServer(script)
        server = await asyncio.start_server(scripted.handle, "127.0.0.1", 0)
        servers.append(server)
        client = AgentConnections("127.0.0.1", server.sockets[0].getsockname()[1])
        clients.append(client)
        return scripted, client

    yield run
    for client in clients:
        await client.aclose()
    for server in servers:
        server.close()
        await server.wait_closed()


async def exchange(client: AgentConnections, body: bytes = b"") -> tuple[int, bytes]:
    async with client.request("POST", "/x?y=1", {"Authorization": "Bearer k"}, body) as answer:
        return answer.status, await answer.read()


def fixed(body: bytes, status: int = 200, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n%b\r\n%b" % (status, len(body), extra, body)


def chunked(*pieces: bytes) -> bytes:
    body = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces)
    return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\n\r\n"


async def test_a_request_carries_its_head_and_body_and_reads_the_answer(start: Start) -> None:
    server, client = await start(lambda _: fixed(b'{"pid": 7}', 201))
    assert await exchange(client, b'{"cmd": ["true"]}') == (201, b'{"pid": 7}')
    request = server.requests[0]
    assert request.startswith(b"POST /x?y=1 HTTP/1.1\r\n")
    assert b"\r\nAuthorization: Bearer k\r\n" in request
    assert b"\r\nContent-Length: 17\r\n" in request
    assert request.endswith(b'\r\n\r\n{"cmd": ["true"]}')


async def test_answers_read_to_their_end_reuse_one_connection(start: Start) -> None:
    answers = iter([fixed(b"a"), chunked(b"b", b"cd"), fixed(b"", 204), chunked()])
    server, client = await start(lambda _: next(answers))
    assert await exchange(client) == (200, b"a")
    assert await exchange(client) == (200, b"bcd")
    assert await exchange(client) == (204, b"")
    assert await exchange(client) == (200, b"")
    assert server.connections == 1


async def test_a_prepared_connection_serves_the_next_request(start: Start) -> None:
    server, client = await start(lambda _request: fixed(b"ok"))
    await client.prepare(5.0)
    await client.prepare(5.0)  # one is idle already: nothing more
    assert await exchange(client) == (200, b"ok")
    assert (server.connections, len(server.requests)) == (1, 1)


async def test_an_answer_left_unread_or_closing_is_not_reused(start: Start) -> None:
    answers = iter(
        [chunked(b"x" * 10, b"y"), fixed(b"z", extra=b"Connection: close\r\n"), fixed(b"w")]
    )
    server, client = await start(lambda _: next(answers))
    async with client.request("GET", "/", {}) as answer:
        async for _piece in answer.chunks():
            break  # the caller stops early
    assert await exchange(client) == (200, b"z")
    assert await exchange(client) == (200, b"w")
    assert server.connections == 3


async def test_a_request_that_says_connection_close_does_not_keep_it(start: Start) -> None:
    server, client = await start(lambda _: fixed(b"k"))  # a server that would keep it alive
    async with client.request("POST", "/rekey", {"Connection": "close"}) as answer:
        assert await answer.read() == b"k"
    assert await exchange(client) == (200, b"k")
    assert await exchange(client) == (200, b"k")
    assert server.connections == 2  # the second and third share one; the first was closed


async def test_an_answer_framed_by_the_connections_end_is_read_to_it(start: Start) -> None:
    server, client = await start(lambda _: b"HTTP/1.1 200 OK\r\n\r\nall of it" + CLOSE)
    assert await exchange(client) == (200, b"all of it")
    assert await exchange(client) == (200, b"all of it")
    assert server.connections == 2


async def test_a_connection_the_server_closed_while_idle_is_not_reused(start: Start) -> None:
    server, client = await start(lambda _: fixed(b"ok", extra=b"") + CLOSE)
    assert await exchange(client) == (200, b"ok")
    while server.connections == 1 and not client._idle[0].reader.at_eof():
        await asyncio.sleep(0)  # let the loop take in the server's FIN on the idle connection
    assert await exchange(client) == (200, b"ok")
    assert server.connections == 2


async def test_a_large_chunk_arrives_in_pieces_not_buffered_whole(start: Start) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB in one chunk
    _, client = await start(lambda _: chunked(big))
    async with client.request("GET", "/", {}) as answer:
        pieces = [piece async for piece in answer.chunks()]
    assert b"".join(pieces) == big and len(pieces) > 1


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",  # not HTTP
        b"HTTP/1.1 2xx OK\r\n\r\n",  # no status code
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort" + CLOSE,  # cut before its length
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # bad chunk size
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcdeXX",  # no CRLF after
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffff\r\nabc" + CLOSE,  # cut
        b"HTTP/1.1 200 OK\r\nX: " + b"a" * (MAX_HEAD + 10) + b"\r\n\r\n",  # head over the bound
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n" + CLOSE,  # cut in the head
        CLOSE,  # nothing at all
    ],
    ids=lambda a: a[:36].decode("latin-1"),
)
async def test_malformed_or_cut_answers_are_transport_errors(start: Start, answer: bytes) -> None:
    _, client = await start(lambda _: answer)
    with pytest.raises(AgentTransportError):
        await exchange(client)


async def test_refused_connections_and_silence_are_transport_errors(start: Start) -> None:
    refused = AgentConnections("127.0.0.1", 1)
    with pytest.raises(AgentTransportError):
        await exchange(refused)
    _, client = await start(lambda _: b"")  # answers nothing, keeps the connection open
    with pytest.raises(AgentTransportError, match="no answer within"):
        async with client.request("GET", "/", {}, head_timeout=0.2):
            pass


async def test_closing_the_client_ends_a_stream_in_flight(start: Start) -> None:
    # A killed sandbox's agent never answers nor resets again: closing the client must end the
    # streams that are reading from it, not only drop the idle connections.
    _, client = await start(
        lambda _: b"HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
    )
    got: list[bytes] = []
    first = asyncio.Event()

    async def follow() -> None:
        async with client.request("POST", "/processes?stream=true", {}) as answer:
            async for piece in answer.chunks():
                got.append(piece)
                first.set()

    task = asyncio.create_task(follow())
    await first.wait()
    await client.aclose()
    with pytest.raises(AgentTransportError):
        await asyncio.wait_for(task, 60)  # a guard against hanging: TimeoutError fails the test
    assert got == [b"hello"]
