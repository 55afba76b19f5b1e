"""The egress control on real slots (``network/sandbox_net.py``): each sandbox's rules live in its
own slot, so sandboxes attached and detached at the same time never touch each other's, and an
attach that fails midway leaves nothing of its own behind.

Slots come from a ``SlotNetwork`` on the test's own prefix and a free subnet (see
``test_slots.py``), swept at teardown also on failure; the rules are read with the plain ``nft``
tool inside the slot namespaces. No traffic is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.network import NetworkFailure, Slot, SlotNetwork
from corral.network.base import INNER_GATEWAY
from corral.network.broker import CertificateAuthority
from corral.network.broker.injection import Injection
from corral.network.broker.intercept import Broker
from corral.network.namespaces import run_in_netns
from corral.network.policy import EgressPolicy
from corral.network.sandbox_egress import SandboxEgress
from corral.network.sandbox_net import PROXY_PORT, EgressWiring, SlotEgressControl
from corral.network.service_routes import ServiceRoutes
from tests.host import free_subnet
from tests.integration.network.test_slots import prefix  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.integration]


class NoSecrets:
    def injections(self, sandbox_id: str) -> tuple[Injection, ...]:
        return ()


@dataclass
class Lab:
    network: SlotNetwork
    egress: SlotEgressControl
    table: str

    async def slot(self) -> Slot:
        slot = await self.network.lease()
        await self.network.prepare(slot)
        return slot

    def rules(self, slot: Slot) -> str | None:
        """The slot's egress table as ``nft`` lists it; None when it has none."""
        slot_ns = self.network.plan.layout(slot.index).slot_ns
        listed = subprocess.run(
            ["ip", "netns", "exec", slot_ns, "nft", "list", "table", "inet", self.table],
            capture_output=True,
            text=True,
        )
        return listed.stdout if listed.returncode == 0 else None


@pytest.fixture
async def lab(prefix: str, tmp_path: Path) -> AsyncIterator[Lab]:  # noqa: F811
    subnet = await asyncio.to_thread(free_subnet)
    network = SlotNetwork(prefix=prefix, subnet=subnet)
    broker = Broker(CertificateAuthority(tmp_path / "broker"), NoSecrets())
    egress = SlotEgressControl(
        network, EgressWiring(broker, ServiceRoutes()), upstreams=["127.0.0.1"], internet=False
    )
    try:
        yield Lab(network, egress, f"{prefix}_egress")
    finally:
        await egress.close()
        for slot in network.leased:
            with contextlib.suppress(NetworkFailure):
                await network.release(slot)
        await network.close()


def allowing(cidr: str, mode: str = "project_internet") -> EgressPolicy:
    return EgressPolicy.build(mode, [cidr], [])


async def test_sandboxes_attached_and_detached_at_once_keep_each_their_own_rules(
    lab: Lab,
) -> None:
    a, b, c = [await lab.slot() for _ in range(3)]
    await lab.egress.attach("a", a, allowing("192.0.2.0/24"), fresh=True)
    rules_a = lab.rules(a)
    assert rules_a is not None and "192.0.2.0/24" in rules_a

    await asyncio.gather(
        lab.egress.attach("b", b, allowing("198.51.100.0/24", "airgapped"), fresh=True),
        lab.egress.attach("c", c, allowing("203.0.113.0/24", "internet"), fresh=True),
    )
    await asyncio.gather(
        lab.egress.detach("b"),
        lab.egress.attach("c", c, allowing("203.0.113.64/26", "internet"), fresh=True),
    )

    assert lab.rules(a) == rules_a
    rules_b, rules_c = lab.rules(b), lab.rules(c)
    assert rules_b is not None and "198.51.100.0/24" in rules_b and "192.0.2.0/24" not in rules_b
    # A second attach of a fresh slot replaces what the first made.
    assert rules_c is not None and "203.0.113.64/26" in rules_c
    assert "203.0.113.0/24" not in rules_c and "192.0.2.0/24" not in rules_c
    assert [lab.egress.attached(name) for name in "abc"] == [True, False, True]


async def test_an_attach_that_fails_midway_leaves_nothing_and_the_others_untouched(
    lab: Lab,
) -> None:
    a, b = await lab.slot(), await lab.slot()
    await lab.egress.attach("a", a, allowing("192.0.2.0/24"), fresh=True)
    rules_a = lab.rules(a)
    slot_ns = lab.network.plan.layout(b.index).slot_ns

    def occupy_the_resolvers_port() -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((INNER_GATEWAY, 53))
        return sock

    squatter = await asyncio.to_thread(run_in_netns, slot_ns, occupy_the_resolvers_port)
    with squatter:
        with pytest.raises(NetworkFailure, match="53"):
            await lab.egress.attach("b", b, allowing("198.51.100.0/24"), fresh=True)

        assert not lab.egress.attached("b")
        assert lab.rules(b) is None  # its slot drops everything it sends, as before

        def proxy_port_is_free() -> None:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((INNER_GATEWAY, PROXY_PORT))

        await asyncio.to_thread(run_in_netns, slot_ns, proxy_port_is_free)
        assert lab.rules(a) == rules_a and lab.egress.attached("a")

    await lab.egress.attach("b", b, allowing("198.51.100.0/24"), fresh=True)
    rules_b = lab.rules(b)
    assert rules_b is not None and "198.51.100.0/24" in rules_b


async def test_an_attach_that_fails_after_its_rules_are_in_takes_them_out_again(
    lab: Lab, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = await lab.slot(), await lab.slot()
    await lab.egress.attach("a", a, allowing("192.0.2.0/24"), fresh=True)
    rules_a = lab.rules(a)
    seen: list[str | None] = []

    async def failing_serve(
        box: SandboxEgress, port: int = 53, *, bound: tuple[socket.socket, ...] = ()
    ) -> None:
        seen.append(lab.rules(b))  # the rules are in by now
        for sock in bound:
            sock.close()
        raise NetworkFailure("the resolver failed")

    monkeypatch.setattr(lab.egress._resolver, "serve", failing_serve)
    with pytest.raises(NetworkFailure, match="the resolver failed"):
        await lab.egress.attach("b", b, allowing("198.51.100.0/24"), fresh=True)

    assert seen[0] is not None and "198.51.100.0/24" in seen[0]
    assert lab.rules(b) is None and not lab.egress.attached("b")
    assert lab.rules(a) == rules_a and lab.egress.attached("a")
