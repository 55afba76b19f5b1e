"""The first-flight judge on hand-made segments: what it lets through, holds, drops and denies
(network/first_flight.py). The same attacks run against the kernel in
tests/security/test_fast_path.py."""

from __future__ import annotations

import socket
import struct

from corral.network import nfqueue
from corral.network.base import INNER_ADDRESS
from corral.network.egress import (
    ACCEPT_MARK,
    CONFIRM_MARK,
    DENY_MARK,
    PENDING_MARK,
    PROXY_MARK,
    EgressContext,
)
from corral.network.first_flight import FirstFlights
from corral.network.policy import EgressPolicy
from corral.network.sandbox_egress import SandboxEgress
from tests.unit.network.test_sniff import client_hello

WEB, OTHER = "198.18.0.2", "198.18.0.3"
SYN, ACK, FIN, RST, PSH, URG = 0x02, 0x10, 0x01, 0x04, 0x08, 0x20
ISN = 1000
HEAD = b"GET / HTTP/1.1\r\nHost: api.example.test\r\n\r\n"


def segment(
    flags: int,
    seq: int,
    payload: bytes = b"",
    *,
    ack: int = 0,
    source: str = INNER_ADDRESS,
    destination: str = WEB,
    sport: int = 40000,
    dport: int = 80,
) -> bytes:
    tcp = struct.pack("!HHIIHHHH", sport, dport, seq, ack, (5 << 12) | flags, 65535, 0, 0)
    total = 20 + len(tcp) + len(payload)
    ip = struct.pack("!BBHHHBBH", 0x45, 0, total, 0, 0, 64, socket.IPPROTO_TCP, 0)
    ip += socket.inet_aton(source) + socket.inet_aton(destination)
    return ip + tcp + payload


def answer(ack: int, *, sport: int = 40000, source: str = WEB, dport: int = 80) -> bytes:
    """The server's packet acknowledging ``ack`` (after de-NAT: to the inner address)."""
    return segment(
        ACK, 5000, ack=ack, source=source, destination=INNER_ADDRESS, sport=dport, dport=sport
    )


def judge(policy: EgressPolicy | None = None, *, answered: bool = True) -> FirstFlights:
    policy = policy or EgressPolicy.build("airgapped", ["api.example.test"])
    box = SandboxEgress("sbx", "slot", policy, EgressContext("10.200.0.0/16"))
    if answered:
        box.names.record("api.example.test", [WEB], 300)
    clock = [0.0]
    flights = FirstFlights(box, timeout=10.0, clock=lambda: clock[0])
    flights.clock = clock  # type: ignore[attr-defined]
    return flights


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def opened(flights: FirstFlights, ids: Ids, **kw: object) -> None:
    assert flights.on_packet(ids(), segment(SYN, ISN, **kw)) == [(ids.n, 1, ACCEPT_MARK)]  # type: ignore[arg-type]
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, **kw)) == [(ids.n, 1, ACCEPT_MARK)]  # type: ignore[arg-type]


def test_an_allowed_head_is_held_whole_then_released_and_confirmed_by_the_servers_ack() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids)
    first, rest = HEAD[:10], HEAD[10:]
    assert flights.on_packet(ids(), segment(PSH | ACK, ISN + 1, first)) == []  # held
    held = ids.n
    assert flights.on_packet(ids(), segment(PSH | ACK, ISN + 11, rest)) == [
        (held, nfqueue.ACCEPT, PENDING_MARK),
        (ids.n, nfqueue.ACCEPT, PENDING_MARK),
    ]
    # More of the stream while pending: through; an ACK short of the judged bytes: no confirm.
    assert flights.on_packet(ids(), segment(ACK, ISN + 1 + len(HEAD), b"body")) == [
        (ids.n, nfqueue.ACCEPT, ACCEPT_MARK)
    ]
    assert flights.on_packet(ids(), answer(ISN + 5)) == [(ids.n, nfqueue.ACCEPT, None)]
    assert flights.on_packet(ids(), answer(ISN + 1 + len(HEAD))) == [
        (ids.n, nfqueue.ACCEPT, CONFIRM_MARK)
    ]
    assert flights.counts["confirmed"] == 1


def test_a_forged_host_is_denied_and_its_held_packets_never_leave() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids)
    evil = b"GET / HTTP/1.1\r\nHost: evil.example.test\r\n\r\n"
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, evil[:5])) == []
    held = ids.n
    assert flights.on_packet(ids(), segment(ACK, ISN + 6, evil[5:])) == [
        (held, nfqueue.DROP, None),
        (ids.n, nfqueue.ACCEPT, DENY_MARK),
    ]
    # The flow is gone: anything more of it is denied too.
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, HEAD)) == [
        (ids.n, nfqueue.ACCEPT, DENY_MARK)
    ]


def test_an_out_of_order_segment_with_an_allowed_sni_is_dropped_unseen() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids, dport=443)
    good, bad = client_hello("api.example.test"), client_hello("www.example.test")
    # Ahead of the stream, and overlapping its start: dropped, never part of what is judged.
    assert flights.on_packet(ids(), segment(ACK, ISN + 101, good, dport=443)) == [
        (ids.n, nfqueue.DROP, None)
    ]
    verdicts = flights.on_packet(ids(), segment(ACK, ISN + 1, bad, dport=443))
    assert verdicts == [(ids.n, nfqueue.ACCEPT, DENY_MARK)]


def test_the_allowed_name_only_in_a_later_forged_record_does_not_count() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids, dport=443)
    bad, good = client_hello("www.example.test"), client_hello("api.example.test")
    half = len(bad) // 2
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, bad[:half], dport=443)) == []
    held = ids.n
    verdicts = flights.on_packet(ids(), segment(ACK, ISN + 1 + half, bad[half:] + good, dport=443))
    assert verdicts == [(held, nfqueue.DROP, None), (ids.n, nfqueue.ACCEPT, DENY_MARK)]


def test_other_bytes_in_place_of_the_judged_ones_deny_the_flow() -> None:
    flights, ids = judge(), Ids()
    # Sent before the handshake completed (no ACK yet): judged and held like any first flight.
    assert flights.on_packet(ids(), segment(SYN, ISN)) == [(ids.n, nfqueue.ACCEPT, ACCEPT_MARK)]
    assert flights.on_packet(ids(), segment(PSH, ISN + 1, HEAD)) == [
        (ids.n, nfqueue.ACCEPT, PENDING_MARK)
    ]
    # The same bytes again (a retransmission): through; others in their place: denied.
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, HEAD)) == [
        (ids.n, nfqueue.ACCEPT, ACCEPT_MARK)
    ]
    evil = HEAD.replace(b"api", b"www")
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, evil)) == [
        (ids.n, nfqueue.ACCEPT, DENY_MARK)
    ]


def test_syn_tricks() -> None:
    flights, ids = judge(), Ids()
    # Data on a SYN is dropped; a second SYN with another ISN for an open flow too.
    assert flights.on_packet(ids(), segment(SYN, ISN, HEAD)) == [(ids.n, nfqueue.DROP, None)]
    opened(flights, ids)
    assert flights.on_packet(ids(), segment(SYN, ISN + 7)) == [(ids.n, nfqueue.DROP, None)]
    # Urgent data would leave the server's stream without the byte the judge saw.
    assert flights.on_packet(ids(), segment(ACK | URG, ISN + 1, HEAD)) == [
        (ids.n, nfqueue.DROP, None)
    ]
    # A packet of a flow never seen from its SYN: denied.
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, HEAD, sport=40001)) == [
        (ids.n, nfqueue.ACCEPT, DENY_MARK)
    ]


def test_a_syn_to_an_address_not_answered_for_an_allowed_name_goes_to_the_proxy() -> None:
    flights, ids = judge(), Ids()
    assert flights.on_packet(ids(), segment(SYN, ISN, destination=OTHER)) == [
        (ids.n, nfqueue.ACCEPT, PROXY_MARK)
    ]
    unanswered = judge(answered=False)
    assert unanswered.on_packet(ids(), segment(SYN, ISN)) == [(ids.n, nfqueue.ACCEPT, PROXY_MARK)]
    assert unanswered.counts["to_proxy"] == 1


def test_a_first_flight_not_complete_in_time_is_denied() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids)
    assert flights.on_packet(ids(), segment(ACK, ISN + 1, HEAD[:8])) == []
    flights.clock[0] = 11.0  # type: ignore[attr-defined]
    assert flights.expire() == ([(ids.n, nfqueue.ACCEPT, DENY_MARK)], [])


def test_a_flow_silent_after_its_handshake_is_given_up_for_a_reset_and_its_answer_refused() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids)  # the handshake's ACK, then nothing
    flights.on_packet(ids(), segment(SYN, ISN + 7, sport=40001))  # a SYN never answered
    flights.clock[0] = 11.0  # type: ignore[attr-defined]
    # Nothing held to answer with a reset: the sandbox is to be made to send something.
    assert flights.expire() == ([], [(40000, WEB, 80)])
    assert flights.counts["refused"] == 2
    # What it sends then (the challenge ACK a SYN makes it send) is answered with a reset.
    challenge = segment(ACK, ISN + 1, ack=5001)
    assert flights.on_packet(ids(), challenge) == [(ids.n, nfqueue.ACCEPT, DENY_MARK)]
    assert flights.expire() == ([], [])


def test_recheck_keeps_only_the_flows_the_new_policy_allows() -> None:
    flights, ids = judge(), Ids()
    opened(flights, ids)
    flights.on_packet(ids(), segment(ACK, ISN + 1, HEAD))
    opened(flights, ids, sport=40002)  # undecided: judged later under the new policy
    assert flights.recheck() == {(40000, WEB, 80), (40002, WEB, 80)}
    flights.sandbox.update(EgressPolicy.build("airgapped", ["other.example.test"]))
    assert flights.recheck() == {(40002, WEB, 80)}
