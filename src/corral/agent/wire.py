"""The agent's HTTP wire format, apart from the server: request bodies (Content-Length or
chunked), chunked and NDJSON stream framing, query strings and their typed parameters.

Query strings are decoded here rather than with ``urllib.parse`` (its import costs the agent's
start inside gVisor): ``unquote`` and ``parse_query`` match it, pinned by
tests/unit/agent/test_wire.py. Bounds: bodies move in ``FILE_CHUNK`` pieces; a JSON body is at
most ``MAX_JSON_BODY``.
"""

from __future__ import annotations

from .errors import bad_request

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

FILE_CHUNK = 1024 * 1024  # file transfers and request bodies move in 1 MiB pieces
MAX_JSON_BODY = 16 * 1024 * 1024


class RequestBody:
    """A request body read incrementally, with Content-Length or chunked framing."""

    def __init__(self, rfile: Any, headers: Any) -> None:
        self.rfile = rfile
        encoding = headers.get("transfer-encoding")
        self.chunked = encoding is not None and "chunked" in encoding.lower()
        self.remaining = 0
        if not self.chunked:
            try:
                self.remaining = int(headers.get("content-length") or 0)
            except ValueError:
                raise bad_request("invalid Content-Length") from None
            if self.remaining < 0:
                raise bad_request("invalid Content-Length")
        self.done = not self.chunked and self.remaining == 0

    def read(self, size: int = FILE_CHUNK) -> bytes:
        """Up to ``size`` bytes; b"" at the end of the body."""
        if self.done:
            return b""
        if self.chunked and self.remaining == 0 and not self._next_chunk():
            return b""
        data: bytes = self.rfile.read(min(size, self.remaining))
        if not data:
            raise ConnectionError("request body ended early")
        self.remaining -= len(data)
        if self.remaining == 0:
            if self.chunked:
                self.rfile.readline(8)  # the CRLF after the chunk data
            else:
                self.done = True
        return data

    def _next_chunk(self) -> bool:
        line = self.rfile.readline(1024)
        if not line:
            raise ConnectionError("request body ended early")
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise ConnectionError("bad chunk size in request body") from None
        if size == 0:
            while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
                pass  # trailers
            self.done = True
            return False
        self.remaining = size
        return True

    def read_all(self, limit: int) -> bytes:
        parts, total = [], 0
        while chunk := self.read():
            total += len(chunk)
            if total > limit:
                raise bad_request(f"request body larger than {limit} bytes")
            parts.append(chunk)
        return b"".join(parts)

    def drain(self) -> None:
        while self.read():
            pass


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


LAST_CHUNK = b"0\r\n\r\n"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def parse_flag(query: dict[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes"):
        return True
    if value.lower() in ("0", "false", "no"):
        return False
    raise bad_request(f"query parameter {name!r} must be true or false, not {value!r}")


def parse_int(value: object, name: str, default: int | None = None) -> int:
    if value is None or value == "":
        if default is None:
            raise bad_request(f"{name!r} is required")
        return default
    try:
        if isinstance(value, bool):
            raise ValueError
        number: int = int(value)  # type: ignore[call-overload]
        return number
    except (TypeError, ValueError):
        raise bad_request(f"{name!r} must be an integer, not {value!r}") from None


_HEX = "0123456789abcdefABCDEF"


def unquote(text: str) -> str:
    """Percent-decoding as ``urllib.parse.unquote(errors="surrogateescape")`` does it: runs of
    ``%XX`` are decoded together as UTF-8, malformed escapes are kept as they are."""
    if "%" not in text:
        return text
    pieces = text.split("%")
    out = [pieces[0]]
    pending = bytearray()
    for piece in pieces[1:]:
        code = piece[:2]
        if len(code) == 2 and code[0] in _HEX and code[1] in _HEX:
            pending.append(int(code, 16))
            rest = piece[2:]
        else:
            rest = "%" + piece
        if rest:
            if pending:
                out.append(pending.decode("utf-8", "surrogateescape"))
                pending.clear()
            out.append(rest)
    if pending:
        out.append(pending.decode("utf-8", "surrogateescape"))
    return "".join(out)


def parse_query(query: str) -> dict[str, str]:
    """``dict(urllib.parse.parse_qsl(query, keep_blank_values=True, errors="surrogateescape"))``."""
    result = {}
    for field in query.split("&"):
        if not field:
            continue
        name, _, value = field.partition("=")
        result[unquote(name.replace("+", " "))] = unquote(value.replace("+", " "))
    return result
