"""`corral mcp` as an agent host runs it: an MCP server on stdio, driven by the official MCP
client, running code in real sandboxes of the daemon and killing them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from .conftest import CORRAL, Daemon

pytestmark = pytest.mark.e2e


def payload(result: Any) -> dict[str, Any]:
    if getattr(result, "structured_content", None):
        return dict(result.structured_content)
    if getattr(result, "structuredContent", None):
        return dict(result.structuredContent)
    return dict(json.loads(result.content[0].text))


async def test_mcp_run_code_and_kill_sandbox(daemon: Daemon) -> None:
    params = StdioServerParameters(command=CORRAL, args=["mcp"], env=daemon.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert {"run_code", "kill_sandbox"} <= tools

        ran = payload(await session.call_tool("run_code", {"code": "print(6 * 7)"}))
        assert ran["exit_code"] == 0 and ran["stdout"].strip() == "42"
        sandbox_id = ran["sandbox_id"]
        bash = payload(
            await session.call_tool("run_code", {"code": "echo $((1+2))", "language": "bash"})
        )
        assert bash["stdout"].strip() == "3" and bash["sandbox_id"] == sandbox_id

        with daemon.client() as client:
            assert client.get(f"/v1/sandboxes/{sandbox_id}").json()["state"] == "running"
        await session.call_tool("kill_sandbox", {"sandbox_id": sandbox_id})
        with daemon.client() as client:
            assert client.get(f"/v1/sandboxes/{sandbox_id}").json()["state"] == "killed"
