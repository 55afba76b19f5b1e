"""The MCP server's tools, driven in-process through the official MCP client, against the
fake daemon."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver.exceptions import ToolError

from corral.mcp.server import SandboxPool, create_server
from corral.sdk import AsyncClient
from corral.sdk.testing import FakeDaemon
from tests.mcp_text import first_text


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


def make_pool(fake: FakeDaemon, template: str = "base") -> SandboxPool:
    return SandboxPool(AsyncClient(api_key=fake.api_key, transport=fake.transport), template)


def structured(result: Any) -> Any:
    assert not result.is_error, result.content
    if result.structured_content is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def test_tool_list(fake: FakeDaemon) -> None:
    async with Client(create_server(make_pool(fake))) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
    assert {
        "run_code",
        "run_command",
        "create_sandbox",
        "kill_sandbox",
        "list_sandboxes",
        "read_file",
        "write_file",
    } <= tools


async def test_run_code_reuses_one_sandbox_and_shutdown_kills_it(fake: FakeDaemon) -> None:
    async with Client(create_server(make_pool(fake))) as client:
        first = structured(await client.call_tool("run_code", {"code": "print(1)"}))
        second = structured(
            await client.call_tool("run_code", {"code": "echo hi", "language": "bash"})
        )
        assert first["exit_code"] == 0
        assert first["stdout"] == "python3 ran: print(1)"
        assert second["stdout"] == "bash ran: echo hi"
        assert first["sandbox_id"] == second["sandbox_id"]
        assert fake.sandboxes[first["sandbox_id"]]["state"] == "running"
    assert fake.sandboxes[first["sandbox_id"]]["state"] == "killed"


async def test_files_commands_and_sandbox_management(fake: FakeDaemon) -> None:
    outside = fake.add_sandbox()["id"]
    async with Client(create_server(make_pool(fake))) as client:
        made = structured(await client.call_tool("create_sandbox", {"memory_mib": 256}))
        sandbox_id = made["id"]
        written = structured(
            await client.call_tool(
                "write_file", {"path": "/a.txt", "content": "hé", "sandbox_id": sandbox_id}
            )
        )
        assert written["size"] == 3
        read = await client.call_tool("read_file", {"path": "/a.txt", "sandbox_id": sandbox_id})
        assert first_text(read) == "hé"
        ran = structured(
            await client.call_tool("run_command", {"command": "exit 5", "sandbox_id": outside})
        )
        assert ran["exit_code"] == 5
        listed = structured(await client.call_tool("list_sandboxes", {}))
        assert {s["id"] for s in listed["sandboxes"]} >= {sandbox_id, outside}
        killed = structured(await client.call_tool("kill_sandbox", {"sandbox_id": sandbox_id}))
        assert killed == {"sandbox_id": sandbox_id, "killed": True}
        failed = await client.call_tool("read_file", {"path": "/nope"})
        assert failed.is_error
        assert "no file /nope" in first_text(failed)
    assert fake.sandboxes[outside]["state"] == "running"  # not ours: left alone


async def test_sdk_errors_become_tool_errors(fake: FakeDaemon) -> None:
    pool = make_pool(fake, template="missing")
    server = create_server(pool)
    with pytest.raises(ToolError, match="no template missing"):
        await server.call_tool("run_code", {"code": "1"})
    await pool.close()


def test_http_key_and_own_url() -> None:
    from corral.mcp.http import own_url, presented_key

    assert presented_key({"authorization": "Bearer k1"}) == "k1"
    assert presented_key({"authorization": "Basic abc", "x-api-key": "k2"}) == "k2"
    assert presented_key({}) is None
    assert own_url("0.0.0.0:7070") == "http://127.0.0.1:7070"
    assert own_url("10.0.0.5:80") == "http://10.0.0.5:80"
    assert own_url("[::]:7070") == "http://[::1]:7070"
