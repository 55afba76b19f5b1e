"""The tools of corral's MCP server, each a thin call of the SDK.

Every tool takes an optional `sandbox_id`; without it, tools that act in a sandbox use the
session's default sandbox (made from the server's template on first use). Errors of the SDK
come back as tool errors with the daemon's message, which says what failed and what to do.
The tools find their session's `SandboxPool` through `pool_of(ctx)`: one pool for a stdio
server, one per API key and MCP session over HTTP.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, ContentBlock, ImageContent, TextContent

from corral.mcp.pool import SandboxPool
from corral.sdk import AsyncSandbox, Conflict, CorralError, ExecResult, NotFound
from corral.sdk.code import Execution

__all__ = ["PoolOf", "register_tools"]

PoolOf = Callable[[Context], Awaitable[SandboxPool]]
INTERPRETERS = {"python": ["python3", "-c"], "bash": ["bash", "-c"]}
MAX_OUTPUT_CHARS = 200_000  # what one tool answer carries of a command's output
MAX_WAIT_SECONDS = 600


def clipped(text: str) -> str:
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    dropped = len(text) - MAX_OUTPUT_CHARS
    return f"[... {dropped} earlier characters dropped ...]\n" + text[-MAX_OUTPUT_CHARS:]


def exec_answer(sandbox: AsyncSandbox, result: ExecResult) -> dict[str, Any]:
    return {
        "sandbox_id": sandbox.id,
        "exit_code": result.exit_code,
        "stdout": clipped(result.stdout),
        "stderr": clipped(result.stderr),
        "timed_out": result.timed_out,
    }


def execution_answer(sandbox: AsyncSandbox, execution: Execution) -> CallToolResult:
    """An interpreter's execution for the model: a JSON summary plus each plot as an image."""
    error = execution.error
    answer: dict[str, Any] = {
        "sandbox_id": sandbox.id,
        "stdout": clipped("".join(execution.logs.stdout)),
        "stderr": clipped("".join(execution.logs.stderr)),
        "results": [clipped(r.text) for r in execution.results if r.text is not None],
        "error": None
        if error is None
        else {"name": error.name, "value": error.value, "traceback": clipped(error.traceback)},
        "execution_count": execution.execution_count,
    }
    content: list[ContentBlock] = [TextContent(type="text", text=json.dumps(answer))]
    for result in execution.results:
        for data, mime in ((result.png, "image/png"), (result.jpeg, "image/jpeg")):
            if data:
                content.append(ImageContent(type="image", data=data, mime_type=mime))
    return CallToolResult(content=content, structured_content=answer)


@asynccontextmanager
async def tool_errors() -> AsyncIterator[None]:
    """SDK errors become tool errors the model can read (not crashes with tracebacks)."""
    try:
        yield
    except CorralError as exc:
        raise ToolError(str(exc)) from exc
    except UnicodeDecodeError as exc:
        raise ToolError(f"the file is not UTF-8 text ({exc.reason})") from exc


async def output_so_far(sandbox: AsyncSandbox, pid: int, wait: float) -> dict[str, Any]:
    """A background command's output until now (or its end, if within `wait` seconds)."""
    process = sandbox.process(pid)
    if wait > 0:
        with anyio.move_on_after(min(wait, MAX_WAIT_SECONDS)):
            result = await process.wait()
            return {"pid": pid, "running": False, **exec_answer(sandbox, result)}
    out, err = bytearray(), bytearray()
    events = process.events(follow=False)
    try:
        async for event in events:
            if event.type == "stdout":
                out.extend(event.data)
            elif event.type == "stderr":
                err.extend(event.data)
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    info = await process.info()
    return {
        "sandbox_id": sandbox.id,
        "pid": pid,
        "running": info.running,
        "exit_code": info.exit_code,
        "stdout": clipped(out.decode(errors="replace")),
        "stderr": clipped(err.decode(errors="replace")),
    }


def register_tools(server: MCPServer[Any], pool_of: PoolOf) -> None:
    """Add every corral tool to `server`."""

    @server.tool()
    async def run_code(
        code: str,
        ctx: Context,
        language: Literal["python", "bash"] = "python",
        sandbox_id: str | None = None,
        timeout: float | None = None,
    ) -> CallToolResult:
        """Run Python or Bash code in a sandbox. In a sandbox with a code interpreter (a
        template built --with code-interpreter) state persists between calls, the last
        expression's value comes back in results and plots come back as images; otherwise the
        code runs as a fresh process. Returns stdout, stderr, and the error or exit code.
        Without sandbox_id it uses the session's default sandbox."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            try:
                execution = await sandbox.run_code(code, language=language, timeout=timeout)
            except (Conflict, NotFound):  # no interpreter in this sandbox's template
                result = await sandbox.exec([*INTERPRETERS[language], code], timeout=timeout)
                answer = exec_answer(sandbox, result)
                return CallToolResult(
                    content=[TextContent(type="text", text=json.dumps(answer))],
                    structured_content=answer,
                )
            return execution_answer(sandbox, execution)

    @server.tool()
    async def run_command(
        command: str,
        ctx: Context,
        sandbox_id: str | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        background: bool = False,
    ) -> dict[str, Any]:
        """Run a shell command line in a sandbox; returns stdout, stderr and the exit code.
        With background=true it returns at once with the command's pid: read its output
        with command_output."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            if background:
                process = await sandbox.exec_background(command, cwd=cwd, timeout=timeout)
                return {"sandbox_id": sandbox.id, "pid": process.pid, "running": True}
            result = await sandbox.exec(command, cwd=cwd, timeout=timeout)
            return exec_answer(sandbox, result)

    @server.tool()
    async def command_output(
        pid: int, ctx: Context, sandbox_id: str | None = None, wait_seconds: float = 0
    ) -> dict[str, Any]:
        """The output of a background command so far, whether it still runs, and its exit
        code once it ended. wait_seconds > 0 waits up to that long for it to end."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            return await output_so_far(sandbox, pid, wait_seconds)

    @server.tool()
    async def create_sandbox(
        ctx: Context,
        template: str | None = None,
        cpu: float | None = None,
        memory_mib: int | None = None,
        ttl_seconds: int | None = None,
        network: str | None = None,
        secrets: list[str] | None = None,
    ) -> dict[str, Any]:
        """Create a new sandbox; returns its id and details. `network`: project_internet
        (default), internet, project or airgapped. `secrets`: names of the workspace's brokered
        secrets; the sandbox's env var NAME holds a placeholder that works as the credential on
        requests to the secret's hosts (the value never enters the sandbox). A stdio server
        kills the sandboxes it made when it stops."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).create(
                template,
                cpu=cpu,
                memory_mib=memory_mib,
                ttl_seconds=ttl_seconds,
                network=network,
                secrets=secrets,
            )
            return sandbox.last_info.to_dict()

    @server.tool()
    async def kill_sandbox(sandbox_id: str, ctx: Context) -> dict[str, Any]:
        """Kill a sandbox (its files and processes are gone)."""
        async with tool_errors():
            await (await pool_of(ctx)).kill(sandbox_id)
            return {"sandbox_id": sandbox_id, "killed": True}

    @server.tool()
    async def list_sandboxes(ctx: Context) -> dict[str, Any]:
        """List the workspace's sandboxes with their state, template and resources."""
        async with tool_errors():
            found = await (await pool_of(ctx)).client.list_sandboxes()
            return {"sandboxes": [sandbox.to_dict() for sandbox in found]}

    @server.tool()
    async def read_file(path: str, ctx: Context, sandbox_id: str | None = None) -> str:
        """Read a text file from a sandbox."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            return await sandbox.files.read_text(path)

    @server.tool()
    async def write_file(
        path: str, content: str, ctx: Context, sandbox_id: str | None = None
    ) -> dict[str, Any]:
        """Write a text file in a sandbox (parent directories are created)."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            written = await sandbox.files.write(path, content)
            return {"sandbox_id": sandbox.id, "path": written.path, "size": written.size}

    @server.tool()
    async def list_files(
        path: str, ctx: Context, sandbox_id: str | None = None, depth: int = 1
    ) -> dict[str, Any]:
        """List a directory of a sandbox (depth 1: its entries; more: their contents too)."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            entries = await sandbox.files.list(path, depth=depth)
            return {
                "sandbox_id": sandbox.id,
                "entries": [
                    {"path": e.path, "type": e.type, "size": e.size, "mtime": e.mtime}
                    for e in entries
                ],
            }

    @server.tool()
    async def park_sandbox(sandbox_id: str, ctx: Context) -> dict[str, Any]:
        """Park a sandbox: its memory and files go to disk and it stops using CPU and RAM.
        wake_sandbox brings it back with its processes where they were."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            return (await sandbox.park()).to_dict()

    @server.tool()
    async def wake_sandbox(sandbox_id: str, ctx: Context) -> dict[str, Any]:
        """Wake a parked sandbox (same id, its processes continue)."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            return (await sandbox.wake()).to_dict()

    @server.tool()
    async def fork_sandbox(
        ctx: Context, sandbox_id: str | None = None, count: int = 1
    ) -> dict[str, Any]:
        """Copy a running sandbox `count` times, memory and processes included, so you can try
        different changes from the environment you have; the original runs on unchanged."""
        async with tool_errors():
            pool = await pool_of(ctx)
            sandbox = await pool.get(sandbox_id)
            forks = await sandbox.fork(count)
            for fork in forks:
                pool.adopt(fork)
            return {"sandbox_id": sandbox.id, "forks": [fork.id for fork in forks]}

    @server.tool()
    async def snapshot_sandbox(
        name: str, ctx: Context, sandbox_id: str | None = None, files_only: bool = False
    ) -> dict[str, Any]:
        """Save a sandbox's state (memory and files; files_only: files) under `name`;
        create_sandbox cannot restore it, `corral new --snapshot NAME` and the SDK can."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            return (await sandbox.snapshot(name, fs_only=files_only)).to_dict()

    @server.tool()
    async def update_network(
        ctx: Context,
        sandbox_id: str | None = None,
        mode: str | None = None,
        allow: list[str] | None = None,
        deny: list[str] | None = None,
    ) -> dict[str, Any]:
        """Change what a sandbox may reach, at once: `mode` (project_internet, internet,
        project, airgapped), `allow` and `deny` rules (CIDR[:PORT], host names, *.domain;
        deny wins). Parts left out stay as they are."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            change = await sandbox.network.update(mode, allow=allow, deny=deny)
            return {"sandbox_id": sandbox.id, **change.to_dict()}

    @server.tool()
    async def open_port(
        port: int, ctx: Context, sandbox_id: str | None = None, public: bool = False
    ) -> dict[str, Any]:
        """Open a sandbox's port (a server listening on 0.0.0.0:PORT in it) to clients outside:
        returns the `url` that reaches it and, unless `public`, the `token` to send as the
        X-Corral-Token header (or the corral_token query parameter)."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            opened = await sandbox.ports.open(port, public=public)
            return opened.to_dict()

    @server.tool()
    async def read_file_base64(
        path: str, ctx: Context, sandbox_id: str | None = None
    ) -> dict[str, Any]:
        """Read a binary file from a sandbox, base64-encoded (at most 8 MiB)."""
        async with tool_errors():
            sandbox = await (await pool_of(ctx)).get(sandbox_id)
            info = await sandbox.files.stat(path)
            if info.size > 8 << 20:
                raise ToolError(f"{path} has {info.size} bytes: more than 8 MiB, read it in parts")
            data = await sandbox.files.read(path)
            return {"path": path, "size": len(data), "base64": base64.b64encode(data).decode()}
