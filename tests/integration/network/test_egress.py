"""Egress on the real kernel: modes, address and name rules, the resolver, the proxy, live cuts.

Everything runs inside the lab's own namespaces (``egress_lab``): a fake internet on
198.18.0.0/24, a project service on a private address, slots built by slots.py on
198.19.77.0/24 inside a namespace that stands in for the daemon's.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from corral.network.base import INNER_GATEWAY
from corral.network.namespaces import run_in_netns, write_sysctl
from corral.network.policy import EgressPolicy

from .egress_lab import (
    CDN,
    ECHO_PORT,
    EVIL,
    OTHER,
    SERVICE,
    WEB,
    Lab,
    built_lab,
    in_netns_socket,
    request,
)

pytestmark = [pytest.mark.integration]


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    async with built_lab(tmp_path) as made:
        yield made


def policy(mode: str, allow: tuple[str, ...] = (), deny: tuple[str, ...] = ()) -> EgressPolicy:
    return EgressPolicy.build(mode, list(allow), list(deny))


@pytest.mark.parametrize(
    ("mode", "internet", "project"),
    [
        ("internet", True, False),
        ("project_internet", True, True),
        ("project", False, True),
        ("airgapped", False, False),
    ],
)
async def test_each_mode_reaches_what_it_names_and_never_the_host_slots_or_metadata(
    lab: Lab, mode: str, internet: bool, project: bool
) -> None:
    await lab.attach(0, policy(mode))
    other_slot = lab.plan.layout(1)
    own_host_side = lab.plan.layout(0).host_side_address
    assert await lab.fetch(0, WEB, 80) == (WEB if internet else "blocked")
    assert await lab.fetch(0, WEB, 443, tls_name="api.example.test") == (
        WEB if internet else "blocked"
    )
    assert await lab.fetch(0, SERVICE.address, 5432) == (SERVICE.address if project else "blocked")
    # Always blocked, whatever the mode: the host's own addresses, another sandbox's slot,
    # link-local and the metadata address.
    for address in (own_host_side, other_slot.slot_address, other_slot.host_side_address):
        assert await lab.fetch(0, address, 80, timeout=1.0) == "blocked"
    assert await lab.fetch(0, "169.254.169.254", 80, timeout=1.0) == "blocked"
    # The resolver answers project names only when the project is reachable (in the internet
    # mode the name goes upstream like any other, where it does not exist).
    rcode, addresses = await lab.dig(0, SERVICE.name)
    if project:
        assert (rcode, addresses) == ("NOERROR", [SERVICE.address])
    else:
        assert (rcode, addresses) == ("NXDOMAIN" if internet else "REFUSED", [])
    rcode, addresses = await lab.dig(0, "api.example.test")
    assert (rcode, addresses) == (("NOERROR", [WEB]) if internet else ("REFUSED", []))


async def test_address_rules_allow_and_deny_with_deny_winning(lab: Lab) -> None:
    await lab.attach(
        0,
        policy(
            "airgapped",
            allow=(f"{SERVICE.address}:5432/tcp", "198.18.0.0/24:80"),
            deny=(f"{OTHER}",),
        ),
    )
    assert await lab.fetch(0, SERVICE.address, 5432) == SERVICE.address  # a private address, named
    assert await lab.fetch(0, WEB, 80) == WEB
    assert (
        await lab.fetch(0, WEB, 443, tls_name="api.example.test") == "blocked"
    )  # port not allowed
    assert await lab.fetch(0, OTHER, 80) == "blocked"  # deny wins over the /24 allow


async def test_project_port_rule(lab: Lab) -> None:
    await lab.attach(0, policy("airgapped", allow=("project:5432",)))
    assert await lab.fetch(0, SERVICE.address, 5432) == SERVICE.address
    assert await lab.fetch(0, WEB, 80) == "blocked"
    assert (await lab.dig(0, SERVICE.name))[1] == [SERVICE.address]


async def test_host_name_rule_lets_only_the_resolved_name_through(lab: Lab) -> None:
    sandbox = await lab.attach(0, policy("project", allow=("api.example.test", "a.cdn.test")))
    # By IP, before the sandbox's resolver gave that address: refused, also with the right SNI.
    assert await lab.fetch(0, WEB, 443, tls_name="api.example.test") == "blocked"
    assert await lab.fetch(0, WEB, 80, host="api.example.test") == "blocked"
    assert await lab.dig(0, "api.example.test") == ("NOERROR", [WEB])
    assert sandbox.names.answered("api.example.test", WEB)
    # Now by name, over TLS (SNI, not terminated: the test CA's certificate verifies) and HTTP.
    assert await lab.fetch(0, WEB, 443, tls_name="api.example.test") == WEB
    assert await lab.fetch(0, WEB, 80, host="api.example.test") == WEB
    # A forged SNI or Host: an allowed name towards an address the resolver did not give for it.
    assert await lab.fetch(0, OTHER, 443, tls_name="api.example.test") == "blocked"
    assert await lab.fetch(0, OTHER, 80, host="api.example.test") == "blocked"
    # The name of another host on an answered address, and names the policy does not allow.
    assert await lab.fetch(0, WEB, 80, host="other.example.test") == "blocked"
    assert await lab.dig(0, "other.example.test") == ("REFUSED", [])
    assert await lab.dig(0, "evil.example.test") == ("REFUSED", [])
    assert await lab.fetch(0, EVIL, 443, tls_name="evil.example.test") == "blocked"
    # A shared CDN address: answered for a.cdn.test, but b.cdn.test does not ride on it.
    assert await lab.dig(0, "a.cdn.test") == ("NOERROR", [CDN])
    assert await lab.fetch(0, CDN, 443, tls_name="a.cdn.test") == CDN
    assert await lab.fetch(0, CDN, 443, tls_name="b.cdn.test") == "blocked"
    # Other ports of an allowed host are not opened by a name rule.
    assert await lab.fetch(0, WEB, 5432) == "blocked"


async def test_dns_over_tcp_works_other_resolvers_and_ipv6_answers_do_not(lab: Lab) -> None:
    await lab.attach(0, policy("project", allow=("api.example.test",)))
    assert await lab.dig(0, "api.example.test", tcp=True) == ("NOERROR", [WEB])
    assert await lab.dig(0, "api.example.test", "AAAA") == ("NOERROR", [])  # IPv6 is blocked
    before = lab.dns_queries
    assert (await lab.dig(0, "api.example.test", server=WEB, timeout=1.0))[0] == "blocked"
    assert (await lab.dig(0, "api.example.test", server=WEB, tcp=True, timeout=1.0))[0] == "blocked"
    assert lab.dns_queries == before  # the other resolver never saw the queries


async def test_ipv6_is_dropped_even_when_the_sandbox_turns_it_on(lab: Lab) -> None:
    await lab.attach(0, policy("internet"))
    layout = lab.plan.layout(0)

    def enable_v6(address: str, ifname: str) -> None:
        for key in ("all", "default", ifname):
            write_sysctl(f"net/ipv6/conf/{key}/disable_ipv6", "0")
        import subprocess

        subprocess.run(
            ["ip", "-6", "addr", "add", f"{address}/64", "dev", ifname, "nodad"], check=True
        )

    await asyncio.to_thread(run_in_netns, layout.slot_ns, lambda: enable_v6("fd00:77::1", "to-sbx"))
    await asyncio.to_thread(
        run_in_netns, layout.sandbox_ns, lambda: enable_v6("fd00:77::2", "eth0")
    )

    def listen_v6() -> socket.socket:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.bind(("fd00:77::1", 15001))  # the proxy's port: an open listener on the slot's side
        sock.listen(1)
        return sock

    server = await asyncio.to_thread(run_in_netns, layout.slot_ns, listen_v6)

    def connect_v6() -> str:
        client = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        client.settimeout(1.0)
        try:
            client.connect(("fd00:77::1", 15001))
        except OSError:
            return "blocked"
        finally:
            client.close()
        return "connected"

    try:
        assert await asyncio.to_thread(run_in_netns, layout.sandbox_ns, connect_v6) == "blocked"
    finally:
        server.close()


async def test_a_live_rule_change_cuts_established_connections(lab: Lab) -> None:
    await lab.attach(0, policy("internet"))
    reader, writer = await lab.connect(0, WEB, 80)
    kept_reader, kept_writer = await lab.connect(0, OTHER, 80)
    assert await request(reader, writer, WEB) == WEB
    assert await request(kept_reader, kept_writer, OTHER) == OTHER
    # One flow is forbidden now: its conntrack entry goes, the other connection's stays.
    assert await lab.apply(0, policy("internet", deny=(WEB,))) == 1
    with pytest.raises((OSError, asyncio.IncompleteReadError, TimeoutError)):
        await asyncio.wait_for(request(reader, writer, WEB), 2.0)
    writer.transport.abort()
    assert await request(kept_reader, kept_writer, OTHER) == OTHER  # same connection, still up
    kept_writer.transport.abort()
    assert await lab.fetch(0, OTHER, 80) == OTHER  # and new ones to the rest of the internet


async def test_a_live_rule_change_stops_a_udp_flow_both_ways(lab: Lab) -> None:
    await lab.attach(0, policy("internet"))
    sock = await asyncio.to_thread(in_netns_socket, lab.sbx(0), socket.SOCK_DGRAM)
    loop = asyncio.get_running_loop()
    with sock:
        await loop.sock_connect(sock, (WEB, ECHO_PORT))
        await loop.sock_sendall(sock, b"one")
        assert await asyncio.wait_for(loop.sock_recv(sock, 100), 2.0) == b"one"
        assert await lab.apply(0, policy("internet", deny=(f"{WEB}/udp",))) == 1
        # The server's datagrams no longer reach the sandbox's socket (the flow's conntrack entry
        # is gone, so they are no answer to anything any more) ...
        lab.echo.push(b"unasked")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(loop.sock_recv(sock, 100), 1.0)
        # ... nor do the sandbox's own datagrams leave.
        await loop.sock_sendall(sock, b"two")
        with pytest.raises((OSError, TimeoutError)):
            await asyncio.wait_for(loop.sock_recv(sock, 100), 1.0)
        assert lab.echo.received == [b"one"]


async def test_a_live_rule_change_cuts_proxied_connections(lab: Lab) -> None:
    await lab.attach(0, policy("project", allow=("api.example.test",)))
    assert (await lab.dig(0, "api.example.test"))[1] == [WEB]
    reader, writer = await lab.connect(0, WEB, 443, tls_name="api.example.test")
    assert await request(reader, writer, "api.example.test") == WEB
    await lab.apply(0, policy("project"))
    with pytest.raises((OSError, asyncio.IncompleteReadError, TimeoutError)):
        await asyncio.wait_for(request(reader, writer, "api.example.test"), 2.0)
    writer.transport.abort()
    assert await lab.fetch(0, WEB, 443, tls_name="api.example.test") == "blocked"


async def test_a_live_rule_change_cuts_a_proxied_upload_in_full_flow(lab: Lab) -> None:
    # 64 MiB pushed through means the proxy has moved far more than splice.THREAD_AFTER (at most
    # 4 + 32 + 1 MiB of socket buffers and pipe lie between): the copy runs in its own thread.
    await lab.attach(0, policy("project", allow=("api.example.test",)))
    assert (await lab.dig(0, "api.example.test"))[1] == [WEB]
    reader, writer = await lab.connect(0, WEB, 80)
    block = b"u" * (1 << 20)
    writer.write(
        b"POST / HTTP/1.1\r\nHost: api.example.test\r\nContent-Length: %d\r\n\r\n" % (256 << 20)
    )
    for _ in range(64):
        writer.write(block)
        await writer.drain()
    await lab.apply(0, policy("project"))

    async def go_on() -> bytes:
        for _ in range(256 - 64):
            writer.write(block)
            await writer.drain()
        return await reader.read()

    try:  # uncut, the upload would end in a few seconds and the kept-alive answer never close
        await asyncio.wait_for(go_on(), 30.0)
        outcome = "answered and closed"
    except TimeoutError:  # before OSError: it is one
        outcome = "still open"
    except OSError:
        outcome = "cut"
    assert outcome == "cut"
    writer.transport.abort()
    assert await lab.fetch(0, WEB, 80, host="api.example.test") == "blocked"


async def test_the_resolver_listens_only_on_the_gateway_and_the_proxy_port_is_closed(
    lab: Lab,
) -> None:
    await lab.attach(0, policy("project", allow=("api.example.test",)))
    assert await lab.fetch(0, INNER_GATEWAY, 15001, timeout=1.0) == "blocked"
    assert await lab.fetch(0, INNER_GATEWAY, 22, timeout=1.0) == "blocked"
