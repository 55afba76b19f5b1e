"""One factory for the fake hosts that e2e tests and benches point sandboxes at: a namespace of
their own behind a veth, made and removed here.

``host_lab(work, net)`` builds ``net``.0/24 (e.g. "198.18.0") in a namespace ``<prefix>-lab``:
WEB .2 and OTHER .3 answer HTTP on :80 (and HTTPS on :443 behind a test CA of the lab's own when
``tls_names`` are given), WEB has a TCP echo on :9000, DNS .53 answers ``zone`` (UDP and TCP);
every HTTP request is logged to a host file (``HostLab.requests``). The server is
``fake_host.py``. The lab is linked to the caller's namespace by a veth (.249 ours, .250 theirs)
and one route for ``net``.0/25 through it, never a default route. Everything is removed at the
end, also on failure. A daemon whose sandboxes should resolve and reach the lab needs
``daemon_env(lab)``.
"""

from __future__ import annotations

import json
import random
import secrets
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.broker_lab import make_test_ca

SERVER = Path(__file__).with_name("fake_host.py")
ECHO_PORT = 9000


def page(address: str) -> str:
    """What a plain request to the lab's ``address`` answers (see ``fake_host.page``)."""
    return f"fake host {address}\n"


def random_net() -> str:
    """A /24 of 198.19.0.0/16 (the benchmarking range) for a lab, random so that labs of tests
    running at the same time keep their own."""
    return f"198.19.{random.randrange(256)}"


@dataclass(frozen=True)
class HostLab:
    netns: str
    uplink: str
    net: str
    ca: Path | None
    log: Path

    @property
    def web(self) -> str:
        return f"{self.net}.2"

    @property
    def other(self) -> str:
        return f"{self.net}.3"

    @property
    def dns(self) -> str:
        return f"{self.net}.53"

    @property
    def our_side(self) -> str:
        """Our end of the lab's veth: an address of the caller's own namespace."""
        return f"{self.net}.249"

    def requests(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def last(self, target_prefix: str) -> dict[str, object]:
        found = [r for r in self.requests() if str(r["target"]).startswith(target_prefix)]
        assert found, f"the lab saw no request for {target_prefix}: {self.requests()}"
        return found[-1]


def daemon_env(lab: HostLab, modes: str = "internet,airgapped") -> dict[str, str]:
    """A daemon whose sandboxes resolve through the lab's DNS and whose internet egress leaves
    by the lab's veth; its broker trusts the lab's CA when it has one."""
    env = {
        "CORRAL_DNS_UPSTREAMS": lab.dns,
        "CORRAL_EGRESS_UPLINKS": lab.uplink,
        "CORRAL_NETWORK_MODES": modes,
    }
    if lab.ca is not None:
        env["CORRAL_BROKER_UPSTREAM_CA"] = str(lab.ca)
    return env


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


@contextmanager
def host_lab(
    work: Path,
    net: str,
    zone: Mapping[str, str],
    *,
    tls_names: Sequence[str] = (),
    aws_key_id: str = "",
    aws_secret: str = "",
) -> Iterator[HostLab]:
    """The lab on ``net``.0/24 answering DNS for ``zone`` (names to addresses); HTTPS only when
    ``tls_names`` (the names its certificate holds) are given; a target under /redirect is sent
    to whichever zone name points at OTHER; SigV4 requests are checked with the AWS keys given."""
    prefix = "hl" + secrets.token_hex(2)
    netns, uplink, inner = f"{prefix}-lab", f"{prefix}-o", f"{prefix}-i"
    ours, theirs, routed = f"{net}.249", f"{net}.250", f"{net}.0/25"
    web, other, dns = f"{net}.2", f"{net}.3", f"{net}.53"
    ca: Path | None = None
    server_pem: Path | None = None
    if tls_names:
        ca, server_pem = make_test_ca(work, list(tls_names))
    log = work / f"{prefix}-requests.jsonl"
    config = {
        "http": [web, other],
        "https": [web, other] if server_pem else [],
        "server_pem": str(server_pem or ""),
        "echo": [f"{web}:{ECHO_PORT}"],
        "dns": dns,
        "zone": dict(zone),
        "other_name": next((name for name, addr in zone.items() if addr == other), ""),
        "log": str(log),
    }
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
        for address in (web, other, dns):
            _ip("-n", netns, "addr", "add", f"{address}/32", "dev", "lo")
        _ip("route", "add", routed, "via", theirs, "dev", uplink)
        server = subprocess.Popen(
            ["ip", "netns", "exec", netns, sys.executable, str(SERVER), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={
                "REAL_AWS_KEY_ID": aws_key_id,
                "REAL_AWS_SECRET": aws_secret,
                "PATH": "/usr/bin:/bin",
            },
        )
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready", "the lab's server did not start"
        yield HostLab(netns, uplink, net, ca, log)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        _ip("route", "del", routed, "via", theirs, "dev", uplink, check=False)
        _ip("link", "del", uplink, check=False)
        _ip("netns", "del", netns, check=False)


@contextmanager
def upstream_lab(work: Path, aws_key_id: str = "", aws_secret: str = "") -> Iterator[HostLab]:
    """The broker's fake upstream (e2e tests and bench): a lab on a random 198.19.N.0/24 with
    HTTPS for api.sec.test and s3.sec.test (WEB) and other.sec.test (OTHER)."""
    net = random_net()
    zone = {"api.sec.test": f"{net}.2", "other.sec.test": f"{net}.3", "s3.sec.test": f"{net}.2"}
    with host_lab(
        work, net, zone, tls_names=list(zone), aws_key_id=aws_key_id, aws_secret=aws_secret
    ) as lab:
        yield lab
