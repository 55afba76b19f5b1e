"""The one HTTP path to the daemon: auth, timeouts, error translation, NDJSON streams.

Every request of the SDK goes through `HTTPSession`; it is the only module that touches httpx
exceptions, and it turns them into `corral.sdk.errors` at this boundary.
"""

from __future__ import annotations

import asyncio
import functools
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote_from_bytes, urlsplit

import httpx

from corral import http1 as _http1
from corral.sdk._exec_wire import parse_event
from corral.sdk.errors import APIError, ConnectionFailed, RateLimited, error_from_response
from corral.sdk.models import ProcessEvent
from corral.sdk.plainhttp import plain_http_usable

__all__ = ["DEFAULT_TIMEOUT", "STREAM_TIMEOUT", "HTTPSession", "parse_event"]

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
# Streams (exec output, uploads fed from a pipe) may stay quiet for as long as the command runs.
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)

Params = Mapping[str, Any] | list[tuple[str, Any]] | None
MAX_EVENT_LINE = 64 << 20  # one NDJSON event (base64 output chunks are far smaller)
MAX_ERROR_BODY = 1 << 20
MAX_ANSWER = 256 << 20  # one whole answer read by `request` (JSON; big transfers stream)


@functools.cache
def _verifying_tls() -> ssl.SSLContext:
    """httpx's default TLS context (the CA bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``), made
    once per process rather than once per client."""
    return httpx.create_ssl_context()


@functools.cache
def _no_tls() -> ssl.SSLContext:
    """For a plain ``http://`` daemon: a context that trusts no certificate, never used (the
    SDK sends only paths under its base URL and follows no redirect)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def tls_context(url: str) -> ssl.SSLContext:
    """The TLS context for a client of ``url``, shared by every client of the process.

    httpx builds a new verifying context for each client it makes, loading the whole CA bundle
    (28 ms of CPU on a quiet host), and each ``Sandbox.create`` makes a client: a script that
    makes a sandbox per task paid that every time, for a plain-HTTP daemon that never uses TLS.
    """
    return _verifying_tls() if url.lower().startswith("https:") else _no_tls()


def encode_query(params: Mapping[str, Any] | list[tuple[str, Any]]) -> str:
    """Percent-encode a query string, keeping path bytes that are not UTF-8.

    Sandbox file names are bytes; the SDK carries undecodable ones as surrogate escapes
    (``os.fsdecode``), which httpx's own encoder refuses.
    """
    items = params.items() if isinstance(params, Mapping) else params
    parts = []
    for name, value in items:
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            raw = str(value).encode("utf-8", "surrogateescape")
            text = quote_from_bytes(raw, safe="/")
        parts.append(f"{quote_from_bytes(name.encode(), safe='')}={text}")
    return "&".join(parts)


def _hold_or_pass(line: str | bytes, held: list[ProcessEvent]) -> ProcessEvent | None:
    """The event of one NDJSON line of an exec stream to hand out now, or None: a blank line,
    or an event held until the stream has ended (the exit and anything after it)."""
    if not line.strip():
        return None
    event = parse_event(json.loads(line))
    if held or event.type == "exit":
        held.append(event)
        return None
    return event


def _plain_connections(url: str, transport: object | None) -> tuple[_http1.Connections, str] | None:
    """Kept-alive plain-HTTP connections to the daemon at `url` and its base path, when nothing
    needs httpx (`plain_http_usable`)."""
    if not plain_http_usable(url, transport):
        return None
    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError:
        return None  # httpx reports the bad URL
    if not parts.hostname or parts.username is not None or parts.query or parts.fragment:
        return None
    # Reused for at most 4 s: under the daemon's own keep-alive (5 s by default), so the daemon
    # does not close a connection as a request goes out on it.
    connections = _http1.Connections(parts.hostname, port, max_idle=8, idle_expiry=4.0)
    return connections, parts.path.rstrip("/")


class HTTPSession:
    """An authenticated httpx.AsyncClient bound to one daemon URL; with a plain ``http://``
    daemon, exec streams and requests whose body is JSON or nothing go through `_http1`
    instead (a fraction of httpx's CPU per call).

    Not thread-safe: use it from the event loop it was first used on (the sync SDK runs all
    calls on one private loop).
    """

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout = DEFAULT_TIMEOUT,
    ) -> None:
        self.url = url
        self._client = httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {api_key}", "User-Agent": "corral-sdk"},
            timeout=timeout,
            transport=transport,
            verify=tls_context(url),
        )
        self._plain = _plain_connections(url, transport)
        self._plain_headers = {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": "corral-sdk",
            "Accept": "*/*",
            "Content-Type": "application/json",
        }

    async def aclose(self) -> None:
        if self._plain is not None:
            await self._plain[0].aclose()
        await self._client.aclose()

    async def _plain_request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any,
        params: Params,
        headers: Mapping[str, str] | None,
        timeout: httpx.Timeout,
    ) -> httpx.Response:
        """`request` through `_http1`: the whole exchange within the timeout's ``read`` (None:
        unbounded), the answer at most ``MAX_ANSWER`` bytes."""
        assert self._plain is not None
        if not isinstance(timeout, httpx.Timeout):  # callers may give seconds, as httpx takes
            timeout = httpx.Timeout(timeout)
        connections, base = self._plain
        if params:
            path = f"{path}?{encode_query(params)}"
        sent = dict(self._plain_headers)
        payload = b""
        if json_body is None:
            del sent["Content-Type"]
        else:
            # ASCII-escaped: surrogate-escaped path bytes travel intact, as in `encode_query`.
            payload = json.dumps(json_body).encode()
        sent.update(headers or {})
        try:
            async with (
                asyncio.timeout(timeout.read),
                connections.request(
                    method, base + path, sent, payload, connect_timeout=timeout.connect
                ) as answer,
            ):
                limit = MAX_ERROR_BODY if answer.status >= 400 else MAX_ANSWER
                body = await answer.read(limit)
        except TimeoutError:
            raise ConnectionFailed.lost(self.url, f"no answer within {timeout.read:g} s") from None
        except _http1.ConnectFailed as exc:
            raise ConnectionFailed.unreachable(self.url, str(exc)) from exc
        except _http1.HTTP1Error as exc:
            raise ConnectionFailed.lost(self.url, str(exc)) from exc
        if answer.status >= 400:
            raise _plain_error(answer.status, body, answer)
        return httpx.Response(answer.status, headers=answer.headers, content=body)

    async def exec_events(self, path: str, body: Any) -> AsyncIterator[ProcessEvent]:
        """POST `body` (JSON) to `path` and yield the events of its NDJSON answer, as
        `stream` + `iter_events` do (the exit event once the stream has ended); an error status
        raises its translated error, a broken connection `ConnectionFailed`."""
        if self._plain is None:
            async with self.stream("POST", path, json_body=body) as response:
                async for event in self.iter_events(response):
                    yield event
            return
        connections, base = self._plain
        payload = json.dumps(body).encode()
        held: list[ProcessEvent] = []
        try:
            async with connections.request(
                "POST",
                base + path,
                self._plain_headers,
                payload,
                connect_timeout=STREAM_TIMEOUT.connect,
            ) as answer:
                if answer.status >= 400:
                    raise _plain_error(answer.status, await answer.read(MAX_ERROR_BODY), answer)
                async for line in answer.lines(MAX_EVENT_LINE):
                    if (passed := _hold_or_pass(line, held)) is not None:
                        yield passed
        except _http1.ConnectFailed as exc:
            raise ConnectionFailed.unreachable(self.url, str(exc)) from exc
        except _http1.HTTP1Error as exc:
            if not held:
                raise ConnectionFailed.lost(self.url, str(exc)) from exc
        for event in held:
            yield event

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Params = None,
        content: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> httpx.Response:
        """Send one request and return the (fully read) successful response."""
        if self._plain is not None and content is None:
            return await self._plain_request(
                method,
                path,
                json_body=json_body,
                params=params,
                headers=headers,
                timeout=timeout or DEFAULT_TIMEOUT,
            )
        async with self.stream(
            method,
            path,
            json_body=json_body,
            params=params,
            content=content,
            headers=headers,
            timeout=timeout or DEFAULT_TIMEOUT,
        ) as response:
            try:
                await response.aread()
            except httpx.TransportError as exc:
                raise self._broken(exc) from exc
        return response

    async def json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = await self.request(method, path, **kwargs)
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: Params = None,
        content: Any = None,
        headers: Mapping[str, str] | None = None,
        timeout: httpx.Timeout | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """Open a streamed response; raises the translated error for an error status."""
        if params:
            path = f"{path}?{encode_query(params)}"
        request = self._client.build_request(
            method,
            path,
            json=json_body,
            content=content,
            headers=headers,
            timeout=timeout or STREAM_TIMEOUT,
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        try:
            if response.status_code >= 400:
                try:
                    await response.aread()
                except httpx.TransportError as exc:
                    raise self._broken(exc) from exc
                error = error_from_response(response.status_code, _decode_body(response))
                retry_after = response.headers.get("retry-after", "")
                if isinstance(error, RateLimited) and retry_after.replace(".", "", 1).isdigit():
                    error.retry_after = float(retry_after)
                raise error
            yield response
        finally:
            await response.aclose()

    async def iter_bytes(self, response: httpx.Response) -> AsyncIterator[bytes]:
        try:
            async for chunk in response.aiter_bytes():
                if chunk:
                    yield chunk
        except httpx.TransportError as exc:
            raise self._broken(exc) from exc

    async def iter_events(self, response: httpx.Response) -> AsyncIterator[ProcessEvent]:
        """Parse an NDJSON event stream; a broken connection raises `ConnectionFailed`.

        The `exit` event is handed out once the stream has ended (the daemon ends it right
        after): callers stop at `exit`, and a response closed before its end costs its
        keep-alive connection, so the next call would pay for a new one (~5 ms).
        """
        held: list[ProcessEvent] = []
        try:
            async for line in response.aiter_lines():
                if (passed := _hold_or_pass(line, held)) is not None:
                    yield passed
        except httpx.TransportError as exc:
            if not held:
                raise self._broken(exc) from exc
        for event in held:
            yield event

    async def iter_lines(self, response: httpx.Response) -> AsyncIterator[str]:
        """The lines of a text stream (server-sent events)."""
        try:
            async for line in response.aiter_lines():
                yield line
        except httpx.TransportError as exc:
            raise self._broken(exc) from exc

    async def iter_json_lines(self, response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
        """Parse an NDJSON stream of plain objects (build events)."""
        try:
            async for line in response.aiter_lines():
                if line.strip():
                    yield json.loads(line)
        except httpx.TransportError as exc:
            raise self._broken(exc) from exc

    def _unreachable(self, exc: httpx.TransportError) -> ConnectionFailed:
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
            return ConnectionFailed.unreachable(self.url, str(exc) or type(exc).__name__)
        return self._broken(exc)

    def _broken(self, exc: httpx.TransportError) -> ConnectionFailed:
        return ConnectionFailed.lost(self.url, str(exc) or type(exc).__name__)


def _plain_error(status: int, raw: bytes, answer: _http1.Answer) -> APIError:
    """The SDK's error for an error answer read by `_http1` (as `stream` makes it)."""
    try:
        decoded: Any = json.loads(raw)
    except ValueError:
        decoded = raw.decode("utf-8", errors="replace")
    error = error_from_response(status, decoded)
    retry_after = answer.headers.get("retry-after", "")
    if isinstance(error, RateLimited) and retry_after.replace(".", "", 1).isdigit():
        error.retry_after = float(retry_after)
    return error


def _decode_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
