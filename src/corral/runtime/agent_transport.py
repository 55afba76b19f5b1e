"""The HTTP link from the daemon to one sandbox's agent: errors, bounded answers, streams.

``AgentTransport`` holds kept-alive connections to ``http://{host}:{port}`` and the agent's key;
``corral.runtime.agent_client.AgentClient`` puts the protocol's calls on it. Unary calls and
event streams go through ``agent_http.AgentConnections`` (a small HTTP/1.1 client: they are the
exec path, where httpx and httpcore were a quarter of the daemon's CPU); file transfers and the
readiness poll through an ``httpx.AsyncClient``. Given a ``transport`` (tests' fakes), every
call goes through httpx and that transport.
Here is what every call shares: the timeouts, the cap on what the daemon holds of one answer
(``MAX_ANSWER_BYTES``), the translation of httpx errors into the exception tree below
(``raise ... from``; httpx and ``AgentTransportError`` never leave this module and
``agent_client``), NDJSON event
streams, and the query-string and JSON encodings of surrogateescape'd paths.

Exceptions::

    AgentError                the agent answered an error: .code is the protocol's code
     |                        ("not_found", "exec_failed", ...), .status its HTTP status
     +-- AgentUnavailable     no usable answer: refused, reset, cut mid-stream or timed out
                              (.code "unavailable", .status None)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import ssl
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Self
from urllib.parse import quote_from_bytes

import httpx

from corral.agent import AGENT_PORT
from corral.runtime.agent_http import AgentConnections, AgentTransportError, Answer

__all__ = [
    "MAX_ANSWER_BYTES",
    "AgentError",
    "AgentTransport",
    "AgentUnavailable",
    "json_body",
    "query",
]

UNARY_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
TRANSFER_TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=30.0)
FOLLOW_TIMEOUT = httpx.Timeout(connect=5.0, read=None, write=60.0, pool=30.0)
# The most the daemon holds of one answer: a JSON answer, an error body, one NDJSON event line.
# The agent's largest answer, its process list, stays below it (agent/processes.py bounds the
# table); a bigger one is refused, never buffered.
MAX_ANSWER_BYTES = 16 * 1024 * 1024
# The keyword arguments a call may carry to go through AgentConnections: a body given whole.
_PLAIN = frozenset({"content", "headers"})


class AgentError(Exception):
    """The agent answered with an error, or (as ``AgentUnavailable``) could not be reached."""

    def __init__(self, message: str, *, code: str = "internal", status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status = status


class AgentUnavailable(AgentError):
    """No usable answer from the agent: connection refused or reset, stream cut, timeout."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="unavailable", status=None)


def query(**params: str | int | bool | None) -> str:
    """A query string of ``params`` (``None`` left out); a path's raw bytes percent-encoded."""
    parts = []
    for name, value in params.items():
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        else:
            text = quote_from_bytes(value.encode("utf-8", "surrogateescape"), safe="/")
        parts.append(f"{name}={text}")
    return "&".join(parts)


def json_body(value: Any) -> dict[str, Any]:
    """httpx keyword arguments sending ``value`` as a JSON body."""
    # Serialised here, not by httpx: ASCII-escaped JSON carries surrogateescape'd names intact.
    return {"content": json.dumps(value).encode(), "headers": {"Content-Type": "application/json"}}


@functools.cache
def _trusts_nothing() -> ssl.SSLContext:
    """A TLS context that trusts no certificate, made once per process. The link is plain HTTP
    and never uses TLS; without a context of its own every client would load the system's CA
    bundle when made (measured 60-220 ms of CPU each at load 10, on the event loop of a boot)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class AgentTransport:
    """The HTTP link to one sandbox's agent, under ``AgentClient``'s protocol methods.

    Every call goes through ``_call`` (one bounded answer) or ``_events`` (an NDJSON stream, each
    line bounded); both count in ``in_flight`` while open and raise only ``AgentError``.

    Not bound to a task: any coroutine of the daemon's event loop may use it concurrently (httpx
    pools connections; each stream holds one connection while it is iterated). Close it with
    ``aclose()`` (or ``async with``) when the sandbox goes away or is restored elsewhere.

    ``in_flight`` counts the requests open on it (a stream counts until it is closed): the
    service freezes an idle sandbox only when nothing is talking to its agent.
    """

    def __init__(
        self,
        host: str,
        port: int = AGENT_PORT,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        unary_timeout: httpx.Timeout = UNARY_TIMEOUT,
    ) -> None:
        """``unary_timeout`` bounds a call that is not a stream or a transfer (it guards
        against a hung agent; tests on a loaded machine give a more patient one)."""
        bracketed = f"[{host}]" if ":" in host else host
        self.host = bracketed
        self.base_url = f"http://{bracketed}:{port}"
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=unary_timeout,
            transport=transport,
            verify=_trusts_nothing(),
            trust_env=False,  # a private link: no proxy or netrc from the daemon's environment
            limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=16, keepalive_expiry=30.0
            ),
        )
        self._unary_timeout = unary_timeout
        self._fast = AgentConnections(host, port) if transport is None else None
        self._auth: dict[str, str] = {}
        self._key: str | None = None  # the one sent (set_key)
        self.in_flight = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._fast is not None:
            await self._fast.aclose()
        await self._http.aclose()

    def sandbox_url(self, port: int) -> str:
        """``http://ADDRESS:PORT`` of another port of this sandbox, as the daemon reaches it
        (the slot forwards every port the host connects to)."""
        return f"http://{self.host}:{port}"

    async def prepare_link(self) -> None:
        """Open a connection to the agent now if none is idle, so that the next call skips the
        connect (a new connection into a gVisor sandbox measured ~1.1 ms more per exec than a
        kept-alive one). Best effort: a failure here is the next call's to report."""
        if self._fast is None:
            return
        with contextlib.suppress(AgentTransportError):
            await self._fast.prepare(FOLLOW_TIMEOUT.connect)

    def set_key(self, key: str) -> None:
        """Send ``key`` (the agent's, hex) from now on."""
        self._key = key
        self._http.headers["Authorization"] = f"Bearer {key}"
        self._auth = {"Authorization": f"Bearer {key}"}

    # -- plumbing ----------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def _open(self, method: str, url: str, **kwargs: Any) -> AsyncIterator[httpx.Response]:
        """``httpx``'s ``stream``, counted in ``in_flight`` while it is open."""
        self.in_flight += 1
        try:
            async with self._http.stream(method, url, **kwargs) as response:
                yield response
        finally:
            self.in_flight -= 1

    @staticmethod
    def _too_large(doing: str, what: str) -> AgentError:
        return AgentError(
            f"{doing}: {what} passed {MAX_ANSWER_BYTES // (1024 * 1024)} MiB; refused",
            code="too_large",
            status=502,
        )

    async def _read_capped(self, response: httpx.Response, doing: str) -> httpx.Response:
        """The answer with its body read, refusing one over ``MAX_ANSWER_BYTES``."""
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
            raise self._too_large(doing, "the agent's answer")
        if response.is_stream_consumed:  # a transport that handed over the answer read whole
            if len(response.content) > MAX_ANSWER_BYTES:
                raise self._too_large(doing, "the agent's answer")
            return response
        parts, size = [], 0
        async for chunk in response.aiter_raw():
            size += len(chunk)
            if size > MAX_ANSWER_BYTES:
                raise self._too_large(doing, "the agent's answer")
            parts.append(chunk)
        return httpx.Response(
            response.status_code, headers=response.headers, content=b"".join(parts)
        )

    def _unavailable(self, doing: str, exc: Exception) -> AgentUnavailable:
        detail = str(exc) or type(exc).__name__
        return AgentUnavailable(f"{doing}: agent at {self.base_url} unavailable: {detail}")

    @staticmethod
    def _error(doing: str, response: httpx.Response) -> AgentError:
        # The agent's messages already name the path or program; only a foreign answer needs
        # our context.
        try:
            body = response.json()
            message, code = str(body["error"]), str(body["code"])
        except (ValueError, KeyError, TypeError):
            message = f"{doing}: agent answered HTTP {response.status_code}"
            code = "internal"
        return AgentError(message, code=code, status=response.status_code)

    async def _call(
        self,
        method: str,
        url: str,
        doing: str,
        *,
        timeout: httpx.Timeout | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        content = kwargs.get("content", b"")
        if self._fast is not None and isinstance(content, bytes) and kwargs.keys() <= _PLAIN:
            timeout = timeout or self._unary_timeout
            headers = {**self._auth, **kwargs.get("headers", {})}
            return await self._fast_call(method, url, doing, timeout, content, headers)
        try:
            async with self._open(
                method, url, timeout=timeout or self._unary_timeout, **kwargs
            ) as streamed:
                response = await self._read_capped(streamed, doing)
        except httpx.TransportError as exc:
            raise self._unavailable(doing, exc) from exc
        if response.status_code >= 400:
            raise self._error(doing, response)
        return response

    async def _fast_call(
        self,
        method: str,
        url: str,
        doing: str,
        timeout: httpx.Timeout,
        content: bytes,
        headers: dict[str, str],
    ) -> httpx.Response:
        """``_call`` through ``AgentConnections``: the whole exchange within the timeout's
        ``read`` (None: unbounded), the answer capped at ``MAX_ANSWER_BYTES``."""
        assert self._fast is not None
        self.in_flight += 1
        try:
            async with (
                asyncio.timeout(timeout.read),
                self._fast.request(
                    method, url, headers, content, connect_timeout=timeout.connect
                ) as answer,
            ):
                body = await self._fast_body(answer, doing)
        except TimeoutError:
            late = TimeoutError(f"no answer within {timeout.read:g} s")
            raise self._unavailable(doing, late) from None
        except AgentTransportError as exc:
            raise self._unavailable(doing, exc) from exc
        finally:
            self.in_flight -= 1
        response = httpx.Response(answer.status, headers=answer.headers, content=body)
        if response.status_code >= 400:
            raise self._error(doing, response)
        return response

    async def _fast_body(self, answer: Answer, doing: str) -> bytes:
        declared = answer.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
            raise self._too_large(doing, "the agent's answer")
        parts, size = [], 0
        async for piece in answer.chunks():
            size += len(piece)
            if size > MAX_ANSWER_BYTES:
                raise self._too_large(doing, "the agent's answer")
            parts.append(piece)
        return b"".join(parts)

    async def _fast_events(
        self, method: str, url: str, doing: str, content: bytes = b"", **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        """``_events`` through ``AgentConnections``: connected within the follow timeout's
        ``connect``, then as long as the stream lasts."""
        assert self._fast is not None
        headers = {**self._auth, **kwargs.get("headers", {})}
        self.in_flight += 1
        try:
            async with self._fast.request(
                method, url, headers, content, connect_timeout=FOLLOW_TIMEOUT.connect
            ) as answer:
                if answer.status >= 400:
                    body = await self._fast_body(answer, doing)
                    raise self._error(doing, httpx.Response(answer.status, content=body))
                async for event in self._ndjson(answer.chunks(), doing):
                    yield event
        except AgentTransportError as exc:
            raise self._unavailable(doing, exc) from exc
        finally:
            self.in_flight -= 1

    async def _ndjson(
        self, chunks: AsyncIterator[bytes], doing: str
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The JSON events of an NDJSON stream, whichever client reads it; one event may not
        exceed MAX_ANSWER_BYTES."""
        pending = b""
        async for piece in chunks:
            lines = (pending + piece).split(b"\n")
            pending = lines.pop()
            if len(pending) > MAX_ANSWER_BYTES:
                raise self._too_large(doing, "one event of the agent's stream")
            for line in lines:
                if line:
                    yield json.loads(line)

    async def _events(
        self, method: str, url: str, doing: str, **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        if self._fast is not None and kwargs.keys() <= _PLAIN:
            async for event in self._fast_events(method, url, doing, **kwargs):
                yield event
            return
        try:
            async with self._open(method, url, timeout=FOLLOW_TIMEOUT, **kwargs) as resp:
                if resp.status_code >= 400:
                    raise self._error(doing, await self._read_capped(resp, doing))
                async for event in self._ndjson(resp.aiter_raw(), doing):
                    yield event
        except httpx.TransportError as exc:
            raise self._unavailable(doing, exc) from exc
