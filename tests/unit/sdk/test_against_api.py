"""The SDK against the real HTTP app (in-process, on the unit harness): the contract check that
the fake daemon cannot give. The daemon's own behaviour is tested in tests/unit/api."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from corral.api.app import create_app
from corral.sdk import AsyncClient, AsyncSandbox, ExecFailed, NotFound
from tests.unit.conftest import Harness


@pytest.fixture
async def client(harness: Harness) -> AsyncIterator[AsyncClient]:
    app = create_app(harness.workspace, manage_lifespan=False)
    key = harness.settings.admin_key_path.read_text().strip()
    async with AsyncClient(
        "http://corral", key, transport=httpx.ASGITransport(app=app)
    ) as sdk_client:
        yield sdk_client


async def test_sandbox_exec_files_roundtrip(client: AsyncClient, tmp_path: Path) -> None:
    # The unit harness runs the agent on the host: keep its files inside the test's own dir.
    d = str(tmp_path / "d")
    capacity = await client.capacity()
    assert capacity.cpu.total > 0
    assert [t.name for t in await client.templates()]
    sbx: AsyncSandbox = await client.create_sandbox(metadata={"k": "v"}, env={"A": "1"})
    assert (await sbx.info()).state == "running"
    result = await sbx.exec("echo $A; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "1\n", "err\n")
    argv = await sbx.exec(["printf", "%s", "a b"])
    assert argv.stdout == "a b"
    with pytest.raises(ExecFailed):
        await sbx.exec(["/nonexistent-program"])
    piped = await sbx.exec(["cat"], stdin=b"through stdin")
    assert piped.stdout == "through stdin"

    await sbx.files.write(f"{d}/x.txt", "héllo")
    assert await sbx.files.read_text(f"{d}/x.txt") == "héllo"
    assert [e.name for e in await sbx.files.list(d)] == ["x.txt"]
    assert (await sbx.files.stat(f"{d}/x.txt")).size == 6
    await sbx.files.move(f"{d}/x.txt", f"{d}/y.txt")
    assert await sbx.files.exists(f"{d}/y.txt")
    await sbx.files.remove(f"{d}/y.txt")
    with pytest.raises(NotFound):
        await sbx.files.read(f"{d}/y.txt")

    process = await sbx.exec_background(["sh", "-c", "echo bg"])
    assert (await process.wait()).stdout == "bg\n"
    assert process.pid in [p.pid for p in await sbx.processes()]

    listed = await client.list_sandboxes(metadata={"k": "v"})
    assert [s.id for s in listed] == [sbx.id]
    await sbx.kill()
    assert (await sbx.info()).state == "killed"


async def test_project_services_are_added_listed_and_removed(client: AsyncClient) -> None:
    added = await client.services.add("db.project", "10.1.2.3:5432")
    assert (added.name, added.address, added.ports) == ("db.project", "10.1.2.3", [5432])
    await client.services.add("db.project", "10.1.2.4:5433")  # replaces it
    listed = await client.services.list()
    assert [(s.name, s.address, s.ports) for s in listed] == [("db.project", "10.1.2.4", [5433])]
    await client.services.remove("db.project")
    assert await client.services.list() == []
    with pytest.raises(NotFound):
        await client.services.remove("db.project")
