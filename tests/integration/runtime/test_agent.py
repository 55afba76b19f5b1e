"""The real in-sandbox agent, injected with the host's interpreter, reached over a veth into a
network namespace this test creates (only that namespace is ever contacted)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral.agent import AGENT_PORT
from corral.runtime import GVisorRuntime, RuntimeStatus, build_agent_mount
from tests.host import free_link_addresses

from .conftest import SpecFactory, wait_for_log

pytestmark = pytest.mark.integration


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Link:
    """The test's namespace ``name``, whose eth0 is a veth to the host: a /30 of a subnet nothing
    on the host routes, so never a running daemon's slot addresses."""

    name: str
    host_address: str
    sandbox_address: str


@pytest.fixture
def netns() -> Iterator[Link]:
    link = Link(f"crt-{os.getpid()}", *free_link_addresses())
    host_if = f"crth{os.getpid() % 100000}"
    ip("netns", "add", link.name)
    try:
        ip("link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", link.name)
        ip("addr", "add", f"{link.host_address}/30", "dev", host_if)
        ip("link", "set", host_if, "up")
        configure_sandbox_side(link)
        yield link
    finally:
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)
        subprocess.run(["ip", "netns", "del", link.name], capture_output=True)


def configure_sandbox_side(link: Link) -> None:
    """(Re-)give eth0 its address: gVisor strips it at every start and restore."""
    subprocess.run(
        ["ip", "-n", link.name, "addr", "replace", f"{link.sandbox_address}/30", "dev", "eth0"],
        check=True,
    )
    ip("-n", link.name, "link", "set", "eth0", "up")
    ip("-n", link.name, "link", "set", "lo", "up")


KEY = "3c" * 32


def health(link: Link, timeout: float = 10.0, key: str | None = KEY) -> dict[str, object]:
    import time

    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    while True:
        try:
            url = f"http://{link.sandbox_address}:{AGENT_PORT}/health"
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=1) as resp:
                doc: dict[str, object] = json.loads(resp.read())
                return doc
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


async def test_agent_serves_over_the_sandbox_network_across_a_restore(
    runtime: GVisorRuntime, make_spec: SpecFactory, netns: Link, tmp_path: Path
) -> None:
    agent = build_agent_mount(compiled_dir=tmp_path / "agent")
    spec = make_spec("", agent=agent, netns_path=f"/run/netns/{netns.name}")
    spec = dataclasses.replace(spec, agent_key=KEY)
    await runtime.start(spec)
    await wait_for_log(runtime.paths(spec.sandbox_id).console_log, "corral agent .* listening")
    before = health(netns)
    assert before["ok"] is True and before["pid"] == 1  # the key came through runsc's stdin
    assert health(netns, key=None) == {"ok": True}

    await runtime.checkpoint(spec.sandbox_id, tmp_path / "image", leave_running=False)
    configure_sandbox_side(netns)
    await runtime.restore(spec, tmp_path / "image")
    assert (await runtime.info(spec.sandbox_id)).status is RuntimeStatus.RUNNING
    after = health(netns)
    assert after["boot_id"] == before["boot_id"]  # the same agent process, continued
