"""Attacks on a sandbox's egress policy, performed from a sandbox namespace of the egress lab
(tests/integration/network/egress_lab.py: only namespaces the test makes), and seen to fail."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.network.policy import EgressPolicy
from tests.integration.network.egress_lab import (
    METADATA,
    OTHER,
    WEB,
    Lab,
    built_lab,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    async with built_lab(tmp_path, slot_count=1) as made:
        yield made


async def raw_exchange(lab: Lab, address: str, port: int, data: bytes) -> bytes:
    """Send ``data`` from the sandbox and read what comes back (b"" when cut)."""
    try:
        reader, writer = await lab.connect(0, address, port)
    except (OSError, TimeoutError):
        return b""
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(4096), 3.0)
    except (OSError, TimeoutError):
        return b""
    finally:
        writer.transport.abort()


async def test_an_allowed_name_pointing_at_the_metadata_address_does_not_reach_it(lab: Lab) -> None:
    await lab.attach(0, EgressPolicy.build("project", ["rebind.example.test"]))
    assert await lab.dig(0, "rebind.example.test") == ("NOERROR", [METADATA])
    assert await lab.fetch(0, METADATA, 80, host="rebind.example.test") == "blocked"
    # The address is served: an address rule that names it opens it, nothing less does.
    await lab.apply(0, EgressPolicy.build("project", ["rebind.example.test", f"{METADATA}:80"]))
    assert await lab.fetch(0, METADATA, 80, host="rebind.example.test") == METADATA


async def test_a_second_host_header_does_not_smuggle_a_request_through(lab: Lab) -> None:
    await lab.attach(0, EgressPolicy.build("project", ["api.example.test"]))
    assert (await lab.dig(0, "api.example.test"))[1] == [WEB]
    honest = b"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
    assert (await raw_exchange(lab, WEB, 80, honest)).startswith(b"HTTP/1.1 200")
    smuggled = b"GET / HTTP/1.1\r\nHost: api.example.test\r\nHost: other.example.test\r\n\r\n"
    assert await raw_exchange(lab, WEB, 80, smuggled) == b""


async def test_an_allowed_name_cannot_be_carried_to_another_address(lab: Lab) -> None:
    await lab.attach(0, EgressPolicy.build("project", ["api.example.test"]))
    assert (await lab.dig(0, "api.example.test"))[1] == [WEB]
    forged = b"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n"
    assert await raw_exchange(lab, OTHER, 80, forged) == b""
    assert await lab.fetch(0, OTHER, 443, tls_name="api.example.test") == "blocked"


async def test_a_connection_that_never_names_a_host_is_dropped_after_the_head_timeout(
    lab: Lab,
) -> None:
    await lab.attach(0, EgressPolicy.build("project", ["api.example.test"]))
    reader, writer = await lab.connect(0, WEB, 80)
    try:
        # The lab's proxy waits 3 s for the first flight; then the connection ends.
        assert await asyncio.wait_for(reader.read(1), 6.0) == b""
    except ConnectionResetError:
        pass
    finally:
        writer.transport.abort()
