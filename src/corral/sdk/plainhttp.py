"""`exec` to its end over plain HTTP with the standard library: a light public entry point.

`run_exec(sandbox_id, cmd, ...)` is `Sandbox.connect(sandbox_id).exec(cmd, ...)` for callers that
start often and run one command (the CLI).

`corral exec ID -- CMD` is one request and one NDJSON stream. Through `Client` it imports httpx
(which also imports its own command line: click, rich, pygments), asyncio and anyio, and starts
the sync SDK's loop thread: several times what the command itself takes. `http.client` does the
same request in a few ms of imports. `run_exec` takes this path only when nothing needs httpx:
a plain `http://` URL, no proxy in the environment, no custom transport (tests pass one) and no
stdin; otherwise it goes through `Client`, the one full implementation.

The answers are the SDK's own: an error status becomes `error_from_response`, a refused
connection `ConnectionFailed.unreachable`, a broken stream `ConnectionFailed.lost`; a stream that
breaks after the process started is followed to its end by the full SDK (`follow_events`).
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from corral.sdk._exec_wire import OutputCollector, build_exec_body, parse_event
from corral.sdk.config import resolve_api_key, resolve_url
from corral.sdk.errors import ConnectionFailed, error_from_response

if TYPE_CHECKING:
    import httpx

    from corral.sdk._exec_wire import EventCallback
    from corral.sdk.models import ExecResult

__all__ = ["CONNECT_TIMEOUT", "MAX_ERROR_BODY", "MAX_LINE", "plain_http_usable", "run_exec"]

CONNECT_TIMEOUT = 10.0  # as the httpx path's connect timeout; the stream itself may stay quiet
MAX_LINE = 64 << 20  # one NDJSON event (base64 output chunks are far smaller)
MAX_ERROR_BODY = 1 << 20
_PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def plain_http_usable(url: str, transport: object | None = None) -> bool:
    """Whether `url` can be spoken to without httpx: plain http, no proxy, no custom transport."""
    if transport is not None or not url.startswith("http://"):
        return False
    return not any(os.environ.get(name) for name in _PROXY_VARIABLES)


def run_exec(
    sandbox_id: str,
    cmd: str | Sequence[str],
    *,
    url: str | None = None,
    api_key: str | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    user: str | None = None,
    timeout: float | None = None,
    on_event: EventCallback | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> ExecResult:
    """`Client(url, api_key).sandbox(sandbox_id).exec(cmd, ...)`, by the shortest path.

    `on_event` must be a plain function here (it is called on this thread)."""
    url = resolve_url(url)
    key = resolve_api_key(api_key)
    if not plain_http_usable(url, transport):
        from corral.sdk.sync import Client

        with Client(url, key, transport=transport) as client:
            return client.sandbox(sandbox_id).exec(
                cmd, env=env, cwd=cwd, user=user, timeout=timeout, on_event=on_event
            )
    body = build_exec_body(cmd, env=env, cwd=cwd, user=user, timeout=timeout)
    collector = OutputCollector(on_event=on_event)
    sandbox_path = f"/v1/sandboxes/{quote(sandbox_id, safe='')}"
    try:
        _stream(url, key, f"{sandbox_path}/exec", body, collector)
    except ConnectionFailed:
        if collector.pid is None:
            raise
    if collector.exit is None:
        _follow(url, key, sandbox_id, collector)
    return collector.result()


def _stream(
    url: str, key: str, path: str, body: dict[str, Any], collector: OutputCollector
) -> None:
    """POST the exec request and feed every event of its answer to `collector`."""
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise ConnectionFailed.unreachable(url, f"bad port: {exc}") from None
    connection = http.client.HTTPConnection(parts.hostname or "", port, timeout=CONNECT_TIMEOUT)
    try:
        payload = json.dumps(body).encode()
        headers = {
            "Authorization": f"Bearer {key}",
            "User-Agent": "corral-sdk",
            "Content-Type": "application/json",
            "Accept": "*/*",
        }
        try:
            connection.connect()
        except (OSError, http.client.HTTPException) as exc:
            raise ConnectionFailed.unreachable(url, str(exc) or type(exc).__name__) from None
        if connection.sock is not None:
            # Only the connect is bounded, as on the httpx path: the answer may wait for the
            # sandbox (a wake, a busy host) and output may be minutes apart.
            connection.sock.settimeout(None)
        try:
            connection.request("POST", parts.path.rstrip("/") + path, payload, headers)
            response = connection.getresponse()
            if response.status >= 400:
                raw = response.read(MAX_ERROR_BODY)
        except (OSError, http.client.HTTPException) as exc:
            raise ConnectionFailed.lost(url, str(exc) or type(exc).__name__) from None
        if response.status >= 400:
            raise error_from_response(response.status, _decode(raw))
        while collector.exit is None:
            try:
                line = response.readline(MAX_LINE + 1)
            except (OSError, http.client.HTTPException) as exc:
                raise ConnectionFailed.lost(url, str(exc) or type(exc).__name__) from None
            if not line:
                raise ConnectionFailed.lost(url, "the exec stream ended before the exit")
            if len(line) > MAX_LINE:
                raise ConnectionFailed.lost(url, f"an event line over {MAX_LINE} bytes")
            if line.strip():
                # Outside the try: the caller's hook failing (a closed stdout) is its own error.
                collector.feed_sync(parse_event(json.loads(line)))
        # The exit event ends the stream; nothing more is read (the connection closes).
    finally:
        connection.close()


def _follow(url: str, key: str, sandbox_id: str, collector: OutputCollector) -> None:
    """The stream broke after the process started: follow it to its exit with the full SDK."""
    from corral.sdk._portal import portal
    from corral.sdk.client import AsyncClient
    from corral.sdk.process import follow_events

    async def follow() -> None:
        async with AsyncClient(url, key) as client:
            path = client.sandbox(sandbox_id).path
            assert collector.pid is not None
            async for event in follow_events(
                client.session, path, collector.pid, after=collector.last_seq
            ):
                collector.feed_sync(event)

    portal().call(follow())


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")
