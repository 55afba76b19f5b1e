"""The daemon's client of the in-sandbox agent (the protocol is ``docs/agent-protocol.md``).

One ``AgentClient`` per sandbox holds one keep-alive ``httpx.AsyncClient`` to
``http://{host}:{port}``, where host is the sandbox's slot address, and sends the agent's key
(``set_key``) on every request (``corral.agent.keys``: the agent answers nothing else but an
anonymous health check). Streams (process events, file content) are passed through without
being held in memory: process events are yielded as decoded dicts whose ``data`` stays base64
text, file content as byte chunks.

The streaming methods return async generators: ``aclose()`` them when stopping early, so their
connection goes back to the pool at once.

Exceptions (httpx errors never leave this module; they are translated with ``raise ... from``)::

    AgentError                the agent answered an error: .code is the protocol's code
     |                        ("not_found", "exec_failed", ...), .status its HTTP status
     +-- AgentUnavailable     no usable answer: refused, reset, cut mid-stream or timed out
                              (.code "unavailable", .status None)

Paths are ``str``; names that are not UTF-8 travel as surrogateescape (``"\\udcff"``), in JSON as
escapes and in query strings as percent-encoded raw bytes, as the protocol says.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator
from typing import Any
from urllib.parse import quote_from_bytes

import httpx

from corral.agent import AGENT_PORT

__all__ = ["AgentClient", "AgentError", "AgentUnavailable"]

_UNARY_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
_TRANSFER_TIMEOUT = httpx.Timeout(connect=5.0, read=600.0, write=60.0, pool=30.0)
_FOLLOW_TIMEOUT = httpx.Timeout(connect=5.0, read=None, write=60.0, pool=30.0)
_READY_POLL = 0.002  # a refused connect costs ~0.2 ms; the agent starts in ~100 ms
_FILE_CHUNK = 1024 * 1024
# The most the daemon holds of one answer: a JSON answer, an error body, one NDJSON event line.
# The agent's largest answer, its process list, stays below it (agent/processes.py bounds the
# table); a bigger one is refused, never buffered.
MAX_ANSWER_BYTES = 16 * 1024 * 1024


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


def _query(**params: str | int | bool | None) -> str:
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


def _json_body(value: Any) -> dict[str, Any]:
    # Serialised here, not by httpx: ASCII-escaped JSON carries surrogateescape'd names intact.
    return {"content": json.dumps(value).encode(), "headers": {"Content-Type": "application/json"}}


class AgentClient:
    """Async client of one sandbox's agent.

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
        unary_timeout: httpx.Timeout = _UNARY_TIMEOUT,
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
            limits=httpx.Limits(
                max_connections=None, max_keepalive_connections=16, keepalive_expiry=30.0
            ),
        )
        self._unary_timeout = unary_timeout
        self.in_flight = 0

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def sandbox_url(self, port: int) -> str:
        """``http://ADDRESS:PORT`` of another port of this sandbox, as the daemon reaches it
        (the slot forwards every port the host connects to)."""
        return f"http://{self.host}:{port}"

    def set_key(self, key: str) -> None:
        """Send ``key`` (the agent's, hex) from now on."""
        self._http.headers["Authorization"] = f"Bearer {key}"

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

    async def _events(
        self, method: str, url: str, doing: str, **kwargs: Any
    ) -> AsyncGenerator[dict[str, Any], None]:
        try:
            async with self._open(method, url, timeout=_FOLLOW_TIMEOUT, **kwargs) as resp:
                if resp.status_code >= 400:
                    raise self._error(doing, await self._read_capped(resp, doing))
                pending = b""
                async for chunk in resp.aiter_raw():
                    if pending:
                        chunk = pending + chunk
                    lines = chunk.split(b"\n")
                    pending = lines.pop()
                    if len(pending) > MAX_ANSWER_BYTES:
                        raise self._too_large(doing, "one event of the agent's stream")
                    for line in lines:
                        if line:
                            yield json.loads(line)
        except httpx.TransportError as exc:
            raise self._unavailable(doing, exc) from exc

    # -- agent -------------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``{"ok", "version", "boot_id", "pid"}`` (only ``{"ok"}`` unless the key is right)."""
        response = await self._call("GET", "/health", "checking health")
        result: dict[str, Any] = response.json()
        return result

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Poll ``/health`` every few milliseconds until it answers; return its answer."""
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AgentUnavailable(
                    f"agent at {self.base_url} did not answer within {timeout:g} s"
                    f" (last error: {last})"
                )
            try:
                async with self._open(
                    "GET", "/health", timeout=httpx.Timeout(min(remaining, 1.0))
                ) as streamed:
                    response = await self._read_capped(streamed, "checking health")
            except httpx.TransportError as exc:
                last = exc
            else:
                if response.status_code == 200:
                    result: dict[str, Any] = response.json()
                    return result
                last = self._error("checking health", response)
            await asyncio.sleep(_READY_POLL)

    async def set_env(self, env: dict[str, str], *, merge: bool = False) -> None:
        """Replace (with ``merge``: add to) the default environment of processes started from
        now on."""
        body = _json_body({"env": env, "merge": merge})
        await self._call("PUT", "/config", "setting environment", **body)

    async def rekey(self, key: str, *, boot_id: str, seed: str) -> None:
        """Give a restored agent its own ``key`` and ``boot_id`` and reseed its randomness
        (``seed``, hex); from then on this client sends ``key``."""
        body = _json_body({"key": key, "boot_id": boot_id, "seed": seed})
        await self._call("POST", "/rekey", "giving the agent its key", **body)
        self.set_key(key)

    # -- processes ---------------------------------------------------------------------------

    async def start_process(self, spec: dict[str, Any]) -> int:
        """Start a process (``spec`` is the ``POST /processes`` body); return its pid."""
        doing = f"starting {spec.get('cmd') or spec.get('shell')!r}"
        response = await self._call("POST", "/processes", doing, **_json_body(spec))
        pid: int = response.json()["pid"]
        return pid

    def stream_process(
        self, spec: dict[str, Any], *, forget: bool = False
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Start a process and yield its events from ``start`` to ``exit``; with ``forget`` the
        agent drops the process once it has sent the exit event (no ``forget`` call after; a
        stream cut before that leaves it to reconnect to).

        An ``exec_failed`` (or any agent error) is raised by the first iteration, before any event.
        """
        doing = f"starting {spec.get('cmd') or spec.get('shell')!r}"
        url = "/processes?stream=true&forget=true" if forget else "/processes?stream=true"
        return self._events("POST", url, doing, **_json_body(spec))

    def events(
        self, pid: int, after: int = -1, follow: bool = True
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield the events of ``pid`` with seq > ``after``; with ``follow`` until ``exit``."""
        url = f"/processes/{pid}/events?{_query(after=after, follow=follow)}"
        return self._events("GET", url, f"reading events of process {pid}")

    async def list_processes(self) -> list[dict[str, Any]]:
        response = await self._call("GET", "/processes", "listing processes")
        processes: list[dict[str, Any]] = response.json()["processes"]
        return processes

    async def get_process(self, pid: int) -> dict[str, Any]:
        response = await self._call("GET", f"/processes/{pid}", f"getting process {pid}")
        result: dict[str, Any] = response.json()
        return result

    async def send_stdin(self, pid: int, data: bytes) -> None:
        await self._call(
            "POST",
            f"/processes/{pid}/stdin",
            f"writing to stdin of process {pid}",
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )

    async def resize(self, pid: int, rows: int, cols: int) -> None:
        """Set the terminal size of a process started with ``pty``."""
        await self._call(
            "POST",
            f"/processes/{pid}/resize",
            f"resizing the terminal of process {pid}",
            **_json_body({"rows": rows, "cols": cols}),
        )

    async def close_stdin(self, pid: int) -> None:
        await self._call("POST", f"/processes/{pid}/close-stdin", f"closing stdin of process {pid}")

    async def signal(self, pid: int, sig: int | str) -> None:
        """Send ``sig`` (number or name such as ``"SIGTERM"``) to the process group of ``pid``."""
        await self._call(
            "POST",
            f"/processes/{pid}/signal",
            f"sending {sig} to process {pid}",
            **_json_body({"signal": sig}),
        )

    async def forget(self, pid: int) -> None:
        """Drop a finished process and its buffered output from the agent."""
        await self._call("DELETE", f"/processes/{pid}", f"forgetting process {pid}")

    # -- files -------------------------------------------------------------------------------

    async def read_file(self, path: str) -> AsyncGenerator[bytes, None]:
        """Yield the content of ``path`` in chunks of up to 1 MiB.

        Always yields at least one chunk (``b""`` for an empty file), so ``await anext(it)``
        raises the agent's error (``not_found``...) before a caller commits to a response.
        """
        doing = f"reading {path!r}"
        url = f"/files/content?{_query(path=path)}"
        try:
            async with self._open("GET", url, timeout=_TRANSFER_TIMEOUT) as response:
                if response.status_code >= 400:
                    raise self._error(doing, await self._read_capped(response, doing))
                empty = True
                async for chunk in response.aiter_raw(_FILE_CHUNK):
                    empty = False
                    yield chunk
                if empty:
                    yield b""
        except httpx.TransportError as exc:
            raise self._unavailable(doing, exc) from exc

    async def write_file(
        self,
        path: str,
        data: AsyncIterable[bytes] | bytes,
        mode: int | None = None,
        parents: bool = False,
    ) -> dict[str, Any]:
        """Write ``path`` atomically from ``data`` (streamed); return ``{"path", "size"}``."""
        url = f"/files/content?{_query(path=path, mode=mode, parents=parents)}"
        response = await self._call(
            "PUT",
            url,
            f"writing {path!r}",
            timeout=_TRANSFER_TIMEOUT,
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        result: dict[str, Any] = response.json()
        return result

    async def stat(self, path: str) -> dict[str, Any]:
        """``{"name", "path", "type", "size", "mode", "mtime", "target"}`` of ``path``."""
        url = f"/files/stat?{_query(path=path)}"
        response = await self._call("GET", url, f"stat {path!r}")
        result: dict[str, Any] = response.json()
        return result

    async def list_dir(self, path: str, depth: int = 1) -> list[dict[str, Any]]:
        """Stat entries below ``path``, down to ``depth`` levels."""
        url = f"/files/list?{_query(path=path, depth=depth)}"
        response = await self._call("GET", url, f"listing {path!r}")
        entries: list[dict[str, Any]] = response.json()["entries"]
        return entries

    async def create_watch(self, path: str, recursive: bool) -> int:
        """Watch directory ``path`` (and, ``recursive``, all below it); the watch's id."""
        body = _json_body({"path": path, "recursive": recursive})
        response = await self._call("POST", "/watches", f"watching {path!r}", **body)
        watch_id: int = response.json()["id"]
        return watch_id

    async def watch_events(self, watch_id: int, wait: float = 0.0) -> dict[str, Any]:
        """``{"events": [...], "dropped": n, "closed": bool}`` of a watch since the last call,
        waiting up to ``wait`` seconds (at most 60) for the first event."""
        wait = min(max(wait, 0.0), 60.0)
        url = f"/watches/{int(watch_id)}/events?{_query(wait_ms=int(wait * 1000))}"
        timeout = httpx.Timeout(wait + 30.0, connect=5.0)
        response = await self._call("GET", url, f"reading watch {watch_id}", timeout=timeout)
        result: dict[str, Any] = response.json()
        return result

    async def remove_watch(self, watch_id: int) -> None:
        await self._call("DELETE", f"/watches/{int(watch_id)}", f"removing watch {watch_id}")

    async def mkdir(self, path: str, parents: bool = True) -> bool:
        """Create a directory; False if it already existed."""
        body = _json_body({"path": path, "parents": parents})
        response = await self._call("POST", "/files/mkdir", f"creating {path!r}", **body)
        created: bool = response.json()["created"]
        return created

    async def move(self, src: str, dst: str) -> dict[str, Any]:
        """Rename ``src`` to ``dst``; return the stat of ``dst``."""
        body = _json_body({"src": src, "dst": dst})
        response = await self._call("POST", "/files/move", f"moving {src!r} to {dst!r}", **body)
        result: dict[str, Any] = response.json()
        return result

    async def remove(self, path: str, recursive: bool = False) -> None:
        url = f"/files?{_query(path=path, recursive=recursive)}"
        await self._call("DELETE", url, f"removing {path!r}")
