"""`corral mcp`: an MCP server on stdio whose tools (``tools``) act through the SDK.

Calls without a `sandbox_id` share one default sandbox, made from the server's template on first
use. Every sandbox this server made is killed when it shuts down (stdin closed, or
interrupted); sandboxes it merely connected to are left alone. The daemon serves the same tools
over streamable HTTP at ``/mcp`` (``http``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from corral.mcp.pool import SandboxPool
from corral.mcp.tools import register_tools
from corral.sdk import AsyncClient

__all__ = ["SandboxPool", "create_server", "instructions", "run_stdio"]


def instructions(template: str) -> str:
    return (
        "Run code and commands in isolated corral sandboxes. Calls without sandbox_id share "
        f"one sandbox made from the '{template}' template on first use; state (files, "
        "installed packages, running processes) persists between calls in the same sandbox. "
        "fork_sandbox copies a sandbox to try alternatives; park_sandbox and wake_sandbox "
        "pause and resume one."
    )


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
        instructions=instructions(pool.template),
        lifespan=lifespan,
        log_level="WARNING",  # INFO would log every HTTP request of the SDK to stderr
    )

    async def the_pool(_: Context) -> SandboxPool:
        return pool

    register_tools(server, the_pool)
    return server


def run_stdio(template: str = "base", url: str | None = None, api_key: str | None = None) -> None:
    """Serve MCP on stdin/stdout until the client goes away."""
    pool = SandboxPool(AsyncClient(url, api_key), template)
    server: MCPServer[Any] = create_server(pool)
    server.run("stdio")
