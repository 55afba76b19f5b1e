"""Backends for the SDK contract: the same user-facing assertions run against the SDK's fake
daemon (``corral.sdk.testing.FakeDaemon``, in memory) and against a real ``corral serve`` (real
runsc, e2e-marked), so the fake that users test their code with stays true to the daemon."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from corral import Client
from corral.sdk.testing import FakeDaemon
from tests.e2e.conftest import running_daemon


@dataclass
class Backend:
    """A connected client and a scratch dir inside its sandboxes."""

    name: str
    client: Client
    scratch: str


@pytest.fixture(scope="module")
def real_daemon_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    data_dir = tmp_path_factory.mktemp("contract") / "data"
    with (
        running_daemon(data_dir, "cc" + secrets.token_hex(2)) as daemon,
        Client(daemon.url, daemon.key) as client,
    ):
        yield client


@pytest.fixture(params=["fake", pytest.param("daemon", marks=pytest.mark.e2e)])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    scratch = f"/root/contract-{secrets.token_hex(3)}"
    if request.param == "fake":
        fake = FakeDaemon()
        with Client("http://fake", fake.api_key, transport=fake.transport) as client:
            yield Backend("fake", client, scratch)
        return
    client = request.getfixturevalue("real_daemon_client")
    yield Backend("daemon", client, scratch)
    for sandbox in client.list_sandboxes():
        client.sandbox(sandbox.id).kill()
