"""Park, wake, fork, snapshots, export and import through the SDK, against the fake daemon:
request shapes, result types, and files streamed both ways."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corral.sdk import (
    AsyncClient,
    AsyncSandbox,
    Client,
    Conflict,
    ImportResult,
    NotFound,
    Sandbox,
    SnapshotInfo,
)
from corral.sdk.testing import FakeDaemon


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


def test_create_sends_lifecycle_options_and_secret_values_are_not_kept(fake: FakeDaemon) -> None:
    sbx = Sandbox.create(
        api_key=fake.api_key,
        transport=fake.transport,
        secret_env={"TOKEN": "hunter2"},
        on_timeout="park",
        ttl_seconds=60,
        auto_park_idle=30,
        auto_wake=True,
    )
    body = json.loads(fake.requests[-1].content)
    assert body["secret_env"] == {"TOKEN": "hunter2"}
    assert (body["on_timeout"], body["auto_park_idle"], body["auto_wake"]) == ("park", 30, True)
    info = sbx.info()
    assert info.secret_env_keys == ["TOKEN"]
    assert (info.on_timeout, info.auto_park_idle, info.auto_wake) == ("park", 30, True)
    assert "hunter2" not in json.dumps(info.to_dict())
    with pytest.raises(Conflict) as refused:
        sbx.fork(1)
    assert refused.value.code == "secret_bearing"
    sbx.close()


def test_wake_of_a_running_sandbox_answers_it_running(fake: FakeDaemon) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        sbx = client.create_sandbox()
        assert sbx.wake().state == "running"
        assert sbx.park().state == "parked"
        assert sbx.last_info.state == "parked"


def test_fork_returns_sandboxes_with_their_own_ids(fake: FakeDaemon) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        sbx = client.create_sandbox()
        children = sbx.fork(3)
        assert all(isinstance(child, Sandbox) for child in children)
        assert len({child.id for child in children} | {sbx.id}) == 4
        assert all(child.last_info.parent_id == sbx.id for child in children)
        grandchild = children[0].fork()[0]
        assert grandchild.info().parent_id == children[0].id


def test_snapshot_take_list_restore_remove(fake: FakeDaemon) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        sbx = client.create_sandbox()
        sbx.files.write("/f", b"1")
        saved = sbx.snapshot("s1")
        assert isinstance(saved, SnapshotInfo)
        assert (saved.name, saved.kind, saved.source_id) == ("s1", "memory", sbx.id)
        assert json.loads(fake.requests[-1].content) == {"name": "s1"}
        files_only = sbx.snapshot("s2", fs_only=True, allow_secrets=True)
        assert files_only.kind == "fs"
        assert json.loads(fake.requests[-1].content) == {
            "name": "s2",
            "fs_only": True,
            "allow_secrets": True,
        }
        assert [s.name for s in client.snapshots()] == ["s1", "s2"]
        assert client.get_snapshot("s2").kind == "fs"
        restored = client.create_sandbox(snapshot="s1")
        assert restored.files.read("/f") == b"1"
        again = Sandbox.create(snapshot="s1", api_key=fake.api_key, transport=fake.transport)
        assert again.id != restored.id
        again.close()
        client.remove_snapshot("s1")
        assert [s.name for s in client.snapshots()] == ["s2"]
        with pytest.raises(NotFound):
            client.remove_snapshot("s1")


def test_export_and_import_stream_through_files(fake: FakeDaemon, tmp_path: Path) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        sbx = client.create_sandbox()
        sbx.files.write("/data", b"x" * 3_000_000)
        with pytest.raises(Conflict):
            sbx.export(tmp_path / "early.tar")
        assert list(tmp_path.iterdir()) == []  # the failed download left nothing
        sbx.park()
        size = sbx.export(tmp_path / "sbx.tar")
        assert size == (tmp_path / "sbx.tar").stat().st_size > 3_000_000
        result = client.import_file(tmp_path / "sbx.tar")
        assert isinstance(result, ImportResult)
        assert result.kind == "sandbox" and result.sandbox is not None
        assert result.sandbox.state == "parked"
        upload = fake.requests[-1]
        assert upload.headers["content-length"] == str(size)  # streamed with a known length

        sbx.wake()
        sbx.snapshot("snap")
        with open(tmp_path / "snap.tar", "wb") as out:  # a file object works too
            client.export_snapshot("snap", out)
        client.remove_snapshot("snap")
        with open(tmp_path / "snap.tar", "rb") as source:
            back = client.import_file(source)
        assert back.kind == "snapshot" and back.snapshot is not None
        assert back.snapshot.name == "snap"


async def test_async_core_has_the_same_calls(fake: FakeDaemon, tmp_path: Path) -> None:
    async with AsyncClient(api_key=fake.api_key, transport=fake.transport) as client:
        sbx: AsyncSandbox = await client.create_sandbox(auto_wake=True)
        children = await sbx.fork(2)
        assert all(isinstance(child, AsyncSandbox) for child in children)
        await sbx.snapshot("a")
        assert [s.name for s in await client.snapshots()] == ["a"]
        await sbx.park()
        assert await sbx.export(tmp_path / "p.tar") > 0
        assert (await client.import_file(tmp_path / "p.tar")).kind == "sandbox"
        await client.remove_snapshot("a")
