"""One TLS end of an intercepted connection, over a non-blocking socket, through MemoryBIOs.

The proxy has already read the sandbox's ClientHello (to learn the SNI) when it decides to
intercept, so the TLS object cannot own the socket: ``ssl.MemoryBIO`` lets the broker feed it
those bytes first, then the socket's. Reads and writes run on the event loop (``loop.sock_*``);
sends (and the records a read may produce) go out under one lock per end, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl

__all__ = ["TlsEnd"]

_READ = 65536
_COALESCE = 262144


class TlsEnd:
    """``server_side`` for the sandbox's end (our leaf), else the upstream's end."""

    def __init__(
        self,
        sock: socket.socket,
        context: ssl.SSLContext,
        *,
        server_side: bool,
        server_hostname: str | None = None,
        initial: bytes = b"",
        idle_timeout: float = 300.0,
    ) -> None:
        self._sock = sock
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._in, self._out, server_side=server_side, server_hostname=server_hostname
        )
        if initial:
            self._in.write(initial)
        self._idle = idle_timeout
        self._lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()

    async def _flush(self) -> None:
        async with self._lock:
            data = self._out.read()
            if data:
                await self._loop.sock_sendall(self._sock, data)

    async def _fill(self, timeout: float) -> None:
        data = await asyncio.wait_for(self._loop.sock_recv(self._sock, _READ), timeout)
        if data:
            self._in.write(data)
        else:
            self._in.write_eof()

    async def handshake(self, timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    self._tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    await self._flush()
                    await self._fill(timeout)
            await self._flush()

    async def recv(self) -> bytes:
        """Decrypted data; ``b""`` once the peer has closed (cleanly or not). Every record
        already received is returned at once (a response head and its body, sent as two
        records, go on as one write: no small second segment to wait on a delayed ACK)."""
        while True:
            try:
                data = self._tls.read(_READ)
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill(self._idle)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            if data:
                data += self._more()
            if self._out.pending:
                await self._flush()
            return data

    def _more(self) -> bytes:
        """What the records already in the incoming buffer hold, without waiting."""
        parts = []
        size = 0
        while size < _COALESCE:
            try:
                part = self._tls.read(_READ)
            except (ssl.SSLWantReadError, ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break  # an end is seen again by the next recv
            if not part:
                break
            parts.append(part)
            size += len(part)
        return b"".join(parts)

    async def send(self, data: bytes) -> None:
        async with self._lock:
            view = memoryview(data)
            while view:
                written = self._tls.write(view[:_READ])
                view = view[written:]
                await self._loop.sock_sendall(self._sock, self._out.read())

    async def shutdown(self) -> None:
        """Say close_notify and end our write side (the peer may still answer)."""
        with contextlib.suppress(ssl.SSLError, OSError):
            self._tls.unwrap()
        with contextlib.suppress(ssl.SSLError, OSError):
            await self._flush()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_WR)

    @property
    def alpn(self) -> str | None:
        return self._tls.selected_alpn_protocol()
