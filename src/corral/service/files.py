"""Files in sandboxes: streamed read and write, stat, list, mkdir, move, remove.

Data is streamed chunk by chunk between the caller and the sandbox's agent; the daemon never holds a
whole file. Paths are the sandbox's own: the sandbox is the boundary, so ``..`` cannot leave it.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from corral.runtime.agent_client import AgentError
from corral.service.errors import CorralError, InvalidRequest
from corral.service.sandboxes import SandboxService, translate_agent_error


def check_path(path: str) -> str:
    if not path:
        raise InvalidRequest("path must not be empty")
    if "\0" in path:
        raise InvalidRequest("path must not contain NUL bytes")
    return path


class FileService:
    def __init__(self, sandboxes: SandboxService) -> None:
        self._sandboxes = sandboxes

    async def _error(self, sandbox_id: str, exc: AgentError) -> CorralError:
        if getattr(exc, "status", None) is None:
            return await self._sandboxes.diagnose(sandbox_id, exc)
        return translate_agent_error(sandbox_id, exc)

    async def read(self, sandbox_id: str, path: str) -> AsyncIterator[bytes]:
        client = await self._sandboxes.ready_agent(sandbox_id, "read files of")
        stream = client.read_file(check_path(path))
        try:
            first = await anext(stream)
        except StopAsyncIteration:
            first = b""
        except AgentError as exc:
            await stream.aclose()
            raise await self._error(sandbox_id, exc) from exc

        async def chunks() -> AsyncIterator[bytes]:
            with self._sandboxes.busy(sandbox_id):
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
    ) -> dict[str, Any]:
        client = await self._sandboxes.ready_agent(sandbox_id, "write files of")
        try:
            with self._sandboxes.busy(sandbox_id):
                return await client.write_file(check_path(path), data, mode=mode, parents=parents)
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc

    async def call(self, sandbox_id: str, action: str, method: str, *args: Any) -> Any:
        client = await self._sandboxes.ready_agent(sandbox_id, action)
        for arg in args:
            if isinstance(arg, str):
                check_path(arg)
        self._sandboxes.touch(sandbox_id)
        try:
            return await getattr(client, method)(*args)
        except AgentError as exc:
            raise await self._error(sandbox_id, exc) from exc
