"""A small asyncio HTTP/1.1 client: the daemon's link to its agents and the SDK's hot calls to a
plain-``http://`` daemon.

Why not httpx there: an exec is one request and a short NDJSON stream, and httpx with httpcore
(request and URL models, cookies, auth and redirect layers, the pool's bookkeeping, anyio
streams, h11) was about a quarter of the daemon's CPU per exec in a py-spy profile, and 2.3 ms of
the SDK's CPU per ``Sandbox.exec`` of ``true``. The agent (``docs/agent-protocol.md``) and the
daemon answer a small, known subset of HTTP/1.1, so this client does only that: one request at
a time per connection, a body given whole, an answer framed by ``Content-Length``, ``chunked``,
or the connection's end. It imports nothing of corral: the runtime (``runtime/agent_http.py``)
and the SDK (``sdk/_http.py``, only when nothing needs httpx) both use it.

Connections are kept alive: one goes back to the idle set only after its answer was read to the
end (and neither side said ``Connection: close``); an answer left unread closes its connection.
An idle connection older than the pool's ``idle_expiry`` or one whose peer has closed it is
dropped rather than reused. Nothing is retried: a request that failed may have reached the peer.

Bounds (the peer's answers are hostile input: an agent runs inside a sandbox): the answer's
head is at most ``MAX_HEAD`` bytes, a chunk-size line at most that too; how much body a caller
takes is the caller's bound (``Answer.read(limit)``, ``Answer.lines(max_line)``).

A failure to connect raises ``ConnectFailed``; every other failure to send or to read a
well-formed answer ``HTTP1Error`` (its base class).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

__all__ = ["MAX_HEAD", "Answer", "ConnectFailed", "Connections", "HTTP1Error"]

MAX_HEAD = 64 * 1024
_READ_PIECE = 64 * 1024


class HTTP1Error(Exception):
    """No well-formed answer: refused, reset, timed out, cut short or malformed."""


class ConnectFailed(HTTP1Error):
    """The connection could not be made (refused, unreachable, timed out)."""


class _Connection:
    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, idle_expiry: float
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_expiry = idle_expiry
        self.idle_since = 0.0

    def usable(self, now: float) -> bool:
        return (
            now - self.idle_since < self.idle_expiry
            and not self.writer.is_closing()
            and not self.reader.at_eof()
        )

    def close(self) -> None:
        self.writer.close()

    def abort(self) -> None:
        """Drop the connection now, unsent bytes and all: a reader waiting on it wakes."""
        self.writer.transport.abort()


class Answer:
    """One answer: ``status``, ``headers`` (names lower-cased) and the body, read once with
    ``chunks()`` or ``read()``. ``complete`` once the body has been read to its end."""

    def __init__(self, connection: _Connection, method: str, status: int, headers: dict[str, str]):
        self.status = status
        self.headers = headers
        self._connection = connection
        self.complete = False
        self.reusable = "close" not in headers.get("connection", "").lower()
        encoding = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in encoding
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
        reader = self._connection.reader
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

    async def read(self, limit: int | None = None) -> bytes:
        """The whole body; ``HTTP1Error`` if it passes ``limit`` bytes (None: the caller
        bounds it otherwise)."""
        parts, size = [], 0
        async for piece in self.chunks():
            size += len(piece)
            if limit is not None and size > limit:
                raise HTTP1Error(f"the answer passed {limit} bytes")
            parts.append(piece)
        return b"".join(parts)


class Connections:
    """Kept-alive connections to one server at ``host``:``port``; usable from any coroutine of
    one event loop (each request holds its own connection). An idle connection is reused for at
    most ``idle_expiry`` seconds (keep it under the server's own keep-alive). ``aclose()``
    closes them all, the ones a request is using too: a stream from a peer that is going away
    ends at once rather than waiting on one that may never answer or reset again."""

    def __init__(
        self, host: str, port: int, *, max_idle: int = 16, idle_expiry: float = 30.0
    ) -> None:
        self.host = host
        self.port = port
        self.max_idle = max_idle
        self.idle_expiry = idle_expiry
        self._authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._idle: list[_Connection] = []
        self._busy: set[_Connection] = set()
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        busy, self._busy = self._busy, set()
        for connection in idle:
            connection.close()
        for connection in busy:
            connection.abort()

    async def _connect(self, connect_timeout: float | None) -> _Connection:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable(now):
                return connection
            connection.close()
        return await self._open(connect_timeout)

    async def _open(self, connect_timeout: float | None) -> _Connection:
        try:
            async with asyncio.timeout(connect_timeout):
                reader, writer = await asyncio.open_connection(self.host, self.port, limit=MAX_HEAD)
        except TimeoutError as exc:
            raise ConnectFailed(f"connecting timed out after {connect_timeout:g} s") from exc
        except OSError as exc:
            raise ConnectFailed(_describe(exc)) from exc
        return _Connection(reader, writer, self.idle_expiry)

    async def prepare(self, connect_timeout: float | None) -> None:
        """Have an idle connection ready for the next request: open one unless a usable one
        is idle already (a caller about to ask, e.g. a pool's claimed sandbox whose link
        expired while it waited, then skips the connect)."""
        if self._closed:
            return
        now = time.monotonic()
        if any(connection.usable(now) for connection in self._idle):
            return
        self._release(await self._connect(connect_timeout))

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
        connect_timeout: float | None = 5.0,
        head_timeout: float | None = None,
    ) -> AsyncIterator[Answer]:
        """Send one request and yield its answer once its head has arrived (within
        ``head_timeout`` of sending, if given). Read the body inside the block: the connection
        is kept for the next request only if it was read to the end."""
        if self._closed:
            raise HTTP1Error("the client is closed")
        connection = await self._connect(connect_timeout)
        self._busy.add(connection)
        answer: Answer | None = None
        closing = any(
            k.lower() == "connection" and v.lower() == "close" for k, v in headers.items()
        )
        try:
            lines = [f"{method} {target} HTTP/1.1", f"Host: {self._authority}"]
            lines += [f"{name}: {value}" for name, value in headers.items()]
            if body or method in ("POST", "PUT", "PATCH"):
                lines.append(f"Content-Length: {len(body)}")
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
            try:
                while True:
                    try:
                        connection.writer.write(head + body if len(body) < _READ_PIECE else head)
                        if len(body) >= _READ_PIECE:
                            connection.writer.write(body)
                            await connection.writer.drain()
                        async with asyncio.timeout(head_timeout):
                            answer = await _read_head(connection, method)
                        break
                    except (ConnectionError, asyncio.IncompleteReadError) as exc:
                        if not _stale(connection, exc):
                            raise
                        # A kept-alive connection its peer had closed (an agent restarted, a
                        # server's keep-alive ran out) before the loop saw it: nothing of the
                        # answer came, so the request was not taken. Once more, on a new one.
                        self._busy.discard(connection)
                        connection.close()
                        connection = await self._open(connect_timeout)
                        self._busy.add(connection)
            except TimeoutError as exc:
                raise HTTP1Error(f"no answer within {head_timeout:g} s") from exc
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                raise HTTP1Error(_describe(exc)) from exc
            yield answer
        finally:
            self._busy.discard(connection)
            if answer is not None and answer.complete and answer.reusable and not closing:
                self._release(connection)
            else:
                connection.close()


def _stale(connection: _Connection, exc: BaseException) -> bool:
    """Whether ``exc`` says the peer had closed ``connection`` while it was idle: it was reused
    (a new one has never been idle) and not one byte of an answer came on it."""
    if connection.idle_since == 0.0:
        return False
    if isinstance(exc, asyncio.IncompleteReadError):
        return not exc.partial
    return isinstance(exc, (ConnectionResetError, BrokenPipeError))


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
