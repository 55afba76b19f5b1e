"""corral's MCP tools as an agent host uses them: the official MCP client, over stdio (`corral
mcp`) and over the daemon's streamable HTTP `/mcp`, every tool against real sandboxes."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.mcp_text import first_text

from .conftest import CORRAL, Daemon

pytestmark = pytest.mark.e2e

EVERY_TOOL = {
    "run_code",
    "run_command",
    "command_output",
    "create_sandbox",
    "list_sandboxes",
    "kill_sandbox",
    "read_file",
    "read_file_base64",
    "write_file",
    "list_files",
    "park_sandbox",
    "wake_sandbox",
    "fork_sandbox",
    "snapshot_sandbox",
    "update_network",
    "open_port",
}


def payload(result: Any) -> dict[str, Any]:
    assert not getattr(result, "is_error", getattr(result, "isError", False)), result.content
    structured = getattr(result, "structured_content", None) or getattr(
        result, "structuredContent", None
    )
    if structured:
        return dict(structured)
    return dict(json.loads(result.content[0].text))


def failed(result: Any) -> str:
    assert getattr(result, "is_error", getattr(result, "isError", False)), result.content
    return str(result.content[0].text)


@asynccontextmanager
async def over_stdio(daemon: Daemon) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=CORRAL, args=["mcp"], env=daemon.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@asynccontextmanager
async def over_http(daemon: Daemon, key: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        streamable_http_client(f"{daemon.url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def state_of(daemon: Daemon, sandbox_id: str) -> str:
    with daemon.client() as client:
        return str(client.get(f"/v1/sandboxes/{sandbox_id}").json()["state"])


async def every_tool(session: ClientSession, daemon: Daemon) -> list[str]:
    """Each tool once, as an agent would chain them; returns the sandboxes it made."""
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) >= EVERY_TOOL
    assert all(tool.description for tool in tools.values())
    call = session.call_tool

    ran = payload(await call("run_code", {"code": "print(6 * 7)"}))
    assert (ran["exit_code"], ran["stdout"].strip()) == (0, "42")
    default = ran["sandbox_id"]
    bash = payload(await call("run_code", {"code": "echo $((1+2))", "language": "bash"}))
    assert (bash["stdout"].strip(), bash["sandbox_id"]) == ("3", default)
    shell = payload(await call("run_command", {"command": "pwd; exit 4", "cwd": "/tmp"}))
    assert (shell["exit_code"], shell["stdout"]) == (4, "/tmp\n")
    started = payload(
        await call(
            "run_command", {"command": "echo early; sleep 0.5; echo late", "background": True}
        )
    )
    ended = payload(await call("command_output", {"pid": started["pid"], "wait_seconds": 30}))
    assert (ended["running"], ended["exit_code"], ended["stdout"]) == (False, 0, "early\nlate\n")

    written = payload(await call("write_file", {"path": "/work/notes.txt", "content": "héllo"}))
    assert written["size"] == len("héllo".encode())
    assert first_text(await call("read_file", {"path": "/work/notes.txt"})) == "héllo"
    raw = payload(await call("read_file_base64", {"path": "/work/notes.txt"}))
    assert base64.b64decode(raw["base64"]) == "héllo".encode()
    listed = payload(await call("list_files", {"path": "/work"}))
    assert [e["path"] for e in listed["entries"]] == ["/work/notes.txt"]
    assert "No such file" in failed(await call("read_file", {"path": "/work/missing"}))

    server = {"command": "cd /work && exec python3 -m http.server 8000", "background": True}
    payload(await call("run_command", server))
    opened = payload(await call("open_port", {"port": 8000}))
    assert opened["port"] == 8000 and opened["token"]
    deadline = time.monotonic() + 20
    while True:
        got = httpx.get(
            f"{opened['path_url']}notes.txt", headers={"X-Corral-Token": opened["token"]}
        )
        if got.status_code == 200 or time.monotonic() > deadline:
            break
    assert (got.status_code, got.text) == (200, "héllo")

    made = payload(await call("create_sandbox", {"memory_mib": 256, "network": "airgapped"}))
    other = made["id"]
    assert made["network"]["mode"] == "airgapped"
    changed = payload(
        await call("update_network", {"sandbox_id": other, "mode": "project", "deny": ["1.2.3.4"]})
    )
    assert changed["network"] == {"mode": "project", "allow": [], "deny": ["1.2.3.4"]}
    all_ids = {s["id"] for s in payload(await call("list_sandboxes", {}))["sandboxes"]}
    assert {default, other} <= all_ids

    forked = payload(await call("fork_sandbox", {"sandbox_id": default, "count": 1}))
    (fork,) = forked["forks"]
    read = await call("read_file", {"path": "/work/notes.txt", "sandbox_id": fork})
    assert first_text(read) == "héllo"
    snap = payload(await call("snapshot_sandbox", {"name": f"mcp-{fork}", "sandbox_id": fork}))
    assert snap["name"] == f"mcp-{fork}"

    assert payload(await call("park_sandbox", {"sandbox_id": other}))["state"] == "parked"
    assert payload(await call("wake_sandbox", {"sandbox_id": other}))["state"] == "running"
    assert payload(await call("kill_sandbox", {"sandbox_id": other}))["killed"] is True
    assert state_of(daemon, other) == "killed"
    assert "killed" in failed(await call("run_command", {"command": "true", "sandbox_id": other}))
    with daemon.client() as client:
        client.delete(f"/v1/snapshots/mcp-{fork}")
    return [default, fork]


async def test_every_tool_over_stdio_and_the_server_cleans_up(daemon: Daemon) -> None:
    async with over_stdio(daemon) as session:
        made = await every_tool(session, daemon)
        assert all(state_of(daemon, sandbox_id) == "running" for sandbox_id in made)
    # The stdio server killed what it made when its client went away.
    assert all(state_of(daemon, sandbox_id) == "killed" for sandbox_id in made)


async def test_every_tool_over_http_with_the_api_key(daemon: Daemon) -> None:
    async with over_http(daemon, daemon.key) as session:
        made = await every_tool(session, daemon)
    with daemon.client() as client:
        for sandbox_id in made:  # HTTP sessions leave their sandboxes to their TTL
            record = client.get(f"/v1/sandboxes/{sandbox_id}").json()
            assert record["state"] == "running" and record["expires_at"] is not None
            client.delete(f"/v1/sandboxes/{sandbox_id}")


async def test_http_refuses_a_missing_or_wrong_key(daemon: Daemon) -> None:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for headers in ({}, {"Authorization": "Bearer e2b_" + "0" * 40}):
        answer = httpx.post(f"{daemon.url}/mcp", json=hello, headers=headers)
        assert answer.status_code == 401
        assert "API key" in answer.json()["message"]
