"""The fake internet of the networking tests, and a daemon whose sandboxes' egress leads to it.

``internet`` builds "the internet" itself: a namespace (``nw<hex>-inet``) holding 198.18.0.2 and
198.18.0.3 (HTTP), a TCP echo and a DNS server on 198.18.0.53 (``fake_internet.py``), linked to
the daemon's namespace by a veth of its own (198.18.1.1/30 on our side) and one route for
198.18.0.0/24 through it -- never a default route. ``netd`` is a daemon that forwards DNS to the
fake resolver (``CORRAL_DNS_UPSTREAMS``) and lets internet egress leave by the test's veth
(``CORRAL_EGRESS_UPLINKS``). Everything is removed at the end, also on failure.
"""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from corral import Sandbox
from tests.e2e.conftest import Daemon, leftover_namespaces, start_daemon, stop_daemon

FAKE = Path(__file__).with_name("fake_internet.py")
WEB, OTHER, DNS = "198.18.0.2", "198.18.0.3", "198.18.0.53"
OUR_SIDE, THEIR_SIDE = "198.18.1.1", "198.18.1.2"
ROUTED = "198.18.0.0/24"
MODES = "project_internet,internet,airgapped"  # "project" is not allowed in this workspace


@dataclass
class FakeInternet:
    netns: str
    uplink: str


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


@pytest.fixture(scope="module")
def internet() -> Iterator[FakeInternet]:
    prefix = "nw" + secrets.token_hex(2)
    netns, uplink, inner = f"{prefix}-inet", f"{prefix}-up", f"{prefix}-in"
    server: subprocess.Popen[bytes] | None = None
    try:
        _ip("netns", "add", netns)
        _ip("link", "add", uplink, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", netns)
        _ip("addr", "add", f"{OUR_SIDE}/30", "dev", uplink)
        _ip("link", "set", uplink, "up")
        _ip("-n", netns, "addr", "add", f"{THEIR_SIDE}/30", "dev", inner)
        _ip("-n", netns, "link", "set", inner, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        for address in (WEB, OTHER, DNS):
            _ip("-n", netns, "addr", "add", f"{address}/32", "dev", "lo")
        _ip("route", "add", ROUTED, "via", THEIR_SIDE, "dev", uplink)
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, str(FAKE)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        yield FakeInternet(netns, uplink)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _ip("route", "del", ROUTED, "via", THEIR_SIDE, "dev", uplink, check=False)
        _ip("link", "del", uplink, check=False)
        _ip("netns", "del", netns, check=False)


@pytest.fixture(scope="module")
def netd(tmp_path_factory: pytest.TempPathFactory, internet: FakeInternet) -> Iterator[Daemon]:
    prefix = "cn" + secrets.token_hex(2)
    data_dir = tmp_path_factory.mktemp("netd") / "data"
    daemon = start_daemon(
        data_dir,
        prefix,
        extra_env={
            "CORRAL_DNS_UPSTREAMS": DNS,
            "CORRAL_EGRESS_UPLINKS": internet.uplink,
            "CORRAL_NETWORK_MODES": MODES,
        },
    )
    try:
        yield daemon
    finally:
        stop_daemon(daemon)
        left = leftover_namespaces(prefix)
        for name in left:
            if name.startswith("nft:"):
                subprocess.run(["nft", "delete", "table", "inet", prefix], check=False)
            else:
                subprocess.run(["ip", "netns", "del", name], check=False)
        assert not left, f"namespaces left behind: {left}\n{daemon.log()[-4000:]}"


def fetch(sbx: Sandbox, url: str) -> str | None:
    """The body curl got from ``url`` inside the sandbox, or None if it could not connect."""
    result = sbx.exec(["curl", "-sS", "--max-time", "4", url])
    return result.stdout if result.exit_code == 0 else None


def resolves(sbx: Sandbox, name: str) -> bool:
    return sbx.exec(["getent", "hosts", name]).exit_code == 0
