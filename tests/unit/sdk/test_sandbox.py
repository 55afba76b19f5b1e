"""Sandbox lifecycle through the sync and async SDKs: create, connect, list, kill, park/wake,
fork, snapshot, context managers, workspace calls."""

from __future__ import annotations

import json

import pytest

from corral.sdk import AsyncClient, AsyncSandbox, Client, Conflict, NotFound, Sandbox
from corral.sdk.testing import FakeDaemon


@pytest.fixture
def fake() -> FakeDaemon:
    return FakeDaemon()


def test_create_sends_only_what_was_given(fake: FakeDaemon) -> None:
    sbx = Sandbox.create(
        cpu=2,
        memory_mib=1024,
        env={"A": "1"},
        metadata={"owner": "me"},
        ttl_seconds=60,
        api_key=fake.api_key,
        transport=fake.transport,
    )
    body = json.loads(fake.requests[-1].content)
    assert body == {
        "template": "base",
        "cpu": 2,
        "memory_mib": 1024,
        "env": {"A": "1"},
        "metadata": {"owner": "me"},
        "ttl_seconds": 60,
    }
    assert sbx.info().metadata == {"owner": "me"}
    sbx.kill()
    sbx.close()


def test_context_manager_kills_on_exit_even_after_an_error(fake: FakeDaemon) -> None:
    with (
        pytest.raises(RuntimeError),
        Sandbox.create(api_key=fake.api_key, transport=fake.transport) as sbx,
    ):
        raise RuntimeError("user code failed")
    assert fake.sandboxes[sbx.id]["state"] == "killed"


def test_connect_list_and_missing_sandbox(fake: FakeDaemon) -> None:
    made = fake.add_sandbox(metadata={"team": "a"})
    fake.add_sandbox(metadata={"team": "b"})
    sbx = Sandbox.connect(made["id"], api_key=fake.api_key, transport=fake.transport)
    assert sbx.id == made["id"]
    found = Sandbox.list(metadata={"team": "a"}, api_key=fake.api_key, transport=fake.transport)
    assert [info.id for info in found] == [made["id"]]
    with pytest.raises(NotFound):
        Sandbox.connect("sbx-none", api_key=fake.api_key, transport=fake.transport)
    sbx.close()


def test_park_wake_fork_snapshot(fake: FakeDaemon) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        sbx = client.create_sandbox()
        assert sbx.park().state == "parked"
        with pytest.raises(Conflict, match="cannot park"):
            sbx.park()
        assert sbx.wake().state == "running"
        children = sbx.fork(2)
        assert len(children) == 2
        assert json.loads(fake.requests[-1].content) == {"count": 2}
        assert all(child.last_info.state == "running" for child in children)
        assert sbx.snapshot("before-upgrade").name == "before-upgrade"


def test_workspace_calls(fake: FakeDaemon) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        capacity = client.capacity()
        assert capacity.cpu_overcommit == 8
        assert capacity.memory.free == 7680
        assert [t.name for t in client.templates()] == ["base"]
        assert client.health()


def test_kill_of_a_gone_sandbox_is_not_an_error(fake: FakeDaemon) -> None:
    with Client(api_key=fake.api_key, transport=fake.transport) as client:
        client.sandbox("sbx-never-existed").kill()


async def test_async_with_await_create_and_async_with_create(fake: FakeDaemon) -> None:
    async with await AsyncSandbox.create(api_key=fake.api_key, transport=fake.transport) as sbx:
        assert (await sbx.info()).state == "running"
    assert fake.sandboxes[sbx.id]["state"] == "killed"
    async with AsyncSandbox.create(api_key=fake.api_key, transport=fake.transport) as other:
        await other.files.write("/x", b"1")
        assert await other.files.read("/x") == b"1"
    assert fake.sandboxes[other.id]["state"] == "killed"


async def test_async_client_shares_one_connection_pool(fake: FakeDaemon) -> None:
    async with AsyncClient(api_key=fake.api_key, transport=fake.transport) as client:
        first = await client.create_sandbox()
        second = await client.connect(first.id)
        assert first.client is second.client
        assert [s.id for s in await client.list_sandboxes(state="running")] == [first.id]


def test_sync_sdk_refuses_to_be_called_from_its_own_callback(fake: FakeDaemon) -> None:
    with Sandbox.create(api_key=fake.api_key, transport=fake.transport) as sbx:

        def reenter(_: str) -> None:
            sbx.info()

        with pytest.raises(RuntimeError, match="callbacks"):
            sbx.exec("echo hi", on_stdout=reenter)
