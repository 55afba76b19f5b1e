"""The one HTTP path to the daemon: auth, timeouts, error translation, NDJSON streams.

Every request of the SDK goes through `HTTPSession`; it is the only module that touches httpx
exceptions, and it turns them into `corral.sdk.errors` at this boundary.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote_from_bytes

import httpx

from corral.sdk._exec_wire import parse_event
from corral.sdk.errors import ConnectionFailed, RateLimited, error_from_response
from corral.sdk.models import ProcessEvent

__all__ = ["DEFAULT_TIMEOUT", "STREAM_TIMEOUT", "HTTPSession", "parse_event"]

DEFAULT_TIMEOUT = httpx.Timeout(120.0, connect=10.0)
# Streams (exec output, uploads fed from a pipe) may stay quiet for as long as the command runs.
STREAM_TIMEOUT = httpx.Timeout(None, connect=10.0)

Params = Mapping[str, Any] | list[tuple[str, Any]] | None


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


class HTTPSession:
    """An authenticated httpx.AsyncClient bound to one daemon URL.

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

    async def aclose(self) -> None:
        await self._client.aclose()

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
                if line.strip():
                    event = parse_event(json.loads(line))
                    if held or event.type == "exit":
                        held.append(event)
                    else:
                        yield event
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


def _decode_body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text
