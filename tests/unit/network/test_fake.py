"""The in-memory network keeps the real one's leasing rules."""

from __future__ import annotations

import asyncio

import pytest

from corral.network import FakeNetwork, Network, NetworkFailure, NoFreeSlot


def test_is_a_network() -> None:
    network: Network = FakeNetwork()
    assert network is not None


async def test_lease_hands_out_distinct_slots_with_their_own_host_address() -> None:
    network = FakeNetwork(capacity=4)
    first, second = await asyncio.gather(network.lease(), network.lease())
    assert {first.index, second.index} == {0, 1}
    assert first.host_address != second.host_address
    slot = await network.lease(3)
    assert slot.host_address == "10.200.0.14"
    assert slot.netns_name == "corral-sbx-3"
    assert slot.netns_path == "/run/netns/corral-sbx-3"


async def test_a_full_pool_refuses_with_no_free_slot() -> None:
    network = FakeNetwork(capacity=1)
    await network.lease()
    with pytest.raises(NoFreeSlot):
        await network.lease()


async def test_existing_slots_are_skipped_by_lease_and_adopted_by_index() -> None:
    network = FakeNetwork(capacity=4, existing={0})
    assert (await network.lease()).index == 1
    adopted = await network.lease(0)
    assert adopted.index == 0
    with pytest.raises(NetworkFailure, match="already leased"):
        await network.lease(0)


async def test_release_frees_the_slot_and_checks_the_lease() -> None:
    network = FakeNetwork(capacity=1)
    slot = await network.lease()
    await network.prepare(slot)
    assert network.prepared[slot.index] == 1
    await network.release(slot)
    with pytest.raises(NetworkFailure, match="not leased"):
        await network.release(slot)
    with pytest.raises(NetworkFailure, match="not leased"):
        await network.prepare(slot)
    assert (await network.lease()).index == 0


async def test_reap_stale_keeps_kept_and_leased_slots() -> None:
    network = FakeNetwork(capacity=8, existing={1, 2, 3})
    leased = await network.lease(3)
    assert await network.reap_stale(keep={1}) == [2]
    assert network.existing == {1, leased.index}


async def test_closed_network_refuses_leases() -> None:
    network = FakeNetwork()
    await network.close()
    with pytest.raises(NetworkFailure, match="closed"):
        await network.lease()


async def test_fail_next_injects_one_failure() -> None:
    network = FakeNetwork()
    network.fail_next("lease")
    with pytest.raises(NetworkFailure, match="injected"):
        await network.lease()
    slot = await network.lease()
    network.fail_next("prepare", NoFreeSlot("boom"))
    with pytest.raises(NoFreeSlot):
        await network.prepare(slot)
    await network.prepare(slot)
