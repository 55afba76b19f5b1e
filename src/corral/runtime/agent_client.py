"""The daemon's client of the in-sandbox agent (the protocol is ``docs/agent-protocol.md``).

One ``AgentClient`` per sandbox, on the HTTP link of ``corral.runtime.agent_transport`` (one
keep-alive connection pool to ``http://{host}:{port}``, where host is the sandbox's slot address;
the agent's key, ``set_key``, on every request: ``corral.agent.keys``, the agent answers nothing
else but an anonymous health check). Streams (process events, file content) are passed through
without being held in memory: process events are yielded as decoded dicts whose ``data`` stays
base64 text, file content as byte chunks.

The streaming methods return async generators: ``aclose()`` them when stopping early, so their
connection goes back to the pool at once.

Exceptions (``AgentError`` and ``AgentUnavailable``, from ``agent_transport``; httpx errors never
leave these two modules)::

    AgentError                the agent answered an error: .code is the protocol's code
     |                        ("not_found", "exec_failed", ...), .status its HTTP status
     +-- AgentUnavailable     no usable answer: refused, reset, cut mid-stream or timed out
                              (.code "unavailable", .status None)

Paths are ``str``; names that are not UTF-8 travel as surrogateescape (``"\\udcff"``), in JSON as
escapes and in query strings as percent-encoded raw bytes, as the protocol says.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterable
from typing import Any

import httpx

from corral.runtime.agent_transport import (
    TRANSFER_TIMEOUT,
    AgentError,
    AgentTransport,
    AgentUnavailable,
    json_body,
    query,
)

__all__ = ["AgentClient", "AgentError", "AgentUnavailable"]

_READY_POLL = 0.002  # a refused connect costs ~0.2 ms; the agent starts in ~100 ms
_FILE_CHUNK = 1024 * 1024


def _attempt(remaining: float) -> httpx.Timeout:
    """The timeout of one readiness attempt: at most a second, within what is left."""
    return httpx.Timeout(min(remaining, 1.0))


class AgentClient(AgentTransport):
    """Async client of one sandbox's agent.

    Not bound to a task: any coroutine of the daemon's event loop may use it concurrently (httpx
    pools connections; each stream holds one connection while it is iterated). Close it with
    ``aclose()`` (or ``async with``) when the sandbox goes away or is restored elsewhere.

    ``in_flight`` counts the requests open on it (a stream counts until it is closed): the
    service freezes an idle sandbox only when nothing is talking to its agent.
    """

    # -- agent -------------------------------------------------------------------------------

    async def health(self) -> dict[str, Any]:
        """``{"ok", "version", "boot_id", "pid"}`` (only ``{"ok"}`` unless the key is right)."""
        response = await self._call("GET", "/health", "checking health")
        result: dict[str, Any] = response.json()
        return result

    async def wait_ready(self, timeout: float) -> dict[str, Any]:
        """Poll ``/health`` every few milliseconds until it answers; return its answer.

        Each attempt goes the way of every unary call (``_call``: the plain connections of
        ``agent_http`` unless a transport was given), not through httpx: a refused attempt
        costs the daemon ~0.1 ms of CPU instead of ~1.7 (measured at load 6), and a boot's
        daemon shares the host's cores with the sandbox it waits for. The connection that
        answers stays kept alive for the first call after the boot (a first exec)."""
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
                response = await self._call(
                    "GET", "/health", "checking health", timeout=_attempt(remaining)
                )
            except AgentError as exc:  # AgentUnavailable (nobody listening yet) among them
                last = exc
            else:
                result: dict[str, Any] = response.json()
                return result
            await asyncio.sleep(_READY_POLL)

    async def set_env(self, env: dict[str, str], *, merge: bool = False) -> None:
        """Replace (with ``merge``: add to) the default environment of processes started from
        now on."""
        body = json_body({"env": env, "merge": merge})
        await self._call("PUT", "/config", "setting environment", **body)

    async def rekey(self, key: str, *, boot_id: str, seed: str) -> None:
        """Give a restored agent its own ``key`` and ``boot_id`` and reseed its randomness
        (``seed``, hex); from then on this client sends ``key``."""
        body = json_body({"key": key, "boot_id": boot_id, "seed": seed})
        await self._call("POST", "/rekey", "giving the agent its key", **body)
        self.set_key(key)

    async def rekey_when_ready(self, key: str, *, boot_id: str, seed: str, timeout: float) -> None:
        """``rekey`` a just-restored agent as soon as it answers: the rekey (sent with the key
        set now, the one it was checkpointed with) is retried every few milliseconds until the
        agent takes it, so it is the readiness check too (one round trip instead of a health
        check and then the rekey). Raises AgentUnavailable if nothing answered in ``timeout``.

        A rekey that got no answer may still have reached the agent, which then holds ``key``:
        when the key sent is refused (401), the other one is tried, and a rekey sent with
        ``key`` itself gives the agent the key it has (agents take a rekey from whoever holds
        their current key). Only both keys refused, with no unanswered attempt between, is an
        error: the agent at this address holds neither."""
        doing = "giving the agent its key"
        body = json_body({"key": key, "boot_id": boot_id, "seed": seed})
        # Not kept alive, for Go agents checkpointed before their connections left the Go
        # runtime's poller (agent/go/blockconn.go), which run on in old memory images: gVisor
        # (runsc 20240729) can save an epoll ready list torn, and the first notification of the
        # torn entry after the restore cuts the list behind it, so whatever was queued behind
        # it (the first connection accepted after the restore) is never reported again (gVisor
        # issue 13920, fixed by PR 14147). Such an agent answered the rekey and then never
        # heard the next request on that connection (3 of 36 execs after 12 wakes hung).
        body["headers"]["Connection"] = "close"
        image_key = self._key or key
        refused: set[str | None] = set()  # keys refused since the last unanswered attempt
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
                await self._call("POST", "/rekey", doing, timeout=_attempt(remaining), **body)
            except AgentUnavailable as exc:
                last = exc
                refused.clear()  # it may have reached the agent: either key may be its own now
            except AgentError as exc:
                if exc.status != 401:
                    raise
                refused.add(self._key)
                if len(refused) == 2:
                    raise AgentError(
                        f"{doing}: the agent at {self.base_url} refused both the key it was "
                        "checkpointed with and its new one",
                        code=exc.code,
                        status=exc.status,
                    ) from exc
                self.set_key(key if self._key == image_key else image_key)
                continue
            else:
                self.set_key(key)
                return
            await asyncio.sleep(_READY_POLL)

    # -- processes ---------------------------------------------------------------------------

    async def start_process(self, spec: dict[str, Any]) -> int:
        """Start a process (``spec`` is the ``POST /processes`` body); return its pid."""
        doing = f"starting {spec.get('cmd') or spec.get('shell')!r}"
        response = await self._call("POST", "/processes", doing, **json_body(spec))
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
        return self._events("POST", url, doing, **json_body(spec))

    def events(
        self, pid: int, after: int = -1, follow: bool = True
    ) -> AsyncGenerator[dict[str, Any], None]:
        """Yield the events of ``pid`` with seq > ``after``; with ``follow`` until ``exit``."""
        url = f"/processes/{pid}/events?{query(after=after, follow=follow)}"
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
            **json_body({"rows": rows, "cols": cols}),
        )

    async def close_stdin(self, pid: int) -> None:
        await self._call("POST", f"/processes/{pid}/close-stdin", f"closing stdin of process {pid}")

    async def signal(self, pid: int, sig: int | str) -> None:
        """Send ``sig`` (number or name such as ``"SIGTERM"``) to the process group of ``pid``."""
        await self._call(
            "POST",
            f"/processes/{pid}/signal",
            f"sending {sig} to process {pid}",
            **json_body({"signal": sig}),
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
        url = f"/files/content?{query(path=path)}"
        try:
            async with self._open("GET", url, timeout=TRANSFER_TIMEOUT) as response:
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
        url = f"/files/content?{query(path=path, mode=mode, parents=parents)}"
        response = await self._call(
            "PUT",
            url,
            f"writing {path!r}",
            timeout=TRANSFER_TIMEOUT,
            content=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        result: dict[str, Any] = response.json()
        return result

    async def stat(self, path: str) -> dict[str, Any]:
        """``{"name", "path", "type", "size", "mode", "mtime", "target"}`` of ``path``."""
        url = f"/files/stat?{query(path=path)}"
        response = await self._call("GET", url, f"stat {path!r}")
        result: dict[str, Any] = response.json()
        return result

    async def list_dir(self, path: str, depth: int = 1) -> list[dict[str, Any]]:
        """Stat entries below ``path``, down to ``depth`` levels."""
        url = f"/files/list?{query(path=path, depth=depth)}"
        response = await self._call("GET", url, f"listing {path!r}")
        entries: list[dict[str, Any]] = response.json()["entries"]
        return entries

    async def create_watch(self, path: str, recursive: bool) -> int:
        """Watch directory ``path`` (and, ``recursive``, all below it); the watch's id."""
        body = json_body({"path": path, "recursive": recursive})
        response = await self._call("POST", "/watches", f"watching {path!r}", **body)
        watch_id: int = response.json()["id"]
        return watch_id

    async def watch_events(self, watch_id: int, wait: float = 0.0) -> dict[str, Any]:
        """``{"events": [...], "dropped": n, "closed": bool}`` of a watch since the last call,
        waiting up to ``wait`` seconds (at most 60) for the first event."""
        wait = min(max(wait, 0.0), 60.0)
        url = f"/watches/{int(watch_id)}/events?{query(wait_ms=int(wait * 1000))}"
        timeout = httpx.Timeout(wait + 30.0, connect=5.0)
        response = await self._call("GET", url, f"reading watch {watch_id}", timeout=timeout)
        result: dict[str, Any] = response.json()
        return result

    async def remove_watch(self, watch_id: int) -> None:
        await self._call("DELETE", f"/watches/{int(watch_id)}", f"removing watch {watch_id}")

    async def mkdir(self, path: str, parents: bool = True) -> bool:
        """Create a directory; False if it already existed."""
        body = json_body({"path": path, "parents": parents})
        response = await self._call("POST", "/files/mkdir", f"creating {path!r}", **body)
        created: bool = response.json()["created"]
        return created

    async def move(self, src: str, dst: str) -> dict[str, Any]:
        """Rename ``src`` to ``dst``; return the stat of ``dst``."""
        body = json_body({"src": src, "dst": dst})
        response = await self._call("POST", "/files/move", f"moving {src!r} to {dst!r}", **body)
        result: dict[str, Any] = response.json()
        return result

    async def remove(self, path: str, recursive: bool = False) -> None:
        url = f"/files?{query(path=path, recursive=recursive)}"
        await self._call("DELETE", url, f"removing {path!r}")
