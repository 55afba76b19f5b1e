"""Attacks on egress from inside real gVisor sandboxes (root in the sandbox), seen to fail: an
airgapped sandbox going around its resolver or straight to addresses, rewriting its resolver
config, and an internet sandbox reaching for the host, the metadata address and the slots.
The targets are the test's own fake internet (tests/e2e/netlab.py)."""

# ruff: noqa: F401, F811  (the fixtures `internet` and `netd` come from netlab)
from __future__ import annotations

import json
import socket

from corral import Client, Sandbox
from tests.e2e.conftest import Daemon
from tests.e2e.netlab import DNS, OUR_SIDE, WEB, internet, netd

METADATA = "169.254.169.254"
RESOLVER = "169.254.0.22"

PROBE = r"""
import json, socket, sys

def tcp(host, port):
    try:
        socket.create_connection((host, int(port)), timeout=2).close()
        return "connected"
    except Exception as exc:
        return type(exc).__name__

def dns(server):
    name = b"\x03web\x04fake\x04test\x00"
    query = bytes.fromhex("abcd01000001000000000000") + name + b"\x00\x01\x00\x01"
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2)
    try:
        sock.sendto(query, (server, 53))
        data = sock.recv(512)
    except Exception as exc:
        return type(exc).__name__
    return "answered" if data[3] & 0xF == 0 and data[7] > 0 else "refused"

def write_resolv():
    try:
        with open("/etc/resolv.conf", "w") as conf:
            conf.write("nameserver %s\n" % sys.argv[1])
        return "written"
    except Exception as exc:
        return type(exc).__name__

out = {}
for probe in sys.argv[2:]:
    kind, _, arg = probe.partition("=")
    run = {"tcp": lambda a: tcp(*a.split(":")), "dns": dns, "resolv": lambda a: write_resolv()}
    out[probe] = run[kind](arg)
print(json.dumps(out))
"""


def probe(sbx: Sandbox, *probes: str) -> dict[str, str]:
    result = sbx.exec(["python3", "-c", PROBE, DNS, *probes])
    assert result.exit_code == 0, result.stderr
    answer: dict[str, str] = json.loads(result.stdout)
    return answer


def test_an_airgapped_sandbox_cannot_go_around_its_policy(netd: Daemon) -> None:
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="airgapped")
        try:
            found = probe(
                sbx,
                f"tcp={WEB}:80",
                f"tcp={WEB}:9000",
                f"tcp={METADATA}:80",
                f"dns={DNS}",  # the upstream resolver, asked directly
                f"dns={RESOLVER}",  # its own resolver forwards nothing in airgapped
                "resolv=",
            )
            assert found.pop("resolv=") != "written"  # read-only bind mount
            assert "connected" not in found.values() and "answered" not in found.values(), found
        finally:
            sbx.kill()


def test_an_internet_sandbox_cannot_reach_the_host_or_metadata(netd: Daemon) -> None:
    host = socket.create_server((OUR_SIDE, 0))  # on the daemon's namespace, our own veth
    host.settimeout(0)
    port = host.getsockname()[1]
    with Client(netd.url, netd.key) as client:
        sbx = client.create_sandbox(network="internet")
        try:
            found = probe(
                sbx,
                f"tcp={WEB}:80",  # control: the internet is reachable
                f"dns={RESOLVER}",  # control: its resolver answers
                f"tcp={OUR_SIDE}:{port}",
                f"tcp={METADATA}:80",
                f"tcp=127.0.0.1:{netd.url.rsplit(':', 1)[1]}",  # the sandbox's own loopback
            )
            assert found.pop(f"tcp={WEB}:80") == "connected"
            assert found.pop(f"dns={RESOLVER}") == "answered"
            assert "connected" not in found.values(), found
            try:
                host.accept()
                raise AssertionError("the sandbox reached a listener on the host's address")
            except BlockingIOError:
                pass
        finally:
            sbx.kill()
            host.close()
