"""The `corral mcp` server: MCP tools over the SDK's `AsyncSandbox`.

Tools: run_code, run_command, create_sandbox, kill_sandbox, list_sandboxes, read_file,
write_file. Calls without a `sandbox_id` share one default sandbox, made from the server's
template on first use. Every sandbox this server made is killed when it shuts down (stdin
closed, or interrupted); sandboxes it merely connected to are left alone.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ContentBlock, ImageContent, TextContent

from corral.sdk import AsyncClient, AsyncSandbox, Conflict, CorralError, ExecResult, NotFound
from corral.sdk.code import Execution

__all__ = ["SandboxPool", "create_server", "run_stdio"]

log = logging.getLogger(__name__)

_INTERPRETERS = {"python": ["python3", "-c"], "bash": ["bash", "-c"]}


class SandboxPool:
    """The sandboxes one MCP server session uses.

    Invariant: `created` holds exactly the sandboxes this pool made and has not killed; the
    default sandbox, once made, is one of them. A lock keeps concurrent first calls from
    making two default sandboxes.
    """

    def __init__(self, client: AsyncClient, template: str = "base") -> None:
        self.client = client
        self.template = template
        self.created: dict[str, AsyncSandbox] = {}
        self._default: AsyncSandbox | None = None
        self._lock = anyio.Lock()

    async def get(self, sandbox_id: str | None = None) -> AsyncSandbox:
        """The sandbox `sandbox_id`, or the default one (made on first use)."""
        if sandbox_id:
            return self.created.get(sandbox_id) or await self.client.connect(sandbox_id)
        async with self._lock:
            if self._default is None:
                self._default = await self.create()
            return self._default

    async def create(self, template: str | None = None, **resources: Any) -> AsyncSandbox:
        sandbox = await self.client.create_sandbox(template or self.template, **resources)
        self.created[sandbox.id] = sandbox
        return sandbox

    async def kill(self, sandbox_id: str) -> None:
        sandbox = self.created.pop(sandbox_id, None) or self.client.sandbox(sandbox_id)
        if self._default is not None and self._default.id == sandbox_id:
            self._default = None
        await sandbox.kill()

    async def close(self) -> None:
        """Kill every sandbox this pool made, then close the client. Never raises."""
        with anyio.CancelScope(shield=True):
            for sandbox_id in list(self.created):
                try:
                    await self.kill(sandbox_id)
                except CorralError as exc:
                    log.warning("could not kill sandbox %s: %s", sandbox_id, exc)
            await self.client.aclose()


def _exec_answer(sandbox: AsyncSandbox, result: ExecResult) -> dict[str, Any]:
    return {
        "sandbox_id": sandbox.id,
        "exit_code": result.exit_code,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "timed_out": result.timed_out,
    }


def _execution_answer(sandbox: AsyncSandbox, execution: Execution) -> CallToolResult:
    """An interpreter's execution for the model: a JSON summary plus each plot as an image."""
    error = execution.error
    answer: dict[str, Any] = {
        "sandbox_id": sandbox.id,
        "stdout": "".join(execution.logs.stdout),
        "stderr": "".join(execution.logs.stderr),
        "results": [r.text for r in execution.results if r.text is not None],
        "error": None
        if error is None
        else {"name": error.name, "value": error.value, "traceback": error.traceback},
        "execution_count": execution.execution_count,
    }
    content: list[ContentBlock] = [TextContent(type="text", text=json.dumps(answer))]
    for result in execution.results:
        for data, mime in ((result.png, "image/png"), (result.jpeg, "image/jpeg")):
            if data:
                content.append(ImageContent(type="image", data=data, mime_type=mime))
    return CallToolResult(content=content, structured_content=answer)


def create_server(pool: SandboxPool) -> MCPServer[SandboxPool]:
    """An MCP server whose tools act through `pool`; its lifespan closes the pool."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[SandboxPool]) -> AsyncIterator[SandboxPool]:
        try:
            yield pool
        finally:
            await pool.close()

    server: MCPServer[SandboxPool] = MCPServer(
        "corral",
        instructions=(
            "Run code and commands in isolated corral sandboxes. Calls without sandbox_id share "
            f"one sandbox made from the '{pool.template}' template on first use; state (files, "
            "installed packages) persists between calls in the same sandbox."
        ),
        lifespan=lifespan,
        log_level="WARNING",  # INFO would log every HTTP request of the SDK to stderr
    )

    @server.tool()
    async def run_code(
        code: str,
        language: Literal["python", "bash"] = "python",
        sandbox_id: str | None = None,
        timeout: float | None = None,
    ) -> CallToolResult:
        """Run Python or Bash code in a sandbox. In a sandbox with a code interpreter (a
        template built --with code-interpreter) state persists between calls, the last
        expression's value comes back in results and plots come back as images; otherwise the
        code runs as a fresh process. Returns stdout, stderr, and the error or exit code.
        Without sandbox_id it uses the session's default sandbox."""
        async with _tool_errors():
            sandbox = await pool.get(sandbox_id)
            try:
                execution = await sandbox.run_code(code, language=language, timeout=timeout)
            except (Conflict, NotFound):  # no interpreter in this sandbox's template
                result = await sandbox.exec([*_INTERPRETERS[language], code], timeout=timeout)
                answer = _exec_answer(sandbox, result)
                return CallToolResult(
                    content=[TextContent(type="text", text=json.dumps(answer))],
                    structured_content=answer,
                )
            return _execution_answer(sandbox, execution)

    @server.tool()
    async def run_command(
        command: str,
        sandbox_id: str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Run a shell command line in a sandbox; returns stdout, stderr and the exit code."""
        async with _tool_errors():
            sandbox = await pool.get(sandbox_id)
            result = await sandbox.exec(command, cwd=cwd, timeout=timeout)
            return _exec_answer(sandbox, result)

    @server.tool()
    async def create_sandbox(
        template: str | None = None,
        cpu: float | None = None,
        memory_mib: int | None = None,
        ttl_seconds: int | None = None,
        network: str | None = None,
    ) -> dict[str, Any]:
        """Create a new sandbox (killed when this server stops); returns its id and details.
        `network`: project_internet (default), internet, project or airgapped."""
        async with _tool_errors():
            sandbox = await pool.create(
                template,
                cpu=cpu,
                memory_mib=memory_mib,
                ttl_seconds=ttl_seconds,
                network=network,
            )
            return sandbox.last_info.to_dict()

    @server.tool()
    async def kill_sandbox(sandbox_id: str) -> dict[str, Any]:
        """Kill a sandbox."""
        async with _tool_errors():
            await pool.kill(sandbox_id)
            return {"sandbox_id": sandbox_id, "killed": True}

    @server.tool()
    async def list_sandboxes() -> dict[str, Any]:
        """List the workspace's sandboxes."""
        async with _tool_errors():
            found = await pool.client.list_sandboxes()
            return {"sandboxes": [sandbox.to_dict() for sandbox in found]}

    @server.tool()
    async def read_file(path: str, sandbox_id: str | None = None) -> str:
        """Read a text file from a sandbox."""
        async with _tool_errors():
            sandbox = await pool.get(sandbox_id)
            return await sandbox.files.read_text(path)

    @server.tool()
    async def write_file(path: str, content: str, sandbox_id: str | None = None) -> dict[str, Any]:
        """Write a text file in a sandbox (parent directories are created)."""
        async with _tool_errors():
            sandbox = await pool.get(sandbox_id)
            written = await sandbox.files.write(path, content)
            return {"sandbox_id": sandbox.id, "path": written.path, "size": written.size}

    return server


@asynccontextmanager
async def _tool_errors() -> AsyncIterator[None]:
    """SDK errors become tool errors the model can read (not crashes with tracebacks)."""
    try:
        yield
    except CorralError as exc:
        raise ToolError(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise ToolError(f"the file is not UTF-8 text ({exc.reason})") from exc


def run_stdio(template: str = "base", url: str | None = None, api_key: str | None = None) -> None:
    """Serve MCP on stdin/stdout until the client goes away."""
    pool = SandboxPool(AsyncClient(url, api_key), template)
    create_server(pool).run("stdio")
