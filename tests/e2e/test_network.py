"""Networking end to end: a real daemon whose sandboxes' egress leads to a fake internet
(``netlab.py``: only namespaces, veths and a route the test makes, all removed afterwards)."""

# ruff: noqa: F401, F811  (the fixtures `internet` and `netd` come from netlab)
from __future__ import annotations

import json
import secrets
import socket
import subprocess
from pathlib import Path

import pytest

from corral import Client, Sandbox
from corral.sdk import InvalidRequest
from tests.e2e.conftest import Daemon, leftover_namespaces, start_daemon, stop_daemon
from tests.e2e.netlab import (
    DNS,
    MODES,
    OTHER,
    OUR_SIDE,
    WEB,
    HostLab,
    fetch,
    internet,
    netd,
    page,
    resolves,
)
from tests.e2e.workloads import wait_until
from tests.host import free_subnet


def test_airgapped_reaches_nothing(netd: Daemon) -> None:
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="airgapped")
        try:
            assert sbx.info().network.mode == "airgapped"  # type: ignore[union-attr]
            assert sbx.files.read_text("/etc/resolv.conf").startswith("nameserver 169.254.0.22")
            assert fetch(sbx, f"http://{WEB}/") is None
            assert not resolves(sbx, "web.fake.test")
        finally:
            sbx.kill()


def test_internet_reaches_the_fake_host_but_not_the_host(netd: Daemon) -> None:
    # A listener on the host's own address (our veth): the sandbox must not reach it.
    listener = socket.create_server((OUR_SIDE, 0))
    listener.settimeout(0)
    host_port = listener.getsockname()[1]
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="internet")
        try:
            assert fetch(sbx, "http://web.fake.test/") == page(WEB)
            assert fetch(sbx, f"http://{OTHER}/") == page(OTHER)
            assert fetch(sbx, f"http://{OUR_SIDE}:{host_port}/") is None
            with pytest.raises(BlockingIOError):
                listener.accept()
            assert fetch(sbx, f"http://{netd.url.split('//')[1]}/healthz") is None  # loopback
        finally:
            sbx.kill()
            listener.close()


HOLD = f"""
import socket, sys, time
c = socket.create_connection(("{WEB}", 9000), timeout=3)
state = "/tmp/conn"
open(state, "w").write("open")
while True:
    try:
        c.sendall(b"ping")
        assert c.recv(4) == b"ping"
    except Exception as exc:
        open(state, "w").write("cut " + type(exc).__name__)
        sys.exit(0)
    time.sleep(0.1)
"""


def test_live_change_to_airgapped_cuts_an_open_connection(netd: Daemon) -> None:
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="internet")
        try:
            sbx.exec_background(["python3", "-c", HOLD], tag="hold")

            def state() -> str:
                result = sbx.exec(["cat", "/tmp/conn"])
                return result.stdout if result.exit_code == 0 else ""

            wait_until(lambda: state() == "open", what="the connection to open")
            change = sbx.network.update("airgapped")
            assert change.network.mode == "airgapped"
            wait_until(lambda: state().startswith("cut"), timeout=20, what="the connection cut")
            assert fetch(sbx, f"http://{WEB}/") is None
            assert not resolves(sbx, "web.fake.test")
            sbx.network.update("internet")
            assert fetch(sbx, f"http://{WEB}/") == page(WEB)
        finally:
            sbx.kill()


def test_rules_survive_park_wake_and_fork(netd: Daemon) -> None:
    made = netd.cli("new", "--network", "airgapped", "--allow", f"{WEB}:80")
    assert made.returncode == 0, made.stderr
    sandbox_id = made.stdout.decode().strip()
    with Client(netd.url, netd.key) as client:
        sbx = client.sandbox(sandbox_id)
        children: list[Sandbox] = []
        try:
            assert fetch(sbx, f"http://{WEB}/") == page(WEB)
            assert fetch(sbx, f"http://{OTHER}/") is None

            changed = netd.cli("network", sandbox_id, "--deny", f"{WEB}/32", "--json")
            assert changed.returncode == 0, changed.stderr
            assert json.loads(changed.stdout) == {
                "mode": "airgapped",
                "allow": [f"{WEB}:80"],
                "deny": [WEB],
            }
            assert fetch(sbx, f"http://{WEB}/") is None  # deny wins over allow
            assert netd.cli("network", sandbox_id, "--clear-deny").returncode == 0

            sbx.park()
            sbx.wake()
            assert fetch(sbx, f"http://{WEB}/") == page(WEB)
            assert fetch(sbx, f"http://{OTHER}/") is None

            children = sbx.fork(1)
            child = children[0]
            assert child.info().network == sbx.info().network
            assert fetch(child, f"http://{WEB}/") == page(WEB)
            assert fetch(child, f"http://{OTHER}/") is None

            shown = netd.cli("info", sandbox_id).stdout.decode()
            assert "airgapped" in shown and f"{WEB}:80" in shown
        finally:
            for one in [sbx, *children]:
                one.kill()


def test_a_mode_the_workspace_does_not_allow_is_refused(netd: Daemon) -> None:
    refused = netd.cli("new", "--network", "project")
    assert refused.returncode == 1
    assert "network mode 'project' is not allowed" in refused.stderr.decode()
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="airgapped")
        try:
            with pytest.raises(InvalidRequest, match="not allowed"):
                sbx.network.update("project")
            with pytest.raises(InvalidRequest, match="rule"):
                sbx.network.update(allow=["not a rule!"])
            assert sbx.info().network.mode == "airgapped"  # type: ignore[union-attr]
        finally:
            sbx.kill()


def test_template_builds_reach_what_their_mode_allows(netd: Daemon) -> None:
    built = netd.cli(
        "template", "create", "netbuild", "--from", "base",
        "--run", "curl -sS --max-time 4 http://web.fake.test/ > /fetched.txt",
    )  # fmt: skip
    try:
        assert built.returncode == 0, built.stderr.decode()
        assert b"RUN steps run with network mode internet" in built.stdout
        with Client(netd.url, netd.key) as client:
            sbx = client.create_sandbox("netbuild", network="airgapped")
            try:
                assert sbx.files.read_text("/fetched.txt") == page(WEB)
            finally:
                sbx.kill()
    finally:
        netd.cli("template", "rm", "netbuild")

    offline = netd.cli(
        "template", "create", "netoffline", "--from", "base", "--network", "airgapped",
        "--run", "curl -sS --max-time 4 http://web.fake.test/",
    )  # fmt: skip
    netd.cli("template", "rm", "netoffline")
    assert offline.returncode != 0
    assert b"RUN steps run with network mode airgapped" in offline.stdout


def test_rules_come_back_with_a_restored_snapshot(netd: Daemon) -> None:
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="airgapped", allow=[f"{WEB}:80"])
        restored: Sandbox | None = None
        try:
            sbx.snapshot("netsnap")
            restored = client.create_sandbox(snapshot="netsnap")
            assert restored.info().network == sbx.info().network
            assert fetch(restored, f"http://{WEB}/") == page(WEB)
            assert fetch(restored, f"http://{OTHER}/") is None
        finally:
            for one in (sbx, restored):
                if one is not None:
                    one.kill()
            client.remove_snapshot("netsnap")


def test_rules_are_reapplied_after_a_daemon_restart(tmp_path: Path, internet: HostLab) -> None:
    prefix, subnet, data = "cn" + secrets.token_hex(2), free_subnet(), tmp_path / "data"
    env = {
        "CORRAL_DNS_UPSTREAMS": DNS,
        "CORRAL_EGRESS_UPLINKS": internet.uplink,
        "CORRAL_NETWORK_MODES": MODES,
    }
    first = start_daemon(data, prefix, subnet, extra_env=env)
    second: Daemon | None = None
    try:
        with Client(first.url, first.key) as client:
            sandbox_id = client.create_sandbox(network="internet", deny=[OTHER]).id
        stop_daemon(first, kill_sandboxes=False)
        second = start_daemon(data, prefix, subnet, extra_env=env)
        with Client(second.url, second.key) as client:
            sbx = client.sandbox(sandbox_id)
            assert fetch(sbx, "http://web.fake.test/") == page(WEB)  # DNS too
            assert fetch(sbx, f"http://{OTHER}/") is None
            sbx.network.update("airgapped")
            assert fetch(sbx, f"http://{WEB}/") is None
    finally:
        stop_daemon(second or first)
        if second is not None:
            stop_daemon(first)
        left = leftover_namespaces(prefix)
        for name in left:
            subprocess.run(["ip", "netns", "del", name], check=False)
        assert not left, f"namespaces left behind: {left}"


ECHO = """
import socket, sys
c = socket.create_connection((sys.argv[1], 9000), timeout=3)
c.sendall(b"hello")
print(c.recv(5).decode())
"""


def test_project_services_resolve_in_project_modes(netd: Daemon) -> None:
    added = netd.cli("service", "add", "echo.project", f"{WEB}:9000")
    assert added.returncode == 0, added.stderr
    with Client(netd.url, netd.key) as client:
        project = client.create_sandbox(network="airgapped", allow=["project"])
        airgapped = client.create_sandbox(network="airgapped")
        try:
            assert resolves(project, "echo.project")
            said = project.exec(["python3", "-c", ECHO, "echo.project"])
            assert said.stdout.strip() == "hello", said.stderr
            assert fetch(project, f"http://{WEB}/") is None  # only the service's port
            assert not resolves(airgapped, "echo.project")
            assert "echo.project" in netd.cli("service", "ls").stdout.decode()

            assert netd.cli("service", "rm", "echo.project").returncode == 0
            assert not resolves(project, "echo.project")
            assert project.exec(["python3", "-c", ECHO, WEB]).exit_code != 0
        finally:
            project.kill()
            airgapped.kill()
            netd.cli("service", "rm", "echo.project")
    refused = netd.cli("service", "add", "meta.project", "169.254.169.254:80")
    assert refused.returncode == 1 and b"link-local" in refused.stderr


# 1 MiB through the fake internet's echo, in 64 KiB rounds (neither side's buffers fill up).
ECHO_MIB = f"""
import socket
c = socket.create_connection(("{WEB}", 9000), timeout=5)
chunk, got = b"x" * 65536, 0
for _ in range(16):
    c.sendall(chunk)
    need = len(chunk)
    while need:
        data = c.recv(need)
        assert data, "echo closed"
        need -= len(data)
        got += len(data)
print(got)
"""
MIB = 1 << 20


def test_network_counters_count_the_sandboxes_own_traffic(netd: Daemon) -> None:
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="internet")
        try:
            before = sbx.metrics()
            result = sbx.exec(["python3", "-c", ECHO_MIB])
            assert (result.exit_code, result.stdout.strip()) == (0, str(MIB)), result.stderr
            after = sbx.metrics()
            assert after.net_rx_bytes - before.net_rx_bytes >= MIB
            assert after.net_tx_bytes - before.net_tx_bytes >= MIB
            assert after.net_rx_packets - before.net_rx_packets >= MIB // 65536

            # Driving the sandbox through its agent (the control channel) is not its traffic:
            # an exec storm and 1 MiB of files each way.
            for _ in range(30):
                assert sbx.exec(["true"]).exit_code == 0
            sbx.files.write("/tmp/blob", b"y" * MIB)
            assert len(sbx.files.read("/tmp/blob")) == MIB
            quiet = sbx.metrics()
            assert (quiet.net_rx_bytes, quiet.net_tx_bytes) == (
                after.net_rx_bytes,
                after.net_tx_bytes,
            )

            sbx.park()
            sbx.wake()
            woken = sbx.metrics()  # cumulative over park and wake
            assert woken.net_rx_bytes >= quiet.net_rx_bytes
            assert woken.net_tx_bytes >= quiet.net_tx_bytes
            assert sbx.exec(["python3", "-c", ECHO_MIB]).stdout.strip() == str(MIB)
            assert sbx.metrics().net_rx_bytes - woken.net_rx_bytes >= MIB
        finally:
            sbx.kill()
