"""Attacks on the fast path (network/first_flight.py): a host-name-filtered connection is judged
from its first flight while the kernel forwards it. Each attack drives TCP segment by segment
from the lab's sandbox namespace (tests/integration/network/raw_tcp.py) at a recording server
that stands in for the allowed host, and each fails: the flow is reset and the server never
gets a byte of the refused first flight."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from corral.network.namespaces import run_in_netns
from corral.network.policy import EgressPolicy
from tests.integration.network.egress_lab import OTHER, WEB, Lab, built_lab
from tests.integration.network.raw_tcp import ACK, PSH, SYN, RawTcp
from tests.unit.network.test_sniff import client_hello

pytestmark = [pytest.mark.integration]

ALLOWED, REFUSED = "api.example.test", "www.example.test"  # the same length on purpose


@dataclass
class Recorder:
    """A plain TCP server that keeps every byte each connection sent."""

    received: list[bytearray] = field(default_factory=list)
    ended: int = 0  # connections that saw their end (the client's FIN or a reset)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = bytearray()
        self.received.append(got)
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                got += data
        self.ended += 1
        writer.close()

    def everything(self) -> bytes:
        return b"".join(bytes(part) for part in self.received)


async def record_at(lab: Lab, address: str, port: int) -> Recorder:
    """Replace the lab's server at ``address``:``port`` with a recorder."""
    for server in lab.servers:
        if isinstance(server, asyncio.Server) and any(
            s.getsockname() == (address, port) for s in server.sockets
        ):
            server.close()
            await server.wait_closed()
    recorder = Recorder()
    sock = await asyncio.to_thread(lab._bound, address, port, socket.SOCK_STREAM)
    lab.servers.append(await asyncio.start_server(recorder.handle, sock=sock))
    return recorder


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[Lab]:
    async with built_lab(tmp_path, slot_count=1) as made:
        await made.attach(0, EgressPolicy.build("airgapped", [ALLOWED]))
        assert (await made.dig(0, ALLOWED))[1] == [WEB]
        yield made


@contextlib.asynccontextmanager
async def raw(lab: Lab, address: str, port: int) -> AsyncIterator[RawTcp]:
    client = await asyncio.to_thread(RawTcp, lab.sbx(0), address, port)
    try:
        yield client
    finally:
        await asyncio.to_thread(client.close)


async def settle(recorder: Recorder) -> bytes:
    """What the recorder got, once anything in flight has had time to arrive."""
    await asyncio.sleep(0.5)  # nothing to wait on: the test asserts that nothing arrives
    return recorder.everything()


async def test_an_honest_first_flight_goes_through_the_fast_path(lab: Lab) -> None:
    """The baseline the attacks below are held against: the same client, an honest stream."""
    recorder = await record_at(lab, WEB, 443)
    hello = client_hello(ALLOWED)
    async with raw(lab, WEB, 443) as client:
        ack = await asyncio.to_thread(client.handshake)
        await asyncio.to_thread(client.send, PSH | ACK, 0, hello, ack)
        assert not await asyncio.to_thread(client.reset_seen, 1.0)
    assert await settle(recorder) == hello
    assert lab.fast.counts("sbx0")["refused"] == 0


async def test_an_out_of_order_segment_with_the_allowed_sni_does_not_carry_the_real_stream(
    lab: Lab,
) -> None:
    recorder = await record_at(lab, WEB, 443)
    good, bad = client_hello(ALLOWED), client_hello(REFUSED)
    async with raw(lab, WEB, 443) as client:
        ack = await asyncio.to_thread(client.handshake)
        # First a ClientHello naming the allowed host, sent where the stream has not got to
        # yet; then the real start of the stream, naming another host.
        await asyncio.to_thread(client.send, PSH | ACK, 200, good, ack)
        await asyncio.to_thread(client.send, PSH | ACK, 0, bad, ack)
        assert await asyncio.to_thread(client.reset_seen)
    assert REFUSED.encode() not in await settle(recorder)
    assert recorder.everything() == b""


async def test_a_split_hello_with_the_allowed_name_only_in_a_forged_later_part(lab: Lab) -> None:
    recorder = await record_at(lab, WEB, 443)
    bad, good = client_hello(REFUSED), client_hello(ALLOWED)
    half = len(bad) // 2
    async with raw(lab, WEB, 443) as client:
        ack = await asyncio.to_thread(client.handshake)
        # The later part, sent first, carries the allowed name where the refused one will be
        # (the names have the same length): out of order, so it is dropped unseen.
        await asyncio.to_thread(client.send, PSH | ACK, half, good[half:], ack)
        await asyncio.to_thread(client.send, PSH | ACK, 0, bad[:half], ack)
        # And a whole ClientHello naming the allowed host after the real one.
        await asyncio.to_thread(client.send, PSH | ACK, half, bad[half:] + good, ack)
        assert await asyncio.to_thread(client.reset_seen)
    assert await settle(recorder) == b""


async def test_data_sent_before_the_handshake_completes_cannot_be_replaced(lab: Lab) -> None:
    recorder = await record_at(lab, WEB, 443)
    good, bad = client_hello(ALLOWED), client_hello(REFUSED)
    async with raw(lab, WEB, 443) as client:
        # The allowed ClientHello right behind the SYN, before any answer (judged, allowed),
        # then the handshake, then other bytes in its place.
        await asyncio.to_thread(client.send, SYN, -1)
        await asyncio.to_thread(client.send, PSH, 0, good)
        answer = await asyncio.to_thread(client.receive, 3.0)
        assert answer is not None and answer.flags & SYN
        ack = (answer.seq + 1) & 0xFFFFFFFF
        await asyncio.to_thread(client.send, ACK, 0, b"", ack)
        await asyncio.to_thread(client.send, PSH | ACK, 0, bad, ack)
        assert await asyncio.to_thread(client.reset_seen)
    assert REFUSED.encode() not in await settle(recorder)


async def test_a_syn_to_an_address_not_answered_for_an_allowed_name_never_reaches_it(
    lab: Lab,
) -> None:
    recorder = await record_at(lab, OTHER, 443)
    async with raw(lab, OTHER, 443) as client:
        # The proxy takes the SYN (and refuses the connection once it names a host).
        ack = await asyncio.to_thread(client.handshake)
        await asyncio.to_thread(client.send, PSH | ACK, 0, client_hello(ALLOWED), ack)
        assert await asyncio.to_thread(client.reset_seen)
    assert await settle(recorder) == b""
    assert recorder.received == []  # not even a connection
    assert lab.fast.counts("sbx0")["to_proxy"] == 1


async def test_a_connection_that_never_sends_its_first_flight_is_reset_and_the_server_told_nothing(
    tmp_path: Path,
) -> None:
    """A client that opens a connection and waits (a server-first protocol, or a stalled
    client) is neither let through unjudged nor left hanging: after the judge's timeout (short
    here, 10 s in the daemon) the client's socket is reset, and the server sees no byte and no
    end of the connection."""
    async with built_lab(tmp_path, slot_count=1, fast_timeout=1.0) as lab:
        await lab.attach(0, EgressPolicy.build("airgapped", [ALLOWED]))
        assert (await lab.dig(0, ALLOWED))[1] == [WEB]
        recorder = await record_at(lab, WEB, 443)

        def connect() -> socket.socket:
            return socket.create_connection((WEB, 443), timeout=30.0)

        client = await asyncio.to_thread(run_in_netns, lab.sbx(0), connect)
        # Blocks until the connection ends; 30 s only bounds a failing run.
        with client, pytest.raises(ConnectionResetError):
            await asyncio.to_thread(client.recv, 1)
        assert lab.fast.counts("sbx0")["refused"] >= 1
        assert await settle(recorder) == b""
        assert len(recorder.received) == 1  # the handshake reached it, nothing else did
        assert recorder.ended == 0
