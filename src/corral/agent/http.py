"""The agent's own small HTTP/1.1 server: request parsing, bodies, responses, the accept loop.

A server of its own rather than ``http.server``, whose imports (email, http client, ssl...) took
~90 ms of the agent's start inside gVisor; sockets come from ``_socket`` (``socket.py`` pulls in
enum and selectors). Bodies, stream framing and query strings are ``wire``'s.

``Server`` accepts connections and serves each on its own daemon thread; a ``Connection`` reads
keep-alive requests one after the other and hands each to ``route``, which a subclass implements
(``routes.Handler``). Invariants: every response is written with as few ``sendall`` calls as
possible; a request body is always consumed (``RequestBody.drain``) before the next request is
read, or the connection is closed; an ``ApiError`` becomes a JSON error answer, any other
exception a 500 with its traceback on stderr.
"""

from __future__ import annotations

import _socket
import io
import sys
import threading
import time

from .errors import ApiError, bad_request
from .jsonio import json_dumps, json_loads
from .wire import MAX_JSON_BODY, RequestBody, parse_query

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_PHRASES = {
    100: "Continue",
    200: "OK",
    201: "Created",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
    507: "Insufficient Storage",
}
_METHODS = ("GET", "POST", "PUT", "DELETE")
MAX_LINE = 65536  # request line and header lines, as http.server allows
MAX_HEADERS = 100


class _SocketWriter:
    """The response side of a connection: every write is one ``sendall``."""

    def __init__(self, sock: _socket.socket) -> None:
        self.write = sock.sendall


class _SocketReader(io.RawIOBase):
    """The request side of a connection, to be buffered (``socket.SocketIO`` without socket.py)."""

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self.sock.recv_into(buffer)


class Connection:
    """One keep-alive HTTP/1.1 connection, served by its own thread; ``route`` answers a request.

    While ``route`` runs, ``path`` is the request target, ``query`` its decoded query string,
    ``headers`` the headers (names lower-cased) and ``body`` the unread request body.
    """

    def __init__(self, connection: _socket.socket) -> None:
        self.connection = connection
        self.rfile = io.BufferedReader(_SocketReader(connection), 64 * 1024)
        self.wfile = _SocketWriter(connection)
        self.close_connection = True
        self.path = ""
        self.headers: dict[str, str] = {}
        self.query: dict[str, str] = {}
        self.body: RequestBody | None = None

    def peer_closed(self) -> bool:
        """Whether the client has closed its end (its FIN has arrived): a peek that never
        blocks. A write to such a socket may still succeed, so this is how a stream tells that
        its last bytes had nobody to read them."""
        try:
            return self.connection.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def handle(self) -> None:
        try:
            self.connection.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
            self.close_connection = False
            while not self.close_connection:
                self._handle_one()
        except OSError:
            pass
        finally:
            try:
                self.rfile.close()
                self.connection.shutdown(_socket.SHUT_WR)
            except OSError:
                pass
            self.connection.close()

    def _handle_one(self) -> None:
        line = self.rfile.readline(MAX_LINE + 1)
        if not line:
            self.close_connection = True
            return
        if len(line) > MAX_LINE:
            return self.send_error(414)
        words = line.decode("iso-8859-1").rstrip("\r\n").split()
        if len(words) != 3 or not words[2].startswith("HTTP/"):
            return self.send_error(400, f"Bad request syntax ({line[:200]!r})")
        method, self.path, version = words
        try:
            major, minor = (int(n) for n in version[5:].split(".", 1))
        except ValueError:
            return self.send_error(400, f"Bad request version ({version!r})")
        if major >= 2:
            return self.send_error(505, f"Invalid HTTP version ({version[5:]})")
        headers: dict[str, str] = {}
        while True:
            raw = self.rfile.readline(MAX_LINE + 1)
            if len(raw) > MAX_LINE:
                return self.send_error(431, "Line too long")
            if raw in (b"\r\n", b"\n", b""):
                break
            if len(headers) >= MAX_HEADERS:
                return self.send_error(431, "Too many headers")
            name, _, value = raw.decode("iso-8859-1").partition(":")
            key = name.strip().lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        self.headers = headers
        connection = headers.get("connection", "").lower()
        keep_alive = (major, minor) >= (1, 1) or connection == "keep-alive"
        self.close_connection = connection == "close" or not keep_alive
        if headers.get("expect", "").lower() == "100-continue" and (major, minor) >= (1, 1):
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if method not in _METHODS:
            return self.send_error(501, f"Unsupported method ({method!r})")
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")
        self._dispatch(method)

    # -- plumbing ----------------------------------------------------------------------------

    def _dispatch(self, method: str) -> None:
        self.body = None
        try:
            path, _, query = self.path.partition("#")[0].partition("?")
            self.query = parse_query(query)
            self.body = RequestBody(self.rfile, self.headers)
            self.route(method, path)
        except ApiError as exc:
            self._send_error(exc.status, exc.code, exc.message)
        except (ConnectionError, TimeoutError):
            self.close_connection = True
        except Exception as exc:
            import traceback

            traceback.print_exc(file=sys.stderr)
            self._send_error(500, "internal", f"{type(exc).__name__}: {exc}")
        finally:
            if self.body is not None and not self.body.done and not self.close_connection:
                try:
                    self.body.drain()  # keep the connection usable after an early answer
                except (ConnectionError, OSError):
                    self.close_connection = True

    def route(self, method: str, path: str) -> None:
        """Answer one request (``path`` without its query string)."""
        raise NotImplementedError

    # -- answering ---------------------------------------------------------------------------

    def read_json(self) -> dict[str, Any]:
        """The request body as a JSON object ({} when empty)."""
        assert self.body is not None
        raw = self.body.read_all(MAX_JSON_BODY)
        if not raw:
            return {}
        try:
            value = json_loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"request body is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise bad_request("request body must be a JSON object")
        return value

    def head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        lines = [f"HTTP/1.1 {status} {_PHRASES.get(status, 'Unknown')}"]
        lines += [f"{k}: {v}" for k, v in headers]
        if self.close_connection:
            lines.append("Connection: close")
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def send_json(self, status: int, value: Any) -> None:
        body = json_dumps(value)
        head = self.head(
            status, [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
        )
        self.wfile.write(head + body)

    def send_empty(self) -> None:
        self.wfile.write(self.head(204, []))

    def _send_error(self, status: int, code: str, message: str) -> None:
        self.send_json(status, {"error": message, "code": code})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Malformed requests and unknown methods, before _dispatch: answer JSON like the rest.
        self.close_connection = True
        text = message or _PHRASES.get(code, "Unknown")
        self._send_error(code, "bad_request" if code < 500 else "internal", text)


class Server:
    """The listening socket and its accept loop: one daemon thread per connection, served by
    what ``make_handler`` makes of the accepted socket."""

    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], make_handler: Callable[[_socket.socket], Connection]
    ) -> None:
        self.make_handler = make_handler
        self.socket = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
        self.socket.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        self.socket.bind(address)
        self.socket.listen(self.request_queue_size)

    def serve_forever(self) -> None:
        while True:
            try:
                fd, _ = self.socket._accept()  # type: ignore[attr-defined]
                connection = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
            except OSError:  # out of fds, or the peer left before accept: keep serving
                time.sleep(0.01)
                continue
            handler = self.make_handler(connection)
            try:
                threading.Thread(target=handler.handle, name="connection", daemon=True).start()
            except RuntimeError:  # out of threads (pids limit): drop this connection
                connection.close()
