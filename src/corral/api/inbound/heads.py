"""Request and answer heads of the inbound proxy: which requests are a sandbox port's, their
credentials, and what is rewritten on the way (``corral.api.inbound`` says the whole design).

``parse_head`` reads one request head (through ``h11``) into an ``InboundRequest``: the sandbox
and port it addresses (by path, ``/sandboxes/ID/ports/PORT/REST``, or by host name,
``PORT-ID.<domain>``), its credential, taken out of the header, query and cookie it came in, and
the daemon's own cookies removed; ``InboundRequest.upstream_head`` is the head the port sees.
``isolate_answer_head`` gives a path-routed answer an origin of its own; ``error_answer`` is a
refusal in the API's JSON error shape. Pure functions of bytes: no sockets here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlencode

import h11

from corral.service.console_sessions import COOKIE_NAME as CONSOLE_COOKIE

__all__ = [
    "DAEMON_COOKIES",
    "HEAD_END",
    "ISOLATION_POLICY",
    "TOKEN_NAME",
    "BadHead",
    "InboundRequest",
    "error_answer",
    "isolate_answer_head",
    "parse_head",
]

HEAD_END = b"\r\n\r\n"
TOKEN_HEADER = b"x-corral-token"
TOKEN_NAME = "corral_token"
# The web console's session cookie rides along with every request to the daemon's origin, path
# routes included: a sandbox's server must never see it (it is the key of whoever is logged in).
DAEMON_COOKIES = (TOKEN_NAME.encode(), CONSOLE_COOKIE.encode())
_PATH = re.compile(rb"^/sandboxes/(sb-[0-9a-z]{4,32})/ports/(\d{1,5})(/[^?#]*)?(\?.*)?$", re.S)
_HOST = re.compile(rb"^(\d{1,5})-(sb-[0-9a-z]{4,32})\.", re.I)
_REASONS = {
    302: "Found",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    409: "Conflict",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def error_answer(status: int, code: str, message: str, extra: list[str] | None = None) -> bytes:
    """A complete HTTP/1.1 answer carrying the API's error body; the connection then closes."""
    body = json.dumps({"code": code, "message": message}, ensure_ascii=True).encode()
    lines = [
        f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
        *(extra or []),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(frozen=True)
class InboundRequest:
    """One parsed request head addressed to a sandbox's port."""

    sandbox_id: str
    port: int
    by_host: bool
    method: bytes
    path: bytes  # what the port sees, query included, credentials removed
    headers: list[tuple[bytes, bytes]]  # original names, credentials removed
    token: str | None
    token_in_query: bool
    upgrade: bool
    chunked: bool
    content_length: int

    @property
    def prefix(self) -> str:
        return f"/sandboxes/{self.sandbox_id}/ports/{self.port}"

    def same_target(self, other: InboundRequest) -> bool:
        """Whether both go to the same port of the same sandbox (by either route)."""
        return (self.sandbox_id, self.port) == (other.sandbox_id, other.port)

    def upstream_head(self, client: str | None) -> bytes:
        headers = [(k, v) for k, v in self.headers if k.lower() not in _HOP_BY_PROXY]
        if client is not None:
            headers.append((b"X-Forwarded-For", client.encode()))
        if not self.by_host:
            headers.append((b"X-Forwarded-Prefix", self.prefix.encode()))
            if not self.upgrade:
                # One answer per connection, so that every answer gets its own origin
                # (isolate_answer_head); the browser opens a new connection for the next.
                headers = [(k, v) for k, v in headers if k.lower() != b"connection"]
                headers.append((b"Connection", b"close"))
        lines = [self.method + b" " + self.path + b" HTTP/1.1"]
        lines += [name + b": " + value for name, value in headers]
        return b"\r\n".join(lines) + HEAD_END


_HOP_BY_PROXY = {b"x-forwarded-for", b"x-forwarded-prefix"}


# What a path-routed answer gets: the daemon's origin is the console's too, so a sandbox's page
# there is given an opaque origin of its own (scripts run, but reach nothing of the daemon's
# origin: no cookies, no readable answers, no service worker over the console).
ISOLATION_POLICY = (
    b"sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads "
    b"allow-pointer-lock allow-popups-to-escape-sandbox"
)


def isolate_answer_head(head: bytes) -> bytes:
    """A path-routed answer's head (without its blank line) with the isolation policy added,
    ``Connection: close``, and no ``Service-Worker-Allowed`` nor cookies of the daemon's own."""
    lines = head.split(b"\r\n")
    kept = [lines[0]]
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        lower = name.strip().lower()
        if lower in (b"connection", b"keep-alive", b"service-worker-allowed"):
            continue
        if lower == b"set-cookie":
            cookie = value.strip().split(b"=", 1)[0].strip()
            if cookie in DAEMON_COOKIES:
                continue
        kept.append(line)
    kept.append(b"Content-Security-Policy: " + ISOLATION_POLICY)
    kept.append(b"Connection: close")
    return b"\r\n".join(kept)


class BadHead(Exception):
    """A request head the proxy refuses; ``status`` is the answer's HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def parse_head(head: bytes, app_ports: frozenset[int]) -> InboundRequest | None:
    """The inbound request ``head`` (one complete head, ending in a blank line) is, or None when
    it is not addressed to a sandbox's port (it is the API's). Raises BadHead."""
    first_line = head.split(b"\r\n", 1)[0]
    target = first_line.split(b" ")
    path_match = _PATH.match(target[1]) if len(target) == 3 else None
    host_match = None
    if path_match is None:
        host = _host_header(head)
        host_match = _HOST.match(host) if host is not None else None
        if host_match is None or int(host_match.group(1)) in app_ports:
            return None
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=len(head) + 1)
    try:
        conn.receive_data(head)
        event = conn.next_event()
    except h11.RemoteProtocolError as exc:
        raise BadHead(400, f"malformed request: {exc}") from None
    if not isinstance(event, h11.Request):
        raise BadHead(400, "malformed request head")
    if path_match is not None:
        sandbox_id, port = path_match.group(1).decode(), int(path_match.group(2))
        path = (path_match.group(3) or b"/") + (path_match.group(4) or b"")
    else:
        assert host_match is not None
        sandbox_id, port = host_match.group(2).decode().lower(), int(host_match.group(1))
        path = event.target
    if not 1 <= port <= 65535:
        raise BadHead(400, f"port {port} is out of range 1-65535")
    names = [name for name, _ in event.headers]
    if b"transfer-encoding" in names and b"content-length" in names:
        raise BadHead(400, "a request with both Transfer-Encoding and Content-Length")
    chunked = any(n == b"transfer-encoding" and b"chunked" in v.lower() for n, v in event.headers)
    length = next((int(v) for n, v in event.headers if n == b"content-length"), 0)
    upgrade = any(n == b"upgrade" for n in names)
    path, query_token = _strip_query_token(path)
    headers, header_token, cookie_token = _strip_credentials(event.headers.raw_items())
    token = header_token or query_token or cookie_token
    return InboundRequest(
        sandbox_id=sandbox_id,
        port=port,
        by_host=path_match is None,
        method=event.method,
        path=path,
        headers=headers,
        token=token,
        token_in_query=query_token is not None and header_token is None,
        upgrade=upgrade,
        chunked=chunked,
        content_length=length,
    )


def _host_header(head: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if colon and name.strip().lower() == b"host":
            return value.strip()
    return None


def _strip_query_token(path: bytes) -> tuple[bytes, str | None]:
    base, question, query = path.partition(b"?")
    if not question or TOKEN_NAME.encode() not in query:
        return path, None
    pairs = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
    token = next((v for k, v in pairs if k == TOKEN_NAME), None)
    rest = [(k, v) for k, v in pairs if k != TOKEN_NAME]
    return (base + (b"?" + urlencode(rest).encode() if rest else b"")), token


def _strip_credentials(
    items: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], str | None, str | None]:
    header_token = cookie_token = None
    kept: list[tuple[bytes, bytes]] = []
    for name, value in items:
        lower = name.lower()
        if lower == TOKEN_HEADER:
            header_token = value.decode("latin-1").strip()
            continue
        if lower == b"cookie" and any(name in value for name in DAEMON_COOKIES):
            crumbs = []
            for crumb in value.split(b";"):
                key, _, val = crumb.strip().partition(b"=")
                if key == TOKEN_NAME.encode():
                    cookie_token = val.decode("latin-1")
                elif key not in DAEMON_COOKIES and crumb.strip():
                    crumbs.append(crumb.strip())
            if not crumbs:
                continue
            value = b"; ".join(crumbs)
        kept.append((name, value))
    return kept, header_token, cookie_token
