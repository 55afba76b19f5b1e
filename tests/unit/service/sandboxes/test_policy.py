"""Sandboxes' egress policies in the service: stored, applied at boot, replaced live, refused
when the workspace does not allow a mode; on the fake egress mechanism."""

from __future__ import annotations

import pytest

from corral.network.policy import NetworkMode
from corral.network.sandbox_net import FakeEgress
from corral.service.errors import InvalidRequest
from corral.service.model import CreateRequest
from tests.unit.conftest import Harness


def fake(harness: Harness) -> FakeEgress:
    egress = harness.workspace.sandboxes.policies.egress
    assert isinstance(egress, FakeEgress)
    return egress


async def test_default_mode_is_stored_and_applied_at_boot(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(CreateRequest())
    assert ws.sandboxes.policy_of(record).mode is NetworkMode.PROJECT_INTERNET
    assert fake(harness).policies[record.id].mode is NetworkMode.PROJECT_INTERNET
    await ws.sandboxes.kill(record.id)
    assert record.id not in fake(harness).policies  # stopped with the sandbox


async def test_live_change_replaces_only_the_parts_given(harness: Harness) -> None:
    ws = harness.workspace
    record = await ws.creator.create(
        CreateRequest(network="internet", allow=["10.1.0.0/16:5432"], deny=["192.0.2.7"])
    )
    updated, _ = await ws.sandboxes.set_network(record.id, mode="airgapped")
    policy = ws.sandboxes.policy_of(updated)
    assert policy.to_json() == {
        "mode": "airgapped",
        "allow": ["10.1.0.0/16:5432"],
        "deny": ["192.0.2.7"],
    }
    assert fake(harness).policies[record.id] == policy
    updated, _ = await ws.sandboxes.set_network(record.id, allow=[])
    assert ws.sandboxes.policy_of(updated).to_json()["allow"] == []
    await ws.sandboxes.kill(record.id)


async def test_bad_rules_and_unknown_modes_are_refused(harness: Harness) -> None:
    ws = harness.workspace
    with pytest.raises(InvalidRequest, match="unknown network mode"):
        await ws.creator.create(CreateRequest(network="everything"))
    with pytest.raises(InvalidRequest, match="invalid network policy"):
        await ws.creator.create(CreateRequest(allow=["not a rule!"]))
    assert ws.sandboxes.list() == []


async def test_a_mode_the_workspace_does_not_allow_is_refused(harness: Harness) -> None:
    ws = harness.workspace
    ws.policy.update({"network_modes": ["airgapped"]})  # the workspace policy narrows them
    with pytest.raises(InvalidRequest, match="'internet' is not allowed"):
        await ws.creator.create(CreateRequest(network="internet"))
    record = await ws.creator.create(CreateRequest())  # the first allowed mode is the default
    assert ws.sandboxes.policy_of(record).mode is NetworkMode.AIRGAPPED
    with pytest.raises(InvalidRequest, match="not allowed"):
        await ws.sandboxes.set_network(record.id, mode="project")
    await ws.sandboxes.kill(record.id)


def test_network_modes_setting_is_checked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from tests.unit.conftest import make_settings

    with pytest.raises(ValueError, match="unknown network modes"):
        make_settings(tmp_path, network_modes="internet,everything")
    assert make_settings(tmp_path, network_modes="Internet, airgapped").network_modes == (
        "internet,airgapped"
    )
