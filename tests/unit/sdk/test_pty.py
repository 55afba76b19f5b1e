"""`sbx.pty` against the real HTTP app on the unit harness (the agent runs on the host)."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest

from corral.api.app import create_app
from corral.sdk import AsyncClient, CorralError
from corral.sdk.pty import AsyncPty
from tests.unit.conftest import Harness


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[AsyncClient]:
    app = create_app(harness.workspace, manage_lifespan=False)
    key = harness.settings.admin_key_path.read_text().strip()
    async with AsyncClient(
        "http://corral", key, transport=httpx.ASGITransport(app=app)
    ) as sdk_client:
        yield sdk_client


async def output_to_exit(pty: AsyncPty) -> bytes:
    # The in-process transport delivers a response once the app has finished it, so the output
    # is read after the command's exit here; tests/e2e/test_pty.py reads it live.
    seen = bytearray()
    with anyio.fail_after(60):
        async for data in pty:
            seen += data
    return bytes(seen)


async def test_pty_create_send_resize_connect_and_kill(client: AsyncClient, tmp_path: Path) -> None:
    sbx = await client.create_sandbox()
    # The command says it has printed its first size and is about to read by writing to a fifo
    # (the agent runs on the host here); the test resizes and types only after that, so the
    # output's order does not depend on how fast the shell starts.
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    script = f"stty size; tty; echo > {ready}; read x; stty size; exit $x"
    pty = await sbx.pty.create(rows=40, cols=120, cmd=["sh", "-c", script])
    info = await pty.info()
    assert (info.pty, info.running) == (True, True)
    assert any(p.pid == pty.pid and p.pty for p in await sbx.processes())
    assert (await sbx.exec(f"cat {ready}", timeout=60)).exit_code == 0
    await pty.resize(10, 20)
    await pty.send("4\n")
    seen = await output_to_exit(pty)
    assert re.match(rb"40 120\r\n/dev/pts/\d+\r\n4\r\n10 20\r\n$", seen), seen
    assert pty.exit_code == 4
    with pytest.raises(CorralError):
        await pty.resize(24, 80)  # it has finished: 409

    again = sbx.pty.connect(pty.pid)  # a new client replays the buffered output
    assert await output_to_exit(again) == seen
    assert again.exit_code == 4

    shell = await sbx.pty.create(cmd=["sleep", "30"])
    await shell.kill()
    with anyio.fail_after(60):
        assert await shell.wait() == 128 + 9


async def test_pty_request_is_validated(client: AsyncClient) -> None:
    sbx = await client.create_sandbox()
    with pytest.raises(CorralError):
        await sbx.pty.create(rows=0, cols=80)
    with pytest.raises(CorralError):
        await sbx.pty.create(rows=24, cols=5000)
    proc = await sbx.exec_background("sleep 30")
    with pytest.raises(CorralError):
        await sbx.pty.connect(proc.pid).resize(24, 80)  # not a terminal: 409
    await proc.kill()
