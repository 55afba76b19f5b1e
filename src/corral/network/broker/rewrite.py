"""The request side of an intercepted connection: placeholders out, values in.

``RequestRewriter`` is fed the decrypted bytes the sandbox sends and returns the bytes to send
upstream. Requests are parsed with httptools (llhttp); each request head is rebuilt from the
parsed method, target, version and headers (names and order as sent), its body passed through
(a chunked body re-chunked as it arrives). Responses are never parsed: they flow back unchanged.

Per request, the secrets that may be injected are those bound to the connection's name (the
SNI the broker accepted) -- and only if the request's one ``Host`` header names that same host;
otherwise the request goes upstream exactly as the sandbox wrote it, placeholders included.
A secret's placeholder is replaced in header values (any header, or only its ``header``;
``Basic`` credentials decoded and re-encoded), in the query string (``query``) and, when its
binding says so (``body``), in the body: such a body is buffered (at most ``max_body`` bytes,
and only while the broker-wide ``BodyBudget`` has room; else it passes unchanged) and sent
with a new ``Content-Length``. AWS secrets are not replaced
but re-signed (``sigv4``), which also buffers the body when the request names no payload hash.

After a protocol upgrade (``Upgrade``/``CONNECT``) the rest of the stream passes unchanged.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable

import httptools

from corral.network.broker import sigv4
from corral.network.broker.injection import Injection

__all__ = ["BodyBudget", "RequestRewriter", "RewriteError"]

MAX_BODY = 8 * 1024 * 1024
MAX_HEAD = 64 * 1024  # a request head (target and headers) larger than this ends the connection
_AUTH_HEADERS = (b"authorization", b"proxy-authorization")


class RewriteError(ValueError):
    """The sandbox sent something that is not HTTP/1.1: the connection is closed."""


Used = Callable[[Injection, str, str], None]  # injection, method, path (no query)


class BodyBudget:
    """The bytes of request bodies all rewriters together may hold at once (so a sandbox with
    many connections cannot make the daemon hold ``MAX_BODY`` for each)."""

    def __init__(self, limit: int = 64 * 1024 * 1024) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held = max(0, self.held - size)


class RequestRewriter:
    """Not thread-safe; one per intercepted connection. ``to_client`` holds bytes the broker
    answers the sandbox with itself (``100 Continue`` for a body it buffers)."""

    def __init__(
        self,
        host: str,
        injections: Callable[[], tuple[Injection, ...]],
        used: Used,
        *,
        max_body: int = MAX_BODY,
        budget: BodyBudget | None = None,
    ) -> None:
        self.host = host.lower()
        self._injections = injections
        self._used = used
        self._max_body = max_body
        self._budget = budget or BodyBudget()
        self._held = 0  # of the budget, by this rewriter's buffer
        self._parser = httptools.HttpRequestParser(self)
        self._out: list[bytes] = []
        self.to_client = b""
        self._upgraded = False
        self._reset()

    def _reset(self) -> None:
        self._head_size = 0
        self._url = bytearray()
        self._headers: list[tuple[bytes, bytes]] = []
        self._active: tuple[Injection, ...] = ()
        self._chunked = False
        self._buffer: bytearray | None = None  # the body, while it is being held
        self._head: bytes = b""
        self._method = ""
        self._path = ""
        self._sign: Injection | None = None
        self._overflow = False

    def feed(self, data: bytes) -> bytes:
        if self._upgraded:
            return data
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self._upgraded = True
            offset = int(exc.args[0]) if exc.args else len(data)
            self._out.append(data[offset:])
        except httptools.HttpParserError as exc:
            ours = exc.__cause__ or exc.__context__
            if isinstance(ours, RewriteError):
                raise ours from None  # raised by one of our callbacks
            raise RewriteError(f"not an HTTP/1.1 request stream: {exc}") from exc
        out = b"".join(self._out)
        self._out.clear()
        return out

    # -- httptools callbacks -----------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._reset()

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers.append((name, value))
        self._grow_head(len(name) + len(value) + 4)

    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD:
            raise RewriteError(f"a request head over {MAX_HEAD // 1024} KiB")

    def on_headers_complete(self) -> None:
        self._method = self._parser.get_method().decode("latin-1")
        target = bytes(self._url)
        self._path = target.split(b"?", 1)[0].decode("latin-1")
        lower = [(n.lower(), v) for n, v in self._headers]
        hosts = [v for n, v in lower if n == b"host"]
        self._chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in lower)
        if len(hosts) == 1 and _host_of(hosts[0]) == self.host:
            self._active = tuple(i for i in self._injections() if i.covers(self.host))
        if not self._active:
            self._head = self._render(target, self._headers)
            self._out.append(self._head)
            return
        self._sign = sigv4.signing_injection(lower, self._active)
        wants_body = any(i.body for i in self._active if i.aws_key_id is None) or (
            self._sign is not None and sigv4.needs_body(lower)
        )
        has_body = self._chunked or any(
            n == b"content-length" and v.strip() != b"0" for n, v in lower
        )
        if wants_body and has_body:
            self._buffer = bytearray()
            if any(n == b"expect" and v.lower() == b"100-continue" for n, v in lower):
                self.to_client += b"HTTP/1.1 100 Continue\r\n\r\n"
            return
        self._emit_head(target, b"")

    def on_body(self, body: bytes) -> None:
        if self._buffer is not None:
            self._buffer += body
            fits = self._budget.take(len(body))
            if fits:
                self._held += len(body)
            if not fits or len(self._buffer) > self._max_body:
                self._release()
                # Too large to hold: it goes as the sandbox wrote it, body unchanged.
                held, self._buffer = bytes(self._buffer), None
                self._overflow = True
                self._sign = None
                self._emit_head(bytes(self._url), None)
                self._out.append(_chunk(held) if self._chunked else held)
            return
        self._out.append(_chunk(body) if self._chunked else body)

    def on_message_complete(self) -> None:
        if self._buffer is not None:
            self._emit_head(bytes(self._url), bytes(self._buffer))
            self._buffer = None
            self._release()
        elif self._chunked:
            self._out.append(b"0\r\n\r\n")

    def _release(self) -> None:
        self._budget.give(self._held)
        self._held = 0

    def close(self) -> None:
        """The connection ended: give back what a half-received body held."""
        self._buffer = None
        self._release()

    # -- rewriting ---------------------------------------------------------------------------
    def _emit_head(self, target: bytes, body: bytes | None) -> None:
        """Send the head (secrets in), then ``body`` when it was held (b"": none expected)."""
        used: set[Injection] = set()
        target = self._target(target, used)
        headers = [(n, self._header(n, v, used)) for n, v in self._headers]
        if body:
            for inj in self._active:
                if inj.body and inj.aws_key_id is None and inj.placeholder in body:
                    body = body.replace(inj.placeholder, inj.value)
                    used.add(inj)
            drop = {b"content-length", b"transfer-encoding", b"expect"}
            headers = [(n, v) for n, v in headers if n.lower() not in drop]
            headers.append((b"Content-Length", str(len(body)).encode()))
        if self._sign is not None:
            signed = sigv4.resign(self._method, self.host, target, headers, body, self._sign)
            if signed is not None:
                headers = signed
                used.add(self._sign)
        for inj in used:
            self._used(inj, self._method, self._path)
        self._out.append(self._render(target, headers))
        if body:
            self._out.append(body)

    def _render(self, target: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
        major, minor = self._parser.get_http_version().split(".")
        lines = [
            b"%s %s HTTP/%s.%s"
            % (self._method.encode("latin-1"), target, major.encode(), minor.encode())
        ]
        lines += [name + b": " + value for name, value in headers]
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def _target(self, target: bytes, used: set[Injection]) -> bytes:
        path, sep, query = target.partition(b"?")
        if not sep:
            return target
        for inj in self._active:
            if inj.query and inj.aws_key_id is None and inj.placeholder in query:
                query = query.replace(inj.placeholder, inj.value)
                used.add(inj)
        return path + sep + query

    def _header(self, name: bytes, value: bytes, used: set[Injection]) -> bytes:
        lower = name.lower()
        for inj in self._active:
            if inj.aws_key_id is not None:
                continue
            if inj.header is not None and lower != inj.header.encode():
                continue
            if inj.scheme is not None and not value.lower().startswith(
                inj.scheme.lower().encode() + b" "
            ):
                continue
            if inj.placeholder in value:
                value = value.replace(inj.placeholder, inj.value)
                used.add(inj)
            elif lower in _AUTH_HEADERS and value[:6].lower() == b"basic ":
                value = _basic(value, inj, used)
        return value


def _basic(value: bytes, inj: Injection, used: set[Injection]) -> bytes:
    try:
        decoded = base64.b64decode(value[6:].strip(), validate=True)
    except (binascii.Error, ValueError):
        return value
    if inj.placeholder not in decoded:
        return value
    used.add(inj)
    return value[:6] + base64.b64encode(decoded.replace(inj.placeholder, inj.value))


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


def _host_of(value: bytes) -> str:
    """The host of a ``Host`` header value, lowercase, without a port or a trailing dot."""
    text = value.decode("latin-1").strip().lower()
    if text.startswith("["):
        return text
    return text.rpartition(":")[0].rstrip(".") if ":" in text else text.rstrip(".")
