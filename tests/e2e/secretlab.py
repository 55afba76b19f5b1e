"""The fake upstream of the broker's e2e tests and bench, in a namespace made here.

``secret_lab`` builds 198.19.N.0/24 (N random, so other network tests running at the same time
keep their own): API .2 and OTHER .3 (``fake_upstream.py``: HTTPS behind a test CA of its own,
plain HTTP on API, every request logged to a host file), DNS .53 answering ``ZONE``; linked to
the daemon's namespace by a veth of its own (.249 ours, .250 theirs) and one route for
198.19.N.0/25 through it, never a default route. Everything is removed at the end, also on
failure. A daemon pointed at it needs ``daemon_env(lab)``.
"""

from __future__ import annotations

import json
import random
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.broker_lab import make_test_ca

FAKE = Path(__file__).with_name("fake_upstream.py")
NAMES = ("api.sec.test", "other.sec.test", "s3.sec.test")


@dataclass
class Lab:
    netns: str
    uplink: str
    api: str
    other: str
    dns: str
    ca: Path
    log: Path

    def requests(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def last(self, target_prefix: str) -> dict[str, object]:
        found = [r for r in self.requests() if str(r["target"]).startswith(target_prefix)]
        assert found, f"the upstream saw no request for {target_prefix}: {self.requests()}"
        return found[-1]


def daemon_env(lab: Lab) -> dict[str, str]:
    """A daemon whose sandboxes resolve and reach the lab, and whose broker trusts its CA."""
    return {
        "CORRAL_DNS_UPSTREAMS": lab.dns,
        "CORRAL_EGRESS_UPLINKS": lab.uplink,
        "CORRAL_NETWORK_MODES": "internet,airgapped",
        "CORRAL_BROKER_UPSTREAM_CA": str(lab.ca),
    }


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


@contextmanager
def secret_lab(work: Path, aws_key_id: str = "", aws_secret: str = "") -> Iterator[Lab]:
    net = f"198.19.{random.randrange(256)}"
    prefix = "sk" + secrets.token_hex(2)
    netns, uplink, inner = f"{prefix}-up", f"{prefix}-o", f"{prefix}-i"
    api, other, dns = f"{net}.2", f"{net}.3", f"{net}.53"
    ours, theirs, routed = f"{net}.249", f"{net}.250", f"{net}.0/25"
    ca, server_pem = make_test_ca(work, list(NAMES))
    log = work / "upstream.jsonl"
    zone = {"api.sec.test": api, "other.sec.test": other, "s3.sec.test": api}
    args = [api, other, dns, json.dumps(zone), str(server_pem), str(log)]
    server: subprocess.Popen[bytes] | None = None
    try:
        _ip("netns", "add", netns)
        _ip("link", "add", uplink, "type", "veth", "peer", "name", inner)
        _ip("link", "set", inner, "netns", netns)
        _ip("addr", "add", f"{ours}/30", "dev", uplink)
        _ip("link", "set", uplink, "up")
        _ip("-n", netns, "addr", "add", f"{theirs}/30", "dev", inner)
        _ip("-n", netns, "link", "set", inner, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        for address in (api, other, dns):
            _ip("-n", netns, "addr", "add", f"{address}/32", "dev", "lo")
        _ip("route", "add", routed, "via", theirs, "dev", uplink)
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, str(FAKE), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={
                "REAL_AWS_KEY_ID": aws_key_id,
                "REAL_AWS_SECRET": aws_secret,
                "PATH": "/usr/bin:/bin",
            },
        )
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        yield Lab(netns, uplink, api, other, dns, ca, log)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _ip("route", "del", routed, "via", theirs, "dev", uplink, check=False)
        _ip("link", "del", uplink, check=False)
        _ip("netns", "del", netns, check=False)
