"""network/local_hop.py on real loopback TCP: an unpaced connection reads back the congestion
control it was given and still carries bytes both ways; only loopback peers count as local."""

from __future__ import annotations

import socket

from corral.network import local_hop


def test_unpace_gives_a_connection_a_control_that_does_not_pace() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        chosen = local_hop.unpace(client)
        assert chosen in local_hop.UNPACED
        got = client.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        assert got.rstrip(b"\0") == chosen
        client.sendall(b"x" * 100_000)
        server.sendall(b"y")
        received = b""
        while len(received) < 100_000:
            received += server.recv(65536)
        assert received == b"x" * 100_000
        assert client.recv(1) == b"y"


def test_unpace_on_a_socket_the_kernel_refuses_keeps_it_as_it_was() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        assert local_hop.unpace(sock) is None
        assert sock.fileno() >= 0


def test_only_loopback_peers_are_local() -> None:
    for local in ("127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"):
        assert local_hop.is_loopback(local), local
    for elsewhere in (
        "10.0.0.1",
        "192.168.1.2",
        "::ffff:10.0.0.1",
        "2001:db8::1",
        "fe80::1%eth0",
        "0.0.0.0",
    ):
        assert not local_hop.is_loopback(elsewhere), elsewhere
    for nothing in (None, "", "not-an-address"):
        assert not local_hop.is_loopback(nothing), nothing


def test_a_client_of_this_host_is_on_it_whatever_address_it_used() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    with client, server:
        assert local_hop.on_this_host(server)
    own = _an_address_of_this_host()
    if own is not None:  # a host with an address besides loopback: connect to it
        with socket.create_server((own, 0)) as listener:
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        with client, server:
            assert server.getpeername()[0] == own
            assert local_hop.on_this_host(server)
    with socket.socket() as unconnected:
        assert not local_hop.on_this_host(unconnected)


def _an_address_of_this_host() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet: only picks the source address
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if local_hop.is_loopback(address) else address
