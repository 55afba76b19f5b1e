"""A small asyncio HTTP/1.1 client for the SDK's hot calls to a plain-``http://`` daemon.

Why not httpx here: an exec is one request and a short NDJSON stream, and httpx with httpcore
(request and URL models, cookies, auth and redirect layers, the pool's bookkeeping, anyio
streams, h11) was 2.3 ms of the client's CPU per ``Sandbox.exec`` of ``true`` (py-spy, 300
execs), as much as the daemon's own share of the round trip. The daemon's answers are a small,
known subset of HTTP/1.1, so this client does only that: one request at a time per connection,
a body given whole, an answer framed by ``Content-Length``, ``chunked``, or the connection's end.
`HTTPSession` uses it only when nothing needs httpx (`corral.sdk.plainhttp.plain_http_usable`:
plain ``http://``, no proxy in the environment, no custom transport); the rest stays on httpx.

Connections are kept alive: one goes back to the idle set only after its answer was read to the
end (and neither side said ``Connection: close``); an answer left unread closes its connection.
An idle connection is reused for at most ``IDLE_EXPIRY`` seconds, less than the daemon's own
keep-alive (5 s by default), so the daemon does not close one as a request goes out on it.
Nothing is retried: a request that failed may have reached the daemon.

Bounds (a daemon is a remote peer): the answer's head is at most ``MAX_HEAD`` bytes, a chunk-size
line at most that too; how much body a caller takes is the caller's bound.

Every failure to connect raises ``ConnectFailed``; every later failure to send or to read a
well-formed answer ``HTTP1Error`` (its base class).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

__all__ = [
    "IDLE_EXPIRY",
    "MAX_HEAD",
    "Answer",
    "ConnectFailed",
    "Connections",
    "HTTP1Error",
]

MAX_HEAD = 64 * 1024
IDLE_EXPIRY = 4.0
_READ_PIECE = 64 * 1024


class HTTP1Error(Exception):
    """No well-formed answer: reset, cut short or malformed (after the connection was made)."""


class ConnectFailed(HTTP1Error):
    """The connection could not be made (refused, unreachable, timed out)."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < IDLE_EXPIRY
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    def close(self) -> None:
        self.writer.close()


class Answer:
    """One answer: ``status``, ``headers`` (names lower-cased) and the body, read once with
    ``chunks()``, ``lines()`` or ``read()``. ``complete`` once the body was read to its end."""

    def __init__(self, connection: _Connection, method: str, status: int, headers: dict[str, str]):
        self.status = status
        self.headers = headers
        self._reader = connection.reader
        self.complete = False
        self.reusable = "close" not in headers.get("connection", "").lower()
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._length: int | None = None
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._length = 0
        elif not self._chunked:
            declared = headers.get("content-length")
            if declared is not None:
                if not declared.isdigit():
                    raise HTTP1Error(f"bad Content-Length {declared!r}")
                self._length = int(declared)
            else:
                self.reusable = False  # framed by the connection's end

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body in pieces as they arrive (never an empty piece)."""
        reader = self._reader
        try:
            if self._chunked:
                while True:
                    line = await reader.readuntil(b"\r\n")
                    size_text = line.split(b";", 1)[0].strip()
                    try:
                        size = int(size_text, 16)
                    except ValueError:
                        raise HTTP1Error(f"bad chunk size {size_text[:40]!r}") from None
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers
                        break
                    async for data in _exactly(reader, size):
                        yield data
                    if await reader.readexactly(2) != b"\r\n":
                        raise HTTP1Error("a chunk did not end with CRLF")
            elif self._length is not None:
                async for data in _exactly(reader, self._length):
                    yield data
            else:
                while data := await reader.read(_READ_PIECE):
                    yield data
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            raise HTTP1Error(_describe(exc)) from exc
        self.complete = True

    async def lines(self, max_line: int) -> AsyncIterator[bytes]:
        """The body's lines (without their ``\\n``), each at most ``max_line`` bytes; a last
        line without ``\\n`` too."""
        pending = b""
        async for piece in self.chunks():
            parts = (pending + piece).split(b"\n")
            pending = parts.pop()
            if len(pending) > max_line:
                raise HTTP1Error(f"a line of the answer passed {max_line} bytes")
            for line in parts:
                if len(line) > max_line:
                    raise HTTP1Error(f"a line of the answer passed {max_line} bytes")
                yield line
        if pending:
            yield pending

    async def read(self, limit: int) -> bytes:
        """The whole body; ``HTTP1Error`` if it passes ``limit`` bytes."""
        parts, size = [], 0
        async for piece in self.chunks():
            size += len(piece)
            if size > limit:
                raise HTTP1Error(f"the answer passed {limit} bytes")
            parts.append(piece)
        return b"".join(parts)


class Connections:
    """Kept-alive connections to one daemon at ``host``:``port``; usable from any coroutine of
    one event loop (each request holds its own connection)."""

    def __init__(self, host: str, port: int, *, max_idle: int = 8) -> None:
        self.host = host
        self.port = port
        self.max_idle = max_idle
        self._authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._idle: list[_Connection] = []
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    async def _connect(self, connect_timeout: float | None) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        except TimeoutError as exc:
            raise ConnectFailed(f"connecting timed out after {connect_timeout:g} s") from exc
        except OSError as exc:
            raise ConnectFailed(_describe(exc)) from exc
        return _Connection(reader, writer)

    def _release(self, connection: _Connection) -> None:
        if self._closed or len(self._idle) >= self.max_idle:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.append(connection)

    @contextlib.asynccontextmanager
    async def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes = b"",
        *,
        connect_timeout: float | None = 10.0,
    ) -> AsyncIterator[Answer]:
        """Send one request and yield its answer once its head has arrived. Read the body
        inside the block: the connection is kept for the next request only if it was read to
        the end."""
        if self._closed:
            raise HTTP1Error("the client is closed")
        connection = await self._connect(connect_timeout)
        answer: Answer | None = None
        try:
            lines = [f"{method} {target} HTTP/1.1", f"Host: {self._authority}"]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            if body or method in ("POST", "PUT", "PATCH"):
                lines.append(f"Content-Length: {len(body)}")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            try:
                connection.writer.write(head + body)
                await connection.writer.drain()
                answer = await _read_head(connection, method)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                raise HTTP1Error(_describe(exc)) from exc
            yield answer
        finally:
            if answer is not None and answer.complete and answer.reusable:
                self._release(connection)
            else:
                connection.close()


async def _exactly(reader: asyncio.StreamReader, size: int) -> AsyncIterator[bytes]:
    """``size`` bytes in pieces as they arrive: a chunk's declared size is never buffered whole."""
    while size:
        data = await reader.read(min(size, _READ_PIECE))
        if not data:
            raise HTTP1Error("the connection closed in the middle of an answer")
        size -= len(data)
        yield data


async def _read_head(connection: _Connection, method: str) -> Answer:
    while True:
        raw = await connection.reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise HTTP1Error(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
        status = int(code)
        if status == 100:
            continue  # 100 Continue: the real answer follows
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, sep, value = line.partition(":")
                if not sep:
                    raise HTTP1Error(f"a malformed header line: {line[:80]!r}")
                headers[name.strip().lower()] = value.strip()
        return Answer(connection, method, status, headers)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the connection closed in the middle of an answer"
    if isinstance(exc, asyncio.LimitOverrunError):
        return f"an answer's head or chunk line passed {MAX_HEAD} bytes"
    return str(exc) or type(exc).__name__
