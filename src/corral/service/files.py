"""Files in sandboxes: streamed read and write, stat, list, mkdir, move, remove.

Data is streamed chunk by chunk between the caller and the sandbox's agent; the daemon never holds a
whole file. Paths are the sandbox's own: the sandbox is the boundary, so ``..`` cannot leave it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from corral.runtime.agent_client import AgentClient, AgentError
from corral.service.errors import CorralError, InvalidRequest, TooLarge
from corral.service.lifecycle.wake import WakeService
from corral.service.sandboxes import SandboxService
from corral.service.sandboxes.activity import Activity
from corral.service.sandboxes.agents import translate_agent_error


def check_path(path: str) -> str:
    if not path:
        raise InvalidRequest("path must not be empty")
    if "\0" in path:
        raise InvalidRequest("path must not contain NUL bytes")
    return path


MIB = 1024 * 1024
T = TypeVar("T")


async def _bounded(data: AsyncIterable[bytes], limit: int, sandbox_id: str) -> AsyncIterator[bytes]:
    seen = 0
    async for chunk in data:
        seen += len(chunk)
        if seen > limit:
            raise TooLarge(
                f"a file write to sandbox {sandbox_id} passed the size of its disk "
                f"({limit // MIB} MiB); nothing was written"
            )
        yield chunk


class FileService:
    """Files of running sandboxes, through their agents; a parked sandbox that asked for
    ``auto_wake`` is woken first, and every call counts as activity for idle auto-park."""

    def __init__(self, sandboxes: SandboxService, wakes: WakeService, activity: Activity) -> None:
        self._sandboxes = sandboxes
        self._wakes = wakes
        self._activity = activity

    async def _error(self, sandbox_id: str, exc: AgentError) -> CorralError:
        if getattr(exc, "status", None) is None:
            return await self._sandboxes.diagnose(sandbox_id, exc)
        return translate_agent_error(sandbox_id, exc)

    async def read(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        client = await self._wakes.ready_agent(sandbox_id, "read files of")
        stream = client.read_file(check_path(path))
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            first = b""
        except AgentError as exc:
            await stream.aclose()
            raise await self._error(sandbox_id, exc) from exc

        async def chunks() -> AsyncIterator[bytes]:
            with self._activity.busy(sandbox_id):
                if first:
                    yield first
                try:
                    async for chunk in stream:
                        yield chunk
                finally:
                    await stream.aclose()

        return chunks()

    async def write(
        self,
        sandbox_id: str,
        path: str,
        data: AsyncIterable[bytes],
        mode: int | None,
        parents: bool,
        size: int | None = None,
    ) -> dict[str, Any]:
        """Stream ``data`` into ``path``. Bounded by the sandbox's disk: a declared ``size``
        over its free disk is refused before anything is sent, and a stream is cut off (and the
        write abandoned, the file untouched) once it passes the disk's size."""
        client = await self._wakes.ready_agent(sandbox_id, "write files of")
        disk = self._sandboxes.get(sandbox_id).disk_mib * MIB
        if size is not None:
            used = await self._sandboxes.runtime.disk_usage_mib(sandbox_id) * MIB
            if size > disk - used:
                raise TooLarge(
                    f"writing {size} bytes to {path!r} in sandbox {sandbox_id}: only "
                    f"{max(0, disk - used) // MIB} MiB of its {disk // MIB} MiB disk are free; "
                    "free some space or create the sandbox with a larger disk"
                )
        try:
            with self._activity.busy(sandbox_id):
                return await client.write_file(
                    check_path(path), _bounded(data, disk, sandbox_id), mode=mode, parents=parents
                )
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc

    async def _on_agent(
        self,
        sandbox_id: str,
        action: str,
        call: Callable[[AgentClient], Awaitable[T]],
        *paths: str,
    ) -> T:
        """One non-streaming call on the sandbox's agent (woken first if it asked for
        ``auto_wake``; then ``paths`` are checked), counted as activity, its errors translated."""
        client = await self._wakes.ready_agent(sandbox_id, action)
        for path in paths:
            check_path(path)
        self._activity.touch(sandbox_id)
        try:
            return await call(client)
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc

    async def stat(self, sandbox_id: str, path: str) -> dict[str, Any]:
        return await self._on_agent(sandbox_id, "stat files of", lambda a: a.stat(path), path)

    async def list_dir(self, sandbox_id: str, path: str, depth: int = 1) -> list[dict[str, Any]]:
        return await self._on_agent(
            sandbox_id, "list files of", lambda a: a.list_dir(path, depth), path
        )

    async def mkdir(self, sandbox_id: str, path: str, parents: bool = True) -> bool:
        """Create a directory; False if it already existed."""
        return await self._on_agent(
            sandbox_id, "make directories in", lambda a: a.mkdir(path, parents), path
        )

    async def move(self, sandbox_id: str, src: str, dst: str) -> dict[str, Any]:
        """Rename ``src`` to ``dst``; the stat of ``dst``."""
        return await self._on_agent(
            sandbox_id, "move files in", lambda a: a.move(src, dst), src, dst
        )

    async def remove(self, sandbox_id: str, path: str, recursive: bool = False) -> None:
        await self._on_agent(
            sandbox_id, "remove files in", lambda a: a.remove(path, recursive), path
        )

    async def create_watch(self, sandbox_id: str, path: str, recursive: bool) -> int:
        """Watch directory ``path`` (and, ``recursive``, all below it); the watch's id."""
        return await self._on_agent(
            sandbox_id, "watch directories in", lambda a: a.create_watch(path, recursive), path
        )

    async def watch_events(
        self,
        sandbox_id: str,
        watch_id: int,
        wait: float = 0.0,
        *,
        action: str = "read the watcher of",
    ) -> dict[str, Any]:
        """The events of a watch since the last call, waiting up to ``wait`` s for the first
        (``action`` names the call in a refusal)."""
        return await self._on_agent(sandbox_id, action, lambda a: a.watch_events(watch_id, wait))

    async def remove_watch(self, sandbox_id: str, watch_id: int) -> None:
        await self._on_agent(sandbox_id, "stop watching in", lambda a: a.remove_watch(watch_id))
